"""Chunked-stream benchmark: what keeping a codebook between chunks buys (CEAZ's adaptive rule) and what it costs.

Sections (see benches/README.md): A throughput and ratio per chunk size against rebuilding per chunk and against
independent per-chunk streams; B codebook build time; C built-in (offline) codebooks; D update size; E thresholds
(the recommendation for DEFAULT_THRESHOLDS); F response to a change of data; G peak memory.  Every ratio is measured
from the bytes returned, every error from the decoding.

    .venv/bin/python benches/stream_bench.py --json benches/data/stream.json   # full run (~8 min on 2 cores)
    .venv/bin/python benches/stream_bench.py --quick                            # smoke run on cropped fields
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import codec_bench  # noqa: E402
import datasets  # noqa: E402
from codec_bench import _errors, _load, _timed, load_fields  # noqa: E402
from report import fmt, geomean, markdown_table  # noqa: E402
from target_bench import _floats  # noqa: E402

import amrzip  # noqa: E402
from amrzip import _core  # noqa: E402

MiB = 1 << 20  # chunk sizes are binary: 1 MiB is exactly 4 slabs of a 256^2 plane
CHUNK_MB = [1, 2, 4]
BOUNDS = [1e-3, 1e-4]
ARMS = ["independent", "rebuild", "adaptive"]
NEED_SPEEDUP, MAX_LOSS = 1.3, 3.0  # acceptance A: adaptive >= 1.3x throughput at <= 3% ratio loss
UPDATE_MB = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
KEEPS, REBUILDS = [0.02, 0.05, 0.1, 0.2, 0.3], [0.3, 0.5, 0.8, 1.0]  # rebuild 1.0: the change is < 1, never starts over
KEEP_LOSS = 1.0  # E: largest keep losing at most this % against rebuilding every chunk
NEAR_IDEAL = 0.95  # F: "recovered" once a chunk's ratio is within 5% of an independent stream's
MEM_CHUNK_MB, MEM_MAX_CHUNKS = 4, 8.0  # G: peak RSS over the baseline, in chunks, counted as "a small multiple"
STREAM_BOUND = 1e-4  # D-G: CEAZ's setting, as an absolute bound on fields scaled to [0, 1]
# Extra fields so the D/E stream reaches 512 MiB: GRFs whose spectral slopes give histogram spreads far apart from
# their neighbours', so every field boundary is a real change of character.
EXTRA_GRF = [(-2.0, 101), (-4.5, 103), (-3.0, 102), (-5.5, 104), (-2.5, 105)]


def _log(*parts):
    print(" ", *parts, file=sys.stderr, flush=True)


def _unit(a: np.ndarray) -> np.ndarray:
    """a scaled to [0, 1]: one absolute bound on a stream of several fields is then the same relative bound on each."""
    lo, hi = float(a.min()), float(a.max())
    return ((a.astype(np.float64) - lo) / (hi - lo)).astype(np.float32)


def _rows(arr: np.ndarray, mb: float) -> int:
    """Rows along axis 0 that make a chunk of about `mb` MiB."""
    return max(1, round(mb * MiB / arr[0].nbytes))


def _loss(ratio: float, ref: float) -> float:
    """Ratio loss in % against a reference (negative: better than it)."""
    return 100.0 * (1.0 - ratio / ref)


def _counts(st: dict) -> str:
    return f"{st['kept']}/{st['rebuilt']}/{st['offline']}/{st['reselected']}"


# --- compressing ----------------------------------------------------------------------------------------------


def stream(arr, rows, eb, threads, **kw) -> tuple[bytes, dict]:
    sc = amrzip.StreamCompressor(arr.dtype, (rows, *arr.shape[1:]), abs=eb, threads=threads, **kw)
    sc.write(arr)
    return sc.finish(), sc.stats()


def independent(arr, rows, eb, threads) -> list[bytes]:
    """The no-stream baseline: one amrzip stream per chunk (own predictor choice and codebook each)."""
    return [amrzip.compress(arr[i:i + rows], abs=eb, threads=threads) for i in range(0, arr.shape[0], rows)]


def _decision(prev: dict, st: dict) -> str:
    """What the encoder did with the last chunk, from its counters: K keep, R new codebook, S start over (new
    codebook), O start over with a built-in codebook.  The first chunk always starts over."""
    if st["reselected"] > prev["reselected"] or st["records"] == 1:
        return "O" if st["offline"] > prev["offline"] else "S"
    return "R" if st["rebuilt"] > prev["rebuilt"] else "K"


def chunked(parts, rows, eb, threads=1, **kw) -> dict:
    """Compress `parts` one after another as one stream, a chunk per write, recording each chunk's record size and
    decision.  Parts must hold whole chunks so that every write is exactly one record."""
    assert all(p.shape[0] % rows == 0 for p in parts), "parts must hold whole chunks"
    sc = amrzip.StreamCompressor(parts[0].dtype, (rows, *parts[0].shape[1:]), abs=eb, threads=threads, **kw)
    prev, sizes, decisions = sc.stats(), [], []
    t0 = time.perf_counter()
    for p in parts:
        for i in range(0, p.shape[0], rows):
            sc.write(p[i:i + rows])
            st = sc.stats()
            sizes.append(st["bytes_out"] - prev["bytes_out"])
            decisions.append(_decision(prev, st))
            prev = st
    blob = sc.finish()
    seconds = time.perf_counter() - t0
    nbytes = sum(p.nbytes for p in parts)
    return {"blob": blob, "seconds": seconds, "mbs": nbytes / 1e6 / seconds, "ratio": nbytes / len(blob),
            "stats": sc.stats(), "sizes": sizes, "decisions": "".join(decisions)}


def _check_stream(blob: bytes, parts, eb: float) -> float:
    """Max error over the bound, chunk by chunk (no full-size copy of a long stream)."""
    flat = (c for p in parts for c in p)  # axis-0 slabs in stream order
    worst = 0.0
    for chunk in amrzip.StreamDecompressor(blob):
        ref = np.stack([next(flat) for _ in range(chunk.shape[0])])
        worst = max(worst, _errors(ref, chunk)[0])
    return worst / eb


# --- A: throughput and ratio ----------------------------------------------------------------------------------


def _chunk_cases(fields, bounds, chunk_mb):
    """(field, array, rel, absolute bound = rel x the field's range, chunk MiB, rows per chunk) per combination."""
    for name, arr in fields:
        vrange = float(arr.max()) - float(arr.min())
        for rel in bounds:
            for mb in chunk_mb:
                yield name, arr, rel, rel * vrange, mb, _rows(arr, mb)


def bench_a(fields, bounds, chunk_mb, repeat) -> list[dict]:
    rows_out = []
    for name, arr, rel, eb, mb, rows in _chunk_cases(fields, bounds, chunk_mb):
        for arm in ARMS:
            if arm == "independent":
                comp = lambda t: independent(arr, rows, eb, t)  # noqa: E731
                size = lambda out: sum(map(len, out))  # noqa: E731
                # Decoding is timed without joining the chunks, for both arms alike.
                decomp = lambda out, t: [amrzip.decompress(b, threads=t) for b in out]  # noqa: E731
                joined = lambda out: np.concatenate([amrzip.decompress(b, threads=1) for b in out])  # noqa: E731
            else:
                comp = lambda t: stream(arr, rows, eb, t, codebook=arm)  # noqa: E731
                size = lambda out: len(out[0])  # noqa: E731
                decomp = lambda out, t: [c for c in amrzip.StreamDecompressor(out[0], threads=t)]  # noqa: E731
                joined = lambda out: amrzip.StreamDecompressor(out[0]).read_all()  # noqa: E731
            r = {"field": name, "rel": rel, "abs": eb, "chunk_mb": mb, "rows": rows,
                 "chunk_bytes": rows * arr[0].nbytes, "arm": arm}
            mbs = arr.nbytes / 1e6
            for t, key in ((1, "1"), (None, "all")):
                tc, r[f"c_times_{key}"], out = _timed(lambda: comp(t), repeat)
                td, r[f"d_times_{key}"], _ = _timed(lambda: decomp(out, t), repeat)
                r[f"c_mbs_{key}"], r[f"d_mbs_{key}"] = mbs / tc, mbs / td
                if t == 1:
                    r["ratio"] = arr.nbytes / size(out)
                    r["err_over_eb"] = _errors(arr, joined(out))[0] / eb
                    r["stats"] = out[1] if arm != "independent" else None
            rows_out.append(r)
            _log(f"A {name:13s} {rel:<6g} {mb} MiB {arm:11s} ratio {r['ratio']:8.2f}  "
                 f"C {r['c_mbs_1']:6.1f}/{r['c_mbs_all']:6.1f} MB/s  D {r['d_mbs_1']:6.1f}/{r['d_mbs_all']:6.1f} MB/s"
                 + (f"  {_counts(r['stats'])}" if r["stats"] else ""))
    return rows_out


def _a_cases(res: list[dict]) -> list[dict]:
    """One entry per (field, bound, chunk): adaptive against both baselines."""
    by = {(r["field"], r["rel"], r["chunk_mb"], r["arm"]): r for r in res}
    cases = []
    for (f, rel, mb, arm), ad in by.items():
        if arm != "adaptive":
            continue
        c = {"field": f, "rel": rel, "chunk_mb": mb}
        for base in ("rebuild", "independent"):
            b = by[(f, rel, mb, base)]
            c[f"loss_vs_{base}"] = _loss(ad["ratio"], b["ratio"])
            for key in ("1", "all"):
                c[f"c_x_{base}_{key}"] = ad[f"c_mbs_{key}"] / b[f"c_mbs_{key}"]
                c[f"d_x_{base}_{key}"] = ad[f"d_mbs_{key}"] / b[f"d_mbs_{key}"]
        cases.append(c)
    return cases


def report_a(res: list[dict], crit: dict) -> str:
    cases = {(c["field"], c["rel"], c["chunk_mb"]): c for c in _a_cases(res)}
    rows = []
    for r in res:
        c = cases[(r["field"], r["rel"], r["chunk_mb"])] if r["arm"] == "adaptive" else None
        viol = r["err_over_eb"] > 1
        rows.append([r["field"], f"{r['rel']:g}", f"{r['chunk_bytes'] / MiB:.2f}", r["arm"], fmt(r["ratio"]),
                     fmt(c and c["loss_vs_rebuild"], "+.2f"), fmt(c and c["loss_vs_independent"], "+.2f"),
                     fmt(r["c_mbs_1"], ".0f"), fmt(r["d_mbs_1"], ".0f"), fmt(r["c_mbs_all"], ".0f"), fmt(r["d_mbs_all"], ".0f"),
                     fmt(c and c["c_x_rebuild_1"]), fmt(c and c["c_x_independent_1"]),
                     _counts(r["stats"]) if r["stats"] else "-",
                     fmt(r["err_over_eb"], ".3f") + (" !!VIOLATION" if viol else "")])
    out = ["## A. Throughput and ratio per chunk size (abs bound = rel x value range of the field)", "",
           "loss = 1 - ratio(adaptive) / ratio(baseline), in % (negative: adaptive is smaller); "
           "C x = adaptive compress MB/s over the baseline's, single thread; k/r/o/s = chunks that kept the codebook / "
           "built a new one / used a built-in one / started over (predictor chosen again).", "",
           markdown_table(["field", "bound", "chunk MiB", "arm", "ratio", "loss vs rebuild %", "loss vs indep %",
                   "C MB/s 1t", "D MB/s 1t", "C MB/s all", "D MB/s all", "C x rebuild", "C x indep", "k/r/o/s",
                   "maxerr/eb"], rows), ""]
    cs = list(cases.values())
    out += ["Adaptive against each baseline, per chunk size (geomean speedups over fields and bounds; worst = highest loss):", ""]
    srows = []
    for base in ("rebuild", "independent"):
        for mb in sorted({c["chunk_mb"] for c in cs}):
            sub = [c for c in cs if c["chunk_mb"] == mb]
            srows.append([base, str(mb), fmt(geomean([c[f"c_x_{base}_1"] for c in sub])),
                          fmt(geomean([c[f"d_x_{base}_1"] for c in sub])), fmt(geomean([c[f"c_x_{base}_all"] for c in sub])),
                          fmt(max(c[f"loss_vs_{base}"] for c in sub), "+.2f"),
                          f"{sum(c[f'c_x_{base}_1'] >= NEED_SPEEDUP and c[f'loss_vs_{base}'] <= MAX_LOSS for c in sub)}/{len(sub)}"])
    out += [markdown_table(["baseline", "chunk MiB", "C x (1t)", "D x (1t)", "C x (all)", "worst loss %",
                    f"cases >= {NEED_SPEEDUP}x and <= {MAX_LOSS:g}%"], srows), ""]
    for base, what in (("rebuild", "the same stream building a new codebook every chunk (codebook=\"rebuild\")"),
                       ("independent", "one amrzip.compress() per chunk (no stream: predictor and codebook per chunk)")):
        g = geomean([c[f"c_x_{base}_1"] for c in cs])
        worst = max(c[f"loss_vs_{base}"] for c in cs)
        n_ok = sum(c[f"c_x_{base}_1"] >= NEED_SPEEDUP and c[f"loss_vs_{base}"] <= MAX_LOSS for c in cs)
        state = "PASS" if g >= NEED_SPEEDUP and worst <= MAX_LOSS else "FAIL"
        crit[f"A_vs_{base}"] = {"status": state, "speedup_geomean": g, "worst_loss_pct": worst, "cases_ok": n_ok,
                                "cases": len(cs)}
        out.append(f"- **{state}** A vs {base} = {what}: compress speedup geomean {g:.2f}x (need >= {NEED_SPEEDUP}x), "
                   f"worst ratio loss {worst:+.2f}% (need <= {MAX_LOSS:g}% in every case); "
                   f"{n_ok}/{len(cs)} cases meet both on their own")
    viol = [r for r in res if r["err_over_eb"] > 1]
    crit["A_no_violations"] = {"status": "FAIL" if viol else "PASS", "violations": len(viol)}
    out.append(f"- bound violations: {len(viol)}/{len(res)}" + (" !!!" if viol else ""))
    return "\n".join(out)


# --- B: codebook build time -----------------------------------------------------------------------------------


def _build_us(hist: list[int], reps: int = 25) -> float:
    """Build + serialise one codebook through _offline_codebook_set (covering() and the table, in Rust), minus the
    same call on a one-symbol histogram: that takes away the Python->Vec conversion of the 65536 counts."""
    spike = [0] * len(hist)
    spike[len(hist) // 2] = sum(hist)
    t = lambda h: min(_timed(lambda: _core._offline_codebook_set([(1, "b", h)]), 1)[0] for _ in range(reps))  # noqa: E731
    return 1e6 * max(0.0, t(hist) - t(spike))


def bench_b(fields, bounds, chunk_mb, stream_mib) -> list[dict]:
    """The same chunk written over and over: adaptive keeps after the first (change 0), rebuild builds every time;
    the difference per chunk is the codebook's cost (build, table, its bytes) less the keep check."""
    out = []
    for name, arr, rel, eb, mb, rows in _chunk_cases(fields, bounds, chunk_mb):
        mid = max(0, arr.shape[0] // 2 - rows // 2)
        chunk = np.ascontiguousarray(arr[mid:mid + rows])
        n = max(8, round(stream_mib * MiB / chunk.nbytes))
        data = np.concatenate([chunk] * n)
        times = {"rebuild": [], "adaptive": []}
        for _ in range(5):  # arms alternate, so a change of background load hits both alike
            for arm, ts in times.items():
                ts.append(_timed(lambda: stream(data, rows, eb, 1, codebook=arm), 1)[0])
        for arm in times:
            _, st = stream(data, rows, eb, 1, codebook=arm)
            assert st["rebuilt" if arm == "rebuild" else "kept"] >= n - 1, st
        # min: the difference of two times is what matters, and the minimum is the least disturbed
        per = {arm: 1e6 * min(ts) / n for arm, ts in times.items()}
        hist = _core._symbol_histogram(chunk, eb, "ratio")
        r = {"field": name, "rel": rel, "chunk_mb": mb, "chunk_bytes": chunk.nbytes,
             "symbols": int(np.count_nonzero(hist[1:])), "keep_us": per["adaptive"], "rebuild_us": per["rebuild"],
             "indirect_us": per["rebuild"] - per["adaptive"], "direct_us": _build_us(hist.tolist())}
        r["direct_share"] = 100 * r["direct_us"] / r["rebuild_us"]
        r["indirect_share"] = 100 * r["indirect_us"] / r["rebuild_us"]
        out.append(r)
        _log(f"B {name:13s} {rel:<6g} {mb} MiB  keep {r['keep_us']:7.0f} us  rebuild {r['rebuild_us']:7.0f} us  "
             f"build {r['direct_us']:6.0f} us direct, {r['indirect_us']:6.0f} us indirect")
    return out


def report_b(res: list[dict], crit: dict) -> str:
    rows = [[r["field"], f"{r['rel']:g}", f"{r['chunk_bytes'] / MiB:.2f}", str(r["symbols"]), fmt(r["keep_us"], ".0f"),
             fmt(r["rebuild_us"], ".0f"), fmt(r["direct_us"], ".0f"), fmt(r["indirect_us"], ".0f"),
             fmt(r["direct_share"], ".1f"), fmt(r["indirect_share"], ".1f")] for r in res]
    shares = [r["direct_share"] for r in res]
    worst = max(res, key=lambda r: r["direct_share"])
    med = statistics.median(shares)
    # "noticeable": an approximate sort only speeds up part of the build, so it needs the build itself to be a
    # sizeable share of the chunk before it could show in throughput
    matters = med >= 5.0
    crit["B_build_share"] = {"median_pct": med, "max_pct": worst["direct_share"], "approximate_sort_matters": matters}
    return "\n".join([
        "## B. Codebook build time (single thread; the same chunk written repeatedly)", "",
        "keep / rebuild us = compress time per chunk when every chunk after the first keeps the codebook / builds a new "
        "one (min of 5); build direct = one covering codebook built and serialised in Rust (`_offline_codebook_set`, "
        "Python conversion subtracted); build indirect = rebuild - keep per chunk (also counts the table bytes, "
        "noisier); share = build / rebuild-chunk time.", "",
        markdown_table(["field", "bound", "chunk MiB", "symbols used", "keep us/chunk", "rebuild us/chunk", "build us direct",
                "build us indirect", "share % direct", "share % indirect"], rows), "",
        f"- Build share of per-chunk compress time: median {med:.1f}%, max {worst['direct_share']:.1f}% "
        f"({worst['field']} at {worst['rel']:g}, {worst['chunk_mb']} MiB, {worst['symbols']} symbols).",
        f"- Approximate sort (CEAZ 3.2.1): the sort is one part of the build, so it could save at most these shares; "
        + ("the median share is noticeable (>= 5%), so it would matter for wide histograms."
           if matters else "with a median share under 5% it would not matter; keeping the codebook (adaptive) "
           "already removes the whole build from most chunks.")])


# --- C: built-in codebooks ------------------------------------------------------------------------------------


def _book_costs(arr, rows, eb) -> dict | None:
    """Entropy-coded bits of every chunk with its exact Huffman codebook (and that table) against the cheapest
    built-in codebook, from the chunk's symbol histogram (`_core._codebook_costs`, when this build has it), over the
    chunks some built-in codebook covers.  Only the Huffman payload: the rest of a record is the same either way."""
    costs = getattr(_core, "_codebook_costs", None)
    if costs is None:
        return None
    exact = table = builtin = uncovered = 0
    used: dict[int, int] = {}
    for i in range(0, arr.shape[0], rows):
        bits, tbytes, offline = costs(_core._symbol_histogram(arr[i:i + rows], eb, "ratio").tolist())
        if not offline:  # no built-in codebook has a code for every symbol: the chunk must carry its own
            uncovered += 1
            continue
        book, b = min(offline, key=lambda x: x[1])
        exact, table, builtin = exact + bits, table + 8 * tbytes, builtin + b
        used[book] = used.get(book, 0) + 1
    pct = lambda ref: 100 * (builtin / ref - 1) if ref else None  # noqa: E731
    return {"exact_bits": exact, "table_bits": table, "builtin_bits": builtin, "uncovered": uncovered,
            "book_use": used, "vs_exact_pct": pct(exact), "vs_exact_table_pct": pct(exact + table)}


def bench_c(fields, bounds, books) -> list[dict]:
    """thresholds=(0, 0): every chunk starts over, so the encoder takes a built-in codebook whenever it codes the
    chunk in fewer bytes than a new one with its table; against rebuilding every chunk."""
    out = []
    if not books:
        return out
    for name, arr in fields:
        vrange = float(arr.max()) - float(arr.min())
        rows = _rows(arr, 1)
        for rel in bounds:
            eb = rel * vrange
            reb, _ = stream(arr, rows, eb, None, codebook="rebuild")
            so, st = stream(arr, rows, eb, None, thresholds=(0.0, 0.0))
            r = {"field": name, "rel": rel, "ratio_rebuild": arr.nbytes / len(reb), "ratio_start_over": arr.nbytes / len(so),
                 "offline": st["offline"], "records": st["records"], "stats": st, "costs": _book_costs(arr, rows, eb)}
            r["gain_pct"] = 100 * (r["ratio_start_over"] / r["ratio_rebuild"] - 1)
            out.append(r)
            _log(f"C {name:13s} {rel:<6g} rebuild {r['ratio_rebuild']:8.2f}  start over {r['ratio_start_over']:8.2f}  "
                 f"built-in chosen {st['offline']}/{st['records']}"
                 + (f"  built-in bits {fmt(r['costs']['vs_exact_pct'], '+.1f')}% vs exact" if r["costs"] else ""))
    return out


def report_c(res: list[dict], books) -> str:
    head = ["## C. Built-in (offline) codebooks, 1 MiB chunks", ""]
    if not books:
        return "\n".join(head + ["none built in: `amrzip._core.offline_codebooks()` is empty, nothing to measure."])
    names = dict(books)
    rows = []
    for r in res:
        c = r["costs"]
        top = max(c["book_use"], key=c["book_use"].get) if c and c["book_use"] else None
        rows.append([r["field"], f"{r['rel']:g}", fmt(r["ratio_rebuild"]), fmt(r["ratio_start_over"]), fmt(r["gain_pct"], "+.2f"),
                     f"{r['offline']}/{r['records']}", fmt(c and c["vs_exact_pct"], "+.1f"),
                     fmt(c and c["vs_exact_table_pct"], "+.1f"),
                     "-" if top is None else f"{names.get(top, top)} ({c['book_use'][top]})",
                     "-" if c is None else str(c["uncovered"])])
    return "\n".join(head + [
        f"Built in: {', '.join(f'{i}:{n}' for i, n in books)}.", "",
        "start over = thresholds (0, 0): every chunk re-chooses the predictor and takes a built-in codebook when it codes "
        "the chunk smaller than a new one with its table, so the difference to rebuild (a new codebook every chunk) "
        "also holds the predictor re-selection.  Huffman bits: the coded symbols of every chunk with the cheapest "
        "built-in codebook against an exact codebook per chunk, without and with the exact table (CEAZ Fig. 9's "
        "comparison; + = the built-in codes are longer), over the chunks some built-in codebook covers (has a code "
        "for every symbol of).", "",
        markdown_table(["field", "bound", "ratio rebuild", "ratio start over", "difference %", "built-in chosen",
                "Huffman bits vs exact %", "vs exact + table %", "cheapest book (chunks)", "chunks not covered"], rows)])


# --- D/E/F: long streams --------------------------------------------------------------------------------------


def long_stream(quick: bool) -> list[tuple[str, np.ndarray]]:
    """The three 3-D cubes and the extra GRFs, each scaled to [0, 1] (cropped to 128^3 with --quick)."""
    parts = [(n, a) for n, a in load_fields(["smooth3d", "turbulence3d", "cosmology3d"], quick, real=False)]
    n3 = parts[0][1].shape[0]
    parts += [(f"grf{slope:+g}", datasets.gaussian_random_field((n3,) * 3, slope, seed)) for slope, seed in EXTRA_GRF]
    return [(n, _unit(a)) for n, a in parts]


def bench_d(parts, rows, eb, update_mb) -> list[dict]:
    arrays = [a for _, a in parts]
    out = []
    for label, kw in ([(f"interval {u}", {"codebook": "interval", "update_elements": u * MiB // 4}) for u in update_mb]
                      + [("rebuild", {"codebook": "rebuild"}), ("adaptive", {})]):
        s = chunked(arrays, rows, eb, **kw)
        r = {"arm": label, **{k: s[k] for k in ("ratio", "mbs", "seconds", "stats")}}
        if label == "adaptive":  # one decode of the long stream: the bound holds across field boundaries
            r["err_over_eb"] = _check_stream(s["blob"], arrays, eb)
        out.append(r)
        _log(f"D {label:13s} ratio {r['ratio']:8.3f}  C {r['mbs']:6.1f} MB/s  {_counts(r['stats'])}")
    return out


def report_d(res: list[dict], total_mb: float) -> str:
    base = next(r for r in res if r["arm"] == "rebuild")
    best = max((r for r in res if r["arm"].startswith("interval")), key=lambda r: r["ratio"])
    rows = [[r["arm"], fmt(r["ratio"], ".3f"), fmt(_loss(r["ratio"], base["ratio"]), "+.2f"), fmt(r["mbs"], ".0f"),
             _counts(r["stats"])] for r in res]
    check = next(r for r in res if "err_over_eb" in r)
    return "\n".join([
        f"## D. Codebook update size (CEAZ 4.4): {total_mb:.0f} MB stream, 1 MiB chunks, abs {STREAM_BOUND:g} "
        "(fields scaled to [0, 1]), single thread", "",
        "interval U = a new codebook once U MiB went by since the last one (update_elements = U MiB / 4 bytes); "
        "loss against a new codebook every chunk.", "",
        markdown_table(["codebook", "ratio", "loss vs rebuild %", "C MB/s", "k/r/o/s"], rows), "",
        f"- Best update size: {best['arm'].split()[1]} MiB (ratio {best['ratio']:.3f}); adaptive stream decoded with "
        f"max error {check['err_over_eb']:.3f} x the bound."])


def bench_e(parts, rows, eb_list, keeps, rebuilds, rebuild_ref: dict) -> list[dict]:
    """Every (keep, rebuild) on the long stream; start-overs located against the field boundaries."""
    arrays = [a for _, a in parts]
    per_field = arrays[0].shape[0] // rows
    boundaries = [k * per_field for k in range(1, len(arrays))]
    near = {b + d for b in boundaries for d in (0, 1)}  # the first two chunks of a new field
    out = []
    for eb in eb_list:
        ref = rebuild_ref.get(eb) or chunked(arrays, rows, eb, codebook="rebuild")
        for keep in keeps:
            for reb in rebuilds:
                if reb < keep:
                    continue
                s = chunked(arrays, rows, eb, thresholds=(keep, reb))
                starts = [i for i, d in enumerate(s["decisions"]) if d in "SO" and i > 0]
                r = {"abs": eb, "keep": keep, "rebuild": reb, "ratio": s["ratio"], "mbs": s["mbs"], "stats": s["stats"],
                     "loss": _loss(s["ratio"], ref["ratio"]), "ref_ratio": ref["ratio"], "ref_mbs": ref["mbs"],
                     "caught": len({b for b in boundaries if b in starts or b + 1 in starts}),
                     "false_starts": sum(i not in near for i in starts), "boundaries": len(boundaries),
                     "decisions": s["decisions"]}
                out.append(r)
                _log(f"E abs {eb:<6g} keep {keep:<4g} rebuild {reb:<4g} ratio {r['ratio']:8.3f} ({r['loss']:+.2f}%)  "
                     f"C {r['mbs']:6.1f} MB/s  {_counts(r['stats'])}  boundaries caught {r['caught']}/{len(boundaries)}, "
                     f"other start-overs {r['false_starts']}")
    return out


def recommend(res: list[dict]) -> dict:
    """Both thresholds together, since the ratio of a keep threshold depends on whether the stream may start over.
    A pair qualifies when its loss against rebuilding every chunk is <= KEEP_LOSS at every bound and it never starts
    over inside a field ("clean"); among those: the most field boundaries caught, then the largest keep, then the
    lowest rebuild.  Without a qualifying pair: the fewest start-overs inside fields, then the lowest loss."""
    pairs = {}  # (keep, rebuild) -> counts summed and worst loss over the bounds
    for r in res:
        c = pairs.setdefault((r["keep"], r["rebuild"]), {"false": 0, "caught": 0, "of": 0, "loss": -1e9})
        c["false"] += r["false_starts"]
        c["caught"] += r["caught"]
        c["of"] += r["boundaries"]
        c["loss"] = max(c["loss"], r["loss"])
    good = [p for p, c in pairs.items() if c["loss"] <= KEEP_LOSS and c["false"] == 0]
    keep, rebuild = (max(good, key=lambda p: (pairs[p]["caught"], p[0], -p[1])) if good
                     else min(pairs, key=lambda p: (pairs[p]["false"], pairs[p]["loss"])))
    return {"keep": keep, "rebuild": rebuild, "qualified": bool(good), "sweep_max_keep": max(k for k, _ in pairs),
            "pairs": {f"{k:g},{t:g}": c for (k, t), c in pairs.items()}, **pairs[(keep, rebuild)]}


def report_e(res: list[dict], rec: dict, total_mb: float) -> str:
    rows = [[f"{r['abs']:g}", f"{r['keep']:g}", f"{r['rebuild']:g}", fmt(r["ratio"], ".3f"), fmt(r["loss"], "+.2f"),
             fmt(r["mbs"], ".0f"), fmt(r["mbs"] / r["ref_mbs"]), _counts(r["stats"]), f"{r['caught']}/{r['boundaries']}",
             str(r["false_starts"])] for r in res]
    refs = {r["abs"]: (r["ref_ratio"], r["ref_mbs"]) for r in res}
    keep, reb = rec["keep"], rec["rebuild"]
    at_keep = {k: c for k, c in rec["pairs"].items() if float(k.split(",")[0]) == keep}
    notes = [f"- chosen from the pairs with loss <= {KEEP_LOSS:g}% against rebuilding every chunk at both bounds and no "
             "start-over inside a field: the most boundaries caught, then the largest keep, then the lowest rebuild"
             if rec["qualified"] else
             f"- no pair has loss <= {KEEP_LOSS:g}% at both bounds without starting over inside a field: the pair with "
             "the fewest start-overs inside fields, then the lowest loss",
             f"- ({keep:g}, {reb:g}): worst loss {rec['loss']:+.2f}%, starts over at {rec['caught']}/{rec['of']} field "
             f"boundaries (both bounds) and {rec['false']} time(s) inside a field"
             + (" (1.0 = never starts over)" if reb >= 1 else ""),
             f"- other rebuild thresholds at keep {keep:g}: " + "; ".join(
                 f"{k.split(',')[1]}: loss {c['loss']:+.2f}%, caught {c['caught']}/{c['of']}, inside {c['false']}"
                 for k, c in at_keep.items() if float(k.split(",")[1]) != reb)]
    if rec["qualified"] and keep == rec["sweep_max_keep"]:
        notes.append(f"- {keep:g} is the largest keep in the sweep: larger values were not tried")
    lines = [f"## E. Thresholds (CEAZ 4.5): the {total_mb:.0f} MB stream of D, 1 MiB chunks, single thread", "",
             "change = |s1 - s0| / max(s0, s1, 0.5) of the code spread against the codebook in force; loss and C x "
             "against a new codebook every chunk (" + "; ".join(f"abs {eb:g}: ratio {q:.3f}, {m:.0f} MB/s"
                                                                 for eb, (q, m) in refs.items())
             + "); boundaries caught = field boundaries where the stream started over within 2 chunks; "
             "other = start-overs inside a field.", "",
             markdown_table(["abs", "keep", "rebuild", "ratio", "loss %", "C MB/s", "C x rebuild", "k/r/o/s",
                     "boundaries caught", "other start-overs"], rows), "",
             f"**Recommended thresholds: keep = {keep:g}, rebuild = {reb:g}**  (`DEFAULT_THRESHOLDS = ({keep:g}, {reb:g})`)",
             "", *notes]
    return "\n".join(lines)


def bench_f(pairs, rows, eb) -> list[dict]:
    out = []
    for (na, a), (nb, b) in pairs:
        s = chunked([a, b], rows, eb, threads=None)
        ideal = [len(amrzip.compress(p[i:i + rows], abs=eb)) for p in (a, b) for i in range(0, p.shape[0], rows)]
        chunk_bytes = rows * a[0].nbytes
        per = [{"ratio": chunk_bytes / sz, "ideal": chunk_bytes / ib, "decision": d}
               for sz, ib, d in zip(s["sizes"], ideal, s["decisions"])]
        switch = a.shape[0] // rows

        def recovery(start, stop):  # chunks from `start` until one is within NEAR_IDEAL of the ideal
            return next((i - start for i in range(start, stop) if per[i]["ratio"] >= NEAR_IDEAL * per[i]["ideal"]), None)

        steady = lambda lo, hi: statistics.median(p["ratio"] / p["ideal"] for p in per[lo:hi])  # noqa: E731
        r = {"pair": f"{na} -> {nb}", "switch": switch, "chunks": per,
             "recover_start": recovery(0, switch), "recover_switch": recovery(switch, len(per)),
             "steady_a": steady(switch // 2, switch), "steady_b": steady(switch + (len(per) - switch) // 2, len(per))}
        out.append(r)
        _log(f"F {r['pair']:28s} recovered {r['recover_switch']} chunks after the switch; "
             f"steady adaptive/ideal {r['steady_a']:.3f} / {r['steady_b']:.3f}")
    return out


def report_f(res: list[dict], window: int = 6) -> str:
    lines = [f"## F. Response to a change of data (CEAZ 4.3): two fields in one stream, 1 MiB chunks, abs {STREAM_BOUND:g} "
             "(fields scaled to [0, 1]), default thresholds", "",
             "ideal = that chunk compressed alone by amrzip.compress (own predictor choice and codebook); "
             "decision K keep / R new codebook / S start over / O start over with a built-in codebook.", ""]
    rows = []
    for r in res:
        show = list(range(0, 3)) + list(range(max(3, r["switch"] - 2), min(len(r["chunks"]), r["switch"] + window)))
        for i in show:
            p = r["chunks"][i]
            rows.append([r["pair"], f"{i - r['switch']:+d}" if i >= r["switch"] - 2 else f"start+{i}", p["decision"],
                         fmt(p["ratio"]), fmt(p["ideal"]), fmt(p["ratio"] / p["ideal"], ".3f")])
    lines += [markdown_table(["stream", "chunk (vs switch)", "decision", "ratio", "ideal ratio", "ratio / ideal"], rows), ""]
    for r in res:
        rec = lambda n: "never" if n is None else f"{n} chunk(s)"  # noqa: E731
        lines.append(f"- {r['pair']}: within {100 * (1 - NEAR_IDEAL):.0f}% of the ideal {rec(r['recover_switch'])} after "
                     f"the switch ({rec(r['recover_start'])} after the start); steady-state ratio / ideal (median of "
                     f"the second half of each field) {r['steady_a']:.3f} before, {r['steady_b']:.3f} after")
    return "\n".join(lines)


# --- G: memory ------------------------------------------------------------------------------------------------

# Run in a fresh interpreter; the child reports VmHWM, the peak RSS of its own address space.  Not ru_maxrss
# (RUSAGE_CHILDREN in the parent or RUSAGE_SELF in the child): on Linux it carries the parent's RSS over fork and
# exec, so every child would report at least this process's few hundred MB.
_MEM_CHILD = r"""
import json, mmap, sys
import numpy as np, amrzip
a = json.loads(sys.argv[1])
mm = np.memmap(a["path"], dtype=np.float32, mode="r", shape=tuple(a["shape"]))
if a["mode"] != "open":
    row = mm[0].nbytes
    sc = amrzip.StreamCompressor(np.float32, (a["rows"], *mm.shape[1:]), abs=a["eb"], threads=a["threads"], output=a["out"])
    for i in range(0, mm.shape[0], a["rows"]):
        sc.write(mm[i:i + a["rows"]])
        if a["mode"] == "drop":
            # Mapped file pages count in RSS while they stay mapped: drop the ones read (they stay in the page
            # cache) so the peak measures the compressor, not the file.
            mm._mmap.madvise(mmap.MADV_DONTNEED, i * row, a["rows"] * row)
    sc.finish()
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")))  # kB
"""


def bench_g(parts, eb) -> dict:
    arrays = [a for _, a in parts]
    rows = _rows(arrays[0], MEM_CHUNK_MB)
    with tempfile.TemporaryDirectory(prefix="stream_bench_") as tmp:
        path = Path(tmp) / "field.f32"
        with open(path, "wb") as f:
            for a in arrays:
                a.tofile(f)
        shape = [sum(a.shape[0] for a in arrays), *arrays[0].shape[1:]]

        def peak_mb(mode, threads=None):
            arg = {"path": str(path), "shape": shape, "rows": rows, "eb": eb, "threads": threads, "mode": mode,
                   "out": str(Path(tmp) / "out.amrs")}
            done = subprocess.run([sys.executable, "-c", _MEM_CHILD, json.dumps(arg)], capture_output=True, text=True,
                                  check=True)
            return int(done.stdout.split()[-1]) * 1024 / 1e6  # VmHWM is in KiB

        chunk_mb = rows * arrays[0][0].nbytes / 1e6
        res = {"file_mb": path.stat().st_size / 1e6, "chunk_mb": chunk_mb, "base_mb": peak_mb("open"), "runs": []}
        for mode, threads in (("drop", 1), ("drop", None), ("keep", None)):
            p = peak_mb(mode, threads)
            run = {"mode": mode, "threads": threads or os.cpu_count(), "peak_mb": p, "over_mb": p - res["base_mb"]}
            run["chunks"] = run["over_mb"] / chunk_mb
            res["runs"].append(run)
            _log(f"G {mode:4s} threads {run['threads']}  peak {p:7.1f} MB  over baseline {run['over_mb']:7.1f} MB "
                 f"= {run['chunks']:.1f} chunks")
    return res


def report_g(res: dict, crit: dict) -> str:
    rows = [[{"drop": "yes", "keep": "no (naive memmap)"}[r["mode"]], str(r["threads"]), fmt(r["peak_mb"], ".1f"),
             fmt(r["over_mb"], ".1f"), fmt(r["chunks"], ".1f")] for r in res["runs"]]
    drop = [r for r in res["runs"] if r["mode"] == "drop"]
    worst = max(r["chunks"] for r in drop)
    state = "PASS" if worst <= MEM_MAX_CHUNKS else "FAIL"
    crit["G_memory"] = {"status": state, "worst_chunks": worst, "limit_chunks": MEM_MAX_CHUNKS}
    return "\n".join([
        f"## G. Peak memory: {res['file_mb']:.0f} MB raw float32 file, np.memmap, {MEM_CHUNK_MB} MiB chunks "
        f"({res['chunk_mb']:.2f} MB), output to a file", "",
        f"Peak RSS of a subprocess that compresses the file, minus that of one that only imports amrzip and opens the "
        f"memmap ({res['base_mb']:.1f} MB).  \"pages dropped\" = each chunk's pages of the mapping released after its "
        "write (madvise DONTNEED); without it the mapped file itself fills RSS.", "",
        markdown_table(["pages dropped", "threads", "peak RSS MB", "over baseline MB", "x chunk"], rows), "",
        f"- **{state}** G memory: at most {worst:.1f} x the chunk size over the baseline with pages dropped "
        f"(a small multiple: <= {MEM_MAX_CHUNKS:g})"])


# --- main -----------------------------------------------------------------------------------------------------

SECTIONS = "ABCDEFG"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fields", help=f"comma list of synthetic fields for A-C; default all ({','.join(datasets.SYNTHETIC)})")
    p.add_argument("--bounds", default=",".join(f"{b:g}" for b in BOUNDS), help="value-range relative bounds for A-C")
    p.add_argument("--sections", default=SECTIONS, help=f"which sections to run (default {SECTIONS})")
    p.add_argument("--repeat", type=int, help="timed runs per measurement in A (default 3, 1 with --quick)")
    p.add_argument("--stat", choices=["median", "min"], default="median", help="how A's repeats are reduced")
    p.add_argument("--quick", action="store_true", help="cropped fields (128^3, 900x1800), shorter sweeps")
    p.add_argument("--json", type=Path, help="write raw results and verdicts to this path")
    args = p.parse_args(argv)

    codec_bench.STAT = min if args.stat == "min" else statistics.median  # _timed reduces with it
    repeat = args.repeat or (1 if args.quick else 3)
    sections = set(args.sections.upper())
    bounds = _floats(args.bounds)
    fields = load_fields(args.fields.split(",") if args.fields else None, args.quick, real=False)
    books = _core.offline_codebooks()
    update_mb = [u for u in UPDATE_MB if u <= 64] if args.quick else UPDATE_MB
    keeps, rebuilds = (KEEPS[1::2], REBUILDS[1:]) if args.quick else (KEEPS, REBUILDS)

    core_file = Path(_core.__file__)
    built = core_file.stat().st_mtime  # a rebuild during the run would mix two builds (G runs in subprocesses)
    print(f"# amrzip chunked-stream benchmark\n\n{platform.node()} | {platform.processor() or platform.machine()} | "
          f"{os.cpu_count()} cores | numpy {np.__version__} | repeat {repeat} ({args.stat})"
          f"{' | QUICK (cropped fields, shorter sweeps)' if args.quick else ''} | "
          f"default thresholds {tuple(_core.DEFAULT_THRESHOLDS)} | built-in codebooks {len(books) or 'none'} | "
          f"_core built {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(built))} | load average at start {_load()}\n")
    t_start = time.perf_counter()
    res, crit, text = {}, {}, []

    def emit(s):  # each section prints as soon as it is done: a long run shows progress on stdout too
        print(s + "\n", flush=True)
        text.append(s)

    if "A" in sections:
        res["A"] = bench_a(fields, bounds, CHUNK_MB, repeat)
        emit(report_a(res["A"], crit))
    if "B" in sections:
        res["B"] = bench_b(fields, bounds, CHUNK_MB, 8 if args.quick else 32)
        emit(report_b(res["B"], crit))
    if "C" in sections:
        res["C"] = bench_c(fields, [b for b in (1e-4, 1e-3) if b in bounds] or bounds, books)
        emit(report_c(res["C"], books))
    if sections & set("DEFG"):
        parts = long_stream(args.quick)
        arrays = [a for _, a in parts]
        total_mb = sum(a.nbytes for a in arrays) / 1e6
        rows1 = _rows(arrays[0], 1)
        _log(f"long stream: {' + '.join(n for n, _ in parts)} = {total_mb:.0f} MB, {rows1} rows per 1 MiB chunk")
        ref = {}
        if "D" in sections:
            res["D"] = bench_d(parts, rows1, STREAM_BOUND, update_mb)
            r = next(r for r in res["D"] if r["arm"] == "rebuild")
            ref[STREAM_BOUND] = {"ratio": r["ratio"], "mbs": r["mbs"]}
            emit(report_d(res["D"], total_mb))
        if "E" in sections:
            res["E"] = bench_e(parts, rows1, [STREAM_BOUND, 10 * STREAM_BOUND], keeps, rebuilds, ref)
            res["E_recommendation"] = rec = recommend(res["E"])
            crit["E_thresholds"] = {"keep": rec["keep"], "rebuild": rec["rebuild"]}
            emit(report_e(res["E"], rec, total_mb))
        if "F" in sections:
            by = dict(parts)
            res["F"] = bench_f([(("smooth3d", by["smooth3d"]), ("turbulence3d", by["turbulence3d"])),
                                (("cosmology3d", by["cosmology3d"]), ("smooth3d", by["smooth3d"]))], rows1, STREAM_BOUND)
            emit(report_f(res["F"]))
        if "G" in sections:
            # the first four fields: 268 MB (34 MB with --quick)
            res["G"] = bench_g(parts[:4], STREAM_BOUND)
            emit(report_g(res["G"], crit))
        del parts, arrays

    lines = ["## Summary", ""]
    if "A_vs_rebuild" in crit:
        for base in ("rebuild", "independent"):
            c = crit[f"A_vs_{base}"]
            lines.append(f"- **{c['status']}** A, adaptive vs {base}: {c['speedup_geomean']:.2f}x compress throughput "
                         f"(need {NEED_SPEEDUP}x), worst ratio loss {c['worst_loss_pct']:+.2f}% (need <= {MAX_LOSS:g}%), "
                         f"{c['cases_ok']}/{c['cases']} cases meet both")
        lines.append(f"- **{crit['A_no_violations']['status']}** no bound violations in A")
    if "B_build_share" in crit:
        c = crit["B_build_share"]
        lines.append(f"- B: a codebook build is {c['median_pct']:.1f}% (median), at most {c['max_pct']:.1f}% of a "
                     f"chunk's compress time; approximate sort {'would' if c['approximate_sort_matters'] else 'would not'} matter")
    if "C" in res:
        lines.append("- C: no built-in codebooks" if not books else
                     f"- C: a built-in codebook won in {sum(r['offline'] for r in res['C'])}/"
                     f"{sum(r['records'] for r in res['C'])} start-overs"
                     + ("; the cheapest one's Huffman payload against exact codebooks, where one covers the chunk: "
                        + ", ".join(f"{r['field']}@{r['rel']:g} " + ("none covers" if r["costs"]["vs_exact_pct"] is None
                                                                       else f"{r['costs']['vs_exact_pct']:+.1f}%")
                                    for r in res["C"]) if res["C"] and all(r["costs"] for r in res["C"]) else ""))
    if "D" in res:
        best = max((r for r in res["D"] if r["arm"].startswith("interval")), key=lambda r: r["ratio"])
        lines.append(f"- D: best codebook update size {best['arm'].split()[1]} MiB")
    if "E_thresholds" in crit:
        lines.append(f"- E: recommended thresholds (keep, rebuild) = ({crit['E_thresholds']['keep']:g}, "
                     f"{crit['E_thresholds']['rebuild']:g})")
    for r in res.get("F", []):
        lines.append(f"- F: {r['pair']}: within {100 * (1 - NEAR_IDEAL):.0f}% of the ideal "
                     + ("never" if r["recover_switch"] is None else f"{r['recover_switch']} chunk(s)")
                     + f" after the switch; steady state {r['steady_b']:.3f} x the ideal after it")
    if "G_memory" in crit:
        c = crit["G_memory"]
        lines.append(f"- **{c['status']}** G memory: {c['worst_chunks']:.1f} x the chunk size (limit {c['limit_chunks']:g})")
    if args.quick or args.fields or args.bounds != ",".join(f"{b:g}" for b in BOUNDS):
        lines.append("- (partial run: the verdicts are defined on the full run)")
    emit("\n".join(lines))
    print(f"(total benchmark time {time.perf_counter() - t_start:.0f} s; load average at end {_load()}: "
          f"timings are only meaningful on an otherwise idle machine)")
    if core_file.stat().st_mtime != built:
        print("WARNING: amrzip._core was rebuilt during the run: the sections mix two builds; run again")
    if args.json:
        meta = {"argv": sys.argv[1:], "host": platform.node(), "cpus": os.cpu_count(), "numpy": np.__version__,
                "loadavg_end": _load(), "quick": args.quick, "repeat": repeat, "stat": args.stat,
                "default_thresholds": list(_core.DEFAULT_THRESHOLDS), "offline_codebooks": books}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "results": res, "criteria": crit}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
