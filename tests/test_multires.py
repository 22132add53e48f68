"""Multiresolution (HZ) snapshots: reads at a resolution, over a region, progressively; adaptive
resolution; AMR hierarchies coalesced; damage; the CLI; the OpenVisus IDX export."""

from __future__ import annotations

import json
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import amrzip
import amrzip.multires as mr
from amrzip.amr import synthetic
from amrzip.cli import cli
from shared_data import AMREX, CHOMBO, needs_data


def field(shape, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.linspace(0, 3, n) for n in shape], indexing="ij")
    smooth = sum(np.sin((k + 1.3) * g) for k, g in enumerate(grids))
    return (smooth + 0.05 * rng.standard_normal(shape)).astype(dtype)


def subsample(a, d):
    """What a read d levels below the finest returns."""
    return mr.subsample(a, Fraction(1, 2**d))


@pytest.mark.parametrize("shape", [(40, 33, 50), (64, 64), (1000,), (5, 3, 2), (1, 70, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_point_is_within_the_bound_at_every_resolution(tmp_path, shape, dtype):
    a = field(shape, dtype=dtype)
    s = mr.write({"v": a}, tmp_path / "s", rel=1e-3, block_bits=8)
    eb = s["fields"]["v"]["abs_bound"]
    ds = amrzip.open(tmp_path / "s")
    assert isinstance(ds, mr.MultiresDataset)
    full = ds.read("v")
    assert full.dtype == dtype and full.shape == a.shape
    assert np.abs(full.astype(np.float64) - a).max() <= eb
    levels = ds.info("v")["levels"]
    for drop in range(0, levels + 1, max(1, len([n for n in shape if n > 1]))):
        part = ds.read("v", resolution=Fraction(1, 2**drop))
        want = subsample(a, drop)
        assert part.shape == want.shape
        # The same values as the full read's at those points, each within the bound.
        assert np.array_equal(part, subsample(full, drop))
        assert np.abs(part.astype(np.float64) - want).max() <= eb


def test_the_roughest_axis_is_refined_first_and_reads_follow_the_bitmask(tmp_path):
    # Smooth along axes 0 and 2, oscillating along axis 1: refining axis 1 first in each round
    # predicts the fewest points along it (docs/multires.md).
    z, y, x = np.meshgrid(*[np.arange(n) for n in (48, 40, 56)], indexing="ij")
    a = np.sin(0.05 * (x + z)) + np.sin(1.3 * y)
    mr.write({"v": a}, tmp_path / "s", abs=1e-4)
    ds = amrzip.open(tmp_path / "s")
    bitmask = ds.info("v")["bitmask"]
    assert bitmask[1] == "1" and sorted(bitmask[1:4]) == ["0", "1", "2"]
    full = ds.read("v")
    assert np.abs(full - a).max() <= 1e-4
    for res in (Fraction(1, 2), Fraction(1, 4), Fraction(1, 8)):
        assert np.array_equal(ds.read("v", resolution=res), mr.subsample(full, res, bitmask))
    assert mr.subsample(full, "1/8", bitmask).shape == (24, 20, 28)
    with pytest.raises(ValueError, match="bitmask"):
        mr.subsample(full, "1/2", "V3")


def test_reduced_reads_read_a_prefix_and_region_reads_their_blocks(tmp_path):
    a = field((128, 128, 128), dtype=np.float32)
    mr.write({"v": a}, tmp_path / "s", rel=1e-4, block_bits=12)
    whole = amrzip.open(tmp_path / "s")
    full = whole.read("v")
    full_bytes = whole.bytes_read
    for res, at_most in ((Fraction(1, 8), 0.5), (Fraction(1, 64), 0.15)):
        ds = amrzip.open(tmp_path / "s")
        part = ds.read("v", resolution=res)
        assert np.array_equal(part, subsample(full, {8: 3, 64: 6}[res.denominator]))
        assert ds.bytes_read < at_most * full_bytes, (res, ds.bytes_read, full_bytes)
    ds = amrzip.open(tmp_path / "s")
    region = (slice(10, 30), (64, 80), slice(100, 128))
    part = ds.read("v", region=region)
    assert np.array_equal(part, full[10:30, 64:80, 100:128])
    assert ds.bytes_read < 0.3 * full_bytes
    coarse = amrzip.open(tmp_path / "s").read("v", resolution="1/8", region=region)
    assert np.array_equal(coarse, full[10:30:2, 64:80:2, 100:128:2])


def test_region_reads_of_large_arrays_decode_only_the_region_box(tmp_path):
    # More than 2^21 points: the coarse levels go into the whole array at a coarse level, the
    # finer ones into the box the region needs.
    a = field((160, 130, 144), dtype=np.float32)
    mr.write({"v": a}, tmp_path / "s", abs=1e-3)
    full = amrzip.open(tmp_path / "s").read("v")
    for region in ((slice(70, 90), slice(0, 30), slice(130, 144)), (slice(0, 160), slice(64, 65), slice(None))):
        for res, d in ((1, 0), ("1/8", 3), ("1/64", 6)):
            part = amrzip.open(tmp_path / "s").read("v", resolution=res, region=region)
            # The points of the resolution's lattice (multiples of the step) inside the region.
            step = 2 ** (d // 3)
            want = full[tuple(slice(-(-(r.start or 0) // step) * step, r.stop, step) for r in region)]
            assert np.array_equal(part, want), (region, res)
    steps = list(amrzip.open(tmp_path / "s").progressive("v", region=(slice(70, 90), slice(0, 30), slice(130, 144))))
    assert np.array_equal(steps[-1][1], full[70:90, 0:30, 130:144])


def test_progressive_reads_read_each_block_once(tmp_path):
    a = field((64, 96, 80))
    mr.write({"v": a}, tmp_path / "s", abs=1e-3, block_bits=10)
    full = amrzip.open(tmp_path / "s").read("v")
    ds = amrzip.open(tmp_path / "s")
    before = ds.bytes_read
    seen = []
    for res, part in ds.progressive("v"):
        assert np.array_equal(part, subsample(full, {1: 0, 8: 3, 64: 6, 512: 9}[res.denominator]))
        seen.append(ds.bytes_read - before)
    assert seen == sorted(seen) and len(seen) == 4
    # Each step read only what it added: in all, the bytes of one full read.
    alone = amrzip.open(tmp_path / "s")
    alone.read("v")
    assert seen[-1] == alone.bytes_read - before
    region = ((0, 20), (30, 60), (5, 70))
    steps = list(amrzip.open(tmp_path / "s").progressive("v", resolutions=["1/64", "1/8", 1], region=region))
    assert np.array_equal(steps[-1][1], full[0:20, 30:60, 5:70])
    with pytest.raises(ValueError, match="coarse to fine"):
        list(ds.progressive("v", resolutions=[1, Fraction(1, 8)]))


def test_nonfinite_values_are_kept(tmp_path):
    a = field((30, 40))
    a[3, 4], a[10, 11], a[29, 39], a[0, 0] = np.nan, np.inf, -np.inf, 1e300
    mr.write({"v": a}, tmp_path / "s", abs=1e-2)
    b = amrzip.open(tmp_path / "s").read("v")
    finite = np.isfinite(a)
    assert np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[np.isinf(a)], b[np.isinf(a)])
    assert np.abs(a[finite] - b[finite]).max() <= 1e-2


def test_adaptive_resolution_keeps_full_resolution_where_the_rules_hold(tmp_path):
    a = field((96, 96, 96))
    hot = (slice(32, 64), slice(0, 48), slice(16, 48))
    a[hot] += 10.0
    full = mr.write({"v": a}, tmp_path / "full", abs=1e-3)
    kinds = {
        "region": {"regions": [hot], "elsewhere": Fraction(1, 64)},
        "threshold": {"thresholds": [(9.0, 1)], "elsewhere": "1/512", "tile": 16},
    }
    for name, keep in kinds.items():
        s = mr.write({"v": a}, tmp_path / name, abs=1e-3, keep=keep)
        assert s["stored_bytes"] < 0.6 * full["stored_bytes"], name
        b = amrzip.open(tmp_path / name).read("v")
        # Full resolution inside the rule's region, within the bound.
        assert np.abs(b[hot] - a[hot]).max() <= 1e-3, name
        # Elsewhere a point shows the nearest stored point below it, within the bound of it.
        step = 4 if name == "region" else 8
        corner = b[0:step, 64:64 + step, 64:64 + step]
        assert np.abs(corner - a[0, 64, 64]).max() <= 1e-3, name
        # A coarse read holds only stored points: every one within the bound.
        coarse = amrzip.open(tmp_path / name).read("v", resolution=Fraction(1, 2 ** (3 * (2 if name == "region" else 3))))
        assert np.abs(coarse - subsample(a, 3 * (2 if name == "region" else 3))).max() <= 1e-3


def test_amr_hierarchies_coalesce_finer_over_coarser(tmp_path):
    h = synthetic.nyx_like(n=32, levels=3)
    s = mr.write(h, tmp_path / "s", rel=1e-4)
    ds = amrzip.open(tmp_path / "s")
    for f in h.fields:
        check_coalesced(h, ds.read(f), f, s["fields"][f]["abs_bound"])
    info = ds.info("density")
    assert info["attributes"]["index_order"] == "x-first"
    # The raw size is the hierarchy's cells, not the coalesced space's.
    assert s["original_bytes"] == sum(lev.num_cells * 8 for lev in h.levels) * len(h.fields)
    # At the coarsest level's resolution a read holds level 0's cells where no finer level is.
    where, ratios = finest_level_map(h)
    coarse = ds.read("density", resolution=Fraction(1, ratios[0] ** h.dim))
    level0 = np.zeros(coarse.shape)
    for (lo, hi), box in zip(h.levels[0].boxes, h.levels[0].field_data("density")):
        level0[tuple(slice(l, u + 1) for l, u in zip(lo, hi))] = box
    own = where[:: ratios[0], :: ratios[0], :: ratios[0]] == 0
    assert np.abs(coarse[own] - level0[own]).max() <= s["fields"]["density"]["abs_bound"]
    with pytest.raises(ValueError, match="keep= applies to arrays"):
        mr.write(h, tmp_path / "t", rel=1e-4, keep={"elsewhere": 1})
    # The AMR layout says how to get resolution reads.
    amrzip.write(h, tmp_path / "amr", rel=1e-4)
    with pytest.raises(ValueError, match="--layout multires"):
        amrzip.open(tmp_path / "amr").read("density", resolution="1/8")


def finest_level_map(h):
    shape = tuple(int(n) for n in np.array(h.levels[-1].domain[1]) - np.array(h.levels[-1].domain[0]) + 1)
    where = np.full(shape, -1, dtype=np.int32)
    ratios = total_ratios(h)
    for L, lev in enumerate(h.levels):
        for lo, hi in lev.boxes:
            where[tuple(slice(l * ratios[L], (u + 1) * ratios[L]) for l, u in zip(lo, hi))] = L
    return where, ratios


def total_ratios(h):
    ratios = [1] * h.num_levels
    for L in range(h.num_levels - 2, -1, -1):
        ratios[L] = ratios[L + 1] * int(h.levels[L].ref_ratios[0])
    return ratios


def check_coalesced(h, full, f, eb):
    """Every cell no finer level covers is within the bound at its lattice point."""
    where, ratios = finest_level_map(h)
    for L, lev in enumerate(h.levels):
        r = ratios[L]
        for (lo, hi), box in zip(lev.boxes, lev.field_data(f)):
            box = np.asarray(box, dtype=np.float64)
            points = tuple(slice(l * r, (u + 1) * r, r) for l, u in zip(lo, hi))
            own = where[points] == L
            assert np.abs(full[points][own] - box[own]).max(initial=0.0) <= eb, (f, L)


@needs_data
@pytest.mark.parametrize("name", ["advection_2d_4levels", "pelelmex_3d"])
def test_real_amrex_files_coalesce_within_the_bound(tmp_path, name):
    h = amrzip.read(AMREX / name)
    s = mr.write(h, tmp_path / "s", rel=1e-4)
    ds = amrzip.open(tmp_path / "s")
    for f in list(s["fields"])[:3]:
        check_coalesced(h, ds.read(f), f, s["fields"][f]["abs_bound"])


@needs_data
@pytest.mark.parametrize("name", ["ase-ctrl-reference.H5", "stream.reference.000000.2d.H5"])
def test_real_chombo_files_coalesce_within_the_bound(tmp_path, name):
    h = amrzip.read(CHOMBO / name)
    fields = h.fields[:2]
    s = mr.write(h, tmp_path / "s", bounds={f: {"rel": 1e-3} for f in h.fields})
    ds = amrzip.open(tmp_path / "s")
    for f in fields:
        check_coalesced(h, ds.read(f), f, s["fields"][f]["abs_bound"])


def test_bad_requests_are_refused_clearly(tmp_path):
    a = field((32, 32))
    mr.write({"v": a}, tmp_path / "s", abs=1e-3)
    ds = amrzip.open(tmp_path / "s")
    with pytest.raises(ValueError, match="1/2\\^m"):
        ds.read("v", resolution=Fraction(1, 3))
    with pytest.raises(ValueError, match="coarser than"):
        ds.read("v", resolution=Fraction(1, 2**20))
    with pytest.raises(ValueError, match="outside"):
        ds.read("v", region=((0, 40), (0, 5)))
    with pytest.raises(ValueError, match="steps"):
        ds.read("v", region=(slice(0, 8, 2),))
    with pytest.raises(KeyError, match="no field 'w'"):
        ds.read("w")
    with pytest.raises(ValueError, match="one shape"):
        mr.write({"a": a, "b": a[:4]}, tmp_path / "t", abs=1)
    with pytest.raises(ValueError, match="float32 and float64"):
        mr.write({"a": a.astype(np.int32)}, tmp_path / "t", abs=1)
    with pytest.raises(ValueError, match="no error bound"):
        mr.write({"a": a}, tmp_path / "t")
    with pytest.raises(ValueError, match="unknown keys"):
        mr.write({"a": a}, tmp_path / "t", abs=1, keep={"region": []})
    with pytest.raises(FileExistsError):
        mr.write({"v": a}, tmp_path / "s", abs=1, snapshot=ds.name)
    # The AMR reader says what the snapshot is.
    with pytest.raises(ValueError, match="multiresolution"):
        amrzip.Dataset(ds.path)


FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_snapshots_of_earlier_index_versions_still_read(version):
    # Written by earlier releases of the layout (docs/format.md 17.6): index AMRZHZ01 coded
    # every symbol of a level with one code, AMRZHZ02 had no axis order (the default's),
    # AMRZHZ03 (blocks of 2^10 points, anchored) had cubic interpolation everywhere and its
    # blocks' symbols in C order, AMRZHZ04 (the same blocks) stored them in dense order
    # without snaking rows.
    z, y, x = np.meshgrid(np.arange(20), np.arange(24), np.arange(33), indexing="ij")
    source = np.sin(0.3 * x + 0.1 * y) * np.cos(0.2 * z) * 10 + 0.01 * x * y
    ds = amrzip.open(FIXTURES / f"multires_v{version}")
    assert ds.info("f")["bitmask"] == ("V2" + "012" * 5 if version < 3 else "V" + "201" * 6)
    assert np.abs(ds.read("f") - source).max() <= 1e-3
    assert np.abs(ds.read("f", resolution=Fraction(1, 8)) - source[::2, ::2, ::2]).max() <= 1e-3
    region = (slice(3, 11), slice(0, 24), slice(20, 33))
    assert np.abs(ds.read("f", region=region) - source[region]).max() <= 1e-3


def test_damage_is_found_and_named(tmp_path):
    a = field((64, 64, 64), dtype=np.float32)
    mr.write({"v": a}, tmp_path / "s", abs=1e-3, block_bits=10)
    path = next((tmp_path / "s").glob("*.zarr.zip"))
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("fields/0/hz.data")
    raw = bytearray(path.read_bytes())
    raw[info.header_offset + 30 + len(info.filename) + info.file_size - 7] ^= 0x20
    path.write_bytes(bytes(raw))
    ds = amrzip.open(tmp_path / "s")
    # A coarse read does not touch the damaged last block; a full read names it.
    ds.read("v", resolution="1/64")
    with pytest.raises(amrzip.StoreError, match="HZ block \\d+: checksum mismatch"):
        ds.read("v")
    report = amrzip.check(tmp_path / "s")
    assert not report["ok"] and "checksum" in report["snapshots"][0]["problem"]


def test_cli_converts_inspects_and_extracts(tmp_path):
    h = synthetic.nyx_like(n=32, levels=2)
    src = tmp_path / "plt"
    from amrzip.formats import write_plotfile

    write_plotfile(h, src)
    runner = CliRunner()
    store = tmp_path / "store"
    r = runner.invoke(cli, ["convert", str(src), str(store), "--rel", "1e-3", "--layout", "multires"])
    assert r.exit_code == 0, r.output
    assert "multiresolution" in r.output
    r = runner.invoke(cli, ["inspect", str(store)])
    assert r.exit_code == 0 and "HZ order" in r.output and "density" in r.output, r.output
    r = runner.invoke(cli, ["inspect", str(store), "--json"])
    assert json.loads(r.output)["kind"] == "multires"
    out = tmp_path / "d.npy"
    r = runner.invoke(cli, ["extract", str(store), "--field", "density", "--resolution", "1/8", "--region", "0,0,0:31,31,31", "-o", str(out)])
    assert r.exit_code == 0, r.output
    full = amrzip.open(store).read("density")
    assert np.array_equal(np.load(out), full[0:32:2, 0:32:2, 0:32:2])
    for bad, message in (
        (["--resolution", "1/3"], "1/2^m"),
        (["--level", "1"], "applies to AMR snapshots"),
        (["--region", "0,0:3,3"], "expected lo:hi"),
    ):
        r = runner.invoke(cli, ["extract", str(store), "--field", "density", "-o", str(tmp_path / "x.npy"), *bad])
        assert r.exit_code == 2 and message in r.output, (bad, r.output)
    r = runner.invoke(cli, ["convert", str(src), str(store), "--rel", "1e-3", "--layout", "multires", "--unit", "8"])
    assert r.exit_code == 2 and "--layout amr" in r.output
    assert runner.invoke(cli, ["check", str(store)]).exit_code == 0


def test_idx_export_opens_in_openvisus_with_the_same_values(tmp_path):
    ov = pytest.importorskip("OpenVisus", reason="the openvisus package is not installed (pip install openvisus)")
    a = field((20, 36, 50), dtype=np.float32)
    mr.write({"v": a}, tmp_path / "s", abs=1e-3)
    ds = amrzip.open(tmp_path / "s")
    out = mr.export_idx(ds, "v", tmp_path / "v.idx")
    db = ov.LoadDataset(str(out))
    assert np.array_equal(db.read(), ds.read("v"))
    # From the CLI, an AMR hierarchy's field (x first) comes out in OpenVisus' x, y, z order.
    h = synthetic.nyx_like(n=16, levels=2)
    mr.write(h, tmp_path / "h", rel=1e-3)
    r = CliRunner().invoke(cli, ["extract", str(tmp_path / "h"), "--field", "temp", "-o", str(tmp_path / "t.idx")])
    assert r.exit_code == 0, r.output
    got = ov.LoadDataset(str(tmp_path / "t.idx")).read()
    assert np.array_equal(got.T, amrzip.open(tmp_path / "h").read("temp"))


def test_the_example_runs(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "python" / "multires.py"
    out = subprocess.run([sys.executable, str(example), str(tmp_path / "mr")], capture_output=True, text=True, check=True).stdout
    assert "progressive: 1/1" in out and "adaptive" in out, out
    assert amrzip.check(tmp_path / "mr")["ok"]


def _within(decoded, original, eb):
    """Finite values within ``eb``; NaN and infinities bit for bit."""
    decoded, original = np.asarray(decoded), np.asarray(original)
    finite = np.isfinite(original)
    same_bits = decoded.view(np.uint8).reshape(decoded.shape + (-1,)) == original.view(np.uint8).reshape(original.shape + (-1,))
    if not np.all(same_bits.all(axis=-1)[~finite]):
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.all(np.abs(decoded[finite].astype(np.float64) - original[finite].astype(np.float64)) <= eb))


def test_any_array_reads_back_within_the_bound_at_any_resolution_and_region(tmp_path_factory):
    pytest.importorskip("hypothesis", reason="hypothesis is not installed")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @st.composite
    def cases(draw):
        dims = draw(st.integers(1, 3))
        shape = tuple(draw(st.integers(1, 24)) for _ in range(dims))
        dtype = draw(st.sampled_from([np.dtype(np.float32), np.dtype(np.float64)]))
        if draw(st.booleans()):  # anything the type holds: NaN, infinities, huge, subnormal
            a = draw(hnp.arrays(dtype, shape, elements=st.floats(width=8 * dtype.itemsize)))
        else:  # a smooth field with noise, around an offset
            seed = draw(st.integers(0, 2**32 - 1))
            a = (field(shape, seed=seed) * draw(st.floats(1e-3, 1e3)) + draw(st.floats(-1e6, 1e6))).astype(dtype)
        eb = draw(st.sampled_from([0.0, 1e-30, 1e-6, 1e-2, 1.0, 1e300]))
        region = tuple(sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=2, unique=n > 0))) for n in shape)
        region = tuple((lo, max(hi, lo + 1)) if hi > lo else (min(lo, n - 1), min(lo, n - 1) + 1) for (lo, hi), n in zip(region, shape))
        drop = draw(st.integers(0, 6))
        return a, eb, region, drop

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(case=cases())
    def check(case):
        a, eb, region, drop = case
        store = tmp_path_factory.mktemp("prop")
        mr.write({"v": a}, store, abs=eb, block_bits=6)
        ds = amrzip.open(store)
        full = ds.read("v")
        assert _within(full, a, eb)
        levels = ds.info("v")["levels"]
        res = Fraction(1, 2 ** min(drop, levels))
        part = amrzip.open(store).read("v", resolution=res, region=region)
        bitmask = ds.info("v")["bitmask"]
        whole = mr.subsample(full, res, bitmask)
        # The points of the resolution's lattice inside the region: their indices per axis.
        lattice = [np.unique(mr.subsample(np.indices(a.shape)[k], res, bitmask)) for k in range(a.ndim)]
        keep = [np.flatnonzero((c >= lo) & (c < hi)) for c, (lo, hi) in zip(lattice, region)]
        assert np.array_equal(part, whole[np.ix_(*keep)], equal_nan=True), (a.shape, res, region)

    check()
