"""amrzip: fast, error-bounded lossy compression for AMR and uniform-grid simulation data."""

from amrzip.codec import CorruptStreamError, compress, decompress, info
from amrzip.store import Dataset, StoreError, check, write
from amrzip.store import open_store as open
from amrzip.streaming import StreamCompressor, StreamDecompressor


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
