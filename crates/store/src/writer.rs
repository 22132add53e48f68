//! Writing a snapshot, AMRIC-style: covered coarse cells are left out, each (level, field) is
//! cut into unit blocks that are predicted one by one and entropy-coded with statistics they all
//! share, fields are compressed on their own with their own bound, and a level's fields are
//! stored as one array whose shards hold every field's chunks of a region.
//!
//! The snapshot is written into a temporary file of the store and committed when complete
//! (see `store`): a failed or interrupted write leaves the store as it was.

use crate::archive::ArchiveWriter;
use crate::array::{group_json, FieldCodec, FieldStats, LevelArray};
use crate::chunking;
use crate::conservation::conserve;
use crate::error::{invalid, Error, ErrorKind, Result};
use crate::layout;
use crate::metadata::{BoundMode, FieldBound, LevelMeta, SnapshotMeta, SNAPSHOT_VERSION};
use crate::parallel::{
    begin_together, commit_together, extract, guarded, pack, placeholder_views, unpack, write_archive, Collective, Described, Group,
    Ownership, Piece, Serial, SpreadBlocks,
};
use crate::shard;
use amrzip_amr::boxes::{stored_mask, Coverage};
use amrzip_amr::{BoxView, ChunkPlan, IBox, Keep, Layout, LevelStreams, Spread, Tiling};
use amrzip_codec::blockset::Choice;
use amrzip_codec::{ByteReader, Config, DType, Element, ErrorBound, PredictorKind, Preset};
use rayon::prelude::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A box's values for one field: the box (grown by its ghost cells) in `layout`.
pub enum Values<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

pub struct BoxData<'a> {
    pub values: Values<'a>,
    pub layout: Layout,
    /// Ghost cells around the box per dimension (empty: none); they are not stored.
    pub ghost: Vec<usize>,
}

/// Where the writer gets box values from, one (level, field) at a time, so that a source that
/// reads files (or calls back into a host language) holds one field of one level in memory.
pub trait BoxSource {
    /// Calls `f` with field `field`'s values for every box of `level`, in box order.
    fn with_boxes(&self, level: usize, field: usize, f: &mut dyn FnMut(&[BoxData]) -> Result<()>) -> Result<()>;
}

/// Values already in memory: `[level][field][box]`.
impl BoxSource for Vec<Vec<Vec<BoxData<'_>>>> {
    fn with_boxes(&self, level: usize, field: usize, f: &mut dyn FnMut(&[BoxData]) -> Result<()>) -> Result<()> {
        let boxes = self.get(level).and_then(|l| l.get(field)).ok_or_else(|| invalid!("no data for level {level} field {field}"))?;
        f(boxes)
    }
}

pub struct FieldSpec {
    pub name: String,
    pub dtype: DType,
    pub mode: BoundMode,
    /// An absolute bound, or a fraction of the field's value range over the stored cells.
    pub bound: f64,
}

pub struct LevelSpec {
    /// The level's cells.
    pub domain: IBox,
    /// Refinement ratio to the next level (all 1 at the finest).
    pub ref_ratio: Vec<i64>,
    pub dx: Vec<f64>,
    pub boxes: Vec<IBox>,
    pub owners: Vec<i64>,
}

impl LevelSpec {
    /// The raw bytes of one field of `dtype` over the level's boxes, every cell counted.
    pub fn raw_bytes(&self, dtype: DType) -> u64 {
        self.boxes.iter().map(|b| b.cells().unwrap_or(0) as u64 * dtype.size() as u64).sum()
    }
}

pub struct SnapshotSpec {
    /// Per dimension, whether boxes index nodes rather than cells.
    pub node: Vec<bool>,
    pub fields: Vec<FieldSpec>,
    pub levels: Vec<LevelSpec>,
    pub prob_lo: Vec<f64>,
    pub prob_hi: Vec<f64>,
    pub coord_sys: i64,
    pub time: f64,
    pub step: i64,
    /// Where the data came from (format, path...), kept as given.
    pub source: Value,
}

#[derive(Clone, Debug)]
pub struct WriteOptions {
    pub preset: Preset,
    /// Unit block edge (default: measured per level and field).
    pub unit: Option<usize>,
    /// Chunk edge in cells (default: like the level's boxes, larger where that codes much smaller).
    pub chunk: Option<usize>,
    pub threads: Option<usize>,
    pub predictor: Option<PredictorKind>,
    /// Shared lossless encoding (off: statistics per chunk, an ablation).
    pub shared_tables: bool,
    /// AMRIC's regression block rule.
    pub adaptive_block: bool,
    /// Keep each level's mean (see `conservation`).
    pub conserve_mean: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            preset: Preset::Ratio,
            unit: None,
            chunk: None,
            threads: None,
            predictor: None,
            shared_tables: true,
            adaptive_block: true,
            conserve_mean: true,
        }
    }
}

/// What one (level, field) became.
#[derive(Clone, Debug)]
pub struct FieldSummary {
    pub stats: FieldStats,
    pub unit: usize,
    pub chunk: usize,
    pub predictor: String,
    pub abs_bound: f64,
}

#[derive(Clone, Debug)]
pub struct WriteSummary {
    pub snapshot: String,
    pub path: PathBuf,
    /// Per level, per field.
    pub fields: Vec<Vec<FieldSummary>>,
    pub original_bytes: u64,
    /// The snapshot file's size: every byte it takes.
    pub stored_bytes: u64,
}

/// The box views of one field of one level, in its element type.
enum Views<'a> {
    F32(Vec<BoxView<'a, f32>>),
    F64(Vec<BoxView<'a, f64>>),
}

fn views<'a, T: Element>(
    level: &LevelSpec,
    mine: &[usize],
    data: &'a [BoxData<'a>],
    masks: &'a [Option<Vec<bool>>],
    pick: impl Fn(&'a Values<'a>) -> Option<&'a [T]>,
    field: &str,
) -> Result<Vec<BoxView<'a, T>>> {
    mine.iter()
        .zip(data)
        .map(|(&i, d)| {
            let (b, m) = (&level.boxes[i], &masks[i]);
            let values = pick(&d.values).ok_or_else(|| invalid!("field {field:?} box {i}: values of another type than the field's"))?;
            Ok(BoxView { lo: b.lo.clone(), hi: b.hi.clone(), data: values, layout: d.layout, stored: m.as_deref(), ghost: d.ghost.clone() })
        })
        .collect()
}

