"""The HDF5 filter plugin: through h5py (HDF5 2.x bundled in its wheel), through the HDF5 command
line tools (Debian's HDF5 1.10), and through a bare HDF5_PLUGIN_PATH in a process that never
imports amrzip. `make setup` builds the plugin; CI installs h5py and the tools (.ci/run)."""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

h5py = pytest.importorskip("h5py", reason="h5py is not installed (it is in requirements-dev.txt; run `make setup`)")

import amrzip  # noqa: E402
import amrzip.hdf5 as ah  # noqa: E402

needs_tools = pytest.mark.skipif(
    shutil.which("h5dump") is None or shutil.which("h5repack") is None,
    reason="HDF5 command line tools missing (Debian: apt-get install hdf5-tools; .ci/run does it)",
)


def field(shape, dtype=np.float32, seed=0) -> np.ndarray:
    """Smooth plus noise, offset away from zero so that no slab is all zeros by chance."""
    rng = np.random.default_rng(seed)
    axes = np.meshgrid(*[np.linspace(0.0, 4.0, n) for n in shape], indexing="ij", sparse=True)
    f = sum((np.sin((i + 1) * a) for i, a in enumerate(axes)), np.full(shape, 5.0))
    return (f + 0.05 * rng.standard_normal(shape)).astype(dtype)


def chunk_slices(shape, chunks):
    for start in itertools.product(*[range(0, n, c) for n, c in zip(shape, chunks)]):
        yield tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, chunks, shape))


def filter_input(x, sl, chunks, fill=0):
    """The chunk as HDF5 hands it to the filter: an edge chunk is padded with the fill value."""
    block = np.full(chunks, fill, dtype=x.dtype)
    block[tuple(slice(0, s.stop - s.start) for s in sl)] = x[sl]
    return block


def rel_bound(block, rel):
    """The filter's relative bound for one chunk: `rel` times the value range of the finite values
    of the chunk's valid part, which ends at the last slab (along axis 0) holding a non-zero bit."""
    nonzero = np.flatnonzero(block.reshape(block.shape[0], -1).view(f"u{block.itemsize}").any(axis=1))
    valid = block[: nonzero[-1] + 1] if nonzero.size else block[:0]
    finite = valid[np.isfinite(valid)].astype(np.float64)
    return rel * (finite.max() - finite.min()) if finite.size else 0.0


def write(path, x, chunks, **filter_args):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=chunks, **ah.Filter(**filter_args))


def read(path, name="x"):
    with h5py.File(path, "r") as f:
        return f[name][...]


def assert_within(x, y, bound):
    assert y.dtype == x.dtype and y.shape == x.shape
    err = np.abs(x.astype(np.float64) - y.astype(np.float64))
    assert err.max() <= bound, f"max error {err.max()} > bound {bound}"


# --- the plugin and its parameters ---------------------------------------------------------------


def test_plugin_is_built_and_exports_the_filter_class():
    assert os.path.isfile(ah.plugin_file()), "run `make setup` to build the plugin"
    lib = ctypes.CDLL(ah.plugin_file())
    lib.H5PLget_plugin_type.restype = ctypes.c_int
    assert lib.H5PLget_plugin_type() == 0  # H5PL_TYPE_FILTER

    class H5ZClass2(ctypes.Structure):
        _fields_ = [("version", ctypes.c_int), ("id", ctypes.c_int), ("encoder_present", ctypes.c_uint),
                    ("decoder_present", ctypes.c_uint), ("name", ctypes.c_char_p)]  # fmt: skip

    lib.H5PLget_plugin_info.restype = ctypes.POINTER(H5ZClass2)
    cls = lib.H5PLget_plugin_info().contents
    assert (cls.version, cls.id, cls.encoder_present, cls.decoder_present) == (1, ah.FILTER_ID, 1, 1)
    assert 256 <= ah.FILTER_ID <= 511
    assert cls.name.startswith(b"amrzip")
    assert h5py.h5z.filter_avail(ah.FILTER_ID)


