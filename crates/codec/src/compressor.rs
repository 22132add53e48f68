//! The codec's glue: bound resolution, chunking, predictor choice, the shared codebook, the
//! per-chunk byte layout, and the parallel decode.
//!
//! A chunk's bytes before the lossless stage:
//! `patches` (varint count, then varint gap + raw value per NaN/Inf), `side` (varint length +
//! bytes, predictor-specific), `exact` (varint count + raw values), then the symbols as
//! segments of `SEGMENT_SYMBOLS` each (a varint byte length per segment, then the segments),
//! which encode and decode in parallel: Huffman codes, or in ratio mode where that is smaller,
//! the symbols coded in context (`entropy::contexts`; then the lossless stage stores them).

use crate::bytes::{append_all, put_varint, ByteReader};
use crate::cpu;
use crate::element::Element;
use crate::entropy::contexts::{ContextCoder, MIN_SEGMENT_BYTES};
use crate::entropy::frames;
use crate::entropy::huffman::{Codebook, Histogram};
use crate::entropy::offline;
use crate::error::{corrupt, CodecError, Result};
use crate::grid::{checked_num_elements, chunk_boxes, chunk_shape, gather, num_elements, ChunkBox, ChunkedOutput};
use crate::nonfinite;
use crate::predictor::{self, Predictor, PredictorKind, ZeroCounts};
use crate::quantizer::{Quantizer, DEFAULT_RADIUS};
use crate::range::{self, finite_range, finite_range_from, relative_bound};
use crate::selection;
use crate::stream::{ChunkEntry, CodebookSource, Header, Stream, MAX_CHUNK_ELEMENTS};
use crate::threads;
use crate::{Config, ErrorBound, Preset};
use rayon::prelude::*;
use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// Symbols per Huffman segment: the unit of parallel entropy coding inside a chunk.
const SEGMENT_SYMBOLS: usize = 1 << 20;
/// Huffman segments decoded together by one task (see `Codebook::decode_lockstep`).
const LOCKSTEP: usize = 4;

/// Elements per chunk. Interpolation parallelises inside a chunk (the points of one pass are
/// independent), and chunk seams cost it dearly on smooth data, so it takes the largest chunks
/// the format allows. The other predictors carry an error-feedback dependency from point to
/// point, so they get chunks small enough to give every core several.
fn chunk_target(p: &Predictor) -> usize {
    match p {
        Predictor::Interpolation(_) => MAX_CHUNK_ELEMENTS,
        _ => 1 << 21,
    }
}

pub fn check_shape(shape: &[usize], len: usize) -> Result<()> {
    if shape.is_empty() || shape.len() > 4 {
        return Err(CodecError::InvalidInput(format!("arrays of 1 to 4 dimensions are supported, got {}", shape.len())));
    }
    let n = checked_num_elements(shape).ok_or_else(|| CodecError::InvalidInput(format!("shape {shape:?} overflows")))?;
    if n != len {
        return Err(CodecError::InvalidInput(format!("shape {shape:?} has {n} elements but the data has {len}")));
    }
    Ok(())
}

/// The absolute bound for the request: value-range relative bounds use the finite values' range.
/// Targets (ratio, PSNR) have no bound of their own: `target` searches for one.
/// `all`, when given, is the range of every value but NaN, found already.
fn absolute_bound<T: Element>(data: &[T], bound: ErrorBound, all: Option<(f64, f64)>) -> Result<f64> {
    let (name, value) = match bound {
        ErrorBound::Absolute(v) => ("abs", v),
        ErrorBound::Relative(v) => ("rel", v),
        ErrorBound::Ratio(_) | ErrorBound::Psnr(_) => {
            return Err(CodecError::InvalidInput("a ratio or PSNR target has no bound of its own".into()));
        }
    };
    if !(value.is_finite() && value >= 0.0) {
        return Err(CodecError::InvalidInput(format!("{name} error bound must be a finite number >= 0, got {value}")));
    }
    let eb = match bound {
        ErrorBound::Absolute(v) => v,
        _ => {
            let (lo, hi) = all.map_or_else(|| finite_range(data), |all| finite_range_from(data, all));
            relative_bound(lo, hi, value)
        }
    };
    Ok(eb.min(f64::MAX))
}

/// One chunk after prediction, before entropy coding.
struct Predicted<T> {
    coded: predictor::Coded<T>,
    patches: Vec<(usize, T)>,
    histogram: Histogram,
}

fn predict_chunk<T: Element>(data: &[T], shape: &[usize], b: &ChunkBox, p: &Predictor, q: &Quantizer) -> Predicted<T> {
    let chunk: Cow<[T]> = if b.shape.as_slice() == shape { Cow::Borrowed(data) } else { Cow::Owned(gather(data, shape, b)) };
    match p {
        // Interpolation rebuilds the values in a copy of its own: fill that copy.
        Predictor::Interpolation(_) => interpolate(nonfinite::fill_owned(chunk), b, p, q),
        _ => {
            let (filled, patches) = nonfinite::fill(&chunk);
            predicted(predictor::encode(p, filled, &b.shape, q), patches)
        }
    }
}