/// Calls `f` on every stored value of a box.
fn for_each_stored<T: Element>(b: &BoxView<T>, mut f: impl FnMut(T)) {
    if b.stored.is_none() && b.ghost.iter().all(|&g| g == 0) {
        // Every value is a stored cell (most boxes: those of the finest level, all uncovered).
        return b.data.iter().for_each(|&v| f(v));
    }
    let nd = b.lo.len();
    let shape = b.shape();
    let g = |d: usize| b.ghost.get(d).copied().unwrap_or(0);
    let data_shape: Vec<usize> = (0..nd).map(|d| shape[d] + 2 * g(d)).collect();
    let rows = IBox::new(vec![0; nd], (0..nd).map(|d| if d + 1 == nd { 0 } else { shape[d] as i64 - 1 }).collect());
    let (row, stride) = match b.layout {
        Layout::C => (shape[nd - 1], 1usize),
        Layout::Fortran => (shape[nd - 1], data_shape[..nd - 1].iter().product()),
    };
    let mut at = 0usize;
    amrzip_amr::boxes::for_each_cell(&rows, |r| {
        let offset = match b.layout {
            Layout::C => (0..nd).fold(0usize, |o, d| o * data_shape[d] + r[d] as usize + g(d)),
            Layout::Fortran => (0..nd).rev().fold(0usize, |o, d| o * data_shape[d] + r[d] as usize + g(d)),
        };
        for k in 0..row {
            if b.stored.is_none_or(|s| s[at + k]) {
                f(b.data[offset + k * stride]);
            }
        }
        at += row;
    });
}

/// (min, max) of the finite stored values (min > max when there are none).
fn stored_range<T: Element>(boxes: &[BoxView<T>]) -> (f64, f64) {
    boxes
        .par_iter()
        .map(|b| {
            // Contiguous values: the codec's vectorised sweeps (a running min/max value by value
            // is a serial chain of float compares). The stored-cell flags are in C order.
            if b.ghost.iter().all(|&g| g == 0) {
                match (b.stored, b.layout) {
                    (None, _) => return amrzip_codec::finite_range(b.data),
                    (Some(keep), Layout::C) => return amrzip_codec::finite_range_where(b.data, keep),
                    _ => {}
                }
            }
            let mut r = (f64::INFINITY, f64::NEG_INFINITY);
            for_each_stored(b, |v| {
                let v = v.to_f64();
                if v.is_finite() {
                    r = (r.0.min(v), r.1.max(v));
                }
            });
            r
        })
        .reduce(|| (f64::INFINITY, f64::NEG_INFINITY), |a, b| (a.0.min(b.0), a.1.max(b.1)))
}

fn stored_peak<T: Element>(boxes: &[BoxView<T>]) -> f64 {
    boxes
        .par_iter()
        .map(|b| {
            let mut peak = 0.0f64;
            for_each_stored(b, |v| {
                let v = v.to_f64();
                if v.is_finite() {
                    peak = peak.max(v.abs());
                }
            });
            peak
        })
        .reduce(|| 0.0, f64::max)
}

/// One field of one level, compressed.
struct Coded {
    streams: LevelStreams,
    unit: usize,
    eb: f64,
    offset: f64,
}

/// A field's layout trials, and with `keep` the streams of each layout (unit, chunk edge).
struct FieldTrials {
    sizes: chunking::Trials,
    kept: BTreeMap<(usize, usize), LevelStreams>,
}

/// The predictor choice of a field, made once for its layout trials and its coding: on unit
/// blocks of the first candidate layout spread over all its boxes (a choice made on the trials'
/// sample, runs of neighbouring boxes, cost 2.6% of the Nyx-like density's ratio at 1e-4).
fn field_choice<T: Element>(
    boxes: &[BoxView<T>],
    origin: &[i64],
    (unit, chunk): (usize, usize),
    cfg: &Config,
    eb: f64,
    o: &WriteOptions,
    sampler: Option<&SpreadBlocks<T>>,
) -> Result<Choice> {
    let dim = origin.len();
    let tiling = Tiling::new(origin.to_vec(), vec![unit; dim], vec![chunk; dim]).map_err(|e| invalid!("{e}"))?;
    let choice = amrzip_amr::choose_predictor(boxes, &tiling, cfg, eb, o.adaptive_block, sampler.map(|s| s as &dyn Spread<T>))?;
    sampler.map_or(Ok(()), SpreadBlocks::check)?;
    Ok(choice)
}

/// Measures the candidate layouts of a field on a sample of its boxes with the predictor
/// `choice`. With `keep` (a sample of every box, in the speed preset), the trials keep their
/// streams, numbering their tables from `keep`: the chosen layout's are then the field's, not
/// coded a second time.
#[allow(clippy::too_many_arguments)]
fn field_trials<T: Element>(
    boxes: &[BoxView<T>],
    sample: &[usize],
    origin: &[i64],
    candidates: &[(usize, usize)],
    cfg: &Config,
    eb: f64,
    o: &WriteOptions,
    keep: Option<u32>,
    choice: &Choice,
) -> Result<FieldTrials> {
    let picked: Vec<BoxView<T>> = sample.iter().map(|&i| reborrow(&boxes[i])).collect();
    let dim = origin.len();
    let mut kept = BTreeMap::new();
    let how = keep.map_or(Keep::Size, |first_table| Keep::Streams { measure: o.conserve_mean, first_table });
    let sizes = chunking::trials(candidates, |u, edges| {
        let tiling = Tiling::new(origin.to_vec(), vec![u; dim], vec![edges[0]; dim]).map_err(|e| invalid!("{e}"))?;
        let shapes: Vec<Vec<usize>> = edges.iter().map(|&c| vec![c; dim]).collect();
        let (trials, _) =
            amrzip_amr::trial_layouts(&picked, &tiling, &shapes, cfg, eb, o.adaptive_block, o.shared_tables, Some(choice), how)?;
        Ok::<_, Error>(
            trials
                .into_iter()
                .zip(edges)
                .map(|(t, &c)| {
                    if let Some(s) = t.streams {
                        kept.insert((u, c), s);
                    }
                    t.size
                })
                .collect(),
        )
    })?;
    Ok(FieldTrials { sizes, kept })
}

