"""The C API, libamrzip.so, called through ctypes as a C program would: round trips within the
bound, the buffer and error contracts, hostile streams, thread-local errors, and `amrzip config`.
The C examples themselves are built and run by `make examples`."""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from importlib.metadata import version

import numpy as np
import pytest

import amrzip
from amrzip import capi
from roundtrip import check
from test_codec_api import sprinkle_nonfinite

OK, ERR_INVALID, ERR_CORRUPT = 0, 1, 2
F32, F64 = 0, 1
MAX_NDIM = 4
DTYPES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64}

size_p = ctypes.POINTER(ctypes.c_size_t)
lib = ctypes.CDLL(capi.shared_library())
lib.amrzip_compress.argtypes = [
    ctypes.c_void_p, ctypes.c_int, ctypes.c_int, size_p, ctypes.c_double, ctypes.POINTER(ctypes.c_void_p), size_p,
]
lib.amrzip_info.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), size_p, size_p]
lib.amrzip_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
lib.amrzip_free.argtypes = [ctypes.c_void_p]
lib.amrzip_free.restype = None
lib.amrzip_last_error.restype = ctypes.c_char_p
lib.amrzip_version.restype = ctypes.c_char_p
lib.amrzip_set_threads.argtypes = [ctypes.c_int]


def last_error() -> str:
    return lib.amrzip_last_error().decode()


def shape_of(shape) -> ctypes.Array:
    return (ctypes.c_size_t * max(1, len(shape)))(*shape)


def compress(x: np.ndarray, bound: float) -> bytes:
    out, out_len = ctypes.c_void_p(), ctypes.c_size_t()
    status = lib.amrzip_compress(x.ctypes.data, DTYPES[x.dtype], x.ndim, shape_of(x.shape), bound, ctypes.byref(out), ctypes.byref(out_len))
    assert status == OK, last_error()
    try:
        return ctypes.string_at(out, out_len.value)
    finally:
        lib.amrzip_free(out)


def info(stream: bytes) -> tuple[int, int, list[int], int]:
    dtype, ndim, shape, nbytes = ctypes.c_int(-1), ctypes.c_int(-1), (ctypes.c_size_t * MAX_NDIM)(*[99] * MAX_NDIM), ctypes.c_size_t()
    status = lib.amrzip_info(stream, len(stream), ctypes.byref(dtype), ctypes.byref(ndim), shape, ctypes.byref(nbytes))
    assert status == OK, last_error()
    return dtype.value, ndim.value, list(shape), nbytes.value


def decompress(stream: bytes) -> np.ndarray:
    dtype, ndim, shape, nbytes = info(stream)
    out = np.empty(shape[:ndim], dtype=np.float32 if dtype == F32 else np.float64)
    assert out.nbytes == nbytes
    status = lib.amrzip_decompress(stream, len(stream), out.ctypes.data, nbytes)
    assert status == OK, last_error()
    return out


def assert_fails(status: int, code: int, *fragments: str):
    assert status == code, f"status {status}, expected {code}: {last_error()}"
    message = last_error()
    assert message.startswith("amrzip_"), message
    for fragment in fragments:
        assert fragment in message


def field(shape, dtype, seed=0) -> np.ndarray:
    """A rough but correlated field: cumulative sums of noise along every axis."""
    x = np.random.default_rng(seed).standard_normal(shape)
    for axis in range(len(shape)):
        x = np.cumsum(x, axis=axis) / 4
    return x.astype(dtype)


@pytest.fixture(scope="module")
def stream() -> bytes:
    """A small stream (under 1 kB), so that every truncation and many bit flips can be tried."""
    return compress(field((40, 30), np.float32), 1e-2)


# --- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1000,), (37, 45), (12, 17, 20), (5, 6, 7, 8)])
@pytest.mark.parametrize("bound", [0.0, 1e-4, 0.05])
def test_round_trip_within_bound(dtype, shape, bound):
    x = sprinkle_nonfinite(field(shape, dtype), fraction=0.01)
    s = compress(x, bound)
    y = decompress(s)
    check(x, y, s, abs=bound)
    if bound == 0:
        np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    # The same stream and values as the Python API: one codec behind both.
    assert s == amrzip.compress(x, abs=bound)
    np.testing.assert_array_equal(y, amrzip.decompress(s))


