"""Multiresolution snapshots: arrays in hierarchical Z (HZ) order, compressed level by level.

``write(data, store, rel=...)`` stores numpy arrays (or an AMR hierarchy, its levels coalesced into
the finest level's index space) so that ``amrzip.open(store).read(field, resolution=1/64)``
reads a prefix of the data, the blocks of the levels that resolution holds, ``region=`` reads only the blocks a region needs, and
``progressive(field)`` refines coarse to fine, each step reading only what it adds. ``keep=``
writes full resolution only where a rule holds and a reduced one elsewhere (adaptive resolution,
as PIDX). The layout, the compression and the reads are Rust (``crates/hz``,
``crates/store/src/multires.rs``); this module turns arguments into calls (docs/multires.md).
"""

from __future__ import annotations

import json
import numbers
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from amrzip import _core
from amrzip.amr.hierarchy import Hierarchy
from amrzip.codec import _threads
from amrzip.store.writer import _native, field_bounds, hierarchy_spec

DEFAULT_BLOCK_BITS = 15


def _fraction(value, what: str) -> Fraction:
    try:
        f = Fraction(value) if not isinstance(value, float) else Fraction(value).limit_denominator(1 << 48)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"{what} must be a fraction such as 1, 1/8 or 1/64, got {value!r}") from None
    return f


def levels_dropped(resolution, what: str = "resolution") -> int:
    """How many HZ levels below the finest a resolution of ``resolution`` of the points reads
    (1 -> 0, 1/8 -> 3, "1/64" -> 6): it must be 1/2^m."""
    f = _fraction(resolution, what)
    if f <= 0 or f > 1 or f.numerator != 1 or f.denominator & (f.denominator - 1):
        raise ValueError(f"{what} must be 1/2^m of the points (1, 1/2, 1/8, 1/64...), got {resolution!r}")
    return f.denominator.bit_length() - 1


def subsample(array, resolution, bitmask: Optional[str] = None) -> np.ndarray:
    """The points of ``array`` (in memory) that a read at ``resolution`` returns, as a view: the
    finest HZ levels halve the axes in turn, each as long as it has bits of index left, so 1/8 of
    a cube is every other point along each axis. Which axes a fraction between those (1/2, 1/4 of
    a cube) halves is the field's ``bitmask`` (``info(field)["bitmask"]``; the writer chooses the
    axis order from the data); without one, IDX's default, the fastest axis first."""
    a = np.asarray(array)
    if bitmask is not None:
        if not (bitmask.startswith("V") and set(bitmask[1:]) <= {str(k) for k in range(a.ndim)}):
            raise ValueError(f"bitmask {bitmask!r} is not one of a {a.ndim}-axis array")
        order = [int(c) for c in reversed(bitmask[1:])]
    else:
        bits = [max(int(n) - 1, 0).bit_length() for n in a.shape]
        order = []
        while any(bits):
            for k in reversed(range(a.ndim)):
                if bits[k]:
                    bits[k] -= 1
                    order.append(k)
    steps = [1] * a.ndim
    for k in order[: levels_dropped(resolution)]:
        steps[k] *= 2
    return a[tuple(slice(None, None, s) for s in steps)]


def _region(region, shape: tuple) -> Optional[tuple[list[int], list[int]]]:
    """(start, stop) lists from a tuple of slices or (start, stop) pairs, one per axis (None or a
    missing trailing axis: the whole axis)."""
    if region is None:
        return None
    if not isinstance(region, (tuple, list)) or len(region) > len(shape):
        raise ValueError(f"region: give one slice or (start, stop) pair per axis of {shape}, got {region!r}")
    start, stop = [], []
    for k, n in enumerate(shape):
        r = region[k] if k < len(region) else None
        if r is None:
            a, b = 0, n
        elif isinstance(r, slice):
            if r.step not in (None, 1):
                raise ValueError(f"region axis {k}: steps are not supported (use resolution=), got {r!r}")
            a, b, _ = r.indices(n)
        elif isinstance(r, (tuple, list)) and len(r) == 2 and all(isinstance(v, numbers.Integral) for v in r):
            a, b = int(r[0]), int(r[1])
        else:
            raise ValueError(f"region axis {k}: give a slice or a (start, stop) pair, got {r!r}")
        if not 0 <= a < b <= n:
            raise ValueError(f"region axis {k}: {a}:{b} is empty or outside 0:{n}")
        start.append(a)
        stop.append(b)
    return start, stop


