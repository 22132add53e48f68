//! Linear-scaling quantization of prediction residuals with a bin radius.
//!
//! Symbol 0 means "unpredictable": the value is kept exactly in a side list (dual quantization
//! gives it its own meaning, see `predictor::dual_quant`). Symbol
//! `q + radius` means the value is rebuilt as `pred + q * 2 * eb`, rounded to the element
//! type. The encoder computes that reconstruction with the decoder's own expression and keeps
//! the value exactly when the rounded result misses the bound, so the bound holds after the
//! float32 cast and whatever the magnitudes involved.

use crate::element::Element;

/// Default bin radius: codes span [-32767, 32767] and fit a u16 symbol.
pub const DEFAULT_RADIUS: u32 = 32768;

/// Rounds half away from zero by truncation; NaN gives 0 and out-of-range values saturate,
/// which callers then reject by range.
#[inline(always)]
pub fn round_to_int(t: f64) -> i64 {
    if t >= 0.0 {
        (t + 0.5) as i64
    } else {
        (t - 0.5) as i64
    }
}

/// The i32 range, as f64 (both exact).
const I32_LOW: f64 = i32::MIN as f64;
const I32_HIGH: f64 = i32::MAX as f64;

#[derive(Clone, Copy, Debug)]
pub struct Quantizer {
    eb: f64,
    two_eb: f64,
    inv_two_eb: f64,
    radius: i64,
    /// Codes accepted: `lo..=hi`, within the radius. Narrower when a chunked stream reuses a
    /// codebook: codes it has no symbol for are kept exactly instead.
    lo: i64,
    hi: i64,
    /// Set when the chunk is coded in binary32 arithmetic (`single`).
    single: Option<Single>,
}

/// The bound in binary32, for chunks of f32 values coded in binary32 arithmetic: half the
/// work per vector of the binary64 forms.
#[derive(Clone, Copy, Debug)]
struct Single {
    two_eb: f32,
    inv_two_eb: f32,
    /// The largest binary32 not above `eb`. Rounding is monotone, so a rounded `|r - x|` below
    /// it means the exact difference is below it too.
    below_eb: f32,
}

impl Single {
    fn of(eb: f64, two_eb: f64, inv_two_eb: f64) -> Single {
        let e = eb as f32;
        let below_eb = if e as f64 > eb { f32::from_bits(e.to_bits() - 1) } else { e };
        Single { two_eb: two_eb as f32, inv_two_eb: inv_two_eb as f32, below_eb }
    }
}

/// The i32 range, as binary32 (both exact: -2^31 and the largest binary32 below 2^31).
const I32_LOW_SINGLE: f32 = -2147483648.0;
const I32_HIGH_SINGLE: f32 = 2147483520.0;

impl Quantizer {
    /// `eb` must be finite and >= 0; 0 means lossless (only exact predictions are coded).
    pub fn new(eb: f64, radius: u32) -> Quantizer {
        debug_assert!(eb.is_finite() && eb >= 0.0 && (2..=32768).contains(&radius));
        let inv_two_eb = if eb > 0.0 { 0.5 / eb } else { 0.0 };
        let radius = radius as i64;
        Quantizer { eb, two_eb: 2.0 * eb, inv_two_eb, radius, lo: 1 - radius, hi: radius - 1, single: None }
    }

    /// The same quantizer with another bound (same radius, accepted codes and arithmetic, so
    /// the same alphabet).
    pub fn with_eb(&self, eb: f64) -> Quantizer {
        Quantizer { lo: self.lo, hi: self.hi, ..Quantizer::new(eb, self.radius as u32) }.in_single(self.single.is_some())
    }

    /// With `on`, f32 values are predicted and quantized in binary32 arithmetic rather than
    /// binary64 (f64 values always use binary64). Lossless requests keep binary64, which
    /// compares bits.
    pub fn in_single(&self, on: bool) -> Quantizer {
        let single = (on && self.eb > 0.0).then(|| Single::of(self.eb, self.two_eb, self.inv_two_eb));
        Quantizer { single, ..*self }
    }

    /// The binary32 forms, if `T` is f32 and this quantizer uses them.
    #[inline(always)]
    fn single_for<T: Element>(&self) -> Option<Single> {
        if T::BYTES == 4 {
            self.single
        } else {
            None
        }
    }

