//! Multiresolution snapshots: arrays in HZ order, compressed level by level (docs/format.md
//! section 17, docs/multires.md).
//!
//! A snapshot file of the store holding one HZ array per field: `fields/<i>/hz.index` (geometry,
//! bound, resolution map, codebooks, block table) and `fields/<i>/hz.data` (block payloads,
//! coarse levels first). A read at a reduced resolution reads a prefix of the data; a region read reads
//! the blocks its region (grown by what interpolation needs) meets; a progressive read keeps
//! what it decoded and reads only the blocks a finer step adds.
//!
//! AMR hierarchies are coalesced into one index space, the finest level's (PIDX's Store2):
//! each point takes its value from the finest level holding it, and each part of the space keeps
//! the HZ levels its finest AMR level resolves. Reads fill what is not stored from the nearest
//! coarser stored point, which for AMR data is the value of the cell covering it.

use crate::archive::{Archive, ArchiveWriter};
use crate::error::{corrupt, invalid, Error, ErrorKind, Result};
use crate::metadata::{dtype_from_name, dtype_name};
use crate::store::{SnapshotEntry, SnapshotKind, Store};
pub use crate::variables::Bound;
use crate::writer::{on_pool, BoxSource, SnapshotSpec, Values};
use amrzip_amr::Layout;
use amrzip_codec::{finite_range, DType, Element};
use amrzip_hz::geometry::AXES;
use amrzip_hz::{choose_order, encode, Geometry, Index, Reader, ResolutionMap};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

pub const KIND: &str = "multires";
/// Version 5 indexes store a block's symbols in snake order; version 4 indexes choose a spline
/// per level, store a block's symbols densest axis last and a block of zero residuals as its
/// table entry alone;
/// version 3 added the axis order and anchoring, version 2 codes each level's one-sided points
/// apart (docs/format.md 17); snapshots of every earlier version are still read.
pub const VERSION: u64 = 5;
const OLDEST_VERSION: u64 = 1;
/// IDX blocks of 2^15 points (128 KiB of float32 before compression): region reads touch
/// little more than their region, and a 512^3 array has 4,096 blocks.
pub const DEFAULT_BLOCK_BITS: u32 = 15;

/// An array's values, owned: the encoder works in place.
pub enum Owned {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// One array to write.
pub struct FieldInput {
    pub name: String,
    pub values: Owned,
    pub shape: Vec<usize>,
    pub bound: Bound,
    /// Adaptive resolution (None: every point).
    pub map: Option<ResolutionMap>,
    /// Kept in the field's description as given (e.g. where an AMR field came from).
    pub attributes: Value,
}

#[derive(Clone, Debug)]
pub struct FieldSummary {
    pub name: String,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub abs_bound: f64,
    pub blocks_stored: u64,
    pub blocks: u64,
}

/// The zip entries of the `i`-th field: by position, so that any field name works (AMReX names
/// fields `Y(H2)`, `x_velocity`...).
fn entry_names(i: usize) -> (String, String) {
    (format!("fields/{i}/hz.index"), format!("fields/{i}/hz.data"))
}

fn check_field_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(invalid!("field name {name:?}: 1 to 255 characters, none of them control characters"));
    }
    Ok(())
}

/// `(min, max)` of the finite values at the points the map keeps (all without one).
fn kept_range<T: Element>(values: &[T], g: &Geometry, map: Option<&ResolutionMap>) -> (f64, f64) {
    let Some(m) = map else { return finite_range(values) };
    let s = g.shape3();
    (0..s[0])
        .into_par_iter()
        .map(|x0| {
            let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
            for x1 in 0..s[1] {
                for x2 in 0..s[2] {
                    let v = values[(x0 * s[1] + x1) * s[2] + x2].to_f64();
                    if v.is_finite() && m.keeps(g, [x0, x1, x2]) {
                        lo = lo.min(v);
                        hi = hi.max(v);
                    }
                }
            }
            (lo, hi)
        })
        .reduce(|| (f64::INFINITY, f64::NEG_INFINITY), |a, b| (a.0.min(b.0), a.1.max(b.1)))
}

