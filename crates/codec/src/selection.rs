//! Chooses the predictor for a field by trying the candidates on sample boxes spread over the
//! array and keeping the one whose quantization codes have the lowest estimated size.

use crate::element::Element;
use crate::entropy::frames::packed_frame;
use crate::entropy::huffman::{Codebook, Histogram};
use crate::grid::{gather, num_elements, ChunkBox};
use crate::nonfinite;
use crate::predictor::fitted::{self, Weights};
use crate::predictor::{self, Arithmetic, Coded, DimOrder, LevelBounds, Predictor, PredictorKind, Settings, Spline};
use crate::quantizer::Quantizer;
use crate::{Config, Preset};
use rayon::prelude::*;
use std::borrow::Cow;

/// Elements per sample box: many small boxes judge the predictor family (spread matters on
/// heterogeneous fields), one large box the interpolation details (they depend on how many
/// levels the box has). How many elements to sample in all: a share of the array, within
/// limits that keep the estimate steady on small arrays and cheap on large ones.
const FAMILY_BOX_ELEMENTS: usize = 1 << 15;
const TUNING_BOX_ELEMENTS: usize = 1 << 18;
const SAMPLE_FRACTION: f64 = 0.01;
const MIN_SAMPLE_ELEMENTS: usize = 1 << 17;
const MAX_SAMPLE_ELEMENTS: usize = 1 << 19;
const SMALL_ARRAY_SHARE: usize = 4;

fn interpolation(spline: Spline, order: DimOrder, arithmetic: Arithmetic) -> Predictor {
    Predictor::Interpolation(Settings { spline, order, bounds: LevelBounds::all().next().expect("a default tuning"), arithmetic })
}

/// Cubic interpolation in each dimension order; the spline is settled afterwards.
fn interpolation_candidates(ndim: usize) -> Vec<Predictor> {
    let orders: &[DimOrder] = if ndim == 1 { &[DimOrder::Forward] } else { &[DimOrder::Forward, DimOrder::Backward] };
    orders.iter().map(|&order| interpolation(Spline::Cubic, order, Arithmetic::Binary64)).collect()
}

fn candidates(config: &Config, ndim: usize, lossless: bool) -> Vec<Predictor> {
    let regression = Predictor::Regression { block: predictor::default_regression_block(ndim) };
    match (config.predictor, config.preset) {
        // Dual quantization divides by the bound; a lossless request takes the Lorenzo path.
        (Some(PredictorKind::DualQuant), _) if lossless => vec![Predictor::Lorenzo],
        (Some(PredictorKind::DualQuant), _) => vec![Predictor::DualQuant],
        (Some(PredictorKind::Lorenzo), _) => vec![Predictor::Lorenzo],
        (Some(PredictorKind::Regression), _) => vec![regression],
        // Speed: no sampling. Refining the contiguous dimension first leaves the other passes
        // contiguous rows, the fastest walk; binary32 arithmetic fills twice the vector lanes.
        (Some(PredictorKind::Interpolation) | None, Preset::Speed) => {
            vec![interpolation(Spline::Cubic, if ndim > 1 { DimOrder::Backward } else { DimOrder::Forward }, Arithmetic::Binary32)]
        }
        (Some(PredictorKind::Interpolation), Preset::Ratio) => interpolation_candidates(ndim),
        (None, Preset::Ratio) => {
            let mut c = interpolation_candidates(ndim);
            c.extend([regression, Predictor::Lorenzo]);
            c
        }
    }
}

/// Sample boxes: the whole array when it is small, else boxes on a regular lattice.
fn sample_boxes(shape: &[usize], box_elements: usize) -> Vec<ChunkBox> {
    let n = num_elements(shape);
    let extent = box_extent(shape, box_elements);
    let per_box = num_elements(&extent);
    // At most a quarter of a small array: every candidate is a trial compression of the
    // sample, and on a 64^3 chunk whole-array trials made choosing cost 9 compressions.
    let wanted = ((n as f64 * SAMPLE_FRACTION) as usize).clamp(MIN_SAMPLE_ELEMENTS, MAX_SAMPLE_ELEMENTS).min(n / SMALL_ARRAY_SHARE);
    if wanted * 2 >= n {
        return vec![ChunkBox { origin: vec![0; shape.len()], shape: shape.to_vec() }];
    }
    spread_boxes(shape, &extent, wanted.div_ceil(per_box))
}

