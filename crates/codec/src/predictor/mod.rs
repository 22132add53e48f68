//! Predictors. Each one walks a chunk in a fixed order and, for every point, predicts it from
//! already-reconstructed neighbours. The walk is written once per predictor and shared by the
//! encoder and the decoder through [`Visit`], so the two can never disagree on the order or on
//! the prediction arithmetic.

mod dual_quant;
pub mod fitted;
mod interpolation;
mod lorenzo;
mod regression;

use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::quantizer::Quantizer;
use std::borrow::Cow;

pub use interpolation::{lagrange, Arithmetic, DimOrder, LevelBounds, Settings, Spline};
pub use regression::default_block as default_regression_block;

/// Predictor identity as stored in the chunk table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PredictorKind {
    /// First-order Lorenzo with error feedback.
    Lorenzo = 0,
    /// Blocks of Lorenzo or a fitted linear model, whichever the block's estimate favours.
    Regression = 1,
    /// Multilevel spline interpolation (linear or cubic per level, dimension order by sampling).
    Interpolation = 2,
    /// Lorenzo on prequantized integers: no data dependency between points.
    DualQuant = 3,
}

impl PredictorKind {
    pub fn from_code(c: u8) -> Option<PredictorKind> {
        [PredictorKind::Lorenzo, PredictorKind::Regression, PredictorKind::Interpolation, PredictorKind::DualQuant].get(c as usize).copied()
    }
    pub fn name(self) -> &'static str {
        match self {
            PredictorKind::Lorenzo => "lorenzo",
            PredictorKind::Regression => "regression",
            PredictorKind::Interpolation => "interpolation",
            PredictorKind::DualQuant => "dual-quant",
        }
    }
    pub fn from_name(name: &str) -> Option<PredictorKind> {
        (0..4).filter_map(PredictorKind::from_code).find(|k| k.name() == name)
    }
}

/// A predictor with its tunables, as chosen for one chunk.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Predictor {
    Lorenzo,
    Regression { block: usize },
    Interpolation(Settings),
    DualQuant,
}

impl Predictor {
    pub fn kind(&self) -> PredictorKind {
        match self {
            Predictor::Lorenzo => PredictorKind::Lorenzo,
            Predictor::Regression { .. } => PredictorKind::Regression,
            Predictor::Interpolation(_) => PredictorKind::Interpolation,
            Predictor::DualQuant => PredictorKind::DualQuant,
        }
    }
}

/// What a predictor produces for one chunk: one symbol per element, the values it had to keep
/// exactly (in visiting order), and its own side information (parameters, coefficients).
#[derive(Clone, Default)]
pub struct Coded<T> {
    pub symbols: Vec<u16>,
    pub exact: Vec<T>,
    pub side: Vec<u8>,
    /// Positions in `symbols` (visiting order, ascending) of the "don't care" cells.
    pub absent: Vec<usize>,
}

/// Encoder and decoder share each predictor's walk through this: given the value at the point
/// (meaningless when decoding) and its prediction, return the reconstructed value.
pub trait Visit<T: Element> {
    /// Whether walks should use 512-bit vectors where the CPU has them. Measured per visitor:
    /// they speed up decoding, but slow encoding down (its longer vector code pays for the
    /// wider units less than it loses to them).
    const WIDE_VECTORS: bool = false;

    /// Whether `visit` and `visit_run` use the values they are given. A decoder only writes
    /// them, so a walk may hand it a placeholder instead of reading a buffer not written yet.
    const READS_VALUES: bool = true;

    fn visit(&mut self, x: T, pred: f64) -> T;

    /// `visit` on a run of points whose predictions are all known up front (`pred(k)` for the
    /// `k`th, called only with `k < vals.len()`): `vals` holds their values (meaningless when
    /// decoding) and receives the reconstructions. The visitors below do the common case for
    /// the whole run without branches, so it vectorizes, then revisit the few exceptions; the
    /// result must be bit for bit that of `visit` in turn.
    fn visit_run(&mut self, vals: &mut [T], pred: impl Fn(usize) -> f64);

