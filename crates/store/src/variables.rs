//! Plain n-D variables (float arrays with names) written by many ranks at once, each any
//! number of subarrays of any variable, PnetCDF's way (docs/parallel.md, docs/format.md section
//! 16): puts are only recorded; at a flush every chunk they touch gets one owner, the rank with
//! the largest access to it less a penalty for load beyond an even share, counted over all
//! variables (aggregation), the ranks send each owner their pieces of its chunks in one
//! exchange per rank pair, and owners assemble, compress and write their chunks into the
//! snapshot file. Closing writes the metadata and commits the snapshot, once.
//!
//! The file is a Zarr v3 hierarchy in a zip archive, one array per variable whose chunks are
//! ordinary amrzip streams (the `amrzip` array-to-bytes codec), so zarr-python opens it with
//! amrzip installed. [`VariablesFile`] reads it back, each rank on its own or all together, a
//! chunk decoded by one owner and its pieces sent to the ranks that asked for them.

use crate::archive::Archive;
use crate::error::{corrupt, invalid, Error, ErrorKind, Result};
use crate::metadata::{dtype_from_name, dtype_name};
use crate::parallel::{assign_owners, begin_together, commit_together, guarded, ArchiveRounds, Collective, Group, OWNER_PENALTY};
use crate::store::{PendingSnapshot, Store};
use crate::writer::{on_pool, Values};
use amrzip_codec::{finite_range, strides, ByteReader, Config, DType, Element, ErrorBound, Policy, Preset, StreamEncoder};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `amrzip.kind` of a variables snapshot's root group.
pub const KIND: &str = "variables";
/// Version of the variables layout (`amrzip.kind` = "variables" in the root group).
pub const VARIABLES_VERSION: u64 = 1;
/// Elements of a chunk when the caller gives no chunk shape (1 MiB of float32).
const DEFAULT_CHUNK_ELEMENTS: usize = 1 << 18;
/// Bytes of chunks per rank one round of a flush moves at most (aggregation): fewer rounds
/// cost fewer collective calls; this bounds the memory a flush holds beside the puts.
const ROUND_BYTES: u64 = 16 << 20;
/// The codec compresses at most this many dimensions; chunks of more are compressed flat.
const CODEC_DIMS: usize = 4;

/// An error bound: absolute, or a fraction of the value range of the values stored (for a
/// variable, what the first flush that puts into it gathers from every rank; for a
/// multiresolution field, the points it keeps).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    Abs(f64),
    Rel(f64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Variable {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Chunk shape (empty: chosen, about a megabyte shaped like the array).
    pub chunks: Vec<usize>,
    pub bound: Bound,
    /// What cells no rank put read as.
    pub fill: f64,
}

#[derive(Clone, Debug)]
pub struct VariablesOptions {
    pub preset: Preset,
    /// One owner assignment, exchange and write for all variables of a flush; off, one each.
    pub aggregate: bool,
    pub threads: Option<usize>,
}

/// A subarray of a variable put by this rank: `values` in C order over `shape` from `start`.
pub struct Put<'a> {
    pub var: usize,
    pub start: Vec<usize>,
    pub shape: Vec<usize>,
    pub values: Values<'a>,
}

/// What a flush did on this rank (the exchange and chunk counts are the same on every rank).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlushReport {
    /// Chunks written, by every rank.
    pub chunks: u64,
    /// Rounds of owner assignment, exchange and write (1 with aggregation).
    pub rounds: u64,
    /// Bytes this rank sent to other ranks.
    pub sent: u64,
}

/// A variable's totals over every rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VariableSummary {
    pub name: String,
    pub abs_bound: f64,
    pub chunks: u64,
    /// Bytes the ranks put.
    pub original_bytes: u64,
    pub stored_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct VariablesSummary {
    pub path: PathBuf,
    pub stored_bytes: u64,
    pub variables: Vec<VariableSummary>,
}

/// The chunk shape of `shape` when none is given: the largest axis halved until a chunk holds
/// at most `DEFAULT_CHUNK_ELEMENTS` values.
pub fn default_chunks(shape: &[usize]) -> Vec<usize> {
    let mut c: Vec<usize> = shape.iter().map(|&n| n.max(1)).collect();
    while c.iter().product::<usize>() > DEFAULT_CHUNK_ELEMENTS {
        let d = (0..c.len()).max_by_key(|&d| (c[d], std::cmp::Reverse(d))).expect("a dimension");
        c[d] = c[d].div_ceil(2);
    }
    c
}

/// Whether `name` can name a variable: a Zarr node name that is also a plain file name.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.starts_with("__")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(invalid!("variable name {name:?}: use letters, digits, '_', '-' and '.', not starting with '.' or '__'"))
    }
}

impl Variable {
    fn checked(mut self) -> Result<Variable> {
        check_name(&self.name)?;
        let v = &self.name;
        if self.shape.is_empty() || self.shape.len() > 32 {
            return Err(invalid!("variable {v:?}: give 1 to 32 dimensions, got {}", self.shape.len()));
        }
        if self.shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n.max(1))).is_none() {
            return Err(invalid!("variable {v:?}: shape {:?} is too large", self.shape));
        }
        if self.chunks.is_empty() {
            self.chunks = default_chunks(&self.shape);
        }
        if self.chunks.len() != self.shape.len() || self.chunks.contains(&0) {
            return Err(invalid!("variable {v:?}: chunks {:?} must be one positive size per dimension of {:?}", self.chunks, self.shape));
        }
        if self.chunks.iter().try_fold(1usize, |a, &n| a.checked_mul(n)).is_none_or(|n| n > 1 << 30) {
            return Err(invalid!("variable {v:?}: chunks {:?} hold more than 2^30 values", self.chunks));
        }
        match self.bound {
            Bound::Abs(b) | Bound::Rel(b) if !(b.is_finite() && b >= 0.0) => {
                return Err(invalid!("variable {v:?}: the error bound must be a finite number >= 0, got {b}"))
            }
            _ => {}
        }
        Ok(self)
    }

    /// Chunks along each axis.
    fn grid(&self) -> Vec<usize> {
        self.shape.iter().zip(&self.chunks).map(|(&n, &c)| n.div_ceil(c)).collect()
    }

    /// The cells of chunk `c` inside the array: (start, shape).
    fn chunk_region(&self, c: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let lo: Vec<usize> = c.iter().zip(&self.chunks).map(|(&i, &n)| i * n).collect();
        let shape = lo.iter().zip(&self.chunks).zip(&self.shape).map(|((&l, &n), &s)| n.min(s - l)).collect();
        (lo, shape)
    }

    fn key(&self, c: &[usize]) -> String {
        let mut k = format!("{}/c", self.name);
        c.iter().for_each(|i| k.push_str(&format!("/{i}")));
        k
    }
}

