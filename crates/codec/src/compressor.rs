//! The codec's glue: bound resolution, chunking, predictor choice, the shared codebook, the
//! per-chunk byte layout, and the parallel decode.
//!
//! A chunk's bytes before the lossless stage:
//! `patches` (varint count, then varint gap + raw value per NaN/Inf), `side` (varint length +
//! bytes, predictor-specific), `exact` (varint count + raw values), then the symbols as Huffman
//! segments of `SEGMENT_SYMBOLS` each (a varint byte length per segment, then the segments),
//! which encode and decode in parallel.

use crate::bytes::{put_varint, ByteReader};
use crate::element::Element;
use crate::entropy::frames;
use crate::entropy::huffman::{self, Codebook};
use crate::error::{corrupt, CodecError, Result};
use crate::grid::{checked_num_elements, chunk_boxes, chunk_shape, gather, num_elements, ChunkBox, ChunkedOutput};
use crate::nonfinite;
use crate::predictor::{self, Predictor};
use crate::quantizer::{Quantizer, DEFAULT_RADIUS};
use crate::selection;
use crate::stream::{ChunkEntry, Header, Stream, MAX_CHUNK_ELEMENTS};
use crate::{Config, ErrorBound};
use rayon::prelude::*;
use std::borrow::Cow;

/// Symbols per Huffman segment: the unit of parallel entropy coding inside a chunk.
const SEGMENT_SYMBOLS: usize = 1 << 20;

/// Elements per chunk. Interpolation parallelises inside a chunk (the points of one pass are
/// independent), and chunk seams cost it dearly on smooth data, so it takes the largest chunks
/// the format allows. The other predictors carry an error-feedback dependency from point to
/// point, so they get chunks small enough to give every core several.
fn chunk_target(p: &Predictor) -> usize {
    match p {
        Predictor::Interpolation { .. } => MAX_CHUNK_ELEMENTS,
        _ => 1 << 21,
    }
}

fn check_shape(shape: &[usize], len: usize) -> Result<()> {
    if shape.is_empty() || shape.len() > 4 {
        return Err(CodecError::InvalidInput(format!("arrays of 1 to 4 dimensions are supported, got {}", shape.len())));
    }
    let n = checked_num_elements(shape).ok_or_else(|| CodecError::InvalidInput(format!("shape {shape:?} overflows")))?;
    if n != len {
        return Err(CodecError::InvalidInput(format!("shape {shape:?} has {n} elements but the data has {len}")));
    }
    Ok(())
}

