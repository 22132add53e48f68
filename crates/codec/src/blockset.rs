//! Shared lossless encoding (SLE, after AMRIC): a set of unit blocks of one shape, each
//! predicted and quantized on its own (no prediction across block seams, so a block never
//! depends on which neighbours exist), their codes entropy-coded with one Huffman codebook
//! shared by every block set of an array and one lossless pass per set.
//!
//! A block may be partial: its mask says which cells are stored. The others are "don't care":
//! they take the zero-residual code and rebuild as their prediction, so they cost almost
//! nothing and never touch the bound of the stored cells.
//!
//! Layout (`docs/format.md` section 14): a short header, the raw bytes through the lossless
//! frames, one CRC32 over everything. What every set of an array shares (unit shape, bound)
//! lives in the array's metadata and is handed to the decoder: a chunk of a few blocks must not
//! pay for a self-describing header.

use crate::bytes::{crc32, put_varint, ByteReader};
use crate::compressor::{read_parts, read_segments, write_parts, write_segments};
use crate::element::{DType, Element};
use crate::entropy::frames;
use crate::entropy::huffman::{Codebook, Histogram};
use crate::entropy::rans;
use crate::entropy::residuals::{self, Layout, Part, Start, NEIGHBOURS};
use crate::error::{corrupt, CodecError, Result};
use crate::nonfinite;
use crate::predictor::fitted::{self, Weights};
use crate::predictor::{self, Coded, Predictor, PredictorKind};
use crate::quantizer::{Quantizer, DEFAULT_RADIUS};
use crate::selection;
use crate::{Config, Preset};
use rayon::prelude::*;
use std::borrow::{Borrow, Cow};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

const MAGIC: &[u8; 2] = b"AB";
/// The version byte says how the symbols are coded: Huffman segments (speed mode), adaptively
/// range-coded (ratio mode, as written before the table-driven coder) or table-driven context
/// coded (ratio mode).
const HUFFMAN: u8 = 1;
const RANGE_CODED: u8 = 2;
const TABLED: u8 = 3;
/// The zero-residual symbol of the quantization radius every block set uses.
const ZERO: u16 = DEFAULT_RADIUS as u16;
/// Blocks sampled to choose the predictor: enough to see the field's character, few enough
/// that choosing costs a small share of compressing. Every candidate walks every cell of a
/// sampled block, absent ones included, so the sample is also capped in cells: 256 partly
/// covered blocks of 32^3 walked 12 times the cells a 16^3-box level stores. Half the cells of
/// the sample this had before (2^17, at least 8 blocks) made the benchmark hierarchies' writes
/// 1.2x as fast for 0.05% of size (geomean of 64 cases; at most 2% on one).
const SAMPLE_BLOCKS: usize = 256;
const MIN_SAMPLE_BLOCKS: usize = 4;
const SAMPLE_CELLS: usize = 1 << 16;
const MAX_UNIT_ELEMENTS: usize = 1 << 24;
/// Arrays of up to this many symbols try the adaptive range coder too (`encode_sets`): on the
/// benchmark hierarchies, those whose tables outweigh what they save (PeleLMeX fields coded in
/// a hundred bytes) are all far smaller; above it the trial would cost more time than it saves.
const ADAPTIVE_TRIAL_SYMBOLS: usize = 1 << 18;

/// One unit block: its position in the set's block grid, its values in C order over the unit
/// shape, and which cells are stored (`None`: all).
#[derive(Clone, Debug, PartialEq)]
pub struct Block<T> {
    pub position: u64,
    pub values: Vec<T>,
    pub mask: Option<Vec<bool>>,
}

/// The processes coding the other parts of an array whose sets share one table (a parallel
/// write): what each learns from its own sets is pooled, so all learn the table one process
/// coding every set would.
pub trait Pool: Sync {
    /// Every process's `bytes`, in process order (this one's included).
    fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>>;
}

/// `value` summed over the processes of `pool` (itself without).
fn pooled_sum(pool: Option<&dyn Pool>, value: u64) -> Result<u64> {
    let Some(pool) = pool else { return Ok(value) };
    pool.all_gather(value.to_le_bytes().to_vec())?
        .iter()
        .map(|b| {
            b.as_slice()
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| CodecError::InvalidInput("a process pooled a size of another length".into()))
        })
        .sum()
}

/// What choosing a predictor needs to know of a block before it sees the block's values.
#[derive(Clone, Copy, Debug)]
pub struct BlockInfo {
    /// Whether it has the values of the unit shape.
    pub fits: bool,
    /// Whether all its cells are stored.
    pub full: bool,
    /// How many of its cells are stored.
    pub stored: usize,
}

impl BlockInfo {
    /// The information of `b`, a block of a unit shape of `n` cells.
    pub fn of<T>(b: &Block<T>, n: usize) -> BlockInfo {
        let stored = b.mask.as_ref().map_or(n, |m| m.iter().filter(|&&v| v).count());
        BlockInfo { fits: b.values.len() == n, full: b.mask.is_none(), stored }
    }
}

/// What the block sets of an array share: how their symbols are coded (a Huffman codebook, the
/// context coder's tables, or as written before those the range coder's learnt start) and,
/// when its blocks use fitted prediction, the weights.
pub struct SharedCodebook {
    /// Empty when the sets are context-coded.
    codebook: Codebook,
    start: Option<Start>,
    tables: Option<rans::Tables>,
    weights: Option<Weights>,
    /// The weights' stencils for the array's unit shape, built when a set first needs them
    /// (an array's sets are many and small).
    walker: OnceLock<(Vec<usize>, Option<fitted::Walker>)>,
}

/// Mark the range coder's start, the context coder's tables and the fitted prediction weights
/// after the codebook (`'W'`: every weight, as written before `'F'`, whose first weights are
/// implied).
const START_TAG: u8 = b'R';
const TABLES_TAG: u8 = b'T';
const WEIGHTS_TAG: u8 = b'F';
const ALL_WEIGHTS_TAG: u8 = b'W';

impl SharedCodebook {
    fn new(codebook: Codebook, start: Option<Start>, tables: Option<rans::Tables>, weights: Option<Weights>) -> SharedCodebook {
        SharedCodebook { codebook, start, tables, weights, walker: OnceLock::new() }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.codebook.write(&mut out);
        if let Some(start) = &self.start {
            out.push(START_TAG);
            start.write(&mut out);
        }
        if let Some(tables) = &self.tables {
            out.push(TABLES_TAG);
            tables.write(&mut out);
        }
        if let Some(w) = &self.weights {
            out.push(WEIGHTS_TAG);
            w.write(&mut out);
        }
        out
    }

    /// Parses a codebook written by `to_bytes` for the default quantization radius.
    pub fn from_bytes(bytes: &[u8]) -> Result<SharedCodebook> {
        let (codebook, used) = Codebook::read(bytes, 2 * DEFAULT_RADIUS as usize)?;
        let mut r = ByteReader::new(&bytes[used..]);
        let (mut start, mut tables, mut weights) = (None, None, None);
        // At most one of the start and the tables, then the weights.
        let mut tag = r.remaining().checked_sub(1).map(|_| r.u8("shared table tag")).transpose()?;
        if matches!(tag, Some(START_TAG | TABLES_TAG)) {
            if codebook.symbol_limit() != 0 {
                return Err(corrupt!("context coder statistics beside a Huffman codebook"));
            }
            if tag == Some(START_TAG) {
                start = Some(Start::read(&mut r)?);
            } else {
                let t = rans::Tables::read(&mut r)?;
                if t.contexts() != residuals::CONTEXTS {
                    return Err(corrupt!("context coder tables for {} contexts, not {}", t.contexts(), residuals::CONTEXTS));
                }
                tables = Some(t);
            }
            tag = r.remaining().checked_sub(1).map(|_| r.u8("shared table tag")).transpose()?;
        }
        match tag {
            None => {}
            Some(t @ (WEIGHTS_TAG | ALL_WEIGHTS_TAG)) => weights = Some(Weights::read(&mut r, t == ALL_WEIGHTS_TAG)?),
            Some(t) => return Err(corrupt!("unknown table {t:#04x} after the shared codebook")),
        }
        if r.remaining() != 0 {
            return Err(corrupt!("{} unexpected bytes after the shared tables", r.remaining()));
        }
        Ok(SharedCodebook::new(codebook, start, tables, weights))
    }
}

/// A block's predictor as its header byte: a predictor kind's code, or fitted prediction,
/// which exists only in block sets (its weights are the array's, not the block's). Fitted
/// blocks that are partial choose their stencils by what is stored (`by_stored`, code 5; what
/// the writer codes) or, as written before that rule, by position (code 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum BlockKind {
    Kind(PredictorKind),
    Fitted { by_stored: bool },
}

impl BlockKind {
    const FITTED_BY_POSITION: u8 = 4;
    const FITTED: u8 = 5;

    fn code(self) -> u8 {
        match self {
            BlockKind::Kind(k) => k as u8,
            BlockKind::Fitted { by_stored: false } => BlockKind::FITTED_BY_POSITION,
            BlockKind::Fitted { by_stored: true } => BlockKind::FITTED,
        }
    }