/// The chunks of `var` a region (start, shape) overlaps, with the cells of each overlap.
fn overlaps(var: &Variable, start: &[usize], shape: &[usize]) -> Vec<(Vec<usize>, u64)> {
    if shape.contains(&0) {
        return Vec::new();
    }
    let first: Vec<usize> = start.iter().zip(&var.chunks).map(|(&s, &c)| s / c).collect();
    let last: Vec<usize> = start.iter().zip(shape).zip(&var.chunks).map(|((&s, &n), &c)| (s + n - 1) / c).collect();
    let mut out = Vec::new();
    let mut c = first.clone();
    loop {
        let cells = (0..c.len())
            .map(|d| {
                let lo = start[d].max(c[d] * var.chunks[d]);
                let hi = (start[d] + shape[d]).min((c[d] + 1) * var.chunks[d]);
                (hi - lo) as u64
            })
            .product();
        out.push((c.clone(), cells));
        // The next chunk coordinates, last axis fastest.
        let mut d = c.len();
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            if c[d] < last[d] {
                c[d] += 1;
                break;
            }
            c[d] = first[d];
        }
    }
}

/// The intersection of two regions (start, shape), if not empty.
fn intersect(a: (&[usize], &[usize]), b: (&[usize], &[usize])) -> Option<(Vec<usize>, Vec<usize>)> {
    let lo: Vec<usize> = a.0.iter().zip(b.0).map(|(&x, &y)| x.max(y)).collect();
    let hi: Vec<usize> = (0..lo.len()).map(|d| (a.0[d] + a.1[d]).min(b.0[d] + b.1[d])).collect();
    lo.iter().zip(&hi).all(|(l, h)| l < h).then(|| (lo.clone(), hi.iter().zip(&lo).map(|(h, l)| h - l).collect()))
}

