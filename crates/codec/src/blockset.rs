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
use crate::entropy::huffman::{self, Codebook};
use crate::error::{corrupt, CodecError, Result};
use crate::nonfinite;
use crate::predictor::fitted::{self, Weights};
use crate::predictor::{self, Coded, Predictor, PredictorKind};
use crate::quantizer::{Quantizer, DEFAULT_RADIUS};
use crate::selection;
use crate::{Config, Preset};
use rayon::prelude::*;
use std::borrow::Cow;

const MAGIC: &[u8; 2] = b"AB";
const VERSION: u8 = 1;
/// Blocks sampled to choose the predictor: enough to see the field's character, few enough
/// that choosing costs a small share of compressing. Every candidate walks every cell of a
/// sampled block, absent ones included, so the sample is also capped in cells: 256 partly
/// covered blocks of 32^3 walked 12 times the cells a 16^3-box level stores.
const SAMPLE_BLOCKS: usize = 256;
const MIN_SAMPLE_BLOCKS: usize = 8;
const SAMPLE_CELLS: usize = 1 << 17;
const MAX_UNIT_ELEMENTS: usize = 1 << 24;

/// One unit block: its position in the set's block grid, its values in C order over the unit
/// shape, and which cells are stored (`None`: all).
#[derive(Clone, Debug, PartialEq)]
pub struct Block<T> {
    pub position: u64,
    pub values: Vec<T>,
    pub mask: Option<Vec<bool>>,
}

/// What the block sets of an array share: the Huffman codebook and, when its blocks use fitted
/// prediction, the weights.
pub struct SharedCodebook {
    codebook: Codebook,
    weights: Option<Weights>,
}

/// Marks the fitted prediction weights after the codebook.
const WEIGHTS_TAG: u8 = b'W';

impl SharedCodebook {
    /// A codebook for the summed histograms of the sets it will code, with the encoder's
    /// fitted prediction weights (if it has them).
    pub fn from_histogram(histogram: &[u64], weights: Option<&Weights>) -> SharedCodebook {
        SharedCodebook { codebook: Codebook::from_histogram(histogram), weights: weights.cloned() }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.codebook.write(&mut out);
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
        let weights = if r.remaining() == 0 {
            None
        } else if r.u8("shared table tag")? == WEIGHTS_TAG {
            Some(Weights::read(&mut r)?)
        } else {
            return Err(corrupt!("unknown table after the shared codebook"));
        };
        if r.remaining() != 0 {
            return Err(corrupt!("{} unexpected bytes after the shared tables", r.remaining()));
        }
        Ok(SharedCodebook { codebook, weights })
    }
}

/// A block's predictor as its header byte: a predictor kind's code, or `FITTED` for fitted
/// prediction, which exists only in block sets (its weights are the array's, not the block's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockKind {
    Kind(PredictorKind),
    Fitted,
}

impl BlockKind {
    const FITTED: u8 = 4;

    fn code(self) -> u8 {
        match self {
            BlockKind::Kind(k) => k as u8,
            BlockKind::Fitted => BlockKind::FITTED,
        }
    }

