"""AMReX plotfiles (the native, folder-based format): a reader and a writer.

A plotfile is a folder: ``Header`` (text: fields, geometry, levels), and per level a MultiFab
header ``Level_N/Cell_H`` (VisMF: the level's boxes, which data file holds each box and where)
beside the binary data files ``Level_N/Cell_D_XXXXX``. A box's data is all components one after
another, each in Fortran order (x fastest), over the box grown by the header's ghost width.

VisMF cell-header versions: 1 puts a text ``FAB (<real descriptor>)(<box>) <ncomp>`` line before
each box's values and lists per-box min/max in ``Cell_H``; 2 has no FAB lines and ends
``Cell_H`` with the real descriptor; 3 adds the per-box min/max back; 4 has per-component
min/max over the whole level instead. The real descriptor gives the float format (IEEE
float32 or float64) and byte order.

The reader returns a :class:`~amrzip.amr.hierarchy.Hierarchy` whose arrays are memory-mapped
views of the data files. It checks everything up front, at read time: each FAB against
``Cell_H`` (box grown by the ghost width, index type, component count, one real descriptor per
level), each FAB's bytes inside its file and clear of the other FABs there, and the levels'
nesting; AMReX checkpoint folders are named as such and refused. :func:`write_plotfile` writes
version-1 plotfiles as AMReX's ``WriteMultiLevelPlotfile`` does.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from amrzip.amr.boxes import check_nesting
from amrzip.amr.hierarchy import Box, Hierarchy, Level, box_shape

__all__ = ["is_plotfile", "checkpoint_sign", "refuse_checkpoint", "read_plotfile", "write_plotfile"]

# How many data files a hierarchy keeps mapped at once (each mapping holds a file descriptor).
_MAX_OPEN_FILES = 128

_INTS = r"-?\d+(?:\s*,\s*-?\d+)*"
_BOX_RE = re.compile(rf"\(\s*\(\s*({_INTS})\s*\)\s*\(\s*({_INTS})\s*\)\s*\(\s*({_INTS})\s*\)\s*\)")
_RD_RE = re.compile(r"\(\s*(\d+)\s*,\s*\(([\d\s]+)\)\s*\)\s*,\s*\(\s*(\d+)\s*,\s*\(([\d\s]+)\)\s*\)")
# The FAB line of cell-header version 1: "FAB " + real descriptor + box + " " + ncomp.
_FAB_RE = re.compile(rf"^FAB\s*\(\s*{_RD_RE.pattern}\s*\)\s*{_BOX_RE.pattern}\s*(\d+)\s*$")
_IEEE_FORMATS = {
    8: (64, 11, 52, 0, 1, 12, 0, 1023),
    4: (32, 8, 23, 0, 1, 9, 0, 127),
}


def _header_head(root: Path) -> list[bytes]:
    """The first lines of ``root/Header`` (none when it cannot be read)."""
    try:
        with open(root / "Header", "rb") as f:
            return f.read(256).split(b"\n")
    except OSError:
        return []


def is_plotfile(path) -> bool:
    """Whether ``path`` is a plotfile folder: a ``Header`` whose first lines are a version name
    (one word, like ``HyperCLaw-V1.1``; not a checkpoint's ``CheckPointVersion_1.0``, nor a
    bare number, which starts older checkpoints) and a field count."""
    head = _header_head(Path(path))
    if len(head) < 2:
        return False
    version = head[0].strip()
    return (
        bool(version)
        and len(version.split()) == 1
        and version.isascii()
        and not version.startswith(b"CheckPointVersion")
        and not version.isdigit()
        and head[1].strip().isdigit()
    )


def checkpoint_sign(path) -> Optional[str]:
    """What shows ``path`` to be an AMReX checkpoint folder, or None. ``Amr`` checkpoints start
    their Header with ``CheckPointVersion_1.0``; AmrCore codes write a title of their own, such
    as ``Checkpoint file for AmrCoreAdv``; failing that, a Header that is not a plotfile's beside
    a ``Level_0`` of MultiFab headers (``SD_0_New_MF_H``, ``phi_H``) with no ``Cell_H``."""
    root = Path(path)
    head = _header_head(root)
    if not head:
        return None
    first = head[0].strip().decode("ascii", errors="replace")
    if first.startswith("CheckPointVersion") or "checkpoint" in first.lower():
        return f"its Header starts {first[:60]!r}"
    level0 = root / "Level_0"
    if not is_plotfile(root) and level0.is_dir() and not (level0 / "Cell_H").exists():
        headers = sorted(p.name for p in level0.glob("*_H"))
        if headers:
            return f"its Level_0 holds {headers[0]} and no Cell_H"
    return None


def refuse_checkpoint(path) -> None:
    """Raise ``ValueError`` when ``path`` is an AMReX checkpoint folder. Checkpoints hold the same
    kind of MultiFabs, but not the field names (the solver's state layout lives in its code) and,
    from AmrCore codes, not the geometry either, so they are not read."""
    sign = checkpoint_sign(path)
    if sign:
        raise ValueError(
            f"{path}: an AMReX checkpoint ({sign}), not a plotfile: checkpoints carry no field names; "
            "convert a plotfile of the same step instead"
        )


# --------------------------------------------------------------------------------------------
# reading


def _floats(line: str) -> list[float]:
    # Old Fortran writers use D exponents.
    return [float(v) for v in line.replace("D", "E").replace("d", "e").split()]


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.replace(",", " ").split())


def _parse_box(m: re.Match) -> tuple[Box, tuple[int, ...]]:
    lo, hi, kind = _ints(m.group(1)), _ints(m.group(2)), _ints(m.group(3))
    return (lo, hi), kind


class _Real(NamedTuple):
    """An AMReX RealDescriptor: the float format (always 8 numbers: bits, exponent bits,
    mantissa bits, the three start bits, the hidden-bit flag, the bias) and the byte order,
    ``order[k]`` being where in the file (from 1) the ``k``-th most significant byte sits."""

    fmt: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        n = len(self.order)
        return np.dtype(f"<f{n}" if self.order == tuple(range(n, 0, -1)) else f">f{n}")

    @property
    def perm(self) -> Optional[np.ndarray]:
        """The file's bytes to take, in order, to make big-endian values; None when the data is
        plain big- or little-endian (then it is read as a view)."""
        n = len(self.order)
        if self.order in (tuple(range(1, n + 1)), tuple(range(n, 0, -1))):
            return None
        return np.asarray(self.order) - 1

    def __str__(self) -> str:
        return f"(({len(self.fmt)}, ({' '.join(map(str, self.fmt))})),({len(self.order)}, ({' '.join(map(str, self.order))})))"


def _parse_real(fmt_n: str, fmt: str, ord_n: str, order: str, where: str) -> _Real:
    """An AMReX RealDescriptor as written: ``((8, (<format>)),(<nbytes>, (<order>)))``. Any IEEE
    float32/float64 format in any byte order is accepted (AMReX writes big- and little-endian, and
    knows one mixed order, ``(2 1 4 3 ...)``)."""
    fmt_v, ord_v = _ints(fmt), _ints(order)
    text = f"(({fmt_n}, ({fmt})),({ord_n}, ({order})))"
    nbytes = next((n for n, f in _IEEE_FORMATS.items() if f == fmt_v), None)
    if nbytes is None:
        raise ValueError(f"{where}: unsupported real format {text} (only IEEE float32 and float64 are read)")
    # The format list's count is 8; amrzip's writer once put the byte count there for float32.
    if int(fmt_n) not in (len(fmt_v), nbytes) or int(ord_n) != len(ord_v):
        raise ValueError(f"{where}: real descriptor {text} gives counts that do not match its lists")
    if sorted(ord_v) != list(range(1, nbytes + 1)):
        raise ValueError(f"{where}: real descriptor {text} has a byte order that is not an order of {nbytes} bytes")
    return _Real(fmt_v, ord_v)


class _Lines:
    """A text file's lines with a cursor, for the line-oriented plotfile headers."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.lines = path.read_text(encoding="ascii", errors="replace").splitlines()
        except OSError as e:
            raise ValueError(f"{path}: cannot read: {e}") from e
        self.i = 0

    def next(self, what: str) -> str:
        if self.i >= len(self.lines):
            raise ValueError(f"{self.path}: ends early, expected {what} at line {self.i + 1}")
        line = self.lines[self.i]
        self.i += 1
        return line

    def next_nonblank(self, what: str) -> str:
        while True:
            line = self.next(what)
            if line.strip():
                return line

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{self.path}: bad {what} at line {self.i}: {self.lines[self.i - 1][:80]!r}")


def _parse_header(path: Path) -> dict:
    src = _Lines(path / "Header")
    hd: dict = {"version": src.next("the version line").strip()}
    try:
        nvar = int(src.next("the number of fields"))
        hd["fields"] = [src.next("a field name").strip() for _ in range(nvar)]
        dim = hd["dim"] = int(src.next("the dimension"))
        if not 1 <= dim <= 3:
            raise src.fail("dimension")
        hd["time"] = _floats(src.next("the time"))[0]
        nlev = int(src.next("the finest level")) + 1
        hd["prob_lo"] = _floats(src.next("prob_lo"))[:dim]
        hd["prob_hi"] = _floats(src.next("prob_hi"))[:dim]
        hd["ref_ratio"] = list(_ints(src.next("the refinement ratios")))
        domains = [_parse_box(m)[0] for m in _BOX_RE.finditer(src.next("the level domains"))]
        if len(domains) < nlev:
            raise src.fail(f"level domains (want {nlev})")
        hd["domains"] = domains[:nlev]
        hd["level_steps"] = list(_ints(src.next("the level steps")))
        hd["dx"] = [_floats(src.next("a cell size"))[:dim] for _ in range(nlev)]
        coord = src.next("the coordinate system").split()
        hd["coord_sys"] = int(coord[0]) if len(coord) == 1 else 0
        src.next("the boundary width")
        paths = []
        for L in range(nlev):
            words = src.next_nonblank(f"level {L}'s box count").split()
            nbox = int(words[1])
            src.next(f"level {L}'s step")
            src.i += nbox * dim  # the boxes' physical extents; Cell_H has the authoritative boxes
            paths.append(src.next(f"level {L}'s MultiFab path").strip())
        hd["paths"] = paths
    except (ValueError, IndexError) as e:
        if isinstance(e, ValueError) and str(e).startswith(str(src.path)):
            raise
        raise src.fail("value") from e
    if len(hd["prob_lo"]) != dim or len(hd["prob_hi"]) != dim or any(len(d) != dim for d in hd["dx"]):
        raise ValueError(f"{src.path}: prob_lo/prob_hi/cell sizes are not {dim}-dimensional")
    return hd


def _parse_cell_header(path: Path, dim: int) -> dict:
    src = _Lines(path)
    ch: dict = {}
    try:
        ch["version"] = vers = int(src.next_nonblank("the VisMF version"))
        if not 1 <= vers <= 4:
            raise ValueError(f"{path}: unsupported VisMF cell-header version {vers} (1 to 4 are known)")
        src.next_nonblank("the writing mode")
        ch["ncomp"] = int(src.next_nonblank("the number of components"))
        g = _ints(src.next_nonblank("the ghost width").strip().strip("()"))
        ch["ngrow"] = g * dim if len(g) == 1 else g
        if len(ch["ngrow"]) != dim or min(ch["ngrow"]) < 0:
            raise src.fail("ghost width")
        head = src.next_nonblank("the box array").strip()
        if not head.startswith("("):
            raise src.fail("box array")
        nbox = int(head[1:].split()[0])
        boxes, kinds = [], set()
        for _ in range(nbox):
            m = _BOX_RE.search(src.next("a box"))
            if m is None:
                raise src.fail("box")
            box, kind = _parse_box(m)
            if len(box[0]) != dim or len(kind) != dim or not set(kind) <= {0, 1}:
                raise src.fail(f"box (not {dim}-dimensional, or an index type other than 0/1 per dimension)")
            boxes.append(box)
            kinds.add(kind)
        if len(kinds) > 1:
            raise ValueError(f"{path}: boxes of different index types {sorted(kinds)} in one box array")
        ch["node"] = tuple(bool(v) for v in kinds.pop()) if kinds else (False,) * dim
        if src.next_nonblank("the box array's closing parenthesis").strip() != ")":
            raise src.fail("box array end")
        nfab = int(src.next_nonblank("the number of FABs"))
        if nfab != nbox:
            raise ValueError(f"{path}: {nbox} boxes but {nfab} FabOnDisk entries")
        fods = []
        for _ in range(nfab):
            words = src.next("a FabOnDisk entry").split()
            if len(words) != 3 or words[0] != "FabOnDisk:":
                raise src.fail("FabOnDisk entry")
            fods.append((words[1], int(words[2])))
            if fods[-1][1] < 0:
                raise src.fail("FabOnDisk offset")
    except (ValueError, IndexError) as e:
        if isinstance(e, ValueError) and str(e).startswith(str(path)):
            raise
        raise src.fail("value") from e
    ch["boxes"], ch["fods"] = boxes, fods
    if vers >= 2:
        # The real descriptor is the last thing in the file, after optional min/max lines.
        rest = "\n".join(src.lines[src.i :])
        found = list(_RD_RE.finditer(rest))
        if not found:
            raise ValueError(f"{path}: version {vers} cell header without a real descriptor line")
        ch["real"] = _parse_real(*found[-1].groups(), where=str(path))
    return ch


class _Files:
    """The data files of a plotfile, mapped on first use; a few at a time (LRU)."""

    def __init__(self):
        self._maps: OrderedDict[str, np.memmap] = OrderedDict()

    def get(self, path: str) -> np.memmap:
        mm = self._maps.get(path)
        if mm is None:
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            self._maps[path] = mm
            if len(self._maps) > _MAX_OPEN_FILES:
                self._maps.popitem(last=False)  # arrays handed out keep their own mapping alive
        else:
            self._maps.move_to_end(path)
        return mm


def _fab_headers(level_dir: Path, fods, cell_h: Path) -> list[tuple[int, _Real, Box, tuple[int, ...], int]]:
    """Version 1: parse each box's FAB line -> (data offset, real descriptor, stored box, its
    index type, ncomp)."""
    out: list = [None] * len(fods)
    by_file: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(fods):
        by_file.setdefault(name, []).append(i)
    for name, idx in by_file.items():
        fpath = level_dir / name
        try:
            f = open(fpath, "rb")
        except OSError as e:
            raise ValueError(f"{fpath}: cannot open the data file named in {cell_h}: {e}") from e
        with f:
            for i in idx:
                off = fods[i][1]
                f.seek(off)
                raw = f.read(1024)
                nl = raw.find(b"\n")
                if nl < 0:
                    raise ValueError(f"{fpath}: no FAB header line at offset {off} (box {i}; truncated or not version 1?)")
                line = raw[:nl].decode("ascii", errors="replace").strip()
                m = _FAB_RE.match(line)
                if m is None:
                    raise ValueError(f"{fpath}: unsupported or corrupt FAB header at offset {off}: {line[:100]!r}")
                real = _parse_real(*m.groups()[:4], where=f"{fpath} offset {off}")
                out[i] = (off + nl + 1, real, (_ints(m.group(5)), _ints(m.group(6))), _ints(m.group(7)), int(m.group(8)))
    return out


def _grow(box: Box, g) -> Box:
    return tuple(l - n for l, n in zip(box[0], g)), tuple(h + n for h, n in zip(box[1], g))


def _file_number(name: str) -> int:
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else 0


def _read_level(root: Path, L: int, rel: str, dim: int, nfields: int, files: _Files):
    cell_h = root / (rel + "_H")
    if not cell_h.is_file():
        raise ValueError(f"{cell_h}: missing (named in {root / 'Header'} for level {L})")
    ch = _parse_cell_header(cell_h, dim)
    if ch["ncomp"] < nfields:
        raise ValueError(f"{cell_h}: {ch['ncomp']} components, the Header names {nfields} fields")
    level_dir = cell_h.parent
    boxes, fods, ngrow = ch["boxes"], ch["fods"], ch["ngrow"]
    kind = tuple(int(v) for v in ch["node"])
    if ch["version"] == 1:
        fabs = _fab_headers(level_dir, fods, cell_h)
    else:
        fabs = [(off, ch["real"], _grow(b, ngrow), kind, ch["ncomp"]) for b, (_, off) in zip(boxes, fods)]
    # Each FAB must be exactly what Cell_H says (a wrong box or component count would misplace
    # every value after it); then where its data starts, its stored shape and how to crop it.
    entries = []
    sizes: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int, int]]] = {}  # per data file: (first byte, end, box)
    for i, (box, (name, off), (start, real, stored, stored_kind, nc)) in enumerate(zip(boxes, fods, fabs)):
        fpath = level_dir / name
        what = f"{fpath}: the FAB of box {i} of level {L} (offset {off})"
        want = _grow(box, ngrow)
        if stored != want or stored_kind != kind:
            given = f"grown by ghost width {ngrow}: {_fmt_box(want, kind)}" if any(ngrow) else "and no ghost cells"
            raise ValueError(f"{what} is stored on {_fmt_box(stored, stored_kind)}, but {cell_h} gives box {_fmt_box(box, kind)} {given}")
        if nc != ch["ncomp"]:
            raise ValueError(f"{what} has {nc} components, {cell_h} declares {ch['ncomp']}")
        if real != fabs[0][1]:
            raise ValueError(f"{what} has real descriptor {real}, the level's first FAB {fabs[0][1]}: a level is written in one format")
        shape = box_shape(stored)
        comp_bytes = int(np.prod(shape, dtype=np.int64)) * len(real.order)
        end = start + nc * comp_bytes
        key = str(fpath)
        if key not in sizes:
            try:
                sizes[key] = os.path.getsize(fpath)
            except OSError as e:
                raise ValueError(f"{fpath}: cannot read the data file named in {cell_h}: {e}") from e
        if end > sizes[key]:
            raise ValueError(
                f"{fpath}: truncated: box {i} of level {L} needs bytes {start}..{end}, the file has {sizes[key]}"
            )
        spans.setdefault(key, []).append((off, end, i))
        crop = tuple(slice(g, g + n) for g, n in zip(ngrow, box_shape(box)))
        entries.append((key, start, real.dtype, real.perm, shape, comp_bytes, crop))
    for key, found in spans.items():
        a = np.array(found, dtype=np.int64)
        a = a[np.argsort(a[:, 0], kind="stable")]
        clash = np.flatnonzero(a[1:, 0] < a[:-1, 1])
        if len(clash):
            (s0, e0, i0), (s1, _, i1) = a[clash[0]], a[clash[0] + 1]
            raise ValueError(f"{key}: the FABs of boxes {i0} (bytes {s0}..{e0}) and {i1} (from byte {s1}) of level {L} overlap")

    def load(field_index: int, i: int) -> np.ndarray:
        key, start, dt, perm, shape, comp_bytes, crop = entries[i]
        mm = files.get(key)
        offset = start + field_index * comp_bytes
        if perm is None:
            a = np.ndarray(shape, dtype=dt, buffer=mm, offset=offset, order="F")
        else:  # a mixed byte order: gather each value's bytes into big-endian order (a copy)
            raw = np.ndarray((comp_bytes // len(perm), len(perm)), dtype=np.uint8, buffer=mm, offset=offset)
            a = np.ascontiguousarray(raw[:, perm]).view(dt).reshape(shape, order="F")
        return a[crop] if any(ngrow) else a

    # Where each box's values sit in the data files, for a writer to take them in place (no
    # numpy view per box, ghost cells and all; the writer swaps another byte order as it copies):
    # unless AMReX's mixed byte order needs a gather to read them.
    raw = None
    if entries and all(e[3] is None for e in entries):
        keys = list(dict.fromkeys(e[0] for e in entries))
        number = {k: n for n, k in enumerate(keys)}
        which = np.array([number[e[0]] for e in entries], dtype=np.int64)
        starts = np.array([e[1] for e in entries], dtype=np.int64)
        comp = np.array([e[5] for e in entries], dtype=np.int64)
        dtype = entries[0][2]

        def raw(field_index: int) -> tuple:
            return [files.get(k) for k in keys], which, starts + field_index * comp, dtype, "F", tuple(ngrow)

    owners = [_file_number(name) for name, _ in fods]
    return boxes, owners, load, raw, ch


def read_plotfile(path) -> Hierarchy:
    """Read an AMReX plotfile folder into a :class:`Hierarchy` of memory-mapped box arrays.

    Raises ``ValueError`` naming the offending file when the plotfile is malformed or truncated.
    """
    root = Path(path)
    if root.is_file() and root.name == "Header":
        root = root.parent
    refuse_checkpoint(root)
    if not is_plotfile(root):
        raise ValueError(f"{root}: not an AMReX plotfile (no Header with a version line)")
    hd = _parse_header(root)
    dim, fields = hd["dim"], list(hd["fields"])
    # Field names must be unique to address them; AMReX does not enforce it.
    seen: dict[str, int] = {}
    for k, name in enumerate(fields):
        if name in seen:
            seen[name] += 1
            fields[k] = f"{name}_{seen[name]}"
        else:
            seen[name] = 0
    index = {name: k for k, name in enumerate(fields)}
    files = _Files()
    nlev = len(hd["paths"])
    levels: list[Level] = []
    versions = []
    ngrows = []
    node = None
    for L, rel in enumerate(hd["paths"]):
        boxes, owners, load, raw, ch = _read_level(root, L, rel, dim, len(fields), files)
        versions.append(ch["version"])
        ngrows.append(ch["ngrow"])
        if boxes:
            if node is not None and ch["node"] != node:
                raise ValueError(f"{root}: level {L} holds data of index type {ch['node']}, an earlier level {node}")
            node = ch["node"]
        domain = hd["domains"][L]
        if L + 1 < nlev:
            ratios = _ref_ratios(domain, hd["domains"][L + 1], hd["ref_ratio"], L, root)
        else:
            ratios = (1,) * dim
        levels.append(
            Level(
                boxes=boxes,
                ref_ratios=ratios,
                dx=tuple(float(v) for v in hd["dx"][L]),
                domain=domain,
                owners=owners,
                fields=fields,
                loader=lambda f, i, load=load: load(index[f], i),
                raw_loader=None if raw is None else (lambda f, raw=raw: raw(index[f])),
            )
        )
    steps = hd["level_steps"]
    attrs = {
        "format": "amrex-plotfile",
        "version": hd["version"],
        "cell_header_versions": versions,
        "ghost_cells": ngrows,
        "level_steps": steps[:nlev],
        "source": str(root),
    }
    h = Hierarchy(
        fields=fields,
        levels=levels,
        prob_lo=tuple(hd["prob_lo"]),
        prob_hi=tuple(hd["prob_hi"]),
        coord_sys=hd["coord_sys"],
        time=float(hd["time"]),
        step=int(steps[0]) if steps else 0,
        attrs=attrs,
        node=node if node and any(node) else (),
    )
    check_nesting(h.levels, h.nodal, str(root))
    return h


def _ref_ratios(coarse: Box, fine: Box, header_ratios, L: int, root: Path) -> tuple[int, ...]:
    """Per-dimension ratio from the two domains; the Header's line only has the x ratio."""
    cs, fs = box_shape(coarse), box_shape(fine)
    if all(f % c == 0 and f >= c for c, f in zip(cs, fs)):
        return tuple(f // c for c, f in zip(cs, fs))
    if L < len(header_ratios) and header_ratios[L] >= 1:
        return (int(header_ratios[L]),) * len(cs)
    raise ValueError(f"{root / 'Header'}: cannot tell the refinement ratio of level {L} (domains {coarse} and {fine})")


# --------------------------------------------------------------------------------------------
# writing


def _fmt_box(box: Box, node=None) -> str:
    lo, hi = box
    kind = ",".join("1" if n else "0" for n in (node or (False,) * len(lo)))
    return f"(({','.join(map(str, lo))}) ({','.join(map(str, hi))}) ({kind}))"


def _fmt_real(v: float) -> str:
    # As AMReX writes the Header (C++ stream precision 17): exact on reading back.
    return f"{float(v):.17g}"


def _real_descriptor(dt: np.dtype) -> str:
    n = dt.itemsize
    return str(_Real(_IEEE_FORMATS[n], tuple(range(n, 0, -1))))  # little-endian


def _write_level(h: Hierarchy, L: int, level_dir: Path, dt: np.dtype) -> None:
    lev = h.levels[L]
    fields = h.fields
    ncomp = len(fields)
    rd = _real_descriptor(dt)
    # One data file per owner, numbered by owner as AMReX numbers them by rank.
    owners = list(lev.owners) if len(lev.owners) == len(lev.boxes) else [0] * len(lev.boxes)
    fods: list = [None] * len(lev.boxes)
    mins = np.zeros((len(lev.boxes), ncomp))
    maxs = np.zeros((len(lev.boxes), ncomp))
    for owner in sorted(set(owners)):
        name = f"Cell_D_{max(int(owner), 0):05d}"
        with open(level_dir / name, "wb") as f:
            for i, o in enumerate(owners):
                if o != owner:
                    continue
                box = lev.boxes[i]
                fods[i] = (name, f.tell())
                f.write(f"FAB {rd}{_fmt_box(box, h.nodal)} {ncomp}\n".encode("ascii"))
                for c, field in enumerate(fields):
                    a = np.asarray(lev.box_data(field, i))
                    if a.size:
                        mins[i, c], maxs[i, c] = a.min(), a.max()
                    f.write(np.asarray(a, dtype=dt).tobytes(order="F"))
    lines = ["1", "1", str(ncomp), "0", f"({len(lev.boxes)} 0"]
    lines += [_fmt_box(b, h.nodal) for b in lev.boxes]
    lines += [")", str(len(lev.boxes))]
    lines += [f"FabOnDisk: {name} {off}" for name, off in fods]
    lines.append("")
    for table in (mins, maxs):
        lines.append(f"{len(lev.boxes)},{ncomp if lev.boxes else 0}")
        lines += ["".join(f"{v:.16e}," for v in row) for row in table]
        lines.append("")
    (level_dir / "Cell_H").write_text("\n".join(lines) + "\n", encoding="ascii")


def _write_header(h: Hierarchy, root: Path, steps: list[int]) -> None:
    dim = h.dim
    nlev = h.num_levels
    out = ["HyperCLaw-V1.1", str(len(h.fields)), *h.fields, str(dim), _fmt_real(h.time), str(nlev - 1)]
    out.append("".join(f"{_fmt_real(v)} " for v in h.prob_lo))
    out.append("".join(f"{_fmt_real(v)} " for v in h.prob_hi))
    out.append("".join(f"{lev.ref_ratios[0]} " for lev in h.levels[:-1]))
    out.append("".join(f"{_fmt_box(lev.domain)} " for lev in h.levels))
    out.append("".join(f"{s} " for s in steps))
    for lev in h.levels:
        out.append("".join(f"{_fmt_real(v)} " for v in lev.dx))
    out += [str(int(h.coord_sys)), "0"]
    for L, lev in enumerate(h.levels):
        out.append(f"{L} {len(lev.boxes)} {_fmt_real(h.time)}")
        out.append(str(steps[L]))
        dlo = lev.domain[0]
        for lo, hi in lev.boxes:
            for d in range(dim):
                # The physical extent of the box's cells (a node box ends on its last node).
                x0 = h.prob_lo[d] + (lo[d] - dlo[d]) * lev.dx[d]
                x1 = h.prob_lo[d] + (hi[d] + 1 - h.nodal[d] - dlo[d]) * lev.dx[d]
                out.append(f"{_fmt_real(x0)} {_fmt_real(x1)}")
        out.append(f"Level_{L}/Cell")
    (root / "Header").write_text("\n".join(out) + "\n", encoding="utf-8")


def write_plotfile(h: Hierarchy, path, *, dtype=None) -> Path:
    """Write ``h`` as an AMReX plotfile folder at ``path`` (HyperCLaw-V1.1 Header, VisMF
    cell-header version 1 with a FAB line before each box, little-endian), readable by AMReX,
    yt and VisIt.

    ``dtype`` is float32 or float64; by default the data's own type when it is one of those
    (float64 otherwise). The plotfile is built in a temporary folder beside ``path`` and renamed
    into place, so a reader never sees a half-written one. An existing plotfile at ``path`` is
    replaced; any other existing folder or file is left alone and a ``ValueError`` raised.
    """
    root = Path(path)
    if dtype is None:
        try:
            kinds = {np.dtype(h.dtype(f)).newbyteorder("=") for f in h.fields}
        except Exception:
            kinds = set()
        dt = kinds.pop() if len(kinds) == 1 else np.dtype(np.float64)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            dt = np.dtype(np.float64)
    else:
        dt = np.dtype(dtype).newbyteorder("=")
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"plotfiles hold float32 or float64, not {dt}")
    dt = dt.newbyteorder("<")
    if not h.fields:
        raise ValueError("the hierarchy has no fields to write")
    if any(("\n" in f or not f.strip()) for f in h.fields):
        raise ValueError("field names must be non-empty and on one line")
    if root.exists() and not (root.is_dir() and (not any(root.iterdir()) or is_plotfile(root))):
        raise ValueError(f"{root}: exists and is not a plotfile; not replacing it")
    steps = h.attrs.get("level_steps")
    if not (isinstance(steps, (list, tuple)) and len(steps) == h.num_levels):
        steps = [int(h.step)] * h.num_levels
    steps = [int(s) for s in steps]
    parent = root.parent if str(root.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=parent))
    try:
        for L in range(h.num_levels):
            (tmp / f"Level_{L}").mkdir()
            _write_level(h, L, tmp / f"Level_{L}", dt)
        _write_header(h, tmp, steps)
        os.chmod(tmp, 0o755)
        if root.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".old", dir=parent))
            os.rename(root, old / "plotfile")
            try:
                os.rename(tmp, root)
            except BaseException:
                os.rename(old / "plotfile", root)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
