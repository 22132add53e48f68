"""Reaching into a store's files, for tests that damage or inspect them (a snapshot is one zip
file of stored entries, its level arrays sharded: docs/format.md section 15), and the small
hierarchies and digests the store's safety tests share."""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zipfile
from pathlib import Path

import numpy as np

import amrzip
from amrzip.amr import Hierarchy


def snapshot_file(store, name=None) -> Path:
    """The file of snapshot ``name`` (default: the latest) of ``store``."""
    return amrzip.open(store, snapshot=name).path


def read_entry(path, name: str) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(name)


def rewrite_entry(path, name: str, data: bytes) -> None:
    """Replaces entry ``name`` of the snapshot file at ``path`` (its CRC updated: the damage is
    in what the entry holds, as a faulty writer would leave it)."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, data if i.filename == name else z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, d in entries:
            z.writestr(n, d)


# --- entries edited in place, shards taken apart --------------------------------------------------


def entry_span(path, name: str) -> tuple[int, int]:
    """(offset in the file, size) of the bytes of stored entry ``name``."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def read_entry_raw(path, name: str) -> bytes:
    """Entry ``name``'s bytes as they are on disk, unchecked against its CRC."""
    start, size = entry_span(path, name)
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(size)


def patch_entry(path, name: str, offset: int, data: bytes) -> None:
    """Overwrites bytes of entry ``name`` from ``offset`` in place, its recorded CRC left as it
    was: the damage a flipped bit on disk does."""
    start, size = entry_span(path, name)
    assert offset + len(data) <= size
    with open(path, "r+b") as f:
        f.seek(start + offset)
        f.write(data)


def remove_entry(path, name: str) -> None:
    """Rewrites the snapshot file at ``path`` without entry ``name``."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist() if i.filename != name]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, d in entries:
            z.writestr(n, d)


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as the Zarr ``crc32c`` codec computes it over a shard index."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


ABSENT = 2**64 - 1


def split_shard(shard: bytes, inner: int) -> tuple[bytes, list]:
    """A shard's chunk bytes and its index: per inner chunk (offset, nbytes), None where absent."""
    at = len(shard) - (16 * inner + 4)
    index = shard[at:]
    assert crc32c(index[:-4]) == struct.unpack("<I", index[-4:])[0], "shard index CRC"
    entries = []
    for k in range(inner):
        offset, nbytes = struct.unpack_from("<QQ", index, 16 * k)
        entries.append(None if (offset, nbytes) == (ABSENT, ABSENT) else (offset, nbytes))
    return shard[:at], entries


def join_shard(body: bytes, entries: list) -> bytes:
    """A shard of chunk bytes ``body`` and index ``entries`` (its CRC-32C computed)."""
    index = b"".join(struct.pack("<QQ", *(e if e is not None else (ABSENT, ABSENT))) for e in entries)
    return body + index + struct.pack("<I", crc32c(index))


def shard_slots(path, level: int) -> tuple[int, dict]:
    """The inner chunks per shard of ``level``'s array, and its shards by entry name."""
    doc = json.loads(read_entry(path, f"level_{level}/zarr.json"))
    outer = doc["chunk_grid"]["configuration"]["chunk_shape"]
    inner_shape = doc["codecs"][0]["configuration"]["chunk_shape"]
    inner = math.prod(o // i for o, i in zip(outer, inner_shape))
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.startswith(f"level_{level}/c/")]
    return inner, {n: read_entry(path, n) for n in names}


def chunk_position(chunk: bytes) -> int:
    """The varint a stored chunk starts with: its position in the array's chunk grid."""
    value = 0
    for i, b in enumerate(chunk[:10]):
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value
    raise ValueError("no position varint")


# --- stores as users see them -----------------------------------------------------------------------


def shared_file(name: str) -> Path:
    """The real file ``name`` of the shared data ("amrex/<folder>" or "chombo/<file>"); the test
    is skipped, saying why, where the shared data is absent."""
    import pytest
    from shared_data import AMREX, CHOMBO, REASON

    kind, _, rest = name.partition("/")
    base = AMREX if kind == "amrex" else CHOMBO
    if base is None or not (base / rest).exists():
        pytest.skip(REASON)
    return base / rest


def temporaries(store) -> list[str]:
    """What writers leave in ``store`` while at work: ``.writing-*`` files and folders, temporary roots."""
    store = Path(store)
    if not store.is_dir():
        return []
    return sorted(p.name for p in store.iterdir() if p.name.startswith(".writing-") or (p.name.startswith(".zarr.json.") and p.name.endswith(".tmp")))


def decoded_digest(store, name=None) -> str:
    """SHA-256 of everything snapshot ``name`` of ``store`` decodes to: every field of every box
    of every level, covered cells rebuilt, in order (NaN bit patterns included)."""
    ds = amrzip.open(store, snapshot=name)
    digest = hashlib.sha256()
    for f in ds.fields:
        for L in range(ds.num_levels):
            for values in ds.level(L).field(f):
                digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()


def seeded_hierarchy(seed: int, n: int = 16, fields=("rho", "u"), dtype=np.float64) -> Hierarchy:
    """A small two-level 3-D hierarchy whose values depend on ``seed`` (smooth plus noise), the
    fine box placed by ``seed`` too: snapshots of different seeds differ everywhere."""
    rng = np.random.default_rng(seed)
    half = n // 2
    coarse = [((0, 0, 0), (half - 1, n - 1, n - 1)), ((half, 0, 0), (n - 1, n - 1, n - 1))]
    lo = tuple(int(v) for v in 2 * rng.integers(0, half // 2 + 1, 3))
    fine = [(lo, tuple(v + n - 1 for v in lo))]

    def values(box, scale):
        axes = np.meshgrid(*[np.arange(a, b + 1) / (scale * n) for a, b in zip(*box)], indexing="ij")
        phase = rng.uniform(0, 6, 3)
        smooth = sum(np.sin((2 + d) * a * 6 + phase[d]) for d, a in enumerate(axes))
        return np.asfortranarray((smooth + 0.01 * rng.standard_normal(smooth.shape)).astype(dtype))

    levels = [
        {"boxes": coarse, "ref_ratio": 2, "domain": ((0,) * 3, (n - 1,) * 3), "data": {f: [values(b, 1) for b in coarse] for f in fields}},
        {"boxes": fine, "data": {f: [values(b, 2) for b in fine] for f in fields}},
    ]
    return Hierarchy.from_arrays(levels, prob_lo=(0.0,) * 3, prob_hi=(1.0,) * 3, time=float(seed), step=seed)
