"""Synthetic AMR hierarchies, deterministic for a seed: a Nyx-like cosmology snapshot and a
WarpX-like laser wakefield.

Both build every field once at the finest resolution over the whole domain and average it down
level by level, so that every cell value is the average of the underlying field over the cell (a
finite-volume cell average), and a covered coarse cell holds exactly the average of the fine
cells above it, as AMReX stores it after ``average_down``. Boxes follow the AMReX rules: their
edges are multiples of the blocking factor (in their own level's index space), no side is longer
than ``max_grid_size``, and each level lies inside the refined boxes of the level below.

    >>> from amrzip.amr import synthetic
    >>> h = synthetic.nyx_like()              # 64^3 base, 3 levels, a few seconds
    >>> h = synthetic.warpx_like(t=0.3)       # 32x32x128 base, refined patch around the pulse
    >>> h = synthetic.small("nyx")            # tiny, for tests

Cost: the finest grid is ``n * ref_ratio**(levels - 1)`` cells per side, held in float64 for a
few fields at a time (the default Nyx-like snapshot: 256^3, about 0.8 GB peak and 5 s).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from amrzip.amr.hierarchy import Box, Hierarchy

__all__ = ["nyx_like", "warpx_like", "small", "SMALL"]

# Parameters of the small presets: a few hundred thousand cells at the finest resolution.
SMALL = {
    "nyx": dict(n=16, levels=3, ref_ratio=2, blocking_factor=4, max_grid_size=8),
    "warpx": dict(n=(16, 16, 64), levels=2, ref_ratio=2, blocking_factor=4, max_grid_size=16),
}


def small(kind: str = "nyx", **overrides) -> Hierarchy:
    """The small preset of ``kind`` ("nyx" or "warpx"), generated in well under a second."""
    if kind not in SMALL:
        raise ValueError(f"unknown preset {kind!r}: choose one of {', '.join(SMALL)}")
    make = nyx_like if kind == "nyx" else warpx_like
    return make(**{**SMALL[kind], **overrides})


# --- box layout -----------------------------------------------------------------------------------


def _check_layout(n: Sequence[int], levels: int, ref_ratio: int, blocking_factor: int, max_grid_size: int) -> None:
    if levels < 1:
        raise ValueError(f"levels must be >= 1, got {levels}")
    if ref_ratio < 2 and levels > 1:
        raise ValueError(f"ref_ratio must be >= 2, got {ref_ratio}")
    if blocking_factor < 1 or max_grid_size < blocking_factor or max_grid_size % blocking_factor:
        raise ValueError(f"max_grid_size ({max_grid_size}) must be a positive multiple "
                         f"of blocking_factor ({blocking_factor})")
    if levels > 1 and blocking_factor % ref_ratio:
        raise ValueError(f"blocking_factor ({blocking_factor}) must be a multiple of ref_ratio ({ref_ratio})")
    if any(v < 1 or v % blocking_factor for v in n):
        raise ValueError(f"every domain side {tuple(n)} must be a positive multiple "
                         f"of blocking_factor ({blocking_factor})")


def _chop(lo: Sequence[int], hi: Sequence[int], max_grid_size: int) -> list[Box]:
    """The rectangle [lo, hi] cut into boxes of at most max_grid_size per side, cuts at lo + k * max_grid_size."""
    edges = [[(a, min(a + max_grid_size, h + 1) - 1) for a in range(l, h + 1, max_grid_size)] for l, h in zip(lo, hi)]
    boxes = [((), ())]
    for axis_edges in edges:
        boxes = [(blo + (a,), bhi + (b,)) for blo, bhi in boxes for a, b in axis_edges]
    return _sorted(boxes)


def _sorted(boxes: list[Box]) -> list[Box]:
    """Boxes ordered by their lower corner, z (last axis) slowest, as AMReX lists a chopped domain."""
    return sorted(boxes, key=lambda b: b[0][::-1])


def _tiles_to_boxes(tiles: np.ndarray, edge: int, max_tiles: int) -> list[Box]:
    """Boxes covering exactly the True tiles (each ``edge`` cells wide), merged greedily along x,
    then y, then z into boxes of at most ``max_tiles`` tiles per side."""
    boxes = [(tuple(int(v) for v in t), tuple(int(v) for v in t)) for t in np.argwhere(tiles)]
    for axis in range(tiles.ndim):
        rows: dict = {}
        for lo, hi in boxes:  # boxes equal on every other axis can merge along this one
            key = tuple((lo[a], hi[a]) for a in range(tiles.ndim) if a != axis)
            rows.setdefault(key, []).append((lo, hi))
        merged = []
        for row in rows.values():
            row.sort(key=lambda b: b[0][axis])
            cur = row[0]
            for nxt in row[1:]:
                if nxt[0][axis] == cur[1][axis] + 1 and nxt[1][axis] - cur[0][axis] + 1 <= max_tiles:
                    cur = (cur[0], cur[1][:axis] + (nxt[1][axis],) + cur[1][axis + 1:])
                else:
                    merged.append(cur)
                    cur = nxt
            merged.append(cur)
        boxes = merged
    return _sorted([(tuple(l * edge for l in lo), tuple((h + 1) * edge - 1 for h in hi)) for lo, hi in boxes])


def _coverage(boxes: list[Box], shape: Sequence[int]) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    for lo, hi in boxes:
        mask[tuple(slice(l, h + 1) for l, h in zip(lo, hi))] = True
    return mask


def _dilate(mask: np.ndarray, cells: int) -> np.ndarray:
    """Grow the True region by ``cells`` in every direction (a cube, not periodic)."""
    for _ in range(cells):
        grown = mask.copy()
        for axis in range(mask.ndim):
            lead = [slice(None)] * mask.ndim
            trail = [slice(None)] * mask.ndim
            lead[axis], trail[axis] = slice(1, None), slice(None, -1)
            grown[tuple(trail)] |= mask[tuple(lead)]
            grown[tuple(lead)] |= mask[tuple(trail)]
        mask = grown
    return mask


def _block_mean(a: np.ndarray, r: int, dtype) -> np.ndarray:
    """Average over r^d blocks, summed in float64 and stored in ``dtype``."""
    split = [v for s in a.shape for v in (s // r, r)]
    return a.reshape(split).mean(axis=tuple(range(1, 2 * a.ndim, 2)), dtype=np.float64).astype(dtype)


def _pyramid(finest: np.ndarray, levels: int, r: int, dtype) -> list[np.ndarray]:
    """The field on every level's whole index space, coarsest first: each level the block average
    of the next finer one, as stored (in ``dtype``), so covered cells equal their children's mean."""
    out = [np.ascontiguousarray(finest, dtype=dtype)]
    for _ in range(levels - 1):
        out.append(_block_mean(out[-1], r, dtype))
    return out[::-1]


