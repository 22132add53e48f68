//! Chunked streams: arrays that arrive one after another (slabs of a file too large for memory,
//! successive outputs of a simulation) compressed into records that share state, so each chunk
//! does not pay again for what the previous ones already settled.
//!
//! Each record is an ordinary stream (`stream.rs`) whose codebook may be the one in force, named
//! by `CodebookSource::Previous`; the decoder keeps that codebook from record to record. The
//! encoder also keeps the predictor chosen by sampling, and chooses again only when the data
//! changes character. When to build a new codebook is `entropy::adaptive`'s rule.
//!
//! Bounds: absolute; a fixed ratio, met over the whole stream by adjusting each chunk's bound
//! from the bit-rate so far (CEAZ's feedback: one more bit per value halves the bound); or a
//! PSNR floor over the whole stream, kept chunk by chunk against the range seen so far (see
//! `encode_psnr`). A relative bound needs the range of data not seen yet, so it is refused.

use crate::compressor::{check_shape, decode_stream, decompress_with, prepare, Prepared};
use crate::element::Element;
use crate::entropy::adaptive::{decide, spread, Decision, Policy};
use crate::entropy::huffman::Codebook;
use crate::entropy::offline::{self, covering};
use crate::error::{CodecError, Result};
use crate::quantizer::{Quantizer, DEFAULT_RADIUS};
use crate::range::finite_range;
use crate::selection;
use crate::stream::{CodebookSource, Header};
use crate::target::{self, rms_error};
use crate::{threads, Config, ErrorBound};
use std::sync::Arc;

/// What the encoder settled and keeps for the next chunk.
#[derive(Clone)]
struct Current {
    predictor: crate::predictor::Predictor,
    codebook: Arc<Codebook>,
    /// Spread of the histogram the codebook was built for.
    spread: f64,
    elements_since: u64,
    /// Elements since the predictor was last chosen or probed.
    unprobed: u64,
}

/// How often the kept predictor is probed against the alternatives (`selection::probe`).
const PROBE_ELEMENTS: u64 = 1 << 23;

/// Counts of the encoder's choices, for reports and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncoderStats {
    pub records: u64,
    pub kept: u64,
    pub rebuilt: u64,
    pub offline: u64,
    /// Times the predictor was chosen again after a change of character.
    pub reselected: u64,
    pub elements: u64,
    pub bytes_out: u64,
}

pub struct StreamEncoder {
    config: Config,
    policy: Policy,
    current: Option<Current>,
    /// Bound of the last chunk (fixed-ratio feedback starts from it).
    last_eb: Option<f64>,
    /// PSNR targets: the finite range seen so far, and the last measured RMS error per unit of
    /// bound (how far below the bound the errors of this data typically stay).
    range: (f64, f64),
    rms_per_eb: f64,
    stats: EncoderStats,
    /// Every record is read on its own (see `standalone`).
    standalone: bool,
}

/// Tries per chunk before a PSNR target falls back to the bound that guarantees it outright.
const PSNR_TRIES: usize = 3;

impl StreamEncoder {
    /// The threads the encoder was configured with (`None`: all cores).
    pub fn threads(&self) -> Option<usize> {
        self.config.threads
    }

    pub fn new(config: Config, policy: Policy) -> Result<StreamEncoder> {
        match config.bound {
            ErrorBound::Relative(_) => {
                return Err(CodecError::InvalidInput(
                    "a chunked stream cannot know the value range of chunks not seen yet: give abs=, ratio= or psnr=".into(),
                ))
            }
            ErrorBound::Absolute(v) if !(v.is_finite() && v >= 0.0) => {
                return Err(CodecError::InvalidInput(format!("abs error bound must be a finite number >= 0, got {v}")))
            }
            ErrorBound::Ratio(r) if !(r.is_finite() && r >= 1.0) => {
                return Err(CodecError::InvalidInput(format!("target ratio must be a finite number >= 1, got {r}")))
            }
            ErrorBound::Psnr(p) if !(p.is_finite() && p > 0.0) => {
                return Err(CodecError::InvalidInput(format!("target PSNR must be a finite number of dB > 0, got {p}")))
            }
            _ => {}
        }
        if let Policy::Adaptive(t) = policy {
            if !(0.0 <= t.keep && t.keep <= t.rebuild) {
                return Err(CodecError::InvalidInput(format!("thresholds must satisfy 0 <= keep <= rebuild, got {t:?}")));
            }
        }
        let range = (f64::INFINITY, f64::NEG_INFINITY);
        Ok(StreamEncoder {
            config,
            policy,
            current: None,
            last_eb: None,
            range,
            rms_per_eb: 0.5,
            stats: EncoderStats::default(),
            standalone: false,
        })
    }

    /// For records each read on their own, as the HDF5 filter's chunks are: no record inherits a
    /// codebook (the rebuild policy), and in ratio mode a record may be coded in context, as
    /// `compress` does (such records count as rebuilt).
    pub fn standalone(self) -> StreamEncoder {
        StreamEncoder { policy: Policy::Rebuild, standalone: true, ..self }
    }

