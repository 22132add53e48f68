"""The staging service (amrzip.stage): real server processes on 127.0.0.1, stopped at the end
of each test and by themselves (--lifetime, and when the test process is gone)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytest.importorskip("zmq", reason="pyzmq is not installed (pip install pyzmq)")

import zmq  # noqa: E402

from amrzip import _core  # noqa: E402
from amrzip.amr import synthetic  # noqa: E402
from amrzip.amr.boxes import refine  # noqa: E402
from amrzip.stage import Client, LocalService, StagingError, StagingTimeout  # noqa: E402
from amrzip.stage import protocol  # noqa: E402

LIFETIME = 300  # servers outlive no test run by more than this


def service(**kw) -> LocalService:
    return LocalService(lifetime=LIFETIME, **kw)


@pytest.fixture(scope="module")
def four():
    with service(dservers=4, nodes=2) as s:
        yield s


def ping(address: str) -> dict:
    """A data server's own account of what it holds."""
    context = zmq.Context()
    s = context.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(address)
    try:
        s.send_multipart(protocol.encode(protocol.Op.PING, 1, {}))
        assert s.poll(5000), f"{address} does not answer"
        return protocol.decode(s.recv_multipart()).body
    finally:
        s.close()
        context.term()


def overlaps(box, region) -> bool:
    return all(l <= rh and rl <= h for l, h, rl, rh in zip(box[0], box[1], region[0], region[1]))


def test_put_get_round_trip(four):
    rng = np.random.default_rng(0)
    with four.client() as c:
        cases = [
            (0, 0, ((0,), (99,)), rng.standard_normal(100)),
            (10, 1, ((-4, 3), (11, 10)), rng.standard_normal((16, 8)).astype(np.float32)),
            (11, 2, ((0, 0, 0), (7, 5, 3)), rng.integers(-9, 9, (8, 6, 4)).astype(np.int16)),
            (11, 2, ((8, 0, 0), (15, 5, 3)), rng.standard_normal((8, 6, 4, 3))),  # 3 fields stacked
        ]
        c.put_many(cases)
        got = c.get_many([(t, level, box) for t, level, box, _ in cases])
        for (_, _, _, a), b in zip(cases, got):
            assert b.dtype == a.dtype and b.shape == a.shape
            np.testing.assert_array_equal(a, b)
        # a replacement is what later gets see, and the old copy leaves its server after the
        # grace period
        c.put(0, 0, ((0,), (99,)), np.arange(100.0))
        np.testing.assert_array_equal(c.get(0, 0, ((0,), (99,))), np.arange(100.0))
        time.sleep(2.0)
        assert sum(ping(a)["boxes"] for a in four.dserver_addresses) == len(cases)
        with pytest.raises(KeyError, match=r"no box at timestep 0 level 5"):
            c.get(0, 5, ((0,), (99,)))
        assert c.remove(0, 0, ((0,), (99,))) and not c.remove(0, 0, ((0,), (99,)))
        assert c.drop(11) == 2 and c.drop(10) == 1 and c.drop(0) == 0


def test_bad_input_is_refused_clearly(four):
    with four.client() as c:
        with pytest.raises(ValueError, match="has shape"):
            c.put(1, 0, ((0, 0), (3, 3)), np.zeros((4, 5)))
        with pytest.raises(ValueError, match="not a non-empty"):
            c.put(1, 0, ((0, 0), (3, -1)), np.zeros((4, 0)))
        with pytest.raises(ValueError, match="a box is"):
            c.get(1, 0, "nonsense")
        with pytest.raises(ValueError, match="no fixed-size numbers"):
            c.put(1, 0, ((0,), (1,)), np.array(["a", None], dtype=object))
        with pytest.raises(ValueError, match="compress="):
            c.put(1, 0, ((0,), (3,)), np.zeros(4), compress={"mode": "speed"})
        c.put(1, 0, ((0, 0), (3, 3)), np.zeros((4, 4)))
        with pytest.raises(StagingError, match="holds 2-D boxes"):
            c.put(1, 1, ((0, 0, 0), (3, 3, 3)), np.zeros((4, 4, 4)))
        c.put(1, 1, ((0, 0), (7, 7)), np.zeros((8, 8)))
        with pytest.raises(StagingError, match="it needs 1"):
            c.index(1, ref_ratio=[])
        with pytest.raises(StagingError, match="no index"):
            c.query(1, ((0, 0), (1, 1)))
        with pytest.raises(StagingError, match="timestep 2"):
            c.index(2)
        c.drop(1)


