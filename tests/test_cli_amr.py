"""The AMR commands of ``amrzip``: convert a snapshot file into a store, inspect the store,
extract regions and whole snapshots from it.

Most runs call the command's entry point in this process (the same code path as the installed
command, errors included, without a process start each); a few run ``python -m amrzip`` as a
user would. The real plotfiles come from ../shared/data beside the project (or
$AMRZIP_TEST_DATA); the tests that need them skip when the folder is absent, the others use a
small synthetic hierarchy written as a plotfile.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip import cli
from amrzip.amr import synthetic
from amrzip.amr.hierarchy import Hierarchy, box_shape
from amrzip.store import snapshots
from shared_data import AMREX, REASON
from test_cli import amrzip_cli, assert_error


needs_data = pytest.mark.skipif(AMREX is None or not (AMREX / "advection_2d_4levels").is_dir(), reason=REASON)


try:
    from amrzip.formats import write_plotfile
except ImportError:  # pragma: no cover - the plotfile writer ships with the readers
    write_plotfile = None
needs_writer = pytest.mark.skipif(write_plotfile is None, reason="amrzip.formats.write_plotfile is not available")


@dataclass
class Run:
    status: int
    stdout: str
    stderr: str


def run(capsys, *args) -> Run:
    """``amrzip ARGS`` through the command's entry point, in this process."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main([str(a) for a in args])
    out = capsys.readouterr()
    code = exit_.value.code
    return Run(0 if code is None else code if isinstance(code, int) else 1, out.out, out.err)


def ok(capsys, *args) -> Run:
    r = run(capsys, *args)
    assert r.status == 0, r.stderr
    assert r.stderr == ""
    return r


def error(r: Run, status: int, *fragments: str):
    """A user error: the exit status and one readable ``amrzip: error:`` line, no traceback."""
    assert r.status == status, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amrzip: error: "), r.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# --- inputs and stores, made once per module ----------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic_plotfile(tmp_path_factory) -> Path:
    """A small Nyx-like 3-d hierarchy (3 levels, 5 fields) as an AMReX plotfile."""
    if write_plotfile is None:
        pytest.skip("amrzip.formats.write_plotfile is not available")
    path = tmp_path_factory.mktemp("synthetic") / "nyx_plt"
    write_plotfile(synthetic.small("nyx"), path)
    return path


@pytest.fixture(scope="module")
def advection(tmp_path_factory) -> tuple[Path, Path]:
    """advection_2d_4levels converted twice into one store: snapshot "first" at rel 1e-4,
    snapshot "second" with a per-field bound and explicit unit block and chunk."""
    if AMREX is None or not (AMREX / "advection_2d_4levels").is_dir():
        pytest.skip(REASON)
    source = AMREX / "advection_2d_4levels"
    store = tmp_path_factory.mktemp("stores") / "advection.amrzip"
    first = amrzip_cli("convert", source, store, "--rel", "1e-4", "--snapshot", "first", cwd=store.parent)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    assert f"{source} -> {store / 'first.zarr.zip'}: 4 levels, 1 field" in first.stdout and "ratio" in first.stdout
    second = amrzip_cli("convert", source, store, "--bound", "phi=abs:1e-3", "--unit", "8", "--chunk", "60", "--threads", "2",
                        "--snapshot", "second", cwd=store.parent)
    assert second.returncode == 0, second.stderr
    return source, store


@pytest.fixture(scope="module")
def synthetic_store(tmp_path_factory, synthetic_plotfile) -> Path:
    store = tmp_path_factory.mktemp("stores") / "nyx.amrzip"
    r = amrzip_cli("convert", synthetic_plotfile, store, "--fields", "temp,density", "--rel", "1e-3", "--bound", "temp=abs:0.5",
                   cwd=store.parent)
    assert r.returncode == 0, r.stderr
    assert "3 levels, 2 fields" in r.stdout
    return store


