"""Codec benchmark: amrzip against SZ3 (pysz), ZFP (zfpy) and zstd on synthetic and real AMR fields.

Every error is measured here (max |x - x'| in float64), never taken from a library.  See benches/README.md.

    .venv/bin/python benches/codec_bench.py                      # full run, markdown tables on stdout
    .venv/bin/python benches/codec_bench.py --quick --repeat 1   # smoke run on cropped fields
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

# OpenBLAS's worker threads spin for a while after numpy starts them, on cores the codecs'
# own threads need; the benchmark uses no BLAS, so it keeps numpy to one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets  # noqa: E402
from report import fmt, geomean, markdown_table  # noqa: E402

BOUNDS = [1e-2, 1e-3, 1e-4, 1e-5]

# --- codecs ---------------------------------------------------------------------------------------------------
# A codec is compress(arr, rel, abs_bound, threads) -> bytes-like and decompress(blob, shape, dtype, threads) -> array.
# threads=1 is the single-thread number; threads=None means "all cores" and only amrzip honours it.


@dataclass
class Codec:
    name: str
    compress: Callable
    decompress: Callable
    multithread: bool = False  # also measure threads=None
    lossless: bool = False  # any error at all is a violation


def _sz3_codec(algo_name: str, algo: int) -> Codec:
    from pysz import sz, szAlgorithm, szConfig, szErrorBoundMode  # noqa: F401

    def compress(arr, rel, abs_bound, threads):
        conf = szConfig()
        conf.errorBoundMode = szErrorBoundMode.REL  # SZ3's REL is relative to the value range, like ours
        conf.relErrorBound = rel
        conf.cmprAlgo = algo
        conf.openmp = False  # single-thread numbers (also stored in the stream, so decompression is serial too)
        blob, _ = sz.compress(arr, conf)
        return blob

    def decompress(blob, shape, dtype, threads):
        out, _ = sz.decompress(blob, dtype, shape)
        return out

    return Codec(f"sz3-{algo_name}", compress, decompress)


def _zfp_codec() -> Codec:
    import zfpy

    return Codec("zfp",
                 lambda arr, rel, abs_bound, threads: zfpy.compress_numpy(arr, tolerance=abs_bound),
                 lambda blob, shape, dtype, threads: zfpy.decompress_numpy(blob))


def _zstd_codec() -> Codec:
    import zstandard

    cctx, dctx = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
    return Codec("zstd",
                 lambda arr, rel, abs_bound, threads: cctx.compress(arr.tobytes()),  # lossless: bounds ignored
                 lambda blob, shape, dtype, threads: np.frombuffer(dctx.decompress(blob), dtype=dtype).reshape(shape),
                 lossless=True)


def _amrzip_codec(mode: str) -> Codec:
    import amrzip

    return Codec(f"amrzip-{mode}",
                 lambda arr, rel, abs_bound, threads: amrzip.compress(arr, rel=rel, mode=mode, threads=threads),
                 lambda blob, shape, dtype, threads: amrzip.decompress(blob, threads=threads),
                 multithread=True)


def available_codecs() -> dict[str, Codec]:
    from pysz import szAlgorithm

    codecs = {}
    try:
        import amrzip  # noqa: F401

        codecs["amrzip-ratio"] = _amrzip_codec("ratio")
        codecs["amrzip-speed"] = _amrzip_codec("speed")
    except ImportError as e:
        print(f"note: `import amrzip` failed ({e}); running peer codecs only\n")
    for algo_name, algo in [("interp_lorenzo", szAlgorithm.INTERP_LORENZO), ("interp", szAlgorithm.INTERP),
                            ("lorenzo_reg", szAlgorithm.LORENZO_REG)]:
        codecs[f"sz3-{algo_name}"] = _sz3_codec(algo_name, algo)
    for name, make in (("zfp", _zfp_codec), ("zstd", _zstd_codec)):
        try:
            codecs[name] = make()
        except ImportError as e:
            print(f"note: {name} skipped ({e}; pip install -r benches/requirements.txt)\n")
    return codecs


SZ3_DEFAULT = "sz3-interp_lorenzo"
SZ3_ALL = ["sz3-interp_lorenzo", "sz3-interp", "sz3-lorenzo_reg"]


def select_codecs(spec: str | None, codecs: dict[str, Codec]) -> list[Codec]:
    """Comma list of codec names or group prefixes ('amrzip', 'sz3'); None means all."""
    if not spec:
        return list(codecs.values())
    chosen = []
    for want in spec.split(","):
        hits = [c for n, c in codecs.items() if n == want or n.startswith(want + "-")]
        if not hits:
            print(f"note: codec {want!r} not available (have: {', '.join(codecs)})")
        chosen += [c for c in hits if c not in chosen]
    return chosen


# --- measurement ----------------------------------------------------------------------------------------------


@dataclass
class Result:
    field: str
    bound: float  # value-range relative bound
    codec: str
    shape: list[int]
    dtype: str
    abs_bound: float = 0.0
    nbytes: int = 0
    compressed_bytes: int = 0
    ratio: float = float("nan")
    max_err: float = float("nan")
    err_over_bound: float = float("nan")
    psnr: float = float("nan")
    violation: bool = False
    c_mbs: float = float("nan")  # single thread, MB = 1e6 bytes of original data
    d_mbs: float = float("nan")
    c_mbs_mt: float | None = None  # all threads (amrzip only)
    d_mbs_mt: float | None = None
    error: str | None = None
    c_times: list[float] = field(default_factory=list)
    d_times: list[float] = field(default_factory=list)


STAT = statistics.median  # --stat min is steadier when other jobs share the cores


def _timed(fn: Callable, repeat: int) -> tuple[float, list[float], object]:
    # One untimed call first, for every codec alike: a process's first calls also pay for
    # growing its allocator's heap and starting thread pools, which steady use does not.
    out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return STAT(times), times, out


def _errors(arr: np.ndarray, out) -> tuple[float, float]:
    """(max abs error, MSE) in float64; a wrong shape or dtype is an error, not a number."""
    out = np.asarray(out)
    if out.shape != arr.shape or out.dtype != arr.dtype:
        raise ValueError(f"decompressed {out.dtype}{out.shape}, expected {arr.dtype}{arr.shape}")
    diff = np.abs(out.astype(np.float64) - arr.astype(np.float64))
    return float(diff.max()), float(np.mean(diff * diff))


def run_case(name: str, arr: np.ndarray, rel: float, codec: Codec, repeat: int) -> Result:
    lo, hi = float(arr.min()), float(arr.max())
    vrange = hi - lo
    abs_bound = rel * vrange
    r = Result(name, rel, codec.name, list(arr.shape), str(arr.dtype), abs_bound=abs_bound, nbytes=arr.nbytes)
    mb = arr.nbytes / 1e6
    try:
        tc, r.c_times, blob = _timed(lambda: codec.compress(arr, rel, abs_bound, 1), repeat)
        blob_len = len(blob) if not isinstance(blob, np.ndarray) else blob.nbytes
        td, r.d_times, out = _timed(lambda: codec.decompress(blob, arr.shape, arr.dtype, 1), repeat)
        r.compressed_bytes, r.ratio = blob_len, arr.nbytes / blob_len
        r.c_mbs, r.d_mbs = mb / tc, mb / td
        r.max_err, mse = _errors(arr, out)
        if mse == 0:
            r.psnr = float("inf")
        elif vrange > 0:
            r.psnr = 20 * math.log10(vrange) - 10 * math.log10(mse)
        r.err_over_bound = r.max_err / abs_bound if abs_bound > 0 else (0.0 if r.max_err == 0 else float("inf"))
        allowed = 0.0 if codec.lossless else abs_bound
        r.violation = not r.max_err <= allowed  # NaN counts as a violation
        del out
        if codec.multithread:
            tc, _, blob = _timed(lambda: codec.compress(arr, rel, abs_bound, None), repeat)
            td, _, out = _timed(lambda: codec.decompress(blob, arr.shape, arr.dtype, None), repeat)
            r.c_mbs_mt, r.d_mbs_mt = mb / tc, mb / td
            mt_err = _errors(arr, out)[0]  # the multi-threaded stream must honour the bound too
            if not mt_err <= allowed:
                r.violation, r.max_err = True, max(r.max_err, mt_err)
                r.err_over_bound = r.max_err / abs_bound if abs_bound > 0 else float("inf")
    except Exception as e:  # keep going: one failing codec must not hide the others' numbers
        r.error = f"{type(e).__name__}: {e}"
    return r


# --- reporting ------------------------------------------------------------------------------------------------


def results_table(results: list[Result]) -> str:
    rows = []
    for r in results:
        if r.error:
            rows.append([r.field, f"{r.bound:g}", r.codec, f"ERROR {r.error}"[:60]] + [""] * 7)
            continue
        # a violation gets enough digits to show its size (float32 rounding of eb shows up as 1.0000000x)
        eob = fmt(r.err_over_bound, ".9f" if r.violation else ".3f") + (" !!VIOLATION" if r.violation else "")
        rows.append([r.field, f"{r.bound:g}", r.codec, fmt(r.ratio), eob, fmt(r.psnr, ".1f"),
                     fmt(r.c_mbs, ".0f"), fmt(r.d_mbs, ".0f"), fmt(r.c_mbs_mt, ".0f"), fmt(r.d_mbs_mt, ".0f")])
    return markdown_table(["field", "bound", "codec", "ratio", "maxerr/eb", "PSNR dB", "C MB/s", "D MB/s",
                   "C MB/s all-thr", "D MB/s all-thr"], rows)


def write_json(path: Path, meta: dict, results: list, summary: dict) -> None:
    """A run's raw results (dataclasses), its summary and how it was run, for later tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "results": [asdict(r) for r in results], "summary": summary}, indent=1, default=float))


