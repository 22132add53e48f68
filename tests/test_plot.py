"""Pictures (amrzip.plot, ``amrzip plot``): what a slice shows, that every box crossing it is
outlined, and the error map, on 2-D and 3-D hierarchies and their stores."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="matplotlib is not installed")

from matplotlib.collections import LineCollection  # noqa: E402
from PIL import Image  # noqa: E402

import amrzip  # noqa: E402
from amrzip import plot  # noqa: E402
from amrzip.amr import synthetic  # noqa: E402
from amrzip.formats.plotfile import write_plotfile  # noqa: E402

from shared_data import AMREX, needs_data  # noqa: E402

HIERARCHIES = {"3d": lambda: synthetic.small("nyx"), "2d": lambda: synthetic.nyx_like(n=32, dim=2, max_grid_size=16)}


@pytest.fixture(scope="module", params=sorted(HIERARCHIES))
def written(request, tmp_path_factory):
    h = HIERARCHIES[request.param]()
    path = tmp_path_factory.mktemp(request.param) / "store"
    amrzip.write(h, path, rel=1e-3)
    return h, path


def crossing(h, axis, coord) -> list[int]:
    """Boxes per level that the plane axis = coord crosses (all of them in 2-D)."""
    out = []
    for L in range(h.num_levels):
        lev = h.level(L)
        if axis is None:
            out.append(lev.num_boxes)
            continue
        cells = lev.domain[1][axis] - lev.domain[0][axis] + 1
        width = (h.prob_hi[axis] - h.prob_lo[axis]) / cells
        index = lev.domain[0][axis] + min(cells - 1, int((coord - h.prob_lo[axis]) / width))
        out.append(sum(lo[axis] <= index <= hi[axis] for lo, hi in lev.boxes))
    return out


def test_slice_shows_the_finest_data_within_the_bound(written):
    h, path = written
    ds = amrzip.open(path)
    for axis in ([0, 1, 2] if h.dim == 3 else [None]):
        ours, ref = plot.slice_of(ds, "density", axis), plot.slice_of(h, "density", axis)
        assert ours.image.shape == ref.image.shape and np.isfinite(ref.image).all()
        assert np.abs(ours.image - ref.image).max() <= ds.bounds["density"]["abs"]
        # the finest level's cells, one image pixel each: where level 2 has a box, the slice is its data
        assert ours.image.shape == tuple(h.level(h.num_levels - 1).domain[1][d] + 1 for d in ours.axes)


def test_a_slice_reads_only_what_its_plane_crosses(written):
    h, path = written
    ds = amrzip.open(path)
    plot.slice_of(ds, "density", 0 if h.dim == 3 else None, coord=h.prob_lo[0] + 1e-9)
    if h.dim == 3:
        assert ds.bytes_read < ds.stored_bytes / 3


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_slice_picture_has_its_size_axes_and_every_outline(written, tmp_path, suffix):
    h, path = written
    ds = amrzip.open(path)
    coord = 0.37 * (h.prob_hi[-1] - h.prob_lo[-1]) + h.prob_lo[-1]
    fig = plot.plot_slice(ds, "density", coord=coord if h.dim == 3 else None)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x", "y")
    collections = [c for c in ax.collections if isinstance(c, LineCollection)]
    want = crossing(h, 2 if h.dim == 3 else None, coord)
    assert [len(c.get_segments()) for c in collections] == [4 * n for n in want]
    assert sum(want) > want[0]  # finer boxes are outlined too
    out = tmp_path / f"slice.{suffix}"
    fig.savefig(out, dpi=100)
    if suffix == "png":
        assert Image.open(out).size == (640, 520)
    else:
        text = out.read_text()
        assert text.lstrip().startswith("<?xml") and "<svg" in text and text.count("<path") >= 4 * sum(want)


def test_error_map_stays_within_the_bound(written):
    h, path = written
    fig = plot.plot_error(amrzip.open(path), h, "temp")
    image = fig.axes[0].images[0].get_array()
    assert np.nanmax(image) <= 1.0 and np.nanmax(image) > 0.05
    assert "of the bound" in fig.axes[0].get_title()


def test_bad_requests_are_refused(written):
    h, path = written
    ds = amrzip.open(path)
    with pytest.raises(KeyError, match="no field"):
        plot.slice_of(ds, "nope")
    if h.dim == 3:
        with pytest.raises(ValueError, match="outside the domain"):
            plot.slice_of(ds, "density", "x", coord=h.prob_hi[0] * 10)
        with pytest.raises(ValueError, match="not one of"):
            plot.slice_of(ds, "density", "w")
    with pytest.raises(ValueError, match="log=True needs positive"):
        plot.plot_slice(ds, "x_velocity", log=True)


def run(*args):
    return subprocess.run([sys.executable, "-m", "amrzip", "plot", *map(str, args)], capture_output=True, text=True, timeout=300)


def test_cli(written, tmp_path):
    h, path = written
    r = run("slice", path, "-o", tmp_path / "a.png", "--field", "temp", "--dpi", "50")
    assert r.returncode == 0 and Image.open(tmp_path / "a.png").size == (320, 260), r.stderr
    write_plotfile(h, tmp_path / "plt")
    r = run("error", path, tmp_path / "plt", "-o", tmp_path / "e.svg", "--field", "temp")
    assert r.returncode == 0 and "<svg" in (tmp_path / "e.svg").read_text(), r.stderr
    r = run("slice", path, "-o", tmp_path / "a.jpg")
    assert r.returncode == 2 and "should end in .png or .svg" in r.stderr
    r = run("slice", path, "-o", tmp_path / "b.png", "--field", "nope")
    assert r.returncode == 2 and "no field 'nope'" in r.stderr


@needs_data
def test_cli_on_a_real_plotfile(tmp_path):
    source = AMREX / "pelelmex_3d"
    store = tmp_path / "s"
    assert subprocess.run([sys.executable, "-m", "amrzip", "convert", source, store, "--rel", "1e-3"], capture_output=True).returncode == 0
    r = run("error", store, source, "-o", tmp_path / "e.png", "--field", "temp", "--axis", "y")
    assert r.returncode == 0, r.stderr
    r = run("slice", source, "-o", tmp_path / "s.svg", "--field", "temp")
    assert r.returncode == 0 and "<svg" in (tmp_path / "s.svg").read_text(), r.stderr


def test_rate_distortion_against_the_baselines(tmp_path):
    pytest.importorskip("pysz", reason="pysz is not installed: no SZ3 baselines")
    h = HIERARCHIES["3d"]()
    rels = (1e-2, 1e-3, 1e-4)
    done = []
    curves = plot.rate_distortion(h, "density", rels, progress=done.append)
    assert set(curves) == {"amrzip", "per-box SZ3", "AMReX 1-D (SZ3)"}
    assert done == [sum(a.nbytes for a in h.field_boxes("density").values())] * len(rels)
    for name, points in curves.items():
        assert [r for r, _, _ in points] == list(rels)
        psnrs, ratios = [p for _, p, _ in points], [q for _, _, q in points]
        assert psnrs == sorted(psnrs) and ratios == sorted(ratios, reverse=True), name  # tighter: better PSNR, less ratio
        # an error bound of rel * range bounds the PSNR from below: 20 log10(1 / rel)
        assert all(p >= 20 * np.log10(1 / r) for r, p, _ in points), name
    fig = plot.plot_rate_distortion(curves, "density")
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == list(curves)
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "PSNR (dB)"
    r = run("rd", _plotfile(h, tmp_path), "-o", tmp_path / "rd.png", "--field", "density", "--bounds", "1e-2,1e-3", "--dpi", "50")
    assert r.returncode == 0 and "per-box SZ3: rel 0.01:" in r.stdout and Image.open(tmp_path / "rd.png").size == (320, 240), r.stderr
    r = run("rd", _plotfile(h, tmp_path), "-o", tmp_path / "rd.png", "--bounds", "2")
    assert r.returncode == 2 and "between 0 and 1" in r.stderr


def _plotfile(h, tmp_path):
    path = tmp_path / "plt"
    if not path.exists():
        write_plotfile(h, path)
    return path