def check_within_bound(h, ds):
    """Every stored cell of ``ds`` is within its field's absolute bound of hierarchy ``h``; cells a
    finer level covers are not stored; nothing else is missing."""
    assert ds.num_levels == h.num_levels
    for f in ds.fields:
        bound = ds.bounds[f]["abs"]
        for L, lev in enumerate(h.levels):
            assert ds.level(L).boxes == [tuple(map(tuple, b)) for b in lev.boxes]
            for i, box in enumerate(lev.boxes):
                stored = ds.read(f, region=box, level=L, covered="nan")
                original = np.asarray(lev.box_data(f, i))
                covered = h.covered_mask(L, i) if L + 1 < h.num_levels else np.zeros(original.shape, bool)
                np.testing.assert_array_equal(np.isnan(stored), covered)
                assert np.max(np.abs(stored - original), where=~covered, initial=0.0) <= bound


# --- convert -------------------------------------------------------------------------------------


@needs_data
def test_convert_real_plotfile(advection):
    source, store = advection
    h = amrzip.read(source)
    assert snapshots(store) == ["first", "second"]

    ds = amrzip.open(store, "first")
    assert ds.fields == h.fields and (ds.time, ds.step) == (h.time, h.step)
    assert (ds.bounds["phi"]["mode"], ds.bounds["phi"]["value"]) == ("rel", 1e-4)
    check_within_bound(h, ds)

    ds = amrzip.open(store)  # the latest: second
    assert ds.name == "second"
    assert ds.bounds["phi"] == {"mode": "abs", "value": 1e-3, "abs": 1e-3}
    assert all(ds.array_info(L, "phi")["unit"] == [8, 8] and ds.array_info(L, "phi")["chunk"] == [64, 64] for L in range(ds.num_levels))  # 60 rounded up
    check_within_bound(h, ds)


@needs_writer
def test_convert_fields_and_per_field_bounds(synthetic_plotfile, synthetic_store):
    h = amrzip.read(synthetic_plotfile)
    ds = amrzip.open(synthetic_store)
    assert ds.name == f"step_{h.step:06d}"  # the default name
    assert ds.fields == ["temp", "density"]  # in the order asked for
    assert ds.bounds["temp"] == {"mode": "abs", "value": 0.5, "abs": 0.5}
    assert (ds.bounds["density"]["mode"], ds.bounds["density"]["value"]) == ("rel", 1e-3)
    check_within_bound(h, ds)