    fn from_code(c: u8) -> Result<BlockKind> {
        match c {
            BlockKind::FITTED_BY_POSITION => Ok(BlockKind::Fitted { by_stored: false }),
            BlockKind::FITTED => Ok(BlockKind::Fitted { by_stored: true }),
            c => PredictorKind::from_code(c).map(BlockKind::Kind).ok_or_else(|| corrupt!("unknown predictor code {c}")),
        }
    }
}

/// Encodes block sets of one array under one bound and one predictor choice.
pub struct BlockSetEncoder {
    unit: Vec<usize>,
    q: Quantizer,
    predictor: Predictor,
    /// Weights when fitted prediction codes the blocks (`predictor` is then unused), with the
    /// stencils for the unit shape.
    fitted: Option<(Weights, fitted::Walker)>,
    preset: Preset,
    /// Whether blocks are rebuilt as they are predicted, to sum their errors.
    measure: bool,
}

/// Regression block edge for unit blocks of edge `unit_edge` (AMRIC's adaptive rule in 3-D: a
/// 6-cell block leaves thin residue blocks when the unit edge is 1 or 2 past a multiple of 6,
/// so 4 is used there, unless the unit is so large the residues no longer matter).
pub fn regression_block(ndim: usize, unit_edge: usize, adaptive: bool) -> usize {
    let default = predictor::default_regression_block(ndim);
    if ndim == 3 && adaptive && unit_edge % 6 <= 2 && unit_edge <= 64 {
        4
    } else {
        default.min(unit_edge.max(2))
    }
}

/// An encoder's predictor choice, to code the same array again (with another unit block or
/// bound) without choosing afresh: choosing tries every candidate on a sample, which costs as
/// much as predicting a small level.
#[derive(Clone)]
pub struct Choice {
    predictor: Predictor,
    weights: Option<Weights>,
    /// The unit block shape it was made on.
    unit: Vec<usize>,
}

impl Choice {
    /// The unit block shape the choice was made on.
    pub fn unit(&self) -> &[usize] {
        &self.unit
    }
}

impl BlockSetEncoder {
    /// Chooses the predictor on up to `SAMPLE_BLOCKS` full blocks of `sample` (fewer for large
    /// units, see `SAMPLE_CELLS`), spread evenly.
    /// `eb` is the absolute bound (finite, >= 0); `adaptive_block` applies AMRIC's rule for
    /// the regression block edge (else the default edge).
    pub fn new<T: Element>(
        sample: &[&Block<T>],
        unit: &[usize],
        config: &Config,
        eb: f64,
        adaptive_block: bool,
    ) -> Result<BlockSetEncoder> {
        let n = unit.iter().product::<usize>();
        let info: Vec<BlockInfo> = sample.iter().map(|b| BlockInfo::of(b, n)).collect();
        BlockSetEncoder::choose(&info, |picked| picked.iter().map(|&i| sample[i]).collect(), unit, config, eb, adaptive_block, None)
    }

    /// `new` for blocks described by `info` and fetched by `fetch(indices)` (the blocks at
    /// `indices` of `info`, in that order), so that the blocks of an array need not all be in
    /// memory at once: only those the choice samples are fetched. With `made` (a choice made on
    /// blocks of another shape), its predictor family and weights are kept, and only an
    /// interpolation's settings, which depend on the block shape, are tuned again.
    pub fn choose<T: Element, B: Borrow<Block<T>>>(
        info: &[BlockInfo],
        fetch: impl Fn(&[usize]) -> Vec<B>,
        unit: &[usize],
        config: &Config,
        eb: f64,
        adaptive_block: bool,
        made: Option<&Choice>,
    ) -> Result<BlockSetEncoder> {
        if let Some(c) = made.filter(|c| c.weights.is_some() || !matches!(c.predictor, Predictor::Interpolation(_))) {
            return BlockSetEncoder::with_choice(c, unit, config, eb, adaptive_block);
        }
        if let Some(fixed) = BlockSetEncoder::fixed(unit, config, eb, adaptive_block) {
            return fixed;
        }
        let q = checked_quantizer(eb)?;
        let edge = *unit.iter().max().unwrap_or(&1);
        // Full blocks judge best; partial ones (absent cells marked) join when full ones are few.
        let fits: Vec<usize> = (0..info.len()).filter(|&i| info[i].fits).collect();
        let (full, partial): (Vec<usize>, Vec<usize>) = fits.iter().partition(|&&i| info[i].full);
        let pool: Vec<usize> = if full.len() >= SAMPLE_BLOCKS / 4 { full } else { full.into_iter().chain(partial).collect() };
        // Up to the sample budget of `blocks`, spread evenly, ready for a predictor.
        let n = unit.iter().product::<usize>();
        let spread = |blocks: &[usize]| -> Vec<(Vec<T>, Vec<usize>)> {
            let step = blocks.len().div_ceil((SAMPLE_CELLS / n).clamp(MIN_SAMPLE_BLOCKS, SAMPLE_BLOCKS)).max(1);
            let picked: Vec<usize> = blocks.iter().step_by(step).copied().collect();
            fetch(&picked).iter().map(|b| (marked(b.borrow()).0.into_owned(), unit.to_vec())).collect()
        };
        let samples = spread(&pool);
        // Fitted prediction is judged on blocks as they come, partial ones in their share: it
        // gains least where absent cells cut its stencil, so full blocks alone flatter it.
        let judge = || spread(&fits);
        let (predictor, weights) = if let Some(c) = made {
            (if samples.is_empty() { c.predictor } else { selection::retune_for_blocks(&samples, &q, config, c.predictor) }, None)
        } else if samples.is_empty() {
            (Predictor::Lorenzo, None)
        } else {
            let cells = info.iter().map(|b| b.stored).sum();
            selection::choose_for_blocks(&samples, judge, &q, config, regression_block(unit.len(), edge, adaptive_block), cells)
        };
        BlockSetEncoder::with_choice(&Choice { predictor, weights, unit: unit.to_vec() }, unit, config, eb, adaptive_block)
    }

    /// The encoder of blocks of shape `unit` when there is nothing to choose (one candidate
    /// predictor and no fitted prediction to try: the speed preset, a predictor asked for,
    /// lossless), so that no block need be looked at; `None` otherwise.
    pub fn fixed(unit: &[usize], config: &Config, eb: f64, adaptive_block: bool) -> Option<Result<BlockSetEncoder>> {
        if let Err(e) = check_unit(unit) {
            return Some(Err(e));
        }
        let edge = *unit.iter().max().unwrap_or(&1);
        let predictor = selection::fixed_for_blocks(config, unit.len(), eb, regression_block(unit.len(), edge, adaptive_block))?;
        Some(BlockSetEncoder::with_choice(&Choice { predictor, weights: None, unit: unit.to_vec() }, unit, config, eb, adaptive_block))
    }

    /// An encoder using `choice` (another encoder's, for blocks of any shape of its
    /// dimensions; a regression block edge follows `unit` as in `new`).
    pub fn with_choice(choice: &Choice, unit: &[usize], config: &Config, eb: f64, adaptive_block: bool) -> Result<BlockSetEncoder> {
        check_unit(unit)?;
        let q = checked_quantizer(eb)?;
        let edge = *unit.iter().max().unwrap_or(&1);
        let predictor = match choice.predictor {
            Predictor::Regression { .. } => Predictor::Regression { block: regression_block(unit.len(), edge, adaptive_block) },
            p => p,
        };
        let fitted = choice.weights.clone().and_then(|w| fitted::Walker::new(unit, &w).map(|walker| (w, walker)));
        Ok(BlockSetEncoder { unit: unit.to_vec(), q, predictor, fitted, preset: config.preset, measure: false })
    }

    /// The predictor choice, for `with_choice`.
    pub fn choice(&self) -> Choice {
        Choice { predictor: self.predictor, weights: self.weights().cloned(), unit: self.unit.clone() }
    }

    /// Whether fitted prediction codes the blocks (its whole blocks walk in lanes).
    pub fn is_fitted(&self) -> bool {
        self.fitted.is_some()
    }

