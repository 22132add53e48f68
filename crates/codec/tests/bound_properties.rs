//! Property tests of the codec's public contract: whatever the array, every finite value comes
//! back within the requested absolute bound, NaN and ±Inf come back bit for bit, a zero bound is
//! lossless, the stream does not depend on the thread count, and unusable requests are refused
//! with `InvalidInput` rather than a panic.
//!
//! Arrays are described by a pattern and a seed and built on the fly, so a failing case shrinks
//! to a short, readable reproducer instead of a 20 000-element literal. `PROPTEST_CASES` sets
//! the cases per property (default 256).

use amrzip_codec::{compress, decompress, info, CodecError, Config, Element, ErrorBound, PredictorKind, Preset};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::fmt::Debug;

/// Largest array a case builds: big enough for several regression blocks and interpolation
/// levels in every rank, small enough for hundreds of cases per second.
const MAX_ELEMENTS: usize = 20_000;

/// The element types, with the bit-level constructors the generators need.
trait Float: Element + Debug {
    /// The other element type, to check that decoding as it is refused.
    type Other: Float;
    const MAX: f64;
    const MIN_NORMAL: f64;
    const MIN_SUBNORMAL: f64;
    /// Any bit pattern, signalling NaNs included.
    fn from_raw(r: u64) -> Self;
    /// A NaN whose sign and payload come from `r`.
    fn nan(r: u64) -> Self;
    /// A subnormal (or signed zero) whose sign and mantissa come from `r`.
    fn subnormal(r: u64) -> Self;
}

impl Float for f32 {
    type Other = f64;
    const MAX: f64 = f32::MAX as f64;
    const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;
    const MIN_SUBNORMAL: f64 = f32::from_bits(1) as f64;
    fn from_raw(r: u64) -> f32 {
        f32::from_bits(r as u32)
    }
    fn nan(r: u64) -> f32 {
        let b = r as u32 & 0x807F_FFFF;
        f32::from_bits(b | 0x7F80_0000 | u32::from(b & 0x007F_FFFF == 0))
    }
    fn subnormal(r: u64) -> f32 {
        f32::from_bits(r as u32 & 0x807F_FFFF)
    }
}

impl Float for f64 {
    type Other = f32;
    const MAX: f64 = f64::MAX;
    const MIN_NORMAL: f64 = f64::MIN_POSITIVE;
    const MIN_SUBNORMAL: f64 = f64::from_bits(1);
    fn from_raw(r: u64) -> f64 {
        f64::from_bits(r)
    }
    fn nan(r: u64) -> f64 {
        let b = r & 0x800F_FFFF_FFFF_FFFF;
        f64::from_bits(b | 0x7FF0_0000_0000_0000 | u64::from(b & 0x000F_FFFF_FFFF_FFFF == 0))
    }
    fn subnormal(r: u64) -> f64 {
        f64::from_bits(r & 0x800F_FFFF_FFFF_FFFF)
    }
}

/// SplitMix64: a few lines, good enough to decorrelate elements, and stable across platforms.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn sign(&mut self) -> f64 {
        if self.next() & 1 == 0 {
            1.0
        } else {
            -1.0
        }
    }
}

/// A value of any class; `Special` indexes the table in `scalar`.
#[derive(Clone, Copy, Debug)]
enum Scalar {
    Special(u8),
    Pow10(i32),
}

const SPECIALS: u8 = 16;

/// Builds a scalar, clamping finite magnitudes to the type so they stay finite.
fn scalar<T: Float>(s: Scalar, rng: &mut Rng) -> T {
    let finite = |v: f64| T::from_f64(v.clamp(-T::MAX, T::MAX));
    match s {
        Scalar::Pow10(e) => finite(10f64.powi(e)),
        Scalar::Special(k) => match k % SPECIALS {
            0 => T::from_f64(0.0),
            1 => T::from_f64(-0.0),
            2 => T::from_f64(1.0),
            3 => T::from_f64(-1.0),
            4 => T::from_f64(T::MAX),
            5 => T::from_f64(-T::MAX),
            6 => T::from_f64(T::MIN_NORMAL),
            7 => T::from_f64(T::MIN_SUBNORMAL),
            8 => T::from_f64(-T::MIN_SUBNORMAL),
            9 => T::from_f64(f64::INFINITY),
            10 => T::from_f64(f64::NEG_INFINITY),
            11 => T::nan(rng.next()),
            12 => T::subnormal(rng.next()),
            13 => T::from_raw(rng.next()),
            14 => finite(rng.sign() * T::MAX * (0.5 + 0.5 * rng.unit())),
            _ => finite(rng.sign() * 10f64.powf(rng.unit() * 12.0 - 6.0)),
        },
    }
}

