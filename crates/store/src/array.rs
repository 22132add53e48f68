//! The Zarr v3 metadata (`zarr.json`) of a level's array and its `amrzip.amr` codec
//! (docs/format.md section 15.3), written and read with zarrs' metadata types.
//!
//! Version-2 snapshots (one file) hold one array per level over `(field, x, y, z)`, sharded;
//! the codec's configuration lists every field's quantization bound, unit block and shared
//! tables, and a chunk's codebook index picks its field's tables. Version-1 snapshots (folders)
//! hold one array per (level, field), read here too.

use crate::error::{corrupt, Result};
use crate::layout::CODEC_NAME;
use crate::metadata::{dtype_from_name, dtype_name};
use amrzip_codec::DType;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::num::NonZeroU64;
use std::ops::Range;
use zarrs_metadata::v3::{ArrayMetadataV3, GroupMetadataV3, MetadataV3};
use zarrs_metadata_ext::codec::sharding::{ShardingCodecConfigurationV1, ShardingIndexLocation};

/// Version of the `amrzip.amr` codec configuration whose chunks carry their position and
/// whose fields share one array.
pub const CODEC_VERSION: u64 = 2;

/// How one field of a level is coded.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldCodec {
    pub dtype: DType,
    pub unit: Vec<usize>,
    /// The field's bound, and the smaller one its chunks were quantized with (when the level's
    /// mean is kept by an offset).
    pub abs_bound: f64,
    pub eb: f64,
    /// Added to every decoded value (at most `abs_bound - eb` in magnitude).
    pub offset: f64,
    /// Informative.
    pub predictor: String,
    /// Which of the array's shared tables the field's chunks use.
    pub tables: Range<usize>,
}

/// Adds a field's `offset` to decoded values (in their own type: through float64 the sum rounds
/// as float32's own would, double rounding being harmless for a sum).
pub fn apply_offset<T: amrzip_codec::Element>(values: &mut [T], offset: f64) {
    if offset != 0.0 {
        let offset = T::from_f64(offset).to_f64();
        values.iter_mut().for_each(|v| *v = T::from_f64(v.to_f64() + offset));
    }
}

/// Statistics of one (level, field), informative; stored as a row of six numbers in this order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldStats {
    pub stored_cells: u64,
    pub blocks: u64,
    pub partial_blocks: u64,
    pub chunks: u64,
    pub original_bytes: u64,
    /// Its chunks and shared tables.
    pub stored_bytes: u64,
}

impl FieldStats {
    fn row(&self) -> [u64; 6] {
        [self.stored_cells, self.blocks, self.partial_blocks, self.chunks, self.original_bytes, self.stored_bytes]
    }

    fn from_row(v: &Value) -> Option<FieldStats> {
        let r: Vec<u64> = v.as_array()?.iter().map(Value::as_u64).collect::<Option<_>>()?;
        let [stored_cells, blocks, partial_blocks, chunks, original_bytes, stored_bytes] = r.try_into().ok()?;
        Some(FieldStats { stored_cells, blocks, partial_blocks, chunks, original_bytes, stored_bytes })
    }
}

/// A level's array.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelArray {
    pub fields: Vec<FieldCodec>,
    pub tables: Vec<Vec<u8>>,
    /// Spatial chunk shape in cells.
    pub chunk: Vec<usize>,
    /// Chunks per shard along each spatial dimension.
    pub shard: Vec<usize>,
    pub stats: Vec<FieldStats>,
}

/// The array's element type: float64 if any field is (float32 fields are decoded in float32
/// and widened exactly).
pub fn widest(dtypes: impl IntoIterator<Item = DType>) -> DType {
    if dtypes.into_iter().any(|d| d == DType::F64) {
        DType::F64
    } else {
        DType::F32
    }
}

fn nonzero(v: &[usize]) -> Vec<NonZeroU64> {
    v.iter().map(|&n| NonZeroU64::new(n as u64).expect("shapes are positive")).collect()
}

