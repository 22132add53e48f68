"""The store on real AMR output: every shared file that a reader opens goes plotfile (or HDF5)
-> store -> hierarchy -> plotfile with every stored value within its bound and covered cells
rebuilt, and the conserved quantity of the advection run keeps its volume-weighted mean."""

from __future__ import annotations

import numpy as np
import pytest

import amrzip
from amrzip.formats import write_plotfile
from shared_data import AMREX, CHOMBO, needs_data
from test_store import assert_round_trip

pytestmark = needs_data

SOURCES = [
    ("amrex", "pelelmex_3d", ["temp", "density", "x_velocity"]),
    ("amrex", "warpx_single_level", None),
    ("amrex", "advection_2d_4levels", None),
    ("chombo", "ase-ctrl-reference.H5", ["thickness", "xVelb", "Z_surface"]),
    ("chombo", "chk.mismip3D.Benn.ssa.0lev.013000.2d.hdf5", None),
    ("chombo", "stream.reference.000000.2d.H5", None),
]


def _path(kind, name):
    return (AMREX if kind == "amrex" else CHOMBO) / name


def _subset(h, fields):
    """The hierarchy with only ``fields`` (sharing the loaders)."""
    if fields is None:
        return h
    missing = set(fields) - set(h.fields)
    if missing:
        pytest.skip(f"fields {sorted(missing)} not in this file")
    for lev in h.levels:
        lev.fields = list(fields)
    h.fields = list(fields)
    return h


@pytest.mark.parametrize("kind,name,fields", SOURCES, ids=[s[1] for s in SOURCES])
def test_real_file_round_trip(tmp_path, kind, name, fields):
    h = _subset(amrzip.read(_path(kind, name)), fields)
    amrzip.write(h, tmp_path / "store", rel=1e-4)
    ds = amrzip.open(tmp_path / "store")
    assert_round_trip(h, ds)
    if kind == "amrex":
        # Back to a plotfile that the reader (and yt, see test_formats) opens: covered cells
        # complete, every value the store's.
        back = ds.to_hierarchy()
        write_plotfile(back, tmp_path / "back")
        again = amrzip.read(tmp_path / "back")
        assert [lev.boxes for lev in again.levels] == [lev.boxes for lev in h.levels]
        for L, lev in enumerate(again.levels):
            for i in range(lev.num_boxes):
                for f in h.fields:
                    np.testing.assert_array_equal(lev.box_data(f, i), back.level(L).box_data(f, i))
        _yt_sees(tmp_path / "back", again)


def _yt_sees(path, h):
    """yt opens the written plotfile and finds the same values in every grid (when yt is there)."""
    try:
        import yt
    except ImportError:
        return
    ds = yt.load(str(path))
    f = h.fields[0]
    index = {(L, b[0]): i for L, lev in enumerate(h.levels) for i, b in enumerate(lev.boxes)}
    for g in ds.index.grids:
        L = int(g.Level)
        i = index[(L, tuple(int(v) for v in g.get_global_startindex()[: h.dim]))]
        ours = h.level(L).box_data(f, i)
        theirs = np.asarray(g[("boxlib", f)]).reshape(g.ActiveDimensions)[tuple(slice(0, n) for n in ours.shape) + (0,) * (3 - h.dim)]
        np.testing.assert_array_equal(theirs, ours)


def test_advection_keeps_its_volume_weighted_mean(tmp_path):
    h = amrzip.read(AMREX / "advection_2d_4levels")

    def mean(box):
        total = volume = 0.0
        for L, lev in enumerate(h.levels):
            cell = float(np.prod(lev.dx))
            for i in range(lev.num_boxes):
                leaf = ~h.covered_mask(L, i)
                total += float(box(L, i)[leaf].sum()) * cell
                volume += float(leaf.sum()) * cell
        return total / volume

    original = mean(lambda L, i: h.level(L).box_data("phi", i))
    assert original == pytest.approx(1.031407652860374, rel=1e-12)
    amrzip.write(h, tmp_path / "s", rel=1e-4)
    ds = amrzip.open(tmp_path / "s")
    kept = mean(lambda L, i: ds.level(L).field("phi")[i])
    assert abs(kept - original) / original <= 1e-6
