"""What each rank runs in tests/test_parallel.py, under mpiexec:

    parallel_ranks.py write KIND STORE DISTRIBUTION   write synthetic.small(KIND) at rel 1e-4
    parallel_ranks.py fail STORE                       rank 1's data raises while level 1 is read
                                                       (each rank writes its error beside STORE)
    parallel_ranks.py kill STORE                       rank 1 dies (SIGKILL) while level 1 is read
    parallel_ranks.py mismatch STORE                   rank 1 asks for another bound than the others
    parallel_ranks.py read KIND STORE                  each rank reads its boxes and checks them
"""

import json
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

from amrzip import parallel
from amrzip.amr import synthetic
from amrzip.parallel.distribution import distribute, part

comm = MPI.COMM_WORLD
command = sys.argv[1]


def sabotaged(h, what):
    """`h` with rank 1's loader of level 1 failing as `what` says."""
    lev = h.levels[1]
    inner = lev.loader

    def loader(field, i):
        if comm.Get_rank() == 1:
            if what == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError("this rank's data cannot be read")
        return inner(field, i)

    lev.loader, lev.arrays = loader, None
    return h


if command == "write":
    kind, store, how = sys.argv[2:5]
    h = synthetic.small(kind)
    owners = [distribute(lev.boxes, comm.Get_size(), how) for lev in h.levels]
    summary = parallel.write(comm, part(h, comm.Get_rank(), owners), store, rel=1e-4)
    if comm.Get_rank() == 0:
        print(json.dumps({"stored_bytes": summary["stored_bytes"], "path": summary["path"]}))
elif command in ("fail", "kill", "mismatch"):
    store = sys.argv[2]
    h = synthetic.small("nyx")
    owners = [distribute(lev.boxes, comm.Get_size(), "round-robin") for lev in h.levels]
    mine = part(h, comm.Get_rank(), owners)
    if command != "mismatch":
        mine = sabotaged(mine, command)
    rel = 1e-3 if command == "mismatch" and comm.Get_rank() == 1 else 1e-4
    try:
        parallel.write(comm, mine, store, rel=rel, snapshot="broken")
    except ValueError as e:
        # One file per rank: the ranks' standard outputs interleave.
        with open(os.path.join(os.path.dirname(store), f"error-{comm.Get_rank()}.json"), "w") as out:
            json.dump({"rank": comm.Get_rank(), "error": str(e)}, out)
elif command == "read":
    kind, store = sys.argv[2:4]
    h = synthetic.small(kind)
    ds = parallel.open(comm, store)
    worst, cells = 0.0, 0
    for L, lev in enumerate(h.levels):
        where = {tuple(map(tuple, b)): i for i, b in enumerate(lev.boxes)}
        stored = ds.level(L)
        for f in h.fields:
            eb = ds.bounds[f]["abs"]
            for i, a in ds.read_my_boxes(f, L, covered="nan").items():
                lo, hi = stored.boxes[i]
                source = lev.box_data(f, where[(tuple(lo), tuple(hi))])
                keep = ~np.isnan(a)
                cells += int(keep.sum())
                if keep.any():
                    worst = max(worst, float(np.max(np.abs(a[keep] - source[keep]))) / eb)
    totals = comm.gather((worst, cells))
    if comm.Get_rank() == 0:
        print(json.dumps({"worst": max(w for w, _ in totals), "cells": sum(c for _, c in totals)}))