    pub fn stats(&self) -> &EncoderStats {
        &self.stats
    }

    /// The bound for the next chunk, for absolute and fixed-ratio streams.
    fn bound_for<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<f64> {
        match (self.config.bound, self.last_eb) {
            (ErrorBound::Ratio(r), Some(eb)) if eb > 0.0 && self.stats.bytes_out > 0 => {
                // Bits per value the stream may still spend to land on the target with this
                // chunk, against what it spent so far; one bit more or less per value is one
                // doubling of the bound. Steps are capped so one odd chunk cannot swing it.
                let width = 8.0 * T::BYTES as f64;
                let n = data.len().max(1) as f64;
                let spent = 8.0 * self.stats.bytes_out as f64;
                let so_far = spent / self.stats.elements.max(1) as f64;
                let allowed = ((self.stats.elements as f64 + n) * width / r - spent) / n;
                let goal = allowed.clamp(0.5 * width / r, 2.0 * width / r);
                Ok(eb * (so_far - goal).clamp(-2.0, 2.0).exp2())
            }
            // The first chunk of a fixed-ratio stream: the one-shot search.
            (ErrorBound::Ratio(_), _) => Ok(Header::read(&target::compress(data, shape, &self.config)?)?.0.eb),
            (ErrorBound::Absolute(v), _) => Ok(v),
            (ErrorBound::Relative(_) | ErrorBound::Psnr(_), _) => unreachable!("relative refused by new, PSNR has its own path"),
        }
    }

    /// A PSNR floor over the whole stream: the RMS error allowed is the range seen so far (never
    /// more than the final range) over 10^(P/20), and a chunk whose RMS error stays within it
    /// keeps the stream's PSNR at or above P. The bound is set from the error-to-bound ratio of
    /// the chunks before, then checked by decoding; a bound equal to the allowed RMS error
    /// guarantees it (|error| <= bound), so that is the last resort.
    fn encode_psnr<T: Element>(&mut self, data: &[T], shape: &[usize], p: f64) -> Result<Vec<u8>> {
        let (lo, hi) = finite_range(data);
        self.range = (self.range.0.min(lo), self.range.1.max(hi));
        let allowed = ((self.range.1 - self.range.0).min(f64::MAX) * 10f64.powf(-p / 20.0)).max(0.0);
        if !(allowed > 0.0) {
            return self.encode_with(data, shape, 0.0);
        }
        let mut eb = (allowed / self.rms_per_eb).min(f64::MAX);
        for attempt in 0..=PSNR_TRIES {
            let saved = (self.current.clone(), self.stats.clone());
            let previous = self.current.as_ref().map(|c| c.codebook.clone());
            let record = self.encode_with(data, shape, eb)?;
            let rms = rms_error(data, &decompress_with::<T>(&record, previous.as_ref())?.0);
            if rms > 0.0 {
                self.rms_per_eb = (rms / eb).clamp(1e-3, 1.0);
            }
            if rms <= allowed || attempt == PSNR_TRIES {
                return Ok(record);
            }
            (self.current, self.stats) = saved;
            eb = if attempt + 1 == PSNR_TRIES { allowed } else { eb * 0.97 * allowed / rms };
        }
        unreachable!("the last attempt returns")
    }

    /// Compresses one chunk (any shape of 1 to 4 dimensions) into the next record.
    pub fn encode<T: Element>(&mut self, data: &[T], shape: &[usize]) -> Result<Vec<u8>> {
        threads::run_sized(self.config.threads, std::mem::size_of_val(data), || self.encode_here(data, shape))
    }

    fn encode_here<T: Element>(&mut self, data: &[T], shape: &[usize]) -> Result<Vec<u8>> {
        check_shape(shape, data.len())?;
        match self.config.bound {
            ErrorBound::Psnr(p) => self.encode_psnr(data, shape, p),
            _ => {
                let eb = self.bound_for(data, shape)?;
                self.encode_with(data, shape, eb)
            }
        }
    }

