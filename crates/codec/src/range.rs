//! The range of an array's values, which value-range relative bounds scale.

use crate::element::Element;
use crate::nonfinite;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Elements per parallel block.
const BLOCK: usize = 1 << 16;
/// Independent lanes of a running minimum and maximum: one running min/max would be a serial
/// dependency chain, which the compiler may not reorder for floats.
const LANES: usize = 8;

/// Minimum and maximum of the values fed to it, in `LANES` lanes. A compare-and-select the
/// compiler vectorises; NaN never wins a comparison, so it is passed over.
#[derive(Clone, Copy)]
struct MinMax {
    lo: [f64; LANES],
    hi: [f64; LANES],
}

impl MinMax {
    fn new() -> Self {
        MinMax { lo: [f64::INFINITY; LANES], hi: [f64::NEG_INFINITY; LANES] }
    }

    #[inline(always)]
    fn update(&mut self, lane: usize, v: f64) {
        self.lo[lane] = if v < self.lo[lane] { v } else { self.lo[lane] };
        self.hi[lane] = if v > self.hi[lane] { v } else { self.hi[lane] };
    }

    /// Feeds the values of `block` that `keep` accepts.
    #[inline(always)]
    fn feed<T: Element>(&mut self, block: &[T], keep: impl Fn(f64) -> bool) {
        let mut lanes = block.chunks_exact(LANES);
        for c in &mut lanes {
            for (j, &x) in c.iter().enumerate() {
                if keep(x.to_f64()) {
                    self.update(j, x.to_f64());
                }
            }
        }
        for (j, &x) in lanes.remainder().iter().enumerate() {
            if keep(x.to_f64()) {
                self.update(j, x.to_f64());
            }
        }
    }

    /// (smallest, largest); lo > hi when nothing was fed.
    fn result(self) -> (f64, f64) {
        (self.lo.into_iter().fold(f64::INFINITY, f64::min), self.hi.into_iter().fold(f64::NEG_INFINITY, f64::max))
    }
}

/// Smallest and largest of the values of `block` that `keep` accepts.
#[inline(always)]
fn block_range<T: Element>(block: &[T], keep: impl Fn(f64) -> bool) -> (f64, f64) {
    let mut m = MinMax::new();
    m.feed(block, keep);
    m.result()
}

fn merge(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    (a.0.min(b.0), a.1.max(b.1))
}

/// Smallest and largest of the values `keep` accepts, block by block in parallel.
fn range_of<T: Element>(data: &[T], keep: impl Fn(f64) -> bool + Sync) -> (f64, f64) {
    data.par_chunks(BLOCK).map(|block| block_range(block, &keep)).reduce(|| (f64::INFINITY, f64::NEG_INFINITY), merge)
}

/// Smallest and largest finite value (lo > hi when there is none). The first sweep takes every
/// value; only when it ends on an infinity does a second sweep filter them out.
pub fn finite_range<T: Element>(data: &[T]) -> (f64, f64) {
    finite_range_from(data, range_of(data, |_| true))
}

/// `finite_range`, given the range of every value but NaN (what `copy_scanned` finds).
pub fn finite_range_from<T: Element>(data: &[T], all: (f64, f64)) -> (f64, f64) {
    match all {
        (lo, hi) if lo.is_finite() && hi.is_finite() => (lo, hi),
        (lo, hi) if lo > hi => (lo, hi),
        _ => range_of(data, f64::is_finite),
    }
}

/// Smallest and largest finite value of `data` where `keep` (of the same length) is true; lo >
/// hi when there is none. What an AMR level's relative bound spans: its stored (uncovered) cells.
pub fn finite_range_where<T: Element>(data: &[T], keep: &[bool]) -> (f64, f64) {
    assert_eq!(data.len(), keep.len(), "one flag per value");
    data.par_chunks(BLOCK)
        .zip(keep.par_chunks(BLOCK))
        .map(|(block, keep)| {
            let mut m = MinMax::new();
            for (values, flags) in block.chunks(LANES).zip(keep.chunks(LANES)) {
                for (j, (&x, &k)) in values.iter().zip(flags).enumerate() {
                    let v = x.to_f64();
                    if k && v.is_finite() {
                        m.update(j, v);
                    }
                }
            }
            m.result()
        })
        .reduce(|| (f64::INFINITY, f64::NEG_INFINITY), merge)
}