#[derive(Clone, Debug)]
enum Pattern {
    /// Every element drawn independently from all float classes.
    Arbitrary,
    Constant(Scalar),
    /// +x, -x, +x, ... over the flattened array.
    Alternating(Scalar),
    /// `offset + amplitude * (sum of sines)`, with a spike of `spike` every ~`spike_every`.
    Smooth {
        offset: Scalar,
        amplitude: Scalar,
        spike: Scalar,
        spike_every: usize,
    },
    /// Magnitudes near the type's maximum next to subnormals and ordinary values.
    HugeAndTiny,
    /// Mostly zeros, and ±2^e: with a power-of-two bound, residuals land exactly on bin edges.
    PowersOfTwo,
    /// `10^offset_log10 + U[0, 1)`: a range far below the magnitudes, where computing a relative
    /// bound in floating point can round it up.
    OffsetNoise {
        offset_log10: i32,
    },
    AllNan,
    /// NaN except about one element in `finite_every`, which follows a smooth field.
    MostlyNan {
        finite_every: usize,
    },
}

fn build<T: Float>(pattern: &Pattern, shape: &[usize], seed: u64) -> Vec<T> {
    let n: usize = shape.iter().product();
    let mut rng = Rng(seed);
    let smooth = |i: usize, rng: &mut Rng| -> f64 {
        // Coordinates of element i, each driving one sine, plus a little noise.
        let (mut rest, mut v) = (i, 0.0);
        for (d, &len) in shape.iter().enumerate().rev() {
            v += (0.37 * (d + 1) as f64 * (rest % len) as f64 + d as f64).sin();
            rest /= len;
        }
        v + 1e-3 * (rng.unit() - 0.5)
    };
    let clamp = |v: f64| T::from_f64(v.clamp(-T::MAX, T::MAX));
    (0..n)
        .map(|i| match pattern {
            Pattern::Arbitrary => scalar(Scalar::Special((rng.next() % u64::from(SPECIALS)) as u8), &mut rng),
            Pattern::Constant(s) => scalar(*s, &mut Rng(seed)),
            Pattern::Alternating(s) => {
                let x: T = scalar(*s, &mut Rng(seed));
                if i % 2 == 0 {
                    x
                } else {
                    T::from_f64(-x.to_f64())
                }
            }
            Pattern::Smooth { offset, amplitude, spike, spike_every } => {
                let offset: T = scalar(*offset, &mut Rng(seed));
                let amplitude: T = scalar(*amplitude, &mut Rng(seed ^ 1));
                let mut v = offset.to_f64() + amplitude.to_f64() * smooth(i, &mut rng);
                if rng.next().is_multiple_of(*spike_every as u64) {
                    v += scalar::<T>(*spike, &mut rng).to_f64() * rng.sign();
                }
                if v.is_nan() {
                    T::from_f64(v)
                } else {
                    clamp(v)
                }
            }
            Pattern::HugeAndTiny => match rng.next() % 4 {
                0 => clamp(rng.sign() * T::MAX * rng.unit()),
                1 => T::subnormal(rng.next()),
                2 => clamp(rng.sign() * 1e-30 * rng.unit()),
                _ => clamp(smooth(i, &mut rng)),
            },
            Pattern::OffsetNoise { offset_log10 } => clamp(10f64.powi(*offset_log10) + rng.unit()),
            Pattern::PowersOfTwo => {
                if !rng.next().is_multiple_of(4) {
                    T::from_f64(0.0)
                } else {
                    clamp(rng.sign() * 2f64.powi((rng.next() % 181) as i32 - 80))
                }
            }
            Pattern::AllNan => T::nan(rng.next()),
            Pattern::MostlyNan { finite_every } => {
                if rng.next().is_multiple_of(*finite_every as u64) {
                    clamp(100.0 * smooth(i, &mut rng))
                } else {
                    T::nan(rng.next())
                }
            }
        })
        .collect()
}

