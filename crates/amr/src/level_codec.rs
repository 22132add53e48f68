//! Compression of one (level, field): unit blocks grouped by chunk, the predictor chosen once
//! for the level, every block predicted on its own, and one Huffman codebook for all chunks
//! (shared lossless encoding). The codebook is stored once beside the chunks, so each chunk
//! decodes on its own and a region read decodes only the chunks it touches.

use crate::unit_blocks::{scatter, BoxView, ChunkPlan, Tiling};
use amrzip_codec::blockset::{self, Block, BlockInfo, BlockSetEncoder, Choice, Pool, PredictedBlock, PredictedSet, SharedCodebook};
use amrzip_codec::{CodecError, Config, Element, Result};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// A compressed (level, field).
pub struct LevelStreams {
    /// The codebooks the chunks refer to by index: one with shared lossless encoding.
    pub codebooks: Vec<Vec<u8>>,
    /// Name of the predictor chosen for the level.
    pub predictor: &'static str,
    /// The predictor choice, to code the level again without choosing afresh.
    pub choice: Choice,
    /// (chunk index, bytes), in lattice order.
    pub chunks: Vec<(Vec<i64>, Vec<u8>)>,
    pub blocks: usize,
    pub partial_blocks: usize,
    pub stored_cells: usize,
    /// With `measure`: the sum of (decoded - original) over the stored finite cells, as the
    /// encoder rebuilt them, and how many cells it covers.
    pub error: Option<(f64, u64)>,
    /// With `measure`: per chunk (as `chunks`), its part of `error`. `error` sums them in
    /// lattice order, so a writer with the chunks spread over processes sums them the same way.
    pub chunk_errors: Vec<(f64, u64)>,
}

/// A level whose boxes are spread over processes (a parallel write), each coding its part: the
/// predictor choice sees every process's blocks and the shared tables pool every process's
/// statistics, so that each codes its part as one process coding the whole level would.
pub trait Spread<T>: Pool {
    /// Every block of the level with `tiling`, chunk after chunk in lattice order.
    fn info(&self, tiling: &Tiling) -> Vec<BlockInfo>;
    /// The blocks at `picked` (indexes into `info`), in that order.
    fn fetch(&self, tiling: &Tiling, picked: &[usize]) -> Vec<Block<T>>;
}

/// Chunks predicted together by fitted prediction (see `BlockSetEncoder::predict_sets`): enough
/// that chunks of one unit block fill its walk's lanes twice, few enough to hold little beside
/// the level. Other predictors walk one block at a time, and take one chunk at a time: a batch
/// of zeroed blocks in flight is memory to fault in (the `speed` write 2.5-4% faster on one
/// thread with single chunks, Nyx-like and WarpX-like, rel 1e-4).
const FITTED_BATCH: usize = 8;

fn batch(encoder: &BlockSetEncoder) -> usize {
    if encoder.is_fitted() {
        FITTED_BATCH
    } else {
        1
    }
}

/// Sums per-chunk errors in order, as `LevelStreams::error` does.
pub fn sum_errors(errors: impl IntoIterator<Item = (f64, u64)>) -> (f64, u64) {
    errors.into_iter().fold((0.0, 0), |(s, n), (a, b)| (s + a, n + b))
}

fn invalid(m: String) -> CodecError {
    CodecError::InvalidInput(m)
}

