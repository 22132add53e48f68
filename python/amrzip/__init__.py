"""amrzip: fast, error-bounded lossy compression for AMR and uniform-grid simulation data."""

from amrzip.codec import CorruptStreamError, compress, decompress, info

__all__ = ["compress", "decompress", "info", "CorruptStreamError"]