/// Calls `row(src offset, dst offset, length)` for each row (run along the last axis) of
/// `region` (global start, shape), offsets in C order over `src_shape` from `src_lo` and over
/// `dst_shape` from `dst_lo`; both must contain the region.
fn for_rows(
    src_lo: &[usize],
    src_shape: &[usize],
    dst_lo: &[usize],
    dst_shape: &[usize],
    region: (&[usize], &[usize]),
    mut row: impl FnMut(usize, usize, usize),
) {
    let nd = src_shape.len();
    let (ss, ds) = (strides(src_shape), strides(dst_shape));
    let (lo, shape) = region;
    let len = shape[nd - 1];
    let rows: usize = shape[..nd - 1].iter().product();
    let mut idx = vec![0usize; nd];
    for _ in 0..rows {
        let (mut s, mut t) = (0, 0);
        for d in 0..nd {
            s += (lo[d] + idx[d] - src_lo[d]) * ss[d];
            t += (lo[d] + idx[d] - dst_lo[d]) * ds[d];
        }
        row(s, t, len);
        for d in (0..nd - 1).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Copies `region` from `src` (over `src_shape` from `src_lo`) to `dst` (over `dst_shape` from
/// `dst_lo`).
fn copy_region<T: Copy>(
    src: &[T],
    src_lo: &[usize],
    src_shape: &[usize],
    dst: &mut [T],
    dst_lo: &[usize],
    dst_shape: &[usize],
    region: (&[usize], &[usize]),
) {
    for_rows(src_lo, src_shape, dst_lo, dst_shape, region, |s, t, n| dst[t..t + n].copy_from_slice(&src[s..s + n]));
}

/// Appends the values of `region` of `values` (C order over `shape` from `start`) to `out`,
/// little-endian, packed in C order.
fn piece_bytes<T: Element>(values: &[T], start: &[usize], shape: &[usize], region: (&[usize], &[usize]), out: &mut Vec<u8>) {
    out.reserve(region.1.iter().product::<usize>() * T::BYTES);
    for_rows(start, shape, region.0, region.1, region, |s, _, n| values[s..s + n].iter().for_each(|v| v.write_le(out)));
}

/// Reads a packed piece of `region` (next in `at`) into `dst` (C order over `dst_shape` from
/// `dst_lo`).
fn place<T: Element>(
    at: &mut ByteReader,
    region: (&[usize], &[usize]),
    dst: &mut [T],
    dst_lo: &[usize],
    dst_shape: &[usize],
) -> Result<()> {
    let n: usize = region.1.iter().product();
    let raw = at.take(n.checked_mul(T::BYTES).ok_or_else(|| invalid!("piece too large"))?, "piece values")?;
    for_rows(region.0, region.1, dst_lo, dst_shape, region, |s, t, n| {
        for (v, b) in dst[t..t + n].iter_mut().zip(raw[s * T::BYTES..(s + n) * T::BYTES].chunks_exact(T::BYTES)) {
            *v = T::read_le(b);
        }
    });
    Ok(())
}

/// Fills the cells of a chunk buffer (C order over `full`) beyond `valid` (the part inside the
/// array) with the nearest valid cell's value: the edge continues smoothly, so the padding the
/// Zarr chunk grid asks for costs the codec almost nothing.
fn pad_edges<T: Copy>(buf: &mut [T], full: &[usize], valid: &[usize]) {
    let nd = full.len();
    let stride = strides(full);
    // Innermost axis first, so each copied block already has its inner padding.
    for d in (0..nd).rev() {
        if valid[d] == full[d] {
            continue;
        }
        let outer: usize = full[..d].iter().product();
        let block = stride[d];
        for o in 0..outer {
            let base = o * full[d] * block;
            let from = base + (valid[d] - 1) * block;
            for p in valid[d]..full[d] {
                buf.copy_within(from..from + block, base + p * block);
            }
        }
    }
}

fn u64s(at: &mut ByteReader, n: usize, what: &str) -> Result<Vec<usize>> {
    (0..n).map(|_| at.u64(what).map(|v| v as usize).map_err(Error::from)).collect()
}

/// The snapshot of variables being written by every rank of a group.
pub struct VariablesWriter {
    vars: Vec<Variable>,
    options: VariablesOptions,
    /// Rank 0's temporary file (the others hold none).
    pending: Option<PendingSnapshot>,
    temp: PathBuf,
    archive: ArchiveRounds,
    /// Each variable's absolute bound, once known.
    eb: Vec<Option<f64>>,
    /// Chunks written so far, per variable (the same on every rank).
    written: Vec<BTreeSet<Vec<usize>>>,
    /// What each rank owns so far (the penalty), over all variables and flushes.
    owned: Vec<f64>,
    encoders: BTreeMap<usize, StreamEncoder>,
    /// Per variable: bytes put (all ranks) and stored (this rank).
    original: Vec<u64>,
    stored: Vec<u64>,
    /// A collective call failed here or on a peer: the writer is unusable.
    failed: bool,
}

impl VariablesWriter {
    /// Starts snapshot `name` in the store at `store` (created if absent). Collective: every
    /// rank passes the same variables and options.
    pub fn create(
        comm: &dyn Collective,
        store: &Path,
        name: &str,
        vars: Vec<Variable>,
        options: VariablesOptions,
    ) -> Result<VariablesWriter> {
        let group = Group::new(comm);
        guarded(&group, || {
            crate::layout::check_snapshot_name(name)?;
            let vars: Vec<Variable> = vars.into_iter().map(Variable::checked).collect::<Result<_>>()?;
            let mut seen = BTreeSet::new();
            if let Some(v) = vars.iter().find(|v| !seen.insert(&v.name)) {
                return Err(invalid!("variable {:?} is defined twice", v.name));
            }
            if options.threads == Some(0) {
                return Err(invalid!("threads must be at least 1"));
            }
            let asked = format!("{} {name} {vars:?} {:?} {:?}", store.display(), options.preset, options.aggregate);
            let (pending, temp) = begin_together(&group, store, name, &asked, |r| {
                invalid!(
                    "rank {r} gave another store, snapshot, variables or options than rank {}: every rank must give the same",
                    group.rank()
                )
            })?;
            let n = vars.len();
            Ok(VariablesWriter {
                options,
                pending,
                temp,
                archive: ArchiveRounds::default(),
                eb: vars.iter().map(|v| if let Bound::Abs(b) = v.bound { Some(b) } else { None }).collect(),
                written: vec![BTreeSet::new(); n],
                owned: vec![0.0; group.size()],
                encoders: BTreeMap::new(),
                original: vec![0; n],
                stored: vec![0; n],
                failed: false,
                vars,
            })
        })
    }

    pub fn variables(&self) -> &[Variable] {
        &self.vars
    }

    /// Whether chunk `c` of variable `var` was written by an earlier flush (a put into it now
    /// would be refused).
    pub fn is_written(&self, var: usize, c: &[usize]) -> bool {
        self.written.get(var).is_some_and(|w| w.contains(c))
    }

    /// Checks a put against its variable; the chunks it touches must not be written yet.
    pub fn check_put(&self, var: usize, start: &[usize], shape: &[usize], len: usize, dtype: DType) -> Result<()> {
        let v = self.vars.get(var).ok_or_else(|| invalid!("no variable {var} (there are {})", self.vars.len()))?;
        let name = &v.name;
        if start.len() != v.shape.len() || shape.len() != v.shape.len() {
            return Err(invalid!("variable {name:?} has {} dimensions; the put gives start {start:?} and shape {shape:?}", v.shape.len()));
        }
        if (0..start.len()).any(|d| start[d].checked_add(shape[d]).is_none_or(|e| e > v.shape[d])) {
            return Err(invalid!("variable {name:?}: a put at {start:?} of shape {shape:?} leaves the variable's shape {:?}", v.shape));
        }
        if shape.iter().product::<usize>() != len {
            return Err(invalid!(
                "variable {name:?}: a put of shape {shape:?} needs {} values, got {len}",
                shape.iter().product::<usize>()
            ));
        }
        if dtype != v.dtype {
            return Err(invalid!("variable {name:?} holds {}; the put gives {}", dtype_name(v.dtype), dtype.name()));
        }
        if let Some((c, _)) = overlaps(v, start, shape).into_iter().find(|(c, _)| self.is_written(var, c)) {
            return Err(invalid!(
                "variable {name:?}: chunk {c:?} was written by an earlier flush; put all of a chunk before the flush that writes it"
            ));
        }
        Ok(())
    }

    /// Writes every chunk the ranks' puts touch (collective). Cells of those chunks that no
    /// rank put get the variable's fill value; a chunk, once written, takes no more puts.
    pub fn flush(&mut self, comm: &dyn Collective, puts: &[Put]) -> Result<FlushReport> {
        if self.failed {
            return Err(invalid!("the writer stopped after an error"));
        }
        let group = Group::new(comm);
        let result = guarded(&group, || self.flush_on(&group, puts));
        self.failed = result.is_err();
        result
    }

    fn flush_on(&mut self, group: &Group, puts: &[Put]) -> Result<FlushReport> {
        let (ranks, rank) = (group.size(), group.rank());
        let nvars = self.vars.len();
        let mut ranges = vec![(f64::INFINITY, f64::NEG_INFINITY); nvars];
        for p in puts {
            let (len, dtype) = match p.values {
                Values::F32(v) => (v.len(), DType::F32),
                Values::F64(v) => (v.len(), DType::F64),
            };
            self.check_put(p.var, &p.start, &p.shape, len, dtype)?;
            if self.eb[p.var].is_none() {
                let (lo, hi) = match p.values {
                    Values::F32(v) => finite_range(v),
                    Values::F64(v) => finite_range(v),
                };
                ranges[p.var] = (ranges[p.var].0.min(lo), ranges[p.var].1.max(hi));
            }
        }
        // Every rank's puts (variable, start, shape) and value ranges.
        let mut msg = Vec::new();
        ranges.iter().for_each(|(lo, hi)| [lo, hi].iter().for_each(|v| msg.extend_from_slice(&v.to_le_bytes())));
        msg.extend_from_slice(&(puts.len() as u64).to_le_bytes());
        for p in puts {
            msg.extend_from_slice(&(p.var as u64).to_le_bytes());
            p.start.iter().chain(&p.shape).for_each(|&v| msg.extend_from_slice(&(v as u64).to_le_bytes()));
        }
        let all = group.gather(&msg)?;
        // Per (variable, chunk): cells per rank.
        let mut access: BTreeMap<(usize, Vec<usize>), BTreeMap<usize, u64>> = BTreeMap::new();
        for (r, m) in all.iter().enumerate() {
            let mut at = ByteReader::new(m);
            for (v, range) in ranges.iter_mut().enumerate() {
                let (lo, hi) = (at.f64("range")?, at.f64("range")?);
                if self.eb[v].is_none() {
                    *range = (range.0.min(lo), range.1.max(hi));
                }
            }
            for _ in 0..at.u64("put count")? {
                let v = at.u64("variable")? as usize;
                let var = self.vars.get(v).ok_or_else(|| invalid!("rank {r} put into variable {v}"))?;
                let nd = var.shape.len();
                let (start, shape) = (u64s(&mut at, nd, "start")?, u64s(&mut at, nd, "shape")?);
                self.original[v] += shape.iter().product::<usize>() as u64 * var.dtype.size() as u64;
                for (c, n) in overlaps(var, &start, &shape) {
                    *access.entry((v, c)).or_default().entry(r).or_default() += n;
                }
            }
        }
        for (v, &(lo, hi)) in ranges.iter().enumerate() {
            if let (None, Bound::Rel(rel), true) = (self.eb[v], self.vars[v].bound, lo <= hi) {
                self.eb[v] = Some(rel * (hi - lo));
            }
        }
        // Rounds: every variable at once (aggregation), or one variable at a time.
        let units: Vec<(usize, Vec<usize>)> = access.keys().cloned().collect();
        let rounds: Vec<Vec<usize>> = if self.options.aggregate {
            // As few rounds as a bounded amount of data in flight allows: a round's pieces are
            // all in memory at once, twice (sent and received).
            let budget = ROUND_BYTES * ranks as u64;
            let mut rounds: Vec<Vec<usize>> = vec![Vec::new()];
            let mut bytes = 0u64;
            for (u, (v, c)) in units.iter().enumerate() {
                let var = &self.vars[*v];
                let b = var.chunk_region(c).1.iter().product::<usize>() as u64 * var.dtype.size() as u64;
                if bytes + b > budget && !rounds[rounds.len() - 1].is_empty() {
                    rounds.push(Vec::new());
                    bytes = 0;
                }
                bytes += b;
                rounds.last_mut().expect("a round").push(u);
            }
            rounds.retain(|r| !r.is_empty());
            rounds
        } else {
            let mut by_var: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            units.iter().enumerate().for_each(|(u, (v, _))| by_var.entry(*v).or_default().push(u));
            by_var.into_values().collect()
        };
        let mut report = FlushReport { chunks: units.len() as u64, rounds: rounds.len() as u64, sent: 0 };
        for round in &rounds {
            let access_lists: Vec<Vec<(usize, u64)>> =
                round.iter().map(|&u| access[&units[u]].iter().map(|(&r, &n)| (r, n)).collect()).collect();
            let sizes: Vec<u64> =
                round.iter().map(|&u| self.vars[units[u].0].chunk_region(&units[u].1).1.iter().product::<usize>() as u64).collect();
            let owner = if self.options.aggregate {
                assign_owners(&access_lists, &sizes, &mut self.owned, OWNER_PENALTY)
            } else {
                assign_owners(&access_lists, &sizes, &mut vec![0.0; ranks], OWNER_PENALTY)
            };
            let in_round: BTreeMap<&(usize, Vec<usize>), usize> = round.iter().enumerate().map(|(i, &u)| (&units[u], i)).collect();
            // This rank's pieces, to each chunk's owner.
            let mut outgoing = vec![Vec::new(); ranks];
            // Pieces of chunks this rank owns go from the puts straight into the chunks.
            let mut local = Vec::new();
            for (k, p) in puts.iter().enumerate() {
                let var = &self.vars[p.var];
                for (c, _) in overlaps(var, &p.start, &p.shape) {
                    let Some(&i) = in_round.get(&(p.var, c.clone())) else { continue };
                    let (lo, shape) = var.chunk_region(&c);
                    let (plo, pshape) = intersect((&p.start, &p.shape), (&lo, &shape)).expect("the put overlaps the chunk");
                    if owner[i] == rank {
                        local.push((k, i, plo, pshape));
                        continue;
                    }
                    let out = &mut outgoing[owner[i]];
                    out.extend_from_slice(&(i as u64).to_le_bytes());
                    plo.iter().chain(&pshape).for_each(|&v| out.extend_from_slice(&(v as u64).to_le_bytes()));
                    match p.values {
                        Values::F32(v) => piece_bytes(v, &p.start, &p.shape, (&plo, &pshape), out),
                        Values::F64(v) => piece_bytes(v, &p.start, &p.shape, (&plo, &pshape), out),
                    }
                }
            }
            report.sent += outgoing.iter().enumerate().filter(|&(r, _)| r != rank).map(|(_, m)| m.len() as u64).sum::<u64>();
            let incoming = group.exchange(outgoing)?;
            // Assemble, compress and write the chunks this rank owns, one at a time (one chunk
            // buffer in memory, reused).
            let mut sources: BTreeMap<usize, Vec<Source>> =
                (0..round.len()).filter(|&i| owner[i] == rank).map(|i| (i, Vec::new())).collect();
            for (k, i, plo, pshape) in local {
                sources.get_mut(&i).expect("an owned chunk").push(Source::Local(k, plo, pshape));
            }
            for (r, m) in incoming.iter().enumerate() {
                let mut at = ByteReader::new(m);
                while at.remaining() > 0 {
                    let i = at.u64("chunk")? as usize;
                    let list = sources.get_mut(&i).ok_or_else(|| invalid!("rank {r} sent a piece of a chunk this rank does not own"))?;
                    let var = &self.vars[units[round[i]].0];
                    let nd = var.shape.len();
                    let (plo, pshape) = (u64s(&mut at, nd, "piece start")?, u64s(&mut at, nd, "piece shape")?);
                    let len = pshape
                        .iter()
                        .try_fold(var.dtype.size(), |a, &n| a.checked_mul(n))
                        .ok_or_else(|| invalid!("rank {r} sent a piece too large"))?;
                    list.push(Source::Remote(at.take(len, "piece values")?, plo, pshape));
                }
            }
            let mut entries = Vec::with_capacity(sources.len());
            for (i, list) in sources {
                let (v, c) = &units[round[i]];
                let var = &self.vars[*v];
                let mut a = Assembly::new(var, c);
                for source in list {
                    match source {
                        Source::Local(k, plo, pshape) => {
                            a.add_local(var, (&plo, &pshape), &puts[k].values, &puts[k].start, &puts[k].shape)?
                        }
                        Source::Remote(bytes, plo, pshape) => a.add(var, &plo, &pshape, &mut ByteReader::new(bytes))?,
                    }
                }
                let key = var.key(c);
                let bytes = self.compress(*v, a)?;
                self.stored[*v] += bytes.len() as u64;
                entries.push((key, bytes));
            }
            self.archive.write(group, &self.temp, &entries)?;
        }
        for (v, c) in units {
            self.written[v].insert(c);
        }
        Ok(report)
    }

    fn compress(&mut self, v: usize, a: Assembly) -> Result<Vec<u8>> {
        let var = &self.vars[v];
        let eb = self.eb[v].unwrap_or(0.0);
        let encoder = match self.encoders.entry(v) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let config =
                    Config { bound: ErrorBound::Absolute(eb), preset: self.options.preset, threads: self.options.threads, predictor: None };
                e.insert(StreamEncoder::new(config, Policy::Rebuild)?.standalone())
            }
        };
        let shape = if var.chunks.len() > CODEC_DIMS { vec![var.chunks.iter().product()] } else { var.chunks.clone() };
        let bytes = match a.values {
            Chunk::F32(mut b) => {
                finish_chunk(&mut b, &a.covered, var, &a.valid);
                encoder.encode(&b, &shape)?
            }
            Chunk::F64(mut b) => {
                finish_chunk(&mut b, &a.covered, var, &a.valid);
                encoder.encode(&b, &shape)?
            }
        };
        Ok(bytes)
    }

    /// Writes the metadata and commits the snapshot (collective); every rank returns the same.
    pub fn close(mut self, comm: &dyn Collective) -> Result<VariablesSummary> {
        if self.failed {
            return Err(invalid!("the writer stopped after an error"));
        }
        let group = Group::new(comm);
        guarded(&group, || self.close_on(&group))
    }

    fn close_on(&mut self, group: &Group) -> Result<VariablesSummary> {
        let mut stored: Vec<f64> = self.stored.iter().map(|&b| b as f64).collect();
        group.sum(&mut stored)?;
        let variables: Vec<VariableSummary> = self
            .vars
            .iter()
            .enumerate()
            .map(|(v, var)| VariableSummary {
                name: var.name.clone(),
                abs_bound: self.eb[v].unwrap_or(0.0),
                chunks: self.written[v].len() as u64,
                original_bytes: self.original[v],
                stored_bytes: stored[v] as u64,
            })
            .collect();
        let mut entries = Vec::new();
        if group.rank() == 0 {
            let names: Vec<&str> = self.vars.iter().map(|v| v.name.as_str()).collect();
            let root = json!({"zarr_format": 3, "node_type": "group", "attributes": {"amrzip": {
                "kind": KIND, "variables_version": VARIABLES_VERSION, "variables": names}}});
            entries.push(("zarr.json".to_string(), serde_json::to_vec_pretty(&root).expect("JSON")));
            for (var, s) in self.vars.iter().zip(&variables) {
                entries.push((
                    format!("{}/zarr.json", var.name),
                    serde_json::to_vec_pretty(&array_json(var, s, self.options.preset)).expect("JSON"),
                ));
            }
        }
        self.archive.write(group, &self.temp, &entries)?;
        let len = std::mem::take(&mut self.archive).finish(group, &self.temp)?;
        let (stored_bytes, path) = commit_together(group, self.pending.take(), len)?;
        Ok(VariablesSummary { path, stored_bytes, variables })
    }
}

/// Where a piece of a chunk comes from: one of this rank's puts (its number), or another rank's
/// message (the values' bytes); and its region.
enum Source<'m> {
    Local(usize, Vec<usize>, Vec<usize>),
    Remote(&'m [u8], Vec<usize>, Vec<usize>),
}

/// Gives the cells of an assembled chunk that no rank put the fill value, and pads it.
fn finish_chunk<T: Element>(buf: &mut [T], covered: &[bool], var: &Variable, valid: &[usize]) {
    let fill = T::from_f64(var.fill);
    buf.iter_mut().zip(covered).filter(|(_, &c)| !c).for_each(|(v, _)| *v = fill);
    pad_edges(buf, &var.chunks, valid);
}

enum Chunk {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// A chunk its owner puts together from the pieces it receives (the chunk grid's full shape;
/// cells past the array's edge, `covered` true, are padding).
struct Assembly {
    lo: Vec<usize>,
    valid: Vec<usize>,
    values: Chunk,
    covered: Vec<bool>,
}

impl Assembly {
    fn new(var: &Variable, c: &[usize]) -> Assembly {
        let (lo, valid) = var.chunk_region(c);
        let n: usize = var.chunks.iter().product();
        let values = match var.dtype {
            DType::F32 => Chunk::F32(vec![0.0; n]),
            DType::F64 => Chunk::F64(vec![0.0; n]),
        };
        // Padding counts as covered: it is filled from the edge, not with the fill value.
        let mut covered = vec![true; n];
        copy_region(&vec![false; valid.iter().product()], &lo, &valid, &mut covered, &lo, &var.chunks, (&lo, &valid));
        Assembly { lo, valid, values, covered }
    }

    /// Marks `region` as put; cells put twice (by two ranks or two puts) have no defined value
    /// and are refused.
    fn claim(&mut self, var: &Variable, region: (&[usize], &[usize])) -> Result<()> {
        let (plo, pshape) = region;
        if intersect(region, (&self.lo, &self.valid)).is_none_or(|(l, s)| l != plo || s != pshape) {
            return Err(invalid!("region {plo:?} of shape {pshape:?} is not inside chunk {:?} of {:?}", self.lo, var.name));
        }
        let mut twice = false;
        let covered = &mut self.covered;
        for_rows(&self.lo, &var.chunks, &self.lo, &var.chunks, region, |_, t, n| {
            twice |= covered[t..t + n].iter().any(|&c| c);
            covered[t..t + n].fill(true);
        });
        if twice {
            return Err(invalid!("variable {:?}: cells in {plo:?} (shape {pshape:?}) are put more than once", var.name));
        }
        Ok(())
    }

    /// Adds a piece received from another rank (its values next in `at`).
    fn add(&mut self, var: &Variable, plo: &[usize], pshape: &[usize], at: &mut ByteReader) -> Result<()> {
        let region = (plo, pshape);
        self.claim(var, region)?;
        match &mut self.values {
            Chunk::F32(b) => place(at, region, b, &self.lo, &var.chunks),
            Chunk::F64(b) => place(at, region, b, &self.lo, &var.chunks),
        }
    }

    /// Adds a piece of one of this rank's puts (`values` over `shape` from `start`).
    fn add_local(&mut self, var: &Variable, region: (&[usize], &[usize]), values: &Values, start: &[usize], shape: &[usize]) -> Result<()> {
        self.claim(var, region)?;
        match (&mut self.values, values) {
            (Chunk::F32(b), Values::F32(v)) => copy_region(v, start, shape, b, &self.lo, &var.chunks, region),
            (Chunk::F64(b), Values::F64(v)) => copy_region(v, start, shape, b, &self.lo, &var.chunks, region),
            _ => return Err(invalid!("variable {:?}: a put of the wrong type", var.name)),
        }
        Ok(())
    }
}

/// A variable's Zarr v3 array document.
fn array_json(var: &Variable, s: &VariableSummary, preset: Preset) -> Value {
    let mode = match preset {
        Preset::Ratio => "ratio",
        Preset::Speed => "speed",
    };
    let fill = if var.fill.is_nan() {
        json!("NaN")
    } else if var.fill.is_infinite() {
        json!(if var.fill > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(var.fill)
    };
    let rel = match var.bound {
        Bound::Rel(r) => json!(r),
        Bound::Abs(_) => Value::Null,
    };
    json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": var.shape,
        "data_type": dtype_name(var.dtype),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": var.chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": [{"name": "amrzip", "configuration": {"abs": s.abs_bound, "mode": mode}}],
        "attributes": {"amrzip": {"abs": s.abs_bound, "rel": rel, "chunks_written": s.chunks,
            "original_bytes": s.original_bytes, "stored_bytes": s.stored_bytes}},
    })
}

/// A variable as a reader finds it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredVariable {
    pub var: Variable,
    pub abs_bound: f64,
    /// Each written chunk's entry, by chunk coordinates.
    chunks: BTreeMap<Vec<usize>, String>,
}