/// How the bound is requested; turned into an `ErrorBound` once the data is known.
#[derive(Clone, Copy, Debug)]
enum BoundRequest {
    /// `10^log10` times the data's scale (range, else largest magnitude, else 1), or times 1.
    Absolute {
        log10: f64,
        scaled: bool,
    },
    Relative {
        log10: f64,
    },
    /// `2^exp`, so that bins and their edges are exact in floating point.
    PowerOfTwo {
        exp: i32,
    },
}

/// (min, max) over the finite values, or None if there are none.
fn finite_range<T: Float>(data: &[T]) -> Option<(f64, f64)> {
    data.iter().filter(|x| x.is_finite()).map(|x| x.to_f64()).fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
    })
}

fn error_bound<T: Float>(data: &[T], request: BoundRequest) -> ErrorBound {
    match request {
        BoundRequest::Relative { log10 } => ErrorBound::Relative(10f64.powf(log10)),
        BoundRequest::PowerOfTwo { exp } => ErrorBound::Absolute(2f64.powi(exp)),
        BoundRequest::Absolute { log10, scaled } => {
            let scale = match finite_range(data) {
                Some((lo, hi)) if scaled => {
                    let range = hi - lo;
                    let magnitude = lo.abs().max(hi.abs());
                    if range > 0.0 && range.is_finite() {
                        range
                    } else if magnitude > 0.0 {
                        magnitude
                    } else {
                        1.0
                    }
                }
                _ => 1.0,
            };
            ErrorBound::Absolute(10f64.powf(log10) * scale)
        }
    }
}

/// The absolute bound the request promises, recomputed independently of the codec; a target
/// promises the bound the stream records.
fn requested_bound<T: Float>(data: &[T], bound: ErrorBound, recorded: f64) -> f64 {
    match bound {
        ErrorBound::Absolute(a) => a,
        ErrorBound::Relative(r) => finite_range(data).map_or(0.0, |(lo, hi)| r * (hi - lo)),
        ErrorBound::Ratio(_) | ErrorBound::Psnr(_) => recorded,
    }
}

/// PSNR over the finite values (peak = their range); infinite when nothing changed.
fn psnr<T: Float>(data: &[T], out: &[T]) -> f64 {
    let Some((lo, hi)) = finite_range(data) else { return f64::INFINITY };
    let errors: Vec<f64> =
        data.iter().zip(out).filter(|(x, _)| x.to_f64().is_finite()).map(|(x, y)| (x.to_f64() - y.to_f64()).abs()).collect();
    // Squares relative to the largest error, so that errors near the float limits neither
    // underflow (reading as lossless) nor overflow (reading as -inf dB).
    let largest = errors.iter().fold(0.0f64, |m, &e| m.max(e));
    if largest == 0.0 {
        return f64::INFINITY;
    }
    if largest.is_infinite() {
        return f64::NEG_INFINITY;
    }
    let ssq: f64 = errors.iter().map(|&e| (e / largest) * (e / largest)).sum();
    20.0 * ((hi - lo).min(f64::MAX) / (largest * (ssq / errors.len() as f64).sqrt())).log10()
}

fn hex<T: Float>(x: T) -> String {
    format!("{x:?} (0x{:x})", x.to_bits_u64())
}

