"""A self-contained tour of amrzip: compress a synthetic turbulence-like field at two error bounds in
both modes and tabulate ratio, accuracy and throughput."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

import amrzip
from amrzip._metrics import max_abs_error, psnr

CASES = [(mode, rel) for mode in ("ratio", "speed") for rel in (1e-3, 1e-4)]
REPEATS = 3  # best of a few runs, so one-off costs (page faults, thread start-up) do not skew MB/s


def turbulent_field(n: int, seed: int = 0) -> np.ndarray:
    """An n^3 float32 field: smooth large-scale modes plus a Gaussian random field with the
    k^(-11/3) power spectrum of Kolmogorov turbulence. Deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(n, 1.0 / n)
    k_half = np.fft.rfftfreq(n, 1.0 / n)
    k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + k_half[None, None, :] ** 2
    # The amplitude goes as |k|^(-11/6), so the power goes as |k|^(-11/3); the mean (k = 0) is dropped.
    amplitude = np.divide(1.0, k2 ** (11 / 12), out=np.zeros_like(k2), where=k2 > 0)
    noise = np.fft.irfftn(np.fft.rfftn(rng.standard_normal((n, n, n))) * amplitude, s=(n, n, n))
    noise /= noise.std()
    x, y, z = np.meshgrid(*[np.linspace(0, 2 * np.pi, n, endpoint=False)] * 3, indexing="ij", sparse=True)
    smooth = 2.0 * np.sin(x) * np.cos(y) + np.cos(2 * z + x) + 0.5 * np.sin(3 * y - z)
    return (smooth + 0.5 * noise).astype(np.float32)


@dataclass
class Result:
    mode: str
    rel: float
    predictor: str
    ratio: float
    error_over_bound: float
    psnr: float
    compress_mbs: float
    decompress_mbs: float


def _best_time(fn):
    best, out = float("inf"), None
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def measure(field: np.ndarray, mode: str, rel: float, threads: int | None = None) -> Result:
    t_comp, stream = _best_time(lambda: amrzip.compress(field, rel=rel, mode=mode, threads=threads))
    t_dec, back = _best_time(lambda: amrzip.decompress(stream, threads=threads))
    info = amrzip.info(stream)
    mb = field.nbytes / 1e6
    return Result(
        mode=mode,
        rel=rel,
        predictor=info["predictor"],
        ratio=info["ratio"],
        error_over_bound=max_abs_error(field, back) / info["abs_bound"],
        psnr=psnr(field, back),
        compress_mbs=mb / t_comp,
        decompress_mbs=mb / t_dec,
    )


def results_table(results: list[Result], title: str) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for name in ("mode", "rel\nbound", "predictor", "ratio", "max err\n/ bound", "PSNR\ndB", "compress\nMB/s", "decompress\nMB/s"):
        table.add_column(name, justify="left" if name in ("mode", "predictor") else "right", no_wrap=True)
    for r in results:
        within = r.error_over_bound <= 1.0
        table.add_row(
            r.mode,
            f"{r.rel:g}",
            r.predictor,
            f"{r.ratio:.1f}",
            f"[{'green' if within else 'bold red'}]{r.error_over_bound:.3f}[/]",
            f"{r.psnr:.1f}",
            f"{r.compress_mbs:.0f}",
            f"{r.decompress_mbs:.0f}",
        )
    return table


def run(size: int = 128, seed: int = 0, threads: int | None = None) -> list[Result]:
    """Runs the demo and prints its table on stdout, with a spinner on stderr meanwhile; returns
    the measurements."""
    progress = Console(stderr=True)
    with progress.status(f"generating a {size}^3 field", spinner="dots"):
        field = turbulent_field(size, seed)
    results = []
    for mode, rel in CASES:
        with progress.status(f"compressing: mode={mode}, rel={rel:g}", spinner="dots"):
            results.append(measure(field, mode, rel, threads))
    title = f"{size}^3 float32 turbulence-like field ({field.nbytes / 1e6:.1f} MB, seed {seed})"
    # A pipe reports 80 columns, too narrow for the table: never truncate it.
    out = Console()
    out.width = max(out.width, 120)
    out.print(results_table(results, title))
    return results
