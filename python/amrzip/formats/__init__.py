"""Readers for AMR file formats, and an AMReX plotfile writer.

:func:`read` tells the format from the path and returns a :class:`~amrzip.amr.hierarchy.Hierarchy`
whose box arrays are loaded lazily (memory-mapped views of the file where the layout allows):

- AMReX plotfile folders (``Header`` + ``Level_N/Cell_H`` + ``Cell_D_*``): :mod:`.plotfile`;
- AMReX HDF5 plotfiles (``WriteMultiLevelPlotfileHDF5``): :mod:`.amrex_hdf5`;
- Chombo HDF5 files, plot and checkpoint (BISICLES, Chombo-based codes): :mod:`.chombo`.

:func:`write_plotfile` writes any hierarchy as an AMReX plotfile folder. See docs/formats.md.
"""

from __future__ import annotations

from pathlib import Path

from amrzip.amr.hierarchy import Hierarchy
from amrzip.formats.amrex_hdf5 import is_amrex_hdf5, read_amrex_hdf5
from amrzip.formats.chombo import is_chombo, read_chombo
from amrzip.formats.plotfile import is_plotfile, read_plotfile, refuse_checkpoint, write_plotfile

__all__ = ["read", "detect", "read_plotfile", "read_amrex_hdf5", "read_chombo", "write_plotfile"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _looks_hdf5(path: Path) -> bool:
    # The superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...
    try:
        with open(path, "rb") as f:
            size = path.stat().st_size
            off = 0
            while off + 8 <= size:
                f.seek(off)
                if f.read(8) == _HDF5_MAGIC:
                    return True
                off = 512 if off == 0 else off * 2
    except OSError:
        return False
    return False


def detect(path) -> str:
    """The format of ``path``: ``"amrex-plotfile"``, ``"amrex-hdf5"`` or ``"chombo"``.

    Raises ``ValueError`` naming the path when it is none of them.
    """
    p = Path(path)
    if p.is_dir():
        refuse_checkpoint(p)
        if is_plotfile(p):
            return "amrex-plotfile"
        raise ValueError(f"{p}: a folder but not an AMReX plotfile (no Header file with a version line)")
    if p.is_file() and p.name == "Header":
        refuse_checkpoint(p.parent)
        if is_plotfile(p.parent):
            return "amrex-plotfile"
    if not p.exists():
        raise ValueError(f"{p}: no such file or folder")
    if _looks_hdf5(p):
        try:
            import h5py
        except ImportError as e:  # pragma: no cover - h5py is a dependency of the HDF5 readers
            raise ValueError(f"{p}: an HDF5 file, and reading it needs h5py (pip install h5py)") from e
        try:
            with h5py.File(p, "r") as f:
                if is_amrex_hdf5(f):
                    return "amrex-hdf5"
                if is_chombo(f):
                    return "chombo"
        except OSError as e:
            raise ValueError(f"{p}: cannot open as HDF5: {e}") from e
        raise ValueError(f"{p}: an HDF5 file but neither an AMReX HDF5 plotfile nor a Chombo file (no level_0 group with boxes)")
    raise ValueError(f"{p}: not a recognised AMR file (AMReX plotfile folder, AMReX HDF5 plotfile or Chombo HDF5)")


def read(path) -> Hierarchy:
    """Read an AMR file (AMReX plotfile folder, AMReX HDF5 plotfile, Chombo HDF5) into a
    :class:`Hierarchy`. Raises ``ValueError`` naming the path for unknown or malformed files."""
    kind = detect(path)
    if kind == "amrex-plotfile":
        return read_plotfile(path)
    if kind == "amrex-hdf5":
        return read_amrex_hdf5(path)
    return read_chombo(path)
