"""``amrzip stage ...``: start staging servers and look at them (the work is in amrzip.stage)."""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import time

import click

_bytes_units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(ctx, param, value):
    """Sizes such as 512M, 4G or 1073741824 (0: no limit)."""
    if value is None:
        return 0
    text = value.strip().upper().removesuffix("IB").removesuffix("B")
    unit = text[-1:] if text[-1:] in _bytes_units and text[-1:] else ""
    try:
        n = float(text[: len(text) - len(unit)]) * _bytes_units[unit]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a size such as 512M or 4G") from None
    if n < 0:
        raise click.BadParameter("a size cannot be negative")
    return int(n)


def _zmq():
    if importlib.util.find_spec("zmq") is None:
        raise click.ClickException("amrzip stage needs ZeroMQ's Python binding: pip install pyzmq")


_lifetime = click.option("--lifetime", type=click.FloatRange(min=0, min_open=True), help="Stop after this many seconds.")
_quiet = click.option("--quiet", is_flag=True, help="Print nothing but errors.")
_parent = click.option("--parent", type=int, hidden=True, help="Stop when this process (the launcher) is gone.")
_capacity = click.option("--capacity", callback=_size, help="Memory limit of each data server, e.g. 8G [default: none].")
_health = [
    click.option("--heartbeat", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Seconds between health checks of the data servers."),
    click.option("--timeout", type=click.FloatRange(min=0.05), default=5.0, show_default=True, help="A data server silent this long is reported dead."),
]


def option_group(options):
    """Several click options applied as one decorator, in the order listed."""

    def wrap(f):
        for o in reversed(options):
            f = o(f)
        return f

    return wrap


@click.group("stage")
def stage():
    """A staging service for AMR boxes: metadata and data servers that programs running at the
    same time put boxes into and query by region (docs/staging.md)."""


@stage.command("serve")
@click.option("--dservers", type=click.IntRange(min=1), default=4, show_default=True, help="Data servers to start.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Node names to spread the data servers over (placement balances nodes first).")
@click.option("--mservers", type=click.IntRange(min=1), default=1, show_default=True, help="Metadata servers (timestep t goes to number t mod this).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on and to advertise.")
@click.option("--port", type=click.IntRange(0, 65535), default=5555, show_default=True, help="Port of the first metadata server (0: any free port).")
@click.option("--state", type=click.Path(dir_okay=False), help="Snapshot file of the metadata tables; a restart continues from it.")
@click.option("--mpi", is_flag=True, help="Under mpiexec: the first ranks are metadata servers, the others data servers.")
@_capacity
@option_group(_health)
@_lifetime
@_quiet
def serve(dservers, nodes, mservers, host, port, state, mpi, capacity, heartbeat, timeout, lifetime, quiet):
    """Start a staging service and keep it running until Ctrl-C (or --lifetime)."""
    _zmq()
    from amrzip.stage.launch import LocalService, serve_mpi

    if mpi:
        with _reported():
            serve_mpi(mservers=mservers, host=host, capacity=capacity, state=state, heartbeat=heartbeat, timeout=timeout,
                      lifetime=lifetime, quiet=quiet)
        return
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    with _reported(), LocalService(dservers, nodes=nodes, mservers=mservers, host=host, port=port, capacity=capacity,
                                   state=state, lifetime=lifetime, heartbeat=heartbeat, timeout=timeout, quiet=quiet) as service:
        click.echo(f"staging service: metadata {' '.join(service.addresses)}; {dservers} data server(s) on {nodes} node(s)")
        click.echo(f"connect with amrzip.stage.Client({service.addresses[0]!r}); stop with Ctrl-C")
        end = None if lifetime is None else time.monotonic() + lifetime
        while not stop and (end is None or time.monotonic() < end):
            dead = [p.pid for p in service.dserver_processes if p.poll() is not None]
            if dead and not quiet:
                click.echo(f"data server process(es) {dead} exited; the others keep serving", err=True)
                service.dserver_processes = [p for p in service.dserver_processes if p.poll() is None]
            time.sleep(0.2)
    if not quiet:
        click.echo("staging service stopped")


@stage.command("mserver")
@click.option("--bind", default="tcp://127.0.0.1:5555", show_default=True, help="Address to listen on (port * for any).")
@click.option("--state", type=click.Path(dir_okay=False), help="Snapshot file of the tables; a restart continues from it.")
@click.option("--address-file", type=click.Path(dir_okay=False), help="Write the address bound to this file once listening.")
@option_group(_health)
@_lifetime
@_parent
@_quiet
def mserver(bind, state, address_file, heartbeat, timeout, lifetime, parent, quiet):
    """Run one metadata server (one per machine; data servers register with it)."""
    _zmq()
    from amrzip.stage.launch import run_mserver

    with _reported():
        run_mserver(bind, address_file=address_file, state=state, heartbeat=heartbeat, timeout=timeout, lifetime=lifetime,
                    parent=parent, quiet=quiet)


@stage.command("dserver")
@click.option("--mserver", "mservers", multiple=True, required=True, help="A metadata server's address (repeat for several).")
@click.option("--bind", default="tcp://127.0.0.1:*", show_default=True, help="Address to listen on and advertise (port * for any).")
@click.option("--node", help="Node name for placement [default: host name].")
@click.option("--address-file", type=click.Path(dir_okay=False), help="Write the address bound to this file once listening.")
@_capacity
@_lifetime
@_parent
@_quiet
def dserver(mservers, bind, node, address_file, capacity, lifetime, parent, quiet):
    """Run one data server, registered with the metadata servers."""
    _zmq()
    from amrzip.stage.launch import run_dserver

    with _reported():
        run_dserver(bind, list(mservers), address_file=address_file, node=node, capacity=capacity, lifetime=lifetime,
                    parent=parent, quiet=quiet)


@stage.command("status")
@click.argument("address", nargs=-1, required=True)
@click.option("--timeout", type=click.FloatRange(min=0.05), default=5.0, show_default=True, help="Seconds to wait for an answer.")
def status(address, timeout):
    """Show the data servers (load, capacity, alive) and timesteps a service holds."""
    from rich.console import Console
    from rich.table import Table

    answers = _ask(address, timeout, lambda c: c.status())
    console = Console()
    for a, s in zip(address, answers):
        table = Table(title=f"metadata server {a}")
        for col in ("dserver", "node", "address", "boxes", "load", "capacity", "alive"):
            table.add_column(col)
        for d in s["dservers"]:
            table.add_row(str(d["id"]), d["node"], d["address"], str(d["boxes"]), f"{d['load'] / 2**20:.1f} MiB",
                          "-" if not d["capacity"] else f"{d['capacity'] / 2**20:.0f} MiB", "yes" if d["alive"] else "NO")
        console.print(table)
        for t, summary in s["timesteps"].items():
            console.print(f"timestep {t}: boxes per level {summary['levels']}, {sum(summary['bytes']) / 2**20:.1f} MiB, "
                          f"{'indexed' if summary['indexed'] else 'no index'}")


@stage.command("stop")
@click.argument("address", nargs=-1, required=True)
@click.option("--timeout", type=click.FloatRange(min=0.05), default=5.0, show_default=True, help="Seconds to wait for an answer.")
def stop(address, timeout):
    """Stop the metadata servers at ADDRESS and the data servers registered with them."""
    _ask(address, timeout, lambda c: c.shutdown())


def _ask(address, timeout, request):
    """Runs ``request`` on a client of the metadata servers."""
    _zmq()
    from amrzip.stage import Client

    with _reported(), Client(list(address), timeout=timeout) as c:
        return request(c)


@contextlib.contextmanager
def _reported():
    """A staging failure (a server that does not answer, a port in use) as a one-line error."""
    from amrzip.stage import StagingError

    try:
        yield
    except StagingError as e:
        raise click.ClickException(str(e)) from None
