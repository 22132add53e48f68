"""The AMR part of the demo: a built-in Nyx-like hierarchy written to a snapshot store, read
back, and measured over its leaf cells (those no finer level covers)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

import amrzip
from amrzip._metrics import max_abs_error, psnr
from amrzip.amr.hierarchy import Hierarchy
from amrzip.amr.synthetic import nyx_like

REL = 1e-4


@dataclass
class FieldResult:
    field: str
    ratio: float
    error_over_bound: float
    psnr: float
    mean_change: float
    # Whether mean_change is relative to the value range (fields whose mean is near zero).
    of_range: bool


def leaf_values(h: Hierarchy, field: str, get) -> tuple[np.ndarray, np.ndarray]:
    """The leaf cells' values of ``field`` (``get(L, i)`` gives box i of level L) and volumes."""
    values, volumes = [], []
    for L, lev in enumerate(h.levels):
        cell = float(np.prod(lev.dx))
        for i in range(lev.num_boxes):
            leaf = ~h.covered_mask(L, i)
            values.append(np.asarray(get(L, i))[leaf].astype(np.float64))
            volumes.append(np.full(values[-1].size, cell))
    return np.concatenate(values), np.concatenate(volumes)


def measure(h: Hierarchy, ds, summary: dict) -> list[FieldResult]:
    out = []
    for f in h.fields:
        a, vol = leaf_values(h, f, lambda L, i: h.level(L).box_data(f, i))
        b, _ = leaf_values(h, f, lambda L, i: ds.level(L).field(f)[i])
        per_level = [lev["fields"][f] for lev in summary["levels"]]
        ratio = sum(s["original_bytes"] for s in per_level) / max(sum(s["stored_bytes"] for s in per_level), 1)
        mean_a, mean_b = np.sum(a * vol) / vol.sum(), np.sum(b * vol) / vol.sum()
        span = float(a.max() - a.min())
        of_range = abs(mean_a) < 1e-3 * span
        change = abs(mean_b - mean_a) / ((span if of_range else abs(mean_a)) or 1.0)
        out.append(FieldResult(f, ratio, max_abs_error(a, b) / ds.bounds[f]["abs"], psnr(a, b), change, of_range))
    return out


def run(store=None, seed: int = 0, threads=None) -> list[FieldResult]:
    """Generates the hierarchy, writes it (to ``store``, or a temporary folder), reads it back and
    prints a table per field and a region read; returns the per-field measurements."""
    progress = Console(stderr=True)
    with progress.status("generating a Nyx-like 3-level hierarchy", spinner="dots"):
        h = nyx_like(seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(store) if store else Path(tmp) / "nyx.amrzip"
        with progress.status(f"writing the snapshot store at rel {REL:g}", spinner="dots"):
            start = time.perf_counter()
            summary = amrzip.write(h, path, rel=REL, threads=threads)
            t_write = time.perf_counter() - start
        ds = amrzip.open(path)
        with progress.status("reading every box back", spinner="dots"):
            start = time.perf_counter()
            results = measure(h, ds, summary)
            t_read = time.perf_counter() - start
        L = h.num_levels - 1
        region = ds.level(L).boxes[len(ds.level(L).boxes) // 2]
        fresh = amrzip.open(path)
        fresh.read("density", region=region, level=L)
        field_bytes = sum(lev["fields"]["density"]["stored_bytes"] for lev in summary["levels"])
        region_read = fresh.bytes_read

    levels = ", ".join(f"L{L}: {lev.num_boxes} boxes" for L, lev in enumerate(h.levels))
    out = Console()
    out.width = max(out.width, 120)
    out.print(f"Nyx-like hierarchy ({levels}; {summary['original_bytes'] / 1e6:.1f} MB of float64) at rel {REL:g}")
    out.print(
        f"stored {summary['stored_bytes'] / 1e6:.2f} MB (ratio {summary['ratio']:.1f}); "
        f"write {t_write:.1f} s, read back {t_read:.1f} s"
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for name in ("field", "ratio", "max err\n/ bound", "PSNR dB\n(leaf)", "mean\nchange"):
        table.add_column(name, justify="left" if name == "field" else "right", no_wrap=True)
    for r in results:
        within = r.error_over_bound <= 1.0
        change = f"{r.mean_change:.1e}" + (" of range" if r.of_range else "")
        table.add_row(r.field, f"{r.ratio:.1f}", f"[{'green' if within else 'bold red'}]{r.error_over_bound:.3f}[/]", f"{r.psnr:.1f}", change)
    out.print(table)
    out.print(
        f"one box of level {L} ({region[0]}..{region[1]}) of density read from the store: "
        f"{region_read / 1e3:.1f} kB of the field's {field_bytes / 1e3:.1f} kB"
    )
    return results
