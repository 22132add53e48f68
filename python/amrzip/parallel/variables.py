"""Plain n-D variables written by every rank of an MPI job, any subarrays of any variable, in
PnetCDF's non-blocking style (docs/parallel.md, "Plain variables"):

    w = Writer(comm, "out", {"temp": ((512, 512, 512), "float32")}, rel=1e-4, snapshot="t0010")
    w.put("temp", (z0, y0, x0), block)       # any number of times: recorded, not yet written
    w.flush()                                 # collective: chunk owners, one exchange, compress, write
    summary = w.close()                       # collective: metadata, one commit

Each chunk touched by a flush gets one owner (largest access less a penalty for load beyond an even
share, counted over all variables: aggregation), which assembles it from every rank's pieces,
compresses it and writes it. The snapshot is a Zarr v3 hierarchy (one array per variable, each
chunk an amrzip stream), read back with :func:`open_variables` or zarr-python.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from amrzip import _core


def _collective(comm):
    if comm is None:
        return None
    from amrzip.parallel import Collective

    return comm if isinstance(comm, Collective) else Collective(comm)


def _variable(name, spec, rel, abs, fill):
    """(name, dtype, shape, chunks, bound kind, bound, fill) from ``(shape, dtype)`` or a dict
    with shape, dtype and optionally chunks, rel, abs, fill."""
    if isinstance(spec, dict):
        unknown = set(spec) - {"shape", "dtype", "chunks", "rel", "abs", "fill"}
        if unknown:
            raise ValueError(f"variable {name!r}: unknown settings {sorted(unknown)}")
        shape, dtype = spec.get("shape"), spec.get("dtype", "float64")
        chunks, fill = spec.get("chunks"), spec.get("fill", fill)
        if "rel" in spec or "abs" in spec:
            rel, abs = spec.get("rel"), spec.get("abs")
    else:
        try:
            shape, dtype = spec
        except (TypeError, ValueError):
            raise ValueError(f"variable {name!r}: give (shape, dtype) or a dict with shape, dtype, chunks, rel/abs, fill") from None
        chunks = None
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"variable {name!r}: amrzip compresses float32 and float64 variables, not {dtype}")
    if (rel is None) == (abs is None):
        raise ValueError(f"variable {name!r}: give exactly one of rel= and abs= (for every variable, or in its settings)")
    shape = tuple(int(n) for n in np.atleast_1d(shape))
    chunks = [] if chunks is None else [int(c) for c in np.atleast_1d(chunks)]
    kind, bound = ("rel", float(rel)) if rel is not None else ("abs", float(abs))
    return str(name), dtype.name, list(shape), chunks, kind, bound, float(fill)


class Writer:
    """Variables written by every rank of ``comm`` (an mpi4py communicator, or None for this
    process alone) into snapshot ``snapshot`` of the store at ``path``.

    ``variables`` maps each name to ``(shape, dtype)`` or to a dict of ``shape``, ``dtype``,
    ``chunks`` (default: about 1 MiB shaped like the array), ``rel``/``abs`` and ``fill``
    (what cells no rank puts read as; default NaN). ``rel``/``abs`` here apply to every variable
    that sets none; a relative bound is a fraction of the value range gathered from every rank
    at the first flush that puts into the variable. ``mode`` is "ratio" or "speed";
    ``aggregate=False`` assigns owners and exchanges and writes one variable at a time (for
    comparison). Creating, :meth:`flush` and :meth:`close` are collective; every rank passes
    the same variables and options."""

    def __init__(self, comm, path, variables: dict, *, snapshot: str = "variables", rel=None, abs=None, fill=math.nan,
                 mode: str = "ratio", aggregate: bool = True, threads: Optional[int] = None):
        if not variables:
            raise ValueError("give at least one variable")
        specs = [_variable(n, s, rel, abs, fill) for n, s in variables.items()]
        self._comm = _collective(comm)
        self._core = _core.VariablesWriter(str(path), snapshot, specs, mode, bool(aggregate), threads, self._comm)
        self._index = {s[0]: i for i, s in enumerate(specs)}
        self._dtypes = {s[0]: np.dtype(s[1]) for s in specs}
        self._puts: list = []
        self.chunks = {name: tuple(chunks) for name, _, _, chunks in self._core.variables()}

    def put(self, name: str, start, array) -> None:
        """Records ``array`` (of any float type: converted to the variable's) as the subarray of
        variable ``name`` from index ``start``; written at the next :meth:`flush`. The array is
        copied, so the caller may reuse it at once. Puts of one flush must not overlap, and a
        chunk an earlier flush wrote takes no more puts (both raise)."""
        if name not in self._index:
            raise KeyError(f"no variable {name!r} (defined: {sorted(self._index)})")
        values = np.array(array, dtype=self._dtypes[name], order="C", copy=True)
        start = [int(s) for s in np.atleast_1d(start)]
        self._core.check_put(self._index[name], start, list(values.shape), values.size, values.dtype.name)
        self._puts.append((self._index[name], start, values))

    def flush(self) -> dict:
        """Writes every chunk the ranks' puts since the last flush touch (collective). Returns
        the chunks written, the rounds taken, and the bytes this rank sent to others."""
        puts, self._puts = self._puts, []
        return self._core.flush(puts, self._comm)

    def close(self) -> dict:
        """Flushes what is left, writes the metadata and commits the snapshot (collective).
        Every rank returns the same summary: path, sizes, and per variable its bound, chunks
        and sizes."""
        # Collective even with no puts left here: other ranks may have some.
        self.flush()
        return self._core.close(self._comm)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.summary = self.close()
        else:
            self._core.abandon()
        return False


class VariablesReader:
    """A snapshot of variables opened by every rank of ``comm`` (or by this process alone)."""

    def __init__(self, comm, core):
        self._comm = _collective(comm)
        self._core = core
        self.variables = {v["name"]: v for v in core.variables()}

    def _region(self, name, start, shape):
        if name not in self.variables:
            raise KeyError(f"no variable {name!r} (it has {sorted(self.variables)})")
        full = self.variables[name]["shape"]
        start = [0] * len(full) if start is None else [int(s) for s in np.atleast_1d(start)]
        shape = [n - s for n, s in zip(full, start)] if shape is None else [int(n) for n in np.atleast_1d(shape)]
        return start, shape

    def read(self, name: str, start=None, shape=None, threads: Optional[int] = None) -> np.ndarray:
        """Region ``start``/``shape`` of variable ``name`` (default all of it), read by this rank
        alone."""
        start, shape = self._region(name, start, shape)
        return self._core.read(name, start, shape, threads)

    def read_all(self, name: str, start=None, shape=None, method: Optional[str] = None) -> np.ndarray:
        """Collective read of variable ``name``, each rank its own region. ``method``
        "collective" decodes each chunk once, at an owner that sends the ranks their pieces;
        "independent" has each rank decode the chunks it needs; None (default) chooses
        collective when the ranks' regions share chunks. The way taken is in ``last_method``."""
        start, shape = self._region(name, start, shape)
        values, self.last_method = self._core.read_collective(name, start, shape, self._comm, method)
        return values


def open_variables(comm, path, snapshot: Optional[str] = None) -> VariablesReader:
    """Opens snapshot ``snapshot`` (default the latest) of variables in the store at ``path`` on
    every rank of ``comm`` (collective: a rank that cannot open it stops them all), or in this
    process alone when ``comm`` is None."""
    if comm is None:
        return VariablesReader(None, _core.VariablesFile(str(path), snapshot))
    from amrzip.parallel import on_every_rank

    return VariablesReader(comm, on_every_rank(comm, lambda: _core.VariablesFile(str(path), snapshot)))


__all__ = ["Writer", "VariablesReader", "open_variables"]
