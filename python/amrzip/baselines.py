"""What AMR users do without amrzip, to measure against: SZ3 (through ``pysz``) on each box, and
AMReX's HDF5 compression, which cuts each level's boxes into one 1-D run of values and
compresses it in chunks of 1,024 ("the 1-D baseline"). Both use SZ3's absolute bound mode on one
thread. The benchmarks and the rate-distortion plot share them.

Boxes are given as ``{(level, box index): array}`` indexed ``[i, j, k]`` (x first), as
``Hierarchy.box_data`` returns them; arrays go to SZ3 with x fastest, as AMReX lays them out.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np

# Values per chunk of AMReX's HDF5 compression.
AMREX_CHUNK = 1024
# SZ3's default predictor: interpolation or Lorenzo, chosen by sampling.
SZ3_ALGO = "INTERP_LORENZO"


def have_sz3() -> bool:
    return importlib.util.find_spec("pysz") is not None


def sz3_config(eb: float, algo: str = SZ3_ALGO):
    """SZ3 settings: absolute bound ``eb``, predictor ``algo``, one thread."""
    from pysz import szAlgorithm, szConfig, szErrorBoundMode

    conf = szConfig()
    conf.errorBoundMode = szErrorBoundMode.ABS
    conf.absErrorBound = eb
    conf.cmprAlgo = getattr(szAlgorithm, algo)
    conf.openmp = False
    return conf


def sz3_compress(arr: np.ndarray, conf) -> bytes:
    from pysz import sz

    blob, _ = sz.compress(np.ascontiguousarray(arr), conf)
    return blob


def sz3_decompress(blob, dtype, shape) -> np.ndarray:
    from pysz import sz

    out, _ = sz.decompress(blob, dtype, shape)
    return out


def per_box_sz3_encode(boxes: dict, eb: float, algo: str = SZ3_ALGO) -> dict:
    """Each box as one SZ3 stream: {(level, box): bytes}."""
    conf = sz3_config(eb, algo)
    return {key: sz3_compress(a.T, conf) for key, a in boxes.items()}


def per_box_sz3_decode(blobs: dict, dtype, shapes: dict) -> dict:
    """The boxes back from :func:`per_box_sz3_encode`'s streams; ``shapes``: {(level, box): shape}."""
    return {key: sz3_decompress(b, dtype, shapes[key][::-1]).T for key, b in blobs.items()}


def amrex_1d_encode(boxes: dict, level_boxes: list[int], eb: float, chunk: int = AMREX_CHUNK, algo: str = SZ3_ALGO) -> list:
    """Per level (``level_boxes[L]`` boxes each), its boxes' values x fastest, one after the
    other, in SZ3 streams of ``chunk`` values: [(streams, values)] per level."""
    conf = sz3_config(eb, algo)
    out = []
    for L, n in enumerate(level_boxes):
        flat = np.concatenate([boxes[(L, i)].ravel(order="F") for i in range(n)])
        out.append(([sz3_compress(flat[s:s + chunk], conf) for s in range(0, flat.size, chunk)], flat.size))
    return out


def amrex_1d_decode(streams: list, dtype, shapes: dict, chunk: int = AMREX_CHUNK) -> dict:
    """The boxes back from :func:`amrex_1d_encode`'s streams; ``shapes``: {(level, box): shape}."""
    out = {}
    for L, (blobs, total) in enumerate(streams):
        flat = np.concatenate([sz3_decompress(b, dtype, (min(chunk, total - k * chunk),)) for k, b in enumerate(blobs)])
        at, i = 0, 0
        while (L, i) in shapes:
            n = math.prod(shapes[(L, i)])
            out[(L, i)] = flat[at:at + n].reshape(shapes[(L, i)], order="F")
            at, i = at + n, i + 1
    return out


def stream_bytes(encoded) -> int:
    """Bytes of either baseline's streams."""
    if isinstance(encoded, dict):
        return sum(len(b) for b in encoded.values())
    return sum(len(b) for blobs, _ in encoded for b in blobs)
