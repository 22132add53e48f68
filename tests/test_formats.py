"""AMR file readers (AMReX plotfiles, AMReX HDF5, Chombo HDF5) and the plotfile writer.

The real files come from ../shared/data beside the project (or $AMRZIP_TEST_DATA); tests that
need them skip when the folder is absent. Variants of the AMReX layout that no shared file has
(cell-header versions 2-4, float32, big-endian, ghost cells, shared/gapped/empty data files, EB
extras) are made here by rewriting a real plotfile with a small writer of the test's own, so the
reader is checked against the layout AMReX documents rather than against amrzip's own writer.
yt, when installed, is the reference for values.
"""

from __future__ import annotations

import dataclasses
import itertools
import mmap
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from amrzip.amr.boxes import check_nesting
from amrzip.amr.hierarchy import Hierarchy, box_shape
from amrzip.formats import detect, read, write_plotfile
from hdf5_files import write_chombo
from shared_data import AMREX, CHOMBO, needs_data


def _h5py():
    return pytest.importorskip("h5py", reason="h5py is not installed (it is in requirements-dev.txt)")


def _yt():
    yt = pytest.importorskip("yt", reason="yt is not installed (optional reference reader)")
    yt.set_log_level(50)
    return yt


_cache: dict = {}


def load(name: str) -> Hierarchy:
    """A shared plotfile or Chombo file, read once per test session."""
    if name not in _cache:
        _cache[name] = read(AMREX / name if (AMREX / name).exists() else CHOMBO / name)
    return _cache[name]


def leaf_mean(h: Hierarchy, field: str) -> float:
    total = volume = 0.0
    for L, lev in enumerate(h.levels):
        cell = float(np.prod(lev.dx))
        for i in range(lev.num_boxes):
            leaf = ~h.covered_mask(L, i)
            total += float(lev.box_data(field, i)[leaf].sum()) * cell
            volume += float(leaf.sum()) * cell
    return total / volume


def assert_same(a: Hierarchy, b: Hierarchy, *, fields=None, dtype=None, geometry=True):
    """Same boxes, same values (cast to ``dtype`` first when given) and, optionally, geometry."""
    assert a.num_levels == b.num_levels
    for la, lb in zip(a.levels, b.levels):
        assert la.boxes == lb.boxes
        for f in fields or a.fields:
            for i in range(la.num_boxes):
                x = la.box_data(f, i)
                y = lb.box_data(f, i)
                if dtype is not None:
                    x = x.astype(dtype)
                np.testing.assert_array_equal(x, y)
    if geometry:
        assert a.dim == b.dim and a.coord_sys == b.coord_sys and a.step == b.step
        assert a.time == b.time
        np.testing.assert_array_equal(a.prob_lo, b.prob_lo)
        np.testing.assert_array_equal(a.prob_hi, b.prob_hi)
        for la, lb in zip(a.levels, b.levels):
            assert la.domain == lb.domain and la.ref_ratios == lb.ref_ratios
            np.testing.assert_array_equal(la.dx, lb.dx)


def is_view(a: np.ndarray) -> bool:
    """Whether ``a`` is a view onto a memory-mapped file (not a copy)."""
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return True
        a = getattr(a, "base", None)
    return False


# ---------------------------------------------------------------------------------------------
# A test-side plotfile writer for layouts that the shared files do not have.


def _order(dt: np.dtype, order=None) -> tuple[int, ...]:
    """AMReX's byte order list: where (from 1) each byte of a value, most significant first,
    sits in the file."""
    if order is not None:
        return tuple(order)
    n = dt.itemsize
    return tuple(range(n, 0, -1)) if dt.byteorder == "<" or (dt.byteorder == "=" and np.little_endian) else tuple(range(1, n + 1))


def _rd(dt: np.dtype, order=None) -> str:
    """A RealDescriptor as AMReX prints it: the format list always has 8 numbers, the order list
    one per byte."""
    fmt = "64 11 52 0 1 12 0 1023" if dt.itemsize == 8 else "32 8 23 0 1 9 0 127"
    ords = _order(dt, order)
    return f"((8, ({fmt})),({len(ords)}, ({' '.join(map(str, ords))})))"


def _encode(a: np.ndarray, dt: np.dtype, order=None) -> bytes:
    """``a`` as the bytes of a FAB component in byte order ``order`` (Fortran order)."""
    big = np.frombuffer(np.asarray(a, dtype=dt.newbyteorder(">")).tobytes(order="F"), dtype=np.uint8).reshape(-1, dt.itemsize)
    out = np.empty_like(big)
    out[:, np.asarray(_order(dt, order)) - 1] = big
    return out.tobytes()


def _box(lo, hi) -> str:
    return f"(({','.join(map(str, lo))}) ({','.join(map(str, hi))}) ({','.join('0' for _ in lo)}))"


def write_variant(h, src, dst, *, version=1, dtype="<f8", order=None, file_of=None, ghost=0, empty_file=None, eb=False,
                  intvect_ghost=False):
    """Rewrite plotfile ``src`` (read as ``h``) at ``dst`` in another VisMF layout.

    ``dtype`` and ``order`` (AMReX's byte order list; by default the dtype's own) give the
    stored reals. ``file_of(i)`` is the data file number of box ``i`` (boxes are written in
    reverse order, so offsets do not follow box numbers); ``ghost`` grows every stored box by
    that many cells (filled with junk); ``empty_file`` names an extra zero-byte data file; ``eb`` adds a
    ``vfrac`` field, the per-level EB lines at the Header's end and extra folders and files.
    """
    dst = Path(dst)
    dst.mkdir()
    dt = np.dtype(dtype)
    lines = (Path(src) / "Header").read_text().splitlines()
    nvar = int(lines[1])
    if eb:
        lines = lines[:1] + [str(nvar + 1)] + lines[2 : 2 + nvar] + ["vfrac"] + lines[2 + nvar :]
        lines += ["1.0e-6"] * h.num_levels
        (dst / "raw_fields" / "Level_0").mkdir(parents=True)
        (dst / "raw_fields" / "Level_0" / "Cell_H").write_text("not a plotfile level\n")
        (dst / "EBGeometry").write_bytes(b"\x00\x01binary")
    (dst / "Header").write_text("\n".join(lines) + "\n")
    (dst / "WarpXHeader").write_text("extra file\n")
    ncomp = len(h.fields) + (1 if eb else 0)
    for L, lev in enumerate(h.levels):
        ldir = dst / f"Level_{L}"
        ldir.mkdir()
        nb = lev.num_boxes
        fods = [None] * nb
        mins = np.zeros((nb, ncomp))
        maxs = np.zeros((nb, ncomp))
        handles = {}
        for i in reversed(range(nb)):
            name = f"Cell_D_{(file_of(i) if file_of else 0):05d}"
            if name not in handles:
                handles[name] = open(ldir / name, "wb")
            f = handles[name]
            lo, hi = lev.boxes[i]
            glo, ghi = tuple(v - ghost for v in lo), tuple(v + ghost for v in hi)
            shape = box_shape((glo, ghi))
            inner = tuple(slice(ghost, ghost + n) for n in box_shape(lev.boxes[i]))
            fods[i] = (name, f.tell())
            if version == 1:
                f.write(f"FAB {_rd(dt, order)}{_box(glo, ghi)} {ncomp}\n".encode())
            for c in range(ncomp):
                a = lev.box_data(h.fields[c], i) if c < len(h.fields) else np.ones(box_shape(lev.boxes[i]))
                full = np.full(shape, -1.5e30)
                full[inner] = a
                mins[i, c], maxs[i, c] = a.min(), a.max()
                f.write(_encode(full, dt, order))
        for f in handles.values():
            f.close()
        if empty_file:
            (ldir / empty_file).write_bytes(b"")
        g = f"({','.join([str(ghost)] * h.dim)})" if intvect_ghost else str(ghost)
        out = [str(version), "1", str(ncomp), g, f"({nb} 0"] + [_box(*b) for b in lev.boxes] + [")", str(nb)]
        out += [f"FabOnDisk: {n} {o}" for n, o in fods] + [""]
        if version in (1, 3):
            for t in (mins, maxs):
                out += [f"{nb},{ncomp}"] + ["".join(f"{v:.16e}," for v in row) for row in t] + [""]
        if version == 4:
            out += ["".join(f"{v:.16e}," for v in mins.min(axis=0)), "".join(f"{v:.16e}," for v in maxs.max(axis=0))]
        if version >= 2:
            out.append(_rd(dt, order))
        (ldir / "Cell_H").write_text("\n".join(out) + "\n")
    return dst


