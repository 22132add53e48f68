//! NaN and ±Inf are kept bit for bit outside the predictors: they are listed with their
//! positions and replaced by the mean of the finite values before prediction, so one NaN does
//! not spoil the predictions of its neighbours (a land mask in an ocean field, say).

use crate::element::Element;
use rayon::prelude::*;
use std::borrow::Cow;

/// Returns the data with non-finite values replaced, and the replaced (position, value) pairs.
pub fn fill<T: Element>(data: &[T]) -> (Cow<'_, [T]>, Vec<(usize, T)>) {
    // Blocks with a plain counting loop: a per-element `all` does not vectorise.
    if data.par_chunks(1 << 16).all(|b| b.iter().filter(|x| x.is_finite()).count() == b.len()) {
        return (Cow::Borrowed(data), Vec::new());
    }
    let (sum, count) = data.iter().filter(|x| x.is_finite()).fold((0.0f64, 0usize), |(s, c), x| (s + x.to_f64(), c + 1));
    let mean = if count > 0 { T::from_f64(sum / count as f64) } else { T::default() };
    let mean = if mean.is_finite() { mean } else { T::default() };
    let mut patches = Vec::new();
    let filled = data
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            if x.is_finite() {
                x
            } else {
                patches.push((i, x));
                mean
            }
        })
        .collect();
    (Cow::Owned(filled), patches)
}
