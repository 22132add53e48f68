"""Keeping a field's mean: error-feedback predictors can leave errors that all lean one way
where a field varies by less than the bound from cell to cell (the reconstruction trails a
slow ramp by almost the whole bound). Every value is still within the bound, but the mean of
the level moves by a good part of it, which conservation laws notice.

When the mean error of a (level, field) exceeds ``TOLERANCE`` of the bound, the level is coded
again with a smaller bound ``eb'`` and a constant ``offset`` (at most ``eb - eb'``) that cancels
the mean error is recorded and added on read: every stored value stays within the bound and the
level's mean (so the volume-weighted mean of the hierarchy) is kept to rounding.

The mean error scales with the bound, so the first pass's lean ``beta = |mean error| / eb``
sizes the room: ``eb' = eb / (1 + MARGIN * beta)`` leaves room for the recoded lean with a
margin. Shrinking the bound by a factor ``f`` costs about ``log2(f)`` bits per cell, so a lean
of 5% costs 0.14 bits instead of the 1 bit of halving. Only when the recoded lean does not fit
its room is the level coded a third time, with half the bound.
"""

from __future__ import annotations

import numpy as np


TOLERANCE = 0.02
MARGIN = 2.0


def conserve(compress, boxes: list, eb: float, dtype: str):
    """``compress(eb, measure)`` with the level's mean kept (see the module notes); returns the
    result, the bound it was quantized with and the offset to add to every stored value on read
    (0 when none is needed). ``compress`` with ``measure=True`` reports the summed error of
    what it wrote (``result["error"]``: sum, count)."""
    result = compress(eb, True)
    total, count = result["error"]
    if eb == 0 or count == 0 or abs(total / count) <= TOLERANCE * eb:
        return result, eb, 0.0
    # Room for the float rounding of value + offset, so the sum never leaves the bound.
    peak = max((float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for _, _, a, _ in boxes), default=0.0)
    rounding = 4 * np.finfo(dtype).eps * peak
    lean = abs(total / count) / eb
    shrunk = eb / (1 + MARGIN * lean)
    for smaller in ([shrunk] if shrunk > eb / 2 else []) + [eb / 2]:
        result = compress(smaller, True)
        total, count = result["error"]
        room = eb - smaller - rounding
        if room > 0 and abs(total / count) <= room:
            return result, smaller, -total / count
    return result, smaller, float(np.clip(-total / count, -room, room)) if room > 0 else 0.0
