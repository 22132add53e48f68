//! Keeping a level's mean: error-feedback predictors can leave errors that all lean one way
//! where a field varies by less than the bound from cell to cell (the reconstruction trails a
//! slow ramp by almost the whole bound). Every value is still within the bound, but the mean of
//! the level moves by a good part of it, which conservation laws notice.
//!
//! When the mean error of a (level, field) exceeds `TOLERANCE` of the bound, the level is coded
//! again with a smaller bound `eb'` and a constant offset (at most `eb - eb'`) that cancels the
//! mean error is recorded and added on read: every stored value stays within the bound and the
//! level's mean (so the volume-weighted mean of the hierarchy) is kept to rounding.
//!
//! The mean error scales with the bound, so the first pass's lean `beta = |mean error| / eb`
//! sizes the room: `eb' = eb / (1 + MARGIN * beta)` leaves room for the recoded lean with a
//! margin. Shrinking the bound by a factor `f` costs about `log2(f)` bits per cell, so a lean of
//! 5% costs 0.14 bits instead of the 1 bit of halving. Only when the recoded lean does not fit
//! its room is the level coded a third time, with half the bound.

pub const TOLERANCE: f64 = 0.02;
pub const MARGIN: f64 = 2.0;

/// `compress(eb)` with the level's mean kept; `compress` returns its result and the summed
/// error of what it wrote with how many cells that covers. `peak` is the largest magnitude of a
/// stored value and `epsilon` its type's, for the rounding of value + offset. Returns the result,
/// the bound it was quantized with and the offset to add to every stored value on read.
pub fn conserve<R, E>(
    mut compress: impl FnMut(f64) -> Result<(R, f64, u64), E>,
    eb: f64,
    peak: impl FnOnce() -> Result<f64, E>,
    epsilon: f64,
) -> Result<(R, f64, f64), E> {
    let (result, total, count) = compress(eb)?;
    if eb == 0.0 || count == 0 || (total / count as f64).abs() <= TOLERANCE * eb {
        return Ok((result, eb, 0.0));
    }
    // Room for the float rounding of value + offset, so the sum never leaves the bound.
    let rounding = 4.0 * epsilon * peak()?;
    let lean = (total / count as f64).abs() / eb;
    let shrunk = eb / (1.0 + MARGIN * lean);
    let tries: Vec<f64> = if shrunk > eb / 2.0 { vec![shrunk, eb / 2.0] } else { vec![eb / 2.0] };
    let mut last = None;
    for smaller in tries {
        let (result, total, count) = compress(smaller)?;
        let room = eb - smaller - rounding;
        let mean = total / count as f64;
        if room > 0.0 && mean.abs() <= room {
            return Ok((result, smaller, -mean));
        }
        last = Some((result, smaller, if room > 0.0 { (-mean).clamp(-room, room) } else { 0.0 }));
    }
    Ok(last.expect("tried at least once"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a level's compression whose mean error is `lean(eb) * eb` over 1000
    /// cells; returns what `conserve` chose and the bounds it coded with.
    fn run(lean: impl Fn(f64) -> f64) -> (f64, f64, Vec<f64>) {
        let mut calls = Vec::new();
        let (_, eb, offset) = conserve(
            |eb| -> Result<((), f64, u64), ()> {
                calls.push(eb);
                Ok(((), lean(eb) * eb * 1000.0, 1000))
            },
            1.0,
            || Ok(0.0),
            f64::EPSILON,
        )
        .unwrap();
        (eb, offset, calls)
    }

    #[test]
    fn a_small_lean_is_left_alone() {
        for lean in [0.0, 0.015, -0.015] {
            assert_eq!(run(|_| lean), (1.0, 0.0, vec![1.0]));
        }
    }

    #[test]
    fn the_bound_shrinks_by_what_the_lean_needs() {
        // The lean scales with the bound, as error feedback makes it: one recode with a bound
        // shrunk by 1 + 2|lean| leaves room for the offset, instead of halving.
        for lean in [0.05, -0.2, 0.4] {
            let (eb, offset, calls) = run(|_| lean);
            assert_eq!(calls, vec![1.0, eb]);
            assert!((eb - 1.0 / (1.0 + 2.0 * f64::abs(lean))).abs() < 1e-12);
            assert!((offset + lean * eb).abs() < 1e-12 && offset.abs() <= 1.0 - eb);
        }
    }

    #[test]
    fn halves_when_the_shrunk_recode_still_leans_too_far() {
        // An erratic lean (as Lorenzo's error feedback gives on a slow ramp) that does not fit
        // the room of the shrunk bound: coded a third time at half the bound.
        let (eb, offset, calls) = run(|eb| {
            if eb == 1.0 {
                0.1
            } else if eb > 0.5 {
                -0.9
            } else {
                0.3
            }
        });
        assert_eq!(calls.len(), 3);
        assert!((calls[1] - 1.0 / 1.2).abs() < 1e-12 && calls[2] == 0.5 && eb == 0.5);
        assert!((offset + 0.15).abs() < 1e-12);
    }

    #[test]
    fn goes_straight_to_half_for_a_large_lean() {
        let (eb, offset, calls) = run(|_| 0.6);
        assert_eq!(calls, vec![1.0, 0.5]);
        assert!(eb == 0.5 && (offset + 0.3).abs() < 1e-12);
    }
}
