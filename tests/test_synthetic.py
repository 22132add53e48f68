"""The synthetic AMR generators: AMReX box rules, averaged-down covered cells, determinism, dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amrzip.amr import Hierarchy, box_shape, synthetic
from amrzip.amr.boxes import coarsen

# (name, factory, blocking factor, max grid size) of every hierarchy the structural tests check
CASES = {
    "nyx-small": lambda: synthetic.small("nyx"),
    "nyx-small-f32": lambda: synthetic.small("nyx", dtype=np.float32),
    "nyx-2d": lambda: synthetic.nyx_like(n=32, levels=4, blocking_factor=8, max_grid_size=16, dim=2, seed=3),
    "nyx-ratio4": lambda: synthetic.nyx_like(n=16, levels=2, ref_ratio=4, blocking_factor=8, max_grid_size=16),
    "warpx-small": lambda: synthetic.small("warpx"),
    "warpx-3lev": lambda: synthetic.warpx_like(n=(16, 16, 64), levels=3, blocking_factor=4, max_grid_size=16, t=0.8),
    "warpx-2d": lambda: synthetic.warpx_like(n=(32, 128), levels=3, blocking_factor=8, max_grid_size=32, t=0.1),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    h = CASES[request.param]()
    params = h.attrs["params"]
    return h, params["blocking_factor"], params["max_grid_size"]


def _region(box):
    return tuple(slice(l, h + 1) for l, h in zip(*box))


def _domain_shape(level):
    return box_shape(level.domain)


def _coverage(level) -> np.ndarray:
    mask = np.zeros(_domain_shape(level), dtype=np.int32)
    for b in level.boxes:
        mask[_region(b)] += 1
    return mask


def _full(h: Hierarchy, L: int, field: str) -> np.ndarray:
    """Level L's field on its whole index space, NaN outside its boxes."""
    lev = h.level(L)
    out = np.full(_domain_shape(lev), np.nan)
    for i, b in enumerate(lev.boxes):
        out[_region(b)] = lev.box_data(field, i)
    return out


def test_several_levels(case):
    h, _, _ = case
    assert h.num_levels >= 2
    assert all(lev.num_boxes > 0 for lev in h.levels)


def test_boxes_disjoint_inside_domain(case):
    h, _, _ = case
    for lev in h.levels:
        lo, hi = lev.domain
        for b in lev.boxes:
            assert all(l >= d for l, d in zip(b[0], lo)) and all(u <= d for u, d in zip(b[1], hi))
        assert _coverage(lev).max() == 1


def test_level0_covers_domain(case):
    h, _, _ = case
    assert (_coverage(h.level(0)) == 1).all()


def test_alignment_and_size_limits(case):
    h, bf, mgs = case
    for lev in h.levels:
        for lo, hi in lev.boxes:
            assert all(l % bf == 0 and (u + 1) % bf == 0 for l, u in zip(lo, hi)), (lo, hi)
            assert max(box_shape((lo, hi))) <= mgs


def test_proper_nesting(case):
    h, _, _ = case
    for L in range(1, h.num_levels):
        parent = _coverage(h.level(L - 1)) > 0
        ratio = h.level(L - 1).ref_ratios
        for b in h.level(L).boxes:
            # a fine box lies on whole coarse cells, all of them inside the coarser level's boxes
            assert all(l % r == 0 and (u + 1) % r == 0 for l, u, r in zip(*b, ratio))
            assert parent[_region(coarsen(b, ratio))].all()


