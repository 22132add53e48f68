"""HDF5 and zarr benchmark: amrzip's HDF5 filter and zarr codec against hdf5plugin's SZ3, ZFP and SZ and numcodecs Zstd.

Every field is written to a real file (HDF5) or store (zarr format 2) in a temporary folder, closed, and read back by
a fresh open; ratios come from the stored chunk bytes, errors from the data read back.  See benches/README.md.

    .venv/bin/python benches/hdf5_bench.py --json benches/data/hdf5.json   # full run
    .venv/bin/python benches/hdf5_bench.py --quick --repeat 1              # smoke run on cropped fields
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import codec_bench  # noqa: E402
from codec_bench import _errors, _load, _timed, load_fields, write_json  # noqa: E402
from report import fmt, geomean, markdown_table  # noqa: E402

BOUNDS = codec_bench.BOUNDS
# Tiled chunking: 64^3 for the cubes (1 MiB of float32).  For 2-D, 300x600 (0.72 MB): it divides both 1800x3600 and
# the --quick crop 900x1800, so no chunk is padded (edge chunks would be padded with zeros, which costs every codec).
TILE_3D, TILE_2D = (64, 64, 64), (300, 600)
CHUNKINGS = ["whole", "tiled"]
# amrzip-speed (mode="speed") is not in the criteria; it shows what the ratio mode's predictor search costs per chunk.
HDF5_CODECS = ["amrzip", "amrzip-speed", "sz3", "zfp", "sz"]
REFERENCE = {"hdf5": "none", "zarr": "zstd"}  # lossless references, run once per (field, chunking)
NEED_SHARE = 0.8  # acceptance: ratio >= SZ3's on >= 80% of (field, bound) cases


def chunks_for(shape: tuple[int, ...], chunking: str) -> tuple[int, ...]:
    if chunking == "whole":
        return tuple(shape)
    tile = TILE_3D if len(shape) == 3 else TILE_2D
    return tuple(min(t, s) for t, s in zip(tile, shape))


def _chunk_label(chunks) -> str:
    return "x".join(map(str, chunks))


# --- codecs -----------------------------------------------------------------------------------------------------
# An HDF5 codec maps the absolute bound to create_dataset kwargs; a zarr codec to a numcodecs compressor.


def hdf5_codecs() -> dict[str, Callable[[float], dict]]:
    import hdf5plugin  # registers its filters with h5py's HDF5

    import amrzip.hdf5

    return {
        "amrzip": lambda eb: dict(amrzip.hdf5.Filter(abs=eb)),
        "amrzip-speed": lambda eb: dict(amrzip.hdf5.Filter(abs=eb, mode="speed")),
        "sz3": lambda eb: dict(hdf5plugin.SZ3(absolute=eb)),
        "zfp": lambda eb: dict(hdf5plugin.Zfp(accuracy=eb)),
        "sz": lambda eb: dict(hdf5plugin.SZ(absolute=eb)),
        "none": lambda eb: {},
    }


def import_numcodecs():
    """numcodecs, working around numcodecs <= 0.17.1 failing to import next to zfpy 1.0.1.post0.

    numcodecs/zfpy.py parses zfpy's version with int() on every dotted part, so 'post0' raises ValueError and takes
    the whole package down.  Hiding zfpy's version while numcodecs imports only disables numcodecs' ZFPY codec, which
    nothing here uses; zfpy itself and the rest of the environment are untouched.
    """
    try:
        import numcodecs
    except ValueError as e:
        if "post0" not in str(e):
            raise
        import importlib.metadata as md

        for m in [m for m in sys.modules if m == "numcodecs" or m.startswith("numcodecs.")]:
            del sys.modules[m]  # drop the half-imported package before trying again
        real = md.version

        def version(name):
            if name == "zfpy":
                raise md.PackageNotFoundError(name)
            return real(name)

        md.version = version  # numcodecs.zfpy binds it with `from importlib.metadata import version`
        try:
            import numcodecs
        finally:
            md.version = real
        print(f"note: numcodecs {numcodecs.__version__} cannot parse zfpy's version ({e}); "
              "imported with its ZFPY codec disabled", file=sys.stderr)
    return numcodecs


def zarr_codecs() -> dict[str, Callable[[float], object]]:
    numcodecs = import_numcodecs()
    import zarr  # noqa: F401  (imports numcodecs, so only after the workaround)

    import amrzip.zarr

    return {
        "amrzip": lambda eb: amrzip.zarr.Codec(abs=eb),
        "zstd": lambda eb: numcodecs.Zstd(level=3),  # level 3 as in codec_bench.py
    }


# --- measurement ------------------------------------------------------------------------------------------------


@dataclass
class Result:
    part: str  # "hdf5" or "zarr"
    field: str
    chunking: str
    chunks: list[int]
    bound: float | None  # value-range relative bound; None for the lossless references
    codec: str
    shape: list[int]
    abs_bound: float = 0.0
    nbytes: int = 0
    stored_bytes: int = 0  # chunk bytes only (dataset storage size / chunk files), no metadata
    file_bytes: int = 0  # the whole file or store folder
    ratio: float = float("nan")
    max_err: float = float("nan")
    err_over_bound: float = float("nan")
    psnr: float = float("nan")
    violation: bool = False
    raw_chunks: int = 0  # HDF5 chunks the (optional) filter left uncompressed
    n_chunks: int = 0
    w_mbs: float = float("nan")
    r_mbs: float = float("nan")
    error: str | None = None
    w_times: list[float] = field(default_factory=list)
    r_times: list[float] = field(default_factory=list)


def _folder_bytes(path: Path) -> tuple[int, int]:
    """(chunk bytes, all bytes) of a zarr format 2 store: metadata files start with a dot."""
    chunk = total = 0
    for p in path.rglob("*"):
        if p.is_file():
            n = p.stat().st_size
            total += n
            chunk += 0 if p.name.startswith(".") else n
    return chunk, total


def _score(r: Result, arr: np.ndarray, out: np.ndarray, lossless: bool) -> None:
    r.max_err, mse = _errors(arr, out)
    vrange = float(arr.max()) - float(arr.min())
    r.psnr = float("inf") if mse == 0 else (20 * math.log10(vrange) - 10 * math.log10(mse) if vrange > 0 else float("nan"))
    eb = r.abs_bound
    r.err_over_bound = r.max_err / eb if eb > 0 else (0.0 if r.max_err == 0 else float("inf"))
    r.violation = not r.max_err <= (0.0 if lossless else eb)  # NaN counts as a violation


def run_hdf5(r: Result, arr: np.ndarray, kwargs: dict, repeat: int, tmp: Path) -> None:
    import h5py

    path = tmp / f"{r.codec}.h5"

    def write():  # the whole file: create, write, close
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=arr, chunks=tuple(r.chunks), **kwargs)

    def read():  # a fresh open every time, so nothing comes from h5py's chunk cache
        with h5py.File(path, "r") as f:
            return f["data"][...]

    mb = arr.nbytes / 1e6
    try:
        tw, r.w_times, _ = _timed(write, repeat)
        tr, r.r_times, out = _timed(read, repeat)
        r.w_mbs, r.r_mbs = mb / tw, mb / tr
        with h5py.File(path, "r") as f:
            ds = f["data"]
            r.stored_bytes = ds.id.get_storage_size()
            r.n_chunks = ds.id.get_num_chunks()
            # h5py adds filters as optional: a chunk the filter fails on is stored raw without an error.
            if kwargs:
                r.raw_chunks = sum(ds.id.get_chunk_info(i).filter_mask != 0 for i in range(r.n_chunks))
        r.file_bytes = path.stat().st_size
        r.ratio = arr.nbytes / r.stored_bytes
        _score(r, arr, out, lossless=not kwargs)
    except Exception as e:  # one failing codec must not hide the others' numbers
        r.error = f"{type(e).__name__}: {e}"
    finally:
        path.unlink(missing_ok=True)


def run_zarr(r: Result, arr: np.ndarray, compressor, repeat: int, tmp: Path) -> None:
    import zarr
    from zarr.storage import LocalStore

    written: list[Path] = []

    def write():  # a new store folder every time, as a new file would be
        path = tmp / f"{r.codec}-{len(written)}.zarr"
        written.append(path)
        a = zarr.create_array(store=LocalStore(path), shape=arr.shape, chunks=tuple(r.chunks), dtype=arr.dtype,
                              zarr_format=2, compressors=compressor, filters=None)
        a[...] = arr

    def read():
        return zarr.open_array(store=LocalStore(written[-1], read_only=True), mode="r")[...]

    mb = arr.nbytes / 1e6
    try:
        tw, r.w_times, _ = _timed(write, repeat)
        tr, r.r_times, out = _timed(read, repeat)
        r.w_mbs, r.r_mbs = mb / tw, mb / tr
        r.stored_bytes, r.file_bytes = _folder_bytes(written[-1])
        r.n_chunks = math.prod(math.ceil(s / c) for s, c in zip(arr.shape, r.chunks))
        r.ratio = arr.nbytes / r.stored_bytes
        _score(r, arr, out, lossless=r.codec == REFERENCE["zarr"])
    except Exception as e:
        r.error = f"{type(e).__name__}: {e}"
    finally:
        for p in written:
            shutil.rmtree(p, ignore_errors=True)


def warm_up(parts, hdf5: dict, zarr_: dict, tmp: Path) -> None:
    """Loads every plugin and starts the thread pools before anything is timed (the first write pays for it)."""
    a = np.linspace(0, 1, 32**3, dtype=np.float32).reshape(32, 32, 32)
    for name, make in hdf5.items() if "hdf5" in parts else ():
        run_hdf5(Result("hdf5", "warm-up", "-", [16] * 3, 1e-3, name, list(a.shape), abs_bound=1e-3), a, make(1e-3), 1, tmp)
    for name, make in zarr_.items() if "zarr" in parts else ():
        run_zarr(Result("zarr", "warm-up", "-", [16] * 3, 1e-3, name, list(a.shape), abs_bound=1e-3), a, make(1e-3), 1, tmp)


# --- reporting --------------------------------------------------------------------------------------------------


def _eob(r: Result) -> str:
    # a violation gets enough digits to show its size (float32 rounding of eb shows up as 1.0000000x)
    return fmt(r.err_over_bound, ".9f" if r.violation else ".3f") + (" !!VIOLATION" if r.violation else "")


def results_table(results: list[Result], part: str) -> str:
    rows = []
    for r in results:
        if r.part != part:
            continue
        head = [r.field, _chunk_label(r.chunks), "-" if r.bound is None else f"{r.bound:g}", r.codec]
        if r.error:
            rows.append(head + [f"ERROR {r.error}"[:70]] + [""] * 4)
            continue
        note = f" ({r.raw_chunks}/{r.n_chunks} chunks raw)" if r.raw_chunks else ""
        rows.append(head + [fmt(r.ratio) + note, _eob(r), fmt(r.psnr, ".1f"), fmt(r.w_mbs, ".0f"), fmt(r.r_mbs, ".0f")])
    return markdown_table(["field", "chunks", "bound", "codec", "ratio", "maxerr/eb", "PSNR dB", "W MB/s", "R MB/s"], rows)


def summarize(results: list[Result], full: bool, threads_note: str) -> tuple[str, dict]:
    ok = {(r.part, r.field, r.chunking, r.bound, r.codec): r for r in results if r.error is None}
    summ: dict = {"hdf5_cases": [], "criteria": {}, "zarr": {}}
    out: list[str] = []

    # HDF5, ours against SZ3 on the same chunks and bound.
    cases = list(dict.fromkeys((r.chunking, r.field, r.bound) for r in results if r.part == "hdf5" and r.bound is not None))
    rows, vs = [], []  # vs: (chunking, ratio, write, read), each ours/SZ3
    for c, f, b in cases:
        ours, sz3 = ok.get(("hdf5", f, c, b, "amrzip")), ok.get(("hdf5", f, c, b, "sz3"))
        zfp, sz = ok.get(("hdf5", f, c, b, "zfp")), ok.get(("hdf5", f, c, b, "sz"))
        q = (ours.ratio / sz3.ratio, ours.w_mbs / sz3.w_mbs, ours.r_mbs / sz3.r_mbs) if ours and sz3 else None
        if q:
            vs.append((c, *q))
        summ["hdf5_cases"].append({"chunking": c, "field": f, "bound": b, "amrzip": ours and ours.ratio,
                                   "sz3": sz3 and sz3.ratio, "zfp": zfp and zfp.ratio, "sz": sz and sz.ratio,
                                   "ratio_vs_sz3": q and q[0], "write_vs_sz3": q and q[1], "read_vs_sz3": q and q[2]})
        rows.append([f, _chunk_label(ours.chunks if ours else sz3.chunks if sz3 else []), f"{b:g}",
                     *(fmt(x and x.ratio) for x in (ours, sz3, zfp, sz)),
                     *([fmt(q[0], ".3f"), "win" if q[0] >= 1 else "loss", fmt(q[1]), fmt(q[2])] if q else ["-"] * 4)])
    out += ["## HDF5 summary: amrzip against hdf5plugin SZ3 on the same chunks and absolute bound", "",
            markdown_table(["field", "chunks", "bound", "amrzip", "SZ3", "ZFP", "SZ", "ratio ours/SZ3", "", "write ours/SZ3",
                    "read ours/SZ3"], rows), ""]

    crit = summ["criteria"]
    lines = [f"## Acceptance criteria (issue 4: HDF5, amrzip against SZ3, {len(vs)} chunking x field x bound cases)", ""]
    if not full:
        lines += ["(partial run: the criteria are defined on the full 4 fields x 4 bounds x 2 chunkings, uncropped)", ""]
    lines += [f"Throughput as each filter ships: {threads_note}.", ""]

    def verdict(key, desc, passed, detail):
        state = "N/A" if passed is None else ("PASS" if passed else "FAIL")
        crit[key] = {"status": state, "detail": detail}
        lines.append(f"- **{state}** {desc}: {detail}")

    parts, passes = [], []
    for c in [*dict.fromkeys(v[0] for v in vs), None]:
        qs = [v[1] for v in vs if c is None or v[0] == c]
        wins, need = sum(q >= 1 for q in qs), math.ceil(NEED_SHARE * len(qs))
        passes.append(wins >= need)
        parts.append(f"{c or 'overall'} {wins}/{len(qs)} (need {need}, geomean {fmt(geomean(qs), '.3f')})")
    verdict("2_ratio_vs_sz3", "(2) ratio >= SZ3's on >= 80% of field x bound cases, per chunking and overall",
            all(passes) if vs else None, "; ".join(parts))
    ours_all = [r for r in results if r.codec.startswith("amrzip") and r.error is None]
    bad = [r for r in ours_all if r.violation]
    verdict("2_no_violations", "(2) no amrzip bound violation (HDF5 and zarr, max |x - x'| <= rel * (max - min))",
            not bad if ours_all else None, f"{len(bad)} of {len(ours_all)}" + "".join(
                f"; {r.part} {r.field} {r.chunking} {r.bound:g} {r.err_over_bound:.9f}x" for r in bad))
    gw, gr = geomean([v[2] for v in vs]), geomean([v[3] for v in vs])
    per = "; ".join(f"{c}: write {fmt(geomean([v[2] for v in vs if v[0] == c]))}x, read "
                    f"{fmt(geomean([v[3] for v in vs if v[0] == c]))}x" for c in dict.fromkeys(v[0] for v in vs))
    verdict("2_throughput_vs_sz3", "(2) HDF5 write and read MB/s >= SZ3's (geomean over all cases)",
            (gw >= 1 and gr >= 1) if vs else None, f"write {fmt(gw)}x, read {fmt(gr)}x ({per})")
    summ.update(hdf5_write_vs_sz3=gw, hdf5_read_vs_sz3=gr)
    for peer in ("zfp", "sz"):  # informational
        q = [ok[k].ratio / ok[(*k[:4], peer)].ratio for k in ok
             if k[0] == "hdf5" and k[4] == "amrzip" and (*k[:4], peer) in ok]
        if q:
            lines.append(f"- info: ratio ours/{peer.upper()} geomean {fmt(geomean(q), '.3f')}, wins {sum(x >= 1 for x in q)}/{len(q)}")
    pairs = [(r, ok[(*k[:4], "sz3")]) for k, r in ok.items()
             if k[0] == "hdf5" and k[4] == "amrzip-speed" and (*k[:4], "sz3") in ok]
    for c in dict.fromkeys(r.chunking for r, _ in pairs):
        q = [(r.ratio / s.ratio, r.w_mbs / s.w_mbs, r.r_mbs / s.r_mbs) for r, s in pairs if r.chunking == c]
        lines.append(f"- info: amrzip-speed/SZ3 {c}: ratio geomean {fmt(geomean([x[0] for x in q]), '.3f')} "
                     f"(wins {sum(x[0] >= 1 for x in q)}/{len(q)}), write {fmt(geomean([x[1] for x in q]))}x, "
                     f"read {fmt(geomean([x[2] for x in q]))}x")
    out += lines

    # zarr, ours against lossless Zstd: no criterion, the numbers only.
    zcases = list(dict.fromkeys((r.chunking, r.field) for r in results if r.part == "zarr"))
    if zcases:
        rows = []
        for c, f in zcases:
            zstd = ok.get(("zarr", f, c, None, "zstd"))
            ours = [r for r in results if r.part == "zarr" and r.codec == "amrzip" and (r.chunking, r.field) == (c, f)
                    and r.error is None]
            for r in ours:
                rows.append([f, _chunk_label(r.chunks), f"{r.bound:g}", fmt(r.ratio), fmt(zstd and zstd.ratio),
                             fmt(zstd and r.ratio / zstd.ratio, ".1f"), fmt(zstd and r.w_mbs / zstd.w_mbs),
                             fmt(zstd and r.r_mbs / zstd.r_mbs)])
        out += ["", "## zarr summary (format 2): amrzip.zarr.Codec against numcodecs Zstd(level=3), lossless", "",
                markdown_table(["field", "chunks", "bound", "amrzip", "Zstd", "ratio ours/Zstd", "write ours/Zstd",
                        "read ours/Zstd"], rows)]

    viol: dict[str, list[int]] = {}
    for r in results:
        if r.error is None:
            v = viol.setdefault(f"{r.part}/{r.codec}", [0, 0])
            v[0] += r.violation
            v[1] += 1
    out += ["", "## Bound violations (max |x - x'| > rel * (max - min), float64; references must be exact)", ""]
    out += [f"- {k}: {v}/{n}" + ("  !!! VIOLATIONS" if v else "") for k, (v, n) in viol.items()]
    raw = [r for r in results if r.raw_chunks]
    if raw:
        out += ["", "## Chunks stored uncompressed (the optional filter failed on them)", ""]
        out += [f"- {r.codec} {r.field} {_chunk_label(r.chunks)} {r.bound:g}: {r.raw_chunks}/{r.n_chunks}" for r in raw]
    errors = [r for r in results if r.error]
    if errors:
        out += ["", f"## Errors ({len(errors)})", ""]
        out += [f"- {r.part} {r.field} {r.chunking} {r.bound} {r.codec}: {r.error}" for r in errors]
    summ["violations"] = viol
    return "\n".join(out), summ


# --- main -------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fields", help="comma list of synthetic fields; default all four")
    p.add_argument("--bounds", default=",".join(f"{b:g}" for b in BOUNDS), help="comma list of value-range relative bounds")
    p.add_argument("--codecs", default=",".join(HDF5_CODECS),
                   help=f"comma list of HDF5 codecs (default {','.join(HDF5_CODECS)}); uncompressed always runs")
    p.add_argument("--parts", default="hdf5,zarr", help="hdf5, zarr or both (default)")
    p.add_argument("--chunkings", default=",".join(CHUNKINGS), help="whole, tiled or both (default)")
    p.add_argument("--repeat", type=int, default=3, help="timed writes and reads per case (default 3), reduced by --stat")
    p.add_argument("--stat", choices=["median", "min"], default="median", help="how the timings are reduced")
    p.add_argument("--threads", type=int, help="amrzip threads (RAYON_NUM_THREADS); default all cores")
    p.add_argument("--quick", action="store_true", help="crop fields to half size per axis (128^3, 900x1800)")
    p.add_argument("--tmpdir", type=Path, help="where files are written (default: the system temp folder)")
    p.add_argument("--json", type=Path, help="write raw results and summary to this path")
    args = p.parse_args(argv)

    if args.threads:  # read by rayon when amrzip's pools start, in both the extension and the plugin
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    codec_bench.STAT = min if args.stat == "min" else statistics.median  # what _timed reduces with
    names = args.fields.split(",") if args.fields else None
    bounds = [float(b) for b in args.bounds.split(",")]
    parts = args.parts.split(",")
    chunkings = args.chunkings.split(",")
    fields = load_fields(names, args.quick, real=False)
    if not fields:
        p.error("no fields selected")

    import h5py
    import hdf5plugin

    all_hdf5 = hdf5_codecs()
    hdf5 = {n: all_hdf5[n] for n in [*args.codecs.split(","), "none"] if n in all_hdf5}
    zarr_ = zarr_codecs() if "zarr" in parts else {}
    zarr_version = sys.modules["zarr"].__version__ if zarr_ else "not run"  # imported only after the numcodecs fix

    omp = hdf5plugin.get_config().build_config.openmp
    print(f"# amrzip HDF5 and zarr benchmark\n\n{platform.node()} | {platform.processor() or platform.machine()} | "
          f"{os.cpu_count()} cores | h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}) | hdf5plugin "
          f"{hdf5plugin.version} (OpenMP {'on' if omp else 'off'}) | zarr {zarr_version} | repeat {args.repeat} "
          f"({args.stat}) | amrzip threads {args.threads or f'all ({os.cpu_count()})'}"
          f"{' | QUICK (cropped fields)' if args.quick else ''} | load average at start {_load()}\n")
    print(f"Chunkings: whole = one chunk per field; tiled = {_chunk_label(TILE_3D)} (3-D), {_chunk_label(TILE_2D)} "
          "(2-D).  Bounds: abs = rel * (max - min) of the whole field, the same for every codec.  zarr: format 2, "
          "LocalStore, compressor= (no filters).\n")

    results: list[Result] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="amrzip-hdf5-bench-", dir=args.tmpdir) as tmpname:
        tmp = Path(tmpname)
        warm_up(parts, hdf5, zarr_, tmp)
        for part in [x for x in ("hdf5", "zarr") if x in parts]:
            codecs, run = (hdf5, run_hdf5) if part == "hdf5" else (zarr_, run_zarr)
            for name, arr in fields:
                lo, hi = float(arr.min()), float(arr.max())
                for chunking in chunkings:
                    chunks = list(chunks_for(arr.shape, chunking))
                    ref = REFERENCE[part]
                    # the lossless reference once, then every lossy codec at every bound
                    jobs = [(None, ref)] + [(rel, c) for rel in bounds for c in codecs if c != ref]
                    for rel, codec in jobs:
                        eb = 0.0 if rel is None else rel * (hi - lo)
                        r = Result(part, name, chunking, chunks, rel, codec, list(arr.shape), abs_bound=eb,
                                   nbytes=arr.nbytes)
                        run(r, arr, codecs[codec](eb), args.repeat, tmp)
                        results.append(r)
                        status = r.error or (f"ratio {r.ratio:9.2f}  err/eb {r.err_over_bound:.3f}  W {r.w_mbs:7.1f} MB/s"
                                             f"  R {r.r_mbs:7.1f} MB/s" + ("  !!VIOLATION" if r.violation else "")
                                             + (f"  {r.raw_chunks} raw chunks" if r.raw_chunks else ""))
                        print(f"  {part:4s} {name:13s} {chunking:5s} {'-' if rel is None else f'{rel:g}':6s} {codec:7s} "
                              f"{status}", file=sys.stderr, flush=True)

    full = (not args.quick and len(fields) == 4 and sorted(bounds) == sorted(BOUNDS)
            and sorted(chunkings) == sorted(CHUNKINGS))
    for part, title in (("hdf5", "HDF5 (h5py + hdf5plugin)"), ("zarr", "zarr format 2")):
        if part in parts:
            print(f"## Results: {title}\n")
            print(results_table(results, part))
            print()
    threads_note = (f"amrzip on {args.threads or os.cpu_count()} thread(s), hdf5plugin's filters on "
                    f"{'OpenMP threads' if omp else 'one thread (built without OpenMP)'}")
    text, summary = summarize(results, full, threads_note)
    print(text)
    print(f"\n(total benchmark time {time.perf_counter() - t_start:.0f} s; load average at end {_load()}: "
          f"timings are only meaningful on an otherwise idle machine)")
    if args.json:
        meta = {"argv": sys.argv[1:], "host": platform.node(), "cpus": os.cpu_count(), "numpy": np.__version__,
                "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version, "hdf5plugin": hdf5plugin.version,
                "hdf5plugin_openmp": omp, "zarr": zarr_version, "threads": args.threads, "loadavg_end": _load(),
                "quick": args.quick, "repeat": args.repeat, "stat": args.stat, "tile_3d": TILE_3D, "tile_2d": TILE_2D}
        write_json(args.json, meta, results, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
