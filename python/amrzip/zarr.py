"""amrzip for zarr and numcodecs.

* :class:`Codec` is a numcodecs codec (id ``"amrzip"``): the ``compressor=`` of zarr format 2
  arrays (zarr-python 2 and 3), or any numcodecs pipeline.
* :class:`Serializer` is a zarr-python 3 array-to-bytes codec (name ``"amrzip"``), the
  ``serializer=`` of zarr format 3 arrays, in place of the default ``bytes`` codec.

* :class:`AMRChunks` (name ``"amrzip.amr"``) decodes the chunks of the AMR snapshot store
  (:func:`amrzip.write`), so any zarr-python 3 reader can open a level's array of a snapshot
  (``zarr.open_array(zarr.storage.ZipStore(path, mode="r"), path="level_1")``, indexed
  ``[field, i, j, k]``): cells no box stores read as NaN (fill value), covered cells too.

They are found through package entry points (``numcodecs.codecs`` and ``zarr.codecs``), so
reading an array needs amrzip installed but not imported. Each chunk is one amrzip stream, so
``rel``, ``ratio`` and ``psnr`` apply per chunk, as in the HDF5 filter (docs/hdf5.md).
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass

import numpy as np
from numcodecs.abc import Codec as _NumcodecsCodec
from numcodecs.compat import ndarray_copy
from numcodecs.registry import register_codec

from amrzip import _core
from amrzip.codec import MODES, _bound, compress, decompress

__all__ = ["Codec", "Serializer", "AMRChunks"]

CODEC_ID = "amrzip"
_BOUND_NAMES = ("abs", "rel", "ratio", "psnr")


def _settings(abs, rel, ratio, psnr, mode):
    bound_mode, bound = _bound(abs=abs, rel=rel, ratio=ratio, psnr=psnr)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return bound_mode, bound


# Encoders kept between chunks, per (dtype, bound, mode). The chunks of one array look alike, and
# choosing the predictor by sampling costs several trial compressions of a small chunk, so with
# an absolute bound the first chunk chooses and the next reuse the choice (re-checked every few
# million elements). A new codebook per chunk keeps every chunk an ordinary amrzip stream.
# Relative, ratio and PSNR bounds are per chunk: those chunks are compressed on their own.
_ENCODERS: dict = {}
_ENCODERS_LOCK = threading.Lock()
_MAX_ENCODERS = 64


def _compress(arr: np.ndarray, bound_mode: str, bound: float, mode: str) -> bytes:
    if bound_mode != "abs" or arr.size == 0:
        return compress(arr, **{bound_mode: bound}, mode=mode)
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    key = (arr.dtype.str, bound, mode)
    with _ENCODERS_LOCK:
        encoder = _ENCODERS.get(key)
        if encoder is None:
            if len(_ENCODERS) >= _MAX_ENCODERS:
                _ENCODERS.clear()
            keep, rebuild = _core.DEFAULT_THRESHOLDS
            encoder = _ENCODERS[key] = _core.StreamEncoder(arr.dtype.name, "abs", bound, mode, None, None, "rebuild", keep, rebuild, 0)
        return encoder.encode(arr)


def _float_array(buf) -> np.ndarray:
    if not isinstance(buf, np.ndarray) or buf.dtype.newbyteorder("=") not in (np.float32, np.float64):
        what = f"{buf.dtype} array" if isinstance(buf, np.ndarray) else type(buf).__name__
        raise TypeError(f"amrzip compresses float32 and float64 arrays, got a {what}")
    # Compress in memory order: a Fortran-ordered chunk is the C-ordered transpose, and readers
    # that reshape the decoded buffer (zarr does) expect the bytes in that order.
    if buf.flags.f_contiguous and not buf.flags.c_contiguous:
        buf = buf.T
    if buf.ndim == 0 or buf.ndim > 4:
        buf = buf.reshape(-1)
    return buf


class Codec(_NumcodecsCodec):
    """numcodecs codec: ``Codec(rel=1e-4)``, with the bound as :func:`amrzip.compress` takes it
    (one of ``abs``, ``rel``, ``ratio``, ``psnr``; ``mode`` "ratio" or "speed").

    Encodes float32/float64 arrays of any shape (more than 4 dimensions are flattened) and
    decodes to an array of the same dtype, in the input's memory order.
    """

    codec_id = CODEC_ID

    def __init__(self, abs=None, rel=None, ratio=None, psnr=None, mode="ratio"):
        self.bound_mode, self.bound = _settings(abs, rel, ratio, psnr, mode)
        self.mode = mode

    def encode(self, buf):
        return _compress(_float_array(buf), self.bound_mode, self.bound, self.mode)

    def decode(self, buf, out=None):
        arr = decompress(buf if isinstance(buf, (bytes, bytearray, memoryview, np.ndarray)) else memoryview(buf))
        return arr if out is None else ndarray_copy(arr, out)

    def get_config(self):
        return {"id": self.codec_id, self.bound_mode: self.bound, "mode": self.mode}

    def __repr__(self):
        return f"amrzip.zarr.Codec({self.bound_mode}={self.bound!r}, mode={self.mode!r})"


register_codec(Codec)


try:
    from zarr.abc.codec import ArrayBytesCodec
    from zarr.registry import register_codec as _register_zarr_codec
except ImportError:  # zarr-python 2, or no zarr: only the numcodecs codec
    ArrayBytesCodec = None

if ArrayBytesCodec is not None:

    @dataclass(frozen=True)
    class Serializer(ArrayBytesCodec):
        """zarr-python 3 codec: ``zarr.create_array(..., serializer=Serializer(rel=1e-4),
        compressors=None)``. Arguments as for :class:`Codec`."""

        is_fixed_size = False

        bound_mode: str
        bound: float
        mode: str

        def __init__(self, *, abs=None, rel=None, ratio=None, psnr=None, mode="ratio"):
            bound_mode, bound = _settings(abs, rel, ratio, psnr, mode)
            object.__setattr__(self, "bound_mode", bound_mode)
            object.__setattr__(self, "bound", bound)
            object.__setattr__(self, "mode", mode)

        @classmethod
        def from_dict(cls, data):
            config = dict(data.get("configuration") or {})
            return cls(**config)

        def to_dict(self):
            return {"name": CODEC_ID, "configuration": {self.bound_mode: self.bound, "mode": self.mode}}

        def validate(self, *, shape, dtype, chunk_grid):
            native = dtype.to_native_dtype()
            if native.newbyteorder("=") not in (np.float32, np.float64):
                raise ValueError(f"amrzip compresses float32 and float64 arrays, not {native}")

        def _encode(self, chunk_array, chunk_spec):
            arr = np.ascontiguousarray(chunk_array.as_numpy_array())
            if arr.ndim == 0 or arr.ndim > 4:
                arr = arr.reshape(-1)
            data = _compress(arr, self.bound_mode, self.bound, self.mode)
            return chunk_spec.prototype.buffer.from_bytes(data)

        def _decode(self, chunk_bytes, chunk_spec):
            arr = decompress(chunk_bytes.to_bytes())
            arr = arr.astype(chunk_spec.dtype.to_native_dtype(), copy=False).reshape(chunk_spec.shape)
            return chunk_spec.prototype.nd_buffer.from_numpy_array(arr)

        # The codec releases the GIL, so chunks compress in parallel on zarr's worker threads.
        async def _encode_single(self, chunk_array, chunk_spec):
            return await asyncio.to_thread(self._encode, chunk_array, chunk_spec)

        async def _decode_single(self, chunk_bytes, chunk_spec):
            return await asyncio.to_thread(self._decode, chunk_bytes, chunk_spec)

        def compute_encoded_size(self, input_byte_length, chunk_spec):
            raise NotImplementedError("amrzip output size depends on the data")

    _register_zarr_codec(CODEC_ID, Serializer)

    @dataclass(frozen=True)
    class AMRChunks(ArrayBytesCodec):
        """zarr-python 3 codec of the AMR snapshot store's arrays (decoding only: snapshots are
        written by :func:`amrzip.write`). Its configuration, written by the store, holds each
        field's unit block, quantization bound and offset and the shared tables; in a snapshot
        file the codec sits inside the sharding codec, one chunk per field and region."""

        is_fixed_size = False
        configuration: dict

        def __init__(self, **configuration):
            object.__setattr__(self, "configuration", dict(configuration))
            object.__setattr__(self, "_decoders", {})

        def _decoder(self, dtype) -> "_core.ZarrChunkDecoder":
            # One per array type: version-1 arrays (one field) take their type from the array.
            name = np.dtype(dtype).name
            if name not in self._decoders:
                self._decoders[name] = _core.ZarrChunkDecoder(json.dumps(self.configuration), name)
            return self._decoders[name]

        @classmethod
        def from_dict(cls, data):
            return cls(**dict(data.get("configuration") or {}))

        def to_dict(self):
            return {"name": "amrzip.amr", "configuration": dict(self.configuration)}

        def validate(self, *, shape, dtype, chunk_grid):
            if dtype.to_native_dtype().newbyteorder("=") not in (np.float32, np.float64):
                raise ValueError("amrzip.amr arrays hold float32 or float64 values")

        def _encode(self, chunk_array, chunk_spec):
            raise NotImplementedError("amrzip.amr chunks are written by amrzip.write(), not through zarr")

        def _decode(self, chunk_bytes, chunk_spec):
            dtype = chunk_spec.dtype.to_native_dtype()
            shape = list(chunk_spec.shape)
            # A chunk of a snapshot file's level array spans one field: (1, x, y, z).
            spatial = shape[1:] if "version" in self.configuration else shape
            arr = self._decoder(dtype).decode(chunk_bytes.to_bytes(), spatial)
            arr = arr.astype(dtype, copy=False).reshape(shape)
            return chunk_spec.prototype.nd_buffer.from_numpy_array(arr)

        async def _decode_single(self, chunk_bytes, chunk_spec):
            return await asyncio.to_thread(self._decode, chunk_bytes, chunk_spec)

        def compute_encoded_size(self, input_byte_length, chunk_spec):
            raise NotImplementedError("amrzip output size depends on the data")

    _register_zarr_codec("amrzip.amr", AMRChunks)
