//! amrzip-zarrs: the `amrzip.amr` codec for [zarrs](https://docs.rs/zarrs), so that Rust programs
//! read amrzip snapshot files (`<name>.zarr.zip`, docs/format.md section 15) with the zarrs Zarr
//! library as they would any Zarr v3 hierarchy.
//!
//! A snapshot file holds one array per level, `level_<L>`, over `(field, x, y, z)`: each shard a
//! zip entry, each inner chunk one field of one region coded by `amrzip.amr`. With this crate
//! linked, zarrs decodes those chunks: stored cells within the field's bound, cells no box stores
//! (and covered cells) NaN, the arrays' fill value. float32 fields of a float64 array come back as
//! their float32 values widened, exactly.
//!
//! ```no_run
//! use zarrs::array::{Array, ArraySubset};
//!
//! // The codec registers itself with zarrs when this crate is linked: naming the crate once
//! // (here through `open_snapshot`) is enough.
//! let storage = amrzip_zarrs::open_snapshot("run/plt00100.zarr.zip")?;
//! let level = Array::open(storage, "/level_1")?;
//! // Field 0 over cells [0, 64) x [0, 32) of the level's index space (from the domain's corner).
//! let rho: Vec<f64> = level.retrieve_array_subset(&ArraySubset::new_with_ranges(&[0..1, 0..64, 0..32]))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Decoding only: snapshots are written by amrzip's writer (`amrzip_store::write_snapshot`,
//! `amrzip.write` in Python, the C API), never through zarrs; encoding returns an error.
//! Every chunk is decoded by [`amrzip_store::zarr_codec::ZarrCodec`], the decoder zarr-python's
//! `amrzip.zarr.AMRChunks` uses too. Like any Zarr reader, zarrs cannot check that a chunk lies
//! where the snapshot's boxes store cells; `amrzip_store::Snapshot` and `amrzip check` do.

use amrzip_codec::DType;
use amrzip_store::layout::CODEC_NAME;
use amrzip_store::zarr_codec::{ChunkValues, ZarrCodec};
use serde_json::{Map, Value};
use std::fmt;
use std::num::NonZeroU64;
use std::path::Path;
use std::sync::Arc;
use zarrs::array::codec::api::{CodecPluginV3, PartialDecoderCapability, PartialEncoderCapability};
use zarrs::array::data_type::{Float32DataType, Float64DataType};
use zarrs::array::{
    ArrayBytes, ArrayBytesRaw, ArrayCodecTraits, ArrayToBytesCodecTraits, BytesRepresentation, Codec, CodecError, CodecMetadataOptions,
    CodecOptions, CodecTraits, CodecTraitsV3, DataType, FillValue, RecommendedConcurrency,
};
use zarrs::filesystem::{FilesystemStore, FilesystemStoreCreateError};
use zarrs::metadata::v3::MetadataV3;
use zarrs::metadata::Configuration;
use zarrs::plugin::{PluginCreateError, ZarrVersion};
use zarrs::storage::{StoreKey, StoreKeyError};
use zarrs_zip::{ZipStorageAdapter, ZipStorageAdapterCreateError};

/// Chunks larger than this are damage, not data: the store's readers refuse them too
/// (docs/format.md 15.4), and decoding one allocates all its cells.
const MAX_CHUNK_CELLS: u64 = 1 << 27;

/// The `amrzip.amr` array-to-bytes codec, as zarrs builds it from an array's metadata.
pub struct AmrCodec {
    /// As read, for zarrs' metadata round trip.
    configuration: Configuration,
    decoder: ZarrCodec,
    /// Version-1 configurations (snapshot folders: one array per level and field) take their
    /// one field's type from the array; this decoder serves their float32 arrays. `None` for
    /// version 2, whose configuration names every field's type.
    decoder_f32: Option<ZarrCodec>,
    /// Version 2: chunks span one field, `(1, x, y, z)`, behind the array's leading field axis.
    field_axis: bool,
}

zarrs::plugin::impl_extension_aliases!(AmrCodec, v3: CODEC_NAME);

// Static registration: zarrs finds the codec by name whenever this crate is linked.
inventory::submit! {
    CodecPluginV3::new::<AmrCodec>()
}