fn interpolate<T: Element>((values, patches): Filled<T>, b: &ChunkBox, p: &Predictor, q: &Quantizer) -> Predicted<T> {
    predicted(predictor::encode(p, Cow::Owned(values), &b.shape, q), patches)
}

fn predicted<T: Element>(coded: predictor::Coded<T>, patches: Vec<(usize, T)>) -> Predicted<T> {
    let histogram = Histogram::of(&coded.symbols);
    Predicted { coded, patches, histogram }
}

/// Appends what a chunk (or a unit block) keeps beside its symbols: `patches`, `side`, `exact`.
pub(crate) fn write_parts<T: Element>(raw: &mut Vec<u8>, patches: &[(usize, T)], side: &[u8], exact: &[T]) {
    put_varint(raw, patches.len() as u64);
    let mut last = 0;
    for &(i, x) in patches {
        put_varint(raw, (i - last) as u64);
        x.write_le(raw);
        last = i;
    }
    put_varint(raw, side.len() as u64);
    raw.extend_from_slice(side);
    put_varint(raw, exact.len() as u64);
    for &x in exact {
        x.write_le(raw);
    }
}

/// Appends `symbols` as Huffman segments of `SEGMENT_SYMBOLS`: the byte length of each, then
/// their bits.
pub(crate) fn write_segments(raw: &mut Vec<u8>, symbols: &[u16], codebook: &Codebook) -> Result<()> {
    let segments: Vec<Vec<u8>> = symbols
        .par_chunks(SEGMENT_SYMBOLS)
        .map(|seg| {
            let mut bits = Vec::with_capacity(seg.len() / 4);
            codebook.encode(seg, &mut bits).map(|_| bits)
        })
        .collect::<Result<_>>()?;
    append_segments(raw, &segments);
    Ok(())
}

/// Appends coded segments: the byte length of each, then their bytes.
fn append_segments(raw: &mut Vec<u8>, segments: &[Vec<u8>]) {
    for seg in segments {
        put_varint(raw, seg.len() as u64);
    }
    append_all(raw, &segments.iter().map(|seg| &seg[..]).collect::<Vec<_>>());
}

fn chunk_bytes<T: Element>(c: &Predicted<T>, codebook: &Codebook) -> Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(c.coded.symbols.len() / 2 + c.coded.side.len() + 64);
    write_parts(&mut raw, &c.patches, &c.coded.side, &c.coded.exact);
    write_segments(&mut raw, &c.coded.symbols, codebook)?;
    Ok(raw)
}

pub fn compress<T: Element>(data: &[T], shape: &[usize], config: &Config) -> Result<Vec<u8>> {
    check_shape(shape, data.len())?;
    // An array that will be one interpolation chunk is coded from a copy of its own: under a
    // relative bound, one sweep makes that copy and finds the range.
    // (`chunk_target`: interpolation chunks are as large as the format allows.)
    let one_chunk = !data.is_empty() && data.len() <= MAX_CHUNK_ELEMENTS;
    let interpolation = match config.predictor {
        Some(kind) => kind == PredictorKind::Interpolation,
        None => config.preset == Preset::Speed,
    };
    let scanned = match config.bound {
        ErrorBound::Relative(_) if one_chunk && interpolation => Some(range::copy_scanned(data)),
        _ => None,
    };
    let eb = absolute_bound(data, config.bound, scanned.as_ref().map(|&(_, _, all)| all))?;
    let copy = scanned.map(|(copy, finite, _)| nonfinite::fill_copy(copy, finite));
    compress_prepared(prepare(data, shape, config, eb, None, None, copy), config)
}

/// Compresses under the absolute bound `eb` (finite, >= 0), recording `config.bound` as the
/// request it came from. The shape must already be checked.
pub fn compress_with_eb<T: Element>(data: &[T], shape: &[usize], config: &Config, eb: f64) -> Result<Vec<u8>> {
    compress_prepared(prepare(data, shape, config, eb, None, None, None), config)
}

/// Entropy-codes `prepared` with a codebook of its own or, in ratio mode, in context where that
/// comes out smaller.
fn compress_prepared<T: Element>(prepared: Prepared<T>, config: &Config) -> Result<Vec<u8>> {
    let codebook = Codebook::of(&prepared.histogram);
    let mut table = Vec::new();
    codebook.write(&mut table);
    prepared.or_in_context(config, Some(&codebook), || prepared.finish(config, &codebook, CodebookSource::Inline, table))
}

