"""The array codec: numpy in, bytes out, and back. Checks arguments, then hands off to Rust."""

from __future__ import annotations

import builtins
import math
import numbers
import warnings

import numpy as np

from amrzip import _core

CorruptStreamError = _core.CorruptStreamError

MODES = ("ratio", "speed")
# A fixed-ratio result further than this from its target is reported with a warning.
RATIO_WARN = 0.10
abs_ = builtins.abs  # `abs` is a keyword argument of compress
PREDICTORS = ("lorenzo", "regression", "interpolation", "dual-quant")


# Smallest accepted value per way of stating the bound, and whether it may be equal.
_BOUND_FLOOR = {"abs": (0.0, True), "rel": (0.0, True), "ratio": (1.0, True), "psnr": (0.0, False)}


def _bound(**given):
    given = {k: v for k, v in given.items() if v is not None}
    if len(given) != 1:
        what = "an error bound is required" if not given else "pass only one of " + ", ".join(f"{k}=" for k in given)
        raise ValueError(f"{what}: give exactly one of abs=, rel=, ratio= or psnr=")
    ((mode, value),) = given.items()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{mode}= must be a number, got {value!r}")
    value = float(value)
    floor, inclusive = _BOUND_FLOOR[mode]
    if math.isnan(value) or math.isinf(value) or value < floor or (value == floor and not inclusive):
        raise ValueError(f"{mode}= must be a finite number {'>=' if inclusive else '>'} {floor:g}, got {value}")
    return mode, value


def _threads(threads):
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise ValueError(f"threads= must be a positive integer, got {threads!r}")
    return int(threads)


def compress(array, *, abs=None, rel=None, ratio=None, psnr=None, mode="ratio", threads=None, predictor=None) -> bytes:
    """Compress a float32/float64 array of 1 to 4 dimensions under an error bound.

    Every decompressed value ``y`` of an input ``x`` satisfies ``|x - y| <= bound``, where the
    bound is ``abs``, or ``rel`` times the value range (max - min of the finite values).
    Instead of a bound, ask for a size or a quality: ``ratio=R`` searches for the bound that
    makes the stream R times smaller than the input (within a few percent where reachable;
    a warning says when it is not), ``psnr=P`` for the largest bound whose PSNR (peak = value
    range, over the finite values) is at least P dB, aiming within 1.5 dB above it. The bound
    found is then a promise like any other, and :func:`info` reports it as ``abs_bound``.
    NaN and +-Inf are kept exactly. ``mode="ratio"`` (default) picks the predictor giving the
    best ratio; ``mode="speed"`` favours throughput. ``threads`` defaults to all cores.
    ``predictor`` forces one of ``PREDICTORS`` instead of sampling.
    """
    bound_mode, bound = _bound(abs=abs, rel=rel, ratio=ratio, psnr=psnr)
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
    stream = _core.compress(arr, bound_mode, bound, mode, _threads(threads), predictor)
    if bound_mode == "ratio" and arr.size:
        achieved = arr.nbytes / len(stream)
        if abs_(achieved / bound - 1) > RATIO_WARN:
            warnings.warn(f"ratio {bound:g} is not reachable for this array; the stream achieves {achieved:.4g}", stacklevel=2)
    return stream


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
