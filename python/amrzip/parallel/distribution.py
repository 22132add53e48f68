"""Distribution maps (which rank holds which box), as AMReX makes them, and the part of a
hierarchy one rank holds."""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from amrzip.amr.hierarchy import Hierarchy

MAPS = ("round-robin", "knapsack", "sfc")


def box_cells(boxes) -> np.ndarray:
    """Cells per box of a list of ``(lo, hi)`` boxes."""
    a = np.asarray(boxes, dtype=np.int64).reshape(len(boxes), 2, -1)
    return np.prod(a[:, 1] - a[:, 0] + 1, axis=1)


def distribute(boxes, ranks: int, how: str = "knapsack") -> np.ndarray:
    """The rank of each box: ``round-robin`` (box i to rank i mod ranks), ``knapsack`` (largest
    box first to the least-loaded rank, AMReX's default for few boxes per rank) or ``sfc``
    (boxes in Morton order of their corners cut into runs of about equal cells, AMReX's for many)."""
    n = len(boxes)
    if how not in MAPS:
        raise ValueError(f"distribution must be one of {', '.join(MAPS)}, got {how!r}")
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if how == "round-robin" or n == 0:
        return np.arange(n, dtype=np.int64) % ranks
    cells = box_cells(boxes)
    if how == "knapsack":
        owner = np.empty(n, dtype=np.int64)
        heap = [(0, r) for r in range(ranks)]
        for i in np.argsort(-cells, kind="stable"):
            load, r = heapq.heappop(heap)
            owner[i] = r
            heapq.heappush(heap, (load + int(cells[i]), r))
        return owner
    lo = np.asarray(boxes, dtype=np.int64).reshape(n, 2, -1)[:, 0]
    lo = lo - lo.min(axis=0)
    key = np.zeros(n, dtype=np.uint64)
    for bit in range(21):
        for d in range(lo.shape[1]):
            key |= ((lo[:, d].astype(np.uint64) >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * lo.shape[1] + d)
    order = np.argsort(key, kind="stable")
    # Each box to the run its middle cell falls in.
    middle = np.cumsum(cells[order]) - cells[order] // 2
    owner = np.empty(n, dtype=np.int64)
    owner[order] = np.minimum(middle * ranks // max(int(cells.sum()), 1), ranks - 1)
    return owner


def part(h: Hierarchy, rank: int, owners: list) -> Hierarchy:
    """The boxes of ``h`` that ``owners[level][box] == rank``, as a hierarchy of the same levels,
    fields and geometry (data still read lazily, by the whole hierarchy's loaders)."""
    levels = []
    for lev, own in zip(h.levels, owners):
        keep = np.flatnonzero(np.asarray(own) == rank).tolist()

        def loader(field, j, lev=lev, keep=keep):
            return lev.box_data(field, keep[j])

        def bulk(field, lev=lev, keep=keep):
            boxes = lev.bulk_loader(field)
            return [boxes[i] for i in keep]

        def raw(field, lev=lev, keep=np.asarray(keep, dtype=np.int64)):
            # The kept boxes' places in the whole level's buffers.
            got = lev.raw_loader(field)
            return None if got is None else (got[0], got[1][keep], got[2][keep], *got[3:])

        levels.append(
            dataclasses.replace(
                lev,
                boxes=[lev.boxes[i] for i in keep],
                owners=[rank] * len(keep),
                loader=loader,
                arrays=None if lev.arrays is None else {f: [a[i] for i in keep] for f, a in lev.arrays.items()},
                bulk_loader=None if lev.bulk_loader is None else bulk,
                raw_loader=None if lev.raw_loader is None else raw,
            )
        )
    return dataclasses.replace(h, levels=levels)
