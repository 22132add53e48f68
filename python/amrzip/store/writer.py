"""Writes a hierarchy as a snapshot of the store, AMRIC-style: covered coarse cells are left
out, each (level, field) is cut into unit blocks that are predicted one by one and entropy-coded
with statistics shared by all of them, fields are compressed on their own with their own bound.

A snapshot is written into a hidden folder beside the others, renamed into place when complete,
and only then listed in the store's root metadata: an interrupted write leaves a store whose
committed snapshots are intact and that does not list the unfinished one.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from amrzip import _core
from amrzip.codec import _bound as codec_bound
from amrzip.amr.hierarchy import Hierarchy, box_shape
from amrzip.store import layout
from amrzip.store.conservation import conserve

def _bound_of(spec, where: str) -> tuple[str, float]:
    if isinstance(spec, dict) and len(spec) == 1:
        ((mode, value),) = spec.items()
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        mode, value = spec
    else:
        raise ValueError(f"{where}: give a bound as {{'rel': value}} or {{'abs': value}}, got {spec!r}")
    if mode not in ("rel", "abs"):
        raise ValueError(f"{where}: bound mode must be 'rel' or 'abs', got {mode!r}")
    try:
        return codec_bound(**{mode: value})
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def field_bounds(fields, rel=None, abs=None, bounds=None) -> dict:
    """(mode, value) per field from ``rel=``/``abs=`` (all fields) and ``bounds=`` (per field)."""
    if rel is not None and abs is not None:
        raise ValueError("give rel= or abs=, not both")
    default = None if rel is None and abs is None else _bound_of({"rel": rel} if rel is not None else {"abs": abs}, "bound")
    bounds = dict(bounds or {})
    unknown = set(bounds) - set(fields)
    if unknown:
        raise ValueError(f"bounds= names fields the hierarchy does not have: {', '.join(sorted(unknown))}")
    out = {}
    for f in fields:
        if f in bounds:
            out[f] = _bound_of(bounds[f], f"bounds[{f!r}]")
        elif default is not None:
            out[f] = default
        else:
            raise ValueError(f"no error bound for field {f!r}: give rel=, abs= or bounds={{{f!r}: ...}}")
    return out


def _native(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The box array as `dtype` in native byte order, C- or Fortran-contiguous (no copy when it is already)."""
    a = np.asarray(a)
    if a.dtype != dtype:
        a = a.astype(dtype)
    # Memory maps of files with text headers can start at any byte: the core needs aligned values.
    if not (a.flags.aligned and (a.flags.c_contiguous or a.flags.f_contiguous)):
        a = np.array(a, order="K" if a.flags.f_contiguous else "C")
    return a


def stored_masks(h: Hierarchy) -> list[list[Optional[np.ndarray]]]:
    """Per level and box: the cells to store (not covered by the next level), None when all are."""
    masks = []
    for L, lev in enumerate(h.levels):
        per_box = []
        for i in range(lev.num_boxes):
            covered = h.covered_mask(L, i) if L + 1 < h.num_levels else None
            per_box.append(None if covered is None or not covered.any() else ~covered)
        masks.append(per_box)
    return masks


def _leaf_range(h: Hierarchy, field: str, masks) -> tuple[float, float]:
    lo, hi = math.inf, -math.inf
    for L, lev in enumerate(h.levels):
        for i in range(lev.num_boxes):
            a = lev.box_data(field, i)
            if masks[L][i] is not None:
                a = a[masks[L][i]]
            a = a[np.isfinite(a)]
            if a.size:
                lo, hi = min(lo, float(a.min())), max(hi, float(a.max()))
    return lo, hi


def _absolute(mode: str, value: float, h: Hierarchy, field: str, masks) -> float:
    if mode == "abs":
        return value
    lo, hi = _leaf_range(h, field, masks)
    # Like the array codec: a hair under the exact product, so float rounding cannot exceed it.
    return 0.0 if lo > hi else value * (hi - lo) * (1 - 4 * np.finfo(np.float64).eps)


