"""The snapshot store's on-disk layout: a Zarr v3 hierarchy (docs/format.md, "AMR store").

::

    STORE/zarr.json                          group; attributes.amrzip: store version, committed snapshots
    STORE/<snapshot>/zarr.json               group; attributes.amrzip: the AMR metadata
    STORE/<snapshot>/level_<L>/zarr.json     group
    STORE/<snapshot>/level_<L>/<field>/zarr.json   array over the level's index space
    STORE/<snapshot>/level_<L>/<field>/c/<i>/<j>/<k>   one chunk: the unit blocks stored there

This module knows names, versions and how to validate what it reads; it does no I/O beyond
JSON files.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np

STORE_VERSION = 1
# Version 2 adds "node" (node-centred data) and is written only for such data, so cell-centred
# snapshots stay readable by version-1 readers.
SNAPSHOT_VERSION = 1
NODAL_SNAPSHOT_VERSION = 2
CODEC_NAME = "amrzip.amr"
# A snapshot name is one path component a user can type.
_SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
# Unit block edge when the boxes do not reveal a blocking factor, the largest one detected, and
# the larger edges also tried: with absent cells costing nothing, a unit block larger than the
# blocking factor often predicts better (fewer seams), sometimes worse (less context where boxes
# end), so the writer measures.
DEFAULT_UNIT = 8
MAX_UNIT = 32
TRIED_UNITS = (16, 32)
# A larger chunk the writer also tries, and what it must save to be used over box-sized ones
# (it gives unit blocks of 32 cells room: at loose bounds they code much smaller).
LARGE_CHUNK = {1: 4096, 2: 128, 3: 32}
LARGE_CHUNK_GAIN = 0.25
# Chunk edge bounds in cells per dimensionality. A chunk is what a region read decodes: the
# writer sizes it like the level's boxes (a box read then touches about one chunk), within these
# bounds: large enough to amortise a chunk's header, small enough that reads stay local.
CHUNK_EDGE = {1: (1024, 4096), 2: (32, 128), 3: (16, 32)}


def chunk_edge(boxes, dim: int) -> int:
    """The largest power of two within ``CHUNK_EDGE`` not above the median of the boxes'
    smallest edges."""
    lo, hi = CHUNK_EDGE[dim]
    if not boxes:
        return hi
    typical = sorted(min(h - l + 1 for l, h in zip(*b)) for b in boxes)[len(boxes) // 2]
    edge = hi
    while edge > lo and edge > typical:
        edge //= 2
    return edge


class StoreError(ValueError):
    """The store is missing, damaged or not an amrzip store; the message names the file."""


def field_dir(field: str) -> str:
    """A field name as one path component (names like ``Y(H2)`` or ``a/b`` stay readable)."""
    name = quote(field, safe="()[]_-.,+=")
    return "%2E" + name[1:] if name.startswith(".") else name


def field_from_dir(name: str) -> str:
    return unquote(name)


def check_snapshot_name(name: str) -> str:
    if not isinstance(name, str) or not _SNAPSHOT_NAME.match(name):
        raise ValueError(f"snapshot name {name!r} must be 1-128 characters of letters, digits, '_', '.', '+', '-', starting with a letter or digit")
    return name


def chunk_key(index) -> str:
    """The chunk's path below its array, Zarr v3's default key encoding."""
    return "c/" + "/".join(str(int(i)) for i in index)


def detect_unit(boxes, domain_lo, dim: int) -> int:
    """The blocking factor the boxes honour: the largest power of two (at most ``MAX_UNIT``)
    dividing every box corner and size relative to the domain corner; ``DEFAULT_UNIT`` when
    that is below 4 (unaligned boxes then make partial unit blocks, whose absent cells cost
    almost nothing)."""
    g = 0
    for lo, hi in boxes:
        for d in range(dim):
            g = math.gcd(g, lo[d] - domain_lo[d], hi[d] + 1 - domain_lo[d])
    unit = MAX_UNIT
    while unit > 1 and g % unit:
        unit //= 2
    return unit if unit >= 4 else DEFAULT_UNIT


def encode_bytes(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def decode_bytes(s, where: str) -> bytes:
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except Exception as e:
        raise StoreError(f"{where}: codebook is not valid base64 ({e})") from None


def write_json_atomic(path: Path, doc: dict) -> None:
    """Writes ``doc`` to ``path`` so that a reader sees the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"), allow_nan=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise StoreError(f"{path}: missing") from None
    except (OSError, ValueError) as e:
        raise StoreError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(doc, dict):
        raise StoreError(f"{path}: not a JSON object")
    return doc


def group_doc(attributes: dict) -> dict:
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def array_doc(shape, chunk, dtype: str, codec_config: dict, attributes: dict) -> dict:
    names = ["x", "y", "z"][: len(shape)]
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [int(n) for n in shape],
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [int(c) for c in chunk]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": CODEC_NAME, "configuration": codec_config}],
        "dimension_names": names,
        "attributes": attributes,
    }


def dig(doc, *keys):
    """``doc[k1][k2]...`` through JSON objects, or None where one is missing or not an object."""
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _require(cond: bool, where, what: str) -> None:
    if not cond:
        raise StoreError(f"{where}: {what}")


def _int_list(v, n=None) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v) and (n is None or len(v) == n)


def index_space(domain, node) -> tuple:
    """The indices a level's arrays span: its cells, one more along node-centred dimensions."""
    return tuple(domain[0]), tuple(h + bool(n) for h, n in zip(domain[1], node))


