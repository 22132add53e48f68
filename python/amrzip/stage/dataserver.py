"""A data server (dserver): holds box payloads in memory and hands them to clients directly.

It keeps no metadata beyond its own payloads: where a box lives is the metadata server's
business. Payloads are kept as the ZeroMQ frames they arrived in, so a put and a get copy no
bytes in Python.
"""

from __future__ import annotations

import socket as _socket
import time

import zmq

from amrzip.stage import protocol
from amrzip.stage.protocol import Message, Op, StagingError, parse_key
from amrzip.stage.server import Server


class DataServer(Server):
    role = "dserver"

    def __init__(self, bind: str, mservers=(), *, node: str | None = None, capacity: int = 0, **kw):
        super().__init__(bind, **kw)
        self.node = node or _socket.gethostname()
        self.capacity = int(capacity)
        self.used = 0
        # box key -> {version: frame}
        self.payloads: dict[tuple, dict[str, zmq.Frame]] = {}
        self.handlers.update({Op.PUT: self.on_put, Op.GET: self.on_get, Op.DELETE: self.on_delete, Op.PING: self.on_ping})
        # Registration is repeated now and then: a metadata server started afresh (without its
        # state file) learns of this server within REREGISTER seconds.
        self.mservers = {}
        for address in mservers:
            self.mservers[address] = self._register(address)
        self.last_register = time.monotonic()

    REREGISTER = 10.0

    def _register(self, address: str, timeout: float = 30.0):
        """Announces this server to a metadata server, retrying until it answers (servers of a
        set may start in any order). Returns the socket, kept for later announcements."""
        s = self.context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(address)
        end = time.monotonic() + timeout
        while True:
            s.send_multipart(protocol.encode(Op.REGISTER, 0, self._announcement()))
            if s.poll(1000):
                reply = protocol.decode(s.recv_multipart())
                if reply.status != protocol.OK:
                    s.close()
                    raise StagingError(reply.body.get("error", "registration refused"))
                self.log(f"registered with {address} as dserver {reply.body['id']} on node {self.node}")
                return s
            if time.monotonic() > end:
                s.close()
                raise StagingError(f"metadata server {address} did not answer for {timeout:g} s")

    def _announcement(self) -> dict:
        return {"node": self.node, "address": self.address, "capacity": self.capacity}

    def tick(self):
        for s in self.mservers.values():
            while s.poll(0):
                s.recv_multipart()
        if time.monotonic() - self.last_register > self.REREGISTER:
            self.last_register = time.monotonic()
            for s in self.mservers.values():
                try:
                    s.send_multipart(protocol.encode(Op.REGISTER, 0, self._announcement()), zmq.NOBLOCK)
                except zmq.Again:  # that metadata server is away; the next round tries again
                    pass

    def close(self):
        for s in self.mservers.values():
            s.close(linger=0)
        super().close()

    @staticmethod
    def _entry(entry) -> tuple[tuple, str]:
        # A stored copy is (box key, version): a replacement lands beside the copy readers may
        # still be fetching, and the old one is deleted once the new one is committed.
        try:
            key, version = entry
        except (TypeError, ValueError):
            raise StagingError(f"a stored box is [key, version]; got {entry!r}") from None
        return parse_key(key), str(version)

    def on_put(self, msg: Message):
        entries = [self._entry(e) for e in msg.body.get("boxes", [])]
        if len(entries) != len(msg.payloads):
            raise StagingError(f"{len(entries)} box key(s) for {len(msg.payloads)} payload(s)")
        incoming = sum(len(p) for p in msg.payloads)
        if self.capacity and self.used + incoming > self.capacity:
            raise StagingError(
                f"full: holds {self.used} of {self.capacity} bytes and cannot take {incoming} more "
                f"(start it with a larger --capacity, or add data servers)"
            )
        for (key, version), p in zip(entries, msg.payloads):
            old = self.payloads.setdefault(key, {}).get(version)
            self.used += len(p) - (len(old) if old is not None else 0)
            self.payloads[key][version] = p
        return {"stored": len(entries), "used": self.used}, []

    def on_get(self, msg: Message):
        out = []
        for e in msg.body.get("boxes", []):
            (t, level, lo, hi), version = self._entry(e)
            p = self.payloads.get((t, level, lo, hi), {}).get(version)
            if p is None:
                raise StagingError(f"holds no box at timestep {t} level {level} lo={lo} hi={hi} (version {version})")
            out.append(p)
        return {}, out

    def on_delete(self, msg: Message):
        """Deletes given versions of boxes ("*": every version), or every box of a timestep."""
        dropped = []
        if "timestep" in msg.body:
            t = int(msg.body["timestep"])
            for key in [k for k in self.payloads if k[0] == t]:
                dropped.extend(self.payloads.pop(key).values())
        for e in msg.body.get("boxes", []):
            key, version = self._entry(e)
            versions = self.payloads.get(key, {})
            if version == "*":
                dropped.extend(versions.values())
                versions.clear()
            elif version in versions:
                dropped.append(versions.pop(version))
            if not versions:
                self.payloads.pop(key, None)
        freed = sum(len(p) for p in dropped)
        self.used -= freed
        return {"freed": freed}, []

    def on_ping(self, msg: Message):
        boxes = sum(len(v) for v in self.payloads.values())
        return {"node": self.node, "boxes": boxes, "used": self.used, "capacity": self.capacity}, []
