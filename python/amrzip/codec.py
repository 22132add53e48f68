"""The array codec: numpy in, bytes out, and back. Checks arguments, then hands off to Rust."""

from __future__ import annotations

import math
import numbers

import numpy as np

from amrzip import _core

CorruptStreamError = _core.CorruptStreamError

MODES = ("ratio", "speed")
PREDICTORS = ("lorenzo", "regression", "interpolation", "dual-quant")


def _bound(abs, rel):
    if abs is None and rel is None:
        raise ValueError("an error bound is required: pass abs= or rel=")
    if abs is not None and rel is not None:
        raise ValueError("pass only one of abs= and rel=")
    mode, value = ("abs", abs) if abs is not None else ("rel", rel)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{mode}= must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"{mode}= must be a finite number >= 0, got {value}")
    return mode, value


def _threads(threads):
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise ValueError(f"threads= must be a positive integer, got {threads!r}")
    return int(threads)


def compress(array, *, abs=None, rel=None, mode="ratio", threads=None, predictor=None) -> bytes:
    """Compress a float32/float64 array of 1 to 4 dimensions under an error bound.

    Every decompressed value ``y`` of an input ``x`` satisfies ``|x - y| <= bound``, where the
    bound is ``abs``, or ``rel`` times the value range (max - min of the finite values).
    NaN and +-Inf are kept exactly. ``mode="ratio"`` (default) picks the predictor giving the
    best ratio; ``mode="speed"`` favours throughput. ``threads`` defaults to all cores.
    ``predictor`` forces one of ``PREDICTORS`` instead of sampling.
    """
    bound_mode, bound = _bound(abs, rel)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if predictor is not None and predictor not in PREDICTORS:
        raise ValueError(f"predictor must be one of {PREDICTORS}, got {predictor!r}")
    arr = np.asarray(array)
    if arr.dtype.newbyteorder("=") not in (np.float32, np.float64):
        raise ValueError(f"unsupported dtype {arr.dtype}: amrzip compresses float32 and float64 arrays")
    if not 1 <= arr.ndim <= 4:
        raise ValueError(f"unsupported rank {arr.ndim}: amrzip compresses arrays of 1 to 4 dimensions")
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    return _core.compress(arr, bound_mode, bound, mode, _threads(threads), predictor)


def _as_bytes(data) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview, np.ndarray)):
        return bytes(memoryview(data).cast("B"))
    raise TypeError(f"expected bytes-like compressed data, got {type(data).__name__}")


def decompress(data, *, threads=None) -> np.ndarray:
    """Decompress a stream made by :func:`compress`; same dtype and shape as compressed.

    Raises :class:`CorruptStreamError` (a ``ValueError``) if the data is damaged or not amrzip.
    """
    return _core.decompress(_as_bytes(data), _threads(threads))


def info(data) -> dict:
    """Describe a stream without decoding it: dtype, shape, mode, bound, predictor, sizes, ratio."""
    return _core.info(_as_bytes(data))