def _cut(full: np.ndarray, boxes: list[Box]) -> list[np.ndarray]:
    """Each box's cells, copied (never a view of ``full``)."""
    return [np.array(full[tuple(slice(l, h + 1) for l, h in zip(lo, hi))], order="C") for lo, hi in boxes]


def _assemble(layout: list[list[Box]], data: dict, r: int, n: Sequence[int], prob_lo, prob_hi, **meta) -> Hierarchy:
    specs = []
    for L, boxes in enumerate(layout):
        spec = {"boxes": boxes, "data": {f: per_level[L] for f, per_level in data.items()},
                "domain": (tuple(0 for _ in n), tuple(v * r**L - 1 for v in n))}
        if L < len(layout) - 1:
            spec["ref_ratio"] = r
        specs.append(spec)
    return Hierarchy.from_arrays(specs, prob_lo=prob_lo, prob_hi=prob_hi, **meta)


# --- Nyx-like cosmology ---------------------------------------------------------------------------


def _wavevectors(shape: Sequence[int]) -> list[np.ndarray]:
    """Per-axis wavenumbers (cycles per domain) broadcastable over an rfftn spectrum of ``shape``."""
    d = len(shape)
    out = []
    for a, s in enumerate(shape):
        k = np.fft.rfftfreq(s, 1.0 / s) if a == d - 1 else np.fft.fftfreq(s, 1.0 / s)
        out.append(k.reshape([-1 if b == a else 1 for b in range(d)]))
    return out


