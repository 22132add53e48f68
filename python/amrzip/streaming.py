"""Chunked streams: compress data that arrives piece by piece (or does not fit in memory) into
one stream, and read it back chunk by chunk.

The encoder keeps what it settled between chunks (the predictor chosen by sampling and the
Huffman codebook) and rebuilds only when the data drifts (see ``docs/codec.md``). The container
(``docs/format.md``, "Chunked streams") is a small header, one record per chunk (each an amrzip
stream, whose codebook may be the one in force), and an end block with counts.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from pathlib import Path

import numpy as np

from amrzip import _core
from amrzip.codec import MODES, PREDICTORS, CorruptStreamError, _bound, _threads

MAGIC = b"AMRS"
VERSION = 1
_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}
_HEADER = struct.Struct("<4sBB2x")
_LENGTH = struct.Struct("<Q")
# Records, elements, and a 4-byte BLAKE2b digest of every byte before it. A checksum of the counts
# alone would accept records swapped, repeated or spliced in from another stream; and a CRC-32 over
# the records would too, since each record ends in CRC-32s of its own parts, which makes its CRC-32
# depend on its lengths only.
_END = struct.Struct("<QQ4s")
POLICIES = ("adaptive", "rebuild", "interval")


def _digest():
    return hashlib.blake2b(digest_size=4)


def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype).newbyteorder("=")
    if dt not in _DTYPES:
        raise ValueError(f"unsupported dtype {np.dtype(dtype)}: amrzip compresses float32 and float64 arrays")
    return dt


def _chunking(chunk):
    """An element count (data as a flat sequence) or a chunk shape (slabs along axis 0)."""
    if isinstance(chunk, (int, np.integer)) and not isinstance(chunk, bool):
        if chunk < 1:
            raise ValueError(f"chunk must be a positive element count or a shape, got {chunk}")
        return (int(chunk),)
    try:
        shape = tuple(int(n) for n in chunk)
    except (TypeError, ValueError):  # not a sequence, or one of things other than numbers (a string)
        raise ValueError(f"chunk must be a positive element count or a shape, got {chunk!r}") from None
    if not 1 <= len(shape) <= 4 or min(shape) < 1:
        raise ValueError(f"chunk shape must have 1 to 4 positive dimensions, got {shape}")
    return shape


class StreamCompressor:
    """Compress a sequence of arrays into one chunked stream.

    ``chunk`` is either an element count (the data is a flat sequence, cut into pieces of that
    many elements whatever the sizes given to :meth:`write`) or a chunk shape ``(rows, *rest)``:
    :meth:`write` then takes arrays of shape ``(any, *rest)`` and the stream is cut into slabs of
    ``rows`` along axis 0. Memory stays within a few chunks whatever the total size.

    The bound is one of ``abs=``; ``ratio=`` (met over the whole stream: each chunk's bound is
    adjusted from the bit-rate so far); or ``psnr=`` (a floor for the whole stream: each chunk's
    errors are held to what the value range seen so far allows). ``rel=`` is refused, as it
    would need the range of data not seen yet: compute ``abs = rel * (max - min)`` first if you
    know the range.

    ``codebook`` chooses when to build a new Huffman codebook: ``"adaptive"`` (default: when the
    spread of the symbol histogram drifts past ``thresholds=(keep, rebuild)``), ``"rebuild"``
    (every chunk) or ``"interval"`` (every ``update_elements`` elements).

    ``output`` is a path or a binary file to write to as chunks complete; without it,
    :meth:`finish` returns the stream as bytes.
    """

    def __init__(
        self,
        dtype,
        chunk,
        *,
        abs=None,
        rel=None,
        ratio=None,
        psnr=None,
        mode="ratio",
        threads=None,
        predictor=None,
        output=None,
        codebook="adaptive",
        thresholds=None,
        update_elements=None,
    ):
        self.dtype = _dtype(dtype)
        self.chunk = _chunking(chunk)
        if rel is not None:
            # Taken as a keyword so that it is refused with the reason, not as an unknown argument.
            raise ValueError(
                "rel= needs the value range of chunks not seen yet: give abs=, ratio= or psnr= "
                "(abs = rel * (max - min) if you know the range)"
            )
        bound_mode, bound = _bound(abs=abs, ratio=ratio, psnr=psnr)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if predictor is not None and predictor not in PREDICTORS:
            raise ValueError(f"predictor must be one of {PREDICTORS}, got {predictor!r}")
        if codebook not in POLICIES:
            raise ValueError(f"codebook must be one of {POLICIES}, got {codebook!r}")
        keep, rebuild = thresholds if thresholds is not None else _core.DEFAULT_THRESHOLDS
        if codebook == "interval" and (update_elements is None or int(update_elements) < 1):
            raise ValueError("codebook='interval' needs update_elements >= 1")
        self._encoder = _core.StreamEncoder(
            self.dtype.name, bound_mode, bound, mode, _threads(threads), predictor, codebook,
            float(keep), float(rebuild), int(update_elements or 0),
        )
        self._owned = isinstance(output, (str, os.PathLike))
        self._tmp = None
        if self._owned:
            # Written beside the target and renamed at the end: a reader never sees half a stream.
            self._path = Path(output)
            self._tmp = self._path.with_name(self._path.name + ".part")
            self._out = open(self._tmp, "wb")
        else:
            self._out = output if output is not None else io.BytesIO()
        self._returns_bytes = output is None
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self.records = 0
        self.elements = 0
        self.bytes_written = 0
        self._closed = False
        self._digest = _digest()
        self._emit(_HEADER.pack(MAGIC, VERSION, _DTYPES[self.dtype]))

    # Rows of a chunk along axis 0 (elements, for a flat sequence).
    @property
    def _rows(self) -> int:
        return self.chunk[0]

    def _emit(self, data: bytes):
        self._out.write(data)
        self._digest.update(data)
        self.bytes_written += len(data)

    def _encode(self, piece: np.ndarray):
        record = self._encoder.encode(np.ascontiguousarray(piece))
        self._emit(_LENGTH.pack(len(record)))
        self._emit(record)
        self.records += 1
        self.elements += piece.size

    def write(self, array) -> None:
        """Append ``array`` to the stream; full chunks are compressed and written at once."""
        if self._closed:
            raise ValueError("write() after finish()")
        arr = np.asarray(array)
        if arr.dtype.newbyteorder("=") != self.dtype:
            raise ValueError(f"this stream holds {self.dtype} values, got an array of {arr.dtype}")
        arr = arr.astype(self.dtype, copy=False)
        if len(self.chunk) == 1:
            arr = arr.reshape(-1)
        elif arr.ndim != len(self.chunk) or arr.shape[1:] != self.chunk[1:]:
            raise ValueError(f"expected an array of shape (any, {', '.join(map(str, self.chunk[1:]))}), got {arr.shape}")
        while arr.shape[0]:
            take = min(self._rows - self._pending_rows, arr.shape[0])
            self._pending.append(arr[:take])
            self._pending_rows += take
            arr = arr[take:]
            if self._pending_rows == self._rows:
                self._flush()

    def _flush(self):
        if self._pending_rows:
            piece = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
            self._pending, self._pending_rows = [], 0
            self._encode(piece)

    def finish(self):
        """Compress what is left and close the stream. Returns the stream as bytes when no
        ``output`` was given, else None."""
        if self._closed:
            raise ValueError("finish() called twice")
        self._flush()
        self._closed = True
        self._emit(_LENGTH.pack(0) + struct.pack("<QQ", self.records, self.elements))
        self._emit(self._digest.digest())
        if self._owned:
            self._out.close()
            os.replace(self._tmp, self._path)
        if self._returns_bytes:
            return self._out.getvalue()
        return None

    def stats(self) -> dict:
        """The encoder's choices so far: records, codebooks kept / rebuilt / built-in, predictor
        re-selections, elements and bytes out."""
        return self._encoder.stats()

    def close(self):
        """Abandon an unfinished stream (a partial file is removed)."""
        if not self._closed:
            self._closed = True
            if self._owned:
                self._out.close()
                self._tmp.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and not self._closed:
            self.finish()
        else:
            self.close()


class StreamDecompressor:
    """Read a chunked stream back: iterate for the chunks in order, or :meth:`read_all`.

    ``source`` is bytes, a path, or a binary file. Every length, count and checksum is checked;
    damage raises :class:`amrzip.CorruptStreamError`. The checksum covers the whole stream and
    is only known at its end, so a consumer of the chunks must not trust what it has written
    until iteration finished without an error.
    """

    def __init__(self, source, *, threads=None):
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._in = io.BytesIO(bytes(source))
            self._owned = True
        elif isinstance(source, (str, os.PathLike)):
            self._in = open(source, "rb")
            self._owned = True
        else:
            self._in, self._owned = source, False
        self._digest = _digest()
        self._started = False
        try:
            head = self._read_exact(_HEADER.size, "the header")
            magic, version, dtype = _HEADER.unpack(head)
            if magic != MAGIC or head[6:8] != b"\0\0":
                raise CorruptStreamError("not a chunked amrzip stream (bad magic)")
            if version != VERSION:
                raise CorruptStreamError(f"unsupported chunked stream version {version} (this build reads {VERSION})")
            names = {v: k for k, v in _DTYPES.items()}
            if dtype not in names:
                raise CorruptStreamError(f"unknown dtype code {dtype}")
            self.dtype = names[dtype]
            self._decoder = _core.StreamDecoder(self.dtype.name, _threads(threads))
            self._end = self._size()
        except BaseException:
            self._close()
            raise
        self._done = False

    def _size(self):
        """Where the source ends, if it can tell (a pipe cannot): lengths past it are refused at
        once rather than read up to the end first."""
        try:
            if not self._in.seekable():
                return None
            here = self._in.tell()
            end = self._in.seek(0, io.SEEK_END)
            self._in.seek(here)
            return end
        except (OSError, ValueError):
            return None

    def _close(self):
        if self._owned:
            self._in.close()

    def _read_exact(self, n: int, what: str) -> bytes:
        # In pieces: a damaged length must not make us allocate what the source lacks.
        parts, left = [], n
        while left:
            part = self._in.read(min(left, 1 << 26))
            if not part:
                raise CorruptStreamError(f"chunked stream truncated in {what}")
            parts.append(part)
            left -= len(part)
        data = b"".join(parts)
        self._digest.update(data)
        return data

    def _records(self):
        """Each record's bytes with its ``amrzip.info``, in order, checked as far as that goes
        without decoding: lengths, dtype, shapes (all but the first side the same, so that the
        records join along axis 0); after the last record, the counts and the digest."""
        if self._started:
            raise ValueError("a StreamDecompressor reads its stream once")
        self._started = True
        try:
            records = elements = 0
            first = None
            while True:
                (length,) = _LENGTH.unpack(self._read_exact(_LENGTH.size, "a record length"))
                if length == 0:
                    break
                # Room for the record, the zero length and the end block.
                if self._end is not None and length > self._end - self._in.tell() - _LENGTH.size - _END.size:
                    raise CorruptStreamError(f"record {records} claims {length} bytes, more than the stream holds")
                record = self._read_exact(length, f"record {records}")
                described = _core.info(record)
                shape = tuple(described["shape"])
                if described["dtype"] != self.dtype.name:
                    raise CorruptStreamError(f"record {records} holds {described['dtype']} values in a stream of {self.dtype}")
                if first is not None and shape[1:] != first[1:]:
                    raise CorruptStreamError(f"record {records} of shape {shape} does not join records of shape {first}")
                if first is None:
                    first = shape
                records += 1
                elements += described["original_size"] // self.dtype.itemsize
                yield record, described
            n_records, n_elements = struct.unpack("<QQ", self._read_exact(16, "the end block"))
            expected = self._digest.digest()
            if self._read_exact(4, "the end block") != expected:
                raise CorruptStreamError("chunked stream checksum mismatch: records damaged, reordered or replaced")
            if (n_records, n_elements) != (records, elements):
                raise CorruptStreamError(
                    f"end block does not match the stream: {records} records of {elements} elements read, "
                    f"{n_records} of {n_elements} recorded"
                )
            if self._in.read(1):
                raise CorruptStreamError("unexpected bytes after the end of the chunked stream")
            self._done = True
        finally:
            self._close()

    def __iter__(self):
        for k, (record, described) in enumerate(self._records()):
            try:
                chunk = self._decoder.decode(record)
            except CorruptStreamError:
                raise
            except ValueError as e:  # whatever the decoder calls it, the stream is what is wrong
                raise CorruptStreamError(f"record {k}: {e}") from None
            if list(chunk.shape) != described["shape"]:
                raise CorruptStreamError(f"record {k} decodes to shape {chunk.shape}, not the {described['shape']} it declares")
            yield chunk

    def read_all(self) -> np.ndarray:
        """All chunks joined along axis 0 (a flat sequence stays flat)."""
        chunks = list(self)
        if not chunks:
            return np.empty(0, dtype=self.dtype)
        return np.concatenate(chunks)