/// The share of their cells the unit blocks of each candidate unit store over the whole level
/// (`masks`: each box's stored cells), for `chunking::MIN_FILL`; the first unit, the blocking
/// factor's, is not measured. The level's geometry alone decides, so every rank finds the same.
fn unit_fill(boxes: &[IBox], masks: &[Option<Vec<bool>>], origin: &[i64], candidates: &[(usize, usize)]) -> Result<BTreeMap<usize, f64>> {
    let largest = boxes.iter().map(|b| b.cells().unwrap_or(0)).max().unwrap_or(0);
    let placeholder = vec![0f32; largest];
    let views = placeholder_views(boxes, masks, &placeholder);
    let dim = origin.len();
    let first = candidates.first().map_or(0, |c| c.0);
    let mut fill = BTreeMap::new();
    for &(u, c) in candidates {
        if u != first && !fill.contains_key(&u) {
            let tiling = Tiling::new(origin.to_vec(), vec![u; dim], vec![c; dim]).map_err(|e| invalid!("{e}"))?;
            fill.insert(u, ChunkPlan::new(&views, &tiling).map_err(|e| invalid!("{e}"))?.stored_fraction());
        }
    }
    Ok(fill)
}

fn reborrow<'a, T>(b: &BoxView<'a, T>) -> BoxView<'a, T> {
    BoxView { lo: b.lo.clone(), hi: b.hi.clone(), data: b.data, layout: b.layout, stored: b.stored, ghost: b.ghost.clone() }
}

/// Compresses a field with unit `unit` and chunk edge `edge`, keeping its mean if asked, with
/// the predictor `choice` (else chosen at the first pass, for the others); its chunks number
/// their tables from `first_table`. `kept`: the first pass's streams, when a layout trial coded
/// them.
#[allow(clippy::too_many_arguments)]
fn compress_field<T: Element>(
    boxes: &[BoxView<T>],
    origin: &[i64],
    unit: usize,
    edge: usize,
    cfg: &Config,
    eb: f64,
    o: &WriteOptions,
    first_table: usize,
    mut kept: Option<LevelStreams>,
    mut choice: Option<Choice>,
    group: &Group,
    sampler: Option<&SpreadBlocks<T>>,
) -> Result<Coded> {
    let dim = origin.len();
    let tiling = Tiling::new(origin.to_vec(), vec![unit; dim], vec![edge; dim]).map_err(|e| invalid!("{e}"))?;
    let mut compress = |eb: f64, measure: bool| -> Result<LevelStreams> {
        let first = u32::try_from(first_table).map_err(|_| invalid!("too many shared tables"))?;
        // `kept` is this first pass's coding, done by the layout trials.
        let streams = match kept.take() {
            Some(s) => s,
            None => {
                let sampler = sampler.map(|s| s as &dyn Spread<T>);
                amrzip_amr::compress_level(
                    boxes,
                    &tiling,
                    cfg,
                    eb,
                    o.adaptive_block,
                    o.shared_tables,
                    measure,
                    first,
                    choice.as_ref(),
                    sampler,
                )?
            }
        };
        sampler.map_or(Ok(()), SpreadBlocks::check)?;
        choice = Some(streams.choice.clone());
        Ok(streams)
    };
    if !o.conserve_mean {
        return Ok(Coded { streams: compress(eb, false)?, unit, eb, offset: 0.0 });
    }
    let epsilon = if T::DTYPE == DType::F32 { f32::EPSILON as f64 } else { f64::EPSILON };
    let (streams, eb, offset) = conserve(
        |eb| {
            let s = compress(eb, true)?;
            let (total, count) = if group.size() > 1 { spread_error(group, &s)? } else { s.error.unwrap_or((0.0, 0)) };
            Ok::<_, Error>((s, total, count))
        },
        eb,
        || {
            let mut peak = [stored_peak(boxes)];
            group.max(&mut peak)?;
            Ok(peak[0])
        },
        epsilon,
    )?;
    Ok(Coded { streams, unit, eb, offset })
}

fn checked_spec(spec: &SnapshotSpec, where_: &str) -> Result<SnapshotMeta> {
    let dim = spec.prob_lo.len();
    for f in &spec.fields {
        if f.name.is_empty() {
            return Err(invalid!("{where_}: field names must not be empty"));
        }
        if !(f.bound.is_finite() && f.bound >= 0.0) {
            return Err(invalid!("{where_}: field {:?}: the bound must be a finite number >= 0, got {}", f.name, f.bound));
        }
    }
    let meta = SnapshotMeta {
        version: SNAPSHOT_VERSION,
        dim,
        node: if spec.node.is_empty() { vec![false; dim] } else { spec.node.clone() },
        fields: spec.fields.iter().map(|f| f.name.clone()).collect(),
        dtypes: spec.fields.iter().map(|f| f.dtype).collect(),
        prob_lo: spec.prob_lo.clone(),
        prob_hi: spec.prob_hi.clone(),
        coord_sys: spec.coord_sys,
        time: spec.time,
        step: spec.step,
        levels: spec
            .levels
            .iter()
            .map(|l| LevelMeta {
                domain: l.domain.clone(),
                ref_ratio: l.ref_ratio.clone(),
                dx: l.dx.clone(),
                boxes: l.boxes.clone(),
                owners: l.owners.clone(),
            })
            .collect(),
        bounds: spec.fields.iter().map(|f| FieldBound { mode: f.mode, value: f.bound, abs: 0.0 }).collect(),
        source: spec.source.clone(),
    };
    meta.validate(where_).map_err(|e| Error::new(ErrorKind::Invalid, e.message))?;
    Ok(meta)
}

/// Runs `work` on the rayon pool of `threads` (all cores when None).
pub(crate) fn on_pool<R: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    amrzip_codec::run_with_threads(threads, || Ok(work()))?
}

/// Writes snapshot `name` into the store at `store` (created if absent), the values from `data`.
/// `progress(level, field)` is called as each (level, field)'s compression starts; an error it
/// returns stops the write (nothing is committed).
pub fn write_snapshot(
    store: &Path,
    name: &str,
    spec: &SnapshotSpec,
    data: &dyn BoxSource,
    options: &WriteOptions,
    progress: &mut dyn FnMut(usize, usize) -> Result<()>,
) -> Result<WriteSummary> {
    write_snapshot_parallel(&Serial, store, name, spec, data, options, progress)
}