    /// The code of `x` against `pred` in binary32 arithmetic, its reconstruction, and whether
    /// the code is accepted: `quantize_run`'s steps, in binary32.
    #[inline(always)]
    fn code_single(&self, s: &Single, x: f32, pred: f32) -> (bool, i32, f32) {
        let t = (x - pred) * s.inv_two_eb;
        let t = t + 0.5f32.copysign(t);
        let t = if t > I32_LOW_SINGLE { t } else { I32_LOW_SINGLE };
        let t = if t < I32_HIGH_SINGLE { t } else { I32_HIGH_SINGLE };
        // Safety: t is finite and within i32 after the clamp.
        let q: i32 = unsafe { t.to_int_unchecked() };
        let r = pred + q as f32 * s.two_eb;
        let ok = (self.lo as i32 <= q) & (q <= self.hi as i32) & ((r - x).abs() < s.below_eb);
        (ok, q, r)
    }

    /// Accepts only codes whose symbols are in `first..=last`.
    pub fn with_symbols(&self, first: usize, last: usize) -> Quantizer {
        let (lo, hi) = (first as i64 - self.radius, last as i64 - self.radius);
        Quantizer { lo: self.lo.max(lo), hi: self.hi.min(hi), ..*self }
    }

    /// Whether code `q` gets a symbol (else the value is kept exactly).
    #[inline(always)]
    pub fn accepts(&self, q: i64) -> bool {
        // A range test, not `q.abs()`: a saturated i64::MIN has no absolute value.
        self.lo <= q && q <= self.hi
    }

    pub fn eb(&self) -> f64 {
        self.eb
    }

    /// Number of distinct symbols (alphabet size of the entropy stage).
    pub fn alphabet(&self) -> usize {
        2 * self.radius as usize
    }

    #[inline(always)]
    fn rebuild<T: Element>(&self, pred: f64, q: i64) -> T {
        T::from_f64(pred + q as f64 * self.two_eb)
    }

    /// Quantizes `x` against `pred`; returns the symbol and the value the decoder will see.
    #[inline(always)]
    pub fn quantize<T: Element>(&self, x: T, pred: f64, exact: &mut Vec<T>) -> (u16, T) {
        let coded = self.quantize_value(x, pred);
        if coded.0 == 0 {
            exact.push(x);
        }
        coded
    }

    /// `quantize`, leaving the caller to keep `x` when the symbol is 0.
    #[inline(always)]
    pub fn quantize_value<T: Element>(&self, x: T, pred: f64) -> (u16, T) {
        if let Some(s) = self.single_for::<T>() {
            let (ok, q, r) = self.code_single(&s, x.to_f64() as f32, pred as f32);
            return if ok { ((q + self.radius as i32) as u16, T::from_f64(r as f64)) } else { (0, x) };
        }
        let xf = x.to_f64();
        let q = round_to_int((xf - pred) * self.inv_two_eb);
        if self.accepts(q) {
            let r: T = self.rebuild(pred, q);
            // A lossless request must also keep the sign of zero.
            if (r.to_f64() - xf).abs() <= self.eb && (self.eb > 0.0 || r.to_bits_u64() == x.to_bits_u64()) {
                return ((q + self.radius) as u16, r);
            }
        }
        (0, x)
    }

    /// `quantize` on a run, branch-free so it vectorizes. Points it cannot code take symbol 0
    /// and keep their value in `vals`; returns whether there were none. Lossless requests
    /// (which compare bits) are left entirely to `quantize`.
    #[inline(always)]
    pub fn quantize_run<T: Element>(&self, vals: &mut [T], pred: impl Fn(usize) -> f64, symbols: &mut [u16]) -> bool {
        if self.eb == 0.0 {
            symbols.fill(0);
            return false;
        }
        let (lo, hi, radius) = (self.lo as i32, self.hi as i32, self.radius as i32);
        let mut missed = 0u32;
        if let Some(single) = self.single_for::<T>() {
            for (k, (v, s)) in vals.iter_mut().zip(symbols.iter_mut()).enumerate() {
                let (ok, q, r) = self.code_single(&single, v.to_f64() as f32, pred(k) as f32);
                *s = if ok { (q + radius) as u16 } else { 0 };
                *v = if ok { T::from_f64(r as f64) } else { *v };
                missed += !ok as u32;
            }
            return missed == 0;
        }
        for (k, (v, s)) in vals.iter_mut().zip(symbols.iter_mut()).enumerate() {
            let (xf, pred) = (v.to_f64(), pred(k));
            // `round_to_int`, without branches. The clamp stands in for the saturating `as`
            // cast, which compiles to scalar code: beyond i32 the code saturates and is refused
            // by range, and so is NaN (clamped to i32::MIN; `as` gave 0, then failing the
            // bound test: the same symbol 0 either way).
            let t = (xf - pred) * self.inv_two_eb;
            let t = t + 0.5f64.copysign(t);
            let t = if t > I32_LOW { t } else { I32_LOW };
            let t = if t < I32_HIGH { t } else { I32_HIGH };
            // Safety: t is finite and within i32 after the clamp.
            let q: i32 = unsafe { t.to_int_unchecked() };
            let r = T::from_f64(pred + q as f64 * self.two_eb);
            let ok = (lo <= q) & (q <= hi) & ((r.to_f64() - xf).abs() <= self.eb);
            *s = if ok { (q + radius) as u16 } else { 0 };
            *v = if ok { r } else { *v };
            missed += !ok as u32;
        }
        missed == 0
    }

