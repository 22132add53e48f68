"""One rank of the plain-variable patterns of benches/parallel_bench.py, started by mpiexec:

    parallel_variables.py CASE.npz METHOD RANKS OUT

CASE.npz (written by parallel_bench.py) holds a pattern's variables (whole arrays), their chunk
shapes and absolute bounds. Every rank takes its subarrays of each (``puts``), the ranks meet at
a barrier, write, meet again; rank 0 prints {"seconds", "stored_bytes"} as JSON (with ``amrzip``, also the seconds
of reading every put back: ``reads``). METHOD:

- ``amrzip`` / ``amrzip-noagg`` / ``amrzip-speed``: amrzip.parallel.Writer, every put then one
  flush and close, in ratio mode with aggregation (one owner assignment, exchange and write for
  all variables, up to 16 MiB a rank per round) or without (one per variable), or in speed mode
  with aggregation; one thread a rank;
- ``mpiio``: the raw values of every put, each rank's one after another in one file (MPI-IO,
  collective): the uncompressed contiguous peer;
- ``h5py-sz3``: parallel HDF5 (h5py built with MPI), one dataset per variable in our chunk shape,
  compressed by hdf5plugin's SZ3 filter at the same bounds, each rank writing its selection
  collectively (one hyperslab per variable).

Patterns: ``checkerboard`` (each rank one part of every chunk: quadrants in y and z with 4 ranks,
halves with 2), ``flash`` (variables of blocks along the first axis, each rank a contiguous run
of blocks, FLASH's block append) and ``many`` (1-D variables, each rank a contiguous part of each).
"""

import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def split(n: int, parts: int, k: int) -> tuple:
    return n * k // parts, n * (k + 1) // parts


def selection(pattern: str, shape, chunks):
    """This rank's part of a variable: (puts as (start, shape), hyperslab as (start, stride,
    count, block))."""
    if pattern == "checkerboard":
        ny, nz = (2, 2) if size == 4 else (size, 1)
        my, mz = rank // nz, rank % nz
        part = (chunks[0], chunks[1] // ny, chunks[2] // nz)
        first = (0, my * part[1], mz * part[2])
        grid = [s // c for s, c in zip(shape, chunks)]
        puts = [(tuple(f + c * ch for f, c, ch in zip(first, cell, chunks)), part) for cell in np.ndindex(*grid)]
        return puts, (first, tuple(chunks), tuple(grid), part)
    # flash and many: a contiguous run along the first axis.
    lo, hi = split(shape[0], size, rank)
    start, extent = (lo,) + (0,) * (len(shape) - 1), (hi - lo,) + tuple(shape[1:])
    return [(start, extent)], (start, (1,) * len(shape), (1,) * len(shape), extent)


def region(a, start, extent):
    return a[tuple(slice(s, s + n) for s, n in zip(start, extent))]


def in_file_order(shape, dtype, puts, slab):
    """A rank's values in the order of its hyperslab in the file (row-major over the cells it
    selects), as HDF5 takes them."""
    if len(puts) == 1:
        return puts[0][1]
    start, stride, count, block = slab
    index = [np.concatenate([np.arange(s + c * st, s + c * st + bl) for c in range(n)]) for s, st, n, bl in zip(start, stride, count, block)]
    whole = np.zeros(shape, dtype)
    for s, v in puts:
        whole[tuple(slice(a, a + n) for a, n in zip(s, v.shape))] = v
    return np.ascontiguousarray(whole[np.ix_(*index)])


def main():
    case_path, method, _, out = sys.argv[1:5]
    case = np.load(case_path)
    pattern = str(case["pattern"])
    names = [str(n) for n in case["names"]]
    bounds = case["abs_bounds"]
    variables = []
    for k, name in enumerate(names):
        a = case[f"var_{k}"]
        chunks = tuple(int(c) for c in case[f"chunks_{k}"])
        puts, slab = selection(pattern, a.shape, chunks)
        # Copies: only this rank's parts stay in memory, as in a simulation.
        variables.append((name, a.shape, a.dtype, chunks, [(s, np.ascontiguousarray(region(a, s, e))) for s, e in puts], slab))
    del case
    if method == "h5py-sz3":
        # Arranged before the clock starts: a simulation would hold them so.
        variables = [(n, sh, dt, ch, [(None, in_file_order(sh, dt, puts, slab))], slab) for n, sh, dt, ch, puts, slab in variables]
    comm.Barrier()
    t = time.perf_counter()
    if method.startswith("amrzip"):
        from amrzip import parallel

        specs = {name: dict(shape=shape, dtype=dt.name, chunks=chunks, abs=float(b)) for (name, shape, dt, chunks, _, _), b in zip(variables, bounds)}
        w = parallel.Writer(comm, out, specs, snapshot="s", aggregate=method != "amrzip-noagg", mode="speed" if method == "amrzip-speed" else "ratio", threads=1)
        for name, _, _, _, puts, _ in variables:
            for start, values in puts:
                w.put(name, start, values)
        stored = w.close()["stored_bytes"]
    elif method == "mpiio":
        buf = np.concatenate([v.reshape(-1).view(np.uint8) for *_, puts, _ in variables for _, v in puts])
        sizes = comm.allgather(buf.nbytes)
        fh = MPI.File.Open(comm, out, MPI.MODE_WRONLY | MPI.MODE_CREATE)
        fh.Write_at_all(sum(sizes[:rank]), buf)
        fh.Sync()
        fh.Close()
        stored = sum(sizes)
    else:
        import h5py
        import hdf5plugin

        with h5py.File(out, "w", driver="mpio", comm=comm) as f:
            for (name, shape, dt, chunks, puts, slab), b in zip(variables, bounds):
                d = f.create_dataset(name, shape=shape, dtype=dt, chunks=chunks, **hdf5plugin.SZ3(absolute=float(b)))
                start, stride, count, block = slab
                fspace = d.id.get_space()
                fspace.select_hyperslab(start, count, stride, block)
                mem = puts[0][1]
                mspace = h5py.h5s.create_simple(mem.shape)
                dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
                dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
                d.id.write(mspace, fspace, mem, dxpl=dxpl)
        stored = os.path.getsize(out)
    comm.Barrier()
    result = {"seconds": time.perf_counter() - t, "stored_bytes": int(stored)}
    if method == "amrzip":
        result["reads"] = reads(out, variables)
    if rank == 0:
        print(json.dumps(result))


def reads(store, variables) -> dict:
    """Seconds for every rank to read back its puts' regions (a collective call each: ``own``)
    and every variable whole (``whole``), through chunk owners, independently, and as chosen by
    overlap (with the way chosen)."""
    from amrzip import parallel

    r = parallel.open_variables(comm, store, "s")
    out = {}
    for workload in ("own", "whole"):
        times = {}
        for method in ("collective", "independent", None):
            chosen = set()
            comm.Barrier()
            t = time.perf_counter()
            for name, shape, _, _, puts, _ in variables:
                for start, extent in [(s, v.shape) for s, v in puts] if workload == "own" else [((0,) * len(shape), shape)]:
                    r.read_all(name, start, extent, method)
                    chosen.add(r.last_method)
            comm.Barrier()
            times[method or "auto"] = time.perf_counter() - t
            if method is None:
                times["chosen"] = "+".join(sorted(chosen))
        out[workload] = times
    return out


if __name__ == "__main__":
    main()