/// [`write_snapshot`] by every rank of `comm` at once (`parallel`): `spec` holds every rank's
/// boxes, `owners` naming the rank holding each, and `data` this rank's boxes, in the order they
/// have in `spec`. Every rank gets the same result; an error on any rank stops them all.
pub fn write_snapshot_parallel(
    comm: &dyn Collective,
    store: &Path,
    name: &str,
    spec: &SnapshotSpec,
    data: &dyn BoxSource,
    options: &WriteOptions,
    progress: &mut dyn FnMut(usize, usize) -> Result<()>,
) -> Result<WriteSummary> {
    let group = Group::new(comm);
    guarded(&group, || write_on(&group, store, name, spec, data, options, progress))
}

/// Where a rank's entries go: straight into the file (one process), or kept until every
/// rank's are laid out.
enum Output {
    File(Box<ArchiveWriter>),
    Parts(Vec<(String, Vec<u8>)>),
}

impl Output {
    fn add(&mut self, name: &str, bytes: Vec<u8>) -> Result<()> {
        match self {
            Output::File(a) => a.add(name, &bytes),
            Output::Parts(p) => {
                p.push((name.to_string(), bytes));
                Ok(())
            }
        }
    }
}

fn write_on(
    group: &Group,
    store: &Path,
    name: &str,
    spec: &SnapshotSpec,
    data: &dyn BoxSource,
    options: &WriteOptions,
    progress: &mut dyn FnMut(usize, usize) -> Result<()>,
) -> Result<WriteSummary> {
    layout::check_snapshot_name(name)?;
    let where_ = format!("snapshot {name:?} of {}", store.display());
    let mut meta = checked_spec(spec, &where_)?;
    if let Some(u) = options.unit.filter(|u| !(2..=256).contains(u)) {
        return Err(invalid!("unit must be an integer from 2 to 256, got {u}"));
    }
    if options.chunk == Some(0) {
        return Err(invalid!("chunk must be a positive number of cells"));
    }
    let (rank, ranks) = (group.rank(), group.size());
    let parallel = ranks > 1;
    if parallel && !options.shared_tables {
        return Err(invalid!("parallel writes share coder statistics per rank: shared tables cannot be switched off"));
    }
    // Rank 0 starts the snapshot file; the others learn its name (or rank 0's error), and every
    // rank checks that all were asked the same (what each decides depends on it).
    let asked = format!(
        "{} {name} {options:?} {:?} {:?}",
        store.display(),
        spec.node,
        spec.fields.iter().map(|f| (&f.name, f.dtype, f.mode, f.bound)).collect::<Vec<_>>()
    );
    let (pending, temp) = begin_together(group, store, name, &asked, |r| {
        invalid!(
            "rank {r} was asked for another store, snapshot, fields, bounds or options than rank {rank}: every rank must pass the same"
        )
    })?;
    let threads = options.threads;
    let node = meta.node.clone();
    // Per level, this rank's boxes (by their index in the level).
    let mine: Vec<Vec<usize>> = spec
        .levels
        .iter()
        .map(|lev| {
            if lev.owners.len() != lev.boxes.len() && parallel {
                return Err(invalid!("a parallel write needs the owner of every box"));
            }
            Ok((0..lev.boxes.len()).filter(|&i| !parallel || lev.owners[i] == rank as i64).collect())
        })
        .collect::<Result<_>>()?;
    let coverages: Vec<Coverage> = spec
        .levels
        .iter()
        .enumerate()
        .map(|(l, lev)| Coverage::new(spec.levels.get(l + 1).map_or(&[][..], |f| &f.boxes[..]), &lev.ref_ratio, &node))
        .collect();
    // Per level and box: the cells to store (None: all).
    let masks: Vec<Vec<Option<Vec<bool>>>> = spec
        .levels
        .iter()
        .zip(&coverages)
        .map(|(lev, coverage)| on_pool(threads, || Ok(lev.boxes.par_iter().map(|b| stored_mask(b, coverage)).collect())))
        .collect::<Result<_>>()?;
    // Calls `f` with the box views of field `f` of level `l` (this rank's boxes).
    let with_views = |l: usize, f: usize, work: &mut dyn FnMut(&Views) -> Result<()>| -> Result<()> {
        let (name, lev, mine) = (&spec.fields[f].name, &spec.levels[l], &mine[l]);
        data.with_boxes(l, f, &mut |boxes| {
            if boxes.len() != mine.len() {
                return Err(invalid!("level {l} field {name:?}: data for {} boxes, {} declared", boxes.len(), mine.len()));
            }
            let v = match spec.fields[f].dtype {
                DType::F32 => {
                    Views::F32(views(lev, mine, boxes, &masks[l], |v| if let Values::F32(s) = v { Some(*s) } else { None }, name)?)
                }
                DType::F64 => {
                    Views::F64(views(lev, mine, boxes, &masks[l], |v| if let Values::F64(s) = v { Some(*s) } else { None }, name)?)
                }
            };
            work(&v)
        })
    };
    // Absolute bounds: a relative one is a fraction of the range of the stored cells.
    for (f, field) in spec.fields.iter().enumerate() {
        meta.bounds[f].abs = match field.mode {
            BoundMode::Abs => field.bound,
            BoundMode::Rel => {
                let mut range = (f64::INFINITY, f64::NEG_INFINITY);
                for l in 0..spec.levels.len() {
                    with_views(l, f, &mut |v| {
                        let r = match v {
                            Views::F32(v) => on_pool(threads, || Ok(stored_range(v)))?,
                            Views::F64(v) => on_pool(threads, || Ok(stored_range(v)))?,
                        };
                        range = (range.0.min(r.0), range.1.max(r.1));
                        Ok(())
                    })?;
                }
                let mut both = [-range.0, range.1];
                group.max(&mut both)?;
                let range = (-both[0], both[1]);
                // Like the array codec: a hair under the exact product, so rounding cannot exceed it.
                if range.0 > range.1 {
                    0.0
                } else {
                    field.bound * (range.1 - range.0) * (1.0 - 4.0 * f64::EPSILON)
                }
            }
        };
    }
    let mut output = match &pending {
        Some(p) if !parallel => Output::File(Box::new(ArchiveWriter::new(p.file()?, &temp))),
        _ => Output::Parts(Vec::new()),
    };
    let mut summary =
        WriteSummary { snapshot: name.to_string(), path: PathBuf::new(), fields: Vec::new(), original_bytes: 0, stored_bytes: 0 };
    // What each rank owns so far, over all levels (PnetCDF's workload penalty).
    let mut owned = vec![0.0; ranks];
    for (l, lev) in spec.levels.iter().enumerate() {
        let origin = lev.domain.lo.clone();
        let stores_cells = masks[l].iter().any(|m| m.as_ref().is_none_or(|m| m.contains(&true)));
        let mut candidates = chunking::candidates(&lev.boxes, &node, &origin, options.unit, options.chunk, stores_cells);
        if candidates.is_empty() {
            return Err(invalid!("level {l}: no unit block and chunk edge fit unit={:?}, chunk={:?}", options.unit, options.chunk));
        }
        let nf = spec.fields.len();
        let cfgs: Vec<Config> = meta
            .bounds
            .iter()
            .map(|b| Config { bound: ErrorBound::Absolute(b.abs), preset: options.preset, threads, predictor: options.predictor })
            .collect();
        let cells: Vec<usize> = lev.boxes.iter().map(|b| b.cells().unwrap_or(usize::MAX)).collect();
        let speed = options.preset == Preset::Speed;
        // Boxes of the level, wherever they are: every rank decides on the same ones.
        let sample = chunking::trial_sample(&cells, chunking::trial_budget(speed, cells.iter().sum()));
        if candidates.len() > 1 {
            let fill = on_pool(threads, || unit_fill(&lev.boxes, &masks[l], &origin, &candidates))?;
            candidates.retain(|(u, _)| fill.get(u).is_none_or(|&f| f >= chunking::MIN_FILL));
        }
        let measured = candidates.len() > 1 && !lev.boxes.is_empty();
        // The level's blocks as parallel predictor choices see them, described once per tiling.
        let known = Described::default();
        // Every field measures the candidates on the sample; the level takes one chunk edge for
        // all, each field its unit.
        let mut trials = Vec::with_capacity(nf);
        let mut kept = Vec::with_capacity(nf);
        let mut choices = vec![None; nf];
        // The predictor choice gathers the chunks of the blocks it samples, so it is made on
        // chunks that follow the boxes: 32^3 chunks over 16^3 boxes gather 8x the cells (the
        // Nyx-like write's peak 7% higher, and another sample of blocks).
        let choice_edge = match options.chunk {
            Some(_) => candidates[0].1,
            None => chunking::level_box_edge(&lev.boxes, &node, candidates[0].0).min(candidates[0].1),
        };
        if measured || (choice_edge < candidates[0].1 && !lev.boxes.is_empty()) {
            let first = (candidates[0].0, choice_edge);
            for (f, cfg) in cfgs.iter().enumerate() {
                let eb = meta.bounds[f].abs;
                // The choice, on blocks spread over the whole level (every rank's).
                with_views(l, f, &mut |views| {
                    choices[f] = Some(match views {
                        Views::F32(v) => on_pool(threads, || {
                            spread(group, lev, &masks[l], &known, v, |s| field_choice(v, &origin, first, cfg, eb, options, s))
                        })?,
                        Views::F64(v) => on_pool(threads, || {
                            spread(group, lev, &masks[l], &known, v, |s| field_choice(v, &origin, first, cfg, eb, options, s))
                        })?,
                    });
                    Ok(())
                })?;
            }
        }
        if measured {
            // In a parallel write each rank measures some of the fields (f mod ranks), on the
            // sampled boxes the others send it, all fields' at once.
            let samples = if parallel { sample_exchange(group, l, spec, &mine[l], &sample, &with_views)? } else { Vec::new() };
            for (f, cfg) in cfgs.iter().enumerate() {
                let eb = meta.bounds[f].abs;
                // In the speed preset (one predictor), trials on every box code the level as
                // the final pass would: they keep their streams. With shared tables each field
                // stores one, so field f's is table f.
                let keep = (speed && !parallel && sample.len() == lev.boxes.len() && options.shared_tables).then_some(f as u32);
                let choice = choices[f].as_ref().expect("made above");
                let mut measure = |views: &Views, picked: &[usize]| -> Result<()> {
                    let t = match views {
                        Views::F32(v) => {
                            on_pool(threads, || field_trials(v, picked, &origin, &candidates, cfg, eb, options, keep, choice))?
                        }
                        Views::F64(v) => {
                            on_pool(threads, || field_trials(v, picked, &origin, &candidates, cfg, eb, options, keep, choice))?
                        }
                    };
                    trials.push(t.sizes);
                    kept.push(t.kept);
                    Ok(())
                };
                if !parallel {
                    with_views(l, f, &mut |views| measure(views, &sample))?;
                } else if f % ranks != rank {
                    trials.push(Vec::new());
                    kept.push(BTreeMap::new());
                } else {
                    let picked: Vec<usize> = (0..sample.len()).collect();
                    match spec.fields[f].dtype {
                        DType::F32 => measure(&Views::F32(sample_views(&unpack_boxes::<f32>(&samples[f], spec, l)?, &masks[l])), &picked)?,
                        DType::F64 => measure(&Views::F64(sample_views(&unpack_boxes::<f64>(&samples[f], spec, l)?, &masks[l])), &picked)?,
                    }
                }
            }
            if parallel {
                trials = shared_trials(group, &trials)?;
            }
        }
        let space = meta.index_space(l).shape();
        let edge = if measured {
            // The trials code a sample; indexes are counted for the whole level, scaled to it.
            let sampled = sample.iter().map(|&i| cells[i]).sum::<usize>() as f64 / cells.iter().sum::<usize>().max(1) as f64;
            let edges: BTreeSet<usize> = candidates.iter().map(|&(_, c)| c).collect();
            let overhead: BTreeMap<usize, usize> = edges
                .into_iter()
                .map(|c| (c, (chunking::index_bytes(&lev.boxes, &origin, &space, nf, c) as f64 * sampled) as usize))
                .collect();
            chunking::choose_edge(&trials, candidates[0].1, |c| overhead[&c])
        } else {
            candidates[0].1
        };
        // A parallel write gives each shard an owner, which gets every rank's part of it.
        let owned_here = parallel
            .then(|| {
                on_pool(threads, || Ok(Ownership::of_level(&lev.boxes, &lev.owners, &masks[l], &origin, &space, edge, nf, &mut owned)))
            })
            .transpose()?;
        let mut coded = Vec::with_capacity(nf);
        for f in 0..nf {
            // Reported as each field's compression starts: that is most of the work.
            progress(l, f)?;
            let unit = if measured { chunking::choose_unit(&trials[f], edge) } else { candidates[0].0 };
            let eb = meta.bounds[f].abs;
            let mut choice = choices[f].take();
            let Some(own) = &owned_here else {
                with_views(l, f, &mut |views| {
                    let first: usize = coded.iter().map(|c: &Coded| c.streams.codebooks.len()).sum();
                    let streams = kept.get_mut(f).and_then(|k| k.remove(&(unit, edge))).filter(|_| first == f);
                    let choice = choice.take();
                    coded.push(match views {
                        Views::F32(v) => on_pool(threads, || {
                            compress_field(v, &origin, unit, edge, &cfgs[f], eb, options, first, streams, choice, group, None)
                        })?,
                        Views::F64(v) => on_pool(threads, || {
                            compress_field(v, &origin, unit, edge, &cfgs[f], eb, options, first, streams, choice, group, None)
                        })?,
                    });
                    Ok(())
                })?;
                continue;
            };
            // Every rank learns the same table per field, pooled (see `SpreadBlocks`): field f's is table f.
            let first = f;
            let mut outgoing = vec![Vec::new(); ranks];
            with_views(l, f, &mut |views| {
                match views {
                    Views::F32(v) => pack_pieces(v, &mine[l], own, &mut outgoing),
                    Views::F64(v) => pack_pieces(v, &mine[l], own, &mut outgoing),
                }
                Ok(())
            })?;
            let incoming = group.exchange(outgoing)?;

            let job = PieceJob {
                dim: meta.dim,
                lev,
                masks: &masks[l],
                known: &known,
                coverage: &coverages[l],
                origin: &origin,
                tiles: (unit, edge),
                cfg: &cfgs[f],
                eb,
                options,
                first,
                group,
            };
            coded.push(match spec.fields[f].dtype {
                DType::F32 => job.compress::<f32>(&incoming, choice)?,
                DType::F64 => job.compress::<f64>(&incoming, choice)?,
            });
        }
        let level_fields = store_level(group, &mut output, &meta, l, lev, coded, edge, owned_here.as_ref(), spec)?;
        summary.original_bytes += level_fields.iter().map(|f| f.stats.original_bytes).sum::<u64>();
        summary.fields.push(level_fields);
    }
    if rank == 0 {
        output.add(layout::ROOT, group_json(meta.to_json()))?;
    }
    match output {
        Output::File(archive) => {
            summary.stored_bytes = archive.finish()?.metadata().map_err(|e| Error::io(&temp, e))?.len();
            summary.path = pending.expect("rank 0 writes").commit()?;
        }
        Output::Parts(entries) => {
            let len = write_archive(group, &temp, &entries)?;
            // Every rank returns what rank 0 committed.
            (summary.stored_bytes, summary.path) = commit_together(group, pending, len)?;
        }
    }
    Ok(summary)
}

