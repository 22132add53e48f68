//! Fixed-ratio and target-PSNR compression: search for the absolute bound that meets the target,
//! then keep the stream made under it. The bound found is a promise like any other (every value
//! within it); the target is met as closely as the search gets.
//!
//! The search runs on `x = log2(bound)`. The bit-rate falls by about one bit per doubling of the
//! bound (CEAZ's observation: the code histogram halves in width), and the PSNR by about 6.02 dB,
//! so the first step uses those slopes; later steps are secants, kept inside the bracket of
//! tried points on either side of the target. Arrays much larger than `SAMPLE_ELEMENTS` are
//! searched first on a central box of about that size, so the full array is usually compressed
//! only once or twice.

use crate::compressor::{check_shape, compress_with_eb, decompress};
use crate::element::Element;
use crate::error::{CodecError, Result};
use crate::grid::{chunk_shape, gather, ChunkBox};
use crate::range::finite_range;
use crate::{Config, ErrorBound};
use rayon::prelude::*;

/// Size of the central box searched before the full array.
const SAMPLE_ELEMENTS: usize = 1 << 21;
/// Evaluations allowed on the sample and on the full array.
const SAMPLE_STEPS: usize = 12;
const FULL_STEPS: usize = 8;
/// PSNR is aimed at the middle of [target, target + PSNR_WINDOW]; the ratio within RATIO_TOLERANCE.
pub const PSNR_WINDOW: f64 = 1.5;
const RATIO_TOLERANCE: f64 = 0.02;
/// dB lost per doubling of a uniform quantization error.
const DB_PER_DOUBLING: f64 = 6.020599913279624;

#[derive(Clone, Copy, Debug)]
enum Target {
    Ratio(f64),
    Psnr(f64),
}

impl Target {
    fn from_bound(bound: ErrorBound) -> Result<Target> {
        match bound {
            ErrorBound::Ratio(r) if r.is_finite() && r >= 1.0 => Ok(Target::Ratio(r)),
            ErrorBound::Ratio(r) => Err(CodecError::InvalidInput(format!("target ratio must be a finite number >= 1, got {r}"))),
            ErrorBound::Psnr(p) if p.is_finite() && p > 0.0 => Ok(Target::Psnr(p)),
            ErrorBound::Psnr(p) => Err(CodecError::InvalidInput(format!("target PSNR must be a finite number of dB > 0, got {p}"))),
            _ => Err(CodecError::InvalidInput("not a ratio or PSNR target".into())),
        }
    }

    /// First guess: a uniform error in [-eb, eb] has RMS eb/sqrt(3); for a ratio, a bound of
    /// 1e-3 of the range is a typical middle.
    fn initial_x(self, range: f64) -> f64 {
        match self {
            Target::Psnr(p) => range.log2() - (p + PSNR_WINDOW / 2.0) / DB_PER_DOUBLING + 3f64.sqrt().log2(),
            Target::Ratio(_) => range.log2() - 10.0,
        }
    }
}

/// One tried bound: `y` rises with `x` and is 0 on target.
struct Trial {
    x: f64,
    y: f64,
    /// Bits per value (ratio targets) or PSNR in dB (PSNR targets), as measured.
    measure: f64,
    stream: Vec<u8>,
}

struct Search<'a, T> {
    data: &'a [T],
    shape: &'a [usize],
    config: &'a Config,
    target: Target,
    range: f64,
    x_min: f64,
    x_max: f64,
    trials: Vec<Trial>,
}

impl<'a, T: Element> Search<'a, T> {
    fn new(data: &'a [T], shape: &'a [usize], config: &'a Config, target: Target, range: f64) -> Self {
        // Past twice the range the error stops growing with the bound (the prediction of a
        // point from values within the range is off by less); 60 halvings below the range are
        // below any float's resolution of it.
        let (x_min, x_max) = (range.log2() - 60.0, range.log2() + 1.0);
        Search { data, shape, config, target, range, x_min, x_max, trials: Vec::new() }
    }

    fn bits_per_value(&self, stream: &[u8]) -> f64 {
        8.0 * stream.len() as f64 / self.data.len() as f64
    }

