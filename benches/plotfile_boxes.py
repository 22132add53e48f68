"""Minimal AMReX plotfile box reader, for the benchmarks only (the product gets a full reader elsewhere).

Scope: HyperCLaw-V1.1 plotfile Header, Level_N/Cell_H with cell-header version 1 (a text `FAB (...)` header before
each box's values), cell-centred data of any precision and byte order given in that FAB header.  Versions 2-4,
face/nodal data and particles are out of scope and rejected with an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_INTS = re.compile(r"-?\d+")
# FAB ((8, (64 11 52 0 1 12 0 1023)),(8, (8 7 6 5 4 3 2 1)))((lo) (hi) (type)) ncomp
_FAB = re.compile(r"FAB \(\((\d+), \(([-\d ]+)\)\),\((\d+), \(([-\d ]+)\)\)\)"
                  r"\(\(([-\d,]+)\) \(([-\d,]+)\) \(([-\d,]+)\)\) (\d+)")


def _box(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """'((lo) (hi) (type))' -> (lo, hi); only cell-centred boxes are accepted."""
    lo, hi, typ = (tuple(int(v) for v in g.split(",")) for g in re.findall(r"\(([-\d,]+)\)", text))
    if any(typ):
        raise NotImplementedError(f"non-cell-centred box {text!r}")
    return lo, hi


@dataclass
class Level:
    directory: Path
    names: list[str]
    boxes_lohi: list[tuple[tuple[int, ...], tuple[int, ...]]]
    fabs: list[tuple[str, int]]  # (data file, byte offset) per box

    def box(self, i: int, field: str) -> np.ndarray:
        """Valid region of box i for one field, C order with axes reversed ((z,)y,x), native dtype."""
        comp = self.names.index(field)
        fname, offset = self.fabs[i]
        with open(self.directory / fname, "rb") as f:
            f.seek(offset)
            m = _FAB.match(f.readline().decode("ascii", "replace"))
            if m is None:
                raise NotImplementedError(f"{fname}@{offset}: no v1 'FAB' header (cell-header versions 2-4 unsupported)")
            nbytes, order = int(m.group(3)), [int(v) for v in m.group(4).split()]
            if nbytes not in (4, 8) or int(m.group(1)) != nbytes:
                raise NotImplementedError(f"{fname}@{offset}: unsupported real descriptor {m.group(0)!r}")
            # byte order tuple lists the significance of each stored byte: (1 2 ..) is big-endian
            dtype = np.dtype(f"{'>' if order[0] == 1 else '<'}f{nbytes}")
            flo, fhi = _box(f"(({m.group(5)}) ({m.group(6)}) ({m.group(7)}))")
            shape = tuple(h - l + 1 for l, h in zip(flo, fhi))
            npts = int(np.prod(shape))
            f.seek(comp * npts * nbytes, 1)
            raw = f.read(npts * nbytes)
        if len(raw) != npts * nbytes:
            raise ValueError(f"{self.directory / fname}: truncated box data (wanted {npts * nbytes} bytes, got {len(raw)})")
        data = np.frombuffer(raw, dtype=dtype).reshape(shape[::-1])  # Fortran x-fastest == C order (z,y,x)
        lo, hi = self.boxes_lohi[i]  # the FAB may include ghost cells: crop to the valid box
        crop = tuple(slice(l - fl, h - fl + 1) for l, h, fl in zip(lo[::-1], hi[::-1], flo[::-1]))
        return np.ascontiguousarray(data[crop], dtype=dtype.newbyteorder("="))

    def boxes(self, field: str):
        for i in range(len(self.fabs)):
            yield self.box(i, field)

    def tiled(self, field: str) -> np.ndarray | None:
        """All boxes placed into their bounding box, or None when they do not cover it exactly."""
        lo = np.min([b[0] for b in self.boxes_lohi], axis=0)
        hi = np.max([b[1] for b in self.boxes_lohi], axis=0)
        volume = sum(int(np.prod(np.subtract(h, l) + 1)) for l, h in self.boxes_lohi)
        if volume != int(np.prod(hi - lo + 1)):  # AMReX box arrays are disjoint, so equal volume means full cover
            return None
        out = None
        for (blo, bhi), data in zip(self.boxes_lohi, self.boxes(field)):
            if out is None:
                out = np.empty(tuple((hi - lo + 1)[::-1]), dtype=data.dtype)
            out[tuple(slice(l - o, h - o + 1) for l, h, o in zip(blo[::-1], bhi[::-1], lo[::-1]))] = data
        return out


@dataclass
class Plotfile:
    path: Path
    names: list[str]
    dim: int
    levels: list[Level]


def _read_cell_h(path: Path, names: list[str]) -> Level:
    lines = path.read_text().splitlines()
    version, ncomp = int(lines[0]), int(lines[2])
    if version != 1:
        raise NotImplementedError(f"{path}: cell-header version {version} (bench reader handles version 1 only)")
    if ncomp != len(names):
        raise ValueError(f"{path}: {ncomp} components, plotfile Header names {len(names)}")
    nboxes = int(_INTS.findall(lines[4])[0])  # '(nboxes 0'
    boxes = [_box(line) for line in lines[5:5 + nboxes]]
    nfabs = int(lines[6 + nboxes])
    fabs = []
    for line in lines[7 + nboxes:7 + nboxes + nfabs]:
        _, fname, off = line.split()
        fabs.append((fname, int(off)))
    if len(fabs) != nboxes:
        raise ValueError(f"{path}: {nboxes} boxes but {len(fabs)} FabOnDisk entries")
    return Level(path.parent, names, boxes, fabs)


def read_plotfile(path: Path | str) -> Plotfile:
    path = Path(path)
    lines = (path / "Header").read_text().splitlines()
    ncomp = int(lines[1])
    names = [s.strip() for s in lines[2:2 + ncomp]]
    dim = int(lines[2 + ncomp])
    # each level block in the Header ends with the relative path of its MultiFab, e.g. 'Level_0/Cell'
    mf_paths = [s.strip() for s in lines if re.fullmatch(r"\s*Level_\d+/\S+\s*", s)]
    levels = [_read_cell_h(path / f"{p}_H", names) for p in mf_paths]
    return Plotfile(path, names, dim, levels)