def test_cd_values_layout():
    low, high = struct.unpack("<II", struct.pack("<d", 0.25))
    assert ah.cd_values(abs=0.25) == (1, 0, low, high, 0, 0)
    assert ah.cd_values(rel=0.25, mode="speed", valid=7) == (1, 1, low, high, 1, 7)
    assert ah.cd_values(ratio=0.25 * 40)[1] == 2
    assert ah.cd_values(psnr=60)[1] == 3
    assert ah.h5repack_filter(abs=0.25) == f"UD={ah.FILTER_ID},0,6,1,0,{low},{high},0,0"
    f = ah.Filter(abs=0.25)
    assert dict(f) == {"compression": ah.FILTER_ID, "compression_opts": (1, 0, low, high, 0, 0)}
    assert f == ah.Filter(abs=0.25) and f != ah.Filter(abs=0.5)
    assert "abs=0.25" in repr(f)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"abs": 1, "rel": 1}, {"abs": -1}, {"rel": float("nan")}, {"ratio": 0.5}, {"psnr": 0},
     {"abs": 1, "mode": "fast"}, {"abs": 1, "valid": 0}, {"abs": 1, "valid": 2**32}, {"abs": 1, "valid": 1.5}],
    ids=str,
)  # fmt: skip
def test_bad_parameters_are_refused_in_python(kwargs):
    with pytest.raises(ValueError):
        ah.Filter(**kwargs)


def test_set_local_stores_type_and_chunk_shape(tmp_path):
    x = field((30, 20, 10), np.float64)
    write(tmp_path / "a.h5", x, (8, 20, 5), abs=1e-3, valid=6)
    with h5py.File(tmp_path / "a.h5", "r") as f:
        _, values, name = f["x"].id.get_create_plist().get_filter_by_id(ah.FILTER_ID)
    assert name.startswith(b"amrzip")
    # user part, then dtype (1 = float64), byte order (0 = little), rank, chunk dims
    assert tuple(values) == ah.cd_values(abs=1e-3, valid=6) + (1, 0, 3, 8, 20, 5)


@pytest.mark.parametrize(
    "dtype, opts, message",
    [
        ("i4", ah.cd_values(abs=1.0), "32- and 64-bit floats"),
        ("f2", ah.cd_values(abs=1.0), "32- and 64-bit floats"),
        ("f4", (1, 9, 0, 0), "unknown bound mode"),
        ("f4", (2, 0, 0, 0), "layout version"),
        ("f4", (1, 0), "at least 4"),
        ("f4", ah.cd_values(abs=1.0)[:5] + (99,), "valid extent 99 exceeds"),
    ],
    ids=["int", "half", "mode", "version", "short", "valid"],
)
def test_dataset_creation_refused_with_a_reason(tmp_path, dtype, opts, message):
    with h5py.File(tmp_path / "a.h5", "w") as f, pytest.raises((ValueError, OSError), match=message):
        f.create_dataset("x", shape=(100,), dtype=dtype, chunks=(50,), compression=ah.FILTER_ID, compression_opts=opts)


# --- round trips through h5py ---------------------------------------------------------------------