def _layouts(h: Hierarchy, L: int, unit, chunk) -> list[tuple[int, int]]:
    """(unit block edge, chunk edge) pairs to try for level ``L``, the local ones first.

    The unit edge is ``unit`` if given, else the blocking factor the boxes honour and the
    larger edges of ``layout.TRIED_UNITS``. The chunk edge is ``chunk`` if given (rounded up to
    a multiple of the unit), else sized like the level's boxes, so that reading a box touches
    about one chunk; a chunk of ``layout.LARGE_CHUNK`` is tried too, for units that need it.
    """
    if unit is not None and (isinstance(unit, bool) or not isinstance(unit, numbers.Integral) or not 2 <= unit <= 256):
        raise ValueError(f"unit= must be an integer from 2 to 256, got {unit!r}")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk < 1):
        raise ValueError(f"chunk= must be a positive integer (cells per side), got {chunk!r}")
    lev = h.level(L)
    # Sizes are judged on the cells the boxes span (node boxes reach one index further).
    boxes = [(lo, tuple(max(l, x - n) for l, x, n in zip(lo, hi, h.nodal))) for lo, hi in lev.boxes]
    first = int(unit) if unit is not None else layout.detect_unit(boxes, lev.domain[0], h.dim)
    units = [first] if unit is not None else [first] + [u for u in layout.TRIED_UNITS if u > first]
    if chunk is not None:
        return [(u, -(-int(chunk) // u) * u) for u in units if u <= max(int(chunk), first)]
    local = max(layout.chunk_edge(boxes, h.dim), first)
    pairs = [(u, local) for u in units if local % u == 0]
    large = max(local, layout.LARGE_CHUNK[h.dim])
    return pairs + [(u, large) for u in units if large > local and large % u == 0]


def _choose(trials: dict, local_edge: int) -> tuple[int, int]:
    """The (unit, chunk) pair of smallest trial size, but chunks larger than the level's boxes
    only when they save more than ``layout.LARGE_CHUNK_GAIN``: a box read then stays local."""
    best = min(trials, key=trials.get)
    local = [p for p in trials if p[1] == local_edge]
    if local and best[1] != local_edge:
        best_local = min(local, key=trials.get)
        if trials[best] > (1 - layout.LARGE_CHUNK_GAIN) * trials[best_local]:
            return best_local
    return best


# A layout is chosen by compressing a sample of the level's boxes of about this many cells
# (on the benchmark hierarchies a quarter million picks as well as a million, in a quarter the time).
TRIAL_CELLS = 1 << 18


# Sample sizes of two units this close (relative) are measured again on all the boxes.
CLOSE_CALL = 0.03
# The sample is this many runs of consecutive boxes: neighbours stay together, as unit blocks
# larger than the boxes gain where boxes meet (a sample of scattered boxes would hide that).
TRIAL_RUNS = 8


def _trial_sample(boxes: list) -> list:
    cells = [a.size for _, _, a, _ in boxes]
    step = max(1, -(-sum(cells) // TRIAL_CELLS))
    if step == 1:
        return boxes
    run = max(1, -(-len(boxes) // (step * TRIAL_RUNS)))
    starts = np.linspace(0, len(boxes) - run, TRIAL_RUNS).astype(int)
    return [boxes[i] for i in sorted({i for s in starts for i in range(s, s + run)})]


def _trials(layouts: list[tuple[int, int]], sizes: Callable[[int, list[int]], list[int]]) -> dict:
    """Trial sizes of ``layouts``; ``sizes(unit, edges)`` measures one unit with several chunk
    edges (predicting each block once). Per chunk edge, units are tried smallest first and
    larger ones only while they keep shrinking the output: the size is unimodal in the unit edge
    on the benchmark hierarchies, and the largest unit's trial walks the most absent cells."""
    result: dict = {}
    previous: dict = {c: None for _, c in layouts}  # per chunk edge still tried: its last size
    for u in sorted({u for u, _ in layouts}):
        edges = [c for v, c in layouts if v == u and c in previous]
        for c, size in zip(edges, sizes(u, edges) if edges else []):
            result[(u, c)] = size
            if previous[c] is not None and size > previous[c]:
                del previous[c]
            else:
                previous[c] = size
    return result


def _size(result: dict) -> int:
    return sum(len(b) for _, b in result["chunks"]) + sum(len(b) for b in result["codebooks"])


def _snapshot_meta(h: Hierarchy, bounds, ebs, dtypes) -> dict:
    levels = []
    for L, lev in enumerate(h.levels):
        levels.append(
            {
                "boxes": [[list(lo), list(hi)] for lo, hi in lev.boxes],
                "owners": [int(o) for o in lev.owners],
                "ref_ratio": [int(r) for r in lev.ref_ratios] if L + 1 < h.num_levels else [1] * h.dim,
                "dx": [float(x) for x in lev.dx],
                "domain": [list(lev.domain[0]), list(lev.domain[1])],
            }
        )
    attrs = json.loads(json.dumps(h.attrs, default=str))  # whatever JSON can keep of the reader's extras
    nodal = {"version": layout.NODAL_SNAPSHOT_VERSION, "node": list(h.nodal)} if any(h.nodal) else {"version": layout.SNAPSHOT_VERSION}
    return {
        **nodal,
        "dim": h.dim,
        "fields": list(h.fields),
        "dtypes": {f: dtypes[f] for f in h.fields},
        "prob_lo": list(h.prob_lo),
        "prob_hi": list(h.prob_hi),
        "coord_sys": int(h.coord_sys),
        "time": float(h.time),
        "step": int(h.step),
        "levels": levels,
        "bounds": {f: {"mode": bounds[f][0], "value": bounds[f][1], "abs": ebs[f]} for f in h.fields},
        "covered_cells": "average-down",
        "source": attrs,
    }


def _write_array(
    array_dir: Path, boxes: list, lev, node, layouts: list, bound: float, dt: np.dtype, conserve_mean: bool, mode: str, options: dict
) -> dict:
    """Compresses one (level, field) given as ``boxes`` into ``array_dir`` (its chunks and
    zarr.json), trying the (unit, chunk) ``layouts`` on a sample first; returns its statistics.
    ``options`` are passed on to the core (threads, predictor, adaptive_block, shared)."""
    dim = len(lev.domain[0])

    def compress(boxes, u, c, eb, measure=False):
        return _core.compress_level(boxes, list(lev.domain[0]), [u] * dim, [c] * dim, eb, mode, measure=measure, **options)

    unit, edge = layouts[0]
    if len(layouts) > 1 and boxes:
        sample = _trial_sample(boxes)

        def sizes(u, edges, among=sample):
            return _core.trial_sizes(among, list(lev.domain[0]), [u] * dim, [[c] * dim for c in edges], bound, mode, **options)

        trials = _trials(layouts, sizes)
        unit, edge = _choose(trials, layouts[0][1])
        # A sample tells layouts apart only to a few percent: a close call between units of the
        # chosen chunk edge is settled on all the boxes.
        rival = min((p for p in trials if p[1] == edge and p != (unit, edge)), key=trials.get, default=None)
        if rival is not None and sample is not boxes and trials[rival] < (1 + CLOSE_CALL) * trials[(unit, edge)]:
            unit = min((unit, rival[0]), key=lambda u: sizes(u, [edge], boxes)[0])
    if conserve_mean:
        result, eb, offset = conserve(lambda eb, measure: compress(boxes, unit, edge, eb, measure), boxes, bound, dt.name)
    else:
        result, eb, offset = compress(boxes, unit, edge, bound), bound, 0.0
    array_dir.mkdir()
    made = set()  # chunk folders already created: one mkdir each, not one per chunk
    for index, data in result["chunks"]:
        target = array_dir / layout.chunk_key(index)
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_bytes(data)
    codec = {
        "unit": [unit] * dim,
        "origin": list(lev.domain[0]),
        "abs_bound": bound,
        "eb": eb,
        "offset": offset,
        "predictor": result["predictor"],
        "codebooks": [layout.encode_bytes(b) for b in result["codebooks"]],
    }
    stats = {
        "stored_cells": result["stored_cells"],
        "blocks": result["blocks"],
        "partial_blocks": result["partial_blocks"],
        "chunks": len(result["chunks"]),
        "original_bytes": sum(a.size for _, _, a, _ in boxes) * dt.itemsize,
        "stored_bytes": _size(result),
    }
    doc = layout.array_doc(box_shape(layout.index_space(lev.domain, node)), [edge] * dim, dt.name, codec, {"amrzip": stats})
    layout.write_json_atomic(array_dir / "zarr.json", doc)
    return stats


def _open_or_create_root(path: Path) -> dict:
    root = path / "zarr.json"
    if root.exists():
        doc = layout.read_json(root)
        meta = layout.dig(doc, "attributes", "amrzip")
        if not isinstance(meta, dict) or meta.get("store_version") != layout.STORE_VERSION:
            raise layout.StoreError(f"{root}: not an amrzip store of version {layout.STORE_VERSION}")
        return doc
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path} exists and is not an amrzip store")
    path.mkdir(parents=True, exist_ok=True)
    doc = layout.group_doc({"amrzip": {"store_version": layout.STORE_VERSION, "snapshots": []}})
    layout.write_json_atomic(root, doc)
    return doc


def write(
    h: Hierarchy,
    path,
    *,
    rel=None,
    abs=None,
    bounds=None,
    snapshot: Optional[str] = None,
    mode: str = "ratio",
    unit=None,
    chunk=None,
    threads=None,
    predictor=None,
    sle: bool = True,
    adaptive_block: bool = True,
    conserve_mean: bool = True,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """Compresses hierarchy ``h`` into the store at ``path`` as snapshot ``snapshot`` (default
    ``step_<step>``); returns a summary with sizes per level and field.

    Bounds: ``rel=`` (a fraction of each field's value range over the cells stored, i.e. those
    no finer level covers) or ``abs=`` for every field, and/or ``bounds={field: {"rel": v} |
    {"abs": v}}`` per field. Every stored cell comes back within its field's bound; covered
    cells are not stored and are rebuilt on read by averaging the finer level down. ``unit``
    is the unit block edge (default: per level and field, the best of the blocking factor the
    boxes honour and larger edges, measured on a sample), ``chunk`` the chunk edge in cells
    (default: like the level's boxes, or 32 in 3-D where that codes more than 25% smaller).
    ``sle``/``adaptive_block`` switch off shared lossless encoding (coder statistics per chunk) and
    AMRIC's regression block rule, for comparison. With ``conserve_mean`` (default) a
    (level, field) whose errors lean one way is coded so that its mean is kept (see
    :mod:`amrzip.store.conservation`).
    """
    if not isinstance(h, Hierarchy):
        raise TypeError(f"write() takes an amrzip.amr.Hierarchy, got {type(h).__name__}")
    if mode not in ("ratio", "speed"):
        raise ValueError(f"mode must be 'ratio' or 'speed', got {mode!r}")
    per_field = field_bounds(h.fields, rel=rel, abs=abs, bounds=bounds)
    name = layout.check_snapshot_name(snapshot if snapshot is not None else f"step_{h.step:06d}")
    path = Path(path)
    root_doc = _open_or_create_root(path)
    committed = root_doc["attributes"]["amrzip"]["snapshots"]
    if name in committed or (path / name).exists():
        raise FileExistsError(f"{path / name}: snapshot {name!r} already exists (snapshots are never overwritten)")
    say = progress or (lambda _msg: None)

    masks = stored_masks(h)
    dtypes = {f: np.dtype(h.dtype(f)).newbyteorder("=") for f in h.fields}
    for f, dt in dtypes.items():
        if dt not in (np.float32, np.float64):
            raise ValueError(f"field {f!r} is {dt}: the store keeps float32 and float64 fields")
    ebs = {f: _absolute(*per_field[f], h, f, masks) for f in h.fields}
    layouts = [_layouts(h, L, unit, chunk) for L in range(h.num_levels)]

    meta = _snapshot_meta(h, per_field, ebs, {f: dtypes[f].name for f in h.fields})
    layout.validate_snapshot(meta, f"hierarchy to write as {path / name}")

    options = dict(threads=threads, predictor=predictor, adaptive_block=adaptive_block, shared=sle)
    tmp = path / f".writing-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    summary = {"snapshot": name, "levels": [], "original_bytes": 0, "stored_bytes": 0}
    try:
        for L, lev in enumerate(h.levels):
            level_dir = tmp / f"level_{L}"
            level_dir.mkdir()
            layout.write_json_atomic(level_dir / "zarr.json", layout.group_doc({}))
            level_summary = {"level": L, "fields": {}}
            for f in h.fields:
                say(f"level {L} field {f}")
                dt = dtypes[f]
                boxes = [(list(lo), list(hi), _native(lev.box_data(f, i), dt), masks[L][i]) for i, (lo, hi) in enumerate(lev.boxes)]
                stats = _write_array(level_dir / layout.field_dir(f), boxes, lev, h.nodal, layouts[L], ebs[f], dt, conserve_mean, mode, options)
                level_summary["fields"][f] = stats
                summary["original_bytes"] += stats["original_bytes"]
                summary["stored_bytes"] += stats["stored_bytes"]
            summary["levels"].append(level_summary)
        layout.write_json_atomic(tmp / "zarr.json", layout.group_doc({"amrzip": meta}))
        os.rename(tmp, path / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # Commit: the snapshot exists only once the root lists it. Re-read the root so that a
    # snapshot committed by another writer meanwhile stays listed.
    root_doc = _open_or_create_root(path)
    root_doc["attributes"]["amrzip"]["snapshots"].append(name)
    layout.write_json_atomic(path / "zarr.json", root_doc)
    summary["ratio"] = summary["original_bytes"] / max(summary["stored_bytes"], 1)
    return summary
