"""Snapshots written and read by every rank of an MPI job at once (docs/parallel.md).

Each rank holds some boxes of each level (AMReX's distribution map); ``write(comm, part, path)``
makes one snapshot of all of them, as a serial write of the whole hierarchy would: bounds and
layout decisions come from reductions, each shard of a level is compressed by one owner (the
rank holding most of it, less a penalty for load beyond an even share), the others send it their
pieces, and every owner writes its shards into the snapshot file at its own offset with MPI-IO.
Rank 0 commits. The work is in the store's Rust core; this module is the MPI transport (mpi4py)
and the gathering of the box lists.

Needs ``mpi4py`` (``pip install mpi4py mpich`` for a laptop; a cluster's own MPI otherwise).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from amrzip.amr.hierarchy import Hierarchy
from amrzip.store.dataset import Dataset, open_store
from amrzip.store.writer import write as write_store


class Collective:
    """An mpi4py communicator as the core's writer calls it (``all_gather``, ``exchange``,
    ``write_at``). Byte strings travel as they are: no pickling on the data path."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def all_gather(self, data: bytes) -> list:
        from mpi4py import MPI

        counts = np.array(self.comm.allgather(len(data)), dtype=np.int64)
        out = np.empty(int(counts.sum()), dtype=np.uint8)
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        self.comm.Allgatherv(np.frombuffer(data, dtype=np.uint8), [out, counts, displs, MPI.BYTE])
        return [out[d : d + c].tobytes() for d, c in zip(displs, counts)]

    def exchange(self, data: bytes, lengths: list) -> tuple:
        """Sends ``lengths[r]`` bytes of ``data`` (the messages one after another) to each rank
        r; returns what came, one message after another, and the length of each."""
        from mpi4py import MPI

        send_counts = np.array(lengths, dtype=np.int64)
        recv_counts = np.empty(self.size, dtype=np.int64)
        self.comm.Alltoall(send_counts, recv_counts)
        recv = np.empty(int(recv_counts.sum()), dtype=np.uint8)
        sd = np.concatenate(([0], np.cumsum(send_counts)[:-1]))
        rd = np.concatenate(([0], np.cumsum(recv_counts)[:-1]))
        self.comm.Alltoallv([np.frombuffer(data, dtype=np.uint8), send_counts, sd, MPI.BYTE], [recv, recv_counts, rd, MPI.BYTE])
        return recv, recv_counts.tolist()

    def write_at(self, path: str, offset: int, data: bytes) -> None:
        from mpi4py import MPI

        fh = MPI.File.Open(self.comm, path, MPI.MODE_WRONLY)
        try:
            fh.Write_at_all(offset, np.frombuffer(data, dtype=np.uint8))
        finally:
            fh.Close()


def gathered_levels(comm, h: Hierarchy) -> tuple[list, dict]:
    """Every rank's boxes per level, in one order whatever the distribution (by lower corner, z
    slowest, as AMReX lists boxes), with the rank holding each; per level the order in which
    this rank's boxes come in it; and the dtype of each field. Checks that the ranks describe
    one hierarchy."""
    mine = {
        "fields": list(h.fields),
        "dim": h.dim,
        "levels": [(lev.domain, tuple(lev.ref_ratios), tuple(lev.dx)) for lev in h.levels],
        "boxes": [np.array(lev.boxes, dtype=np.int64).reshape(-1, 2 * h.dim) for lev in h.levels],
        "dtypes": {f: np.dtype(h.dtype(f)).str for f in h.fields} if any(lev.boxes for lev in h.levels) else None,
        "geometry": (tuple(h.prob_lo), tuple(h.prob_hi), h.coord_sys, h.time, h.step, h.nodal),
    }
    everyone = comm.allgather(mine)
    first = everyone[0]
    for r, other in enumerate(everyone):
        for key in ("fields", "dim", "levels", "geometry"):
            if other[key] != first[key]:
                raise ValueError(f"rank {r}'s hierarchy has other {key} than rank 0's: every rank must describe the same snapshot")
    dtypes = next((o["dtypes"] for o in everyone if o["dtypes"]), None) or {f: "<f8" for f in h.fields}
    rank, levels = comm.Get_rank(), []
    for L in range(len(h.levels)):
        boxes = np.concatenate([o["boxes"][L] for o in everyone])
        owners = np.concatenate([np.full(len(o["boxes"][L]), r, dtype=np.int64) for r, o in enumerate(everyone)])
        local = np.concatenate([np.arange(len(o["boxes"][L]), dtype=np.int64) for o in everyone])
        order = np.lexsort(boxes[:, : h.dim].T)
        boxes, owners, local = boxes[order], owners[order], local[order]
        spec_boxes = [(row[: h.dim], row[h.dim :]) for row in boxes.tolist()]
        levels.append((spec_boxes, owners.tolist(), local[owners == rank].tolist()))
    return levels, {f: np.dtype(d) for f, d in dtypes.items()}


