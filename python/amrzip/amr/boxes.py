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


def covered_pieces(box: Box, finer, ratio: Sequence[int], node=None) -> list[Box]:
    """The parts of ``box`` that boxes of the next level cover, one per finer box touching it
    (``finer``: a list of boxes, or their ``(n, 2, dim)`` integer array; refined by ``ratio``).
    Along node dimensions a coarse node is covered where a fine node coincides with it."""
    f = np.asarray(finer, dtype=np.int64)
    if f.size == 0:
        return []
    # All finer boxes at once: a level can hold thousands, and this runs for every coarse box.
    r = np.asarray(ratio, dtype=np.int64)
    nd = np.asarray(_nodes(node, len(box[0])))
    lo = np.where(nd, -np.floor_divide(-f[:, 0, :], r), np.floor_divide(f[:, 0, :], r))
    hi = np.floor_divide(f[:, 1, :], r)
    blo, bhi = np.asarray(box[0], dtype=np.int64), np.asarray(box[1], dtype=np.int64)
    hit = np.all((lo <= bhi) & (hi >= blo) & (lo <= hi), axis=1)
    return [(tuple(int(v) for v in l), tuple(int(v) for v in h)) for l, h in zip(np.maximum(lo[hit], blo), np.minimum(hi[hit], bhi))]


def covered_mask(box: Box, finer, ratio: Sequence[int], node=None) -> np.ndarray:
    """True over the cells (or nodes) of ``box`` that a box of the next level (``finer``,
    refined by ``ratio``) covers."""
    mask = np.zeros(box_shape(box), dtype=bool)
    for lo, hi in covered_pieces(box, finer, ratio, node):
        mask[tuple(slice(a - b, c - b + 1) for a, c, b in zip(lo, hi, box[0]))] = True
    return mask
