//! The `amrzip.amr` codec as a Zarr implementation sees it: one chunk decoded from the codec's
//! configuration alone (no store, no chunk position), for zarr-python (`amrzip.zarr.AMRChunks`)
//! and other Zarr readers. Snapshot readers go through `reader`, which also checks where a
//! chunk belongs.

use crate::array::{apply_offset, CODEC_VERSION};
use crate::error::{corrupt, Error, Result};
use crate::metadata::dtype_from_name;
use crate::shard;
use amrzip_amr::unit_blocks::scatter;
use amrzip_amr::{decode_blocks, SharedTables, Tiling};
use amrzip_codec::{blockset, DType, Element};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::Value;

/// A decoded chunk in its field's type.
pub enum ChunkValues {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// How one field's chunks decode.
struct FieldDecoding {
    dtype: DType,
    unit: Vec<usize>,
    eb: f64,
    offset: f64,
    tables: std::ops::Range<usize>,
}

/// Parsed once per array: what decoding its chunks needs.
pub struct ZarrCodec {
    tables: SharedTables,
    fields: Vec<FieldDecoding>,
    /// Chunks start with their position (configuration version 2).
    positioned: bool,
}

fn usizes(v: Option<&Value>) -> Option<Vec<usize>> {
    v?.as_array()?.iter().map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok())).collect()
}

fn tables(v: Option<&Value>) -> Result<Vec<Vec<u8>>> {
    let list = v.and_then(Value::as_array).ok_or_else(|| corrupt!("amrzip.amr codec: no tables"))?;
    list.iter()
        .map(|t| t.as_str().and_then(|s| BASE64.decode(s).ok()).ok_or_else(|| corrupt!("amrzip.amr codec: a table is not valid base64")))
        .collect()
}

impl ZarrCodec {
    /// From the codec's configuration (`codecs[..].configuration` of an array's zarr.json);
    /// `dtype` is the array's, used by version-1 configurations (one field).
    pub fn new(config: &Value, dtype: DType) -> Result<ZarrCodec> {
        let bad = |what: &str| corrupt!("amrzip.amr codec configuration: {what}");
        let num = |v: Option<&Value>, what: &str| v.and_then(Value::as_f64).filter(|x| x.is_finite()).ok_or_else(|| bad(what));
        match config.get("version").and_then(Value::as_u64) {
            Some(CODEC_VERSION) => {
                let tables = tables(config.get("tables"))?;
                let list = config.get("fields").and_then(Value::as_array).ok_or_else(|| bad("no fields"))?;
                let fields = list
                    .iter()
                    .map(|f| {
                        let dtype = f.get("dtype").and_then(Value::as_str).and_then(dtype_from_name).ok_or_else(|| bad("bad dtype"))?;
                        let unit = usizes(f.get("unit")).filter(|u| u.iter().all(|&x| x >= 1)).ok_or_else(|| bad("bad unit"))?;
                        let t = usizes(f.get("tables")).filter(|t| t.len() == 2).ok_or_else(|| bad("bad table range"))?;
                        if t[0].checked_add(t[1]).is_none_or(|end| end > tables.len()) {
                            return Err(bad("table range beyond the tables"));
                        }
                        Ok(FieldDecoding {
                            dtype,
                            unit,
                            eb: num(f.get("eb"), "bad eb")?,
                            offset: num(f.get("offset"), "bad offset")?,
                            tables: t[0]..t[0] + t[1],
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(ZarrCodec { tables: SharedTables::new(tables), fields, positioned: true })
            }
            None => {
                let tables = tables(config.get("codebooks"))?;
                let unit = usizes(config.get("unit")).filter(|u| u.iter().all(|&x| x >= 1)).ok_or_else(|| bad("bad unit"))?;
                let offset = if config.get("offset").is_none() { 0.0 } else { num(config.get("offset"), "bad offset")? };
                let n = tables.len();
                let field = FieldDecoding { dtype, unit, eb: num(config.get("eb"), "bad eb")?, offset, tables: 0..n };
                Ok(ZarrCodec { tables: SharedTables::new(tables), fields: vec![field], positioned: false })
            }
            Some(v) => Err(bad(&format!("unsupported version {v}"))),
        }
    }

    /// Decodes a chunk of spatial shape `chunk` (C order; cells it does not store are NaN).
    pub fn decode(&self, bytes: &[u8], chunk: &[usize]) -> Result<ChunkValues> {
        let set = if self.positioned {
            // The position is checked by snapshot readers; a Zarr reader cannot tell it.
            let (_, len) = shard::tag(bytes).ok_or_else(|| corrupt!("amrzip.amr chunk: no position tag"))?;
            &bytes[len..]
        } else {
            bytes
        };
        let book = blockset::info(set)?.codebook_index as usize;
        let f = self
            .fields
            .iter()
            .find(|f| f.tables.contains(&book))
            .ok_or_else(|| corrupt!("amrzip.amr chunk: codes with tables {book}, which no field has"))?;
        if f.unit.len() != chunk.len() {
            return Err(corrupt!("amrzip.amr chunk: unit {:?} does not fit chunk shape {chunk:?}", f.unit));
        }
        let tiling = Tiling::new(vec![0; chunk.len()], f.unit.clone(), chunk.to_vec()).map_err(|e| corrupt!("amrzip.amr chunk: {e}"))?;
        Ok(match f.dtype {
            DType::F32 => ChunkValues::F32(self.decode_as(set, &tiling, f.eb, f.offset)?),
            DType::F64 => ChunkValues::F64(self.decode_as(set, &tiling, f.eb, f.offset)?),
        })
    }

    fn decode_as<T: Element>(&self, set: &[u8], tiling: &Tiling, eb: f64, offset: f64) -> Result<Vec<T>> {
        let index = vec![0i64; tiling.ndim()];
        let blocks = decode_blocks::<T>(&index, set, &self.tables, tiling, eb).map_err(Error::from)?;
        let hi: Vec<i64> = tiling.chunk.iter().map(|&c| c as i64 - 1).collect();
        let mut out = vec![T::from_f64(f64::NAN); tiling.chunk.iter().product()];
        scatter(&blocks, &index, tiling, &index, &hi, &mut out);
        apply_offset(&mut out, offset);
        Ok(out)
    }
}