/// The extent of sample boxes of about `box_elements` in an array of `shape`. Edges of 2^k + 1
/// put a box's last point on its coarsest lattice, so the sample measures interpolation inside
/// the data and not the one-sided predictions of its artificial faces, which would otherwise
/// dominate at loose bounds and favour the wrong spline.
fn box_extent(shape: &[usize], box_elements: usize) -> Vec<usize> {
    let edge = (1usize << (box_elements.trailing_zeros() as usize / shape.len())) + 1;
    shape.iter().map(|&s| s.min(edge)).collect()
}

/// `count` boxes of `extent` in an array of `shape`, spread along a low-discrepancy sequence
/// per dimension (golden-ratio steps).
fn spread_boxes(shape: &[usize], extent: &[usize], count: usize) -> Vec<ChunkBox> {
    (0..count)
        .map(|k| {
            let origin = shape
                .iter()
                .zip(extent)
                .enumerate()
                .map(|(d, (&s, &e))| {
                    let phi = [0.618_033_988_7, 0.754_877_666_2, 0.569_840_290_9, 0.724_491_959_0][d];
                    (((k as f64 + 0.5) * phi).fract() * (s - e + 1) as f64) as usize
                })
                .collect();
            ChunkBox { origin, shape: extent.to_vec() }
        })
        .collect()
}

/// Compressed size of `p` on the samples, through the real entropy stages: the symbols' entropy
/// alone misses how much zstd gains on long runs of one code, which decides the loose bounds.
/// With `pooled`, the samples are unit blocks whose codes share one bitstream and one lossless
/// pass (see `blockset`); otherwise each sample is coded like a chunk of its own.
fn estimate<T: Element>(p: &Predictor, samples: &[(Vec<T>, Vec<usize>)], q: &Quantizer, preset: Preset, pooled: bool) -> usize {
    let coded: Vec<Coded<T>> = samples.par_iter().map(|(data, shape)| predictor::encode(p, Cow::Borrowed(data), shape, q)).collect();
    coded_size(&coded, preset, pooled)
}

/// Compressed size of the samples' codes (see `estimate`).
fn coded_size<T: Element>(coded: &[Coded<T>], preset: Preset, pooled: bool) -> usize {
    let mut hist = Histogram::default();
    for c in coded {
        hist.add_symbols(&c.symbols);
    }
    let codebook = Codebook::of(&hist);
    let mut bits = Vec::new();
    // The codebook is part of the cost: on small arrays it can outweigh the codes themselves.
    codebook.write(&mut bits);
    let mut size = bits.len();
    let pack = |bits: &[u8]| packed_frame(preset, bits).map_or(bits.len(), |packed| packed.len().min(bits.len()));
    bits.clear();
    for c in coded {
        if !pooled {
            bits.clear();
        }
        codebook.encode(&c.symbols, &mut bits).expect("codebook built from these symbols");
        size += c.exact.len() * T::BYTES + c.side.len();
        if !pooled {
            size += pack(&bits);
        }
    }
    if pooled {
        size += pack(&bits);
    }
    size
}

/// Sample-based costs, remembered so a candidate met again in a later round is not re-run.
struct Trials<'a, T> {
    samples: &'a [(Vec<T>, Vec<usize>)],
    q: &'a Quantizer,
    preset: Preset,
    pooled: bool,
    seen: Vec<(Predictor, usize)>,
}

impl<T: Element> Trials<'_, T> {
    /// The cheapest of `cands`; candidates not tried yet are estimated in parallel (the
    /// samples alone are too few to keep every core busy).
    fn cheapest(&mut self, cands: &[Predictor]) -> Predictor {
        let fresh: Vec<Predictor> = cands.iter().filter(|p| !self.seen.iter().any(|(s, _)| s == *p)).copied().collect();
        let costs: Vec<usize> = fresh.par_iter().map(|p| estimate(p, self.samples, self.q, self.preset, self.pooled)).collect();
        self.seen.extend(fresh.into_iter().zip(costs));
        // The first of equal costs wins, as the candidates are listed in order of preference.
        cands.iter().copied().min_by_key(|p| self.cost(p)).unwrap_or(cands[0])
    }

    /// The estimated cost of `p`, if tried (else `usize::MAX`).
    fn cost(&self, p: &Predictor) -> usize {
        self.seen.iter().find(|(s, _)| s == p).map_or(usize::MAX, |&(_, c)| c)
    }
}