def _filtered_spectrum(shape: Sequence[int], slope: float, kcut: float, rng: np.random.Generator):
    """(spectrum, wavevectors): white noise filtered to P(k) ~ k**slope * exp(-(k/kcut)^2), mean mode zero."""
    spec = np.fft.rfftn(rng.standard_normal(tuple(shape)))
    ks = _wavevectors(shape)
    k2 = sum(k * k for k in ks)
    k2.flat[0] = 1.0
    filt = np.log(k2)
    filt *= slope / 4  # sqrt(P): k**(slope/2) = (k^2)**(slope/4)
    k2 *= -0.5 / kcut**2
    filt += k2
    del k2
    spec *= np.exp(filt, out=filt)
    del filt
    spec.flat[0] = 0.0
    return spec, ks


def nyx_like(
    n: int = 64,
    levels: int = 3,
    ref_ratio: int = 2,
    blocking_factor: int = 8,
    max_grid_size: int = 32,
    seed: int = 0,
    dtype=np.float64,
    *,
    dim: int = 3,
    tag_fraction: float = 0.03,
    tag_decay: float = 0.3,
    n_error_buf: int = 1,
    slope: float = -3.5,
    sigma: float = 2.0,
) -> Hierarchy:
    """A Nyx-like snapshot: baryon ``density``, velocities ``x_velocity``... and ``temp``.

    The density is lognormal, ``exp(sigma g)`` normalised to unit mean (overdensity
    ``1 + delta``), with ``g`` a unit-variance Gaussian random field of spectrum
    ``P(k) ~ k^slope exp(-(k / kc)^2)``, ``kc`` a sixth of the finest grid's cells per side: with
    the defaults about seven decades between its smallest and largest values, mass gathered in
    compact peaks. The velocities (km/s) are the linear-theory flow of the same ``g`` (the gradient of
    its potential ``g / k^2``, about 250 km/s rms); the temperature (K) follows the
    temperature-density relation of the intergalactic medium, ``1e4 rho^0.6``, with a 20 %
    log-normal scatter from an independent field.

    Level 0 covers the ``n^dim`` domain in boxes of ``max_grid_size``. Level ``L + 1`` refines
    the level-``L`` cells whose density exceeds a threshold (the ``1 - tag_fraction *
    tag_decay**L`` quantile of level 0's densities), grown by ``n_error_buf`` cells: the
    tagged cells are covered by tiles of ``blocking_factor`` fine cells, merged along x, y and z
    into boxes of at most ``max_grid_size``. Levels whose tags vanish are dropped.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    if dim not in (2, 3):
        raise ValueError(f"dim must be 2 or 3, got {dim}")
    _check_layout([n] * dim, levels, ref_ratio, blocking_factor, max_grid_size)
    r = ref_ratio
    N = n * r ** (levels - 1)
    shape = (N,) * dim
    rng = np.random.default_rng(seed)

    # density: the finest field, averaged down; the layout is tagged on the stored averages
    spec, ks = _filtered_spectrum(shape, slope, N / 6, rng)
    g = np.fft.irfftn(spec, s=shape, axes=tuple(range(dim)))
    scale = 1.0 / float(g.std())
    g *= sigma * scale
    g -= float(g.max())  # max 1 after exp: no overflow
    rho = np.exp(g, out=g)
    rho /= float(rho.mean())
    dens = _pyramid(rho, levels, r, dtype)  # its finest level may share memory with rho: rho stays as is

    layout = [_chop([0] * dim, [n - 1] * dim, max_grid_size)]
    thresholds = np.quantile(dens[0], [1 - tag_fraction * tag_decay**L for L in range(levels - 1)])
    edge = blocking_factor // r  # a fine tile's width in coarse cells
    for L in range(levels - 1):
        d = dens[L]
        inside = _coverage(layout[L], d.shape)
        tags = (d > thresholds[L]) & inside
        tags = _dilate(tags, n_error_buf) & inside  # stay inside the level: proper nesting
        if not tags.any():
            break
        tiles = tags.reshape([v for s in d.shape for v in (s // edge, edge)]).any(axis=tuple(range(1, 2 * dim, 2)))
        layout.append(_tiles_to_boxes(tiles, blocking_factor, max_grid_size // blocking_factor))
    used = len(layout)
    data = {"density": [_cut(dens[L], layout[L]) for L in range(used)]}
    del dens

    # velocities: the linear-theory flow of the same field, v_k = i k / k^2 g_k, scaled to an rms speed
    k2 = sum(k * k for k in ks)
    k2.flat[0] = 1.0
    weight = np.full(spec.shape[-1], 2.0)  # Parseval over rfftn's half spectrum: the other half counts twice
    weight[0] = 1.0
    if N % 2 == 0:
        weight[-1] = 1.0
    mean_square = float(np.sum(weight * (spec.real**2 + spec.imag**2) / k2)) / float(N**dim) ** 2 / dim
    spec *= 250.0 / math.sqrt(mean_square)  # km/s rms per component
    for a, name in enumerate("xyz"[:dim]):
        vk = spec * ks[a]
        vk /= k2
        vk *= 1j
        v = np.fft.irfftn(vk, s=shape, axes=tuple(range(dim)))
        del vk
        pyr = _pyramid(v, levels, r, dtype)
        data[f"{name}_velocity"] = [_cut(pyr[L], layout[L]) for L in range(used)]
        del v, pyr
    del spec, k2

    # temperature: T = 1e4 rho^0.6 K with a 20 % log-normal scatter from an independent field
    spec_t, _ = _filtered_spectrum(shape, -2.0, N / 4, rng)
    t = np.fft.irfftn(spec_t, s=shape, axes=tuple(range(dim)))
    del spec_t
    t *= 0.2 / float(t.std())
    np.exp(t, out=t)
    rho **= 0.6
    t *= rho
    t *= 1e4
    del rho, g
    pyr = _pyramid(t, levels, r, dtype)
    data["temp"] = [_cut(pyr[L], layout[L]) for L in range(used)]
    del t, pyr

    box_mpc = 0.5 * n  # 0.5 Mpc coarse cells
    params = dict(n=n, levels=levels, ref_ratio=r, blocking_factor=blocking_factor, max_grid_size=max_grid_size,
                  seed=seed, dtype=dtype.name, dim=dim, tag_fraction=tag_fraction, tag_decay=tag_decay,
                  n_error_buf=n_error_buf, slope=slope, sigma=sigma)
    return _assemble(layout, data, r, [n] * dim, (0.0,) * dim, (box_mpc,) * dim, time=0.0, step=0,
                     attrs={"source": "amrzip.amr.synthetic.nyx_like", "params": params,
                            "units": {"density": "mean 1", "velocity": "km/s", "temp": "K", "length": "Mpc"}})


# --- WarpX-like laser wakefield -------------------------------------------------------------------


def warpx_like(
    n: Sequence[int] = (32, 32, 128),
    levels: int = 2,
    ref_ratio: int = 2,
    blocking_factor: int = 8,
    max_grid_size: int = 32,
    t: float = 0.5,
    seed: int = 0,
    dtype=np.float64,
    *,
    noise: float = 1e-3,
) -> Hierarchy:
    """A WarpX-like laser wakefield with mesh refinement that follows the pulse.

    ``n`` is the coarse grid (x, y, z) or (x, z); the pulse propagates along the last axis.
    Fields: ``Ey`` (V/m) and ``Bx`` (T), a y-polarised Gaussian laser pulse (waist a sixth of
    the transverse width, wavelength 1/12 and duration 1/16 of the length); ``Ez``, the
    plasma wake trailing it (wavelength a quarter of the length); ``rho`` (C/m^3), the plasma
    electron density modulated by the wake, with relative particle noise ``noise``. The seed
    sets the carrier phase, small changes of waist and wake amplitude, and the noise.

    ``t`` in [0, 1] moves the pulse from a quarter to three quarters of the length, and the
    refined patch with it: level 1 spans the pulse and the first half wake period, each finer
    level the pulse only, within 1.5 waists of the axis (shrinking with the level), aligned to
    the blocking factor and cut into boxes of at most ``max_grid_size``.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    n = tuple(int(v) for v in n)
    dim = len(n)
    if dim not in (2, 3):
        raise ValueError(f"n must have 2 or 3 sides, got {n}")
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"t must be in [0, 1], got {t}")
    _check_layout(n, levels, ref_ratio, blocking_factor, max_grid_size)
    r = ref_ratio
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi)
    waist_jitter, wake_jitter = rng.uniform(0.9, 1.1, size=2)

    # geometry (m): coarse cells dz = lambda0 / 10.7 for n_z = 128
    lambda0 = 0.8e-6
    length = 12 * lambda0
    dz = length / n[-1]
    width = [2.0 * v * dz for v in n[:-1]]  # transverse cells twice as long as axial ones
    prob_lo = tuple(-w / 2 for w in width) + (0.0,)
    prob_hi = tuple(w / 2 for w in width) + (length,)
    zc = (0.25 + 0.5 * t) * length
    sigma_z = length / 16
    waist = waist_jitter * min(width) / 6
    wake_waist = 1.5 * waist
    lambda_p = length / 4
    c = 299_792_458.0
    e0, ew = 4.0e12, wake_jitter * 2.0e11
    n0_charge = -1.602176634e-19 * 1e25  # electron charge density of a 1e25 m^-3 plasma

    # the finest grid's cell centres, one profile per axis (every field is separable but the noise)
    N = [v * r ** (levels - 1) for v in n]
    centres = [lo + (np.arange(s) + 0.5) * (hi - lo) / s for lo, hi, s in zip(prob_lo, prob_hi, N)]
    z = centres[-1]

    def outer(profiles):
        out = profiles[0]
        for p in profiles[1:]:
            out = np.multiply.outer(out, p)
        return out

    gauss_t = [np.exp(-(x / waist) ** 2) for x in centres[:-1]]
    gauss_w = [np.exp(-(x / wake_waist) ** 2) for x in centres[:-1]]
    envelope = np.exp(-0.5 * ((z - zc) / sigma_z) ** 2)
    laser_z = envelope * np.cos(2 * np.pi * (z - zc) / lambda0 + phase)
    behind = 0.5 * (1 - np.tanh((z - zc) / sigma_z)) * np.exp(-np.clip(zc - z, 0, None) / (2 * length))
    wake_z = behind * np.sin(2 * np.pi * (z - zc) / lambda_p)

    ey = e0 * outer(gauss_t + [laser_z])
    fields = {"Ey": ey, "Bx": ey * (-1.0 / c)}
    del ey
    fields["Ez"] = ew * outer(gauss_w + [wake_z])
    delta = 0.3 * outer(gauss_w + [-behind * np.cos(2 * np.pi * (z - zc) / lambda_p)])
    delta += noise * rng.standard_normal(tuple(N))
    fields["rho"] = n0_charge * (1.0 + delta)
    del delta

    # the refined windows: physical rectangles around the pulse, in each level's index space
    layout = [_chop([0] * dim, [v - 1 for v in n], max_grid_size)]
    rect = ([0] * dim, [v - 1 for v in n])
    for L in range(1, levels):
        back = sigma_z * 3 + (lambda_p / 2 if L == 1 else 0.0)
        half = [1.5 * waist / (L**0.5)] * (dim - 1)
        lo_phys = [-h for h in half] + [zc - back]
        hi_phys = list(half) + [zc + 3 * sigma_z]
        cells = [v * r**L for v in n]
        lo, hi = [], []
        for a in range(dim):
            span = (prob_hi[a] - prob_lo[a]) / cells[a]
            a_lo = math.floor((lo_phys[a] - prob_lo[a]) / span / blocking_factor) * blocking_factor
            a_hi = math.ceil((hi_phys[a] - prob_lo[a]) / span / blocking_factor) * blocking_factor - 1
            p_lo, p_hi = rect[0][a] * r, (rect[1][a] + 1) * r - 1  # the refined parent window
            lo.append(max(a_lo, p_lo))
            hi.append(min(a_hi, p_hi))
        if any(h < l for l, h in zip(lo, hi)):
            break
        rect = (lo, hi)
        layout.append(_chop(lo, hi, max_grid_size))
    used = len(layout)

    data = {}
    for name in ("Ey", "Bx", "Ez", "rho"):
        pyr = _pyramid(fields.pop(name), levels, r, dtype)[:used]
        data[name] = [_cut(pyr[L], layout[L]) for L in range(used)]
    params = dict(n=list(n), levels=levels, ref_ratio=r, blocking_factor=blocking_factor, max_grid_size=max_grid_size,
                  t=t, seed=seed, dtype=dtype.name, noise=noise)
    return _assemble(layout, data, r, n, prob_lo, prob_hi, time=t * length / c, step=0,
                     attrs={"source": "amrzip.amr.synthetic.warpx_like", "params": params,
                            "units": {"Ey": "V/m", "Ez": "V/m", "Bx": "T", "rho": "C/m^3", "length": "m"}})
