"""The yt frontend (amrzip.yt_frontend): stores opened with yt.load, compared with yt's own
reading of the source files (real data) and with yt's in-memory grids of the hierarchy written
(synthetic data); lazy reads measured with the store's byte counter; the entry point that lets
yt find the frontend without importing amrzip."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

yt = pytest.importorskip("yt", reason="yt is not installed (it is in requirements-dev.txt); the frontend needs it")

import amrzip  # noqa: E402
import amrzip.multires as multires  # noqa: E402
import amrzip.yt_frontend  # noqa: E402,F401  registers the frontend whatever the installed metadata says
from amrzip.amr import synthetic  # noqa: E402
from amrzip.amr.hierarchy import Hierarchy  # noqa: E402
from amrzip.formats import write_plotfile  # noqa: E402
from amrzip.yt_frontend import AMRZipDataset  # noqa: E402
from shared_data import DATA, needs_data, real_files  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REL = 1e-4
# Every shared file (docs in ../shared/data/README.md).
REAL = real_files()

yt.set_log_level(50)


def store_of(h: Hierarchy, path: Path, **kw) -> Path:
    amrzip.write(h, path, rel=REL, **kw)
    return path


def reference(h: Hierarchy, path: Path):
    """yt's own reading of hierarchy ``h``, written as an AMReX plotfile (without compression):
    the reference. (yt's in-memory grids are not: their 1-D and 2-D children mask the wrong cells.)"""
    return yt.load(str(write_plotfile(h, path)))


def cells(dobj, field, ds, axes=(0, 1, 2)):
    """The selected cells as (level, integer position per axis) keys and values, in one order:
    positions as indices of the cell's own level, so that rounding cannot reorder them."""
    level = dobj["index", "grid_level"].d.astype(np.int64)
    keys = [level]
    for a in axes[: ds.dimensionality]:
        x = dobj["index", "xyz"[a]].to("code_length").d
        dx = dobj["index", "d" + "xyz"[a]].to("code_length").d
        keys.append(np.rint((x - ds.domain_left_edge[a].to("code_length").d) / dx - 0.5).astype(np.int64))
    order = np.lexsort(keys[::-1])
    return np.stack([k[order] for k in keys]), dobj[field].d[order]


def slice_cells(sl, field, ds):
    """A slice's or projection's cells: (refinement, column, row) keys in one order, and values.
    Refinement is log2 of the coarse cell width over the cell's."""
    xa, ya = ds.coordinates.x_axis[sl.axis], ds.coordinates.y_axis[sl.axis]
    coarse = ds.domain_width[xa].d / ds.domain_dimensions[xa]
    keys = [np.rint(np.log2(coarse / sl["pdx"].d)).astype(np.int64)]
    for p, a in (("px", xa), ("py", ya)):
        keys.append(np.rint((sl[p].d - ds.domain_left_edge[a].d) / sl["pd" + p[1]].d - 0.5).astype(np.int64))
    order = np.lexsort(keys[::-1])
    return np.stack([k[order] for k in keys]), sl[field].d[order]


def assert_within(ours, theirs, bound: float, where: str) -> float:
    """Same NaNs; finite values within ``bound``. Returns the largest error over the bound."""
    finite = np.isfinite(theirs)
    np.testing.assert_array_equal(np.isfinite(ours), finite, err_msg=where)
    err = float(np.abs(ours[finite] - theirs[finite]).max()) if finite.any() else 0.0
    assert err <= bound, f"{where}: error {err} over bound {bound}"
    return err / bound if bound > 0 else 0.0


# ---------------------------------------------------------------------------------------------
# real files: a store's slices against yt's slices of the file it was written from


@needs_data
@pytest.mark.parametrize("name", REAL)
def test_real_file_slices_match_yt_on_the_source(tmp_path, name):
    path = DATA / name
    # When yt fails to build a file's index, the half-built index raises in its __del__ as the
    # failure is dropped: keep that noise out of the test report.
    hook, sys.unraisablehook = sys.unraisablehook, lambda _: None
    try:
        src = yt.load(str(path))
        src.index
        failure = None
    except Exception as e:  # yt's readers fail in many ways on files they do not handle
        failure = f"{type(e).__name__}: {e}"
    finally:
        gc.collect()
        sys.unraisablehook = hook
    if failure is not None:
        pytest.skip(f"yt cannot open {name} itself ({failure})")
    try:
        h = amrzip.read(path)
    except ValueError as e:  # a damaged file (the shared data has a truncated plotfile on purpose)
        pytest.skip(f"amrzip refuses {name}: {e}")
    ds = yt.load(str(store_of(h, tmp_path / "run")))
    assert isinstance(ds, AMRZipDataset)
    assert ds.dimensionality == src.dimensionality and ds.index.num_grids == src.index.num_grids
    assert ds.index.max_level == src.index.max_level
    np.testing.assert_allclose(ds.domain_left_edge.d, src.domain_left_edge.d, atol=1e-12 * float(src.domain_width.d.max()))
    np.testing.assert_allclose(ds.domain_right_edge.d, src.domain_right_edge.d, rtol=1e-12)
    np.testing.assert_array_equal(ds.domain_dimensions, src.domain_dimensions)
    assert float(ds.current_time) == pytest.approx(float(src.current_time.d))

    # Off every cell face (a quarter of the finest cell past the middle), so both pick the same cells.
    finest = src.index.get_smallest_dx().d
    axes = [2] if src.dimensionality == 2 else [0, 2]
    ftype = src.field_list[0][0]
    worst = 0.0
    for axis in axes:
        coord = float(src.domain_center[axis].d) + (0.25 * finest if src.dimensionality == 3 else 0.0)
        theirs, ours = src.slice(axis, coord), ds.slice(axis, coord)
        for ft, f in (k for k in src.field_list if k[0] == ftype):
            k_theirs, v_theirs = slice_cells(theirs, (ft, f), src)
            k_ours, v_ours = slice_cells(ours, ("amrzip", f), ds)
            np.testing.assert_array_equal(k_ours, k_theirs, err_msg=f"{name} {f}: the slices hold different cells")
            worst = max(worst, assert_within(v_ours, v_theirs, ds.store.bounds[f]["abs"], f"{name} {f} axis {axis}"))
    print(f"{name}: largest error over the bound in slices {worst:.4f}")


@needs_data
def test_real_file_slice_reads_a_fraction_of_the_store(tmp_path):
    """The largest shared file (38 fields, 3 levels): one field's slice decodes only its chunks."""
    ds = yt.load(str(store_of(amrzip.read(DATA / "amrex" / "pelelmex_3d"), tmp_path / "run")))
    ds.store.bytes_read = 0
    yt.SlicePlot(ds, "z", ("amrzip", "temp"), buff_size=(256, 256)).save(str(tmp_path / "temp.png"))
    fraction = ds.store.bytes_read / ds.store.stored_bytes
    print(f"pelelmex_3d: a slice of temp read {ds.store.bytes_read} of {ds.store.stored_bytes} bytes ({fraction:.3f})")
    assert 0 < fraction < 0.25


@needs_data
def test_periodicity_recorded_by_the_source(tmp_path):
    h = amrzip.read(DATA / "chombo" / "bisicles" / "chk.mismip3D.Benn.ssa.0lev.013000.2d.hdf5")
    ds = yt.load(str(store_of(h, tmp_path / "run")))
    assert ds.periodicity == (False, True, False)
    plain = yt.load(str(store_of(amrzip.read(DATA / "amrex" / "advection_2d_4levels"), tmp_path / "plain")))
    assert plain.periodicity == (False, False, False)


# ---------------------------------------------------------------------------------------------
# lazy reads


def test_slice_reads_few_chunks(tmp_path):
    h = synthetic.nyx_like(n=32)
    ds = yt.load(str(store_of(h, tmp_path / "run")))
    assert ds.store.bytes_read == 0  # opening read the metadata only
    sl = ds.slice("z", 3.1)
    values = sl["amrzip", "density"]
    assert values.size > 0 and np.isfinite(values).all()
    fraction = ds.store.bytes_read / ds.store.stored_bytes
    print(f"nyx_like(n=32): a slice of density read {ds.store.bytes_read} of {ds.store.stored_bytes} bytes ({fraction:.3f})")
    assert fraction < 0.25
    # The same slice again decodes nothing new; the whole field reads much more.
    before = ds.store.bytes_read
    ds.slice("z", 3.1)["amrzip", "density"]
    assert ds.store.bytes_read == before
    ds.all_data()["amrzip", "density"]
    assert ds.store.bytes_read > 2 * before


# ---------------------------------------------------------------------------------------------
# synthetic hierarchies in 1, 2 and 3 dimensions, against yt's in-memory grids of them


def one_d() -> Hierarchy:
    x = (np.arange(64) + 0.5) / 64
    fine = np.sin(6 * x) + 0.1 * np.cos(40 * x)
    coarse = fine.reshape(-1, 2).mean(axis=1)
    coarser = coarse.reshape(-1, 2).mean(axis=1)
    return Hierarchy.from_arrays(
        [
            {"boxes": [((0,), (7,)), ((8,), (15,))], "ref_ratio": 2, "data": {"u": [coarser[:8], coarser[8:]]}},
            {"boxes": [((4,), (11,)), ((16,), (23,))], "ref_ratio": 2, "data": {"u": [coarse[4:12], coarse[16:24]]}},
            {"boxes": [((10,), (17,))], "data": {"u": [fine[10:18]]}},
        ],
        prob_lo=(0.0,), prob_hi=(1.0,), time=2.5, step=3,
    )


HIERARCHIES = {
    1: one_d,
    2: lambda: synthetic.nyx_like(n=32, levels=3, blocking_factor=4, max_grid_size=8, dim=2),
    3: lambda: synthetic.small("nyx"),
}


@pytest.fixture(scope="module", params=[1, 2, 3], ids=["1d", "2d", "3d"])
def pair(request, tmp_path_factory):
    """(hierarchy, our dataset of its store, yt's dataset of it as a plotfile)"""
    h = HIERARCHIES[request.param]()
    where = tmp_path_factory.mktemp("yt")
    return h, yt.load(str(store_of(h, where / "run"))), reference(h, where / "plt")


def test_geometry(pair):
    h, ds, ref = pair
    assert ds.dimensionality == h.dim
    assert ds.index.num_grids == ref.index.num_grids and ds.index.max_level == h.num_levels - 1
    np.testing.assert_array_equal(ds.domain_dimensions, ref.domain_dimensions)
    np.testing.assert_array_equal(ds.domain_left_edge.d, ref.domain_left_edge.d)
    np.testing.assert_array_equal(ds.domain_right_edge.d, ref.domain_right_edge.d)
    # the plotfile's grid edges went through text
    np.testing.assert_allclose(ds.index.grid_left_edge.d, ref.index.grid_left_edge.d, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ds.index.grid_right_edge.d, ref.index.grid_right_edge.d, rtol=1e-12)
    assert ds.refine_by == ref.refine_by and float(ds.current_time) == h.time
    assert ds.parameters["step"] == h.step and ds.parameters["snapshot"] == f"step_{h.step:06d}"
    # Every finer grid has parents, and each of their child lists names it.
    for g in ds.index.grids:
        if g.Level == 0:
            assert g.Parent is None
        else:
            assert g.Parent and all(g in p.Children for p in g.Parent)


def test_all_cells_and_regions(pair):
    h, ds, ref = pair
    fields = h.fields[:2]
    # 0.3 to 0.7 of the domain along its dimensions, all of it along the others
    lo, hi = ds.domain_left_edge.d.copy(), ds.domain_right_edge.d.copy()
    lo[: h.dim] += 0.3 * ds.domain_width.d[: h.dim]
    hi[: h.dim] -= 0.3 * ds.domain_width.d[: h.dim]
    if h.dim == 3:
        sub = tuple(slice(a, b) for a, b in zip(lo, hi))
        ours, theirs = [ds.r[:], ds.r[sub]], [ref.r[:], ref.r[sub]]
    else:
        # yt's ds.r[...] makes rays of 1-D selections, which fail, and on Python < 3.12 takes a
        # pair of slices for a field name; the boxes it would make work.
        ours, theirs = [ds.all_data(), ds.box(lo, hi)], [ref.all_data(), ref.box(lo, hi)]
    for a, b in zip(ours, theirs):
        for f in fields:
            k_ours, v_ours = cells(a, ("amrzip", f), ds)
            k_theirs, v_theirs = cells(b, ("boxlib", f), ref)
            np.testing.assert_array_equal(k_ours, k_theirs)
            assert_within(v_ours, v_theirs, ds.store.bounds[f]["abs"], f"{h.dim}-D {f}")
    # the leaf cells tile the domain once
    n_leaf = ds.all_data()["amrzip", fields[0]].size
    assert n_leaf == ref.all_data()["boxlib", fields[0]].size


def test_covered_cells_are_rebuilt_where_asked(pair):
    """A selection of level 0 only, and whole grids, hold covered cells: the store rebuilds
    them as the mean of the finer cells, as the source held them."""
    h, ds, ref = pair
    f = h.fields[0]
    bound = ds.store.bounds[f]["abs"]
    ours, theirs = ds.all_data(), ref.all_data()
    ours.max_level = theirs.max_level = 0
    k_ours, v_ours = cells(ours, ("amrzip", f), ds)
    k_theirs, v_theirs = cells(theirs, ("boxlib", f), ref)
    np.testing.assert_array_equal(k_ours, k_theirs)
    assert int(np.prod(ds.domain_dimensions)) == v_ours.size
    assert_within(v_ours, v_theirs, bound, "level 0 with covered cells")
    for g, r in zip(ds.index.grids[:4], ref.index.grids[:4]):
        assert_within(g["amrzip", f].d, r["boxlib", f].d, bound, f"grid {g.id}")


def test_projection(pair, tmp_path):
    h, ds, ref = pair
    if h.dim == 1:
        pytest.skip("yt projects 2-D and 3-D data only")
    f, axis = "density", 2
    bound = ds.store.bounds[f]["abs"]
    # Units differ: the store's density has none and its lengths are Mpc (as the synthetic
    # snapshot recorded); yt takes a plotfile's density for g/cm**3 and its lengths for cm.
    # Averages along the line of sight compare as numbers; integrals once in code lengths.
    for weight in (("index", "ones"), None):
        ours, theirs = ds.proj(("amrzip", f), axis, weight_field=weight), ref.proj(("boxlib", f), axis, weight_field=weight)
        k_ours, v_ours = slice_cells(ours, ("amrzip", f), ds)
        k_theirs, v_theirs = slice_cells(theirs, ("boxlib", f), ref)
        np.testing.assert_array_equal(k_ours, k_theirs)
        if weight is None:
            v_ours = v_ours / float(ds.length_unit.to("cm"))
            width = float(ds.domain_width[axis].to("code_length").d)
            assert_within(v_ours, v_theirs, bound * width * (1 + 1e-9), "projection")
        else:
            assert_within(v_ours, v_theirs, bound * (1 + 1e-12), "average along z")
    plot = yt.ProjectionPlot(ds, axis, ("amrzip", f))
    out = plot.save(str(tmp_path / "proj.png"))[0]
    assert Path(out).stat().st_size > 10_000


def test_slice_plot(pair, tmp_path):
    h, ds, ref = pair
    if h.dim == 1:
        pytest.skip("yt slices 2-D and 3-D data only")
    plot = yt.SlicePlot(ds, "z", ("amrzip", "temp"), buff_size=(128, 128))
    theirs = yt.SlicePlot(ref, "z", ("boxlib", "temp"), buff_size=(128, 128))
    image, expected = plot.frb["amrzip", "temp"].d, theirs.frb["boxlib", "temp"].d
    assert_within(image, expected, ds.store.bounds["temp"]["abs"], "slice image")
    out = plot.save(str(tmp_path / "slice.png"))[0]
    assert Path(out).stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------
# units, snapshots, what yt.load accepts


def test_units_from_the_source(tmp_path):
    """The synthetic Nyx-like snapshot records units: K, km/s, Mpc and "mean 1" (no unit)."""
    ds = yt.load(str(store_of(synthetic.small("nyx"), tmp_path / "run")))
    assert str(ds.field_info["amrzip", "temp"].units) == "K"
    assert str(ds.field_info["amrzip", "x_velocity"].units) == "km/s"
    assert str(ds.field_info["amrzip", "density"].units) == ""
    assert float(ds.length_unit.to("Mpc")) == pytest.approx(1.0)
    # the usual names get yt's gas fields where the units fit
    t = ds.r[:]
    np.testing.assert_array_equal(t["gas", "temperature"].to("K").d, t["amrzip", "temp"].d)
    np.testing.assert_allclose(t["gas", "velocity_x"].to("km/s").d, t["amrzip", "x_velocity"].d, rtol=1e-12)
    assert ("gas", "density") not in ds.derived_field_list
    # no units recorded: dimensionless, lengths in cm as yt's AMR frontends have them
    bare = Hierarchy.from_arrays([{"boxes": [((0, 0), (7, 7))], "data": {"phi": [np.ones((8, 8))]}}], prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0))
    plain = yt.load(str(store_of(bare, tmp_path / "bare")))
    assert plain.field_list == [("amrzip", "phi")] and str(plain.field_info["amrzip", "phi"].units) == ""
    assert str(plain.length_unit.units) == "cm"