    /// The name of the predictor the blocks use.
    pub fn predictor_name(&self) -> &'static str {
        if self.fitted.is_some() {
            "fitted"
        } else {
            self.predictor.kind().name()
        }
    }

    /// The fitted prediction weights every codebook of the array must carry, if any.
    pub fn weights(&self) -> Option<&Weights> {
        self.fitted.as_ref().map(|(w, _)| w)
    }

    /// `sets` coded with the tables they share (`shared_tables`), recorded as codebook `index`:
    /// the tables and each set's bytes. In ratio mode with `try_adaptive`, sets of at most
    /// `ADAPTIVE_TRIAL_SYMBOLS` symbols in all are also coded with the adaptive range coder
    /// (version 2), whose learnt start costs a few bytes where tables cost tens; the smaller
    /// coding is kept. With `pool`, the sets are this process's part of the array: statistics,
    /// symbol counts and sizes are those of every process's sets.
    pub fn encode_sets<T: Element>(
        &self,
        sets: &[PredictedSet<T>],
        index: u32,
        try_adaptive: bool,
        pool: Option<&dyn Pool>,
    ) -> Result<(SharedCodebook, Vec<Vec<u8>>)> {
        let code = |tables: SharedCodebook| -> Result<(u64, SharedCodebook, Vec<Vec<u8>>)> {
            let bytes: Vec<Vec<u8>> = sets.par_iter().map(|set| set.finish(&tables, index)).collect::<Result<_>>()?;
            let coded = pooled_sum(pool, bytes.iter().map(Vec::len).sum::<usize>() as u64)?;
            Ok((coded + tables.to_bytes().len() as u64, tables, bytes))
        };
        let tabled = code(self.shared_tables(sets, pool)?)?;
        let symbols = pooled_sum(pool, sets.iter().map(|s| s.symbol_count() as u64).sum())?;
        if !try_adaptive || self.preset != Preset::Ratio || symbols > ADAPTIVE_TRIAL_SYMBOLS as u64 {
            return Ok((tabled.1, tabled.2));
        }
        let adaptive = code(self.adaptive_tables(sets, pool)?)?;
        let best = if adaptive.0 < tabled.0 { adaptive } else { tabled };
        Ok((best.1, best.2))
    }

    /// What `sets` share for the adaptive range coder (version 2): its start, learnt from all
    /// their symbols (and with `pool`, every process's).
    fn adaptive_tables<T: Element>(&self, sets: &[PredictedSet<T>], pool: Option<&dyn Pool>) -> Result<SharedCodebook> {
        let cells = neighbour_cells(&self.unit);
        let streams: Vec<(Vec<u16>, Layout)> = sets.iter().map(|s| (s.symbols(), s.layout(&cells))).collect();
        let mut counts = Start::count(streams.iter().map(|(s, l)| (&s[..], l)), ZERO);
        if let Some(pool) = pool {
            let mine: Vec<u8> = counts.iter().flatten().flat_map(|c| c.to_le_bytes()).collect();
            counts.iter_mut().for_each(|c| *c = [0; 2]);
            for part in pool.all_gather(mine)? {
                if part.len() != counts.len() * 16 {
                    return Err(CodecError::InvalidInput("a process pooled start counts of another size".into()));
                }
                for (c, b) in counts.iter_mut().flatten().zip(part.chunks_exact(8)) {
                    *c += u64::from_le_bytes(b.try_into().expect("8 bytes"));
                }
            }
        }
        Ok(SharedCodebook::new(Codebook::from_histogram(&[]), Some(Start::from_counts(&counts)), None, self.weights().cloned()))
    }

    /// What `sets` share, to be stored once beside them: in ratio mode the context coder's
    /// tables, learnt from all their symbols; in speed mode one Huffman codebook for them all.
    pub fn shared_tables<T: Element>(&self, sets: &[PredictedSet<T>], pool: Option<&dyn Pool>) -> Result<SharedCodebook> {
        let weights = self.weights().cloned();
        let invalid = |what: &str| CodecError::InvalidInput(format!("a process pooled {what} of another size"));
        match self.preset {
            Preset::Ratio => {
                let fresh = || rans::Counts::new(residuals::CONTEXTS);
                let mut counts = sets
                    .par_iter()
                    .fold(fresh, |mut acc, s| {
                        s.modelled().count(&mut acc);
                        acc
                    })
                    .reduce(fresh, |mut a, b| {
                        a.merge(&b);
                        a
                    });
                if let Some(pool) = pool {
                    let mine = counts.to_le_bytes();
                    counts = fresh();
                    for part in pool.all_gather(mine)? {
                        counts.merge_le_bytes(&part).then_some(()).ok_or_else(|| invalid("context counts"))?;
                    }
                }
                Ok(SharedCodebook::new(Codebook::from_histogram(&[]), None, Some(counts.tables()), weights))
            }
            Preset::Speed => {
                let mut h = sets
                    .par_iter()
                    .fold(Histogram::default, |mut h, s| {
                        s.blocks.iter().for_each(|b| h.add_symbols(&b.coded.symbols));
                        h
                    })
                    .reduce(Histogram::default, |mut a, b| {
                        a.add(&b);
                        a
                    });
                if let Some(pool) = pool {
                    let mine = h.to_le_bytes();
                    h = Histogram::default();
                    for part in pool.all_gather(mine)? {
                        h.merge_le_bytes(&part).then_some(()).ok_or_else(|| invalid("symbol counts"))?;
                    }
                }
                Ok(SharedCodebook::new(Codebook::of(&h), None, None, weights))
            }
        }
    }

    /// Predicts and quantizes one set's blocks (positions strictly increasing).
    pub fn predict<T: Element>(&self, blocks: &[Block<T>]) -> Result<PredictedSet<T>> {
        self.compacted(self.set(self.predict_blocks(&blocks.iter().collect::<Vec<_>>())?)?)
    }

    /// `predict` of several sets at once: their whole blocks share the fitted walk's lanes,
    /// which one set of few blocks (a chunk of one or two unit blocks) would leave empty.
    pub fn predict_sets<T: Element>(&self, sets: &[Vec<Block<T>>]) -> Result<Vec<PredictedSet<T>>> {
        let all: Vec<&Block<T>> = sets.iter().flatten().collect();
        let mut predicted = self.predict_blocks(&all)?.into_iter();
        let split: Vec<Vec<PredictedBlock<T>>> = sets.iter().map(|set| predicted.by_ref().take(set.len()).collect()).collect();
        split.into_par_iter().map(|blocks| self.compacted(self.set(blocks)?)).collect()
    }

    /// In ratio mode, `set` modelled now, in the chunk's share of the parallel work, and kept as
    /// the model alone: a level's sets wait for its tables holding about 2 bytes a symbol, not 4.
    fn compacted<T: Element>(&self, mut set: PredictedSet<T>) -> Result<PredictedSet<T>> {
        if self.preset == Preset::Ratio {
            set.modelled();
            for b in &mut set.blocks {
                b.coded.symbols = Vec::new();
            }
            set.compact = true;
        }
        Ok(set)
    }

    /// The set of `blocks` (predicted by this encoder, positions strictly increasing).
    pub fn set<T: Element>(&self, blocks: Vec<PredictedBlock<T>>) -> Result<PredictedSet<T>> {
        if blocks.windows(2).any(|w| w[1].position <= w[0].position) {
            return Err(CodecError::InvalidInput("block positions must be strictly increasing".into()));
        }
        Ok(PredictedSet { preset: self.preset, unit: self.unit.clone(), blocks, modelled: OnceLock::new(), compact: false })
    }

    /// Predicts and quantizes one block. A block's coding does not depend on its set, so one
    /// prediction can be grouped into several sets (see [`PredictedBlock::at`]).
    pub fn predict_block<T: Element>(&self, b: &Block<T>) -> Result<PredictedBlock<T>> {
        self.check_shape(b)?;
        let (values, patches) = marked(b);
        let (kind, coded, rebuilt) = match (&self.fitted, b.mask.is_some(), self.predictor) {
            (Some((_, walker)), _, _) => {
                let (coded, rebuilt) = fitted::encode(&values, &self.q, walker);
                (BlockKind::Fitted { by_stored: true }, coded, Some(rebuilt))
            }
            // Dual quantization prequantizes every cell, absent ones included: Lorenzo instead.
            (None, true, Predictor::DualQuant) => {
                (BlockKind::Kind(PredictorKind::Lorenzo), predictor::encode(&Predictor::Lorenzo, values, &self.unit, &self.q), None)
            }
            (None, _, p) if self.measure => {
                let (coded, rebuilt) = predictor::encode_rebuilding(&p, values, &self.unit, &self.q);
                (BlockKind::Kind(p.kind()), coded, rebuilt)
            }
            (None, _, p) => (BlockKind::Kind(p.kind()), predictor::encode(&p, values, &self.unit, &self.q), None),
        };
        self.predicted(b, kind, coded, rebuilt, patches)
    }

    /// Whole blocks coded by the fitted walk `fitted::LANES` at a time, the others one by one
    /// (a partial block's walk skips most of the work at its absent cells, and four of the
    /// largest no longer fit in cache): the same predictions as `predict_block` on each, in order.
    pub fn predict_blocks<T: Element>(&self, blocks: &[&Block<T>]) -> Result<Vec<PredictedBlock<T>>> {
        let Some((_, walker)) = &self.fitted else { return blocks.par_iter().map(|&b| self.predict_block(b)).collect() };
        let whole: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].mask.is_none()).collect();
        let grouped = &whole[..whole.len() - whole.len() % fitted::LANES];
        let mut in_group = vec![false; blocks.len()];
        grouped.iter().for_each(|&i| in_group[i] = true);
        let laned: Vec<Vec<(usize, PredictedBlock<T>)>> = grouped
            .par_chunks_exact(fitted::LANES)
            .map(|group| {
                for &i in group {
                    self.check_shape(blocks[i])?;
                }
                let marked: Vec<Marked<T>> = group.iter().map(|&i| marked(blocks[i])).collect();
                let coded = fitted::encode_lanes(std::array::from_fn(|l| &marked[l].0[..]), &self.q, walker);
                group
                    .iter()
                    .zip(coded)
                    .zip(marked)
                    .map(|((&i, (c, rebuilt)), (_, patches))| {
                        Ok((i, self.predicted(blocks[i], BlockKind::Fitted { by_stored: true }, c, Some(rebuilt), patches)?))
                    })
                    .collect()
            })
            .collect::<Result<_>>()?;
        let alone: Vec<(usize, PredictedBlock<T>)> = (0..blocks.len())
            .into_par_iter()
            .filter(|&i| !in_group[i])
            .map(|i| Ok((i, self.predict_block(blocks[i])?)))
            .collect::<Result<_>>()?;
        let mut out: Vec<Option<PredictedBlock<T>>> = vec![None; blocks.len()];
        for (i, p) in laned.into_iter().flatten().chain(alone) {
            out[i] = Some(p);
        }
        Ok(out.into_iter().map(|p| p.expect("every block predicted")).collect())
    }

    fn check_shape<T>(&self, b: &Block<T>) -> Result<()> {
        let n = self.unit.iter().product::<usize>();
        if b.values.len() != n || b.mask.as_ref().is_some_and(|m| m.len() != n) {
            return Err(CodecError::InvalidInput(format!("a block does not have the {n} values of the unit shape {:?}", self.unit)));
        }
        Ok(())
    }

    /// A block's prediction from its coding (`rebuilt`: what a decoder rebuilds, where the
    /// predictor gave it).
    fn predicted<T: Element>(
        &self,
        b: &Block<T>,
        kind: BlockKind,
        mut coded: Coded<T>,
        rebuilt: Option<Vec<T>>,
        patches: Vec<(usize, T)>,
    ) -> Result<PredictedBlock<T>> {
        let error = match (self.measure, rebuilt, kind) {
            (false, ..) => None,
            (true, Some(rebuilt), _) => Some(error_sum(b, &rebuilt)),
            (true, None, BlockKind::Kind(k)) => {
                Some(error_sum(b, &predictor::decode(k, &self.unit, &self.q, &coded.symbols, None, &coded.exact, &coded.side)?))
            }
            (true, None, BlockKind::Fitted { .. }) => unreachable!("fitted blocks are rebuilt as they are coded"),
        };
        // Absent cells are not coded at all: the decoder knows where they fall in the walk. A
        // set keeps its blocks' codes until the array's tables are learnt: neither the list of
        // absent cells nor their symbols' room is kept.
        let absent = std::mem::take(&mut coded.absent);
        if !absent.is_empty() {
            let mut absent = absent.iter().peekable();
            let mut k = 0;
            coded.symbols.retain(|_| {
                let keep = absent.next_if_eq(&&k).is_none();
                k += 1;
                keep
            });
            coded.symbols.shrink_to_fit();
        }
        Ok(PredictedBlock { position: b.position, kind, mask: b.mask.clone(), patches, coded, error })
    }

    /// Also sums each block's errors as it is predicted (see `PredictedSet::error`).
    pub fn measuring(self, measure: bool) -> BlockSetEncoder {
        BlockSetEncoder { measure, ..self }
    }
}