def test_convert_progress_bar(capsys, monkeypatch, tmp_path):
    """On a terminal (FORCE_COLOR stands in for one) a large conversion shows a bar naming the
    level and field being compressed; here every conversion counts as large."""
    if write_plotfile is None:
        pytest.skip("amrzip.formats.write_plotfile is not available")
    write_plotfile(synthetic.small("warpx"), tmp_path / "plt")
    monkeypatch.setattr(cli, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setenv("FORCE_COLOR", "1")
    r = run(capsys, "convert", tmp_path / "plt", tmp_path / "store", "--rel", "1e-3")
    assert r.status == 0, r.stderr
    assert "converting plt" in r.stderr and "level 1 field" in r.stderr
    assert "2 levels, 4 fields" in r.stdout


# --- inspect -------------------------------------------------------------------------------------


@needs_data
def test_inspect_text(capsys, advection):
    _, store = advection
    text = ok(capsys, "inspect", store).stdout
    ds = amrzip.open(store)
    for fragment in ("2 snapshots (first, second)", "snapshot         second", f"(step {ds.step})", "2-d, 4 levels, Cartesian",
                     "amrex-plotfile", "abs 0.001", "0,0:1023,1023", "1024x1024", "interpolation", "total", "ratio"):
        assert fragment in text, fragment
    lines = text.splitlines()
    # A row per level in the level table and per (level, field) in the array table.
    assert sum(line.split()[:1] == ["3"] for line in lines) == 2

    first = ok(capsys, "inspect", store, "--snapshot", "first").stdout
    assert "snapshot         first" in first and "rel 0.0001" in first


def _check_description(d: dict, store: Path, ds):
    assert d["snapshots"] == snapshots(store)
    assert (d["snapshot"], d["time"], d["step"], d["dim"]) == (ds.name, ds.time, ds.step, ds.dim)
    assert list(d["fields"]) == ds.fields
    for f, b in d["fields"].items():
        assert (b["mode"], b["value"], b["abs_bound"]) == (ds.bounds[f]["mode"], ds.bounds[f]["value"], ds.bounds[f]["abs"])
    assert len(d["levels"]) == ds.num_levels
    totals = {"cells": 0, "stored_cells": 0, "original_bytes": 0, "stored_bytes": 0}
    for L, lev in enumerate(d["levels"]):
        view = ds.level(L)
        assert lev["level"] == L and lev["boxes"] == view.num_boxes
        assert [tuple(c) for c in lev["domain"]] == list(view.domain)
        assert lev["ref_ratio"] == (None if L + 1 == ds.num_levels else list(view.ref_ratios))
        assert lev["dx"] == list(view.dx)
        assert all((a["unit"], a["chunk"]) == (ds.array_info(L, f)["unit"][0], ds.array_info(L, f)["chunk"][0]) for f, a in lev["fields"].items())
        cells = sum(int(np.prod(box_shape(b))) for b in view.boxes)
        # Coverage from the data itself: the cells a covered="nan" read leaves out.
        stored = sum(int(np.count_nonzero(~np.isnan(ds.read(ds.fields[0], b, L, covered="nan")))) for b in view.boxes)
        assert (lev["cells"], lev["stored_cells"], lev["covered_cells"]) == (cells, stored, cells - stored)
        assert lev["stored_fraction"] == pytest.approx(stored / cells)
        for f in ds.fields:
            a, info = lev["fields"][f], ds.array_info(L, f)
            assert {k: a[k] for k in info["stats"]} == info["stats"]
            assert a["predictor"] == info["predictor"] and a["stored_cells"] == stored
            assert a["ratio"] == pytest.approx(a["original_bytes"] / a["stored_bytes"])
        assert lev["original_bytes"] == sum(a["original_bytes"] for a in lev["fields"].values())
        assert lev["stored_bytes"] == sum(a["stored_bytes"] for a in lev["fields"].values())
        totals["cells"] += cells
        totals["stored_cells"] += stored
        totals["original_bytes"] += lev["original_bytes"]
        totals["stored_bytes"] += lev["stored_bytes"]
    # The total counts every byte of the snapshot: its arrays' chunks and tables, and the
    # metadata, shard indexes and archive records around them.
    stored = totals.pop("stored_bytes")
    assert {k: d["totals"][k] for k in totals} == totals
    assert d["totals"]["stored_bytes"] == ds.path.stat().st_size > stored
    assert d["totals"]["ratio"] == pytest.approx(totals["original_bytes"] / ds.path.stat().st_size)
    assert d["totals"]["disk_bytes"] == ds.path.stat().st_blocks * 512


@needs_data
def test_inspect_json(capsys, advection):
    _, store = advection
    for name in ("first", "second"):
        d = json.loads(ok(capsys, "inspect", store, "--snapshot", name, "--json").stdout)
        _check_description(d, store, amrzip.open(store, name))
    # The original bytes are those of the plotfile's box data.
    h = amrzip.read(advection[0])
    assert d["totals"]["original_bytes"] == sum(lev.num_cells for lev in h.levels) * 8


@needs_writer
def test_inspect_json_3d(capsys, synthetic_store):
    d = json.loads(ok(capsys, "inspect", synthetic_store, "--json").stdout)
    _check_description(d, synthetic_store, amrzip.open(synthetic_store))
    text = ok(capsys, "inspect", synthetic_store).stdout
    assert "abs 0.5" in text and "rel 0.001" in text and "3-d, 3 levels" in text


# --- extract -------------------------------------------------------------------------------------


@needs_data
def test_extract_region(capsys, advection, tmp_path):
    _, store = advection
    r = ok(capsys, "extract", store, "--level", "2", "--field", "phi", "--region", "100,90:163,131", "-o", tmp_path / "r.npy")
    ds = amrzip.open(store)
    expected = ds.read("phi", region=((100, 90), (163, 131)), level=2)
    region = np.load(tmp_path / "r.npy")
    assert region.shape == (64, 42) and region.dtype == np.float64
    np.testing.assert_array_equal(region, expected)
    # The store's bytes read, against the snapshot's size.
    assert f"read {cli._size(ds.bytes_read)} from the store (the snapshot holds {cli._size(ds.path.stat().st_size)})" in r.stdout
    assert "phi on level 2, cells 100,90:163,131, float64 64x42" in r.stdout

    ok(capsys, "extract", store, "--snapshot", "first", "--level", "1", "--field", "phi", "--covered", "nan", "-o", tmp_path / "l1.npy")
    ds = amrzip.open(store, "first")
    whole = np.load(tmp_path / "l1.npy")
    assert whole.shape == box_shape(ds.level(1).domain)  # the default region: the level's domain
    np.testing.assert_array_equal(whole, ds.read("phi", level=1, covered="nan"))
    assert np.isnan(whole).any()


@needs_writer
def test_extract_plotfile(capsys, synthetic_store, tmp_path):
    ds = amrzip.open(synthetic_store)
    r = ok(capsys, "extract", synthetic_store, "-o", tmp_path / "back")
    assert "AMReX plotfile, 3 levels, 2 fields" in r.stdout and "from the store" in r.stdout
    back, expected = amrzip.read(tmp_path / "back"), ds.to_hierarchy()
    assert back.fields == expected.fields and back.num_levels == expected.num_levels
    assert (back.time, back.step, back.prob_lo, back.prob_hi) == (expected.time, expected.step, expected.prob_lo, expected.prob_hi)
    for L, (lev, want) in enumerate(zip(back.levels, expected.levels)):
        assert lev.boxes == want.boxes and lev.domain == want.domain
        for f in back.fields:
            for i in range(lev.num_boxes):
                np.testing.assert_array_equal(lev.box_data(f, i), want.box_data(f, i))

    # One field, and --plotfile for a name that does not say folder; --force to replace it.
    out = tmp_path / "temp_only.npy"
    ok(capsys, "extract", synthetic_store, "--field", "temp", "--plotfile", "-o", out)
    assert amrzip.read(out).fields == ["temp"]
    error(run(capsys, "extract", synthetic_store, "--field", "temp", "--plotfile", "-o", out), 2, "exists", "--force")
    ok(capsys, "extract", synthetic_store, "--field", "density", "--plotfile", "-o", out, "--force")
    assert amrzip.read(out).fields == ["density"]


# --- errors --------------------------------------------------------------------------------------


@needs_data
def test_truncated_plotfile(tmp_path):
    r = amrzip_cli("convert", AMREX / "pelelmex_3d_truncated", tmp_path / "store", "--rel", "1e-3", cwd=tmp_path)
    assert_error(r, 1, str(AMREX / "pelelmex_3d_truncated" / "Level_0" / "Cell_D_00000"), "truncated")
    assert not (tmp_path / "store" / "step_000020").exists()


@needs_writer
def test_truncated_synthetic_plotfile(capsys, synthetic_plotfile, tmp_path):
    damaged = tmp_path / "plt"
    shutil.copytree(synthetic_plotfile, damaged)
    data = sorted((damaged / "Level_2").glob("Cell_D_*"))[-1]
    os.truncate(data, data.stat().st_size - 100)
    error(run(capsys, "convert", damaged, tmp_path / "store", "--rel", "1e-3"), 1, str(data))


def _two_level_plotfile(path: Path, coarse, fine) -> Path:
    rng = np.random.default_rng(5)
    levels = [{"boxes": coarse, "ref_ratio": 2, "domain": ((0, 0), (15, 15)), "data": {"u": [rng.random(box_shape(b)) for b in coarse]}},
              {"boxes": fine, "data": {"u": [rng.random(box_shape(b)) for b in fine]}}]
    return write_plotfile(Hierarchy.from_arrays(levels, prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0)), path)


