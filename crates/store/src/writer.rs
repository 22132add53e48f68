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
use crate::shard;
use crate::store::Store;
use amrzip_amr::boxes::{stored_mask, Coverage};
use amrzip_amr::{BoxView, ChunkPlan, IBox, Keep, Layout, LevelStreams, Tiling};
use amrzip_codec::blockset::Choice;
use amrzip_codec::{Config, DType, Element, ErrorBound, PredictorKind, Preset};
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
    data: &'a [BoxData<'a>],
    masks: &'a [Option<Vec<bool>>],
    pick: impl Fn(&'a Values<'a>) -> Option<&'a [T]>,
    field: &str,
) -> Result<Vec<BoxView<'a, T>>> {
    level
        .boxes
        .iter()
        .zip(data)
        .zip(masks)
        .enumerate()
        .map(|(i, ((b, d), m))| {
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
) -> Result<Choice> {
    let dim = origin.len();
    let tiling = Tiling::new(origin.to_vec(), vec![unit; dim], vec![chunk; dim]).map_err(|e| invalid!("{e}"))?;
    Ok(amrzip_amr::choose_predictor(boxes, &tiling, cfg, eb, o.adaptive_block)?)
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
        let (trials, _) = amrzip_amr::trial_layouts(&picked, &tiling, &shapes, cfg, eb, o.adaptive_block, o.shared_tables, Some(choice), how)?;
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

/// The speed preset's candidates: those whose unit blocks would be at least
/// `chunking::SPEED_MIN_FILL` stored on the sample (the first unit, the blocking factor's, always
/// stays). What is stored is the level's, whatever the field: `boxes` may be any field's.
fn speed_candidates<T: Element>(
    boxes: &[BoxView<T>],
    sample: &[usize],
    origin: &[i64],
    candidates: &[(usize, usize)],
) -> Result<Vec<(usize, usize)>> {
    let picked: Vec<BoxView<T>> = sample.iter().map(|&i| reborrow(&boxes[i])).collect();
    let dim = origin.len();
    let first = candidates.first().map_or(0, |c| c.0);
    let mut fill = BTreeMap::new();
    for &(u, c) in candidates {
        if u != first && !fill.contains_key(&u) {
            let tiling = Tiling::new(origin.to_vec(), vec![u; dim], vec![c; dim]).map_err(|e| invalid!("{e}"))?;
            fill.insert(u, ChunkPlan::new(&picked, &tiling).map_err(|e| invalid!("{e}"))?.stored_fraction());
        }
    }
    Ok(candidates.iter().copied().filter(|(u, _)| fill.get(u).is_none_or(|&f| f >= chunking::SPEED_MIN_FILL)).collect())
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
) -> Result<Coded> {
    let dim = origin.len();
    let tiling = Tiling::new(origin.to_vec(), vec![unit; dim], vec![edge; dim]).map_err(|e| invalid!("{e}"))?;
    let mut compress = |eb: f64, measure: bool| -> Result<LevelStreams> {
        let first = u32::try_from(first_table).map_err(|_| invalid!("too many shared tables"))?;
        // `kept` is this first pass's coding, done by the layout trials.
        let streams = match kept.take() {
            Some(s) => s,
            None => {
                amrzip_amr::compress_level(boxes, &tiling, cfg, eb, o.adaptive_block, o.shared_tables, measure, first, choice.as_ref())?
            }
        };
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
            let (total, count) = s.error.unwrap_or((0.0, 0));
            Ok::<_, Error>((s, total, count))
        },
        eb,
        || stored_peak(boxes),
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
fn on_pool<R: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
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
    layout::check_snapshot_name(name)?;
    let where_ = format!("snapshot {name:?} of {}", store.display());
    let mut meta = checked_spec(spec, &where_)?;
    if let Some(u) = options.unit.filter(|u| !(2..=256).contains(u)) {
        return Err(invalid!("unit must be an integer from 2 to 256, got {u}"));
    }
    if options.chunk == Some(0) {
        return Err(invalid!("chunk must be a positive number of cells"));
    }
    let store = Store::open_or_create(store)?;
    let pending = store.begin(name)?;
    let temp = pending.temp_path().to_path_buf();
    let threads = options.threads;
    let node = meta.node.clone();
    // Per level and box: the cells to store (None: all).
    let masks: Vec<Vec<Option<Vec<bool>>>> = spec
        .levels
        .iter()
        .enumerate()
        .map(|(l, lev)| {
            let finer = spec.levels.get(l + 1).map_or(&[][..], |f| &f.boxes[..]);
            let coverage = Coverage::new(finer, &lev.ref_ratio, &node);
            on_pool(threads, || Ok(lev.boxes.par_iter().map(|b| stored_mask(b, &coverage)).collect()))
        })
        .collect::<Result<_>>()?;
    // Calls `f` with the box views of field `f` of level `l`.
    let with_views = |l: usize, f: usize, work: &mut dyn FnMut(&Views) -> Result<()>| -> Result<()> {
        let (name, lev) = (&spec.fields[f].name, &spec.levels[l]);
        data.with_boxes(l, f, &mut |boxes| {
            if boxes.len() != lev.boxes.len() {
                return Err(invalid!("level {l} field {name:?}: data for {} boxes, {} declared", boxes.len(), lev.boxes.len()));
            }
            let v = match spec.fields[f].dtype {
                DType::F32 => Views::F32(views(lev, boxes, &masks[l], |v| if let Values::F32(s) = v { Some(*s) } else { None }, name)?),
                DType::F64 => Views::F64(views(lev, boxes, &masks[l], |v| if let Values::F64(s) = v { Some(*s) } else { None }, name)?),
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
                // Like the array codec: a hair under the exact product, so rounding cannot exceed it.
                if range.0 > range.1 {
                    0.0
                } else {
                    field.bound * (range.1 - range.0) * (1.0 - 4.0 * f64::EPSILON)
                }
            }
        };
    }
    let mut archive = ArchiveWriter::new(pending.file()?, &temp);
    let mut summary =
        WriteSummary { snapshot: name.to_string(), path: PathBuf::new(), fields: Vec::new(), original_bytes: 0, stored_bytes: 0 };
    for (l, lev) in spec.levels.iter().enumerate() {
        let origin = lev.domain.lo.clone();
        let mut candidates = chunking::candidates(&lev.boxes, &node, &origin, options.unit, options.chunk);
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
        let sample = chunking::trial_sample(&cells, chunking::trial_budget(speed, cells.iter().sum()));
        if speed && candidates.len() > 1 && !lev.boxes.is_empty() && nf > 0 {
            // Once per level, on the first field's boxes (the stored cells are the level's).
            with_views(l, 0, &mut |views| {
                candidates = match views {
                    Views::F32(v) => on_pool(threads, || speed_candidates(v, &sample, &origin, &candidates))?,
                    Views::F64(v) => on_pool(threads, || speed_candidates(v, &sample, &origin, &candidates))?,
                };
                Ok(())
            })?;
        }
        let measured = candidates.len() > 1 && !lev.boxes.is_empty();
        // Every field measures the candidates on the sample; the level takes one chunk edge for
        // all, each field its unit.
        let mut trials = Vec::with_capacity(nf);
        let mut kept = Vec::with_capacity(nf);
        let mut choices = vec![None; nf];
        if measured {
            for (f, cfg) in cfgs.iter().enumerate() {
                let eb = meta.bounds[f].abs;
                // In the speed preset (one predictor), trials on every box code the level as
                // the final pass would: they keep their streams. With shared tables each field
                // stores one, so field f's is table f.
                let keep = (speed && sample.len() == lev.boxes.len() && options.shared_tables).then_some(f as u32);
                with_views(l, f, &mut |views| {
                    let first = candidates[0];
                    let (t, choice) = match views {
                        Views::F32(v) => on_pool(threads, || {
                            let c = field_choice(v, &origin, first, cfg, eb, options)?;
                            Ok((field_trials(v, &sample, &origin, &candidates, cfg, eb, options, keep, &c)?, c))
                        }),
                        Views::F64(v) => on_pool(threads, || {
                            let c = field_choice(v, &origin, first, cfg, eb, options)?;
                            Ok((field_trials(v, &sample, &origin, &candidates, cfg, eb, options, keep, &c)?, c))
                        }),
                    }?;
                    trials.push(t.sizes);
                    kept.push(t.kept);
                    choices[f] = Some(choice);
                    Ok(())
                })?;
            }
        }
        let edge = if measured {
            // The trials code a sample; indexes are counted for the whole level, scaled to it.
            let space = meta.index_space(l).shape();
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
        let mut coded = Vec::with_capacity(nf);
        for f in 0..nf {
            // Reported as each field's compression starts: that is most of the work.
            progress(l, f)?;
            with_views(l, f, &mut |views| {
                let unit = if measured { chunking::choose_unit(&trials[f], edge) } else { candidates[0].0 };
                let eb = meta.bounds[f].abs;
                let first: usize = coded.iter().map(|c: &Coded| c.streams.codebooks.len()).sum();
                let streams = kept.get_mut(f).and_then(|k| k.remove(&(unit, edge))).filter(|_| first == f);
                let choice = choices[f].take();
                coded.push(match views {
                    Views::F32(v) => {
                        on_pool(threads, || compress_field(v, &origin, unit, edge, &cfgs[f], eb, options, first, streams, choice))?
                    }
                    Views::F64(v) => {
                        on_pool(threads, || compress_field(v, &origin, unit, edge, &cfgs[f], eb, options, first, streams, choice))?
                    }
                });
                Ok(())
            })?;
        }
        let level_fields = store_level(&mut archive, &meta, l, lev, coded, edge, spec)?;
        summary.original_bytes += level_fields.iter().map(|f| f.stats.original_bytes).sum::<u64>();
        summary.fields.push(level_fields);
    }
    archive.add(layout::ROOT, &group_json(meta.to_json()))?;
    summary.stored_bytes = archive.finish()?.metadata().map_err(|e| Error::io(&temp, e))?.len();
    summary.path = pending.commit()?;
    Ok(summary)
}

/// Writes a level's shards and array metadata; returns what each field became.
#[allow(clippy::too_many_arguments)]
fn store_level(
    archive: &mut ArchiveWriter,
    meta: &SnapshotMeta,
    l: usize,
    lev: &LevelSpec,
    coded: Vec<Coded>,
    edge: usize,
    spec: &SnapshotSpec,
) -> Result<Vec<FieldSummary>> {
    let dim = meta.dim;
    let nf = coded.len();
    let space = meta.index_space(l).shape();
    let grid: Vec<usize> = space.iter().map(|&n| n.div_ceil(edge)).collect();
    let present: BTreeSet<Vec<i64>> = coded.iter().flat_map(|c| c.streams.chunks.iter().map(|(i, _)| i.clone())).collect();
    let m = chunking::shard_factor(&present, nf, &grid);
    let per_shard = m.pow(dim as u32);
    let shard_count = present.iter().map(|c| c.iter().map(|&i| i / m as i64).collect::<Vec<_>>()).collect::<BTreeSet<_>>().len();
    // Per shard, per inner chunk: the chunk's position in the array and its bytes.
    type Slots = Vec<Option<(u64, Vec<u8>)>>;
    let mut shards: BTreeMap<Vec<u64>, Slots> = BTreeMap::new();
    let mut fields = Vec::with_capacity(nf);
    let mut codecs = Vec::with_capacity(nf);
    let mut tables = Vec::new();
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
        let dtype = spec.fields[f].dtype;
        let itemsize = if dtype == DType::F32 { 4 } else { 8 };
        let original: u64 = lev.boxes.iter().map(|b| b.cells().unwrap_or(0) as u64 * itemsize).sum();
        let stats = FieldStats {
            stored_cells: c.streams.stored_cells as u64,
            blocks: c.streams.blocks as u64,
            partial_blocks: c.streams.partial_blocks as u64,
            chunks: chunks as u64,
            original_bytes: original,
            // Its chunks, its tables and its slots in the shard indexes.
            stored_bytes: (chunk_bytes + table_bytes + 16 * per_shard * shard_count) as u64,
        };
        let abs_bound = meta.bounds[f].abs;
        codecs.push(FieldCodec {
            dtype,
            unit: vec![c.unit; dim],
            abs_bound,
            eb: c.eb,
            offset: c.offset,
            predictor: c.streams.predictor.to_string(),
            tables: first..tables.len(),
        });
        fields.push(FieldSummary { stats, unit: c.unit, chunk: edge, predictor: c.streams.predictor.to_string(), abs_bound });
    }
    for (coords, chunks) in shards {
        archive.add(&layout::shard_key(l, &coords), &shard::build(&chunks))?;
    }
    let level_array = LevelArray {
        fields: codecs,
        tables,
        chunk: vec![edge; dim],
        shard: vec![m; dim],
        stats: fields.iter().map(|f| f.stats.clone()).collect(),
    };
    let key = format!("{}/{}", layout::level_array(l), layout::ROOT);
    archive.add(&key, &level_array.to_zarr_json(&space, &meta.fields))?;
    Ok(fields)
}