    /// `recover` on a run; symbols 0 are left for the caller; returns whether there were none.
    #[inline(always)]
    pub fn recover_run<T: Element>(&self, symbols: &[u16], pred: impl Fn(usize) -> f64, vals: &mut [T]) -> bool {
        let radius = self.radius as i32;
        let mut zeros = 0u32;
        if let Some(single) = self.single_for::<T>() {
            for (k, (v, &s)) in vals.iter_mut().zip(symbols).enumerate() {
                *v = T::from_f64((pred(k) as f32 + (s as i32 - radius) as f32 * single.two_eb) as f64);
                zeros += (s == 0) as u32;
            }
            return zeros == 0;
        }
        for (k, (v, &s)) in vals.iter_mut().zip(symbols).enumerate() {
            *v = T::from_f64(pred(k) + (s as i32 - radius) as f64 * self.two_eb);
            zeros += (s == 0) as u32;
        }
        zeros == 0
    }

    /// The symbol of a zero residual (the value rebuilt as its prediction).
    #[inline(always)]
    pub fn zero_symbol(&self) -> u16 {
        self.radius as u16
    }

    /// Inverse of `quantize` for a nonzero symbol.
    #[inline(always)]
    pub fn recover<T: Element>(&self, sym: u16, pred: f64) -> T {
        if let Some(s) = self.single_for::<T>() {
            return T::from_f64((pred as f32 + (sym as i32 - self.radius as i32) as f32 * s.two_eb) as f64);
        }
        self.rebuild(pred, sym as i64 - self.radius)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_holds_after_float32_rounding() {
        let q = Quantizer::new(1e-3, DEFAULT_RADIUS);
        let mut exact = Vec::new();
        for &x in &[1.0f32, 3.4e38, -3.4e38, 1e-40, 12345.678, f32::MAX, f32::MIN_POSITIVE] {
            for &pred in &[0.0, x as f64 * 0.999, x as f64 + 7e-4, 1e30] {
                let (s, r) = q.quantize(x, pred, &mut exact);
                assert!(((r as f64) - (x as f64)).abs() <= 1e-3, "{x} {pred} {s} {r}");
            }
        }
    }

    #[test]
    fn lossless_when_bound_is_zero() {
        let q = Quantizer::new(0.0, DEFAULT_RADIUS);
        let mut exact = Vec::new();
        assert_eq!(q.quantize(2.5f64, 2.5, &mut exact), (32768, 2.5));
        assert_eq!(q.quantize(2.5f64, 2.0, &mut exact), (0, 2.5));
        let (_, r) = q.quantize(-0.0f64, 0.0, &mut exact);
        assert!(r.is_sign_negative());
        assert_eq!(exact.len(), 2);
    }

    #[test]
    fn saturated_codes_are_not_wrapped_into_the_alphabet() {
        // The residual overflows i64 and saturates to i64::MIN, whose absolute value wraps.
        let q = Quantizer::new(1e-7, DEFAULT_RADIUS);
        let mut exact = Vec::new();
        let x = 1.430_405_5e19_f32;
        let (s, r) = q.quantize(x, x as f64 + 1.9e12, &mut exact);
        assert_eq!((s, r), (0, x));
    }

    #[test]
    fn codes_outside_the_symbol_window_are_kept_exactly() {
        let q = Quantizer::new(0.5, DEFAULT_RADIUS).with_symbols(32766, 32770).with_eb(0.5);
        let mut exact = Vec::new();
        assert_eq!(q.quantize(2.0f64, 0.0, &mut exact), (32770, 2.0));
        assert_eq!(q.quantize(3.0f64, 0.0, &mut exact), (0, 3.0));
        assert_eq!(q.quantize(-2.0f64, 0.0, &mut exact), (32766, -2.0));
        assert_eq!(q.quantize(-3.0f64, 0.0, &mut exact), (0, -3.0));
        assert_eq!(exact, vec![3.0, -3.0]);
    }
}