# ---------------------------------------------------------------------------------------------
# format detection


def test_unknown_paths_raise_naming_the_path(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not an AMR file at all")
    for p in (junk, tmp_path / "missing", tmp_path):
        with pytest.raises(ValueError, match=str(p.name)):
            read(p)
    empty = tmp_path / "plt_empty"
    empty.mkdir()
    (empty / "Header").write_text("")
    with pytest.raises(ValueError, match="plt_empty"):
        read(empty)


def test_hdf5_without_levels_is_refused(tmp_path):
    h5py = _h5py()
    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(4.0)
    with pytest.raises(ValueError, match="other.h5"):
        read(p)


# ---------------------------------------------------------------------------------------------
# the shared AMReX plotfiles


@needs_data
def test_pelelmex_layout():
    h = load("pelelmex_3d")
    assert detect(AMREX / "pelelmex_3d") == "amrex-plotfile"
    assert h.dim == 3 and h.num_levels == 3
    assert [lev.num_boxes for lev in h.levels] == [1, 8, 64]
    assert len(h.fields) == 38 and h.fields[0] == "x_velocity" and h.fields[-1] == "enstrophy"
    assert h.dtype() == np.float64 and h.dtype("Y(H2)") == np.float64
    assert [lev.ref_ratio for lev in h.levels] == [2, 2, 1]
    assert [lev.domain for lev in h.levels] == [((0,) * 3, (7,) * 3), ((0,) * 3, (15,) * 3), ((0,) * 3, (31,) * 3)]
    np.testing.assert_allclose(h.levels[2].dx, [0.0005] * 3)
    assert h.prob_lo == (0.0, 0.0, 0.0) and h.prob_hi == (0.016, 0.016, 0.016)
    assert h.time == 1.3924182125972017e-08 and h.step == 20 and h.coord_sys == 0
    assert h.attrs["cell_header_versions"] == [1, 1, 1]
    assert sorted(set(h.levels[2].owners)) == [0, 1, 2, 3]
    a = h.levels[2].box_data("temp", 5)
    assert a.shape == (8, 8, 8) and is_view(a)
    # The Cell_H min/max of box 0 on level 1 agree with the data (first and last fields).
    lev1 = (AMREX / "pelelmex_3d" / "Level_1" / "Cell_H").read_text().splitlines()
    k = lev1.index("8,38")
    mins = [float(v) for v in lev1[k + 1].rstrip(",").split(",")]
    maxs = [float(v) for v in lev1[lev1.index("8,38", k + 1) + 1].rstrip(",").split(",")]
    for c in (0, 5, 37):
        d = h.levels[1].box_data(h.fields[c], 0)
        assert d.min() == mins[c] and d.max() == maxs[c]


@needs_data
def test_warpx_single_level():
    h = load("warpx_single_level")
    assert h.num_levels == 1 and h.fields == ["Ey", "Bx"]
    lev = h.levels[0]
    assert lev.domain == ((0, 0, 0), (31, 31, 127)) and lev.num_boxes == 2
    assert lev.boxes == [((0, 0, 0), (31, 31, 63)), ((0, 0, 64), (31, 31, 127))]
    assert lev.ref_ratios == (1, 1, 1)
    assert h.prob_lo == (-1e-06, -1e-06, 0.0) and h.prob_hi[2] == 4e-06
    np.testing.assert_allclose(lev.dx, [6.25e-08, 6.25e-08, 3.125e-08])
    assert h.step == 80
    # min/max of Cell_H
    assert lev.box_data("Ey", 0).min() == -1.51532174205260708e04
    assert lev.box_data("Bx", 1).max() == 2.52734860372024828e-04


@needs_data
def test_advection_levels_and_conserved_mean():
    h = load("advection_2d_4levels")
    assert h.dim == 2 and h.fields == ["phi"]
    assert [lev.num_boxes for lev in h.levels] == [16, 15, 28, 32]
    assert all(lev.ref_ratios == (2, 2) for lev in h.levels[:-1])
    assert h.levels[3].domain == ((0, 0), (1023, 1023))
    assert leaf_mean(h, "phi") == pytest.approx(1.031407652860374, rel=1e-12)


@needs_data
def test_truncated_plotfile_is_refused_at_read_time():
    with pytest.raises(ValueError, match=r"pelelmex_3d_truncated/Level_0/Cell_D_00000.*truncated"):
        read(AMREX / "pelelmex_3d_truncated")


@needs_data
def test_truncation_anywhere_names_the_file(tmp_path):
    h = load("pelelmex_3d")
    out = write_plotfile(h, tmp_path / "plt")
    victim = out / "Level_2" / "Cell_D_00003"
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size - 8)
    with pytest.raises(ValueError, match="Level_2/Cell_D_00003"):
        read(out)
    victim.unlink()
    with pytest.raises(ValueError, match="Level_2/Cell_D_00003"):
        read(out)


def _against_yt(folder: Path, name: str):
    """Our hierarchy of a shared file, yt's dataset of it, and the (level, box) of a yt grid."""
    yt = _yt()
    h = load(name)
    ds = yt.load(str(folder / name))
    where = {(L, b[0]): i for L, lev in enumerate(h.levels) for i, b in enumerate(lev.boxes)}

    def box_of(g):
        L = int(g.Level)
        return L, where[(L, tuple(int(v) for v in g.get_global_startindex()[: h.dim]))]

    return h, ds, box_of