def test_info_describes_the_stream_without_decoding():
    x = field((9, 10, 11), np.float64)
    assert info(compress(x, 1e-3)) == (F64, 3, [9, 10, 11, 0], x.nbytes)
    x = field((5000,), np.float32)
    s = compress(x, 1e-3)
    assert info(s) == (F32, 1, [5000, 0, 0, 0], x.nbytes)
    nbytes = ctypes.c_size_t()
    assert lib.amrzip_info(s, len(s), None, None, None, ctypes.byref(nbytes)) == OK
    assert nbytes.value == x.nbytes


@pytest.mark.parametrize("shape", [(0,), (3, 0), (2, 0, 4, 1)])
def test_empty_arrays(shape):
    out, out_len = ctypes.c_void_p(), ctypes.c_size_t()
    assert lib.amrzip_compress(None, F32, len(shape), shape_of(shape), 0.1, ctypes.byref(out), ctypes.byref(out_len)) == OK, last_error()
    s = ctypes.string_at(out, out_len.value)
    lib.amrzip_free(out)
    assert info(s) == (F32, len(shape), list(shape) + [0] * (MAX_NDIM - len(shape)), 0)
    assert lib.amrzip_decompress(s, len(s), None, 0) == OK, last_error()


def test_threads_setting_keeps_streams_and_values():
    x = field((64, 64, 64), np.float32)
    try:
        streams = []
        for n in (1, 2, 0):
            assert lib.amrzip_set_threads(n) == OK, last_error()
            streams.append(compress(x, 1e-3))
            check(x, decompress(streams[-1]), streams[-1], abs=1e-3)
        assert streams[0] == streams[1] == streams[2]
        for n in (-1, 100_000):
            assert_fails(lib.amrzip_set_threads(n), ERR_INVALID, "threads")
    finally:
        lib.amrzip_set_threads(0)


def test_version_and_free():
    assert lib.amrzip_version().decode() == version("amrzip")
    lib.amrzip_free(None)


# --- arguments -----------------------------------------------------------------------------------


def test_decompress_needs_the_exact_size_and_leaves_a_wrong_buffer_alone(stream):
    _, _, _, nbytes = info(stream)
    out = np.full(nbytes + 8, 0xAB, dtype=np.uint8)
    for wrong in (0, nbytes - 1, nbytes + 1, nbytes + 8):
        status = lib.amrzip_decompress(stream, len(stream), out.ctypes.data, wrong)
        assert_fails(status, ERR_INVALID, f"out_bytes is {wrong}", f"{nbytes} bytes")
        assert (out == 0xAB).all()
    assert_fails(lib.amrzip_decompress(stream, len(stream), None, nbytes), ERR_INVALID, "out must not be NULL")
    assert_fails(lib.amrzip_decompress(None, 10, out.ctypes.data, nbytes), ERR_INVALID, "in must not be NULL")
    assert_fails(lib.amrzip_info(None, 10, None, None, None, None), ERR_INVALID, "in must not be NULL")


def call_compress(data, dtype=F32, ndim=2, shape=(4, 5), bound=0.1, out=True, out_len=True):
    """amrzip_compress with one argument spoilt; returns the status and what it left in the outputs."""
    out_v, len_v = ctypes.c_void_p(12345), ctypes.c_size_t(678)
    shape_arg = None if shape is None else shape_of(shape)
    status = lib.amrzip_compress(
        data, dtype, ndim, shape_arg, bound, ctypes.byref(out_v) if out else None, ctypes.byref(len_v) if out_len else None
    )
    if status == OK:
        lib.amrzip_free(out_v)
    return status, out_v.value, len_v.value


