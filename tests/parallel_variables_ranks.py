"""One rank of the plain-variable tests (tests/test_parallel_variables.py), run under mpiexec:

    python parallel_variables_ranks.py write PATTERN STORE AGGREGATE   # writes, reads back, checks
    python parallel_variables_ranks.py overlap STORE                   # two ranks put the same cells
    python parallel_variables_ranks.py mismatch STORE                  # ranks define other variables
    python parallel_variables_ranks.py paths STORE                     # ranks name other stores

Rank 0 prints one JSON line."""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from amrzip import parallel

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def values(k: int, start, shape) -> np.ndarray:
    """Variable k's values over a region: smooth with some noise, the same whoever puts them."""
    idx = np.meshgrid(*[np.arange(s, s + n) for s, n in zip(start, shape)], indexing="ij")
    v = sum(np.sin(0.11 * (d + 1) * i + k) for d, i in enumerate(idx))
    noise = np.sin(sum(i * (7919.0 + 104.729 * d) for d, i in enumerate(idx)) * 12.9898 + k) * 0.01
    return (v + noise).astype(np.float64)


def pattern(name: str):
    """(variables, this rank's puts as (variable, start, shape))."""
    if name == "checkerboard":
        # Each rank a part of every chunk: with 4 ranks, one quarter (y, z quadrants) each.
        shape, chunk = (24, 32, 32), (12, 16, 16)
        grid = [s // c for s, c in zip(shape, chunk)]
        ny, nz = (2, 2) if size == 4 else (size, 1)
        my, mz = rank // nz, rank % nz
        puts = []
        for c in np.ndindex(*grid):
            lo = [ci * ch for ci, ch in zip(c, chunk)]
            sy, sz = chunk[1] // ny, chunk[2] // nz
            puts.append((0, (lo[0], lo[1] + my * sy, lo[2] + mz * sz), (chunk[0], sy, sz)))
        return {"rho": dict(shape=shape, dtype="float32", chunks=chunk)}, puts
    if name == "flash":
        # FLASH-style: 9 variables of blocks (8^3 here), each rank appending its blocks, chunks
        # of 3 blocks (so chunks straddle ranks).
        per_rank, b = 5, 8
        total = per_rank * size
        variables = {f"v{k}": dict(shape=(total, b, b, b), chunks=(3, b, b, b)) for k in range(9)}
        return variables, [(k, (rank * per_rank, 0, 0, 0), (per_rank, b, b, b)) for k in range(9)]
    if name == "many":
        # 120 small 1-D variables, each rank a contiguous part of each.
        n = 1000
        cut = [n * r // size for r in range(size + 1)]
        variables = {f"x{k:03d}": dict(shape=(n,), chunks=(400,)) for k in range(120)}
        return variables, [(k, (cut[rank],), (cut[rank + 1] - cut[rank],)) for k in range(120)]
    raise SystemExit(f"unknown pattern {name}")


def write(name: str, store: str, aggregate: bool) -> dict:
    variables, puts = pattern(name)
    names = list(variables)
    with parallel.Writer(comm, store, variables, rel=1e-3, snapshot=name, aggregate=aggregate) as w:
        for k, start, shape in puts:
            w.put(names[k], start, values(k, start, shape))
        report = w.flush()
    r = parallel.open_variables(comm, store, name)
    worst, methods = 0.0, set()
    for k, var in enumerate(names):
        info = r.variables[var]
        # This rank's own regions (independent), then the whole variable on every rank
        # (shared chunks: through owners).
        for _, start, shape in (p for p in puts if p[0] == k):
            got = r.read_all(var, start, shape)
            methods.add(r.last_method)
            worst = max(worst, float(np.abs(got - values(k, start, shape)).max()) / info["abs_bound"])
        got = r.read_all(var)
        methods.add(r.last_method)
        want = values(k, [0] * len(info["shape"]), info["shape"]).astype(info["dtype"])
        worst = max(worst, float(np.abs(got - want).max()) / info["abs_bound"])
        assert np.array_equal(got, r.read(var)), "collective and independent reads agree"
    worst = comm.allreduce(worst, op=MPI.MAX)
    methods = sorted(set().union(*comm.allgather(methods)))
    return {"summary": w.summary, "flush": report, "worst": worst, "methods": methods}


def overlap(store: str) -> dict:
    try:
        with parallel.Writer(comm, store, {"a": ((16,), "float64")}, abs=1e-3, snapshot="overlap") as w:
            w.put("a", (0,), np.zeros(10) + rank)
            w.flush()
    except ValueError as e:
        return {"error": str(e)}
    return {"error": None}


def mismatch(store: str) -> dict:
    try:
        parallel.Writer(comm, store, {"a": ((16 + rank,), "float64")}, abs=1e-3, snapshot="mismatch")
    except ValueError as e:
        return {"error": str(e)}
    return {"error": None}


def paths(store: str) -> dict:
    """Ranks naming different stores: the writer refuses; a reader that cannot open its store
    stops every rank."""
    errors = []
    try:
        parallel.Writer(comm, f"{store}-{rank}", {"a": ((16,), "float64")}, abs=1e-3, snapshot="p")
        errors.append(None)
    except ValueError as e:
        errors.append(str(e))
    with parallel.Writer(comm, store, {"a": ((16,), "float64")}, abs=1e-3, snapshot="p") as w:
        w.put("a", (8 * rank,), np.zeros(8)) if rank < 2 else None
    try:
        parallel.open_variables(comm, store if rank == 0 else f"{store}-missing")
        errors.append(None)
    except Exception as e:  # noqa: BLE001
        errors.append(f"{type(e).__name__}: {e}")
    return {"error": errors}


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "write":
        out = write(sys.argv[2], sys.argv[3], sys.argv[4] == "on")
    elif command == "overlap":
        out = overlap(sys.argv[2])
    elif command == "paths":
        out = paths(sys.argv[2])
    else:
        out = mismatch(sys.argv[2])
    errors = comm.gather(out.get("error"))
    if rank == 0:
        if command != "write":
            out = {"errors": errors}
        print(json.dumps(out))
