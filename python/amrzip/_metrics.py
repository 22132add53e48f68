"""Error metrics between an original and a decompressed array, computed in float64 block by
block so that checking a multi-gigabyte array does not need float64 copies of all of it."""

from __future__ import annotations

import math

import numpy as np

_BLOCK = 1 << 22  # elements per block: 32 MB of float64 per operand


def _blocks(x: np.ndarray, y: np.ndarray):
    xf, yf = x.reshape(-1), y.reshape(-1)
    for start in range(0, xf.size, _BLOCK):
        yield xf[start : start + _BLOCK].astype(np.float64), yf[start : start + _BLOCK].astype(np.float64)


def max_abs_error(x: np.ndarray, y: np.ndarray) -> float:
    """Largest |x - y|; a NaN or infinity not reproduced exactly counts as an infinite error."""
    worst = 0.0
    for a, b in _blocks(x, y):
        kept = (a == b) | (np.isnan(a) & np.isnan(b))
        with np.errstate(invalid="ignore"):  # inf - inf where kept is True anyway
            err = np.where(kept, 0.0, np.abs(a - b))
        worst = max(worst, float(np.nan_to_num(err, nan=math.inf).max(initial=0.0)))
    return worst


def psnr(x: np.ndarray, y: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB over the finite values, relative to their range."""
    # The sum of squared errors is kept as scale^2 * ssq (scale: the largest error so far), so
    # that errors near float64's smallest values do not underflow when squared (1e-162 squared
    # rounds to the smallest subnormal, off by 2.6 dB) nor large ones overflow.
    lo, hi, scale, ssq, n = math.inf, -math.inf, 0.0, 0.0, 0
    for a, b in _blocks(x, y):
        finite = np.isfinite(a)
        a, b = a[finite], b[finite]
        if a.size:
            lo, hi = min(lo, float(a.min())), max(hi, float(a.max()))
            with np.errstate(over="ignore", invalid="ignore"):  # errors beyond float64: infinite, PSNR -inf
                err = np.abs(a - b)
            m = float(err.max())
            if not m <= np.finfo(np.float64).max:
                return -math.inf
            if m > 0.0:
                block = float(np.sum((err / m) ** 2))
                if m > scale:
                    ssq, scale = ssq * (scale / m) ** 2 + block, m
                else:
                    ssq += block * (m / scale) ** 2
            n += a.size
    if n == 0 or scale == 0.0:
        return math.inf
    if hi <= lo:
        return -math.inf
    # The codec caps a range wider than float64 can hold at its largest value; so does this.
    peak = min(hi - lo, np.finfo(np.float64).max)
    return 20 * (math.log10(peak) - math.log10(scale)) - 10 * (math.log10(ssq) - math.log10(n))