/// The speed preset's check of Lorenzo against its interpolation: sample boxes of this many
/// elements, about `SPEED_SAMPLE_SHARE` of the array within these limits (a few percent of a
/// 32^3 array's work, a fraction of a percent of a large one's), and the share of
/// interpolation's size Lorenzo must code the sample in to be used: it decodes at about half
/// interpolation's speed, so it must be clearly smaller.
const SPEED_BOX_ELEMENTS: usize = 1 << 12;
const SPEED_SAMPLE_SHARE: usize = 64;
const SPEED_SAMPLE_MAX: usize = 1 << 14;
const SPEED_LORENZO_GAIN: f64 = 0.8;

/// The speed preset's predictor: its interpolation, unless Lorenzo codes a small sample much
/// smaller. On some real fields (PeleLMeX species mass fractions at tight bounds) Lorenzo codes
/// the array 25 times smaller, which a sampling-free preset could never see.
fn choose_speed<T: Element>(data: &[T], shape: &[usize], q: &Quantizer, interpolation: Predictor) -> Predictor {
    let n = num_elements(shape);
    if n < 2 * SPEED_BOX_ELEMENTS {
        return interpolation;
    }
    let wanted = (n / SPEED_SAMPLE_SHARE).clamp(SPEED_BOX_ELEMENTS, SPEED_SAMPLE_MAX);
    let extent = box_extent(shape, SPEED_BOX_ELEMENTS);
    let boxes: Vec<ChunkBox> = spread_boxes(shape, &extent, wanted.div_ceil(num_elements(&extent)));
    let samples: Vec<(Vec<T>, Vec<usize>)> =
        boxes.iter().map(|b| (nonfinite::fill(&gather(data, shape, b)).0.into_owned(), b.shape.clone())).collect();
    let [interp, lorenzo] = [interpolation, Predictor::Lorenzo].map(|p| estimate(&p, &samples, q, Preset::Speed, false) as f64);
    if lorenzo < SPEED_LORENZO_GAIN * interp {
        Predictor::Lorenzo
    } else {
        interpolation
    }
}

/// The predictor for a whole array: first the predictor family and dimension order, then, for
/// interpolation, the spline and the level-wise bounds.
pub fn choose<T: Element>(data: &[T], shape: &[usize], q: &Quantizer, config: &Config) -> Predictor {
    let cands = candidates(config, shape.len(), q.eb() == 0.0);
    if cands.len() == 1 {
        return match cands[0] {
            p @ Predictor::Interpolation(_) if config.preset == Preset::Speed && config.predictor.is_none() && q.eb() > 0.0 => {
                choose_speed(data, shape, q, p)
            }
            p => p,
        };
    }
    let samples = |box_elements| -> Vec<(Vec<T>, Vec<usize>)> {
        sample_boxes(shape, box_elements)
            .iter()
            .map(|b| (nonfinite::fill(&gather(data, shape, b)).0.into_owned(), b.shape.clone()))
            .collect()
    };
    let family = samples(FAMILY_BOX_ELEMENTS);
    let mut trials = Trials { samples: &family, q, preset: config.preset, pooled: false, seen: Vec::new() };
    match trials.cheapest(&cands) {
        Predictor::Interpolation(Settings { order, .. }) => {
            // Boxes of at most a quarter of the array, like the family sample.
            let n = num_elements(shape);
            let tuning_box = TUNING_BOX_ELEMENTS.min((n / SMALL_ARRAY_SHARE).max(1).next_power_of_two() / 2).max(FAMILY_BOX_ELEMENTS);
            let large = samples(tuning_box);
            tune_interpolation(Trials { samples: &large, seen: Vec::new(), ..trials }, order, Tuning::Joint)
        }
        other => other,
    }
}

/// How `tune_interpolation` searches splines and level-wise bounds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tuning {
    /// The greedy choice, then, where it codes the samples in `JOINT_MIN_BYTES` or more, every
    /// (spline, bounds) pair. A spline's best bounds are not another's: on a 2-D climate-like
    /// field at rel 1e-3 the cubic spline won under the default bounds and was kept, while the
    /// linear one with untightened levels codes the array in 9.6% fewer bytes.
    Joint,
    /// The spline under the default bounds, then the bounds: 5 trials instead of 9, for unit
    /// blocks, whose tuning is repeated for every unit tried in a write's (level, field).
    Greedy,
}