@needs_writer
def test_wrong_plotfiles_are_refused_in_one_line(capsys, tmp_path):
    """Files the readers refuse: one ``amrzip: error:`` line naming the file and the fault, exit 1."""
    # A level that is not nested in the level below.
    bad = _two_level_plotfile(tmp_path / "unnested", [((0, 0), (7, 15))], [((16, 0), (19, 3))])
    error(run(capsys, "convert", bad, tmp_path / "store", "--rel", "1e-3"), 1, str(bad), "level 1 is not nested in level 0", "box 0")
    # A FAB stored on a bigger box than Cell_H gives it, with no ghost cells declared.
    bad = _two_level_plotfile(tmp_path / "fab", [((0, 0), (15, 15))], [((4, 4), (11, 7))])
    data = bad / "Level_1" / "Cell_D_00000"
    data.write_bytes(data.read_bytes().replace(b"((4,4) (11,7) (0,0))", b"((3,4) (11,8) (0,0))", 1))
    error(run(capsys, "convert", bad, tmp_path / "store", "--rel", "1e-3"), 1, str(data), "box 0 of level 1", "Cell_H")
    # An AMReX checkpoint, named as one.
    chk = tmp_path / "chk00200"
    (chk / "Level_0").mkdir(parents=True)
    (chk / "Header").write_text("CheckPointVersion_1.0\n2\n0.5\n1\n0\n")
    (chk / "Level_0" / "SD_0_New_MF_H").write_text("1\n")
    error(run(capsys, "convert", chk, tmp_path / "store", "--rel", "1e-3"), 1, str(chk), "checkpoint", "convert a plotfile")
    assert not (tmp_path / "store").exists()


