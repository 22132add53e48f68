"""AMR compression benchmark: whole AMR hierarchies under value-range relative bounds, amrzip's AMR store against
AMReX's 1-D baseline, per-box 3-D SZ3 and whole-level SZ3, on synthetic (Nyx-like, WarpX-like) and real AMReX data.

    .venv/bin/python benches/amr_bench.py                        # full run (a few minutes), markdown on stdout
    .venv/bin/python benches/amr_bench.py --quick                 # smoke run: small synthetic hierarchies, one bound
    .venv/bin/python benches/amr_bench.py --datasets nyx --fields density --bounds 1e-3 --json benches/data/amr.json

Methods, each run per field with the same absolute bound eb = rel * (value range of the field's leaf cells):

  amrex-1d      AMReX's SZ compression of plotfiles: each level's data flattened box by box (x fastest, all cells,
                covered ones included) and cut into 1-D chunks of 1024 values, each chunk one SZ3 stream.  Fields are
                kept apart (AMReX interleaves them box by box, which can put two fields in one chunk): this favours the
                baseline.
  per-box-sz3   every box on its own as one 2-D/3-D SZ3 stream (all cells).
  level-sz3     every level embedded in its whole index space, the cells outside its boxes set to the mean of the
                level's own cells (a constant costs SZ3 almost nothing and, unlike zero, adds no jump larger than the
                field's own spread at box edges), compressed as one SZ3 array.
  ours-base     amrzip.write(..., sle=False, adaptive_block=False), every other setting default: the AMR store
                without shared lossless encoding and the adaptive (regression) block rule.
  ours-no-sle   amrzip.write(..., sle=False): every chunk's entropy coder statistics its own instead of shared per
                (level, field).
  ours-no-adaptive  amrzip.write(..., adaptive_block=False): regression blocks of 6 whatever the unit edge.
  ours-no-mean  amrzip.write(..., conserve_mean=False), every other setting default: what keeping each level's mean
                costs (a level whose errors lean one way is otherwise coded with half the bound plus an offset).
  ours          amrzip.write(h, store, rel=rel) with the writer's defaults (chunk edge per level and unit block edge
                per (level, field) chosen by trial, the unit among the blocking factor, 16 and 32; sle, adaptive
                blocks and conserve_mean on), read back with amrzip.open(store).to_hierarchy().  Each run writes one
                field's hierarchy into a new store folder, which then holds one file, the snapshot <name>.zarr.zip
                (docs/format.md section 15).  The store methods take the hierarchy's arrays as the reader returns
                them (Fortran-ordered, possibly unaligned memory maps) and run only when amrzip.write / amrzip.open
                exist.

SZ3 is pysz with SZ3's default predictor (interp + Lorenzo, chosen by sampling; the best of SZ3's predictors on
1024-value chunks, so also the strongest 1-D baseline), ABS bound mode, one thread.

Metrics: ratio = bytes of the field over ALL cells of all levels as the source stores them (covered cells included, the
same numerator for every method) / compressed payload bytes.  For the SZ3 baselines the payload is their SZ3 streams,
which carry no box metadata; for the store it is what amrzip.write attributes to the field, summed over the levels
(summary["levels"][L]["fields"][field]["stored_bytes"]): its chunks with their position tags, its shared tables
(coder statistics, fitted weights) and its slots in the shard indexes.  The store's metadata is the rest of the
snapshot file (the snapshot's zarr.json: packed box lists, geometry, bounds; each level array's zarr.json: codec
settings and the base64 text around the shared tables; the zip's entry headers and central directory; each shard
index's checksum), reported beside it: "meta bytes" = the snapshot file's size - payload, and "ratio incl. meta" =
source bytes / the snapshot file's size (every byte under the store's folder: a store is a folder of snapshot files
and holds nothing else; summary["stored_bytes"] is that size).  A run's hierarchy has one field, so the snapshot is
that field's alone.  Comparisons at equal PSNR use the payload ratio (like for like).  PSNR, max error and the
volume-weighted mean are taken over leaf cells only (cells no finer level covers), since the store rebuilds covered
cells instead of storing them.  PSNR's peak is the leaf cells' value range.  Time = compress + decompress seconds,
each the median of --repeat runs (default 3, every method alike; each repeated run must store the same bytes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import amr_metrics as am  # noqa: E402
from amrzip.amr.leaves import Leaves, mean_change, volume_weighted_mean  # noqa: E402
from report import fmt, geomean, markdown_table  # noqa: E402
from datasets import REAL_DATA_DIR  # noqa: E402

import amrzip  # noqa: E402
from amrzip import baselines  # noqa: E402
from amrzip.amr import Hierarchy, box_shape, synthetic  # noqa: E402

BOUNDS = [1e-2, 1e-3, 1e-4, 1e-5]
QUICK_BOUNDS = [1e-3]
CHUNK = baselines.AMREX_CHUNK  # values per AMReX HDF5 chunk, each compressed on its own

# name -> (fields benchmarked by default, loader(quick) -> Hierarchy)
DATASETS: dict[str, tuple[list[str], Callable[[bool], Hierarchy]]] = {}

# the acceptance targets of ours at equal PSNR (geometric mean over the PSNR overlap of the two curves), checked per
# field on these datasets (the others are reported for information)
TARGETS = {"amrex-1d": 3.0, "per-box-sz3": 1.2}
TARGET_DATASETS = ["nyx", "pelelmex_3d"]
# fields reported but left out of those checks, with the reason printed beside their numbers
NOT_TARGETED = {
    ("pelelmex_3d", "x_velocity"): "solver roundoff, not flow: this run is 2-D (every other field is constant along x "
                                   "to 1e-13 of its range) and |x_velocity| <= 1.5e-13 m/s where y_velocity reaches 1.5 m/s; "
                                   "a bound relative to its own range asks for the roundoff pattern to 1e-5 of itself",
    # only the 3x target: the per-box one is checked
    ("nyx", "temp", "amrex-1d"): "mostly independent noise: the generator's 20% log-normal scatter, independent of the "
                                 "density, spread evenly up to half the finest grid's Nyquist frequency; a non-causal "
                                 "least-squares predictor from all 26 exact neighbours, which no coder can match, reached "
                                 "1.9x this baseline's ratio at rel 1e-5 in a one-off measurement (docs/amr.md)",
}
# the volume-weighted mean of ours: max relative change over the fields of a dataset at a bound
MEAN_TARGETS = [("advection_2d", 1e-4, 1e-6)]
# in-situ speed against per-box SZ3, one thread each (--threads 1): per preset, the geomean over a dataset's fields
# and bounds of write and read throughput over per-box SZ3's, and (speed preset) the ratio at equal PSNR per field
SPEED_TARGETS = {"ours": {"write": 0.5, "read": 1.0}, "ours-speed": {"write": 1.5, "read": 2.0, "ratio": 1.3}}
SPEED_DATASETS = ["nyx", "pelelmex_3d", "warpx"]


def _dataset(name: str, fields: list[str]):
    def register(fn):
        DATASETS[name] = (fields, fn)
        return fn
    return register


@_dataset("nyx", ["density", "x_velocity", "y_velocity", "z_velocity", "temp"])
def _nyx(quick: bool) -> Hierarchy:
    return synthetic.small("nyx") if quick else synthetic.nyx_like()


@_dataset("warpx", ["Ey", "Ez", "rho"])
def _warpx(quick: bool) -> Hierarchy:
    return synthetic.small("warpx") if quick else synthetic.warpx_like()


@_dataset("pelelmex_3d", ["temp", "density", "x_velocity", "y_velocity", "z_velocity"])
def _pelelmex(quick: bool) -> Hierarchy:
    return read_amrex(REAL_DATA_DIR / "amrex" / "pelelmex_3d", DATASETS["pelelmex_3d"][0])


@_dataset("advection_2d", ["phi"])
def _advection(quick: bool) -> Hierarchy:
    return read_amrex(REAL_DATA_DIR / "amrex" / "advection_2d_4levels", DATASETS["advection_2d"][0])


# --- reading AMReX plotfiles ----------------------------------------------------------------------------------


def read_amrex(path: Path, fields: list[str]) -> Hierarchy:
    """A plotfile as a Hierarchy: amrzip.read when the package has it, else the benchmarks' box reader (cell-header
    version 1) plus the geometry from the plotfile Header.  Only ``fields`` are loaded by the fallback."""
    if hasattr(amrzip, "read"):
        h = amrzip.read(str(path))
        h = h.to_hierarchy() if not isinstance(h, Hierarchy) and hasattr(h, "to_hierarchy") else h
        return h.only([f for f in h.fields if f in fields])
    from plotfile_boxes import read_plotfile

    lines = (path / "Header").read_text().splitlines()
    ncomp = int(lines[1])
    at = 2 + ncomp  # dim, time, finest level, prob_lo, prob_hi, ref ratios, level domains, steps, dx per level, coord
    finest = int(lines[at + 2])
    prob_lo = [float(v) for v in lines[at + 3].split()]
    prob_hi = [float(v) for v in lines[at + 4].split()]
    ratios = [int(v) for v in lines[at + 5].split()]
    domains = re.findall(r"\(\([-\d,]+\) \([-\d,]+\) \([-\d,]+\)\)", lines[at + 6])
    coord_sys = int(lines[at + 9 + finest].split()[0])
    plot = read_plotfile(path)
    specs = []
    for L, lev in enumerate(plot.levels):
        lo, hi = (tuple(int(v) for v in g.split(",")) for g in re.findall(r"\(([-\d,]+)\)", domains[L])[:2])
        spec = {"boxes": lev.boxes_lohi, "domain": (lo, hi),
                # the reader gives (z, y, x) C-ordered arrays; the hierarchy indexes [i, j, k], x first
                "data": {f: [lev.box(i, f).T for i in range(len(lev.boxes_lohi))] for f in fields}}
        if L < len(plot.levels) - 1:
            spec["ref_ratio"] = ratios[L]
        specs.append(spec)
    return Hierarchy.from_arrays(specs, prob_lo=prob_lo, prob_hi=prob_hi, coord_sys=coord_sys,
                                 time=float(lines[at + 1]), attrs={"source": str(path)})


# --- methods --------------------------------------------------------------------------------------------------
# A method is fn(h, field, boxes, eb, rel) -> (payload bytes, {(level, box): array}, compress s, decompress s,
# bytes on disk including metadata or None when the method has no metadata apart from its payload[, layout]), layout
# being what the store chose per level ({"unit", "chunk", "predictor"}), for the JSON.

SZ3_ALGO = baselines.SZ3_ALGO
# Threads of the store methods, writing and reading (--threads; None: all cores). SZ3 runs on one.
STORE_THREADS = None
# Timed runs per (case, method), every method alike (--repeat); the median write and read times are reported. The
# smaller hierarchies write and read in a few milliseconds, where one run's time is mostly this VM's noise.
REPEAT = 3


def _shapes(boxes: dict) -> dict:
    return {key: a.shape for key, a in boxes.items()}


def amrex_1d(h, field, boxes, eb, rel):
    t0 = time.perf_counter()
    streams = baselines.amrex_1d_encode(boxes, [lev.num_boxes for lev in h.levels], eb, CHUNK, SZ3_ALGO)
    t1 = time.perf_counter()
    out = baselines.amrex_1d_decode(streams, h.dtype(field), _shapes(boxes), CHUNK)
    t2 = time.perf_counter()
    return baselines.stream_bytes(streams), out, t1 - t0, t2 - t1, None


def per_box_sz3(h, field, boxes, eb, rel):
    t0 = time.perf_counter()
    blobs = baselines.per_box_sz3_encode(boxes, eb, SZ3_ALGO)
    t1 = time.perf_counter()
    out = baselines.per_box_sz3_decode(blobs, h.dtype(field), _shapes(boxes))
    t2 = time.perf_counter()
    return baselines.stream_bytes(blobs), out, t1 - t0, t2 - t1, None


def level_sz3(h, field, boxes, eb, rel):
    conf = baselines.sz3_config(eb, SZ3_ALGO)
    dtype = h.dtype(field)

    def region(box, domain):  # the box inside the level's (z, y, x) array
        return tuple(slice(l - d, u - d + 1) for l, u, d in zip(box[0][::-1], box[1][::-1], domain[0][::-1]))

    t0 = time.perf_counter()
    blobs = []
    for L, lev in enumerate(h.levels):
        arrays = [boxes[(L, i)] for i in range(lev.num_boxes)]
        fill = sum(float(a.sum(dtype=np.float64)) for a in arrays) / max(1, sum(a.size for a in arrays))
        full = np.full(box_shape(lev.domain)[::-1], fill, dtype=dtype)
        for box, a in zip(lev.boxes, arrays):
            full[region(box, lev.domain)] = a.T
        blobs.append(baselines.sz3_compress(full, conf))
        del full
    t1 = time.perf_counter()
    out = {}
    for L, (lev, blob) in enumerate(zip(h.levels, blobs)):
        full = baselines.sz3_decompress(blob, dtype, box_shape(lev.domain)[::-1])
        for i, box in enumerate(lev.boxes):
            out[(L, i)] = np.array(full[region(box, lev.domain)].T)
    t2 = time.perf_counter()
    return sum(len(b) for b in blobs), out, t1 - t0, t2 - t1, None


def _files(path: Path) -> list[Path]:
    """Every file under ``path``."""
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def store(**options):
    """amrzip's AMR store with ``options`` for amrzip.write (the defaults otherwise): write one field's hierarchy into a
    new store, open it, rebuild the hierarchy, decode every box."""

    def run(h, field, boxes, eb, rel):
        sub = h.only([field])
        tmp = Path(tempfile.mkdtemp(prefix="amr_bench_"))
        path = tmp / "store"
        try:
            t0 = time.perf_counter()
            summary = amrzip.write(sub, str(path), rel=rel, threads=STORE_THREADS, **options)
            t1 = time.perf_counter()
            ds = amrzip.open(str(path), threads=STORE_THREADS)
            back = ds.to_hierarchy()
            out = back.field_boxes(field)  # every box decoded now, as the baselines' are
            t2 = time.perf_counter()
            if hasattr(ds, "close"):
                ds.close()
            files = {p: p.stat().st_size for p in _files(path)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        # A store is a folder of snapshot files: this one holds the one snapshot just written, every byte of which is
        # counted.  The payload is what the writer attributes to the field (chunks with their positions, shared tables,
        # shard index slots), the rest of the file is metadata.
        disk = sum(files.values())
        snapshots = [p for p in files if p.name.endswith(".zarr.zip")]
        if len(files) != 1 or len(snapshots) != 1:
            raise RuntimeError(f"the store holds {', '.join(p.name for p in files) or 'nothing'}, not one snapshot file")
        if int(summary["stored_bytes"]) != disk:
            raise RuntimeError(f"summary stored_bytes {summary['stored_bytes']} is not the snapshot file's {disk} B")
        if any(list(lev["fields"]) != [field] for lev in summary["levels"]):  # the file is the field's alone
            raise RuntimeError(f"the snapshot holds other fields than {field}")
        per_level = [lev["fields"][field] for lev in summary["levels"]]
        payload = sum(int(f["stored_bytes"]) for f in per_level)
        if not 0 < payload < disk:
            raise RuntimeError(f"the field's stored_bytes {payload} is not a part of the snapshot file ({disk} B)")
        layout = [{k: f.get(k) for k in ("unit", "chunk", "predictor")} for f in per_level]
        if [lev.boxes for lev in back.levels] != [lev.boxes for lev in h.levels]:  # same boxes, maybe reordered
            where = {(L, b): (L, i) for L, lev in enumerate(back.levels) for i, b in enumerate(lev.boxes)}
            out = {(L, i): out[where[(L, b)]] for L, lev in enumerate(h.levels) for i, b in enumerate(lev.boxes)}
        return payload, out, t1 - t0, t2 - t1, disk, layout

    return run


BASELINES = {"amrex-1d": amrex_1d, "per-box-sz3": per_box_sz3, "level-sz3": level_sz3}
STORE_METHODS = {"ours-base": store(sle=False, adaptive_block=False), "ours-no-sle": store(sle=False),
                 "ours-no-adaptive": store(adaptive_block=False), "ours-no-mean": store(conserve_mean=False),
                 "ours": store(), "ours-speed": store(mode="speed")}


def have_store() -> bool:
    return hasattr(amrzip, "write") and hasattr(amrzip, "open")


# --- measurement ----------------------------------------------------------------------------------------------


@dataclass
class Run:
    dataset: str
    field: str
    method: str
    bound: float  # value-range relative, over the field's leaf cells
    abs_bound: float
    orig_bytes: int  # all cells of all levels, as stored by the source
    compressed_bytes: int = 0  # the payload: SZ3 streams, or the store's bytes of the field (its stored_bytes summed)
    ratio: float = float("nan")  # orig_bytes / compressed_bytes
    psnr: float = float("nan")  # over leaf cells, peak = their value range
    max_err: float = float("nan")  # over leaf cells
    err_over_bound: float = float("nan")
    seconds: float = float("nan")  # compress + decompress
    c_seconds: float = float("nan")
    d_seconds: float = float("nan")
    mean_change: float = float("nan")  # |change of the volume-weighted leaf mean| / mean_ref
    mean_ref: str = "mean"  # "mean": over |mean|; "range": over the leaf value range (the mean is ~0)
    mean_abs_change: float = float("nan")
    disk_bytes: int | None = None  # the store: every byte of the snapshot file (payload + metadata); None for the baselines
    metadata_bytes: int | None = None  # disk_bytes - compressed_bytes: zarr.json documents, zip records, index checksums
    ratio_incl_meta: float = float("nan")  # orig_bytes / disk_bytes
    layout: list | None = None  # the store: per level, the unit block edge, chunk edge and predictor it chose
    violation: bool = False
    error: str | None = None


@dataclass
class Prepared:
    """One field of one dataset, with what every method's run is compared against."""

    dataset: str
    field: str
    h: Hierarchy
    boxes: dict
    leaves: Leaves
    leaf: np.ndarray
    vrange: float
    mean: float
    orig_bytes: int