/// A shard's chunks: per inner chunk, its position in the array and its bytes.
type Slots = Vec<Option<(u64, Vec<u8>)>>;

/// Sends the chunks this rank compressed (`shards`, filled where it owns chunks) to the writers
/// of their shards; returns the shards this rank writes, with every rank's chunks.
fn to_writers(group: &Group, shards: BTreeMap<Vec<u64>, Slots>, own: &Ownership, slots: usize) -> Result<BTreeMap<Vec<u64>, Slots>> {
    let mut outgoing = vec![Vec::new(); group.size()];
    let mut kept = BTreeMap::new();
    for (coords, chunks) in shards {
        let key: Vec<i64> = coords.iter().map(|&c| c as i64).collect();
        let writer = *own.writers.get(&key).ok_or_else(|| invalid!("a chunk was coded outside the level's shards"))?;
        if writer == group.rank() {
            kept.insert(coords, chunks);
            continue;
        }
        let msg = &mut outgoing[writer];
        for (inner, slot) in chunks.iter().enumerate() {
            if let Some((position, bytes)) = slot {
                msg.extend_from_slice(&(coords.len() as u64).to_le_bytes());
                coords
                    .iter()
                    .chain([&(inner as u64), position, &(bytes.len() as u64)])
                    .for_each(|v| msg.extend_from_slice(&v.to_le_bytes()));
                msg.extend_from_slice(bytes);
            }
        }
    }
    for part in group.exchange(outgoing)? {
        let mut r = ByteReader::new(&part);
        while r.remaining() > 0 {
            let dim = r.u64("shard dimensions")? as usize;
            let coords = (0..dim).map(|_| r.u64("shard coordinate")).collect::<std::result::Result<Vec<_>, _>>()?;
            let (inner, position, len) = (r.u64("inner chunk")? as usize, r.u64("position")?, r.u64("chunk length")? as usize);
            let bytes = r.take(len, "chunk")?.to_vec();
            let shard = kept.entry(coords).or_insert_with(|| vec![None; slots]);
            *shard.get_mut(inner).ok_or_else(|| invalid!("a rank sent a chunk outside its shard"))? = Some((position, bytes));
        }
    }
    Ok(kept)
}