/// The sum of (rebuilt - original) over a block's stored finite cells, and how many they are.
fn error_sum<T: Element>(b: &Block<T>, rebuilt: &[T]) -> (f64, u64) {
    let mut sum = (0.0, 0);
    for (i, (x, y)) in b.values.iter().zip(rebuilt).enumerate() {
        let x = x.to_f64();
        if x.is_finite() && b.mask.as_ref().is_none_or(|m| m[i]) {
            sum = (sum.0 + (y.to_f64() - x), sum.1 + 1);
        }
    }
    sum
}

/// The block's values ready for a predictor: non-finite stored values patched out (and
/// listed), absent cells set to NaN, which the predictors' walks treat as "don't care"
/// (regression fits no model to a sub-block holding one and predicts it by Lorenzo).
fn marked<T: Element>(b: &Block<T>) -> Marked<'_, T> {
    match &b.mask {
        None => nonfinite::fill(&b.values),
        Some(mask) => {
            // Only stored cells count: an absent NaN is not patched.
            let stored: Vec<T> = b.values.iter().zip(mask).map(|(&x, &m)| if m { x } else { T::default() }).collect();
            let (filled, patches) = nonfinite::fill(&stored);
            let nan = T::from_f64(f64::NAN);
            (Cow::Owned(filled.iter().zip(mask).map(|(&x, &m)| if m { x } else { nan }).collect()), patches)
        }
    }
}

/// One block predicted and quantized, at its position in a set.
#[derive(Clone)]
pub struct PredictedBlock<T> {
    position: u64,
    kind: BlockKind,
    mask: Option<Vec<bool>>,
    patches: Vec<(usize, T)>,
    coded: Coded<T>,
    /// With a measuring encoder: `error_sum` of what a decoder rebuilds.
    error: Option<(f64, u64)>,
}

impl<T> PredictedBlock<T> {
    /// The same block at `position` of another set.
    pub fn at(self, position: u64) -> PredictedBlock<T> {
        PredictedBlock { position, ..self }
    }

    pub fn position(&self) -> u64 {
        self.position
    }
}

/// A block set predicted and quantized, waiting for the array's shared codebook.
pub struct PredictedSet<T> {
    preset: Preset,
    unit: Vec<usize>,
    blocks: Vec<PredictedBlock<T>>,
    /// Its symbols as the context coder models them: worked out once, for learning the array's
    /// tables and again for coding with them.
    modelled: OnceLock<rans::Encoder>,
    /// The blocks' symbols were dropped once modelled (`BlockSetEncoder::predict` in ratio
    /// mode): the model holds them.
    compact: bool,
}

impl<T: Element> PredictedSet<T> {
    /// The summed error (rebuilt - original) over the stored finite cells and their count,
    /// block after block; `None` unless the encoder was measuring.
    pub fn error(&self) -> Option<(f64, u64)> {
        self.blocks.iter().try_fold((0.0, 0), |(s, n), b| b.error.map(|(e, c)| (s + e, n + c)))
    }

    /// Its blocks, to be grouped into other sets (made by `BlockSetEncoder::set`: the blocks of
    /// `predict`'s ratio-mode sets no longer hold their symbols).
    pub fn into_blocks(self) -> Vec<PredictedBlock<T>> {
        assert!(!self.compact, "the blocks of a compacted set have no symbols");
        self.blocks
    }

    /// The symbols of its blocks, in block order.
    fn symbols(&self) -> Vec<u16> {
        if self.compact {
            return self.modelled().residuals().into_iter().map(|d| (d + ZERO as i32) as u16).collect();
        }
        self.blocks.iter().flat_map(|b| b.coded.symbols.iter().copied()).collect()
    }

    fn symbol_count(&self) -> usize {
        if self.compact {
            self.modelled().len()
        } else {
            self.blocks.iter().map(|b| b.coded.symbols.len()).sum()
        }
    }

    /// Where `symbols()` have their neighbours in space (see `block_layout`); `cells` are the
    /// unit shape's (`neighbour_cells`).
    fn layout<'a>(&'a self, cells: &'a [[u32; NEIGHBOURS]]) -> Layout<'a> {
        block_layout(self.blocks.iter().map(|b| (b.kind, b.mask.as_deref())), cells, &self.unit)
    }

    fn modelled(&self) -> &rans::Encoder {
        self.modelled.get_or_init(|| residuals::model(&self.symbols(), ZERO, &self.layout(&neighbour_cells(&self.unit))))
    }

    /// The set's bytes, coded with `codebook` (the shared tables of sets including this one,
    /// see `BlockSetEncoder::shared_tables`), recorded as codebook `codebook_index` of the array.
    pub fn finish(&self, codebook: &SharedCodebook, codebook_index: u32) -> Result<Vec<u8>> {
        // The predictor settings most blocks share are written once; a block whose side
        // information is empty uses them. Counted once each (comparing every pair of a chunk's
        // blocks was 4% of a ratio-mode write).
        let mut uses: HashMap<(BlockKind, &[u8]), usize> = HashMap::new();
        for b in &self.blocks {
            *uses.entry((b.kind, &b.coded.side)).or_default() += 1;
        }
        let common = self.blocks.iter().map(|b| (b.kind, b.coded.side.as_slice())).max_by_key(|&(k, side)| (uses[&(k, side)], side.len()));
        let (common_kind, common_side) = common.unwrap_or((BlockKind::Kind(PredictorKind::Lorenzo), &[]));
        let mut raw = Vec::new();
        let mut previous: Option<u64> = None;
        for b in &self.blocks {
            put_varint(&mut raw, previous.map_or(b.position, |p| b.position - p - 1));
            previous = Some(b.position);
            let own = b.kind != common_kind || (b.coded.side != common_side && !b.coded.side.is_empty());
            raw.push(u8::from(b.mask.is_some()) | u8::from(own) << 1);
            if let Some(mask) = &b.mask {
                raw.extend(mask.chunks(8).map(|c| c.iter().enumerate().fold(0u8, |acc, (i, &m)| acc | (m as u8) << i)));
            }
            if own {
                raw.push(b.kind.code());
            }
            let side: &[u8] = if own { &b.coded.side } else { &[] };
            write_parts(&mut raw, &b.patches, side, &b.coded.exact);
        }
        // Context-coded symbols follow the lossless frames: zstd finds nothing in them.
        let (version, ranged) = match (&codebook.tables, &codebook.start) {
            (Some(tables), _) => {
                let mut coded = Vec::new();
                self.modelled().finish(tables, &mut coded)?;
                (TABLED, coded)
            }
            (None, Some(start)) => {
                (RANGE_CODED, residuals::encode(&self.symbols(), ZERO, start, &self.layout(&neighbour_cells(&self.unit))))
            }
            (None, None) => {
                write_segments(&mut raw, &self.symbols(), &codebook.codebook)?;
                (HUFFMAN, Vec::new())
            }
        };
        let packed = frames::pack(&raw, |frame| frames::packed_frame(self.preset, frame));
        let mut out = Vec::with_capacity(packed.len() + ranged.len() + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[version, T::DTYPE as u8, self.preset as u8, common_kind.code()]);
        put_varint(&mut out, codebook_index as u64);
        put_varint(&mut out, self.blocks.len() as u64);
        put_varint(&mut out, raw.len() as u64);
        if version != HUFFMAN {
            put_varint(&mut out, ranged.len() as u64);
        }
        put_varint(&mut out, common_side.len() as u64);
        out.extend_from_slice(common_side);
        out.extend_from_slice(&packed);
        out.extend_from_slice(&ranged);
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }
}

