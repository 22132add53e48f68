"""Chombo HDF5 files (plot files and checkpoints; BISICLES and other Chombo-based codes).

Layout: root attributes ``num_levels``, ``num_components`` and ``component_N`` (field names,
``N`` possibly zero-padded), a ``Chombo_global`` group with ``SpaceDim``; one group ``level_N``
per level with attributes ``dx`` (or ``vec_dx``), ``ref_ratio`` (to the next level) and
``prob_domain`` (a compound ``lo_i, lo_j[, lo_k], hi_i, ...``), a compound dataset ``boxes``
of the same shape, and the data as flat datasets: ``data:datatype=0`` holds, box after box, all
components of the box one after another, each in Fortran order over the box grown by the
``outputGhost`` width of the ``data_attributes`` group; ``data:offsets=0`` has where each box
starts (in elements, one entry more than boxes).

Checkpoints hold several such datasets per level, ``<name>Data:datatype=0`` with their own
``<name>Data:offsets=0`` and ``<name>Data_attributes`` (component count and ghost width each);
each becomes one field per component: ``<name>`` for a single component, ``<name>_0``,
``<name>_1``... otherwise (or the names listed as ``component_N`` in the attributes group).

Uncompressed contiguous datasets are memory-mapped, so box arrays are views of the file; chunked
or filtered ones are read box by box through h5py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np

from amrzip.amr.boxes import check_nesting
from amrzip.amr.hierarchy import Box, Hierarchy, Level, box_shape

__all__ = ["is_chombo", "read_chombo"]

_DATA_SUFFIX = ":datatype=0"
_OFFSETS_SUFFIX = ":offsets=0"


def require_h5py():
    try:
        import h5py
    except ImportError as e:  # pragma: no cover
        raise ValueError("reading HDF5 files needs h5py (pip install h5py)") from e
    return h5py


def as_str(v) -> str:
    """An HDF5 string attribute as str (h5py hands back bytes, numpy bytes or str)."""
    if isinstance(v, np.ndarray):
        v = v.reshape(-1)[0] if v.size else b""
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).split(b"\x00", 1)[0].decode("utf-8", errors="replace")
    return str(v)


def as_scalar(v, kind=float):
    a = np.asarray(v).reshape(-1)
    return kind(a[0])


def int_vector(v, dim: int) -> tuple[int, ...]:
    """An int vector attribute: a compound (intvecti, intvectj...) or an array or a scalar."""
    if isinstance(v, np.void) or (isinstance(v, np.ndarray) and v.dtype.names):
        rec = v.reshape(-1)[0] if isinstance(v, np.ndarray) else v
        vals = tuple(int(rec[n]) for n in rec.dtype.names)
    else:
        vals = tuple(int(x) for x in np.asarray(v).reshape(-1))
    if len(vals) == 1:
        vals = vals * dim
    return vals[:dim]


def compound_box(v, dim: int) -> Box:
    """A box from a compound ``lo_i, lo_j, ..., hi_i, ...`` record (an attribute or a row)."""
    rec = v.reshape(-1)[0] if isinstance(v, np.ndarray) else v
    axes = "ijk"[:dim]
    lo = tuple(int(rec[f"lo_{a}"]) for a in axes)
    hi = tuple(int(rec[f"hi_{a}"]) for a in axes)
    return lo, hi


def boxes_of(ds, dim: int, where: str) -> list[Box]:
    """The boxes of a compound ``boxes`` dataset (vectorised over the rows)."""
    arr = ds[()]
    names = arr.dtype.names or ()
    axes = "ijk"[:dim]
    if not all(f"lo_{a}" in names and f"hi_{a}" in names for a in axes):
        raise ValueError(f"{where}: 'boxes' has fields {names}, expected lo_i..hi_{axes[-1]}")
    lo = np.stack([arr[f"lo_{a}"] for a in axes], axis=1).astype(np.int64).reshape(-1, dim)
    hi = np.stack([arr[f"hi_{a}"] for a in axes], axis=1).astype(np.int64).reshape(-1, dim)
    if np.any(hi < lo):
        raise ValueError(f"{where}: a box with hi < lo")
    return [(tuple(map(int, l)), tuple(map(int, h))) for l, h in zip(lo.tolist(), hi.tolist())]


def space_dim(f, where: str) -> int:
    for holder, key in ((f.get("Chombo_global"), "SpaceDim"), (f, "dim"), (f, "SpaceDim")):
        if holder is not None and key in holder.attrs:
            return as_scalar(holder.attrs[key], int)
    ds = f.get("level_0/boxes")
    if ds is not None and ds.dtype.names:
        return sum(1 for n in ds.dtype.names if n.startswith("lo_"))
    raise ValueError(f"{where}: cannot tell the dimension (no Chombo_global/SpaceDim)")


def component_names(attrs) -> list[str]:
    """``component_N`` attributes, ordered by ``N`` (which may be zero-padded)."""
    found = []
    for key, v in attrs.items():
        m = re.fullmatch(r"component_(\d+)", key)
        if m:
            found.append((int(m.group(1)), as_str(v)))
    return [name for _, name in sorted(found)]


class FlatSource:
    """One flat HDF5 dataset, read as slices: a memory map over the file when the dataset is
    stored contiguous and unfiltered (the slices are views), through h5py otherwise."""

    def __init__(self, path: Path, ds, handle_cache):
        self.path = str(path)
        self.name = ds.name
        self.size = int(ds.size)
        self.dtype = ds.dtype
        self._cache = handle_cache
        self._mm: Optional[np.ndarray] = None
        self.offset = None
        if ds.ndim != 1:
            raise ValueError(f"{path}: {ds.name} is not one-dimensional (shape {ds.shape})")
        if self.dtype.kind != "f":
            raise ValueError(f"{path}: {ds.name} holds {self.dtype}, not floats")
        plist = ds.id.get_create_plist()
        if ds.chunks is None and plist.get_nfilters() == 0 and plist.get_external_count() == 0 and self.size:
            off = ds.id.get_offset()
            if off is not None:
                self.offset = int(off)
                # Guard against layouts the offset does not describe (a user block, say).
                n = min(self.size, 8)
                try:
                    ok = np.array_equal(self._map()[:n], ds[:n], equal_nan=True) and np.array_equal(
                        self._map()[-1:], ds[-1:], equal_nan=True
                    )
                except (ValueError, OSError):
                    ok = False
                if not ok:
                    self.offset, self._mm = None, None

    @property
    def mapped(self) -> bool:
        return self.offset is not None

    def _map(self) -> np.ndarray:
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=(self.size,))
        return self._mm

    def read(self, start: int, stop: int) -> np.ndarray:
        if self.offset is not None:
            return self._map()[start:stop]
        return self._cache.file()[self.name][start:stop]

    def bytes(self) -> np.ndarray:
        """The mapped dataset's bytes (``mapped`` only)."""
        return self._map().view(np.uint8)