fn usizes(v: Option<&Value>, n: usize) -> Option<Vec<usize>> {
    let a = v?.as_array().filter(|a| a.len() == n)?;
    a.iter().map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok())).collect()
}

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|x| x.is_finite())
}

/// Checks a field's bound, quantization bound and offset.
fn check_bounds(abs_bound: f64, eb: f64, offset: f64) -> std::result::Result<(), String> {
    if !(abs_bound >= 0.0) {
        return Err(format!("bad abs_bound {abs_bound}"));
    }
    if !(0.0 <= eb && eb <= abs_bound) {
        return Err(format!("bad quantization bound eb {eb}"));
    }
    if !(offset.abs() <= abs_bound - eb) {
        return Err(format!("bad offset {offset}"));
    }
    Ok(())
}

/// Readers allocate a chunk's cells and its index: shapes beyond these are damage, not data.
const MAX_CHUNK_CELLS: usize = 1 << 27;
const MAX_SHARD_CHUNKS: usize = 1 << 24;

fn check_sizes(chunk: &[usize]) -> std::result::Result<(), String> {
    match chunk.iter().try_fold(1usize, |a, &c| a.checked_mul(c)) {
        Some(n) if n <= MAX_CHUNK_CELLS => Ok(()),
        _ => Err(format!("chunk shape {chunk:?} is too large")),
    }
}

fn check_unit(unit: &[usize], chunk: &[usize]) -> std::result::Result<(), String> {
    if unit.iter().zip(chunk).all(|(&u, &c)| u >= 1 && c % u == 0) {
        Ok(())
    } else {
        Err(format!("unit block {unit:?} does not tile the chunk {chunk:?}"))
    }
}

