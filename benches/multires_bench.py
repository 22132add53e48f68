"""Multiresolution snapshots (amrzip.multires) against OpenVisus IDX (raw, zip, zfp), same run.

    .venv/bin/python benches/multires_bench.py [--sizes 256,512] [--bounds 1e-2,1e-3,1e-4]
        [--repeat 3] [--threads 1] [--no-openvisus] [--no-amr] [--json OUT]

Sections (markdown tables on stdout):

A. Uniform fields: the 256^3 benchmark fields (smooth3d, turbulence3d, cosmology3d) and 512^3
   turbulence and lognormal fields (generated once, cached in benches/data). Per bound: our
   ratio, the non-progressive stream's (``amrzip.compress``, ratio mode) and their quotient;
   the largest error over the bound at full, 1/8 and 1/64 resolution; bytes and time of full,
   1/8, 1/64 and region (a 64^3 box at the centre) reads, and of a progressive read; the 1/8
   and 1/64 subsamples compressed alone by the codec (about what an error-bounded prefix holding
   those points can hope to take), against that fraction of the non-progressive stream; and the
   same reads from OpenVisus IDX datasets of the field (raw, zip; zfp where the package decodes
   it correctly, else marked).
B. AMR: the Nyx-like hierarchy of ``make demo`` and every real AMR file of ../shared/data, coalesced
   (PIDX's Store2) against the AMR layout (``amrzip.write``) and OpenVisus zip of the composite.
C. Region-of-interest writes: storage efficiency E = P/(P+S) of IDX blocks of 2^12..2^18 points
   for a 256^3 domain of 64 "processes" of 64^3, 1-80% of them writing, clustered (the first in
   Z order) or scattered (spread evenly), as the PIDX paper's figures 9-11; and the bytes our
   adaptive write stores for them (the rest at 1/512 resolution).

Reads are timed warm (the page cache holds the files), the median of --repeat, each in a fresh
open; ``bytes`` are what the reader read from the store (``MultiresDataset.bytes_read``) or the
IDX files' sizes that a read touched at most. Our data bytes leave out the metadata that opening
reads (the snapshot's description and each field's index: codebooks and block table), shown
apart.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
from report import fmt, markdown_table  # noqa: E402

import amrzip  # noqa: E402
import amrzip.multires as mr  # noqa: E402
from amrzip import _core  # noqa: E402

try:
    import OpenVisus as ov
except ImportError:  # the IDX peers are left out, with a note
    ov = None


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def field_512(kind: str) -> np.ndarray:
    path = datasets.CACHE_DIR / f"{kind}_512.npy"
    if path.exists():
        return np.load(path)
    if kind == "turbulence":
        a = datasets.gaussian_random_field((512,) * 3, slope=-11.0 / 3.0, seed=122)
    else:
        g = datasets.gaussian_random_field((512,) * 3, slope=-4.0, seed=133)
        g -= np.float32(g.max())
        g *= np.float32(np.log(1e6) / (float(g.max()) - float(g.min())))
        a = np.exp(g)
        a /= np.float32(a.mean(dtype=np.float64))
    a = np.ascontiguousarray(a, dtype=np.float32)
    np.save(path, a)
    return a


class Idx:
    """An OpenVisus IDX dataset of one field, written and read through the openvisus package."""

    def __init__(self, folder: Path, a: np.ndarray, compression: str):
        self.url = str(folder / "f.idx")
        kind = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}[a.dtype]
        t = time.perf_counter()
        ov.CreateIdx(url=self.url, dims=list(reversed(a.shape)), fields=[ov.Field("f", kind)], data=a, dim=a.ndim, compression=[compression])
        self.write_s = time.perf_counter() - t
        self.bytes = folder_bytes(folder)
        self.dim = a.ndim

    def read(self, quality=0, region=None):
        db = ov.LoadDataset(self.url)
        if region is None:
            return db.read(quality=quality)
        # OpenVisus takes x, y, z (numpy's axes reversed), half-open.
        box = list(reversed([list(r) for r in region]))
        return db.read(logic_box=[[b[0] for b in box], [b[1] for b in box]], quality=quality)


def uniform_section(args, out):
    fields = [("smooth3d", lambda: datasets.load("smooth3d")), ("turbulence3d", lambda: datasets.load("turbulence3d")),
              ("cosmology3d", lambda: datasets.load("cosmology3d"))]
    if 512 in args.sizes:
        fields += [("turbulence_512", lambda: field_512("turbulence")), ("lognormal_512", lambda: field_512("lognormal"))]
    if 256 not in args.sizes:
        fields = fields[3:]
    rows, reads, peers = [], [], []
    tmp = Path(tempfile.mkdtemp(prefix="multires_bench_"))
    try:
        for name, load in fields:
            a = load()
            raw = a.nbytes
            centre = tuple((n // 2 - 32, n // 2 + 32) for n in a.shape)
            for rel in args.bounds:
                store = tmp / f"{name}_{rel}"
                t = time.perf_counter()
                s = mr.write({"f": a}, store, rel=rel, threads=args.threads)
                write_s = time.perf_counter() - t
                eb = s["fields"]["f"]["abs_bound"]
                t = time.perf_counter()
                stream = amrzip.compress(a, rel=rel, threads=args.threads)
                flat_s = time.perf_counter() - t
                errs = {}

                def read(res=1, region=None):
                    # Data bytes: what the read took beyond the metadata opening read.
                    ds = amrzip.open(store, threads=args.threads)
                    meta = ds.bytes_read
                    return ds.read("f", resolution=res, region=region), ds.bytes_read - meta

                full_s, (full, full_bytes) = timed(lambda: read(), args.repeat)
                errs[1] = float(np.abs(full.astype(np.float64) - a).max()) / eb
                res_stats, alone = {}, {}
                for d, frac in ((3, Fraction(1, 8)), (6, Fraction(1, 64))):
                    sec, (part, nbytes) = timed(lambda: read(frac), args.repeat)
                    sub = mr.subsample(a, Fraction(1, 2**d))
                    errs[frac.denominator] = float(np.abs(part.astype(np.float64) - sub).max()) / eb
                    res_stats[frac.denominator] = (sec, nbytes)
                    # The same points compressed alone by the codec: about what an error-bounded
                    # prefix holding them can hope to take.
                    alone[frac.denominator] = len(amrzip.compress(np.ascontiguousarray(sub), abs=eb, threads=args.threads))
                region_s, (part, region_bytes) = timed(lambda: read(1, centre), args.repeat)
                assert np.array_equal(part, full[tuple(slice(*r) for r in centre)])
                ds = amrzip.open(store, threads=args.threads)
                meta = ds.bytes_read
                t = time.perf_counter()
                for _ in ds.progressive("f"):
                    pass
                prog_s, prog_bytes = time.perf_counter() - t, ds.bytes_read - meta
                levels = ds.level_bytes("f")
                stored = s["stored_bytes"]
                flat_ratio = raw / len(stream)
                rows.append([name, f"{rel:g}", fmt(raw / stored, ".1f"), fmt(flat_ratio, ".1f"), fmt((raw / stored) / flat_ratio, ".3f"),
                             fmt(max(errs.values()), ".4f"), fmt(raw / write_s / 1e6, ".0f"), fmt(raw / flat_s / 1e6, ".0f")])
                r8, r64 = res_stats[8], res_stats[64]
                reads.append([name, f"{rel:g}", fmt(meta / 1e3, ".1f"), fmt(full_s * 1e3, ".1f"), fmt(r8[0] * 1e3, ".2f"), fmt(r64[0] * 1e3, ".2f"),
                              fmt(full_s / r64[0], ".0f"), fmt(r8[1] / (full_bytes / 8), ".2f"), fmt(r64[1] / (full_bytes / 64), ".2f"),
                              f"{alone[8] / (len(stream) / 8):.2f} / {alone[64] / (len(stream) / 64):.2f}",
                              fmt(region_s * 1e3, ".2f"), fmt(region_bytes / full_bytes, ".3f"), fmt(prog_bytes / full_bytes, ".3f")])
                out["uniform"].append({"field": name, "rel": rel, "raw": raw, "stored": stored, "flat_ratio": flat_ratio, "errors": errs,
                                       "write_s": write_s, "flat_s": flat_s, "full_s": full_s, "full_bytes": full_bytes,
                                       "r8": r8, "r64": r64, "alone": alone, "flat_bytes": len(stream), "region": (region_s, region_bytes), "progressive": (prog_s, prog_bytes), "metadata": meta,
                                       "level_bytes": levels})
                shutil.rmtree(store)
                print(f"  {name} rel {rel:g}: ratio {raw / stored:.1f}", file=sys.stderr)
            if ov is not None and not args.no_openvisus:
                for comp in ("raw", "zip", "zfp-precision=16-64"):
                    folder = tmp / f"idx_{name}_{comp.split('-')[0]}"
                    folder.mkdir()
                    idx = Idx(folder, a, comp)
                    full_s, full = timed(lambda: idx.read(), args.repeat)
                    r8_s, _ = timed(lambda: idx.read(quality=-3), args.repeat)
                    r64_s, _ = timed(lambda: idx.read(quality=-6), args.repeat)
                    region_s, part = timed(lambda: idx.read(region=centre), args.repeat)
                    err = float(np.nanmax(np.abs(full.astype(np.float64) - a))) if np.isfinite(full).all() else float("inf")
                    peers.append([name, comp.split("-")[0], fmt(raw / idx.bytes, ".2f"), fmt(raw / idx.write_s / 1e6, ".0f"),
                                  fmt(full_s * 1e3, ".1f"), fmt(r8_s * 1e3, ".2f"), fmt(r64_s * 1e3, ".2f"), fmt(region_s * 1e3, ".2f"),
                                  "exact" if err == 0 else ("WRONG VALUES" if not math.isfinite(err) or err > 1 else f"{err:.3g}")])
                    out["openvisus"].append({"field": name, "compression": comp, "bytes": idx.bytes, "write_s": idx.write_s, "full_s": full_s,
                                             "r8_s": r8_s, "r64_s": r64_s, "region_s": region_s, "max_error": err})
                    shutil.rmtree(folder)
            del a
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n## A. Uniform fields: ratio, progressive cost, bound\n")
    print(markdown_table(["field", "rel", "ratio (HZ)", "ratio (non-progressive)", "HZ / non-progressive", "max error / bound (1, 1/8, 1/64)",
                          "HZ write MB/s", "non-progressive write MB/s"], rows))
    print("\n## A. Uniform fields: reads (ms, warm; data bytes as multiples of that fraction of a full read's)\n")
    print(markdown_table(["field", "rel", "metadata kB (read at open)", "full", "1/8", "1/64", "full / 1/64 time", "1/8 bytes / (full/8)", "1/64 bytes / (full/64)",
                          "alone: 1/8 / 1/64 (subsample compressed by itself, over that fraction of the stream)", "64^3 region", "region bytes / full", "progressive bytes / full"], reads))
    if peers:
        print("\n## A. OpenVisus IDX of the same fields (lossless raw and zip; zfp)\n")
        print(markdown_table(["field", "IDX", "ratio", "write MB/s", "full ms", "1/8 ms", "1/64 ms", "64^3 region ms", "values"], peers))
    elif ov is None:
        print("\nOpenVisus not installed (pip install openvisus): IDX peers left out.")


def amr_section(args, out):
    from amrzip.amr import synthetic

    cases = [("nyx-like (make demo)", synthetic.nyx_like())]
    for label, kind, path in datasets.real_files():
        if kind == "skip":
            continue
        try:
            h = amrzip.read(path)
        except ValueError as e:
            print(f"  {label}: {e}", file=sys.stderr)
            continue
        cases.append((label, h))
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="multires_amr_"))
    try:
        for label, h in cases:
            raw = sum(lev.num_cells * np.dtype(h.dtype(f)).itemsize for lev in h.levels for f in h.fields)
            rel = 1e-4
            try:
                t = time.perf_counter()
                s = mr.write(h, tmp / "hz", rel=rel, threads=args.threads)
                hz_s = time.perf_counter() - t
            except ValueError as e:
                rows.append([label, "-", "-", "-", "-", "-", "-", f"not coalesced: {e}"])
                continue
            t = time.perf_counter()
            a = amrzip.write(h, tmp / "amr", rel=rel, threads=args.threads)
            amr_s = time.perf_counter() - t
            f = h.fields[0]
            ds = amrzip.open(tmp / "hz", threads=args.threads)
            levels = ds.info(f)["attributes"]["amr_levels"]
            full_s, _ = timed(lambda: amrzip.open(tmp / "hz", threads=args.threads).read(f), args.repeat)
            coarse = Fraction(1, 2 ** (ds.info(f)["levels"] - levels[0]))
            coarse_s, _ = timed(lambda: amrzip.open(tmp / "hz", threads=args.threads).read(f, resolution=coarse), args.repeat)
            idx_ratio = "-"
            if ov is not None and not args.no_openvisus:
                folder = tmp / "idx"
                folder.mkdir()
                composite = ds.read(f)
                idx = Idx(folder, composite, "zip")
                one = sum(lev.num_cells * np.dtype(h.dtype(f)).itemsize for lev in h.levels)
                idx_ratio = fmt(one / idx.bytes, ".2f")
                shutil.rmtree(folder)
            rows.append([label, "x".join(map(str, ds.shape(f))), fmt(s["ratio"], ".1f"), fmt(a["ratio"], ".1f"),
                         fmt(raw / hz_s / 1e6, ".0f"), fmt(raw / amr_s / 1e6, ".0f"),
                         f"{fmt(full_s * 1e3, '.1f')} / {fmt(coarse_s * 1e3, '.2f')}", idx_ratio])
            out["amr"].append({"case": label, "hz_ratio": s["ratio"], "amr_ratio": a["ratio"], "hz_s": hz_s, "amr_s": amr_s,
                               "full_s": full_s, "coarse_s": coarse_s})
            shutil.rmtree(tmp / "hz")
            shutil.rmtree(tmp / "amr")
            print(f"  {label}: HZ {s['ratio']:.1f}, AMR layout {a['ratio']:.1f}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n## B. AMR hierarchies coalesced (rel 1e-4 of each field's range)\n")
    print(markdown_table(["hierarchy", "coalesced shape", "ratio (HZ)", "ratio (AMR layout)", "HZ write MB/s", "AMR write MB/s",
                          "read ms: full / coarsest level's resolution (first field)", "OpenVisus zip ratio (first field)"], rows))


def morton(i, bits):
    x = [0, 0, 0]
    for b in range(bits):
        for k in range(3):
            x[2 - k] |= ((i >> (3 * b + k)) & 1) << b
    return x


def roi_section(args, out):
    n, p = 256, 64
    per = n // p
    cells = per**3
    percents = [1, 5, 10, 20, 40, 60, 80]
    block_bits = [12, 14, 15, 16, 18]
    rows = []
    a = datasets.load("turbulence3d") if n == 256 else None
    tmp = Path(tempfile.mkdtemp(prefix="multires_roi_"))
    try:
        for layout in ("clustered", "scattered"):
            for pct in percents:
                k = max(1, round(cells * pct / 100))
                order = range(k) if layout == "clustered" else [round(i * cells / k) for i in range(k)]
                regions = []
                for i in order:
                    x = morton(i, per.bit_length() - 1)
                    regions.append(([c * p for c in x], [(c + 1) * p for c in x], 0))
                # Nothing outside the regions but the origin: drop every level there.
                keep = {"tile": 16, "elsewhere": 64, "regions": regions}
                effs = [_core.hz_efficiency([n] * 3, bb, keep) for bb in block_bits]
                s = mr.write({"f": a}, tmp / f"{layout}{pct}", rel=1e-3, threads=args.threads,
                             keep={"regions": [tuple(zip(lo, hi)) for lo, hi, _ in regions], "elsewhere": Fraction(1, 512), "tile": 16})
                rows.append([layout, f"{pct}% ({k} of {cells})", *[fmt(e["efficiency"], ".3f") for e in effs],
                             fmt(s["stored_bytes"] / 1e6, ".2f")])
                out["roi"].append({"layout": layout, "percent": pct, "processes": k, "efficiency": dict(zip(block_bits, effs)),
                                   "stored": s["stored_bytes"]})
                shutil.rmtree(tmp / f"{layout}{pct}")
        full = mr.write({"f": a}, tmp / "full", rel=1e-3, threads=args.threads)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n## C. Region-of-interest writes: storage efficiency E = P/(P+S) by IDX block size ({n}^3, {cells} processes of {p}^3)\n")
    print(markdown_table(["layout", "writing", *[f"E, 2^{b} blocks" for b in block_bits],
                          f"our MB (rest at 1/512; all at full: {full['stored_bytes'] / 1e6:.2f})"], rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,512", help="uniform field sizes (256 and/or 512)")
    ap.add_argument("--bounds", default="1e-2,1e-3,1e-4", help="value-range relative bounds")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-openvisus", action="store_true")
    ap.add_argument("--no-amr", action="store_true")
    ap.add_argument("--no-uniform", action="store_true")
    ap.add_argument("--no-roi", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.bounds = [float(b) for b in args.bounds.split(",")]
    out = {"uniform": [], "openvisus": [], "amr": [], "roi": [], "threads": args.threads,
           "openvisus_version": getattr(ov, "__version__", None) if ov else None}
    print(f"# multires_bench.py: {args.threads} thread(s), median of {args.repeat}, load average {os.getloadavg()[0]:.1f}")
    if not args.no_uniform:
        uniform_section(args, out)
    if not args.no_amr:
        amr_section(args, out)
    if not args.no_roi:
        roi_section(args, out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
