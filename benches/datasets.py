"""Benchmark fields for amrzip: deterministic synthetic fields plus the real AMR data in ../shared/data.

Synthetic fields are float32, generated from fixed seeds and cached as .npy under benches/data/
(gitignored; regenerated when missing).  Run this file to (re)generate them and print a summary.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / "data"
REAL_DATA_DIR = BENCH_DIR.parent.parent / "shared" / "data"  # ../shared/data relative to the repo root

N3 = 256  # edge of the 3-D synthetic cubes
CLIMATE_SHAPE = (1800, 3600)  # 0.1 degree lat x lon


def _wavenumber(shape: tuple[int, ...]) -> np.ndarray:
    """|k| in cycles per domain for an rfftn layout (last axis halved)."""
    axes = [np.fft.fftfreq(n, 1.0 / n) for n in shape[:-1]] + [np.fft.rfftfreq(shape[-1], 1.0 / shape[-1])]
    k2 = np.zeros([len(a) for a in axes], dtype=np.float32)
    for i, a in enumerate(axes):
        k2 += (a.astype(np.float32) ** 2).reshape([-1 if j == i else 1 for j in range(len(axes))])
    return np.sqrt(k2)


def gaussian_random_field(shape: tuple[int, ...], slope: float, seed: int, kmax: float | None = None) -> np.ndarray:
    """Periodic Gaussian random field with power spectrum P(k) ~ k**slope, zero mean, unit variance.

    White noise is filtered in Fourier space (amplitude ~ k**(slope/2)), which keeps Hermitian symmetry for free.
    Optional kmax applies a Gaussian cut-off (cycles per domain) to suppress grid-scale noise.
    """
    rng = np.random.default_rng(seed)
    spec = np.fft.rfftn(rng.standard_normal(shape, dtype=np.float32))
    k = _wavenumber(shape)
    k.flat[0] = 1.0  # avoid 0**negative; the mean mode is zeroed below
    filt = k ** np.float32(slope / 2)
    if kmax is not None:
        filt *= np.exp(-0.5 * (k / np.float32(kmax)) ** 2)
    filt.flat[0] = 0.0
    spec *= filt
    del k, filt
    field = np.fft.irfftn(spec, s=shape, axes=tuple(range(len(shape)))).astype(np.float32, copy=False)
    field -= field.mean(dtype=np.float64)
    field /= field.std(dtype=np.float64)
    return field


def make_smooth3d() -> np.ndarray:
    """Superposition of low-frequency sinusoidal modes and Gaussian blobs, like a smooth potential/temperature.

    Every term is separable, so it is built from outer products of 1-D profiles (fast, no 3-D trig).
    """
    rng = np.random.default_rng(11)
    x = np.linspace(0.0, 1.0, N3, endpoint=False, dtype=np.float64)
    f = np.zeros((N3, N3, N3), dtype=np.float32)
    for _ in range(6):  # low-frequency standing waves, 1-3 periods per axis
        kz, ky, kx = rng.integers(1, 4, size=3)
        pz, py, px = rng.uniform(0, 2 * np.pi, size=3)
        amp = rng.uniform(0.3, 1.0)
        az = (amp * np.sin(2 * np.pi * kz * x + pz)).astype(np.float32)
        ay = np.sin(2 * np.pi * ky * x + py).astype(np.float32)
        ax = np.sin(2 * np.pi * kx * x + px).astype(np.float32)
        f += az[:, None, None] * ay[None, :, None] * ax[None, None, :]
    for _ in range(5):  # localised blobs (hot spots / sources)
        c = rng.uniform(0.15, 0.85, size=3)
        s = rng.uniform(0.04, 0.12)
        amp = rng.uniform(-2.0, 3.0)
        g = [np.exp(-0.5 * ((x - ci) / s) ** 2).astype(np.float32) for ci in c]
        f += np.float32(amp) * g[0][:, None, None] * g[1][None, :, None] * g[2][None, None, :]
    return f


def make_turbulence3d() -> np.ndarray:
    """Kolmogorov-like Gaussian random field: 3-D spectrum P(k) ~ k^-11/3, zero mean, unit variance."""
    return gaussian_random_field((N3, N3, N3), slope=-11.0 / 3.0, seed=22)


def make_cosmology3d() -> np.ndarray:
    """Lognormal density rho = exp(s*g): g a GRF with a redder spectrum than the turbulence (P ~ k^-4).

    s is set so that max/min = 1e6 (six decades), then rho is normalised to unit mean like an overdensity 1+delta.
    """
    g = gaussian_random_field((N3, N3, N3), slope=-4.0, seed=33)
    gmin, gmax = float(g.min()), float(g.max())
    s = np.log(1e6) / (gmax - gmin)
    g -= np.float32(gmax)  # exp argument <= 0: no overflow, max becomes 1
    g *= np.float32(s)
    rho = np.exp(g, out=g)
    rho /= np.float32(rho.mean(dtype=np.float64))
    return rho


def make_climate2d() -> np.ndarray:
    """Surface-temperature-like field (K) on a 0.1 degree lat-lon grid, rows from north to south.

    Zonal-mean profile + smooth synoptic-scale anomalies + land/sea mask with orographic cooling, which gives the
    sharp coastlines and rough terrain that make real climate fields harder than a smooth gradient.
    """
    ny, nx = CLIMATE_SHAPE
    lat = np.deg2rad(np.linspace(90 - 0.05, -90 + 0.05, ny, dtype=np.float32))
    zonal = 248.0 + 52.0 * np.cos(lat) ** 2 - 10.0 * np.clip(-np.sin(lat), 0.0, None) ** 3  # colder Antarctica
    weather = gaussian_random_field(CLIMATE_SHAPE, slope=-3.5, seed=44, kmax=400)
    continents = gaussian_random_field(CLIMATE_SHAPE, slope=-3.0, seed=45, kmax=150)
    land = continents > np.quantile(continents[::8, ::8], 0.7)  # ~30% land
    elevation_km = np.clip(1.5 * gaussian_random_field(CLIMATE_SHAPE, slope=-2.5, seed=46) + 0.8, 0.0, None)
    t = zonal[:, None] + 4.0 * weather
    t += land * (3.0 * np.cos(lat)[:, None] - 6.5 * elevation_km)  # continental warmth, lapse rate 6.5 K/km
    return np.clip(t, 200.0, 310.0).astype(np.float32)


GENERATORS: dict[str, Callable[[], np.ndarray]] = {
    "smooth3d": make_smooth3d,
    "turbulence3d": make_turbulence3d,
    "cosmology3d": make_cosmology3d,
    "climate2d": make_climate2d,
}
SYNTHETIC = list(GENERATORS)


def load(name: str) -> np.ndarray:
    """Return synthetic field `name` (float32), generating and caching it on first use."""
    if name not in GENERATORS:
        raise KeyError(f"unknown synthetic field {name!r}; known: {SYNTHETIC}")
    path = CACHE_DIR / f"{name}.npy"
    if path.exists():
        return np.load(path)
    arr = np.ascontiguousarray(GENERATORS[name](), dtype=np.float32)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, arr)
    tmp.replace(path)  # atomic: a killed run never leaves a truncated cache
    return arr


# --- real AMR data --------------------------------------------------------------------------------------------

# (plotfile folder, fields to use); all boxes of a level are tiled into one array when they cover a rectangle.
REAL_PLOTFILES = [
    ("amrex/pelelmex_3d", ["density", "temp", "y_velocity", "Y(OH)"]),
    ("amrex/advection_2d_4levels", ["phi"]),
    ("amrex/warpx_single_level", ["Ey", "Bx"]),
]


def real_fields(root: Path | str = REAL_DATA_DIR) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (name, array) for the real AMR fields, one array per level (native dtype, C order z,y,x).

    A level whose boxes tile their bounding box exactly is yielded as one array `plotfile/field/L<n>`; otherwise
    each box is yielded on its own as `plotfile/field/L<n>/box<i>`.  Prints a note and yields nothing when the
    data folder is absent.
    """
    from plotfile_boxes import read_plotfile  # local import: benches/ is on sys.path when run from there

    root = Path(root)
    if not root.is_dir():
        print(f"note: real AMR data not found at {root}; skipping real fields", file=sys.stderr)
        return
    for rel, wanted in REAL_PLOTFILES:
        pf = root / rel
        if not pf.is_dir():
            print(f"note: {pf} missing; skipped", file=sys.stderr)
            continue
        plot = read_plotfile(pf)
        short = rel.split("/")[-1]
        for field in wanted:
            for lev, level in enumerate(plot.levels):
                tiled = level.tiled(field)
                if tiled is not None:
                    yield f"{short}/{field}/L{lev}", tiled
                else:
                    for i, box in enumerate(level.boxes(field)):
                        yield f"{short}/{field}/L{lev}/box{i}", box


def _describe(name: str, a: np.ndarray) -> str:
    amin, amax = float(a.min()), float(a.max())
    return (f"{name:32s} {str(a.shape):18s} {str(a.dtype):8s} min {amin:11.4g} max {amax:11.4g} "
            f"mean {float(a.mean(dtype=np.float64)):11.4g} std {float(a.std(dtype=np.float64)):10.4g}")


if __name__ == "__main__":
    for n in SYNTHETIC:
        t0 = time.perf_counter()
        cached = (CACHE_DIR / f"{n}.npy").exists()
        arr = load(n)
        print(_describe(n, arr), f"({'cached' if cached else f'generated in {time.perf_counter() - t0:.1f}s'})")
    for n, arr in real_fields():
        print(_describe(n, arr))