/// Compresses with 1 and 2 threads and checks everything the contract promises about the result.
fn check_round_trip<T: Float>(data: &[T], shape: &[usize], config: &Config) -> Result<(), TestCaseError> {
    let single = Config { threads: Some(1), ..config.clone() };
    let dual = Config { threads: Some(2), ..config.clone() };
    let stream = compress(data, shape, &single).map_err(|e| TestCaseError::fail(format!("compress failed: {e}")))?;
    let stream_dual = compress(data, shape, &dual).map_err(|e| TestCaseError::fail(format!("compress (2 threads) failed: {e}")))?;
    prop_assert!(stream == stream_dual, "the stream depends on the thread count");

    let meta = info(&stream).map_err(|e| TestCaseError::fail(format!("info failed: {e}")))?;
    prop_assert_eq!(meta.dtype, T::DTYPE);
    prop_assert_eq!(&meta.shape, &shape.to_vec());
    prop_assert_eq!(meta.bound, config.bound);
    prop_assert_eq!(meta.preset, config.preset);
    prop_assert!(meta.abs_bound.is_finite() && meta.abs_bound >= 0.0, "abs_bound {}", meta.abs_bound);
    let requested = requested_bound(data, config.bound, meta.abs_bound);

    let (out, out_shape) = decompress::<T>(&stream, Some(1)).map_err(|e| TestCaseError::fail(format!("decompress failed: {e}")))?;
    let (out_dual, _) =
        decompress::<T>(&stream, Some(2)).map_err(|e| TestCaseError::fail(format!("decompress (2 threads) failed: {e}")))?;
    prop_assert_eq!(&out_shape, &shape.to_vec());
    prop_assert_eq!(out.len(), data.len());
    prop_assert!(
        out.iter().zip(&out_dual).all(|(a, b)| a.to_bits_u64() == b.to_bits_u64()),
        "the decoded values depend on the thread count"
    );

    for (i, (&x, &y)) in data.iter().zip(&out).enumerate() {
        if !x.is_finite() || meta.abs_bound == 0.0 {
            prop_assert_eq!(
                x.to_bits_u64(),
                y.to_bits_u64(),
                "element {}: {} decoded as {} (abs_bound {})",
                i,
                hex(x),
                hex(y),
                meta.abs_bound
            );
        } else {
            let err = (y.to_f64() - x.to_f64()).abs();
            prop_assert!(
                err <= meta.abs_bound,
                "element {}: {} decoded as {}, error {:e} > abs_bound {:e}",
                i,
                hex(x),
                hex(y),
                err,
                meta.abs_bound
            );
            prop_assert!(
                err <= requested,
                "element {}: {} decoded as {}, error {:e} > requested bound {:e} (abs_bound {:e})",
                i,
                hex(x),
                hex(y),
                err,
                requested,
                meta.abs_bound
            );
        }
    }
    prop_assert!(
        matches!(decompress::<T::Other>(&stream, None), Err(CodecError::InvalidInput(_))),
        "decoding as the other element type must be refused"
    );
    Ok(())
}

fn shapes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=24, 1..=4).prop_map(|mut shape| {
        while shape.iter().product::<usize>() > MAX_ELEMENTS {
            let largest = (0..shape.len()).max_by_key(|&d| shape[d]).unwrap();
            shape[largest] /= 2;
        }
        shape
    })
}

fn scalars() -> impl Strategy<Value = Scalar> {
    prop_oneof![(0..SPECIALS).prop_map(Scalar::Special), (-320i32..=308).prop_map(Scalar::Pow10)]
}

fn patterns() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        2 => Just(Pattern::Arbitrary),
        1 => scalars().prop_map(Pattern::Constant),
        1 => scalars().prop_map(Pattern::Alternating),
        4 => (prop_oneof![Just(Scalar::Special(0)), (-3i32..=17).prop_map(Scalar::Pow10), scalars()], (-6i32..=6).prop_map(Scalar::Pow10), scalars(), 1usize..=500)
            .prop_map(|(offset, amplitude, spike, spike_every)| Pattern::Smooth { offset, amplitude, spike, spike_every }),
        1 => Just(Pattern::HugeAndTiny),
        1 => Just(Pattern::PowersOfTwo),
        1 => (8i32..=17).prop_map(|offset_log10| Pattern::OffsetNoise { offset_log10 }),
        1 => Just(Pattern::AllNan),
        1 => (2usize..=50).prop_map(|finite_every| Pattern::MostlyNan { finite_every }),
    ]
}