def validate_snapshot(meta, where) -> dict:
    """Checks the snapshot metadata a reader relies on; returns it, with "node" filled in."""
    _require(isinstance(meta, dict), where, "no amrzip snapshot metadata")
    version = meta.get("version")
    _require(version in (SNAPSHOT_VERSION, NODAL_SNAPSHOT_VERSION), where,
             f"unsupported snapshot version {version!r} (this build reads {SNAPSHOT_VERSION} and {NODAL_SNAPSHOT_VERSION})")
    dim = meta.get("dim")
    _require(dim in (1, 2, 3), where, f"bad dimension {dim!r}")
    node = meta.get("node", [False] * dim) if version == NODAL_SNAPSHOT_VERSION else [False] * dim
    _require(isinstance(node, list) and len(node) == dim and all(isinstance(n, bool) for n in node), where, f"bad node flags {node!r}")
    meta = {**meta, "node": node}
    fields = meta.get("fields")
    _require(isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields), where, "bad field list")
    _require(len(set(fields)) == len(fields), where, "duplicate field names")
    for key in ("prob_lo", "prob_hi"):
        v = meta.get(key)
        _require(isinstance(v, list) and len(v) == dim and all(isinstance(x, (int, float)) for x in v), where, f"bad {key}")
    for key, kinds in (("time", (int, float)), ("step", (int,)), ("coord_sys", (int,))):
        v = meta.get(key, 0)
        _require(isinstance(v, kinds) and not isinstance(v, bool) and np.isfinite(v), where, f"bad {key} {v!r}")
    levels = meta.get("levels")
    _require(isinstance(levels, list) and levels, where, "no levels")
    for L, lev in enumerate(levels):
        w = f"{where} level {L}"
        _require(isinstance(lev, dict), w, "not an object")
        _require(_int_list(lev.get("ref_ratio"), dim) and all(r >= 1 for r in lev["ref_ratio"]), w, "bad ref_ratio")
        dom = lev.get("domain")
        _require(isinstance(dom, list) and len(dom) == 2 and all(_int_list(c, dim) for c in dom), w, "bad domain")
        _require(all(h >= l for l, h in zip(*dom)), w, "empty domain")
        boxes = lev.get("boxes")
        _require(isinstance(boxes, list), w, "bad box list")
        for b in boxes:
            _require(isinstance(b, list) and len(b) == 2 and all(_int_list(c, dim) for c in b), w, f"bad box {b!r}")
            _require(all(dom[0][d] <= b[0][d] <= b[1][d] <= dom[1][d] + node[d] for d in range(dim)), w, f"box {b!r} outside the domain {dom!r}")
        _require(_int_list(lev.get("owners"), len(boxes)), w, "bad owner list")
        dx = lev.get("dx")
        _require(isinstance(dx, list) and len(dx) == dim and all(isinstance(x, (int, float)) for x in dx), w, "bad dx")
    _require(levels[-1]["ref_ratio"] == [1] * dim, where, "the finest level must have ref_ratio 1")
    for L in range(len(levels) - 1):
        (lo, hi), r = levels[L]["domain"], levels[L]["ref_ratio"]
        refined = [[l * q for l, q in zip(lo, r)], [(h + 1) * q - 1 for h, q in zip(hi, r)]]
        _require(levels[L + 1]["domain"] == refined, where, f"level {L + 1}'s domain is not level {L}'s refined by {r}")
    bounds = meta.get("bounds")
    _require(isinstance(bounds, dict) and set(bounds) == set(fields), where, "bounds must list every field")
    return meta


def validate_codec(doc, where, dim: int, shape) -> dict:
    """Checks an array's zarr.json against the level it belongs to (the shape of its domain);
    returns the codec config with the array's chunk shape under "chunk"."""
    _require(doc.get("zarr_format") == 3 and doc.get("node_type") == "array", where, "not a Zarr v3 array")
    _require(doc.get("shape") == list(shape), where, f"shape {doc.get('shape')!r} differs from the level's domain {list(shape)!r}")
    _require(doc.get("data_type") in ("float32", "float64"), where, f"unsupported data type {doc.get('data_type')!r}")
    chunk = dig(doc, "chunk_grid", "configuration", "chunk_shape")
    _require(_int_list(chunk, dim) and all(1 <= c <= 1 << 20 for c in chunk), where, f"bad chunk shape {chunk!r}")
    codecs = doc.get("codecs")
    _require(isinstance(codecs, list) and len(codecs) == 1 and dig(codecs[0], "name") == CODEC_NAME, where, f"not stored with the {CODEC_NAME} codec")
    cfg = dig(codecs[0], "configuration")
    _require(isinstance(cfg, dict), where, "codec configuration missing")
    unit = cfg.get("unit")
    _require(_int_list(unit, dim) and all(1 <= u <= c and c % u == 0 for u, c in zip(unit, chunk)), where, f"unit block {unit!r} does not tile the chunk {list(chunk)!r}")
    _require(_int_list(cfg.get("origin"), dim), where, "bad origin")
    bound, eb, offset = cfg.get("abs_bound"), cfg.get("eb"), cfg.get("offset", 0.0)
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)  # noqa: E731
    _require(number(bound) and bound >= 0, where, f"bad abs_bound {bound!r}")
    _require(number(eb) and 0 <= eb <= bound, where, f"bad quantization bound eb {eb!r}")
    _require(number(offset) and abs(offset) <= bound - eb, where, f"bad offset {offset!r}")
    books = cfg.get("codebooks")
    _require(isinstance(books, list) and all(isinstance(b, str) for b in books), where, "bad codebook list")
    return {**cfg, "chunk": list(chunk)}
