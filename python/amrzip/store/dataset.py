"""Reading snapshots back: boxes, regions, whole hierarchies and uniform composites.

A region read opens only the chunks the region touches (``Dataset.bytes_read`` counts what was
read), and decodes each chunk once while it stays in the dataset's cache. Covered coarse cells
are not stored; reads rebuild them by averaging the finer level down (``covered="average"``,
the default) or leave them NaN (``covered="nan"``).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from pathlib import Path
from typing import Optional

import numpy as np

from amrzip import _core
from amrzip.amr.boxes import covered_pieces, intersect, refine
from amrzip.amr.hierarchy import Box, Hierarchy, Level, LevelGeometry, box_shape
from amrzip.store import layout
from amrzip.store.layout import StoreError

COVERED = ("average", "nan")
# Decoded chunks kept per open dataset.
CACHE_BYTES = 256 << 20


def snapshots(path) -> list[str]:
    """The committed snapshots of the store at ``path``, oldest first."""
    path = Path(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"{path}: not an amrzip store (no zarr.json)")
    doc = layout.read_json(path / "zarr.json")
    meta = layout.dig(doc, "attributes", "amrzip")
    if not isinstance(meta, dict) or meta.get("store_version") != layout.STORE_VERSION:
        raise StoreError(f"{path / 'zarr.json'}: not an amrzip store of version {layout.STORE_VERSION}")
    names = meta.get("snapshots")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise StoreError(f"{path / 'zarr.json'}: bad snapshot list")
    return names


def open_store(path, snapshot: Optional[str] = None) -> "Dataset":
    """Opens snapshot ``snapshot`` of the store at ``path`` (default: the latest committed)."""
    path = Path(path)
    names = snapshots(path)
    if not names:
        raise StoreError(f"{path}: the store holds no committed snapshot")
    name = names[-1] if snapshot is None else snapshot
    if name not in names:
        raise KeyError(f"{path}: no snapshot {name!r} (snapshots: {', '.join(names)})")
    return Dataset(path / name)


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
        # Every box will be read: decode the level's chunks (and the finer levels' that rebuild
        # covered cells) in parallel batches first.
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
        self.index_space: Box = layout.index_space(self.domain, ds.nodal)
        # The boxes as one (n, 2, dim) array, for coverage tests against all of them at once.
        self.box_array = np.asarray(self.boxes, dtype=np.int64).reshape(len(self.boxes), 2, ds.dim)

    def field(self, name: str) -> FieldView:
        if name not in self._ds.fields:
            raise KeyError(f"no field {name!r} (fields: {', '.join(self._ds.fields)})")
        return FieldView(self._ds, self.index, name)


class Dataset:
    """A snapshot of the store, opened for reading."""

    def __init__(self, path):
        self.path = Path(path)
        doc = layout.read_json(self.path / "zarr.json")
        self.meta = layout.validate_snapshot(layout.dig(doc, "attributes", "amrzip"), self.path / "zarr.json")
        self.fields: list[str] = list(self.meta["fields"])
        self.dim: int = self.meta["dim"]
        self.nodal: tuple[bool, ...] = tuple(self.meta["node"])
        self._levels = [LevelView(self, L, m) for L, m in enumerate(self.meta["levels"])]
        self._arrays: dict = {}
        self._cache: OrderedDict = OrderedDict()
        self._cached_bytes = 0
        self.bytes_read = 0

    def __repr__(self) -> str:
        return f"<amrzip Dataset {self.path}: {self.num_levels} levels, fields {', '.join(self.fields)}>"

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

    def array_info(self, L: int, field: str) -> dict:
        """The (level, field) array's codec configuration and statistics (sizes, blocks)."""
        return self._array(L, field)

    def _array(self, L: int, field: str) -> dict:
        key = (L, field)
        if key not in self._arrays:
            lev = self.level(L)
            if field not in self.fields:
                raise KeyError(f"no field {field!r} (fields: {', '.join(self.fields)})")
            where = self.path / f"level_{L}" / layout.field_dir(field) / "zarr.json"
            self.bytes_read += where.stat().st_size if where.exists() else 0
            doc = layout.read_json(where)
            cfg = layout.validate_codec(doc, where, self.dim, box_shape(lev.index_space))
            stats = layout.dig(doc, "attributes", "amrzip")
            self._arrays[key] = {
                "dir": where.parent,
                "dtype": doc["data_type"],
                "origin": list(cfg["origin"]),
                "unit": list(cfg["unit"]),
                "chunk": list(cfg["chunk"]),
                "codebooks": [layout.decode_bytes(b, where) for b in cfg["codebooks"]],
                "predictor": cfg.get("predictor"),
                "abs_bound": cfg.get("abs_bound"),
                "offset": cfg.get("offset", 0.0),
                "eb": cfg["eb"],
                "stats": stats if isinstance(stats, dict) else {},
            }
        return self._arrays[key]

    def _chunks(self, L: int, field: str, indices: list) -> dict:
        """Chunks ``indices`` of the (level, field) array, each decoded over its whole extent
        (NaN where nothing is stored), or None for a chunk that does not exist. Those not in
        the cache are decoded together, in parallel. Recently used chunks are kept, so reads
        that overlap (boxes sharing a chunk, covered cells rebuilt from the finer level) read
        and decode each chunk once."""
        out, missing = {}, []
        for index in indices:
            key = (L, field, index)
            if key in self._cache:
                self._cache.move_to_end(key)
                out[index] = self._cache[key]
            else:
                out[index] = None
                missing.append(index)
        if not missing:
            return out
        a = self._array(L, field)
        files = {index: a["dir"] / layout.chunk_key(index) for index in missing}
        stored = [(index, files[index].read_bytes()) for index in missing if files[index].exists()]
        self.bytes_read += sum(len(data) for _, data in stored)
        decode = lambda chunks: _core.decode_chunks(chunks, a["codebooks"], a["origin"], a["unit"], a["chunk"], a["eb"], a["dtype"])  # noqa: E731
        try:
            decoded = decode([(list(i), data) for i, data in stored])
        except ValueError:
            # Name the damaged file: decode each alone until one fails.
            for index, data in stored:
                try:
                    decode([(list(index), data)])
                except ValueError as one:
                    raise type(one)(f"{files[index]}: {one}") from None
            raise
        for (index, _), chunk in zip(stored, decoded):
            if a["offset"]:
                chunk += chunk.dtype.type(a["offset"])
            out[index] = chunk
            self._remember((L, field, index), chunk)
        return out

    def _chunk_indices(self, L: int, field: str, region: Box) -> list:
        """Indices of the (level, field) chunks that ``region`` touches."""
        a = self._array(L, field)
        origin, chunk = a["origin"], a["chunk"]
        ranges = [range(max(0, (region[0][d] - origin[d]) // chunk[d]), (region[1][d] - origin[d]) // chunk[d] + 1) for d in range(self.dim)]
        return list(itertools.product(*ranges))

    def prefetch(self, field: str, level: int = 0, finer: bool = True) -> None:
        """Decodes the chunks of ``level``'s boxes (and, with ``finer``, those of the finer levels,
        which rebuild covered cells) in one parallel batch per level, so that reading the boxes
        one by one afterwards decodes nothing. Levels whose chunks would not fit in the chunk
        cache are left to be read as asked."""
        budget = CACHE_BYTES // 2
        for L in range(level, self.num_levels if finer else level + 1):
            a = self._array(L, field)
            indices = list(dict.fromkeys(i for box in self.level(L).boxes for i in self._chunk_indices(L, field, box)))
            size = len(indices) * int(np.prod(a["chunk"])) * np.dtype(a["dtype"]).itemsize
            if size > budget:
                return
            budget -= size
            self._chunks(L, field, indices)

    def _chunk_box(self, L: int, field: str, index) -> Box:
        """The part of the level's index space that chunk ``index`` spans."""
        a, space = self._array(L, field), self.level(L).index_space
        lo = [o + i * c for o, i, c in zip(a["origin"], index, a["chunk"])]
        return tuple(lo), tuple(min(l + c - 1, h) for l, c, h in zip(lo, a["chunk"], space[1]))

    def _filled(self, L: int, field: str, indices: list) -> dict:
        """Like ``_chunks``, with covered cells rebuilt from the finer level (and NaN chunks for
        those that store nothing but hold covered cells); cached like decoded chunks, so each
        fine region is averaged down once however many coarse reads need it."""
        out, missing = {}, []
        for index in indices:
            key = (L, field, index, "average")
            if key in self._cache:
                self._cache.move_to_end(key)
                out[index] = self._cache[key]
            else:
                missing.append(index)
        if not missing:
            return out
        a, lev = self._array(L, field), self.level(L)
        for index, data in self._chunks(L, field, missing).items():
            region = self._chunk_box(L, field, index)
            inside = all(l <= h for l, h in zip(*region))  # chunks past the domain hold nothing
            pieces = covered_pieces(region, self.level(L + 1).box_array, lev.ref_ratios, self.nodal) if inside else []
            if pieces:
                data = np.full(a["chunk"], np.nan, dtype=a["dtype"]) if data is None else data.copy()
                for piece in pieces:
                    fine = self._read(field, refine(piece, lev.ref_ratios, self.nodal), L + 1, "average", whole_chunks=True)
                    data[tuple(slice(l - r, h - r + 1) for l, h, r in zip(piece[0], piece[1], region[0]))] = _restrict(fine, lev.ref_ratios, self.nodal)
            out[index] = data
            if data is not None:
                self._remember((L, field, index, "average"), data)
        return out

    def _remember(self, key, chunk: np.ndarray) -> None:
        self._cache[key] = chunk
        self._cached_bytes += chunk.nbytes
        while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cached_bytes -= old.nbytes

    def read(self, field: str, region=None, level: int = 0, covered: str = "average") -> np.ndarray:
        """Field ``field`` of level ``level`` over ``region`` ((lo, hi) inclusive, level index
        space; default the level's domain), indexed [i, j, k]. Cells outside every box are NaN;
        covered cells are rebuilt from the finer levels (``covered="average"``: the mean of the
        fine cells, or for node-centred data the fine node on the coarse one) or NaN."""
        return self._read(field, region, level, covered, whole_chunks=False)

    def _read(self, field: str, region, level: int, covered: str, whole_chunks: bool) -> np.ndarray:
        """``read``. With ``whole_chunks`` (callers that will read everything), covered cells
        come from chunks filled whole and cached (``_filled``), so no fine cell is averaged
        down twice; otherwise only the region's covered cells are rebuilt, which reads the
        least."""
        if covered not in COVERED:
            raise ValueError(f"covered must be one of {COVERED}, got {covered!r}")
        lev = self.level(level)
        region = lev.index_space if region is None else _check_region(region, self.dim, f"{self.path} level {level}")
        a = self._array(level, field)
        out = np.full(box_shape(region), np.nan, dtype=a["dtype"])
        rebuild = covered == "average" and level + 1 < self.num_levels
        indices = self._chunk_indices(level, field, region)
        for index, data in (self._filled if rebuild and whole_chunks else self._chunks)(level, field, indices).items():
            if data is None:
                continue
            lo = self._chunk_box(level, field, index)[0]
            piece = intersect((lo, tuple(l + c - 1 for l, c in zip(lo, a["chunk"]))), region)
            src = tuple(slice(p - l, q - l + 1) for p, q, l in zip(piece[0], piece[1], lo))
            dst = tuple(slice(p - r, q - r + 1) for p, q, r in zip(piece[0], piece[1], region[0]))
            out[dst] = data[src]
        if rebuild and not whole_chunks:
            ratio, node = lev.ref_ratios, self.nodal
            for piece in covered_pieces(region, self.level(level + 1).box_array, ratio, node):
                fine = self._read(field, refine(piece, ratio, node), level + 1, covered, whole_chunks)
                sl = tuple(slice(l - r, h - r + 1) for l, h, r in zip(piece[0], piece[1], region[0]))
                out[sl] = _restrict(fine, ratio, node).astype(out.dtype)
        return out

    def to_hierarchy(self) -> Hierarchy:
        """The whole snapshot as a Hierarchy (box arrays decoded when first asked for)."""
        h_levels = []
        for L, lev in enumerate(self._levels):
            loader = lambda f, i, L=L: self.read(f, self._levels[L].boxes[i], L)
            h_levels.append(Level(list(lev.boxes), lev.ref_ratios, lev.dx, lev.domain, list(lev.owners), list(self.fields), loader))
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
        top = self.level(level)
        out = np.full(box_shape(top.index_space), np.nan, dtype=self._array(level, field)["dtype"])
        for L in range(level + 1):
            ratio = [1] * self.dim
            for k in range(L, level):
                ratio = [r * q for r, q in zip(ratio, self.level(k).ref_ratios)]
            # Finer levels paint over coarse data afterwards, so covered coarse values are not
            # needed, except at nodes: the last covered node also fills the fine nodes past it.
            covered = "average" if L == level or any(self.nodal) else "nan"
            for box in self.level(L).boxes:
                data = self._read(field, box, L, covered, whole_chunks=True)
                for d, r in enumerate(ratio):
                    if r > 1:
                        # A coarse node box of n nodes spans (n - 1) * r + 1 fine nodes.
                        data = np.repeat(data, r, axis=d)[(slice(None),) * d + (slice(0, data.shape[d] * r - (r - 1) * self.nodal[d]),)]
                lo = [l * r - t for l, r, t in zip(box[0], ratio, top.domain[0])]
                sl = tuple(slice(a, a + n) for a, n in zip(lo, data.shape))
                keep = ~np.isnan(data)
                out[sl][keep] = data[keep]
        return out


def _restrict(fine: np.ndarray, ratio, node) -> np.ndarray:
    """Coarse values from the fine ones over them: cells average their fine cells, nodes take
    the fine node they coincide with (AMReX's nodal average-down injects too)."""
    if not any(node):
        return average_down(fine, ratio)
    picked = fine[tuple(slice(None, None, r) if n else slice(None) for r, n in zip(ratio, node))]
    return average_down(picked, [1 if n else r for r, n in zip(ratio, node)])


def average_down(fine: np.ndarray, ratio) -> np.ndarray:
    """The mean of each ``ratio`` block of ``fine`` (volume average on a Cartesian grid)."""
    shape = []
    for n, r in zip(fine.shape, ratio):
        shape += [n // r, r]
    return fine.reshape(shape).mean(axis=tuple(range(1, 2 * fine.ndim, 2)), dtype=np.float64)
