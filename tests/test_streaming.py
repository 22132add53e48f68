"""Chunked streams (amrzip.StreamCompressor / StreamDecompressor): round trips however the data is
written, bounds held record by record, the codebook policies, outputs, argument errors, and
damaged streams refused with CorruptStreamError."""

from __future__ import annotations

import io
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amrzip
from amrzip import CorruptStreamError, StreamCompressor, StreamDecompressor
from amrzip._metrics import psnr
from roundtrip import check
from test_codec_api import smooth, sprinkle_nonfinite

DTYPES = [np.float32, np.float64]
LENGTH = struct.Struct("<Q")


def records(data: bytes) -> list[bytes]:
    """The records of a valid stream, each an amrzip stream that amrzip.info can describe."""
    return list(StreamDecompressor(data).records())


def compress(dtype, chunk, pieces, **kwargs) -> tuple[bytes, dict]:
    with StreamCompressor(dtype, chunk, **kwargs) as c:
        for piece in pieces:
            c.write(piece)
        data = c.finish()
    return data, c.stats()


def check_stream(x: np.ndarray, data, rows: int, abs=None) -> np.ndarray:
    """Checks the stream `data` (bytes or a path) of x, cut in `rows` along axis 0: every chunk
    but the last full, and each record within abs= if given and within the bound it reports
    (the one a ratio= or psnr= stream chose), NaN/Inf bit for bit (roundtrip.check). Returns
    the whole decoded array."""
    chunks, recs = list(StreamDecompressor(data)), list(StreamDecompressor(data).records())
    assert len(chunks) == len(recs)
    start = 0
    for k, (y, record) in enumerate(zip(chunks, recs)):
        assert y.shape[0] == min(rows, x.shape[0] - start), f"record {k}: every chunk but the last is full"
        check(x[start : start + y.shape[0]], y, record, abs=amrzip.info(record)["abs_bound"] if abs is None else abs)
        start += y.shape[0]
    assert start == x.shape[0]
    y = StreamDecompressor(data).read_all()
    assert y.dtype == x.dtype.newbyteorder("=") and y.shape == (x.shape if chunks else (0,))
    return y


def stream_round_trip(x: np.ndarray, chunk, pieces=None, **kwargs) -> tuple[bytes, np.ndarray, dict]:
    """Writes x (in the given pieces, else at once) and checks the stream with check_stream.
    Returns the stream, the decoded array and the encoder's stats."""
    x = np.asarray(x)
    data, stats = compress(x.dtype, chunk, [x] if pieces is None else pieces, **kwargs)
    flat = isinstance(chunk, int)
    y = check_stream(x.reshape(-1) if flat else x, data, chunk if flat else chunk[0], abs=kwargs.get("abs"))
    assert stats["records"] == len(records(data))
    assert stats["elements"] == x.size and stats["bytes_out"] + 8 * (stats["records"] + 1) + 28 == len(data)
    assert stats["kept"] + stats["rebuilt"] + stats["offline"] == stats["records"]
    return data, y, stats


def splits(n: int, sizes) -> list[slice]:
    """Consecutive slices of 0..n of the given sizes, repeated until n is covered."""
    out, start, k = [], 0, 0
    while start < n:
        out.append(slice(start, start + sizes[k % len(sizes)]))
        start += sizes[k % len(sizes)]
        k += 1
    return out


# --- round trips -------------------------------------------------------------------------------

CHUNK_SHAPES = [
    ((1000,), (128,)),
    ((50, 33), (7, 33)),
    ((37, 12, 10), (8, 12, 10)),
    ((11, 5, 6, 7), (3, 5, 6, 7)),
    ((16, 20, 20), (16, 20, 20)),  # one full chunk exactly
    ((5, 20, 20), (16, 20, 20)),  # less than one chunk
]