def test_snapshots_and_paths(tmp_path):
    h = synthetic.small("nyx")
    store = store_of(h, tmp_path / "run", snapshot="early")
    h.time, h.step = 1.5, 10
    store_of(h, store, snapshot="late")
    assert float(yt.load(str(store)).current_time) == 1.5
    assert float(yt.load(str(store), snapshot="early").current_time) == 0.0
    assert yt.load(str(store / "early.zarr.zip")).parameters["snapshot"] == "early"
    assert yt.load(str(store), hint="amrzip").parameters["snapshot"] == "late"
    with pytest.raises(KeyError, match="no snapshot"):
        yt.load(str(store), snapshot="missing")
    with pytest.raises(ValueError, match="names another"):
        AMRZipDataset(str(store / "early.zarr.zip"), snapshot="late")


def test_is_valid_is_quick_and_never_raises(tmp_path):
    store = store_of(synthetic.small("nyx"), tmp_path / "run")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.h5").write_bytes(b"not hdf5")
    (tmp_path / "fake.zarr.zip").write_bytes(b"not a zip")
    assert AMRZipDataset._is_valid(str(store)) and AMRZipDataset._is_valid(str(store / "step_000000.zarr.zip"))
    start = time.perf_counter()
    for p in (tmp_path / "empty", tmp_path / "file.h5", tmp_path / "fake.zarr.zip", tmp_path / "absent", tmp_path, ROOT):
        assert not AMRZipDataset._is_valid(str(p)), p
    assert not AMRZipDataset._is_valid(None) and not AMRZipDataset._is_valid(12)
    assert time.perf_counter() - start < 1.0