/// A snapshot of variables opened for reading.
pub struct VariablesFile {
    archive: Archive,
    pub variables: Vec<StoredVariable>,
}

/// Which way a collective read went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMethod {
    /// Each chunk read and decoded once, by an owner that sends the pieces to the ranks asking.
    Collective,
    /// Each rank reads and decodes the chunks it needs itself.
    Independent,
}

/// A collective read goes through owners when that leaves the busiest rank at most this share of
/// the decoding it would do alone (the exchange costs the rest).
const SHARED_READS: f64 = 0.75;

impl VariablesFile {
    /// Opens snapshot `name` (the latest when None) of the store at `store`.
    pub fn open_in(store: &Path, name: Option<&str>) -> Result<VariablesFile> {
        let entry = Store::open(store)?.find(name)?;
        VariablesFile::open(&entry.path)
    }

    /// Opens the snapshot file at `path`, checking every variable's metadata and chunk names.
    pub fn open(path: &Path) -> Result<VariablesFile> {
        let archive = Archive::open(path)?;
        let here = path.display().to_string();
        let root: Value = serde_json::from_slice(&archive.read("zarr.json")?).map_err(|e| corrupt!("{here}: zarr.json: {e}"))?;
        let attrs = &root["attributes"]["amrzip"];
        if attrs["kind"] != KIND {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("{here}: not a snapshot of variables (an AMR snapshot? open it with amrzip.open)"),
            ));
        }
        match attrs["variables_version"].as_u64() {
            Some(VARIABLES_VERSION) => {}
            v => return Err(corrupt!("{here}: variables version {v:?}; this build reads version {VARIABLES_VERSION}")),
        }
        let names: Vec<String> = attrs["variables"]
            .as_array()
            .and_then(|a| a.iter().map(|n| n.as_str().map(String::from)).collect())
            .ok_or_else(|| corrupt!("{here}: zarr.json lists no variables"))?;
        let mut variables: Vec<StoredVariable> = names
            .iter()
            .map(|n| {
                check_name(n).map_err(|e| corrupt!("{here}: {e}"))?;
                let doc: Value = serde_json::from_slice(&archive.read(&format!("{n}/zarr.json"))?)
                    .map_err(|e| corrupt!("{here}: {n}/zarr.json: {e}"))?;
                stored_variable(n, &doc).map_err(|e| corrupt!("{here}: {n}/zarr.json: {e}"))
            })
            .collect::<Result<_>>()?;
        let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        let entries: Vec<String> = archive.names().map(String::from).collect();
        for e in entries {
            if e == "zarr.json" {
                continue;
            }
            let (var, rest) = e.split_once('/').ok_or_else(|| corrupt!("{here}: entry {e:?} belongs to no variable"))?;
            let v = *index.get(var).ok_or_else(|| corrupt!("{here}: entry {e:?} belongs to no variable"))?;
            if rest == "zarr.json" {
                continue;
            }
            let sv = &mut variables[v];
            let coords: Option<Vec<usize>> = rest.strip_prefix("c/").and_then(|c| c.split('/').map(|i| i.parse().ok()).collect());
            let grid = sv.var.grid();
            match coords {
                Some(c) if c.len() == grid.len() && c.iter().zip(&grid).all(|(i, n)| i < n) => {
                    sv.chunks.insert(c, e.clone());
                }
                _ => return Err(corrupt!("{here}: entry {e:?} is no chunk of {var:?} (grid {grid:?})")),
            }
        }
        Ok(VariablesFile { archive, variables })
    }

    /// Decodes every chunk, checking it; returns how many there are.
    pub fn verify(&self) -> Result<u64> {
        use rayon::prelude::*;
        let all: Vec<(usize, &Vec<usize>)> =
            self.variables.iter().enumerate().flat_map(|(v, sv)| sv.chunks.keys().map(move |c| (v, c))).collect();
        all.par_iter().try_for_each(|&(v, c)| match self.variables[v].var.dtype {
            DType::F32 => self.chunk::<f32>(v, c, Some(1)).map(drop),
            DType::F64 => self.chunk::<f64>(v, c, Some(1)).map(drop),
        })?;
        Ok(all.len() as u64)
    }

    /// Chunks written and their bytes in the file, of variable `v`.
    pub fn stored(&self, v: usize) -> (u64, u64) {
        let chunks = &self.variables[v].chunks;
        (chunks.len() as u64, chunks.values().filter_map(|k| self.archive.size(k)).sum())
    }

    pub fn find(&self, name: &str) -> Result<usize> {
        self.variables.iter().position(|v| v.var.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.variables.iter().map(|v| v.var.name.as_str()).collect();
            Error::new(ErrorKind::NotFound, format!("{}: no variable {name:?} (it has {names:?})", self.archive.path().display()))
        })
    }

    fn check_region(&self, v: usize, start: &[usize], shape: &[usize]) -> Result<()> {
        let var = &self.variables.get(v).ok_or_else(|| invalid!("no variable {v}"))?.var;
        if start.len() != var.shape.len()
            || shape.len() != var.shape.len()
            || (0..start.len()).any(|d| start[d].checked_add(shape[d]).is_none_or(|e| e > var.shape[d]))
        {
            return Err(invalid!("variable {:?} of shape {:?}: no region at {start:?} of shape {shape:?}", var.name, var.shape));
        }
        Ok(())
    }

    /// Chunk `c` of variable `v`, decoded (its full grid shape; the fill value where unwritten).
    fn chunk<T: Element>(&self, v: usize, c: &[usize], threads: Option<usize>) -> Result<Vec<T>> {
        let sv = &self.variables[v];
        let n: usize = sv.var.chunks.iter().product();
        let Some(key) = sv.chunks.get(c) else { return Ok(vec![T::from_f64(sv.var.fill); n]) };
        let bytes = self.archive.read(key)?;
        let where_ = || format!("{}: {key}", self.archive.path().display());
        let (values, shape) = amrzip_codec::decompress::<T>(&bytes, threads).map_err(|e| Error::from(e).within(where_()))?;
        let flat = shape.iter().product::<usize>() == n && (shape == sv.var.chunks || shape.len() == 1);
        if !flat || values.len() != n {
            return Err(corrupt!("{}: decodes to shape {shape:?}, not the chunk shape {:?}", where_(), sv.var.chunks));
        }
        Ok(values)
    }

    /// Reads region (start, shape) of variable `v` on this rank alone.
    pub fn read<T: Element>(&self, v: usize, start: &[usize], shape: &[usize], threads: Option<usize>) -> Result<Vec<T>> {
        use rayon::prelude::*;
        self.check_region(v, start, shape)?;
        let var = &self.variables[v].var;
        let mut out = vec![T::default(); shape.iter().product()];
        let parts: Vec<(Vec<usize>, Vec<T>)> = on_pool(threads, || {
            overlaps(var, start, shape).into_par_iter().map(|(c, _)| Ok((c.clone(), self.chunk::<T>(v, &c, Some(1))?))).collect()
        })?;
        for (c, values) in parts {
            let (lo, valid) = var.chunk_region(&c);
            let region = intersect((start, shape), (&lo, &valid)).expect("an overlapping chunk");
            copy_region(&values, &lo, &var.chunks, &mut out, start, shape, (&region.0, &region.1));
        }
        Ok(out)
    }

    /// Reads region (start, shape) of variable `v` on every rank at once (collective; each rank
    /// its own region). `method` None chooses by overlap: through chunk owners (each chunk
    /// decoded once, by the rank reading most of it less a penalty for what it already decodes)
    /// when the ranks' regions share enough chunks that the busiest rank decodes much less so,
    /// else independently.
    pub fn read_collective<T: Element>(
        &self,
        comm: &dyn Collective,
        v: usize,
        start: &[usize],
        shape: &[usize],
        method: Option<ReadMethod>,
    ) -> Result<(Vec<T>, ReadMethod)> {
        let group = Group::new(comm);
        guarded(&group, || self.read_on(&group, v, start, shape, method))
    }

    fn read_on<T: Element>(
        &self,
        group: &Group,
        v: usize,
        start: &[usize],
        shape: &[usize],
        method: Option<ReadMethod>,
    ) -> Result<(Vec<T>, ReadMethod)> {
        self.check_region(v, start, shape)?;
        let var = &self.variables[v].var;
        let nd = var.shape.len();
        let mut msg = (v as u64).to_le_bytes().to_vec();
        start.iter().chain(shape).for_each(|&x| msg.extend_from_slice(&(x as u64).to_le_bytes()));
        let all = group.gather(&msg)?;
        let mut requests = Vec::with_capacity(all.len());
        for (r, m) in all.iter().enumerate() {
            let mut at = ByteReader::new(m);
            if at.u64("variable")? as usize != v {
                return Err(invalid!("rank {r} reads another variable: a collective read is of one variable"));
            }
            requests.push((u64s(&mut at, nd, "start")?, u64s(&mut at, nd, "shape")?));
        }
        let mut access: BTreeMap<Vec<usize>, Vec<(usize, u64)>> = BTreeMap::new();
        for (r, (s, n)) in requests.iter().enumerate() {
            for (c, cells) in overlaps(var, s, n) {
                access.entry(c).or_default().push((r, cells));
            }
        }
        let units: Vec<&Vec<usize>> = access.keys().collect();
        let lists: Vec<Vec<(usize, u64)>> = access.values().cloned().collect();
        let sizes: Vec<u64> = units.iter().map(|c| var.chunk_region(c).1.iter().product::<usize>() as u64).collect();
        let owner = assign_owners(&lists, &sizes, &mut vec![0.0; group.size()], OWNER_PENALTY);
        // The ranks decode at once, so the read takes as long as the busiest rank's decoding:
        // alone, each decodes every chunk it touches; through owners, each decodes the chunks it
        // owns, once, and sends the pieces.
        let mut alone = vec![0u64; group.size()];
        let mut owning = vec![0u64; group.size()];
        for (u, list) in lists.iter().enumerate() {
            list.iter().for_each(|&(r, _)| alone[r] += sizes[u]);
            owning[owner[u]] += sizes[u];
        }
        let (alone, owning) = (alone.into_iter().max().unwrap_or(0), owning.into_iter().max().unwrap_or(0));
        let method =
            method.unwrap_or(if (owning as f64) < SHARED_READS * alone as f64 { ReadMethod::Collective } else { ReadMethod::Independent });
        if method == ReadMethod::Independent {
            return Ok((self.read(v, start, shape, Some(1))?, method));
        }
        let mut outgoing = vec![Vec::new(); group.size()];
        for (u, c) in units.iter().enumerate().filter(|&(u, _)| owner[u] == group.rank()) {
            let values = self.chunk::<T>(v, c, Some(1))?;
            let (lo, valid) = var.chunk_region(c);
            for &(r, _) in &lists[u] {
                let (plo, pshape) = intersect((&requests[r].0, &requests[r].1), (&lo, &valid)).expect("an overlapping chunk");
                let out = &mut outgoing[r];
                plo.iter().chain(&pshape).for_each(|&x| out.extend_from_slice(&(x as u64).to_le_bytes()));
                piece_bytes(&values, &lo, &var.chunks, (&plo, &pshape), out);
            }
        }
        let incoming = group.exchange(outgoing)?;
        let mut out = vec![T::default(); shape.iter().product()];
        for m in &incoming {
            let mut at = ByteReader::new(m);
            while at.remaining() > 0 {
                let (plo, pshape) = (u64s(&mut at, nd, "piece start")?, u64s(&mut at, nd, "piece shape")?);
                if intersect((&plo, &pshape), (start, shape)).is_none_or(|(l, s)| l != plo || s != pshape) {
                    return Err(invalid!("a rank sent a piece outside the region asked for"));
                }
                place(&mut at, (&plo, &pshape), &mut out, start, shape)?;
            }
        }
        Ok((out, method))
    }
}