const SPLINES: [Spline; 3] = [Spline::Cubic, Spline::Natural, Spline::Linear];

/// Samples coded in fewer bytes are mostly tables and framing, which do not grow with the array
/// the sample stands for, and more candidates only give that noise more chances: on the smooth
/// 3-D field at rel 0.047 a pair 25% smaller on the sample (105 bytes against 141) was 26%
/// larger on the array, and fixed-ratio and PSNR searches, which step through such bounds,
/// missed their targets.
const JOINT_MIN_BYTES: usize = 4096;

/// The spline and the level-wise bounds for interpolation in dimension `order`.
fn tune_interpolation<T: Element>(mut trials: Trials<T>, order: DimOrder, tuning: Tuning) -> Predictor {
    let with = |spline, bounds| Predictor::Interpolation(Settings { spline, order, bounds, arithmetic: Arithmetic::Binary64 });
    let spline = match trials.cheapest(&SPLINES.map(|s| interpolation(s, order, Arithmetic::Binary64))) {
        Predictor::Interpolation(Settings { spline, .. }) => spline,
        _ => Spline::Cubic,
    };
    let greedy = trials.cheapest(&LevelBounds::all().map(|bounds| with(spline, bounds)).collect::<Vec<_>>());
    if tuning == Tuning::Greedy || trials.cost(&greedy) < JOINT_MIN_BYTES {
        return greedy;
    }
    // The greedy choice first, so that ties keep it; the pairs tried already are not run again.
    let pairs: Vec<Predictor> =
        std::iter::once(greedy).chain(LevelBounds::all().flat_map(|bounds| SPLINES.map(|spline| with(spline, bounds)))).collect();
    trials.cheapest(&pairs)
}

/// The predictor for unit blocks of `ndim` dimensions under bound `eb` when there is nothing to
/// choose (one candidate, and no fitted prediction to try), so that no sample need be drawn.
pub fn fixed_for_blocks(config: &Config, ndim: usize, eb: f64, regression_block: usize) -> Option<Predictor> {
    let cands = candidates(config, ndim, eb == 0.0);
    let fitted = config.predictor.is_none() && config.preset == Preset::Ratio && eb > 0.0 && Weights::supports(ndim);
    match cands[..] {
        [Predictor::Regression { .. }] if !fitted => Some(Predictor::Regression { block: regression_block }),
        [p] if !fitted => Some(p),
        _ => None,
    }
}

/// Fitted prediction is taken only where it codes the sample this much smaller than the best
/// other predictor: it costs several times interpolation's time to code and to decode, and a
/// sample's close call can go the wrong way for the whole level. Against taking it wherever it
/// was smaller, the benchmark hierarchies' default writes came out 0.7% smaller (geomean of 64
/// cases; a WarpX-like field 25%, the Nyx-like density at 1e-3 4%; at most 1% larger) and 6%
/// faster; at 0.95 the tight bounds lost up to 2.2%.
const FITTED_GAIN: f64 = 0.97;

/// The predictor for a set of unit blocks predicted one by one (`blockset`), from `samples`
/// (full blocks, finite values): regression takes `regression_block`. With weights (fitted on
/// `samples`), fitted prediction (see `predictor::fitted`) codes `judge()`, blocks of the same
/// shape drawn as they come (absent cells NaN), smaller than the predictor returned; `judge`
/// is called only where fitted prediction is tried.
pub fn choose_for_blocks<T: Element>(
    samples: &[(Vec<T>, Vec<usize>)],
    judge: impl FnOnce() -> Vec<(Vec<T>, Vec<usize>)>,
    q: &Quantizer,
    config: &Config,
    regression_block: usize,
    array_cells: usize,
) -> (Predictor, Option<Weights>) {
    let standard = choose_standard_for_blocks(samples, q, config, regression_block);
    let ndim = samples.first().map_or(1, |(_, shape)| shape.len());
    // Only where the choice is the codec's: a predictor asked for is the one used.
    if config.predictor.is_some() || config.preset != Preset::Ratio || q.eb() == 0.0 || !Weights::supports(ndim) {
        return (standard, None);
    }
    // Below half a bit per cell the codes are mostly zeros, whose runs the lossless stage packs:
    // there samples of a few hundred bytes misjudge whole levels, and the smooth predictors
    // win anyway; fitted prediction pays where residuals span many codes.
    let judge = judge();
    let best = estimate(&standard, &judge, q, config.preset, true);
    let cells: usize = judge.iter().map(|(data, _)| data.len()).sum();
    if best * 16 < cells {
        return (standard, None);
    }
    let Some(weights) = Weights::fit(samples, q.eb()) else { return (standard, None) };
    let Some(walker) = judge.first().and_then(|(_, shape)| fitted::Walker::new(shape, &weights)) else { return (standard, None) };
    if judge.iter().any(|(_, shape)| shape != walker.shape()) {
        return (standard, None);
    }
    let coded: Vec<Coded<T>> = judge.par_iter().map(|(data, _)| fitted::encode(data, q, &walker).0).collect();
    // The weights are stored too (and read with every region): their share of the judged cells.
    let mut table = Vec::new();
    weights.write(&mut table);
    let fitted = coded_size(&coded, config.preset, true) + table.len() * cells / array_cells.max(cells);
    (standard, ((fitted as f64) < FITTED_GAIN * best as f64).then_some(weights))
}

