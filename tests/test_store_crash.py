"""Crash safety: a writer killed (SIGKILL) at any instant of a write, followed by
`amrzip check --repair`, leaves every snapshot committed before it exactly as it read before,
and the killed snapshot either absent or complete and within its bound; `check` reports what a
crash leaves until it is repaired, and no temporary file stays after the repair."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import amrzip
from store_files import decoded_digest, seeded_hierarchy, snapshot_file, temporaries
from test_cli import amrzip_cli
from test_store import assert_round_trip

TESTS = Path(__file__).resolve().parent
# Big enough that one write takes about a second on one core.
N = 48
BOUND = 1e-4

# A writer process: builds its hierarchy, says "ready", writes it, says "committed" and stays
# alive a little longer, so that some kills land after the commit.
WRITER = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
import amrzip
from store_files import seeded_hierarchy
store, name, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = seeded_hierarchy(seed, n={N})
print("ready", flush=True)
start = time.perf_counter()
amrzip.write(h, store, rel={BOUND}, snapshot=name, threads=1)
print("committed", time.perf_counter() - start, flush=True)
time.sleep(0.3)
"""


def _start(store: Path, name: str, seed: int) -> subprocess.Popen:
    # stderr kept from the test's output: a writer stopped by SIGINT prints its traceback.
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), name, str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _repair(store: Path) -> None:
    r = amrzip_cli("check", store, "--repair", cwd=store.parent)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr == ""


def test_kill_at_any_instant_then_repair(tmp_path):
    store = tmp_path / "store"
    # Two writes left to finish: the store's first snapshots, and the measure of a write's
    # duration (the second's: the first also creates the store and starts cold).
    for seed, name in enumerate(("c0", "c1"), start=100):
        first = _start(store, name, seed)
        out, _ = first.communicate(timeout=120)
        assert first.returncode == 0
    duration = float(out.split()[-1])
    digests = {name: decoded_digest(store, name) for name in ("c0", "c1")}
    files = {name: snapshot_file(store, name).read_bytes() for name in ("c0", "c1")}
    rng = np.random.default_rng(7)
    # Kill instants as fractions of the write: before the writer is ready (negative: during its
    # start), spread over the write (as long as it took above: on a busy machine more of these
    # land before the commit), and after the commit (then timed from the writer's word).
    fractions = np.concatenate([[-1.0, -0.5], np.linspace(0.0, 1.0, 18) + rng.uniform(-0.02, 0.02, 18), [1.0, 1.05, 1.5]])
    outcomes = []
    for k, fraction in enumerate(fractions, start=1):
        name = f"k{k}"
        writer = _start(store, name, k)
        said = ""
        if fraction < 0:
            time.sleep((1 + fraction) * 0.1)  # at once, or while the interpreter starts
        elif fraction < 1:
            assert writer.stdout.readline() == "ready\n"
            time.sleep(fraction * duration)
        else:
            said = writer.stdout.readline() + writer.stdout.readline()
            assert said.startswith("ready\ncommitted"), said
            time.sleep((fraction - 1) * 0.3)  # the writer stays 0.3 s after its commit
        writer.send_signal(signal.SIGKILL)
        out, err = writer.communicate(timeout=60)
        out = said + out
        assert writer.returncode in (-signal.SIGKILL, 0), (writer.returncode, err)
        reported = "committed" in out

        left = temporaries(store)
        if left:
            # What the crash left is reported, and the store is not ok until repaired.
            report = amrzip.check(store)
            assert not report["ok"]
            assert sorted(Path(t["path"]).name for t in report["interrupted"]) == left
        _repair(store)
        assert temporaries(store) == []
        report = amrzip.check(store)
        assert report["ok"], report

        listed = amrzip.store.snapshots(store)
        # Every earlier snapshot: the same file, decoding to the same values.
        for old, digest in digests.items():
            assert old in listed
            assert snapshot_file(store, old).read_bytes() == files[old], old
            assert decoded_digest(store, old) == digest, old
        if reported:
            assert name in listed  # a writer that said it committed was right
        if name in listed:
            # Committed, or finished by the repair: whole and within its bound.
            assert_round_trip(seeded_hierarchy(k, n=N), amrzip.open(store, snapshot=name))
            digests[name] = decoded_digest(store, name)
            files[name] = snapshot_file(store, name).read_bytes()
        assert sorted(listed) == sorted(digests)
        outcomes.append((round(float(fraction), 2), "committed" if reported else "listed" if name in listed else "absent", left))
    print("\nkill at fraction of the write -> outcome, temporary files before repair")
    for o in outcomes:
        print(*o)
    # The kills did land both before and after commits, and some mid-write left a temporary file.
    kinds = {o[1] for o in outcomes}
    assert "absent" in kinds and "committed" in kinds, outcomes
    assert any(o[2] for o in outcomes), outcomes


def _two_snapshots(store: Path) -> dict:
    hs = {"a": seeded_hierarchy(1), "b": seeded_hierarchy(2)}
    for name, h in hs.items():
        amrzip.write(h, store, rel=BOUND, snapshot=name)
    return hs