fn encode_field<T: Element>(
    values: Vec<T>,
    g: &Geometry,
    map: Option<&ResolutionMap>,
    bound: Bound,
) -> Result<(amrzip_hz::Encoded, f64, (f64, f64), Geometry)> {
    let range = kept_range(&values, g, map);
    let eb = match bound {
        Bound::Abs(e) => e,
        Bound::Rel(r) if range.1 >= range.0 => r * (range.1 - range.0),
        Bound::Rel(_) => 0.0,
    };
    // A field stored whole takes its own axis order and anchors its last indices (docs/format.md
    // 17.1); a resolution map's tiles and levels (AMR levels, the user's rules) are IDX's.
    let g = match map {
        None => Geometry::anchored(g.shape(), g.block_bits(), choose_order(&values, g, eb)).map_err(|e| invalid!("{e}"))?,
        Some(_) => g.clone(),
    };
    Ok((encode(values, &g, map, eb)?, eb, range, g))
}

/// Writes snapshot `name` of the store at `store` (created if absent): `count` fields, field `i`
/// given by `next(i)` when its turn comes (so one is in memory at a time; an error it returns
/// stops the write and nothing is committed), one HZ array each in blocks of `2^block_bits`.
pub fn write(
    store: &Path,
    name: &str,
    count: usize,
    next: &mut dyn FnMut(usize) -> Result<FieldInput>,
    block_bits: u32,
    attributes: Value,
    threads: Option<usize>,
) -> Result<Vec<FieldSummary>> {
    if count == 0 {
        return Err(invalid!("a multiresolution snapshot needs at least one field"));
    }
    let store = Store::open_or_create(store)?;
    let pending = store.begin(name)?;
    let mut zip = ArchiveWriter::new(pending.file()?, pending.temp_path());
    let mut seen = HashSet::new();
    let mut docs = Vec::new();
    let mut summaries = Vec::new();
    for i in 0..count {
        let f = next(i)?;
        check_field_name(&f.name)?;
        if !seen.insert(f.name.clone()) {
            return Err(invalid!("field {:?} given twice", f.name));
        }
        let (len, dtype) = match &f.values {
            Owned::F32(v) => (v.len(), DType::F32),
            Owned::F64(v) => (v.len(), DType::F64),
        };
        if len != f.shape.iter().product::<usize>() {
            return Err(invalid!("field {:?}: {len} values for shape {:?}", f.name, f.shape));
        }
        let (mode, given) = match f.bound {
            Bound::Abs(e) => ("abs", e),
            Bound::Rel(r) => ("rel", r),
        };
        if !(given.is_finite() && given >= 0.0) {
            return Err(invalid!("field {:?}: bound {given} must be a finite number >= 0", f.name));
        }
        let g = Geometry::new(&f.shape, block_bits).map_err(|e| invalid!("field {:?}: {e}", f.name))?;
        if let Some(m) = &f.map {
            if m.grid() != g.shape3().map(|n| n.div_ceil(m.tile())) {
                return Err(invalid!("field {:?}: its resolution map does not cover shape {:?}", f.name, f.shape));
            }
        }
        let (encoded, eb, range, g) = on_pool(threads, || match f.values {
            Owned::F32(v) => encode_field(v, &g, f.map.as_ref(), f.bound),
            Owned::F64(v) => encode_field(v, &g, f.map.as_ref(), f.bound),
        })?;
        let (index_name, data_name) = entry_names(i);
        zip.add(&index_name, &encoded.index)?;
        zip.add(&data_name, &encoded.data)?;
        let summary = FieldSummary {
            name: f.name.clone(),
            raw_bytes: len as u64 * dtype.size() as u64,
            stored_bytes: (encoded.index.len() + encoded.data.len()) as u64,
            abs_bound: eb,
            blocks_stored: encoded.stored_blocks as u64,
            blocks: g.blocks(),
        };
        docs.push(json!({
            "name": f.name,
            "shape": f.shape,
            "dtype": dtype_name(dtype),
            "bound": {"mode": mode, "value": given, "abs": eb},
            "value_range": if range.1 >= range.0 { json!([range.0, range.1]) } else { Value::Null },
            "bitmask": g.bitmask(),
            "levels": g.levels(),
            "block_bits": block_bits,
            "blocks": g.blocks(),
            "blocks_stored": summary.blocks_stored,
            "tile": f.map.as_ref().map_or(0, |m| m.tile()),
            "index_bytes": encoded.index.len(),
            "data_bytes": encoded.data.len(),
            "attributes": f.attributes,
        }));
        summaries.push(summary);
    }
    let root = json!({
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"amrzip": {"kind": KIND, "multires_version": VERSION, "fields": docs, "attributes": attributes}},
    });
    zip.add(crate::layout::ROOT, &serde_json::to_vec_pretty(&root).expect("JSON"))?;
    zip.finish()?;
    pending.commit()?;
    Ok(summaries)
}

