"""amrzip as a numcodecs codec and a zarr-python 3 codec, found through entry points."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import numpy as np
import pytest

try:
    numcodecs = pytest.importorskip("numcodecs", reason="numcodecs is not installed (it is in requirements-dev.txt)")
except ValueError as e:  # numcodecs <= 0.16.6 cannot parse the version of zfpy 1.0.1.post0 (benches/)
    pytest.skip(f"numcodecs fails to import here: {e}", allow_module_level=True)
zarr = pytest.importorskip("zarr", minversion="3", reason="zarr-python 3 is not installed (it is in requirements-dev.txt)")

from amrzip.zarr import Codec, Serializer  # noqa: E402


def field(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    axes = np.meshgrid(*[np.linspace(0.0, 3.0, n) for n in shape], indexing="ij", sparse=True)
    f = sum((np.sin((i + 1) * a) for i, a in enumerate(axes)), np.zeros(shape))
    return (f + 0.01 * rng.standard_normal(shape)).astype(dtype)


def test_entry_points_are_installed():
    assert "amrzip.zarr:Codec" in [e.value for e in entry_points(group="numcodecs.codecs", name="amrzip")]
    assert "amrzip.zarr:Serializer" in [e.value for e in entry_points(group="zarr.codecs", name="amrzip")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ">f8"])
@pytest.mark.parametrize("shape", [(1000,), (40, 30), (10, 12, 14), (3, 4, 5, 6, 2)], ids=str)
def test_numcodecs_round_trip(shape, dtype):
    x = field(shape, np.float64).astype(dtype)
    codec = Codec(abs=1e-3)
    y = codec.decode(codec.encode(x))
    assert y.size == x.size
    assert np.abs(y.reshape(x.shape).astype(np.float64) - x.astype(np.float64)).max() <= 1e-3
    out = np.empty(x.shape, dtype=np.dtype(dtype).newbyteorder("="))
    codec.decode(codec.encode(x), out=out)
    assert np.abs(out.astype(np.float64) - x.astype(np.float64)).max() <= 1e-3


def test_numcodecs_config():
    codec = Codec(rel=1e-4, mode="speed")
    assert codec.get_config() == {"id": "amrzip", "rel": 1e-4, "mode": "speed"}
    assert numcodecs.get_codec(codec.get_config()) == codec
    assert numcodecs.get_codec({"id": "amrzip", "psnr": 60}) == Codec(psnr=60)
    for bad in ({}, {"abs": -1}, {"abs": 1, "rel": 1}, {"abs": 1, "mode": "fast"}):
        with pytest.raises(ValueError):
            Codec(**bad)
    with pytest.raises(TypeError, match="float32 and float64"):
        Codec(abs=1).encode(np.arange(10))
    with pytest.raises(TypeError, match="float32 and float64"):
        Codec(abs=1).encode(b"raw bytes")


@pytest.mark.parametrize("order", ["C", "F"])
def test_zarr_format_2_compressor(tmp_path, order):
    x = field((50, 70), np.float64)
    a = zarr.create_array(str(tmp_path / "a.zarr"), shape=x.shape, chunks=(20, 32), dtype=x.dtype, zarr_format=2,
                          order=order, compressors=Codec(rel=1e-4))  # fmt: skip
    a[...] = x
    meta = json.loads((tmp_path / "a.zarr" / ".zarray").read_text())
    assert meta["compressor"] == {"id": "amrzip", "rel": 1e-4, "mode": "ratio"}
    y = zarr.open_array(str(tmp_path / "a.zarr"))[...]
    # rel is per chunk: the bound of the widest chunk range is an upper bound for every chunk
    assert np.abs(y - x).max() <= 1e-4 * (x.max() - x.min())


def test_zarr_format_3_serializer(tmp_path):
    x = field((64, 48, 20), np.float32)
    a = zarr.create_array(str(tmp_path / "a.zarr"), shape=x.shape, chunks=(32, 32, 20), dtype=x.dtype,
                          serializer=Serializer(abs=1e-3), compressors=None)  # fmt: skip
    a[...] = x
    meta = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())
    assert meta["codecs"] == [{"name": "amrzip", "configuration": {"abs": 1e-3, "mode": "ratio"}}]
    stored = sum(p.stat().st_size for p in (tmp_path / "a.zarr" / "c").rglob("*") if p.is_file())
    assert stored < x.nbytes / 3
    y = zarr.open_array(str(tmp_path / "a.zarr"))[...]
    assert y.dtype == x.dtype and np.abs(y - x).max() <= 1e-3
    with pytest.raises(ValueError, match="float32 and float64"):
        zarr.create_array(str(tmp_path / "i.zarr"), shape=(10,), dtype="i4", serializer=Serializer(abs=1), compressors=None)


def test_another_process_reads_without_importing_amrzip(tmp_path):
    x = field((30, 40), np.float64)
    zarr.create_array(str(tmp_path / "v2.zarr"), data=x, chunks=(16, 16), zarr_format=2, compressors=Codec(abs=1e-3))
    zarr.create_array(str(tmp_path / "v3.zarr"), data=x, chunks=(16, 16), serializer=Serializer(abs=1e-3), compressors=None)
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import numpy as np, zarr
        x = np.load({str(tmp_path / 'x.npy')!r})
        for name in ("v2.zarr", "v3.zarr"):
            y = zarr.open_array({str(tmp_path)!r} + "/" + name)[...]
            assert np.abs(y - x).max() <= 1e-3, name
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_store_arrays_open_in_zarr(tmp_path):
    # A level's array of an AMR snapshot is a sharded Zarr v3 array in a zip file that any
    # zarr-python reader opens (with amrzip installed): stored cells as amrzip reads them, NaN
    # elsewhere, a float32 field beside a float64 one.
    import amrzip
    from amrzip.amr import Hierarchy

    rng = np.random.default_rng(3)
    fine = np.cumsum(rng.standard_normal((64, 48)), axis=0)
    coarse = fine.reshape(32, 2, 24, 2).mean(axis=(1, 3))
    boxes0 = [((0, 0), (15, 23)), ((16, 0), (31, 15))]
    boxes1 = [((8, 8), (39, 31))]
    cut = lambda a, b: a[b[0][0] : b[1][0] + 1, b[0][1] : b[1][1] + 1]  # noqa: E731
    single = lambda a: a.astype(np.float32)  # noqa: E731
    h = Hierarchy.from_arrays(
        [
            {
                "boxes": boxes0, "ref_ratio": 2, "domain": ((0, 0), (31, 23)),
                "data": {"T": [cut(coarse, b) for b in boxes0], "S": [single(-cut(coarse, b)) for b in boxes0]},
            },
            {"boxes": boxes1, "data": {"T": [cut(fine, b) for b in boxes1], "S": [single(-cut(fine, b)) for b in boxes1]}},
        ],
        prob_lo=(0, 0),
        prob_hi=(1, 0.75),
    )
    amrzip.write(h, tmp_path / "s", rel=1e-3, snapshot="snap")
    ds = amrzip.open(tmp_path / "s")
    store = zarr.storage.ZipStore(ds.path, mode="r")
    for L in range(2):
        z = zarr.open_array(store, path=f"level_{L}", mode="r")
        assert z.attrs["amrzip"]["fields"] == ["T", "S"] and z.dtype == np.float64
        for k, f in enumerate(ds.fields):
            ours = ds.read(f, level=L, covered="nan")
            np.testing.assert_array_equal(z[k].astype(ours.dtype), ours)
            np.testing.assert_array_equal(z[k, 3:20, 5:9].astype(ours.dtype), ours[3:20, 5:9])


def test_fitted_store_arrays_open_in_zarr(tmp_path):
    # At tight bounds the store's arrays carry fitted prediction weights in their codec
    # configuration; zarr-python decodes them like amrzip does.
    import amrzip
    from amrzip.amr.synthetic import nyx_like

    h = nyx_like(n=32, levels=2, blocking_factor=8, max_grid_size=16)
    amrzip.write(h, tmp_path / "s", rel=1e-5, snapshot="snap")
    ds = amrzip.open(tmp_path / "s")
    store = zarr.storage.ZipStore(ds.path, mode="r")
    for L in range(2):
        z = zarr.open_array(store, path=f"level_{L}", mode="r")
        k = ds.fields.index("density")
        assert ds.array_info(L, "density")["predictor"] == "fitted"
        np.testing.assert_array_equal(z[k], ds.read("density", level=L, covered="nan"))


def test_stores_written_before_snapshot_files_open_in_zarr():
    # Version-1 stores (a folder per snapshot, an array per level and field) still open.
    from test_store import LEGACY_STORE

    import amrzip

    z = zarr.open_array(str(LEGACY_STORE / "step_000000" / "level_1" / "density"), mode="r")
    np.testing.assert_array_equal(z[...], amrzip.open(LEGACY_STORE).read("density", level=1, covered="nan"))