@needs_data
def test_other_formats_are_left_to_their_frontends():
    for name in ("amrex/advection_2d_4levels", "chombo/bisicles/ase-ctrl-reference.H5"):
        assert not AMRZipDataset._is_valid(str(DATA / name))
        assert not isinstance(yt.load(str(DATA / name)), AMRZipDataset)


def test_unsupported_snapshots_say_why(tmp_path):
    ratios = Hierarchy.from_arrays(
        [
            {"boxes": [((0, 0), (7, 7))], "ref_ratio": (2, 4), "data": {"u": [np.zeros((8, 8))]}},
            {"boxes": [((4, 8), (7, 15))], "data": {"u": [np.zeros((4, 8))]}},
        ],
        prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0),
    )
    with pytest.raises(ValueError, match="not the same in every dimension"):
        yt.load(str(store_of(ratios, tmp_path / "aniso")))
    nodal = Hierarchy.from_arrays([{"boxes": [((0, 0), (8, 8))], "data": {"u": [np.zeros((9, 9))]}}],
                                  prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0), node=(True, True))
    with pytest.raises(ValueError, match="node-centred"):
        yt.load(str(store_of(nodal, tmp_path / "nodal")))
    multires.write({"u": np.zeros((16, 16, 16))}, tmp_path / "mr", rel=1e-3)
    with pytest.raises(ValueError, match="multiresolution"):
        yt.load(str(tmp_path / "mr"))