def test_compressed_puts_keep_the_bound(four):
    rng = np.random.default_rng(1)
    x = np.linspace(0, 4 * np.pi, 64)
    field = np.sin(x)[:, None, None] * np.cos(x)[None, :, None] + 0.01 * rng.standard_normal((64, 64, 64))
    with four.client() as c:
        sent = c.put_many([(3, 0, ((0, 0, 0), (63, 63, 63)), field)], compress={"rel": 1e-3})
        assert sent["sent"] < sent["raw"] / 2
        got = c.get(3, 0, ((0, 0, 0), (63, 63, 63)))
        bound = 1e-3 * (field.max() - field.min())
        assert np.abs(got - field).max() <= bound
        c.drop(3)


def test_query_matches_every_overlapping_box_of_every_level(four):
    h = synthetic.small("nyx")
    boxes = [(L, b) for L in range(h.num_levels) for b in h.level(L).boxes]
    with four.client() as c:
        c.put_many((7, L, b, np.full(tuple(hh - ll + 1 for ll, hh in zip(*b)), float(L))) for L, b in boxes)
        ratios = [h.level(L).ref_ratios for L in range(h.num_levels - 1)]
        stats = c.index(7, ref_ratio=ratios)
        assert stats["levels"] == [h.level(L).num_boxes for L in range(h.num_levels)]
        rng = np.random.default_rng(2)
        n = h.level(0).domain[1]
        for _ in range(20):
            lo = tuple(int(rng.integers(0, v + 1)) for v in n)
            hi = tuple(int(min(v, l + rng.integers(0, 12))) for l, v in zip(lo, n))
            want, scale = set(), (1,) * len(lo)
            for L in range(h.num_levels):
                region = refine((lo, hi), scale) if L else (lo, hi)
                want |= {(L, b) for b in h.level(L).boxes if overlaps(b, region)}
                scale = tuple(s * r for s, r in zip(scale, h.level(L).ref_ratios))
            got = c.query(7, (lo, hi))
            assert {(b.level, b.box) for b in got} == want
            assert {(b.level, b.box) for b in c.query(7, (lo, hi), method="scan")} == want
            some = c.query(7, (lo, hi), levels=(1, 1), fetch=True)
            assert all(b.level == 1 and np.all(b.array == 1.0) for b in some)
        c.drop(7)


def test_placement_balances_nodes_then_servers(four):
    with four.client() as c:
        c.put_many((9, 0, ((i * 8,), (i * 8 + 7,)), np.zeros(8)) for i in range(16))
        (s,) = c.status()
        loads = [d["load"] for d in s["dservers"]]
        assert loads == [4 * 64] * 4
        c.drop(9)


def test_a_full_data_server_is_an_error_naming_the_limit():
    with service(dservers=2, capacity=1 << 20) as s, s.client() as c:
        c.put(0, 0, ((0,), (2**16 - 1,)), np.zeros(2**16))  # 512 KiB
        with pytest.raises(StagingError, match="no live data server can take"):
            c.put(0, 0, ((2**16,), (2**18 - 1,)), np.zeros(2**18 - 2**16))  # 1.5 MiB
        c.put(0, 0, ((2**16,), (2**17 - 1,)), np.zeros(2**16))  # still room for this one