def _keep(keep: Optional[dict], fields: list[str], shape: tuple) -> tuple[Optional[dict], Optional[int]]:
    """The core's form of a ``keep=`` rule, and the index of the field its thresholds read."""
    if keep is None:
        return None, None
    if not isinstance(keep, dict):
        raise TypeError(f"keep= takes a dict (regions=, thresholds=, field=, elsewhere=, tile=), got {type(keep).__name__}")
    unknown = set(keep) - {"regions", "thresholds", "field", "elsewhere", "tile"}
    if unknown:
        raise ValueError(f"keep=: unknown keys {', '.join(sorted(unknown))} (regions, thresholds, field, elsewhere, tile)")
    out = {"elsewhere": levels_dropped(keep.get("elsewhere", Fraction(1, 64)), "keep['elsewhere']")}
    tile = keep.get("tile", 16)
    if isinstance(tile, bool) or not isinstance(tile, numbers.Integral) or tile < 1 or tile & (tile - 1):
        raise ValueError(f"keep['tile'] must be a power of two, got {tile!r}")
    out["tile"] = int(tile)
    regions = []
    for r in keep.get("regions", []):
        res = 1
        if isinstance(r, dict):
            r, res = r.get("region"), r.get("resolution", 1)
        start, stop = _region(r, shape)
        regions.append((start, stop, levels_dropped(res, "keep region resolution")))
    out["regions"] = regions
    field = None
    if "thresholds" in keep:
        name = keep.get("field", fields[0] if len(fields) == 1 else None)
        if name not in fields:
            raise ValueError(f"keep['field'] must name the field the thresholds read, one of {', '.join(fields)}; got {name!r}")
        field = fields.index(name)
        out["thresholds"] = [(float(v), levels_dropped(res, "keep threshold resolution")) for v, res in keep["thresholds"]]
    return out, field


