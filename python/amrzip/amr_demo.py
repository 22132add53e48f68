"""The AMR part of the demo: a built-in Nyx-like hierarchy written to a snapshot store, read
back, and measured over its leaf cells (those no finer level covers)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

import amrzip
from amrzip._metrics import max_abs_error, psnr
from amrzip.amr.hierarchy import Hierarchy
from amrzip.amr.leaves import Leaves, mean_change, volume_weighted_mean
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


def measure(h: Hierarchy, ds, summary: dict) -> list[FieldResult]:
    leaves = Leaves.of(h)
    out = []
    for f in h.fields:
        a = leaves.values({(L, i): h.level(L).box_data(f, i) for L, lev in enumerate(h.levels) for i in range(lev.num_boxes)})
        b = leaves.values({(L, i): arr for L in range(ds.num_levels) for i, arr in enumerate(ds.level(L).field(f))})
        per_level = [lev["fields"][f] for lev in summary["levels"]]
        ratio = sum(s["original_bytes"] for s in per_level) / max(sum(s["stored_bytes"] for s in per_level), 1)
        span = float(a.max() - a.min())
        change, ref = mean_change(volume_weighted_mean(a, leaves.volumes), volume_weighted_mean(b, leaves.volumes), span)
        out.append(FieldResult(f, ratio, max_abs_error(a, b) / ds.bounds[f]["abs"], psnr(a, b), change, ref == "range"))
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
