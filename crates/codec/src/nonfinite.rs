//! NaN and ±Inf are kept bit for bit outside the predictors: they are listed with their
//! positions and replaced by the mean of the finite values before prediction, so one NaN does
//! not spoil the predictions of its neighbours (a land mask in an ocean field, say).

use crate::cpu;
use crate::element::Element;
use crate::range;
use rayon::prelude::*;
use std::borrow::Cow;

/// Elements per parallel block of the sweeps below.
const BLOCK: usize = 1 << 16;

/// Returns the data with non-finite values replaced, and the replaced (position, value) pairs.
pub fn fill<T: Element>(data: &[T]) -> (Cow<'_, [T]>, Vec<(usize, T)>) {
    if data.par_chunks(BLOCK).all(all_finite) {
        return (Cow::Borrowed(data), Vec::new());
    }
    let mut owned = data.to_vec();
    let patches = replace(&mut owned);
    (Cow::Owned(owned), patches)
}

/// `fill` for a predictor that rebuilds the values in a buffer of its own: borrowed data is
/// copied and checked in one sweep, so the array is read once instead of twice.
pub fn fill_owned<T: Element>(data: Cow<'_, [T]>) -> (Vec<T>, Vec<(usize, T)>) {
    match data {
        Cow::Borrowed(data) => {
            let (copy, finite, _) = range::copy_scanned(data);
            fill_copy(copy, finite)
        }
        Cow::Owned(owned) => {
            let finite = owned.par_chunks(BLOCK).all(all_finite);
            fill_copy(owned, finite)
        }
    }
}

/// `fill_owned` of values already copied, `finite` telling whether all of them are.
pub fn fill_copy<T: Element>(mut values: Vec<T>, finite: bool) -> (Vec<T>, Vec<(usize, T)>) {
    let patches = if finite { Vec::new() } else { replace(&mut values) };
    (values, patches)
}

/// Whether every value of `block` is finite. A counting loop: a per-element `all` does not
/// vectorise.
#[inline(always)]
pub fn all_finite<T: Element>(block: &[T]) -> bool {
    cpu::count_where(block, |x| x.is_finite()) == block.len()
}

/// Replaces the non-finite values by the mean of the finite ones; returns what it replaced.
fn replace<T: Element>(values: &mut [T]) -> Vec<(usize, T)> {
    let (sum, count) = values.iter().filter(|x| x.is_finite()).fold((0.0f64, 0usize), |(s, c), x| (s + x.to_f64(), c + 1));
    let mean = if count > 0 { T::from_f64(sum / count as f64) } else { T::default() };
    let mean = if mean.is_finite() { mean } else { T::default() };
    let mut patches = Vec::new();
    for (i, x) in values.iter_mut().enumerate() {
        if !x.is_finite() {
            patches.push((i, *x));
            *x = mean;
        }
    }
    patches
}