    /// Encodes a chunk under `eb`, deciding predictor and codebook. As in CEAZ's pipeline the
    /// chunk is quantized for the codebook in force before the decision: codes that codebook
    /// cannot code (rare outliers) are kept exactly, so keeping it never fails on them.
    fn encode_with<T: Element>(&mut self, data: &[T], shape: &[usize], eb: f64) -> Result<Vec<u8>> {
        let kept = self.current.as_ref().map(|c| c.predictor);
        let window = match self.policy {
            Policy::Rebuild => None,
            _ => self.current.as_ref().and_then(|c| c.codebook.coded_run(DEFAULT_RADIUS as usize)),
        };
        let stale = match self.current.as_mut() {
            Some(c) if c.unprobed >= PROBE_ELEMENTS => {
                c.unprobed = 0;
                let q = Quantizer::new(eb, DEFAULT_RADIUS);
                selection::probe(data, shape, &q, &self.config, &c.predictor)
            }
            _ => false,
        };
        // The chunk coded with the kept predictor decides, unless the probe already found it stale;
        // starting over (and the first chunk) chooses the predictor afresh, without the window.
        let mut decision = Decision::StartOver;
        let mut kept_try = None;
        if !stale {
            let prepared = prepare(data, shape, &self.config, eb, kept, window, None);
            let s = spread(prepared.dense_histogram(), DEFAULT_RADIUS as usize);
            if let Some(c) = &self.current {
                decision = decide(self.policy, c.spread, s, c.elements_since);
            }
            if decision != Decision::StartOver || kept.is_none() {
                kept_try = Some((prepared, s));
            }
        }
        let (prepared, current_spread) = match kept_try {
            Some(tried) => tried,
            None => {
                self.stats.reselected += 1;
                let prepared = prepare(data, shape, &self.config, eb, None, None, None);
                let s = spread(prepared.dense_histogram(), DEFAULT_RADIUS as usize);
                (prepared, s)
            }
        };
        let record = match decision {
            Decision::Keep => match &self.current {
                Some(c) if c.codebook.encoded_bits(prepared.dense_histogram()).is_some() => {
                    self.stats.kept += 1;
                    let record = prepared.finish(&self.config, &c.codebook, CodebookSource::Previous, Vec::new())?;
                    self.current.as_mut().expect("matched").elements_since += data.len() as u64;
                    record
                }
                // A symbol the codebook has no code for: a new one it is.
                _ => self.rebuild(&prepared, current_spread)?,
            },
            Decision::Rebuild => self.rebuild(&prepared, current_spread)?,
            Decision::StartOver => self.start_over(&prepared, current_spread)?,
        };
        let record = if self.standalone { prepared.or_in_context(&self.config, None, || Ok(record))? } else { record };
        if let Some(c) = self.current.as_mut() {
            c.predictor = prepared.predictor;
            c.unprobed = if decision == Decision::StartOver { 0 } else { c.unprobed + data.len() as u64 };
        }
        self.last_eb = Some(eb);
        self.stats.records += 1;
        self.stats.elements += data.len() as u64;
        self.stats.bytes_out += record.len() as u64;
        Ok(record)
    }

    fn rebuild<T: Element>(&mut self, prepared: &Prepared<T>, spread: f64) -> Result<Vec<u8>> {
        let (codebook, table) = own_codebook(prepared);
        self.install_own(prepared, spread, codebook, table)
    }

    /// Codes the chunk with its own new codebook (stored inline) and keeps that codebook.
    fn install_own<T: Element>(&mut self, prepared: &Prepared<T>, spread: f64, codebook: Codebook, table: Vec<u8>) -> Result<Vec<u8>> {
        let record = prepared.finish(&self.config, &codebook, CodebookSource::Inline, table)?;
        self.stats.rebuilt += 1;
        let elements_since = prepared.histogram.total();
        let unprobed = self.current.as_ref().map_or(0, |c| c.unprobed);
        self.current = Some(Current { predictor: prepared.predictor, codebook: Arc::new(codebook), spread, elements_since, unprobed });
        Ok(record)
    }

    /// A built-in codebook when it codes the chunk in fewer bytes than a new one with its table.
    fn start_over<T: Element>(&mut self, prepared: &Prepared<T>, spread: f64) -> Result<Vec<u8>> {
        let (own, table) = own_codebook(prepared);
        let histogram = prepared.dense_histogram();
        if let Some((book, bits)) = offline::cheapest(histogram) {
            let own_bits = own.encoded_bits(histogram).expect("covers its own histogram") + 8 * table.len() as u64;
            if bits < own_bits {
                let record = prepared.finish(&self.config, &book.codebook, CodebookSource::Offline, vec![book.id])?;
                self.stats.offline += 1;
                let elements_since = prepared.histogram.total();
                self.current =
                    Some(Current { predictor: prepared.predictor, codebook: book.codebook.clone(), spread, elements_since, unprobed: 0 });
                return Ok(record);
            }
        }
        self.install_own(prepared, spread, own, table)
    }
}

/// A new codebook for the chunk (covering a window around its codes) and its serialized table.
fn own_codebook<T: Element>(prepared: &Prepared<T>) -> (Codebook, Vec<u8>) {
    let total = prepared.histogram.total();
    let codebook = covering(prepared.dense_histogram(), total as f64);
    let mut table = Vec::new();
    codebook.write(&mut table);
    (codebook, table)
}

/// Decodes the records of a chunked stream in order.
pub struct StreamDecoder {
    threads: Option<usize>,
    codebook: Option<Arc<Codebook>>,
}

impl StreamDecoder {
    /// `threads`: as for [`crate::decompress`].
    pub fn new(threads: Option<usize>) -> StreamDecoder {
        StreamDecoder { threads, codebook: None }
    }

    pub fn decode<T: Element>(&mut self, record: &[u8]) -> Result<(Vec<T>, Vec<usize>)> {
        threads::check(self.threads)?;
        let s = crate::stream::Stream::read(record)?;
        let (values, shape, codebook) =
            threads::run_sized(self.threads, s.header.decoded_bytes(), || decode_stream::<T>(s, self.codebook.as_ref()))?;
        self.codebook = codebook;
        Ok((values, shape))
    }
}
