"""HDF5 AMR files written for the tests and the benchmarks (h5py): Chombo plot files as Chombo
lays them out, with ghost cells if asked."""

from __future__ import annotations

import numpy as np

from amrzip.amr.hierarchy import Hierarchy, box_shape


def write_chombo(h: Hierarchy, path, ghost=0, chunked=False):
    """A Chombo plot file with ``ghost`` junk-filled ghost cells around every box."""
    import h5py

    axes = "ijk"[: h.dim]
    bt = np.dtype([(f"lo_{a}", "<i4") for a in axes] + [(f"hi_{a}", "<i4") for a in axes])
    gt = np.dtype([(f"intvect{a}", "<i4") for a in axes])
    with h5py.File(path, "w") as f:
        f.attrs["num_levels"] = np.int32(h.num_levels)
        f.attrs["num_components"] = np.int32(len(h.fields))
        for k, name in enumerate(h.fields):
            f.attrs[f"component_{k}"] = np.bytes_(name)
        f.attrs["time"] = h.time
        f.create_group("Chombo_global").attrs["SpaceDim"] = np.int32(h.dim)
        for L, lev in enumerate(h.levels):
            g = f.create_group(f"level_{L}")
            g.attrs["dx"] = lev.dx[0]
            g.attrs["ref_ratio"] = np.int32(lev.ref_ratios[0])
            g.attrs["prob_domain"] = np.array(tuple(lev.domain[0] + lev.domain[1]), dtype=bt)
            g["boxes"] = np.array([tuple(lo + hi) for lo, hi in lev.boxes], dtype=bt)
            chunks, offsets = [], [0]
            for i, b in enumerate(lev.boxes):
                shape = tuple(n + 2 * ghost for n in box_shape(b))
                for fld in h.fields:
                    full = np.full(shape, 9.9e99)
                    full[tuple(slice(ghost, ghost + n) for n in box_shape(b))] = lev.box_data(fld, i)
                    chunks.append(full.ravel(order="F"))
                offsets.append(offsets[-1] + len(h.fields) * int(np.prod(shape)))
            kw = {"chunks": (4096,), "compression": "gzip"} if chunked else {}
            g.create_dataset("data:datatype=0", data=np.concatenate(chunks), **kw)
            g["data:offsets=0"] = np.array(offsets, dtype=np.int64)
            a = g.create_group("data_attributes")
            a.attrs["comps"] = np.int32(len(h.fields))
            a.attrs["outputGhost"] = np.array(tuple([ghost] * h.dim), dtype=gt)
            a.attrs["objectType"] = np.bytes_("FArrayBox")