/// Every field's trials, field f's from rank f mod ranks (which measured it).
fn shared_trials(group: &Group, trials: &[chunking::Trials]) -> Result<Vec<chunking::Trials>> {
    let mut msg = Vec::new();
    for t in trials.iter().skip(group.rank()).step_by(group.size()) {
        msg.extend_from_slice(&(t.len() as u64).to_le_bytes());
        t.iter().for_each(|&((u, c), size)| [u, c, size].iter().for_each(|&v| msg.extend_from_slice(&(v as u64).to_le_bytes())));
    }
    let parts = group.gather(&msg)?;
    let mut readers: Vec<ByteReader> = parts.iter().map(|p| ByteReader::new(p)).collect();
    (0..trials.len())
        .map(|f| {
            let r = &mut readers[f % group.size()];
            let n = r.u64("trial count")?;
            (0..n).map(|_| Ok(((r.u64("unit")? as usize, r.u64("chunk")? as usize), r.u64("size")? as usize))).collect::<Result<_>>()
        })
        .collect()
}

/// Cuts this rank's boxes (`views`, level boxes `mine`) into the pieces of each shard, packed
/// for the shard's owner.
fn pack_pieces<T: Element>(views: &[BoxView<T>], mine: &[usize], own: &Ownership, outgoing: &mut [Vec<u8>]) {
    for (v, &i) in views.iter().zip(mine) {
        for (u, region) in &own.pieces[i] {
            let piece = Piece { index: i as u32, region: region.clone(), values: extract(v, region) };
            pack(&piece, &mut outgoing[own.owner[*u]]);
        }
    }
}