def test_ratio_of_four_over_two(tmp_path):
    """Levels refined by 2 then 4: yt counts the second as two steps of refine_by."""
    rng = np.random.default_rng(3)
    h = Hierarchy.from_arrays(
        [
            {"boxes": [((0, 0), (15, 15))], "ref_ratio": 2, "data": {"u": [rng.random((16, 16))]}},
            {"boxes": [((8, 8), (23, 23))], "ref_ratio": 4, "data": {"u": [rng.random((16, 16))]}},
            {"boxes": [((48, 48), (63, 79))], "data": {"u": [rng.random((16, 32))]}},
        ],
        prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0),
    )
    ds = yt.load(str(store_of(h, tmp_path / "run")))
    assert ds.refine_by == 2 and ds.level_ires == [0, 1, 3] and ds.relative_refinement(0, 2) == 8
    ad = ds.all_data()
    # the leaf cells' areas add up to the domain's
    assert float((ad["index", "dx"] * ad["index", "dy"]).sum().d) == pytest.approx(1.0)
    proj = ds.proj(("amrzip", "u"), "z")
    assert np.isfinite(proj["amrzip", "u"].d).all()
    assert yt.SlicePlot(ds, "z", ("amrzip", "u")).frb["amrzip", "u"].shape == (800, 800)


