"""The AMR snapshot store: every stored cell within its field's bound, covered cells rebuilt,
region reads touching only their chunks, atomic snapshots, clear errors on damage."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip.amr import Hierarchy
from amrzip.codec import PREDICTORS
from amrzip.store import StoreError, snapshots
from store_files import read_entry, rewrite_entry, snapshot_file


def _field(shape, seed, kind="smooth"):
    rng = np.random.default_rng(seed)
    axes = np.meshgrid(*[np.linspace(0, 1, n, endpoint=False) for n in shape], indexing="ij")
    if kind == "smooth":
        return sum(np.sin((3 + d) * a + d) for d, a in enumerate(axes)) + 0.01 * rng.standard_normal(shape)
    return np.exp(2 * rng.standard_normal(shape))  # rough, four decades


def two_level(dim=3, n=32, dtype=np.float64, fine_boxes=None, coarse_boxes=None, kind="smooth", fields=("rho", "u")):
    """A two-level hierarchy whose covered coarse cells are the average of the fine cells (as
    AMReX stores them)."""
    fine = {f: _field((2 * n,) * dim, k, kind).astype(dtype) for k, f in enumerate(fields)}
    coarse = {f: fine[f].reshape(sum([[n, 2]] * dim, [])).mean(axis=tuple(range(1, 2 * dim, 2))).astype(dtype) for f in fields}
    half = n // 2
    coarse_boxes = coarse_boxes or [((0,) * dim, (half - 1,) * dim), ((half,) + (0,) * (dim - 1), (n - 1,) + (half - 1,) * (dim - 1))]
    fine_boxes = fine_boxes or [((half // 2,) * dim, ((3 * half) // 2 - 1,) * dim)]

    def cut(a, b):
        return np.asfortranarray(a[tuple(slice(l, h + 1) for l, h in zip(*b))])

    return Hierarchy.from_arrays(
        [
            {"boxes": coarse_boxes, "data": {f: [cut(coarse[f], b) for b in coarse_boxes] for f in fields}, "ref_ratio": 2, "domain": ((0,) * dim, (n - 1,) * dim)},
            {"boxes": fine_boxes, "data": {f: [cut(fine[f], b) for b in fine_boxes] for f in fields}},
        ],
        prob_lo=(0.0,) * dim,
        prob_hi=(1.0,) * dim,
        time=1.5,
        step=42,
    )


def expected_box(h, L, i, f):
    """Box i of level L as a reader should rebuild it: covered cells the average of the finer level's."""
    from amrzip.amr.boxes import coarsen, intersect, refine

    lev = h.level(L)
    out = np.array(lev.box_data(f, i), dtype=np.float64)
    if L + 1 < h.num_levels:
        lo = lev.boxes[i][0]
        for j, fbox in enumerate(h.level(L + 1).boxes):
            piece = intersect(coarsen(fbox, lev.ref_ratios), lev.boxes[i])
            if piece is None:
                continue
            fine = expected_box(h, L + 1, j, f)
            flo, fhi = refine(piece, lev.ref_ratios)
            sub = fine[tuple(slice(a - b, c - b + 1) for a, c, b in zip(flo, fhi, fbox[0]))]
            out[tuple(slice(a - b, c - b + 1) for a, c, b in zip(piece[0], piece[1], lo))] = average_down(sub, lev.ref_ratios)
    return out