def test_a_dead_data_server_is_named_within_the_timeout_and_the_others_serve():
    with service(dservers=3, heartbeat=0.2, timeout=1.0) as s, s.client(timeout=3.0) as c:
        items = [(0, 0, ((i * 4,), (i * 4 + 3,)), np.full(4, float(i))) for i in range(9)]
        c.put_many(items)
        c.index(0)
        where = {b.box: b.dserver for b in c.query(0, ((0,), (35,)))}
        victim = next(d["id"] for d in c.status()[0]["dservers"] if d["address"] == s.dserver_addresses[0])
        # Another client reads every box in a loop while the server is killed under it.
        outcome = {}

        def reader():
            with s.client(timeout=3.0) as r:
                try:
                    while True:
                        r.get_many([it[:3] for it in items])
                except StagingError as e:
                    outcome["error"], outcome["at"] = str(e), time.monotonic()

        import threading

        thread = threading.Thread(target=reader)
        thread.start()
        time.sleep(0.3)
        killed = time.monotonic()
        os.kill(s.dserver_processes[0].pid, signal.SIGKILL)
        thread.join(10)
        assert not thread.is_alive(), "a reader hung on a dead data server"
        assert f"data server {victim}" in outcome["error"] and outcome["at"] - killed < 3.0 + 1.0
        lost = [it for it in items if where[it[2]] == victim]
        kept = [it for it in items if where[it[2]] != victim]
        start = time.monotonic()
        with pytest.raises(StagingError, match=f"data server {victim}"):
            c.get(*lost[0][:3])
        assert time.monotonic() - start < 3.0 + 1.0
        for t, level, box, a in kept:
            np.testing.assert_array_equal(c.get(t, level, box), a)
        time.sleep(1.5)  # the metadata server has now missed its health checks
        start = time.monotonic()
        with pytest.raises(StagingError, match=f"data server {victim} .*stopped answering"):
            c.get(*lost[0][:3])
        assert time.monotonic() - start < 0.5  # known dead: no wait
        c.put(1, 0, ((0,), (3,)), np.ones(4))  # new boxes go to the living servers
        np.testing.assert_array_equal(c.get(1, 0, ((0,), (3,))), np.ones(4))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metadata_server_restarts_from_its_snapshot(tmp_path):
    state = tmp_path / "tables.bin"
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"

    def mserver():
        return subprocess.Popen([sys.executable, "-m", "amrzip", "stage", "mserver", "--bind", address, "--state", str(state),
                                 "--lifetime", str(LIFETIME), "--quiet", "--parent", str(os.getpid())])

    m = mserver()
    d = subprocess.Popen([sys.executable, "-m", "amrzip", "stage", "dserver", "--mserver", address, "--lifetime", str(LIFETIME),
                          "--quiet", "--parent", str(os.getpid())])
    try:
        with Client(address, timeout=20) as c:
            while not c.status()[0]["dservers"]:
                time.sleep(0.05)
            a = np.arange(24.0).reshape(2, 3, 4)
            c.put(5, 0, ((0, 0, 0), (1, 2, 3)), a)
            c.index(5)
            assert c.checkpoint() == [str(state)]
        m.send_signal(signal.SIGKILL)
        m.wait()
        m = mserver()
        with Client(address, timeout=20) as c:
            np.testing.assert_array_equal(c.get(5, 0, ((0, 0, 0), (1, 2, 3))), a)
            assert [b.box for b in c.query(5, ((1, 1, 1), (1, 1, 1)))] == [((0, 0, 0), (1, 2, 3))]
        state.write_bytes(state.read_bytes()[:-3])
        bad = subprocess.run([sys.executable, "-m", "amrzip", "stage", "mserver", "--bind", f"tcp://127.0.0.1:{_free_port()}",
                              "--state", str(state), "--lifetime", "5"], capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "cannot restart from" in bad.stderr
    finally:
        for p in (m, d):
            p.kill()
            p.wait()


CONCURRENT_CLIENT = textwrap.dedent(
    """
    import sys, numpy as np
    from amrzip.stage import Client
    address, me, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    box = ((0, 0), (63, 63))
    with Client(address, timeout=30) as c:
        for r in range(rounds):
            # everyone overwrites the shared box with a constant of its own, and its own box
            c.put(0, 0, box, np.full((64, 64), float(me * 1000 + r)))
            c.put(0, 1, ((me * 64, 0), (me * 64 + 63, 63)), np.full((64, 64), float(r)))
            got = c.get(0, 0, box)
            assert np.all(got == got[0, 0]), "a box mixes two writers' data"
            assert got[0, 0] % 1000 < rounds
            mine = c.get(0, 1, ((me * 64, 0), (me * 64 + 63, 63)))
            assert np.all(mine == r), (r, mine[0, 0])
    print("ok")
    """
)


def test_three_concurrent_clients_see_consistent_data(four, tmp_path):
    script = tmp_path / "client.py"
    script.write_text(CONCURRENT_CLIENT)
    procs = [subprocess.Popen([sys.executable, str(script), four.address, str(me), "40"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for me in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and out.strip() == "ok", err
    with four.client() as c:
        final = c.get(0, 0, ((0, 0), (63, 63)))
        assert np.all(final == final[0, 0]) and final[0, 0] % 1000 == 39
        assert all(np.all(c.get(0, 1, ((me * 64, 0), (me * 64 + 63, 63))) == 39) for me in range(3))
        c.drop(0)


def test_malformed_messages_get_errors_and_the_servers_keep_serving(four):
    context = zmq.Context()
    s = context.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(four.address)
    try:
        head = protocol.encode(protocol.Op.LOCATE, 1, {})[0]
        for frames in ([b"x"], [b"x" * 28, b"{}"], [head, b"{not json"], [head[:-4], b"{}"],
                       protocol.encode(protocol.Op.LOCATE, 1, {"boxes": [[0, 0, [1], [0]]]}),
                       protocol.encode(protocol.Op.PUT, 1, {})):
            s.send_multipart(frames)
            assert s.poll(5000), f"no answer to {frames!r}"
            reply = protocol.decode(s.recv_multipart())
            assert reply.status == protocol.ERROR and "mserver" in reply.body["error"]
    finally:
        s.close()
        context.term()
    with four.client() as c:
        assert c.status()[0]["dservers"]


def test_a_silent_server_times_out_with_its_name():
    port = _free_port()
    sink = zmq.Context().socket(zmq.ROUTER)  # accepts connections, never answers
    sink.bind(f"tcp://127.0.0.1:{port}")
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout=0.5) as c:
            start = time.monotonic()
            with pytest.raises(StagingTimeout, match=rf"metadata server at tcp://127.0.0.1:{port} did not answer within 0.5 s"):
                c.status()
            assert time.monotonic() - start < 2
    finally:
        sink.close(linger=0)


def test_catalog_snapshot_damage_is_refused():
    cat = _core.StagingCatalog()
    cat.add_dserver("n0", "tcp://127.0.0.1:1", 0)
    cat.place(0, 0, [0], [3], 32, b"{}")
    cat.commit(0, 0, [0], [3])
    data = cat.to_bytes()
    assert _core.StagingCatalog.from_bytes(data).locate(0, 0, [0], [3])["nbytes"] == 32
    for i in range(0, len(data), 7):
        with pytest.raises(ValueError):
            _core.StagingCatalog.from_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:])


def test_cli_serve_status_stop(tmp_path):
    port = _free_port()
    serve = subprocess.Popen([sys.executable, "-m", "amrzip", "stage", "serve", "--dservers", "2", "--port", str(port),
                              "--lifetime", str(LIFETIME)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = serve.stdout.readline()
        assert f"tcp://127.0.0.1:{port}" in line and "2 data server(s)" in line
        address = f"tcp://127.0.0.1:{port}"
        with Client(address) as c:
            c.put(0, 0, ((0,), (7,)), np.arange(8.0))
        status = subprocess.run([sys.executable, "-m", "amrzip", "stage", "status", address], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "timestep 0" in status.stdout, status.stderr
        serve.send_signal(signal.SIGINT)
        assert serve.wait(30) == 0
        down = subprocess.run([sys.executable, "-m", "amrzip", "stage", "status", address, "--timeout", "0.5"], capture_output=True,
                              text=True, timeout=60)
        assert down.returncode == 1 and "did not answer within 0.5 s" in down.stderr
    finally:
        serve.kill()
        serve.wait()


def test_example_runs():
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "python" / "staging.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300, check=True).stdout
    assert "index: [" in out and "level 2:" in out and "max/avg" in out, out


def test_every_role_under_mpiexec():
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py mpich)")
    from shutil import which
    from pathlib import Path

    mpiexec = which("mpiexec", path=str(Path(sys.executable).parent)) or which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec (pip install mpich, or a site MPI)")
    job = subprocess.Popen([mpiexec, "-n", "3", sys.executable, "-m", "amrzip", "stage", "serve", "--mpi", "--lifetime",
                            str(LIFETIME), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = job.stdout.readline().split()
        assert address and address[0].startswith("tcp://127.0.0.1:"), job.stderr.read() if job.poll() is not None else address
        with Client(address, timeout=30) as c:
            end = time.monotonic() + 60
            while len(c.status()[0]["dservers"]) < 2 and time.monotonic() < end:
                time.sleep(0.05)
            assert len(c.status()[0]["dservers"]) == 2
            c.put_many((0, 0, ((4 * i,), (4 * i + 3,)), np.full(4, float(i))) for i in range(8))
            assert [float(c.get(0, 0, ((4 * i,), (4 * i + 3,)))[0]) for i in range(8)] == list(map(float, range(8)))
            assert sorted(d["boxes"] for d in c.status()[0]["dservers"]) == [4, 4]
            c.shutdown()
        assert job.wait(60) == 0
    finally:
        job.kill()
        job.wait()


def test_timesteps_are_spread_over_several_metadata_servers():
    with service(dservers=2, mservers=2) as s, s.client() as c:
        c.put_many((t, 0, ((0,), (15,)), np.full(16, float(t))) for t in range(4))
        assert [float(c.get(t, 0, ((0,), (15,)))[0]) for t in range(4)] == [0.0, 1.0, 2.0, 3.0]
        status = c.status()
        assert [sorted(map(int, st["timesteps"])) for st in status] == [[0, 2], [1, 3]]
        assert all(len(st["dservers"]) == 2 for st in status)  # each data server registered with both


def test_a_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "amrzip", "stage", "mserver", "--bind", f"tcp://127.0.0.1:{port}", "--lifetime", "5"],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("amrzip: error: cannot listen on") and "Traceback" not in r.stderr