/// Streams of more than one segment take the context coding only where it is at least this
/// much smaller: its symbols decode 2-3x slower than Huffman codes (each symbol's context waits
/// for the one before), so a percent is not worth it, where 7-19% on the 256^3 lognormal,
/// climate and smooth synthetic fields at rel 1e-3..1e-5 is (codec_bench), and so is the
/// climate field's 3% at 1e-2, which takes ratio mode past SZ3's best ratio there (0.98x with
/// Huffman codes). The turbulent field gains under 1% and keeps Huffman codes.
const LARGE_CONTEXT_GAIN: f64 = 0.98;
/// How much more the lossless stage may shrink a whole stream of Huffman codes than it shrinks
/// the slices `Prepared::huffman_floor` tries: the floor's margin.
const PACK_MARGIN: f64 = 1.05;
/// Slices of the stream, of this many symbols each, whose Huffman codes
/// `Prepared::huffman_floor` passes through zstd, and the most zstd may take off them for the
/// floor to be made.
const FLOOR_SLICES: usize = 16;
const FLOOR_SLICE: usize = 1 << 13;
const DENSE_GAIN: f64 = 1.25;
/// Symbols per block of the sample that estimates a larger stream's size in context.
const SAMPLE_BLOCK: usize = 1 << 10;
/// Blocks drawn for that sample: 2^18 symbols, a 64th of a 256^3 field, for estimates within
/// 3.3% of the coded size on the synthetic fields at 1e-2..1e-5 (0.1% on the turbulent one).
const SAMPLE_BLOCKS: usize = 256;

/// An array predicted and quantized, waiting for its codebook.
pub struct Prepared<T> {
    pub predictor: Predictor,
    pub eb: f64,
    /// Symbol counts over all chunks.
    pub histogram: Histogram,
    alphabet: usize,
    /// `histogram` over the whole alphabet, made when first asked for.
    dense: OnceLock<Vec<u64>>,
    shape: Vec<usize>,
    chunk_shape: Vec<usize>,
    chunks: Vec<Predicted<T>>,
}

/// Values ready for interpolation, and the non-finite ones they replace.
type Filled<T> = (Vec<T>, Vec<(usize, T)>);

/// Predicts and quantizes `data` under `eb` with `predictor`, or the one sampling picks. With
/// `symbols = Some((first, last))`, codes outside those symbols are kept exactly (so a codebook
/// covering them can code the result). `copy`, if the array comes to one interpolation chunk,
/// is that chunk's working values (the whole array with non-finite values replaced, and the
/// replaced ones).
pub fn prepare<T: Element>(
    data: &[T],
    shape: &[usize],
    config: &Config,
    eb: f64,
    predictor: Option<Predictor>,
    symbols: Option<(usize, usize)>,
    copy: Option<Filled<T>>,
) -> Prepared<T> {
    let q = Quantizer::new(eb, DEFAULT_RADIUS);
    let q = symbols.map_or(q, |(first, last)| q.with_symbols(first, last));
    let p = match predictor {
        _ if data.is_empty() => Predictor::Lorenzo,
        Some(p) => p,
        None => selection::choose(data, shape, &q, config),
    };
    let chunk_shape = chunk_shape(shape, chunk_target(&p));
    let boxes = if data.is_empty() { Vec::new() } else { chunk_boxes(shape, &chunk_shape) };
    let chunks: Vec<Predicted<T>> = match (copy, boxes.as_slice(), p) {
        (Some(filled), [b], Predictor::Interpolation(_)) => vec![interpolate(filled, b, &p, &q)],
        _ => boxes.par_iter().map(|b| predict_chunk(data, shape, b, &p, &q)).collect(),
    };
    let mut histogram = Histogram::default();
    chunks.iter().for_each(|c| histogram.add(&c.histogram));
    Prepared { predictor: p, eb, histogram, alphabet: q.alphabet(), dense: OnceLock::new(), shape: shape.to_vec(), chunk_shape, chunks }
}

impl<T: Element> Prepared<T> {
    /// The symbol counts over the whole alphabet (made once: a streamed record asks up to three
    /// times).
    pub fn dense_histogram(&self) -> &[u64] {
        self.dense.get_or_init(|| self.histogram.dense(self.alphabet))
    }

    /// Entropy-codes the chunks with `codebook` (which must have a code for every symbol) and
    /// writes the stream; `stored` is what the header keeps of the codebook for `source`.
    pub fn finish(&self, config: &Config, codebook: &Codebook, source: CodebookSource, stored: Vec<u8>) -> Result<Vec<u8>> {
        let raws: Vec<Vec<u8>> = self.chunks.par_iter().map(|c| chunk_bytes(c, codebook)).collect::<Result<_>>()?;
        Ok(self.write(config, source, stored, raws, |frame| frames::packed_frame(config.preset, frame)))
    }