impl LevelArray {
    /// The array's `zarr.json` over `space` (the level's index space shape).
    pub fn to_zarr_json(&self, space: &[usize], names: &[String]) -> Vec<u8> {
        let nf = self.fields.len();
        let mut shape = vec![nf as u64];
        shape.extend(space.iter().map(|&n| n as u64));
        let mut outer = vec![nf];
        outer.extend(self.chunk.iter().zip(&self.shard).map(|(c, m)| c * m));
        let mut inner = vec![1];
        inner.extend(&self.chunk);
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|f| {
                json!({
                    "dtype": dtype_name(f.dtype), "unit": f.unit, "eb": f.eb, "offset": f.offset,
                    "predictor": f.predictor, "tables": [f.tables.start, f.tables.end - f.tables.start],
                })
            })
            .collect();
        let tables: Vec<String> = self.tables.iter().map(|t| BASE64.encode(t)).collect();
        let mut config = Map::new();
        config.insert("version".into(), json!(CODEC_VERSION));
        config.insert("tables".into(), json!(tables));
        config.insert("fields".into(), Value::Array(fields));
        let sharding = ShardingCodecConfigurationV1 {
            chunk_shape: nonzero(&inner),
            codecs: vec![MetadataV3::new_with_configuration(CODEC_NAME, config)],
            index_codecs: vec![
                MetadataV3::new_with_configuration("bytes", json!({"endian": "little"}).as_object().unwrap().clone()),
                // As an object: zarr-python reads index codecs only in that form.
                MetadataV3::new_with_configuration("crc32c", Map::new()),
            ],
            index_location: ShardingIndexLocation::End,
        };
        let sharding = MetadataV3::new_with_serializable_configuration("sharding_indexed".to_string(), &sharding).expect("JSON");
        let grid = MetadataV3::new_with_configuration("regular", json!({"chunk_shape": outer}).as_object().unwrap().clone());
        let mut attrs = Map::new();
        let rows: Vec<[u64; 6]> = self.stats.iter().map(FieldStats::row).collect();
        attrs.insert("amrzip".into(), json!({"fields": names, "stats": rows}));
        let dims: Vec<&str> = ["field", "x", "y", "z"][..=space.len()].to_vec();
        let meta = ArrayMetadataV3::new(
            shape,
            grid,
            MetadataV3::new(dtype_name(widest(self.fields.iter().map(|f| f.dtype)))),
            "NaN".into(),
            vec![sharding],
        )
        .with_attributes(attrs)
        .with_dimension_names(Some(dims));
        serde_json::to_vec(&meta).expect("JSON")
    }

    /// Reads and checks a level array's `zarr.json` against the snapshot: `dtypes` and
    /// `bounds` (absolute) of its fields, `space` the level's index space shape.
    pub fn from_zarr_json(bytes: &[u8], where_: &str, dtypes: &[DType], bounds: &[f64], space: &[usize]) -> Result<LevelArray> {
        let bad = |what: String| corrupt!("{where_}: {what}");
        let meta: ArrayMetadataV3 = serde_json::from_slice(bytes).map_err(|e| bad(format!("not Zarr v3 array metadata ({e})")))?;
        let nf = dtypes.len();
        let dims = space.len();
        let mut shape = vec![nf as u64];
        shape.extend(space.iter().map(|&n| n as u64));
        if meta.shape != shape {
            return Err(bad(format!("shape {:?} differs from the level's fields and index space {shape:?}", meta.shape)));
        }
        let want_type = dtype_name(widest(dtypes.iter().copied()));
        if meta.data_type.name() != want_type {
            return Err(bad(format!("data type {} is not {want_type}", meta.data_type.name())));
        }
        let outer = meta
            .chunk_grid
            .to_configuration::<Map<String, Value>>()
            .ok()
            .filter(|_| meta.chunk_grid.name() == "regular")
            .and_then(|c| usizes(c.get("chunk_shape"), dims + 1))
            .ok_or_else(|| bad("bad chunk grid".into()))?;
        let [codec] = meta.codecs.as_slice() else {
            return Err(bad("not stored with the sharding codec alone".into()));
        };
        if codec.name() != "sharding_indexed" {
            return Err(bad(format!("not stored with the sharding codec ({})", codec.name())));
        }
        let sharding: ShardingCodecConfigurationV1 =
            codec.to_configuration().map_err(|e| bad(format!("bad sharding configuration ({e})")))?;
        let index_ok = sharding.index_location == ShardingIndexLocation::End
            && sharding.index_codecs.len() == 2
            && sharding.index_codecs[0].name() == "bytes"
            && sharding.index_codecs[1].name() == "crc32c";
        if !index_ok {
            return Err(bad("the shard index must be little-endian with a CRC-32C, at the end".into()));
        }
        let inner: Vec<usize> = sharding.chunk_shape.iter().map(|n| n.get() as usize).collect();
        if inner.len() != dims + 1 || inner[0] != 1 || inner[1..].iter().any(|&c| c > 1 << 20) {
            return Err(bad(format!("bad inner chunk shape {inner:?}")));
        }
        let chunk = inner[1..].to_vec();
        if outer[0] != nf || outer[1..].iter().zip(&chunk).any(|(&o, &c)| o == 0 || o % c != 0 || o / c > 1 << 16) {
            return Err(bad(format!("shard shape {outer:?} is not a whole number of chunks {inner:?} with every field")));
        }
        let shard: Vec<usize> = outer[1..].iter().zip(&chunk).map(|(o, c)| o / c).collect();
        check_sizes(&chunk).map_err(&bad)?;
        if shard.iter().try_fold(nf, |a, &m| a.checked_mul(m)).is_none_or(|n| n > MAX_SHARD_CHUNKS) {
            return Err(bad(format!("shards of {shard:?} chunks per field are too large")));
        }
        let [amr] = sharding.codecs.as_slice() else {
            return Err(bad("shards must hold chunks of the amrzip.amr codec alone".into()));
        };
        if amr.name() != CODEC_NAME {
            return Err(bad(format!("not stored with the {CODEC_NAME} codec")));
        }
        let cfg: Map<String, Value> = amr.to_configuration().map_err(|_| bad("codec configuration missing".into()))?;
        if cfg.get("version").and_then(Value::as_u64) != Some(CODEC_VERSION) {
            return Err(bad(format!("unsupported {CODEC_NAME} codec version {:?}", cfg.get("version"))));
        }
        let tables = cfg
            .get("tables")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("bad table list".into()))?
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let s = t.as_str().ok_or_else(|| bad(format!("table {k} is not a string")))?;
                BASE64.decode(s).map_err(|e| bad(format!("table {k} is not valid base64 ({e})")))
            })
            .collect::<Result<Vec<_>>>()?;
        let field_list = cfg.get("fields").and_then(Value::as_array).filter(|a| a.len() == nf);
        let field_list = field_list.ok_or_else(|| bad(format!("the codec must describe all {nf} fields")))?;
        let mut fields = Vec::with_capacity(nf);
        for (i, ((f, &dtype), &abs_bound)) in field_list.iter().zip(dtypes).zip(bounds).enumerate() {
            let bad = |what: String| bad(format!("field {i}: {what}"));
            if f.get("dtype").and_then(Value::as_str).and_then(dtype_from_name) != Some(dtype) {
                return Err(bad(format!("dtype differs from the snapshot's {}", dtype_name(dtype))));
            }
            let unit = usizes(f.get("unit"), dims).ok_or_else(|| bad("bad unit".into()))?;
            check_unit(&unit, &chunk).map_err(&bad)?;
            let eb = number(f.get("eb")).ok_or_else(|| bad("bad quantization bound eb".into()))?;
            let offset = number(f.get("offset")).ok_or_else(|| bad("bad offset".into()))?;
            check_bounds(abs_bound, eb, offset).map_err(&bad)?;
            let t = usizes(f.get("tables"), 2).ok_or_else(|| bad("bad table range".into()))?;
            if t[0].checked_add(t[1]).is_none_or(|end| end > tables.len()) {
                return Err(bad(format!("tables {}..+{} beyond the {} stored", t[0], t[1], tables.len())));
            }
            let predictor = f.get("predictor").and_then(Value::as_str).unwrap_or("").to_string();
            fields.push(FieldCodec { dtype, unit, abs_bound, eb, offset, predictor, tables: t[0]..t[0] + t[1] });
        }
        let stats = meta
            .attributes
            .get("amrzip")
            .and_then(|a| a.get("stats"))
            .and_then(Value::as_array)
            .map(|rows| rows.iter().map(|r| FieldStats::from_row(r).unwrap_or_default()).collect())
            .unwrap_or_else(|| vec![FieldStats::default(); nf]);
        Ok(LevelArray { fields, tables, chunk, shard, stats })
    }
}