struct Field {
    name: String,
    index: Index,
    doc: Value,
}

/// A multiresolution snapshot opened for reading.
pub struct MultiresSnapshot {
    pub name: String,
    pub path: PathBuf,
    archive: Archive,
    attributes: Value,
    fields: Vec<Field>,
}

/// A read in progress of one field (see [`MultiresSnapshot::start`]).
pub struct Progressive<T> {
    field: usize,
    reader: Reader<T>,
}

impl<T: Element> Progressive<T> {
    pub fn top(&self) -> u32 {
        self.reader.top()
    }
}

impl MultiresSnapshot {
    /// Opens snapshot `name` (default: the latest) of the store at `store`.
    pub fn open_in(store: &Path, name: Option<&str>) -> Result<MultiresSnapshot> {
        MultiresSnapshot::open(&Store::open(store)?.find(name)?)
    }

    pub fn open(entry: &SnapshotEntry) -> Result<MultiresSnapshot> {
        let here = entry.path.display().to_string();
        if entry.kind != SnapshotKind::File {
            return Err(invalid!("{here}: a snapshot folder, not a multiresolution snapshot"));
        }
        let archive = Archive::open(&entry.path)?;
        let root: Value = serde_json::from_slice(&archive.read(crate::layout::ROOT)?).map_err(|e| corrupt!("{here}: zarr.json: {e}"))?;
        let attrs = &root["attributes"]["amrzip"];
        if attrs["kind"] != KIND {
            return Err(invalid!("{here}: not a multiresolution snapshot (an AMR snapshot? amrzip.open reads it)"));
        }
        if !attrs["multires_version"].as_u64().is_some_and(|v| (OLDEST_VERSION..=VERSION).contains(&v)) {
            return Err(corrupt!(
                "{here}: multiresolution version {} (this reader knows {OLDEST_VERSION} to {VERSION})",
                attrs["multires_version"]
            ));
        }
        let docs = attrs["fields"].as_array().ok_or_else(|| corrupt!("{here}: no field list"))?;
        let mut fields = Vec::new();
        let mut seen = HashSet::new();
        for (i, doc) in docs.iter().enumerate() {
            let name = doc["name"].as_str().ok_or_else(|| corrupt!("{here}: a field without a name"))?;
            check_field_name(name).map_err(|e| corrupt!("{here}: {e}"))?;
            if !seen.insert(name) {
                return Err(corrupt!("{here}: field {name:?} listed twice"));
            }
            let (index_name, data_name) = entry_names(i);
            let data_len = archive.size(&data_name).ok_or_else(|| corrupt!("{here}: entry {data_name} missing"))?;
            let index =
                Index::read(&archive.read(&index_name)?, data_len).map_err(|e| Error::from(e).within(format!("{here}: {index_name}")))?;
            let shape: Option<Vec<usize>> =
                doc["shape"].as_array().and_then(|a| a.iter().map(|v| v.as_u64().map(|n| n as usize)).collect());
            let dtype = doc["dtype"].as_str().and_then(dtype_from_name);
            if shape.as_deref() != Some(index.geometry.shape())
                || dtype != Some(index.dtype)
                || doc["block_bits"].as_u64() != Some(index.geometry.block_bits() as u64)
            {
                return Err(corrupt!("{here}: field {name:?}: its description and its index disagree (shape, type or block size)"));
            }
            fields.push(Field { name: name.to_string(), index, doc: doc.clone() });
        }
        Ok(MultiresSnapshot {
            name: entry.name.clone(),
            path: entry.path.clone(),
            archive,
            attributes: attrs["attributes"].clone(),
            fields,
        })
    }

