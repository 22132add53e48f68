//! First-order Lorenzo prediction in 1 to 4 dimensions, with error feedback (predictions use
//! reconstructed values). The chunk lives in a buffer padded by one layer of zeros before index 0
//! of every dimension, so the stencil needs no boundary cases.

use super::{Coded, DecodeVisitor, EncodeVisitor, Visit};
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::for_each_index;
use crate::quantizer::Quantizer;

/// A chunk with a zero layer before index 0 of every dimension.
pub struct Padded<T> {
    pub buf: Vec<T>,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

impl<T: Element> Padded<T> {
    pub fn zeros(shape: &[usize]) -> Self {
        let mut strides = vec![1usize; shape.len()];
        for d in (0..shape.len() - 1).rev() {
            strides[d] = strides[d + 1] * (shape[d + 1] + 1);
        }
        let len = strides[0] * (shape[0] + 1);
        Padded { buf: vec![T::default(); len], shape: shape.to_vec(), strides }
    }

    pub fn from_dense(data: &[T], shape: &[usize]) -> Self {
        let mut p = Self::zeros(shape);
        let n = shape[shape.len() - 1];
        let mut rows = Vec::new();
        p.row_starts(&vec![0; shape.len()], shape, &mut rows);
        for (r, &start) in rows.iter().enumerate() {
            p.buf[start..start + n].copy_from_slice(&data[r * n..(r + 1) * n]);
        }
        p
    }

    pub fn to_dense(&self) -> Vec<T> {
        let n = self.shape[self.shape.len() - 1];
        let mut out = Vec::with_capacity(self.shape.iter().product());
        let mut rows = Vec::new();
        self.row_starts(&vec![0; self.shape.len()], &self.shape, &mut rows);
        for start in rows {
            out.extend_from_slice(&self.buf[start..start + n]);
        }
        out
    }

    /// Padded index of the first element of every row of the sub-box (`origin`, `extent`).
    pub fn row_starts(&self, origin: &[usize], extent: &[usize], out: &mut Vec<usize>) {
        let nd = self.shape.len();
        out.clear();
        for_each_index(&extent[..nd - 1], |pos| {
            let base: usize = (0..nd - 1).map(|d| (origin[d] + pos[d] + 1) * self.strides[d]).sum();
            out.push(base + origin[nd - 1] + 1);
        });
    }
}

/// The Lorenzo stencil for `K = 2^d - 1` neighbours: every corner of the unit cell behind the
/// point, signed by the parity of the number of dimensions it steps back in.
pub struct Stencil<const K: usize> {
    off: [usize; K],
}

impl<const K: usize> Stencil<K> {
    pub fn new(padded_strides: &[usize]) -> Self {
        let mut off = [0usize; K];
        for (m, o) in off.iter_mut().enumerate() {
            let subset = m + 1;
            *o = (0..padded_strides.len()).filter(|d| subset >> d & 1 == 1).map(|d| padded_strides[d]).sum();
        }
        Stencil { off }
    }

