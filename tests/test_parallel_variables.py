"""Plain n-D variables written by several MPI ranks at once (amrzip.parallel.Writer), PnetCDF's
patterns, run under mpiexec with 1, 2 and 4 ranks; and the same writer and reader in one process."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import amrzip
from amrzip import parallel

RANKS = str(Path(__file__).with_name("parallel_variables_ranks.py"))


def mpi():
    """The mpiexec helper of the AMR tests (skips there without mpi4py or mpiexec)."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py mpich)")
    import test_parallel

    if test_parallel.MPIEXEC is None:
        pytest.skip("no mpiexec (pip install mpich, or a site MPI)")
    return test_parallel.mpiexec


@pytest.mark.parametrize("pattern", ["checkerboard", "flash", "many"])
def test_patterns_read_back_within_the_bound_at_any_rank_count(tmp_path, pattern):
    mpiexec = mpi()
    sizes = {}
    for n in (1, 2, 4):
        for aggregate in ("on", "off") if n == 2 else ("on",):
            store = tmp_path / f"{n}-{aggregate}"
            out = json.loads(mpiexec(n, sys.executable, RANKS, "write", pattern, store, aggregate).stdout)
            # Every rank read its own regions and every variable whole, through owners or alone.
            assert out["worst"] <= 1.0, (n, aggregate, out["worst"])
            assert out["flush"]["rounds"] == (1 if aggregate == "on" else len(out["summary"]["variables"]))
            assert amrzip.check(store)["ok"]
            sizes[(n, aggregate)] = out["summary"]["stored_bytes"] / out["summary"]["original_bytes"]
            if n > 1:
                assert "collective" in out["methods"], "ranks sharing chunks read them through owners"
    # FLASH grows with the ranks (each appends blocks); the others hold the same data at any count.
    if pattern != "flash":
        assert max(sizes.values()) / min(sizes.values()) < 1.05, sizes


def test_two_ranks_putting_the_same_cells_both_fail(tmp_path):
    mpiexec = mpi()
    errors = json.loads(mpiexec(2, sys.executable, RANKS, "overlap", tmp_path / "s").stdout)["errors"]
    assert all(e and "put more than once" in e for e in errors), errors
    assert not list((tmp_path / "s").glob("*.zip")), "nothing committed"


def test_ranks_defining_other_variables_all_refuse(tmp_path):
    mpiexec = mpi()
    errors = json.loads(mpiexec(2, sys.executable, RANKS, "mismatch", tmp_path / "s").stdout)["errors"]
    assert all(e and "every rank must give the same" in e for e in errors), errors


def test_ranks_naming_other_stores_all_stop(tmp_path):
    mpiexec = mpi()
    errors = json.loads(mpiexec(2, sys.executable, RANKS, "paths", tmp_path / "s").stdout)["errors"]
    writes, opens = [e[0] for e in errors], [e[1] for e in errors]
    assert all(e and "another store" in e for e in writes), writes
    # Rank 1 cannot open its store: it raises its own error, rank 0 one naming rank 1; no hang.
    assert opens[1] and "rank" not in opens[1].split(":")[0] and opens[0].startswith("ValueError: rank 1:"), opens