    fn evaluate(&mut self, x: f64) -> Result<()> {
        // The top of the range makes every value fit; beneath the bottom nothing changes.
        let eb = if x <= self.x_min { 0.0 } else { x.exp2().min(f64::MAX) };
        let stream = compress_with_eb(self.data, self.shape, self.config, eb)?;
        let (y, measure) = match self.target {
            Target::Ratio(r) => {
                let bits = self.bits_per_value(&stream);
                ((T::BYTES as f64 * 8.0 / bits).log2() - r.log2(), bits)
            }
            Target::Psnr(p) => {
                let psnr = psnr(self.data, &decompress::<T>(&stream)?.0, self.range);
                (p + PSNR_WINDOW / 2.0 - psnr, psnr)
            }
        };
        self.trials.push(Trial { x, y, measure, stream });
        Ok(())
    }

    fn accepted(&self, t: &Trial) -> bool {
        match self.target {
            Target::Ratio(_) => t.y.abs() <= (1.0 + RATIO_TOLERANCE).log2(),
            Target::Psnr(_) => t.y.abs() <= PSNR_WINDOW / 2.0,
        }
    }

    /// The step from `t` when no secant is available: CEAZ's bit-rate relation (one bit per
    /// value less per doubling of the bound), or 6.02 dB per doubling.
    fn default_step(&self, t: &Trial) -> f64 {
        match self.target {
            Target::Ratio(r) => t.measure - 8.0 * T::BYTES as f64 / r,
            Target::Psnr(_) => -t.y / DB_PER_DOUBLING,
        }
    }

    /// The next `x` to try, or `None` when the search cannot make progress.
    fn next_x(&self, slope_hint: Option<f64>) -> Option<f64> {
        let last = self.trials.last()?;
        let n = self.trials.len();
        let secant = (n >= 2).then(|| (last.y - self.trials[n - 2].y) / (last.x - self.trials[n - 2].x));
        let mut x = match (secant, slope_hint) {
            (Some(s), _) | (None, Some(s)) if s.is_finite() && s > 0.0 => last.x - last.y / s,
            _ => last.x + self.default_step(last),
        };
        // Keep inside the bracket of tried points on either side of the target.
        let below = self.trials.iter().filter(|t| t.y < 0.0).map(|t| t.x).fold(f64::NEG_INFINITY, f64::max);
        let above = self.trials.iter().filter(|t| t.y > 0.0).map(|t| t.x).fold(f64::INFINITY, f64::min);
        if below.is_finite() && above.is_finite() && !(below < x && x < above) {
            x = 0.5 * (below + above);
        }
        // A step no larger than 16 doublings keeps one bad slope from throwing the search away.
        let x = x.clamp(last.x - 16.0, last.x + 16.0).clamp(self.x_min, self.x_max);
        let tried = self.trials.iter().any(|t| (t.x - x).abs() < 1e-9);
        (!tried && x.is_finite()).then_some(x)
    }

    /// Searches from `x0`; returns the secant slope near the answer for a later search.
    /// `slope_hint` (from an earlier search) replaces the default first step.
    fn run(&mut self, x0: f64, slope_hint: Option<f64>, steps: usize) -> Result<Option<f64>> {
        let mut x = Some(x0.clamp(self.x_min, self.x_max));
        while let Some(next) = x {
            if self.trials.len() >= steps {
                break;
            }
            self.evaluate(next)?;
            if self.trials.last().is_some_and(|t| self.accepted(t)) {
                break;
            }
            x = self.next_x(slope_hint);
        }
        let n = self.trials.len();
        Ok((n >= 2)
            .then(|| (self.trials[n - 1].y - self.trials[n - 2].y) / (self.trials[n - 1].x - self.trials[n - 2].x))
            .filter(|s| s.is_finite() && *s > 0.0))
    }

    /// The trial to keep. A PSNR target is a floor: the largest bound at or above it, and if no
    /// trial reached it yet, halve the bound until one does (bound 0 is lossless).
    fn best(mut self) -> Result<Trial> {
        match self.target {
            Target::Ratio(_) => {
                let i = (0..self.trials.len())
                    .min_by(|&a, &b| self.trials[a].y.abs().total_cmp(&self.trials[b].y.abs()))
                    .expect("one trial at least");
                Ok(self.trials.swap_remove(i))
            }
            Target::Psnr(p) => loop {
                let reached = (0..self.trials.len())
                    .filter(|&i| self.trials[i].measure >= p)
                    .max_by(|&a, &b| self.trials[a].x.total_cmp(&self.trials[b].x));
                if let Some(i) = reached {
                    return Ok(self.trials.swap_remove(i));
                }
                let lowest = self.trials.iter().map(|t| t.x).fold(f64::INFINITY, f64::min);
                let x = if lowest <= self.x_min { f64::NEG_INFINITY } else { (lowest - 1.0).max(self.x_min) };
                self.evaluate(x)?;
            },
        }
    }
}

