"""Keeping a field's mean: error-feedback predictors can leave errors that all lean one way
where a field varies by less than the bound from cell to cell (the reconstruction trails a
slow ramp by almost the whole bound). Every value is still within the bound, but the mean of
the level moves by a good part of it, which conservation laws notice.

When the mean error of a (level, field) exceeds ``TOLERANCE`` of the bound, the level is coded
again with half the bound and a constant ``offset`` (at most the other half) that cancels the
mean error is recorded and added on read: every stored value stays within the bound and the
level's mean (so the volume-weighted mean of the hierarchy) is kept to rounding.
"""

from __future__ import annotations

import numpy as np

from amrzip import _core

TOLERANCE = 0.02


def error_stats(result: dict, boxes: list, origin, unit, chunk, eb: float, dtype: str) -> tuple[float, int]:
    """Sum and count of (decoded - original) over the stored finite cells of ``boxes``."""
    chunks = {tuple(i): b for i, b in result["chunks"]}
    total, count = 0.0, 0
    for lo, hi, a, stored in boxes:
        first = [(l - o) // c for l, o, c in zip(lo, origin, chunk)]
        last = [(h - o) // c for h, o, c in zip(hi, origin, chunk)]
        touching = [(list(i), chunks[i]) for i in np.ndindex(*[b - f + 1 for f, b in zip(first, last)])
                    for i in [tuple(f + k for f, k in zip(first, i))] if i in chunks]
        d = _core.decode_region(touching, result["codebooks"], origin, unit, chunk, eb, lo, hi, dtype)
        keep = np.isfinite(a) if stored is None else stored & np.isfinite(a)
        e = d[keep].astype(np.float64) - a[keep]
        total += float(e.sum())
        count += int(e.size)
    return total, count


def conserve(compress, boxes: list, eb: float, origin, unit, chunk, dtype: str):
    """``compress(eb)`` with the level's mean kept (see the module notes); returns the result,
    the bound it was quantized with and the offset to add to every stored value on read (0 when
    none is needed)."""
    result = compress(eb)
    if eb == 0 or not boxes:
        return result, eb, 0.0
    total, count = error_stats(result, boxes, origin, unit, chunk, eb, dtype)
    if count == 0 or abs(total / count) <= TOLERANCE * eb:
        return result, eb, 0.0
    half = eb / 2
    result = compress(half)
    total, count = error_stats(result, boxes, origin, unit, chunk, half, dtype)
    # Room for the float rounding of value + offset, so the sum never leaves the bound.
    peak = max((float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for _, _, a, _ in boxes), default=0.0)
    room = eb - half - 4 * np.finfo(dtype).eps * peak
    offset = float(np.clip(-total / count, -room, room)) if room > 0 else 0.0
    return result, half, offset
