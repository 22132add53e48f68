"""The C API's snapshot writer and reader: the C++ example's snapshot read back by the Python API
within its bounds, a Python snapshot read through the C reader exactly as Python reads it, and
the writer's and reader's errors (status codes and messages, never a crash)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip import capi
from amrzip.amr import Hierarchy

ROOT = Path(__file__).resolve().parents[1]
OK, ERR_INVALID, ERR_CORRUPT, ERR_EXISTS, ERR_NOT_FOUND = 0, 1, 2, 4, 5
F32, F64 = 0, 1
ABS, REL = 0, 1
AVERAGE, NAN = 0, 1
FORTRAN, C = 0, 1

lib = ctypes.CDLL(capi.shared_library())
p = ctypes.c_void_p
i64p, dp, ip = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_int)
lib.amrzip_last_error.restype = ctypes.c_char_p
lib.amrzip_writer_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(p)]
lib.amrzip_writer_set_geometry.argtypes = [p, dp, dp, ctypes.c_int, ctypes.c_double, ctypes.c_int64]
lib.amrzip_writer_add_field.argtypes = [p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_double]
lib.amrzip_writer_add_level.argtypes = [p, i64p, i64p, ip, dp]
lib.amrzip_writer_add_box.argtypes = [p, ctypes.c_int, i64p, i64p, ip, ctypes.c_int, ctypes.POINTER(p)]
lib.amrzip_writer_commit.argtypes = [p]
lib.amrzip_writer_abort.argtypes = [p]
lib.amrzip_writer_abort.restype = None
lib.amrzip_reader_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(p)]
lib.amrzip_reader_close.argtypes = [p]
lib.amrzip_reader_close.restype = None
lib.amrzip_reader_field_index.argtypes = [p, ctypes.c_char_p, ip]
lib.amrzip_reader_read.argtypes = [p, ctypes.c_int, ctypes.c_int, i64p, i64p, ctypes.c_int, ctypes.c_int, p, ctypes.c_size_t]


def last_error() -> str:
    return lib.amrzip_last_error().decode()


def ints(values, kind=ctypes.c_int64):
    return (kind * len(values))(*values)


def doubles(values):
    return (ctypes.c_double * len(values))(*values)


def wave(x, y, z):
    """examples/cpp/amr_writer.cpp's fields, at cell centres."""
    return np.sin(6.0 * x) * np.cos(4.0 * y) + 0.5 * z


def blob(x, y, z):
    return 1.0 + 100.0 * np.exp(-((x - 0.5) ** 2 + (y - 0.5) ** 2 + (z - 0.5) ** 2) / 0.005)


def build(source: Path, out: Path, compiler: str) -> Path:
    """Builds an example with only the flags `amrzip config` prints, as a user would."""
    if shutil.which(compiler) is None:
        pytest.skip(f"no {compiler} to build {source.name}")
    config = [sys.executable, "-m", "amrzip", "config"]
    cflags, libs = (subprocess.run([*config, flag], capture_output=True, text=True, check=True).stdout.split() for flag in ("--cflags", "--libs"))
    subprocess.run([compiler, *cflags, str(source), *libs, "-lm", "-o", str(out)], check=True)
    return out


