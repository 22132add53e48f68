"""Starting a staging service: one server in this process, a local set of processes, or every
role under mpiexec."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amrzip.stage.client import Client
from amrzip.stage.protocol import StagingError


def run_mserver(bind: str, *, address_file=None, **options):
    """Runs a metadata server in this process until it is stopped."""
    from amrzip.stage.metaserver import MetadataServer

    server = MetadataServer(bind, **options)
    _announce(server, address_file)
    server.serve()


def run_dserver(bind: str, mservers, *, address_file=None, **options):
    """Runs a data server in this process, registered with the metadata servers, until stopped."""
    from amrzip.stage.dataserver import DataServer

    server = DataServer(bind, mservers, **options)
    _announce(server, address_file)
    server.serve()


def _announce(server, address_file):
    server.log("listening")
    if address_file is not None:
        tmp = Path(str(address_file) + ".tmp")
        tmp.write_text(server.address)
        os.replace(tmp, address_file)


class LocalService:
    """A metadata server and data servers as processes of this machine, stopped with the
    object (or a ``with`` block), and by themselves if this process dies.

    ``nodes`` simulates staging nodes: the data servers are spread over that many node names,
    as Algorithm 1 balances nodes first, then the data servers of a node.
    """

    def __init__(self, dservers: int = 4, *, nodes: int = 1, mservers: int = 1, host: str = "127.0.0.1", port: int = 0,
                 capacity: int = 0, state=None, lifetime: float | None = None, heartbeat: float = 1.0,
                 timeout: float = 5.0, quiet: bool = True, start_timeout: float = 60.0):
        if dservers < 1 or nodes < 1 or mservers < 1:
            raise ValueError("a staging service needs at least one metadata server, one data server and one node")
        self.dir = tempfile.TemporaryDirectory(prefix="amrzip-stage-")
        self.processes: list[subprocess.Popen] = []
        self.quiet = quiet
        common = ["--parent", str(os.getpid())] + ([] if lifetime is None else ["--lifetime", str(lifetime)])
        common += ["--quiet"] if quiet else []
        try:
            files = []
            for m in range(mservers):
                f = Path(self.dir.name) / f"mserver{m}"
                bind = f"tcp://{host}:{port + m if port else '*'}"
                extra = [] if state is None else ["--state", f"{state}.{m}" if mservers > 1 else str(state)]
                self._start(["mserver", "--bind", bind, "--address-file", str(f), "--heartbeat", str(heartbeat),
                             "--timeout", str(timeout), *extra, *common])
                files.append(f)
            self.addresses = [self._wait_file(f, start_timeout) for f in files]
            self.dserver_processes, files = [], []
            for d in range(dservers):
                f = Path(self.dir.name) / f"dserver{d}"
                args = ["dserver", "--bind", f"tcp://{host}:*", "--node", f"node{d % nodes}", "--capacity", str(capacity),
                        "--address-file", str(f)]
                self.dserver_processes.append(self._start(args + [a for m in self.addresses for a in ("--mserver", m)] + common))
                files.append(f)
            self.dserver_addresses = [self._wait_file(f, start_timeout) for f in files]
            self._wait_registered(dservers, start_timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, args) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "amrzip", "stage", *args],
                             stdout=subprocess.DEVNULL if self.quiet else None, stderr=subprocess.DEVNULL if self.quiet else None)
        self.processes.append(p)
        return p

    def _wait_file(self, path: Path, timeout: float) -> str:
        end = time.monotonic() + timeout
        while not path.exists():
            if any(p.poll() is not None for p in self.processes):
                raise StagingError("a staging server exited while starting (its own error is printed above unless quiet)")
            if time.monotonic() > end:
                raise StagingError(f"a staging server did not start within {timeout:g} s")
            time.sleep(0.02)
        return path.read_text()

    def _wait_registered(self, n: int, timeout: float):
        end = time.monotonic() + timeout
        with Client(self.addresses, timeout=timeout) as c:
            while True:
                if all(sum(d["alive"] for d in s["dservers"]) >= n for s in c.status()):
                    return
                if any(p.poll() is not None for p in self.processes):
                    raise StagingError("a staging server exited while starting (its own error is printed above unless quiet)")
                if time.monotonic() > end:
                    raise StagingError(f"{n} data servers did not register within {timeout:g} s")
                time.sleep(0.05)

    @property
    def address(self) -> str:
        return self.addresses[0]

    def client(self, **kw) -> Client:
        return Client(self.addresses, **kw)

    def stop(self, timeout: float = 10.0):
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.processes = []
        self.dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def serve_mpi(*, mservers: int = 1, host: str = "127.0.0.1", capacity: int = 0, state=None, **options):
    """Under mpiexec: ranks below ``mservers`` run metadata servers, the others data servers,
    each named after its MPI processor (node). Rank 0 prints the metadata servers' addresses."""
    from mpi4py import MPI

    from amrzip.stage.dataserver import DataServer
    from amrzip.stage.metaserver import MetadataServer

    comm = MPI.COMM_WORLD
    if comm.size <= mservers:
        raise StagingError(f"{comm.size} MPI rank(s) cannot hold {mservers} metadata server(s) and a data server")
    server = None
    if comm.rank < mservers:
        path = None if state is None else (f"{state}.{comm.rank}" if mservers > 1 else state)
        server = MetadataServer(f"tcp://{host}:*", state=path, **options)
    addresses = [a for a in comm.allgather(server.address if server else None) if a]
    if comm.rank == 0:
        print(" ".join(addresses), flush=True)
    if server is None:  # registers with the metadata servers, which answer once they serve
        server = DataServer(f"tcp://{host}:*", addresses, node=MPI.Get_processor_name(), capacity=capacity,
                            lifetime=options.get("lifetime"), quiet=options.get("quiet", False))
    server.serve()
