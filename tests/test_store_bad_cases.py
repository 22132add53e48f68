"""Every bad case users reported against the store, each either working now or refused with an
error naming what is wrong (one `amrzip: error:` line and exit status 1 from the command line),
never NaN or other wrong values with success.

Damage is done the way it happens: a chunk or shard gone from a snapshot file, chunks or index
entries swapped, a level array's chunk shape edited, a snapshot's box positions or domain
replaced by another snapshot's, a byte of metadata flipped on disk, a version-1 root listing a
name outside its store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip.amr import Hierarchy
from amrzip.store import StoreError
from store_files import (
    chunk_position,
    decoded_digest,
    join_shard,
    patch_entry,
    read_entry,
    read_entry_raw,
    remove_entry,
    rewrite_entry,
    seeded_hierarchy,
    shard_slots,
    shared_file,
    snapshot_file,
    split_shard,
    temporaries,
)
from test_cli_amr import check_within_bound, error, run
from test_store import LEGACY_STORE

BOUND = 1e-3


@pytest.fixture(scope="module", params=["synthetic", "advection_2d_4levels"])
def pristine(request, tmp_path_factory) -> tuple[Path, object]:
    """A store of one snapshot "s" and the hierarchy it holds: a synthetic 3-D one cut in many
    small chunks, and the real 2-D advection run."""
    store = tmp_path_factory.mktemp("pristine") / "store"
    if request.param == "synthetic":
        h = seeded_hierarchy(5, n=32)
        amrzip.write(h, store, abs=BOUND, snapshot="s", chunk=8)
    else:
        h = amrzip.read(shared_file(f"amrex/{request.param}"))
        amrzip.write(h, store, abs=BOUND, snapshot="s")
    return store, h


@pytest.fixture
def store(pristine, tmp_path) -> Path:
    """A copy of the pristine store, to damage."""
    copy = tmp_path / "store"
    shutil.copytree(pristine[0], copy)
    return copy


def _file(store: Path) -> Path:
    """Snapshot "s"'s file (found by name: opening it may be what fails)."""
    return store / "s.zarr.zip"


def _read_everything(store: Path) -> list:
    """Every field of every level over its whole index space, covered cells rebuilt."""
    ds = amrzip.open(store)
    return [ds.read(f, level=L) for f in ds.fields for L in range(ds.num_levels)]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


def _damaged(capsys, store: Path, *fragments: str) -> str:
    """`amrzip check` (and --repair, which must change nothing committed) reports the snapshot
    damaged with ``fragments`` in the report; exit status 1. Returns the problem."""
    path = _file(store)
    before = path.read_bytes()
    for args in ([], ["--repair"]):
        r = run(capsys, "check", store, *args)
        assert r.status == 1, r.stdout
        line = next(line for line in r.stdout.splitlines() if line.startswith("s: "))
        assert "DAMAGED" in line, r.stdout
        for fragment in fragments:
            assert fragment in line, (fragment, line)
    assert path.read_bytes() == before and amrzip.store.snapshots(store) == ["s"]
    report = amrzip.check(store)
    assert not report["ok"] and not report["snapshots"][0]["ok"]
    return report["snapshots"][0]["problem"]


def _chunks(path: Path, level: int) -> list:
    """(shard entry, slot, offset, nbytes, position) of every chunk of a level's array."""
    inner, shards = shard_slots(path, level)
    out = []
    for name, data in sorted(shards.items()):
        body, entries = split_shard(data, inner)
        out += [(name, k, o, n, chunk_position(body[o:])) for k, (o, n) in ((k, e) for k, e in enumerate(entries) if e)]
    return out


def _finest_level(store: Path) -> int:
    ds = amrzip.open(store)
    return ds.num_levels - 1


# --- a chunk or a shard deleted -----------------------------------------------------------------