/// The offsets to a cell's neighbours in space that a C-order walk has coded before it: one
/// or two steps of -1 (faces and edges), in C order; none beyond 3 dimensions.
fn neighbour_offsets(ndim: usize) -> Vec<Vec<isize>> {
    if ndim > 3 {
        return Vec::new();
    }
    let mut out: Vec<Vec<isize>> = vec![Vec::new()];
    for _ in 0..ndim {
        out = out.into_iter().flat_map(|o| [-1isize, 0].map(|v| [o.clone(), vec![v]].concat())).collect();
    }
    out.retain(|o| (1..=2).contains(&o.iter().filter(|&&v| v != 0).count()));
    out
}

/// How many neighbours in space a symbol can have in blocks of `ndim` dimensions.
fn neighbour_count(ndim: usize) -> u32 {
    neighbour_offsets(ndim).len() as u32
}

type NeighbourCells = Arc<Vec<[u32; NEIGHBOURS]>>;

/// Per cell of a block of shape `unit`, its neighbours' cells (the block's cell count for one
/// past its lower faces; see `residuals::Layout`); empty when cells have no neighbours in space.
/// The same for every block of a shape, and blocks are small while sets are many: worked out
/// once per shape.
fn neighbour_cells(unit: &[usize]) -> NeighbourCells {
    static SHAPES: Mutex<Vec<(Vec<usize>, NeighbourCells)>> = Mutex::new(Vec::new());
    let mut shapes = SHAPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, cells)) = shapes.iter().find(|(u, _)| u == unit) {
        return cells.clone();
    }
    let offsets = neighbour_offsets(unit.len());
    let strides = crate::grid::strides(unit);
    let n: usize = unit.iter().product();
    let mut cells = vec![[n as u32; NEIGHBOURS]; if offsets.is_empty() { 0 } else { n }];
    if !cells.is_empty() {
        crate::grid::for_each_index(unit, |pos| {
            let k: usize = pos.iter().zip(&strides).map(|(&p, &s)| p * s).sum();
            for (slot, off) in cells[k].iter_mut().zip(&offsets) {
                if pos.iter().zip(off).all(|(&p, &o)| p as isize + o >= 0) {
                    *slot = (k as isize + off.iter().zip(&strides).map(|(&o, &s)| o * s as isize).sum::<isize>()) as u32;
                }
            }
        });
    }
    let cells = Arc::new(cells);
    shapes.push((unit.to_vec(), cells.clone()));
    cells
}

/// The layout of the symbols of the blocks `(kind, mask)` of shape `unit` (in set order, each
/// coding its stored cells) for their contexts (format.md 14.3): blocks walked in C order
/// (Lorenzo, dual quantization, fitted) have neighbours in space, `cells` (the shape's
/// `neighbour_cells`); the others' symbols are runs without.
fn block_layout<'a>(
    blocks: impl Iterator<Item = (BlockKind, Option<&'a [bool]>)>,
    cells: &'a [[u32; NEIGHBOURS]],
    unit: &[usize],
) -> Layout<'a> {
    let n: usize = unit.iter().product();
    let parts = blocks
        .map(|(kind, mask)| {
            let c_order = matches!(kind, BlockKind::Fitted { .. } | BlockKind::Kind(PredictorKind::Lorenzo | PredictorKind::DualQuant));
            if c_order && !cells.is_empty() {
                Part::Block(mask)
            } else {
                Part::Run(mask.map_or(n, |m| m.iter().filter(|&&v| v).count()))
            }
        })
        .collect();
    Layout::blocks(cells, neighbour_count(unit.len()).max(1), parts)
}

fn checked_quantizer(eb: f64) -> Result<Quantizer> {
    if !(eb.is_finite() && eb >= 0.0) {
        return Err(CodecError::InvalidInput(format!("bound must be a finite number >= 0, got {eb}")));
    }
    Ok(Quantizer::new(eb, DEFAULT_RADIUS))
}

fn check_unit(unit: &[usize]) -> Result<()> {
    if unit.is_empty()
        || unit.len() > 4
        || unit.contains(&0)
        || unit.iter().try_fold(1usize, |a, &n| a.checked_mul(n)).is_none_or(|n| n > MAX_UNIT_ELEMENTS)
    {
        return Err(CodecError::InvalidInput(format!(
            "unit block shape {unit:?} must have 1 to 4 nonzero dimensions and at most {MAX_UNIT_ELEMENTS} cells"
        )));
    }
    Ok(())
}

/// What a block set's header says.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSetInfo {
    pub dtype: DType,
    pub codebook_index: u32,
    pub blocks: usize,
}

struct Header<'a> {
    version: u8,
    info: BlockSetInfo,
    common_kind: BlockKind,
    common_side: &'a [u8],
    raw_len: u64,
    /// The lossless frames.
    packed: &'a [u8],
    /// The range-coded symbols (empty in a Huffman-coded set).
    ranged: &'a [u8],
}

fn read_header(bytes: &[u8]) -> Result<Header<'_>> {
    if bytes.len() < MAGIC.len() + 4 || &bytes[..2] != MAGIC {
        return Err(corrupt!("not an amrzip block set (bad magic or {} bytes)", bytes.len()));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    if u32::from_le_bytes(tail.try_into().expect("4 bytes")) != crc32(body) {
        return Err(corrupt!("block set checksum mismatch"));
    }
    let mut r = ByteReader::new(&body[2..]);
    let version = r.u8("version")?;
    if !(HUFFMAN..=TABLED).contains(&version) {
        return Err(corrupt!("unsupported block set version {version} (this build reads versions {HUFFMAN} to {TABLED})"));
    }
    let dtype = DType::from_code(r.u8("dtype")?).ok_or_else(|| corrupt!("unknown dtype code"))?;
    if r.u8("preset")? > 1 {
        return Err(corrupt!("unknown preset"));
    }
    let common_kind = BlockKind::from_code(r.u8("predictor")?)?;
    let codebook_index = u32::try_from(r.varint("codebook index")?).map_err(|_| corrupt!("codebook index out of range"))?;
    let blocks = r.bounded_varint(u32::MAX as u64, "block count")? as usize;
    let raw_len = r.varint("raw length")?;
    let ranged_len = if version != HUFFMAN { r.bounded_varint(r.remaining() as u64, "context-coded length")? as usize } else { 0 };
    let side_len = r.bounded_varint(r.remaining() as u64, "side length")? as usize;
    let common_side = r.take(side_len, "common side information")?;
    let rest = &body[2 + r.position()..];
    let cut = rest.len().checked_sub(ranged_len).ok_or_else(|| corrupt!("range-coded symbols longer than the block set"))?;
    let (packed, ranged) = rest.split_at(cut);
    Ok(Header { version, info: BlockSetInfo { dtype, codebook_index, blocks }, common_kind, common_side, raw_len, packed, ranged })
}

/// Reads and validates a block set's header (and its checksum).
pub fn info(bytes: &[u8]) -> Result<BlockSetInfo> {
    Ok(read_header(bytes)?.info)
}

/// Decodes a block set of unit blocks of shape `unit` quantized under `eb` (both from the
/// array's metadata); `codebook` is the array's codebook the header names (see
/// `info(bytes).codebook_index`), `max_position` bounds the positions (the block grid's size).
pub fn decode<T: Element>(bytes: &[u8], codebook: &SharedCodebook, unit: &[usize], eb: f64, max_position: u64) -> Result<Vec<Block<T>>> {
    decode_sets(&[(bytes, codebook)], unit, eb, max_position).pop().expect("one result a set")
}

/// A set's blocks decoded, its symbols, and its whole fitted blocks left for `decode_sets` to
/// walk.
type Split<T> = (Vec<Block<T>>, Vec<u16>, Vec<Deferred<T>>);

/// A block's values ready for a predictor and its non-finite values kept apart (`marked`).
type Marked<'a, T> = (Cow<'a, [T]>, Vec<(usize, T)>);