def test_covered_cells_are_fine_averages(case):
    h, _, _ = case
    dtype = h.dtype()
    for f in h.fields:
        for L in range(h.num_levels - 1):
            r = h.level(L).ref_ratios
            fine = _full(h, L + 1, f)
            split = [v for s, q in zip(fine.shape, r) for v in (s // q, q)]
            avg = fine.reshape(split).mean(axis=tuple(range(1, 2 * fine.ndim, 2))).astype(dtype)
            coarse = _full(h, L, f)
            covered = ~np.isnan(avg)
            assert covered.any()
            assert not np.isnan(coarse[covered]).any()  # nesting again: covered cells exist on level L
            np.testing.assert_allclose(coarse[covered], avg[covered], rtol=4 * np.finfo(dtype).eps, atol=0)
            # and the Hierarchy agrees on which cells are covered
            for i in range(h.level(L).num_boxes):
                assert np.array_equal(h.covered_mask(L, i), covered[_region(h.level(L).boxes[i])])


def test_leaf_cells_tile_the_domain(case):
    h, _, _ = case
    volume = 0.0
    for L, lev in enumerate(h.levels):
        cell = math.prod(lev.dx)
        volume += cell * sum(int((~h.covered_mask(L, i)).sum()) for i in range(lev.num_boxes))
    domain = math.prod(b - a for a, b in zip(h.prob_lo, h.prob_hi))
    assert volume == pytest.approx(domain, rel=1e-12)


def test_dtype_and_finite(case):
    h, _, _ = case
    dtype = h.dtype()
    for f in h.fields:
        for lev in h.levels:
            for i in range(lev.num_boxes):
                a = lev.box_data(f, i)
                assert a.dtype == dtype and np.isfinite(a).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["nyx", "warpx"])
def test_dtype(kind, dtype):
    h = synthetic.small(kind, dtype=dtype)
    assert h.dtype() == dtype
    assert all(lev.box_data(f, i).dtype == dtype for f in h.fields for lev in h.levels for i in range(lev.num_boxes))


def _snapshot(h: Hierarchy):
    return [(lev.boxes, {f: [lev.box_data(f, i) for i in range(lev.num_boxes)] for f in h.fields}) for lev in h.levels]


def _same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for (boxes_a, data_a), (boxes_b, data_b) in zip(a, b):
        if boxes_a != boxes_b or data_a.keys() != data_b.keys():
            return False
        if not all(np.array_equal(x, y) for f in data_a for x, y in zip(data_a[f], data_b[f])):
            return False
    return True


@pytest.mark.parametrize("kind", ["nyx", "warpx"])
def test_deterministic(kind):
    assert _same(_snapshot(synthetic.small(kind, seed=7)), _snapshot(synthetic.small(kind, seed=7)))
    assert not _same(_snapshot(synthetic.small(kind, seed=7)), _snapshot(synthetic.small(kind, seed=8)))


def test_nyx_fields():
    h = synthetic.small("nyx")
    assert h.fields == ["density", "x_velocity", "y_velocity", "z_velocity", "temp"]
    dens = np.concatenate([lev.box_data("density", i).ravel() for lev in h.levels for i in range(lev.num_boxes)])
    assert dens.min() > 0 and dens.max() / dens.min() > 1e3  # lognormal: decades of dynamic range
    temp = np.concatenate([lev.box_data("temp", i).ravel() for lev in h.levels for i in range(lev.num_boxes)])
    assert temp.min() > 0
    # refinement follows the density: the finest level is denser than the domain on average
    finest = h.levels[-1]
    fine_mean = np.mean([finest.box_data("density", i).mean() for i in range(finest.num_boxes)])
    assert fine_mean > 2.0


def test_nyx_2d_fields():
    h = synthetic.nyx_like(n=32, levels=2, blocking_factor=8, max_grid_size=16, dim=2)
    assert h.dim == 2 and h.fields == ["density", "x_velocity", "y_velocity", "temp"]


def test_warpx_patch_follows_pulse():
    centres = []
    for t in (0.0, 0.5, 1.0):
        h = synthetic.warpx_like(n=(16, 16, 64), levels=2, blocking_factor=4, max_grid_size=16, t=t)
        assert h.fields == ["Ey", "Bx", "Ez", "rho"]
        fine = h.level(1).boxes
        centres.append((min(b[0][2] for b in fine) + max(b[1][2] for b in fine)) / 2)
        # the refined patch is a strict part of the domain
        assert h.level(1).num_cells < 0.5 * np.prod(box_shape(h.level(1).domain))
    assert centres[0] < centres[1] < centres[2]


def test_refined_patch_holds_the_pulse():
    h = synthetic.small("warpx")
    peak = max(float(np.abs(lev.box_data("Ey", i)).max()) for lev in h.levels for i in range(lev.num_boxes))
    fine = h.levels[-1]
    assert max(float(np.abs(fine.box_data("Ey", i)).max()) for i in range(fine.num_boxes)) == peak


@pytest.mark.parametrize("kwargs", [
    dict(blocking_factor=6),                 # n not a multiple of the blocking factor
    dict(max_grid_size=10),                  # max_grid_size not a multiple of the blocking factor
    dict(blocking_factor=4, ref_ratio=3),    # blocking factor not a multiple of the ratio
    dict(levels=0),
    dict(dtype=np.int32),
    dict(dim=1),
])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        synthetic.nyx_like(**{**dict(n=16, levels=2, blocking_factor=4, max_grid_size=8), **kwargs})


def test_bad_warpx_arguments():
    with pytest.raises(ValueError):
        synthetic.warpx_like(t=1.5)
    with pytest.raises(ValueError):
        synthetic.warpx_like(n=(32,))
    with pytest.raises(ValueError):
        synthetic.small("chombo")


def test_field_boxes_names_a_misshapen_box():
    import dataclasses

    h = synthetic.small("nyx")
    boxes = h.field_boxes("density")
    assert all(np.array_equal(boxes[(L, i)], h.level(L).box_data("density", i))
               for L in range(h.num_levels) for i in range(h.level(L).num_boxes))
    # One box's array a cell short along z: the error names that box, as box_data's does.
    lev = h.levels[1]
    arrays = [lev.box_data("density", i) for i in range(lev.num_boxes)]
    arrays[2] = arrays[2][..., :-1]
    short = dataclasses.replace(lev, arrays={"density": arrays}, bulk_loader=None)
    bad = dataclasses.replace(h, levels=[h.levels[0], short, *h.levels[2:]])
    with pytest.raises(ValueError, match=r"box 2 of field 'density': data of shape"):
        bad.field_boxes("density")