/// Compresses the stored cells of `boxes` under the absolute bound `eb`. With `shared` false
/// (an ablation), every chunk gets a codebook of its own. `adaptive_block` applies AMRIC's rule
/// for the regression block edge. `measure` also rebuilds the blocks as they are coded, to sum
/// the errors (for keeping the level's mean). The chunks number their codebooks from
/// `first_table` (the codebooks of other fields stored before these in the same array). With
/// `choice` (an earlier coding's, see `LevelStreams::choice`) the predictor is not chosen again.
#[allow(clippy::too_many_arguments)]
pub fn compress_level<T: Element>(
    boxes: &[BoxView<T>],
    tiling: &Tiling,
    config: &Config,
    eb: f64,
    adaptive_block: bool,
    shared: bool,
    measure: bool,
    first_table: u32,
    choice: Option<&Choice>,
    spread: Option<&dyn Spread<T>>,
) -> Result<LevelStreams> {
    let plan = ChunkPlan::new(boxes, tiling).map_err(invalid)?;
    let encoder = encoder(&plan, tiling, config, eb, adaptive_block, choice, true, spread)?.measuring(measure);
    // Chunk by chunk, its blocks gathered, predicted and dropped: only their codes (in ratio
    // mode, their context model) wait for the shared tables.
    // With fitted prediction a few chunks at a time, so that their whole blocks fill its lanes.
    let chunks: Vec<usize> = (0..plan.chunks().len()).collect();
    let predicted: Vec<Option<(PredictedSet<T>, BlockCounts)>> = chunks
        .par_chunks(batch(&encoder))
        .map(|batch| {
            let gathered: Vec<Vec<Block<T>>> = batch.par_iter().map(|&k| plan.gather(k)).collect();
            let counts: Vec<BlockCounts> = gathered.iter().map(|b| BlockCounts::of(b)).collect();
            let sets = encoder.predict_sets(&gathered)?;
            Ok(sets.into_iter().zip(counts).map(|(set, c)| (c.blocks > 0).then_some((set, c))).collect::<Vec<_>>())
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut indices = Vec::new();
    let mut sets = Vec::new();
    let mut counts = BlockCounts::default();
    for ((idx, _), p) in plan.chunks().iter().zip(predicted) {
        if let Some((set, c)) = p {
            indices.push(idx.clone());
            sets.push(set);
            counts.add(&c);
        }
    }
    let (codebooks, bytes) = encode_sets(&sets, &encoder, shared, first_table, false, spread.map(|s| s as &dyn Pool))?;
    Ok(LevelStreams::of(&encoder, &sets, &codebooks, indices.into_iter().zip(bytes).collect(), &counts))
}

impl LevelStreams {
    /// The streams of `sets` (chunk by chunk in lattice order) coded into `chunks` with
    /// `codebooks` by `encoder`.
    fn of<T: Element>(
        encoder: &BlockSetEncoder,
        sets: &[PredictedSet<T>],
        codebooks: &[SharedCodebook],
        chunks: Vec<(Vec<i64>, Vec<u8>)>,
        counts: &BlockCounts,
    ) -> LevelStreams {
        LevelStreams {
            codebooks: codebooks.iter().map(SharedCodebook::to_bytes).collect(),
            predictor: encoder.predictor_name(),
            choice: encoder.choice(),
            chunks,
            blocks: counts.blocks,
            partial_blocks: counts.partial,
            stored_cells: counts.stored,
            // The encoder rebuilt each block as a decoder will; summed chunk by chunk in
            // lattice order, so the result does not depend on threads.
            error: sets.iter().map(PredictedSet::error).collect::<Option<Vec<_>>>().map(sum_errors),
            chunk_errors: sets.iter().filter_map(PredictedSet::error).collect(),
        }
    }
}

/// The predictor choice for the stored cells of `boxes` cut by `tiling`'s unit blocks, made on
/// blocks spread over all of them, as `compress_level` makes it (see there for the arguments).
pub fn choose_predictor<T: Element>(
    boxes: &[BoxView<T>],
    tiling: &Tiling,
    config: &Config,
    eb: f64,
    adaptive_block: bool,
    spread: Option<&dyn Spread<T>>,
) -> Result<Choice> {
    let plan = ChunkPlan::new(boxes, tiling).map_err(invalid)?;
    Ok(encoder(&plan, tiling, config, eb, adaptive_block, None, false, spread)?.choice())
}

/// How many blocks, partial blocks and stored cells.
#[derive(Default)]
struct BlockCounts {
    blocks: usize,
    partial: usize,
    stored: usize,
}

impl BlockCounts {
    fn of<T>(blocks: &[Block<T>]) -> BlockCounts {
        BlockCounts {
            blocks: blocks.len(),
            partial: blocks.iter().filter(|b| b.mask.is_some()).count(),
            stored: blocks.iter().map(|b| b.mask.as_ref().map_or(b.values.len(), |m| m.iter().filter(|&&v| v).count())).sum(),
        }
    }

    fn add(&mut self, o: &BlockCounts) {
        self.blocks += o.blocks;
        self.partial += o.partial;
        self.stored += o.stored;
    }
}

/// The encoder of the blocks of `plan` with `choice`, or choosing the predictor on them: the
/// chunks' masks are gathered to see which blocks there are, the values of those sampled. With
/// `retune`, a choice made on unit blocks of another shape has its interpolation settings tuned
/// again on these (see `BlockSetEncoder::choose`).
#[allow(clippy::too_many_arguments)]
fn encoder<T: Element>(
    plan: &ChunkPlan<T>,
    tiling: &Tiling,
    config: &Config,
    eb: f64,
    adaptive_block: bool,
    choice: Option<&Choice>,
    retune: bool,
    spread: Option<&dyn Spread<T>>,
) -> Result<BlockSetEncoder> {
    let made = match choice {
        Some(c) if !retune || c.unit() == &tiling.unit[..] => {
            return BlockSetEncoder::with_choice(c, &tiling.unit, config, eb, adaptive_block)
        }
        c => c,
    };
    if let Some(fixed) = BlockSetEncoder::fixed(&tiling.unit, config, eb, adaptive_block) {
        return fixed;
    }
    if let Some(spread) = spread {
        let info = spread.info(tiling);
        return BlockSetEncoder::choose(
            &info,
            |picked: &[usize]| spread.fetch(tiling, picked),
            &tiling.unit,
            config,
            eb,
            adaptive_block,
            made,
        );
    }
    let per_chunk: Vec<Vec<BlockInfo>> = (0..plan.chunks().len()).into_par_iter().map(|k| plan.block_info(k)).collect();
    // The chunk and the index in it of every block, in block order.
    let at: Vec<(usize, usize)> = per_chunk.iter().enumerate().flat_map(|(k, c)| (0..c.len()).map(move |i| (k, i))).collect();
    let info: Vec<BlockInfo> = per_chunk.into_iter().flatten().collect();
    let fetch = |picked: &[usize]| -> Vec<Block<T>> {
        let chunks: BTreeSet<usize> = picked.iter().map(|&i| at[i].0).collect();
        let mut gathered: BTreeMap<usize, Vec<Option<Block<T>>>> =
            chunks.into_par_iter().map(|k| (k, plan.gather(k).into_iter().map(Some).collect())).collect();
        picked.iter().filter_map(|&i| gathered.get_mut(&at[i].0).and_then(|c| c[at[i].1].take())).collect()
    };
    BlockSetEncoder::choose(&info, fetch, &tiling.unit, config, eb, adaptive_block, made)
}

/// Entropy-codes predicted sets: one codebook for all of them (shared lossless encoding) or,
/// with `shared` false, one per set, numbered from `first`. Returns the codebooks and each
/// set's bytes. Layout trials pass `trial`: they compare layouts, for which the table-driven
/// coder alone is the measure, without also trying the adaptive one on small arrays.
fn encode_sets<T: Element>(
    sets: &[PredictedSet<T>],
    encoder: &BlockSetEncoder,
    shared: bool,
    first: u32,
    trial: bool,
    pool: Option<&dyn Pool>,
) -> Result<(Vec<SharedCodebook>, Vec<Vec<u8>>)> {
    // One table pooled over the processes, or one per set of this process.
    let (groups, pool): (Vec<&[PredictedSet<T>]>, _) = if shared { (vec![sets], pool) } else { (sets.chunks(1).collect(), None) };
    let coded: Vec<(SharedCodebook, Vec<Vec<u8>>)> = groups
        .par_iter()
        .enumerate()
        .map(|(k, group)| encoder.encode_sets(group, first + k as u32, !trial, pool))
        .collect::<Result<_>>()?;
    let (codebooks, bytes): (Vec<SharedCodebook>, Vec<Vec<Vec<u8>>>) = coded.into_iter().unzip();
    Ok((codebooks, bytes.into_iter().flatten().collect()))
}

/// What a layout trial keeps of each chunk shape's coding.
#[derive(Clone, Copy)]
pub enum Keep {
    /// Its size alone, coded with the table-driven coder only (enough to compare layouts).
    Size,
    /// The streams `compress_level` would give with this `measure` and `first_table`, so that
    /// the chosen layout need not be coded again when the trial took every box.
    Streams { measure: bool, first_table: u32 },
}

/// One chunk shape's trial: the bytes stored (chunks and codebooks), and with `Keep::Streams`
/// the streams themselves.
pub struct Trial {
    pub size: usize,
    pub streams: Option<LevelStreams>,
}

/// The layout trials of a write: `boxes` coded with the unit block of `tiling` and each chunk
/// shape of `chunk_shapes`. Every block is predicted once, with `choice` or the predictor
/// chosen over the blocks in `tiling`'s chunk order, and then grouped into each shape's chunks.
/// Returns the trials and the choice.
#[allow(clippy::too_many_arguments)]
pub fn trial_layouts<T: Element>(
    boxes: &[BoxView<T>],
    tiling: &Tiling,
    chunk_shapes: &[Vec<usize>],
    config: &Config,
    eb: f64,
    adaptive_block: bool,
    shared: bool,
    choice: Option<&Choice>,
    keep: Keep,
) -> Result<(Vec<Trial>, Choice)> {
    let tilings: Vec<Tiling> = chunk_shapes
        .iter()
        .map(|c| Tiling::new(tiling.origin.clone(), tiling.unit.clone(), c.clone()))
        .collect::<std::result::Result<_, _>>()
        .map_err(invalid)?;
    let plan = ChunkPlan::new(boxes, tiling).map_err(invalid)?;
    let (measure, first_table) = match keep {
        Keep::Size => (false, 0),
        Keep::Streams { measure, first_table } => (measure, first_table),
    };
    let encoder = encoder(&plan, tiling, config, eb, adaptive_block, choice, false, None)?.measuring(measure);
    // (lattice index, prediction) of every block, gathered chunk by chunk, and their counts.
    type Chunk<T> = (Vec<(Vec<i64>, PredictedBlock<T>)>, BlockCounts);
    let chunks: Vec<usize> = (0..plan.chunks().len()).collect();
    let predicted: Vec<Chunk<T>> = chunks
        .par_chunks(batch(&encoder))
        .map(|batch| {
            let gathered: Vec<Vec<Block<T>>> = batch.par_iter().map(|&k| plan.gather(k)).collect();
            let all: Vec<&Block<T>> = gathered.iter().flatten().collect();
            let mut p = encoder.predict_blocks(&all)?.into_iter();
            Ok(batch
                .iter()
                .zip(&gathered)
                .map(|(&k, blocks)| {
                    let c = &plan.chunks()[k].0;
                    (
                        blocks.iter().map(|b| (tiling.block_at(c, b.position), p.next().expect("a prediction a block"))).collect(),
                        BlockCounts::of(blocks),
                    )
                })
                .collect::<Vec<_>>())
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut counts = BlockCounts::default();
    let mut lattice = Vec::new();
    let mut slots: Vec<Option<PredictedBlock<T>>> = Vec::new();
    for (p, c) in predicted {
        counts.add(&c);
        for (at, block) in p {
            lattice.push(at);
            slots.push(Some(block));
        }
    }
    // Each shape's sets take the predictions (`slots`) and give them back once coded.
    let mut trials = Vec::with_capacity(tilings.len());
    for t in &tilings {
        let mut grouped: BTreeMap<Vec<i64>, Vec<(u64, usize)>> = BTreeMap::new();
        for (i, block) in lattice.iter().enumerate() {
            let (chunk, position) = t.chunk_position(block);
            grouped.entry(chunk).or_default().push((position, i));
        }
        // Per chunk, in lattice order: its index and its blocks' (position, slot), by position.
        let mut indices = Vec::with_capacity(grouped.len());
        let mut members: Vec<Vec<(u64, usize)>> = Vec::with_capacity(grouped.len());
        for (idx, mut m) in grouped {
            m.sort_by_key(|&(position, _)| position);
            indices.push(idx);
            members.push(m);
        }
        let sets: Vec<PredictedSet<T>> = members
            .iter()
            .map(|m| encoder.set(m.iter().map(|&(position, i)| slots[i].take().expect("a block in one set").at(position)).collect()))
            .collect::<Result<_>>()?;
        let kept = matches!(keep, Keep::Streams { .. });
        let (codebooks, bytes) = encode_sets(&sets, &encoder, shared, first_table, !kept, None)?;
        let size = bytes.iter().map(Vec::len).sum::<usize>() + codebooks.iter().map(|c| c.to_bytes().len()).sum::<usize>();
        let streams = kept.then(|| LevelStreams::of(&encoder, &sets, &codebooks, indices.into_iter().zip(bytes).collect(), &counts));
        trials.push(Trial { size, streams });
        for (set, m) in sets.into_iter().zip(&members) {
            for (b, &(_, i)) in set.into_blocks().into_iter().zip(m) {
                slots[i] = Some(b);
            }
        }
    }
    Ok((trials, encoder.choice()))
}

/// Decodes `chunks` ((chunk index, bytes), those a region touches) into a C-order array over
/// `region_lo..=region_hi`; cells no chunk stores are NaN. `tables` are the level's, `eb` the
/// bound its chunks were quantized with.
pub fn decode_region<T: Element>(
    chunks: &[(Vec<i64>, &[u8])],
    tables: &SharedTables,
    tiling: &Tiling,
    eb: f64,
    region_lo: &[i64],
    region_hi: &[i64],
) -> Result<Vec<T>> {
    let nd = tiling.ndim();
    if region_lo.len() != nd || region_hi.len() != nd || region_lo.iter().zip(region_hi).any(|(l, h)| h < l) {
        return Err(invalid(format!("region {region_lo:?}..{region_hi:?} is not a non-empty {nd}-dimensional box")));
    }
    let n =
        region_lo.iter().zip(region_hi).try_fold(1usize, |acc, (&l, &h)| usize::try_from(h - l + 1).ok().and_then(|e| acc.checked_mul(e)));
    let n =
        n.filter(|&n| n <= isize::MAX as usize / 8).ok_or_else(|| invalid(format!("region {region_lo:?}..{region_hi:?} is too large")))?;
    let decoded: Vec<Vec<Block<T>>> =
        chunks.par_iter().map(|(idx, bytes)| decode_blocks(idx, bytes, tables, tiling, eb)).collect::<Result<_>>()?;
    let mut out = vec![T::from_f64(f64::NAN); n];
    for ((idx, _), blocks) in chunks.iter().zip(&decoded) {
        scatter(blocks, idx, tiling, region_lo, region_hi, &mut out);
    }
    Ok(out)
}

/// A level's shared tables (section 14.1 of docs/format.md), each parsed once, when a chunk
/// first needs it: readers decoding many regions keep one for the level.
pub struct SharedTables {
    stored: Vec<Vec<u8>>,
    parsed: Vec<OnceLock<SharedCodebook>>,
}

impl SharedTables {
    pub fn new(stored: Vec<Vec<u8>>) -> Self {
        let parsed = stored.iter().map(|_| OnceLock::new()).collect();
        SharedTables { stored, parsed }
    }

    pub fn len(&self) -> usize {
        self.stored.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
    }

    /// The stored bytes of every table.
    pub fn stored(&self) -> &[Vec<u8>] {
        &self.stored
    }

    fn get(&self, index: u32, chunk: &[i64]) -> Result<&SharedCodebook> {
        let (stored, cell) = self
            .stored
            .get(index as usize)
            .zip(self.parsed.get(index as usize))
            .ok_or_else(|| CodecError::Corrupt(format!("chunk {chunk:?} uses codebook {index} of {}", self.stored.len())))?;
        if let Some(book) = cell.get() {
            return Ok(book);
        }
        let book = SharedCodebook::from_bytes(stored)?;
        Ok(cell.get_or_init(|| book))
    }
}

/// The unit blocks of one stored chunk, by position.
pub fn decode_blocks<T: Element>(idx: &[i64], bytes: &[u8], tables: &SharedTables, tiling: &Tiling, eb: f64) -> Result<Vec<Block<T>>> {
    decode_blocks_many(&[(idx, bytes)], tables, tiling, eb).pop().expect("a result a chunk")
}

/// `decode_blocks` of several chunks at once, each result its own: their whole blocks share
/// the fitted walk's lanes (see `blockset::decode_sets`).
pub fn decode_blocks_many<T: Element>(
    chunks: &[(&[i64], &[u8])],
    tables: &SharedTables,
    tiling: &Tiling,
    eb: f64,
) -> Vec<Result<Vec<Block<T>>>> {
    let books: Vec<Result<&SharedCodebook>> = chunks
        .iter()
        .map(|&(idx, bytes)| {
            if idx.len() != tiling.ndim() {
                return Err(invalid(format!("chunk index {idx:?} is not {}-dimensional", tiling.ndim())));
            }
            tables.get(blockset::info(bytes)?.codebook_index, idx)
        })
        .collect();
    let sets: Vec<(&[u8], &SharedCodebook)> =
        chunks.iter().zip(&books).filter_map(|(&(_, bytes), book)| book.as_ref().ok().map(|&b| (bytes, b))).collect();
    let mut decoded = blockset::decode_sets(&sets, &tiling.unit, eb, tiling.block_count()).into_iter();
    books.into_iter().map(|book| book.and_then(|_| decoded.next().expect("a result per set"))).collect()
}

/// One stored chunk decoded over its whole extent (C order; cells it does not store are NaN).
pub fn decode_chunk<T: Element>(idx: &[i64], bytes: &[u8], tables: &SharedTables, tiling: &Tiling, eb: f64) -> Result<Vec<T>> {
    if idx.len() != tiling.ndim() {
        return Err(invalid(format!("chunk index {idx:?} is not {}-dimensional", tiling.ndim())));
    }
    let cells = tiling.chunk_box(idx);
    let blocks = decode_blocks(idx, bytes, tables, tiling, eb)?;
    let mut out = vec![T::from_f64(f64::NAN); tiling.chunk.iter().product()];
    scatter(&blocks, idx, tiling, &cells.lo, &cells.hi, &mut out);
    Ok(out)
}

/// Decodes each of `chunks` on its own over its whole extent, all in parallel: what a reader
/// caching decoded chunks needs in one call.
pub fn decode_chunks<T: Element>(chunks: &[(Vec<i64>, &[u8])], tables: &SharedTables, tiling: &Tiling, eb: f64) -> Result<Vec<Vec<T>>> {
    chunks.par_iter().map(|(idx, bytes)| decode_chunk(idx, bytes, tables, tiling, eb)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_blocks::Layout;
    use amrzip_codec::ErrorBound;

    #[test]
    fn level_round_trip_within_bound_and_region_reads() {
        // Two boxes of a 3-D level, one partly covered by a finer level.
        let tiling = Tiling::new(vec![0, 0, 0], vec![8, 8, 8], vec![16, 16, 16]).unwrap();
        let f = |i: i64, j: i64, k: i64| ((i as f64) * 0.2).sin() + ((j * k) as f64 * 0.01).cos();
        let make = |lo: [i64; 3], hi: [i64; 3]| -> Vec<f64> {
            let mut v = Vec::new();
            for i in lo[0]..=hi[0] {
                for j in lo[1]..=hi[1] {
                    for k in lo[2]..=hi[2] {
                        v.push(f(i, j, k));
                    }
                }
            }
            v
        };
        let a = make([0, 0, 0], [31, 15, 15]);
        let b = make([0, 16, 0], [15, 31, 15]);
        let stored: Vec<bool> = (0..a.len()).map(|o| !(o / 256 < 4 && o % 16 < 4)).collect();
        let boxes = vec![
            BoxView { lo: vec![0, 0, 0], hi: vec![31, 15, 15], data: &a, layout: Layout::C, stored: Some(&stored), ghost: vec![] },
            BoxView { lo: vec![0, 16, 0], hi: vec![15, 31, 15], data: &b, layout: Layout::C, stored: None, ghost: vec![] },
        ];
        let eb = 1e-4;
        for shared in [true, false] {
            let config = Config::new(ErrorBound::Absolute(eb));
            let level = compress_level(&boxes, &tiling, &config, eb, true, shared, true, 0, None, None).unwrap();
            // Coding again with the choice made gives the same bytes.
            let again = compress_level(&boxes, &tiling, &config, eb, true, shared, false, 0, Some(&level.choice), None).unwrap();
            assert_eq!((&again.chunks, &again.codebooks, again.error), (&level.chunks, &level.codebooks, None));
            let (sum, count) = level.error.unwrap();
            assert_eq!(count as usize, level.stored_cells);
            assert!((sum / count as f64).abs() <= eb);
            assert_eq!(level.stored_cells, a.len() + b.len() - 4 * 16 * 4);
            let chunks: Vec<(Vec<i64>, &[u8])> = level.chunks.iter().map(|(i, b)| (i.clone(), b.as_slice())).collect();
            let books = SharedTables::new(level.codebooks.clone());
            let out: Vec<f64> = decode_region(&chunks, &books, &tiling, eb, &[0, 0, 0], &[31, 31, 15]).unwrap();
            for i in 0..32 {
                for j in 0..32 {
                    for k in 0..16 {
                        let v = out[((i * 32 + j) * 16 + k) as usize];
                        let inside = j < 16 || i < 16;
                        let covered = j < 16 && i < 4 && k < 4;
                        if inside && !covered {
                            assert!((v - f(i, j, k)).abs() <= eb, "({i},{j},{k}) {v}");
                        } else {
                            assert!(v.is_nan());
                        }
                    }
                }
            }
            // Chunks decoded together equal each decoded over its own extent.
            let each: Vec<Vec<f64>> = decode_chunks(&chunks, &books, &tiling, eb).unwrap();
            for ((idx, bytes), got) in chunks.iter().zip(&each) {
                let lo: Vec<i64> = idx.iter().map(|&i| i * 16).collect();
                let hi: Vec<i64> = lo.iter().map(|&l| l + 15).collect();
                let alone: Vec<f64> = decode_region(&[(idx.clone(), *bytes)], &books, &tiling, eb, &lo, &hi).unwrap();
                assert!(alone.iter().zip(got).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
            // A region inside one chunk decodes from that chunk alone.
            let one: Vec<(Vec<i64>, &[u8])> = chunks.iter().filter(|(i, _)| i == &vec![1, 0, 0]).cloned().collect();
            let part: Vec<f64> = decode_region(&one, &books, &tiling, eb, &[20, 2, 3], &[25, 9, 9]).unwrap();
            assert!(part.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn kept_trials_are_the_streams_the_level_codes_to() {
        // A level of two boxes, the second partly outside the first's unit blocks.
        let f = |i: i64, j: i64| ((i as f64) * 0.3).sin() * 40.0 + ((j as f64) * 0.17).cos() * 15.0;
        let make =
            |lo: [i64; 2], hi: [i64; 2]| -> Vec<f64> { (lo[0]..=hi[0]).flat_map(|i| (lo[1]..=hi[1]).map(move |j| f(i, j))).collect() };
        let a = make([0, 0], [31, 47]);
        let b = make([32, 8], [47, 39]);
        let boxes = vec![
            BoxView { lo: vec![0, 0], hi: vec![31, 47], data: &a, layout: Layout::C, stored: None, ghost: vec![] },
            BoxView { lo: vec![32, 8], hi: vec![47, 39], data: &b, layout: Layout::C, stored: None, ghost: vec![] },
        ];
        let mut config = Config::new(ErrorBound::Absolute(1e-3));
        config.preset = amrzip_codec::Preset::Speed;
        let shapes = [vec![16, 16], vec![32, 32]];
        let tiling = Tiling::new(vec![0, 0], vec![8, 8], shapes[0].clone()).unwrap();
        for measure in [false, true] {
            let keep = Keep::Streams { measure, first_table: 3 };
            let (trials, _) = trial_layouts(&boxes, &tiling, &shapes, &config, 1e-3, true, true, None, keep).unwrap();
            let (sizes, _) = trial_layouts(&boxes, &tiling, &shapes, &config, 1e-3, true, true, None, Keep::Size).unwrap();
            for ((trial, sized), shape) in trials.into_iter().zip(sizes).zip(&shapes) {
                let t = Tiling::new(vec![0, 0], vec![8, 8], shape.clone()).unwrap();
                let level = compress_level(&boxes, &t, &config, 1e-3, true, true, measure, 3, None, None).unwrap();
                let kept = trial.streams.expect("kept streams");
                assert_eq!((&kept.chunks, &kept.codebooks, kept.error), (&level.chunks, &level.codebooks, level.error));
                assert_eq!((kept.blocks, kept.partial_blocks, kept.stored_cells), (level.blocks, level.partial_blocks, level.stored_cells));
                let stored = level.chunks.iter().map(|(_, c)| c.len()).sum::<usize>() + level.codebooks.iter().map(Vec::len).sum::<usize>();
                assert_eq!((trial.size, sized.size), (stored, stored));
                assert!(sized.streams.is_none());
            }
        }
    }
}