    /// `coded()` (this array's stream with Huffman codes), or in ratio mode the stream coded in
    /// context if that is smaller (by `LARGE_CONTEXT_GAIN` beyond one segment, where an estimate
    /// from a sample must first promise it: coding a stream in context costs about as much as
    /// predicting it, the estimate a twentieth of that). With the `codebook` of `coded()`, where
    /// its codes give a floor the stream cannot come in under (`huffman_floor`), that stream is
    /// made only where the one in context does not come in clearly under the floor: the same
    /// choice, without coding the stream that loses (a sixth of a large stream's compression).
    pub(crate) fn or_in_context(
        &self,
        config: &Config,
        codebook: Option<&Codebook>,
        coded: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        if config.preset != Preset::Ratio {
            return coded();
        }
        let segments = self.segments();
        if segments.len() <= 1 {
            let (coded, in_context) = (coded()?, self.finish_in_context(config)?);
            return Ok(if in_context.len() < coded.len() { in_context } else { coded });
        }
        let gain = LARGE_CONTEXT_GAIN;
        let estimate = ContextCoder::estimate(&self.sample(&segments), self.zero());
        let (coded, in_context) = match codebook.and_then(|c| self.huffman_floor(c, &segments)) {
            // Promising against the floor is promising against the stream (`floor <= coded.len()`).
            Some(floor) if estimate < gain * floor => {
                let in_context = self.finish_in_context(config)?;
                if (in_context.len() as f64) < gain * floor {
                    return Ok(in_context);
                }
                (coded()?, in_context)
            }
            _ => {
                let coded = coded()?;
                if estimate >= gain * coded.len() as f64 {
                    return Ok(coded);
                }
                let in_context = self.finish_in_context(config)?;
                (coded, in_context)
            }
        };
        Ok(if (in_context.len() as f64) < gain * coded.len() as f64 { in_context } else { coded })
    }

    /// Bytes under which the stream with `codebook`'s Huffman codes of `segments` (the chunks'
    /// symbols) does not come, for streams of dense codes: their bits, less what zstd (level 1,
    /// the lossless stage's trial) takes off `FLOOR_SLICES` slices of them spread over the
    /// stream, with `PACK_MARGIN` to spare. `None` where zstd takes more than `DENSE_GAIN` off
    /// the slices (long runs of one code, whose share of the stream slices do not tell well) or
    /// some symbol has no code.
    fn huffman_floor(&self, codebook: &Codebook, segments: &[&[u16]]) -> Option<f64> {
        let bits = codebook.encoded_bits(self.dense_histogram())?;
        let total: usize = segments.iter().map(|s| s.len()).sum();
        let (mut codes, mut packed) = (0usize, 0usize);
        let mut slice = Vec::new();
        for k in 0..FLOOR_SLICES {
            // The slice starting at the k-th of FLOOR_SLICES equal steps through the stream.
            let mut at = total * k / FLOOR_SLICES;
            let segment = segments.iter().find(|s| {
                let here = at < s.len();
                if !here {
                    at -= s.len();
                }
                here
            })?;
            slice.clear();
            codebook.encode(&segment[at..segment.len().min(at + FLOOR_SLICE)], &mut slice).ok()?;
            codes += slice.len();
            packed += frames::zstd_compress(&slice, 1).len().min(slice.len());
        }
        let gain = codes as f64 / packed.max(1) as f64;
        (gain <= DENSE_GAIN).then(|| bits as f64 / 8.0 / gain / PACK_MARGIN)
    }