    /// Lanes: runs of the walk coded in lockstep, so that their dependency chains (each point
    /// predicted from the one before it) overlap in the processor. `begin_lanes` opens runs
    /// starting `starts[m]` visits past the current point and sets `slots[m]` for each;
    /// `visit_lane` codes the point `at` visits past the current one, as `visit` would in
    /// turn, given its run's slot; `end_lanes` closes `n` visits, which the lanes must have
    /// covered exactly. Values kept exactly keep the order of the visits, whatever the order
    /// the lanes reach them in.
    fn begin_lanes(&mut self, starts: &[usize], slots: &mut [usize]);
    fn visit_lane(&mut self, at: usize, x: T, pred: f64, slot: &mut usize) -> T;
    fn end_lanes(&mut self, n: usize);
}

/// Quantizes each visited point into the next slot of `symbols`, keeping what it cannot code.
pub struct EncodeVisitor<'a, T> {
    q: Quantizer,
    symbols: &'a mut [u16],
    pos: usize,
    pub exact: Vec<T>,
    /// Positions (in this visitor's `symbols`) of the "don't care" cells met.
    pub absent: Vec<usize>,
    /// Per lane, in its own order: values kept exactly, and "don't care" positions. Lanes
    /// cover consecutive runs, so joining them lane after lane restores the order of visits.
    lane_exact: Vec<Vec<T>>,
    lane_absent: Vec<Vec<usize>>,
}

impl<'a, T: Element> EncodeVisitor<'a, T> {
    pub fn new(q: &Quantizer, symbols: &'a mut [u16]) -> Self {
        EncodeVisitor { q: *q, symbols, pos: 0, exact: Vec::new(), absent: Vec::new(), lane_exact: Vec::new(), lane_absent: Vec::new() }
    }
}

impl<T: Element> Visit<T> for EncodeVisitor<'_, T> {
    #[inline(always)]
    fn visit(&mut self, x: T, pred: f64) -> T {
        let r = self.visit_at(self.pos, x, pred);
        self.pos += 1;
        r
    }

    #[inline(always)]
    fn visit_run(&mut self, vals: &mut [T], pred: impl Fn(usize) -> f64) {
        let n = vals.len();
        if !self.q.quantize_run(vals, &pred, &mut self.symbols[self.pos..self.pos + n]) {
            // The exceptions (values kept exactly, "don't care" cells) still hold their input.
            for (k, v) in vals.iter_mut().enumerate() {
                if self.symbols[self.pos + k] == 0 {
                    *v = self.visit_at(self.pos + k, *v, pred(k));
                }
            }
        }
        self.pos += n;
    }

    /// A lane's slot is its index (`starts` must be increasing).
    fn begin_lanes(&mut self, starts: &[usize], slots: &mut [usize]) {
        if self.lane_exact.len() < starts.len() {
            self.lane_exact.resize_with(starts.len(), Vec::new);
            self.lane_absent.resize_with(starts.len(), Vec::new);
        }
        for (m, slot) in slots.iter_mut().enumerate() {
            *slot = m;
        }
    }

    #[inline(always)]
    fn visit_lane(&mut self, at: usize, x: T, pred: f64, slot: &mut usize) -> T {
        let at = self.pos + at;
        if x.to_f64().is_nan() {
            self.lane_absent[*slot].push(at);
            self.symbols[at] = self.q.zero_symbol();
            return self.q.recover(self.q.zero_symbol(), pred);
        }
        let (s, r) = self.q.quantize_value(x, pred);
        self.symbols[at] = s;
        if s == 0 {
            self.lane_exact[*slot].push(x);
        }
        r
    }

    fn end_lanes(&mut self, n: usize) {
        for (exact, absent) in self.lane_exact.iter_mut().zip(&mut self.lane_absent) {
            self.exact.append(exact);
            self.absent.append(absent);
        }
        self.pos += n;
    }
}

impl<T: Element> EncodeVisitor<'_, T> {
    /// Codes `x` into `symbols[at]`.
    #[inline(always)]
    fn visit_at(&mut self, at: usize, x: T, pred: f64) -> T {
        // A NaN reaching a predictor marks a "don't care" cell (real NaNs are patched out
        // before prediction, see `nonfinite`): it takes the zero-residual code, the cheapest
        // there is, and becomes whatever its prediction is, exactly as the decoder rebuilds it.
        if x.to_f64().is_nan() {
            self.absent.push(at);
            self.symbols[at] = self.q.zero_symbol();
            return self.q.recover(self.q.zero_symbol(), pred);
        }
        let (s, r) = self.q.quantize(x, pred, &mut self.exact);
        self.symbols[at] = s;
        r
    }
}

