"""What the metadata and data servers share: a ROUTER socket answering requests one at a time,
error replies instead of crashes, and the ways a server stops itself."""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback

import zmq

from amrzip.stage import protocol
from amrzip.stage.protocol import Message, Op, ProtocolError, StagingError


class Server:
    """Subclasses define ``handlers`` (Op -> method taking a Message, returning (body, payloads))
    and may override ``tick`` (called at least every ``tick_seconds``)."""

    tick_seconds = 0.5
    role = "server"

    def __init__(self, bind: str, *, lifetime: float | None = None, parent: int | None = None, quiet: bool = False):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 1000)
        self.address = _bind(self.socket, bind)
        self.deadline = None if lifetime is None else time.monotonic() + lifetime
        self.parent = parent
        self.quiet = quiet
        self.running = True
        self.handlers = {Op.SHUTDOWN: self.on_shutdown}

    def log(self, text: str):
        if not self.quiet:
            print(f"[{self.role} {self.address}] {text}", file=sys.stderr, flush=True)

    def serve(self):
        """Answers requests until a SHUTDOWN request, SIGTERM/SIGINT, the lifetime ends or the
        parent process is gone."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: setattr(self, "running", False))
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        watched: set = set()
        try:
            while self.running:
                extra = set(self.extra_sockets())  # links to other servers come and go
                for s in extra - watched:
                    poller.register(s, zmq.POLLIN)
                for s in watched - extra:
                    poller.unregister(s)
                watched = extra
                events = dict(poller.poll(int(self.tick_seconds * 1000)))
                if self.socket in events:
                    self._answer()
                for s in watched:
                    if s in events:
                        self.on_extra(s)
                self.tick()
                if self.deadline is not None and time.monotonic() > self.deadline:
                    self.log("lifetime over, stopping")
                    break
                if self.parent is not None and os.getppid() != self.parent:
                    self.log("parent process gone, stopping")
                    break
        finally:
            self.close()

    def _answer(self):
        frames = self.socket.recv_multipart(copy=False)
        # ROUTER prefixes the sender's identity; a DEALER client sends no empty delimiter.
        ident, frames = frames[0], frames[1:]
        request, op = 0, Op.ERROR
        try:
            msg = protocol.decode(frames)
            request, op = msg.request, msg.op
            handler = self.handlers.get(msg.op)
            if handler is None:
                raise ProtocolError(f"a {self.role} does not answer {msg.op.name}")
            body, payloads = handler(msg)
            reply = protocol.encode(msg.op, request, body, payloads)
        except (StagingError, ValueError, KeyError, TypeError) as e:
            reply = protocol.encode(op, request, {"error": f"{self.role} {self.address}: {e}"}, status=protocol.ERROR)
        except Exception as e:  # a bug: answer it, keep serving, leave a trace for the operator
            traceback.print_exc()
            reply = protocol.encode(op, request, {"error": f"{self.role} {self.address}: internal error: {e!r}"}, status=protocol.ERROR)
        self.socket.send_multipart([ident, *reply], copy=False)

    def on_shutdown(self, msg: Message):
        self.running = False
        return {}, []

    def extra_sockets(self) -> list:
        return []

    def on_extra(self, socket):
        pass

    def tick(self):
        pass

    def close(self):
        self.socket.close()
        self.context.term()


def _bind(socket, bind: str) -> str:
    """Binds ``tcp://host:port``; port ``*`` or 0 takes a free one. Returns the address bound."""
    try:
        if bind.endswith(":*") or bind.endswith(":0"):
            host = bind.rsplit(":", 1)[0]
            port = socket.bind_to_random_port(host)
            return f"{host}:{port}"
        socket.bind(bind)
    except zmq.ZMQError as e:
        socket.close(linger=0)
        raise StagingError(f"cannot listen on {bind}: {e}") from None
    return socket.getsockopt(zmq.LAST_ENDPOINT).decode()
