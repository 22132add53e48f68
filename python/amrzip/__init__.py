"""amrzip: fast, error-bounded lossy compression for AMR and uniform-grid simulation data."""

import sys as _sys
from importlib import import_module as _import_module

from amrzip.codec import CorruptStreamError, compress, decompress, info
from amrzip.store import Dataset, StoreError, check, write
from amrzip.store import open_store as open
from amrzip.streaming import StreamCompressor, StreamDecompressor

if "yt" in _sys.modules:
    # yt is in use: register the frontend now. Otherwise importing amrzip leaves yt alone (it is
    # slow to import), and yt.load finds the frontend through amrzip's "yt.frontends" entry point.
    _import_module("amrzip.yt_frontend")


def read(path):
    """Reads an AMR snapshot file (AMReX plotfile folder, AMReX HDF5 or Chombo HDF5) as a Hierarchy."""
    from amrzip.formats import read as read_format

    return read_format(path)


__all__ = [
    "compress",
    "decompress",
    "info",
    "CorruptStreamError",
    "StreamCompressor",
    "StreamDecompressor",
    "read",
    "write",
    "open",
    "Dataset",
    "StoreError",
    "check",
]