# ---------------------------------------------------------------------------------------------
# how yt finds the frontend


def _run(code: str, env_path=None) -> str:
    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(env_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT).stdout


# yt.load on a store in a fresh interpreter that has not imported amrzip.
LOAD_WITHOUT_IMPORT = """
import sys, yt
yt.set_log_level(50)
assert "amrzip" not in sys.modules
ds = yt.load(sys.argv[1] if len(sys.argv) > 1 else {store!r})
print(type(ds).__module__, type(ds).__name__, ds.index.num_grids)
"""


def test_pyproject_declares_the_entry_point():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["yt.frontends"] == {"amrzip": "amrzip.yt_frontend"}


def test_entry_point_as_declared_lets_yt_load_without_importing_amrzip(tmp_path):
    """yt loads every "yt.frontends" entry point before it picks a frontend. A distribution of
    the test's own, on the path, declares the entry point exactly as pyproject.toml does, so
    this holds whatever the installed amrzip's metadata is."""
    store = store_of(synthetic.small("nyx"), tmp_path / "run")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["yt.frontends"]
    site = tmp_path / "site"
    info = site / "amrzip_yt_entry_point_probe-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: amrzip-yt-entry-point-probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[yt.frontends]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    out = _run(LOAD_WITHOUT_IMPORT.format(store=str(store)), env_path=site)
    assert out.split() == ["amrzip.yt_frontend.data_structures", "AMRZipDataset", "145"]


