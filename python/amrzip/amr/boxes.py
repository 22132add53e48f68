"""Box algebra on ``(lo, hi)`` inclusive integer boxes (see :mod:`amrzip.amr.hierarchy`).

Boxes index cells unless ``node`` flags say otherwise: one bool per dimension, True where the
box indexes nodes (the cell corners, as AMReX's index types do). Intersection, subtraction and
union do not depend on the index type, as long as both operands share it; coarsening,
refinement and coverage do.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from amrzip.amr.hierarchy import Box, box_shape


def _nodes(node, dim: int) -> tuple[bool, ...]:
    if node is None:
        return (False,) * dim
    node = tuple(bool(v) for v in node)
    if len(node) != dim:
        raise ValueError(f"node flags {node} are not {dim}-dimensional")
    return node


def coarsen(box: Box, ratio: Sequence[int], node=None) -> Box:
    """The coarse cells that contain the box's cells (floor division, also for negative
    indices); along node dimensions, the coarse nodes that enclose its nodes (hi rounds up)."""
    lo, hi = box
    nd = _nodes(node, len(lo))
    return tuple(l // r for l, r in zip(lo, ratio)), tuple(-(-h // r) if n else h // r for h, r, n in zip(hi, ratio, nd))


def refine(box: Box, ratio: Sequence[int], node=None) -> Box:
    """The fine cells of the box's cells; along node dimensions, the fine nodes from its first
    node to its last."""
    lo, hi = box
    nd = _nodes(node, len(lo))
    return tuple(l * r for l, r in zip(lo, ratio)), tuple(h * r if n else (h + 1) * r - 1 for h, r, n in zip(hi, ratio, nd))


def convert(box: Box, node_from, node_to) -> Box:
    """The box in another index type: a cell box becomes the nodes at its cells' corners, a node
    box the cells between its nodes (None when it has a single node along such a dimension)."""
    lo, hi = box
    a, b = _nodes(node_from, len(lo)), _nodes(node_to, len(lo))
    hi = tuple(h + (1 if t and not f else -1 if f and not t else 0) for h, f, t in zip(hi, a, b))
    return None if any(h < l for l, h in zip(lo, hi)) else (tuple(lo), hi)


def intersect(a: Box, b: Box):
    """The intersection of two boxes, or None."""
    lo = tuple(max(x, y) for x, y in zip(a[0], b[0]))
    hi = tuple(min(x, y) for x, y in zip(a[1], b[1]))
    return None if any(h < l for l, h in zip(lo, hi)) else (lo, hi)


def subtract(a: Box, b: Box) -> list[Box]:
    """``a`` minus ``b`` as disjoint boxes (at most 2 per dimension): slabs peeled off ``a``
    dimension by dimension."""
    if intersect(a, b) is None:
        return [a]
    out = []
    lo, hi = list(a[0]), list(a[1])
    for d in range(len(lo)):
        if lo[d] < b[0][d]:
            out.append((tuple(lo[:d] + [lo[d]] + lo[d + 1 :]), tuple(hi[:d] + [b[0][d] - 1] + hi[d + 1 :])))
            lo[d] = b[0][d]
        if hi[d] > b[1][d]:
            out.append((tuple(lo[:d] + [b[1][d] + 1] + lo[d + 1 :]), tuple(hi[:d] + [hi[d]] + hi[d + 1 :])))
            hi[d] = b[1][d]
    return out


def difference(boxes: Sequence[Box], minus: Sequence[Box]) -> list[Box]:
    """The cells of ``boxes`` not in any of ``minus``, as disjoint boxes."""
    out = list(boxes)
    for m in minus:
        out = [piece for b in out for piece in subtract(b, m)]
    return out


def union(boxes: Sequence[Box]) -> list[Box]:
    """The cells of ``boxes`` (which may overlap) as disjoint boxes."""
    out: list[Box] = []
    for b in boxes:
        out += difference([b], out)
    return out


def num_cells(boxes: Sequence[Box]) -> int:
    return int(sum(np.prod(box_shape(b), dtype=np.int64) for b in boxes))


def covered_mask(box: Box, finer, ratio: Sequence[int], node=None) -> np.ndarray:
    """True over the cells (or nodes) of ``box`` that a box of the next level (``finer``,
    refined by ``ratio``) covers: the cells the store leaves out (its own rule, in Rust). Along
    node dimensions a coarse node is covered where a fine node coincides with it."""
    from amrzip import _core

    lo, hi = (list(c) for c in box)
    finer = [(list(f[0]), list(f[1])) for f in np.asarray(finer, dtype=np.int64).reshape(-1, 2, len(lo))]
    stored = _core.stored_mask(lo, hi, finer, [int(r) for r in ratio], list(_nodes(node, len(lo))))
    return np.zeros(box_shape(box), dtype=bool) if stored is None else ~stored.reshape(box_shape(box))


def check_nesting(levels, node, where: str) -> None:
    """Refuse levels that do not nest: every box of level ``L + 1``, coarsened by level ``L``'s
    ``ref_ratios``, must lie inside the union of level ``L``'s boxes. ``levels`` are objects with
    ``boxes`` and ``ref_ratios`` (a :class:`~amrzip.amr.hierarchy.Level`); node boxes are
    checked through the cells between their nodes. The boxes of a level must not share cells
    (AMReX and Chombo write disjoint box arrays), which is also what lets the covered cells be
    counted box by box. Raises ``ValueError`` naming ``where``, the level and one offending box.
    The rule is the store's own (``crates/amr/src/boxes.rs``), which checks every snapshot too.
    """
    from amrzip import _core

    levels = list(levels)
    if not levels:
        return
    dim = len(levels[0].ref_ratios)
    try:
        _core.check_nesting([([(list(lo), list(hi)) for lo, hi in lev.boxes], list(lev.ref_ratios)) for lev in levels], list(_nodes(node, dim)))
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