/// A deferred block and the set it belongs to.
type Owned<T> = (usize, Deferred<T>);

/// A whole fitted block of a set, its symbols decoded (from `start` in the set's), its walk left
/// to `decode_sets`.
struct Deferred<T> {
    position: u64,
    start: usize,
    exact: Vec<T>,
    patches: Vec<(usize, T)>,
}

/// `decode`, but the set's whole fitted blocks are checked and returned unwalked when the
/// codebook's cached walker has the unit shape, for `decode_sets` to walk in lanes (each list
/// in position order).
fn decode_deferring<T: Element>(bytes: &[u8], codebook: &SharedCodebook, unit: &[usize], eb: f64, max_position: u64) -> Result<Split<T>> {
    check_unit(unit)?;
    let q = checked_quantizer(eb)?;
    let h = read_header(bytes)?;
    let info = &h.info;
    if info.dtype != T::DTYPE {
        return Err(CodecError::InvalidInput(format!("block set holds {} values, not {}", info.dtype.name(), T::DTYPE.name())));
    }
    let n = unit.iter().product::<usize>();
    // Each block costs at least 5 raw bytes: refuse counts the data cannot hold before allocating.
    if info.blocks as u64 > max_position || (info.blocks as u64).saturating_mul(5) > h.raw_len {
        return Err(corrupt!("{} blocks cannot fit in a block set of {} raw bytes", info.blocks, h.raw_len));
    }
    let raw = frames::unpack(h.packed, h.raw_len)?;
    let mut r = ByteReader::new(&raw);
    let mut heads = Vec::with_capacity(info.blocks);
    let mut previous: Option<u64> = None;
    for _ in 0..info.blocks {
        let gap = r.varint("block position")?;
        let position = match previous {
            None => Some(gap),
            Some(p) => p.checked_add(gap).and_then(|v| v.checked_add(1)),
        }
        .filter(|&p| p < max_position)
        .ok_or_else(|| corrupt!("block position out of range"))?;
        previous = Some(position);
        let flags = r.u8("block flags")?;
        if flags > 3 {
            return Err(corrupt!("unknown block flags {flags}"));
        }
        let mask = if flags & 1 == 1 {
            let bits = r.take(n.div_ceil(8), "block mask")?;
            if n % 8 != 0 && bits[bits.len() - 1] >> (n % 8) != 0 {
                return Err(corrupt!("block mask has bits set past the last cell"));
            }
            Some((0..n).map(|i| bits[i / 8] >> (i % 8) & 1 == 1).collect::<Vec<bool>>())
        } else {
            None
        };
        let kind = if flags & 2 == 2 { BlockKind::from_code(r.u8("block predictor")?)? } else { h.common_kind };
        let mut parts = read_parts::<T>(&mut r, n)?;
        // Only a block that takes the common predictor takes its settings: a block with a
        // predictor of its own wrote its own settings, however empty.
        if parts.side.is_empty() && flags & 2 == 0 {
            parts.side = h.common_side;
        }
        heads.push((position, kind, mask, parts));
    }
    // A block codes one symbol per stored cell.
    let counts: Vec<usize> = heads.iter().map(|(_, _, mask, _)| mask.as_ref().map_or(n, |m| m.iter().filter(|&&v| v).count())).collect();
    let total = counts.iter().sum();
    if codebook.codebook.symbol_limit() > q.alphabet() {
        return Err(corrupt!("codebook has symbols beyond the alphabet"));
    }
    let symbols = if h.version == HUFFMAN {
        read_segments(&mut r, total, &codebook.codebook)?.0
    } else {
        if r.remaining() != 0 {
            return Err(corrupt!("{} unexpected bytes after the block records", r.remaining()));
        }
        let mut symbols = vec![0u16; total];
        let cells = neighbour_cells(unit);
        let layout = block_layout(heads.iter().map(|(_, kind, mask, _)| (*kind, mask.as_deref())), &cells, unit);
        match (h.version, &codebook.start, &codebook.tables) {
            (RANGE_CODED, Some(start), _) => residuals::decode(h.ranged, ZERO, q.alphabet(), start, &layout, &mut symbols)?,
            (TABLED, _, Some(tables)) => residuals::decode_tabled(h.ranged, ZERO, q.alphabet(), tables, &layout, &mut symbols)?,
            (RANGE_CODED, ..) => return Err(corrupt!("a range-coded block set, but the array's tables have no range coder start")),
            _ => return Err(corrupt!("a context-coded block set, but the array has no context coder tables")),
        }
        symbols
    };
    // Stencils only for a set that has fitted blocks.
    let built;
    let mut cached = false;
    let walker = match &codebook.weights {
        Some(w) if heads.iter().any(|(_, kind, _, _)| matches!(kind, BlockKind::Fitted { .. })) => {
            match codebook.walker.get_or_init(|| (unit.to_vec(), fitted::Walker::new(unit, w))) {
                (shape, walker) if shape == unit => {
                    cached = true;
                    walker.as_ref()
                }
                _ => {
                    built = fitted::Walker::new(unit, w);
                    built.as_ref()
                }
            }
        }
        _ => None,
    };
    let mut starts = Vec::with_capacity(counts.len());
    counts.iter().fold(0, |acc, &c| {
        starts.push(acc);
        acc + c
    });
    let one = |k: usize| -> Result<Block<T>> {
        let (position, kind, mask, parts) = &heads[k];
        let coded = &symbols[starts[k]..starts[k] + counts[k]];
        let syms = match mask {
            None => Cow::Borrowed(coded),
            Some(mask) => Cow::Owned(with_absent(*kind, parts.side, mask, unit, &q, coded)?),
        };
        let mut values = match *kind {
            BlockKind::Kind(kind) => predictor::decode(kind, unit, &q, &syms, None, &parts.exact, parts.side)?,
            BlockKind::Fitted { by_stored } => {
                if !parts.side.is_empty() {
                    return Err(corrupt!("a fitted block carries {} bytes of side information", parts.side.len()));
                }
                let walker = walker
                    .as_ref()
                    .ok_or_else(|| corrupt!("a block uses fitted prediction but the array has no weights for its blocks"))?;
                fitted::decode(&q, &syms, &parts.exact, walker, mask.as_deref(), by_stored)?
            }
        };
        patch(&mut values, &parts.patches);
        Ok(Block { position: *position, values, mask: mask.clone() })
    };
    // Whole fitted blocks are left to walk in lanes (see `predict_blocks`), the rest walk alone.
    let fitted: Vec<usize> = match walker {
        Some(_) if cached => (0..heads.len())
            .filter(|&k| matches!(heads[k].1, BlockKind::Fitted { .. }) && heads[k].2.is_none() && heads[k].3.side.is_empty())
            .collect(),
        _ => Vec::new(),
    };
    let mut is_fitted = vec![false; heads.len()];
    fitted.iter().for_each(|&k| is_fitted[k] = true);
    let blocks: Vec<Block<T>> = (0..heads.len()).into_par_iter().filter(|&k| !is_fitted[k]).map(one).collect::<Result<_>>()?;
    let deferred = fitted
        .iter()
        .map(|&k| {
            let (position, _, _, parts) = &mut heads[k];
            // Checked here, where a fault can be put down to its set.
            let unpredictable = predictor::count_zeros(&symbols[starts[k]..starts[k] + counts[k]]);
            if unpredictable != parts.exact.len() {
                return Err(corrupt!("{unpredictable} unpredictable symbols but {} stored values", parts.exact.len()));
            }
            Ok(Deferred {
                position: *position,
                start: starts[k],
                exact: std::mem::take(&mut parts.exact),
                patches: std::mem::take(&mut parts.patches),
            })
        })
        .collect::<Result<_>>()?;
    Ok((blocks, symbols, deferred))
}