/// Smallest and largest of the values `keep` accepts, block by block in parallel. Eight
/// independent lanes per block: one running min/max would be a serial dependency chain, which
/// the compiler may not reorder for floats.
fn range_of<T: Element>(data: &[T], keep: impl Fn(f64) -> bool + Sync) -> (f64, f64) {
    const LANES: usize = 8;
    data.par_chunks(1 << 16)
        .map(|block| {
            let (mut lo, mut hi) = ([f64::INFINITY; LANES], [f64::NEG_INFINITY; LANES]);
            let mut update = |j: usize, x: T| {
                let v = x.to_f64();
                if keep(v) {
                    lo[j] = if v < lo[j] { v } else { lo[j] };
                    hi[j] = if v > hi[j] { v } else { hi[j] };
                }
            };
            let mut lanes = block.chunks_exact(LANES);
            for c in &mut lanes {
                for (j, &x) in c.iter().enumerate() {
                    update(j, x);
                }
            }
            for (j, &x) in lanes.remainder().iter().enumerate() {
                update(j, x);
            }
            (lo.into_iter().fold(f64::INFINITY, f64::min), hi.into_iter().fold(f64::NEG_INFINITY, f64::max))
        })
        .reduce(|| (f64::INFINITY, f64::NEG_INFINITY), |a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// Smallest and largest finite value (lo > hi when there is none). The first sweep takes every
/// value, a compare-and-select the compiler vectorises (NaN never wins a comparison); only when
/// it ends on an infinity does a second sweep filter them out.
fn finite_range<T: Element>(data: &[T]) -> (f64, f64) {
    match range_of(data, |_| true) {
        (lo, hi) if lo.is_finite() && hi.is_finite() => (lo, hi),
        _ => range_of(data, f64::is_finite),
    }
}

/// The absolute bound for the request: value-range relative bounds use the finite values' range.
fn absolute_bound<T: Element>(data: &[T], bound: ErrorBound) -> Result<f64> {
    let (name, value) = match bound {
        ErrorBound::Absolute(v) => ("abs", v),
        ErrorBound::Relative(v) => ("rel", v),
    };
    if !(value.is_finite() && value >= 0.0) {
        return Err(CodecError::InvalidInput(format!("{name} error bound must be a finite number >= 0, got {value}")));
    }
    let eb = match bound {
        ErrorBound::Absolute(v) => v,
        ErrorBound::Relative(v) => {
            let (lo, hi) = finite_range(data);
            if lo > hi {
                0.0
            } else {
                let range = hi - lo;
                // A range wider than f64::MAX is split so the bound stays finite.
                let eb = if range.is_finite() { v * range } else { v * hi - v * lo };
                // Rounding may have nudged eb above v * (hi - lo) taken exactly; step back a few
                // ulps so the promise holds against the exact product.
                eb * (1.0 - 4.0 * f64::EPSILON)
            }
        }
    };
    Ok(eb.min(f64::MAX))
}

/// One chunk after prediction, before entropy coding.
struct Predicted<T> {
    coded: predictor::Coded<T>,
    patches: Vec<(usize, T)>,
    histogram: Vec<u64>,
}

fn predict_chunk<T: Element>(data: &[T], shape: &[usize], b: &ChunkBox, p: &Predictor, q: &Quantizer) -> Predicted<T> {
    let chunk: Cow<[T]> = if b.shape.as_slice() == shape { Cow::Borrowed(data) } else { Cow::Owned(gather(data, shape, b)) };
    let (filled, patches) = nonfinite::fill(&chunk);
    let coded = predictor::encode(p, &filled, &b.shape, q);
    let histogram = huffman::histogram(&coded.symbols, q.alphabet());
    Predicted { coded, patches, histogram }
}

fn chunk_bytes<T: Element>(c: &Predicted<T>, codebook: &Codebook) -> Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(c.coded.symbols.len() / 2 + c.coded.side.len() + 64);
    put_varint(&mut raw, c.patches.len() as u64);
    let mut last = 0;
    for &(i, x) in &c.patches {
        put_varint(&mut raw, (i - last) as u64);
        x.write_le(&mut raw);
        last = i;
    }
    put_varint(&mut raw, c.coded.side.len() as u64);
    raw.extend_from_slice(&c.coded.side);
    put_varint(&mut raw, c.coded.exact.len() as u64);
    for &x in &c.coded.exact {
        x.write_le(&mut raw);
    }
    let segments: Vec<Vec<u8>> = c
        .coded
        .symbols
        .par_chunks(SEGMENT_SYMBOLS)
        .map(|seg| {
            let mut bits = Vec::with_capacity(seg.len() / 4);
            codebook.encode(seg, &mut bits).map(|_| bits)
        })
        .collect::<Result<_>>()?;
    for seg in &segments {
        put_varint(&mut raw, seg.len() as u64);
    }
    for seg in &segments {
        raw.extend_from_slice(seg);
    }
    Ok(raw)
}

pub fn compress<T: Element>(data: &[T], shape: &[usize], config: &Config) -> Result<Vec<u8>> {
    check_shape(shape, data.len())?;
    let eb = absolute_bound(data, config.bound)?;
    let q = Quantizer::new(eb, DEFAULT_RADIUS);
    let p = if data.is_empty() { Predictor::Lorenzo } else { selection::choose(data, shape, &q, config) };
    let chunk_shape = chunk_shape(shape, chunk_target(&p));
    let boxes = if data.is_empty() { Vec::new() } else { chunk_boxes(shape, &chunk_shape) };

    let predicted: Vec<Predicted<T>> = boxes.par_iter().map(|b| predict_chunk(data, shape, b, &p, &q)).collect();
    let histogram = predicted.iter().fold(vec![0u64; q.alphabet()], |h, c| huffman::add_histogram(h, &c.histogram));
    let codebook = Codebook::from_histogram(&histogram);
    let encoded: Vec<(ChunkEntry, Vec<u8>)> = predicted
        .par_iter()
        .map(|c| {
            let raw = chunk_bytes(c, &codebook)?;
            let bytes = frames::pack(&raw, |frame| frames::level_for(config.preset, frame));
            Ok((ChunkEntry { predictor: p.kind(), stored_len: bytes.len() as u64, raw_len: raw.len() as u64 }, bytes))
        })
        .collect::<Result<_>>()?;
    let mut codebook_bytes = Vec::new();
    codebook.write(&mut codebook_bytes);
    let (chunks, payloads): (Vec<ChunkEntry>, Vec<Vec<u8>>) = encoded.into_iter().unzip();
    let header = Header {
        dtype: T::DTYPE,
        shape: shape.to_vec(),
        preset: config.preset,
        bound: config.bound,
        eb,
        radius: DEFAULT_RADIUS,
        chunk_shape,
        codebook: codebook_bytes,
        chunks,
    };
    Ok(Stream::write(&header, &payloads))
}

fn decode_chunk<T: Element>(raw: &[u8], entry: &ChunkEntry, b: &ChunkBox, codebook: &Codebook, q: &Quantizer) -> Result<Vec<T>> {
    let n = b.len();
    let mut r = ByteReader::new(raw);
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
    let n_segments = n.div_ceil(SEGMENT_SYMBOLS);
    let mut segments = Vec::with_capacity(n_segments.min(r.remaining()));
    let lengths: Vec<usize> =
        (0..n_segments).map(|_| r.bounded_varint(r.remaining() as u64, "segment length").map(|l| l as usize)).collect::<Result<_>>()?;
    for (k, len) in lengths.into_iter().enumerate() {
        let bits = r.take(len, "Huffman segment")?;
        // Every symbol costs at least one bit: refuse to allocate symbols the bits cannot hold.
        let count = SEGMENT_SYMBOLS.min(n - k * SEGMENT_SYMBOLS);
        if (bits.len() as u64) * 8 < count as u64 {
            return Err(corrupt!("Huffman segment of {} bytes cannot hold {count} symbols", bits.len()));
        }
        segments.push(bits);
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after the last Huffman segment", r.remaining()));
    }
    let mut symbols = vec![0u16; n];
    symbols.par_chunks_mut(SEGMENT_SYMBOLS).zip(&segments).try_for_each(|(out, bits)| codebook.decode(bits, out))?;
    let mut values = predictor::decode(entry.predictor, &b.shape, q, &symbols, &exact, side)?;
    for (i, x) in patches {
        values[i] = x;
    }
    Ok(values)
}

pub fn decompress<T: Element>(stream: &[u8]) -> Result<(Vec<T>, Vec<usize>)> {
    let s = Stream::read(stream)?;
    let h = &s.header;
    if h.dtype != T::DTYPE {
        return Err(CodecError::InvalidInput(format!("stream holds {} values, not {}", h.dtype.name(), T::DTYPE.name())));
    }
    let n = num_elements(&h.shape);
    let q = Quantizer::new(h.eb, h.radius);
    let (codebook, used) = Codebook::read(&h.codebook, q.alphabet())?;
    if used != h.codebook.len() {
        return Err(corrupt!("{} unexpected bytes after the codebook", h.codebook.len() - used));
    }
    let boxes = if n == 0 { Vec::new() } else { chunk_boxes(&h.shape, &h.chunk_shape) };
    // Undo the lossless stage first: the output is only allocated once every chunk proved to
    // carry at least the bits its elements need.
    let raws: Vec<Vec<u8>> =
        s.payloads.par_iter().zip(&h.chunks).map(|(&stored, c)| frames::unpack(stored, c.raw_len)).collect::<Result<_>>()?;
    for (raw, b) in raws.iter().zip(&boxes) {
        if (raw.len() as u64) * 8 < b.len() as u64 {
            return Err(corrupt!("chunk of {} bytes cannot hold {} symbols", raw.len(), b.len()));
        }
    }
    if let ([raw], [entry], [b]) = (raws.as_slice(), h.chunks.as_slice(), boxes.as_slice()) {
        // One chunk is the whole array: its buffer is the output, no copy.
        return Ok((decode_chunk::<T>(raw, entry, b, &codebook, &q)?, h.shape.clone()));
    }
    let mut out = vec![T::default(); n];
    let target = ChunkedOutput::new(&mut out);
    raws.par_iter().zip(&h.chunks).zip(&boxes).try_for_each(|((raw, entry), b)| {
        let values = decode_chunk::<T>(raw, entry, b, &codebook, &q)?;
        target.scatter(&h.shape, b, &values);
        Ok::<(), CodecError>(())
    })?;
    Ok((out, h.shape.clone()))
}
