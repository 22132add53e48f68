"""Box algebra against brute force on small random boxes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from amrzip.amr.boxes import coarsen, convert, covered_mask, difference, intersect, num_cells, refine, subtract, union


@st.composite
def boxes(draw, dim=2, n=(1, 4)):
    out = []
    for _ in range(draw(st.integers(*n))):
        lo = [draw(st.integers(-4, 8)) for _ in range(dim)]
        out.append((tuple(lo), tuple(l + draw(st.integers(0, 6)) for l in lo)))
    return out


def cells(bs):
    return {c for lo, hi in bs for c in np.ndindex(*[h - l + 1 for l, h in zip(lo, hi)]) for c in [tuple(x + l for x, l in zip(c, lo))]}


def disjoint(bs):
    return all(intersect(a, b) is None for i, a in enumerate(bs) for b in bs[i + 1 :])


@settings(max_examples=200, deadline=None)
@given(boxes(n=(1, 4)), boxes(n=(0, 4)))
def test_difference_and_union(a, b):
    d = difference(a[:1], b)
    assert disjoint(d) and cells(d) == cells(a[:1]) - cells(b)
    assert len(subtract(a[0], a[-1])) <= 4
    u = union(a + b)
    assert disjoint(u) and cells(u) == cells(a) | cells(b) and num_cells(u) == len(cells(u))


@settings(max_examples=100, deadline=None)
@given(boxes(dim=3, n=(1, 1)), st.integers(1, 4))
def test_refine_coarsen(b, r):
    (box,) = b
    ratio = (r, r, r)
    assert coarsen(refine(box, ratio), ratio) == box
    fine = cells([refine(box, ratio)])
    assert {tuple(x // r for x in c) for c in fine} == cells([box])


def test_covered_mask_matches_coarsened_cells():
    box = ((0, 0), (7, 7))
    fine = [((3, 4), (6, 9)), ((14, 14), (20, 20))]
    mask = covered_mask(box, fine, (2, 2))
    covered = cells([coarsen(f, (2, 2)) for f in fine]) & cells([box])
    assert {tuple(int(v) for v in c) for c in np.argwhere(mask)} == covered


@settings(max_examples=100, deadline=None)
@given(boxes(dim=3, n=(1, 1)), st.integers(1, 4), st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_node_boxes_refine_coarsen_and_convert(b, r, node):
    (box,) = b
    ratio = (r, r, r)
    nodes = convert(box, None, node)
    fine = refine(nodes, ratio, node)
    assert coarsen(fine, ratio, node) == nodes
    # Brute force per dimension: node i of a box sits where fine node i*r does; cells as before.
    for d in range(3):
        if node[d]:
            assert (fine[0][d], fine[1][d]) == (nodes[0][d] * r, nodes[1][d] * r)
            assert nodes[1][d] == box[1][d] + 1
            # Coarsening encloses: the coarse nodes around any fine node range.
            lo, hi = nodes[0][d] * r + 1, nodes[1][d] * r - 1
            if lo <= hi:
                c = coarsen(((lo,) * 3, (hi,) * 3), ratio, node)
                assert c[0][d] * r <= lo and c[1][d] * r >= hi and c[1][d] - c[0][d] <= (hi - lo) // r + 1
    assert convert(nodes, node, None) == box


def test_covered_mask_of_node_data_marks_coinciding_nodes():
    # Coarse nodes 0..8 along x, ratio 2: a fine node box 3..9 holds fine nodes 4, 6, 8, i.e. coarse 2..4.
    node = (True, False)
    mask = covered_mask(((0, 0), (8, 3)), [((3, 0), (9, 7))], (2, 2), node)
    assert [int(i) for i in np.flatnonzero(mask[:, 0])] == [2, 3, 4]
    assert mask[2:5].all() and not mask[:2].any() and not mask[5:].any()
    # A fine box between two coarse nodes covers none.
    assert not covered_mask(((0, 0), (8, 3)), [((3, 0), (3, 7))], (2, 2), node).any()


def test_node_flags_must_match_the_dimension():
    import pytest

    with pytest.raises(ValueError, match="not 2-dimensional"):
        refine(((0, 0), (1, 1)), (2, 2), node=(True,))