class HandleCache:
    """An h5py file handle opened on first need (only for datasets that cannot be mapped)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = None

    def file(self):
        if self._f is None:
            self._f = require_h5py().File(self.path, "r")
        return self._f


def ghost_width(boxes: list[Box], offsets: np.ndarray, ncomp: int, hint, dim: int, where: str) -> tuple[int, ...]:
    """The ghost width the box sizes in ``offsets`` imply; ``hint`` (from the file) first."""
    counts = np.diff(offsets)
    shapes = np.array([box_shape(b) for b in boxes], dtype=np.int64).reshape(-1, dim)
    tries = []
    if hint is not None:
        tries.append(tuple(hint))
    tries += [(g,) * dim for g in range(0, 9) if (g,) * dim not in tries]
    for g in tries:
        if np.array_equal(np.prod(shapes + 2 * np.array(g), axis=1) * ncomp, counts):
            return tuple(int(v) for v in g)
    raise ValueError(
        f"{where}: the box sizes in the offsets match neither the boxes nor the boxes grown by a "
        f"ghost width (hint {hint}); {ncomp} components"
    )


def read_offsets(group, name: str, nbox: int, size: int, where: str) -> np.ndarray:
    if name not in group:
        raise ValueError(f"{where}: {group.name}/{name} is missing")
    off = np.asarray(group[name][()], dtype=np.int64).reshape(-1)
    if off.size != nbox + 1:
        raise ValueError(f"{where}: {group.name}/{name} has {off.size} entries for {nbox} boxes (want {nbox + 1})")
    if nbox and (off[0] < 0 or np.any(np.diff(off) < 0) or off[-1] > size):
        raise ValueError(f"{where}: {group.name}/{name} does not fit its data ({size} elements; offsets end at {off[-1]})")
    return off


def make_loader(entries: dict, boxes: list[Box]):
    """``entries``: field -> (FlatSource, offsets, component, per-component length per box, ghost).

    The loader returns box ``i``'s array of the field, ghost cells cropped."""

    def load(field: str, i: int) -> np.ndarray:
        src, offsets, comp, ghost = entries[field]
        box = boxes[i]
        shape = tuple(n + 2 * g for n, g in zip(box_shape(box), ghost))
        n = int(np.prod(shape, dtype=np.int64))
        start = int(offsets[i]) + comp * n
        a = src.read(start, start + n).reshape(shape, order="F")
        if any(ghost):
            a = a[tuple(slice(g, g + m) for g, m in zip(ghost, box_shape(box)))]
        return a

    return load


