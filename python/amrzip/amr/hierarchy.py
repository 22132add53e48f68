"""The in-memory AMR hierarchy: levels of integer boxes with per-box numpy arrays.

Conventions (those of AMReX, which Chombo shares): a box is ``(lo, hi)``, two tuples of
inclusive integer cell indices in its level's index space, x first. Data on nodes (cell
corners) has node boxes instead: ``Hierarchy.nodal`` says, per dimension, which index type
every box of the hierarchy has; a level's ``domain`` is always its cells. Level ``L + 1`` refines level
``L`` by ``ref_ratio`` per dimension. A box's data for one field is a numpy array of the box's
shape indexed ``[i, j, k]`` (x first); arrays read from files are views of the file (memory
maps), not copies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

Box = tuple[tuple[int, ...], tuple[int, ...]]
# (field, box index) -> the box's array; lets readers hand over data lazily.
Loader = Callable[[str, int], np.ndarray]


def box_shape(box: Box) -> tuple[int, ...]:
    lo, hi = box
    return tuple(h - l + 1 for l, h in zip(lo, hi))


def ratio_value(ratios: tuple[int, ...]):
    """Per-dimension refinement ratios as users like them: an int when all are equal."""
    return ratios[0] if all(v == ratios[0] for v in ratios) else ratios


def _as_box(box, dim: int) -> Box:
    lo, hi = (tuple(int(v) for v in b) for b in box)
    if len(lo) != dim or len(hi) != dim:
        raise ValueError(f"box {box!r} is not {dim}-dimensional")
    if any(h < l for l, h in zip(lo, hi)):
        raise ValueError(f"box {box!r} is empty (hi < lo)")
    return lo, hi


class LevelGeometry:
    """What a level's ``boxes`` and ``ref_ratios`` tell, shared by the in-memory levels and the
    store's level views."""

    boxes: list
    ref_ratios: tuple

    @property
    def ref_ratio(self):
        """Refinement ratio to the next level: an int when the same in every dimension."""
        return ratio_value(self.ref_ratios)

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)


@dataclass
class Level(LevelGeometry):
    """One refinement level.

    ``boxes`` are the level's boxes; ``ref_ratios`` refine this level into the next one (all 1
    at the finest level); ``dx`` is the cell size per dimension; ``domain`` is the level's whole
    index space as a box; ``owners`` is the rank owning each box (0 when unknown).
    """

    boxes: list[Box]
    ref_ratios: tuple[int, ...]
    dx: tuple[float, ...]
    domain: Box
    owners: list[int]
    fields: list[str]
    loader: Loader
    # {field: [array per box]} when the level holds its data in memory (``from_arrays``).
    arrays: Optional[dict] = field(default=None, repr=False, compare=False)
    # field -> [array per box], for readers that decode a level's boxes at once (a store's).
    bulk_loader: Optional[Callable[[str], list]] = field(default=None, repr=False, compare=False)
    # field -> where every box's values sit in a few buffers, for writers to take them without
    # an array per box (a plotfile's, a Chombo file's): (buffers: uint8 arrays, buffer number
    # per box, byte offset per box, dtype (either byte order), "F" or "C", ghost width per
    # dimension); each box's values, grown by the ghost widths, are contiguous in that order.
    raw_loader: Optional[Callable[[str], tuple]] = field(default=None, repr=False, compare=False)

    @property
    def dim(self) -> int:
        return len(self.dx)

    def box_data(self, field: str, i: int) -> np.ndarray:
        """The array of box ``i`` for ``field``, indexed ``[i, j, k]`` (x first)."""
        if field not in self.fields:
            raise KeyError(f"no field {field!r} (fields: {', '.join(self.fields)})")
        if not 0 <= i < len(self.boxes):
            raise IndexError(f"box {i} out of range: the level has {len(self.boxes)} boxes")
        return self._checked(field, i, self.loader(field, i))

    def _checked(self, field: str, i: int, a: np.ndarray) -> np.ndarray:
        """``a``, once it is known to have box ``i``'s shape."""
        want = box_shape(self.boxes[i])
        if a.shape != want:
            raise ValueError(f"box {i} of field {field!r}: data of shape {a.shape}, box of shape {want}")
        return a

    def field_data(self, field: str) -> list:
        """Every box's array of ``field``, in box order, as the loader gives them: shapes are
        not checked here (``box_data`` checks one box), so bulk consumers check them at once."""
        if field not in self.fields:
            raise KeyError(f"no field {field!r} (fields: {', '.join(self.fields)})")
        if self.arrays is not None:
            return list(self.arrays[field])
        if self.bulk_loader is not None:
            return self.bulk_loader(field)
        return [self.loader(field, i) for i in range(len(self.boxes))]

    @property
    def num_cells(self) -> int:
        return int(sum(np.prod(box_shape(b), dtype=np.int64) for b in self.boxes))