CASES = [  # shape, chunk shapes (the first divides the shape; the others leave edge chunks)
    ((1000,), [(250,), (128,), (1000,)]),
    ((50, 37), [(25, 37), (16, 10), (7, 37)]),
    ((20, 30, 17), [(10, 15, 17), (8, 7, 17), (5, 30, 4)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, chunks", [(s, c) for s, cs in CASES for c in cs], ids=str)
def test_round_trip_abs(tmp_path, shape, chunks, dtype):
    x = field(shape, dtype)
    write(tmp_path / "a.h5", x, chunks, abs=1e-3)
    assert_within(x, read(tmp_path / "a.h5"), 1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, chunks", [(s, c) for s, cs in CASES for c in cs], ids=str)
def test_relative_bound_holds_per_chunk(tmp_path, shape, chunks, dtype):
    # Scale differs a lot between chunks, so a dataset-wide range would be much looser.
    x = (field(shape, np.float64) * np.logspace(0, 4, shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))).astype(dtype)
    write(tmp_path / "a.h5", x, chunks, rel=1e-4)
    y = read(tmp_path / "a.h5")
    for sl in chunk_slices(shape, chunks):
        assert_within(x[sl], y[sl], rel_bound(filter_input(x, sl, chunks), 1e-4))


def test_nonfinite_values_kept(tmp_path):
    x = field((64, 40), np.float64)
    rng = np.random.default_rng(3)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, 200, replace=False)
    flat[picks] = rng.choice([np.nan, np.inf, -np.inf], 200)
    write(tmp_path / "a.h5", x, (16, 16), abs=1e-2)
    y = read(tmp_path / "a.h5")
    np.testing.assert_array_equal(np.isnan(y), np.isnan(x))
    finite = np.isfinite(x)
    np.testing.assert_array_equal(y[~finite & ~np.isnan(x)], x[~finite & ~np.isnan(x)])
    assert_within(x[finite], y[finite], 1e-2)


@pytest.mark.parametrize("dtype", [">f4", ">f8"])
def test_big_endian_datasets(tmp_path, dtype):
    x = field((40, 30), np.float64).astype(dtype)
    write(tmp_path / "a.h5", x, (16, 16), abs=1e-3)
    y = read(tmp_path / "a.h5")
    assert y.dtype == np.dtype(dtype)
    assert_within(x, y, 1e-3)


def test_speed_mode_ratio_and_psnr_targets(tmp_path):
    x = field((64, 64, 32), np.float32)
    chunks = (32, 32, 32)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("speed", data=x, chunks=chunks, **ah.Filter(abs=1e-3, mode="speed"))
        f.create_dataset("ratio", data=x, chunks=chunks, **ah.Filter(ratio=20))
        f.create_dataset("psnr", data=x, chunks=chunks, **ah.Filter(psnr=70))
        stored = {k: sum(f[k].id.get_chunk_info(i).size for i in range(f[k].id.get_num_chunks())) for k in f}
    assert_within(x, read(tmp_path / "a.h5", "speed"), 1e-3)
    assert 10 < x.nbytes / stored["ratio"] < 40
    # Every chunk meets the target, and chunk ranges are within the dataset's, so the whole does.
    y = read(tmp_path / "a.h5", "psnr").astype(np.float64)
    psnr = 20 * np.log10((x.max() - x.min()) / np.sqrt(np.mean((x - y) ** 2)))
    assert psnr >= 70


# --- AMRIC-style padded chunks ------------------------------------------------------------------------


def test_zero_padding_costs_nothing(tmp_path):
    """One chunk per MPI rank, chunk = the largest rank's piece, the others padded with zeros:
    only the real data is stored, and the padding reads back as zeros."""
    size, lengths = 4096, [4096, 3000, 1234, 17]
    pieces = [field((n,), np.float64, seed=r) for r, n in enumerate(lengths)]
    with h5py.File(tmp_path / "a.h5", "w") as f:
        d = f.create_dataset("x", shape=(size * len(lengths),), dtype="f8", chunks=(size,), **ah.Filter(abs=1e-4))
        for r, piece in enumerate(pieces):
            padded = np.zeros(size)
            padded[: piece.size] = piece
            d[r * size : (r + 1) * size] = padded
        for r, piece in enumerate(pieces):
            _, stored = d.id.read_direct_chunk((r * size,))
            assert amrzip.info(stored)["shape"] == [piece.size]
            # The stream of the real data only; the filter may reuse a predictor choice from the
            # dataset's earlier chunks, so its size, not its bytes, is compared with compress().
            assert len(stored) <= 1.1 * len(amrzip.compress(piece, abs=1e-4)) + 64
            assert_within(piece, amrzip.decompress(stored), 1e-4)
    y = read(tmp_path / "a.h5")
    for r, piece in enumerate(pieces):
        assert_within(piece, y[r * size : r * size + piece.size], 1e-4)
        assert not y[r * size + piece.size : (r + 1) * size].any()


def test_explicit_valid_extent_drops_garbage_padding(tmp_path):
    """With `valid`, the slabs after the first `valid` ones along the chunk's slowest dimension
    are neither stored nor counted in the relative bound's range, and read back as zeros."""
    x = field((8, 10, 6), np.float32)
    x[[3, 7]] = 1e30  # garbage in the last slab of each (4, 10, 6) chunk
    with h5py.File(tmp_path / "a.h5", "w") as f:
        d = f.create_dataset("x", data=x, chunks=(4, 10, 6), **ah.Filter(rel=1e-3, valid=3))
        for start in (0, 4):
            _, stored = d.id.read_direct_chunk((start, 0, 0))
            assert amrzip.info(stored)["shape"] == [3, 10, 6]
    y = read(tmp_path / "a.h5")
    for start in (0, 4):
        real = x[start : start + 3].astype(np.float64)
        assert_within(x[start : start + 3], y[start : start + 3], 1e-3 * (real.max() - real.min()))
        assert not y[start + 3].any()


def test_explicit_valid_extent_on_the_slowest_dimension(tmp_path):
    x = field((300, 20), np.float32)
    x[250:] = -7.5e30  # the padding of the last 50 rows of each 300-row chunk
    with h5py.File(tmp_path / "a.h5", "w") as f:
        d = f.create_dataset("x", data=x, chunks=(300, 20), **ah.Filter(rel=1e-3, valid=250))
        _, stored = d.id.read_direct_chunk((0, 0))
        assert amrzip.info(stored)["shape"] == [250, 20]
    y = read(tmp_path / "a.h5")
    real = x[:250].astype(np.float64)
    assert_within(x[:250], y[:250], 1e-3 * (real.max() - real.min()))
    assert not y[250:].any()


# --- damaged files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["start", "middle", "end", "garbage", "truncated"])
def test_corrupt_chunk_is_a_read_error(tmp_path, where):
    path = tmp_path / "a.h5"
    x = field((4000,), np.float32)
    write(path, x, (1000,), abs=1e-3)
    if where in ("garbage", "truncated"):
        with h5py.File(path, "r+") as f:
            d = f["x"]
            _, stored = d.id.read_direct_chunk((1000,))
            d.id.write_direct_chunk((1000,), b"\x00garbage" * 20 if where == "garbage" else stored[: len(stored) // 2])
    else:
        with h5py.File(path, "r") as f:
            info = f["x"].id.get_chunk_info(1)
        at = info.byte_offset + {"start": 2, "middle": info.size // 2, "end": info.size - 3}[where]
        with open(path, "r+b") as fh:
            fh.seek(at)
            b = fh.read(2)
            fh.seek(at)
            fh.write(bytes(v ^ 0xFF for v in b))
    with h5py.File(path, "r") as f:
        d = f["x"]
        with pytest.raises(OSError):
            d[1000:2000]
        with pytest.raises(OSError):
            d[...]
        # The other chunks are still fine.
        assert_within(x[:1000], d[:1000], 1e-3)
        assert_within(x[2000:], d[2000:], 1e-3)


# --- other programs: a plain HDF5_PLUGIN_PATH, h5dump, h5repack ---------------------------------------


def plugin_env():
    return dict(os.environ, HDF5_PLUGIN_PATH=ah.plugin_path())


def test_bare_plugin_path_works_without_importing_amrzip(tmp_path):
    """h5py loads its HDF5 privately; the plugin still finds the library's functions."""
    x = field((60, 50), np.float64)
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import sys, h5py, numpy as np
        x = np.load({str(tmp_path / 'x.npy')!r})
        with h5py.File({str(tmp_path / 'a.h5')!r}, "w") as f:
            f.create_dataset("x", data=x, chunks=(16, 16), compression={ah.FILTER_ID}, compression_opts={ah.cd_values(abs=1e-3)})
        with h5py.File({str(tmp_path / 'a.h5')!r}, "r") as f:
            assert f["x"].id.get_create_plist().get_nfilters() == 1
            y = f["x"][...]
        assert not any(m.startswith("amrzip") for m in sys.modules), "amrzip was imported"
        print(np.abs(x - y).max())
    """)
    out = subprocess.run([sys.executable, "-c", code], env=plugin_env(), capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert 0 < float(out.stdout) <= 1e-3
    assert_within(x, read(tmp_path / "a.h5"), 1e-3)


@needs_tools
def test_h5dump_prints_a_compressed_dataset(tmp_path):
    x = field((50, 37), np.float32)
    write(tmp_path / "a.h5", x, (16, 16), abs=1e-3)
    header = subprocess.run(["h5dump", "-p", "-H", str(tmp_path / "a.h5")], env=plugin_env(), capture_output=True, text=True)
    assert header.returncode == 0, header.stderr
    assert f"FILTER_ID {ah.FILTER_ID}" in header.stdout and "amrzip" in header.stdout
    cmd = ["h5dump", "-d", "/x", "-y", "-w", "0", "-m", "%.9g", "-o", str(tmp_path / "x.txt"), str(tmp_path / "a.h5")]
    out = subprocess.run(cmd, env=plugin_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    values = np.array(re.findall(r"[-+0-9.eEinfa]+", (tmp_path / "x.txt").read_text()), dtype=np.float32).reshape(x.shape)
    np.testing.assert_array_equal(values, read(tmp_path / "a.h5"))
    # Without the plugin, Debian's HDF5 cannot decode the chunks.
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    assert subprocess.run(cmd, env=env, capture_output=True).returncode != 0


@needs_tools
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_h5repack_compresses_and_decompresses(tmp_path, dtype):
    x = field((200, 90), dtype)
    with h5py.File(tmp_path / "raw.h5", "w") as f:
        f["x"] = x  # contiguous, uncompressed
    spec = ah.h5repack_filter(abs=1e-3)
    run = subprocess.run(
        ["h5repack", "-f", spec, "-l", "CHUNK=64x64", str(tmp_path / "raw.h5"), str(tmp_path / "packed.h5")],
        env=plugin_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    with h5py.File(tmp_path / "packed.h5", "r") as f:
        d = f["x"]
        assert d.chunks == (64, 64)
        assert d.id.get_create_plist().get_filter_by_id(ah.FILTER_ID)[1][:6] == ah.cd_values(abs=1e-3)
        stored = sum(d.id.get_chunk_info(i).size for i in range(d.id.get_num_chunks()))
        y = d[...]
    assert stored < x.nbytes / 2
    assert_within(x, y, 1e-3)
    # Decoding with the tools' HDF5 gives exactly what h5py's gives.
    run = subprocess.run(
        ["h5repack", "-f", "NONE", str(tmp_path / "packed.h5"), str(tmp_path / "unpacked.h5")],
        env=plugin_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    unpacked = read(tmp_path / "unpacked.h5")
    np.testing.assert_array_equal(unpacked.view(f"u{x.itemsize}"), y.view(f"u{x.itemsize}"))


def test_cli_prints_path_and_filter_arguments():
    run = lambda *a: subprocess.run([sys.executable, "-m", "amrzip.hdf5", *a], capture_output=True, text=True)  # noqa: E731
    assert run("--plugin-path").stdout.strip() == ah.plugin_path()
    assert run("--rel", "1e-4", "--mode", "speed").stdout.strip() == ah.h5repack_filter(rel=1e-4, mode="speed")
    assert run("--abs", "0.5", "--cd-values").stdout.split() == [str(v) for v in (ah.FILTER_ID, *ah.cd_values(abs=0.5))]
    assert run("--abs", "-1").returncode != 0
