"""The staging service's messages (docs/staging.md, "Wire format").

Every message is a ZeroMQ multipart message: a 24-byte header, a UTF-8 JSON body, then zero or
more payload frames (box data, sent and received without copying). The header says how long
the body is and how many payload frames follow, so a receiver checks a message's shape before
it reads anything from it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum

import zmq

MAGIC = b"AZST"
VERSION = 1
HEADER = struct.Struct("<4sBBHQIII")  # 28 bytes


class Op(IntEnum):
    ERROR = 0  # the answer to a request too damaged to say what it asked
    # metadata server
    REGISTER = 1
    PLACE = 2
    COMMIT = 3
    ABORT = 4
    LOCATE = 5
    INDEX = 6
    QUERY = 7
    REMOVE = 8
    DROP = 9
    STATUS = 10
    CHECKPOINT = 11
    SHUTDOWN = 12
    # data server
    PUT = 20
    GET = 21
    DELETE = 22
    PING = 23


OK, ERROR = 0, 1


class StagingError(RuntimeError):
    """A staging request failed; the message says which server and why."""


class StagingTimeout(StagingError, TimeoutError):
    """A server did not answer within the client's timeout."""


class ProtocolError(StagingError):
    """A message does not follow the wire format."""


@dataclass
class Message:
    op: Op
    status: int
    request: int
    body: dict
    payloads: list  # zmq.Frame (received) or buffers (to send)


def encode(op: int, request: int, body: dict, payloads=(), status: int = OK) -> list:
    """The frames of one message; payloads are buffers sent without copying."""
    text = json.dumps(body, separators=(",", ":")).encode()
    header = HEADER.pack(MAGIC, VERSION, int(op), status, request, len(text), len(payloads), 0)
    return [header, text, *payloads]


def decode(frames: list) -> Message:
    """Parses received frames (bytes or zmq.Frame), validating the header against them."""
    if len(frames) < 2:
        raise ProtocolError(f"a message has at least a header and a body; got {len(frames)} frame(s)")
    head = _bytes(frames[0])
    if len(head) != HEADER.size:
        raise ProtocolError(f"header is {len(head)} bytes, not {HEADER.size}")
    magic, version, op, status, request, body_len, count, _ = HEADER.unpack(head)
    if magic != MAGIC:
        raise ProtocolError(f"not a staging message (magic {magic!r})")
    if version != VERSION:
        raise ProtocolError(f"wire format version {version}; this build speaks {VERSION}")
    try:
        op = Op(op)
    except ValueError:
        raise ProtocolError(f"unknown operation {op}") from None
    text = _bytes(frames[1])
    if len(text) != body_len:
        raise ProtocolError(f"body is {len(text)} bytes; the header says {body_len}")
    if len(frames) - 2 != count:
        raise ProtocolError(f"{len(frames) - 2} payload frame(s); the header says {count}")
    try:
        body = json.loads(text) if text else {}
    except ValueError as e:
        raise ProtocolError(f"body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ProtocolError("body is not a JSON object")
    return Message(op, status, request, body, list(frames[2:]))


def _bytes(frame) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)


def key_of(timestep, level, lo, hi) -> list:
    """A box's key as it travels in bodies: [timestep, level, lo, hi]."""
    return [int(timestep), int(level), [int(v) for v in lo], [int(v) for v in hi]]


def parse_key(key) -> tuple[int, int, tuple, tuple]:
    """Validates a key from a body: non-negative timestep and level, lo <= hi of one length."""
    try:
        t, level, lo, hi = key
        t, level = int(t), int(level)
        lo, hi = tuple(int(v) for v in lo), tuple(int(v) for v in hi)
    except (TypeError, ValueError):
        raise ProtocolError(f"a box key is [timestep, level, lo, hi]; got {key!r}") from None
    if t < 0 or level < 0:
        raise ProtocolError(f"timestep and level must be >= 0; got {t} and {level}")
    if not 1 <= len(lo) <= 8 or len(lo) != len(hi) or any(h < l for l, h in zip(lo, hi)):
        raise ProtocolError(f"box lo={lo} hi={hi} is not a non-empty box of 1 to 8 dimensions")
    return t, level, lo, hi