pub struct DecodeVisitor<'a, T> {
    q: Quantizer,
    symbols: &'a [u16],
    pos: usize,
    exact: &'a [T],
    next_exact: usize,
}

impl<'a, T: Element> DecodeVisitor<'a, T> {
    /// Checks up front that the exact values match the unpredictable symbols, so the walk
    /// itself cannot run out of either.
    pub fn new(q: &Quantizer, symbols: &'a [u16], exact: &'a [T]) -> Result<Self> {
        let unpredictable = count_zeros(symbols);
        if unpredictable != exact.len() {
            return Err(corrupt!("{unpredictable} unpredictable symbols but {} stored values", exact.len()));
        }
        Ok(Self::counted(q, symbols, exact))
    }

    /// For callers that already matched `exact` to the 0 symbols (a mismatch would panic).
    pub fn counted(q: &Quantizer, symbols: &'a [u16], exact: &'a [T]) -> Self {
        DecodeVisitor { q: *q, symbols, pos: 0, exact, next_exact: 0 }
    }
}

impl<T: Element> Visit<T> for DecodeVisitor<'_, T> {
    const WIDE_VECTORS: bool = true;
    const READS_VALUES: bool = false;

    #[inline(always)]
    fn visit(&mut self, _x: T, pred: f64) -> T {
        let s = self.symbols[self.pos];
        self.pos += 1;
        if s != 0 {
            return self.q.recover(s, pred);
        }
        // In range: `new` matched the count of 0 symbols with the stored values.
        self.next_exact += 1;
        self.exact[self.next_exact - 1]
    }

    #[inline(always)]
    fn visit_run(&mut self, vals: &mut [T], pred: impl Fn(usize) -> f64) {
        let n = vals.len();
        let symbols = &self.symbols[self.pos..self.pos + n];
        if !self.q.recover_run(symbols, pred, vals) {
            for (v, _) in vals.iter_mut().zip(symbols).filter(|(_, &s)| s == 0) {
                self.next_exact += 1;
                *v = self.exact[self.next_exact - 1];
            }
        }
        self.pos += n;
    }

    /// A lane's slot is the index of the next exact value it will take: those of the visits
    /// before its run come first.
    fn begin_lanes(&mut self, starts: &[usize], slots: &mut [usize]) {
        let mut covered = 0;
        let mut next = self.next_exact;
        for (slot, &start) in slots.iter_mut().zip(starts) {
            next += count_zeros(&self.symbols[self.pos + covered..self.pos + start]);
            covered = start;
            *slot = next;
        }
    }

    #[inline(always)]
    fn visit_lane(&mut self, at: usize, _x: T, pred: f64, slot: &mut usize) -> T {
        let s = self.symbols[self.pos + at];
        if s != 0 {
            return self.q.recover(s, pred);
        }
        // In range: the count of 0 symbols matches the stored values (see `new`).
        *slot += 1;
        self.exact[*slot - 1]
    }

    fn end_lanes(&mut self, n: usize) {
        self.next_exact += count_zeros(&self.symbols[self.pos..self.pos + n]);
        self.pos += n;
    }
}

/// Symbols per block of `ZeroCounts`; Huffman segments hold whole blocks.
pub const ZERO_BLOCK: usize = 4096;

crate::cpu::fast_fn!(
    /// How many symbols are 0 (unpredictable).
    pub(crate) fn count_zeros(symbols: &[u16]) -> usize => count_zeros_in
);

#[inline(always)]
fn count_zeros_in(symbols: &[u16]) -> usize {
    crate::cpu::count_where(symbols, |&s| s == 0)
}

/// Where the unpredictable (0) symbols of a chunk are, as prefix sums of their count per block
/// of `ZERO_BLOCK` symbols: any range's count then takes two lookups and two partial blocks.
/// The entropy decoder fills it while a segment's symbols are still in cache, which spares
/// the walks a pass over the whole symbol array.
#[derive(Clone)]
pub struct ZeroCounts {
    prefix: Vec<usize>,
}

impl ZeroCounts {
    pub fn of(symbols: &[u16]) -> ZeroCounts {
        use rayon::prelude::*;
        ZeroCounts::from_blocks(symbols.par_chunks(ZERO_BLOCK).map(count_zeros).collect())
    }

