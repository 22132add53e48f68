"""Arrays on disk for the command line: raw C-order binary (described by dtype, shape and byte
order) or .npy (self-describing). Native-order inputs are memory-mapped, so a large file is handed
to the codec without first being copied into memory."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

DTYPES = {
    "f32": np.dtype(np.float32),
    "float32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "float64": np.dtype(np.float64),
}
BYTEORDERS = {"little": "<", "big": ">"}


class MismatchError(Exception):
    """The file does not hold what the options say (size, dtype, shape or byte order differ)."""


class UnreadableError(Exception):
    """The file is not a readable array (such as a damaged .npy header)."""


def is_npy(path: Path) -> bool:
    return path.suffix.lower() == ".npy"


def format_shape(shape) -> str:
    return "x".join(map(str, shape))


def _byteorder_name(dtype: np.dtype) -> str:
    order = dtype.byteorder
    if order == "=":
        order = "<" if sys.byteorder == "little" else ">"
    return "big" if order == ">" else "little"


def _native(arr: np.ndarray) -> np.ndarray:
    # The codec works on native-order memory: swap a big-endian file once, here.
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def read_raw(path: Path, dtype: str, shape: tuple[int, ...], byteorder: str) -> np.ndarray:
    dt = DTYPES[dtype].newbyteorder(BYTEORDERS[byteorder])
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    actual = path.stat().st_size
    if actual != expected:
        raise MismatchError(f"{path} holds {actual} bytes, but {dt.name} of shape {format_shape(shape)} needs {expected}")
    if expected == 0:
        return np.empty(shape, dtype=DTYPES[dtype])  # mmap refuses empty files
    return _native(np.memmap(path, dtype=dt, mode="r", shape=shape, order="C"))


def read_npy(path: Path, dtype: str | None, shape: tuple[int, ...] | None, byteorder: str | None) -> np.ndarray:
    """Loads a .npy file; any of dtype, shape, byteorder given must agree with its header."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise UnreadableError(f"{path} is not a readable .npy file: {e}") from e
    checks = (
        ("--dtype", dtype and DTYPES[dtype].name, arr.dtype.name),
        ("--shape", shape and format_shape(shape), format_shape(arr.shape)),
        ("--byteorder", byteorder, _byteorder_name(arr.dtype)),
    )
    for option, given, actual in checks:
        if given is not None and given != actual:
            raise MismatchError(f"{option} {given} does not match {path}, which holds {actual}")
    return _native(arr)


@contextmanager
def _replacing(path: Path):
    """A file that takes the place of `path` only once fully written, so a failed or interrupted
    run never leaves a truncated output (or destroys an existing one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "xb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_array(path: Path, array: np.ndarray, byteorder: str) -> None:
    """Writes .npy if the name ends in .npy, else raw C-order binary, in the given byte order."""
    array = array.astype(array.dtype.newbyteorder(BYTEORDERS[byteorder]), copy=False)
    with _replacing(path) as f:
        if is_npy(path):
            np.save(f, array, allow_pickle=False)
        else:
            array.tofile(f)


def write_bytes(path: Path, data: bytes) -> None:
    with _replacing(path) as f:
        f.write(data)