def test_installed_entry_point(tmp_path):
    if not any(ep.value == "amrzip.yt_frontend" for ep in entry_points(group="yt.frontends")):
        pytest.skip(
            "the installed amrzip's metadata predates its yt.frontends entry point: reinstall it "
            "(make setup, maturin develop or pip install -e .) to let yt.load find stores without importing amrzip"
        )
    store = store_of(synthetic.small("nyx"), tmp_path / "run")
    out = _run(LOAD_WITHOUT_IMPORT.format(store=str(store)))
    assert out.split() == ["amrzip.yt_frontend.data_structures", "AMRZipDataset", "145"]


def test_importing_amrzip_leaves_yt_alone_and_the_frontend_needs_no_yt():
    _run("import sys, amrzip; assert 'yt' not in sys.modules and 'amrzip.yt_frontend' not in sys.modules")
    # yt imported first: importing amrzip registers the frontend
    _run("import yt, amrzip\nfrom yt.utilities.object_registries import output_type_registry\n"
         "assert 'AMRZipDataset' in output_type_registry")
    # without yt, the package imports and defines nothing
    _run("import sys; sys.modules['yt'] = None\nimport amrzip, amrzip.yt_frontend\n"
         "assert amrzip.yt_frontend.__all__ == [] and not hasattr(amrzip.yt_frontend, 'AMRZipDataset')")


def test_example(tmp_path):
    example = ROOT / "examples" / "python" / "yt_slice.py"
    out = subprocess.run([sys.executable, str(example), str(tmp_path)], capture_output=True, text=True, check=True).stdout
    png = tmp_path / "density_slice.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "read" in out, out