    /// From the counts of consecutive blocks of `ZERO_BLOCK` symbols (the last may be shorter).
    pub fn from_blocks(blocks: Vec<usize>) -> ZeroCounts {
        let mut prefix = Vec::with_capacity(blocks.len() + 1);
        prefix.push(0);
        for c in blocks {
            prefix.push(prefix[prefix.len() - 1] + c);
        }
        ZeroCounts { prefix }
    }

    /// Counts for every symbol block of `segment` (a slice starting on a block boundary).
    pub fn blocks_of(segment: &[u16]) -> Vec<usize> {
        segment.chunks(ZERO_BLOCK).map(count_zeros).collect()
    }

    pub fn total(&self) -> usize {
        self.prefix[self.prefix.len() - 1]
    }

    /// Zeros among `symbols[start..end]` (`symbols` the slice these counts describe).
    pub fn count(&self, symbols: &[u16], start: usize, end: usize) -> usize {
        let (first, last) = (start.div_ceil(ZERO_BLOCK), end / ZERO_BLOCK);
        if first >= last {
            return count_zeros(&symbols[start..end]);
        }
        count_zeros(&symbols[start..first * ZERO_BLOCK]) + self.prefix[last] - self.prefix[first]
            + count_zeros(&symbols[last * ZERO_BLOCK..end])
    }
}

/// Predicts and quantizes one chunk (C-order, `shape`).
pub fn encode<T: Element>(p: &Predictor, data: Cow<'_, [T]>, shape: &[usize], q: &Quantizer) -> Coded<T> {
    match *p {
        Predictor::Lorenzo => lorenzo::encode(&data, shape, q),
        Predictor::Regression { block } => regression::encode(&data, shape, q, block),
        Predictor::Interpolation(settings) => interpolation::encode(data.into_owned(), shape, q, settings).0,
        Predictor::DualQuant => dual_quant::encode(&data, shape, q),
    }
}

/// `encode`, and the values a decoder will rebuild where the walk leaves them behind (Lorenzo
/// and interpolation rebuild in place what they predict from); `None` for the other predictors.
pub fn encode_rebuilding<T: Element>(p: &Predictor, data: Cow<'_, [T]>, shape: &[usize], q: &Quantizer) -> (Coded<T>, Option<Vec<T>>) {
    match *p {
        Predictor::Lorenzo => {
            let (coded, padded) = lorenzo::encode_padded(&data, shape, q);
            (coded, Some(padded.to_dense()))
        }
        Predictor::Interpolation(settings) => {
            let (coded, rebuilt) = interpolation::encode(data.into_owned(), shape, q, settings);
            (coded, Some(rebuilt))
        }
        Predictor::Regression { .. } | Predictor::DualQuant => (encode(p, data, shape, q), None),
    }
}

/// The predictor (with the settings that fix its visiting order) a chunk was coded with, from
/// its kind and side information.
pub fn from_side(kind: PredictorKind, side: &[u8]) -> Result<Predictor> {
    Ok(match kind {
        PredictorKind::Lorenzo => Predictor::Lorenzo,
        PredictorKind::DualQuant => Predictor::DualQuant,
        PredictorKind::Regression => Predictor::Regression { block: regression::block_of(side)? },
        PredictorKind::Interpolation => Predictor::Interpolation(interpolation::settings(side)?),
    })
}

/// The places in `p`'s walk over `shape` (the order of its symbols) of the cells `mask` leaves
/// out. Interpolation finds them from its passes alone; the other walks code a stand-in with
/// the same absent cells.
pub fn absent_in_walk(p: &Predictor, shape: &[usize], mask: &[bool], q: &Quantizer) -> Vec<usize> {
    match *p {
        Predictor::Interpolation(settings) => interpolation::absent_in_walk(shape, settings, mask),
        _ => {
            let stand_in: Vec<f64> = mask.iter().map(|&m| if m { 0.0 } else { f64::NAN }).collect();
            encode(p, Cow::Owned(stand_in), shape, q).absent
        }
    }
}