    /// About `SAMPLE_BLOCKS` blocks of `segments` to estimate their size in context from, each
    /// with how many blocks it stands for. A block is drawn with a chance in proportion to its
    /// symbols' ideal code lengths at their frequencies in the stream (at least a 256th of a bit,
    /// about what the context coder spends on a symbol in a run of zeros), so the blocks holding
    /// most of the information are drawn and stand for themselves: interpolation's coarse
    /// lattices, say, which come first and hold nearly all of a smooth field's at loose bounds.
    fn sample<'a>(&self, segments: &[&'a [u16]]) -> Vec<(&'a [u16], Range<usize>, f64)> {
        let total = self.histogram.total() as f64;
        let cost: Vec<u16> =
            self.dense_histogram().iter().map(|&n| if n == 0 { 0 } else { ((256.0 * (total / n as f64).log2()) as u16).max(1) }).collect();
        let blocks: Vec<(&[u16], Range<usize>, u64)> = segments
            .par_iter()
            .flat_map_iter(|&s| (0..s.len()).step_by(SAMPLE_BLOCK).map(move |i| (s, i..s.len().min(i + SAMPLE_BLOCK))))
            .map(|(s, block)| {
                let c = s[block.clone()].iter().map(|&x| cost[x as usize] as u64).sum();
                (s, block, c)
            })
            .collect();
        // Systematic: the block in which the running cost passes each multiple of `step`.
        let step = blocks.iter().map(|b| b.2).sum::<u64>() as f64 / SAMPLE_BLOCKS as f64;
        let (mut at, mut next) = (0.0, step / 2.0);
        let mut sample = Vec::with_capacity(SAMPLE_BLOCKS);
        for (segment, block, c) in blocks {
            at += c as f64;
            if at > next {
                sample.push((segment, block, (step / c as f64).max(1.0)));
                next += step * ((at - next) / step).ceil();
            }
        }
        sample
    }

    /// The chunks' symbols in segments, in stream order.
    fn segments(&self) -> Vec<&[u16]> {
        self.chunks.iter().flat_map(|c| c.coded.symbols.chunks(SEGMENT_SYMBOLS)).collect()
    }

    /// The symbol of residual 0.
    fn zero(&self) -> u16 {
        Quantizer::new(self.eb, DEFAULT_RADIUS).zero_symbol()
    }

    /// Codes the chunks' symbols in context (`ContextCoder::choose` over all their segments)
    /// and writes the stream. The coded symbols do not compress: the lossless stage stores them.
    fn finish_in_context(&self, config: &Config) -> Result<Vec<u8>> {
        let (coder, coded) = ContextCoder::choose(&self.segments(), self.zero());
        let mut coded = coded.into_iter();
        let raws = self
            .chunks
            .iter()
            .map(|c| {
                let mut raw = Vec::new();
                write_parts(&mut raw, &c.patches, &c.coded.side, &c.coded.exact);
                let mine: Vec<Vec<u8>> = coded.by_ref().take(c.coded.symbols.len().div_ceil(SEGMENT_SYMBOLS)).collect();
                append_segments(&mut raw, &mine);
                raw
            })
            .collect();
        Ok(self.write(config, CodebookSource::Contexts, coder.stored(), raws, |_| None))
    }

    /// The stream of the chunks' bytes `raws` (before the lossless stage, which passes a frame
    /// through zstd as `compress` does).
    fn write(
        &self,
        config: &Config,
        source: CodebookSource,
        stored: Vec<u8>,
        raws: Vec<Vec<u8>>,
        compress: impl Fn(&[u8]) -> Option<Vec<u8>> + Sync,
    ) -> Vec<u8> {
        let encoded: Vec<(ChunkEntry, Vec<u8>)> = raws
            .par_iter()
            .map(|raw| {
                let bytes = frames::pack(raw, &compress);
                (ChunkEntry { predictor: self.predictor.kind(), stored_len: bytes.len() as u64, raw_len: raw.len() as u64 }, bytes)
            })
            .collect();
        let (chunks, payloads): (Vec<ChunkEntry>, Vec<Vec<u8>>) = encoded.into_iter().unzip();
        let header = Header {
            dtype: T::DTYPE,
            shape: self.shape.clone(),
            preset: config.preset,
            bound: config.bound,
            eb: self.eb,
            radius: DEFAULT_RADIUS,
            chunk_shape: self.chunk_shape.clone(),
            codebook_source: source,
            codebook: stored,
            chunks,
        };
        Stream::write(&header, &payloads)
    }
}

/// What `write_parts` wrote, for `n` elements, validated.
pub(crate) struct Parts<'a, T> {
    pub patches: Vec<(usize, T)>,
    pub side: &'a [u8],
    pub exact: Vec<T>,
}

pub(crate) fn read_parts<'a, T: Element>(r: &mut ByteReader<'a>, n: usize) -> Result<Parts<'a, T>> {
    let n_patches = r.bounded_varint(n as u64, "patch count")? as usize;
    let mut patches = Vec::with_capacity(n_patches.min(r.remaining() / (1 + T::BYTES)));
    let mut previous = None;
    for _ in 0..n_patches {
        let pos = r.next_position(previous, n, "patch position")?;
        patches.push((pos, r.element::<T>("patch value")?));
        previous = Some(pos);
    }
    let side_len = r.bounded_varint(r.remaining() as u64, "side length")? as usize;
    let side = r.take(side_len, "side information")?;
    let n_exact = r.bounded_varint(n as u64, "exact value count")? as usize;
    let exact_bytes = r.take(n_exact.checked_mul(T::BYTES).ok_or_else(|| corrupt!("exact value count overflows"))?, "exact values")?;
    let exact: Vec<T> = exact_bytes.chunks_exact(T::BYTES).map(T::read_le).collect();
    Ok(Parts { patches, side, exact })
}

cpu::fast_fn!(
    /// Decodes consecutive segments into `out`, one per `SEGMENT_SYMBOLS` symbols, in lockstep
    /// when there are `LOCKSTEP` of them; on success every symbol of `out` was written.
    fn decode_segments(codebook: &Codebook, bits: &[&[u8]], out: &mut [MaybeUninit<u16>]) -> Result<()> => decode_segments_in
);

