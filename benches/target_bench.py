"""Target benchmark: how closely amrzip.compress(ratio=R) and amrzip.compress(psnr=P) meet their targets.

Every error, ratio and PSNR is measured here from the stream and its decoding, never taken from the library.
See benches/README.md.

    .venv/bin/python benches/target_bench.py                        # full run, markdown tables on stdout
    .venv/bin/python benches/target_bench.py --quick                # smoke run on cropped fields
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets  # noqa: E402
from codec_bench import _errors, _load, _timed, load_fields  # noqa: E402
from report import fmt, markdown_table  # noqa: E402

import amrzip  # noqa: E402
from amrzip._metrics import psnr  # noqa: E402

RATIOS = [10.0, 20.0, 50.0, 100.0]
PSNRS = [40.0, 60.0, 80.0, 100.0]
PSNR_WINDOW = 1.5  # the promise: PSNR in [P, P + PSNR_WINDOW]
RATIO_CLOSE, RATIO_FAR = 0.05, 0.10  # acceptance (1): within CLOSE in >= RATIO_SHARE of cases, within FAR in all
RATIO_SHARE = 0.80
COARSEST_REL = 2.0  # past twice the range no bound changes the stream: the smallest stream amrzip makes


@dataclass
class Run:
    field: str
    kind: str  # "ratio" or "psnr"
    target: float
    ratio: float = math.nan  # original bytes / stream bytes
    psnr: float = math.nan  # dB over the finite values, peak = value range (amrzip._metrics.psnr)
    abs_bound: float = math.nan  # info()["abs_bound"]: what the search settled on
    rel_bound: float = math.nan  # abs_bound / (max - min)
    max_err: float = math.nan
    err_over_bound: float = math.nan
    violation: bool = False
    seconds: float = math.nan  # compress, including the search
    warning: str | None = None  # what amrzip warned (an unreachable ratio)
    closest: tuple[float, float] | None = None  # for a missed ratio: (abs bound, ratio) nearest the target by bisection
    error: str | None = None


def run_target(name: str, arr: np.ndarray, vrange: float, kind: str, target: float, threads: int | None) -> Run:
    r = Run(name, kind, target)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r.seconds, _, stream = _timed(lambda: amrzip.compress(arr, **{kind: target}, threads=threads), 1)
        r.warning = "; ".join(str(w.message) for w in caught) or None
        out = amrzip.decompress(stream, threads=threads)
        r.ratio = arr.nbytes / len(stream)
        r.psnr = psnr(arr, out)
        r.abs_bound = amrzip.info(stream)["abs_bound"]
        r.rel_bound = r.abs_bound / vrange
        r.max_err, _ = _errors(arr, out)
        r.err_over_bound = r.max_err / r.abs_bound if r.abs_bound > 0 else (0.0 if r.max_err == 0 else math.inf)
        r.violation = not r.max_err <= r.abs_bound  # NaN counts as a violation
    except Exception as e:  # keep going: one failing case must not hide the others
        r.error = f"{type(e).__name__}: {e}"
    return r


def closest_bound(arr: np.ndarray, r: Run, threads: int | None, steps: int = 12) -> tuple[float, float]:
    """(abs bound, ratio) closest to a missed ratio target found by bisecting log2(bound) with abs=, to tell a
    search that stopped short from a target that falls in a jump of the ratio curve."""
    ratio_at = lambda eb: arr.nbytes / len(amrzip.compress(arr, abs=eb, threads=threads))  # noqa: E731
    best = (r.abs_bound, r.ratio)
    lo = hi = math.log2(r.abs_bound)
    if r.ratio > r.target:  # widen the bracket until it holds the target (the ratio grows with the bound)
        while lo > hi - 8 and (lo == hi or ratio_at(2**lo) > r.target):
            lo -= 1
    else:
        while hi < lo + 8 and (lo == hi or ratio_at(2**hi) < r.target):
            hi += 1
    for _ in range(steps):
        mid = (lo + hi) / 2
        got = ratio_at(2**mid)
        if abs(got / r.target - 1) < abs(best[1] / r.target - 1):
            best = (2**mid, got)
        lo, hi = (mid, hi) if got < r.target else (lo, mid)
    return best


def coarsest(arr: np.ndarray, threads: int | None) -> dict:
    """Ratio and PSNR of the smallest stream: no target above that ratio or below that PSNR is reachable."""
    stream = amrzip.compress(arr, rel=COARSEST_REL, threads=threads)
    return {"ratio": arr.nbytes / len(stream), "psnr": psnr(arr, amrzip.decompress(stream, threads=threads))}


# --- reporting ------------------------------------------------------------------------------------------------


def _eob(r: Run) -> str:
    # a violation gets enough digits to show its size
    return fmt(r.err_over_bound, ".9f" if r.violation else ".3f") + (" !!VIOLATION" if r.violation else "")


def ratio_table(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        if r.error:
            rows.append([r.field, f"{r.target:g}", f"ERROR {r.error}"[:60]] + [""] * 5)
            continue
        rows.append([r.field, f"{r.target:g}", fmt(r.ratio), f"{r.ratio / r.target - 1:+.1%}" + (" (warned)" if r.warning else ""),
                     fmt(r.rel_bound, ".3g"), _eob(r), fmt(r.psnr, ".1f"), fmt(r.seconds)])
    return markdown_table(["field", "target ratio", "ratio", "deviation", "bound/range", "maxerr/bound", "PSNR dB", "seconds"], rows)


def psnr_table(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        if r.error:
            rows.append([r.field, f"{r.target:g}", f"ERROR {r.error}"[:60]] + [""] * 5)
            continue
        rows.append([r.field, f"{r.target:g}", fmt(r.psnr), f"{r.psnr - r.target:+.2f}", fmt(r.ratio),
                     fmt(r.rel_bound, ".3g"), _eob(r), fmt(r.seconds)])
    return markdown_table(["field", "target dB", "PSNR dB", "PSNR - target", "ratio", "bound/range", "maxerr/bound", "seconds"], rows)


def reach_table(reach: dict[str, dict]) -> str:
    rows = [[n, fmt(c["ratio"]), fmt(c["psnr"])] for n, c in reach.items()]
    return markdown_table(["field", f"coarsest ratio (rel {COARSEST_REL:g})", "coarsest PSNR dB"], rows)


def _ratio_reason(r: Run, reach: dict) -> str:
    if r.error:
        return r.error
    reason = f"{r.ratio:.4g} is {r.ratio / r.target - 1:+.1%} off"
    if r.target > reach["ratio"]:
        reason += f"; above the highest ratio reachable ({reach['ratio']:.4g}, the coarsest stream)"
    elif r.closest is not None:
        eb, got = r.closest
        close = abs(got / r.target - 1) <= RATIO_CLOSE
        reason += (f"; abs={eb:.6g} gives {got:.4g} ({got / r.target - 1:+.1%}): "
                   + ("reachable, the search stopped short" if close else "no bound tried comes closer (a jump in the ratio curve)"))
    return reason


def _psnr_reason(r: Run, reach: dict) -> str:
    if r.error:
        return r.error
    if r.psnr < r.target:
        return f"{r.psnr:.2f} dB is below the target: the floor is broken"
    reason = f"{r.psnr:.2f} dB is {r.psnr - r.target - PSNR_WINDOW:.2f} dB above the window"
    if r.target < reach["psnr"]:
        reason += f"; the target is below the lowest PSNR reachable ({reach['psnr']:.2f} dB, the coarsest stream)"
    return reason


def summarize(ratio_runs: list[Run], psnr_runs: list[Run], reach: dict[str, dict], full: bool) -> tuple[str, dict]:
    crit, lines = {}, ["## Acceptance checks", ""]
    if not full:
        lines += ["(partial run: the checks are defined on the full 4 fields x 4 targets each, uncropped)", ""]

    def verdict(key, desc, passed, detail, failures):
        state = "N/A" if passed is None else ("PASS" if passed else "FAIL")
        crit[key] = {"status": state, "detail": detail, "failures": failures}
        lines.append(f"- **{state}** {desc}: {detail}")
        lines.extend(f"  - {f}" for f in failures)

    devs = [abs(r.ratio / r.target - 1) if not r.error else math.inf for r in ratio_runs]
    close, far = sum(d <= RATIO_CLOSE for d in devs), sum(d <= RATIO_FAR for d in devs)
    violations = [r for r in ratio_runs + psnr_runs if r.violation or r.error]
    need = math.ceil(RATIO_SHARE * len(devs))
    misses = [f"{r.field} ratio {r.target:g}: {_ratio_reason(r, reach[r.field])}"
              for r, d in zip(ratio_runs, devs) if d > RATIO_CLOSE]
    misses += [f"{r.field} {r.kind} {r.target:g}: {r.error or f'max error {r.err_over_bound:.6f} x the bound'}"
               for r in violations]
    verdict("1_ratio", f"(1) ratio within ±{RATIO_CLOSE:.0%} in >= {RATIO_SHARE:.0%} of cases, ±{RATIO_FAR:.0%} in all, "
            "no bound violation", (close >= need and far == len(devs) and not violations) if devs else None,
            f"±{RATIO_CLOSE:.0%}: {close}/{len(devs)} (need {need}), ±{RATIO_FAR:.0%}: {far}/{len(devs)}, "
            f"bound violations {len(violations)}/{len(ratio_runs) + len(psnr_runs)} (ratio and PSNR runs)", misses)

    inside = [not r.error and r.target <= r.psnr <= r.target + PSNR_WINDOW for r in psnr_runs]
    floor = sum(not r.error and r.psnr >= r.target for r in psnr_runs)
    unreachable = sum(not r.error and r.target < reach[r.field]["psnr"] for r in psnr_runs)
    verdict("2_psnr", f"(2) PSNR in [P, P+{PSNR_WINDOW:g}] for every field and P", all(inside) if inside else None,
            f"in the window {sum(inside)}/{len(inside)}, at or above P {floor}/{len(inside)}"
            + (f", targets below the coarsest stream's PSNR {unreachable}" if unreachable else ""),
            [f"{r.field} psnr {r.target:g}: {_psnr_reason(r, reach[r.field])}" for r, ok in zip(psnr_runs, inside) if not ok])
    return "\n".join(lines), crit


# --- main -----------------------------------------------------------------------------------------------------


def _floats(spec: str) -> list[float]:
    return [float(v) for v in spec.split(",")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fields", help=f"comma list of synthetic fields; default all ({','.join(datasets.SYNTHETIC)})")
    p.add_argument("--ratios", default=",".join(f"{v:g}" for v in RATIOS), help="comma list of target ratios")
    p.add_argument("--psnrs", default=",".join(f"{v:g}" for v in PSNRS), help="comma list of target PSNRs in dB")
    p.add_argument("--threads", type=int, help="threads for amrzip (default all cores)")
    p.add_argument("--quick", action="store_true", help="crop fields to half size per axis (128^3, 900x1800)")
    p.add_argument("--json", type=Path, help="write raw results and summary to this path")
    args = p.parse_args(argv)

    names = args.fields.split(",") if args.fields else None
    ratios, psnrs = _floats(args.ratios), _floats(args.psnrs)
    fields = load_fields(names, args.quick, real=False)
    if not fields:
        p.error(f"no fields selected (known: {','.join(datasets.SYNTHETIC)})")
    full = not args.quick and len(fields) == len(datasets.SYNTHETIC) and ratios == RATIOS and psnrs == PSNRS

    print(f"# amrzip target benchmark\n\n{platform.node()} | {platform.processor() or platform.machine()} | "
          f"{os.cpu_count()} cores | numpy {np.__version__} | threads {args.threads or 'all'}"
          f"{' | QUICK (cropped fields)' if args.quick else ''} | load average at start {_load()}\n")
    ratio_runs, psnr_runs, reach = [], [], {}
    t_start = time.perf_counter()
    for name, arr in fields:
        vrange = float(arr.max()) - float(arr.min())
        reach[name] = coarsest(arr, args.threads)
        print(f"  {name:14s} coarsest stream: ratio {reach[name]['ratio']:.4g}, PSNR {reach[name]['psnr']:.2f} dB",
              file=sys.stderr, flush=True)
        for kind, targets, runs in (("ratio", ratios, ratio_runs), ("psnr", psnrs, psnr_runs)):
            for target in targets:
                r = run_target(name, arr, vrange, kind, target, args.threads)
                if kind == "ratio" and not r.error and abs(r.ratio / target - 1) > RATIO_CLOSE and target <= reach[name]["ratio"]:
                    r.closest = closest_bound(arr, r, args.threads)
                runs.append(r)
                status = r.error or (f"ratio {r.ratio:8.2f}  PSNR {r.psnr:7.2f}  err/eb {r.err_over_bound:.3f}  "
                                     f"{r.seconds:6.2f} s" + ("  !!VIOLATION" if r.violation else ""))
                print(f"  {name:14s} {kind} {target:<5g} {status}", file=sys.stderr, flush=True)

    print("## Fixed ratio (deviation = achieved / target - 1; bound = the absolute bound chosen, over max - min)\n")
    print(ratio_table(ratio_runs))
    print("\n## Target PSNR (PSNR over the finite values, peak = max - min)\n")
    print(psnr_table(psnr_runs))
    print("\n## Coarsest stream per field (the reach of any target)\n")
    print(reach_table(reach))
    print()
    text, criteria = summarize(ratio_runs, psnr_runs, reach, full)
    print(text)
    print(f"\n(total benchmark time {time.perf_counter() - t_start:.0f} s; load average at end {_load()}: "
          f"timings are only meaningful on an otherwise idle machine)")
    if args.json:
        meta = {"argv": sys.argv[1:], "host": platform.node(), "cpus": os.cpu_count(), "numpy": np.__version__,
                "loadavg_end": _load(), "quick": args.quick, "threads": args.threads}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "ratio": [asdict(r) for r in ratio_runs],
                                         "psnr": [asdict(r) for r in psnr_runs], "coarsest": reach,
                                         "summary": criteria}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