@needs_writer
@pytest.mark.parametrize(
    "args, fragments",
    [
        ([], ["give an error bound", "--rel or --abs", "density"]),
        (["--rel", "1e-3", "--abs", "1"], ["--rel or --abs, not both"]),
        (["--rel", "-1"], ["--rel", ">= 0"]),
        (["--bound", "temp=rel"], ["--bound", "FIELD=rel:VALUE"]),
        (["--bound", "temp=max:1"], ["--bound", "FIELD=rel:VALUE"]),
        (["--bound", "temp=abs:x"], ["--bound", "'x' is not a number"]),
        (["--bound", "temp=abs:-1"], ["--bound", ">= 0"]),
        (["--bound", "temp=abs:1", "--bound", "temp=rel:1"], ["--bound", "given twice"]),
        (["--bound", "temp=abs:1"], ["give an error bound", "density"]),
        (["--rel", "1e-3", "--bound", "pressure=abs:1"], ["--bound", "'pressure'"]),
        (["--rel", "1e-3", "--fields", "temp", "--bound", "density=abs:1"], ["--bound", "'density'", "not among the fields converted"]),
        (["--rel", "1e-3", "--fields", "temp,pressure"], ["--fields", "no field 'pressure'", "density"]),
        (["--rel", "1e-3", "--fields", "temp,,density"], ["--fields"]),
        (["--rel", "1e-3", "--snapshot", "a/b"], ["--snapshot", "snapshot name"]),
        (["--rel", "1e-3", "--unit", "1"], ["--unit"]),
        (["--rel", "1e-3", "--chunk", "0"], ["--chunk"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_convert_usage_errors(capsys, synthetic_plotfile, tmp_path, args, fragments):
    error(run(capsys, "convert", synthetic_plotfile, tmp_path / "store", *args), 2, *fragments)
    assert not (tmp_path / "store").exists()


@needs_writer
def test_convert_bad_inputs_and_outputs(capsys, synthetic_plotfile, tmp_path):
    error(run(capsys, "convert", tmp_path / "missing", tmp_path / "store", "--rel", "1e-3"), 2, "missing", "does not exist")
    (tmp_path / "empty").mkdir()
    error(run(capsys, "convert", tmp_path / "empty", tmp_path / "store", "--rel", "1e-3"), 1, "empty", "not an AMReX plotfile")
    (tmp_path / "file").write_text("not a store")
    error(run(capsys, "convert", synthetic_plotfile, tmp_path / "file", "--rel", "1e-3"), 1, "file", "not an amrzip store")


@needs_writer
def test_existing_snapshot(capsys, synthetic_plotfile, synthetic_store):
    before = json.loads(ok(capsys, "inspect", synthetic_store, "--json").stdout)
    error(run(capsys, "convert", synthetic_plotfile, synthetic_store, "--abs", "1"), 1, "step_000000", "already exists", "--snapshot")
    assert json.loads(ok(capsys, "inspect", synthetic_store, "--json").stdout) == before  # untouched
    assert [p.name for p in synthetic_store.iterdir() if p.name.startswith(".")] == []  # no leftover


@needs_writer
@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--level", "1", "--field", "temp", "--region", "0,0:3,3,3"], ["--region", "lo:hi", "3 integers", "0,0,0:31,31,31"]),
        (["--level", "1", "--field", "temp", "--region", "0,0,0-3,3,3"], ["--region", "lo:hi"]),
        (["--level", "1", "--field", "temp", "--region", "a,b,c:1,2,3"], ["--region", "lo:hi"]),
        (["--level", "1", "--field", "temp", "--region", "4,4,4:3,3,3"], ["--region", "hi is below lo"]),
        (["--level", "1", "--field", "temp", "--region", "0,0,0:32,3,3"], ["--region", "not inside the domain of level 1", "0,0,0:31,31,31"]),
        (["--level", "1", "--field", "pressure"], ["--field", "no field 'pressure'", "temp, density"]),
        (["--level", "3", "--field", "temp"], ["--level 3", "levels 0 to 2"]),
        (["--level", "-1", "--field", "temp"], ["--level"]),
        (["--field", "temp"], ["--level and one --field"]),
        (["--level", "0"], ["--level and one --field"]),
        (["--level", "0", "--field", "temp,density"], ["--level and one --field"]),
        (["--level", "0", "--field", "temp", "--covered", "zero"], ["--covered"]),
        (["--level", "0", "--field", "temp", "--snapshot", "nope"], ["--snapshot nope", "no such snapshot", "step_000000"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_extract_npy_usage_errors(capsys, synthetic_store, tmp_path, args, fragments):
    error(run(capsys, "extract", synthetic_store, *args, "-o", tmp_path / "x.npy"), 2, *fragments)
    assert not (tmp_path / "x.npy").exists()


@needs_writer
def test_extract_other_errors(capsys, synthetic_store, tmp_path):
    for option in (["--level", "0"], ["--region", "0,0,0:1,1,1"], ["--covered", "nan"]):
        error(run(capsys, "extract", synthetic_store, *option, "-o", tmp_path / "plt"), 2, option[0], "plotfile folder")
    error(run(capsys, "extract", synthetic_store, "--field", "pressure", "-o", tmp_path / "plt"), 2, "no field 'pressure'")
    assert not (tmp_path / "plt").exists()
    (tmp_path / "x.npy").write_bytes(b"keep me")
    error(run(capsys, "extract", synthetic_store, "--level", "0", "--field", "temp", "-o", tmp_path / "x.npy"), 2, "--force")
    assert (tmp_path / "x.npy").read_bytes() == b"keep me"
    error(run(capsys, "extract", synthetic_store, "-o"), 2, "-o")
    error(run(capsys, "extract", synthetic_store, "--level", "0", "--field", "temp"), 2, "--output")


def test_not_a_store(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("someone else's folder")
    for command in (["inspect"], ["extract", "--level", "0", "--field", "a", "-o", tmp_path / "x.npy"]):
        error(run(capsys, command[0], tmp_path, *command[1:]), 1, str(tmp_path), "not an amrzip store")
        # An empty folder is a store with nothing in it yet.
        error(run(capsys, command[0], tmp_path / "empty", *command[1:]), 1, "holds no committed snapshot")
        error(run(capsys, command[0], tmp_path / "missing", *command[1:]), 2, "does not exist")