/// Rebuilds one chunk from its symbols (with their zero counts, when the entropy decoder made
/// them), exact values and side information.
pub fn decode<T: Element>(
    kind: PredictorKind,
    shape: &[usize],
    q: &Quantizer,
    symbols: &[u16],
    zeros: Option<&ZeroCounts>,
    exact: &[T],
    side: &[u8],
) -> Result<Vec<T>> {
    // Interpolation and dual-quant place exact values by the zero symbols: counted by the
    // entropy decoder when it made the symbols, else here.
    let zeros = || zeros.map_or_else(|| Cow::Owned(ZeroCounts::of(symbols)), Cow::Borrowed);
    match kind {
        PredictorKind::Lorenzo => lorenzo::decode(shape, q, symbols, exact, side),
        PredictorKind::Regression => regression::decode(shape, q, symbols, exact, side),
        PredictorKind::Interpolation => interpolation::decode(shape, q, symbols, &zeros(), exact, side),
        PredictorKind::DualQuant => dual_quant::decode(shape, q, symbols, &zeros(), exact, side),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantizer::DEFAULT_RADIUS;
    use proptest::prelude::*;

    /// Values meant to hit every exception of a run: far from their prediction (beyond the
    /// radius), "don't care" (NaN), at the float limits, and plain ones.
    fn value() -> impl Strategy<Value = (f32, f64)> {
        prop_oneof![
            4 => (-10.0f32..10.0, -0.2f64..0.2).prop_map(|(x, d)| (x, x as f64 + d)),
            1 => (-10.0f32..10.0, -1e4f64..1e4).prop_map(|(x, d)| (x, x as f64 + d)),
            1 => Just((f32::NAN, 1.5)),
            1 => Just((f32::MAX, -(f32::MAX as f64))),
            1 => (-10.0f32..10.0).prop_map(|x| (x, x as f64)),
        ]
    }

    #[test]
    fn what_an_encoder_rebuilds_is_what_its_decoder_rebuilds() {
        let shape = [9usize, 16, 7];
        let n: usize = shape.iter().product();
        let mut next = crate::test_rng::xorshift(11);
        // A smooth field with noise, spikes and "don't care" cells.
        let data: Vec<f64> = (0..n)
            .map(|i| match next() % 50 {
                0 => f64::NAN,
                1 => 1e6,
                r => (i as f64 * 0.01).sin() + r as f64 * 1e-3,
            })
            .collect();
        let q = Quantizer::new(1e-3, DEFAULT_RADIUS);
        let interpolation = interpolation::Settings {
            spline: interpolation::Spline::Cubic,
            order: interpolation::DimOrder::Forward,
            bounds: interpolation::LevelBounds::all().next().unwrap(),
            arithmetic: interpolation::Arithmetic::Binary64,
        };
        for p in [Predictor::Lorenzo, Predictor::Interpolation(interpolation)] {
            let (coded, rebuilt) = encode_rebuilding(&p, Cow::Borrowed(&data), &shape, &q);
            let decoded = decode(p.kind(), &shape, &q, &coded.symbols, None, &coded.exact, &coded.side).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&rebuilt.unwrap()), bits(&decoded), "{:?}", p.kind());
        }
    }

    proptest! {
        #[test]
        fn runs_code_and_rebuild_bit_for_bit_like_single_visits(
            points in prop::collection::vec(value(), 1..300),
            eb in prop_oneof![Just(0.0f64), Just(1e-3), Just(0.25), Just(1e-40), Just(1e300)],
            binary32 in any::<bool>(),
        ) {
            let q = Quantizer::new(eb, DEFAULT_RADIUS).in_single(binary32);
            let preds: Vec<f64> = points.iter().map(|p| p.1).collect();
            let n = points.len();
            let (mut one, mut run) = (vec![0u16; n], vec![0u16; n]);
            let mut single = EncodeVisitor::new(&q, &mut one);
            let by_point: Vec<f32> = points.iter().map(|&(x, p)| single.visit(x, p)).collect();
            let mut runs = EncodeVisitor::new(&q, &mut run);
            let mut by_run: Vec<f32> = points.iter().map(|p| p.0).collect();
            runs.visit_run(&mut by_run, |k| preds[k]);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&by_point), bits(&by_run));
            prop_assert_eq!((&single.exact.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), &single.absent),
                            (&runs.exact.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), &runs.absent));
            let exact = runs.exact;
            for (k, (&(x, _), &r)) in points.iter().zip(&by_run).enumerate() {
                if run[k] != 0 && !x.is_nan() {
                    prop_assert!((r as f64 - x as f64).abs() <= eb, "{x} coded as {r} under {eb}");
                }
            }
            prop_assert_eq!(&one, &run);
            let mut decoded = vec![0.0f32; n];
            DecodeVisitor::new(&q, &run, &exact).unwrap().visit_run(&mut decoded, |k| preds[k]);
            prop_assert_eq!(bits(&decoded), bits(&by_run));
        }
    }
}
