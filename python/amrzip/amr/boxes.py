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


def _cell_boxes(boxes, node, dim: int) -> np.ndarray:
    """Boxes as an ``(n, 2, dim)`` array of the cells they span: a node box spans the cells
    between its nodes (a box one node thick keeps the cell above that node, so it still counts)."""
    a = np.asarray(boxes, dtype=np.int64).reshape(-1, 2, dim)
    nd = np.asarray(_nodes(node, dim), dtype=np.int64)
    return np.stack([a[:, 0], np.maximum(a[:, 1] - nd, a[:, 0])], axis=1)


def _shared_cells(a: np.ndarray, b: np.ndarray, *, same: bool = False, rows: int = 64) -> np.ndarray:
    """Per box of ``a``, the cells it shares with the boxes of ``b`` summed (both ``(n, 2, dim)``
    cell boxes; a box is not counted against itself when ``same``). The boxes of ``a`` go in
    small chunks of neighbours (sorted by their corner, x first), each against only the boxes
    of ``b`` that meet the chunk's bounding box, found among those starting near it along x:
    a level of many boxes costs far fewer than all pairs."""
    out = np.zeros(len(a), dtype=np.int64)
    if not len(a) or not len(b):
        return out
    by_x = np.argsort(b[:, 0, 0], kind="stable")
    bx = b[by_x, 0, 0]
    reach = int((b[:, 1, 0] - b[:, 0, 0]).max())  # no box of b starts further left than this
    order = np.lexsort(a[:, 0, ::-1].T)
    for s in range(0, len(a), rows):
        idx = order[s : s + rows]
        chunk = a[idx]
        lo_c, hi_c = chunk[:, 0].min(axis=0), chunk[:, 1].max(axis=0)
        cand = by_x[np.searchsorted(bx, lo_c[0] - reach) : np.searchsorted(bx, hi_c[0], side="right")]
        near = cand[np.all((b[cand, 0] <= hi_c) & (b[cand, 1] >= lo_c), axis=1)]
        lo = np.maximum(chunk[:, None, 0], b[None, near, 0])
        hi = np.minimum(chunk[:, None, 1], b[None, near, 1])
        n = np.prod(np.clip(hi - lo + 1, 0, None), axis=2)
        if same:
            n[idx[:, None] == near[None, :]] = 0
        out[idx] = n.sum(axis=1)
    return out


def check_nesting(levels, node, where: str) -> None:
    """Refuse levels that do not nest: every box of level ``L + 1``, coarsened by level ``L``'s
    ``ref_ratios``, must lie inside the union of level ``L``'s boxes. ``levels`` are objects with
    ``boxes`` and ``ref_ratios`` (a :class:`~amrzip.amr.hierarchy.Level`); node boxes are
    checked through the cells between their nodes. The boxes of a level must not share cells
    (AMReX and Chombo write disjoint box arrays), which is also what lets the covered cells be
    counted box by box. Raises ``ValueError`` naming ``where``, the level and one offending box.
    """
    cells = []
    for L, lev in enumerate(levels):
        dim = len(lev.ref_ratios)
        c = _cell_boxes(lev.boxes, node, dim)
        shared = _shared_cells(c, c, same=True)
        if shared.any():
            i = int(np.flatnonzero(shared)[0])
            hit = np.all(np.minimum(c[i, 1], c[:, 1]) >= np.maximum(c[i, 0], c[:, 0]), axis=1)
            hit[i] = False
            j = int(np.flatnonzero(hit)[0])
            raise ValueError(f"{where}: boxes {i} {lev.boxes[i]} and {j} {lev.boxes[j]} of level {L} overlap")
        cells.append(c)
    for L in range(len(levels) - 1):
        fine, coarse = cells[L + 1], cells[L]
        if not len(fine):
            continue
        r = np.asarray(levels[L].ref_ratios, dtype=np.int64)
        shrunk = np.floor_divide(fine, r)
        need = np.prod(shrunk[:, 1] - shrunk[:, 0] + 1, axis=1)
        short = np.flatnonzero(_shared_cells(shrunk, coarse) < need)
        if len(short):
            i = int(short[0])
            raise ValueError(
                f"{where}: level {L + 1} is not nested in level {L}: its box {i} {levels[L + 1].boxes[i]}, coarsened by "
                f"{tuple(int(v) for v in r)} to {_as_tuple(shrunk[i])}, is not inside level {L}'s boxes"
            )


def _as_tuple(box: np.ndarray) -> Box:
    return tuple(int(v) for v in box[0]), tuple(int(v) for v in box[1])
