"""Many writers, one store: every snapshot a writer reports committed is listed and reads back
within its bound, whether the writers are processes (started before the store exists, so they
race to create it), `amrzip convert` runs, or threads of one process; `amrzip check` finds
nothing wrong and no temporary file is left.

Processes are started with multiprocessing's spawn context and meet at a barrier, so that they
really start writing (and creating the store) at the same instant."""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import amrzip
from shared_data import AMREX
from store_files import decoded_digest, seeded_hierarchy, temporaries
from test_store import LEGACY_STORE, assert_round_trip

SPAWN = multiprocessing.get_context("spawn")


def _writer(store: str, writer: int, rounds: int, n: int, barrier) -> None:
    """Writes ``rounds`` snapshots ``w<writer>_r<round>`` into ``store`` (a process's body)."""
    hierarchies = [seeded_hierarchy(1000 * writer + r, n=n) for r in range(rounds)]
    barrier.wait()
    for r, h in enumerate(hierarchies):
        amrzip.write(h, store, rel=1e-3, snapshot=f"w{writer}_r{r}", threads=1)


def _creator(base: str, writer: int, stores: int, barrier) -> None:
    """Writes one snapshot into each of ``stores`` stores that do not exist yet, every writer at
    the same instant (a process's body)."""
    h = seeded_hierarchy(writer, n=8)
    for s in range(stores):
        barrier.wait()
        amrzip.write(h, Path(base) / f"s{s}", abs=1e-3, snapshot=f"w{writer}", threads=1)


def _run_processes(target, args_of, count: int, timeout: float) -> list[int]:
    barrier = SPAWN.Barrier(count)
    procs = [SPAWN.Process(target=target, args=(*args_of(p), barrier)) for p in range(count)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():  # a hung writer fails the test, never the machine
            p.kill()
            p.join()
    return [p.exitcode for p in procs]


def assert_store_sound(store: Path, expected: dict) -> None:
    """Every snapshot of ``expected`` ({name: hierarchy}) listed and within its bound, check ok,
    no temporary file."""
    listed = amrzip.store.snapshots(store)
    assert sorted(listed) == sorted(expected), set(expected) ^ set(listed)
    for name, h in expected.items():
        assert_round_trip(h, amrzip.open(store, snapshot=name))
    report = amrzip.check(store)
    assert report["ok"], report
    assert len(report["snapshots"]) == len(expected)
    assert temporaries(store) == []


def test_processes_write_into_one_store_they_create_together(tmp_path):
    """8 writer processes x 20 rounds, started together on a store that does not exist yet."""
    store = tmp_path / "store"
    writers, rounds, n = 8, 20, 8
    codes = _run_processes(_writer, lambda p: (str(store), p, rounds, n), writers, timeout=240)
    # A writer that failed would have raised: every one must have committed all its rounds.
    assert codes == [0] * writers, codes
    expected = {f"w{w}_r{r}": seeded_hierarchy(1000 * w + r, n=n) for w in range(writers) for r in range(rounds)}
    assert_store_sound(store, expected)


def test_processes_create_one_store_at_the_same_instant(tmp_path):
    """8 processes meet at a barrier before each of 25 stores that do not exist, then all write
    into it at once: all succeed, every store lists all 8 snapshots."""
    writers, stores = 8, 25
    codes = _run_processes(_creator, lambda p: (str(tmp_path), p, stores), writers, timeout=240)
    assert codes == [0] * writers, codes
    for s in range(stores):
        store = tmp_path / f"s{s}"
        assert sorted(amrzip.store.snapshots(store)) == sorted(f"w{w}" for w in range(writers)), store
        assert temporaries(store) == []
    assert_store_sound(tmp_path / "s0", {f"w{w}": seeded_hierarchy(w, n=8) for w in range(writers)})


def test_threads_write_into_one_store(tmp_path):
    """8 threads of one process x 8 rounds, started together on a store that does not exist."""
    store = tmp_path / "store"
    threads, rounds = 8, 8
    barrier = threading.Barrier(threads)
    expected = {f"t{t}_r{r}": seeded_hierarchy(100 * t + r, n=8) for t in range(threads) for r in range(rounds)}
    errors = []

    def work(t):
        try:
            barrier.wait()
            for r in range(rounds):
                amrzip.write(expected[f"t{t}_r{r}"], store, rel=1e-3, snapshot=f"t{t}_r{r}", threads=1)
        except BaseException as e:  # noqa: BLE001 - reported below, with the thread
            errors.append((t, e))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(120)
    assert not any(th.is_alive() for th in pool)
    assert errors == []
    assert_store_sound(store, expected)


def test_repairs_running_beside_writers_take_nothing_from_them(tmp_path):
    """`amrzip check --repair` run over and over while 4 processes write: it must never take a
    writer's temporary file for a dead writer's (one just created, not yet locked), so every
    write commits and nothing is left over."""
    store = tmp_path / "store"
    amrzip.write(seeded_hierarchy(0, n=8), store, rel=1e-3, snapshot="first")
    writers, rounds, n = 4, 25, 8
    barrier = SPAWN.Barrier(writers)
    procs = [SPAWN.Process(target=_writer, args=(str(store), w, rounds, n, barrier)) for w in range(writers)]
    for p in procs:
        p.start()
    repairs = 0
    while any(p.is_alive() for p in procs):
        # It may remove a file a writer has just created and not locked yet: the writer then
        # starts again under another name. Whatever it does, every write must commit.
        amrzip.check(store, repair=True)
        repairs += 1
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * writers
    assert repairs > 10
    expected = {f"w{w}_r{r}": seeded_hierarchy(1000 * w + r, n=n) for w in range(writers) for r in range(rounds)}
    assert_store_sound(store, {"first": seeded_hierarchy(0, n=8), **expected})


def _plotfile(tmp_path: Path) -> Path:
    """The real advection plotfile, or a small synthetic one where the shared data is absent."""
    if AMREX is not None and (AMREX / "advection_2d_4levels").is_dir():
        return AMREX / "advection_2d_4levels"
    from amrzip.amr import synthetic
    from amrzip.formats import write_plotfile

    return write_plotfile(synthetic.small("nyx"), tmp_path / "plt")


@pytest.mark.parametrize("kind", ["new", "version-1"])
def test_two_convert_runs_into_one_store(tmp_path, kind):
    """The reported bug: two `amrzip convert` runs into one store, snapshots on disk but missing
    from the listing. Four rounds of two runs at once, into a store the first round creates, or
    into a version-1 store (whose root lists its snapshot folders) that must keep its own."""
    source = _plotfile(tmp_path)
    store = tmp_path / "store"
    committed, before = [], {}
    if kind == "version-1":
        shutil.copytree(LEGACY_STORE, store)
        before = {name: decoded_digest(store, name) for name in amrzip.store.snapshots(store)}
    for r in range(4):
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "amrzip", "convert", str(source), str(store), "--rel", "1e-3", "--snapshot", f"{x}{r}", "--threads", "1"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for x in "ab"
        ]
        for x, p in zip("ab", runs):
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert f"{x}{r}.zarr.zip" in out
            committed.append(f"{x}{r}")
        # What each run reported is listed at once, whichever finished first.
        assert sorted(amrzip.store.snapshots(store)) == sorted([*before, *committed])
    # The version-1 store's own snapshots read as before.
    assert {name: decoded_digest(store, name) for name in before} == before
    h = amrzip.read(source)
    for name in committed:
        assert_round_trip(h, amrzip.open(store, snapshot=name))
    assert amrzip.check(store)["ok"] and temporaries(store) == []