def summarize(results: list[Result], synthetic: set[str], cubes: set[str],
              sources: dict[str, str] | None = None) -> tuple[str, dict]:
    """Per-(field, bound) comparison against SZ3 and the acceptance criteria; returns (markdown, summary dict).

    Every field not in ``synthetic`` is a real case (one array); ``sources`` maps it to its file for the per-file
    geomeans (each real (case, bound) counts once, whatever its size)."""
    sources = sources or {}
    ok = {(r.field, r.bound, r.codec): r for r in results if r.error is None}
    cases = list(dict.fromkeys((r.field, r.bound) for r in results))
    out, summ = [], {"cases": [], "criteria": {}}

    rows = []
    for f, b in cases:
        ours, speed = ok.get((f, b, "amrzip-ratio")), ok.get((f, b, "amrzip-speed"))
        sz3 = [ok[(f, b, a)] for a in SZ3_ALL if (f, b, a) in ok]
        best = max(sz3, key=lambda r: r.ratio) if sz3 else None
        rel_ = ours.ratio / best.ratio if ours and best else None
        case = {"field": f, "bound": b, "synthetic": f in synthetic, "source": None if f in synthetic else sources.get(f),
                "amrzip_ratio": ours and ours.ratio,
                "amrzip_speed_ratio": speed and speed.ratio, "sz3_best": best and best.ratio,
                "sz3_best_algo": best and best.codec, "ours_over_sz3": rel_}
        summ["cases"].append(case)
        rows.append([f, f"{b:g}", fmt(case["amrzip_ratio"]), fmt(case["amrzip_speed_ratio"]),
                     fmt(case["sz3_best"]), best.codec.removeprefix("sz3-") if best else "-", fmt(rel_, ".3f"),
                     "" if rel_ is None else ("win" if rel_ >= 1 else "loss")])
    out += ["## Summary vs SZ3-best (max ratio over the three SZ3 algorithms)", "",
            markdown_table(["field", "bound", "amrzip-ratio", "amrzip-speed", "SZ3-best", "SZ3 algo", "ours/SZ3", ""], rows), ""]

    syn = [(f, b) for f, b in cases if f in synthetic]

    def vs(codec, attr, ref, keys):  # per-case ratios codec.attr / ref.attr
        return [getattr(ok[(f, b, codec)], attr) / getattr(ok[(f, b, ref)], attr)
                for f, b in keys if (f, b, codec) in ok and (f, b, ref) in ok]

    def vs_best(codec, keys):
        best = {k: max((ok[(*k, a)].ratio for a in SZ3_ALL if (*k, a) in ok), default=None) for k in keys}
        return [ok[(*k, codec)].ratio / best[k] for k in keys if (*k, codec) in ok and best[k]]

    crit = summ["criteria"]
    lines = [f"## Acceptance criteria ({len(syn)} synthetic cases; throughput single-thread vs {SZ3_DEFAULT})", ""]
    if len(syn) != 16:
        lines += ["(partial run: the criteria are defined on the full 4 fields x 4 bounds, uncropped)", ""]

    def verdict(key, desc, passed, detail):
        state = "N/A" if passed is None else ("PASS" if passed else "FAIL")
        crit[key] = {"status": state, "detail": detail}
        lines.append(f"- **{state}** {desc}: {detail}")

    have_amrzip = any(r.codec.startswith("amrzip") for r in results)
    if not have_amrzip:
        lines.append("- amrzip not run: criteria 2-5 are N/A")
    else:
        rr = vs_best("amrzip-ratio", syn)
        wins = sum(x >= 1 for x in rr)
        g = geomean(rr)
        need = math.ceil(0.75 * len(rr))  # 12 of the 16 full-run cases; same share on partial runs
        verdict("2_ratio_vs_sz3", "(2) ratio mode >= SZ3-best on >= 12/16 synthetic cases and geomean >= 1.0",
                (wins >= need and g >= 1.0) if rr else None,
                f"wins {wins}/{len(rr)} (need {need}), geomean {fmt(g, '.3f')}")
        sc, sd = geomean(vs("amrzip-speed", "c_mbs", SZ3_DEFAULT, syn)), geomean(vs("amrzip-speed", "d_mbs", SZ3_DEFAULT, syn))
        sr = geomean(vs_best("amrzip-speed", syn))
        verdict("3_speed_mode", "(3) speed mode compress >= 3x, decompress >= 2x SZ3 (1 thread), ratio >= 0.7x SZ3-best",
                None if math.isnan(sc) else (sc >= 3 and sd >= 2 and sr >= 0.7),
                f"compress {fmt(sc)}x, decompress {fmt(sd)}x, ratio {fmt(sr, '.3f')}x (geomeans)")
        rc, rd = geomean(vs("amrzip-ratio", "c_mbs", SZ3_DEFAULT, syn)), geomean(vs("amrzip-ratio", "d_mbs", SZ3_DEFAULT, syn))
        verdict("4_ratio_mode_speed", "(4) ratio mode throughput >= SZ3 (1 thread, geomean)",
                None if math.isnan(rc) else (rc >= 1 and rd >= 1), f"compress {fmt(rc)}x, decompress {fmt(rd)}x")
        parts, speedups = [], []
        for mode in ("amrzip-ratio", "amrzip-speed"):
            for d, st, mt in (("compress", "c_mbs", "c_mbs_mt"), ("decompress", "d_mbs", "d_mbs_mt")):
                s = geomean([getattr(r, mt) / getattr(r, st) for r in ok.values()
                             if r.codec == mode and r.field in cubes and getattr(r, mt)])
                speedups.append(s)
                parts.append(f"{mode.removeprefix('amrzip-')} {d} {fmt(s)}x")
        finite = [s for s in speedups if not math.isnan(s)]
        verdict("5_threads", f"(5) all threads ({os.cpu_count()}) >= 1.7x one thread on the 3-D cubes (geomean, each mode/direction)",
                (min(finite) >= 1.7) if finite else None, ", ".join(parts))
        real = [k for k in cases if k[0] not in synthetic]
        if real:  # informational: the criteria are defined on the synthetic fields only
            rr = vs_best("amrzip-ratio", real)
            summ["real_ours_over_sz3_geomean"] = geomean(rr)
            lines.append(f"- info: real AMR cases ({len({f for f, _ in real})} arrays x bounds = {len(real)}), ratio mode "
                         f"vs SZ3-best: wins {sum(x >= 1 for x in rr)}/{len(rr)}, geomean {fmt(geomean(rr), '.3f')}; "
                         f"speed mode vs SZ3-best geomean {fmt(geomean(vs_best('amrzip-speed', real)), '.3f')} "
                         "(per (case, bound), unweighted; per file below)")
            speeds = []
            for mode in ("amrzip-ratio", "amrzip-speed"):
                for d, key in (("compress", "c_mbs"), ("decompress", "d_mbs")):
                    x = vs(mode, key, SZ3_DEFAULT, real)
                    summ[f"real_{mode.removeprefix('amrzip-')}_{d}_vs_sz3"] = geomean(x)
                    speeds.append(f"{mode.removeprefix('amrzip-')} {d} {fmt(geomean(x))}x "
                                  f"(min {fmt(min(x, default=math.nan))}x, >= 1x on {sum(v >= 1 for v in x)}/{len(x)})")
            lines.append(f"- info: real AMR cases, throughput one thread vs {SZ3_DEFAULT} (geomean): " + "; ".join(speeds)
                         + " (the arrays are mostly small boxes and levels: fixed costs per call weigh most there)")
            by_file: dict[str, list] = {}
            for k in real:
                by_file.setdefault(sources.get(k[0], k[0].split("/")[0]), []).append(k)
            summ["real_by_file"], file_rows = {}, []
            for src, keys in by_file.items():
                rf, sf = vs_best("amrzip-ratio", keys), vs_best("amrzip-speed", keys)
                summ["real_by_file"][src] = {"arrays": len({f for f, _ in keys}), "cases": len(keys),
                                             "wins": sum(x >= 1 for x in rf), "compared": len(rf),
                                             "ours_over_sz3_geomean": geomean(rf), "speed_over_sz3_geomean": geomean(sf)}
                file_rows.append([src, str(len({f for f, _ in keys})), str(len(keys)), f"{sum(x >= 1 for x in rf)}/{len(rf)}",
                                  fmt(geomean(rf), ".3f"), fmt(geomean(sf), ".3f")])
            lines += ["", markdown_table(["real file", "arrays", "cases", "ratio-mode wins", "ratio/SZ3-best geomean",
                                          "speed/SZ3-best geomean"], file_rows), ""]

    viol = {}  # codec -> [violations, of which rounding-level (<= 1 + 1e-6), cases]
    for r in results:
        v = viol.setdefault(r.codec, [0, 0, 0])
        v[0] += r.violation
        v[1] += r.violation and r.err_over_bound <= 1 + 1e-6
        v[2] += 1
    errors = [r for r in results if r.error]
    lines += ["", "## Bound violations (max |x - x'| > value-range bound, float64; zstd must be exact)", ""]
    lines += [f"- {c}: {v}/{n}" + (f"  !!! VIOLATIONS ({ulp} rounding-level, <= 1+1e-6 x bound)" if v else "")
              for c, (v, ulp, n) in viol.items()]
    bad = [r for r in results if r.violation and r.codec.startswith("amrzip")]
    if bad:
        lines.append(f"- **FAIL** amrzip violated its bound in {len(bad)} case(s): "
                     + ", ".join(f"{r.field}@{r.bound:g}/{r.codec} ({r.err_over_bound:.4f}x)" for r in bad))
    crit["amrzip_no_violations"] = {"status": "FAIL" if bad else ("PASS" if have_amrzip else "N/A")}
    if errors:
        lines += ["", f"## Errors ({len(errors)})", ""] + [f"- {r.field}@{r.bound:g} {r.codec}: {r.error}" for r in errors]
    summ["violations"] = viol
    return "\n".join(out + lines), summ