def write(comm, h: Hierarchy, path, **options) -> dict:
    """Writes the snapshot whose boxes the ranks of ``comm`` hold, each its part ``h`` (a
    Hierarchy with the same levels, fields and geometry on every rank, and only this rank's
    boxes), into the store at ``path``. Collective: every rank calls it with the same options
    (those of :func:`amrzip.write`). The snapshot does not depend on how the boxes are spread:
    its boxes are listed by lower corner, and every rank count writes the same chunks. Every
    rank returns the same summary; an error on any rank raises on all of them (that rank's own
    exception there, a ``ValueError`` naming it elsewhere) and leaves the store as it was."""
    return write_store(h, path, comm=comm, **options)


def write_from(comm, h: Hierarchy, path, distribution: str = "knapsack", **options) -> dict:
    """``write`` of a hierarchy every rank has opened (a file read lazily: each rank loads only
    the boxes it gets), shared out by an AMReX-style ``distribution`` map (see
    :func:`amrzip.parallel.distribution.distribute`)."""
    from amrzip.parallel.distribution import distribute, part

    owners = [distribute(lev.boxes, comm.Get_size(), distribution) for lev in h.levels]
    return write(comm, part(h, comm.Get_rank(), owners), path, **options)


# Variables MPI launchers set in each process they start (MPICH/hydra and Intel MPI, Open MPI,
# PMIx, MVAPICH, Slurm's srun).
_LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")


def world():
    """MPI's world communicator when this process is one of several an MPI launcher started
    (``mpiexec -n 4 amrzip convert ...``), else None (mpi4py is then not even imported)."""
    import os

    if not any(v in os.environ for v in _LAUNCHER_VARIABLES):
        return None
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError("started by an MPI launcher, but mpi4py is not installed: pip install mpi4py (and mpich, or use the site MPI)") from e
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


class ParallelDataset:
    """A snapshot opened by every rank: the whole store is readable from each, and ``my_boxes``
    splits each level's boxes among the ranks (those each wrote, when as many ranks read as
    wrote; else by cells, each rank a contiguous run of about the same number of cells)."""

    def __init__(self, comm, ds: Dataset):
        self.comm = comm
        self.dataset = ds

    def my_boxes(self, level: int) -> list[int]:
        lev = self.dataset.level(level)
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        owners = np.asarray(lev.owners, dtype=np.int64)
        if len(owners) and owners.max() == size - 1 and owners.min() >= 0:
            return np.flatnonzero(owners == rank).tolist()
        cells = np.prod(lev.box_array[:, 1] - lev.box_array[:, 0] + 1, axis=1)
        middle = np.cumsum(cells) - cells // 2
        share = np.minimum(middle * size // max(int(cells.sum()), 1), size - 1)
        return np.flatnonzero(share == rank).tolist()

    def read_my_boxes(self, field: str, level: int, covered: str = "average") -> dict:
        """{box index: array} for this rank's boxes of ``level``."""
        view = self.dataset.level(level).field(field)
        return {i: view.box(i, covered=covered) for i in self.my_boxes(level)}

    def __getattr__(self, name):
        return getattr(self.dataset, name)


def on_every_rank(comm, work):
    """``work()`` on every rank of ``comm`` (collective): if it raises on any rank, it raises on
    all of them (that rank's own exception there, a ValueError naming the rank elsewhere), so no
    rank goes on to a collective call the failed one will never make."""
    try:
        result, error = work(), None
    except Exception as e:  # noqa: BLE001 - every failure must reach the other ranks
        result, error = None, e
    errors = comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    failed = next(((r, e) for r, e in enumerate(errors) if e), None)
    if failed:
        raise ValueError(f"rank {failed[0]}: {failed[1]}")
    return result


def open(comm, path, snapshot: Optional[str] = None, threads: Optional[int] = None) -> ParallelDataset:
    """Opens snapshot ``snapshot`` (default the latest) of the store at ``path`` on every rank of
    ``comm`` (collective: a rank that cannot open it stops them all); each rank reads what it
    needs (``read(field, region=...)``, ``read_my_boxes``)."""
    return ParallelDataset(comm, on_every_rank(comm, lambda: open_store(path, snapshot=snapshot, threads=threads)))


from amrzip.parallel.variables import VariablesReader, Writer, open_variables  # noqa: E402

__all__ = ["Collective", "ParallelDataset", "VariablesReader", "Writer", "gathered_levels", "on_every_rank", "open", "open_variables", "world",
           "write", "write_from"]
