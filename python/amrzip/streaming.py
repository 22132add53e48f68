"""Chunked streams: compress data that arrives piece by piece (or does not fit in memory) into
one stream, and read it back chunk by chunk.

The encoder keeps what it settled between chunks (the predictor chosen by sampling and the
Huffman codebook) and rebuilds only when the data drifts (see ``docs/codec.md``). The container
(``docs/format.md``, "Chunked streams") is a small header, one record per chunk (each an amrzip
stream, whose codebook may be the one in force), and an end block with counts and a digest. It
is written and read in Rust (``amrzip_store::chunked_stream``), as for C programs; this module
checks the arguments and hands numpy arrays and Python files to it.
"""

from __future__ import annotations

import os

import numpy as np

from amrzip import _core
from amrzip.codec import MODES, PREDICTORS, _bound, _threads

MAGIC = _core.CHUNKED_MAGIC
VERSION = _core.CHUNKED_VERSION
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
POLICIES = ("adaptive", "rebuild", "interval")


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
        path = file = None
        if isinstance(output, (str, os.PathLike)):
            # Written beside the target and renamed at the end: a reader never sees half a stream.
            path = os.fspath(output)
        else:
            file = output
        self._writer = _core.ChunkedWriter(
            self.dtype.name, self.chunk, bound_mode, bound, mode, _threads(threads), predictor, codebook,
            float(keep), float(rebuild), int(update_elements or 0), path, file,
        )
        self._closed = False

    @property
    def records(self) -> int:
        """Records written so far."""
        return self._writer.records

    @property
    def elements(self) -> int:
        """Elements compressed so far (those waiting for their chunk to fill not counted)."""
        return self._writer.elements

    @property
    def bytes_written(self) -> int:
        """Bytes of the stream written so far."""
        return self._writer.bytes_written

    def write(self, array) -> None:
        """Append ``array`` to the stream; full chunks are compressed and written at once."""
        if self._closed:
            raise ValueError("write() after finish()")
        arr = np.asarray(array)
        if arr.dtype.newbyteorder("=") != self.dtype:
            raise ValueError(f"this stream holds {self.dtype} values, got an array of {arr.dtype}")
        arr = arr.astype(self.dtype, copy=False)
        if len(self.chunk) > 1 and not arr.flags.c_contiguous and arr.shape[1:] == self.chunk[1:]:
            # A strided view is copied a chunk at a time, not all at once: memory stays within a
            # few chunks whatever the size of the writes.
            rows = self.chunk[0]
            for start in range(0, arr.shape[0], rows):
                self._writer.write(np.ascontiguousarray(arr[start : start + rows]))
        else:
            self._writer.write(np.ascontiguousarray(arr))

    def finish(self):
        """Compress what is left and close the stream. Returns the stream as bytes when no
        ``output`` was given, else None."""
        if self._closed:
            raise ValueError("finish() called twice")
        self._closed = True
        return self._writer.finish()

    def stats(self) -> dict:
        """The encoder's choices so far: records, codebooks kept / rebuilt / built-in, predictor
        re-selections, elements and bytes out."""
        return self._writer.stats()

    def close(self):
        """Abandon an unfinished stream (a partial file is removed)."""
        if not self._closed:
            self._closed = True
            self._writer.abandon()

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
    until iteration finished without an error. A stream is read once: by iterating, by
    :meth:`read_all`, :meth:`records` or :meth:`describe`.
    """

    def __init__(self, source, *, threads=None):
        threads = _threads(threads)
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._reader = _core.ChunkedReader.from_bytes(bytes(source), threads)
        elif isinstance(source, (str, os.PathLike)):
            self._reader = _core.ChunkedReader.open(os.fspath(source), threads)
        else:
            self._reader = _core.ChunkedReader.from_file(source, threads)
        self.dtype = np.dtype(self._reader.dtype)

    def _take(self):
        """The reader, handed out once. Let go at the end of the reading (or at its first
        error), it closes a file opened from a path."""
        if self._reader is None:
            raise ValueError("a StreamDecompressor reads its stream once")
        reader, self._reader = self._reader, None
        return reader

    def _each(self, step):
        reader = self._take()
        while (item := step(reader)) is not None:
            yield item

    def __iter__(self):
        return self._each(_core.ChunkedReader.next_chunk)

    def records(self):
        """Each record's bytes in order (an amrzip stream that :func:`amrzip.info` describes),
        checked as far as that goes without decoding: lengths, dtype, shapes that join along
        axis 0, a first record with its own codebook; after the last, the counts and digest."""
        return self._each(_core.ChunkedReader.next_record)

    def describe(self) -> dict:
        """The stream's structure from every record's header, without decoding (the container,
        the counts and the digest are checked): dtype, shape, records, chunk shape, bound, the
        records per predictor and per kind of codebook, sizes, ratio, and ``per_record``: each
        record's :func:`amrzip.info` with its ``offset`` in the stream."""
        return self._take().describe()

    def declared_counts(self) -> tuple[int, int]:
        """The records and elements the end block declares, read from the end of a seekable
        source before the stream is read (to size an output before decoding). They are checked
        against the records only when the stream is read."""
        if self._reader is None:
            raise ValueError("declared_counts() is for a stream not read yet")
        return self._reader.declared_counts()

    def read_all(self) -> np.ndarray:
        """All chunks joined along axis 0 (a flat sequence stays flat)."""
        chunks = list(self)
        if not chunks:
            return np.empty(0, dtype=self.dtype)
        return np.concatenate(chunks)
