"""Snapshots written by several MPI ranks at once (amrzip.parallel), run under mpiexec with 1, 2
and 4 ranks (4 oversubscribe a 2-core machine; MPICH's wheel allows it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip.amr import synthetic
from amrzip.parallel.distribution import distribute, part

from shared_data import AMREX, CHOMBO, needs_data

pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py mpich)")
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpich, or a site MPI)")
RANKS = os.path.join(os.path.dirname(__file__), "parallel_ranks.py")
# A write of the small hierarchies takes a second; a hang is what this catches.
TIMEOUT = 120


def mpiexec(n: int, *args, timeout=TIMEOUT, check=True) -> subprocess.CompletedProcess:
    cmd = [MPIEXEC, "-n", str(n), *map(str, args)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def entries(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


@pytest.mark.parametrize("kind", ["nyx", "warpx"])
def test_any_rank_count_writes_the_serial_chunks(tmp_path, kind):
    h = synthetic.small(kind)
    serial = amrzip.write(h, tmp_path / "serial", rel=1e-4)
    want = entries(serial["path"])
    for n, how in [(1, "knapsack"), (2, "round-robin"), (4, "knapsack"), (4, "sfc")]:
        store = tmp_path / f"{n}-{how}"
        out = json.loads(mpiexec(n, sys.executable, RANKS, "write", kind, store, how).stdout)
        got = entries(out["path"])
        # The same entries and chunks; only the metadata differs (it records each box's rank).
        assert set(got) == set(want)
        assert [k for k in want if got[k] != want[k]] in ([], ["zarr.json"]), (n, how)
        assert abs(out["stored_bytes"] / serial["stored_bytes"] - 1) < 0.02
        assert amrzip.check(store)["ok"]
        # Every rank reads back its boxes within the bound.
        read = json.loads(mpiexec(n, sys.executable, RANKS, "read", kind, store).stdout)
        assert read["worst"] <= 1.0 and read["cells"] > 0
        ds = amrzip.open(store)
        assert set(ds.level(ds.num_levels - 1).owners) <= set(range(n))


def test_an_error_on_one_rank_stops_every_rank(tmp_path):
    store = tmp_path / "store"
    amrzip.write(synthetic.small("nyx"), store, rel=1e-4, snapshot="before")
    result = mpiexec(2, sys.executable, RANKS, "fail", store, check=False)
    errors = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("error-*.json"))]
    assert [e["rank"] for e in errors] == [0, 1], result.stderr
    assert any("this rank's data cannot be read" in e["error"] for e in errors)
    assert any(e["error"].startswith("rank 1:") for e in errors if e["rank"] == 0)
    # Nothing half-written is left, and the earlier snapshot is as it was.
    assert amrzip.store.snapshots(store) == ["before"]
    assert sorted(p.name for p in store.iterdir()) == ["before.zarr.zip"]
    assert amrzip.check(store)["ok"]


def test_ranks_asked_for_different_things_all_refuse(tmp_path):
    store = tmp_path / "store"
    mpiexec(2, sys.executable, RANKS, "mismatch", store, check=False)
    errors = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("error-*.json"))]
    assert [e["rank"] for e in errors] == [0, 1]
    assert all("every rank must pass the same" in e["error"] for e in errors)
    assert amrzip.store.snapshots(store) == []


def test_a_killed_rank_ends_the_job_and_check_repair_cleans_up(tmp_path):
    store = tmp_path / "store"
    h = synthetic.small("nyx")
    amrzip.write(h, store, rel=1e-4, snapshot="before")
    result = mpiexec(2, sys.executable, RANKS, "kill", store, check=False, timeout=60)
    assert result.returncode != 0
    assert amrzip.store.snapshots(store) == ["before"]
    report = amrzip.check(store)
    assert len(report["interrupted"]) <= 1
    repaired = amrzip.check(store, repair=True)
    assert repaired["ok"]
    assert sorted(p.name for p in store.iterdir()) == ["before.zarr.zip"]
    ds = amrzip.open(store, "before")
    np.testing.assert_allclose(ds.read(h.fields[0], level=0), amrzip.open(store).read(h.fields[0], level=0))


@needs_data
@pytest.mark.parametrize("name", ["pelelmex_3d", "bisicles checkpoint"])
def test_mpiexec_convert_of_a_real_file(tmp_path, name):
    # Each rank takes its boxes in place from the file (ghost cells and all in the checkpoint).
    if name == "pelelmex_3d":
        source = AMREX / "pelelmex_3d"
    else:
        pytest.importorskip("h5py", reason="h5py is not installed (it is in requirements-dev.txt)")
        source = CHOMBO / "chk.mismip3D.Benn.ssa.0lev.013000.2d.hdf5"
    cli = Path(sys.executable).parent / "amrzip"
    subprocess.run([str(cli), "convert", str(source), str(tmp_path / "serial"), "--rel", "1e-4"], check=True, capture_output=True, timeout=TIMEOUT)
    result = mpiexec(2, cli, "convert", source, tmp_path / "two", "--rel", "1e-4")
    # Rank 0 reports; the other says nothing.
    assert result.stdout.count("ratio") == 1
    (want,) = (tmp_path / "serial").glob("*.zarr.zip")
    (got,) = (tmp_path / "two").glob("*.zarr.zip")
    a, b = entries(want), entries(got)
    assert [k for k in a if a[k] != b[k]] == ["zarr.json"]


def test_distributions_and_parts():
    boxes = [((0, 0), (3, 3)), ((4, 0), (11, 3)), ((0, 4), (1, 5)), ((8, 8), (15, 15))]
    for how in ("round-robin", "knapsack", "sfc"):
        owners = distribute(boxes, 2, how)
        assert sorted(set(owners.tolist())) == [0, 1], how
    # Knapsack: the largest box alone, the rest together.
    assert distribute(boxes, 2, "knapsack").tolist() == [1, 1, 1, 0]
    with pytest.raises(ValueError, match="distribution"):
        distribute(boxes, 2, "random")
    h = synthetic.small("nyx")
    owners = [distribute(lev.boxes, 3, "round-robin") for lev in h.levels]
    parts = [part(h, r, owners) for r in range(3)]
    assert sum(p.levels[1].num_boxes for p in parts) == h.levels[1].num_boxes
    np.testing.assert_array_equal(parts[1].levels[1].box_data(h.fields[0], 0), h.levels[1].box_data(h.fields[0], 1))
