"""What every round trip through amrzip must satisfy, shared by the API and property tests."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

import amrzip


def requested_bound(x: np.ndarray, abs=None, rel=None) -> float:
    """The bound the caller asked for: abs, or rel times the range of the finite values. Computed
    exactly, so that a range like 3.4e308 - (-3.4e308) does not overflow."""
    if abs is not None:
        return float(abs)
    finite = np.asarray(x, dtype=np.float64)[np.isfinite(x)]
    if finite.size == 0:
        return 0.0
    exact = Fraction(rel) * (Fraction(float(finite.max())) - Fraction(float(finite.min())))
    try:
        return float(exact)
    except OverflowError:
        return math.inf


def _bits(a: np.ndarray) -> np.ndarray:
    native = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
    return native.view(np.uint32 if native.itemsize == 4 else np.uint64)


def check(x: np.ndarray, y: np.ndarray, stream: bytes, abs=None, rel=None) -> float:
    """Asserts y decodes x within both the bound the stream reports and the bound requested, with
    NaN and +-Inf reproduced bit for bit at the same positions. Returns the max error."""
    x = np.asarray(x)
    assert y.shape == x.shape
    assert y.dtype == x.dtype.newbyteorder("=")
    with np.errstate(invalid="ignore"):  # widening a signalling NaN sets the invalid flag
        x64, y64 = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()

    nonfinite = ~np.isfinite(x64)
    np.testing.assert_array_equal(np.isnan(y64), np.isnan(x64), err_msg="NaN positions differ")
    np.testing.assert_array_equal(_bits(y).ravel()[nonfinite], _bits(x).ravel()[nonfinite], err_msg="NaN/Inf not kept bit for bit")

    finite = ~nonfinite
    errors = np.abs(x64[finite] - y64[finite])
    worst = float(errors.max(initial=0.0))
    reported = amrzip.info(stream)["abs_bound"]
    requested = requested_bound(x, abs, rel)
    where = int(np.argmax(errors)) if errors.size else None
    assert worst <= reported, f"max error {worst!r} > reported bound {reported!r} (finite element #{where})"
    assert worst <= requested, f"max error {worst!r} > requested bound {requested!r} (finite element #{where})"
    return worst


def round_trip(x: np.ndarray, **kwargs) -> tuple[bytes, np.ndarray]:
    """Compresses and decompresses x with the keyword arguments of amrzip.compress, checks the
    result, and returns the stream and the decoded array."""
    stream = amrzip.compress(x, **kwargs)
    y = amrzip.decompress(stream)
    check(x, y, stream, abs=kwargs.get("abs"), rel=kwargs.get("rel"))
    return stream, y