@needs_data
@pytest.mark.parametrize("name", ["pelelmex_3d", "warpx_single_level", "advection_2d_4levels"])
def test_plotfile_values_match_yt(name):
    h, ds, box_of = _against_yt(AMREX, name)
    grids = ds.index.grids
    assert len(grids) == sum(lev.num_boxes for lev in h.levels)
    for g in grids[:: max(1, len(grids) // 12)]:
        L, i = box_of(g)
        for f in h.fields[:: max(1, len(h.fields) // 6)]:
            theirs = g["boxlib", f].d.reshape(tuple(g.ActiveDimensions)[: h.dim])
            np.testing.assert_array_equal(h.levels[L].box_data(f, i), theirs)


# ---------------------------------------------------------------------------------------------
# the writer


@needs_data
@pytest.mark.parametrize("name", ["pelelmex_3d", "warpx_single_level", "advection_2d_4levels"])
def test_plotfile_round_trip(tmp_path, name):
    h = load(name)
    out = write_plotfile(h, tmp_path / "copy")
    back = read(out)
    assert back.fields == h.fields and back.attrs["level_steps"] == h.attrs["level_steps"]
    assert_same(h, back)
    assert back.attrs["cell_header_versions"] == [1] * h.num_levels
    # owners (the data file numbers) survive
    assert [lev.owners for lev in back.levels] == [lev.owners for lev in h.levels]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@needs_data
def test_written_plotfile_opens_in_yt(tmp_path):
    yt = _yt()
    h = load("advection_2d_4levels")
    out = write_plotfile(h, tmp_path / "plt00200")
    ds = yt.load(str(out))
    assert ds.index.max_level == 3 and len(ds.index.grids) == 91
    where = {(L, b[0]): i for L, lev in enumerate(h.levels) for i, b in enumerate(lev.boxes)}
    for g in ds.index.grids[::7]:
        L = int(g.Level)
        i = where[(L, tuple(int(v) for v in g.get_global_startindex()[:2]))]
        np.testing.assert_array_equal(g["boxlib", "phi"].d[:, :, 0], h.levels[L].box_data("phi", i))


def test_write_from_arrays_float32_and_replace(tmp_path):
    rng = np.random.default_rng(1)
    boxes0 = [((0, 0, 0), (3, 7, 7)), ((4, 0, 0), (7, 7, 7))]
    boxes1 = [((2, 2, 2), (9, 5, 13))]
    lv0 = {"boxes": boxes0, "ref_ratio": (2, 2, 2), "owners": [0, 5],
           "data": {"rho": [rng.random(box_shape(b)).astype(np.float32) for b in boxes0],
                    "T": [rng.random(box_shape(b)).astype(np.float32) for b in boxes0]}}
    lv1 = {"boxes": boxes1, "data": {"rho": [rng.random(box_shape(b)).astype(np.float32) for b in boxes1],
                                     "T": [rng.random(box_shape(b)).astype(np.float32) for b in boxes1]}}
    h = Hierarchy.from_arrays([lv0, lv1], prob_lo=(-1.0, 0.0, 2.0), prob_hi=(1.0, 2.0, 4.0), time=0.5, step=7, coord_sys=1)
    out = write_plotfile(h, tmp_path / "plt")
    back = read(out)
    assert back.dtype("T") == np.dtype("<f4")
    assert_same(h, back)
    assert sorted(p.name for p in (out / "Level_0").iterdir()) == ["Cell_D_00000", "Cell_D_00005", "Cell_H"]
    # float64 on request; replacing an existing plotfile
    out = write_plotfile(h, tmp_path / "plt", dtype=np.float64)
    back = read(out)
    assert back.dtype("rho") == np.float64
    assert_same(h, back, dtype=np.float64)
    # a folder that is not a plotfile is not replaced
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="notes"):
        write_plotfile(h, other)
    assert (other / "keep.txt").exists()
    with pytest.raises(ValueError):
        write_plotfile(h, tmp_path / "bad", dtype=np.int32)


def test_node_centred_plotfile_round_trip(tmp_path):
    """Nodal data: boxes carry index type (1, 1) in the cell headers, the level domain stays
    its cells, and coverage counts coinciding nodes."""
    rng = np.random.default_rng(2)
    boxes0 = [((0, 0), (8, 8))]  # the nodes of cells 0..7
    boxes1 = [((4, 4), (10, 12))]
    lv0 = {"boxes": boxes0, "ref_ratio": 2, "data": {"phi": [rng.random(box_shape(b)) for b in boxes0]}}
    lv1 = {"boxes": boxes1, "data": {"phi": [rng.random(box_shape(b)) for b in boxes1]}}
    h = Hierarchy.from_arrays([lv0, lv1], prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0), node=(True, True))
    assert h.nodal == (True, True) and h.level(0).domain == ((0, 0), (7, 7)) and h.level(1).domain == ((0, 0), (15, 15))
    covered = h.covered_mask(0, 0)
    assert {tuple(int(v) for v in c) for c in np.argwhere(covered)} == {(i, j) for i in (2, 3, 4, 5) for j in (2, 3, 4, 5, 6)}
    out = write_plotfile(h, tmp_path / "plt")
    assert "((0,0) (8,8) (1,1))" in (out / "Level_0" / "Cell_H").read_text()
    back = read(out)
    assert back.nodal == (True, True)
    assert_same(h, back)


def test_mixed_index_types_are_refused(tmp_path):
    h = Hierarchy.from_arrays([{"boxes": [((0,), (3,)), ((4,), (7,))], "data": {"u": [np.arange(4.0), np.arange(4.0)]}}], prob_lo=(0.0,), prob_hi=(1.0,))
    out = write_plotfile(h, tmp_path / "plt")
    cell_h = out / "Level_0" / "Cell_H"
    cell_h.write_text(cell_h.read_text().replace("((4) (7) (0))", "((4) (7) (1))", 1))
    with pytest.raises(ValueError, match="different index types"):
        read(out)


def test_failed_write_leaves_nothing(tmp_path):
    h = Hierarchy.from_arrays([{"boxes": [((0,), (3,))], "data": {"u": [np.arange(4.0)]}}], prob_lo=(0.0,), prob_hi=(1.0,))
    good = write_plotfile(h, tmp_path / "plt")
    before = (good / "Level_0" / "Cell_D_00000").read_bytes()

    def broken(field, i):
        raise RuntimeError("disk on fire")

    h.levels[0].loader = broken
    with pytest.raises(RuntimeError):
        write_plotfile(h, tmp_path / "plt")
    with pytest.raises(RuntimeError):
        write_plotfile(h, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plt"]
    assert (good / "Level_0" / "Cell_D_00000").read_bytes() == before
    np.testing.assert_array_equal(read(good).levels[0].box_data("u", 0), np.arange(4.0))


# ---------------------------------------------------------------------------------------------
# layouts the shared files do not have


@needs_data
@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_cell_header_versions(tmp_path, version):
    h = load("pelelmex_3d")
    out = write_variant(h, AMREX / "pelelmex_3d", tmp_path / "plt", version=version, file_of=lambda i: i % 3)
    back = read(out)
    assert back.attrs["cell_header_versions"] == [version] * 3
    assert_same(h, back)


@needs_data
@pytest.mark.parametrize(
    "dtype, descriptor",
    [
        ("<f4", "((8, (32 8 23 0 1 9 0 127)),(4, (4 3 2 1)))"),
        (">f4", "((8, (32 8 23 0 1 9 0 127)),(4, (1 2 3 4)))"),
        (">f8", "((8, (64 11 52 0 1 12 0 1023)),(8, (1 2 3 4 5 6 7 8)))"),
    ],
)
@pytest.mark.parametrize("version", [1, 2])
def test_float32_and_big_endian(tmp_path, dtype, descriptor, version):
    h = load("pelelmex_3d")
    out = write_variant(h, AMREX / "pelelmex_3d", tmp_path / "plt", version=version, dtype=dtype)
    # The descriptor as AMReX prints it, where each version puts it.
    if version == 1:
        assert (out / "Level_0" / "Cell_D_00000").read_bytes().startswith(f"FAB {descriptor}((".encode())
    else:
        assert (out / "Level_0" / "Cell_H").read_text().splitlines()[-1] == descriptor
    back = read(out)
    assert back.dtype() == np.dtype(dtype)
    assert_same(h, back, fields=h.fields[:: 5], dtype=dtype)
    assert is_view(back.levels[2].box_data("temp", 3))


@needs_data
@pytest.mark.parametrize("dtype, order", [("f8", (2, 1, 4, 3, 6, 5, 8, 7)), ("f4", (2, 1, 4, 3))])
def test_mixed_byte_order(tmp_path, dtype, order):
    """AMReX's third byte order (FPC's reverse_*_order_2) is read too, as copies."""
    h = load("advection_2d_4levels")
    out = write_variant(h, AMREX / "advection_2d_4levels", tmp_path / "plt", version=1, dtype=dtype, order=order)
    back = read(out)
    assert back.dtype() == np.dtype(">" + dtype)
    assert_same(h, back, dtype=dtype)


@needs_data
def test_shared_gapped_and_empty_data_files(tmp_path):
    h = load("advection_2d_4levels")
    numbers = [0, 3, 3, 7, 12]  # several boxes per file, gaps in the numbering
    out = write_variant(h, AMREX / "advection_2d_4levels", tmp_path / "plt", version=1,
                        file_of=lambda i: numbers[i % len(numbers)], empty_file="Cell_D_00005")
    assert (out / "Level_2" / "Cell_D_00005").stat().st_size == 0
    back = read(out)
    assert_same(h, back)
    assert sorted(set(back.levels[2].owners)) == [0, 3, 7, 12]
    assert leaf_mean(back, "phi") == pytest.approx(1.031407652860374, rel=1e-12)


@needs_data
@pytest.mark.parametrize("version", [1, 3])
def test_ghost_cells_are_cropped(tmp_path, version):
    h = load("advection_2d_4levels")
    out = write_variant(h, AMREX / "advection_2d_4levels", tmp_path / "plt", version=version, ghost=2,
                        intvect_ghost=version == 3)
    back = read(out)
    assert back.attrs["ghost_cells"] == [(2, 2)] * 4
    assert_same(h, back)


@needs_data
def test_eb_extras_are_tolerated(tmp_path):
    h = load("pelelmex_3d")
    out = write_variant(h, AMREX / "pelelmex_3d", tmp_path / "plt", version=2, eb=True, file_of=lambda i: 2 * i)
    back = read(out)
    assert back.fields == h.fields + ["vfrac"]
    assert_same(h, back, fields=h.fields[::4])
    assert all(np.all(back.levels[L].box_data("vfrac", i) == 1.0) for L in range(3) for i in (0,))


@needs_data
def test_single_level_round_trip_keeps_empty_ref_ratio_line(tmp_path):
    h = load("warpx_single_level")
    out = write_plotfile(h, tmp_path / "plt")
    lines = (out / "Header").read_text().splitlines()
    assert lines[0] == "HyperCLaw-V1.1" and lines[9].strip() == ""  # the ref-ratio line
    assert read(out).prob_lo == h.prob_lo


# ---------------------------------------------------------------------------------------------
# Chombo (BISICLES)


@needs_data
def test_chombo_plot_files():
    h = load("ase-ctrl-reference.H5")
    assert detect(CHOMBO / "ase-ctrl-reference.H5") == "chombo"
    assert h.dim == 2 and len(h.fields) == 24 and h.fields[:3] == ["X0", "X1", "C"] and h.fields[-1] == "Z_surface"
    assert [lev.num_boxes for lev in h.levels] == [1, 6]
    assert h.levels[0].ref_ratios == (2, 2) and h.levels[1].ref_ratios == (1, 1)
    assert h.levels[0].dx == (16000.0, 16000.0) and h.levels[1].dx == (8000.0, 8000.0)
    assert h.prob_lo == (0.0, 0.0) and h.prob_hi == (768000.0, 896000.0)
    assert h.attrs["ghost_cells"] == {"data": (0, 0)}
    assert is_view(h.levels[1].box_data("thickness", 2))

    s = load("stream.reference.000000.2d.H5")
    assert s.num_levels == 1 and len(s.fields) == 18 and s.attrs["ghost_cells"] == {"data": (1, 1)}
    assert s.levels[0].box_data("thickness", 0).shape == (32, 32)
    for name, n in (("asebm2-ctrldata-4km.2d.H5", 3), ("asebm2-geometry-4km.2d.H5", 2)):
        g = load(name)
        assert len(g.fields) == n and g.levels[0].box_data(g.fields[0], 0).shape == (192, 224)


@needs_data
def test_chombo_ghosts_cropped_against_raw_data():
    h5py = _h5py()
    h = load("stream.reference.000000.2d.H5")
    with h5py.File(CHOMBO / "stream.reference.000000.2d.H5", "r") as f:
        raw = f["level_0/data:datatype=0"][()].reshape(18, 34, 34).transpose(0, 2, 1)  # comp, x, y (Fortran)
    for c in (0, 4, 17):
        np.testing.assert_array_equal(h.levels[0].box_data(h.fields[c], 0), raw[c, 1:-1, 1:-1])


@needs_data
def test_chombo_checkpoint_named_datasets():
    name = "chk.mismip3D.Benn.ssa.0lev.013000.2d.hdf5"
    h = load(name)
    assert h.num_levels == 1 and h.levels[0].num_boxes == 4  # level_1..10 groups hold no boxes
    assert h.attrs["kind"] == "checkpoint"
    assert h.fields[:7] == ["thickness", "bedHeight", "deltaBedHeight", "accumCalvedIceThck", "iceMask", "velocity_0", "velocity_1"]
    assert len(h.fields) == 20 and "internalEnergy_10" in h.fields and h.fields[-1] == "bInternalEnergy"
    g = h.attrs["ghost_cells"]
    assert g["thicknessData"] == (5, 5) and g["deltaBedHeightData"] == (0, 0) and g["internalEnergyData"] == (4, 4)
    assert h.time == 28198.0 and h.step == 13000
    lev = h.levels[0]
    for f in h.fields:
        assert lev.box_data(f, 1).shape == (32, 16)
    # Chombo filled the ghost cells from the neighbours: the +x ghost strip of box i is the
    # first columns of box i+1.
    h5py = _h5py()
    with h5py.File(CHOMBO / name, "r") as fh:
        off = fh["level_0/thicknessData:offsets=0"][()]
        raw = fh["level_0/thicknessData:datatype=0"][()]
    for i in range(3):
        full = raw[off[i] : off[i + 1]].reshape((42, 26), order="F")
        np.testing.assert_array_equal(full[5:-5, 5:-5], lev.box_data("thickness", i))
        np.testing.assert_array_equal(full[-5:, 5:-5], lev.box_data("thickness", i + 1)[:5])


@needs_data
@pytest.mark.parametrize("name", ["ase-ctrl-reference.H5", "stream.reference.000000.2d.H5", "asebm2-geometry-4km.2d.H5"])
def test_chombo_values_match_yt(name):
    h, ds, box_of = _against_yt(CHOMBO, name)
    for g in ds.index.grids:
        L, i = box_of(g)
        for ftype, f in ds.field_list[:6]:
            np.testing.assert_array_equal(h.levels[L].box_data(f, i), g[ftype, f].d[:, :, 0])


@needs_data
@pytest.mark.parametrize("kind", ["plotfile ghost 2", "plotfile big-endian", "plotfile mixed order", "chombo ghost 2", "chombo chunked",
                                  "amrex-hdf5 single", "amrex-hdf5 multi"])
def test_readers_give_boxes_in_place_ghost_cells_and_all(tmp_path, kind):
    # Readers say where every box's values sit in their mapped files (Level.raw_loader), ghost
    # cells included and in either byte order, so that a write takes them there with no array
    # per box; where they cannot (a compressed dataset, AMReX's mixed byte order), they give
    # none. Either way the same snapshot.
    import amrzip

    if not kind.startswith("plotfile"):
        _h5py()
    src = load("pelelmex_3d")
    h = Hierarchy(src.fields[:3], [type(l)(l.boxes, l.ref_ratios, l.dx, l.domain, l.owners, src.fields[:3], l.loader) for l in src.levels],
                  src.prob_lo, src.prob_hi, 0, src.time, src.step, {"level_steps": [20, 40, 80]})
    path = tmp_path / "file"
    if kind.startswith("plotfile"):
        h = src  # rewritten with its own Header: every field
        ghost = 2 if kind.endswith("ghost 2") else 0
        dtype, order = {"plotfile big-endian": (">f8", None), "plotfile mixed order": (">f8", (2, 1, 4, 3, 6, 5, 8, 7))}.get(kind, ("<f8", None))
        write_variant(h, AMREX / "pelelmex_3d", path, ghost=ghost, dtype=dtype, order=order, file_of=lambda i: i % 3)
    elif kind.startswith("chombo"):
        write_chombo(h, path, ghost=2, chunked=kind.endswith("chunked"))
    else:
        _write_amrex_h5(h, path, multi=kind.endswith("multi"), order=lambda n: [*range(1, n, 2), *range(0, n, 2)])
    back = read(path)
    in_place = kind not in ("chombo chunked", "plotfile mixed order")
    assert all((lev.raw_loader is not None) == in_place for lev in back.levels)
    if in_place:
        raw = back.levels[2].raw_loader(h.fields[1])
        assert raw[5] == {"plotfile ghost 2": (2, 2, 2), "chombo ghost 2": (2, 2, 2)}.get(kind, (0, 0, 0))
    # The same hierarchy read box by box, each box an array.
    boxwise = dataclasses.replace(back, levels=[dataclasses.replace(lev, raw_loader=None) for lev in back.levels])
    ref = amrzip.write(boxwise, tmp_path / "ref", rel=1e-4, threads=1)
    for threads in (1, 2):
        out = amrzip.write(back, tmp_path / f"s{threads}", rel=1e-4, threads=threads)
        assert out["stored_bytes"] == ref["stored_bytes"]
        assert (tmp_path / f"s{threads}").joinpath(*Path(out["path"]).parts[-1:]).read_bytes() == Path(ref["path"]).read_bytes()
    # The finest level's values (no covered cells there) within the bound.
    got, fine = amrzip.open(tmp_path / "s2").to_hierarchy().levels[-1], h.levels[-1]
    pos = {b: i for i, b in enumerate(fine.boxes)}
    for f in h.fields[:3]:
        stored = [fine.box_data(f, i) for i in range(fine.num_boxes)]
        eb = 1e-4 * (max(a.max() for a in stored) - min(a.min() for a in stored))
        for j, b in enumerate(got.boxes):
            assert np.abs(got.box_data(f, j) - stored[pos[b]]).max() <= eb


@needs_data
@pytest.mark.parametrize("chunked", [False, True])
def test_chombo_3d_with_ghosts(tmp_path, chunked):
    _h5py()
    h = load("pelelmex_3d")
    sub = Hierarchy(h.fields[:4], [type(l)(l.boxes, l.ref_ratios, l.dx, l.domain, l.owners, h.fields[:4], l.loader) for l in h.levels],
                    h.prob_lo, h.prob_hi, 0, h.time, h.step)
    p = tmp_path / "pele.3d.hdf5"
    write_chombo(sub, p, ghost=2, chunked=chunked)
    back = read(p)
    assert back.attrs["ghost_cells"] == {"data": (2, 2, 2)}
    assert_same(sub, back, geometry=False)
    assert [l.ref_ratios for l in back.levels] == [(2, 2, 2), (2, 2, 2), (1, 1, 1)]
    assert is_view(back.levels[2].box_data("x_velocity", 0)) != chunked


# ---------------------------------------------------------------------------------------------
# AMReX HDF5 (no real file is shared; these follow WriteMultiLevelPlotfileHDF5's layout)


def _write_amrex_h5(h: Hierarchy, path, multi=False, order=None, chunked=False):
    h5py = _h5py()
    dim = h.dim
    axes = "ijk"[:dim]
    bt = np.dtype([(f"lo_{a}", "<i4") for a in axes] + [(f"hi_{a}", "<i4") for a in axes])
    ct = np.dtype([(a, "<i4") for a in axes])

    def s(v):
        return np.bytes_(v)

    with h5py.File(path, "w") as f:
        f.attrs["version_name"] = s("HyperCLaw-V1.1")
        f.attrs["plotfile_type"] = s("VanillaHDF5")
        f.attrs["num_components"] = np.array([len(h.fields)], dtype=np.int32)
        for k, name in enumerate(h.fields):
            f.attrs[f"component_{k}"] = s(name)
        f.attrs["dim"] = np.array([dim], dtype=np.int32)
        f.attrs["time"] = np.array([h.time])
        f.attrs["finest_level"] = np.array([h.num_levels - 1], dtype=np.int32)
        f.attrs["coordinate_system"] = np.array([h.coord_sys], dtype=np.int32)
        f.attrs["num_levels"] = np.array([h.num_levels], dtype=np.int32)
        f.create_group("Chombo_global").attrs["SpaceDim"] = np.array([dim], dtype=np.int32)
        for L, lev in enumerate(h.levels):
            g = f.create_group(f"level_{L}")
            g.attrs["ref_ratio"] = np.array([lev.ref_ratios[0]], dtype=np.int32)
            g.attrs["Vec_dx"] = np.array(lev.dx)
            g.attrs["dx"] = np.array([lev.dx[0]])
            g.attrs["prob_lo"] = np.array(h.prob_lo)
            g.attrs["prob_hi"] = np.array(h.prob_hi)
            g.attrs["prob_domain"] = np.array(tuple(lev.domain[0] + lev.domain[1]), dtype=bt)[()]
            g.attrs["domain_type"] = np.zeros(dim, dtype=np.int32)
            g.attrs["steps"] = np.array([h.attrs["level_steps"][L]], dtype=np.int32)
            g.attrs["ngrid"] = np.array([lev.num_boxes], dtype=np.int32)
            g.attrs["time"] = np.array([h.time])
            g.attrs["ngrow"] = np.array([1], dtype=np.int32)  # of the source MultiFab; the data has none
            idx = list(order(lev.num_boxes)) if order else list(range(lev.num_boxes))
            g["boxes"] = np.array([tuple(lev.boxes[i][0] + lev.boxes[i][1]) for i in idx], dtype=bt)
            g["boxcenter"] = np.zeros(lev.num_boxes, dtype=ct)
            offsets = [0]
            for i in idx:
                offsets.append(offsets[-1] + int(np.prod(box_shape(lev.boxes[i]))) * (1 if multi else len(h.fields)))
            g["data:offsets=0"] = np.array(offsets, dtype=np.int64)
            kw = {"chunks": (1024,), "compression": "gzip", "shuffle": True} if chunked else {}
            if multi:
                for k, fld in enumerate(h.fields):
                    flat = np.concatenate([lev.box_data(fld, i).ravel(order="F") for i in idx])
                    g.create_dataset(f"data:datatype={k}", data=flat, **kw)
            else:
                flat = np.concatenate([lev.box_data(fld, i).ravel(order="F") for i in idx for fld in h.fields])
                g.create_dataset("data:datatype=0", data=flat, **kw)


@needs_data
@pytest.mark.parametrize("variant", ["single", "multi", "chunked"])
def test_amrex_hdf5_round_trip(tmp_path, variant):
    src = load("pelelmex_3d")
    h = Hierarchy(src.fields[:5], [type(l)(l.boxes, l.ref_ratios, l.dx, l.domain, l.owners, src.fields[:5], l.loader) for l in src.levels],
                  src.prob_lo, src.prob_hi, 0, src.time, src.step, dict(src.attrs))
    p = tmp_path / "plt00020.h5"
    # boxes in "rank order", not box order, as AMReX writes them
    _write_amrex_h5(h, p, multi=variant == "multi", order=lambda n: [*range(1, n, 2), *range(0, n, 2)], chunked=variant == "chunked")
    assert detect(p) == "amrex-hdf5"
    back = read(p)
    assert back.fields == h.fields and back.time == h.time and back.step == 20
    assert back.attrs["layouts"] == ["multi-dataset" if variant == "multi" else "single-dataset"] * 3
    assert [lev.num_boxes for lev in back.levels] == [1, 8, 64]
    assert [l.ref_ratios for l in back.levels] == [(2, 2, 2), (2, 2, 2), (1, 1, 1)]
    for L, lev in enumerate(back.levels):
        np.testing.assert_array_equal(lev.dx, h.levels[L].dx)
        assert lev.domain == h.levels[L].domain
        pos = {b: i for i, b in enumerate(h.levels[L].boxes)}
        for j, b in enumerate(lev.boxes):
            for f in h.fields:
                np.testing.assert_array_equal(lev.box_data(f, j), h.levels[L].box_data(f, pos[b]))
    a = back.levels[2].box_data("z_velocity", 7)
    assert is_view(a) == (variant != "chunked")


@needs_data
def test_amrex_hdf5_2d_conserved_mean(tmp_path):
    h = load("advection_2d_4levels")
    p = tmp_path / "adv.h5"
    _write_amrex_h5(h, p)
    back = read(p)
    assert [lev.num_boxes for lev in back.levels] == [16, 15, 28, 32]
    assert back.prob_hi == (1.0, 1.0)
    assert leaf_mean(back, "phi") == pytest.approx(1.031407652860374, rel=1e-12)


@needs_data
def test_amrex_hdf5_bad_offsets_are_refused(tmp_path):
    h5py = _h5py()
    h = load("advection_2d_4levels")
    p = tmp_path / "bad.h5"
    _write_amrex_h5(h, p)
    with h5py.File(p, "r+") as f:
        off = f["level_1/data:offsets=0"][()]
        off[3] += 5
        f["level_1/data:offsets=0"][...] = off
    with pytest.raises(ValueError, match="bad.h5 level_1"):
        read(p)


# ---------------------------------------------------------------------------------------------
# files that must be refused: each error is one line naming the file and what is wrong


def refused(path, *fragments) -> str:
    """Reading ``path`` raises a one-line ``ValueError`` holding every fragment."""
    with pytest.raises(ValueError) as e:
        read(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    for fragment in fragments:
        assert str(fragment) in msg, msg
    return msg


def two_levels(coarse, fine, *, node=None, domain=((0, 0), (15, 15)), ratio=2) -> Hierarchy:
    """A 2-d hierarchy of two levels and two fields, random values."""
    rng = np.random.default_rng(3)

    def data(boxes):
        return {f: [rng.random(box_shape(b)) for b in boxes] for f in ("u", "v")}

    return Hierarchy.from_arrays(
        [{"boxes": list(coarse), "ref_ratio": ratio, "domain": domain, "data": data(coarse)}, {"boxes": list(fine), "data": data(fine)}],
        prob_lo=(0.0, 0.0), prob_hi=(1.0, 1.0), node=node, attrs={"level_steps": [0, 0]},
    )


# Two coarse boxes side by side; the first fine box straddles them, the second lies in one.
COARSE = [((0, 0), (7, 15)), ((8, 0), (15, 15))]
FINE = [((12, 4), (19, 7)), ((20, 8), (23, 13))]


@pytest.fixture
def plotfile(tmp_path) -> Path:
    out = write_plotfile(two_levels(COARSE, FINE), tmp_path / "plt")
    assert read(out).levels[1].boxes == FINE
    return out


def edit(path: Path, old: bytes, new: bytes, count: int = 1) -> None:
    """Replace ``old`` by ``new`` (of the same length, so later offsets hold) in a file."""
    data = path.read_bytes()
    assert data.count(old) >= count and len(old) == len(new), (old, data[:200])
    path.write_bytes(data.replace(old, new, count))


def test_fab_larger_than_its_cell_h_box_is_refused(plotfile):
    # Bigger than Cell_H's box with no ghost cells declared: once cropped and read on into the
    # next box's bytes.
    data = plotfile / "Level_1" / "Cell_D_00000"
    edit(data, b"((12,4) (19,7) (0,0)) 2", b"((11,4) (19,8) (0,0)) 2")
    refused(plotfile, data, "box 0 of level 1", "((11,4) (19,8) (0,0))", plotfile / "Level_1" / "Cell_H", "((12,4) (19,7) (0,0))")


def test_fab_box_must_be_the_ghost_grown_box(tmp_path, plotfile):
    cell_h = plotfile / "Level_1" / "Cell_H"
    lines = cell_h.read_text().splitlines()
    assert lines[3] == "0"  # the ghost width
    cell_h.write_text("\n".join(lines[:3] + ["1"] + lines[4:]) + "\n")
    refused(plotfile, plotfile / "Level_1" / "Cell_D_00000", "ghost width (1, 1)", "((11,3) (20,8) (0,0))")
    # Ghost cells written and declared read; declared wider than written refused.
    h = two_levels(COARSE, FINE)
    out = write_variant(h, write_plotfile(h, tmp_path / "src"), tmp_path / "ghosts", ghost=1)
    assert_same(h, read(out))
    cell_h = out / "Level_0" / "Cell_H"
    edit(cell_h, b"\n1\n(2 0", b"\n2\n(2 0")
    refused(out, out / "Level_0" / "Cell_D_00000", "ghost width (2, 2)")


def test_fab_index_type_must_match_cell_h(plotfile):
    data = plotfile / "Level_1" / "Cell_D_00000"
    edit(data, b"((12,4) (19,7) (0,0))", b"((12,4) (19,7) (1,1))")
    refused(plotfile, data, "box 0 of level 1", "(1,1)")


def test_fab_component_count_must_match_cell_h(plotfile):
    data = plotfile / "Level_1" / "Cell_D_00000"
    edit(data, b"((20,8) (23,13) (0,0)) 2\n", b"((20,8) (23,13) (0,0)) 3\n")
    refused(plotfile, data, "box 1 of level 1", "3 components", "declares 2")


def test_fab_real_descriptors(plotfile):
    data = plotfile / "Level_0" / "Cell_D_00000"
    raw = data.read_bytes()
    # One level, one format: box 1 claiming big-endian while box 0 is little-endian.
    second = raw.index(b"FAB ", 1)
    data.write_bytes(raw[:second] + raw[second:].replace(b"(8 7 6 5 4 3 2 1)", b"(1 2 3 4 5 6 7 8)", 1))
    refused(plotfile, data, "box 1 of level 0", "real descriptor", "(1 2 3 4 5 6 7 8)", "the level's first FAB")
    # Not IEEE; not a byte order; counts that contradict their lists.
    for old, new, what in (
        (b"0 1 12 0 1023)", b"0 1 12 0 1024)", "unsupported real format"),
        (b"(8 7 6 5 4 3 2 1)", b"(8 7 6 5 4 3 2 2)", "not an order of 8 bytes"),
        (b",(8, (8 7", b",(7, (8 7", "counts that do not match"),
    ):
        data.write_bytes(raw.replace(old, new, 1))
        refused(plotfile, data, "offset 0", what)


def test_float32_as_amrex_writes_it(tmp_path):
    h = two_levels(COARSE, FINE)
    out = write_plotfile(h, tmp_path / "plt", dtype=np.float32)
    data = out / "Level_0" / "Cell_D_00000"
    assert data.read_bytes().startswith(b"FAB ((8, (32 8 23 0 1 9 0 127)),(4, (4 3 2 1)))((0,0) (7,15) (0,0)) 2\n")
    assert read(out).dtype("v") == np.dtype("<f4")
    # amrzip's writer once gave the float32 format list a count of 4: still read.
    for level in ("Level_0", "Level_1"):
        path = out / level / "Cell_D_00000"
        path.write_bytes(path.read_bytes().replace(b"((8, (32 8", b"((4, (32 8"))
    assert_same(h, read(out), dtype=np.float32)


def test_v2_fab_bytes_must_lie_in_the_file_and_not_overlap(tmp_path):
    h = two_levels(COARSE, FINE)
    src = write_plotfile(h, tmp_path / "src")
    out = write_variant(h, src, tmp_path / "v2", version=2)
    cell_h = out / "Level_1" / "Cell_H"
    text = cell_h.read_text()
    assert "FabOnDisk: Cell_D_00000 0\n" in text  # boxes are written last to first
    nbytes = 2 * 8 * 4 * 6  # box 1: two components of 4 x 6 float64
    assert f"FabOnDisk: Cell_D_00000 {nbytes}\n" in text
    for offset, what in ((nbytes - 8, "overlap"), (10**6, "truncated"), (-8, "FabOnDisk offset")):
        cell_h.write_text(text.replace(f"FabOnDisk: Cell_D_00000 {nbytes}\n", f"FabOnDisk: Cell_D_00000 {offset}\n"))
        where = cell_h if what == "FabOnDisk offset" else out / "Level_1" / "Cell_D_00000"
        refused(out, where, what)


# --- nesting


def test_level_outside_the_level_below_is_refused(tmp_path):
    out = write_plotfile(two_levels([((0, 0), (7, 15))], [((4, 4), (11, 7)), ((16, 0), (19, 3))]), tmp_path / "plt")
    refused(out, out, "level 1 is not nested in level 0", "box 1 ((16, 0), (19, 3))", "to ((8, 0), (9, 1))")


def test_level_over_a_gap_in_the_level_below_is_refused(tmp_path):
    # Both ends of the fine box are over coarse boxes, its middle over nothing.
    out = write_plotfile(two_levels([((0, 0), (3, 15)), ((8, 0), (15, 15))], [((6, 0), (17, 3))]), tmp_path / "plt")
    refused(out, out, "level 1 is not nested in level 0", "box 0")


def test_overlapping_boxes_are_refused(tmp_path):
    out = write_plotfile(two_levels([((0, 0), (8, 15)), ((8, 0), (15, 15))], FINE), tmp_path / "plt")
    refused(out, out, "boxes 0 ((0, 0), (8, 15)) and 1 ((8, 0), (15, 15)) of level 0 overlap")


def test_node_centred_nesting(tmp_path):
    # Node boxes of neighbouring grids share their face nodes: not an overlap.
    coarse = [((0, 0), (8, 16)), ((8, 0), (16, 16))]
    h = two_levels(coarse, [((12, 4), (20, 8))], node=(True, True))
    assert_same(h, read(write_plotfile(h, tmp_path / "ok")))
    # A fine box may end on the coarse boxes' last node, not one fine cell past it.
    assert read(write_plotfile(two_levels(coarse, [((24, 0), (32, 4))], node=(True, True)), tmp_path / "edge")).nodal == (True, True)
    out = write_plotfile(two_levels(coarse, [((26, 0), (34, 4))], node=(True, True)), tmp_path / "bad")
    refused(out, out, "level 1 is not nested in level 0", "box 0 ((26, 0), (34, 4))")


def level(boxes, ratios) -> SimpleNamespace:
    """What check_nesting needs of a level."""
    return SimpleNamespace(boxes=boxes, ref_ratios=ratios)


def test_nesting_against_brute_force():
    """check_nesting's verdict against sets of cells, on random disjoint coarse tiles and a
    random fine box, 3-d, cell and node boxes."""
    rng = np.random.default_rng(7)

    def cells(boxes):
        return {c for lo, hi in boxes for c in itertools.product(*(range(l, h + 1) for l, h in zip(lo, hi)))}

    verdicts = set()
    for case in range(400):
        node = (False,) * 3 if case % 2 else tuple(bool(v) for v in rng.integers(0, 2, 3))
        r = tuple(int(v) for v in rng.choice([1, 2, 4], 3))
        tiles = [((i * 3, j * 3, k * 3), (i * 3 + 2, j * 3 + 2, k * 3 + 2)) for i in range(3) for j in range(3) for k in range(3)]
        coarse = [tiles[t] for t in rng.choice(len(tiles), int(rng.integers(1, 27)), replace=False)]
        lo = rng.integers(0, 9, 3) * np.array(r) + rng.integers(0, 2, 3)
        fine = [(tuple(int(v) for v in lo), tuple(int(v) for v in lo + rng.integers(0, 6, 3)))]
        # Brute force, in cells: a node box spans the cells between its nodes.
        as_cells = [(lo, tuple(max(h - n, l) for l, h, n in zip(lo, hi, node))) for lo, hi in fine]
        have = cells(coarse)
        nested = all({tuple(c // q for c, q in zip(cell, r)) for cell in cells([b])} <= have for b in as_cells)
        nodes = [(lo, tuple(h + n for h, n in zip(hi, node))) for lo, hi in coarse]  # the same tiles as node boxes
        try:
            check_nesting([level(nodes, r), level(fine, (1, 1, 1))], node, "f")
            verdicts.add(True)
            assert nested, (coarse, fine, r, node)
        except ValueError as e:
            verdicts.add(False)
            assert not nested and "not nested" in str(e), (coarse, fine, r, node, e)
    assert verdicts == {True, False}


def test_nesting_of_many_boxes_is_quick():
    import time

    n = 24  # 24^3 coarse boxes of 4^3 cells, and a fine box over each
    g = np.stack(np.meshgrid(*[np.arange(n)] * 3, indexing="ij"), -1).reshape(-1, 3) * 4
    coarse = [(tuple(map(int, lo)), tuple(map(int, lo + 3))) for lo in g]
    fine = [(tuple(map(int, 2 * lo)), tuple(map(int, 2 * lo + 7))) for lo in g]

    start = time.perf_counter()
    check_nesting([level(coarse, (2, 2, 2)), level(fine, (1, 1, 1))], None, "f")
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("kind", ["chombo", "amrex-hdf5"])
def test_hdf5_levels_must_nest(tmp_path, kind):
    _h5py()
    good, bad = two_levels(COARSE, FINE), two_levels([((0, 0), (7, 15))], FINE)
    write = write_chombo if kind == "chombo" else _write_amrex_h5
    write(good, tmp_path / "good.h5")
    assert_same(good, read(tmp_path / "good.h5"), geometry=False)
    write(bad, tmp_path / "bad.h5")
    assert detect(tmp_path / "bad.h5") == kind
    refused(tmp_path / "bad.h5", tmp_path / "bad.h5", "level 1 is not nested in level 0", "box 0 ((12, 4), (19, 7))")


# --- checkpoints


def _checkpoint(tmp_path, name: str, header: str, mf: str) -> Path:
    """A checkpoint folder: ``header`` as its Header, and level 0's data (a plotfile's) as the
    MultiFab ``Level_0/<mf>``."""
    src = write_plotfile(two_levels(COARSE, FINE), tmp_path / f"{name}.src")
    chk = tmp_path / name
    (chk / "Level_0").mkdir(parents=True)
    (chk / "Header").write_text(header)
    cell_h = (src / "Level_0" / "Cell_H").read_text().replace("Cell_D_", f"{mf}_D_")
    (chk / "Level_0" / f"{mf}_H").write_text(cell_h)
    shutil.copy(src / "Level_0" / "Cell_D_00000", chk / "Level_0" / f"{mf}_D_00000")
    return chk


@pytest.mark.parametrize(
    "header, mf, sign",
    [
        # Amr::checkPoint: version, dimension, time, max and finest level, geometry...
        ("CheckPointVersion_1.0\n2\n0.5\n1\n0\n((0,0) (15,15) (0,0)) \n2 \n", "SD_0_New_MF", "'CheckPointVersion_1.0'"),
        # AmrCore tutorials: a title, the finest level, steps, dt, times, box arrays.
        (
            "Checkpoint file for AmrCoreAdv\n0\n20 \n0.01 \n0.2 \n(1 0\n((0,0) (15,15) (0,0))\n)\n",
            "phi",
            "'Checkpoint file for AmrCoreAdv'",
        ),
        # Older Amr checkpoints start with the dimension.
        ("2\n0\n1\n0\n", "SD_0_New_MF", "Level_0 holds SD_0_New_MF_H and no Cell_H"),
    ],
)
def test_checkpoints_are_named_as_such(tmp_path, header, mf, sign):
    chk = _checkpoint(tmp_path, "chk00020", header, mf)
    for call in (read, detect):
        with pytest.raises(ValueError) as e:
            call(chk)
        assert str(e.value).startswith(f"{chk}: an AMReX checkpoint ("), e.value
        assert sign in str(e.value) and "convert a plotfile" in str(e.value) and "\n" not in str(e.value)
    # Nor is a checkpoint taken for a plotfile to be replaced.
    with pytest.raises(ValueError, match="exists and is not a plotfile"):
        write_plotfile(two_levels(COARSE, FINE), chk)
    assert (chk / "Header").read_text() == header