    /// The sum of the signed corners, in corner order (format.md fixes it). Adding or
    /// subtracting is bit for bit adding the corner times +-1; the sign follows from the loop
    /// index, which the compiler unrolls, so no multiply is left on the row's dependency chain.
    #[inline(always)]
    pub fn predict<T: Element>(&self, buf: &[T], i: usize) -> f64 {
        let mut p = 0.0;
        for m in 0..K {
            let x = buf[i - self.off[m]].to_f64();
            if (m + 1).count_ones() % 2 == 1 {
                p += x;
            } else {
                p -= x;
            }
        }
        p
    }
}

/// Runs `$body` with `$st` bound to the stencil for the padded strides' dimensionality.
macro_rules! with_stencil {
    ($strides:expr, $st:ident => $body:expr) => {
        match $strides.len() {
            1 => {
                let $st = $crate::predictor::lorenzo::Stencil::<1>::new($strides);
                $body
            }
            2 => {
                let $st = $crate::predictor::lorenzo::Stencil::<3>::new($strides);
                $body
            }
            3 => {
                let $st = $crate::predictor::lorenzo::Stencil::<7>::new($strides);
                $body
            }
            _ => {
                let $st = $crate::predictor::lorenzo::Stencil::<15>::new($strides);
                $body
            }
        }
    };
}
pub(crate) use with_stencil;

/// Rows coded in lockstep by `walk_box`.
const LANES: usize = 4;

/// Visits the sub-box (`origin`, `extent`) of the padded chunk in C order with Lorenzo predictions.
///
/// Each point depends on the one before it in its row, a chain of a dozen dependent floating
/// point operations that leaves most of the processor idle. So `LANES` consecutive rows are
/// coded together, each one point behind the row before it. A point's neighbours in earlier
/// rows sit in its own column and the one before, which every earlier row of the group has
/// passed by then (and rows before the group are done), so every point sees the neighbours it
/// would see in C order: the result is bit for bit the same.
pub fn walk_box<T: Element, V: Visit<T>, const K: usize>(
    p: &mut Padded<T>,
    st: &Stencil<K>,
    origin: &[usize],
    extent: &[usize],
    rows: &mut Vec<usize>,
    v: &mut V,
) {
    let nd = extent.len();
    let n = extent[nd - 1];
    p.row_starts(origin, extent, rows);
    let lanes = if nd == 1 { 1 } else { LANES };
    for group in rows.chunks(lanes) {
        if group.len() == 1 {
            for i in group[0]..group[0] + n {
                let pred = st.predict(&p.buf, i);
                p.buf[i] = v.visit(p.buf[i], pred);
            }
            continue;
        }
        let mut starts = [0usize; LANES];
        let mut slots = [0usize; LANES];
        for (m, s) in starts.iter_mut().enumerate() {
            *s = m * n;
        }
        let r = group.len();
        v.begin_lanes(&starts[..r], &mut slots[..r]);
        for t in 0..n + r - 1 {
            // Lane m is at column t - m.
            for m in t.saturating_sub(n - 1)..r.min(t + 1) {
                let c = t - m;
                let i = group[m] + c;
                let pred = st.predict(&p.buf, i);
                p.buf[i] = v.visit_lane(starts[m] + c, p.buf[i], pred, &mut slots[m]);
            }
        }
        v.end_lanes(r * n);
    }
}

fn walk<T: Element, V: Visit<T>>(p: &mut Padded<T>, v: &mut V) {
    let strides = p.strides.clone();
    let shape = p.shape.clone();
    let origin = vec![0; shape.len()];
    let mut rows = Vec::new();
    with_stencil!(&strides, st => walk_box(p, &st, &origin, &shape, &mut rows, v))
}

pub fn encode<T: Element>(data: &[T], shape: &[usize], q: &Quantizer) -> Coded<T> {
    encode_padded(data, shape, q).0
}

/// `encode`, and the padded chunk the walk rebuilt in place as a decoder will.
pub fn encode_padded<T: Element>(data: &[T], shape: &[usize], q: &Quantizer) -> (Coded<T>, Padded<T>) {
    let mut p = Padded::from_dense(data, shape);
    let mut symbols = vec![0u16; data.len()];
    let mut v = EncodeVisitor::new(q, &mut symbols);
    walk(&mut p, &mut v);
    let (exact, absent) = (v.exact, v.absent);
    (Coded { symbols, exact, side: Vec::new(), absent }, p)
}

pub fn decode<T: Element>(shape: &[usize], q: &Quantizer, symbols: &[u16], exact: &[T], side: &[u8]) -> Result<Vec<T>> {
    if !side.is_empty() {
        return Err(corrupt!("Lorenzo chunks carry no side information, found {} bytes", side.len()));
    }
    let mut p = Padded::zeros(shape);
    let mut v = DecodeVisitor::new(q, symbols, exact)?;
    walk(&mut p, &mut v);
    Ok(p.to_dense())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantizer::DEFAULT_RADIUS;
    use proptest::prelude::*;

    /// The walk as the format states it: one point after the other in C order.
    fn c_order<T: Element, V: Visit<T>>(p: &mut Padded<T>, v: &mut V) {
        let strides = p.strides.clone();
        let mut rows = Vec::new();
        p.row_starts(&vec![0; p.shape.len()], &p.shape.clone(), &mut rows);
        let n = p.shape[p.shape.len() - 1];
        with_stencil!(&strides, st => {
            for &start in &rows {
                for i in start..start + n {
                    let pred = st.predict(&p.buf, i);
                    p.buf[i] = v.visit(p.buf[i], pred);
                }
            }
        })
    }

    fn shape() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(1usize..7, 1..=4)
    }

    proptest! {
        // Lanes must reproduce the C-order walk bit for bit, exceptions included: values kept
        // exactly (far from their prediction), "don't care" cells (NaN), lossless requests.
        #[test]
        fn lanes_match_the_c_order_walk(shape in shape(), seed in any::<u64>(), lossless in any::<bool>()) {
            let n: usize = shape.iter().product();
            let mut next = crate::test_rng::xorshift(seed);
            let data: Vec<f32> = (0..n)
                .map(|k| {
                    let state = next();
                    match state % 11 {
                        0 => f32::NAN,
                        1 => (state % 1000) as f32 * 1e3,
                        _ => k as f32 * 0.01 + (state % 100) as f32 * 1e-3,
                    }
                })
                .collect();
            let q = Quantizer::new(if lossless { 0.0 } else { 1e-3 }, DEFAULT_RADIUS);
            let coded = encode(&data, &shape, &q);
            let mut symbols = vec![0u16; n];
            let mut p = Padded::from_dense(&data, &shape);
            let mut v = EncodeVisitor::new(&q, &mut symbols);
            c_order(&mut p, &mut v);
            let (exact, absent) = (v.exact, v.absent);
            prop_assert_eq!(&coded.symbols, &symbols);
            prop_assert_eq!(coded.exact.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), exact.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
            prop_assert_eq!(&coded.absent, &absent);
            let decoded = decode(&shape, &q, &coded.symbols, &coded.exact, &[]).unwrap();
            prop_assert_eq!(decoded.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), p.to_dense().iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        }
    }
}