# --- main -----------------------------------------------------------------------------------------------------


def load_fields(names: list[str] | None, quick: bool, real: bool, synthetic: bool = True,
                real_limit: int | None = None, notes: list[str] | None = None) -> list[tuple[str, np.ndarray]]:
    """Synthetic fields named in ``names`` (all when None), then the real AMR cases (datasets.real_fields: every level
    of every field of every file in ../shared/data) whose names equal or start with an entry of ``names`` followed
    by '/' (``pelelmex_3d/``, ``bisicles/``, ``pelelmex_3d/temp``).  ``real_limit`` keeps at most that many real
    cases, evenly spread over their list.  What real_fields left out is appended to ``notes``."""
    fields = []
    for n in datasets.SYNTHETIC:
        if not synthetic or (names and n not in names):
            continue
        a = datasets.load(n)
        if quick:  # corner crop: half of each axis
            a = np.ascontiguousarray(a[tuple(slice(0, s // 2) for s in a.shape)])
        fields.append((n, a))
    if real and not (names and all(n in datasets.SYNTHETIC for n in names)):
        def want(n):
            return not names or any(n == w or n.startswith(w.rstrip("/") + "/") for w in names)

        cases = list(datasets.real_fields(want=want, notes=notes))
        if real_limit is not None and len(cases) > real_limit:
            keep = sorted({int(i) for i in np.linspace(0, len(cases) - 1, real_limit).round()}) if real_limit > 0 else []
            if notes is not None:
                notes.append(f"--real-fields-limit {real_limit}: {len(keep)} of {len(cases)} real cases run, "
                             "evenly spread over the list")
            cases = [cases[i] for i in keep]
        fields += cases
    return fields


def real_sources(names) -> dict[str, str]:
    """Real case name -> its file's label (``pelelmex_3d``, ``bisicles/ase-ctrl-reference``): the longest label the
    name starts with (field names may hold '/', so names are not split)."""
    labels = sorted((label for label, _, _ in datasets.real_files()), key=len, reverse=True)
    return {n: next((lb for lb in labels if n.startswith(lb + "/")), n.split("/")[0]) for n in names}


def _load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fields", help="comma list: synthetic names and/or real-field name prefixes "
                                    "(e.g. smooth3d,pelelmex_3d/temp or bisicles/); default all")
    p.add_argument("--bounds", default=",".join(f"{b:g}" for b in BOUNDS), help="comma list of value-range relative bounds")
    p.add_argument("--codecs", help="comma list of codecs or groups (amrzip, sz3, zfp, zstd); default all available")
    # Five: on a 2-core virtual machine, two-thread medians of three moved by up to a third
    # between runs whenever two of the three calls met a slow spell of the host.
    p.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (default 5), reduced by --stat")
    p.add_argument("--stat", choices=["median", "min"], default="median",
                   help="how the --repeat timings are reduced (default median; min resists background load)")
    p.add_argument("--quick", action="store_true", help="crop synthetic fields to half size per axis (128^3, 900x1800)")
    p.add_argument("--no-real", action="store_true", help="skip the real AMR fields")
    p.add_argument("--no-synthetic", action="store_true", help="skip the synthetic fields (real AMR cases only)")
    p.add_argument("--real-fields-limit", type=int, metavar="N",
                   help="run at most N real cases, evenly spread over the list (quick runs); default all")
    p.add_argument("--json", type=Path, help="write raw results and summary to this path")
    args = p.parse_args(argv)

    global STAT
    STAT = min if args.stat == "min" else statistics.median
    names = args.fields.split(",") if args.fields else None
    bounds = [float(b) for b in args.bounds.split(",")]
    codecs = select_codecs(args.codecs, available_codecs())
    notes: list[str] = []
    fields = load_fields(names, args.quick, not args.no_real, synthetic=not args.no_synthetic,
                         real_limit=args.real_fields_limit, notes=notes)
    if not fields:
        p.error("no fields selected" + "".join(f"\n  {s}" for s in notes))
    synthetic = {n for n, _ in fields if n in datasets.SYNTHETIC}
    cubes = {n for n, a in fields if n in synthetic and a.ndim == 3}
    sources = real_sources([n for n, _ in fields if n not in synthetic])

    print(f"# amrzip codec benchmark\n\n{platform.node()} | {platform.processor() or platform.machine()} | "
          f"{os.cpu_count()} cores | numpy {np.__version__} | repeat {args.repeat} ({args.stat})"
          f"{' | QUICK (cropped fields)' if args.quick else ''} | load average at start {_load()}\n")
    per_file = {}
    for n in sources.values():
        per_file[n] = per_file.get(n, 0) + 1
    print(f"Fields: {len(synthetic)} synthetic, {len(sources)} real AMR arrays"
          + (" (" + ", ".join(f"{src} {k}" for src, k in per_file.items()) + ")" if per_file else "") + "\n")
    if notes:
        print("Real data left out or failing:\n\n" + "\n".join(f"- {s}" for s in notes) + "\n")
    results = []
    t_start = time.perf_counter()
    for name, arr in fields:
        for rel in bounds:
            for codec in codecs:
                r = run_case(name, arr, rel, codec, args.repeat)
                results.append(r)
                status = r.error or (f"ratio {r.ratio:8.2f}  err/eb {r.err_over_bound:.3f}  "
                                     f"C {r.c_mbs:7.1f} MB/s  D {r.d_mbs:7.1f} MB/s" + ("  !!VIOLATION" if r.violation else ""))
                print(f"  {name:30s} {rel:<6g} {codec.name:20s} {status}", file=sys.stderr, flush=True)
    print("## Results\n")
    print(results_table(results))
    print()
    text, summary = summarize(results, synthetic, cubes, sources)
    print(text)
    print(f"\n(total benchmark time {time.perf_counter() - t_start:.0f} s; load average at end {_load()}: "
          f"timings are only meaningful on an otherwise idle machine)")
    if args.json:
        meta = {"argv": sys.argv[1:], "host": platform.node(), "cpus": os.cpu_count(), "numpy": np.__version__,
                "loadavg_end": _load(),
                "quick": args.quick, "repeat": args.repeat, "stat": args.stat, "real_notes": notes}
        write_json(args.json, meta, results, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