/// A variable's description from its array document, checked.
fn stored_variable(name: &str, doc: &Value) -> std::result::Result<StoredVariable, String> {
    let usizes = |v: &Value| -> Option<Vec<usize>> { v.as_array()?.iter().map(|x| x.as_u64().map(|x| x as usize)).collect() };
    if doc["zarr_format"] != 3 || doc["node_type"] != "array" {
        return Err("not a Zarr v3 array".into());
    }
    let shape = usizes(&doc["shape"]).ok_or("no shape")?;
    let chunks = usizes(&doc["chunk_grid"]["configuration"]["chunk_shape"]).ok_or("no regular chunk grid")?;
    let dtype = doc["data_type"]
        .as_str()
        .and_then(dtype_from_name)
        .ok_or_else(|| format!("data type {}, not float32 or float64", doc["data_type"]))?;
    if doc["codecs"].as_array().map(|c| c.len()) != Some(1) || doc["codecs"][0]["name"] != "amrzip" {
        return Err("its codecs are not amrzip's alone".into());
    }
    if doc["chunk_key_encoding"]["name"] != "default" || doc["chunk_key_encoding"]["configuration"]["separator"] != "/" {
        return Err("chunk keys are not the default '/' encoding".into());
    }
    let fill = match &doc["fill_value"] {
        Value::String(s) if s == "NaN" => f64::NAN,
        Value::String(s) if s == "Infinity" => f64::INFINITY,
        Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
        v => v.as_f64().ok_or("no fill value")?,
    };
    let abs_bound = doc["codecs"][0]["configuration"]["abs"].as_f64().ok_or("no bound")?;
    let var = Variable { name: name.to_string(), dtype, shape, chunks, bound: Bound::Abs(abs_bound), fill };
    let var = var.checked().map_err(|e| e.message)?;
    Ok(StoredVariable { var, abs_bound, chunks: BTreeMap::new() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::Serial;

    fn var(name: &str, shape: &[usize], chunks: &[usize]) -> Variable {
        Variable {
            name: name.into(),
            dtype: DType::F64,
            shape: shape.to_vec(),
            chunks: chunks.to_vec(),
            bound: Bound::Abs(1e-3),
            fill: f64::NAN,
        }
    }

    #[test]
    fn regions_copy_and_pad() {
        let v = var("a", &[5, 7], &[4, 4]);
        assert_eq!(
            overlaps(&v, &[1, 2], &[4, 5]).iter().map(|(c, n)| (c.clone(), *n)).collect::<Vec<_>>(),
            vec![(vec![0, 0], 6), (vec![0, 1], 9), (vec![1, 0], 2), (vec![1, 1], 3)]
        );
        let src: Vec<i32> = (0..35).collect();
        let mut dst = vec![0; 4];
        copy_region(&src, &[0, 0], &[5, 7], &mut dst, &[2, 3], &[2, 2], (&[2, 3], &[2, 2]));
        assert_eq!(dst, vec![17, 18, 24, 25]);
        let mut chunk = vec![0, 1, 0, 0, 2, 3, 0, 0, 0, 0, 0, 0];
        pad_edges(&mut chunk, &[3, 4], &[2, 2]);
        assert_eq!(chunk, vec![0, 1, 1, 1, 2, 3, 3, 3, 2, 3, 3, 3]);
        assert_eq!(default_chunks(&[1000, 1000]), vec![500, 500]);
        assert_eq!(default_chunks(&[100]), vec![100]);
    }

    #[test]
    fn serial_write_reads_back_within_bound() {
        let dir = tempfile::tempdir().unwrap();
        let options = VariablesOptions { preset: Preset::Ratio, aggregate: true, threads: Some(1) };
        let vars = vec![var("t", &[30, 20], &[8, 8]), var("u", &[50], &[16])];
        let mut w = VariablesWriter::create(&Serial, dir.path(), "s", vars, options).unwrap();
        let t: Vec<f64> = (0..600).map(|i| ((i % 20) as f64 * 0.3).sin() + (i / 20) as f64 * 0.01).collect();
        let u: Vec<f64> = (0..40).map(|i| i as f64).collect();
        let puts = [
            Put { var: 0, start: vec![0, 0], shape: vec![30, 20], values: Values::F64(&t) },
            Put { var: 1, start: vec![10], shape: vec![40], values: Values::F64(&u) },
        ];
        w.flush(&Serial, &puts).unwrap();
        // Chunks are final once written.
        assert!(w.check_put(1, &[0], &[10], 10, DType::F64).unwrap_err().message.contains("earlier flush"));
        let s = w.close(&Serial).unwrap();
        assert_eq!(s.variables[0].chunks, 12);
        let f = VariablesFile::open(&s.path).unwrap();
        let back: Vec<f64> = f.read(0, &[0, 0], &[30, 20], None).unwrap();
        assert!(back.iter().zip(&t).all(|(a, b)| (a - b).abs() <= 1e-3));
        let u_back: Vec<f64> = f.read(1, &[0], &[50], None).unwrap();
        assert!(u_back[..10].iter().all(|v| v.is_nan()), "cells no one put read as the fill value");
        assert!(u_back[10..].iter().zip(&u).all(|(a, b)| (a - b).abs() <= 1e-3));
        let (part, method) = f.read_collective::<f64>(&Serial, 0, &[3, 5], &[10, 10], None).unwrap();
        assert_eq!(method, ReadMethod::Independent);
        assert!(part.iter().enumerate().all(|(i, v)| (v - t[(3 + i / 10) * 20 + 5 + i % 10]).abs() <= 1e-3));
    }

    #[test]
    fn bad_puts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let options = VariablesOptions { preset: Preset::Speed, aggregate: false, threads: Some(1) };
        let w = VariablesWriter::create(&Serial, dir.path(), "s", vec![var("t", &[10], &[4])], options.clone()).unwrap();
        assert!(w.check_put(0, &[8], &[4], 4, DType::F64).is_err());
        assert!(w.check_put(0, &[0], &[4], 3, DType::F64).is_err());
        assert!(w.check_put(0, &[0], &[4], 4, DType::F32).is_err());
        assert!(w.check_put(1, &[0], &[4], 4, DType::F64).is_err());
        let twice = vec![var("t", &[10], &[4]), var("t", &[10], &[4])];
        assert!(VariablesWriter::create(&Serial, dir.path(), "s2", twice, options.clone()).is_err());
        assert!(VariablesWriter::create(&Serial, dir.path(), "s3", vec![var("../x", &[10], &[4])], options).is_err());
    }
}
