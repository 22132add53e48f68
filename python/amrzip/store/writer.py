"""Writes a hierarchy as a snapshot of the store, AMRIC-style: covered coarse cells are left
out, each (level, field) is cut into unit blocks that are predicted one by one and entropy-coded
with statistics shared by all of them, fields are compressed on their own with their own bound.

The work is done by the store's Rust core (``_core.write_snapshot``): it writes the snapshot into
a temporary file of the store and commits it when complete, so an interrupted write leaves the
store as it was. This module turns a :class:`~amrzip.amr.hierarchy.Hierarchy` and the user's
arguments into that call.
"""

from __future__ import annotations

import json
import numbers
from typing import Callable, Optional

import numpy as np

from amrzip import _core
from amrzip.amr.hierarchy import Hierarchy
from amrzip.codec import _bound as codec_bound
from amrzip.codec import _threads


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
    # The core takes any contiguous array of the field's dtype (it copies misaligned ones, as
    # memory maps of files with text headers give, itself); this one was not: copy it whole.
    if not (a.flags.aligned and (a.flags.c_contiguous or a.flags.f_contiguous)):
        a = np.array(a, order="K" if a.flags.f_contiguous else "C")
    return a


def _positive_int(value, name: str, low: int, high: Optional[int] = None):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}= must be an integer {span}, got {value!r}")
    return int(value)


def hierarchy_spec(h: Hierarchy, per_field: dict, dtypes: dict) -> dict:
    """What the store's core needs to know of hierarchy ``h`` besides its values: geometry, boxes
    and each field's type and bound (``per_field[f]`` = (mode, bound))."""
    return {
        "node": list(h.nodal),
        "fields": [{"name": f, "dtype": dtypes[f].name, "mode": per_field[f][0], "bound": per_field[f][1]} for f in h.fields],
        "levels": [
            {
                "domain": (list(lev.domain[0]), list(lev.domain[1])),
                "ref_ratio": [int(r) for r in lev.ref_ratios] if L + 1 < h.num_levels else [1] * h.dim,
                "dx": [float(x) for x in lev.dx],
                "boxes": [(list(lo), list(hi)) for lo, hi in lev.boxes],
                "owners": [int(o) for o in lev.owners],
            }
            for L, lev in enumerate(h.levels)
        ],
        "prob_lo": [float(v) for v in h.prob_lo],
        "prob_hi": [float(v) for v in h.prob_hi],
        "coord_sys": int(h.coord_sys),
        "time": float(h.time),
        "step": int(h.step),
        # Whatever JSON can keep of the reader's extras.
        "source": json.dumps(h.attrs, default=str),
    }


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
    comm=None,
) -> dict:
    """Compresses hierarchy ``h`` into the store at ``path`` (created if needed) as snapshot
    ``snapshot`` (default ``step_<step>``); returns a summary with sizes per level and field.

    Bounds: ``rel=`` (a fraction of each field's value range over the cells stored, i.e. those
    no finer level covers) or ``abs=`` for every field, and/or ``bounds={field: {"rel": v} |
    {"abs": v}}`` per field. Every stored cell comes back within its field's bound; covered
    cells are not stored and are rebuilt on read by averaging the finer level down. ``unit``
    is the unit block edge (default: per level and field, the best of the blocking factor the
    boxes honour and larger edges whose blocks are at least half stored, measured on a sample),
    ``chunk`` the chunk edge in cells (default: like the level's boxes, or larger where that
    codes smaller; a box-sized ``chunk`` keeps one-box reads to about the box's own chunk).
    ``sle``/``adaptive_block`` switch off shared lossless encoding (coder statistics per chunk) and
    AMRIC's regression block rule, for comparison. With ``conserve_mean`` (default) a
    (level, field) whose errors lean one way is coded so that its mean is kept.
    ``progress(message)`` is called as each (level, field) starts; an exception it raises stops
    the write and leaves the store as it was. With ``comm`` (an mpi4py communicator), every rank
    of it writes its part of one snapshot at once: ``h`` holds this rank's boxes only
    (docs/parallel.md; ``amrzip.parallel.write``).
    """
    if not isinstance(h, Hierarchy):
        raise TypeError(f"write() takes an amrzip.amr.Hierarchy, got {type(h).__name__}")
    if mode not in ("ratio", "speed"):
        raise ValueError(f"mode must be 'ratio' or 'speed', got {mode!r}")
    per_field = field_bounds(h.fields, rel=rel, abs=abs, bounds=bounds)
    name = snapshot if snapshot is not None else f"step_{h.step:06d}"
    _core.check_snapshot_name(name)
    if comm is not None:
        from amrzip.parallel import gathered_levels

        # Every rank's boxes, in one order whatever the distribution.
        levels, gathered_dtypes = gathered_levels(comm, h)
        if comm.Get_rank() != 0:
            progress = None
    dtypes = {f: np.dtype(gathered_dtypes[f] if comm is not None else h.dtype(f)).newbyteorder("=") for f in h.fields}
    for f, dt in dtypes.items():
        if dt not in (np.float32, np.float64):
            raise ValueError(f"field {f!r} is {dt}: the store keeps float32 and float64 fields")
    options = {
        "mode": mode,
        "unit": _positive_int(unit, "unit", 2, 256),
        "chunk": _positive_int(chunk, "chunk", 1),
        "threads": _threads(threads),
        "predictor": predictor,
        "sle": bool(sle),
        "adaptive_block": bool(adaptive_block),
        "conserve_mean": bool(conserve_mean),
    }
    spec = hierarchy_spec(h, per_field, dtypes)
    fields = list(h.fields)
    collective = None
    if comm is not None:
        from amrzip.parallel import Collective

        collective = Collective(comm)
        for spec_level, (all_boxes, owners, _) in zip(spec["levels"], levels):
            spec_level["boxes"], spec_level["owners"] = all_boxes, owners

    def boxes(L: int, f: int):
        # One field of one level at a time: readers of HDF5 files load a box when asked. The core
        # checks each array's shape, and hands back to `convert` those it cannot take as they are.
        # A reader that knows where every box's values sit (a plotfile's, a Chombo file's) gives
        # that instead: no Python object per box.
        lev = h.level(L)
        raw = lev.raw_loader(fields[f]) if lev.raw_loader is not None else None
        if raw is not None and np.dtype(raw[3]).newbyteorder("=") == dtypes[fields[f]]:
            buffers, which, offsets, dtype, order, ghost = raw
            mine = slice(None) if comm is None else np.asarray(levels[L][2], dtype=np.int64)
            which, offsets = (np.ascontiguousarray(a[mine], np.int64) for a in (which, offsets))
            # The core swaps the bytes of values in the other order as it copies them.
            return buffers, which, offsets, order, tuple(int(g) for g in ghost), not np.dtype(dtype).isnative
        arrays = lev.field_data(fields[f])
        return arrays if comm is None else [arrays[j] for j in levels[L][2]]

    def convert(a, f: int) -> np.ndarray:
        return _native(a, dtypes[fields[f]])

    report = None if progress is None else (lambda L, f: progress(f"level {L} field {fields[f]}"))
    summary = _core.write_snapshot(str(path), name, spec, boxes, convert, options, report, collective)
    summary["ratio"] = summary["original_bytes"] / max(summary["stored_bytes"], 1)
    return summary
