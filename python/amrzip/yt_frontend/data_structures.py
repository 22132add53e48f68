"""A snapshot of an amrzip store as a yt dataset: one yt grid per box of every level.

The dataset holds the store's ``amrzip.store.Dataset`` (``ds.store``); nothing but the
snapshot's metadata is read when it opens. Grid data is read on demand by the IO handler
(io.py), region by region, so a selection decodes only the chunks it touches.
"""

from __future__ import annotations

import math
import os
import weakref

import numpy as np
from yt.data_objects.index_subobjects.grid_patch import AMRGridPatch
from yt.data_objects.static_output import Dataset
from yt.funcs import setdefaultattr
from yt.geometry.api import Geometry
from yt.geometry.grid_geometry_handler import GridIndex
from yt.units import Unit
from yt.utilities.logger import ytLogger as mylog

from amrzip import _core
from amrzip.store.dataset import Dataset as StoreDataset
from amrzip.store.dataset import open_store
from amrzip.yt_frontend.fields import AMRZipFieldInfo

SNAPSHOT_SUFFIX = ".zarr.zip"


def _pad(values, dim: int, fill) -> np.ndarray:
    """A per-dimension sequence as yt's three components: dimensions beyond ``dim`` get ``fill``."""
    return np.array(list(values)[:dim] + [fill] * (3 - dim))


def _locate(path: str):
    """(store folder, snapshot name) of ``path``: a store (name None: chosen by the caller), or
    a snapshot file (or version-1 snapshot folder) inside one; None if it is neither."""
    path = os.path.abspath(os.path.expanduser(path))
    candidates = []
    if os.path.isdir(path):
        candidates.append((path, None))
    name = os.path.basename(path)
    if name.endswith(SNAPSHOT_SUFFIX) and os.path.isfile(path):
        candidates.append((os.path.dirname(path), name[: -len(SNAPSHOT_SUFFIX)]))
    elif os.path.isdir(path):
        candidates.append((os.path.dirname(path), name))
    for store, snapshot in candidates:
        try:
            _core.snapshot_kind(store, snapshot)
        except (KeyError, OSError, ValueError, _core.StoreError):
            continue
        return store, snapshot
    return None


def _unit(text):
    """``text`` as a yt unit string, or None when yt cannot parse it (e.g. "mean 1")."""
    if not isinstance(text, str) or not text.strip():
        return None
    text = text.strip().replace("^", "**")
    try:
        Unit(text)
    except Exception:  # unyt raises several kinds for text that is not a unit
        return None
    return text


def source_units(fields, source) -> dict:
    """Per field, the unit the source recorded (``source["units"]``: a field's own name, or a
    word of it, as "velocity" for "x_velocity"), where yt understands it."""
    units = source.get("units") if isinstance(source, dict) else None
    if not isinstance(units, dict):
        return {}
    out = {}
    for f in fields:
        keys = [f] + [w for w in f.split("_") if w]
        text = next((units[k] for k in keys if k in units), None)
        unit = _unit(text)
        if unit is not None:
            out[f] = unit
        elif text is not None:
            mylog.debug("amrzip: field %s has unit %r, which yt does not read: dimensionless", f, text)
    return out