/// `decode` of several block sets (`(bytes, codebook)`), each result its own: whole fitted
/// blocks of sets sharing a codebook walk in lanes together, which sets of one or two blocks
/// (chunks the size of a unit block) would leave empty.
pub fn decode_sets<T: Element>(
    sets: &[(&[u8], &SharedCodebook)],
    unit: &[usize],
    eb: f64,
    max_position: u64,
) -> Vec<Result<Vec<Block<T>>>> {
    let mut parsed: Vec<Result<Split<T>>> =
        sets.par_iter().map(|&(bytes, codebook)| decode_deferring(bytes, codebook, unit, eb, max_position)).collect();
    // Per codebook, the deferred blocks of its sets: (set, block).
    let mut by_book: Vec<(&SharedCodebook, Vec<Owned<T>>)> = Vec::new();
    for (i, p) in parsed.iter_mut().enumerate() {
        if let Ok((_, _, deferred)) = p {
            if deferred.is_empty() {
                continue;
            }
            let book = sets[i].1;
            let at = match by_book.iter().position(|(b, _)| std::ptr::eq(*b, book)) {
                Some(at) => at,
                None => {
                    by_book.push((book, Vec::new()));
                    by_book.len() - 1
                }
            };
            by_book[at].1.extend(std::mem::take(deferred).into_iter().map(|d| (i, d)));
        }
    }
    // Every set has failed on a bad bound already.
    let Ok(q) = checked_quantizer(eb) else { return parsed.into_iter().map(|p| p.map(|(blocks, ..)| blocks)).collect() };
    let n: usize = unit.iter().product();
    let symbols = |i: usize, x: &Deferred<T>| match &parsed[i] {
        Ok((_, symbols, _)) => &symbols[x.start..x.start + n],
        Err(_) => unreachable!("only decoded sets defer blocks"),
    };
    let mut walked: Vec<Vec<Block<T>>> = (0..sets.len()).map(|_| Vec::new()).collect();
    let mut failed: Vec<Option<CodecError>> = (0..sets.len()).map(|_| None).collect();
    for (book, deferred) in &by_book {
        let walker = match book.walker.get() {
            Some((shape, Some(walker))) if shape == unit => walker,
            _ => unreachable!("only blocks of a codebook with a cached walker are deferred"),
        };
        let walk = |group: &[Owned<T>]| -> Vec<(usize, Result<Block<T>>)> {
            let done = match group {
                [a, b, c, d] => fitted::decode_lanes([a, b, c, d].map(|(i, x)| (symbols(*i, x), &x.exact[..])), &q, walker).map(Vec::from),
                _ => group.iter().map(|(i, x)| fitted::decode(&q, symbols(*i, x), &x.exact, walker, None, true)).collect(),
            };
            match done {
                Ok(values) => group
                    .iter()
                    .zip(values)
                    .map(|((i, x), mut values)| {
                        patch(&mut values, &x.patches);
                        (*i, Ok(Block { position: x.position, values, mask: None }))
                    })
                    .collect(),
                Err(e) => group.iter().map(|(i, _)| (*i, Err(e.clone()))).collect(),
            }
        };
        let results: Vec<(usize, Result<Block<T>>)> = deferred.par_chunks(fitted::LANES).flat_map_iter(walk).collect();
        for (i, r) in results {
            match r {
                Ok(b) => walked[i].push(b),
                Err(e) => failed[i] = Some(e),
            }
        }
    }
    parsed
        .into_iter()
        .zip(walked.into_iter().zip(failed))
        .map(|(p, (mut walked, failed))| {
            if let Some(e) = failed {
                return Err(e);
            }
            let (mut blocks, ..) = p?;
            if !walked.is_empty() {
                blocks.append(&mut walked);
                blocks.sort_by_key(|b| b.position);
            }
            Ok(blocks)
        })
        .collect()
}

/// Puts a block's non-finite values (kept apart by the encoder) back in place.
fn patch<T: Copy>(values: &mut [T], patches: &[(usize, T)]) {
    for &(i, x) in patches {
        values[i] = x;
    }
}

