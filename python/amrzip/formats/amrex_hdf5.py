"""AMReX HDF5 plotfiles (``WriteMultiLevelPlotfileHDF5``, one ``.h5`` file).

Layout, as AMReX writes it: root attributes ``version_name``, ``plotfile_type``
(``VanillaHDF5``), ``num_components``, ``component_N`` (field names), ``dim``, ``time``,
``finest_level``, ``num_levels``, ``coordinate_system``, plus a ``Chombo_global`` group (so VisIt's
Chombo reader opens it). One group ``level_N`` per level with attributes ``prob_domain``
(compound ``lo_i, lo_j[, lo_k], hi_i, ...``), ``Vec_dx`` and ``dx``, ``prob_lo``/``prob_hi``,
``ref_ratio`` (x only), ``steps``, ``time`` and ``ngrow``; datasets ``boxes`` (compound, in
rank order), ``boxcenter`` and ``data:offsets=0`` (where each box starts, in elements, one entry
more than boxes).

Data comes in two variants:

- single dataset (``WriteMultiLevelPlotfileHDF5SingleDset``, the default): ``data:datatype=0``
  holds, box after box, all components of the box one after another, each in Fortran order;
- one dataset per component (``...MultiDset``): ``data:datatype=K`` holds component ``K`` of
  every box, and the offsets count cells.

AMReX writes no ghost cells (it copies to a ghost-free MultiFab first); the reader still crops
them if the box sizes say the data has some. Contiguous, unfiltered datasets are memory-mapped
(box arrays are views of the file); chunked or compressed ones are read box by box.
"""

from __future__ import annotations

from pathlib import Path

from amrzip.amr.boxes import check_nesting
from amrzip.amr.hierarchy import Hierarchy, Level
from amrzip.formats.chombo import (
    FlatSource,
    HandleCache,
    open_hdf5,
    level_boxes,
    level_domains,
    level_geometry,
    physical_extent,
    as_scalar,
    as_str,
    component_names,
    ghost_width,
    int_vector,
    make_loader,
    make_raw,
    read_offsets,
    space_dim,
)

__all__ = ["is_amrex_hdf5", "read_amrex_hdf5"]


def is_amrex_hdf5(f) -> bool:
    """An open h5py file written by AMReX's HDF5 plotfile writer."""
    a = f.attrs
    if "level_0" not in f:
        return False
    if "plotfile_type" in a:
        return True
    return "version_name" in a and "dim" in a and "finest_level" in a


def read_amrex_hdf5(path) -> Hierarchy:
    """Read an AMReX HDF5 plotfile into a :class:`Hierarchy`."""
    path = Path(path)
    where = str(path)
    with open_hdf5(path, is_amrex_hdf5, "not an AMReX HDF5 plotfile (no plotfile_type/version_name attributes)") as f:
        dim = space_dim(f, where)
        if not 1 <= dim <= 3:
            raise ValueError(f"{path}: dimension {dim}")
        names = component_names(f.attrs)
        ncomp = as_scalar(f.attrs["num_components"], int) if "num_components" in f.attrs else len(names)
        if len(names) < ncomp:
            names += [f"component_{k}" for k in range(len(names), ncomp)]
        names = names[:ncomp]
        if len(set(names)) != len(names):
            raise ValueError(f"{path}: repeated field names {names}")
        if "finest_level" in f.attrs:
            nlev = as_scalar(f.attrs["finest_level"], int) + 1
        elif "num_levels" in f.attrs:
            nlev = as_scalar(f.attrs["num_levels"], int)
        else:
            nlev = 0
            while f"level_{nlev}" in f:
                nlev += 1
        domains = level_domains(f, nlev, dim, where)
        handles = HandleCache(path)
        levels = []
        steps = []
        layouts = []
        for L in range(nlev):
            g, lw, boxes = level_boxes(f, L, dim, path)
            hint = int_vector(g.attrs["ngrow"], dim) if "ngrow" in g.attrs else None
            if "data:datatype=0" not in g:
                raise ValueError(f"{lw}: no data:datatype=0 dataset")
            first = FlatSource(path, g["data:datatype=0"], handles)
            offsets = read_offsets(g, "data:offsets=0", len(boxes), first.size, lw)
            multi = ncomp > 1 and "data:datatype=1" in g
            entries = {}
            if multi:
                ghost = ghost_width(boxes, offsets, 1, hint, dim, lw)
                for k, name in enumerate(names):
                    key = f"data:datatype={k}"
                    if key not in g:
                        raise ValueError(f"{lw}: one dataset per component, but {key} is missing")
                    src = first if k == 0 else FlatSource(path, g[key], handles)
                    if src.size < offsets[-1]:
                        raise ValueError(f"{lw}: {key} has {src.size} elements, the offsets need {offsets[-1]}")
                    entries[name] = (src, offsets, 0, ghost)
            else:
                ghost = ghost_width(boxes, offsets, ncomp, hint, dim, lw)
                for k, name in enumerate(names):
                    entries[name] = (first, offsets, k, ghost)
            layouts.append("multi-dataset" if multi else "single-dataset")
            dx, ratios = level_geometry(g, L, domains, dim, lw)
            steps.append(as_scalar(g.attrs["steps"], int) if "steps" in g.attrs else 0)
            loader, raw = make_loader(entries, boxes), make_raw(entries, boxes, dim)
            levels.append(Level(boxes, ratios, dx, domains[L], [0] * len(boxes), list(names), loader, raw_loader=raw))
        check_nesting(levels, None, where)
        g0 = f["level_0"]
        prob_lo, prob_hi = physical_extent(g0, levels[0].dx, domains[0], dim)
        time = f.attrs.get("time", g0.attrs.get("time", 0.0))
        coord = as_scalar(f.attrs["coordinate_system"], int) if "coordinate_system" in f.attrs else 0
        attrs = {
            "format": "amrex-hdf5",
            "layouts": layouts,
            "level_steps": steps,
            "source": where,
        }
        if "version_name" in f.attrs:
            attrs["version"] = as_str(f.attrs["version_name"])
        return Hierarchy(
            fields=list(names),
            levels=levels,
            prob_lo=tuple(float(v) for v in prob_lo),
            prob_hi=tuple(float(v) for v in prob_hi),
            coord_sys=coord,
            time=as_scalar(time),
            step=steps[0] if steps else 0,
            attrs=attrs,
        )
