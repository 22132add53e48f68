"""Reading snapshots back: boxes, regions, whole hierarchies and uniform composites.

The reads are the store's Rust core (``_core.Snapshot``): a region read fetches only the chunks
the region touches (``Dataset.bytes_read`` counts what was read), checks each against where it
belongs and what the boxes store there, and decodes each chunk once while it stays in the
snapshot's cache. Covered coarse cells are not stored; reads rebuild them by averaging the finer
level down (``covered="average"``, the default) or leave them NaN (``covered="nan"``).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Optional

import numpy as np

from amrzip import _core
from amrzip.codec import _threads
from amrzip.amr.hierarchy import Box, Hierarchy, Level, LevelGeometry, box_shape

COVERED = ("average", "nan")


def check_snapshot_name(name: str) -> str:
    """``name`` if it can name a snapshot (one path component a user can type), else ValueError."""
    _core.check_snapshot_name(name)
    return name


def snapshots(path) -> list[str]:
    """The committed snapshots of the store at ``path``, oldest first."""
    return [name for name, _ in _core.snapshots(str(path))]


def open_store(path, snapshot: Optional[str] = None, threads: Optional[int] = None) -> "Dataset":
    """Opens snapshot ``snapshot`` of the store at ``path`` (default: the latest committed).
    Reads decode chunks on ``threads`` threads (default: all cores). A multiresolution snapshot
    opens as an ``amrzip.multires.MultiresDataset``."""
    if _core.snapshot_kind(str(path), snapshot) == "multires":
        from amrzip.multires import open_multires

        return open_multires(path, snapshot, threads)
    return Dataset(_core.Snapshot.latest(str(path), snapshot, _threads(threads)))


def check(path, repair: bool = False) -> dict:
    """Verifies every snapshot of the store at ``path`` (checksums, every chunk present and in
    its place, metadata consistent) and lists interrupted writes; with ``repair``, finishes or
    removes the interrupted work. Returns the report (see ``amrzip check``)."""
    return json.loads(_core.check(str(path), bool(repair)))


def _index_space(domain: Box, node) -> Box:
    """The indices a level's arrays span: its cells, one more along node-centred dimensions."""
    return tuple(domain[0]), tuple(h + bool(n) for h, n in zip(domain[1], node))


def _check_region(region, dim: int, where: str) -> Box:
    try:
        lo, hi = (tuple(int(v) for v in c) for c in region)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: region must be (lo, hi), two sequences of {dim} integers, got {region!r}") from None
    if len(lo) != dim or len(hi) != dim or any(h < l for l, h in zip(lo, hi)):
        raise ValueError(f"{where}: region {region!r} is not a non-empty {dim}-dimensional box")
    return lo, hi


class FieldView:
    """One field on one level: its boxes as arrays (``view[i]``, ``view.box(i)``)."""

    def __init__(self, ds: "Dataset", level: int, field: str):
        self._ds, self.level, self.name = ds, level, field

    @property
    def boxes(self) -> list[Box]:
        return self._ds.level(self.level).boxes

    def __len__(self) -> int:
        return len(self.boxes)

    def box(self, i: int, covered: str = "average") -> np.ndarray:
        if not 0 <= i < len(self.boxes):
            raise IndexError(f"box {i} out of range: level {self.level} has {len(self.boxes)} boxes")
        return self._ds.read(self.name, region=self.boxes[i], level=self.level, covered=covered)

    __getitem__ = box

    def __iter__(self):
        # Every box will be read: the level decoded whole where it fits (see `Dataset._decoded`),
        # else its chunks (and the finer levels' that rebuild covered cells) in parallel batches.
        whole = self._ds._take_level(self.name, self.level)
        if whole is not None:
            return iter(whole)
        self._ds.prefetch(self.name, self.level)
        return (self._ds._read(self.name, box, self.level, "average", whole_chunks=True) for box in self.boxes)


