//! A snapshot's AMR metadata (docs/format.md section 15.1): geometry, levels and boxes, fields,
//! bounds. Stored in the `attributes.amrzip` of the snapshot's root `zarr.json`; version 3
//! packs each level's boxes and owners into bytes (a 2-D PeleC snapshot holds thousands of
//! boxes, whose JSON lists outweighed the compressed data of whole levels).
//!
//! Every reader of metadata goes through [`SnapshotMeta::from_json`], which accepts versions 1 to
//! 3 and checks everything a reader relies on; the writer checks what it is about to write with
//! the same [`SnapshotMeta::validate`].

use crate::error::{corrupt, Error, ErrorKind, Result};
use amrzip_amr::boxes::check_nesting;
use amrzip_amr::IBox;
use amrzip_codec::DType;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Map, Value};

/// Version 1: cell-centred; 2: node-centred data (written only then); 3: packed boxes, the
/// snapshot in one file.
pub const SNAPSHOT_VERSION: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundMode {
    Abs,
    Rel,
}

impl BoundMode {
    pub fn name(self) -> &'static str {
        match self {
            BoundMode::Abs => "abs",
            BoundMode::Rel => "rel",
        }
    }

    pub fn from_name(name: &str) -> Option<BoundMode> {
        match name {
            "abs" => Some(BoundMode::Abs),
            "rel" => Some(BoundMode::Rel),
            _ => None,
        }
    }
}

