"""The metadata server (mserver): where every box lives, and the spatial index over them.

All its tables (data servers and their workloads, the hash of box metadata, per-level lists,
the polytree index) live in one Rust object, ``StagingCatalog``; this process only receives
requests, checks the data servers' health and writes snapshots of the tables so that a
restarted server carries on where it stopped. Box data never passes through it.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from pathlib import Path

import zmq

from amrzip import _core
from amrzip.stage import protocol
from amrzip.stage.protocol import Message, Op, StagingError, parse_key
from amrzip.stage.server import Server


class MetadataServer(Server):
    role = "mserver"

    def __init__(self, bind: str, *, state: str | os.PathLike | None = None, heartbeat: float = 1.0,
                 timeout: float = 5.0, checkpoint_every: float = 1.0, grace: float = 1.0, threads: int = 0, **kw):
        super().__init__(bind, **kw)
        self.state = None if state is None else Path(state)
        self.heartbeat, self.timeout = heartbeat, timeout
        self.checkpoint_every, self.threads = checkpoint_every, threads
        # Replaced copies to delete: (when, dserver, [key, version]), in time order.
        self.grace = grace
        self.retired: deque = deque()
        self.catalog = self._restore()
        self.dirty = False
        self.last_checkpoint = time.monotonic()
        # One DEALER per data server: health checks, and deletes the server asks of it.
        self.links: dict[int, zmq.Socket] = {}
        self.last_seen: dict[int, float] = {}
        self.alive: dict[int, bool] = {}
        self.last_ping = 0.0
        for d in self.catalog.dservers():
            self._link(d["id"], d["address"])
        self.handlers.update({
            Op.REGISTER: self.on_register, Op.PLACE: self.on_place, Op.COMMIT: self.on_commit,
            Op.ABORT: self.on_abort, Op.LOCATE: self.on_locate, Op.INDEX: self.on_index,
            Op.QUERY: self.on_query, Op.REMOVE: self.on_remove, Op.DROP: self.on_drop,
            Op.STATUS: self.on_status, Op.CHECKPOINT: self.on_checkpoint,
        })

    # ---- tables and snapshots
    def _restore(self):
        if self.state is None or not self.state.exists():
            return _core.StagingCatalog()
        try:
            catalog = _core.StagingCatalog.from_bytes(self.state.read_bytes())
        except ValueError as e:
            raise StagingError(f"cannot restart from {self.state}: {e}") from None
        self.log(f"restarted from {self.state}: {len(catalog.timesteps())} timestep(s), {len(catalog.dservers())} dserver(s)")
        return catalog

    def checkpoint(self):
        """Writes the tables to the state file atomically (a crash leaves the previous one)."""
        if self.state is None:
            return
        tmp = self.state.with_name(self.state.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(self.catalog.to_bytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state)
        self.dirty = False
        self.last_checkpoint = time.monotonic()

    def _changed(self):
        self.dirty = True

    # ---- data servers
    def _link(self, ident: int, address: str):
        old = self.links.pop(ident, None)
        if old is not None:
            old.close(linger=0)
        s = self.context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.IMMEDIATE, 1)  # nothing queues for a server that is not connected
        s.connect(address)
        self.links[ident] = s
        # A server restored from a snapshot gets one timeout to answer before it is called dead.
        self.last_seen[ident] = time.monotonic()
        self._set_alive(ident, True)

    def _set_alive(self, ident: int, alive: bool):
        if self.alive.get(ident) != alive:
            self.catalog.set_alive(ident, alive)
            self.alive[ident] = alive
            self._changed()

    def extra_sockets(self):
        return list(self.links.values())

    def on_extra(self, socket):
        while socket.poll(0):
            msg = protocol.decode(socket.recv_multipart())
            ident = next(i for i, s in self.links.items() if s is socket)
            if msg.op == Op.PING and msg.status == protocol.OK:
                self.last_seen[ident] = time.monotonic()
                if not self.alive[ident]:
                    self.log(f"dserver {ident} answers again")
                    self._set_alive(ident, True)

    def _tell(self, ident: int, op: Op, body: dict):
        """Sends a request to a data server without waiting (the answer is read and dropped)."""
        s = self.links.get(ident)
        if s is not None:
            try:
                s.send_multipart(protocol.encode(op, 0, body), zmq.NOBLOCK)
            except zmq.Again:  # not connected: a dead server's memory is gone anyway
                pass

    def _delete_retired(self, now: float):
        due = {}
        while self.retired and self.retired[0][0] <= now:
            _, ident, entry = self.retired.popleft()
            due.setdefault(ident, []).append(entry)
        for ident, entries in due.items():
            self._tell(ident, Op.DELETE, {"boxes": entries})

    def tick(self):
        now = time.monotonic()
        self._delete_retired(now)
        if now - self.last_ping >= self.heartbeat:
            self.last_ping = now
            for ident in self.links:
                self._tell(ident, Op.PING, {})
                if self.alive[ident] and now - self.last_seen[ident] > self.timeout:
                    self.log(f"dserver {ident} has not answered for {self.timeout:g} s: marked dead")
                    self._set_alive(ident, False)
        if self.dirty and now - self.last_checkpoint >= self.checkpoint_every:
            self.checkpoint()

    def close(self):
        self._delete_retired(float("inf"))  # nothing replaced stays behind
        if self.dirty:
            self.checkpoint()
        for s in self.links.values():
            s.close(linger=500)  # lets a shutdown request reach the data servers
        super().close()

    # ---- requests
    def on_register(self, msg: Message):
        b = msg.body
        known = len(self.links)
        ident = self.catalog.add_dserver(str(b["node"]), str(b["address"]), int(b.get("capacity", 0)))
        if ident in self.links:  # an announcement repeated: it is alive
            self.last_seen[ident] = time.monotonic()
            self._set_alive(ident, True)
        else:
            self._link(ident, str(b["address"]))
            self.log(f"dserver {ident} at {b['address']} on node {b['node']} registered")
        if len(self.links) != known:
            self._changed()
        return {"id": ident}, []

    def _addresses(self) -> dict:
        return {d["id"]: (d["address"], d["alive"]) for d in self.catalog.dservers()}

    def on_place(self, msg: Message):
        items = msg.body["boxes"]
        placed, out = [], [None] * len(items)
        addresses = None
        try:
            # Largest first within a request (a put_many is typically a whole timestep): greedy
            # placement then ends on small boxes, which even out the loads.
            for i in sorted(range(len(items)), key=lambda i: -int(items[i]["nbytes"])):
                item = items[i]
                t, level, lo, hi = parse_key(item["key"])
                meta = json.dumps(item["meta"]).encode()
                version = int(item["meta"]["version"])
                ds, _ = self.catalog.place(t, level, list(lo), list(hi), int(item["nbytes"]), meta, version)
                placed.append((t, level, list(lo), list(hi), version))
                addresses = addresses or self._addresses()
                out[i] = {"dserver": ds, "address": addresses[ds][0]}
        except Exception:
            for key in placed:
                self.catalog.abort(*key)
            raise
        self._changed()
        return {"placed": out}, []

    def on_commit(self, msg: Message):
        for item in msg.body["boxes"]:
            t, level, lo, hi = parse_key(item["key"])
            old = self.catalog.locate(t, level, list(lo), list(hi))
            self.catalog.commit(t, level, list(lo), list(hi), int(item["version"]))
            if old is not None:
                # The replaced copy goes after a grace period, so that readers that located it
                # just before this commit still find it.
                version = json.loads(old["meta"])["version"]
                self.retired.append((time.monotonic() + self.grace, old["dserver"], [protocol.key_of(t, level, lo, hi), version]))
        self._changed()
        return {}, []

    def on_abort(self, msg: Message):
        for item in msg.body["boxes"]:
            t, level, lo, hi = parse_key(item["key"])
            self.catalog.abort(t, level, list(lo), list(hi), int(item["version"]))
        self._changed()
        return {}, []

    def on_locate(self, msg: Message):
        addresses = self._addresses()
        found = []
        for key in msg.body["boxes"]:
            t, level, lo, hi = parse_key(key)
            r = self.catalog.locate(t, level, list(lo), list(hi))
            if r is None:
                found.append(None)
                continue
            address, alive = addresses[r["dserver"]]
            found.append({"dserver": r["dserver"], "address": address, "alive": alive, "nbytes": r["nbytes"],
                          "meta": json.loads(r["meta"])})
        return {"found": found}, []

    def on_index(self, msg: Message):
        t = int(msg.body["timestep"])
        summary = self.catalog.summary(t)
        ratios = _ratios(msg.body.get("ref_ratio", 2), len(summary["levels"]), summary["ndim"])
        stats = self.catalog.build_index(t, ratios, int(msg.body.get("threads", self.threads)))
        self._changed()
        return stats, []

    def on_query(self, msg: Message):
        b = msg.body
        level_max = b.get("level_max")
        r = self.catalog.query(int(b["timestep"]), list(map(int, b["lo"])), list(map(int, b["hi"])), int(b.get("level_min", 0)),
                               None if level_max is None else int(level_max), b.get("method", "polytree"), True)
        addresses = self._addresses()
        used = sorted(set(r["dserver"].tolist()))
        return {
            "level": r["level"].tolist(), "lo": r["lo"].tolist(), "hi": r["hi"].tolist(),
            "dserver": r["dserver"].tolist(), "nbytes": r["nbytes"].tolist(),
            "meta": [json.loads(m) for m in r["meta"]],
            "dservers": {str(i): addresses[i] for i in used},
        }, []

    def on_remove(self, msg: Message):
        removed = 0
        for key in msg.body["boxes"]:
            t, level, lo, hi = parse_key(key)
            r = self.catalog.remove(t, level, list(lo), list(hi))
            if r is not None:
                removed += 1
                self._tell(r["dserver"], Op.DELETE, {"boxes": [[protocol.key_of(t, level, lo, hi), "*"]]})
        self._changed()
        return {"removed": removed}, []

    def on_drop(self, msg: Message):
        t = int(msg.body["timestep"])
        dropped = self.catalog.drop_timestep(t)
        for ident in {d for *_, d in dropped}:
            self._tell(ident, Op.DELETE, {"timestep": t})
        self._changed()
        return {"removed": len(dropped)}, []

    def on_status(self, msg: Message):
        return {"dservers": self.catalog.dservers(),
                "timesteps": {str(t): self.catalog.summary(t) for t in self.catalog.timesteps()}}, []

    def on_checkpoint(self, msg: Message):
        if self.state is None:
            raise StagingError("has no state file (start it with --state FILE)")
        self.checkpoint()
        return {"path": str(self.state)}, []

    def on_shutdown(self, msg: Message):
        if msg.body.get("all"):
            for ident in self.links:
                self._tell(ident, Op.SHUTDOWN, {})
        return super().on_shutdown(msg)


def _ratios(ref_ratio, levels: int, ndim: int) -> list[list[int]]:
    """Per-level, per-axis refinement ratios from one integer, one per level, or one tuple per
    level."""
    per_level = [ref_ratio] * max(levels - 1, 0) if isinstance(ref_ratio, int) else list(ref_ratio)
    if len(per_level) < levels - 1:
        raise StagingError(f"the timestep has {levels} levels; ref_ratio gives {len(per_level)} ratio(s), it needs {levels - 1}")
    out = []
    for r in per_level[: max(levels - 1, 0)]:
        r = [r] * ndim if isinstance(r, int) else list(r)
        if len(r) != ndim or any(int(v) < 1 for v in r):
            raise StagingError(f"ratio {r} is not {ndim} positive integers")
        out.append([int(v) for v in r])
    return out