@dataclass
class Hierarchy:
    """An AMR snapshot: levels from coarsest (0) to finest, fields, geometry and time.

    ``prob_lo``/``prob_hi`` bound the physical domain; ``coord_sys`` is 0 (Cartesian),
    1 (cylindrical) or 2 (spherical), as AMReX numbers them. ``attrs`` keeps what a reader
    found that has no place in the model (source format, ghost cells, code version...).
    ``node`` flags the dimensions along which the data sits on nodes (empty: cells everywhere).
    """

    fields: list[str]
    levels: list[Level]
    prob_lo: tuple[float, ...]
    prob_hi: tuple[float, ...]
    coord_sys: int = 0
    time: float = 0.0
    step: int = 0
    attrs: dict = field(default_factory=dict)
    node: tuple[bool, ...] = ()

    @property
    def dim(self) -> int:
        return len(self.prob_lo)

    @property
    def nodal(self) -> tuple[bool, ...]:
        """Per dimension, whether the boxes index nodes rather than cells."""
        return tuple(bool(v) for v in self.node) if self.node else (False,) * self.dim

    @property
    def num_levels(self) -> int:
        return len(self.levels)

    def level(self, L: int) -> Level:
        if not 0 <= L < len(self.levels):
            raise IndexError(f"level {L} out of range: the hierarchy has {len(self.levels)} levels")
        return self.levels[L]

    def dtype(self, field: Optional[str] = None) -> np.dtype:
        """The element type of ``field`` (the first field by default), from its first box."""
        f = field or self.fields[0]
        for lev in self.levels:
            if lev.boxes:
                return lev.box_data(f, 0).dtype
        return np.dtype(np.float64)

    def only(self, fields: Sequence[str]) -> "Hierarchy":
        """This hierarchy restricted to ``fields``, sharing its box loaders and arrays: nothing
        is read or copied."""
        levels = [dataclasses.replace(lev, fields=list(fields)) for lev in self.levels]
        return dataclasses.replace(self, fields=list(fields), levels=levels)

    def field_boxes(self, field: str) -> dict:
        """Every box's array of ``field``, all cells (covered ones included): {(level, box): array}."""
        if field not in self.fields:
            raise KeyError(f"no field {field!r} (fields: {', '.join(self.fields)})")
        out = {}
        for L, lev in enumerate(self.levels):
            # A level's boxes at once (`field_data`), their shapes checked as `box_data` does.
            arrays = [np.asarray(a) for a in lev.field_data(field)]
            if len(arrays) != len(lev.boxes):
                raise ValueError(f"level {L} field {field!r}: {len(arrays)} arrays for {len(lev.boxes)} boxes")
            for i, a in enumerate(arrays):
                out[(L, i)] = lev._checked(field, i, a)
        return out

    def covered_mask(self, L: int, i: int) -> np.ndarray:
        """Boolean array over box ``i`` of level ``L``: True where level ``L + 1`` covers the cell
        (or node)."""
        from amrzip.amr.boxes import covered_mask

        lev = self.level(L)
        finer = self.levels[L + 1].boxes if L + 1 < len(self.levels) else []
        return covered_mask(lev.boxes[i], finer, lev.ref_ratios, self.nodal)

    @classmethod
    def from_arrays(
        cls,
        levels: Sequence[dict],
        *,
        prob_lo: Sequence[float],
        prob_hi: Sequence[float],
        coord_sys: int = 0,
        time: float = 0.0,
        step: int = 0,
        attrs: Optional[dict] = None,
        node: Optional[Sequence[bool]] = None,
    ) -> "Hierarchy":
        """A hierarchy from in-memory data.

        Each level is a dict with ``boxes`` (list of ``(lo, hi)``), ``data`` (``{field: [array
        per box]}``), ``ref_ratio`` (int or per-dimension tuple; omit at the finest level),
        optional ``domain`` (the level's index space; the coarsest level's defaults to the
        bounding box of its boxes, finer ones to the refined coarser domain) and ``owners``.
        ``node`` flags node-centred dimensions (see the module's conventions).
        """
        dim = len(prob_lo)
        if len(prob_hi) != dim or not 1 <= dim <= 3:
            raise ValueError("prob_lo and prob_hi must have the same length, 1 to 3")
        if not levels:
            raise ValueError("a hierarchy needs at least one level")
        nodal = tuple(bool(v) for v in node) if node is not None else (False,) * dim
        if len(nodal) != dim:
            raise ValueError(f"node flags {tuple(node)} are not {dim}-dimensional")
        fields = list(levels[0]["data"])
        built: list[Level] = []
        extent = np.array(prob_hi, dtype=float) - np.array(prob_lo, dtype=float)
        for L, spec in enumerate(levels):
            boxes = [_as_box(b, dim) for b in spec["boxes"]]
            data = spec["data"]
            if sorted(data) != sorted(fields):
                raise ValueError(f"level {L} has fields {sorted(data)}, level 0 has {sorted(fields)}")
            for f in fields:
                if len(data[f]) != len(boxes):
                    raise ValueError(f"level {L} field {f!r}: {len(data[f])} arrays for {len(boxes)} boxes")
            last = L == len(levels) - 1
            r = spec.get("ref_ratio", 1 if last else None)
            if r is None:
                raise ValueError(f"level {L} needs a ref_ratio to level {L + 1}")
            ratios = tuple(int(v) for v in (r if isinstance(r, (tuple, list)) else [r] * dim))
            if len(ratios) != dim or any(v < 1 for v in ratios):
                raise ValueError(f"level {L}: bad ref_ratio {r!r}")
            if "domain" in spec:
                domain = _as_box(spec["domain"], dim)
            elif L == 0:
                if not boxes:
                    raise ValueError("level 0 has no boxes: give its domain")
                # Node boxes end one past the cells they bound.
                domain = (
                    tuple(min(b[0][d] for b in boxes) for d in range(dim)),
                    tuple(max(b[1][d] for b in boxes) - nodal[d] for d in range(dim)),
                )
            else:
                plo, phi = built[-1].domain
                pr = built[-1].ref_ratios
                domain = (tuple(l * r for l, r in zip(plo, pr)), tuple((h + 1) * r - 1 for h, r in zip(phi, pr)))
            cells = np.array(box_shape(domain), dtype=float)
            dx = tuple(float(v) for v in extent / cells)
            arrays = {f: [np.asarray(a) for a in data[f]] for f in fields}
            owners = [int(o) for o in spec.get("owners", [0] * len(boxes))]
            built.append(Level(boxes, ratios, dx, domain, owners, fields, lambda f, i, arrays=arrays: arrays[f][i], arrays))
        return cls(
            fields, built, tuple(map(float, prob_lo)), tuple(map(float, prob_hi)), coord_sys, float(time), int(step), dict(attrs or {}),
            nodal if any(nodal) else (),
        )
