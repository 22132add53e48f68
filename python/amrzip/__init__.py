"""amrzip: fast, error-bounded lossy compression for AMR and uniform-grid simulation data."""

from amrzip.codec import CorruptStreamError, compress, decompress, info
from amrzip.streaming import StreamCompressor, StreamDecompressor

__all__ = ["compress", "decompress", "info", "CorruptStreamError", "StreamCompressor", "StreamDecompressor"]