impl AmrCodec {
    /// The codec of a configuration (`codecs[..].configuration` in a level array's `zarr.json`,
    /// inside `sharding_indexed` for snapshot files). A configuration the store's readers would
    /// refuse is an error.
    pub fn new(configuration: Map<String, Value>) -> Result<AmrCodec, amrzip_store::Error> {
        let value = Value::Object(configuration.clone());
        let decoder = ZarrCodec::new(&value, DType::F64)?;
        // ZarrCodec accepted it, so a version is 2 and its absence is version 1.
        let field_axis = configuration.contains_key("version");
        let decoder_f32 = if field_axis { None } else { Some(ZarrCodec::new(&value, DType::F32)?) };
        Ok(AmrCodec { configuration: configuration.into(), decoder, decoder_f32, field_axis })
    }
}

impl fmt::Debug for AmrCodec {
    // The configuration holds every shared table in base64: too long to print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmrCodec").field("version", &self.configuration.get("version")).finish_non_exhaustive()
    }
}

impl CodecTraitsV3 for AmrCodec {
    fn create(metadata: &MetadataV3) -> Result<Codec, PluginCreateError> {
        let configuration: Map<String, Value> = metadata.to_typed_configuration()?;
        let codec = AmrCodec::new(configuration).map_err(|e| PluginCreateError::Other(e.message))?;
        Ok(Codec::ArrayToBytes(Arc::new(codec)))
    }
}

impl CodecTraits for AmrCodec {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn configuration(&self, _version: ZarrVersion, _options: &CodecMetadataOptions) -> Option<Configuration> {
        Some(self.configuration.clone())
    }

    fn partial_decoder_capability(&self) -> PartialDecoderCapability {
        // A chunk is one block set: read and decoded whole.
        PartialDecoderCapability { partial_read: false, partial_decode: false }
    }

    fn partial_encoder_capability(&self) -> PartialEncoderCapability {
        PartialEncoderCapability { partial_encode: false }
    }
}

impl ArrayCodecTraits for AmrCodec {
    fn recommended_concurrency(&self, _shape: &[NonZeroU64], _data_type: &DataType) -> Result<RecommendedConcurrency, CodecError> {
        // One chunk decodes on one thread; zarrs decodes the chunks of a read in parallel.
        Ok(RecommendedConcurrency::new_maximum(1))
    }
}

fn array_dtype(data_type: &DataType) -> Result<DType, CodecError> {
    if data_type.is::<Float64DataType>() {
        Ok(DType::F64)
    } else if data_type.is::<Float32DataType>() {
        Ok(DType::F32)
    } else {
        Err(CodecError::UnsupportedDataType(data_type.clone(), CODEC_NAME.to_string()))
    }
}

/// Native-endian bytes, as zarrs holds decoded chunks.
fn to_bytes<T: Copy, const N: usize>(values: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * N);
    for &v in values {
        out.extend_from_slice(&bytes(v));
    }
    out
}

impl ArrayToBytesCodecTraits for AmrCodec {
    fn into_dyn(self: Arc<Self>) -> Arc<dyn ArrayToBytesCodecTraits> {
        self
    }

    fn encoded_representation(
        &self,
        _shape: &[NonZeroU64],
        data_type: &DataType,
        _fill: &FillValue,
    ) -> Result<BytesRepresentation, CodecError> {
        array_dtype(data_type)?;
        Ok(BytesRepresentation::UnboundedSize)
    }