/// `p` for blocks like `samples` (see `choose_for_blocks`): an interpolation chosen on blocks of
/// another shape, its spline and level bounds tuned again on these; any other predictor as it is.
pub fn retune_for_blocks<T: Element>(samples: &[(Vec<T>, Vec<usize>)], q: &Quantizer, config: &Config, p: Predictor) -> Predictor {
    match p {
        Predictor::Interpolation(Settings { order, .. }) if config.predictor.is_none() && config.preset == Preset::Ratio => {
            tune_interpolation(Trials { samples, q, preset: config.preset, pooled: true, seen: Vec::new() }, order, Tuning::Greedy)
        }
        p => p,
    }
}

fn choose_standard_for_blocks<T: Element>(
    samples: &[(Vec<T>, Vec<usize>)],
    q: &Quantizer,
    config: &Config,
    regression_block: usize,
) -> Predictor {
    let ndim = samples.first().map_or(1, |(_, shape)| shape.len());
    let cands: Vec<Predictor> = candidates(config, ndim, q.eb() == 0.0)
        .into_iter()
        .map(|p| match p {
            Predictor::Regression { .. } => Predictor::Regression { block: regression_block },
            other => other,
        })
        .collect();
    if cands.len() == 1 || samples.is_empty() {
        return cands[0];
    }
    let mut trials = Trials { samples, q, preset: config.preset, pooled: true, seen: Vec::new() };
    match trials.cheapest(&cands) {
        Predictor::Interpolation(Settings { order, .. }) => tune_interpolation(trials, order, Tuning::Greedy),
        other => other,
    }
}