#[inline(always)]
fn decode_segments_in(codebook: &Codebook, bits: &[&[u8]], out: &mut [MaybeUninit<u16>]) -> Result<()> {
    let outs: Vec<&mut [MaybeUninit<u16>]> = out.chunks_mut(SEGMENT_SYMBOLS).collect();
    if outs.len() != bits.len() {
        return Err(corrupt!("{} Huffman segments for {} symbols", bits.len(), out.len()));
    }
    match (<[&[u8]; LOCKSTEP]>::try_from(bits), <[&mut [MaybeUninit<u16>]; LOCKSTEP]>::try_from(outs)) {
        (Ok(bits), Ok(outs)) => codebook.decode_lockstep(bits, outs),
        (_, outs) => {
            let outs: Vec<&mut [MaybeUninit<u16>]> = outs.map_or_else(|v| v, Vec::from);
            outs.into_iter().zip(bits).try_for_each(|(out, bits)| codebook.decode(bits, out))
        }
    }
}

/// The segments of `n` symbols (the rest of `r`), each refused when shorter than
/// `fewest(symbols)` bytes: what bounds the symbols a chunk may claim before they are allocated.
fn segments<'a>(r: &mut ByteReader<'a>, n: usize, what: &str, fewest: impl Fn(usize) -> usize) -> Result<Vec<&'a [u8]>> {
    let n_segments = n.div_ceil(SEGMENT_SYMBOLS);
    let mut segments = Vec::with_capacity(n_segments.min(r.remaining()));
    let lengths: Vec<usize> =
        (0..n_segments).map(|_| r.bounded_varint(r.remaining() as u64, "segment length").map(|l| l as usize)).collect::<Result<_>>()?;
    for (k, len) in lengths.into_iter().enumerate() {
        let bytes = r.take(len, what)?;
        let count = SEGMENT_SYMBOLS.min(n - k * SEGMENT_SYMBOLS);
        if bytes.len() < fewest(count) {
            return Err(corrupt!("{what} of {} bytes cannot hold {count} symbols", bytes.len()));
        }
        segments.push(bytes);
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after the last {what}", r.remaining()));
    }
    Ok(segments)
}

/// Reads the Huffman segments of `n` symbols (the rest of `r`) and decodes them; also counts
/// their zeros per block while each segment is in cache.
pub(crate) fn read_segments(r: &mut ByteReader, n: usize, codebook: &Codebook) -> Result<(Vec<u16>, ZeroCounts)> {
    // Every symbol costs at least one bit.
    let segments = segments(r, n, "Huffman segment", |count| count.div_ceil(8))?;
    // Segments decode `LOCKSTEP` at a time (see `Codebook::decode_lockstep`) while that still
    // leaves every thread a task, each straight into its part of the symbols.
    let per_task = if segments.len() >= LOCKSTEP * rayon::current_num_threads() { LOCKSTEP } else { 1 };
    let mut symbols = Vec::with_capacity(n);
    let blocks: Vec<Vec<usize>> = symbols.spare_capacity_mut()[..n]
        .par_chunks_mut(per_task * SEGMENT_SYMBOLS)
        .zip(segments.par_chunks(per_task))
        .map(|(out, bits)| {
            decode_segments(codebook, bits, out)?;
            // Safety: `decode_segments` succeeded, so it wrote every symbol of `out`.
            let out: &[u16] = unsafe { std::slice::from_raw_parts(out.as_ptr().cast(), out.len()) };
            Ok(ZeroCounts::blocks_of(out))
        })
        .collect::<Result<_>>()?;
    // Safety: each part of the n symbols was decoded in full (both sides split n into the same
    // parts: one segment per SEGMENT_SYMBOLS symbols), or an error returned above.
    unsafe { symbols.set_len(n) };
    Ok((symbols, ZeroCounts::from_blocks(blocks.concat())))
}