@pytest.mark.parametrize("what", ["chunk", "shard"])
def test_a_deleted_chunk_is_an_error_naming_it(capsys, store, tmp_path, what):
    path = _file(store)
    level = _finest_level(store)
    inner, shards = shard_slots(path, level)
    name, data = sorted(shards.items())[len(shards) // 2]
    body, entries = split_shard(data, inner)
    if what == "chunk":
        # The chunk's bytes cut out, the index left consistent (offsets moved, CRC right): only
        # the boxes tell that the chunk should be there.
        k = next(k for k, e in enumerate(entries) if e)
        offset, nbytes = entries[k]
        entries = [None if j == k else e if e is None or e[0] < offset else (e[0] - nbytes, e[1]) for j, e in enumerate(entries)]
        rewrite_entry(path, name, join_shard(body[:offset] + body[offset + nbytes :], entries))
        field = amrzip.open(store).fields[k // (inner // len(amrzip.open(store).fields))]
    else:
        remove_entry(path, name)
        field = amrzip.open(store).fields[0]
    where = (f"level {level}", f'field "{field}"', "chunk [", "missing")

    r = run(capsys, "extract", store, "--level", level, "--field", field, "-o", tmp_path / "x.npy")
    error(r, 1, str(path), *where)
    assert not (tmp_path / "x.npy").exists()
    with pytest.raises(StoreError, match=rf"level {level} field \"{field}\" chunk \[.*\]: missing"):
        amrzip.open(store).to_uniform(field)
    _damaged(capsys, store, *where)


# --- chunks swapped -----------------------------------------------------------------------------


def test_two_chunks_of_the_same_length_swapped(capsys, store):
    """Two chunks of one level's array with the same length traded places: the offsets stay
    valid, the index and its CRC untouched, only what the chunks say tells them apart."""
    path = _file(store)
    pairs = []
    for level in range(amrzip.open(store).num_levels):
        by_length = {}
        for c in _chunks(path, level):
            by_length.setdefault(c[3], []).append(c)
        pairs += [(level, group[0], group[1]) for group in by_length.values() if len(group) > 1]
    if not pairs:
        pytest.skip("no two chunks of one array have the same length here")
    level, a, b = pairs[0]
    shards = {a[0]: bytearray(read_entry(path, a[0])), b[0]: bytearray(read_entry(path, b[0]))}
    chunk_a, chunk_b = bytes(shards[a[0]][a[2] : a[2] + a[3]]), bytes(shards[b[0]][b[2] : b[2] + b[3]])
    assert chunk_a != chunk_b and a[4] != b[4]
    shards[a[0]][a[2] : a[2] + a[3]] = chunk_b
    shards[b[0]][b[2] : b[2] + b[3]] = chunk_a
    for name, data in shards.items():
        rewrite_entry(path, name, bytes(data))
    with pytest.raises(StoreError, match=rf"level {level} field .* chunk \[.*\]: chunk at position \d+ says it belongs at \d+ \(misplaced\)"):
        _read_everything(store)
    _damaged(capsys, store, "misplaced")


def test_two_index_entries_swapped(capsys, store):
    """Two entries of a shard index traded (its CRC recomputed, so the index itself looks right)."""
    path = _file(store)
    level = _finest_level(store)
    inner, shards = shard_slots(path, level)
    name, data = max(shards.items(), key=lambda kv: sum(e is not None for e in split_shard(kv[1], inner)[1]))
    body, entries = split_shard(data, inner)
    j, k = [i for i, e in enumerate(entries) if e][:2]
    entries[j], entries[k] = entries[k], entries[j]
    rewrite_entry(path, name, join_shard(body, entries))
    with pytest.raises(StoreError, match=rf"level {level} field .*misplaced"):
        _read_everything(store)
    _damaged(capsys, store, "misplaced")


# --- a level array's chunk shape edited -----------------------------------------------------------


def _edit_level_json(path: Path, level: int, edit) -> None:
    doc = json.loads(read_entry(path, f"level_{level}/zarr.json"))
    sharding = doc["codecs"][0]["configuration"]
    edit(doc["chunk_grid"]["configuration"]["chunk_shape"], sharding["chunk_shape"], sharding["codecs"][0]["configuration"]["fields"])
    rewrite_entry(path, f"level_{level}/zarr.json", json.dumps(doc).encode())


def _scale(shape: list, factor) -> None:
    shape[1:] = [int(v * factor) for v in shape[1:]]


CHUNK_EDITS = {
    # (outer shard shape, inner chunk shape, per-field codec) edited in place.
    "inner halved": lambda outer, inner, fields: _scale(inner, 0.5),
    "inner doubled": lambda outer, inner, fields: _scale(inner, 2),
    "shard halved": lambda outer, inner, fields: _scale(outer, 0.5),
    "shard doubled": lambda outer, inner, fields: _scale(outer, 2),
    "both doubled": lambda outer, inner, fields: (_scale(outer, 2), _scale(inner, 2)),
    "one axis doubled": lambda outer, inner, fields: (outer.__setitem__(-1, 2 * outer[-1]), inner.__setitem__(-1, 2 * inner[-1])),
    "unit halved": lambda outer, inner, fields: [f.__setitem__("unit", [u // 2 for u in f["unit"]]) for f in fields],
    "all halved": lambda outer, inner, fields: (
        _scale(outer, 0.5), _scale(inner, 0.5), [f.__setitem__("unit", [u // 2 for u in f["unit"]]) for f in fields]
    ),
}


@pytest.mark.parametrize("edit", list(CHUNK_EDITS))
def test_an_edited_chunk_shape_is_an_error(capsys, store, edit):
    path = _file(store)
    level = _finest_level(store)
    _edit_level_json(path, level, CHUNK_EDITS[edit])
    with pytest.raises(StoreError, match=rf"level.{level}"):
        _read_everything(store)
    _damaged(capsys, store, "level")


# --- box positions and domains replaced -----------------------------------------------------------


def _moved(h: Hierarchy, level: int, box: int, shift) -> Hierarchy:
    """``h`` with one box of one level replaced by ``shift(lo, hi)`` (its data resized)."""
    levels = []
    for L, lev in enumerate(h.levels):
        boxes = list(lev.boxes)
        if L == level:
            lo, hi = boxes[box]
            lo2, hi2 = shift(lo, hi)
            boxes[box] = (tuple(lo2), tuple(hi2))
        data = {}
        for f in h.fields:
            data[f] = []
            for i, b in enumerate(boxes):
                shape = tuple(c - a + 1 for a, c in zip(*b))
                data[f].append(np.asfortranarray(np.resize(np.asarray(lev.box_data(f, i)), shape)))
        spec = {"boxes": boxes, "data": data}
        if L + 1 < h.num_levels:
            spec["ref_ratio"] = list(lev.ref_ratios)
        if L == 0:
            spec["domain"] = lev.domain
        levels.append(spec)
    return Hierarchy.from_arrays(levels, prob_lo=h.prob_lo, prob_hi=h.prob_hi, time=h.time, step=h.step)


def _transplant(store: Path, other, tmp_path: Path) -> None:
    """Writes hierarchy ``other`` as a snapshot of another store and puts its metadata (boxes,
    domains) into the store's snapshot: chunks of one geometry under metadata of another."""
    donor = tmp_path / "donor"
    ds = amrzip.open(store)
    chunk = amrzip.open(store).array_info(0, ds.fields[0])["chunk"][0]
    amrzip.write(other, donor, abs=BOUND, snapshot="s", chunk=chunk)
    rewrite_entry(_file(store), "zarr.json", read_entry(snapshot_file(donor), "zarr.json"))


def _shift(offset):
    return lambda lo, hi: ([v + offset for v in lo], [v + offset for v in hi])


BOX_EDITS = {
    # (level, the edits to try in turn, given the level's chunk edge): the first that keeps the
    # box inside its domain and nested is used.
    "finest box moved by 1 cell": (-1, lambda c: [_shift(1), _shift(-1)]),
    "finest box moved by a unit block": (-1, lambda c: [_shift(8), _shift(-8)]),
    "finest box moved by 2 chunks": (-1, lambda c: [_shift(2 * c), _shift(-2 * c)]),
    "finest box shrunk": (-1, lambda c: [lambda lo, hi: (list(lo), [v - 2 for v in hi])]),
    "coarse box shrunk": (0, lambda c: [lambda lo, hi: (list(lo), [v - 1 for v in hi])]),
}


@pytest.mark.parametrize("edit", list(BOX_EDITS))
def test_edited_box_positions_are_an_error(capsys, pristine, store, tmp_path, edit):
    _, h = pristine
    level, shifts = BOX_EDITS[edit]
    level %= h.num_levels
    chunk = amrzip.open(store).array_info(level, h.fields[0])["chunk"][0]
    n = h.level(level).num_boxes
    refused = []
    for box, shift in ((b, s) for b in [n // 2, *range(n)] for s in shifts(chunk)):
        try:
            _transplant(store, _moved(h, level, box, shift), tmp_path)
            break
        except (ValueError, StoreError) as e:  # the moved box leaves the domain or its level
            refused.append(str(e))
            shutil.rmtree(tmp_path / "donor", ignore_errors=True)
    else:
        pytest.skip(f"no box of level {level} can be moved so: {refused[:2]}")
    with pytest.raises(StoreError, match=r"level \d field .* chunk \[.*\]: (missing|unit block|holds \d+ unit blocks)"):
        _read_everything(store)
    _damaged(capsys, store, "chunk [")


def test_edited_domain_is_an_error(capsys, pristine, store, tmp_path):
    _, h = pristine
    path = _file(store)
    doc = json.loads(read_entry(path, "zarr.json"))
    # A domain grown by a transplant (every level's, consistently): the arrays do not span it.
    bigger = _moved(h, 0, 0, lambda lo, hi: (lo, hi))
    lo, hi = bigger.level(0).domain
    bigger.levels[0].domain = (lo, tuple(v + 16 for v in hi))
    for L in range(1, bigger.num_levels):
        coarse = bigger.levels[L - 1]
        bigger.levels[L].domain = (
            tuple(a * r for a, r in zip(coarse.domain[0], coarse.ref_ratios)),
            tuple((b + 1) * r - 1 for b, r in zip(coarse.domain[1], coarse.ref_ratios)),
        )
    _transplant(store, bigger, tmp_path)
    with pytest.raises(StoreError, match=r"level_0/zarr.json: shape .* differs from the level's fields and index space"):
        amrzip.open(store).read(h.fields[0], level=0)
    _damaged(capsys, store, "level_0/zarr.json", "shape")
    # The domain edited by hand so that the boxes leave it: refused on opening.
    for edit in ([[1] * h.dim, doc["attributes"]["amrzip"]["levels"][0]["domain"][1]], [[0] * h.dim, [3] * h.dim]):
        d = json.loads(json.dumps(doc))
        d["attributes"]["amrzip"]["levels"][0]["domain"] = edit
        rewrite_entry(path, "zarr.json", json.dumps(d).encode())
        with pytest.raises(StoreError, match="outside the domain|not level 0's refined"):
            amrzip.open(store)
        error(run(capsys, "inspect", store), 1, str(path), "zarr.json")


def test_boxes_regrouped_over_the_same_cells_read_the_same(pristine, store, tmp_path):
    """Not damage: metadata whose boxes cover exactly the same cells (the boundary between two
    boxes moved) reads the same values, cell for cell."""
    _, h = pristine
    if h.level(0).num_boxes < 2 or h.dim != 3:
        pytest.skip("needs the synthetic hierarchy's two coarse boxes side by side")
    before = _read_everything(store)
    (lo0, hi0), (lo1, hi1) = h.level(0).boxes
    other = _moved(h, 0, 0, lambda lo, hi: (lo, [hi[0] + 2, *hi[1:]]))
    other = _moved(other, 0, 1, lambda lo, hi: ([lo[0] + 2, *lo[1:]], hi))
    _transplant(store, other, tmp_path)
    assert _same(_read_everything(store), before)
    assert amrzip.check(store)["ok"]


# --- metadata damaged on disk ---------------------------------------------------------------------


@pytest.mark.parametrize("entry, key", [("zarr.json", b'"time":'), ("level_0/zarr.json", b'"eb":')])
def test_a_flipped_metadata_byte_is_reported(capsys, store, entry, key):
    """A digit of a number in a JSON entry changed on disk (the zip's CRC left as written): still
    valid JSON, a silently different number, caught by the CRC."""
    path = _file(store)
    data = read_entry(path, entry)
    at = data.index(key) + len(key)
    at += next(i for i, c in enumerate(data[at:]) if chr(c).isdigit())
    patch_entry(path, entry, at, bytes([ord("7") if data[at] != ord("7") else ord("3")]))
    json.loads(read_entry_raw(path, entry))  # still JSON
    if entry == "zarr.json":
        with pytest.raises(StoreError, match="zarr.json is damaged"):
            amrzip.open(store)
        error(run(capsys, "inspect", store), 1, "zarr.json is damaged (CRC-32 mismatch)")
    else:
        with pytest.raises(StoreError, match="level_0/zarr.json is damaged"):
            amrzip.open(store).read(amrzip.open(store).fields[0], level=0)
    _damaged(capsys, store, entry, "CRC-32 mismatch")


@pytest.mark.parametrize(
    "dtypes",
    [{"x": "int8"}, "float64", ["float64"], {}, {"x": "float64", "extra": "float64"}, {"x": 8}, None],
    ids=["int8", "string", "list", "empty", "extra field", "number", "null"],
)
def test_malformed_dtypes_are_one_line_errors(capsys, store, dtypes):
    path = _file(store)
    doc = json.loads(read_entry(path, "zarr.json"))
    meta = doc["attributes"]["amrzip"]
    if isinstance(dtypes, dict):
        dtypes = {(meta["fields"][0] if k == "x" else k): v for k, v in dtypes.items()}
        dtypes.update({f: "float64" for f in meta["fields"][1:]} if len(dtypes) == 1 else {})
    meta["dtypes"] = dtypes
    rewrite_entry(path, "zarr.json", json.dumps(doc).encode())
    with pytest.raises(StoreError, match="dtype"):
        amrzip.open(store)
    for command in (["inspect"], ["extract", "--level", "0", "--field", meta["fields"][0]]):
        error(run(capsys, *command, store, *(["-o", path.parent / "x.npy"] if command[0] == "extract" else [])), 1, "zarr.json", "dtype")
    _damaged(capsys, store, "dtype")


# --- version-1 stores ------------------------------------------------------------------------------


@pytest.fixture
def legacy(tmp_path) -> Path:
    store = tmp_path / "legacy"
    shutil.copytree(LEGACY_STORE, store)
    return store


@pytest.mark.parametrize("name", ["../outside", "/etc", "a/b", "..", ".", "", "step_000000/../../outside"])
def test_a_root_listing_a_name_outside_the_store_is_refused(capsys, legacy, name):
    # A valid snapshot folder does wait outside: refusing must not depend on it being absent.
    shutil.copytree(legacy / "step_000000", legacy.parent / "outside")
    root = json.loads((legacy / "zarr.json").read_text())
    root["attributes"]["amrzip"]["snapshots"].append(name)
    (legacy / "zarr.json").write_text(json.dumps(root))
    for call in (amrzip.store.snapshots, amrzip.open, amrzip.check):
        with pytest.raises(StoreError, match="snapshot list"):
            call(legacy)
    for command in (["inspect"], ["check"], ["check", "--repair"]):
        error(run(capsys, *command, legacy), 1, "zarr.json", "snapshot list")
    assert (legacy.parent / "outside" / "zarr.json").exists()


def test_version_1_orphan_folders_are_reported_and_listed(capsys, legacy):
    """A snapshot folder renamed into place by a writer that died before listing it: check
    reports it, --repair lists it; a folder that holds no snapshot is left alone."""
    shutil.copytree(legacy / "step_000000", legacy / "step_000001")
    (legacy / "notes").mkdir()
    (legacy / "notes" / "zarr.json").write_text("{}")
    assert amrzip.store.snapshots(legacy) == ["step_000000"]
    report = amrzip.check(legacy)
    assert not report["ok"] and report["unlisted"] == [{"name": "step_000001", "action": "list"}]
    r = run(capsys, "check", legacy)
    assert r.status == 1 and "step_000001: committed but not listed" in r.stdout
    r = run(capsys, "check", legacy, "--repair")
    assert r.status == 0 and "step_000001: listed" in r.stdout, r.stdout
    assert amrzip.store.snapshots(legacy) == ["step_000000", "step_000001"]
    assert decoded_digest(legacy, "step_000001") == decoded_digest(legacy, "step_000000")
    assert amrzip.check(legacy)["ok"] and (legacy / "notes").is_dir()


def test_version_1_writing_folders_are_removed_by_repair(capsys, legacy):
    digest = decoded_digest(legacy)
    shutil.copytree(legacy / "step_000000", legacy / ".writing-step_000001-00000000000000aa")
    (legacy / ".writing-step_000002-00000000000000bb").mkdir()
    report = amrzip.check(legacy)
    assert not report["ok"]
    assert sorted(t["action"] for t in report["interrupted"]) == ["remove", "remove"]
    r = run(capsys, "check", legacy, "--repair")
    assert r.status == 0, r.stdout
    assert temporaries(legacy) == [] and amrzip.store.snapshots(legacy) == ["step_000000"]
    assert decoded_digest(legacy) == digest and amrzip.check(legacy)["ok"]


# --- conversions users reported failing -------------------------------------------------------------


@pytest.mark.parametrize("unit", [3, 5, 6, 7, 12])
@pytest.mark.parametrize("source", ["advection_2d_4levels", "warpx_single_level"])
def test_convert_with_any_unit_round_trips(capsys, tmp_path, source, unit):
    plotfile = shared_file(f"amrex/{source}")
    store = tmp_path / "store"
    r = run(capsys, "convert", plotfile, store, "--rel", "1e-4", "--unit", unit, "--snapshot", f"u{unit}")
    assert r.status == 0, r.stderr
    ds = amrzip.open(store)
    assert all(ds.array_info(L, f)["unit"] == [unit] * ds.dim for L in range(ds.num_levels) for f in ds.fields)
    check_within_bound(amrzip.read(plotfile), ds)
    assert amrzip.check(store)["ok"]