/// A field's bound as the user gave it, and the absolute bound every stored cell keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldBound {
    pub mode: BoundMode,
    pub value: f64,
    pub abs: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LevelMeta {
    /// The level's cells (always cells, also for node-centred data).
    pub domain: IBox,
    /// Refinement ratio to the next level (all 1 at the finest).
    pub ref_ratio: Vec<i64>,
    pub dx: Vec<f64>,
    pub boxes: Vec<IBox>,
    /// The rank that owned each box.
    pub owners: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotMeta {
    pub version: u64,
    pub dim: usize,
    pub node: Vec<bool>,
    pub fields: Vec<String>,
    pub dtypes: Vec<DType>,
    pub prob_lo: Vec<f64>,
    pub prob_hi: Vec<f64>,
    pub coord_sys: i64,
    pub time: f64,
    pub step: i64,
    pub levels: Vec<LevelMeta>,
    pub bounds: Vec<FieldBound>,
    /// What the reader of the original file recorded (format, path...), informative.
    pub source: Value,
}

pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

pub fn dtype_from_name(name: &str) -> Option<DType> {
    match name {
        "float32" => Some(DType::F32),
        "float64" => Some(DType::F64),
        _ => None,
    }
}

impl SnapshotMeta {
    /// The indices a level's arrays span: its cells, one more along node-centred dimensions.
    pub fn index_space(&self, level: usize) -> IBox {
        let d = &self.levels[level].domain;
        IBox::new(d.lo.clone(), d.hi.iter().zip(&self.node).map(|(&h, &n)| h + n as i64).collect())
    }

    pub fn field_index(&self, name: &str) -> Result<usize> {
        self.fields
            .iter()
            .position(|f| f == name)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no field {name:?} (fields: {})", self.fields.join(", "))))
    }

    /// Checks the geometry and fields a reader relies on; `where_` names the document.
    pub fn validate(&self, where_: &str) -> Result<()> {
        let fail = |what: String| Err(corrupt!("{where_}: {what}"));
        let dim = self.dim;
        if !(1..=3).contains(&dim) {
            return fail(format!("bad dimension {dim}"));
        }
        if self.node.len() != dim {
            return fail(format!("node flags {:?} are not {dim}-dimensional", self.node));
        }
        if self.fields.is_empty() || self.fields.iter().any(String::is_empty) {
            return fail("bad field list".into());
        }
        for (i, f) in self.fields.iter().enumerate() {
            if self.fields[..i].contains(f) {
                return fail(format!("duplicate field name {f:?}"));
            }
        }
        if self.dtypes.len() != self.fields.len() || self.bounds.len() != self.fields.len() {
            return fail("dtypes and bounds must list every field".into());
        }
        for (f, b) in self.fields.iter().zip(&self.bounds) {
            if !(b.value.is_finite() && b.value >= 0.0 && b.abs.is_finite() && b.abs >= 0.0) {
                return fail(format!("bad bound of field {f:?}"));
            }
        }
        if self.prob_lo.len() != dim || self.prob_hi.len() != dim || !self.prob_lo.iter().chain(&self.prob_hi).all(|v| v.is_finite()) {
            return fail("bad prob_lo/prob_hi".into());
        }
        if !self.time.is_finite() {
            return fail(format!("bad time {}", self.time));
        }
        if self.levels.is_empty() {
            return fail("no levels".into());
        }
        for (l, lev) in self.levels.iter().enumerate() {
            let fail = |what: String| Err(corrupt!("{where_} level {l}: {what}"));
            if lev.domain.ndim() != dim || lev.domain.is_empty() {
                return fail(format!("bad domain {:?}..{:?}", lev.domain.lo, lev.domain.hi));
            }
            // Indices stay far from overflow in every product and sum the readers form.
            if lev.domain.lo.iter().chain(&lev.domain.hi).any(|v| v.abs() > 1 << 40) || lev.domain.cells().is_none() {
                return fail("domain too large".into());
            }
            if lev.ref_ratio.len() != dim || lev.ref_ratio.iter().any(|&r| !(1..=1024).contains(&r)) {
                return fail(format!("bad ref_ratio {:?}", lev.ref_ratio));
            }
            if lev.dx.len() != dim || !lev.dx.iter().all(|v| v.is_finite()) {
                return fail("bad dx".into());
            }
            if lev.owners.len() != lev.boxes.len() {
                return fail(format!("{} owners for {} boxes", lev.owners.len(), lev.boxes.len()));
            }
            let space = self.index_space(l);
            for b in &lev.boxes {
                if b.ndim() != dim || b.is_empty() || !space.contains(b) {
                    return fail(format!("box {:?}..{:?} outside the domain {:?}..{:?}", b.lo, b.hi, lev.domain.lo, lev.domain.hi));
                }
            }
        }
        if self.levels.last().is_some_and(|l| l.ref_ratio.iter().any(|&r| r != 1)) {
            return fail("the finest level must have ref_ratio 1".into());
        }
        for l in 0..self.levels.len() - 1 {
            let (coarse, fine) = (&self.levels[l], &self.levels[l + 1]);
            if coarse.domain.refine(&coarse.ref_ratio, &vec![false; dim]) != fine.domain {
                return fail(format!("level {}'s domain is not level {l}'s refined by {:?}", l + 1, coarse.ref_ratio));
            }
        }
        let levels: Vec<(&[IBox], &[i64])> = self.levels.iter().map(|l| (&l.boxes[..], &l.ref_ratio[..])).collect();
        check_nesting(&levels, &self.node).map_err(|e| corrupt!("{where_}: {e}"))?;
        Ok(())
    }

    /// The version-3 document (`attributes.amrzip` of the snapshot's `zarr.json`).
    pub fn to_json(&self) -> Value {
        self.document(|l| {
            json!({
                "domain": [l.domain.lo, l.domain.hi],
                "ref_ratio": l.ref_ratio,
                "dx": l.dx,
                "boxes": {"count": l.boxes.len(), "packed": BASE64.encode(pack_boxes(&l.boxes, &l.owners))},
            })
        })
    }

    /// The document with each level as `level` gives it.
    fn document(&self, level: impl Fn(&LevelMeta) -> Value) -> Value {
        let levels: Vec<Value> = self.levels.iter().map(level).collect();
        let mut m = Map::new();
        m.insert("version".into(), json!(SNAPSHOT_VERSION));
        m.insert("dim".into(), json!(self.dim));
        if self.node.iter().any(|&n| n) {
            m.insert("node".into(), json!(self.node));
        }
        m.insert("fields".into(), json!(self.fields));
        m.insert("dtypes".into(), self.per_field(|i| json!(dtype_name(self.dtypes[i]))));
        m.insert("prob_lo".into(), json!(self.prob_lo));
        m.insert("prob_hi".into(), json!(self.prob_hi));
        m.insert("coord_sys".into(), json!(self.coord_sys));
        m.insert("time".into(), json!(self.time));
        m.insert("step".into(), json!(self.step));
        m.insert("levels".into(), Value::Array(levels));
        m.insert("bounds".into(), self.per_field(|i| self.bound_json(i)));
        m.insert("covered_cells".into(), json!("average-down"));
        m.insert("source".into(), self.source.clone());
        Value::Object(m)
    }

    /// The metadata as readers of every version present it: levels with their boxes as
    /// `[lo, hi]` lists and owners (what `amrzip.Dataset.meta` shows).
    pub fn to_plain_json(&self) -> Value {
        // Not through to_json(): packing the boxes again (zstd at level 19) cost ~1 ms per open.
        let mut v = self.document(|l| {
            json!({
                "boxes": l.boxes.iter().map(|b| json!([b.lo, b.hi])).collect::<Vec<_>>(),
                "owners": l.owners,
                "ref_ratio": l.ref_ratio,
                "dx": l.dx,
                "domain": [l.domain.lo, l.domain.hi],
            })
        });
        v["version"] = json!(self.version);
        v["node"] = json!(self.node);
        v
    }

    fn per_field(&self, f: impl Fn(usize) -> Value) -> Value {
        Value::Object(self.fields.iter().enumerate().map(|(i, name)| (name.clone(), f(i))).collect())
    }

    fn bound_json(&self, i: usize) -> Value {
        let b = &self.bounds[i];
        json!({"mode": b.mode.name(), "value": b.value, "abs": b.abs})
    }

    /// Reads and validates snapshot metadata of any version; `where_` names the document.
    pub fn from_json(doc: &Value, where_: &str) -> Result<SnapshotMeta> {
        let fail = |what: &str| corrupt!("{where_}: {what}");
        let m = doc.as_object().ok_or_else(|| fail("no amrzip snapshot metadata"))?;
        let version = m.get("version").and_then(Value::as_u64).ok_or_else(|| fail("no snapshot version"))?;
        if !(1..=SNAPSHOT_VERSION).contains(&version) {
            return Err(fail(&format!("unsupported snapshot version {version} (this build reads 1 to {SNAPSHOT_VERSION})")));
        }
        let dim = m.get("dim").and_then(Value::as_u64).filter(|d| (1..=3).contains(d)).ok_or_else(|| fail("bad dimension"))? as usize;
        let node = match (version, m.get("node")) {
            (1, _) | (_, None) => vec![false; dim],
            (_, Some(v)) => bools(v, dim).ok_or_else(|| fail("bad node flags"))?,
        };
        let fields: Vec<String> = m
            .get("fields")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|f| f.as_str().map(str::to_string)).collect::<Option<Vec<_>>>())
            .ok_or_else(|| fail("bad field list"))?;
        let per_field = |key: &str| -> Result<Vec<&Value>> {
            let obj = m.get(key).and_then(Value::as_object).ok_or_else(|| fail(&format!("bad {key}: not an object")))?;
            if obj.len() != fields.len() {
                return Err(fail(&format!("{key} must list every field")));
            }
            fields.iter().map(|f| obj.get(f).ok_or_else(|| fail(&format!("{key} has no entry for field {f:?}")))).collect()
        };
        let dtypes = per_field("dtypes")?
            .into_iter()
            .zip(&fields)
            .map(|(v, f)| {
                v.as_str()
                    .and_then(dtype_from_name)
                    .ok_or_else(|| fail(&format!("dtype of field {f:?} is {v}, not \"float32\" or \"float64\"")))
            })
            .collect::<Result<Vec<_>>>()?;
        let bounds = per_field("bounds")?
            .into_iter()
            .zip(&fields)
            .map(|(v, f)| {
                let bad = || fail(&format!("bad bound of field {f:?}"));
                Ok(FieldBound {
                    mode: v.get("mode").and_then(Value::as_str).and_then(BoundMode::from_name).ok_or_else(bad)?,
                    value: v.get("value").and_then(Value::as_f64).ok_or_else(bad)?,
                    abs: v.get("abs").and_then(Value::as_f64).ok_or_else(bad)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let floats = |key: &str| m.get(key).and_then(|v| f64s(v, dim)).ok_or_else(|| fail(&format!("bad {key}")));
        let int = |key: &str| match m.get(key) {
            None => Ok(0),
            Some(v) => v.as_i64().ok_or_else(|| fail(&format!("bad {key} {v}"))),
        };
        let time = match m.get("time") {
            None => 0.0,
            Some(v) => v.as_f64().ok_or_else(|| fail(&format!("bad time {v}")))?,
        };
        let levels = m
            .get("levels")
            .and_then(Value::as_array)
            .ok_or_else(|| fail("no levels"))?
            .iter()
            .enumerate()
            .map(|(l, lev)| level_from_json(lev, version, dim).map_err(|e| e.within(format!("{where_} level {l}"))))
            .collect::<Result<Vec<_>>>()?;
        let meta = SnapshotMeta {
            version,
            dim,
            node,
            fields,
            dtypes,
            prob_lo: floats("prob_lo")?,
            prob_hi: floats("prob_hi")?,
            coord_sys: int("coord_sys")?,
            time,
            step: int("step")?,
            levels,
            bounds,
            source: m.get("source").cloned().unwrap_or(Value::Null),
        };
        meta.validate(where_)?;
        Ok(meta)
    }
}

fn bools(v: &Value, n: usize) -> Option<Vec<bool>> {
    let a = v.as_array().filter(|a| a.len() == n)?;
    a.iter().map(Value::as_bool).collect()
}

fn f64s(v: &Value, n: usize) -> Option<Vec<f64>> {
    let a = v.as_array().filter(|a| a.len() == n)?;
    a.iter().map(Value::as_f64).collect()
}

fn i64s(v: &Value, n: usize) -> Option<Vec<i64>> {
    let a = v.as_array().filter(|a| a.len() == n)?;
    a.iter().map(Value::as_i64).collect()
}

fn ibox(v: &Value, dim: usize) -> Option<IBox> {
    let a = v.as_array().filter(|a| a.len() == 2)?;
    Some(IBox::new(i64s(&a[0], dim)?, i64s(&a[1], dim)?))
}

fn level_from_json(v: &Value, version: u64, dim: usize) -> Result<LevelMeta> {
    let m = v.as_object().ok_or_else(|| corrupt!("not an object"))?;
    let domain = m.get("domain").and_then(|d| ibox(d, dim)).ok_or_else(|| corrupt!("bad domain"))?;
    let ref_ratio = m.get("ref_ratio").and_then(|r| i64s(r, dim)).ok_or_else(|| corrupt!("bad ref_ratio"))?;
    let dx = m.get("dx").and_then(|d| f64s(d, dim)).ok_or_else(|| corrupt!("bad dx"))?;
    let (boxes, owners) = if version >= 3 {
        let b = m.get("boxes").and_then(Value::as_object).ok_or_else(|| corrupt!("bad box list"))?;
        let count = b.get("count").and_then(Value::as_u64).ok_or_else(|| corrupt!("bad box count"))?;
        let packed = b.get("packed").and_then(Value::as_str).ok_or_else(|| corrupt!("bad packed boxes"))?;
        let bytes = BASE64.decode(packed).map_err(|e| corrupt!("packed boxes are not valid base64 ({e})"))?;
        unpack_boxes(&bytes, count, dim)?
    } else {
        let list = m.get("boxes").and_then(Value::as_array).ok_or_else(|| corrupt!("bad box list"))?;
        let boxes = list.iter().map(|b| ibox(b, dim).ok_or_else(|| corrupt!("bad box {b}"))).collect::<Result<Vec<_>>>()?;
        let owners = m.get("owners").and_then(|o| i64s(o, boxes.len())).ok_or_else(|| corrupt!("bad owner list"))?;
        (boxes, owners)
    };
    Ok(LevelMeta { domain, ref_ratio, dx, boxes, owners })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Boxes and owners as bytes: per box, its low corner as the difference from the previous
/// box's (zigzag varints) and its extents minus one (varints); then each owner as the
/// difference from the previous one; all through zstd. AMReX lists a level's boxes in space
/// order, so the differences are small. zstd level 9: level 19 stored 4,000-box levels 6%
/// smaller (about 500 bytes) but took 6 ms against 0.6, in the serial part of every write.
pub fn pack_boxes(boxes: &[IBox], owners: &[i64]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(boxes.len() * 8);
    let mut prev: Vec<i64> = boxes.first().map(|b| vec![0; b.ndim()]).unwrap_or_default();
    for b in boxes {
        for (p, &l) in prev.iter_mut().zip(&b.lo) {
            put_varint(&mut raw, zigzag(l.wrapping_sub(*p)));
            *p = l;
        }
        for (&l, &h) in b.lo.iter().zip(&b.hi) {
            put_varint(&mut raw, (h - l) as u64);
        }
    }
    let mut last = 0i64;
    for &o in owners {
        put_varint(&mut raw, zigzag(o.wrapping_sub(last)));
        last = o;
    }
    zstd::bulk::compress(&raw, 9).expect("zstd compresses any bytes")
}

/// The boxes and owners of [`pack_boxes`], `count` boxes of `dim` dimensions, checked.
pub fn unpack_boxes(bytes: &[u8], count: u64, dim: usize) -> Result<(Vec<IBox>, Vec<i64>)> {
    // At most 10 bytes per varint, 2 * dim + 1 varints per box.
    let most =
        count.checked_mul(10 * (2 * dim as u64 + 1)).filter(|&n| n <= 1 << 34).ok_or_else(|| corrupt!("box count {count} too large"))?;
    let raw = zstd::bulk::decompress(bytes, most as usize).map_err(|e| corrupt!("packed boxes do not decompress ({e})"))?;
    let mut at = 0usize;
    let mut next = || -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *raw.get(at).ok_or_else(|| corrupt!("packed boxes end early"))?;
            at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt!("packed boxes hold a bad varint"))
    };
    let mut boxes = Vec::with_capacity(count as usize);
    let mut prev = vec![0i64; dim];
    for _ in 0..count {
        let mut lo = vec![0i64; dim];
        for (l, p) in lo.iter_mut().zip(&prev) {
            *l = p.checked_add(unzigzag(next()?)).ok_or_else(|| corrupt!("packed boxes overflow"))?;
        }
        let mut hi = vec![0i64; dim];
        for (h, l) in hi.iter_mut().zip(&lo) {
            let e = i64::try_from(next()?).map_err(|_| corrupt!("packed boxes overflow"))?;
            *h = l.checked_add(e).ok_or_else(|| corrupt!("packed boxes overflow"))?;
        }
        prev.clone_from(&lo);
        boxes.push(IBox::new(lo, hi));
    }
    let mut owners = Vec::with_capacity(count as usize);
    let mut last = 0i64;
    for _ in 0..count {
        last = last.wrapping_add(unzigzag(next()?));
        owners.push(last);
    }
    if at != raw.len() {
        return Err(corrupt!("packed boxes hold {} bytes past the last owner", raw.len() - at));
    }
    Ok((boxes, owners))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_pack_and_unpack() {
        let boxes = vec![IBox::new(vec![-8, 16, 0], vec![7, 31, 15]), IBox::new(vec![8, 0, 0], vec![23, 15, 1 << 33])];
        let owners = vec![3, -1];
        let bytes = pack_boxes(&boxes, &owners);
        assert_eq!(unpack_boxes(&bytes, 2, 3).unwrap(), (boxes, owners));
        assert!(unpack_boxes(&bytes, 3, 3).is_err());
        assert!(unpack_boxes(&bytes, 1, 3).is_err());
        assert!(unpack_boxes(&bytes[..bytes.len() - 1], 2, 3).is_err());
        assert!(unpack_boxes(b"junk", 2, 3).is_err());
    }
}
