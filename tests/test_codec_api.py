"""The Python API: round trips over shapes, layouts and awkward values, and the errors it raises."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

import amrzip
from amrzip import CorruptStreamError
from roundtrip import check, round_trip

DTYPES = [np.float32, np.float64]
MODES = ["ratio", "speed"]
PREDICTORS = list(amrzip.codec.PREDICTORS)
BOUNDS = [{"abs": 1e-3}, {"rel": 1e-4}]


def smooth(shape, dtype=np.float32, seed=0) -> np.ndarray:
    """Sines along every axis plus a little noise: the easy, typical case."""
    rng = np.random.default_rng(seed)
    axes = np.meshgrid(*[np.linspace(0.0, 3.0, n) for n in shape], indexing="ij", sparse=True)
    field = sum((np.sin((i + 1) * a) for i, a in enumerate(axes)), np.zeros(shape))
    return (field + 0.01 * rng.standard_normal(shape)).astype(dtype)


def sprinkle_nonfinite(x: np.ndarray, fraction=0.05, seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = x.copy()
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=max(1, int(fraction * flat.size)), replace=False)
    flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf], dtype=x.dtype), size=picks.size)
    return x


# --- round trips -------------------------------------------------------------------------------

SHAPES = [
    (0,), (0, 5), (3, 0, 4), (2, 2, 0, 2),  # empty
    (1,), (1, 1), (1, 1, 1), (1, 1, 1, 1),  # one element
    (2, 3), (3, 2), (2, 1, 2), (1, 2, 1, 3),  # tiny
    (7,), (1001,), (17, 13), (1, 257), (257, 1), (5, 9, 11), (31, 33, 35), (3, 5, 7, 2), (9, 10, 11, 12),  # odd
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_round_trip_shapes(shape, dtype, mode, bound):
    round_trip(smooth(shape, dtype), mode=mode, **bound)


VIEWS = {
    "stepped slices": lambda b: b[::2, 1::3, ::5],
    "negative steps": lambda b: b[::-1, :, ::-2],
    "transpose": lambda b: b.T,
    "swapped axes": lambda b: b.transpose(1, 0, 2),
    "fortran order": np.asfortranarray,
    "2-d slice": lambda b: b[:, 7, :],
    "big-endian": lambda b: b.astype(b.dtype.newbyteorder(">")),
    "big-endian stepped": lambda b: b.astype(b.dtype.newbyteorder(">"))[::3, ::2, 1:],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("view", list(VIEWS))
def test_any_memory_layout_compresses_like_a_contiguous_copy(dtype, view):
    x = VIEWS[view](smooth((20, 30, 40), dtype))
    stream, _ = round_trip(x, rel=1e-3)
    assert stream == amrzip.compress(np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("=")), rel=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_read_only_memory(dtype):
    x = smooth((30, 40), dtype)
    x.flags.writeable = False
    round_trip(x, abs=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_nan_and_inf_kept_exactly(dtype, mode, bound):
    x = sprinkle_nonfinite(smooth((16, 17, 18), dtype))
    x[3] = np.nan  # a whole plane
    bits = x.view(np.uint32 if dtype is np.float32 else np.uint64)
    bits[0, 0, 0] = 0x7FC01234 if dtype is np.float32 else 0x7FF8_0000_DEAD_BEEF  # NaN payload
    bits[0, 0, 1] = 0xFFC00000 if dtype is np.float32 else 0xFFF8_0000_0000_0000  # negative NaN
    round_trip(x, mode=mode, **bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("values", [[np.nan], [np.inf], [-np.inf], [np.nan, np.inf, -np.inf]], ids=str)
@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_no_finite_values(dtype, values, bound):
    x = np.resize(np.array(values, dtype=dtype), (11, 13))
    _, y = round_trip(x, **bound)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [0.0, -0.0, 3.14159, -1e30, 1e-42])
@pytest.mark.parametrize("shape", [(1000,), (10, 11, 12)], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_constant_field(dtype, value, shape, mode):
    x = np.full(shape, value, dtype=dtype)
    round_trip(x, abs=1e-3, mode=mode)
    _, y = round_trip(x, rel=1e-3, mode=mode)  # zero range: rel allows no error at all
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bound", BOUNDS + [{"rel": 1e-2}], ids=str)
@pytest.mark.parametrize("background", ["zeros", "smooth"])
def test_few_spikes(dtype, mode, bound, background):
    shape = (24, 25, 26)
    x = np.zeros(shape, dtype) if background == "zeros" else smooth(shape, dtype)
    x[3, 4, 5], x[20, 1, 25], x[0, 0, 0], x[-1, -1, -1] = 1e6, -1e6, 5e3, -7.5
    round_trip(x, mode=mode, **bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bound", [{"abs": 1e-3}, {"abs": 1e30}, {"rel": 1e-3}, {"rel": 0.1}], ids=str)
def test_values_near_float_max(dtype, mode, bound):
    rng = np.random.default_rng(2)
    big = np.finfo(dtype).max
    near = 3.4e38 if dtype is np.float32 else 1.7e308
    x = rng.uniform(-1, 1, (20, 21, 22)).astype(dtype)
    flat = x.reshape(-1)
    flat[::7], flat[3::7], flat[5::97], flat[6::101] = near, -near, big, -big
    round_trip(x, mode=mode, **bound)


@pytest.mark.parametrize(
    "dtype, scale",
    [(np.float32, 1e20), (np.float32, 1e24), (np.float32, 1e28), (np.float32, 1e36)]
    + [(np.float64, 1e30), (np.float64, 1e32), (np.float64, 1e100)],
)
@pytest.mark.parametrize("shape", [(12, 13), (5, 6, 7)], ids=str)
@pytest.mark.parametrize("predictor", [None, *PREDICTORS])
def test_values_huge_relative_to_the_bound(dtype, scale, shape, predictor):
    # A sum of per-axis profiles: Lorenzo predicts it exactly but for rounding, leaving residuals
    # of a few ulps, each some 2^60 times the bound or more.
    rng = np.random.default_rng(6)
    profiles = np.meshgrid(*[rng.standard_normal(n) for n in shape], indexing="ij", sparse=True)
    x = (scale * sum(profiles, np.zeros(shape))).astype(dtype)
    round_trip(x, abs=1e-3, predictor=predictor)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bound", [{"abs": 0.0}, {"abs": 1e-45}, {"abs": 1e-320}, {"abs": 1e-40}, {"rel": 1e-3}], ids=str)
@pytest.mark.parametrize("with_normals", [False, True])
def test_subnormals(dtype, bound, with_normals):
    rng = np.random.default_rng(3)
    tiny = np.finfo(dtype).smallest_subnormal
    x = (tiny * rng.integers(-1000, 1000, (30, 31))).astype(dtype)
    if with_normals:
        x[::5] = rng.uniform(-1, 1, x[::5].shape)
    round_trip(x, **bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("magnitude", [1.0, 1e-3, 1e20, "random"], ids=str)
@pytest.mark.parametrize("shape", [(2000,), (12, 13, 14)], ids=str)
def test_alternating_signs(dtype, mode, magnitude, shape):
    rng = np.random.default_rng(4)
    sign = (-1.0) ** np.indices(shape).sum(axis=0)  # checkerboard in every dimension
    size = rng.uniform(1, 2, shape) if magnitude == "random" else magnitude
    x = (sign * size).astype(dtype)
    round_trip(x, mode=mode, abs=1e-3)
    round_trip(x, mode=mode, rel=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode, predictor", [("ratio", None), ("speed", None), *(("ratio", p) for p in PREDICTORS)])
def test_thread_count_changes_nothing(dtype, mode, predictor):
    x = smooth((24, 48, 48, 48), dtype)  # several chunks, except with interpolation (one large chunk)
    one = amrzip.compress(x, rel=1e-4, mode=mode, predictor=predictor, threads=1)
    assert amrzip.compress(x, rel=1e-4, mode=mode, predictor=predictor, threads=2) == one
    y1, y2 = amrzip.decompress(one, threads=1), amrzip.decompress(one, threads=2)
    assert y1.tobytes() == y2.tobytes()
    check(x, y1, one, rel=1e-4)


@pytest.mark.parametrize("predictor", PREDICTORS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000,), (40, 50), (20, 21, 22), (6, 7, 8, 9)], ids=str)
@pytest.mark.parametrize("bound", BOUNDS + [{"rel": 1e-2}], ids=str)
@pytest.mark.parametrize("nonfinite", [False, True])
def test_every_predictor_keeps_the_bound(predictor, dtype, shape, bound, nonfinite):
    x = smooth(shape, dtype)
    x = sprinkle_nonfinite(x) if nonfinite else x
    stream, _ = round_trip(x, predictor=predictor, **bound)
    assert amrzip.info(stream)["predictor"] == predictor


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_abs_zero_is_lossless(dtype, mode):
    rng = np.random.default_rng(5)
    # Random bit patterns: every exponent, subnormals, infinities and NaNs with payloads.
    bits = rng.integers(0, 256, size=(20, 30, 8 if dtype is np.float64 else 4), dtype=np.uint8)
    x = bits.view(dtype).reshape(20, 30)
    x[x == 0] = 1.0  # signed zeros have their own test
    x = np.concatenate([x, smooth((20, 30), dtype)])
    stream, y = round_trip(x, abs=0, mode=mode)
    assert y.tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_abs_zero_keeps_the_sign_of_zero(dtype, mode):
    x = np.array([0.0, -0.0, 1.5, -0.0, 2.5, 0.0, -0.0], dtype=dtype)
    _, y = round_trip(x, abs=0, mode=mode)
    assert y.tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_info_describes_the_stream(dtype):
    x = smooth((30, 40, 5), dtype)
    stream = amrzip.compress(x, rel=1e-3, mode="speed")
    i = amrzip.info(stream)
    assert i["dtype"] == np.dtype(dtype).name
    assert tuple(i["shape"]) == x.shape
    assert (i["mode"], i["bound_mode"], i["bound"]) == ("speed", "rel", 1e-3)
    assert 0 < i["abs_bound"] <= 1e-3 * float(x.max() - x.min())
    assert i["predictor"] in PREDICTORS
    assert sum(i["chunks_per_predictor"].values()) >= 1
    assert len(i["chunk_shape"]) == x.ndim
    assert (i["compressed_size"], i["original_size"]) == (len(stream), x.nbytes)
    assert i["ratio"] == pytest.approx(x.nbytes / len(stream))


def test_decompress_takes_any_bytes_like():
    x = smooth((10, 10))
    stream = amrzip.compress(x, abs=1e-3)
    for data in (bytearray(stream), memoryview(stream), np.frombuffer(stream, dtype=np.uint8)):
        check(x, amrzip.decompress(data), stream, abs=1e-3)
        assert amrzip.info(data)["shape"] == [10, 10]


# --- argument errors ---------------------------------------------------------------------------

GOOD = np.ones((4, 5), np.float32)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "error bound is required"),
        ({"abs": 1e-3, "rel": 1e-3}, "only one of abs=, rel="),
        ({"abs": -1e-3}, "finite number >= 0"),
        ({"rel": -1.0}, "finite number >= 0"),
        ({"abs": math.nan}, "finite number >= 0"),
        ({"rel": math.nan}, "finite number >= 0"),
        ({"abs": math.inf}, "finite number >= 0"),
        ({"rel": -math.inf}, "finite number >= 0"),
        ({"abs": "0.1"}, "must be a number"),
        ({"abs": True}, "must be a number"),
        ({"abs": 1e-3, "mode": "fast"}, "mode must be one of"),
        ({"abs": 1e-3, "threads": 0}, "threads= must be a positive integer"),
        ({"abs": 1e-3, "threads": -2}, "threads= must be a positive integer"),
        ({"abs": 1e-3, "threads": 1.5}, "threads= must be a positive integer"),
        ({"abs": 1e-3, "predictor": "sz3"}, "predictor must be one of"),
    ],
    ids=str,
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        amrzip.compress(GOOD, **kwargs)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float16, np.complex64, np.complex128, bool, object])
def test_unsupported_dtype(dtype):
    with pytest.raises(ValueError, match="unsupported dtype"):
        amrzip.compress(np.zeros((4, 5), dtype=dtype), abs=1e-3)


@pytest.mark.parametrize(
    "x", [np.float32(1.0), np.array(2.0), np.zeros((1, 2, 1, 2, 1), np.float32)], ids=["scalar", "0-d", "5-d"]
)
def test_unsupported_rank(x):
    with pytest.raises(ValueError, match="unsupported rank"):
        amrzip.compress(x, rel=1e-3)


@pytest.mark.parametrize("threads", [0, -1, 2.0])
def test_decompress_bad_threads(threads):
    with pytest.raises(ValueError, match="threads="):
        amrzip.decompress(amrzip.compress(GOOD, abs=1e-3), threads=threads)


def test_decompress_needs_bytes():
    with pytest.raises(TypeError, match="bytes-like"):
        amrzip.decompress("AMRZ")


# --- damaged streams ---------------------------------------------------------------------------


def assert_corrupt(data: bytes):
    """Both readers must refuse the data with CorruptStreamError (a panic would escape as
    PanicException, which is not a ValueError)."""
    with pytest.raises(CorruptStreamError):
        amrzip.decompress(data)
    with pytest.raises(CorruptStreamError):
        amrzip.info(data)


def test_corrupt_stream_error_is_a_value_error():
    assert issubclass(CorruptStreamError, ValueError)


SMALL_STREAMS = {
    "f32 ratio": lambda: amrzip.compress(sprinkle_nonfinite(smooth((5, 7))), abs=1e-3),
    "f64 speed": lambda: amrzip.compress(smooth((6, 5, 4), np.float64), rel=1e-4, mode="speed"),
    "f32 regression 1-d": lambda: amrzip.compress(smooth((300,)), abs=1e-4, predictor="regression"),
    "f32 lossless": lambda: amrzip.compress(smooth((3, 4, 5, 6)), abs=0),
    "empty": lambda: amrzip.compress(np.zeros((0, 3), np.float32), abs=1e-3),
}


@pytest.fixture(params=list(SMALL_STREAMS), scope="module")
def small_stream(request) -> bytes:
    stream = SMALL_STREAMS[request.param]()
    assert len(stream) < 3000, "keep the exhaustive tests quick"
    return stream


@pytest.mark.parametrize("data", [b"", b"A", b"AMRZ", b"AMRZ\x01", bytes(100), b"\xff" * 100], ids=repr)
def test_not_a_stream(data):
    assert_corrupt(data)


@pytest.mark.parametrize("seed", range(20))
def test_random_bytes(seed):
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, size=int(rng.integers(1, 5000)), dtype=np.uint8).tobytes()
    assert_corrupt(noise)
    assert_corrupt(b"AMRZ\x01" + noise)  # past the magic and version checks


def test_every_truncation(small_stream):
    for n in range(len(small_stream)):
        assert_corrupt(small_stream[:n])


@pytest.mark.parametrize("mask", [0xFF, 0x01, 0x80])
def test_every_single_byte_corruption(small_stream, mask):
    for k in range(len(small_stream)):
        damaged = bytearray(small_stream)
        damaged[k] ^= mask
        assert_corrupt(bytes(damaged))


@pytest.mark.parametrize("tail", [b"\x00", b"garbage", None], ids=["zero byte", "text", "second stream"])
def test_trailing_garbage(small_stream, tail):
    assert_corrupt(small_stream + (small_stream if tail is None else tail))


def _header_claiming(shape, chunk_shape, n_chunks) -> bytes:
    """A stream header, checksum included, that lists n_chunks chunks but holds none of them."""
    h = b"AMRZ" + bytes([1, 0, len(shape), 0, 0, 0, 0, 0]) + struct.pack("<ddI", 0.1, 0.1, 32768)
    h += b"".join(struct.pack("<Q", n) for n in (*shape, *chunk_shape))
    h += struct.pack("<IQ", 0, n_chunks)
    return h + struct.pack("<I", zlib.crc32(h))


def test_header_claiming_a_huge_array():
    # Run in a child process: a decoder that trusts the header may abort on allocation failure,
    # which would otherwise take the whole test run down.
    data = _header_claiming((1 << 40,), (1,), 1 << 40)
    code = textwrap.dedent(f"""
        import amrzip
        for read in (amrzip.info, amrzip.decompress):
            try:
                read({data!r})
            except amrzip.CorruptStreamError:
                print("refused")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout) == (0, "refused\nrefused\n"), run.stderr[-2000:]