fn bound_requests() -> impl Strategy<Value = BoundRequest> {
    prop_oneof![
        (-8.0f64..=-1.0, prop::bool::weighted(0.8)).prop_map(|(log10, scaled)| BoundRequest::Absolute { log10, scaled }),
        (-8.0f64..=-1.0).prop_map(|log10| BoundRequest::Relative { log10 }),
        (-30i32..=10).prop_map(|exp| BoundRequest::PowerOfTwo { exp }),
    ]
}

fn presets() -> impl Strategy<Value = Preset> {
    prop_oneof![Just(Preset::Ratio), Just(Preset::Speed)]
}

fn predictors() -> impl Strategy<Value = Option<PredictorKind>> {
    prop_oneof![
        Just(None),
        Just(Some(PredictorKind::Lorenzo)),
        Just(Some(PredictorKind::Regression)),
        Just(Some(PredictorKind::Interpolation)),
        Just(Some(PredictorKind::DualQuant)),
    ]
}

fn config(bound: ErrorBound, preset: Preset, predictor: Option<PredictorKind>) -> Config {
    Config { preset, predictor, ..Config::new(bound) }
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    }
}

fn bounded<T: Float>(
    pattern: &Pattern,
    shape: &[usize],
    seed: u64,
    request: BoundRequest,
    preset: Preset,
    predictor: Option<PredictorKind>,
) -> Result<(), TestCaseError> {
    let data = build::<T>(pattern, shape, seed);
    check_round_trip(&data, shape, &config(error_bound(&data, request), preset, predictor))
}

