"""Plain n-D variables written by every rank of an MPI job, PnetCDF-style, then read back.

    .venv/bin/mpiexec -n 4 .venv/bin/python examples/python/parallel_variables.py /tmp/run

Each rank holds a slab of a 3-D temperature field (a 1-D decomposition along z) and a run of
FLASH-style 8^3 blocks; it puts them, the ranks flush once and commit one snapshot; then every
rank reads its slab back, and all of them the whole field (through chunk owners).
"""

import sys

import numpy as np
from mpi4py import MPI

from amrzip import parallel

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
store = sys.argv[1] if len(sys.argv) > 1 else "run"

n, blocks_per_rank = 128, 16
z0, z1 = n * rank // size, n * (rank + 1) // size
z, y, x = np.meshgrid(np.arange(z0, z1), np.arange(n), np.arange(n), indexing="ij")
temp = (300 + 20 * np.sin(x / 9.0) * np.cos(y / 13.0) + 0.1 * z).astype(np.float32)
blocks = np.random.default_rng(rank).normal(size=(blocks_per_rank, 8, 8, 8))

variables = {
    "temp": dict(shape=(n, n, n), dtype="float32", chunks=(32, 64, 64)),
    "unk": dict(shape=(blocks_per_rank * size, 8, 8, 8), dtype="float64", chunks=(16, 8, 8, 8), abs=1e-3),
}
with parallel.Writer(comm, store, variables, rel=1e-4, snapshot="step_000010") as w:
    w.put("temp", (z0, 0, 0), temp)
    w.put("unk", (rank * blocks_per_rank, 0, 0, 0), blocks)
if rank == 0:
    s = w.summary
    print(f"{s['path']}: {s['original_bytes'] / 1e6:.1f} MB in {s['stored_bytes'] / 1e6:.2f} MB")

r = parallel.open_variables(comm, store, "step_000010")
mine = r.read_all("temp", (z0, 0, 0), temp.shape)
worst = comm.allreduce(float(np.abs(mine - temp).max()), op=MPI.MAX)
whole = r.read_all("temp")
if rank == 0:
    print(f"largest error {worst:.3g} (bound {r.variables['temp']['abs_bound']:.3g}); whole field read {r.last_method}ly, {whole.shape}")