    fn encode<'a>(
        &self,
        _bytes: ArrayBytes<'a>,
        _shape: &[NonZeroU64],
        _data_type: &DataType,
        _fill: &FillValue,
        _options: &CodecOptions,
    ) -> Result<ArrayBytesRaw<'a>, CodecError> {
        Err(CodecError::Other(format!(
            "{CODEC_NAME} chunks are written by amrzip's snapshot writer (amrzip_store::write_snapshot, amrzip.write in Python, \
             the C API), not through zarrs"
        )))
    }

    fn decode<'a>(
        &self,
        bytes: ArrayBytesRaw<'a>,
        shape: &[NonZeroU64],
        data_type: &DataType,
        _fill: &FillValue,
        _options: &CodecOptions,
    ) -> Result<ArrayBytes<'a>, CodecError> {
        let dtype = array_dtype(data_type)?;
        let spatial = match (self.field_axis, shape) {
            (true, [one, rest @ ..]) if one.get() == 1 => rest,
            (true, _) => return Err(CodecError::Other(format!("{CODEC_NAME}: chunk shape {shape:?} does not span one field"))),
            (false, _) => shape,
        };
        let cells = spatial.iter().try_fold(1u64, |n, d| n.checked_mul(d.get())).filter(|&n| n <= MAX_CHUNK_CELLS);
        if cells.is_none() {
            return Err(CodecError::Other(format!("{CODEC_NAME}: chunk shape {shape:?} is too large")));
        }
        let spatial: Vec<usize> = spatial.iter().map(|d| d.get() as usize).collect();
        let decoder = match (dtype, &self.decoder_f32) {
            (DType::F32, Some(d)) => d,
            _ => &self.decoder,
        };
        // Named after the codec, as zarrs reports errors without saying which codec failed.
        let values = decoder.decode(&bytes, &spatial).map_err(|e| {
            CodecError::Other(if e.message.starts_with(CODEC_NAME) { e.message } else { format!("{CODEC_NAME} chunk: {}", e.message) })
        })?;
        let out = match (values, dtype) {
            (ChunkValues::F64(v), DType::F64) => to_bytes(&v, f64::to_ne_bytes),
            (ChunkValues::F32(v), DType::F64) => to_bytes(&v, |x| f64::from(x).to_ne_bytes()),
            (ChunkValues::F32(v), DType::F32) => to_bytes(&v, f32::to_ne_bytes),
            (ChunkValues::F64(_), DType::F32) => {
                return Err(CodecError::Other(format!("{CODEC_NAME}: a float64 field's chunk in a float32 array")));
            }
        };
        Ok(ArrayBytes::new_flen(out))
    }
}

/// What [`open_snapshot`] can fail with.
#[derive(Debug)]
pub enum OpenError {
    /// The path has no file name, or one that is no Zarr store key.
    Path(String),
    Filesystem(FilesystemStoreCreateError),
    Key(StoreKeyError),
    /// Refused by the store's own zip reader: damaged, or not a snapshot file.
    Archive(amrzip_store::Error),
    /// Not a readable zip archive.
    Zip(ZipStorageAdapterCreateError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Path(m) => f.write_str(m),
            OpenError::Filesystem(e) => e.fmt(f),
            OpenError::Key(e) => e.fmt(f),
            OpenError::Archive(e) => e.fmt(f),
            OpenError::Zip(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {}

/// A snapshot file as zarrs storage.
pub type SnapshotStorage = ZipStorageAdapter<FilesystemStore>;

/// Opens a snapshot file (`STORE/<name>.zarr.zip`) as read-only zarrs storage whose root is the
/// snapshot's group: its arrays are `/level_0`, `/level_1`, ... This is
/// `ZipStorageAdapter::new(FilesystemStore::new(folder), file name)`, spelled out once; a path
/// that names no zip file is an error. The file's zip records are first read by the store's own
/// zip reader: on some damaged central directories rc-zip 5.4 (under zarrs_zip) never returns,
/// so a file that reader refuses is an error here rather than a hang; and an entry whose name
/// differs between the central directory and its local header (a shard moved to another key,
/// which zarrs cannot tell) is an error too.
pub fn open_snapshot(path: impl AsRef<Path>) -> Result<Arc<SnapshotStorage>, OpenError> {
    let path = path.as_ref();
    let bad = || OpenError::Path(format!("{}: not a snapshot file path", path.display()));
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(bad)?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    amrzip_store::archive::Archive::open(path).and_then(|a| a.check_local_names()).map_err(OpenError::Archive)?;
    let files = Arc::new(FilesystemStore::new(folder).map_err(OpenError::Filesystem)?);
    let key = StoreKey::new(name).map_err(OpenError::Key)?;
    Ok(Arc::new(ZipStorageAdapter::new(files, key).map_err(OpenError::Zip)?))
}