class AMRZipGrid(AMRGridPatch):
    """One box of one level. ``box`` is the box in its level's index space (as the store keeps
    it), from which the IO handler reads."""

    _id_offset = 0

    def __init__(self, id, index, level: int, box, start_index):
        super().__init__(id, filename=index.index_filename, index=index)
        self.Level = level
        self.box = box
        self.start_index = start_index
        self._parent_ids: list[int] = []
        self._children_ids: list[int] = []

    @property
    def Parent(self):
        if not self._parent_ids:
            return None
        return [self.index.grids[i] for i in self._parent_ids]

    @property
    def Children(self):
        return [self.index.grids[i] for i in self._children_ids]

    def get_global_startindex(self):
        return self.start_index

    def _setup_dx(self):
        self.dds = self.ds.arr(self.index.level_dds[self.Level], "code_length")

    @property
    def child_mask(self):
        # yt asks for it on every selection; the children never change, so build it once.
        if self._child_mask is None:
            mask = np.ones(self.ActiveDimensions, dtype=bool)
            ratio = self.ds.level_ratios[self.Level]
            start = self.start_index
            for child in self.Children:
                clo = np.maximum(child.start_index // ratio - start, 0)
                chi = np.minimum(-(-(child.start_index + child.ActiveDimensions) // ratio) - start, self.ActiveDimensions)
                mask[clo[0] : chi[0], clo[1] : chi[1], clo[2] : chi[2]] = False
            self._child_mask = mask
        return self._child_mask

    def select_ires(self, dobj):
        # yt's resolution index: levels count in powers of refine_by, so that a ratio of 4
        # over a refine_by of 2 spans two.
        mask = self._get_selector_mask(dobj.selector)
        if mask is None:
            return np.empty(0, dtype="int64")
        return np.full(self._last_count, self.ds.level_ires[self.Level], dtype="int64")


class AMRZipHierarchy(GridIndex):
    grid = AMRZipGrid

    def __init__(self, ds, dataset_type="amrzip"):
        self.dataset_type = dataset_type
        self.dataset = weakref.proxy(ds)
        self.index_filename = str(ds.store.path)
        self.directory = os.path.dirname(self.index_filename)
        self.float_type = np.float64
        super().__init__(ds, dataset_type)

    def _detect_output_fields(self):
        self.field_list = [("amrzip", f) for f in self.dataset.store.fields]

    def _count_grids(self):
        store = self.dataset.store
        self.num_grids = sum(store.level(L).num_boxes for L in range(store.num_levels))

    def _parse_index(self):
        ds = self.dataset
        store = ds.store
        dim = store.dim
        prob_lo = np.asarray(store.meta["prob_lo"], dtype=np.float64)
        self.level_dds = np.empty((store.num_levels, 3))
        self.grid_start_index = np.zeros((self.num_grids, 3), dtype=np.int64)
        grids = []
        first = 0
        for L in range(store.num_levels):
            lev = store.level(L)
            dx = np.asarray(lev.dx, dtype=np.float64)
            # dds along the absent dimensions spans the domain, as yt expects of 1-D and 2-D data
            self.level_dds[L] = _pad(dx, dim, 0.0)
            self.level_dds[L, dim:] = (ds.domain_right_edge.d - ds.domain_left_edge.d)[dim:]
            n = lev.num_boxes
            if n == 0:
                continue
            boxes = lev.box_array
            # Indices count from the level domain's corner, which sits at prob_lo.
            lo = boxes[:, 0, :] - np.asarray(lev.domain[0], dtype=np.int64)
            shape = boxes[:, 1, :] - boxes[:, 0, :] + 1
            ids = slice(first, first + n)
            self.grid_start_index[ids, :dim] = lo
            self.grid_dimensions[ids, :dim] = shape
            self.grid_left_edge[ids, :dim] = prob_lo + lo * dx
            self.grid_right_edge[ids, :dim] = prob_lo + (lo + shape) * dx
            self.grid_left_edge[ids, dim:] = ds.domain_left_edge.d[dim:]
            self.grid_right_edge[ids, dim:] = ds.domain_right_edge.d[dim:]
            self.grid_levels[ids, 0] = L
            for i, box in enumerate(lev.boxes):
                grids.append(self.grid(first + i, self, L, box, self.grid_start_index[first + i]))
            first += n
        self.grids = np.empty(len(grids), dtype=object)
        self.grids[:] = grids
        self.max_level = int(self.grid_levels.max())

    def _populate_grid_objects(self):
        self._link_parents_and_children()
        for g in self.grids:
            g._prepare_grid()
            g._setup_dx()

    def _link_parents_and_children(self):
        """A level L + 1 box is a child of every level L box its coarsened cells overlap."""
        store = self.dataset.store
        dim = store.dim
        first = np.cumsum([0] + [store.level(L).num_boxes for L in range(store.num_levels)])
        for L in range(store.num_levels - 1):
            coarse = store.level(L).box_array
            fine = store.level(L + 1).box_array
            if len(coarse) == 0 or len(fine) == 0:
                continue
            ratio = np.asarray(store.level(L).ref_ratios[:dim], dtype=np.int64)
            for j, (lo, hi) in enumerate(fine // ratio):
                overlap = np.all((coarse[:, 0, :] <= hi) & (coarse[:, 1, :] >= lo), axis=1)
                child = self.grids[first[L + 1] + j]
                for i in np.flatnonzero(overlap):
                    parent = self.grids[first[L] + i]
                    parent._children_ids.append(child.id)
                    child._parent_ids.append(parent.id)


class AMRZipDataset(Dataset):
    """A snapshot of an amrzip store (``yt.load("run")``; ``snapshot="name"`` picks one, default
    the latest), or a snapshot file of a store."""

    _index_class = AMRZipHierarchy
    _field_info_class = AMRZipFieldInfo
    _dataset_type = "amrzip"
    # The latest snapshot of a store changes as snapshots are added: never hand back a cached one.
    _skip_cache = True

    def __init__(
        self,
        filename,
        dataset_type="amrzip",
        snapshot=None,
        units_override=None,
        unit_system="cgs",
        default_species_fields=None,
    ):
        located = _locate(os.fspath(filename))
        if located is None:
            raise ValueError(f"{filename}: not an amrzip store with snapshots, nor a snapshot file of one")
        store, name = located
        if name is not None and snapshot not in (None, name):
            raise ValueError(f"{filename} is snapshot {name}: snapshot={snapshot!r} names another")
        self.store = open_store(store, name or snapshot)
        if not isinstance(self.store, StoreDataset):
            raise ValueError(
                f"{filename}: snapshot {self.store.name} is a multiresolution snapshot, which yt cannot open as "
                "AMR grids; read it with amrzip.open(...).read(field, resolution=...) (docs/multires.md)"
            )
        if any(self.store.nodal):
            raise ValueError(
                f"{filename}: snapshot {self.store.name} holds node-centred data, which the yt frontend does not "
                "map to cells; read it with amrzip.open(...).read(...)"
            )
        self.fluid_types += ("amrzip",)
        super().__init__(
            filename,
            dataset_type,
            units_override=units_override,
            unit_system=unit_system,
            default_species_fields=default_species_fields,
        )

    @property
    def unique_identifier(self) -> str:
        st = os.stat(self.store.path)
        return f"{self.store.path}:{st.st_mtime_ns}"

    @property
    def source(self) -> dict:
        """What the store recorded of the snapshot's source (format, path, units...)."""
        source = self.store.meta.get("source")
        return source if isinstance(source, dict) else {}

    def _parse_parameter_file(self):
        store = self.store
        meta = store.meta
        dim = store.dim
        self.dimensionality = dim
        self.domain_left_edge = _pad(meta["prob_lo"], dim, 0.0).astype(np.float64)
        self.domain_right_edge = _pad(meta["prob_hi"], dim, 1.0).astype(np.float64)
        self.domain_dimensions = _pad([h - l + 1 for l, h in zip(*store.level(0).domain)], dim, 1).astype(np.int64)
        self.current_time = float(meta["time"])
        self.cosmological_simulation = 0
        self.current_redshift = self.omega_lambda = self.omega_matter = self.hubble_constant = 0.0
        self._set_refinement()
        self._set_geometry(meta.get("coord_sys", 0))
        source = self.source
        periodic = source.get("periodicity")
        if isinstance(periodic, (list, tuple)) and len(periodic) == dim:
            self._periodicity = tuple(bool(p) for p in periodic) + (False,) * (3 - dim)
        else:
            self._periodicity = (False, False, False)
        self.parameters.update(
            snapshot=store.name, step=meta["step"], time=meta["time"], bounds=store.bounds, source=source,
        )
        for field, unit in source_units(store.fields, source).items():
            self.field_units[("amrzip", field)] = unit

    def _set_refinement(self):
        """yt counts levels in powers of one ``refine_by``: each level's ratio must be the same
        in every dimension and a power of the smallest ratio."""
        store = self.store
        dim = store.dim
        ratios = []
        for L in range(store.num_levels - 1):
            r = store.level(L).ref_ratios[:dim]
            if len(set(r)) != 1:
                raise ValueError(
                    f"{self._input_filename}: level {L} refines by {tuple(r)}, not the same in every dimension, "
                    "which yt's grid index cannot represent"
                )
            ratios.append(r[0])
        self.refine_by = min(ratios) if ratios else 2
        ires = [0]
        for r in ratios:
            steps = round(math.log(r, self.refine_by)) if self.refine_by > 1 else 0
            if self.refine_by**steps != r:
                raise ValueError(
                    f"{self._input_filename}: refinement ratios {ratios} are not all powers of {self.refine_by}, "
                    "which yt's grid index needs"
                )
            ires.append(ires[-1] + steps)
        self.level_ires = ires
        # Per level, the ratio to the next level as yt's three components (1 past the finest).
        self.level_ratios = [_pad([r] * dim, dim, 1).astype(np.int64) for r in ratios] + [np.ones(3, dtype=np.int64)]

    def _set_geometry(self, coord_sys: int):
        dim = self.dimensionality
        right = self.domain_right_edge.copy()
        if coord_sys == 1:
            # AMReX's r-z: the angle spans the full turn.
            self.geometry = Geometry.CYLINDRICAL
            if dim < 3:
                right[2] = 2.0 * np.pi
        elif coord_sys == 2:
            self.geometry = Geometry.SPHERICAL
            if dim < 2:
                right[1] = np.pi
            if dim < 3:
                right[2] = 2.0 * np.pi
        else:
            self.geometry = Geometry.CARTESIAN
        self.domain_right_edge = right

    def relative_refinement(self, l0, l1):
        return self.refine_by ** (self.level_ires[l1] - self.level_ires[l0])

    def _set_code_unit_attributes(self):
        units = self.source.get("units")
        units = units if isinstance(units, dict) else {}
        # Files without units get yt's usual code units for AMR grids: cm, g, s.
        setdefaultattr(self, "length_unit", self.quan(1.0, _unit(units.get("length")) or "cm"))
        setdefaultattr(self, "mass_unit", self.quan(1.0, _unit(units.get("mass")) or "g"))
        setdefaultattr(self, "time_unit", self.quan(1.0, _unit(units.get("time")) or "s"))
        setdefaultattr(self, "velocity_unit", self.length_unit / self.time_unit)

    @classmethod
    def _is_valid(cls, filename, *args, **kwargs) -> bool:
        try:
            return _locate(os.fspath(filename)) is not None
        except Exception:  # yt asks every frontend about every path: never raise
            return False