/// Reads and decodes the context-coded segments of `n` symbols (the rest of `r`), each below
/// `q`'s alphabet; counts their zeros as `read_segments` does.
///
/// A few dozen bytes can code a segment's 2^20 symbols, so no length proves that a chunk holds
/// its symbols: only decoding does. Each segment decodes into a buffer of its own, and the
/// chunk's symbols (then its values) are allocated once every segment has decoded.
fn read_context_segments(r: &mut ByteReader, n: usize, coder: &ContextCoder, q: &Quantizer) -> Result<(Vec<u16>, ZeroCounts)> {
    let segments = segments(r, n, "context-coded segment", |_| MIN_SEGMENT_BYTES)?;
    let (zero, alphabet) = (q.zero_symbol(), q.alphabet());
    let buffer = |k: usize| vec![0u16; SEGMENT_SYMBOLS.min(n - k * SEGMENT_SYMBOLS)];
    // Segments go in pairs where that leaves every thread several, decoded in lockstep.
    let pairs = ContextCoder::pair_width(segments.len());
    let decoded: Vec<Vec<(Vec<u16>, Vec<usize>)>> = segments
        .par_chunks(pairs)
        .enumerate()
        .map(|(j, chunk)| {
            let k = j * pairs;
            let outs = match *chunk {
                [a, b] => {
                    let (mut x, mut y) = (buffer(k), buffer(k + 1));
                    coder.decode_pair([(a, &mut x), (b, &mut y)], zero, alphabet)?;
                    vec![x, y]
                }
                [a] => {
                    let mut x = buffer(k);
                    coder.decode(a, zero, alphabet, &mut x)?;
                    vec![x]
                }
                _ => unreachable!("chunks of at most two"),
            };
            Ok(outs
                .into_iter()
                .map(|out| {
                    let blocks = ZeroCounts::blocks_of(&out);
                    (out, blocks)
                })
                .collect())
        })
        .collect::<Result<_>>()?;
    let (parts, blocks): (Vec<Vec<u16>>, Vec<Vec<usize>>) = decoded.into_iter().flatten().unzip();
    Ok((parts.concat(), ZeroCounts::from_blocks(blocks.concat())))
}

/// How a stream's symbols are coded.
enum Coding {
    Huffman(Arc<Codebook>),
    Contexts(ContextCoder),
}

fn decode_chunk<T: Element>(raw: &[u8], entry: &ChunkEntry, b: &ChunkBox, coding: &Coding, q: &Quantizer) -> Result<Vec<T>> {
    let n = b.len();
    let mut r = ByteReader::new(raw);
    let parts = read_parts::<T>(&mut r, n)?;
    let (symbols, zeros) = match coding {
        Coding::Huffman(codebook) => read_segments(&mut r, n, codebook)?,
        Coding::Contexts(coder) => read_context_segments(&mut r, n, coder, q)?,
    };
    let mut values = predictor::decode(entry.predictor, &b.shape, q, &symbols, Some(&zeros), &parts.exact, parts.side)?;
    for (i, x) in parts.patches {
        values[i] = x;
    }
    Ok(values)
}

pub fn decompress<T: Element>(stream: &[u8]) -> Result<(Vec<T>, Vec<usize>)> {
    decompress_with(stream, None).map(|(values, shape, _)| (values, shape))
}

/// How the stream's symbols are coded: with its own codebook, a built-in one, `previous` (the
/// codebook in force in a chunked stream), checked against the stream's alphabet; or in context.
fn resolve_coding(h: &Header, previous: Option<&Arc<Codebook>>, alphabet: usize) -> Result<Coding> {
    let codebook = match h.codebook_source {
        CodebookSource::Inline => {
            let (codebook, used) = Codebook::read(&h.codebook, alphabet)?;
            if used != h.codebook.len() {
                return Err(corrupt!("{} unexpected bytes after the codebook", h.codebook.len() - used));
            }
            return Ok(Coding::Huffman(Arc::new(codebook)));
        }
        CodebookSource::Offline => {
            let id = h.codebook[0];
            offline::get(id).ok_or_else(|| corrupt!("stream uses built-in codebook {id}, which this build does not have"))?.codebook.clone()
        }
        CodebookSource::Previous => previous
            .ok_or_else(|| corrupt!("stream reuses the codebook of the record before it: decode it as part of its chunked stream"))?
            .clone(),
        CodebookSource::Contexts => return Ok(Coding::Contexts(ContextCoder::read(&h.codebook)?)),
    };
    if codebook.symbol_limit() > alphabet {
        return Err(corrupt!("codebook has symbols beyond the stream's alphabet of {alphabet}"));
    }
    Ok(Coding::Huffman(codebook))
}

/// A decoded array, its shape, and the codebook the next record of a chunked stream may inherit.
type Decoded<T> = (Vec<T>, Vec<usize>, Option<Arc<Codebook>>);

/// Decompresses a stream whose codebook may be `previous` (see [`resolve_coding`]); also
/// returns the codebook used, which the next record of a chunked stream may refer to (none
/// for a stream coded in context).
pub fn decompress_with<T: Element>(stream: &[u8], previous: Option<&Arc<Codebook>>) -> Result<Decoded<T>> {
    decode_stream(Stream::read(stream)?, previous)
}

