//! NaN and ±Inf are kept bit for bit outside the predictors: they are listed with their
//! positions and replaced by the mean of the finite values before prediction, so one NaN does
//! not spoil the predictions of its neighbours (a land mask in an ocean field, say).

use crate::element::Element;
use rayon::prelude::*;
use std::borrow::Cow;

/// Elements per parallel block of the sweeps below.
const BLOCK: usize = 1 << 16;

/// Returns the data with non-finite values replaced, and the replaced (position, value) pairs.
pub fn fill<T: Element>(data: &[T]) -> (Cow<'_, [T]>, Vec<(usize, T)>) {
    // Blocks with a plain counting loop: a per-element `all` does not vectorise.
    if data.par_chunks(BLOCK).all(|b| b.iter().filter(|x| x.is_finite()).count() == b.len()) {
        return (Cow::Borrowed(data), Vec::new());
    }
    let mut owned = data.to_vec();
    let patches = replace(&mut owned);
    (Cow::Owned(owned), patches)
}

/// `fill` for a predictor that rebuilds the values in a buffer of its own: borrowed data is
/// copied and checked in one sweep, so the array is read once instead of twice.
pub fn fill_owned<T: Element>(data: Cow<'_, [T]>) -> (Vec<T>, Vec<(usize, T)>) {
    let (mut owned, finite) = match data {
        Cow::Borrowed(data) => {
            let mut owned = Vec::with_capacity(data.len());
            let finite = owned.spare_capacity_mut()[..data.len()]
                .par_chunks_mut(BLOCK)
                .zip(data.par_chunks(BLOCK))
                .map(|(out, block)| {
                    let mut count = 0;
                    for (o, &x) in out.iter_mut().zip(block) {
                        o.write(x);
                        count += x.is_finite() as usize;
                    }
                    count == block.len()
                })
                .reduce(|| true, |a, b| a && b);
            // Safety: the sweep above wrote every element.
            unsafe { owned.set_len(data.len()) };
            (owned, finite)
        }
        Cow::Owned(owned) => {
            let finite = owned.par_chunks(BLOCK).all(|b| b.iter().filter(|x| x.is_finite()).count() == b.len());
            (owned, finite)
        }
    };
    let patches = if finite { Vec::new() } else { replace(&mut owned) };
    (owned, patches)
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