@pytest.mark.parametrize(
    "spoilt, fragment",
    [
        (dict(ndim=0), "ndim must be 1 to 4, got 0"),
        (dict(ndim=5, shape=(1, 1, 1, 1, 1)), "ndim must be 1 to 4, got 5"),
        (dict(ndim=-1), "got -1"),
        (dict(dtype=2), "dtype must be"),
        (dict(dtype=-7), "got -7"),
        (dict(shape=None), "shape must not be NULL"),
        (dict(shape=(2**40, 2**40)), "too large"),
        (dict(shape=(2**62, 4)), "too large"),
        (dict(bound=-1.0), "bound"),
        (dict(bound=float("nan")), "bound"),
        (dict(bound=float("inf")), "bound"),
        (dict(data=None), "data must not be NULL"),
        (dict(misaligned=True), "aligned to 4 bytes"),
    ],
)
def test_compress_rejects_bad_arguments(spoilt, fragment):
    x = np.zeros(64, dtype=np.float32)
    data = x.ctypes.data + 1 if spoilt.pop("misaligned", False) else x.ctypes.data
    status, out, out_len = call_compress(**{"data": data, **spoilt})
    assert_fails(status, ERR_INVALID, fragment)
    assert (out, out_len) == (None, 0)  # defined outputs on failure


def test_compress_rejects_null_outputs():
    x = np.zeros(20, dtype=np.float32)
    assert_fails(call_compress(x.ctypes.data, out=False)[0], ERR_INVALID, "out and out_len")
    assert_fails(call_compress(x.ctypes.data, out_len=False)[0], ERR_INVALID, "out and out_len")


def test_last_error_is_per_thread():
    assert_fails(lib.amrzip_set_threads(-5), ERR_INVALID, "got -5")
    seen = []

    def other():
        seen.append(last_error())
        lib.amrzip_set_threads(-6)
        seen.append(last_error())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen[0] == ""
    assert "got -6" in seen[1]
    assert "got -5" in last_error()
    # A call that succeeds leaves the last failure's message.
    assert lib.amrzip_set_threads(0) == OK
    assert "got -5" in last_error()


# --- hostile streams -----------------------------------------------------------------------------


def assert_rejected(data: bytes, out_bytes: int):
    """info and decompress report a corrupt stream, with a message, and write nothing."""
    assert_fails(lib.amrzip_info(data, len(data), None, None, None, None), ERR_CORRUPT)
    out = np.full(out_bytes, 0x5A, dtype=np.uint8)
    assert_fails(lib.amrzip_decompress(data, len(data), out.ctypes.data, out_bytes), ERR_CORRUPT)
    assert (out == 0x5A).all()


def test_truncated_streams_are_rejected(stream):
    nbytes = info(stream)[3]
    for length in range(len(stream)):
        assert_rejected(stream[:length], nbytes)