/// Whether `current`, the predictor a chunked stream kept, has clearly stopped suiting the data:
/// tried on one central box of this chunk against the other splines (or, for a non-interpolating
/// predictor, against interpolation), the best alternative codes it `PROBE_MARGIN` smaller. A
/// few trials on one small box: cheap enough to run every few tens of megabytes, and the spread
/// rule cannot see this case (another field can give codes of the same spread under the kept
/// predictor while a different spline would code it several times smaller).
pub fn probe<T: Element>(data: &[T], shape: &[usize], q: &Quantizer, config: &Config, current: &Predictor) -> bool {
    const PROBE_MARGIN: f64 = 0.8;
    if config.predictor.is_some() || config.preset == Preset::Speed || q.eb() == 0.0 {
        return false;
    }
    let Some(b) = sample_boxes(shape, FAMILY_BOX_ELEMENTS).into_iter().next() else { return false };
    let sample = vec![(nonfinite::fill(&gather(data, shape, &b)).0.into_owned(), b.shape.clone())];
    let others: Vec<Predictor> = match *current {
        Predictor::Interpolation(settings) => SPLINES
            .into_iter()
            .filter(|&s| s != settings.spline)
            .map(|spline| Predictor::Interpolation(Settings { spline, ..settings }))
            .collect(),
        _ => interpolation_candidates(shape.len()),
    };
    let mut trials = Trials { samples: &sample, q, preset: config.preset, pooled: false, seen: Vec::new() };
    let best = trials.cheapest(&[vec![*current], others].concat());
    (trials.cost(&best) as f64) < PROBE_MARGIN * trials.cost(current) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantizer::DEFAULT_RADIUS;
    use crate::{ErrorBound, PredictorKind};

    #[test]
    fn joint_tuning_takes_the_cheapest_pair_where_the_samples_code_to_kilobytes() {
        // Smooth waves plus noise, 2-D and 3-D: fields where splines and tunings trade places.
        let mut next = crate::test_rng::xorshift(11);
        let mut searched = 0;
        for (shape, eb) in [(vec![65usize, 129], 0.05), (vec![33, 33, 33], 0.01), (vec![65, 129], 0.002), (vec![65, 129], 2.0)] {
            let data: Vec<f64> = (0..num_elements(&shape))
                .map(|i| {
                    let (y, x) = ((i / shape[shape.len() - 1]) as f64, (i % shape[shape.len() - 1]) as f64);
                    (0.11 * x).sin() * (0.07 * y).cos() * 10.0 + (next() % 1001) as f64 / 1000.0
                })
                .collect();
            let samples = vec![(data, shape.clone())];
            let q = Quantizer::new(eb, DEFAULT_RADIUS);
            let trials = || Trials { samples: &samples, q: &q, preset: Preset::Ratio, pooled: false, seen: Vec::new() };
            let cost = |p: &Predictor| estimate(p, &samples, &q, Preset::Ratio, false);
            let joint = tune_interpolation(trials(), DimOrder::Backward, Tuning::Joint);
            let greedy = tune_interpolation(trials(), DimOrder::Backward, Tuning::Greedy);
            if cost(&greedy) < JOINT_MIN_BYTES {
                assert_eq!(joint, greedy, "{shape:?} at {eb}: too few bytes to search further");
                continue;
            }
            searched += 1;
            let cheapest = LevelBounds::all()
                .flat_map(|bounds| {
                    SPLINES.map(|spline| {
                        cost(&Predictor::Interpolation(Settings {
                            spline,
                            order: DimOrder::Backward,
                            bounds,
                            arithmetic: Arithmetic::Binary64,
                        }))
                    })
                })
                .min()
                .unwrap();
            assert_eq!(cost(&joint), cheapest, "{shape:?} at {eb}");
            assert!(cost(&joint) <= cost(&greedy), "{shape:?} at {eb}");
        }
        assert!((2..4).contains(&searched), "{searched} of 4 cases searched every pair");
    }

    #[test]
    fn speed_takes_lorenzo_only_where_it_codes_much_smaller() {
        let shape = [40usize, 40, 40];
        let n = num_elements(&shape);
        // A Brownian sheet: noise summed along every axis, which 3-D Lorenzo undoes exactly
        // while interpolation, predicting from afar, sees the sums' random walks.
        let mut next = crate::test_rng::xorshift(3);
        let mut sheet: Vec<f64> = (0..n).map(|_| (next() % 2001) as f64 / 1000.0 - 1.0).collect();
        for stride in [1, 40, 1600] {
            for i in 0..n {
                if (i / stride) % 40 > 0 {
                    sheet[i] += sheet[i - stride];
                }
            }
        }
        // Smooth along every axis, and not a sum of functions of fewer coordinates (which
        // Lorenzo predicts exactly): interpolation's field.
        let smooth: Vec<f64> = (0..n)
            .map(|i| {
                let (z, y, x) = ((i / 1600) as f64, (i / 40 % 40) as f64, (i % 40) as f64);
                (0.3 * x + 0.2 * y).sin() * (0.25 * z - 0.1 * x).cos() * 50.0 + 1000.0
            })
            .collect();
        let eb = 0.01;
        let q = Quantizer::new(eb, DEFAULT_RADIUS);
        let speed = Config { preset: Preset::Speed, ..Config::new(ErrorBound::Absolute(eb)) };
        assert_eq!(choose(&sheet, &shape, &q, &speed), Predictor::Lorenzo);
        assert!(matches!(choose(&smooth, &shape, &q, &speed), Predictor::Interpolation(_)));
        // End to end, the choice codes the sheet much smaller than interpolation would.
        let chosen = crate::compress(&sheet, &shape, &speed).unwrap().len();
        let interpolated =
            crate::compress(&sheet, &shape, &Config { predictor: Some(PredictorKind::Interpolation), ..speed }).unwrap().len();
        assert!((chosen as f64) < SPEED_LORENZO_GAIN * interpolated as f64, "{chosen} vs {interpolated}");
        let (back, _) = crate::decompress::<f64>(&crate::compress(&sheet, &shape, &speed).unwrap(), Some(1)).unwrap();
        assert!(back.iter().zip(&sheet).all(|(a, b)| (a - b).abs() <= eb));
    }
}