/// A copy of `data`, with, from the same sweep, whether every value is finite and the range of
/// every value but NaN: an array bound for a predictor that works on its own copy is read from
/// memory once for its relative bound and its copy. Each block is copied, then scanned while it
/// is in cache, so each loop stays simple enough to vectorise.
pub fn copy_scanned<T: Element>(data: &[T]) -> (Vec<T>, bool, (f64, f64)) {
    let mut copy = Vec::with_capacity(data.len());
    let (finite, range) = copy.spare_capacity_mut()[..data.len()]
        .par_chunks_mut(BLOCK)
        .zip(data.par_chunks(BLOCK))
        .map(|(out, block)| copy_scan_block(out, block))
        .reduce(|| (true, (f64::INFINITY, f64::NEG_INFINITY)), |a, b| (a.0 && b.0, merge(a.1, b.1)));
    // Safety: the sweep above wrote every element.
    unsafe { copy.set_len(data.len()) };
    (copy, finite, range)
}

crate::cpu::fast_fn!(
    /// Copies `block` into `out`; whether it is all finite, and its range but NaN.
    fn copy_scan_block<T: Element>(out: &mut [MaybeUninit<T>], block: &[T]) -> (bool, (f64, f64)) => copy_scan_block_in
);

#[inline(always)]
fn copy_scan_block_in<T: Element>(out: &mut [MaybeUninit<T>], block: &[T]) -> (bool, (f64, f64)) {
    for (o, &x) in out.iter_mut().zip(block) {
        o.write(x);
    }
    (nonfinite::all_finite(block), block_range(block, |_| true))
}

/// `fraction` of the range lo..hi (0 when lo > hi, no values), never above the exact product.
pub fn relative_bound(lo: f64, hi: f64, fraction: f64) -> f64 {
    if lo > hi {
        return 0.0;
    }
    let range = hi - lo;
    // A range wider than f64::MAX is split so the bound stays finite.
    let eb = if range.is_finite() { fraction * range } else { fraction * hi - fraction * lo };
    // Rounding may have nudged eb above fraction * (hi - lo) taken exactly; step back a few ulps
    // so the promise holds against the exact product.
    eb * (1.0 - 4.0 * f64::EPSILON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_scanned_copies_and_finds_the_range_of_all_but_nan() {
        let n = 3 * BLOCK + 5;
        let mut data: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 - 400.0).collect();
        assert_eq!(copy_scanned(&data), (data.clone(), true, (-400.0, 599.0)));
        data[7] = f32::NAN;
        data[BLOCK + 1] = f32::INFINITY;
        let (copy, finite, all) = copy_scanned(&data);
        assert!(copy.iter().zip(&data).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!((finite, all), (false, (-400.0, f64::INFINITY)));
        assert_eq!(finite_range_from(&data, all), (-400.0, 599.0));
    }

    #[test]
    fn finite_range_where_takes_only_the_kept_finite_values() {
        let n = 2 * BLOCK + 13;
        let mut data: Vec<f64> = (0..n).map(|i| ((i * 7919) % 1001) as f64 - 500.0).collect();
        let keep: Vec<bool> = (0..n).map(|i| i % 3 != 0).collect();
        data[1] = f64::NAN;
        data[BLOCK + 2] = f64::NEG_INFINITY;
        data[n - 1] = 1e300;
        data[3] = -1e300; // not kept
        let kept: Vec<f64> = data.iter().zip(&keep).filter(|(x, &k)| k && x.is_finite()).map(|(&x, _)| x).collect();
        let want = (kept.iter().copied().fold(f64::INFINITY, f64::min), kept.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        assert_eq!(finite_range_where(&data, &keep), want);
        let (lo, hi) = finite_range_where(&data, &vec![false; n]);
        assert!(lo > hi);
    }

    #[test]
    fn finite_range_without_finite_values() {
        for data in [vec![], vec![f64::NAN; 3], vec![f64::INFINITY, f64::NEG_INFINITY, f64::NAN]] {
            let (lo, hi) = finite_range(&data);
            assert!(lo > hi, "{data:?}");
            assert_eq!(relative_bound(lo, hi, 0.1), 0.0);
            let (_, _, all) = copy_scanned(&data);
            let (lo, hi) = finite_range_from(&data, all);
            assert!(lo > hi, "{data:?}");
        }
    }
}
