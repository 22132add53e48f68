"""Reaching into a store's files, for tests that damage or inspect them: a snapshot is one zip
file of stored entries (docs/format.md section 15)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import amrzip


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
