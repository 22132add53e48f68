//! When a chunked stream needs a new codebook (CEAZ, section 3.2.3). Building and storing a
//! codebook for every chunk costs time and table bytes; keeping one too long costs bits once
//! the data drifts. CEAZ compares the spread of successive symbol histograms: keep the codebook
//! while the spread barely moves, build a new one when it moves moderately, and start over from
//! the built-in codebooks when it jumps (the data changed character).
//!
//! Two departures from the paper, both measured in `benches/stream_bench.py`:
//! - The change is relative, `|s1 - s0| / max(s0, s1, 1/2)`: our alphabet has 65536 codes and
//!   bounds of any size, so the spread ranges from a fraction of a bin to thousands, and an
//!   absolute threshold tuned at one bound means nothing at another.
//! - It is measured against the histogram the current codebook was built from, not the previous
//!   chunk: a slow drift adds up and is caught, where chunk-to-chunk changes stay small.

/// Standard deviation of the codes, over the central 99% of them. Symbol 0 is "unpredictable"
/// and stays out; symbol `radius + c` is code `c`. The tails are trimmed because interpolation
/// leaves a few huge codes from its coarsest levels that would dominate a plain standard
/// deviation, and whether a chunk keeps them as codes or as exact values (it does when the
/// codebook in force has no symbol for them) must not move the statistic.
pub fn spread(freq: &[u64], radius: usize) -> f64 {
    let coded: u64 = freq.iter().skip(1).sum();
    if coded == 0 {
        return 0.0;
    }
    let (skip_low, keep) = (coded / 200, coded - 2 * (coded / 200));
    let (mut seen, mut n, mut sum, mut sq) = (0u64, 0f64, 0f64, 0f64);
    for (s, &f) in freq.iter().enumerate().skip(1).filter(|&(_, &f)| f > 0) {
        // The part of this symbol's count inside the central `keep` codes.
        let start = seen.max(skip_low);
        let end = (seen + f).min(skip_low + keep);
        seen += f;
        if end > start {
            let (w, c) = ((end - start) as f64, s as f64 - radius as f64);
            n += w;
            sum += w * c;
            sq += w * c * c;
        }
    }
    if n == 0.0 {
        return 0.0;
    }
    let mean = sum / n;
    (sq / n - mean * mean).max(0.0).sqrt()
}

/// Relative change of the spread, in [0, 1). Spreads under half a bin count as half a bin:
/// below that the histogram is one spike, whatever its exact width.
pub fn change(reference: f64, current: f64) -> f64 {
    (current - reference).abs() / reference.max(current).max(0.5)
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Up to this change the current codebook is kept.
    pub keep: f64,
    /// Up to this change a new codebook is built; beyond it the stream starts over.
    pub rebuild: f64,
}

/// Measured on the benchmark fields (`benches/stream_bench.py`, section E): keeping up to a 30%
/// change costs nothing measurable against a new codebook every chunk, and 0.5 is the rebuild
/// threshold that started over at every boundary between two fields and never inside one.
pub const DEFAULT_THRESHOLDS: Thresholds = Thresholds { keep: 0.30, rebuild: 0.50 };

/// How a chunked stream manages its codebook.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// CEAZ's rule on the change of the spread.
    Adaptive(Thresholds),
    /// A new codebook for every chunk (the baseline the others are measured against).
    Rebuild,
    /// A new codebook once this many elements went by since the last one; kept otherwise.
    Interval(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Rebuild,
    /// The data changed character: choose the predictor again, and take whichever codes the
    /// chunk smaller, a built-in codebook or a new one.
    StartOver,
}

/// The decision for a chunk whose histogram has spread `current`, when the codebook in force
/// was built from spread `reference` and `elements_since` elements ago.
pub fn decide(policy: Policy, reference: f64, current: f64, elements_since: u64) -> Decision {
    match policy {
        Policy::Rebuild => Decision::Rebuild,
        Policy::Interval(n) if elements_since >= n => Decision::Rebuild,
        Policy::Interval(_) => Decision::Keep,
        Policy::Adaptive(t) => match change(reference, current) {
            c if c <= t.keep => Decision::Keep,
            c if c <= t.rebuild => Decision::Rebuild,
            _ => Decision::StartOver,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_known_histograms() {
        let mut h = vec![0u64; 16];
        h[8] = 10;
        assert_eq!(spread(&h, 8), 0.0);
        h[7] = 10;
        h[9] = 10;
        h[0] = 1000; // unpredictable values do not count
        assert!((spread(&h, 8) - (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(spread(&[5, 0, 0], 1), 0.0);
    }

    #[test]
    fn rare_outliers_do_not_move_the_spread() {
        let mut h = vec![0u64; 1 << 16];
        h[32767] = 5000;
        h[32768] = 10000;
        h[32769] = 5000;
        let base = spread(&h, 32768);
        h[10] = 20;
        h[65000] = 20;
        assert!((spread(&h, 32768) - base).abs() < 0.02 * base);
    }

    #[test]
    fn decisions_follow_the_thresholds() {
        let p = Policy::Adaptive(Thresholds { keep: 0.1, rebuild: 0.5 });
        assert_eq!(decide(p, 10.0, 10.5, 0), Decision::Keep);
        assert_eq!(decide(p, 10.0, 13.0, 0), Decision::Rebuild);
        assert_eq!(decide(p, 10.0, 40.0, 0), Decision::StartOver);
        // Sub-bin spreads are one spike: no change.
        assert_eq!(decide(p, 0.01, 0.04, 0), Decision::Keep);
        assert_eq!(decide(Policy::Interval(100), 1.0, 50.0, 99), Decision::Keep);
        assert_eq!(decide(Policy::Interval(100), 1.0, 1.0, 100), Decision::Rebuild);
        assert_eq!(decide(Policy::Rebuild, 1.0, 1.0, 0), Decision::Rebuild);
    }
}
