//! amrzip-codec: error-bounded lossy compression of f32/f64 arrays of 1 to 4 dimensions.
//!
//! The pipeline is a composition of stages, each in its own module:
//! `grid` (array geometry and chunking) -> `predictor` (Lorenzo, regression, interpolation,
//! dual-quantization) + `quantizer` (linear-scaling, bound checked on the reconstructed value) ->
//! `entropy` (canonical Huffman shared by all chunks, then zstd) -> `stream` (versioned header,
//! chunk table, checksum). `compressor` glues them; `selection` picks the predictor by sampling.
//!
//! Every decoded value `x'` of an input `x` satisfies `|x - x'| <= bound` (NaN and ±Inf are
//! reproduced bit for bit): the encoder reconstructs each value exactly as the decoder will and
//! stores the value losslessly whenever the check fails.

// Negated float comparisons are deliberate throughout: they make NaN fail a check.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod blockset;
pub mod element;
pub mod error;

mod bytes;
mod compressor;
mod cpu;
mod entropy;
mod grid;
mod nonfinite;
mod predictor;
mod quantizer;
mod range;
mod scratch;
mod selection;
mod stream;
mod streaming;
mod target;
#[cfg(test)]
mod test_rng;
mod threads;

pub use bytes::{join_into, ByteReader};
pub use element::{DType, Element};
pub use entropy::adaptive::{Policy, Thresholds, DEFAULT_THRESHOLDS};
pub use error::{CodecError, Result};
pub use grid::{for_each_index, for_each_row, strides};
pub use predictor::PredictorKind;
pub use range::{finite_range, finite_range_where};
pub use stream::{CodebookSource, StreamInfo};
pub use streaming::{EncoderStats, StreamDecoder, StreamEncoder};
pub use threads::{run_sized as run_sized_with_threads, run_with as run_with_threads, start as start_threads};

/// The codec's stages, for layouts that drive prediction themselves (the HZ multiresolution
/// layout predicts each resolution level from the coarser ones): the quantizer, the two entropy
/// coders with their shared statistics (Huffman codebooks, context tables), the zstd stage and
/// the byte helpers of the formats.
pub mod stages {
    pub use crate::bytes::{crc32, put_varint};
    pub use crate::entropy::contexts::ContextCoder;
    pub use crate::entropy::frames::zstd_compress;
    pub use crate::entropy::huffman::{entropy_bits, Codebook, Histogram};
    pub use crate::grid::{gather, ChunkBox};
    pub use crate::predictor::lagrange;
    pub use crate::quantizer::{Quantizer, DEFAULT_RADIUS};
}

/// How the user states the error bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ErrorBound {
    /// Every value within this absolute distance.
    Absolute(f64),
    /// A fraction of the value range (max - min over the finite values).
    Relative(f64),
    /// Fixed ratio: the bound is searched so the stream is this many times smaller than the
    /// input (within a few percent where reachable); the stream records the bound found.
    Ratio(f64),
    /// Target PSNR in dB (over the finite values, peak = value range): the largest bound found
    /// whose PSNR is at least this, aiming within 1.5 dB above it.
    Psnr(f64),
}

/// What to optimise for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// Best compression ratio: the predictor is chosen by sampling.
    Ratio,
    /// Throughput first: one fixed interpolation setup (no sampling) and a light lossless stage.
    Speed,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub bound: ErrorBound,
    pub preset: Preset,
    /// Worker threads; `None` means all cores.
    pub threads: Option<usize>,
    /// Force one predictor instead of sampling (benchmarks and tests use this).
    pub predictor: Option<PredictorKind>,
}

impl Config {
    pub fn new(bound: ErrorBound) -> Config {
        Config { bound, preset: Preset::Ratio, threads: None, predictor: None }
    }
}

/// Compresses a C-order (last index fastest) array of `shape` into a self-describing stream.
pub fn compress<T: Element>(data: &[T], shape: &[usize], config: &Config) -> Result<Vec<u8>> {
    threads::run_sized(config.threads, std::mem::size_of_val(data), || match config.bound {
        ErrorBound::Ratio(_) | ErrorBound::Psnr(_) => target::compress(data, shape, config),
        ErrorBound::Absolute(_) | ErrorBound::Relative(_) => compressor::compress(data, shape, config),
    })
}

/// Decompresses a stream holding elements of type `T`; returns the values and the shape.
/// Fails with `InvalidInput` if the stream holds the other float type (see [`info`]).
pub fn decompress<T: Element>(stream: &[u8], threads: Option<usize>) -> Result<(Vec<T>, Vec<usize>)> {
    threads::check(threads)?;
    // Parsed once, here: its header says how much work the decoding is.
    let s = stream::Stream::read(stream)?;
    threads::run_sized(threads, s.header.decoded_bytes(), || compressor::decode_stream(s, None).map(|(values, shape, _)| (values, shape)))
}

/// The element type of a stream, from its validated header alone (cheap: the payload is not
/// read), so callers can pick the `decompress` instantiation.
pub fn dtype(stream: &[u8]) -> Result<DType> {
    Ok(stream::Header::read(stream)?.0.dtype)
}

/// Reads and validates a stream's header without decoding its payload.
pub fn info(stream: &[u8]) -> Result<StreamInfo> {
    stream::StreamInfo::read(stream)
}

/// Symbol histogram of `data` compressed under the absolute bound `eb` (the predictor chosen as
/// `compress` would). For building offline codebooks (`benches/build_codebooks.py`).
#[doc(hidden)]
pub fn symbol_histogram<T: Element>(data: &[T], shape: &[usize], config: &Config, eb: f64) -> Result<Vec<u64>> {
    compressor::check_shape(shape, data.len())?;
    if !(eb.is_finite() && eb >= 0.0) {
        return Err(CodecError::InvalidInput(format!("bound must be a finite number >= 0, got {eb}")));
    }
    threads::run_with(config.threads, || Ok(compressor::prepare(data, shape, config, eb, None, None, None).dense_histogram().to_vec()))
}

/// The bytes of an offline codebook set, one codebook per (id, name, histogram).
#[doc(hidden)]
pub fn offline_codebook_set(books: &[(u8, String, Vec<u64>)]) -> Vec<u8> {
    entropy::offline::build_set(books)
}

/// Costs of coding symbols with histogram `freq`: bits with an exact Huffman codebook and the
/// bytes of its table, then (id, bits) for each built-in codebook that has a code for every
/// symbol present. For measuring the built-in codebooks against exact ones.
#[doc(hidden)]
pub fn codebook_costs(freq: &[u64]) -> (u64, usize, Vec<(u8, u64)>) {
    let exact = entropy::huffman::Codebook::from_histogram(&freq[..freq.len().min(1 << 16)]);
    let mut table = Vec::new();
    exact.write(&mut table);
    let bits = exact.encoded_bits(freq).unwrap_or(u64::MAX);
    let offline = entropy::offline::all().iter().filter_map(|b| b.codebook.encoded_bits(freq).map(|bits| (b.id, bits))).collect();
    (bits, table.len(), offline)
}

/// The built-in codebooks: (id, name).
pub fn offline_codebooks() -> Vec<(u8, String)> {
    entropy::offline::all().iter().map(|b| (b.id, b.name.clone())).collect()
}
