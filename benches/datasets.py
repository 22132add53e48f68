"""Benchmark fields for amrzip: deterministic synthetic fields plus the real AMR data in ../shared/data.

Synthetic fields are float32, generated from fixed seeds and cached as .npy under benches/data/
(gitignored; regenerated when missing).  Run this file to (re)generate them and print a summary.
"""

from __future__ import annotations

import os
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

# Every level of every field of every real file under REAL_DATA_DIR becomes plain-array cases, except these files:
REAL_SKIP = {
    "amrex/pelelmex_3d_truncated": "deliberately broken (binary data cut 76 bytes short; readers must refuse it)",
}
HDF5_SUFFIXES = (".h5", ".hdf5")
# Levels whose boxes do not tile their bounding box give one case per box; above BOX_CAP boxes, boxes with fewer
# than MIN_BOX_CELLS[dim] cells are left out and at most BOX_CAP of the rest are kept, evenly spread by index.
BOX_CAP = 8
MIN_BOX_CELLS = {1: 256, 2: 1024, 3: 4096}


def real_files(root: Path | str = REAL_DATA_DIR) -> list[tuple[str, str, Path]]:
    """(label, kind, path) of every real AMR file under ``root``, sorted by path; skipped files included with kind
    "skip".  AMReX plotfiles are folders holding a ``Header``; HDF5 files (Chombo, AMReX HDF5) end in .h5/.hdf5.
    The label, which starts every case name, is the path below the format folder (``amrex/``, ``chombo/``) without
    the HDF5 suffix: ``pelelmex_3d``, ``bisicles/ase-ctrl-reference``."""
    root = Path(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames.sort()
        if "Header" in filenames and d != root:
            found.append(("plotfile", d))
            dirnames[:] = []  # Level_N folders belong to the plotfile
            continue
        found += [("hdf5", d / f) for f in sorted(filenames) if f.lower().endswith(HDF5_SUFFIXES)]
    out = []
    for kind, path in sorted(found, key=lambda kp: kp[1]):
        rel = path.relative_to(root).as_posix()
        label = rel.split("/", 1)[1] if "/" in rel else rel
        if kind == "hdf5":
            label = label[: -len(path.suffix)]
        out.append((label, "skip" if rel in REAL_SKIP else kind, path))
    return out


def pick_boxes(cells: list[int], dim: int) -> tuple[list[int], int, int]:
    """Which boxes of an untiled level become cases: all when there are at most BOX_CAP; otherwise those with at
    least MIN_BOX_CELLS[dim] cells, at most BOX_CAP of them evenly spread by index.
    Returns (indices, boxes left out as small, boxes left out by the cap)."""
    if len(cells) <= BOX_CAP:
        return list(range(len(cells))), 0, 0
    big = [i for i, c in enumerate(cells) if c >= MIN_BOX_CELLS[dim]]
    if len(big) <= BOX_CAP:
        return big, len(cells) - len(big), 0
    keep = [big[int(k)] for k in np.linspace(0, len(big) - 1, BOX_CAP).round()]
    return keep, len(cells) - len(big), len(big) - BOX_CAP


def _tiles(boxes: list) -> bool:
    """Whether boxes ((lo, hi), x first, disjoint as AMReX and Chombo write them) cover their bounding box exactly
    (equal volume)."""
    lo = np.min([b[0] for b in boxes], axis=0)
    hi = np.max([b[1] for b in boxes], axis=0)
    return sum(int(np.prod(np.subtract(h, l) + 1)) for l, h in boxes) == int(np.prod(hi - lo + 1))


def _tile(boxes: list, get: Callable[[int], np.ndarray]) -> np.ndarray | None:
    """The boxes placed into their bounding box (``get(i)`` is box i in C order (z, y, x)); None unless _tiles."""
    if not _tiles(boxes):
        return None
    lo = np.min([b[0] for b in boxes], axis=0)
    hi = np.max([b[1] for b in boxes], axis=0)
    out = None
    for i, (blo, bhi) in enumerate(boxes):
        data = get(i)
        if out is None:
            out = np.empty(tuple((hi - lo + 1)[::-1]), dtype=data.dtype)
        out[tuple(slice(l - o, h - o + 1) for l, h, o in zip(blo[::-1], bhi[::-1], lo[::-1]))] = data
    return out


class _Source:
    """One file's levels, uniformly: names of fields, and per level its boxes (x first), box(field, i) in C order
    (z, y, x) and tiled(field)."""

    def __init__(self, kind: str, path: Path):
        if kind == "plotfile":  # the benchmarks' own reader: the cases stay the ones earlier runs measured
            from plotfile_boxes import read_plotfile  # local import: benches/ is on sys.path when run from there

            plot = read_plotfile(path)
            self.fields, self.dim = plot.names, plot.dim
            self.levels = [(lev.boxes_lohi, lev.box, lev.tiled) for lev in plot.levels]
        else:  # Chombo (plot file or checkpoint) or AMReX HDF5, through amrzip's readers; ghost cells are cropped
            from amrzip.formats import read

            h = read(path)
            self.fields, self.dim = list(h.fields), h.dim

            def level(lev):
                # [i, j, k] -> (z, y, x), copied out of the file's memory map
                box = lambda f, i: np.array(lev.box_data(f, i).T, order="C")  # noqa: E731
                return lev.boxes, box, lambda f: _tile(lev.boxes, lambda i: box(f, i))

            self.levels = [level(lev) for lev in h.levels]


def real_fields(root: Path | str = REAL_DATA_DIR, want: Callable[[str], bool] | None = None,
                notes: list[str] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (name, array) for every level of every field of every real AMR file under ``root`` (see real_files),
    native dtype, C order with the axes reversed ((z,) y, x).

    A level whose boxes tile their bounding box exactly is one array ``<label>/<field>/L<n>``; otherwise each box is
    one array ``<label>/<field>/L<n>/box<i>`` (with the BOX_CAP/MIN_BOX_CELLS selection above BOX_CAP boxes).  Field
    names are the files' own (a Chombo component name may hold a '/').  ``want(name)``, when given, is asked before
    an array is read.  Constant arrays (max == min: a relative bound means nothing there) and arrays with NaN or
    infinity are left out.  What is left out, and files that fail to read, are appended to ``notes`` as text lines
    (printed to stderr when ``notes`` is None); an absent data folder gives a note and nothing else.
    """
    say = notes.append if notes is not None else (lambda s: print(f"note: {s}", file=sys.stderr))
    root = Path(root)
    if not root.is_dir():
        say(f"real AMR data not found at {root}; no real fields")
        return
    for label, kind, path in real_files(root):
        if kind == "skip":
            say(f"{path.relative_to(root)} skipped: {REAL_SKIP[path.relative_to(root).as_posix()]}")
            continue
        try:
            src = _Source(kind, path)
        except Exception as e:  # reported, never silent: one bad file must not hide the others
            say(f"ERROR reading {path.relative_to(root)}: {type(e).__name__}: {e}")
            continue
        constant, nonfinite = [], []
        for lev, (boxes, box, tiled) in enumerate(src.levels):
            cells = [int(np.prod(np.subtract(h, l) + 1)) for l, h in boxes]
            tiles = _tiles(boxes)  # the same boxes for every field
            if not tiles:
                chosen, small, capped = pick_boxes(cells, src.dim)
                if small or capped:
                    say(f"{label} L{lev} (every field): {len(cells)} boxes not tiling their bounding box; "
                        f"{small} with < {MIN_BOX_CELLS[src.dim]} cells and {capped} more over the cap of {BOX_CAP} "
                        f"left out, boxes {chosen} used")
            for field in src.fields:
                base = f"{label}/{field}/L{lev}"
                if tiles:
                    parts = [(base, lambda: tiled(field))]
                else:
                    parts = [(f"{base}/box{i}", lambda i=i: box(field, i)) for i in chosen]
                for name, get in parts:
                    if want is not None and not want(name):
                        continue
                    try:
                        a = get()
                    except Exception as e:
                        say(f"ERROR reading {name}: {type(e).__name__}: {e}")
                        continue
                    if not np.isfinite(a).all():
                        nonfinite.append(name.removeprefix(label + "/"))
                    elif a.max() == a.min():
                        constant.append(f"{name.removeprefix(label + '/')} (={a.flat[0]:g})")
                    else:
                        yield name, a
        if constant:
            say(f"{label}: {len(constant)} constant arrays (max == min) left out: {', '.join(constant)}")
        if nonfinite:
            say(f"{label}: {len(nonfinite)} arrays with NaN/inf left out: {', '.join(nonfinite)}")


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
