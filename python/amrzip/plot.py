"""Pictures of AMR snapshots and of what compression did to them (matplotlib): a slice of a
field with the boxes of every level outlined, and the error of a store against its source.

Both take a snapshot of a store (an ``amrzip.store.Dataset``, read lazily: a slice reads only
the chunks its plane crosses) or a ``Hierarchy`` (an AMR file as ``amrzip.read`` gives it), and
return a ``matplotlib.figure.Figure`` (no pyplot, so no display is needed); ``savefig`` writes
PNG or SVG by the file's suffix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amrzip.amr.hierarchy import Hierarchy
from amrzip.store.dataset import Dataset

AXES = "xyz"


@dataclass
class Slice:
    """A plane through a snapshot, at the finest level's resolution.

    ``image[u, v]``: the field on the plane's two axes ``axes`` (the finest data at each
    point; NaN where no level has data); ``extent``: (u0, u1, v0, v1) in physical units;
    ``outlines[L]``: the level's boxes crossing the plane as (n, 4) arrays of u0, v0, u1, v1 in
    physical units."""

    image: np.ndarray
    axes: tuple[int, int]
    extent: tuple[float, float, float, float]
    outlines: list[np.ndarray]
    axis: int | None
    coord: float | None


def _geometry(src):
    """Per level (boxes as an (n, 2, dim) array, index space lo, hi, ref ratios), prob_lo, prob_hi."""
    if isinstance(src, Dataset):
        levels = [(src.level(L).box_array, *src.level(L).index_space, src.level(L).ref_ratios) for L in range(src.num_levels)]
        return levels, tuple(src.meta["prob_lo"]), tuple(src.meta["prob_hi"])
    nodal = src.nodal
    levels = []
    for L in range(src.num_levels):
        lev = src.level(L)
        lo, hi = lev.domain
        boxes = np.asarray(lev.boxes, dtype=np.int64).reshape(len(lev.boxes), 2, src.dim)
        levels.append((boxes, tuple(lo), tuple(h + bool(n) for h, n in zip(hi, nodal)), lev.ref_ratios))
    return levels, tuple(src.prob_lo), tuple(src.prob_hi)


def _level_plane(src, field: str, L: int, lo, hi, axis, index) -> np.ndarray:
    """Level L's cells on the plane ``axis = index`` (level cells) over its index space, NaN
    where the level has no box (and, from a store, where finer levels cover it)."""
    region_lo = list(lo)
    region_hi = list(hi)
    if axis is not None:
        region_lo[axis] = region_hi[axis] = index
    if isinstance(src, Dataset):
        return src.read(field, region=(tuple(region_lo), tuple(region_hi)), level=L, covered="nan")
    # A Hierarchy holds box arrays: place the plane's part of each box crossing it.
    out = np.full([h - l + 1 for l, h in zip(region_lo, region_hi)], np.nan)
    lev = src.level(L)
    for i, (blo, bhi) in enumerate(lev.boxes):
        if axis is not None and not blo[axis] <= index <= bhi[axis]:
            continue
        a = lev.box_data(field, i)
        take = tuple(slice(None) if d != axis else slice(index - blo[d], index - blo[d] + 1) for d in range(len(blo)))
        put = tuple(slice(blo[d] - region_lo[d], bhi[d] - region_lo[d] + 1) if d != axis else slice(None) for d in range(len(blo)))
        out[put] = a[take]
    return out


def slice_of(src, field: str, axis: int | str | None = None, coord: float | None = None) -> Slice:
    """The plane of ``field`` normal to ``axis`` (0/1/2 or "x"/"y"/"z"; default z in 3-D, none
    in 2-D) at physical coordinate ``coord`` (default the domain's middle)."""
    levels, prob_lo, prob_hi = _geometry(src)
    dim = len(prob_lo)
    if dim not in (2, 3):
        raise ValueError(f"slices are of 2-D and 3-D snapshots; this one is {dim}-D")
    if isinstance(axis, str):
        if axis not in AXES[:dim]:
            raise ValueError(f"axis {axis!r} is not one of {', '.join(AXES[:dim])}")
        axis = AXES.index(axis)
    if dim == 3:
        axis = 2 if axis is None else int(axis)
        if not 0 <= axis < 3:
            raise ValueError(f"axis {axis} is not 0, 1 or 2")
    else:
        axis = None
    plane_axes = tuple(d for d in range(dim) if d != axis)
    top = len(levels) - 1
    _, top_lo, top_hi, _ = levels[top]
    # Cells of each level per finest cell, per axis.
    scale = [np.ones(dim, dtype=np.int64) for _ in levels]
    for L in range(top - 1, -1, -1):
        scale[L] = scale[L + 1] * np.asarray(levels[L][3], dtype=np.int64)
    if axis is not None:
        lo_phys, hi_phys = prob_lo[axis], prob_hi[axis]
        coord = (lo_phys + hi_phys) / 2 if coord is None else float(coord)
        if not lo_phys <= coord <= hi_phys:
            raise ValueError(f"coordinate {coord} is outside the domain along {AXES[axis]} ({lo_phys} to {hi_phys})")
        cells = top_hi[axis] - top_lo[axis] + 1
        fine_index = top_lo[axis] + min(cells - 1, int((coord - lo_phys) / (hi_phys - lo_phys) * cells))
    shape = [top_hi[d] - top_lo[d] + 1 for d in plane_axes]
    image = np.full(shape, np.nan)
    outlines = []
    for L, (boxes, lo, hi, _) in enumerate(levels):
        s = scale[L]
        index = None if axis is None else fine_index // s[axis]
        plane = _level_plane(src, field, L, lo, hi, axis, index)
        if axis is not None:
            plane = np.take(plane, 0, axis=axis)
        # Each level cell covers s finest cells per axis; finer levels are painted later.
        up = np.repeat(np.repeat(plane, s[plane_axes[0]], axis=0), s[plane_axes[1]], axis=1)
        off = [lo[d] * s[d] - top_lo[d] for d in plane_axes]
        region = up[: shape[0] - off[0], : shape[1] - off[1]]
        target = image[off[0]: off[0] + region.shape[0], off[1]: off[1] + region.shape[1]]
        np.copyto(target, region, where=np.isfinite(region))
        crossing = boxes if axis is None else boxes[(boxes[:, 0, axis] <= index) & (index <= boxes[:, 1, axis])]
        outlines.append(_physical(crossing, s, plane_axes, top_lo, top_hi, prob_lo, prob_hi))
    extent = (prob_lo[plane_axes[0]], prob_hi[plane_axes[0]], prob_lo[plane_axes[1]], prob_hi[plane_axes[1]])
    return Slice(image, plane_axes, extent, outlines, axis, coord if axis is not None else None)


def _physical(boxes, s, plane_axes, top_lo, top_hi, prob_lo, prob_hi) -> np.ndarray:
    """Boxes' corners on the plane in physical units: (n, 4) of u0, v0, u1, v1."""
    out = np.empty((len(boxes), 4))
    for k, d in enumerate(plane_axes):
        dx = (prob_hi[d] - prob_lo[d]) / (top_hi[d] - top_lo[d] + 1)
        out[:, k] = prob_lo[d] + (boxes[:, 0, d] * s[d] - top_lo[d]) * dx
        out[:, k + 2] = prob_lo[d] + ((boxes[:, 1, d] + 1) * s[d] - top_lo[d]) * dx
    return out


def _figure(size):
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _draw_outlines(ax, outlines):
    """Each level's boxes as one LineCollection (four segments a box), coarse to fine."""
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection

    colors = colormaps["autumn"](np.linspace(0, 1, max(len(outlines), 2)))
    for L, r in enumerate(outlines):
        u0, v0, u1, v1 = r.T
        corners = np.stack([np.stack([u0, v0], 1), np.stack([u1, v0], 1), np.stack([u1, v1], 1), np.stack([u0, v1], 1)], 1)
        segments = np.stack([corners, np.roll(corners, -1, axis=1)], 2).reshape(-1, 2, 2)
        ax.add_collection(LineCollection(segments, colors=[colors[L]], linewidths=0.6 if L else 0.9, label=f"level {L}"))
    if outlines:
        ax.legend(loc="upper right", fontsize="small", framealpha=0.6)


def _title(s: Slice, what: str) -> str:
    return what if s.axis is None else f"{what}, {AXES[s.axis]} = {s.coord:.4g}"


def plot_slice(src, field: str, axis=None, coord=None, outlines: bool = True, log: bool = False, cmap: str = "viridis",
               size=(6.4, 5.2)):
    """A slice of ``field`` with the boxes of every level outlined (see :func:`slice_of`)."""
    from matplotlib.colors import LogNorm

    s = slice_of(src, field, axis, coord)
    fig, ax = _figure(size)
    finite = s.image[np.isfinite(s.image)]
    norm = LogNorm() if log and finite.size and finite.min() > 0 else None
    if log and norm is None:
        raise ValueError(f"log=True needs positive values; {field} has values down to {finite.min() if finite.size else 'none'}")
    im = ax.imshow(s.image.T, origin="lower", extent=s.extent, cmap=cmap, norm=norm, interpolation="nearest", aspect="equal")
    fig.colorbar(im, ax=ax, label=field)
    if outlines:
        _draw_outlines(ax, s.outlines)
    ax.set_xlabel(AXES[s.axes[0]])
    ax.set_ylabel(AXES[s.axes[1]])
    ax.set_title(_title(s, field))
    return fig


def plot_error(store: Dataset, source, field: str, axis=None, coord=None, outlines: bool = True, size=(6.4, 5.2)):
    """Where the error went: |store - source| on a slice, as a fraction of the store's bound for
    ``field`` (so 1 is the bound), with the boxes outlined."""
    ours = slice_of(store, field, axis, coord)
    ref = slice_of(source, field, axis, coord)
    if ours.image.shape != ref.image.shape:
        raise ValueError(f"the store's slice is {ours.image.shape} cells and the source's {ref.image.shape}: not the same snapshot")
    bound = store.bounds[field]["abs"]
    err = np.abs(ours.image - ref.image)
    err = err / bound if bound > 0 else err
    fig, ax = _figure(size)
    im = ax.imshow(err.T, origin="lower", extent=ours.extent, cmap="magma", vmin=0, vmax=1 if bound > 0 else None,
                   interpolation="nearest", aspect="equal")
    fig.colorbar(im, ax=ax, label="|error| / bound" if bound > 0 else "|error|")
    if outlines:
        _draw_outlines(ax, ours.outlines)
    worst = np.nanmax(err) if np.isfinite(err).any() else float("nan")
    ax.set_xlabel(AXES[ours.axes[0]])
    ax.set_ylabel(AXES[ours.axes[1]])
    ax.set_title(_title(ours, f"{field}: error, largest {worst:.3g}" + (" of the bound" if bound > 0 else "")))
    return fig


def source_of(path, snapshot: str | None = None):
    """A store's snapshot (lazily read) or an AMR file's hierarchy, whichever ``path`` is."""
    import amrzip

    try:
        return amrzip.open(path, snapshot=snapshot)
    except Exception as store_error:  # not a store: an AMR file, or say why neither
        if snapshot is not None:
            raise
        try:
            return amrzip.read(path)
        except Exception:
            raise ValueError(f"{path} is neither a snapshot store ({store_error}) nor an AMR file amrzip reads") from None



def rate_distortion(h: Hierarchy, field: str, rels=(1e-2, 1e-3, 1e-4, 1e-5), baselines: bool = True, progress=None) -> dict:
    """Ratio against PSNR of one field of ``h`` over the value-range relative bounds ``rels``:
    {method: [(rel, psnr, ratio)]} for amrzip's store and, with ``baselines`` and pysz
    installed, per-box SZ3 and AMReX's 1-D baseline at the same absolute bounds. The ratio is the
    field's bytes over all cells of all levels over the compressed payload; the PSNR is over
    the leaf cells (those no finer level covers), peak = their value range (the same numbers as
    benches/amr_bench.py's). ``progress(nbytes)`` is called with the field's bytes as each bound
    is done."""
    import tempfile

    import amrzip
    from amrzip import baselines as base
    from amrzip._metrics import psnr
    from amrzip.amr.leaves import Leaves

    if field not in h.fields:
        raise KeyError(f"no field {field!r} (fields: {', '.join(h.fields)})")
    sub = h.only([field])
    boxes = sub.field_boxes(field)
    shapes = {key: a.shape for key, a in boxes.items()}
    leaves = Leaves.of(sub)
    leaf = leaves.values(boxes)
    vrange = float(leaf.max() - leaf.min()) if leaf.size else 0.0
    raw = sum(a.nbytes for a in boxes.values())
    dtype = sub.dtype(field)
    curves: dict = {"amrzip": []}
    with_sz3 = baselines and base.have_sz3()
    if with_sz3:
        curves.update({"per-box SZ3": [], "AMReX 1-D (SZ3)": []})
    for rel in rels:
        eb = rel * vrange
        with tempfile.TemporaryDirectory(prefix="amrzip-rd-") as tmp:
            summary = amrzip.write(sub, f"{tmp}/s", rel=rel)
            stored = sum(int(lev["fields"][field]["stored_bytes"]) for lev in summary["levels"])
            back = amrzip.open(f"{tmp}/s").to_hierarchy()
            out = back.field_boxes(field)
        curves["amrzip"].append((rel, psnr(leaf, leaves.values(out)), raw / stored))
        if with_sz3:
            blobs = base.per_box_sz3_encode(boxes, eb)
            dec = base.per_box_sz3_decode(blobs, dtype, shapes)
            curves["per-box SZ3"].append((rel, psnr(leaf, leaves.values(dec)), raw / base.stream_bytes(blobs)))
            streams = base.amrex_1d_encode(boxes, [lev.num_boxes for lev in sub.levels], eb)
            dec = base.amrex_1d_decode(streams, dtype, shapes)
            curves["AMReX 1-D (SZ3)"].append((rel, psnr(leaf, leaves.values(dec)), raw / base.stream_bytes(streams)))
        if progress is not None:
            progress(raw)
    return curves


def plot_rate_distortion(curves: dict, title: str = "", size=(6.4, 4.8)):
    """The curves of :func:`rate_distortion`: compression ratio (log scale) against PSNR."""
    fig, ax = _figure(size)
    for name, points in curves.items():
        finite = [(p, r) for _, p, r in points if np.isfinite(p)]
        if finite:
            ax.plot(*zip(*finite), marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("PSNR (dB)")
    ax.set_ylabel("compression ratio")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title)
    return fig


__all__ = ["Slice", "slice_of", "plot_slice", "plot_error", "source_of", "rate_distortion", "plot_rate_distortion"]