def test_one_process_writes_reads_and_zarr_opens_it(tmp_path):
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.normal(size=(37, 21, 10)), axis=0).astype(np.float32)
    variables = {"t": dict(shape=t.shape, dtype="float32", chunks=(16, 8, 10)), "u": dict(shape=(100,), chunks=(32,), abs=1e-6, fill=-1.0)}
    with parallel.Writer(None, tmp_path, variables, rel=1e-3, snapshot="s") as w:
        w.put("t", (0, 0, 0), t[:20])
        w.put("t", (20, 0, 0), t[20:])
        w.flush()
        with pytest.raises(ValueError, match="earlier flush"):
            w.put("t", (0, 0, 0), t[:1])
        w.put("u", (0,), np.arange(90.0))
    s = w.summary
    assert s["variables"]["t"]["chunks"] == 3 * 3 and s["variables"]["u"]["chunks"] == 3
    r = parallel.open_variables(None, tmp_path)
    bound = r.variables["t"]["abs_bound"]
    assert math.isclose(bound, 1e-3 * (t.max() - t.min()), rel_tol=1e-6)
    assert np.abs(r.read("t") - t).max() <= bound
    assert np.abs(r.read("t", (5, 3, 2), (20, 10, 5)) - t[5:25, 3:13, 2:7]).max() <= bound
    u = r.read("u")
    assert np.abs(u[:90] - np.arange(90.0)).max() <= 1e-6 and np.all(u[90:] == -1.0)
    zarr = pytest.importorskip("zarr", reason="zarr is not installed")
    g = zarr.open_group(zarr.storage.ZipStore(s["path"], mode="r"), mode="r")
    assert np.abs(g["t"][:] - t).max() <= bound and np.all(g["u"][95:] == -1.0)
    # The AMR reader says what the snapshot is instead of failing on it.
    with pytest.raises(ValueError, match="plain variables"):
        amrzip.open(tmp_path)


def test_bad_definitions_and_puts_are_refused(tmp_path):
    with pytest.raises(ValueError, match="exactly one of rel= and abs="):
        parallel.Writer(None, tmp_path, {"a": ((4,), "float32")})
    with pytest.raises(ValueError, match="float32 and float64"):
        parallel.Writer(None, tmp_path, {"a": ((4,), "int32")}, abs=1)
    with pytest.raises(ValueError, match="variable name"):
        parallel.Writer(None, tmp_path, {"../a": ((4,), "float32")}, abs=1)
    with pytest.raises(ValueError, match="chunks"):
        parallel.Writer(None, tmp_path, {"a": dict(shape=(4, 4), chunks=(2,))}, abs=1)
    w = parallel.Writer(None, tmp_path, {"a": ((8, 8), "float64")}, abs=1e-3, snapshot="s")
    with pytest.raises(ValueError, match="leaves the variable"):
        w.put("a", (4, 4), np.zeros((8, 8)))
    with pytest.raises(ValueError, match="dimensions"):
        w.put("a", (0,), np.zeros(8))
    with pytest.raises(KeyError):
        w.put("b", (0, 0), np.zeros((8, 8)))
    w.put("a", (0, 0), np.zeros((4, 8)))
    w.put("a", (2, 0), np.ones((4, 8)))
    with pytest.raises(ValueError, match="put more than once"):
        w.flush()
    with pytest.raises(ValueError, match="stopped after an error"):
        w.flush()
    # Nothing was committed; the store holds no temporary file once the writer is gone.
    del w
    assert amrzip.store.snapshots(tmp_path) == []
    assert amrzip.check(tmp_path)["ok"]


def test_inspect_describes_a_snapshot_of_variables(tmp_path):
    from click.testing import CliRunner

    from amrzip.cli import cli

    with parallel.Writer(None, tmp_path, {"t": ((10, 10), "float64")}, abs=1e-3, snapshot="v") as w:
        w.put("t", (0, 0), np.ones((10, 10)))
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["kind"] == "variables" and d["variables"][0]["chunks_written"] == 1 and d["variables"][0]["stored_bytes"] > 0
    table = CliRunner().invoke(cli, ["inspect", str(tmp_path)])
    assert table.exit_code == 0 and "plain variables" in table.output and "10x10" in table.output, table.output


def test_the_example_runs_under_mpiexec(tmp_path):
    mpiexec = mpi()
    example = Path(__file__).resolve().parent.parent / "examples" / "python" / "parallel_variables.py"
    out = mpiexec(2, sys.executable, example, tmp_path / "run").stdout
    assert "largest error" in out and amrzip.check(tmp_path / "run")["ok"], out