@pytest.mark.parametrize("shape, chunk", CHUNK_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("write_rows", [None, [1], [5, 0, 13, 2]], ids=["at once", "row by row", "odd sizes"])
def test_round_trip_chunk_shapes(shape, chunk, dtype, write_rows):
    x = smooth(shape, dtype)
    pieces = None if write_rows is None else [x[s] for s in splits(shape[0], write_rows)]
    _, y, stats = stream_round_trip(x, chunk, pieces, abs=1e-3)
    assert stats["records"] == math.ceil(shape[0] / chunk[0])


@given(
    chunk=st.integers(1, 300),
    sizes=st.lists(st.integers(0, 700), min_size=1, max_size=8).filter(any),
    total=st.integers(0, 2000),
    dtype=st.sampled_from(DTYPES),
)
@settings(max_examples=40, deadline=None)
def test_flat_chunking_whatever_the_write_sizes(chunk, sizes, total, dtype):
    x = smooth((total,), dtype, seed=total)
    # Pieces of any rank: a flat stream takes their elements in C order.
    pieces = [x[s].reshape(-1, 1) if k % 2 else x[s] for k, s in enumerate(splits(total, sizes))]
    pieces.insert(len(pieces) // 2, np.empty((0, 3), dtype))
    _, _, stats = stream_round_trip(x, chunk, pieces, abs=1e-3)
    assert stats["records"] == math.ceil(total / chunk)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("writes", [0, 1, 2])
@pytest.mark.parametrize("chunk", [10, (3, 4)], ids=str)
def test_empty_stream(dtype, writes, chunk):
    data, stats = compress(dtype, chunk, [np.empty((0, 4), dtype)] * writes, abs=1e-3)
    assert stats["records"] == 0 and len(data) == 8 + 8 + 20
    assert records(data) == []
    y = StreamDecompressor(data).read_all()
    assert y.dtype == dtype and y.size == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bound", [{"abs": 1e-3}, {"abs": 0}, {"ratio": 10}, {"psnr": 60}], ids=str)
def test_nan_and_inf_kept_exactly(dtype, bound):
    x = sprinkle_nonfinite(smooth((24, 17, 18), dtype))
    x[9] = np.nan  # a whole plane
    bits = x.view(np.uint32 if dtype is np.float32 else np.uint64)
    bits[0, 0, 0] = 0x7FC01234 if dtype is np.float32 else 0x7FF8_0000_DEAD_BEEF  # NaN payload
    bits[20, 0, 1] = 0xFFC00000 if dtype is np.float32 else 0xFFF8_0000_0000_0000  # negative NaN
    x[12:16] = np.inf  # a chunk with no finite value
    stream_round_trip(x, (4, 17, 18), **bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [0.0, -0.0, 3.14159, -1e30])
@pytest.mark.parametrize("bound", [{"abs": 1e-3}, {"abs": 0}, {"ratio": 10}, {"psnr": 60}], ids=str)
def test_constant_data(dtype, value, bound):
    x = np.full((40, 50), value, dtype)
    _, y, _ = stream_round_trip(x, (6, 50), **bound)
    if "abs" not in bound or bound["abs"] == 0:
        assert y.tobytes() == x.tobytes()


@pytest.mark.parametrize("settings", [{"mode": "speed"}, {"threads": 1}] + [{"predictor": p} for p in amrzip.codec.PREDICTORS], ids=str)
def test_settings(settings):
    x = sprinkle_nonfinite(smooth((30, 20, 20), np.float64))
    data, _, _ = stream_round_trip(x, (7, 20, 20), abs=1e-4, **settings)
    if "predictor" in settings:
        assert {amrzip.info(r)["predictor"] for r in records(data)} == {settings["predictor"]}


def smooth_noise_smooth(dtype) -> np.ndarray:
    s = smooth((48, 64, 64), dtype)
    noise = 3 * np.random.default_rng(3).standard_normal((16, 64, 64))
    return np.concatenate([s[:16], noise.astype(dtype), s[32:]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bound", [{"abs": 1e-3}, {"ratio": 10}, {"psnr": 60}], ids=str)
def test_change_of_character_mid_stream(dtype, bound):
    x = smooth_noise_smooth(dtype)
    _, y, stats = stream_round_trip(x, (4, 64, 64), list(np.split(x, 3)), **bound)
    assert stats["reselected"] >= 1 and stats["rebuilt"] + stats["offline"] >= 2, stats
    if "psnr" in bound:
        assert psnr(x, y) >= bound["psnr"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", [8, 20, 50])
def test_ratio_is_met_over_the_stream(dtype, target):
    x = smooth((64, 128, 128), dtype)  # 4 or 8 MB
    data, y, _ = stream_round_trip(x, (4, 128, 128), ratio=target)
    assert x.nbytes / len(data) == pytest.approx(target, rel=0.15)
    # A plausible quality for such a ratio on smooth data, errors small against the range.
    assert psnr(x, y) > 40
    assert np.max(np.abs(x.astype(np.float64) - y)) < 1e-2 * float(x.max() - x.min())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", [40, 60, 90])
def test_psnr_is_a_floor_over_the_stream(dtype, target):
    x = smooth((32, 96, 96), dtype)
    x[20:] += 5  # later chunks have another range than the first ones
    _, y, _ = stream_round_trip(x, (3, 96, 96), psnr=target)
    assert psnr(x, y) >= target


POLICIES = [{"codebook": "adaptive"}, {"codebook": "adaptive", "thresholds": (0.0, 0.0)}, {"codebook": "rebuild"}]
POLICIES += [{"codebook": "interval", "update_elements": n} for n in (1, 3 * 4 * 64 * 64, 10**9)]


@pytest.mark.parametrize("policy", POLICIES, ids=str)
@pytest.mark.parametrize("bound", [{"abs": 1e-3}, {"ratio": 10}], ids=str)
def test_codebook_policies(policy, bound):
    x = smooth_noise_smooth(np.float32)
    data, y, stats = stream_round_trip(x, (4, 64, 64), **policy, **bound)
    # What each record says of its codebook agrees with the encoder's counts.
    sources = [amrzip.info(r)["codebook"] for r in records(data)]
    assert sources[0] != "previous record"
    assert sources.count("previous record") == stats["kept"]
    assert sources.count("inline") == stats["rebuilt"]
    assert sum(s.startswith("built-in") for s in sources) == stats["offline"]
    if policy["codebook"] == "rebuild" or policy.get("update_elements") == 1:
        assert stats["kept"] == 0
    if policy.get("update_elements") == 10**9:
        assert stats["rebuilt"] + stats["offline"] <= 3  # the first record, and codebooks missing a symbol


# --- sources and outputs ------------------------------------------------------------------------


def test_path_output_appears_only_when_finished(tmp_path):
    x = smooth((30, 20), np.float64)
    out = tmp_path / "s.amrzs"
    with StreamCompressor(np.float64, (7, 20), abs=1e-3, output=out) as c:
        c.write(x[:15])
        assert not out.exists()
        c.write(x[15:])
        assert c.finish() is None
    assert [p.name for p in tmp_path.iterdir()] == ["s.amrzs"]
    assert c.bytes_written == out.stat().st_size
    for source in (out, str(out), out.read_bytes(), bytearray(out.read_bytes())):
        check(x[:7], next(iter(StreamDecompressor(source))), records(out.read_bytes())[0], abs=1e-3)
    with open(out, "rb") as f:
        np.testing.assert_array_equal(StreamDecompressor(f).read_all(), StreamDecompressor(out).read_all())


def test_exception_inside_with_leaves_no_file(tmp_path):
    out = tmp_path / "s.amrzs"
    with pytest.raises(RuntimeError, match="stop"):
        with StreamCompressor(np.float32, 10, abs=1e-3, output=out) as c:
            c.write(np.ones(25, np.float32))
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_binary_file_output():
    x = smooth((1000,), np.float32)
    buf = io.BytesIO(b"prefix")
    buf.seek(0, io.SEEK_END)
    with StreamCompressor(np.float32, 64, abs=1e-3, output=buf) as c:
        c.write(x)
    data = buf.getvalue()[6:]
    assert c.bytes_written == len(data)
    assert data == compress(np.float32, 64, [x], abs=1e-3)[0]


class Unseekable(io.RawIOBase):
    """A pipe: reads in small pieces and cannot tell its size."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, b):
        n = self._data.readinto(memoryview(b)[:1000])
        return n


def test_unseekable_source():
    x = smooth((20, 30, 40))
    data, _ = compress(np.float32, (6, 30, 40), [x], abs=1e-3)
    np.testing.assert_array_equal(StreamDecompressor(Unseekable(data)).read_all(), StreamDecompressor(data).read_all())
    with pytest.raises(CorruptStreamError):
        StreamDecompressor(Unseekable(data[:8] + LENGTH.pack(2**62) + data[16:])).read_all()


def test_read_once():
    d = StreamDecompressor(compress(np.float32, 4, [np.ones(10, np.float32)], abs=0)[0])
    assert d.read_all().size == 10
    with pytest.raises(ValueError, match="once"):
        d.read_all()


class FailingFile(io.RawIOBase):
    """A file that fails with its own exception once `budget` bytes went through."""

    def __init__(self, budget: int, data: bytes = b""):
        self.budget, self._data = budget, io.BytesIO(data)

    def readable(self):
        return True

    def writable(self):
        return True

    def _spend(self, n):
        self.budget -= n
        if self.budget < 0:
            raise RuntimeError("device gone")

    def readinto(self, b):
        self._spend(len(b))
        return self._data.readinto(b)

    def write(self, b):
        self._spend(len(b))
        return len(b)


def test_python_file_errors_come_through():
    x = smooth((40, 30), np.float32)
    with pytest.raises(RuntimeError, match="device gone"):
        with StreamCompressor(np.float32, (8, 30), abs=1e-3, output=FailingFile(500)) as c:
            c.write(x)
    data, _ = compress(np.float32, (8, 30), [x], abs=1e-3)
    with pytest.raises(RuntimeError, match="device gone"):
        StreamDecompressor(FailingFile(len(data) // 2, data)).read_all()


def test_strided_writes():
    x = smooth((30, 20, 24), np.float64)
    view = x[:, :, ::2]
    assert not view.flags.c_contiguous
    data, _ = compress(np.float64, (7, 20, 12), [view[:11], view[11:]], abs=1e-4)
    assert data == compress(np.float64, (7, 20, 12), [np.ascontiguousarray(view)], abs=1e-4)[0]


def test_describe_and_declared_counts(tmp_path):
    x = smooth_noise_smooth(np.float32)
    data, stats = compress(np.float32, (5, 64, 64), [x], ratio=10)
    path = tmp_path / "s.amrzs"
    path.write_bytes(data)
    assert StreamDecompressor(path).declared_counts() == (stats["records"], x.size)
    d = StreamDecompressor(path).describe()
    recs = records(data)
    assert (d["format"], d["dtype"], d["shape"], d["chunk_shape"]) == ("chunked", "float32", list(x.shape), [5, 64, 64])
    assert (d["records"], d["compressed_size"], d["original_size"]) == (len(recs), len(data), x.nbytes)
    assert (d["mode"], d["bound_mode"], d["bound"]) == ("ratio", "ratio", 10)
    assert d["codebooks"] == {"new": stats["rebuilt"], "kept": stats["kept"], "built-in": stats["offline"]}
    bounds = [amrzip.info(r)["abs_bound"] for r in recs]
    assert d["abs_bound_range"] == [min(bounds), max(bounds)]
    assert sum(d["records_per_predictor"].values()) == len(recs)
    for record, described in zip(recs, d["per_record"]):
        offset = described.pop("offset")
        assert data[offset : offset + len(record)] == record and described == amrzip.info(record)
    reader = StreamDecompressor(data)
    reader.describe()
    for read in (reader.read_all, reader.describe, reader.declared_counts):
        with pytest.raises(ValueError):
            read()
    with pytest.raises(OSError):
        StreamDecompressor(Unseekable(data)).declared_counts()


# --- argument errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((np.float32, 10), {"rel": 1e-3}, "rel="),
        ((np.float32, 10), {}, "error bound is required"),
        ((np.float32, 10), {"abs": 1e-3, "ratio": 10}, "only one of"),
        ((np.float32, 10), {"abs": -1}, ">= 0"),
        ((np.float32, 10), {"ratio": 0.5}, ">= 1"),
        ((np.float32, 10), {"psnr": 0}, "> 0"),
        ((np.int32, 10), {"abs": 1e-3}, "unsupported dtype"),
        ((np.float16, 10), {"abs": 1e-3}, "unsupported dtype"),
        ((np.float32, 0), {"abs": 1e-3}, "positive element count"),
        ((np.float32, "ab"), {"abs": 1e-3}, "chunk"),
        ((np.float32, (4, 0)), {"abs": 1e-3}, "1 to 4 positive"),
        ((np.float32, (1, 2, 3, 4, 5)), {"abs": 1e-3}, "1 to 4 positive"),
        ((np.float32, 10), {"abs": 1e-3, "codebook": "sometimes"}, "codebook must be one of"),
        ((np.float32, 10), {"abs": 1e-3, "codebook": "interval"}, "update_elements"),
        ((np.float32, 10), {"abs": 1e-3, "codebook": "interval", "update_elements": 0}, "update_elements"),
        ((np.float32, 10), {"abs": 1e-3, "thresholds": (0.5, 0.1)}, "thresholds"),
        ((np.float32, 10), {"abs": 1e-3, "mode": "fast"}, "mode must be one of"),
        ((np.float32, 10), {"abs": 1e-3, "predictor": "sz3"}, "predictor must be one of"),
        ((np.float32, 10), {"abs": 1e-3, "threads": 0}, "threads="),
    ],
    ids=str,
)
def test_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        StreamCompressor(*args, **kwargs)


@pytest.mark.parametrize(
    "chunk, array, message",
    [
        ((4, 5), np.ones((3, 6), np.float32), "shape"),
        ((4, 5), np.ones(20, np.float32), "shape"),
        ((4, 5), np.ones((2, 2, 5), np.float32), "shape"),
        (10, np.ones(10, np.float64), "float32"),
        (10, np.ones(10, np.int32), "float32"),
    ],
    ids=str,
)
def test_bad_writes(chunk, array, message):
    c = StreamCompressor(np.float32, chunk, abs=1e-3)
    with pytest.raises(ValueError, match=message):
        c.write(array)


def test_write_after_finish():
    c = StreamCompressor(np.float32, 10, abs=1e-3)
    c.write(np.ones(5, np.float32))
    c.finish()
    with pytest.raises(ValueError, match="after finish"):
        c.write(np.ones(5, np.float32))
    with pytest.raises(ValueError, match="twice"):
        c.finish()


def test_big_endian_input_is_accepted():
    x = smooth((300,), np.float64)
    data, _ = compress(np.float64, 64, [x.astype(">f8")], abs=1e-3)
    assert data == compress(np.float64, 64, [x], abs=1e-3)[0]


# --- damaged streams ---------------------------------------------------------------------------


def assert_corrupt(data: bytes):
    with pytest.raises(CorruptStreamError):
        StreamDecompressor(data).read_all()


def test_corrupt_stream_error_is_a_value_error():
    assert issubclass(CorruptStreamError, ValueError)


@pytest.fixture(
    scope="module",
    params=[  # between them, records with every kind of codebook
        ("f32 smooth", np.float32, (4, 10, 10), {"abs": 1e-2}),
        ("f32 nan and inf", np.float32, (4, 10, 10), {"abs": 1e-2, "nonfinite": True}),
        ("f64 flat", np.float64, 400, {"abs": 1e-1, "codebook": "rebuild"}),
        ("f32 psnr", np.float32, (4, 10, 10), {"psnr": 40, "nonfinite": True}),
    ],
    ids=lambda p: p[0],
)
def small(request) -> tuple[bytes, list[bytes]]:
    """A stream of a few records, with the records in it."""
    _, dtype, chunk, kwargs = request.param
    kwargs = dict(kwargs)
    x = smooth((22, 10, 10), dtype)
    x = sprinkle_nonfinite(x, fraction=0.01) if kwargs.pop("nonfinite", False) else x
    data, stats = compress(dtype, chunk, [x.reshape(-1) if isinstance(chunk, int) else x], **kwargs)
    assert stats["records"] >= 5 and len(data) < 3000, "keep the exhaustive tests quick"
    return data, records(data)


def assemble(data: bytes, recs: list[bytes], tail: bytes | None = None) -> bytes:
    """The stream with its records replaced by `recs` (the end block kept unless a tail is given)."""
    body = b"".join(LENGTH.pack(len(r)) + r for r in recs)
    return data[:8] + body + (data[-28:] if tail is None else tail)


def boundaries(data: bytes, recs: list[bytes]) -> list[int]:
    """Offsets where each record's length field starts, then the zero length and the end block."""
    offsets = [8]
    for r in recs:
        offsets.append(offsets[-1] + 8 + len(r))
    return offsets + [len(data) - 20]


def test_every_truncation(small):
    data, recs = small
    assert assemble(data, recs) == data
    for n in range(len(data)):
        assert_corrupt(data[:n])
    # And what a truncation at a record boundary looks like to a reader that cannot see the end.
    for b in boundaries(data, recs):
        with pytest.raises(CorruptStreamError, match="truncated"):
            StreamDecompressor(Unseekable(data[:b])).read_all()


@pytest.mark.parametrize("mask", [0xFF, 0x01])
def test_every_single_byte_corruption(small, mask):
    data, _ = small
    for k in range(len(data)):
        damaged = bytearray(data)
        damaged[k] ^= mask
        assert_corrupt(bytes(damaged))


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_random_damage(small, data):
    stream, _ = small
    damaged = bytearray(stream)
    for _ in range(data.draw(st.integers(1, 8))):
        damaged[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        damaged = damaged[: data.draw(st.integers(0, len(stream)))]
    if bytes(damaged) != stream:
        assert_corrupt(bytes(damaged))


def test_records_removed_repeated_or_reordered(small):
    data, recs = small
    n = len(recs)
    for k in range(n):
        assert_corrupt(assemble(data, recs[:k] + recs[k + 1 :]))
        assert_corrupt(assemble(data, recs[: k + 1] + recs[k:]))
        for j in range(k + 1, n):
            swapped = list(recs)
            swapped[k], swapped[j] = swapped[j], swapped[k]
            if swapped != recs:  # not two equal records
                assert_corrupt(assemble(data, swapped))
    assert_corrupt(assemble(data, recs[::-1]))
    # A record of another stream of the same kind in place of one, with its own counts.
    dtype = StreamDecompressor(data).dtype
    other, _ = compress(dtype, (4, 10, 10), [smooth((22, 10, 10), dtype, seed=9)], abs=1e-2)
    for k in range(n):
        assert_corrupt(assemble(data, recs[:k] + [records(other)[k % 2]] + recs[k + 1 :]))


@pytest.mark.parametrize("length", [1, 2**31, 2**62, 2**64 - 1])
def test_huge_or_wrong_length_field(small, length):
    data, recs = small
    for b in boundaries(data, recs)[:-1]:  # every record's length and the zero length
        assert_corrupt(data[:b] + LENGTH.pack(length) + data[b + 8 :])


@pytest.mark.parametrize("tail", [b"\0", b"junk", bytes(28), None], ids=["zero byte", "text", "zeros", "second stream"])
def test_trailing_bytes(small, tail):
    data, _ = small
    assert_corrupt(data + (data if tail is None else tail))


def test_end_block_counts(small):
    data, recs = small
    records_, elements, digest = struct.unpack("<QQ4s", data[-20:])
    for fields in ((records_ + 1, elements), (records_, elements - 1), (records_ - 1, elements), (0, 0)):
        assert_corrupt(data[:-20] + struct.pack("<QQ4s", *fields, digest))
    assert_corrupt(data[:-28])  # no end block at all
    # The first two records alone, with counts that fit them.
    elements = sum(math.prod(amrzip.info(r)["shape"]) for r in recs[:2])
    assert_corrupt(assemble(data, recs[:2], tail=LENGTH.pack(0) + struct.pack("<QQ4s", 2, elements, digest)))


@pytest.mark.parametrize(
    "data",
    [b"", b"AMRS", b"AMRS\x01\x00\x00\x00", b"AMRS\x02\x00\x00\x00" + bytes(28), b"AMRS\x01\x07\x00\x00" + bytes(28), bytes(36)],
    ids=repr,
)
def test_not_a_chunked_stream(data):
    assert_corrupt(data)


def test_a_plain_amrzip_stream_is_not_a_chunked_one():
    assert_corrupt(amrzip.compress(smooth((10, 10)), abs=1e-3))


def test_dtype_changed_in_the_header(small):
    data, _ = small
    flipped = bytearray(data)
    flipped[5] ^= 1  # float32 <-> float64: every record then holds the other type
    assert_corrupt(bytes(flipped))


# --- streams written by an earlier build ----------------------------------------------------------

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_field(shape, dtype) -> np.ndarray:
    """A field of exact arithmetic only (no sin or exp, whose last bits vary between numpy builds):
    smooth, then a slab of pseudo-random noise (a change of character, so that records rebuild and
    keep codebooks), with NaN and infinities."""
    i = np.arange(math.prod(shape), dtype=np.uint64)
    rows = (i // max(1, math.prod(shape[1:]))).astype(np.float64)
    x = 0.01 * rows * rows - 0.003 * (i % 97).astype(np.float64) + 0.25 * (i % 7).astype(np.float64) * 0.01
    noisy = (rows >= 8) & (rows < 12) if len(shape) > 1 else (i >= 400) & (i < 600)
    x[noisy] += ((i[noisy] * np.uint64(2654435761)) % np.uint64(4093)).astype(np.float64) / 819.0
    x[[5, 123, 777]] = [np.nan, np.inf, -np.inf]
    return x.astype(dtype).reshape(shape)


# (file, dtype, shape, chunk, pieces as row counts, settings): written with threads=1 by the
# current writer; any change to these bytes is a change of the format (or of the encoder's
# choices, which then needs new fixtures). The same cases written by version-1 writers (the pure
# Python container of StreamCompressor, before the container moved to Rust) are the `.v1` files,
# which must still decode.
STREAM_FIXTURES = [
    ("chunked_f32", np.float32, (22, 10, 10), (4, 10, 10), [7, 0, 15], {"abs": 1e-2}),
    ("chunked_f64_flat", np.float64, (1000,), 128, [300, 1, 699], {"psnr": 50, "codebook": "rebuild"}),
]


def write_fixture(dtype, shape, chunk, pieces, settings) -> bytes:
    x, start, parts = fixture_field(shape, dtype), 0, []
    for n in pieces:
        parts.append(x[start : start + n])
        start += n
    return compress(dtype, chunk, parts, threads=1, **settings)[0]


@pytest.mark.parametrize("name, dtype, shape, chunk, pieces, settings", STREAM_FIXTURES, ids=lambda v: v if isinstance(v, str) else "")
def test_streams_of_an_earlier_build(name, dtype, shape, chunk, pieces, settings):
    data = (FIXTURES / f"{name}.amrzs").read_bytes()
    assert write_fixture(dtype, shape, chunk, pieces, settings) == data
    check_fixture(data, dtype, shape, chunk)


@pytest.mark.parametrize("name, dtype, shape, chunk, pieces, settings", STREAM_FIXTURES, ids=lambda v: v if isinstance(v, str) else "")
def test_streams_of_version_1_still_decode(name, dtype, shape, chunk, pieces, settings):
    data = (FIXTURES / f"{name}.v1.amrzs").read_bytes()
    assert all(r[4] == 1 for r in records(data))
    check_fixture(data, dtype, shape, chunk)


def check_fixture(data, dtype, shape, chunk):
    y = StreamDecompressor(data).read_all()
    x = fixture_field(shape, dtype)
    assert y.dtype == dtype and y.shape == x.shape
    recs = records(data)
    assert len(recs) == math.ceil(shape[0] / (chunk if isinstance(chunk, int) else chunk[0]))
    rows = chunk if isinstance(chunk, int) else chunk[0]
    for k, record in enumerate(recs):
        check(x[k * rows : (k + 1) * rows], y[k * rows : (k + 1) * rows], record, abs=amrzip.info(record)["abs_bound"])
