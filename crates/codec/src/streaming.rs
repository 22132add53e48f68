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
//! PSNR floor, searched per chunk against the chunk's own range, which keeps the whole stream
//! at or above it too (the stream's range is at least each chunk's). A relative bound needs the
//! range of data not seen yet, so it is refused.

use crate::compressor::{check_shape, decompress_with, prepare, Prepared};
use crate::element::Element;
use crate::entropy::adaptive::{decide, spread, Decision, Policy};
use crate::entropy::huffman::Codebook;
use crate::entropy::offline::{self, covering};
use crate::error::{CodecError, Result};
use crate::quantizer::DEFAULT_RADIUS;
use crate::stream::{CodebookSource, Header};
use crate::{target, threads, Config, ErrorBound};
use std::sync::Arc;

/// What the encoder settled and keeps for the next chunk.
struct Current {
    predictor: crate::predictor::Predictor,
    codebook: Arc<Codebook>,
    /// Spread of the histogram the codebook was built for.
    spread: f64,
    elements_since: u64,
}

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
    stats: EncoderStats,
}

impl StreamEncoder {
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
        Ok(StreamEncoder { config, policy, current: None, last_eb: None, stats: EncoderStats::default() })
    }

    pub fn stats(&self) -> &EncoderStats {
        &self.stats
    }

    /// The bound for the next chunk.
    fn bound_for<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<f64> {
        let searched = || -> Result<f64> { Ok(Header::read(&target::compress(data, shape, &self.config)?)?.0.eb) };
        match (self.config.bound, self.last_eb) {
            (ErrorBound::Absolute(v), _) => Ok(v),
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
            (ErrorBound::Ratio(_), _) | (ErrorBound::Psnr(_), _) => searched(),
            (ErrorBound::Relative(_), _) => unreachable!("refused by new"),
        }
    }

    /// Compresses one chunk (any shape of 1 to 4 dimensions) into the next record.
    pub fn encode<T: Element>(&mut self, data: &[T], shape: &[usize]) -> Result<Vec<u8>> {
        threads::run_with(self.config.threads, || self.encode_here(data, shape))
    }

    fn encode_here<T: Element>(&mut self, data: &[T], shape: &[usize]) -> Result<Vec<u8>> {
        check_shape(shape, data.len())?;
        let eb = self.bound_for(data, shape)?;
        let kept = self.current.as_ref().map(|c| c.predictor);
        let mut prepared = prepare(data, shape, &self.config, eb, kept);
        let mut current_spread = spread(&prepared.histogram, DEFAULT_RADIUS as usize);
        let decision = match &self.current {
            None => Decision::StartOver,
            Some(c) => decide(self.policy, c.spread, current_spread, c.elements_since),
        };
        if decision == Decision::StartOver && kept.is_some() {
            prepared = prepare(data, shape, &self.config, eb, None);
            current_spread = spread(&prepared.histogram, DEFAULT_RADIUS as usize);
            self.stats.reselected += 1;
        }
        let record = match decision {
            Decision::Keep => match &self.current {
                Some(c) if c.codebook.encoded_bits(&prepared.histogram).is_some() => {
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
        if let Some(c) = self.current.as_mut() {
            c.predictor = prepared.predictor;
        }
        self.last_eb = Some(eb);
        self.stats.records += 1;
        self.stats.elements += data.len() as u64;
        self.stats.bytes_out += record.len() as u64;
        Ok(record)
    }

    fn rebuild<T: Element>(&mut self, prepared: &Prepared<T>, spread: f64) -> Result<Vec<u8>> {
        let total: u64 = prepared.histogram.iter().sum();
        let codebook = covering(&prepared.histogram, total as f64);
        let mut table = Vec::new();
        codebook.write(&mut table);
        let record = prepared.finish(&self.config, &codebook, CodebookSource::Inline, table)?;
        self.stats.rebuilt += 1;
        let elements_since = total;
        self.current = Some(Current { predictor: prepared.predictor, codebook: Arc::new(codebook), spread, elements_since });
        Ok(record)
    }

    /// A built-in codebook when it codes the chunk in fewer bytes than a new one with its table.
    fn start_over<T: Element>(&mut self, prepared: &Prepared<T>, spread: f64) -> Result<Vec<u8>> {
        if let Some((book, bits)) = offline::cheapest(&prepared.histogram) {
            let total: u64 = prepared.histogram.iter().sum();
            let own = covering(&prepared.histogram, total as f64);
            let mut table = Vec::new();
            own.write(&mut table);
            let own_bits = own.encoded_bits(&prepared.histogram).expect("covers its own histogram") + 8 * table.len() as u64;
            if bits < own_bits {
                let record = prepared.finish(&self.config, &book.codebook, CodebookSource::Offline, vec![book.id])?;
                self.stats.offline += 1;
                self.current = Some(Current { predictor: prepared.predictor, codebook: book.codebook.clone(), spread, elements_since: total });
                return Ok(record);
            }
        }
        self.rebuild(prepared, spread)
    }
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
        let (values, shape, codebook) = threads::run_with(self.threads, || decompress_with::<T>(record, self.codebook.as_ref()))?;
        self.codebook = Some(codebook);
        Ok((values, shape))
    }
}