/// A (level, field) array of a version-1 snapshot folder.
#[derive(Clone, Debug, PartialEq)]
pub struct FolderArray {
    pub codec: FieldCodec,
    pub chunk: Vec<usize>,
    pub tables: Vec<Vec<u8>>,
    pub stats: FieldStats,
}

impl FolderArray {
    /// Reads and checks a version-1 array's `zarr.json` against its level: `domain_lo` the
    /// level domain's corner (the codec's origin), `space` its index space shape.
    pub fn from_zarr_json(bytes: &[u8], where_: &str, dtype: DType, domain_lo: &[i64], space: &[usize]) -> Result<FolderArray> {
        let bad = |what: String| corrupt!("{where_}: {what}");
        let meta: ArrayMetadataV3 = serde_json::from_slice(bytes).map_err(|e| bad(format!("not Zarr v3 array metadata ({e})")))?;
        let dims = space.len();
        if meta.shape != space.iter().map(|&n| n as u64).collect::<Vec<_>>() {
            return Err(bad(format!("shape {:?} differs from the level's domain {space:?}", meta.shape)));
        }
        if meta.data_type.name() != dtype_name(dtype) {
            return Err(bad(format!("data type {} differs from the snapshot's {}", meta.data_type.name(), dtype_name(dtype))));
        }
        let chunk = meta
            .chunk_grid
            .to_configuration::<Map<String, Value>>()
            .ok()
            .and_then(|c| usizes(c.get("chunk_shape"), dims))
            .filter(|c| c.iter().all(|&n| (1..=1 << 20).contains(&n)))
            .ok_or_else(|| bad("bad chunk shape".into()))?;
        check_sizes(&chunk).map_err(&bad)?;
        let [amr] = meta.codecs.as_slice() else {
            return Err(bad(format!("not stored with the {CODEC_NAME} codec")));
        };
        let cfg: Map<String, Value> = amr
            .to_configuration()
            .ok()
            .filter(|_| amr.name() == CODEC_NAME)
            .ok_or_else(|| bad(format!("not stored with the {CODEC_NAME} codec")))?;
        let unit = usizes(cfg.get("unit"), dims).ok_or_else(|| bad("bad unit".into()))?;
        check_unit(&unit, &chunk).map_err(&bad)?;
        let origin = cfg.get("origin").and_then(Value::as_array).map(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<_>>>());
        if origin != Some(Some(domain_lo.to_vec())) {
            return Err(bad(format!("origin {:?} is not the level domain's corner {domain_lo:?}", cfg.get("origin"))));
        }
        let abs_bound = number(cfg.get("abs_bound")).ok_or_else(|| bad("bad abs_bound".into()))?;
        let eb = number(cfg.get("eb")).ok_or_else(|| bad("bad quantization bound eb".into()))?;
        let offset = match cfg.get("offset") {
            None => 0.0,
            v => number(v).ok_or_else(|| bad("bad offset".into()))?,
        };
        check_bounds(abs_bound, eb, offset).map_err(&bad)?;
        let tables = cfg
            .get("codebooks")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("bad codebook list".into()))?
            .iter()
            .map(|t| t.as_str().and_then(|s| BASE64.decode(s).ok()).ok_or_else(|| bad("codebook is not valid base64".into())))
            .collect::<Result<Vec<_>>>()?;
        let predictor = cfg.get("predictor").and_then(Value::as_str).unwrap_or("").to_string();
        let stats = meta.attributes.get("amrzip").map(|s| FieldStats {
            stored_cells: s.get("stored_cells").and_then(Value::as_u64).unwrap_or(0),
            blocks: s.get("blocks").and_then(Value::as_u64).unwrap_or(0),
            partial_blocks: s.get("partial_blocks").and_then(Value::as_u64).unwrap_or(0),
            chunks: s.get("chunks").and_then(Value::as_u64).unwrap_or(0),
            original_bytes: s.get("original_bytes").and_then(Value::as_u64).unwrap_or(0),
            stored_bytes: s.get("stored_bytes").and_then(Value::as_u64).unwrap_or(0),
        });
        let n = tables.len();
        Ok(FolderArray {
            codec: FieldCodec { dtype, unit, abs_bound, eb, offset, predictor, tables: 0..n },
            chunk,
            tables,
            stats: stats.unwrap_or_default(),
        })
    }
}

/// A Zarr v3 group document with amrzip's attributes.
pub fn group_json(amrzip: Value) -> Vec<u8> {
    let mut attrs = Map::new();
    attrs.insert("amrzip".into(), amrzip);
    serde_json::to_vec(&GroupMetadataV3::new().with_attributes(attrs)).expect("JSON")
}

/// The `attributes.amrzip` of a Zarr v3 group document.
pub fn group_attributes(bytes: &[u8], where_: &str) -> Result<Value> {
    let meta: GroupMetadataV3 = serde_json::from_slice(bytes).map_err(|e| corrupt!("{where_}: not a Zarr v3 group ({e})"))?;
    meta.attributes.get("amrzip").cloned().ok_or_else(|| corrupt!("{where_}: no amrzip snapshot metadata"))
}