/// Ratio and PSNR targets: the bound the stream records holds like any other, and a PSNR target
/// is a floor (when the range is finite, so the PSNR is defined).
fn targeted<T: Float>(pattern: &Pattern, shape: &[usize], seed: u64, target: ErrorBound, preset: Preset) -> Result<(), TestCaseError> {
    let data = build::<T>(pattern, shape, seed);
    check_round_trip(&data, shape, &config(target, preset, None))?;
    if let ErrorBound::Psnr(p) = target {
        let stream = compress(&data, shape, &config(target, preset, None)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (out, _) = decompress::<T>(&stream, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if finite_range(&data).is_some_and(|(lo, hi)| (hi - lo).is_finite()) {
            let got = psnr(&data, &out);
            prop_assert!(got >= p, "PSNR {} below the target {}", got, p);
        }
    }
    Ok(())
}

fn targets() -> impl Strategy<Value = ErrorBound> {
    prop_oneof![(1.0f64..200.0).prop_map(ErrorBound::Ratio), (10.0f64..140.0).prop_map(ErrorBound::Psnr)]
}

/// Mostly zeros, and values whose residual against a zero prediction is a bin index at an
/// integer limit (the bin radius, 2^53, 2^63), on a bin centre or on a bin edge.
fn bin_limits<T: Float>(
    shape: &[usize],
    exp: i32,
    seed: u64,
    preset: Preset,
    predictor: Option<PredictorKind>,
) -> Result<(), TestCaseError> {
    const BINS: [f64; 10] = [
        9_223_372_036_854_775_808.0,
        9_223_372_036_854_774_784.0,
        4_611_686_018_427_387_904.0,
        9_007_199_254_740_994.0,
        9_007_199_254_740_992.0,
        32_769.0,
        32_768.0,
        32_767.0,
        1.0,
        0.0,
    ];
    let eb = 2f64.powi(exp);
    let mut rng = Rng(seed);
    let data: Vec<T> = (0..shape.iter().product::<usize>())
        .map(|_| {
            if !rng.next().is_multiple_of(4) {
                return T::from_f64(0.0);
            }
            let bin = BINS[(rng.next() % BINS.len() as u64) as usize];
            let edge = [0.0, eb, -eb, 0.5 * eb][(rng.next() % 4) as usize];
            T::from_f64((rng.sign() * bin * 2.0 * eb + edge).clamp(-T::MAX, T::MAX))
        })
        .collect();
    check_round_trip(&data, shape, &config(ErrorBound::Absolute(eb), preset, predictor))
}

/// A range far below the magnitudes, with bounds up to the whole range: the relative bound
/// must be resolved against `max - min` without rounding it up.
fn offset_range(
    shape: &[usize],
    offset_log10: i32,
    rel_log10: f64,
    seed: u64,
    preset: Preset,
    predictor: Option<PredictorKind>,
) -> Result<(), TestCaseError> {
    let data = build::<f64>(&Pattern::OffsetNoise { offset_log10 }, shape, seed);
    check_round_trip(&data, shape, &config(ErrorBound::Relative(10f64.powf(rel_log10)), preset, predictor))
}

fn lossless<T: Float>(
    pattern: &Pattern,
    shape: &[usize],
    seed: u64,
    preset: Preset,
    predictor: Option<PredictorKind>,
) -> Result<(), TestCaseError> {
    let data = build::<T>(pattern, shape, seed);
    check_round_trip(&data, shape, &config(ErrorBound::Absolute(0.0), preset, predictor))
}

fn empty<T: Float>(shape: &[usize], bound: ErrorBound, preset: Preset, predictor: Option<PredictorKind>) -> Result<(), TestCaseError> {
    let stream =
        compress::<T>(&[], shape, &config(bound, preset, predictor)).map_err(|e| TestCaseError::fail(format!("compress failed: {e}")))?;
    let meta = info(&stream).map_err(|e| TestCaseError::fail(format!("info failed: {e}")))?;
    prop_assert_eq!(&meta.shape, &shape.to_vec());
    let (out, out_shape) = decompress::<T>(&stream, None).map_err(|e| TestCaseError::fail(format!("decompress failed: {e}")))?;
    prop_assert!(out.is_empty());
    prop_assert_eq!(&out_shape, &shape.to_vec());
    Ok(())
}

/// Shapes with at least one zero dimension and possibly one huge one, scaled so the product
/// of the other dimensions stays representable: such a shape is a plain empty array.
fn empty_shapes() -> impl Strategy<Value = Vec<usize>> {
    let huge = prop_oneof![Just(usize::MAX), Just(1usize << 40), any::<usize>()];
    let indices = (any::<prop::sample::Index>(), any::<prop::sample::Index>());
    (prop::collection::vec(0usize..=24, 1..=4), indices, prop::option::of(huge)).prop_map(|(mut shape, (zero, at), huge)| {
        let (zero, at) = (zero.index(shape.len()), at.index(shape.len()));
        shape[zero] = 0;
        if let (Some(h), true) = (huge, at != zero) {
            let others: usize = shape.iter().enumerate().filter(|&(d, &n)| d != at && n > 0).map(|(_, &n)| n).product();
            shape[at] = (h / others).max(1);
        }
        shape
    })
}

/// Shapes and lengths that mostly disagree, in 0 to 6 dimensions.
fn mismatched_requests() -> impl Strategy<Value = (Vec<usize>, usize)> {
    let dim = prop_oneof![8 => 0usize..=6, 1 => Just(usize::MAX), 1 => any::<usize>()];
    (prop::collection::vec(dim, 0..=6), 0usize..=200)
}

fn shape_check<T: Float>(shape: &[usize], len: usize, preset: Preset, predictor: Option<PredictorKind>) -> Result<(), TestCaseError> {
    let data = vec![T::from_f64(0.5); len];
    // A shape is addressable when the product of its dimensions, empty ones counted as 1, fits.
    let addressable = shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n.max(1))).is_some();
    let valid = (1..=4).contains(&shape.len()) && addressable && shape.iter().product::<usize>() == len;
    let result = compress(&data, shape, &config(ErrorBound::Relative(1e-3), preset, predictor));
    if valid {
        prop_assert!(result.is_ok(), "{:?}", result.err());
    } else {
        prop_assert!(
            matches!(result, Err(CodecError::InvalidInput(_))),
            "shape {:?} with {} elements: {:?}",
            shape,
            len,
            result.map(|s| s.len())
        );
    }
    Ok(())
}