/// A partial block's symbols with the zero-residual code put back at its absent cells, which
/// the encoder dropped.
fn with_absent(kind: BlockKind, side: &[u8], mask: &[bool], unit: &[usize], q: &Quantizer, coded: &[u16]) -> Result<Vec<u16>> {
    let absent: Vec<usize> = match kind {
        BlockKind::Kind(PredictorKind::DualQuant) => return Err(corrupt!("a partial block cannot use dual quantization")),
        // Fitted prediction walks in C order, as the mask lists the cells.
        BlockKind::Fitted { .. } => mask.iter().enumerate().filter(|(_, &m)| !m).map(|(k, _)| k).collect(),
        BlockKind::Kind(kind) => predictor::absent_in_walk(&predictor::from_side(kind, side)?, unit, mask, q),
    };
    // The stored cells' symbols run by run between the absent cells (listed in cell order).
    let mut full = Vec::with_capacity(mask.len());
    let mut next = 0;
    let mut take = |full: &mut Vec<u16>, n: usize| -> Result<()> {
        let run = coded.get(next..next + n).ok_or_else(|| corrupt!("partial block has fewer symbols than stored cells"))?;
        full.extend_from_slice(run);
        next += n;
        Ok(())
    };
    for &a in absent.iter().filter(|&&a| a < mask.len()) {
        let before = a.checked_sub(full.len()).ok_or_else(|| corrupt!("absent cells out of order"))?;
        take(&mut full, before)?;
        full.push(q.zero_symbol());
    }
    let rest = mask.len() - full.len();
    take(&mut full, rest)?;
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorBound;

    fn block(position: u64, unit: &[usize], f: impl Fn(usize) -> f64, mask: Option<Vec<bool>>) -> Block<f64> {
        Block { position, values: (0..unit.iter().product()).map(f).collect(), mask }
    }

    #[test]
    fn round_trip_keeps_the_bound_on_stored_cells() {
        let unit = [8, 8, 8];
        let mut blocks: Vec<Block<f64>> =
            (0..20).map(|p| block(p * 3, &unit, |i| ((i + p as usize * 7) as f64 * 0.1).sin() * 5.0, None)).collect();
        let mask: Vec<bool> = (0..512).map(|i| i % 3 != 0).collect();
        blocks[4].mask = Some(mask.clone());
        blocks[4].values[0] = 1e300; // a don't-care cell with a wild value
        blocks[5].values[7] = f64::NAN;
        for (adaptive, preset) in [(false, Preset::Ratio), (true, Preset::Ratio), (true, Preset::Speed)] {
            let config = Config { preset, ..Config::new(ErrorBound::Absolute(1e-3)) };
            let enc = BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &config, 1e-3, adaptive).unwrap();
            let set = enc.predict(&blocks).unwrap();
            let codebook = enc.shared_tables(std::slice::from_ref(&set), None).unwrap();
            let mut written = vec![(TABLED, codebook)];
            if preset == Preset::Ratio {
                written.push((RANGE_CODED, enc.adaptive_tables(std::slice::from_ref(&set), None).unwrap()));
            } else {
                written[0].0 = HUFFMAN;
            }
            for (version, codebook) in written {
                let bytes = set.finish(&codebook, 0).unwrap();
                assert_eq!(bytes[2], version);
                let codebook = SharedCodebook::from_bytes(&codebook.to_bytes()).unwrap();
                let back = decode::<f64>(&bytes, &codebook, &unit, 1e-3, 60).unwrap();
                assert_eq!(back.len(), blocks.len());
                for (a, b) in blocks.iter().zip(&back) {
                    assert_eq!((a.position, &a.mask), (b.position, &b.mask));
                    for (i, (x, y)) in a.values.iter().zip(&b.values).enumerate() {
                        if a.mask.as_ref().is_some_and(|m| !m[i]) {
                            continue;
                        }
                        assert!(x.is_nan() && y.is_nan() || (x - y).abs() <= 1e-3, "{x} {y}");
                    }
                }
                assert!(decode::<f64>(&bytes, &codebook, &unit, 1e-3, 50).is_err(), "positions beyond the grid are refused");
            }
        }
    }

    /// `predict` keeps a ratio-mode set as its model alone; the set codes to the bytes of the
    /// same blocks kept whole, with either coder.
    #[test]
    fn modelled_sets_code_as_sets_of_whole_blocks() {
        let unit = [8, 8, 8];
        let mut blocks: Vec<Block<f64>> = (0..12)
            .map(|p| block(p * 2, &unit, |i| ((i + p as usize * 5) as f64 * 0.07).cos() * 3.0 + (i % 7) as f64 * 1e-3, None))
            .collect();
        blocks[3].mask = Some((0..512).map(|i| i % 5 != 0).collect());
        let config = Config::new(ErrorBound::Absolute(1e-4));
        let enc = BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &config, 1e-4, true).unwrap();
        let compact = enc.predict(&blocks).unwrap();
        assert!(compact.compact && compact.blocks.iter().all(|b| b.coded.symbols.is_empty()));
        let whole = enc.set(blocks.iter().map(|b| enc.predict_block(b).unwrap()).collect()).unwrap();
        assert_eq!(compact.symbols(), whole.symbols());
        assert_eq!(compact.symbol_count(), whole.symbol_count());
        for shared in [
            enc.shared_tables(std::slice::from_ref(&whole), None).unwrap(),
            enc.adaptive_tables(std::slice::from_ref(&whole), None).unwrap(),
        ] {
            assert_eq!(compact.finish(&shared, 0).unwrap(), whole.finish(&shared, 0).unwrap());
        }
        assert_eq!(enc.encode_sets(&[compact], 0, true, None).unwrap().1, enc.encode_sets(&[whole], 0, true, None).unwrap().1);
    }

    #[test]
    fn neighbours_in_space_are_earlier_stored_cells_of_c_order_blocks() {
        assert_eq!(neighbour_offsets(2), vec![vec![-1, -1], vec![-1, 0], vec![0, -1]]);
        assert_eq!(neighbour_count(3), 6);
        assert_eq!(neighbour_count(4), 0);
        // In a 3x3 block, cell 5 (row 1, column 2) sees cells 1 (above-left), 2 (above) and 4
        // (left); cell 0 none (9, past the faces); cell 3 only those above.
        let cells = neighbour_cells(&[3, 3]);
        assert_eq!(cells[5][..3], [1, 2, 4]);
        assert_eq!(cells[0][..3], [9, 9, 9]);
        assert_eq!(cells[3][..3], [9, 0, 9]);
        // A block missing its centre, a full one, one walked otherwise: 8 + 9 + 9 symbols.
        let mask: Vec<bool> = (0..9).map(|k| k != 4).collect();
        let blocks = [
            (BlockKind::Fitted { by_stored: true }, Some(&mask[..])),
            (BlockKind::Kind(PredictorKind::Lorenzo), None),
            (BlockKind::Kind(PredictorKind::Interpolation), None),
        ];
        assert_eq!(block_layout(blocks.into_iter(), &cells, &[3, 3]).symbols(), 26);
        assert!(neighbour_cells(&[2, 2, 2, 2]).is_empty());
    }

    #[test]
    fn damaged_sets_fail_cleanly() {
        let unit = [4, 4];
        let blocks: Vec<Block<f32>> =
            (0..5).map(|p| Block { position: p, values: (0..16).map(|i| (i as f32 * 0.3).cos()).collect(), mask: None }).collect();
        for preset in [Preset::Ratio, Preset::Speed] {
            let config = Config { preset, ..Config::new(ErrorBound::Absolute(1e-2)) };
            let enc = BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &config, 1e-2, true).unwrap();
            let set = enc.predict(&blocks).unwrap();
            let codebook = enc.shared_tables(std::slice::from_ref(&set), None).unwrap();
            let bytes = set.finish(&codebook, 0).unwrap();
            for cut in 0..bytes.len() {
                assert!(decode::<f32>(&bytes[..cut], &codebook, &unit, 1e-2, 5).is_err());
            }
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 0x41;
                assert!(decode::<f32>(&bad, &codebook, &unit, 1e-2, 5).is_err(), "flip at {i}");
            }
        }
    }

    /// Smooth 16^3 blocks of one field (not a sum of one-coordinate functions, which Lorenzo
    /// predicts exactly), some partial: a slab, a checkerboard and an empty corner absent.
    fn smooth_blocks() -> Vec<Block<f64>> {
        (0..10u64)
            .map(|p| {
                let values = (0..4096)
                    .map(|i| {
                        let (x, y, z) = ((i / 256) as f64 + 16.0 * p as f64, (i / 16 % 16) as f64, (i % 16) as f64);
                        (0.11 * x + 0.07 * y).sin() * (0.09 * z - 0.05 * x).cos() * 50.0 + 300.0
                    })
                    .collect();
                let mask = match p {
                    3 => Some((0..4096).map(|i| i / 256 >= 5).collect()),
                    6 => Some((0..4096).map(|i| (i + i / 16 + i / 256) % 2 == 0).collect()),
                    8 => Some((0..4096).map(|i| i / 256 > 8 || i % 16 > 8).collect()),
                    _ => None,
                };
                Block { position: p, values, mask }
            })
            .collect()
    }

    #[test]
    fn measured_errors_are_those_of_the_decoded_blocks() {
        let unit = [16, 16, 16];
        let mut blocks = smooth_blocks();
        blocks[2].values[5] = f64::INFINITY; // patched out, not counted
        let eb = 1e-3;
        for predictor in [None, Some(PredictorKind::Lorenzo), Some(PredictorKind::Regression), Some(PredictorKind::Interpolation)] {
            let config = Config { predictor, ..Config::new(ErrorBound::Absolute(eb)) };
            let enc = BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &config, eb, true).unwrap().measuring(true);
            let set = enc.predict(&blocks).unwrap();
            let codebook = enc.shared_tables(std::slice::from_ref(&set), None).unwrap();
            let back = decode::<f64>(&set.finish(&codebook, 0).unwrap(), &codebook, &unit, eb, 10).unwrap();
            let decoded = blocks.iter().zip(&back).fold((0.0, 0), |(s, n), (a, b)| {
                let (e, c) = error_sum(a, &b.values);
                (s + e, n + c)
            });
            let measured = set.error().expect("a measuring encoder");
            assert_eq!(measured.1, decoded.1, "{predictor:?}");
            assert!((measured.0 - decoded.0).abs() <= 1e-9 * eb * decoded.1 as f64, "{predictor:?}: {measured:?} vs {decoded:?}");
        }
    }

    #[test]
    fn fitted_blocks_round_trip_and_need_their_weights() {
        let unit = [16, 16, 16];
        let mut blocks = smooth_blocks();
        let eb = 1e-5;
        let enc =
            BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &Config::new(ErrorBound::Absolute(eb)), eb, true).unwrap();
        assert_eq!(enc.predictor_name(), "fitted");
        // A whole block with a non-finite value, coded in the walk's lanes like the others.
        blocks[1].values[77] = f64::INFINITY;
        // Whole blocks coded in lockstep code as alone (7 whole blocks: one group of 4, 3 alone).
        let refs: Vec<&Block<f64>> = blocks.iter().collect();
        for (laned, b) in enc.predict_blocks(&refs).unwrap().iter().zip(&blocks) {
            let alone = enc.predict_block(b).unwrap();
            assert_eq!(
                (&laned.coded.symbols, &laned.coded.exact, &laned.patches),
                (&alone.coded.symbols, &alone.coded.exact, &alone.patches)
            );
        }
        let set = enc.predict(&blocks).unwrap();
        let codebook = SharedCodebook::from_bytes(&enc.shared_tables(std::slice::from_ref(&set), None).unwrap().to_bytes()).unwrap();
        let bytes = set.finish(&codebook, 0).unwrap();
        let back = decode::<f64>(&bytes, &codebook, &unit, eb, 10).unwrap();
        for (a, b) in blocks.iter().zip(&back) {
            assert_eq!(a.mask, b.mask);
            for (i, (x, y)) in a.values.iter().zip(&b.values).enumerate() {
                assert!(a.mask.as_ref().is_some_and(|m| !m[i]) || (x - y).abs() <= eb || x == y, "block {} cell {i}: {x} {y}", a.position);
            }
        }
        // The same tables without the weights cannot decode the set, nor without the context tables.
        let bare = SharedCodebook::new(codebook.codebook, codebook.start, codebook.tables, None);
        assert!(decode::<f64>(&bytes, &bare, &unit, eb, 10).is_err());
        let huffman = SharedCodebook::new(bare.codebook, bare.start, None, enc.weights().cloned());
        assert!(decode::<f64>(&bytes, &huffman, &unit, eb, 10).is_err());
    }

    /// Sets decoded together (their whole blocks walked in lanes across sets) decode as each
    /// alone; a damaged one fails alone.
    #[test]
    fn sets_decoded_together_decode_as_alone() {
        let unit = [16, 16, 16];
        let blocks = smooth_blocks();
        let eb = 1e-5;
        let enc =
            BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &Config::new(ErrorBound::Absolute(eb)), eb, true).unwrap();
        // Sets of one block (as chunks of one unit block), of a partial block, of several.
        let groups: Vec<&[Block<f64>]> = vec![&blocks[0..1], &blocks[1..2], &blocks[2..4], &blocks[4..5], &blocks[5..9], &blocks[9..10]];
        let sets: Vec<PredictedSet<f64>> = groups.iter().map(|g| enc.predict(g).unwrap()).collect();
        let codebook = SharedCodebook::from_bytes(&enc.shared_tables(&sets, None).unwrap().to_bytes()).unwrap();
        let mut bytes: Vec<Vec<u8>> = sets.iter().map(|set| set.finish(&codebook, 0).unwrap()).collect();
        let together = decode_sets::<f64>(&bytes.iter().map(|b| (&b[..], &codebook)).collect::<Vec<_>>(), &unit, eb, 10);
        for (b, t) in bytes.iter().zip(&together) {
            assert_eq!(t.as_ref().unwrap(), &decode::<f64>(b, &codebook, &unit, eb, 10).unwrap());
        }
        let last = bytes[4].len() - 1;
        bytes[4][last] ^= 1;
        let together = decode_sets::<f64>(&bytes.iter().map(|b| (&b[..], &codebook)).collect::<Vec<_>>(), &unit, eb, 10);
        for (k, t) in together.iter().enumerate() {
            assert_eq!(t.is_err(), k == 4, "set {k}");
        }
    }

    #[test]
    fn damaged_shared_tables_fail_cleanly() {
        let blocks = smooth_blocks();
        let enc =
            BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &[16, 16, 16], &Config::new(ErrorBound::Absolute(1e-5)), 1e-5, true)
                .unwrap();
        let shared = enc.shared_tables(&[enc.predict(&blocks).unwrap()], None).unwrap();
        let tables = shared.to_bytes();
        // An empty codebook, the context coder's tables, the weights.
        assert_eq!(tables[..2], [0, TABLES_TAG]);
        let weights_at = SharedCodebook { weights: None, ..shared }.to_bytes().len();
        assert_eq!(tables[weights_at], WEIGHTS_TAG);
        for cut in (2..tables.len()).filter(|&c| c != weights_at) {
            assert!(SharedCodebook::from_bytes(&tables[..cut]).is_err(), "cut at {cut}");
        }
        for (at, byte) in [(1, b'X'), (weights_at, b'X'), (weights_at, START_TAG), (0, 1)] {
            let mut bad = tables.clone();
            bad[at] = byte;
            assert!(SharedCodebook::from_bytes(&bad).is_err(), "{byte} at {at}");
        }
        let mut bad = tables.clone();
        bad.push(0);
        assert!(SharedCodebook::from_bytes(&bad).is_err());
    }
}