/// `decompress_with` for a stream already parsed.
pub fn decode_stream<T: Element>(s: Stream<'_>, previous: Option<&Arc<Codebook>>) -> Result<Decoded<T>> {
    let h = &s.header;
    if h.dtype != T::DTYPE {
        return Err(CodecError::InvalidInput(format!("stream holds {} values, not {}", h.dtype.name(), T::DTYPE.name())));
    }
    let n = num_elements(&h.shape);
    let q = Quantizer::new(h.eb, h.radius);
    let coding = resolve_coding(h, previous, q.alphabet())?;
    let boxes = if n == 0 { Vec::new() } else { chunk_boxes(&h.shape, &h.chunk_shape) };
    // Undo the lossless stage first. With Huffman codes, the output is allocated once every chunk
    // proved to carry a bit per element; context-coded chunks prove it only by decoding
    // (`read_context_segments`), so their values are all decoded before the output is allocated.
    let raws: Vec<Cow<[u8]>> =
        s.payloads.par_iter().zip(&h.chunks).map(|(&stored, c)| frames::unpack(stored, c.raw_len)).collect::<Result<_>>()?;
    let codebook = match &coding {
        Coding::Huffman(codebook) => {
            for (raw, b) in raws.iter().zip(&boxes) {
                if (raw.len() as u64) * 8 < b.len() as u64 {
                    return Err(corrupt!("chunk of {} bytes cannot hold {} symbols", raw.len(), b.len()));
                }
            }
            Some(codebook.clone())
        }
        Coding::Contexts(_) => None,
    };
    if let ([raw], [entry], [b]) = (raws.as_slice(), h.chunks.as_slice(), boxes.as_slice()) {
        // One chunk is the whole array: its buffer is the output, no copy.
        return Ok((decode_chunk::<T>(raw, entry, b, &coding, &q)?, h.shape.clone(), codebook));
    }
    if let Coding::Contexts(_) = coding {
        let chunks: Vec<Vec<T>> = raws
            .par_iter()
            .zip(&h.chunks)
            .zip(&boxes)
            .map(|((raw, entry), b)| decode_chunk::<T>(raw, entry, b, &coding, &q))
            .collect::<Result<_>>()?;
        let mut out = threads::filled(T::default(), n);
        let target = ChunkedOutput::new(&mut out);
        chunks.par_iter().zip(&boxes).for_each(|(values, b)| target.scatter(&h.shape, b, values));
        return Ok((out, h.shape.clone(), codebook));
    }
    let mut out = threads::filled(T::default(), n);
    let target = ChunkedOutput::new(&mut out);
    raws.par_iter().zip(&h.chunks).zip(&boxes).try_for_each(|((raw, entry), b)| {
        let values = decode_chunk::<T>(raw, entry, b, &coding, &q)?;
        target.scatter(&h.shape, b, &values);
        Ok::<(), CodecError>(())
    })?;
    Ok((out, h.shape.clone(), codebook))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1-D field of `n` values whose noise switches between a quiet and a busy amplitude every
    /// `period` values (`quiet == busy`: one amplitude throughout).
    fn switching(n: usize, period: usize, quiet: f64, busy: f64, seed: u64) -> Vec<f64> {
        let mut next = crate::test_rng::xorshift(seed);
        (0..n)
            .map(|i| {
                let u = (next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                (i as f64 * 1e-4).sin() + u * if (i / period).is_multiple_of(3) { busy } else { quiet }
            })
            .collect()
    }

    #[test]
    fn the_huffman_floor_lies_under_the_huffman_stream_and_keeps_the_choice() {
        let n = 3 << 20;
        let (mut floored, mut skipped) = (0, 0);
        for (data, rel) in [
            (switching(n, 4096, 5e-5, 0.05, 3), 1e-5),
            (switching(n, 4096, 5e-5, 0.05, 4), 1e-6),
            (switching(n, 1, 1.0, 1.0, 5), 1e-3),
            (switching(n, 1 << 16, 1e-3, 1.0, 6), 1e-4),
            (switching(n, 256, 0.0, 1e-3, 7), 1e-3),
        ] {
            let config = Config::new(ErrorBound::Relative(rel));
            let eb = absolute_bound(&data, config.bound, None).unwrap();
            let prepared = prepare(&data, &[n], &config, eb, Some(Predictor::Lorenzo), None, None);
            let codebook = Codebook::of(&prepared.histogram);
            let mut table = Vec::new();
            codebook.write(&mut table);
            let huffman = prepared.finish(&config, &codebook, CodebookSource::Inline, table).unwrap();
            if let Some(floor) = prepared.huffman_floor(&codebook, &prepared.segments()) {
                assert!(floor <= huffman.len() as f64, "floor {floor} over the stream's {} bytes at {rel}", huffman.len());
                floored += 1;
            }
            let made = std::cell::Cell::new(false);
            let with = prepared
                .or_in_context(&config, Some(&codebook), || {
                    made.set(true);
                    Ok(huffman.clone())
                })
                .unwrap();
            skipped += !made.get() as usize;
            assert_eq!(with, prepared.or_in_context(&config, None, || Ok(huffman.clone())).unwrap(), "at {rel}");
        }
        // Dense cases made the floor, and at least one was decided without the Huffman stream.
        assert!(floored >= 3 && skipped >= 1, "{floored} floors, {skipped} streams not made");
    }
}
