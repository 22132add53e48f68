"""The client of the staging service: put boxes, build the index, query regions, get boxes.

A put asks the metadata server where each box goes (least-loaded node, then data server),
sends the data straight to those data servers, then commits; a box becomes visible to every
client at its commit, never half-written. A get or a query asks the metadata server where the
boxes are and fetches them from the data servers directly, several servers at once. Every
request has a timeout; a server that does not answer is named in the error.
"""

from __future__ import annotations

import itertools
import time
import secrets
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import zmq

from amrzip import codec
from amrzip.stage import protocol
from amrzip.stage.protocol import Op, StagingError, StagingTimeout, key_of

# A put or get message carries at most this many payload bytes, so that servers answer each
# part while the next is on the wire.
MESSAGE_BYTES = 64 << 20


@dataclass
class StagedBox:
    """A box held by the service (as ``query`` returns it; ``array`` is set once fetched)."""

    timestep: int
    level: int
    box: tuple
    dserver: int
    nbytes: int
    dtype: str
    shape: tuple
    codec: str
    version: int = field(repr=False)
    address: str = field(default="", repr=False)  # of its data server
    array: np.ndarray | None = field(default=None, repr=False)

    @property
    def key(self) -> list:
        return key_of(self.timestep, self.level, *self.box)


class _Link:
    """Requests to one server over a DEALER socket. After a timeout the socket is replaced, so
    a late answer to an abandoned request is never taken for the answer to a new one."""

    def __init__(self, context, address: str, what: str, timeout: float):
        self.context, self.address, self.what, self.timeout = context, address, what, timeout
        self.ids = itertools.count(1)
        self._open()

    def _open(self):
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(self.address)

    def send(self, op: Op, body: dict, payloads=()) -> int:
        request = next(self.ids)
        self.socket.send_multipart(protocol.encode(op, request, body, payloads), copy=False)
        return request

    def receive(self, request: int) -> protocol.Message:
        end = time.monotonic() + self.timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self.socket.poll(int(left * 1000) + 1):
                self.socket.close(linger=0)
                self._open()
                raise StagingTimeout(f"{self.what} at {self.address} did not answer within {self.timeout:g} s")
            msg = protocol.decode(self.socket.recv_multipart(copy=False))
            if msg.request != request:
                continue  # the answer to an earlier request abandoned by an exception
            if msg.status != protocol.OK:
                raise StagingError(msg.body.get("error", f"{self.what} at {self.address} refused the request"))
            return msg

    def call(self, op: Op, body: dict, payloads=()) -> protocol.Message:
        return self.receive(self.send(op, body, payloads))

    def close(self):
        self.socket.close(linger=0)


def _box(box) -> tuple[tuple, tuple]:
    try:
        lo, hi = box
        lo, hi = tuple(int(v) for v in lo), tuple(int(v) for v in hi)
    except (TypeError, ValueError):
        raise ValueError(f"a box is (lo, hi), two tuples of integers; got {box!r}") from None
    if not 1 <= len(lo) <= 8 or len(lo) != len(hi) or any(h < l for l, h in zip(lo, hi)):
        raise ValueError(f"box {box!r} is not a non-empty inclusive box of 1 to 8 dimensions")
    return lo, hi


def _compressor(compress):
    """``compress``: None, or the keyword arguments of :func:`amrzip.compress` (a bound such as
    ``{"rel": 1e-4}`` or ``{"abs": 0.01}``, and optionally ``mode``)."""
    if compress is None:
        return None
    if not isinstance(compress, dict) or not ({"abs", "rel", "ratio", "psnr"} & compress.keys()):
        raise ValueError(f"compress= takes amrzip.compress's keywords with a bound, e.g. {{'rel': 1e-4}}; got {compress!r}")
    return dict(compress)