fn bound_check<T: Float>(value: f64, relative: bool, shape: &[usize], seed: u64) -> Result<(), TestCaseError> {
    let data = build::<T>(&Pattern::Arbitrary, shape, seed);
    let bound = if relative { ErrorBound::Relative(value) } else { ErrorBound::Absolute(value) };
    let result = compress(&data, shape, &Config::new(bound));
    if value.is_finite() && value >= 0.0 {
        prop_assert!(result.is_ok(), "{:?}", result.err());
    } else {
        prop_assert!(matches!(result, Err(CodecError::InvalidInput(_))), "bound {:?}: {:?}", bound, result.map(|s| s.len()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn f32_values_stay_within_the_bound(
        shape in shapes(), pattern in patterns(), seed in any::<u64>(), request in bound_requests(), preset in presets(), predictor in predictors(),
    ) {
        bounded::<f32>(&pattern, &shape, seed, request, preset, predictor)?;
    }

    #[test]
    fn f64_values_stay_within_the_bound(
        shape in shapes(), pattern in patterns(), seed in any::<u64>(), request in bound_requests(), preset in presets(), predictor in predictors(),
    ) {
        bounded::<f64>(&pattern, &shape, seed, request, preset, predictor)?;
    }

    #[test]
    fn f32_targets_keep_their_bound(shape in shapes(), pattern in patterns(), seed in any::<u64>(), target in targets(), preset in presets()) {
        targeted::<f32>(&pattern, &shape, seed, target, preset)?;
    }

    #[test]
    fn f64_targets_keep_their_bound(shape in shapes(), pattern in patterns(), seed in any::<u64>(), target in targets(), preset in presets()) {
        targeted::<f64>(&pattern, &shape, seed, target, preset)?;
    }

    #[test]
    fn f32_bin_index_limits(shape in shapes(), exp in -30i32..=10, seed in any::<u64>(), preset in presets(), predictor in predictors()) {
        bin_limits::<f32>(&shape, exp, seed, preset, predictor)?;
    }

    #[test]
    fn f64_bin_index_limits(shape in shapes(), exp in -30i32..=10, seed in any::<u64>(), preset in presets(), predictor in predictors()) {
        bin_limits::<f64>(&shape, exp, seed, preset, predictor)?;
    }

    #[test]
    fn f64_relative_bound_on_a_narrow_range(
        shape in shapes(), offset_log10 in 8i32..=17, rel_log10 in -3.0f64..=0.0, seed in any::<u64>(), preset in presets(), predictor in predictors(),
    ) {
        offset_range(&shape, offset_log10, rel_log10, seed, preset, predictor)?;
    }

    #[test]
    fn f32_zero_bound_is_lossless(shape in shapes(), pattern in patterns(), seed in any::<u64>(), preset in presets(), predictor in predictors()) {
        lossless::<f32>(&pattern, &shape, seed, preset, predictor)?;
    }

    #[test]
    fn f64_zero_bound_is_lossless(shape in shapes(), pattern in patterns(), seed in any::<u64>(), preset in presets(), predictor in predictors()) {
        lossless::<f64>(&pattern, &shape, seed, preset, predictor)?;
    }

    #[test]
    fn empty_arrays_round_trip(shape in empty_shapes(), double in any::<bool>(), relative in any::<bool>(), preset in presets(), predictor in predictors()) {
        let bound = if relative { ErrorBound::Relative(1e-3) } else { ErrorBound::Absolute(1e-3) };
        if double {
            empty::<f64>(&shape, bound, preset, predictor)?;
        } else {
            empty::<f32>(&shape, bound, preset, predictor)?;
        }
    }

    #[test]
    fn shape_and_length_must_agree((shape, len) in mismatched_requests(), double in any::<bool>(), preset in presets(), predictor in predictors()) {
        if double {
            shape_check::<f64>(&shape, len, preset, predictor)?;
        } else {
            shape_check::<f32>(&shape, len, preset, predictor)?;
        }
    }

    #[test]
    fn bounds_must_be_finite_and_non_negative(
        value in any::<f64>(), relative in any::<bool>(), double in any::<bool>(), shape in prop::collection::vec(1usize..=6, 1..=4), seed in any::<u64>(),
    ) {
        if double {
            bound_check::<f64>(value, relative, &shape, seed)?;
        } else {
            bound_check::<f32>(value, relative, &shape, seed)?;
        }
    }
}

fn invalid_requests_are_refused<T: Float>() {
    let data = vec![T::from_f64(1.5); 24];
    let invalid = |result: amrzip_codec::Result<Vec<u8>>| matches!(result, Err(CodecError::InvalidInput(_)));
    for bad in [-1e-3, -f64::MIN_POSITIVE, -5e-324, f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for bound in [ErrorBound::Absolute(bad), ErrorBound::Relative(bad)] {
            assert!(invalid(compress(&data, &[4, 6], &Config::new(bound))), "{bound:?}");
            assert!(invalid(compress::<T>(&[], &[0], &Config::new(bound))), "{bound:?} on an empty array");
        }
    }
    let ok = Config::new(ErrorBound::Relative(1e-3));
    for shape in [&[][..], &[1, 1, 1, 1, 1, 24], &[2, 2, 2, 3, 1], &[1, 1, 1, 1, 1]] {
        let n: usize = shape.iter().product();
        assert!(invalid(compress(&data[..n.min(24)], shape, &ok)), "{shape:?}");
    }
    assert!(invalid(compress::<T>(&[], &[], &ok)));
    for (shape, len) in [
        (&[25][..], 24),
        (&[4, 5], 24),
        (&[2, 3, 4], 23),
        (&[usize::MAX, 2], 24),
        (&[usize::MAX, usize::MAX, 2, 2], 24),
        (&[0, 1], 24),
        (&[24, 1], 0),
    ] {
        assert!(invalid(compress(&data[..len], shape, &ok)), "{shape:?} with {len} elements");
    }
    for threads in [Some(0), Some(1025), Some(usize::MAX)] {
        assert!(invalid(compress(&data, &[24], &Config { threads, ..ok.clone() })), "threads {threads:?}");
    }
    let stream = compress(&data, &[24], &ok).unwrap();
    assert!(matches!(decompress::<T>(&stream, Some(0)), Err(CodecError::InvalidInput(_))));
    assert!(matches!(decompress::<T::Other>(&stream, None), Err(CodecError::InvalidInput(_))));
}

#[test]
fn f32_invalid_requests_are_refused() {
    invalid_requests_are_refused::<f32>();
}

#[test]
fn f64_invalid_requests_are_refused() {
    invalid_requests_are_refused::<f64>();
}

/// Large arrays are split into chunks coded in parallel (except under interpolation, which
/// parallelises inside one chunk): the stream must still not depend on the thread count, and
/// chunk seams must honour the bound.
#[test]
fn multi_chunk_arrays_are_deterministic_and_bounded() {
    let shape = [2049, 1024];
    let smooth = Pattern::Smooth { offset: Scalar::Pow10(3), amplitude: Scalar::Pow10(1), spike: Scalar::Pow10(6), spike_every: 5000 };
    let mut data = build::<f32>(&smooth, &shape, 7);
    for i in (0..data.len()).step_by(9973) {
        data[i] = f32::NAN;
    }
    let configs = [
        (Preset::Speed, None),
        (Preset::Ratio, Some(PredictorKind::Lorenzo)),
        (Preset::Ratio, Some(PredictorKind::Regression)),
        (Preset::Ratio, None),
    ];
    for (preset, predictor) in configs {
        let config = config(ErrorBound::Relative(1e-4), preset, predictor);
        let meta = info(&compress(&data, &shape, &config).unwrap()).unwrap();
        let interpolation = meta.predictors.iter().any(|&(k, _)| k == PredictorKind::Interpolation);
        let several = meta.chunk_shape.iter().product::<usize>() < data.len();
        assert!(interpolation || several, "{preset:?} {predictor:?}: expected several chunks, got chunk shape {:?}", meta.chunk_shape);
        if let Err(e) = check_round_trip(&data, &shape, &config) {
            panic!("{preset:?} {predictor:?}: {e}");
        }
    }
}
