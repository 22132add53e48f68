"""amrzip as an HDF5 filter: compressed datasets readable by h5py, the HDF5 tools and C codes.

Importing this module registers the filter with h5py's HDF5 library (when h5py is installed),
so that::

    import h5py
    import amrzip.hdf5

    with h5py.File("out.h5", "w") as f:
        f.create_dataset("rho", data=rho, chunks=(64, 64, 64), **amrzip.hdf5.Filter(rel=1e-4))

writes amrzip-compressed chunks, and reading them back needs nothing more. Other programs find
the plugin through ``HDF5_PLUGIN_PATH=$(python -m amrzip.hdf5 --plugin-path)``. See docs/hdf5.md.
"""

from __future__ import annotations

import ctypes
import numbers
import os
import struct
import sys
from collections.abc import Mapping

from amrzip.codec import MODES, _bound

try:
    import h5py
except ImportError:  # the filter parameters and plugin path are useful without h5py
    h5py = None

__all__ = ["FILTER_ID", "Filter", "cd_values", "plugin_path", "plugin_file", "register", "h5repack_filter"]

# Same as FILTER_ID in crates/hdf5-filter/src/lib.rs: from the 256-511 range HDF5 leaves for
# unregistered filters (docs/hdf5.md says how a permanent id is obtained).
FILTER_ID = 445
# Layout version of the parameters, cd_values[0].
LAYOUT_VERSION = 1
_BOUND_MODES = ("abs", "rel", "ratio", "psnr")
_PLUGIN_NAME = {"darwin": "libh5zamrzip.dylib"}.get(sys.platform, "libh5zamrzip.so")


def plugin_path() -> str:
    """The folder holding the plugin, for ``HDF5_PLUGIN_PATH``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins")


def plugin_file() -> str:
    """The plugin shared library itself."""
    return os.path.join(plugin_path(), _PLUGIN_NAME)


def cd_values(*, abs=None, rel=None, ratio=None, psnr=None, mode="ratio", valid=None) -> tuple[int, ...]:
    """The filter parameters (HDF5's ``cd_values``) for one error bound, as :func:`amrzip.compress`
    takes it: exactly one of ``abs``, ``rel``, ``ratio``, ``psnr``, and ``mode`` "ratio" or "speed".

    ``rel``, ``ratio`` and ``psnr`` apply to each chunk on its own. ``valid`` is the number of
    slabs along the chunk's first dimension that hold data; the rest is padding, not stored and
    read back as zeros. Without it, trailing slabs of zeros are dropped (losslessly).
    """
    bound_mode, bound = _bound(abs=abs, rel=rel, ratio=ratio, psnr=psnr)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if valid is None:
        valid = 0
    elif isinstance(valid, bool) or not isinstance(valid, numbers.Integral) or not 1 <= valid < 2**32:
        raise ValueError(f"valid= must be a positive integer below 2**32, got {valid!r}")
    low, high = struct.unpack("<II", struct.pack("<d", bound))
    return (LAYOUT_VERSION, _BOUND_MODES.index(bound_mode), low, high, MODES.index(mode), int(valid))


def h5repack_filter(**bound) -> str:
    """The ``h5repack -f`` argument applying the filter (mandatory) with these parameters."""
    values = cd_values(**bound)
    return f"UD={FILTER_ID},0,{len(values)}," + ",".join(map(str, values))


# Use h5py's FilterRefBase when available, so that `compression=Filter(...)` works too, not only
# `**Filter(...)`.
_Base = h5py.filters.FilterRefBase if h5py is not None else Mapping


class Filter(_Base):
    """The filter with its parameters, for h5py's ``create_dataset``: pass it as ``**Filter(...)``
    or ``compression=Filter(...)``. Arguments as for :func:`cd_values`."""

    filter_id = FILTER_ID

    def __init__(self, *, abs=None, rel=None, ratio=None, psnr=None, mode="ratio", valid=None):
        self.filter_options = cd_values(abs=abs, rel=rel, ratio=ratio, psnr=psnr, mode=mode, valid=valid)
        given = {k: v for k, v in (("abs", abs), ("rel", rel), ("ratio", ratio), ("psnr", psnr)) if v is not None}
        self._description = ", ".join([f"{k}={v!r}" for k, v in given.items()] + [f"mode={mode!r}"] + ([f"valid={valid}"] if valid else []))

    if h5py is None:  # what FilterRefBase provides

        @property
        def _kwargs(self):
            return {"compression": self.filter_id, "compression_opts": self.filter_options}

        def __getitem__(self, key):
            return self._kwargs[key]

        def __iter__(self):
            return iter(self._kwargs)

        def __len__(self):
            return len(self._kwargs)

        def __eq__(self, other):
            return isinstance(other, Filter) and self.filter_options == other.filter_options

        def __hash__(self):
            return hash((self.filter_id, self.filter_options))

    def __repr__(self):
        return f"amrzip.hdf5.Filter({self._description})"


# The loaded plugin, kept alive while the filter is registered.
_plugin = None


def register() -> None:
    """Registers the filter with h5py's HDF5 library (done on import when h5py is installed).

    h5py loads its HDF5 privately, so a plugin that HDF5 opens by itself cannot see the library's
    functions by name; the plugin is told where h5py's HDF5 is, then registered with it directly.
    """
    global _plugin
    if h5py is None:
        raise ImportError("registering the amrzip HDF5 filter needs h5py")
    path = plugin_file()
    if not os.path.exists(path):
        raise FileNotFoundError(f"the amrzip HDF5 plugin is missing ({path}); build it with `make setup`")
    lib = ctypes.CDLL(path)
    lib.amrzip_h5_init.argtypes = [ctypes.c_char_p]
    lib.amrzip_h5_init.restype = ctypes.c_int
    # Any module linking libhdf5 will do: the plugin searches it together with its dependencies.
    if lib.amrzip_h5_init(os.fsencode(h5py.h5z.__file__)) != 0:
        raise OSError(f"the amrzip HDF5 plugin cannot find HDF5's functions through {h5py.h5z.__file__}")
    lib.H5PLget_plugin_info.restype = ctypes.c_void_p
    # H5Zregister replaces any filter registered under the same id, e.g. an older plugin build
    # found through HDF5_PLUGIN_PATH.
    if not h5py.h5z.register_filter(lib.H5PLget_plugin_info()):
        raise OSError("H5Zregister failed for the amrzip filter")
    _plugin = lib


if h5py is not None:
    register()