class LevelView(LevelGeometry):
    """One level's geometry and fields."""

    def __init__(self, ds: "Dataset", L: int, meta: dict):
        self._ds, self.index = ds, L
        self.boxes: list[Box] = [(tuple(lo), tuple(hi)) for lo, hi in meta["boxes"]]
        self.ref_ratios = tuple(meta["ref_ratio"])
        self.dx = tuple(meta["dx"])
        self.domain: Box = (tuple(meta["domain"][0]), tuple(meta["domain"][1]))
        self.owners = list(meta["owners"])
        # What the level's arrays span: its cells, one more index along node-centred dimensions.
        self.index_space: Box = _index_space(self.domain, ds.nodal)
        # The boxes as one (n, 2, dim) array, for coverage tests against all of them at once.
        self.box_array = np.asarray(self.boxes, dtype=np.int64).reshape(len(self.boxes), 2, ds.dim)

    def field(self, name: str) -> FieldView:
        self._ds._field_index(name)
        return FieldView(self._ds, self.index, name)


class Dataset:
    """A snapshot of the store, opened for reading: ``Dataset(path)`` for a snapshot file (or a
    snapshot folder of a version-1 store); :func:`amrzip.open` opens one of a store by name.
    Reads decode chunks on ``threads`` threads (default: all cores)."""

    def __init__(self, path, threads: Optional[int] = None):
        self._snapshot = path if isinstance(path, _core.Snapshot) else _core.Snapshot(str(path), _threads(threads))
        self.path = Path(self._snapshot.path)
        self.name: str = self._snapshot.name
        self.meta: dict = json.loads(self._snapshot.meta_json)
        self.fields: list[str] = list(self.meta["fields"])
        self.dim: int = self.meta["dim"]
        self.nodal: tuple[bool, ...] = tuple(self.meta["node"])
        self._levels = [LevelView(self, L, m) for L, m in enumerate(self.meta["levels"])]
        # (level, field) -> {box: array}: boxes decoded whole, not handed out yet (`_decoded`).
        self._waiting: dict = {}
        # Reads are counted from here on, as opening read the snapshot's metadata only.
        self._bytes_read_before = self._snapshot.bytes_read

    def __repr__(self) -> str:
        return f"<amrzip Dataset {self.path}: {self.num_levels} levels, fields {', '.join(self.fields)}>"

    @property
    def bytes_read(self) -> int:
        """Bytes read from the store so far (metadata, shard headers and indexes, chunks); may be
        set, to count from there."""
        return self._snapshot.bytes_read - self._bytes_read_before

    @bytes_read.setter
    def bytes_read(self, value: int) -> None:
        self._bytes_read_before = self._snapshot.bytes_read - int(value)

    @property
    def stored_bytes(self) -> int:
        """Every byte the snapshot takes in the store."""
        return self._snapshot.stored_bytes

    @property
    def num_levels(self) -> int:
        return len(self._levels)

    @property
    def time(self) -> float:
        return self.meta["time"]

    @property
    def step(self) -> int:
        return self.meta["step"]

    @property
    def bounds(self) -> dict:
        """Per field: the bound as given (mode, value) and the absolute bound every stored cell keeps."""
        return self.meta["bounds"]

    def level(self, L: int) -> LevelView:
        if not 0 <= L < len(self._levels):
            raise IndexError(f"level {L} out of range: the snapshot has {len(self._levels)} levels")
        return self._levels[L]

    def _field_index(self, field: str) -> int:
        try:
            return self.fields.index(field)
        except ValueError:
            raise KeyError(f"no field {field!r} (fields: {', '.join(self.fields)})") from None

    def array_info(self, L: int, field: str) -> dict:
        """The (level, field)'s coding (dtype, unit and chunk shapes, bounds, offset, predictor)
        and statistics (stored cells, blocks, chunks, original and stored bytes)."""
        self.level(L)
        return self._snapshot.array_info(L, self._field_index(field))

    def prefetch(self, field: str, level: int = 0, finer: bool = True) -> None:
        """Decodes the chunks of ``level``'s boxes (and, with ``finer``, those of the finer levels,
        which rebuild covered cells) in one parallel batch per level, so that reading the boxes
        one by one afterwards decodes nothing. Levels whose chunks would not fit in the chunk
        cache are left to be read as asked."""
        self.level(level)
        self._snapshot.prefetch(self._field_index(field), level, finer)

    def read(self, field: str, region=None, level: int = 0, covered: str = "average", resolution=None) -> np.ndarray:
        """Field ``field`` of level ``level`` over ``region`` ((lo, hi) inclusive, level index
        space; default the level's domain), indexed [i, j, k]. Cells outside every box are NaN;
        covered cells are rebuilt from the finer levels (``covered="average"``: the mean of the
        fine cells, or for node-centred data the fine node on the coarse one) or NaN.
        ``resolution=`` reads of a fraction of the points need a multiresolution snapshot."""
        if resolution is not None and resolution != 1:
            raise ValueError(
                f"snapshot {self.name} has the AMR layout, which is read by level, not by resolution: "
                "coarser levels are the reduced views here (level=); write with amrzip.multires.write or "
                "amrzip convert --layout multires for resolution= reads (docs/multires.md)"
            )
        return self._read(field, region, level, covered, whole_chunks=False)

    def _read(self, field: str, region, level: int, covered: str, whole_chunks: bool) -> np.ndarray:
        if covered not in COVERED:
            raise ValueError(f"covered must be one of {COVERED}, got {covered!r}")
        index = self._field_index(field)
        lev = self.level(level)
        region = lev.index_space if region is None else _check_region(region, self.dim, f"{self.path} level {level}")
        return self._snapshot.read(index, level, list(region[0]), list(region[1]), covered, whole_chunks)

    def _whole_levels(self, field: str, level: int) -> Optional[list]:
        """Every box of ``field`` on ``level`` and the finer levels (``[L - level][box]``),
        decoded straight into box arrays, or None when they would take more than the chunk
        cache: then boxes are read one by one, within the cache."""
        itemsize = np.dtype(self.meta["dtypes"][field]).itemsize
        cells = sum(int(np.prod(lev.box_array[:, 1] - lev.box_array[:, 0] + 1, axis=1).sum()) for lev in self._levels[level:])
        if cells * itemsize > _core.CACHE_BYTES:
            return None
        return self._snapshot.read_boxes(self._field_index(field), level)

    def _decoded(self, field: str, L: int) -> dict:
        """The (level, field)'s boxes decoded whole and not handed out yet: the first call for a
        (level, field) decodes it and the finer levels (which rebuild its covered cells) straight
        into box arrays, held here until asked for, so that reading every level decodes each
        once (none when they would not fit the chunk cache)."""
        if (L, field) not in self._waiting:
            for k, arrays in enumerate(self._whole_levels(field, L) or []):
                self._waiting.setdefault((L + k, field), dict(enumerate(arrays)))
            self._waiting.setdefault((L, field), {})
        return self._waiting[(L, field)]

    def _take_level(self, field: str, L: int) -> Optional[list]:
        """Every box of the (level, field) from `_decoded`, or None when some were handed out
        already or the levels do not fit the chunk cache (later reads then go through it)."""
        ready = self._decoded(field, L)
        n = len(self._levels[L].boxes)
        if len(ready) != n:
            return None
        self._waiting[(L, field)] = {}
        return [ready[i] for i in range(n)]

    def to_hierarchy(self) -> Hierarchy:
        """The whole snapshot as a Hierarchy. Box arrays are decoded when first asked for: the
        first box asked of a (level, field) decodes that level and the finer ones (which rebuild
        its covered cells) whole, straight into box arrays held until each is asked for; a box
        asked again, or of levels too large for the chunk cache, is read on its own (after its
        level's chunks are decoded in one batch)."""
        prefetched = set()

        def loader(field: str, i: int, L: int) -> np.ndarray:
            box = self._decoded(field, L).pop(i, None)
            if box is not None:
                return box
            if (L, field) not in prefetched:
                self.prefetch(field, L)
                prefetched.add((L, field))
            return self._read(field, self._levels[L].boxes[i], L, "average", whole_chunks=True)

        def bulk(field: str, L: int) -> list:
            # Every box of the (level, field) at once, unless some were handed out already
            # (then as `loader` gives each).
            whole = self._take_level(field, L)
            return whole if whole is not None else [loader(field, i, L) for i in range(len(self._levels[L].boxes))]

        h_levels = []
        for L, lev in enumerate(self._levels):
            h_levels.append(Level(list(lev.boxes), lev.ref_ratios, lev.dx, lev.domain, list(lev.owners), list(self.fields),
                                  functools.partial(loader, L=L), bulk_loader=functools.partial(bulk, L=L)))
        m = self.meta
        attrs = dict(m.get("source") or {})
        return Hierarchy(
            list(self.fields), h_levels, tuple(m["prob_lo"]), tuple(m["prob_hi"]), m.get("coord_sys", 0), m["time"], m["step"], attrs,
            self.nodal if any(self.nodal) else (),
        )

    def to_uniform(self, field: str, level: Optional[int] = None) -> np.ndarray:
        """A uniform array over level ``level``'s domain (default: the finest): coarser levels
        upsampled (piecewise constant; for node-centred data, each coarse node also fills the
        fine nodes up to the next one) where no finer data exists, finer levels averaged down."""
        level = self.num_levels - 1 if level is None else level
        self.level(level)
        return self._snapshot.to_uniform(self._field_index(field), level)

    def describe(self) -> dict:
        """Geometry, bounds and, per level and field, how it was coded and what it takes: what
        ``amrzip inspect`` prints. Ratios count every byte of the snapshot (metadata, indexes,
        shared tables, chunks)."""
        meta = self.meta
        fields = {
            f: {"dtype": meta["dtypes"][f], "mode": b["mode"], "value": b["value"], "abs_bound": b["abs"]}
            for f, b in ((f, self.bounds[f]) for f in self.fields)
        }
        levels = []
        totals = dict.fromkeys(("cells", "stored_cells", "original_bytes"), 0)
        for L in range(self.num_levels):
            lev = self.level(L)
            arrays = {}
            for f in self.fields:
                a = self.array_info(L, f)
                stats = dict(a["stats"])
                arrays[f] = {
                    **stats, "ratio": stats["original_bytes"] / max(stats["stored_bytes"], 1),
                    "predictor": a["predictor"], "unit": a["unit"][0], "chunk": a["chunk"][0],
                }
            cells = sum(math.prod(box_shape(b)) for b in lev.boxes)
            stored_cells = next((a["stored_cells"] for a in arrays.values()), 0)
            original = sum(a["original_bytes"] for a in arrays.values())
            stored = sum(a["stored_bytes"] for a in arrays.values())
            finest = L + 1 == self.num_levels
            levels.append({
                "level": L,
                "domain": [list(lev.domain[0]), list(lev.domain[1])],
                "shape": list(box_shape(lev.index_space)),
                "boxes": lev.num_boxes,
                "ref_ratio": None if finest else list(lev.ref_ratios),
                "dx": list(lev.dx),
                "cells": cells,
                "stored_cells": stored_cells,
                "covered_cells": cells - stored_cells,
                "stored_fraction": stored_cells / cells if cells else 1.0,
                "original_bytes": original,
                "stored_bytes": stored,
                "ratio": original / max(stored, 1),
                "fields": arrays,
            })
            totals["cells"] += cells
            totals["stored_cells"] += stored_cells
            totals["original_bytes"] += original
        totals["stored_bytes"] = self.stored_bytes
        totals["ratio"] = totals["original_bytes"] / max(totals["stored_bytes"], 1)
        totals["disk_bytes"] = _disk_bytes(self.path)
        source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
        return {
            "snapshot": self.name,
            "path": str(self.path),
            "time": self.time,
            "step": self.step,
            "dim": self.dim,
            "coord_sys": meta.get("coord_sys", 0),
            "prob_lo": meta["prob_lo"],
            "prob_hi": meta["prob_hi"],
            "source": {k: source[k] for k in ("format", "source") if k in source},
            "fields": fields,
            "levels": levels,
            "totals": totals,
        }


def _disk_bytes(path: Path) -> int:
    """What ``path`` (a file, or a folder and what it holds) takes on disk, in allocated blocks."""
    paths = [path] if path.is_file() else [path, *path.rglob("*")]
    return sum(p.stat().st_blocks * 512 for p in paths)