def make_raw(entries: dict, boxes: list[Box], dim: int):
    """``Level.raw_loader`` for the fields in ``entries`` (see ``make_loader``): where each box's
    values, ghost cells and all, sit in the mapped datasets; None unless every dataset is mapped
    (the writer then takes the boxes in place, no array each)."""
    if not boxes or not all(src.mapped for src, *_ in entries.values()):
        return None
    shapes = np.array([box_shape(b) for b in boxes], dtype=np.int64).reshape(-1, dim)

    def raw(field: str) -> tuple:
        src, offsets, comp, ghost = entries[field]
        # A box's components follow one another, each its box grown by the ghost cells.
        n = np.prod(shapes + 2 * np.asarray(ghost, dtype=np.int64), axis=1)
        starts = (np.asarray(offsets[:-1], dtype=np.int64) + comp * n) * src.dtype.itemsize
        return [src.bytes()], np.zeros(len(boxes), dtype=np.int64), starts, src.dtype, "F", tuple(ghost)

    return raw


def level_ratios(attr, coarse: Box, fine: Optional[Box], dim: int) -> tuple[int, ...]:
    if fine is not None:
        cs, fs = box_shape(coarse), box_shape(fine)
        if all(f % c == 0 and f >= c for c, f in zip(cs, fs)):
            return tuple(f // c for c, f in zip(cs, fs))
    if attr is None:
        raise ValueError("no ref_ratio")
    return int_vector(attr, dim)


def level_boxes(f, L: int, dim: int, path) -> tuple:
    """Group ``level_<L>``, its name for messages, and its boxes."""
    g = f[f"level_{L}"]
    where = f"{path} level_{L}"
    if "boxes" not in g:
        raise ValueError(f"{where}: no boxes dataset")
    return g, where, boxes_of(g["boxes"], dim, where)


def level_domains(f, nlev: int, dim: int, where: str) -> list[Box]:
    """Each level's index domain (``prob_domain``) from groups ``level_0`` .. ``level_<nlev-1>``."""
    domains = []
    for L in range(nlev):
        g = f.get(f"level_{L}")
        if g is None or "prob_domain" not in g.attrs:
            raise ValueError(f"{where}: level_{L} is missing or has no prob_domain")
        domains.append(compound_box(g.attrs["prob_domain"], dim))
    return domains


def physical_extent(g0, dx0, domain0: Box, dim: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """prob_lo and prob_hi: level 0's attributes where written, else from its domain and dx."""
    dx0 = np.array(dx0, dtype=float)
    if "prob_lo" in g0.attrs:
        lo = np.asarray(g0.attrs["prob_lo"], dtype=float).reshape(-1)[:dim]
    else:
        lo = dx0 * np.array(domain0[0], dtype=float)
    if "prob_hi" in g0.attrs:
        hi = np.asarray(g0.attrs["prob_hi"], dtype=float).reshape(-1)[:dim]
    else:
        hi = lo + dx0 * np.array(box_shape(domain0), dtype=float)
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def level_geometry(g, L: int, domains: list, dim: int, where: str) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Cell size and refinement ratio to the next level of level group ``g`` (level ``L`` of
    ``len(domains)``), as Chombo and AMReX's HDF5 writer record them."""
    if "vec_dx" in g.attrs or "Vec_dx" in g.attrs:
        dx = tuple(float(v) for v in np.asarray(g.attrs.get("vec_dx", g.attrs.get("Vec_dx"))).reshape(-1)[:dim])
    elif "dx" in g.attrs:
        dx = (as_scalar(g.attrs["dx"]),) * dim
    else:
        raise ValueError(f"{where}: no dx attribute")
    if L + 1 == len(domains):
        return dx, (1,) * dim
    try:
        return dx, level_ratios(g.attrs.get("ref_ratio"), domains[L], domains[L + 1], dim)
    except ValueError as e:
        raise ValueError(f"{where}: cannot tell the refinement ratio to level {L + 1}") from e


def is_chombo(f) -> bool:
    """An open h5py file with Chombo's layout: ``level_0`` holding ``boxes`` and a ``...:datatype=0``."""
    g = f.get("level_0")
    if g is None or not hasattr(g, "keys") or "boxes" not in g:
        return False
    return any(k.endswith(_DATA_SUFFIX) for k in g.keys())


def _dataset_fields(g, root_names: list[str], where: str):
    """The level's flat datasets as (prefix, field names per component, attributes group)."""
    out = []
    prefixes = sorted(k[: -len(_DATA_SUFFIX)] for k in g.keys() if k.endswith(_DATA_SUFFIX))
    if "data" in prefixes:  # a plot file
        attrs_g = g.get("data_attributes")
        ncomp = len(root_names)
        if attrs_g is not None and "comps" in attrs_g.attrs:
            ncomp = as_scalar(attrs_g.attrs["comps"], int)
        names = list(root_names[:ncomp]) + [f"component_{k}" for k in range(len(root_names), ncomp)]
        return [("data", names, attrs_g)]

    def order(p):
        base = p[:-4] if p.endswith("Data") and len(p) > 4 else p
        hits = [k for k, n in enumerate(root_names) if n.startswith(base)]
        return (hits[0] if hits else len(root_names), p)

    for p in sorted(prefixes, key=order):
        attrs_g = g.get(p + "_attributes")
        base = p[:-4] if p.endswith("Data") and len(p) > 4 else p
        ncomp = None
        if attrs_g is not None and "comps" in attrs_g.attrs:
            ncomp = as_scalar(attrs_g.attrs["comps"], int)
        if ncomp is None:
            raise ValueError(f"{where}: {g.name}/{p}_attributes has no 'comps': cannot split {p} into components")
        listed = component_names(attrs_g.attrs) if attrs_g is not None else []
        if len(listed) == ncomp:
            names = listed
        elif ncomp == 1:
            names = [base]
        else:
            names = [f"{base}_{k}" for k in range(ncomp)]
        out.append((p, names, attrs_g))
    return out


def open_hdf5(path: Path, accepts, refusal: str):
    """``path`` opened read-only with h5py, once ``accepts(file)`` says it is the expected kind
    (else ``ValueError(f"{path}: {refusal}")``)."""
    h5py = require_h5py()
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError(f"{path}: cannot open as HDF5: {e}") from e
    if not accepts(f):
        f.close()
        raise ValueError(f"{path}: {refusal}")
    return f


def read_chombo(path) -> Hierarchy:
    """Read a Chombo HDF5 plot file or checkpoint into a :class:`Hierarchy`."""
    path = Path(path)
    where = str(path)
    with open_hdf5(path, is_chombo, "not a Chombo file (no level_0 group with boxes and data)") as f:
        dim = space_dim(f, where)
        root_names = component_names(f.attrs)
        if "num_levels" in f.attrs:
            nlev = as_scalar(f.attrs["num_levels"], int)
        elif "finest_level" in f.attrs:
            nlev = as_scalar(f.attrs["finest_level"], int) + 1
        else:
            nlev = 0
            while f"level_{nlev}" in f:
                nlev += 1
        # Checkpoints keep groups for levels up to max_level; only those with boxes hold data.
        while nlev > 1 and "boxes" not in f.get(f"level_{nlev - 1}", {}):
            nlev -= 1
        handles = HandleCache(path)
        domains = level_domains(f, nlev, dim, where)
        levels: list[Level] = []
        fields: Optional[list[str]] = None
        ghosts: dict = {}
        for L in range(nlev):
            g, lw, boxes = level_boxes(f, L, dim, path)
            entries: dict = {}
            names_here: list[str] = []
            for prefix, names, attrs_g in _dataset_fields(g, root_names, lw):
                src = FlatSource(path, g[prefix + _DATA_SUFFIX], handles)
                offsets = read_offsets(g, prefix + _OFFSETS_SUFFIX, len(boxes), src.size, lw)
                hint = None
                if attrs_g is not None:
                    for key in ("outputGhost", "ghost"):
                        if key in attrs_g.attrs:
                            hint = int_vector(attrs_g.attrs[key], dim)
                            break
                ghost = ghost_width(boxes, offsets, len(names), hint, dim, f"{lw} {prefix}")
                ghosts.setdefault(prefix, ghost)
                for k, name in enumerate(names):
                    if name in entries:
                        raise ValueError(f"{lw}: field {name!r} appears twice")
                    entries[name] = (src, offsets, k, ghost)
                    names_here.append(name)
            if fields is None:
                fields = names_here
            elif sorted(fields) != sorted(names_here):
                raise ValueError(f"{lw}: fields {names_here} differ from level 0's {fields}")
            dx, ratios = level_geometry(g, L, domains, dim, lw)
            owners = [0] * len(boxes)
            if "Processors" in g and g["Processors"].size == len(boxes):
                owners = [int(v) for v in np.asarray(g["Processors"][()]).reshape(-1)]
            levels.append(
                Level(boxes, ratios, dx, domains[L], owners, fields, make_loader(entries, boxes), raw_loader=make_raw(entries, boxes, dim))
            )
        check_nesting(levels, None, where)
        g0 = f["level_0"]
        prob_lo, prob_hi = physical_extent(g0, levels[0].dx, domains[0], dim)
        time = f.attrs.get("time", g0.attrs.get("time", 0.0))
        step = f.attrs.get("current_step", f.attrs.get("iteration", 0))
        attrs = {
            "format": "chombo",
            "kind": "plot" if "data" in ghosts else "checkpoint",
            "ghost_cells": ghosts,
            "source": where,
        }
        if "filetype" in f.attrs:
            attrs["filetype"] = as_str(f.attrs["filetype"])
        # Checkpoints record the problem's periodicity (plot files do not); the store keeps it
        # for readers such as the yt frontend.
        periodic = [f.attrs.get(f"is_periodic_{d}", g0.attrs.get(f"is_periodic_{d}")) for d in range(dim)]
        if all(p is not None for p in periodic):
            attrs["periodicity"] = [bool(as_scalar(p, int)) for p in periodic]
        return Hierarchy(
            fields=list(fields or []),
            levels=levels,
            prob_lo=tuple(float(v) for v in prob_lo),
            prob_hi=tuple(float(v) for v in prob_hi),
            coord_sys=0,
            time=as_scalar(time),
            step=as_scalar(step, int),
            attrs=attrs,
        )