def prepare(dataset: str, h: Hierarchy, field: str, leaves: Leaves) -> Prepared:
    boxes = h.field_boxes(field)
    leaf = leaves.values(boxes)
    return Prepared(dataset, field, h, boxes, leaves, leaf, am.value_range(leaf),
                    volume_weighted_mean(leaf, leaves.volumes), am.stored_bytes(h, field))


def run_method(p: Prepared, method: str, fn: Callable, rel: float) -> Run:
    eb = rel * p.vrange
    r = Run(p.dataset, p.field, method, rel, eb, p.orig_bytes)
    try:
        r.compressed_bytes, out, r.c_seconds, r.d_seconds, r.disk_bytes, *extra = fn(p.h, p.field, p.boxes, eb, rel)
        times = [(r.c_seconds, r.d_seconds)]
        for _ in range(REPEAT - 1):
            size, _, c, d, *_ = fn(p.h, p.field, p.boxes, eb, rel)
            if size != r.compressed_bytes:
                raise RuntimeError(f"a repeated run stored {size} bytes, the first {r.compressed_bytes}")
            times.append((c, d))
        r.c_seconds, r.d_seconds = statistics.median(c for c, _ in times), statistics.median(d for _, d in times)
        r.layout = extra[0] if extra else None
        r.seconds = r.c_seconds + r.d_seconds
        r.ratio = p.orig_bytes / r.compressed_bytes
        if r.disk_bytes is not None:
            r.metadata_bytes = r.disk_bytes - r.compressed_bytes
            r.ratio_incl_meta = p.orig_bytes / r.disk_bytes
        dec = p.leaves.values(out)
        r.max_err = float(np.abs(dec - p.leaf).max())
        r.err_over_bound = r.max_err / eb if eb > 0 else (0.0 if r.max_err == 0 else math.inf)
        r.violation = not r.max_err <= eb
        r.psnr = am.psnr(p.leaf, dec, p.vrange)
        dec_mean = volume_weighted_mean(dec, p.leaves.volumes)
        r.mean_abs_change = abs(dec_mean - p.mean)
        r.mean_change, r.mean_ref = mean_change(p.mean, dec_mean, p.vrange)
    except Exception as e:  # one failing method must not hide the others' numbers
        r.error = f"{type(e).__name__}: {e}"
    return r