/// One field of a level, to compress from the pieces other ranks send this one (those of the
/// chunks it owns).
struct PieceJob<'a> {
    dim: usize,
    lev: &'a LevelSpec,
    masks: &'a [Option<Vec<bool>>],
    known: &'a Described,
    coverage: &'a Coverage,
    origin: &'a [i64],
    /// (unit, chunk edge).
    tiles: (usize, usize),
    cfg: &'a Config,
    eb: f64,
    options: &'a WriteOptions,
    first: usize,
    group: &'a Group<'a>,
}

impl PieceJob<'_> {
    fn compress<T: Element>(&self, incoming: &[Vec<u8>], choice: Option<Choice>) -> Result<Coded> {
        let mut pieces: Vec<Piece<T>> = Vec::new();
        for msg in incoming {
            pieces.extend(unpack(msg, self.dim, &self.lev.boxes)?);
        }
        // In box order whoever sent them, so the coding does not depend on the ranks' order.
        pieces.sort_by(|a, b| (a.index, &a.region.lo).cmp(&(b.index, &b.region.lo)));
        let masks: Vec<Option<Vec<bool>>> = pieces.par_iter().map(|p| stored_mask(&p.region, self.coverage)).collect();
        let views = piece_views(&pieces, masks.iter().map(Option::as_deref));
        let ((unit, edge), o) = (self.tiles, self.options);
        on_pool(o.threads, || {
            spread(self.group, self.lev, self.masks, self.known, &views, |s| {
                compress_field(&views, self.origin, unit, edge, self.cfg, self.eb, o, self.first, None, choice, self.group, s)
            })
        })
    }
}

/// Runs `work` with the sampler of the level's blocks across the ranks (`local`: this rank's
/// boxes or pieces); with one process, without (the plan's own blocks are all of them).
fn spread<T: Element, R>(
    group: &Group,
    lev: &LevelSpec,
    masks: &[Option<Vec<bool>>],
    known: &Described,
    local: &[BoxView<T>],
    work: impl FnOnce(Option<&SpreadBlocks<T>>) -> Result<R>,
) -> Result<R> {
    if group.size() == 1 {
        return work(None);
    }
    let largest = lev.boxes.iter().map(|b| b.cells().unwrap_or(0)).max().unwrap_or(0);
    let placeholder = vec![T::default(); largest];
    work(Some(&SpreadBlocks::new(group, &lev.boxes, masks, &placeholder, local, known)))
}

/// Calls its `work` with the box views of a (level, field): see `write_on`.
type WithViews<'a> = dyn Fn(usize, usize, &mut dyn FnMut(&Views) -> Result<()>) -> Result<()> + 'a;

/// The sampled boxes of every field of level `l`, each sent to the rank measuring the field (f
/// mod ranks) in one exchange: per field, what each rank sent (empty for the others' fields).
fn sample_exchange(
    group: &Group,
    l: usize,
    spec: &SnapshotSpec,
    mine: &[usize],
    sample: &[usize],
    with_views: &WithViews,
) -> Result<Vec<Vec<Vec<u8>>>> {
    let (ranks, nf) = (group.size(), spec.fields.len());
    let wanted: BTreeSet<usize> = sample.iter().copied().collect();
    let mut outgoing = vec![Vec::new(); ranks];
    for f in 0..nf {
        let msg = packed_sample((l, f), spec, mine, &wanted, with_views)?;
        let to: &mut Vec<u8> = &mut outgoing[f % ranks];
        to.extend_from_slice(&(f as u64).to_le_bytes());
        to.extend_from_slice(&(msg.len() as u64).to_le_bytes());
        to.extend_from_slice(&msg);
    }
    let mut per_field = vec![Vec::new(); nf];
    for part in group.exchange(outgoing)? {
        let mut r = ByteReader::new(&part);
        while r.remaining() > 0 {
            let f = r.u64("field")? as usize;
            let n = r.u64("sample length")? as usize;
            let bytes = r.take(n, "sampled boxes")?.to_vec();
            per_field.get_mut(f).ok_or_else(|| invalid!("a rank sent the sample of field {f}"))?.push(bytes);
        }
    }
    Ok(per_field)
}

/// This rank's boxes of field `f` of level `l` that are `wanted`, packed whole.
fn packed_sample(
    (l, f): (usize, usize),
    spec: &SnapshotSpec,
    mine: &[usize],
    wanted: &BTreeSet<usize>,
    with_views: &WithViews,
) -> Result<Vec<u8>> {
    let mut msg = Vec::new();
    with_views(l, f, &mut |views| {
        match views {
            Views::F32(v) => pack_boxes(v, mine, wanted, &spec.levels[l].boxes, &mut msg),
            Views::F64(v) => pack_boxes(v, mine, wanted, &spec.levels[l].boxes, &mut msg),
        }
        Ok(())
    })?;
    Ok(msg)
}

/// Packs this rank's boxes (`views`, level boxes `mine`) that are `wanted`, whole.
fn pack_boxes<T: Element>(views: &[BoxView<T>], mine: &[usize], wanted: &BTreeSet<usize>, boxes: &[IBox], msg: &mut Vec<u8>) {
    for (v, &i) in views.iter().zip(mine) {
        if wanted.contains(&i) {
            pack(&Piece { index: i as u32, region: boxes[i].clone(), values: extract(v, &boxes[i]) }, msg);
        }
    }
}

/// Every rank's packed boxes, in box order.
fn unpack_boxes<T: Element>(parts: &[Vec<u8>], spec: &SnapshotSpec, l: usize) -> Result<Vec<Piece<T>>> {
    let mut boxes = Vec::new();
    for part in parts {
        boxes.extend(unpack::<T>(part, spec.prob_lo.len(), &spec.levels[l].boxes)?);
    }
    boxes.sort_by_key(|p| p.index);
    Ok(boxes)
}

/// Whole sampled boxes as views, each with its box's stored cells (`masks`, by box).
fn sample_views<'a, T: Element>(boxes: &'a [Piece<T>], masks: &'a [Option<Vec<bool>>]) -> Vec<BoxView<'a, T>> {
    piece_views(boxes, boxes.iter().map(|p| masks[p.index as usize].as_deref()))
}