def write(
    data,
    store,
    *,
    rel=None,
    abs=None,
    bounds=None,
    snapshot: Optional[str] = None,
    keep: Optional[dict] = None,
    block_bits: int = DEFAULT_BLOCK_BITS,
    threads=None,
    attributes: Optional[dict] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """Writes ``data`` into the store at ``store`` (created if needed) as a new multiresolution
    snapshot (default name ``multires_<n>``) and returns a summary per field.

    ``data`` is a dict of arrays of one shape (1 to 3 axes, float32 or float64) or an
    ``amrzip.amr.Hierarchy``, whose levels are coalesced into the finest level's index space
    (x first): each point holds the finest level covering it, and each part of the space keeps
    the HZ levels its finest AMR level resolves. Bounds as in ``amrzip.write``: ``rel=`` (of
    each field's range over the points stored), ``abs=``, or ``bounds={field: {"rel": v}}``;
    every stored point is within its bound at every resolution it is read at.

    ``keep=`` (arrays only) stores full resolution only where a rule holds: ``regions=[region or
    {"region": region, "resolution": 1/8}, ...]`` (a region is a tuple of slices or (start, stop)
    pairs), ``thresholds=[(value, resolution), ...]`` (tiles where ``field`` reaches a value keep
    that resolution; ``field=`` names it), ``elsewhere=1/64`` (the resolution of the rest),
    ``tile=16`` (the edge, in points, of the tiles the rules decide). ``block_bits`` sets IDX's
    block size, 2^block_bits points.
    """
    if not isinstance(block_bits, numbers.Integral) or isinstance(block_bits, bool) or not 6 <= block_bits <= 24:
        raise ValueError(f"block_bits must be an integer from 6 to 24, got {block_bits!r}")
    attrs = json.dumps(attributes or {}, default=str)
    th = _threads(threads)
    if isinstance(data, Hierarchy):
        if keep is not None:
            raise ValueError("keep= applies to arrays; a hierarchy keeps the resolution of its levels")
        h = data
        per_field = field_bounds(h.fields, rel=rel, abs=abs, bounds=bounds)
        dtypes = {f: np.dtype(h.dtype(f)).newbyteorder("=") for f in h.fields}
        for f, dt in dtypes.items():
            if dt not in (np.float32, np.float64):
                raise ValueError(f"field {f!r} is {dt}: multiresolution snapshots keep float32 and float64 fields")
        name = snapshot if snapshot is not None else f"multires_{h.step:06d}"
        _core.check_snapshot_name(name)
        fields = list(h.fields)
        report = None if progress is None else (lambda i: progress(f"field {fields[i]}"))
        summary = _core.write_multires_hierarchy(
            str(store), name, hierarchy_spec(h, per_field, dtypes),
            lambda L, f: h.level(L).field_data(fields[f]), lambda a, f: _native(a, dtypes[fields[f]]),
            int(block_bits), attrs, th, report,
        )
    else:
        if not isinstance(data, dict) or not data:
            raise TypeError("write() takes a non-empty dict of arrays or an amrzip.amr.Hierarchy")
        arrays = {}
        for f, a in data.items():
            a = np.asarray(a)
            if a.dtype.newbyteorder("=") not in (np.float32, np.float64):
                raise ValueError(f"field {f!r} is {a.dtype}: multiresolution snapshots keep float32 and float64 arrays")
            arrays[str(f)] = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
        shapes = {a.shape for a in arrays.values()}
        if len(shapes) != 1:
            raise ValueError(f"all arrays of a snapshot take one shape, got {sorted(shapes)}")
        (shape,) = shapes
        if not 1 <= len(shape) <= 3:
            raise ValueError(f"arrays of 1 to 3 axes, got shape {shape}")
        per_field = field_bounds(list(arrays), rel=rel, abs=abs, bounds=bounds)
        rule, rule_field = _keep(keep, list(arrays), shape)
        name = snapshot if snapshot is not None else _next_name(store)
        _core.check_snapshot_name(name)
        fields = list(arrays)
        report = None if progress is None else (lambda i: progress(f"field {fields[i]}"))
        specs = [{"name": f, "array": arrays[f], "mode": per_field[f][0], "bound": per_field[f][1]} for f in fields]
        summary = _core.write_multires_arrays(str(store), name, specs, int(block_bits), attrs, rule, rule_field, th, report)
    # An AMR hierarchy's raw size is its cells', not the coalesced space's.
    raw = sum(s["raw_bytes"] for s in summary) if not isinstance(data, Hierarchy) else sum(
        lev.num_cells * np.dtype(data.dtype(f)).itemsize for lev in data.levels for f in data.fields
    )
    stored = sum(s["stored_bytes"] for s in summary)
    return {"snapshot": name, "fields": {s["name"]: s for s in summary}, "original_bytes": raw, "stored_bytes": stored, "ratio": raw / max(stored, 1)}


def _next_name(store) -> str:
    from amrzip.store.dataset import snapshots

    taken = set(snapshots(store)) if Path(store).exists() else set()
    n = 0
    while f"multires_{n:06d}" in taken:
        n += 1
    return f"multires_{n:06d}"


class MultiresDataset:
    """A multiresolution snapshot opened for reading (``amrzip.open`` returns one for such a
    snapshot). ``read(field, resolution=1, region=None)``, ``progressive(field)``; ``bytes_read``
    counts every byte read from the store since opening."""

    def __init__(self, reader: "_core.MultiresReader"):
        self._reader = reader
        self.path = Path(reader.path)
        self.name: str = reader.name
        self.meta: dict = json.loads(reader.meta_json)
        self.fields: list[str] = list(reader.fields)
        self._docs = {d["name"]: d for d in self.meta["fields"]}

    def __repr__(self) -> str:
        return f"<amrzip MultiresDataset {self.path}: fields {', '.join(self.fields)}>"

    @property
    def bytes_read(self) -> int:
        return self._reader.bytes_read

    @property
    def stored_bytes(self) -> int:
        return self.path.stat().st_size

    def _field(self, field: str) -> int:
        if field not in self._docs:
            raise KeyError(f"{self.path}: no field {field!r} (fields: {', '.join(self.fields)})")
        return self.fields.index(field)

    def shape(self, field: str) -> tuple:
        return tuple(self._docs[self.fields[self._field(field)]]["shape"])

    def info(self, field: str) -> dict:
        """The field's description: shape, dtype, bound, bitmask, levels, blocks, bytes."""
        return dict(self._docs[self.fields[self._field(field)]])

    def level_bytes(self, field: str) -> list[int]:
        """Stored bytes per HZ level (the first block's at its finest level)."""
        return list(self._reader.level_bytes(self._field(field)))

    def _level(self, field: str, resolution) -> int:
        levels = self._docs[field]["levels"]
        drop = levels_dropped(resolution)
        if drop > levels:
            raise ValueError(f"resolution {resolution} is coarser than field {field!r} has (1/2^{levels} at most)")
        return levels - drop

    def read(self, field: str, resolution=1, region=None) -> np.ndarray:
        """Field ``field`` at ``resolution`` of its points (1, 1/8 = every other point along each
        axis in 3-D, 1/64...: HZ subsampling, not averages) over ``region`` (a tuple of slices or
        (start, stop) pairs in the full-resolution index space; the whole array by default).
        The result holds the points of that resolution inside the region."""
        i = self._field(field)
        return self._reader.read(i, self._level(field, resolution), _region(region, self.shape(field)))

    def progressive(self, field: str, resolutions=None, region=None) -> Iterator[tuple[Fraction, np.ndarray]]:
        """Yields (resolution, array) coarse to fine (default: every 1/2^d step from 1/2^(3d) of
        the points to all of them), each step reading and decoding only the blocks it adds."""
        i = self._field(field)
        shape = self.shape(field)
        d = sum(1 for n in shape if n > 1) or 1
        if resolutions is None:
            resolutions = [Fraction(1, 2 ** (d * k)) for k in (3, 2, 1, 0)]
        levels = [self._level(field, r) for r in resolutions]
        if levels != sorted(levels):
            raise ValueError("progressive resolutions go from coarse to fine")
        read = self._reader.progressive(i, max(levels), _region(region, shape))
        for r, level in zip(resolutions, levels):
            yield Fraction(r) if not isinstance(r, float) else Fraction(r).limit_denominator(1 << 48), read.refine(level)

    def describe(self) -> dict:
        return {"snapshot": self.name, "path": str(self.path), "kind": "multires", "fields": self.meta["fields"], "attributes": self.meta["attributes"]}


def open_multires(path, snapshot: Optional[str] = None, threads=None) -> MultiresDataset:
    return MultiresDataset(_core.MultiresReader.latest(str(path), snapshot, _threads(threads)))


def export_idx(ds: MultiresDataset, field: str, output, resolution=1) -> Path:
    """Writes ``field`` at ``resolution`` as an OpenVisus IDX dataset at ``output`` (an ``.idx``
    file beside a folder of blocks), through the ``openvisus`` package, which must be installed.
    Arrays of AMR hierarchies (x first) are given to OpenVisus as x, y, z; arrays of numpy data
    keep their C order (the last axis is IDX's x)."""
    try:
        import OpenVisus as ov
    except ImportError:
        raise RuntimeError("exporting to IDX needs the openvisus package (pip install openvisus)") from None
    array = ds.read(field, resolution=resolution)
    if (ds.info(field).get("attributes") or {}).get("index_order") == "x-first":
        array = np.ascontiguousarray(array.T)
    output = Path(output)
    dims = list(reversed(array.shape))
    kind = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}[array.dtype]
    db = ov.CreateIdx(url=str(output), dims=dims, fields=[ov.Field(field, kind)])
    db.write(array)
    return output


__all__ = ["write", "MultiresDataset", "open_multires", "export_idx", "levels_dropped", "subsample"]