def test_the_cpp_example_snapshot_reads_back_within_its_bounds(tmp_path):
    exe = build(ROOT / "examples" / "cpp" / "amr_writer.cpp", tmp_path / "amr_writer", "c++")
    run = subprocess.run([str(exe), str(tmp_path / "store"), "plt00100"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ds = amrzip.open(tmp_path / "store")
    assert (ds.name, ds.fields, ds.num_levels, ds.time, ds.step) == ("plt00100", ["wave", "density"], 3, 0.25, 100)
    assert ds.bounds["wave"]["abs"] == 1e-4 and ds.bounds["density"]["mode"] == "rel"
    for f, fn in (("wave", wave), ("density", blob)):
        eb = ds.bounds[f]["abs"]
        for L in range(ds.num_levels):
            lev = ds.level(L)
            for box in lev.boxes:
                got = ds.read(f, region=box, level=L, covered="nan")
                centres = np.meshgrid(*[(np.arange(l, h + 1) + 0.5) * dx for l, h, dx in zip(*box, lev.dx)], indexing="ij")
                stored = ~np.isnan(got)
                assert stored.any()
                assert np.abs(got - fn(*centres))[stored].max() <= eb
    assert amrzip.check(tmp_path / "store")["ok"]
    # The C reader example reads what the C++ writer wrote.
    reader = build(ROOT / "examples" / "c" / "read_snapshot.c", tmp_path / "read_snapshot", "cc")
    out = subprocess.run([str(reader), str(tmp_path / "store")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "3 levels, 2 fields" in out.stdout and "density (double" in out.stdout


def python_snapshot(path):
    rng = np.random.default_rng(5)
    fine = np.cumsum(rng.standard_normal((32, 48, 16)), axis=1)
    coarse = fine.reshape(16, 2, 24, 2, 8, 2).mean(axis=(1, 3, 5))
    boxes0, boxes1 = [((0, 0, 0), (15, 23, 7))], [((4, 8, 0), (19, 31, 15))]
    cut = lambda a, b: np.asfortranarray(a[tuple(slice(l, h + 1) for l, h in zip(*b))])  # noqa: E731
    h = Hierarchy.from_arrays(
        [
            {"boxes": boxes0, "ref_ratio": 2, "data": {"u": [cut(coarse, b) for b in boxes0], "v": [cut(coarse, b).astype(np.float32) for b in boxes0]}},
            {"boxes": boxes1, "data": {"u": [cut(fine, b) for b in boxes1], "v": [cut(fine, b).astype(np.float32) for b in boxes1]}},
        ],
        prob_lo=(0, 0, 0), prob_hi=(1, 1.5, 0.5), step=3,
    )
    amrzip.write(h, path, rel=1e-3, snapshot="py")
    return amrzip.open(path)


def open_reader(path, name=None):
    r = p()
    status = lib.amrzip_reader_open(str(path).encode(), None if name is None else name.encode(), ctypes.byref(r))
    return status, r


def c_read(r, field, level, region, covered, order, dtype):
    lo, hi = region
    shape = tuple(h - l + 1 for l, h in zip(lo, hi))
    out = np.empty(shape, dtype=dtype, order="F" if order == FORTRAN else "C")
    status = lib.amrzip_reader_read(r, field, level, ints(lo), ints(hi), covered, order, out.ctypes.data, out.nbytes)
    return status, out


def test_the_c_reader_reads_what_python_reads(tmp_path):
    ds = python_snapshot(tmp_path / "s")
    status, r = open_reader(tmp_path / "s")
    assert status == OK, last_error()
    try:
        for f, dtype in (("u", np.float64), ("v", np.float32)):
            index = ctypes.c_int()
            assert lib.amrzip_reader_field_index(r, f.encode(), ctypes.byref(index)) == OK
            for L, region in ((0, ((0, 0, 0), (15, 23, 7))), (1, ((2, 5, 1), (25, 40, 9)))):
                for covered, name in ((AVERAGE, "average"), (NAN, "nan")):
                    want = ds.read(f, region=region, level=L, covered=name)
                    for order in (FORTRAN, C):
                        status, got = c_read(r, index.value, L, region, covered, order, dtype)
                        assert status == OK, last_error()
                        np.testing.assert_array_equal(got, want)
        # Errors: a status code and a message, the buffer left alone.
        region = ((0, 0, 0), (3, 3, 3))
        assert c_read(r, 7, 0, region, AVERAGE, C, np.float64)[0] == ERR_INVALID and "field 7" in last_error()
        assert c_read(r, 0, 9, region, AVERAGE, C, np.float64)[0] == ERR_INVALID and "level 9" in last_error()
        assert c_read(r, 0, 0, region, 5, C, np.float64)[0] == ERR_INVALID and "covered" in last_error()
        assert c_read(r, 0, 0, region, AVERAGE, 7, np.float64)[0] == ERR_INVALID and "order" in last_error()
        assert c_read(r, 1, 0, region, AVERAGE, C, np.float64)[0] == ERR_INVALID and "takes 256 bytes" in last_error()
        assert lib.amrzip_reader_field_index(r, b"w", ctypes.byref(ctypes.c_int())) == ERR_NOT_FOUND
    finally:
        lib.amrzip_reader_close(r)
    assert open_reader(tmp_path / "s", "nope")[0] == ERR_NOT_FOUND and "no snapshot" in last_error()
    assert open_reader(tmp_path / "none")[0] == ERR_CORRUPT and "no such store" in last_error()


def c_writer(path, name, dim=2):
    w = p()
    status = lib.amrzip_writer_open(str(path).encode(), name.encode(), dim, ctypes.byref(w))
    return status, w


def test_the_c_writer_refuses_what_it_cannot_store(tmp_path):
    store = tmp_path / "s"
    values = np.asfortranarray(np.arange(64.0).reshape(8, 8))

    def declare(w, fine_lo=(4, 4), fine_hi=(11, 11), ratio=2):
        assert lib.amrzip_writer_set_geometry(w, doubles([0, 0]), doubles([1, 1]), 0, 0.0, 1) == OK
        assert lib.amrzip_writer_add_field(w, b"f", F64, ABS, 1e-3) == OK
        assert lib.amrzip_writer_add_level(w, ints([0, 0]), ints([7, 7]), ints([ratio, ratio], ctypes.c_int), doubles([1 / 8, 1 / 8])) == OK
        assert lib.amrzip_writer_add_level(w, ints([0, 0]), ints([15, 15]), None, doubles([1 / 16, 1 / 16])) == OK
        data = (p * 1)(values.ctypes.data)
        assert lib.amrzip_writer_add_box(w, 0, ints([0, 0]), ints([7, 7]), None, 0, data) == OK
        assert lib.amrzip_writer_add_box(w, 1, ints(fine_lo), ints(fine_hi), None, 0, data) == OK

    status, w = c_writer(store, "good")
    assert status == OK
    declare(w)
    assert lib.amrzip_writer_commit(w) == OK, last_error()
    np.testing.assert_allclose(amrzip.open(store).read("f", level=1, region=((4, 4), (11, 11))), values, atol=1e-3)

    assert c_writer(store, "good")[0] == ERR_EXISTS and "already exists" in last_error()
    assert c_writer(store, "../x")[0] == ERR_INVALID and "snapshot name" in last_error()
    assert c_writer(store, "x", dim=4)[0] == ERR_INVALID
    # A fine box outside the coarse boxes: levels must nest.
    status, w = c_writer(store, "unnested")
    declare(w, fine_lo=(16, 16), fine_hi=(23, 23))
    # (the fine domain is 0..15: the box lies outside it)
    assert lib.amrzip_writer_commit(w) == ERR_INVALID and "outside the domain" in last_error()
    status, w = c_writer(store, "no_geometry")
    assert lib.amrzip_writer_add_field(w, b"f", F64, ABS, -1.0) == ERR_INVALID and "finite number >= 0" in last_error()
    assert lib.amrzip_writer_add_field(w, b"f", 9, ABS, 1.0) == ERR_INVALID and "dtype" in last_error()
    assert lib.amrzip_writer_add_box(w, 0, ints([0, 0]), ints([7, 7]), None, 0, (p * 1)(values.ctypes.data)) == ERR_INVALID
    assert lib.amrzip_writer_commit(w) == ERR_INVALID and "geometry" in last_error()
    # Abandoned: nothing in the store.
    status, w = c_writer(store, "abandoned")
    declare(w)
    lib.amrzip_writer_abort(w)
    assert amrzip.store.snapshots(store) == ["good"]
    assert not [q for q in store.iterdir() if q.name.startswith(".writing")]
    assert lib.amrzip_writer_commit(None) == ERR_INVALID