class Client:
    """A connection to a staging service.

    ``address``: the metadata server (``tcp://host:port``), or a list of them: timestep ``t``
    belongs to ``address[t % len(address)]``, as each metadata server keeps whole timesteps.
    ``timeout`` (seconds) bounds every request.
    """

    def __init__(self, address: str | Sequence[str], *, timeout: float = 10.0):
        addresses = [address] if isinstance(address, str) else list(address)
        if not addresses:
            raise ValueError("no metadata server address")
        self.timeout = float(timeout)
        # Two I/O threads: taking in replies from several data servers at once is what limits a
        # get (1.6 -> 2.3 GB/s on loopback with 16 MiB boxes).
        self.context = zmq.Context(io_threads=2)
        self.mservers = [_Link(self.context, a, "metadata server", self.timeout) for a in addresses]
        self.dservers: dict[str, _Link] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for link in [*self.mservers, *self.dservers.values()]:
            link.close()
        self.context.term()

    def _mserver(self, timestep: int) -> _Link:
        return self.mservers[int(timestep) % len(self.mservers)]

    def _dserver(self, ident: int, address: str) -> _Link:
        link = self.dservers.get(address)
        if link is None:
            link = self.dservers[address] = _Link(self.context, address, f"data server {ident}", self.timeout)
        return link

    # ---- writing
    def put(self, timestep: int, level: int, box, array, compress=None):
        """Stores one box's array: its shape is the box's shape, optionally followed by more
        axes (components, or several fields stacked). ``compress``: see :meth:`put_many`."""
        self.put_many([(timestep, level, box, array)], compress=compress)

    def put_many(self, items: Iterable, compress=None) -> dict:
        """Stores boxes given as ``(timestep, level, box, array)``; a box already held is
        replaced. ``compress={"rel": 1e-4}`` (any bound :func:`amrzip.compress` takes) sends
        and keeps them compressed, every value within the bound. Returns the bytes sent and the
        raw bytes they stand for."""
        options = _compressor(compress)
        boxes = []
        for t, level, box, array in items:
            lo, hi = _box(box)
            array = np.asarray(array)
            if array.dtype.kind not in "biufc":
                raise ValueError(f"box lo={lo} hi={hi}: a {array.dtype} array has no fixed-size numbers to send")
            shape = tuple(h - l + 1 for l, h in zip(lo, hi))
            if array.shape[: len(shape)] != shape:
                raise ValueError(f"box lo={lo} hi={hi} has shape {shape}; the array's is {array.shape}")
            if options is None:
                payload, kind = np.ascontiguousarray(array), "raw"
            else:
                payload, kind = codec.compress(array, **options), "amrzip"
            meta = {"dtype": array.dtype.str, "shape": list(array.shape), "codec": kind, "version": secrets.randbits(64)}
            boxes.append((key_of(t, level, lo, hi), payload, meta, array.nbytes))
        by_mserver: dict[int, list] = {}
        for b in boxes:
            by_mserver.setdefault(b[0][0] % len(self.mservers), []).append(b)
        for m, group in by_mserver.items():
            self._put_group(self.mservers[m], group)
        return {"sent": sum(_nbytes(b[1]) for b in boxes), "raw": sum(b[3] for b in boxes)}

    def _put_group(self, mserver: _Link, boxes: list):
        placed = mserver.call(Op.PLACE, {"boxes": [{"key": k, "nbytes": _nbytes(p), "meta": m} for k, p, m, _ in boxes]}).body["placed"]
        keys = [{"key": k, "version": m["version"]} for k, _, m, _ in boxes]
        try:
            by_dserver: dict[tuple, list] = {}
            for b, where in zip(boxes, placed):
                by_dserver.setdefault((where["dserver"], where["address"]), []).append(b)
            self._exchange(Op.PUT, {d: [([k, m["version"]], p, _nbytes(p)) for k, p, m, _ in group] for d, group in by_dserver.items()})
        except BaseException:
            # Undo: the pending records, and whatever copies reached a server (not waited for).
            try:
                mserver.call(Op.ABORT, {"boxes": keys})
                for (ident, address), group in by_dserver.items():
                    self._dserver(ident, address).send(Op.DELETE, {"boxes": [[k, m["version"]] for k, _, m, _ in group]})
            except (StagingError, zmq.ZMQError):
                pass  # the original error says more
            raise
        mserver.call(Op.COMMIT, {"boxes": keys})

    def _exchange(self, op: Op, work: dict) -> dict:
        """Sends ``op`` to several data servers at once: ``work`` maps (id, address) to a list of
        ([key, version], payload or None, bytes). Returns (id, address) -> payload frames
        received."""
        pending = []
        for (ident, address), entries in work.items():
            link = self._dserver(ident, address)
            for part in _parts(entries):
                body = {"boxes": [e for e, _, _ in part]}
                payloads = [p for _, p, _ in part] if op == Op.PUT else ()
                pending.append(((ident, address), link, link.send(op, body, payloads)))
        received: dict = {}
        for where, link, request in pending:
            received.setdefault(where, []).extend(link.receive(request).payloads)
        return received

    # ---- reading
    def get(self, timestep: int, level: int, box) -> np.ndarray:
        """The array of one box (read-only when stored uncompressed: it is the received buffer)."""
        return self.get_many([(timestep, level, box)])[0]

    def get_many(self, keys: Iterable) -> list[np.ndarray]:
        """The arrays of boxes given as ``(timestep, level, box)``, fetched from their data
        servers in parallel."""
        keys = [key_of(t, level, *_box(box)) for t, level, box in keys]
        return [b.array for b in self._fetch(self._locate(keys))]

    def _locate(self, keys: list) -> list[StagedBox]:
        found = [None] * len(keys)
        by_mserver: dict[int, list] = {}
        for i, k in enumerate(keys):
            by_mserver.setdefault(k[0] % len(self.mservers), []).append(i)
        for m, idx in by_mserver.items():
            answer = self.mservers[m].call(Op.LOCATE, {"boxes": [keys[i] for i in idx]}).body["found"]
            for i, r in zip(idx, answer):
                t, level, lo, hi = keys[i]
                if r is None:
                    raise KeyError(f"no box at timestep {t} level {level} lo={tuple(lo)} hi={tuple(hi)}")
                if not r["alive"]:
                    raise StagingError(
                        f"box at timestep {t} level {level} lo={tuple(lo)} hi={tuple(hi)} is on data server "
                        f"{r['dserver']} at {r['address']}, which stopped answering the metadata server's health checks"
                    )
                found[i] = _staged(t, level, lo, hi, r["dserver"], r["nbytes"], r["meta"], r["address"])
        return found

    def _fetch(self, boxes: list[StagedBox]) -> list[StagedBox]:
        deadline = time.monotonic() + self.timeout
        while True:
            work: dict[tuple, list] = {}
            for b in boxes:
                work.setdefault((b.dserver, b.address), []).append(([b.key, b.version], None, b.nbytes))
            try:
                received = self._exchange(Op.GET, work)
                break
            except StagingError as e:
                # A box replaced since we located it is gone from there (data servers keep a
                # replaced copy for a grace period, so this takes a slow reader): look again.
                if "holds no box" not in str(e) or time.monotonic() > deadline:
                    raise
                boxes = self._locate([b.key for b in boxes])
        cursor = {where: iter(frames) for where, frames in received.items()}
        for b in boxes:
            frame = next(cursor[(b.dserver, b.address)])
            if b.codec == "raw":
                b.array = np.frombuffer(frame.buffer, dtype=np.dtype(b.dtype)).reshape(b.shape)
            else:
                b.array = codec.decompress(frame.buffer)
        return boxes

    # ---- index and queries
    def index(self, timestep: int, ref_ratio=2, threads: int = 0) -> dict:
        """Builds the polytree index of a timestep's boxes. ``ref_ratio``: the refinement ratio
        between consecutive levels: one integer, one per level, or one tuple per level (per
        axis). Returns boxes per level, edges and build time."""
        return self._mserver(timestep).call(Op.INDEX, {"timestep": int(timestep), "ref_ratio": _ratios(ref_ratio), "threads": int(threads)}).body

    def query(self, timestep: int, region, levels=None, fetch: bool = False, method: str = "polytree") -> list[StagedBox]:
        """The boxes of every level that overlap ``region`` ((lo, hi) in level-0 cells,
        inclusive), optionally only levels ``levels=(min, max)``; with ``fetch=True`` their
        arrays too. ``method="scan"`` checks every box instead of the index (a baseline)."""
        lo, hi = _box(region)
        level_min, level_max = (0, None) if levels is None else (int(levels[0]), int(levels[1]))
        r = self._mserver(timestep).call(Op.QUERY, {
            "timestep": int(timestep), "lo": lo, "hi": hi, "level_min": level_min, "level_max": level_max, "method": method,
        }).body
        out = [
            _staged(timestep, level, l, h, d, n, m, r["dservers"][str(d)][0])
            for level, l, h, d, n, m in zip(r["level"], r["lo"], r["hi"], r["dserver"], r["nbytes"], r["meta"])
        ]
        dead = sorted({b.dserver for b in out if not r["dservers"][str(b.dserver)][1]})
        if fetch and dead:
            raise StagingError(f"{len(out)} box(es) found, but data server(s) {dead} stopped answering health checks")
        return self._fetch(out) if fetch else out

    # ---- housekeeping
    def remove(self, timestep: int, level: int, box) -> bool:
        """Deletes one box; False if there was none."""
        key = key_of(timestep, level, *_box(box))
        return self._mserver(timestep).call(Op.REMOVE, {"boxes": [key]}).body["removed"] == 1

    def drop(self, timestep: int) -> int:
        """Deletes every box of a timestep; returns how many there were."""
        return self._mserver(timestep).call(Op.DROP, {"timestep": int(timestep)}).body["removed"]

    def status(self) -> list[dict]:
        """Each metadata server's data servers (load, capacity, alive) and timesteps."""
        return [m.call(Op.STATUS, {}).body for m in self.mservers]

    def checkpoint(self) -> list[str]:
        """Makes every metadata server write its tables to its state file now."""
        return [m.call(Op.CHECKPOINT, {}).body["path"] for m in self.mservers]

    def shutdown(self):
        """Stops the metadata servers and the data servers they know."""
        for m in self.mservers:
            m.call(Op.SHUTDOWN, {"all": True})


def _staged(t, level, lo, hi, dserver, nbytes, meta, address) -> StagedBox:
    return StagedBox(int(t), int(level), (tuple(lo), tuple(hi)), int(dserver), int(nbytes), meta["dtype"], tuple(meta["shape"]),
                     meta["codec"], meta["version"], address)


def _ratios(ref_ratio):
    if isinstance(ref_ratio, (int, np.integer)):
        return int(ref_ratio)
    return [int(r) if isinstance(r, (int, np.integer)) else [int(v) for v in r] for r in ref_ratio]


def _nbytes(payload) -> int:
    return payload.nbytes if isinstance(payload, np.ndarray) else len(payload)


def _parts(entries: list):
    """Splits a server's boxes into messages of about MESSAGE_BYTES."""
    part, size = [], 0
    for e in entries:
        n = e[2]
        if part and size + n > MESSAGE_BYTES:
            yield part
            part, size = [], 0
        part.append(e)
        size += n
    if part:
        yield part