/// Views of pieces (C order, no ghost cells), each with its stored cells from `stored`.
fn piece_views<'a, T: Element>(pieces: &'a [Piece<T>], stored: impl Iterator<Item = Option<&'a [bool]>>) -> Vec<BoxView<'a, T>> {
    pieces
        .iter()
        .zip(stored)
        .map(|(p, stored)| BoxView {
            lo: p.region.lo.clone(),
            hi: p.region.hi.clone(),
            data: &p.values,
            layout: Layout::C,
            stored,
            ghost: Vec::new(),
        })
        .collect()
}

/// The error of `streams` summed over every rank's chunks in lattice order, as one process sums
/// its own (`LevelStreams::error`), so the sum does not depend on how the chunks are spread.
fn spread_error(group: &Group, streams: &LevelStreams) -> Result<(f64, u64)> {
    let mut msg = Vec::new();
    for ((idx, _), (e, n)) in streams.chunks.iter().zip(&streams.chunk_errors) {
        msg.extend_from_slice(&(idx.len() as u64).to_le_bytes());
        idx.iter().for_each(|v| msg.extend_from_slice(&v.to_le_bytes()));
        msg.extend_from_slice(&e.to_le_bytes());
        msg.extend_from_slice(&n.to_le_bytes());
    }
    let mut all: Vec<(Vec<i64>, f64, u64)> = Vec::new();
    for part in group.gather(&msg)? {
        let mut r = ByteReader::new(&part);
        while r.remaining() > 0 {
            let dim = r.u64("chunk dimensions")? as usize;
            let idx = (0..dim).map(|_| r.u64("chunk index").map(|v| v as i64)).collect::<std::result::Result<Vec<_>, _>>()?;
            all.push((idx, r.f64("error")?, r.u64("cells")?));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(amrzip_amr::level_codec::sum_errors(all.into_iter().map(|(_, e, n)| (e, n))))
}

/// Writes a level's shards (this rank's, in a parallel write) and, on rank 0, the array
/// metadata; returns what each field became (summed over the ranks).
#[allow(clippy::too_many_arguments)]
fn store_level(
    group: &Group,
    output: &mut Output,
    meta: &SnapshotMeta,
    l: usize,
    lev: &LevelSpec,
    coded: Vec<Coded>,
    edge: usize,
    owned: Option<&Ownership>,
    spec: &SnapshotSpec,
) -> Result<Vec<FieldSummary>> {
    let dim = meta.dim;
    let nf = coded.len();
    let space = meta.index_space(l).shape();
    let grid: Vec<usize> = space.iter().map(|&n| n.div_ceil(edge)).collect();
    let (m, shard_count) = match owned {
        Some(o) => (o.m, o.writers.len()),
        None => {
            let present: BTreeSet<Vec<i64>> = coded.iter().flat_map(|c| c.streams.chunks.iter().map(|(i, _)| i.clone())).collect();
            let m = chunking::shard_factor(&present, nf, &grid);
            (m, present.iter().map(|c| c.iter().map(|&i| i / m as i64).collect::<Vec<_>>()).collect::<BTreeSet<_>>().len())
        }
    };
    let per_shard = m.pow(dim as u32);
    let mut shards: BTreeMap<Vec<u64>, Slots> = BTreeMap::new();
    let mut fields = Vec::with_capacity(nf);
    let mut codecs = Vec::with_capacity(nf);
    let mut tables = Vec::new();
    // Per field: stored cells, blocks, partial blocks, chunks and chunk bytes, summed over the
    // ranks (each rank has every field's tables: they are pooled).
    let mut sums = Vec::with_capacity(5 * nf);
    let mut rest = Vec::with_capacity(nf);
    for (f, c) in coded.into_iter().enumerate() {
        let first = tables.len();
        let table_bytes: usize = c.streams.codebooks.iter().map(Vec::len).sum();
        tables.extend(c.streams.codebooks);
        let mut chunk_bytes = 0usize;
        let chunks = c.streams.chunks.len();
        for (idx, bytes) in c.streams.chunks {
            let coords: Vec<u64> = idx.iter().map(|&i| i as u64 / m as u64).collect();
            let inner = idx.iter().fold(f as u64, |p, &i| p * m as u64 + i as u64 % m as u64);
            let position = idx.iter().zip(&grid).fold(f as u64, |p, (&i, &g)| p * g as u64 + i as u64);
            chunk_bytes += bytes.len() + shard::varint_len(position);
            shards.entry(coords).or_insert_with(|| vec![None; nf * per_shard])[inner as usize] = Some((position, bytes));
        }
        sums.extend([c.streams.stored_cells, c.streams.blocks, c.streams.partial_blocks, chunks, chunk_bytes].map(|v| v as f64));
        rest.push((first..tables.len(), table_bytes, c.unit, c.eb, c.offset, c.streams.predictor.to_string()));
    }
    group.sum(&mut sums)?;
    if let Some(o) = owned {
        shards = to_writers(group, shards, o, nf * per_shard)?;
    }
    for (f, (range, table_bytes, unit, eb, offset, predictor)) in rest.into_iter().enumerate() {
        let dtype = spec.fields[f].dtype;
        let original = lev.raw_bytes(dtype);
        let s = &sums[5 * f..5 * f + 5];
        let stats = FieldStats {
            stored_cells: s[0] as u64,
            blocks: s[1] as u64,
            partial_blocks: s[2] as u64,
            chunks: s[3] as u64,
            original_bytes: original,
            // Its chunks, its tables and its slots in the shard indexes.
            stored_bytes: (s[4] as usize + table_bytes + 16 * per_shard * shard_count) as u64,
        };
        let abs_bound = meta.bounds[f].abs;
        codecs.push(FieldCodec { dtype, unit: vec![unit; dim], abs_bound, eb, offset, predictor: predictor.clone(), tables: range });
        fields.push(FieldSummary { stats, unit, chunk: edge, predictor, abs_bound });
    }
    for (coords, chunks) in shards {
        output.add(&layout::shard_key(l, &coords), shard::build(&chunks))?;
    }
    if group.rank() == 0 {
        let level_array = LevelArray {
            fields: codecs,
            tables,
            chunk: vec![edge; dim],
            shard: vec![m; dim],
            stats: fields.iter().map(|f| f.stats.clone()).collect(),
        };
        let key = format!("{}/{}", layout::level_array(l), layout::ROOT);
        output.add(&key, level_array.to_zarr_json(&space, &meta.fields))?;
    }
    Ok(fields)
}
