"""The ``amrzip`` command, run as a separate process exactly as a user would run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip._metrics import psnr
from roundtrip import check, requested_bound
from test_codec_api import sprinkle_nonfinite
from test_streaming import assemble, check_stream, records


def amrzip_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amrzip", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def assert_error(run: subprocess.CompletedProcess, status: int, *fragments: str):
    """A user error: the given exit status and one readable line on stderr, no traceback."""
    assert run.returncode == status, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amrzip: error: "), run.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def field() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.cumsum(rng.standard_normal((20, 30, 40)), axis=2).astype(np.float32)


@pytest.fixture
def raw(tmp_path, field) -> Path:
    path = tmp_path / "field.raw"
    field.tofile(path)
    return path


def test_raw_round_trip(tmp_path, raw, field):
    run = amrzip_cli("compress", raw, "--dtype", "f32", "--shape", "20,30,40", "--rel", "1e-3", "-o", "f.amrz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ratio" in run.stdout and "MB/s" in run.stdout and "max error" not in run.stdout
    stream = (tmp_path / "f.amrz").read_bytes()
    assert amrzip.info(stream)["shape"] == [20, 30, 40]

    run = amrzip_cli("decompress", "f.amrz", "-o", "back.raw", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    back = np.fromfile(tmp_path / "back.raw", dtype="<f4").reshape(field.shape)
    check(field, back, stream, rel=1e-3)


def test_npy_round_trip_with_default_names(tmp_path, field):
    x = field.astype(np.float64)[::2]
    np.save(tmp_path / "x.npy", x)
    run = amrzip_cli("compress", "x.npy", "--abs", "0.01", "--mode", "speed", "--threads", "1", "--verify", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "max error" in run.stdout
    stream = (tmp_path / "x.amrz").read_bytes()

    run = amrzip_cli("decompress", "x.amrz", "-o", "y.npy", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    check(x, np.load(tmp_path / "y.npy"), stream, abs=0.01)


def test_big_endian_raw(tmp_path, field):
    field.astype(">f4").tofile(tmp_path / "be.raw")
    options = ["--dtype", "float32", "--shape", "20x30x40", "--byteorder", "big", "--abs", "0.01"]
    run = amrzip_cli("compress", "be.raw", *options, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    run = amrzip_cli("decompress", "be.amrz", "-o", "back.raw", "--byteorder", "big", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    back = np.fromfile(tmp_path / "back.raw", dtype=">f4").astype(np.float32).reshape(field.shape)
    check(field, back, (tmp_path / "be.amrz").read_bytes(), abs=0.01)


def test_empty_array(tmp_path):
    (tmp_path / "e.raw").write_bytes(b"")
    assert amrzip_cli("compress", "e.raw", "--dtype", "f64", "--shape", "0,7", "--abs", "1", cwd=tmp_path).returncode == 0
    assert amrzip_cli("decompress", "e.amrz", "-o", "e.npy", cwd=tmp_path).returncode == 0
    assert np.load(tmp_path / "e.npy").shape == (0, 7)


def test_info(tmp_path, field):
    (tmp_path / "f.amrz").write_bytes(amrzip.compress(field, rel=1e-3))
    run = amrzip_cli("info", "f.amrz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    for text in ("float32", "20x30x40", "ratio", "rel 0.001", "predictor", "compressed"):
        assert text in run.stdout

    described = json.loads(amrzip_cli("info", "f.amrz", "--json", cwd=tmp_path).stdout)
    assert described == amrzip.info((tmp_path / "f.amrz").read_bytes())


@pytest.mark.parametrize(
    "target, shown",
    [(["--ratio", "20"], "ratio 20 (abs "), (["--psnr", "60"], "psnr 60 dB (abs ")],
    ids=["ratio", "psnr"],
)
def test_targets(tmp_path, raw, field, target, shown):
    run = amrzip_cli(*RAW, *target, "--verify", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert "max error" in run.stdout and shown in run.stdout
    assert ("PSNR" in run.stdout) == (target[0] == "--psnr")
    stream = (tmp_path / "field.amrz").read_bytes()
    described = amrzip.info(stream)
    assert (described["bound_mode"], described["bound"]) == (target[0][2:], float(target[1]))

    run = amrzip_cli("info", "field.amrz", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert shown in run.stdout

    assert amrzip_cli("decompress", "field.amrz", "-o", "back.npy", cwd=tmp_path).returncode == 0
    check(field, np.load(tmp_path / "back.npy"), stream, abs=described["abs_bound"])  # the bound the search chose


def test_unreachable_ratio_warns_on_one_line(tmp_path):
    np.save(tmp_path / "noise.npy", np.random.default_rng(0).standard_normal(100))
    run = amrzip_cli("compress", "noise.npy", "--ratio", "1e6", "--verify", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "max error" in run.stdout
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amrzip: warning: ratio 1e+06 is not reachable"), run.stderr


def test_demo(tmp_path):
    run = amrzip_cli("demo", "--size", "32", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("ratio") >= 2 and run.stdout.count("speed") == 2
    # The AMR part: every field of the Nyx-like hierarchy, and a region read.
    assert all(f in run.stdout for f in ("density", "x_velocity", "temp")) and "read from the store" in run.stdout


def test_installed_command():
    script = Path(sys.executable).with_name("amrzip")
    run = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("amrzip, version")


RAW = ["compress", "field.raw", "--dtype", "f32", "--shape", "20,30,40"]


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["compress", "missing.raw", "--dtype", "f32", "--shape", "4", "--rel", "1e-3"], ["missing.raw", "does not exist"]),
        (["compress", "field.raw", "--dtype", "f32", "--shape", "20,30,41", "--rel", "1e-3"], ["96000 bytes", "98400"]),
        (["compress", "field.raw", "--dtype", "f64", "--shape", "20,30,40", "--rel", "1e-3"], ["96000 bytes"]),
        (["compress", "field.raw", "--dtype", "f32", "--shape", "20,30,x", "--rel", "1e-3"], ["--shape"]),
        (["compress", "field.raw", "--dtype", "f32", "--shape", "1,2,3,4,5", "--rel", "1e-3"], ["1 to 4"]),
        (["compress", "field.raw", "--shape", "20,30,40", "--rel", "1e-3"], ["--dtype"]),
        (["compress", "field.raw", "--dtype", "int32", "--shape", "20,30,40", "--rel", "1e-3"], ["--dtype"]),
        (RAW, ["exactly one error bound"]),
        (RAW + ["--abs", "1", "--rel", "1e-3"], ["exactly one error bound"]),
        (RAW + ["--rel", "1e-3", "--ratio", "20"], ["exactly one error bound", "--ratio or --psnr"]),
        (RAW + ["--ratio", "20", "--psnr", "60"], ["exactly one error bound"]),
        (RAW + ["--ratio", "0.5"], ["--ratio", ">= 1"]),
        (RAW + ["--ratio", "inf"], ["--ratio", "finite"]),
        (RAW + ["--psnr", "0"], ["--psnr", "> 0"]),
        (RAW + ["--psnr", "-60"], ["--psnr", "> 0"]),
        (RAW + ["--psnr", "nan"], ["--psnr", "finite"]),
        (RAW + ["--psnr", "high"], ["--psnr"]),
        (RAW + ["--rel", "-1"], ["--rel", ">= 0"]),
        (RAW + ["--abs", "nan"], ["--abs", "finite"]),
        (RAW + ["--abs", "inf"], ["--abs", "finite"]),
        (RAW + ["--abs", "abc"], ["--abs"]),
        (RAW + ["--rel", "1e-3", "--mode", "fast"], ["--mode"]),
        (RAW + ["--rel", "1e-3", "--threads", "0"], ["--threads"]),
        (RAW + ["--rel", "1e-3", "-o", "field.raw"], ["overwrite the input"]),
        (["decompress", "missing.amrz"], ["does not exist"]),
        (["frobnicate"], ["No such command"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] in ("compress", "decompress", "frobnicate") else None,
)
def test_usage_errors(tmp_path, raw, args, fragments):
    assert_error(amrzip_cli(*args, cwd=tmp_path), 2, *fragments)


def test_existing_output_needs_force(tmp_path, raw):
    (tmp_path / "field.amrz").write_bytes(b"keep me")
    assert_error(amrzip_cli(*RAW, "--rel", "1e-3", cwd=tmp_path), 2, "--force")
    assert (tmp_path / "field.amrz").read_bytes() == b"keep me"
    assert amrzip_cli(*RAW, "--rel", "1e-3", "--force", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    "array, options, fragments",
    [
        (np.zeros((3, 4), np.int32), [], ["unsupported dtype int32"]),
        (np.zeros((1, 1, 1, 1, 2), np.float32), [], ["unsupported rank 5"]),
        (np.zeros((3, 4), np.float32), ["--shape", "4,3"], ["--shape 4x3 does not match"]),
        (np.zeros((3, 4), np.float32), ["--dtype", "f64"], ["--dtype float64 does not match"]),
        (np.zeros((3, 4), ">f4"), ["--byteorder", "little"], ["--byteorder little does not match"]),
    ],
    ids=["int32", "rank 5", "shape", "dtype", "byteorder"],
)
def test_npy_not_matching(tmp_path, array, options, fragments):
    np.save(tmp_path / "a.npy", array)
    assert_error(amrzip_cli("compress", "a.npy", "--rel", "1e-3", *options, cwd=tmp_path), 2, *fragments)


def test_npy_matching_options_are_accepted(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 4), ">f8"))
    run = amrzip_cli("compress", "a.npy", "--rel", "1e-3", "--dtype", "f64", "--shape", "3,4", "--byteorder", "big", cwd=tmp_path)
    assert run.returncode == 0, run.stderr


DAMAGE = {
    "truncated": lambda s: s[: len(s) // 2],
    "flipped byte": lambda s: s[:10] + bytes([s[10] ^ 0xFF]) + s[11:],
    "trailing bytes": lambda s: s + b"junk",
    "empty": lambda s: b"",
    "not amrzip": lambda s: b"not amrzip at all",
}


@pytest.mark.parametrize("command", [["decompress"], ["info"]])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_corrupt_stream(tmp_path, field, command, damage):
    (tmp_path / "bad.amrz").write_bytes(DAMAGE[damage](amrzip.compress(field, rel=1e-3)))
    assert_error(amrzip_cli(*command, "bad.amrz", cwd=tmp_path), 1, "bad.amrz", "not a valid amrzip stream")
    assert not (tmp_path / "bad.raw").exists()


def test_damaged_npy(tmp_path):
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    assert_error(amrzip_cli("compress", "bad.npy", "--rel", "1e-3", cwd=tmp_path), 1, "bad.npy")


# --- chunked streams (compress --chunk-mb) -------------------------------------------------------

# 4 rows of 30x40 float32 per slab: 20x30x40 becomes 5 records.
CHUNKED = RAW + ["--chunk-mb", str(4 * 30 * 40 * 4 / 2**20)]


@pytest.mark.parametrize(
    "bound, requested",
    [(["--rel", "1e-3"], lambda x: requested_bound(x, rel=1e-3)), (["--abs", "0.01"], lambda x: 0.01),
     (["--ratio", "10"], lambda x: None), (["--psnr", "60"], lambda x: None)],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_chunked_round_trip(tmp_path, raw, field, bound, requested):
    run = amrzip_cli(*CHUNKED, *bound, "--verify", "-o", "f.amrzs", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert "5 records" in run.stdout and "max error" in run.stdout
    assert ("PSNR" in run.stdout) == (bound[0] == "--psnr")
    stream = tmp_path / "f.amrzs"
    decoded = check_stream(field, stream, 4, abs=requested(field))
    if bound[0] == "--psnr":
        assert psnr(field, decoded) >= 60

    for name in ("back.raw", "back.npy"):
        run = amrzip_cli("decompress", "f.amrzs", "-o", name, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert "float32 20x30x40" in run.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "back.npy"), decoded)
    assert (tmp_path / "back.raw").read_bytes() == decoded.astype("<f4").tobytes()


def test_chunked_stream_is_the_library_stream(tmp_path, raw, field):
    assert amrzip_cli(*CHUNKED, "--abs", "0.01", "--threads", "1", cwd=tmp_path).returncode == 0
    with amrzip.StreamCompressor(np.float32, (4, 30, 40), abs=0.01, threads=1) as c:
        c.write(field)
        expected = c.finish()
    assert (tmp_path / "field.amrzs").read_bytes() == expected  # default name: suffix .amrzs


def test_chunked_inputs(tmp_path, field):
    """A .npy input, a big-endian raw one, and a 1-d one with NaN and infinities."""
    x = field.astype(np.float64)
    np.save(tmp_path / "x.npy", x)
    assert amrzip_cli("compress", "x.npy", "--abs", "0.01", "--chunk-mb", "0.05", cwd=tmp_path).returncode == 0
    check_stream(x, tmp_path / "x.amrzs", 5, abs=0.01)  # 0.05 MiB: 5 rows of 30x40 float64

    field.astype(">f4").tofile(tmp_path / "be.raw")
    run = amrzip_cli("compress", "be.raw", "--dtype", "f32", "--shape", "20,30,40", "--byteorder", "big",
                     "--abs", "0.01", "--chunk-mb", "0.01", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    check_stream(field, tmp_path / "be.amrzs", 2, abs=0.01)
    assert amrzip_cli("decompress", "be.amrzs", "-o", "be.npy", "--byteorder", "big", cwd=tmp_path).returncode == 0
    assert np.load(tmp_path / "be.npy").dtype == np.dtype(">f4")

    flat = sprinkle_nonfinite(field.reshape(-1))
    flat.tofile(tmp_path / "flat.raw")
    run = amrzip_cli("compress", "flat.raw", "--dtype", "f32", "--shape", flat.size, "--rel", "1e-2", "--chunk-mb", "0.01",
                     "--verify", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    check_stream(flat, tmp_path / "flat.amrzs", int(0.01 * 2**20) // 4, abs=requested_bound(flat, rel=1e-2))


def test_chunked_empty_input(tmp_path):
    (tmp_path / "e.raw").write_bytes(b"")
    run = amrzip_cli("compress", "e.raw", "--dtype", "f64", "--shape", "0,7", "--abs", "1", "--chunk-mb", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "0 records" in run.stdout
    assert amrzip_cli("decompress", "e.amrzs", "-o", "e.npy", cwd=tmp_path).returncode == 0
    assert np.load(tmp_path / "e.npy").shape == (0,)  # no record keeps the other sides
    assert "0 records" in amrzip_cli("info", "e.amrzs", cwd=tmp_path).stdout


def test_chunked_info(tmp_path, raw, field):
    assert amrzip_cli(*CHUNKED, "--ratio", "10", "-o", "f.amrzs", cwd=tmp_path).returncode == 0
    run = amrzip_cli("info", "f.amrzs", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    for text in ("chunked stream, 5 records", "float32", "20x30x40", "4x30x40", "ratio 10 (abs ", "codebooks", "kept", "compressed"):
        assert text in run.stdout

    described = json.loads(amrzip_cli("info", "f.amrzs", "--json", cwd=tmp_path).stdout)
    size = (tmp_path / "f.amrzs").stat().st_size
    assert (described["records"], described["shape"], described["chunk_shape"]) == (5, [20, 30, 40], [4, 30, 40])
    assert (described["bound_mode"], described["bound"]) == ("ratio", 10)
    assert (described["compressed_size"], described["original_size"]) == (size, field.nbytes)
    assert described["ratio"] == pytest.approx(field.nbytes / size)
    assert sum(described["codebooks"].values()) == sum(described["records_per_predictor"].values()) == 5
    lo, hi = described["abs_bound_range"]
    assert 0 < lo <= hi


@pytest.mark.parametrize(
    "args, fragments",
    [
        (CHUNKED + ["--rel", "1e-3", "--chunk-mb", "0"], ["--chunk-mb", "> 0"]),
        (CHUNKED + ["--rel", "1e-3", "--chunk-mb", "-1"], ["--chunk-mb", "> 0"]),
        (CHUNKED + ["--rel", "1e-3", "--chunk-mb", "nan"], ["--chunk-mb", "finite"]),
        (CHUNKED + ["--rel", "1e-3", "--chunk-mb", "big"], ["--chunk-mb"]),
        (CHUNKED, ["exactly one error bound"]),
        (["compress", "field.raw", "--dtype", "f32", "--shape", "20,30,41", "--abs", "1", "--chunk-mb", "1"], ["96000 bytes"]),
        (["compress", "field.raw", "--abs", "1", "--chunk-mb", "1"], ["--dtype"]),
    ],
    ids=lambda v: " ".join(v[3:]) if isinstance(v, list) else None,
)
def test_chunked_usage_errors(tmp_path, raw, args, fragments):
    assert_error(amrzip_cli(*args, cwd=tmp_path), 2, *fragments)
    assert not (tmp_path / "field.amrzs").exists()


@pytest.mark.parametrize(
    "array, fragments",
    [(np.zeros((3, 4), ">f4"), ["native byte order"]), (np.asfortranarray(np.zeros((3, 4), np.float32)), ["C-order"]),
     (np.zeros((3, 4), np.int32), ["unsupported dtype int32"])],
    ids=["big-endian", "fortran order", "int32"],
)
def test_chunked_npy_refused(tmp_path, array, fragments):
    np.save(tmp_path / "a.npy", array)
    assert_error(amrzip_cli("compress", "a.npy", "--abs", "1", "--chunk-mb", "1", cwd=tmp_path), 2, *fragments)


def test_chunked_existing_output_needs_force(tmp_path, raw):
    (tmp_path / "field.amrzs").write_bytes(b"keep me")
    assert_error(amrzip_cli(*CHUNKED, "--abs", "1", cwd=tmp_path), 2, "--force")
    assert (tmp_path / "field.amrzs").read_bytes() == b"keep me"
    assert amrzip_cli(*CHUNKED, "--abs", "1", "--force", cwd=tmp_path).returncode == 0
    assert (tmp_path / "field.amrzs").read_bytes()[:4] == b"AMRS"


CHUNKED_DAMAGE = dict(DAMAGE, **{
    "end block": lambda s: s[:-3] + bytes([s[-3] ^ 1]) + s[-2:],
    "last record": lambda s: s[:-40] + bytes([s[-40] ^ 1]) + s[-39:],
    "records swapped": lambda s: assemble(s, [records(s)[1], records(s)[0], *records(s)[2:]]),
    "magic only": lambda s: s[:4],
})


@pytest.mark.parametrize("command", [["decompress"], ["decompress", "-o", "bad.npy"], ["info"]])
@pytest.mark.parametrize("damage", list(CHUNKED_DAMAGE))
def test_corrupt_chunked_stream(tmp_path, field, command, damage):
    with amrzip.StreamCompressor(np.float32, (4, 30, 40), abs=0.01) as c:
        c.write(field)
        stream = c.finish()
    (tmp_path / "bad.amrzs").write_bytes(CHUNKED_DAMAGE[damage](stream))
    assert_error(amrzip_cli(*command, "bad.amrzs", cwd=tmp_path), 1, "bad.amrzs", "not a valid amrzip stream")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.amrzs"]  # no output, not even a partial one


# 200 MB of input; and its compressed stream, and its decompressed copy.
BIG_ROWS, BIG_SIDE = 800, 256
BIG_BYTES = BIG_ROWS * BIG_SIDE * BIG_SIDE * 4
MEASURE = """
import json, resource, subprocess, sys
run = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps([run.returncode, run.stdout, run.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def peak_rss_mb(*args, cwd: Path, env=None) -> tuple[float, str, str]:
    """Runs the amrzip command from a fresh process whose only child it is, so that the peak
    resident set size of its children is that of the command alone. Returns it, stdout, stderr."""
    run = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "amrzip", *map(str, args)],
                         cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    status, stdout, stderr, kb = json.loads(run.stdout)
    assert status == 0, stderr
    return kb / 1024, stdout, stderr


@pytest.mark.skipif(shutil.disk_usage(tempfile.gettempdir()).free < 3 * BIG_BYTES, reason="no room for 600 MB in the temporary directory")
def test_chunked_memory_stays_bounded(tmp_path):
    rng = np.random.default_rng(0)
    plane = np.sin(np.linspace(0, 3, BIG_SIDE))[:, None] + np.cos(np.linspace(0, 6, BIG_SIDE))[None, :]
    with open(tmp_path / "big.raw", "wb") as f:
        for start in range(0, BIG_ROWS, 50):
            k = np.arange(start, start + 50)[:, None, None]
            slab = plane * np.cos(k / 40) + 0.01 * rng.standard_normal((50, BIG_SIDE, BIG_SIDE))
            slab.astype(np.float32).tofile(f)
    baseline, _, _ = peak_rss_mb("--help", cwd=tmp_path)
    # FORCE_COLOR makes rich take stderr for a terminal: the progress bars are drawn too.
    env = dict(os.environ, FORCE_COLOR="1")
    shape = f"{BIG_ROWS},{BIG_SIDE},{BIG_SIDE}"
    compress, out, err = peak_rss_mb("compress", "big.raw", "--dtype", "f32", "--shape", shape, "--rel", "1e-3", "--chunk-mb", 4,
                                     "-o", "big.amrzs", cwd=tmp_path, env=env)
    assert "50 records" in out and "scanning big.raw" in err and "compressing big.raw" in err
    decompress, out, err = peak_rss_mb("decompress", "big.amrzs", "-o", "back.npy", cwd=tmp_path, env=env)
    assert "float32 800x256x256" in out and "decompressing big.amrzs" in err
    print(f"peak RSS: --help {baseline:.0f} MB, compress {compress:.0f} MB, decompress {decompress:.0f} MB")
    assert compress - baseline < 100 and decompress - baseline < 100
    back = np.load(tmp_path / "back.npy", mmap_mode="r")
    assert back.shape == (BIG_ROWS, BIG_SIDE, BIG_SIDE)