    fn from_code(c: u8) -> Result<BlockKind> {
        match c {
            BlockKind::FITTED => Ok(BlockKind::Fitted),
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
        check_unit(unit)?;
        if !(eb.is_finite() && eb >= 0.0) {
            return Err(CodecError::InvalidInput(format!("bound must be a finite number >= 0, got {eb}")));
        }
        let q = Quantizer::new(eb, DEFAULT_RADIUS);
        let n = unit.iter().product::<usize>();
        // Full blocks judge best; partial ones (absent cells marked) join when full ones are few.
        let (full, partial): (Vec<&&Block<T>>, Vec<&&Block<T>>) =
            sample.iter().filter(|b| b.values.len() == n).partition(|b| b.mask.is_none());
        let pool: Vec<&&Block<T>> = if full.len() >= SAMPLE_BLOCKS / 4 { full } else { full.into_iter().chain(partial).collect() };
        // Up to the sample budget of `blocks`, spread evenly, ready for a predictor.
        let spread = |blocks: &[&&Block<T>]| -> Vec<(Vec<T>, Vec<usize>)> {
            let step = blocks.len().div_ceil((SAMPLE_CELLS / n).clamp(MIN_SAMPLE_BLOCKS, SAMPLE_BLOCKS)).max(1);
            blocks.iter().step_by(step).map(|b| (marked(b).0.into_owned(), unit.to_vec())).collect()
        };
        let samples = spread(&pool);
        // Fitted prediction is judged on blocks as they come, partial ones in their share: it
        // gains least where absent cells cut its stencil, so full blocks alone flatter it.
        let judge = || spread(&sample.iter().filter(|b| b.values.len() == n).collect::<Vec<_>>());
        let edge = *unit.iter().max().unwrap_or(&1);
        let (predictor, fitted) = if samples.is_empty() {
            (Predictor::Lorenzo, None)
        } else {
            selection::choose_for_blocks(&samples, judge, &q, config, regression_block(unit.len(), edge, adaptive_block))
        };
        let fitted = fitted.and_then(|w| fitted::Walker::new(unit, &w).map(|walker| (w, walker)));
        Ok(BlockSetEncoder { unit: unit.to_vec(), q, predictor, fitted, preset: config.preset })
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

    /// Size of the symbol alphabet, which histograms for `PredictedSet::add_counts_to` span.
    pub fn alphabet(&self) -> usize {
        self.q.alphabet()
    }

    /// Predicts and quantizes one set's blocks (positions strictly increasing).
    pub fn predict<T: Element>(&self, blocks: &[Block<T>]) -> Result<PredictedSet<T>> {
        let predicted: Vec<PredictedBlock<T>> = blocks.par_iter().map(|b| self.predict_block(b)).collect::<Result<_>>()?;
        self.set(predicted)
    }

    /// The set of `blocks` (predicted by this encoder, positions strictly increasing).
    pub fn set<T: Element>(&self, blocks: Vec<PredictedBlock<T>>) -> Result<PredictedSet<T>> {
        if blocks.windows(2).any(|w| w[1].position <= w[0].position) {
            return Err(CodecError::InvalidInput("block positions must be strictly increasing".into()));
        }
        Ok(PredictedSet { preset: self.preset, blocks, alphabet: self.q.alphabet() })
    }

    /// Predicts and quantizes one block. A block's coding does not depend on its set, so one
    /// prediction can be grouped into several sets (see [`PredictedBlock::at`]).
    pub fn predict_block<T: Element>(&self, b: &Block<T>) -> Result<PredictedBlock<T>> {
        let n = self.unit.iter().product::<usize>();
        if b.values.len() != n || b.mask.as_ref().is_some_and(|m| m.len() != n) {
            return Err(CodecError::InvalidInput(format!("a block does not have the {n} values of the unit shape {:?}", self.unit)));
        }
        let (values, patches) = marked(b);
        let (kind, mut coded) = match (&self.fitted, b.mask.is_some(), self.predictor) {
            (Some((_, walker)), _, _) => (BlockKind::Fitted, fitted::encode(&values, &self.q, walker)),
            // Dual quantization prequantizes every cell, absent ones included: Lorenzo instead.
            (None, true, Predictor::DualQuant) => {
                (BlockKind::Kind(PredictorKind::Lorenzo), predictor::encode(&Predictor::Lorenzo, values, &self.unit, &self.q))
            }
            (None, _, p) => (BlockKind::Kind(p.kind()), predictor::encode(&p, values, &self.unit, &self.q)),
        };
        // Absent cells are not coded at all: the decoder knows where they fall in the walk.
        if !coded.absent.is_empty() {
            let mut absent = coded.absent.iter().peekable();
            let mut k = 0;
            coded.symbols.retain(|_| {
                let keep = absent.next_if_eq(&&k).is_none();
                k += 1;
                keep
            });
        }
        Ok(PredictedBlock { position: b.position, kind, mask: b.mask.clone(), patches, coded })
    }
}

/// The block's values ready for a predictor: non-finite stored values patched out (and
/// listed), absent cells set to NaN, which the predictors' walks treat as "don't care"
/// (regression fits no model to a sub-block holding one and predicts it by Lorenzo).
fn marked<T: Element>(b: &Block<T>) -> (Cow<'_, [T]>, Vec<(usize, T)>) {
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
    blocks: Vec<PredictedBlock<T>>,
    alphabet: usize,
}

impl<T: Element> PredictedSet<T> {
    /// Adds the set's symbol counts to `h` (sized like `histogram`'s): summed over all sets of
    /// an array, they build its shared codebook.
    pub fn add_counts_to(&self, h: &mut [u64]) {
        for b in &self.blocks {
            huffman::add_counts(h, &b.coded.symbols);
        }
    }

    /// The set's own symbol counts, over the whole alphabet.
    pub fn histogram(&self) -> Vec<u64> {
        let mut h = vec![0u64; self.alphabet];
        self.add_counts_to(&mut h);
        h
    }

    /// The set's bytes, coded with `codebook` (built from histograms including this set's),
    /// recorded as codebook `codebook_index` of the array.
    pub fn finish(&self, codebook: &SharedCodebook, codebook_index: u32) -> Result<Vec<u8>> {
        // The predictor settings most blocks share are written once; a block whose side
        // information is empty uses them.
        let common = self
            .blocks
            .iter()
            .map(|b| (b.kind, b.coded.side.as_slice()))
            .max_by_key(|&(k, side)| (self.blocks.iter().filter(|b| b.kind == k && b.coded.side == side).count(), side.len()));
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
        let symbols: Vec<u16> = self.blocks.iter().flat_map(|b| b.coded.symbols.iter().copied()).collect();
        write_segments(&mut raw, &symbols, &codebook.codebook)?;
        let packed = frames::pack(&raw, |frame| frames::level_for(self.preset, frame));
        let mut out = Vec::with_capacity(packed.len() + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[VERSION, T::DTYPE as u8, self.preset as u8, common_kind.code()]);
        put_varint(&mut out, codebook_index as u64);
        put_varint(&mut out, self.blocks.len() as u64);
        put_varint(&mut out, raw.len() as u64);
        put_varint(&mut out, common_side.len() as u64);
        out.extend_from_slice(common_side);
        out.extend_from_slice(&packed);
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }
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
    info: BlockSetInfo,
    common_kind: BlockKind,
    common_side: &'a [u8],
    raw_len: u64,
    /// The lossless frames.
    packed: &'a [u8],
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
    if version != VERSION {
        return Err(corrupt!("unsupported block set version {version} (this build reads version {VERSION})"));
    }
    let dtype = DType::from_code(r.u8("dtype")?).ok_or_else(|| corrupt!("unknown dtype code"))?;
    if r.u8("preset")? > 1 {
        return Err(corrupt!("unknown preset"));
    }
    let common_kind = BlockKind::from_code(r.u8("predictor")?)?;
    let codebook_index = u32::try_from(r.varint("codebook index")?).map_err(|_| corrupt!("codebook index out of range"))?;
    let blocks = r.bounded_varint(u32::MAX as u64, "block count")? as usize;
    let raw_len = r.varint("raw length")?;
    let side_len = r.bounded_varint(r.remaining() as u64, "side length")? as usize;
    let common_side = r.take(side_len, "common side information")?;
    let packed = &body[2 + r.position()..];
    Ok(Header { info: BlockSetInfo { dtype, codebook_index, blocks }, common_kind, common_side, raw_len, packed })
}

/// Reads and validates a block set's header (and its checksum).
pub fn info(bytes: &[u8]) -> Result<BlockSetInfo> {
    Ok(read_header(bytes)?.info)
}

/// Decodes a block set of unit blocks of shape `unit` quantized under `eb` (both from the
/// array's metadata); `codebook` is the array's codebook the header names (see
/// `info(bytes).codebook_index`), `max_position` bounds the positions (the block grid's size).
pub fn decode<T: Element>(bytes: &[u8], codebook: &SharedCodebook, unit: &[usize], eb: f64, max_position: u64) -> Result<Vec<Block<T>>> {
    check_unit(unit)?;
    if !(eb.is_finite() && eb >= 0.0) {
        return Err(CodecError::InvalidInput(format!("bound must be a finite number >= 0, got {eb}")));
    }
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
    let q = Quantizer::new(eb, DEFAULT_RADIUS);
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
        if parts.side.is_empty() {
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
    let (symbols, _) = read_segments(&mut r, total, &codebook.codebook)?;
    // Stencils only for a set that has fitted blocks.
    let walker = match &codebook.weights {
        Some(w) if heads.iter().any(|(_, kind, _, _)| *kind == BlockKind::Fitted) => fitted::Walker::new(unit, w),
        _ => None,
    };
    let mut starts = Vec::with_capacity(counts.len());
    counts.iter().fold(0, |acc, &c| {
        starts.push(acc);
        acc + c
    });
    heads
        .into_par_iter()
        .zip(starts.into_par_iter().zip(counts))
        .map(|((position, kind, mask, parts), (start, count))| {
            let coded = &symbols[start..start + count];
            let syms = match &mask {
                None => Cow::Borrowed(coded),
                Some(mask) => Cow::Owned(with_absent(kind, parts.side, mask, unit, &q, coded)?),
            };
            let mut values = match kind {
                BlockKind::Kind(kind) => predictor::decode(kind, unit, &q, &syms, None, &parts.exact, parts.side)?,
                BlockKind::Fitted => {
                    if !parts.side.is_empty() {
                        return Err(corrupt!("a fitted block carries {} bytes of side information", parts.side.len()));
                    }
                    let walker = walker
                        .as_ref()
                        .ok_or_else(|| corrupt!("a block uses fitted prediction but the array has no weights for its blocks"))?;
                    fitted::decode(&q, &syms, &parts.exact, walker, mask.as_deref())?
                }
            };
            for (i, x) in parts.patches {
                values[i] = x;
            }
            Ok(Block { position, values, mask })
        })
        .collect()
}

/// A partial block's symbols with the zero-residual code put back at its absent cells, which
/// the encoder dropped: their places in the walk come from walking a stand-in block with the
/// same absent cells.
fn with_absent(kind: BlockKind, side: &[u8], mask: &[bool], unit: &[usize], q: &Quantizer, coded: &[u16]) -> Result<Vec<u16>> {
    let absent: Vec<usize> = match kind {
        BlockKind::Kind(PredictorKind::DualQuant) => return Err(corrupt!("a partial block cannot use dual quantization")),
        // Fitted prediction walks in C order, as the mask lists the cells.
        BlockKind::Fitted => mask.iter().enumerate().filter(|(_, &m)| !m).map(|(k, _)| k).collect(),
        BlockKind::Kind(kind) => {
            let p = predictor::from_side(kind, side)?;
            let stand_in: Vec<f64> = mask.iter().map(|&m| if m { 0.0 } else { f64::NAN }).collect();
            predictor::encode(&p, Cow::Owned(stand_in), unit, q).absent
        }
    };
    let mut full = Vec::with_capacity(mask.len());
    let mut next = coded.iter();
    let mut absent = absent.iter().peekable();
    for k in 0..mask.len() {
        if absent.next_if_eq(&&k).is_some() {
            full.push(q.zero_symbol());
        } else {
            full.push(*next.next().ok_or_else(|| corrupt!("partial block has fewer symbols than stored cells"))?);
        }
    }
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
        let config = Config::new(ErrorBound::Absolute(1e-3));
        for adaptive in [false, true] {
            let enc = BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &config, 1e-3, adaptive).unwrap();
            let set = enc.predict(&blocks).unwrap();
            let codebook = SharedCodebook::from_histogram(&set.histogram(), enc.weights());
            let bytes = set.finish(&codebook, 0).unwrap();
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

    #[test]
    fn damaged_sets_fail_cleanly() {
        let unit = [4, 4];
        let blocks: Vec<Block<f32>> =
            (0..5).map(|p| Block { position: p, values: (0..16).map(|i| (i as f32 * 0.3).cos()).collect(), mask: None }).collect();
        let enc =
            BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &Config::new(ErrorBound::Absolute(1e-2)), 1e-2, true).unwrap();
        let set = enc.predict(&blocks).unwrap();
        let codebook = SharedCodebook::from_histogram(&set.histogram(), enc.weights());
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
    fn fitted_blocks_round_trip_and_need_their_weights() {
        let unit = [16, 16, 16];
        let blocks = smooth_blocks();
        let eb = 1e-5;
        let enc =
            BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &unit, &Config::new(ErrorBound::Absolute(eb)), eb, true).unwrap();
        assert_eq!(enc.predictor_name(), "fitted");
        let set = enc.predict(&blocks).unwrap();
        let codebook = SharedCodebook::from_bytes(&SharedCodebook::from_histogram(&set.histogram(), enc.weights()).to_bytes()).unwrap();
        let bytes = set.finish(&codebook, 0).unwrap();
        let back = decode::<f64>(&bytes, &codebook, &unit, eb, 10).unwrap();
        for (a, b) in blocks.iter().zip(&back) {
            assert_eq!(a.mask, b.mask);
            for (i, (x, y)) in a.values.iter().zip(&b.values).enumerate() {
                assert!(a.mask.as_ref().is_some_and(|m| !m[i]) || (x - y).abs() <= eb, "block {} cell {i}: {x} {y}", a.position);
            }
        }
        // The same codebook without the weights cannot decode the set.
        let bare = SharedCodebook::from_histogram(&set.histogram(), None);
        assert!(decode::<f64>(&bytes, &bare, &unit, eb, 10).is_err());
    }

    #[test]
    fn damaged_shared_tables_fail_cleanly() {
        let blocks = smooth_blocks();
        let enc =
            BlockSetEncoder::new(&blocks.iter().collect::<Vec<_>>(), &[16, 16, 16], &Config::new(ErrorBound::Absolute(1e-5)), 1e-5, true)
                .unwrap();
        let histogram = enc.predict(&blocks).unwrap().histogram();
        let tables = SharedCodebook::from_histogram(&histogram, enc.weights()).to_bytes();
        let book_len = SharedCodebook::from_histogram(&histogram, None).to_bytes().len();
        assert_eq!(tables[book_len], WEIGHTS_TAG);
        for cut in book_len + 1..tables.len() {
            assert!(SharedCodebook::from_bytes(&tables[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = tables.clone();
        bad[book_len] = b'X';
        assert!(SharedCodebook::from_bytes(&bad).is_err());
        bad = tables.clone();
        bad.push(0);
        assert!(SharedCodebook::from_bytes(&bad).is_err());
    }
}