# --- reporting ------------------------------------------------------------------------------------------------


def describe(name: str, h: Hierarchy, fields: list[str], leaves: Leaves) -> dict:
    per_level = []
    for L, lev in enumerate(h.levels):
        leaf = sum(int(m.sum()) for (l, _), m in leaves.masks.items() if l == L)
        per_level.append({"boxes": lev.num_boxes, "cells": lev.num_cells, "domain_cells": math.prod(box_shape(lev.domain)),
                          "leaf_cells": leaf})
    return {"dataset": name, "dim": h.dim, "dtype": str(h.dtype(fields[0])), "fields": fields, "levels": per_level,
            "cells": sum(lev.num_cells for lev in h.levels), "leaf_cells": leaves.count,
            "bytes_per_field": am.stored_bytes(h, fields[0])}


def datasets_table(infos: list[dict]) -> str:
    rows = []
    for d in infos:
        lv = d["levels"]
        rows.append([d["dataset"], f"{d['dim']}-D {d['dtype']}", str(len(lv)), " / ".join(str(l["boxes"]) for l in lv),
                     " / ".join(str(l["cells"]) for l in lv),
                     " / ".join(f"{100 * l['cells'] / l['domain_cells']:.1f}%" for l in lv),
                     f"{100 * d['leaf_cells'] / d['cells']:.1f}%", f"{d['bytes_per_field'] / 1e6:.2f}", ", ".join(d["fields"])])
    return markdown_table(["dataset", "type", "levels", "boxes per level", "cells per level", "level cover of its domain",
                   "leaf share of all cells", "MB per field (all cells)", "fields"], rows)


