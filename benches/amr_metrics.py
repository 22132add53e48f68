"""Metrics on AMR hierarchies for the benchmarks: value range and PSNR over leaf cells (see
``amrzip.amr.leaves``, which also gives volume-weighted means), and ratios compared at equal PSNR along
rate-distortion curves.

Reconstructions are given as ``{(level, box index): array}``, arrays indexed ``[i, j, k]`` like the hierarchy's.
"""

from __future__ import annotations

import math

import numpy as np

from amrzip.amr import Hierarchy


def stored_bytes(h: Hierarchy, field: str) -> int:
    """Bytes of one field over all cells of all levels, as the source stores it: the common ratio denominator."""
    return sum(lev.num_cells for lev in h.levels) * h.dtype(field).itemsize


def value_range(leaf: np.ndarray) -> float:
    return float(leaf.max() - leaf.min()) if leaf.size else 0.0


def psnr(orig: np.ndarray, dec: np.ndarray, vrange: float) -> float:
    """PSNR in dB over the given (leaf) cells, peak = their value range."""
    mse = float(np.mean((dec - orig) ** 2))
    if mse == 0:
        return math.inf
    return 20 * math.log10(vrange) - 10 * math.log10(mse) if vrange > 0 else -math.inf


def rd_curve(points) -> tuple[np.ndarray, np.ndarray]:
    """(PSNR, log ratio) sorted by PSNR from (psnr, ratio) pairs; infinite PSNRs (lossless) and failed runs dropped."""
    pts = sorted((p, math.log(r)) for p, r in points if math.isfinite(p) and r and r > 0 and math.isfinite(r))
    return np.array([p for p, _ in pts]), np.array([r for _, r in pts])


def ratio_at_equal_psnr(ours, other, samples: int = 9):
    """ratio(ours) / ratio(other) at equal PSNR: log(ratio) is interpolated linearly in PSNR along each curve and
    compared at ``samples`` PSNRs spread evenly over the PSNR range both curves cover.

    Returns a dict (geomean, min, max of the quotient, the PSNR overlap) or None when the curves have fewer than
    two points each or do not overlap.
    """
    pa, ra = rd_curve(ours)
    pb, rb = rd_curve(other)
    if pa.size < 2 or pb.size < 2:
        return None
    lo, hi = max(pa[0], pb[0]), min(pa[-1], pb[-1])
    if not lo < hi:
        return None
    grid = np.linspace(lo, hi, samples)
    q = np.interp(grid, pa, ra) - np.interp(grid, pb, rb)  # log of the quotient
    return {"geomean": float(math.exp(q.mean())), "min": float(math.exp(q.min())), "max": float(math.exp(q.max())),
            "psnr_lo": float(lo), "psnr_hi": float(hi)}