def test_every_flipped_bit_is_rejected(stream):
    nbytes = info(stream)[3]
    for bit in range(8 * len(stream)):
        damaged = bytearray(stream)
        damaged[bit // 8] ^= 1 << (bit % 8)
        assert_rejected(bytes(damaged), nbytes)


def test_random_bytes_are_rejected(stream):
    rng = np.random.default_rng(7)
    for length in (0, 1, 4, 16, 64, 300, 5000):
        for _ in range(20):
            noise = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
            assert_rejected(noise, 4096)
            assert_rejected(stream[:8] + noise, 4096)  # past the magic and version


def header_end(s: bytes) -> int | None:
    """Offset of the header checksum (version-2 layout, docs/format.md section 3), if the fields
    it depends on are there."""

    def varint(at: int) -> tuple[int, int]:
        v, shift = 0, 0
        while True:
            b = s[at]
            v, at, shift = v | (b & 0x7F) << shift, at + 1, shift + 7
            if b < 0x80 or shift > 63:
                return v, at

    try:
        ndim = s[6]
        at = 10 + 8 + (8 if s[8] & 0x80 else 0)
        _, at = varint(at)  # radius
        dims = []
        for _ in range(2 * ndim):
            d, at = varint(at)
            dims.append(d)
        codebook_len, at = varint(at)
        at += codebook_len
        chunks = math.prod(-(-n // c) if c else 0 for n, c in zip(dims[:ndim], dims[ndim:]))
        if chunks > len(s):
            return None
        for _ in range(chunks):
            _, at = varint(at + 1)
            _, at = varint(at)
    except IndexError:
        return None
    return at if at + 8 <= len(s) else None


def test_damage_behind_valid_checksums_never_crashes(stream):
    """Bytes changed and both checksums recomputed, so the damage reaches the parsers: every call
    returns, with the values or a corrupt-stream error, never a crash or an internal error."""
    rng = np.random.default_rng(11)
    decoded = 0
    for _ in range(400):
        damaged = bytearray(stream)
        for at in rng.integers(0, len(damaged), rng.integers(1, 4)):
            damaged[at] = rng.integers(0, 256)
        end = header_end(bytes(damaged))
        if end is None:
            continue
        damaged[end : end + 4] = struct.pack("<I", zlib.crc32(damaged[:end]))
        damaged[-4:] = struct.pack("<I", zlib.crc32(damaged[end + 4 : -4]))
        data = bytes(damaged)
        nbytes = ctypes.c_size_t()
        status = lib.amrzip_info(data, len(data), None, None, None, ctypes.byref(nbytes))
        if status != OK:
            assert_fails(status, ERR_CORRUPT)
            continue
        if nbytes.value > 2**26:
            continue  # a header claiming a huge array: info was the point
        out = np.empty(nbytes.value, dtype=np.uint8)
        status = lib.amrzip_decompress(data, len(data), out.ctypes.data, nbytes.value)
        if status != OK:
            assert_fails(status, ERR_CORRUPT)
        decoded += status == OK
    assert decoded > 0  # some damage leaves a decodable stream: the mutations reached the decoder


# --- amrzip config -------------------------------------------------------------------------------


def amrzip_config(*args) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "amrzip", "config", *args], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_config_points_at_the_header_and_libraries():
    (include,) = amrzip_config("--cflags")
    assert include.startswith("-I") and os.path.isfile(os.path.join(include[2:], "amrzip.h"))
    libdir, rpath, name = amrzip_config("--libs")
    assert libdir.startswith("-L") and os.path.isfile(os.path.join(libdir[2:], "libamrzip.so"))
    assert (rpath, name) == (f"-Wl,-rpath,{libdir[2:]}", "-lamrzip")
    archive, *system = amrzip_config("--libs", "--static")
    assert archive.endswith("/libamrzip.a") and os.path.isfile(archive)
    assert system and all(flag.startswith("-l") for flag in system)
    (pc_dir,) = amrzip_config("--pkg-config-path")
    assert os.path.isfile(os.path.join(pc_dir, "amrzip.pc"))
    assert amrzip_config("--cflags", "--libs") == [include, libdir, rpath, name]


def test_config_refuses_static_alone():
    run = subprocess.run([sys.executable, "-m", "amrzip", "config", "--static"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--static goes with --libs" in run.stderr


def test_config_reports_a_missing_library(monkeypatch, capsys, tmp_path):
    from amrzip.cli import main

    monkeypatch.setattr(capi, "_HERE", str(tmp_path))  # an installation without the C library
    with pytest.raises(SystemExit) as exit:
        main(["config", "--libs"])
    assert exit.value.code == 1
    assert capsys.readouterr().err.startswith("amrzip: error: the amrzip C library is not in this installation")


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed (.ci/run installs it)")
def test_pkg_config_agrees_with_config():
    env = {**os.environ, "PKG_CONFIG_PATH": amrzip_config("--pkg-config-path")[0]}

    def pkg_config(*args) -> list[str]:
        return subprocess.run(["pkg-config", *args, "amrzip"], env=env, capture_output=True, text=True, check=True).stdout.split()

    (include,) = pkg_config("--cflags")
    assert os.path.realpath(include[2:]) == os.path.realpath(capi.include_dir())
    libdir, rpath, name = pkg_config("--libs")
    assert os.path.realpath(libdir[2:]) == os.path.realpath(capi.library_dir())
    assert rpath == f"-Wl,-rpath,{libdir[2:]}" and name == "-lamrzip"
    assert pkg_config("--variable=static_libs") == amrzip_config("--libs", "--static")[1:]
    assert pkg_config("--modversion") == [version("amrzip")]