/// PSNR in dB over the finite values: 20 log10(range / RMSE); infinite when nothing changed.
fn psnr<T: Element>(data: &[T], decoded: &[T], range: f64) -> f64 {
    match rms_error(data, decoded) {
        0.0 => f64::INFINITY,
        rms => 20.0 * (range / rms).log10(),
    }
}

/// Root-mean-square error over the finite values of `data` (0 when there are none). Squares
/// are summed relative to the largest error, so that errors near the smallest or largest
/// floats neither underflow to 0 (which read as a lossless result and let a PSNR target take
/// any bound) nor overflow.
pub fn rms_error<T: Element>(data: &[T], decoded: &[T]) -> f64 {
    // (largest |error|, sum of (error / largest)^2, count)
    type Scaled = (f64, f64, usize);
    let merge = |a: Scaled, b: Scaled| -> Scaled {
        let scale = a.0.max(b.0);
        let part = |(s, q, _): Scaled| if s == 0.0 { 0.0 } else { q * (s / scale) * (s / scale) };
        (scale, part(a) + part(b), a.2 + b.2)
    };
    let (scale, ssq, count) = data
        .par_chunks(1 << 16)
        .zip(decoded.par_chunks(1 << 16))
        .map(|(a, b)| {
            let finite = || a.iter().zip(b).filter(|(x, _)| x.to_f64().is_finite());
            let largest = finite().fold(0.0f64, |m, (x, y)| m.max((x.to_f64() - y.to_f64()).abs()));
            finite().fold((largest, 0.0, 0), |(s, q, n), (x, y)| {
                let d = if s == 0.0 { 0.0 } else { (x.to_f64() - y.to_f64()) / s };
                (s, q + d * d, n + 1)
            })
        })
        .reduce(|| (0.0, 0.0, 0), merge);
    match (count, scale) {
        (0, _) => 0.0,
        // An error past the largest float (values of opposite signs near it).
        (_, s) if s.is_infinite() => f64::INFINITY,
        _ => scale * (ssq / count as f64).sqrt(),
    }
}

/// The central box of about `SAMPLE_ELEMENTS` elements.
fn central_box(shape: &[usize]) -> ChunkBox {
    let extent = chunk_shape(shape, SAMPLE_ELEMENTS);
    ChunkBox { origin: shape.iter().zip(&extent).map(|(&n, &e)| (n - e) / 2).collect(), shape: extent }
}

/// Compresses toward `config.bound`, which must be a ratio or PSNR target.
pub fn compress<T: Element>(data: &[T], shape: &[usize], config: &Config) -> Result<Vec<u8>> {
    check_shape(shape, data.len())?;
    let target = Target::from_bound(config.bound)?;
    let (lo, hi) = finite_range(data);
    // Constant, empty or all non-finite: no bound changes anything, so keep the values exactly.
    if !(lo < hi) {
        return compress_with_eb(data, shape, config, 0.0);
    }
    let range = (hi - lo).min(f64::MAX);
    let (mut x0, mut slope) = (target.initial_x(range), None);
    let sampled = data.len() > 4 * SAMPLE_ELEMENTS;
    if sampled {
        let b = central_box(shape);
        let sample = gather(data, shape, &b);
        let mut s = Search::new(&sample, &b.shape, config, target, range);
        slope = s.run(x0, None, SAMPLE_STEPS)?;
        x0 = s.best()?.x;
    }
    let mut full = Search::new(data, shape, config, target, range);
    full.run(x0, slope, if sampled { FULL_STEPS } else { SAMPLE_STEPS })?;
    Ok(full.best()?.stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_error_neither_underflows_nor_overflows() {
        // Errors a, 2a, a, 2a, a: RMS a * sqrt(11 / 5), at any scale a square could leave.
        for a in [1.0, 2.5e-179, 1e-300, 5e-324, 1e300] {
            let (x, y) = ([a, 0.0, a, 0.0, a], [2.0 * a, -2.0 * a, 2.0 * a, -2.0 * a, 2.0 * a]);
            let (got, want) = (rms_error(&x, &y), a * (11.0f64 / 5.0).sqrt());
            assert!((got / want - 1.0).abs() < 1e-12, "{a}: {got} against {want}");
        }
        assert_eq!(rms_error(&[f64::MAX, 1.0], &[-f64::MAX, 1.0]), f64::INFINITY);
        assert_eq!(rms_error(&[1.0, f64::NAN], &[1.0, 0.0]), 0.0);
        assert_eq!(rms_error::<f64>(&[], &[]), 0.0);
    }
}