def results_table(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        if r.error:
            rows.append([f"{r.dataset}/{r.field}", f"{r.bound:g}", r.method, f"ERROR {r.error}"[:70]] + [""] * 6)
            continue
        eob = fmt(r.err_over_bound, ".9f" if r.violation else ".3f") + (" !!VIOLATION" if r.violation else "")
        mc = fmt(r.mean_change, ".1e") + (" (of range)" if r.mean_ref == "range" else "")
        rows.append([f"{r.dataset}/{r.field}", f"{r.bound:g}", r.method, fmt(r.ratio), fmt(r.ratio_incl_meta),
                     "-" if r.metadata_bytes is None else str(r.metadata_bytes), fmt(r.psnr, ".1f"), eob,
                     fmt(r.seconds, ".3f"), mc])
    return markdown_table(["dataset/field", "bound", "method", "ratio (payload)", "ratio incl. meta", "meta bytes",
                   "PSNR dB (leaf)", "maxerr/eb (leaf)", "C+D s", "rel. change of mean"], rows)


THROUGHPUT_METHODS = ["ours", "ours-speed", "per-box-sz3", "amrex-1d"]


def throughput_table(runs: list[Run]) -> str:
    """Write and read throughput (source bytes / seconds) of the store's presets and the SZ3 baselines, and the
    store's over per-box SZ3's in the same run, per case and as geometric means per method."""
    by = {(r.dataset, r.field, r.bound, r.method): r for r in runs if not r.error and r.c_seconds > 0 and r.d_seconds > 0}
    rows, gains = [], {}
    for (d, f, b, m), r in by.items():
        if m not in THROUGHPUT_METHODS:
            continue
        peer = by.get((d, f, b, "per-box-sz3"))
        w, rd = r.orig_bytes / r.c_seconds / 1e6, r.orig_bytes / r.d_seconds / 1e6
        vs = ["", ""]
        if peer is not None and m.startswith("ours"):
            gw, gr = peer.c_seconds / r.c_seconds, peer.d_seconds / r.d_seconds
            gains.setdefault(m, []).append((gw, gr))
            vs = [f"{gw:.2f}", f"{gr:.2f}"]
        rows.append([f"{d}/{f}", f"{b:g}", m, f"{r.ratio:.1f}", f"{w:.1f}", f"{rd:.1f}", *vs])
    text = markdown_table(["dataset/field", "bound", "method", "ratio (payload)", "write MB/s", "read MB/s",
                           "write vs per-box SZ3", "read vs per-box SZ3"], rows)
    for m, g in gains.items():
        geo = [geomean([x[k] for x in g]) for k in (0, 1)]
        lo = [min(x[k] for x in g) for k in (0, 1)]
        text += (f"\n\n{m} over per-box SZ3, geomean of {len(g)} cases (min): write {geo[0]:.2f}x ({lo[0]:.2f}x), "
                 f"read {geo[1]:.2f}x ({lo[1]:.2f}x)")
    return text


def metadata_table(runs: list[Run]) -> str:
    """The store's metadata per run group: bytes and share of the snapshot file, and how the ratio moves with it."""
    rows = []
    for (d, f, m) in dict.fromkeys((r.dataset, r.field, r.method) for r in runs if r.metadata_bytes is not None):
        rs = [r for r in runs if (r.dataset, r.field, r.method) == (d, f, m) and r.error is None]
        if rs:
            span = lambda xs, fmt: (f"{format(min(xs), fmt)}-{format(max(xs), fmt)}" if len(xs) > 1  # noqa: E731
                                    else format(xs[0], fmt))
            rows.append([f"{d}/{f}", m, span([r.metadata_bytes for r in rs], "d"),
                         span([100 * r.metadata_bytes / r.disk_bytes for r in rs], ".1f") + "%",
                         span([r.ratio_incl_meta / r.ratio for r in rs], ".3f")])
    return markdown_table(["dataset/field", "method", "meta bytes", "share of the snapshot file",
                   "ratio incl. meta / payload ratio"], rows)


def rate_distortion(runs: list[Run]) -> tuple[str, dict]:
    """ratio(reference)/ratio(method) at equal PSNR per dataset/field; the reference is ours when it ran."""
    ok = [r for r in runs if r.error is None]
    methods = list(dict.fromkeys(r.method for r in ok))
    ref = "ours" if "ours" in methods else "per-box-sz3"
    others = [m for m in methods if m != ref]
    cases = list(dict.fromkeys((r.dataset, r.field) for r in ok))
    curve = lambda d, f, m, key="ratio": [(r.psnr, getattr(r, key)) for r in ok  # noqa: E731
                                         if (r.dataset, r.field, r.method) == (d, f, m)]
    cell = lambda q: "n/a" if q is None else f"{q['geomean']:.2f} ({q['min']:.2f}-{q['max']:.2f})"  # noqa: E731
    summary = {"reference": ref, "ratio": "payload", "cases": []}
    rows, meta_rows, speed_rows = [], [], []
    # for information: ours with its metadata counted, against the baselines (which carry none)
    meta_others = [m for m in others if m in BASELINES] if ref == "ours" else []
    # the speed preset against the baselines, when both ran
    speed_others = [m for m in methods if m in BASELINES] if "ours-speed" in methods else []
    for d, f in cases:
        case = {"dataset": d, "field": f}
        cells = [f"{d}/{f}"]
        for m in others:
            q = am.ratio_at_equal_psnr(curve(d, f, ref), curve(d, f, m))
            case[m] = q
            cells.append(cell(q))
        if meta_others:
            case["incl_meta"] = {}
            meta_cells = [f"{d}/{f}"]
            for m in meta_others:
                q = am.ratio_at_equal_psnr(curve(d, f, ref, "ratio_incl_meta"), curve(d, f, m))
                case["incl_meta"][m] = q
                meta_cells.append(cell(q))
            meta_rows.append(meta_cells)
        if speed_others:
            case["speed"] = {}
            speed_cells = [f"{d}/{f}"]
            for m in speed_others:
                q = am.ratio_at_equal_psnr(curve(d, f, "ours-speed"), curve(d, f, m))
                case["speed"][m] = q
                speed_cells.append(cell(q))
            speed_rows.append(speed_cells)
        summary["cases"].append(case)
        rows.append(cells)
    lines = [f"## Rate-distortion: ratio({ref}) / ratio(method) at equal PSNR", "",
             "Ratios are payload ratios (source bytes / compressed payload: SZ3 streams, or the store's bytes of the "
             "field: chunks with their positions, shared tables, shard index slots), since the SZ3 baselines carry no "
             "box metadata either; the store's metadata is in the results' \"ratio incl. meta\" column.  Geometric mean (min-max) over 9 PSNRs spread across the overlap of the two "
             "curves; log(ratio) is interpolated linearly in PSNR between the bounds' points.  n/a: fewer than 2 points "
             "or no overlap.", ""]
    lines.append(markdown_table(["dataset/field"] + [f"vs {m}" for m in others], rows) if others else "(one method only)")
    if meta_rows:
        lines += ["", "For information, the same with ours' store metadata counted (ratio incl. meta(ours) / ratio(method)): "
                  "the snapshot's and levels' zarr.json documents and the zip's records are a fixed cost per box and "
                  "level, large beside a small or very smooth "
                  "field's payload.", "",
                  markdown_table(["dataset/field"] + [f"vs {m}" for m in meta_others], meta_rows)]
    if speed_rows:
        lines += ["", "The speed preset against the baselines (ratio(ours-speed) / ratio(method), payload ratios):", "",
                  markdown_table(["dataset/field"] + [f"vs {m}" for m in speed_others], speed_rows)]
    if ref != "ours":
        lines += ["", "(ours not run: the table compares the baselines with per-box 3-D SZ3 instead)"]
    return "\n".join(lines), summary


def acceptance(runs: list[Run], rd: dict | None) -> tuple[str, dict]:
    """PASS/FAIL lines: ours against TARGETS at equal PSNR per field of TARGET_DATASETS, and MEAN_TARGETS."""
    lines = ["## Acceptance", "",
             "At equal PSNR (payload ratios, geomean over the PSNR overlap): " +
             ", ".join(f"ratio(ours) >= {t:g}x ratio({m})" for m, t in TARGETS.items()) +
             f", for every benchmarked field of {', '.join(TARGET_DATASETS)}.", ""]
    checks = []

    def verdict(ok) -> str:
        return "N/A " if ok is None else ("PASS" if ok else "FAIL")

    cases = {(c["dataset"], c["field"]): c for c in (rd or {}).get("cases", [])} if (rd or {}).get("reference") == "ours" else {}
    ran = list(dict.fromkeys((r.dataset, r.field) for r in runs))
    for d in TARGET_DATASETS if rd is not None else []:
        fields = [f for dd, f in ran if dd == d]
        if not fields:
            lines.append(f"- N/A  {d}: not run")
            checks.append({"check": f"{d} equal-PSNR targets", "status": "N/A"})
            continue
        for f in fields:
            for m, target in TARGETS.items():
                q = cases.get((d, f), {}).get(m)
                skip = NOT_TARGETED.get((d, f, m)) or NOT_TARGETED.get((d, f))
                ok = None if q is None or skip else q["geomean"] >= target
                detail = ("no equal-PSNR comparison (ours or the baseline missing, or < 2 bounds, or no overlap)"
                          if q is None else f"{q['geomean']:.2f}x (min-max {q['min']:.2f}-{q['max']:.2f}x over "
                          f"{q['psnr_lo']:.0f}-{q['psnr_hi']:.0f} dB)")
                lines.append(f"- {verdict(ok)} {d}/{f}: ratio(ours) / ratio({m}) >= {target:g}: {detail}"
                             + ("" if not skip else f" [not checked: {skip}]" if m == next(iter(TARGETS)) else " [not checked]"))
                checks.append({"check": "equal-psnr", "dataset": d, "field": f, "method": m, "target": target,
                               "value": None if q is None else q["geomean"], "status": verdict(ok).strip()}
                              | ({"not_checked": skip} if skip else {}))
    if rd is None:
        lines.append("- N/A  equal-PSNR targets: comparing at equal PSNR needs at least 2 bounds")
        checks.append({"check": "equal-psnr", "status": "N/A"})
    lines += ["", "Volume-weighted mean of ours over the leaf cells: the largest relative change over a dataset's fields "
              "(over |mean|, or over the value range where the mean is ~0).", ""]
    for d, bound, limit in MEAN_TARGETS:
        mine = [r for r in runs if r.dataset == d and r.method == "ours" and r.bound == bound and r.error is None]
        if not mine:
            lines.append(f"- N/A  {d} at rel {bound:g}: ours not run there")
            checks.append({"check": "mean", "dataset": d, "bound": bound, "target": limit, "status": "N/A"})
            continue
        worst = max(mine, key=lambda r: r.mean_change)
        ok = all(r.mean_change <= limit for r in mine)
        others = {m: max(r.mean_change for r in runs if r.dataset == d and r.method == m and r.bound == bound
                         and r.error is None)
                  for m in dict.fromkeys(r.method for r in runs if r.method != "ours" and r.dataset == d
                                         and r.bound == bound and r.error is None)}
        lines.append(f"- {verdict(ok)} {d} at rel {bound:g}: max over fields {worst.mean_change:.1e} "
                     f"({worst.field}{', of range' if worst.mean_ref == 'range' else ''}) <= {limit:g}"
                     + (f"  [others: {', '.join(f'{m} {v:.1e}' for m, v in others.items())}]" if others else ""))
        checks.append({"check": "mean", "dataset": d, "bound": bound, "target": limit, "value": worst.mean_change,
                       "field": worst.field, "others": others, "status": verdict(ok).strip()})
    speed_lines, speed_checks = speed_acceptance(runs, rd, verdict)
    lines += speed_lines
    checks += speed_checks
    decided = [c["status"] for c in checks if c["status"] != "N/A"]
    overall = "N/A" if not decided else ("PASS" if all(s == "PASS" for s in decided) else "FAIL")
    lines += ["", f"Overall: {overall} ({decided.count('PASS')}/{len(decided)} checks passed"
              + (f", {len(checks) - len(decided)} N/A" if len(decided) < len(checks) else "") + ")"]
    return "\n".join(lines), {"status": overall, "checks": checks}


def speed_acceptance(runs: list[Run], rd: dict | None, verdict) -> tuple[list[str], list[dict]]:
    """PASS/FAIL lines of SPEED_TARGETS on SPEED_DATASETS (timings count only with one store thread)."""
    lines = ["", "Against per-box SZ3, one thread each (geomean over a dataset's fields and bounds of the throughput "
             "ratios; the ratio at equal PSNR per field): " +
             "; ".join(f"{m} " + ", ".join(f"{k} >= {v:g}x" for k, v in t.items()) for m, t in SPEED_TARGETS.items())
             + ".", ""]
    checks = []
    by = {(r.dataset, r.field, r.bound, r.method): r for r in runs if not r.error and r.c_seconds > 0 and r.d_seconds > 0}
    cases = {(c["dataset"], c["field"]): c for c in (rd or {}).get("cases", [])}
    for d in SPEED_DATASETS:
        for m, targets in SPEED_TARGETS.items():
            pairs = [(by[k[:3] + ("per-box-sz3",)], r) for k, r in by.items()
                     if k[0] == d and k[3] == m and k[:3] + ("per-box-sz3",) in by]
            if not pairs:
                continue
            for what in ("write", "read"):
                gain = geomean([(p.c_seconds / r.c_seconds) if what == "write" else (p.d_seconds / r.d_seconds)
                                for p, r in pairs])
                ok = None if STORE_THREADS != 1 else gain >= targets[what]
                lines.append(f"- {verdict(ok)} {d}: {m} {what} / per-box SZ3 >= {targets[what]:g}: {gain:.2f}x "
                             f"over {len(pairs)} cases" + ("" if ok is not None else " [not checked: needs --threads 1]"))
                checks.append({"check": f"{what} speed", "dataset": d, "method": m, "target": targets[what],
                               "value": gain, "status": verdict(ok).strip()})
            if "ratio" not in targets:
                continue
            for f in dict.fromkeys(r.field for _, r in pairs):
                q = cases.get((d, f), {}).get("speed", {}).get("per-box-sz3")
                skip = NOT_TARGETED.get((d, f))
                ok = None if q is None or skip else q["geomean"] >= targets["ratio"]
                lines.append(f"- {verdict(ok)} {d}/{f}: ratio({m}) / ratio(per-box-sz3) >= {targets['ratio']:g}: "
                             + ("no equal-PSNR comparison" if q is None else f"{q['geomean']:.2f}x")
                             + (" [not checked]" if skip else ""))
                checks.append({"check": "speed equal-psnr", "dataset": d, "field": f, "method": m,
                               "target": targets["ratio"], "value": None if q is None else q["geomean"],
                               "status": verdict(ok).strip()})
    return lines, checks


# --- main -----------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    global SZ3_ALGO, STORE_THREADS, REPEAT
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", help=f"comma list of {', '.join(DATASETS)} (default all)")
    p.add_argument("--fields", help="comma list of fields, replacing each chosen dataset's default fields where it has them")
    p.add_argument("--bounds", help="comma list of value-range relative bounds (default 1e-2,1e-3,1e-4,1e-5; --quick 1e-3)")
    p.add_argument("--methods", help=f"comma list of {', '.join([*BASELINES, *STORE_METHODS])} (default all)")
    p.add_argument("--sz3-algo", default="INTERP_LORENZO", choices=["INTERP_LORENZO", "INTERP", "LORENZO_REG"],
                   help="SZ3 predictor of the baselines (default INTERP_LORENZO, SZ3's default)")
    p.add_argument("--threads", type=int, help="threads of the store methods, writing and reading (default all cores; "
                   "SZ3 runs on one)")
    p.add_argument("--repeat", type=int, help=f"timed runs per case and method, median reported (default {REPEAT}; "
                   "--quick 1)")
    p.add_argument("--quick", action="store_true", help="small synthetic hierarchies and one bound (smoke run)")
    p.add_argument("--json", type=Path, help="write runs, dataset summaries and the rate-distortion summary here")
    args = p.parse_args(argv)

    SZ3_ALGO = args.sz3_algo
    if args.repeat is not None and args.repeat < 1:
        p.error(f"--repeat must be at least 1, got {args.repeat}")
    REPEAT = args.repeat or (1 if args.quick else REPEAT)
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    STORE_THREADS = args.threads
    names = args.datasets.split(",") if args.datasets else list(DATASETS)
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        p.error(f"unknown dataset(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}")
    bounds = [float(b) for b in args.bounds.split(",")] if args.bounds else (QUICK_BOUNDS if args.quick else BOUNDS)
    methods = dict(BASELINES)
    store_ok = have_store()
    if store_ok:
        methods.update(STORE_METHODS)
    if args.methods:
        wanted = args.methods.split(",")
        methods = {m: fn for m, fn in methods.items() if m in wanted}
        store_wanted = [m for m in wanted if m in STORE_METHODS]
    else:
        store_wanted = list(STORE_METHODS)

    load_start = list(os.getloadavg())
    print(f"# amrzip AMR benchmark\n\n{platform.node()} | {platform.processor() or platform.machine()} | "
          f"{os.cpu_count()} cores | load average {' '.join(f'{v:.2f}' for v in load_start)} | numpy {np.__version__} | "
          f"SZ3 predictor {SZ3_ALGO} (1 thread) | store threads {STORE_THREADS or 'all cores'} | timed runs {REPEAT}"
          f"{' | QUICK (small synthetic hierarchies)' if args.quick else ''}\n")
    if store_wanted and not store_ok:
        print(f"{', '.join(store_wanted)}: skipped: store API not available (amrzip.write / amrzip.open)\n")

    infos, runs = [], []
    t_start = time.perf_counter()
    for name in names:
        default_fields, load = DATASETS[name]
        t0 = time.perf_counter()
        try:
            h = load(args.quick)
        except FileNotFoundError as e:
            print(f"note: {name} skipped: {e}", file=sys.stderr)
            continue
        fields = [f for f in (args.fields.split(",") if args.fields else default_fields) if f in h.fields]
        if not fields:
            print(f"note: {name} skipped: none of the fields asked for (it has {', '.join(h.fields)})", file=sys.stderr)
            continue
        leaves = Leaves.of(h)
        infos.append(describe(name, h, fields, leaves) | {"load_seconds": time.perf_counter() - t0})
        print(f"{name}: loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        for field in fields:
            prep = prepare(name, h, field, leaves)
            for rel in bounds:
                for method, fn in methods.items():
                    r = run_method(prep, method, fn, rel)
                    runs.append(r)
                    status = r.error or (f"ratio {r.ratio:9.2f}  PSNR {r.psnr:6.1f}  err/eb {r.err_over_bound:.3f}  "
                                         f"{r.seconds:7.3f} s" + ("  !!VIOLATION" if r.violation else ""))
                    print(f"  {name}/{field:12s} {rel:<6g} {method:12s} {status}", file=sys.stderr, flush=True)

    print("## Datasets\n")
    print(datasets_table(infos))
    print("\nratio = bytes of all cells of all levels (covered cells included, as stored by the source) / compressed "
          "payload bytes (SZ3 streams; for the store the field's chunks with their positions, shared tables and shard "
          "index slots, with the rest of the snapshot file in \"meta bytes\" and \"ratio incl. meta\" = source bytes / "
          "every byte of the snapshot file); PSNR, maxerr/eb and the mean over leaf cells only; bound eb = rel x value range of the leaf cells; "
          "mean = volume-weighted over leaf cells, its change relative to |mean| (or to the range where the mean is ~0)."
          "\n")
    print("## Results\n")
    print(results_table(runs))
    print()
    if any(r.metadata_bytes is not None for r in runs):
        print("## Store metadata (the snapshot file less the payload: zarr.json documents, zip records, shard index "
              "checksums; not in the payload ratio, in \"ratio incl. meta\")\n")
        print(metadata_table(runs))
        print()
    print("## Throughput (source bytes of all levels / seconds; write = compress and store, read = open and decode "
          f"every box; median of {REPEAT} runs; store threads: {STORE_THREADS or 'all cores'}, SZ3: one)\n")
    print(throughput_table(runs))
    print()
    if len(bounds) >= 2:
        text, rd = rate_distortion(runs)
        print(text)
    else:
        rd = None
        print("## Rate-distortion\n\n(skipped: comparing at equal PSNR needs at least 2 bounds)")
    text, verdicts = acceptance(runs, rd)
    print("\n" + text)
    viol = [r for r in runs if r.violation]
    errors = [r for r in runs if r.error]
    print(f"\n## Bound violations (max leaf error > eb)\n\n- {len(viol)}/{len(runs)} runs"
          + ("".join(f"\n  - {r.dataset}/{r.field}@{r.bound:g} {r.method}: {r.err_over_bound:.6f}x" for r in viol)))
    if errors:
        print(f"\n## Errors ({len(errors)})\n\n" + "\n".join(f"- {r.dataset}/{r.field}@{r.bound:g} {r.method}: {r.error}"
                                                        for r in errors))
    print(f"\n(total benchmark time {time.perf_counter() - t_start:.0f} s, load average at the end "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {"argv": sys.argv[1:] if argv is None else list(argv), "host": platform.node(), "cpus": os.cpu_count(),
                "numpy": np.__version__, "quick": args.quick, "bounds": bounds, "sz3_algo": SZ3_ALGO,
                "store_api": store_ok, "store_threads": STORE_THREADS, "repeat": REPEAT, "chunk": CHUNK, "amrzip": getattr(amrzip, "__version__", None),
                "loadavg_start": load_start, "loadavg_end": list(os.getloadavg())}
        args.json.write_text(json.dumps({"meta": meta, "datasets": infos, "runs": [asdict(r) for r in runs],
                                         "rate_distortion": rd, "acceptance": verdicts}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