def average_down(fine: np.ndarray, ratio) -> np.ndarray:
    """The mean of each ``ratio`` block of ``fine``."""
    shape = []
    for n, r in zip(fine.shape, ratio):
        shape += [n // r, r]
    return fine.reshape(shape).mean(axis=tuple(range(1, 2 * fine.ndim, 2)), dtype=np.float64)


def assert_round_trip(h, ds):
    """Stored cells within the bound; covered cells within the bound of the original average."""
    for f in h.fields:
        eb = ds.bounds[f]["abs"]
        for L, lev in enumerate(h.levels):
            view = ds.level(L).field(f)
            for i in range(lev.num_boxes):
                a, d = expected_box(h, L, i, f), view[i]
                assert d.shape == a.shape and d.dtype == lev.box_data(f, i).dtype
                same = (np.isnan(a) & np.isnan(d)) | (a == d)
                with np.errstate(invalid="ignore"):
                    err = np.where(same, 0.0, np.abs(a - d))
                assert not np.isnan(err).any()
                # The covered average is taken in float64 and rounded to the field's type.
                slack = np.finfo(d.dtype).eps * np.abs(a).max() if d.dtype == np.float32 else 0.0
                assert err.max() <= eb * (1 + 1e-12) + slack, (f, L, i, err.max(), eb)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_keeps_the_bound(tmp_path, dim, dtype):
    h = two_level(dim=dim, dtype=dtype)
    summary = amrzip.write(h, tmp_path / "s", rel=1e-4)
    assert summary["ratio"] > 1
    ds = amrzip.open(tmp_path / "s")
    assert (ds.num_levels, ds.fields, ds.time, ds.step) == (2, ["rho", "u"], 1.5, 42)
    assert ds.level(0).boxes == h.level(0).boxes and ds.level(0).ref_ratio == 2
    assert_round_trip(h, ds)
    back = ds.to_hierarchy()
    assert back.level(1).box_data("u", 0).shape == h.level(1).box_data("u", 0).shape
    assert_hierarchy_reads_like_boxes(ds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fitted_prediction_round_trip(tmp_path, dtype):
    # At tight bounds the Nyx-like fields take fitted prediction (weights stored with the
    # codebook): every stored cell within the bound, boxes partly covered included.
    from amrzip.amr.synthetic import nyx_like

    h = nyx_like(n=32, levels=2, blocking_factor=8, max_grid_size=16, dtype=dtype)
    amrzip.write(h, tmp_path / "s", rel=1e-5)
    ds = amrzip.open(tmp_path / "s")
    predictors = {ds.array_info(L, f)["predictor"] for L in range(ds.num_levels) for f in ds.fields}
    assert "fitted" in predictors, predictors
    assert_round_trip(h, ds)


def test_unaligned_boxes_and_partial_blocks(tmp_path):
    # Boxes and the covered region cut unit blocks in pieces: absent cells must not leak.
    coarse = [((0, 0, 0), (12, 30, 31)), ((13, 0, 0), (31, 30, 31))]
    fine = [((6, 10, 14), (29, 37, 41)), ((40, 2, 2), (51, 9, 13))]
    h = two_level(n=32, coarse_boxes=coarse, fine_boxes=fine, kind="rough")
    amrzip.write(h, tmp_path / "s", rel=1e-3, unit=8)
    ds = amrzip.open(tmp_path / "s")
    assert ds.array_info(0, "rho")["stats"]["partial_blocks"] > 0
    assert_round_trip(h, ds)
    # Outside every box (row 31 in y of level 0) there is nothing: NaN.
    whole = ds.read("rho", level=0)
    assert np.isnan(whole[:, 31, :]).all() and not np.isnan(whole[:, :31, :]).any()
    assert_hierarchy_reads_like_boxes(ds)


def assert_hierarchy_reads_like_boxes(ds):
    """to_hierarchy decodes whole levels straight into box arrays: each box reads, to the bit,
    as a read of that box alone does, and a box asked twice comes back equal and fresh."""
    levels = list(range(ds.num_levels))
    for order in (levels, levels[::-1]):  # the finest first: coarser levels decode again
        h = ds.to_hierarchy()
        for f in ds.fields:
            for L in order:
                for i, box in enumerate(ds.level(L).boxes):
                    got = h.level(L).box_data(f, i)
                    assert got.tobytes() == ds.read(f, region=box, level=L).tobytes(), (f, L, i)
    for f in ds.fields:
        again = h.level(0).box_data(f, 0)
        assert again is not h.level(0).box_data(f, 0) and np.array_equal(again, h.level(0).box_data(f, 0), equal_nan=True)


def test_hierarchy_too_large_for_the_cache_reads_box_by_box(tmp_path, monkeypatch):
    from amrzip.store import dataset

    amrzip.write(two_level(dim=3), tmp_path / "s", rel=1e-4)
    monkeypatch.setattr(dataset._core, "CACHE_BYTES", 0)
    ds = amrzip.open(tmp_path / "s")
    assert ds._whole_levels("rho", 0) is None
    assert_hierarchy_reads_like_boxes(ds)


def test_covered_cells_cost_almost_nothing(tmp_path):
    # Every unit block of level 0 half covered by level 1: the level must cost about half of
    # what it costs with (almost) nothing covered.
    whole = [((0, 0, 0), (31, 31, 31))]
    half = [((0, 0, 0), (15, 63, 63)), ((32, 0, 0), (47, 63, 63))]
    h_all = two_level(n=32, coarse_boxes=whole, fine_boxes=[((62, 62, 62), (63, 63, 63))], kind="rough", fields=("rho",))
    h_half = two_level(n=32, coarse_boxes=whole, fine_boxes=half, kind="rough", fields=("rho",))
    a = amrzip.write(h_all, tmp_path / "a", abs=1e-3, unit=16)["levels"][0]["fields"]["rho"]
    b = amrzip.write(h_half, tmp_path / "b", abs=1e-3, unit=16)["levels"][0]["fields"]["rho"]
    assert b["partial_blocks"] == b["blocks"] == 8
    # Half the cells, predicted with half the context: a little over half the bytes.
    assert b["stored_bytes"] < 0.65 * a["stored_bytes"], (a, b)
    assert_round_trip(h_half, amrzip.open(tmp_path / "b"))
    # What covered cells hold does not matter at all: wild values there change no byte.
    for i in range(h_half.level(0).num_boxes):
        box = h_half.level(0).box_data("rho", i)
        box[h_half.covered_mask(0, i)] = 1e300
    c = amrzip.write(h_half, tmp_path / "c", abs=1e-3, unit=16)["levels"][0]["fields"]["rho"]
    assert c["stored_bytes"] == b["stored_bytes"]
    # The shard's chunks and index, past the header that names the snapshot.
    shard = "level_0/c/0/0/0/0"
    prefix = 8 + 16 + 4 + 8 * 3 + 4 * 4 + 4 + 4
    assert read_entry(snapshot_file(tmp_path / "c"), shard)[prefix:] == read_entry(snapshot_file(tmp_path / "b"), shard)[prefix:]


def test_per_field_and_absolute_bounds(tmp_path):
    h = two_level()
    amrzip.write(h, tmp_path / "s", abs=1e-3, bounds={"u": {"rel": 1e-2}})
    ds = amrzip.open(tmp_path / "s")
    assert ds.bounds["rho"]["abs"] == 1e-3 and ds.bounds["u"]["mode"] == "rel"
    assert ds.bounds["u"]["abs"] > 1e-3
    assert_round_trip(h, ds)


def test_special_values(tmp_path):
    h = two_level(fields=("rho",))
    h.level(0).box_data("rho", 0)[1, 2, 3] = np.nan
    h.level(0).box_data("rho", 1)[...] = 7.25  # a constant box
    h.level(1).box_data("rho", 0)[0, 0, 0] = np.inf
    amrzip.write(h, tmp_path / "s", rel=1e-5)
    ds = amrzip.open(tmp_path / "s")
    assert np.isnan(ds.level(0).field("rho")[0][1, 2, 3])
    assert ds.level(1).field("rho")[0][0, 0, 0] == np.inf
    assert_round_trip(h, ds)


def test_bad_arguments_are_refused(tmp_path):
    h = two_level()
    with pytest.raises(ValueError, match="no error bound"):
        amrzip.write(h, tmp_path / "s")
    with pytest.raises(ValueError, match="rel= or abs="):
        amrzip.write(h, tmp_path / "s", rel=1e-3, abs=1)
    with pytest.raises(ValueError, match="finite number"):
        amrzip.write(h, tmp_path / "s", rel=float("nan"))
    with pytest.raises(ValueError, match="does not have"):
        amrzip.write(h, tmp_path / "s", rel=1e-3, bounds={"nope": {"rel": 1}})
    with pytest.raises(ValueError, match="snapshot name"):
        amrzip.write(h, tmp_path / "s", rel=1e-3, snapshot="../x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        amrzip.write(h, tmp_path / "file", rel=1e-3)


def test_box_arrays_of_any_layout_and_byte_order_are_taken_and_wrong_shapes_refused(tmp_path):
    h = two_level()
    ref = amrzip.write(h, tmp_path / "ref", rel=1e-3)

    def awkward(a, k):
        # Big-endian, C order, a strided view, a misaligned copy.
        if k == 0:
            return a.astype(">f8")
        if k == 1:
            return np.ascontiguousarray(a)
        if k == 2:
            wide = np.zeros((a.shape[0] * 2,) + a.shape[1:])
            wide[::2] = a
            return wide[::2]
        raw = np.zeros(a.nbytes + 1, np.uint8)[1:]
        raw[:] = np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8)
        return raw.view(np.float64).reshape(a.shape)

    kinds = iter(range(100))  # each kind in turn, over every box of every field
    levels = [
        {"boxes": lev.boxes, "data": {f: [awkward(np.asarray(lev.box_data(f, i)), next(kinds) % 4) for i in range(lev.num_boxes)] for f in h.fields},
         "ref_ratio": lev.ref_ratios, "domain": lev.domain}
        for L, lev in enumerate(h.levels)
    ]
    odd = Hierarchy.from_arrays(levels, prob_lo=h.prob_lo, prob_hi=h.prob_hi, time=h.time, step=h.step)
    strided, misaligned = odd.level(0).arrays["u"][0], odd.level(0).arrays["u"][1]
    assert not strided.flags.c_contiguous and not strided.flags.f_contiguous and not misaligned.flags.aligned
    out = amrzip.write(odd, tmp_path / "odd", rel=1e-3)
    assert out["stored_bytes"] == ref["stored_bytes"]
    assert_round_trip(h, amrzip.open(tmp_path / "odd"))
    levels[1]["data"]["u"][0] = levels[1]["data"]["u"][0].T
    bad = Hierarchy.from_arrays(levels, prob_lo=h.prob_lo, prob_hi=h.prob_hi)
    shape = h.level(1).box_data("u", 0).shape
    if shape != shape[::-1]:
        with pytest.raises(ValueError, match=r"level 1 field .u. box 0: data of shape \["):
            amrzip.write(bad, tmp_path / "bad", rel=1e-3)
    levels[1]["data"]["u"][0] = levels[1]["data"]["u"][0][:-1]
    with pytest.raises(ValueError, match=r"level 1 field .u. box 0: data of shape \["):
        amrzip.write(Hierarchy.from_arrays(levels, prob_lo=h.prob_lo, prob_hi=h.prob_hi), tmp_path / "bad2", rel=1e-3)
    assert not (tmp_path / "bad2").exists() or not list((tmp_path / "bad2").glob("*.zarr.zip"))


def test_box_arrays_that_are_views_of_one_buffer_are_taken_as_they_are(tmp_path):
    # As a memory-mapped plotfile gives them: every box of a (level, field) a view of one buffer.
    h = two_level()
    ref = amrzip.write(h, tmp_path / "ref", rel=1e-3)
    levels, buffers = [], []
    for lev in h.levels:
        data = {}
        for f in h.fields:
            boxes = [np.asarray(lev.box_data(f, i)) for i in range(lev.num_boxes)]
            buf = np.empty(sum(b.size for b in boxes))
            views, at = [], 0
            for b in boxes:
                view = buf[at:at + b.size].reshape(b.shape, order="F")
                view[...] = b
                views.append(view)
                at += b.size
            assert all(v.base is buf for v in views)
            data[f] = views
            buffers.append((buf, buf.copy()))
        levels.append({"boxes": lev.boxes, "data": data, "ref_ratio": lev.ref_ratios, "domain": lev.domain})
    viewed = Hierarchy.from_arrays(levels, prob_lo=h.prob_lo, prob_hi=h.prob_hi, time=h.time, step=h.step)
    out = amrzip.write(viewed, tmp_path / "views", rel=1e-3, threads=2)
    assert out["stored_bytes"] == ref["stored_bytes"]
    assert_round_trip(h, amrzip.open(tmp_path / "views"))
    assert all(np.array_equal(buf, before) for buf, before in buffers)


def test_memory_mapped_plotfile_boxes_write_as_in_memory(tmp_path):
    # A plotfile's boxes are views into its memory-mapped FAB files, most of them misaligned
    # (each FAB's values follow a text header): the writer copies those itself.
    from amrzip.formats.plotfile import write_plotfile

    h = two_level(n=16)
    write_plotfile(h, tmp_path / "plt")
    mapped = amrzip.read(tmp_path / "plt")
    arrays = [a for L in range(mapped.num_levels) for f in mapped.fields for a in mapped.level(L).field_data(f)]
    assert any(not a.flags.aligned for a in arrays)
    # The same hierarchy (and source) with every box copied to aligned memory.
    copies = {(L, f): [np.array(a) for a in mapped.level(L).field_data(f)] for L in range(mapped.num_levels) for f in mapped.fields}
    levels = [dataclasses.replace(lev, loader=lambda f, i, L=L: copies[(L, f)][i], raw_loader=None) for L, lev in enumerate(mapped.levels)]
    ref = amrzip.write(dataclasses.replace(mapped, levels=levels), tmp_path / "ref", rel=1e-3, threads=1)
    assert all(lev.raw_loader is not None for lev in mapped.levels)  # the writer takes the FABs in place
    for threads in (1, 2):
        out = amrzip.write(mapped, tmp_path / f"mapped{threads}", rel=1e-3, threads=threads)
        assert out["stored_bytes"] == ref["stored_bytes"]
        assert_round_trip(h, amrzip.open(tmp_path / f"mapped{threads}"))


def test_boxes_given_in_buffers_are_checked_before_use(tmp_path):
    # A reader may give where every box's values sit (Level.raw_loader) instead of arrays.
    h = two_level(fields=("rho",))
    ref = amrzip.write(h, tmp_path / "ref", rel=1e-3)

    def in_buffers(lev, tamper=None, pad=3, ghost=0, dtype="=f8"):
        boxes = [np.pad(np.asfortranarray(lev.box_data("rho", i)), ghost, constant_values=np.nan).astype(dtype) for i in range(lev.num_boxes)]
        buf = np.concatenate([np.zeros(pad, np.uint8)] + [b.ravel(order="F").view(np.uint8) for b in boxes])
        offsets = pad + np.cumsum([0] + [b.nbytes for b in boxes[:-1]])
        raw = [[buf], np.zeros(len(boxes), np.int64), np.asarray(offsets, np.int64), np.dtype(dtype), "F", (ghost,) * 3]
        if tamper:
            tamper(raw)
        return dataclasses.replace(lev, raw_loader=lambda f: tuple(raw))

    def write(tamper=None, name="buf", pad=3, ghost=0, dtype="=f8"):
        levels = [in_buffers(lev, tamper if L == 1 else None, pad, ghost, dtype) for L, lev in enumerate(h.levels)]
        return amrzip.write(dataclasses.replace(h, levels=levels), tmp_path / name, rel=1e-3, threads=2)

    # Misaligned values (copied) and aligned ones (taken in place), with NaN ghost cells around
    # the boxes or none (they are never read), in either byte order (the other one copied).
    swapped = ">f8" if np.little_endian else "<f8"
    for pad, ghost, dtype in ((3, 0, "=f8"), (16, 0, "=f8"), (3, 2, "=f8"), (16, 1, "=f8"), (16, 0, swapped), (5, 1, swapped)):
        name = f"buf{pad}-{ghost}-{dtype[0]}"
        out = write(name=name, pad=pad, ghost=ghost, dtype=dtype)
        assert out["stored_bytes"] == ref["stored_bytes"]
        assert_round_trip(h, amrzip.open(tmp_path / name))

    def past_end(raw):
        raw[2] = raw[2] + raw[0][0].size

    bad = {
        "past the end": (past_end, r"level 1 field .rho.: box 0: \d+ values from byte \d+ do not fit in buffer 0"),
        "no such buffer": (lambda raw: raw[1].__setitem__(0, 1), r"level 1 field .rho.: box 0: buffer 1, of 1"),
        "negative offset": (lambda raw: raw[2].__setitem__(0, -8), r"box 0: \d+ values from byte -8 do not fit"),
        "too few offsets": (lambda raw: raw.__setitem__(2, raw[2][:0]), r"1 buffer numbers and 0 offsets for 1 boxes"),
        "not bytes": (lambda raw: raw.__setitem__(0, [np.zeros(raw[0][0].size, np.float32)]), r"buffer 0 is not a contiguous 1-D uint8 array"),
        "bad order": (lambda raw: raw.__setitem__(4, "K"), r"order .K., not .F. or .C."),
        "ghost widths of 2-d boxes": (lambda raw: raw.__setitem__(5, (0, 0)), r"ghost widths \[0, 0\] for a 3-dimensional box"),
        "ghost cells past the end": (lambda raw: raw.__setitem__(5, (1, 1, 1)), r"box 0: \d+ values from byte \d+ do not fit in buffer 0"),
        "negative ghost": (lambda raw: raw.__setitem__(5, (-1, 0, 0)), r"order, ghost widths"),
    }
    for k, (tamper, message) in enumerate(bad.values()):
        with pytest.raises(ValueError, match=message):
            write(tamper, name=f"bad{k}")


def test_snapshots_are_atomic_and_never_overwritten(tmp_path):
    h = two_level()
    store = tmp_path / "s"
    amrzip.write(h, store, rel=1e-3, snapshot="first")
    before = snapshot_file(store, "first").read_bytes()
    with pytest.raises(FileExistsError):
        amrzip.write(h, store, rel=1e-3, snapshot="first")

    def interrupt(msg):
        if "level 1" in msg:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        amrzip.write(h, store, rel=1e-3, snapshot="second", progress=interrupt)
    assert snapshots(store) == ["first"]
    assert not [p for p in store.iterdir() if p.name.startswith(".writing")]
    assert snapshot_file(store, "first").read_bytes() == before
    amrzip.write(h, store, rel=1e-2, snapshot="second")
    assert snapshots(store) == ["first", "second"]
    assert amrzip.open(store).name == "second"
    assert amrzip.open(store, snapshot="first").bounds["rho"]["value"] == 1e-3
    # A writer's temporary file, whole but never given its name, is not a snapshot.
    shutil.copy(snapshot_file(store, "second"), store / ".writing-third-0123456789abcdef.zarr.zip")
    assert snapshots(store) == ["first", "second"]
    with pytest.raises(KeyError):
        amrzip.open(store, snapshot="third")


def test_damage_is_reported_with_the_file(tmp_path):
    h = two_level(fields=("rho",))
    store = tmp_path / "s"
    amrzip.write(h, store, rel=1e-3, snapshot="x")
    path = snapshot_file(store, "x")
    original = path.read_bytes()
    shard = "level_0/c/0/0/0/0"
    data = bytearray(read_entry(path, shard))
    data[len(data) // 3] ^= 0x10
    rewrite_entry(path, shard, bytes(data))
    with pytest.raises(amrzip.CorruptStreamError, match="level 0"):
        amrzip.open(store).read("rho", level=0)
    rewrite_entry(path, shard, bytes(data[:100]))
    with pytest.raises(amrzip.CorruptStreamError, match="level_0"):
        amrzip.open(store).read("rho", level=0)
    path.write_bytes(original)
    doc = json.loads(read_entry(path, "zarr.json"))
    doc["attributes"]["amrzip"]["levels"][0]["domain"] = [[0, 0, 0], [3, 3, 3]]
    rewrite_entry(path, "zarr.json", json.dumps(doc).encode())
    with pytest.raises(StoreError, match="outside the domain"):
        amrzip.open(store)
    rewrite_entry(path, "zarr.json", b"{")
    with pytest.raises(StoreError, match="zarr.json"):
        amrzip.open(store)
    with pytest.raises(StoreError, match="not an amrzip store"):
        amrzip.open(tmp_path)


def test_region_reads_touch_only_their_chunks(tmp_path):
    n = 64
    boxes = [((i, j, k), (i + 15, j + 15, k + 15)) for i in range(0, n, 16) for j in range(0, n, 16) for k in range(0, n, 16)]
    h = two_level(n=n, coarse_boxes=boxes, fine_boxes=[((32, 32, 32), (63, 63, 63))], fields=("rho",))
    amrzip.write(h, tmp_path / "s", rel=1e-4, chunk=16)
    ds = amrzip.open(tmp_path / "s")
    stored = ds.array_info(0, "rho")["stats"]["stored_bytes"]
    ds.bytes_read = 0
    box = ds.level(0).boxes[5]
    part = ds.read("rho", region=box, level=0, covered="nan")
    assert ds.bytes_read < 0.1 * stored, (ds.bytes_read, stored)
    np.testing.assert_allclose(part, h.level(0).box_data("rho", 5), atol=ds.bounds["rho"]["abs"])
    with pytest.raises(ValueError, match="region"):
        ds.read("rho", region=((0, 0), (1, 1)), level=0)
    with pytest.raises(KeyError):
        ds.read("nope", level=0)
    with pytest.raises(IndexError):
        ds.level(5)


def test_iterating_a_level_reads_what_indexing_reads(tmp_path):
    # Iteration decodes the level's chunks (and the finer level's) in batches first, and coarse
    # reads rebuild covered cells from cached averaged-down chunks: the values must not change.
    from amrzip.amr.synthetic import nyx_like

    h = nyx_like(n=48, max_grid_size=16)
    amrzip.write(h, tmp_path / "s", rel=1e-3)
    batched, one_by_one = amrzip.open(tmp_path / "s"), amrzip.open(tmp_path / "s")
    for f in ("density", "temp"):
        for L in range(h.num_levels):
            view = one_by_one.level(L).field(f)
            for i, arr in enumerate(batched.level(L).field(f)):
                alone = amrzip.open(tmp_path / "s").read(f, region=view.boxes[i], level=L)
                np.testing.assert_array_equal(arr, alone)
                np.testing.assert_array_equal(view[i], alone)


def test_reads_on_any_number_of_threads_give_the_same_values(tmp_path):
    from amrzip.amr.synthetic import nyx_like

    h = nyx_like(n=48, max_grid_size=16)
    amrzip.write(h, tmp_path / "s", rel=1e-3)
    default = amrzip.open(tmp_path / "s")
    for threads in (1, 3):
        ds = amrzip.open(tmp_path / "s", threads=threads)
        for L in range(h.num_levels):
            for a, b in zip(ds.level(L).field("density"), default.level(L).field("density")):
                np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(amrzip.Dataset(default.path, threads=1).to_uniform("temp", level=1),
                                  default.to_uniform("temp", level=1))
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="threads= must be a positive integer"):
            amrzip.open(tmp_path / "s", threads=bad)


def test_coarse_region_reads_rebuild_only_their_covered_cells(tmp_path):
    # A small coarse region under the finer level reads its own chunks and the fine chunks
    # under it: no more than reading both levels' regions with covered="nan".
    n = 64
    boxes = [((i, j, k), (i + 15, j + 15, k + 15)) for i in range(0, n, 16) for j in range(0, n, 16) for k in range(0, n, 16)]
    h = two_level(n=n, coarse_boxes=boxes, fine_boxes=[((0, 0, 0), (63, 63, 63))], fields=("rho",))
    amrzip.write(h, tmp_path / "s", rel=1e-4, unit=8, chunk=16)
    # Inside one coarse chunk (16..31), whose covered cells lie over 8 fine chunks; the
    # region's own lie over one.
    region = ((20, 20, 20), (23, 23, 23))
    reads = []
    for level, box, covered in [(0, region, "nan"), (1, ((40, 40, 40), (47, 47, 47)), "nan"), (0, region, "average")]:
        ds = amrzip.open(tmp_path / "s")
        ds.read("rho", region=box, level=level, covered=covered)
        reads.append(ds.bytes_read)
    assert reads[2] <= reads[0] + reads[1], reads


def test_to_uniform_paints_fine_over_coarse(tmp_path):
    h = two_level(dim=2, fields=("rho",), coarse_boxes=[((0, 0), (31, 15)), ((0, 16), (31, 31))])
    amrzip.write(h, tmp_path / "s", rel=1e-5)
    ds = amrzip.open(tmp_path / "s")
    u = ds.to_uniform("rho")
    assert u.shape == (64, 64) and not np.isnan(u).any()
    eb = ds.bounds["rho"]["abs"]
    (lo, hi), fine = h.level(1).boxes[0], h.level(1).box_data("rho", 0)
    assert np.abs(u[lo[0] : hi[0] + 1, lo[1] : hi[1] + 1] - fine).max() <= eb
    coarse = ds.to_uniform("rho", level=0)
    assert coarse.shape == (32, 32)


def test_ablations_round_trip(tmp_path):
    h = two_level(fields=("rho",))
    for k, opts in enumerate([{"sle": False}, {"adaptive_block": False}, {"mode": "speed"}, {"predictor": "regression"}]):
        amrzip.write(h, tmp_path / f"s{k}", rel=1e-3, **opts)
        assert_round_trip(h, amrzip.open(tmp_path / f"s{k}"))


@pytest.mark.parametrize("mode", ["ratio", "speed"])
@pytest.mark.parametrize("predictor", PREDICTORS)
def test_every_forced_predictor_round_trips_with_partial_blocks(tmp_path, predictor, mode):
    # Dual quantization codes whole blocks only: a chunk of mostly whole blocks then mixes it
    # with the Lorenzo of its partial block, which must keep its own (empty) settings.
    coarse = [((0, 0, 0), (31, 31, 31))]
    fine = [((18, 18, 18), (29, 29, 29))]
    h = two_level(n=32, coarse_boxes=coarse, fine_boxes=fine, fields=("rho",))
    amrzip.write(h, tmp_path / "s", rel=1e-3, unit=8, chunk=32, mode=mode, predictor=predictor)
    ds = amrzip.open(tmp_path / "s")
    assert ds.array_info(0, "rho")["stats"]["partial_blocks"] > 0
    assert_round_trip(h, ds)


@pytest.mark.parametrize("chunk, share", [(16, 0.1), (None, 1 / 3)])
def test_box_reads_touch_a_small_share_of_their_array(tmp_path, chunk, share):
    # The synthetic 3-level Nyx-like hierarchy (boxes of at most 16 cells): with box-sized chunks
    # reading any one box of any level reads less than 10% of the bytes stored for that (level,
    # field), its metadata included. The writer's default takes 32-cell chunks where they code
    # smaller; a box then lies in one to eight of them, and the largest chunk of the 48^3 base
    # level holds 30% of its cells.
    from amrzip.amr.synthetic import nyx_like

    h = nyx_like(n=48, max_grid_size=16)
    h.fields = ["density"]
    for lev in h.levels:
        lev.fields = ["density"]
    amrzip.write(h, tmp_path / "s", rel=1e-4, chunk=chunk)
    ds = amrzip.open(tmp_path / "s")
    for L in range(ds.num_levels):
        total = ds.array_info(L, "density")["stats"]["stored_bytes"] + len(read_entry(ds.path, f"level_{L}/zarr.json"))
        for box in ds.level(L).boxes:
            fresh = amrzip.open(tmp_path / "s")
            fresh.read("density", region=box, level=L, covered="nan")
            assert fresh.bytes_read < share * total, (L, box, fresh.bytes_read, total)


def _mutations(doc, path=()):
    """Every (path, hostile value) for the JSON tree ``doc``: wrong types, out-of-range and
    huge numbers, empty containers."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _mutations(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from _mutations(v, path + (i,))
        yield path, []
    for bad in (None, "x", -1, 10**12, 1e308, [1, 2], {}):
        yield path, bad


def _set(doc, path, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


@pytest.mark.parametrize("which", ["snapshot", "array"])
def test_hostile_metadata_fails_cleanly(tmp_path, which):
    # Every field of the snapshot's and an array's zarr.json replaced by a hostile value: opening
    # and reading either works or raises a clear error (StoreError, ValueError, KeyError,
    # IndexError) -- never another exception, a crash or a hang.
    h = two_level(dim=2, n=16, fields=("rho",))
    amrzip.write(h, tmp_path / "s", rel=1e-3, snapshot="x")
    snap = snapshot_file(tmp_path / "s", "x")
    entry = "zarr.json" if which == "snapshot" else "level_0/zarr.json"
    original = json.loads(read_entry(snap, entry))
    seen = 0
    for path, value in _mutations(original):
        if not path:
            continue
        doc = json.loads(json.dumps(original))
        _set(doc, path, value)
        rewrite_entry(snap, entry, json.dumps(doc).encode())
        try:
            ds = amrzip.open(tmp_path / "s")
            for L in range(ds.num_levels):
                ds.read("rho", level=L)
        except (StoreError, ValueError, KeyError, IndexError):
            pass
        seen += 1
    rewrite_entry(snap, entry, json.dumps(original).encode())
    assert seen > 50
    assert_round_trip(h, amrzip.open(tmp_path / "s"))


def test_edge_hierarchies(tmp_path):
    # An empty finest level, a 1-D hierarchy, a lossless constant float32 field, an all-zero field.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16))
    empty = Hierarchy.from_arrays(
        [{"boxes": [((0, 0), (15, 15))], "data": {"f": [a]}, "ref_ratio": 2}, {"boxes": [], "data": {"f": []}}],
        prob_lo=(0, 0), prob_hi=(1, 1),
    )
    amrzip.write(empty, tmp_path / "empty", rel=1e-3)
    ds = amrzip.open(tmp_path / "empty")
    assert ds.level(1).boxes == [] and np.isnan(ds.read("f", level=1)).all()
    assert_round_trip(empty, ds)

    b = np.sin(np.linspace(0, 10, 100))
    line = Hierarchy.from_arrays(
        [{"boxes": [((0,), (99,))], "data": {"g": [b]}, "ref_ratio": 2}, {"boxes": [((50,), (99,))], "data": {"g": [np.repeat(b[25:50], 2)]}}],
        prob_lo=(0,), prob_hi=(1,),
    )
    amrzip.write(line, tmp_path / "line", abs=1e-4)
    assert_round_trip(line, amrzip.open(tmp_path / "line"))

    for name, values, bound in (("const", np.full((8, 8, 8), 3.25, np.float32), {"abs": 0}), ("zeros", np.zeros((8, 8, 8)), {"rel": 1e-3})):
        h = Hierarchy.from_arrays([{"boxes": [((0, 0, 0), (7, 7, 7))], "data": {"c": [values]}}], prob_lo=(0, 0, 0), prob_hi=(1, 1, 1))
        amrzip.write(h, tmp_path / name, **bound)
        np.testing.assert_array_equal(amrzip.open(tmp_path / name).level(0).field("c")[0], values)


def test_node_centred_hierarchy_round_trip(tmp_path):
    """Node data: every stored node within the bound, covered coarse nodes rebuilt from the fine
    node on them, the level arrays one index longer than the cells, composites on the fine nodes."""
    # Rough, but a function of the node's position: boxes sharing a face agree on it.
    f = lambda x, y, z: np.sin(3 * x) * np.cos(2 * y) + z + 1e-3 * np.sin(1e4 * x * y + 7e3 * z)  # noqa: E731

    def nodes(box, n):  # values of f on the nodes of box, n cells across the domain
        return f(*np.meshgrid(*[np.arange(l, h + 1) / n for l, h in zip(*box)], indexing="ij"))

    boxes0 = [((0, 0, 0), (16, 16, 8)), ((0, 0, 8), (16, 16, 16))]  # they share the nodes k = 8
    boxes1 = [((8, 8, 8), (24, 24, 24))]
    lv0 = {"boxes": boxes0, "ref_ratio": 2, "data": {"u": [nodes(b, 16) for b in boxes0]}}
    lv1 = {"boxes": boxes1, "data": {"u": [nodes(b, 32) for b in boxes1]}}
    h = Hierarchy.from_arrays([lv0, lv1], prob_lo=(0.0,) * 3, prob_hi=(1.0,) * 3, node=(True,) * 3)
    amrzip.write(h, tmp_path / "s", abs=1e-4)
    ds = amrzip.open(tmp_path / "s")
    assert ds.nodal == (True,) * 3 and ds.level(0).index_space == ((0, 0, 0), (16, 16, 16))
    fine = h.level(1).box_data("u", 0)
    for i, box in enumerate(boxes0):
        got = ds.read("u", region=box, level=0)
        want = np.array(h.level(0).box_data("u", i))
        covered = h.covered_mask(0, i)
        assert covered.sum() == 9 * 9 * 5
        # A covered coarse node c is the fine node at 2c (the fine box starts at node 8).
        for idx in np.argwhere(covered):
            want[tuple(idx)] = fine[tuple(2 * (idx + box[0]) - 8)]
        assert np.abs(got - want).max() <= 1e-4
    assert np.abs(ds.read("u", region=boxes1[0], level=1) - fine).max() <= 1e-4
    u = ds.to_uniform("u")
    assert u.shape == (33, 33, 33) and not np.isnan(u).any()
    assert np.abs(u[8:25, 8:25, 8:25] - fine).max() <= 1e-4
    assert amrzip.open(tmp_path / "s").to_hierarchy().nodal == (True,) * 3
    assert_hierarchy_reads_like_boxes(amrzip.open(tmp_path / "s"))
    doc = json.loads(read_entry(ds.path, "zarr.json"))
    assert doc["attributes"]["amrzip"]["node"] == [True] * 3
    for bad in ("x", [True], [1, 0, 0]):
        doc["attributes"]["amrzip"]["node"] = bad
        rewrite_entry(ds.path, "zarr.json", json.dumps(doc).encode())
        with pytest.raises(StoreError, match="node flags"):
            amrzip.open(tmp_path / "s")


# A store written before block sets were range-coded: Huffman-coded sets (version 1), fitted
# blocks of unit 16 over boxes of 8 that chose their stencils by position (predictor 4), every
# fitted weight stored ('W'). Made with nyx_like(n=16, levels=2, max_grid_size=8,
# blocking_factor=8), density only, rel=1e-5, unit=16; the digest is of what that version
# decoded (every box of every level, float64, in order).
LEGACY_STORE = Path(__file__).parent / "fixtures" / "store_before_range_coding"
LEGACY_DIGEST = "c5f4f3ccbcc8ec69bfc984e858f759af4223f71caae6a9adc31bdd93e0a4a8df"


def test_stores_written_before_range_coding_read_as_they_did():
    import base64
    import hashlib

    fitted = json.loads((LEGACY_STORE / "step_000000" / "level_1" / "density" / "zarr.json").read_text())["codecs"][0]["configuration"]
    assert fitted["predictor"] == "fitted" and b"W" in base64.b64decode(fitted["codebooks"][0])
    assert all(p.read_bytes()[2] == 1 for p in LEGACY_STORE.glob("step_000000/level_*/density/c/*/*/*"))
    h = amrzip.open(LEGACY_STORE).to_hierarchy()
    digest = hashlib.sha256()
    for L in range(h.num_levels):
        for i in range(h.level(L).num_boxes):
            digest.update(np.ascontiguousarray(h.level(L).box_data("density", i), dtype=np.float64).tobytes())
    assert digest.hexdigest() == LEGACY_DIGEST