def test_a_kill_between_link_and_cleanup_leaves_the_snapshot_listed(tmp_path):
    """The commit links the temporary file to its name, then removes the temporary name: a kill
    between the two leaves both names on one file. The snapshot is committed and reads; check
    reports the leftover; the repair removes it and leaves the snapshot as it was."""
    store = tmp_path / "store"
    hs = _two_snapshots(store)
    path = snapshot_file(store, "b")
    digest = decoded_digest(store, "b")
    os.link(path, store / ".writing-b-00000000deadbeef.zarr.zip")
    assert amrzip.store.snapshots(store) == ["a", "b"]
    assert decoded_digest(store, "b") == digest
    report = amrzip.check(store)
    assert not report["ok"] and report["interrupted"][0]["snapshot"] == "b"
    assert all(s["ok"] for s in report["snapshots"])
    r = amrzip_cli("check", store, cwd=tmp_path)
    assert r.returncode == 1 and "interrupted write of snapshot 'b'" in r.stdout, r.stdout
    _repair(store)
    assert temporaries(store) == [] and amrzip.store.snapshots(store) == ["a", "b"]
    assert decoded_digest(store, "b") == digest
    assert_round_trip(hs["b"], amrzip.open(store, snapshot="b"))


def test_a_whole_unlinked_write_is_finished_and_a_partial_one_removed(tmp_path):
    """A writer killed after writing its file whole but before linking it: check reports it,
    the repair gives it its name. One killed mid-file: the repair removes it. One whose name was
    meanwhile taken: removed, the snapshot of that name untouched."""
    store = tmp_path / "store"
    hs = _two_snapshots(store)
    other = tmp_path / "other"
    amrzip.write(seeded_hierarchy(3), other, rel=BOUND, snapshot="c")
    whole = snapshot_file(other, "c").read_bytes()
    (store / ".writing-c-0000000000000001.zarr.zip").write_bytes(whole)
    (store / ".writing-d-0000000000000002.zarr.zip").write_bytes(whole[: len(whole) // 2])
    (store / ".writing-a-0000000000000003.zarr.zip").write_bytes(whole)
    digest_a = decoded_digest(store, "a")
    report = amrzip.check(store)
    assert not report["ok"]
    assert {t["snapshot"]: t["action"] for t in report["interrupted"]} == {"a": "finish or remove", "c": "finish or remove", "d": "finish or remove"}
    assert amrzip.store.snapshots(store) == ["a", "b"]  # nothing unfinished is listed

    report = amrzip.check(store, repair=True)
    actions = {t["snapshot"]: t["action"] for t in report["interrupted"]}
    assert actions == {"a": "removed", "c": "finished as snapshot c", "d": "removed"}, actions
    assert report["ok"] and temporaries(store) == []
    assert sorted(amrzip.store.snapshots(store)) == ["a", "b", "c"]
    assert decoded_digest(store, "a") == digest_a
    assert_round_trip(seeded_hierarchy(3), amrzip.open(store, snapshot="c"))
    assert_round_trip(hs["a"], amrzip.open(store, snapshot="a"))


def test_a_held_temporary_file_is_left_alone(tmp_path):
    """A writer at work (its temporary file locked) is reported in progress and never removed by
    a repair running beside it; once the writer finishes, its snapshot is there."""
    store = tmp_path / "store"
    amrzip.write(seeded_hierarchy(1), store, rel=BOUND, snapshot="a")
    writer = _start(store, "slow", 5)
    try:
        assert writer.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 30
        while not temporaries(store) and time.monotonic() < deadline:
            time.sleep(0.005)
        report = amrzip.check(store, repair=True)
        held = [t for t in report["interrupted"] if t["snapshot"] == "slow"]
        # Unless the write finished in between, the repair saw it held and left it.
        if held:
            assert held[0]["in_progress"] and held[0]["action"] is None
        out, _ = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0 and "committed" in out
    assert sorted(amrzip.store.snapshots(store)) == ["a", "slow"]
    assert_round_trip(seeded_hierarchy(5, n=N), amrzip.open(store, snapshot="slow"))
    assert amrzip.check(store)["ok"]


def test_a_store_whose_creation_was_interrupted_is_made_whole(tmp_path):
    """A writer killed while creating the store leaves a folder holding only its temporary root
    (or temporary snapshot): the repair makes the store, which then takes snapshots."""
    store = tmp_path / "store"
    store.mkdir()
    (store / ".zarr.json.0123456789abcdef.tmp").write_bytes(b'{"zarr_format": 3')
    (store / ".writing-x-0000000000000001.zarr.zip").write_bytes(b"PK\x03\x04")
    r = amrzip_cli("check", store, cwd=tmp_path)
    assert r.returncode == 1
    _repair(store)
    assert temporaries(store) == [] and amrzip.store.snapshots(store) == []
    amrzip.write(seeded_hierarchy(1), store, rel=BOUND, snapshot="a")
    assert amrzip.check(store)["ok"]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_killed_writer_never_leaves_a_partial_snapshot_listed(tmp_path, signum):
    """Whatever signal stops a writer mid-write, the listing holds only whole snapshots."""
    store = tmp_path / "store"
    amrzip.write(seeded_hierarchy(1), store, rel=BOUND, snapshot="a")
    writer = _start(store, "b", 2)
    assert writer.stdout.readline() == "ready\n"
    time.sleep(0.2)
    writer.send_signal(signum)
    writer.communicate(timeout=60)
    for name in amrzip.store.snapshots(store):
        amrzip.open(store, snapshot=name).to_uniform("rho")
    _repair(store)
    assert temporaries(store) == [] and amrzip.check(store)["ok"]
