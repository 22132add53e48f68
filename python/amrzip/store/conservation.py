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


TOLERANCE = 0.02


def conserve(compress, boxes: list, eb: float, dtype: str):
    """``compress(eb, measure)`` with the level's mean kept (see the module notes); returns the
    result, the bound it was quantized with and the offset to add to every stored value on read
    (0 when none is needed). ``compress`` with ``measure=True`` reports the summed error of
    what it wrote (``result["error"]``: sum, count)."""
    result = compress(eb, True)
    total, count = result["error"]
    if eb == 0 or count == 0 or abs(total / count) <= TOLERANCE * eb:
        return result, eb, 0.0
    half = eb / 2
    result = compress(half, True)
    total, count = result["error"]
    # Room for the float rounding of value + offset, so the sum never leaves the bound.
    peak = max((float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for _, _, a, _ in boxes), default=0.0)
    room = eb - half - 4 * np.finfo(dtype).eps * peak
    offset = float(np.clip(-total / count, -room, room)) if room > 0 else 0.0
    return result, half, offset
