"""One rank of a benches/parallel_bench.py measurement, started by mpiexec:

    parallel_workers.py CASE.npz METHOD RANKS OUT [MODE]

CASE.npz (written by parallel_bench.py) holds an AMR hierarchy's boxes and values and, per rank
count, which rank holds each box. Every rank loads its boxes, the ranks meet at a barrier, write,
meet again; rank 0 prints {"seconds", "stored_bytes"} as JSON. METHOD:

- ``amrzip``: amrzip.parallel.write into the store OUT, in MODE (ratio, the default, or speed),
  one thread a rank (as the peers: a rank per core);
- ``mpiio``: the raw values, each rank's boxes one after another in one file (MPI-IO, collective);
- ``h5py-sz3``: parallel HDF5 (h5py built with MPI), one dataset per (level, field) with each
  rank's boxes contiguous, in chunks of at most 2^20 values compressed by hdf5plugin's SZ3 filter
  at the same absolute bounds, written collectively.

Imports only numpy and mpi4py besides what the method needs, so that the HDF5 peer can run in an
environment of its own (h5py built against the system's Open MPI).
"""

import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
case_path, method, ranks, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mode = sys.argv[5] if len(sys.argv) > 5 else "ratio"
case = np.load(case_path)
rank = comm.Get_rank()
dim = int(case["dim"])
fields = [str(f) for f in case["fields"]]
dtypes = [np.dtype(str(d)) for d in case["dtypes"]]
levels = int(case["levels"])
bounds = case["abs_bounds"]


def level_boxes(L):
    return case[f"boxes_{L}"].reshape(-1, 2, dim)


def mine(L):
    """This rank's boxes of level L (indexes) and each one's values per field (views)."""
    boxes = level_boxes(L)
    owners = case[f"owners_{ranks}_{L}"]
    cells = np.prod(boxes[:, 1] - boxes[:, 0] + 1, axis=1)
    start = np.concatenate(([0], np.cumsum(cells)))
    idx = np.flatnonzero(owners == rank)
    data = {}
    for f in fields:
        # Copies: this rank's boxes alone stay in memory (an npz member is read whole).
        values = case[f"data_{L}_{f}"]
        data[f] = [values[start[i] : start[i + 1]].reshape(tuple(boxes[i, 1] - boxes[i, 0] + 1)).copy() for i in idx]
    return idx, data, cells


loaded = [mine(L) for L in range(levels)]


def amrzip_write():
    from amrzip import parallel
    from amrzip.amr.hierarchy import Hierarchy

    specs = []
    for L in range(levels):
        idx, data, _ = loaded[L]
        boxes = level_boxes(L)
        spec = {"boxes": [(tuple(boxes[i, 0]), tuple(boxes[i, 1])) for i in idx], "data": data, "domain": tuple(map(tuple, case[f"domain_{L}"]))}
        if L + 1 < levels:
            spec["ref_ratio"] = tuple(int(r) for r in case[f"ratio_{L}"])
        specs.append(spec)
    h = Hierarchy.from_arrays(specs, prob_lo=case["prob_lo"], prob_hi=case["prob_hi"])
    comm.Barrier()
    t = time.perf_counter()
    s = parallel.write(comm, h, out, bounds={f: {"abs": float(b)} for f, b in zip(fields, bounds)}, snapshot="s", mode=mode, threads=1)
    comm.Barrier()
    return time.perf_counter() - t, s["stored_bytes"]


def mpiio_write():
    mine_bytes = [np.concatenate([a.ravel() for a in loaded[L][1][f]]) if len(loaded[L][0]) else np.empty(0) for L in range(levels) for f in fields]
    comm.Barrier()
    t = time.perf_counter()
    buf = np.concatenate(mine_bytes) if mine_bytes else np.empty(0)
    sizes = comm.allgather(buf.nbytes)
    fh = MPI.File.Open(comm, out, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    fh.Write_at_all(sum(sizes[:rank]), buf)
    fh.Sync()
    fh.Close()
    comm.Barrier()
    return time.perf_counter() - t, sum(sizes)


def h5py_write():
    import h5py
    import hdf5plugin

    comm.Barrier()
    t = time.perf_counter()
    with h5py.File(out, "w", driver="mpio", comm=comm) as f:
        for L in range(levels):
            idx, data, cells = loaded[L]
            owners = case[f"owners_{ranks}_{L}"]
            per_rank = np.bincount(owners, weights=cells, minlength=ranks).astype(np.int64)
            total = int(per_rank.sum())
            offset = int(per_rank[:rank].sum())
            for k, name in enumerate(fields):
                values = np.concatenate([a.ravel() for a in data[name]]) if len(idx) else np.empty(0, dtypes[k])
                d = f.create_dataset(
                    f"level_{L}/{name}", shape=(total,), dtype=dtypes[k],
                    chunks=(min(total, 1 << 20),), **hdf5plugin.SZ3(absolute=float(bounds[k])),
                )
                if len(values):
                    with d.collective:
                        d[offset : offset + len(values)] = values
                else:
                    # A rank without boxes here still takes part in the collective write, with
                    # an empty selection (h5py skips empty slices, and the others would wait).
                    fspace = d.id.get_space()
                    fspace.select_none()
                    mspace = h5py.h5s.create_simple((1,))
                    mspace.select_none()
                    dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
                    dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
                    d.id.write(mspace, fspace, np.zeros(1, dtypes[k]), dxpl=dxpl)
    comm.Barrier()
    return time.perf_counter() - t, os.path.getsize(out)


seconds, stored = {"amrzip": amrzip_write, "mpiio": mpiio_write, "h5py-sz3": h5py_write}[method]()
if rank == 0:
    print(json.dumps({"seconds": seconds, "stored_bytes": int(stored)}))