    pub fn fields(&self) -> Vec<&str> {
        self.fields.iter().map(|f| f.name.as_str()).collect()
    }

    pub fn field(&self, name: &str) -> Result<usize> {
        self.fields.iter().position(|f| f.name == name).ok_or_else(|| {
            Error::new(ErrorKind::NotFound, format!("{}: no field {name:?} (fields: {})", self.path.display(), self.fields().join(", ")))
        })
    }

    pub fn hz_index(&self, field: usize) -> &Index {
        &self.fields[field].index
    }

    /// The field's description as stored.
    pub fn doc(&self, field: usize) -> &Value {
        &self.fields[field].doc
    }

    pub fn attributes(&self) -> &Value {
        &self.attributes
    }

    pub fn bytes_read(&self) -> u64 {
        self.archive.bytes_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts a read of `field` up to level `top` over `region` (`start`, `stop` per axis, the
    /// whole array when None).
    pub fn start<T: Element>(&self, field: usize, top: u32, region: Option<(&[usize], &[usize])>) -> Result<Progressive<T>> {
        let index = self.hz_index(field);
        let g = &index.geometry;
        let name = &self.fields[field].name;
        if T::DTYPE != index.dtype {
            return Err(invalid!("field {name:?} holds {}", dtype_name(index.dtype)));
        }
        if top > g.levels() {
            return Err(invalid!("level {top} is finer than field {name:?}'s finest, {}", g.levels()));
        }
        let shape = g.shape3();
        let pad = AXES - g.dims();
        let region = match region {
            None => None,
            Some((start, stop)) => {
                if start.len() != g.dims() || stop.len() != g.dims() {
                    return Err(invalid!("region has {} axes, field {name:?} {}", start.len(), g.dims()));
                }
                let mut lo = [0; AXES];
                let mut hi = shape;
                lo[pad..].copy_from_slice(start);
                hi[pad..].copy_from_slice(stop);
                if (0..AXES).any(|k| lo[k] >= hi[k] || hi[k] > shape[k]) {
                    return Err(invalid!("region {start:?}..{stop:?} is empty or outside field {name:?} of shape {:?}", g.shape()));
                }
                Some((lo, hi))
            }
        };
        Ok(Progressive { field, reader: Reader::new(index, top, region)? })
    }

    /// Reads and decodes what `p` lacks for level `level` (at most its top) and returns its
    /// region at that level, with the shape (the field's axes).
    pub fn refine<T: Element>(&self, p: &mut Progressive<T>, level: u32, threads: Option<usize>) -> Result<(Vec<T>, Vec<usize>)> {
        let index = self.hz_index(p.field);
        let blocks = p.reader.missing(index, level)?;
        let (_, data_name) = entry_names(p.field);
        // The blocks lie in HZ order: read each run of consecutive ones at once.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &b in &blocks {
            let (o, l) = index.block_range(b).expect("planned blocks are stored");
            match runs.last_mut() {
                Some(run) if run.0 + run.1 == o => run.1 += l,
                _ => runs.push((o, l)),
            }
        }
        let bytes: Vec<(u64, Vec<u8>)> = on_pool(threads, || {
            runs.par_iter().map(|&(o, l)| Ok((o, self.archive.read_range(&data_name, o, l)?))).collect::<Result<Vec<_>>>()
        })?;
        let payload = |b: u64| {
            let (o, l) = index.block_range(b)?;
            let i = bytes.partition_point(|r| r.0 <= o).checked_sub(1)?;
            let (start, run) = &bytes[i];
            run.get((o - start) as usize..(o - start + l) as usize)
        };
        on_pool(threads, || Ok(p.reader.read(index, level, &blocks, payload)?))
            .map_err(|e| e.within(format!("{}: field {:?}", self.path.display(), self.fields[p.field].name)))
    }

    /// Decodes every stored block of every field (checksums, structure, values kept exactly);
    /// returns the blocks checked.
    pub fn verify(&self) -> Result<u64> {
        let mut blocks = 0;
        for (f, field) in self.fields.iter().enumerate() {
            let top = field.index.geometry.levels();
            match field.index.dtype {
                DType::F32 => drop(self.read::<f32>(f, top, None, None)?),
                DType::F64 => drop(self.read::<f64>(f, top, None, None)?),
            }
            blocks += field.index.stored_blocks() as u64;
        }
        Ok(blocks)
    }

    /// Field `field` at level `level` over `region` (see [`start`](Self::start)).
    pub fn read<T: Element>(
        &self,
        field: usize,
        level: u32,
        region: Option<(&[usize], &[usize])>,
        threads: Option<usize>,
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let mut p = self.start(field, level, region)?;
        self.refine(&mut p, level, threads)
    }
}

/// An AMR hierarchy's field on the finest level's index space (see the module docs).
pub struct Coalesced<T> {
    pub values: Vec<T>,
    /// Index order of the hierarchy's boxes (x first).
    pub shape: Vec<usize>,
    pub map: ResolutionMap,
    /// Per level, the finest HZ level it fills.
    pub hz_levels: Vec<u32>,
}

fn power_of_two(r: i64) -> Option<usize> {
    (r >= 1 && (r as u64).is_power_of_two()).then_some(r as usize)
}

/// Coalesces field `field` of the hierarchy `spec` (values from `source`) for blocks of
/// `2^block_bits` points.
pub fn coalesce<T: Element>(spec: &SnapshotSpec, source: &dyn BoxSource, field: usize, block_bits: u32) -> Result<Coalesced<T>> {
    let name = &spec.fields.get(field).ok_or_else(|| invalid!("no field {field}"))?.name;
    if spec.node.iter().any(|&n| n) {
        return Err(invalid!("field {name:?}: node-centred data has no HZ layout here (cells only)"));
    }
    let levels = &spec.levels;
    let finest = levels.last().ok_or_else(|| invalid!("a hierarchy without levels"))?;
    let nd = finest.domain.ndim();
    if !(1..=AXES).contains(&nd) {
        return Err(invalid!("HZ layouts take 1 to {AXES} dimensions, not {nd}"));
    }
    // Total refinement from each level to the finest, per axis.
    let mut ratios = vec![vec![1usize; nd]; levels.len()];
    for l in (0..levels.len() - 1).rev() {
        let step: Option<Vec<usize>> = (0..nd).map(|d| levels[l].ref_ratio.get(d).copied().and_then(power_of_two)).collect();
        let step = step.ok_or_else(|| invalid!("level {l}'s refinement ratio {:?}: HZ layouts need powers of two", levels[l].ref_ratio))?;
        ratios[l] = ratios[l + 1].iter().zip(&step).map(|(a, b)| a * b).collect();
    }
    let shape = finest.domain.shape();
    let origin = &finest.domain.lo;
    let g = Geometry::new(&shape, block_bits).map_err(|e| invalid!("field {name:?}: {e}"))?;
    let pad = AXES - nd;
    // A level fills the HZ levels whose lattice it has a cell at each point of.
    let hz_levels: Vec<u32> =
        ratios.iter().map(|r| (0..=g.levels()).rev().find(|&j| (0..nd).all(|d| g.spacing(j)[pad + d] >= r[d])).unwrap_or(0)).collect();
    // Tiles of the largest power of two (up to 64) every box edge lies on, in finest cells.
    let mut tile = 64usize;
    for (l, level) in levels.iter().enumerate() {
        for b in &level.boxes {
            for d in 0..nd {
                for edge in [b.lo[d] * ratios[l][d] as i64 - origin[d], (b.hi[d] + 1) * ratios[l][d] as i64 - origin[d]] {
                    if edge != 0 {
                        tile = tile.min(1 << edge.unsigned_abs().trailing_zeros().min(6));
                    }
                }
            }
        }
    }
    let grid = g.shape3().map(|n| n.div_ceil(tile));
    let mut finest_level = vec![0u8; grid.iter().product()];
    let mut values = vec![T::default(); shape.iter().product()];
    let fstride: Vec<usize> = (0..nd).map(|d| shape[d + 1..].iter().product()).collect();
    for (l, level) in levels.iter().enumerate() {
        let r = &ratios[l];
        for b in &level.boxes {
            let lo: Vec<i64> = (0..nd).map(|d| b.lo[d] * r[d] as i64 - origin[d]).collect();
            let hi: Vec<i64> = (0..nd).map(|d| (b.hi[d] + 1) * r[d] as i64 - origin[d]).collect();
            if (0..nd).any(|d| lo[d] < 0 || hi[d] > shape[d] as i64) {
                return Err(invalid!("level {l} box {:?}..{:?} lies outside the finest domain", b.lo, b.hi));
            }
            let t_lo: Vec<usize> = (0..AXES).map(|k| if k < pad { 0 } else { lo[k - pad] as usize / tile }).collect();
            let t_hi: Vec<usize> = (0..AXES).map(|k| if k < pad { 1 } else { (hi[k - pad] as usize).div_ceil(tile) }).collect();
            for t0 in t_lo[0]..t_hi[0] {
                for t1 in t_lo[1]..t_hi[1] {
                    for t2 in t_lo[2]..t_hi[2] {
                        finest_level[(t0 * grid[1] + t1) * grid[2] + t2] = hz_levels[l] as u8;
                    }
                }
            }
        }
        source.with_boxes(l, field, &mut |boxes| {
            for (i, (b, data)) in level.boxes.iter().zip(boxes).enumerate() {
                let values_in = match (&data.values, T::DTYPE) {
                    (Values::F32(v), DType::F32) => same_type::<f32, T>(v),
                    (Values::F64(v), DType::F64) => same_type::<f64, T>(v),
                    _ => return Err(invalid!("level {l} box {i}: values of another type than field {name:?}'s")),
                };
                let cells = b.shape();
                let ghost = |d: usize| data.ghost.get(d).copied().unwrap_or(0);
                let dshape: Vec<usize> = (0..nd).map(|d| cells[d] + 2 * ghost(d)).collect();
                if values_in.len() != dshape.iter().product::<usize>() {
                    return Err(invalid!("level {l} box {i}: {} values for {dshape:?} cells", values_in.len()));
                }
                let mut c = vec![0usize; nd];
                for _ in 0..cells.iter().product::<usize>() {
                    let src = match data.layout {
                        Layout::C => (0..nd).fold(0, |o, d| o * dshape[d] + c[d] + ghost(d)),
                        Layout::Fortran => (0..nd).rev().fold(0, |o, d| o * dshape[d] + c[d] + ghost(d)),
                    };
                    let dst: usize = (0..nd).map(|d| ((b.lo[d] + c[d] as i64) as usize * r[d] - origin[d] as usize) * fstride[d]).sum();
                    values[dst] = values_in[src];
                    for d in (0..nd).rev() {
                        c[d] += 1;
                        if c[d] < cells[d] {
                            break;
                        }
                        c[d] = 0;
                    }
                }
            }
            Ok(())
        })?;
    }
    let map = ResolutionMap::new(&g, tile, finest_level).map_err(|e| invalid!("{e}"))?;
    Ok(Coalesced { values, shape, map, hz_levels })
}

/// `v` as a slice of `T`, which is the same type (checked by the caller through `DTYPE`).
fn same_type<S: Element, T: Element>(v: &[S]) -> &[T] {
    assert_eq!(S::DTYPE, T::DTYPE);
    // Safety: S and T are the same type.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<T>(), v.len()) }
}
