//! Fitted linear prediction for unit block sets: Lorenzo's walk and error feedback, but each
//! point is predicted from the `3^d - 1` reconstructed points of the cube two cells behind it,
//! with weights fitted to the array by least squares instead of Lorenzo's fixed signs.
//!
//! Lorenzo's stencil is exact for fields linear in each coordinate; the fitted one learns how
//! the field's own spectrum correlates a point with its neighbours, which on smooth data cuts
//! the residuals of Lorenzo by half and more. The weights come from a sample of the array's
//! blocks and are shared by all of them (stored once per array, beside its coder's statistics).
//!
//! Points nearer than two cells to a block's lower faces lack part of that cube: each uses the
//! part it has (the cube reaching `min(p_k, 2)` cells back along dimension `k`), with weights
//! fitted for that part. There are `3^d` such classes; a face point thus gets a fitted stencil
//! in the face instead of Lorenzo's. In a partly stored block, a point takes the largest class
//! whose cells are all stored.
//!
//! Weights are fitted under the constraint that they sum to one (a constant field is predicted
//! exactly but for float64 rounding, whatever its level, and the fit is
//! conditioned on differences, not magnitudes), with
//! a ridge term for the reconstruction noise: neighbours are known only to within the bound, and
//! large alternating weights would amplify that noise.

use super::{Coded, DecodeVisitor, EncodeVisitor, Visit};
use crate::bytes::ByteReader;
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::{for_each_index, strides};
use crate::quantizer::Quantizer;
use crate::scratch;
use rayon::prelude::*;

/// Cells before index 0 of every dimension, read as zeros by the face points' Lorenzo.
const PAD: usize = 2;
/// Rows used to fit the weights, spread evenly over the sample: a few thousand pin down 26
/// weights (more changed the stored bytes by under 0.3%), and the normal equations cost each
/// row its stencil squared, for every class.
const FIT_ROWS: usize = 1 << 13;
const MAX_DIMS: usize = 3;

/// The weights of every class's stencil (`classes(ndim)` order, each in `offsets` order).
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    ndim: usize,
    classes: Vec<Vec<f64>>,
}

/// Every class: per dimension how many cells back the stencil reaches (0, 1 or 2), in C order
/// of those reaches; the last is the full cube two behind (format.md, section 14.2).
fn classes(ndim: usize) -> Vec<Vec<usize>> {
    (0..3usize.pow(ndim as u32)).map(|m| (0..ndim).map(|d| m / 3usize.pow((ndim - 1 - d) as u32) % 3).collect()).collect()
}

/// The class of a point `depth[k] = min(p_k, 2)` cells in along each dimension.
fn class_index(depth: impl Iterator<Item = usize>) -> usize {
    depth.fold(0, |acc, d| acc * 3 + d.min(2))
}

/// Offsets of the cube reaching `reach[k]` cells behind a point along dimension `k`, the point
/// itself excluded, in C order (the slowest dimension's digit first).
fn offsets(reach: &[usize]) -> Vec<Vec<isize>> {
    let mut out = vec![Vec::new()];
    for &r in reach {
        out = out.into_iter().flat_map(|o: Vec<isize>| (0..=r).map(move |v| [o.clone(), vec![v as isize - r as isize]].concat())).collect();
    }
    out.pop(); // the point itself, last in C order
    out
}

/// Lorenzo's signs on `offs`: `+1` for an odd number of steps back, `-1` for an even one, and
/// 0 for an offset reaching two cells back along some dimension (outside Lorenzo's cube).
fn lorenzo_signs(offs: &[Vec<isize>]) -> Vec<f64> {
    offs.iter()
        .map(|o| match (o.iter().any(|&v| v < -1), o.iter().filter(|&&v| v != 0).count() % 2) {
            (true, _) => 0.0,
            (false, 1) => 1.0,
            (false, _) => -1.0,
        })
        .collect()
}

impl Weights {
    /// Whether fitted prediction applies to blocks of `ndim` dimensions.
    pub fn supports(ndim: usize) -> bool {
        (1..=MAX_DIMS).contains(&ndim)
    }

    /// Lorenzo's own weights in every class.
    #[cfg(test)]
    fn lorenzo(ndim: usize) -> Weights {
        Weights { ndim, classes: classes(ndim).iter().map(|c| lorenzo_signs(&offsets(c))).collect() }
    }

    /// Least-squares weights for the blocks `samples` (values in C order over their shape; NaN
    /// marks absent cells, which no fitted row touches), for reconstructions within `eb`.
    /// `None` when the sample has too few rows or the fit fails.
    pub fn fit<T: Element>(samples: &[(Vec<T>, Vec<usize>)], eb: f64) -> Option<Weights> {
        let ndim = samples.first()?.1.len();
        if !(Weights::supports(ndim) && eb.is_finite() && eb > 0.0) {
            return None;
        }
        let far = offsets(&vec![2; ndim]);
        let rows = fit_rows(samples, &far);
        let moments = Moments::of(samples, &rows, &far);
        let classes = classes(ndim)
            .iter()
            .map(|c| {
                // Every class's cube lies in the far one: its offsets as indices there.
                let within: Vec<usize> =
                    offsets(c).iter().map(|o| far.iter().position(|f| f == o).expect("a class offset in the far cube")).collect();
                fit_stencil(&moments, &within, eb)
            })
            .collect::<Option<_>>()?;
        Some(Weights { ndim, classes })
    }

    /// Writes every class's weights but the first, which is one minus the others, each in three
    /// bytes (format.md 14.1): they are read with every region of a small array, so each byte
    /// counts.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.ndim as u8);
        for w in self.classes.iter().filter(|c| !c.is_empty()).flat_map(|c| &c[1..]) {
            out.extend_from_slice(&(*w as f32).to_bits().to_le_bytes()[1..]);
        }
    }

    /// Reads weights written by `write`, or with `all` every class's weights (as arrays written
    /// before the first was implied); every weight must be finite.
    pub fn read(r: &mut ByteReader, all: bool) -> Result<Weights> {
        let ndim = r.u8("fitted prediction dimensions")? as usize;
        if !Weights::supports(ndim) {
            return Err(corrupt!("fitted prediction for {ndim} dimensions (1 to {MAX_DIMS} are defined)"));
        }
        // Four bytes per weight in the tables of earlier arrays, else the top three.
        let width = if all { 4 } else { 3 };
        let mut take = |n: usize| -> Result<Vec<f64>> {
            (0..n)
                .map(|_| {
                    let mut bytes = [0u8; 4];
                    bytes[4 - width..].copy_from_slice(r.take(width, "fitted prediction weight")?);
                    let w = f32::from_le_bytes(bytes) as f64;
                    if w.is_finite() {
                        Ok(w)
                    } else {
                        Err(corrupt!("fitted prediction weight {w} is not finite"))
                    }
                })
                .collect()
        };
        let classes = classes(ndim)
            .iter()
            .map(|c| match offsets(c).len() {
                0 => Ok(Vec::new()),
                k if all => take(k),
                k => take(k - 1).map(|rest| with_first(&rest)),
            })
            .collect::<Result<_>>()?;
        Ok(Weights { ndim, classes })
    }
}

/// The rows to fit on, as (sample, index): up to `FIT_ROWS` points spread evenly over the
/// samples' points at least two cells in, each with its whole cube `far` behind it finite (not
/// absent), so every class fits on the same rows.
fn fit_rows<T: Element>(samples: &[(Vec<T>, Vec<usize>)], far: &[Vec<isize>]) -> Vec<(usize, usize)> {
    let interior = |shape: &[usize]| -> Vec<usize> { shape.iter().map(|&n| n.saturating_sub(PAD)).collect() };
    let total: usize = samples.iter().map(|(_, shape)| interior(shape).iter().product::<usize>()).sum();
    let step = total.div_ceil(FIT_ROWS).max(1);
    let mut rows = Vec::new();
    let mut seen = 0usize;
    for (k, (values, shape)) in samples.iter().enumerate() {
        let strides = strides(shape);
        let lin = linear(far, &strides);
        for_each_index(&interior(shape), |pos| {
            seen += 1;
            if !(seen - 1).is_multiple_of(step) {
                return;
            }
            let i: usize = pos.iter().zip(&strides).map(|(&p, &s)| (p + PAD) * s).sum();
            if values[i].to_f64().is_finite() && lin.iter().all(|&o| values[i.wrapping_add_signed(o)].to_f64().is_finite()) {
                rows.push((k, i));
            }
        });
    }
    rows
}

/// Offsets as index steps in an array of C strides `strides`.
fn linear(offs: &[Vec<isize>], strides: &[usize]) -> Vec<isize> {
    offs.iter().map(|o| o.iter().zip(strides).map(|(&d, &s)| d * s as isize).sum()).collect()
}

/// Second moments of the far cube's values about the point, over the fitting rows: every
/// class's normal equations are sums of these (its cube is part of the far one), so the rows are
/// read once for all `3^d` classes rather than once per class.
struct Moments {
    /// `sum d_a d_b` for `b <= a` (row-major lower triangle), `d_a = x(far[a]) - y`.
    lower: Vec<f64>,
    rows: usize,
}

/// Rows summed per partial sum: partial sums are added in order, so the moments do not depend
/// on the number of threads.
const MOMENT_ROWS: usize = 1024;

impl Moments {
    fn of<T: Element>(samples: &[(Vec<T>, Vec<usize>)], rows: &[(usize, usize)], far: &[Vec<isize>]) -> Moments {
        let k = far.len();
        let lins: Vec<Vec<isize>> = samples.iter().map(|(_, shape)| linear(far, &strides(shape))).collect();
        let partial: Vec<Vec<f64>> = rows
            .par_chunks(MOMENT_ROWS)
            .map(|part| {
                let mut lower = vec![0.0f64; k * (k + 1) / 2];
                let mut d = vec![0.0f64; k];
                for &(sample, i) in part {
                    let (values, lin) = (&samples[sample].0, &lins[sample]);
                    let y = values[i].to_f64();
                    for (x, &o) in d.iter_mut().zip(lin) {
                        *x = values[i.wrapping_add_signed(o)].to_f64() - y;
                    }
                    let mut at = 0;
                    for a in 0..k {
                        let da = d[a];
                        for (m, &db) in lower[at..at + a + 1].iter_mut().zip(&d[..=a]) {
                            *m += da * db;
                        }
                        at += a + 1;
                    }
                }
                lower
            })
            .collect();
        let mut lower = vec![0.0f64; k * (k + 1) / 2];
        for p in partial {
            lower.iter_mut().zip(p).for_each(|(m, v)| *m += v);
        }
        Moments { lower, rows: rows.len() }
    }

    fn get(&self, a: usize, b: usize) -> f64 {
        let (a, b) = if a >= b { (a, b) } else { (b, a) };
        self.lower[a * (a + 1) / 2 + b]
    }
}

/// Ridge least squares for one stencil, the far-cube offsets `within` (see `Moments`), with
/// the sum of weights fixed to one: the first offset's weight is one minus the others', so the
/// fit regresses `y - x_0` on `x_j - x_0`. With `d = x - y`, those sums are
/// `sum (x_a - x_0)(x_b - x_0) = M_ab - M_a0 - M_b0 + M_00` and
/// `sum (x_a - x_0)(y - x_0) = M_00 - M_a0`. The ridge is the variance of the differences'
/// reconstruction noise (each side uniform within `eb`) per row.
fn fit_stencil(m: &Moments, within: &[usize], eb: f64) -> Option<Vec<f64>> {
    let k = within.len();
    // The class of a block's first point has no stencil; one point alone gets the whole weight.
    if k <= 1 {
        return Some(vec![1.0; k]);
    }
    let free = k - 1;
    let count = m.rows;
    if count < 4 * k {
        return None;
    }
    let z = within[0];
    let m00 = m.get(z, z);
    let mut g = vec![0.0f64; free * free];
    let mut b = vec![0.0f64; free];
    for a in 0..free {
        let wa = within[a + 1];
        let ma0 = m.get(wa, z);
        b[a] = m00 - ma0;
        for c in 0..=a {
            let wc = within[c + 1];
            g[a * free + c] = m.get(wa, wc) - ma0 - m.get(wc, z) + m00;
        }
    }
    let ridge = count as f64 * 2.0 * eb * eb / 3.0;
    for a in 0..free {
        g[a * free + a] += ridge;
    }
    // The coder uses the weights as stored, so encoder and decoder agree.
    let rest: Vec<f64> = cholesky_solve(&mut g, &mut b, free)?.iter().map(|&v| stored_weight(v)).collect();
    rest.iter().all(|v| v.is_finite()).then(|| with_first(&rest))
}

/// `w` as the tables store it: a binary32 whose low 8 bits are zero (16 significant bits),
/// rounded to nearest. The weights apply to differences between neighbours
/// (they sum to one), so 2^-17 of a weight is far below what the fit itself can tell.
fn stored_weight(w: f64) -> f64 {
    let bits = (w as f32).to_bits();
    // Rounding may carry into the exponent, which is rounding up to the next power of two.
    let rounded = f32::from_bits(bits.wrapping_add(0x80) & !0xFF);
    if rounded.is_finite() {
        rounded as f64
    } else {
        f32::from_bits(bits & !0xFF) as f64
    }
}

/// A class's weights from all but its first: the first is one minus the sum of the others
/// (summed in order, in float64), so they sum to one.
fn with_first(rest: &[f64]) -> Vec<f64> {
    let mut w = Vec::with_capacity(rest.len() + 1);
    w.push(1.0 - rest.iter().sum::<f64>());
    w.extend_from_slice(rest);
    w
}

/// Solves `g x = b` for symmetric positive definite `g` (its lower triangle, row-major `n x n`).
fn cholesky_solve(g: &mut [f64], b: &mut [f64], n: usize) -> Option<Vec<f64>> {
    for j in 0..n {
        let mut d = g[j * n + j];
        for m in 0..j {
            d -= g[j * n + m] * g[j * n + m];
        }
        if !(d > 0.0) {
            return None;
        }
        let d = d.sqrt();
        g[j * n + j] = d;
        for i in j + 1..n {
            let mut s = g[i * n + j];
            for m in 0..j {
                s -= g[i * n + m] * g[j * n + m];
            }
            g[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = b[i];
        for m in 0..i {
            s -= g[i * n + m] * b[m];
        }
        b[i] = s / g[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = b[i];
        for m in i + 1..n {
            s -= g[m * n + i] * b[m];
        }
        b[i] = s / g[i * n + i];
    }
    Some(b.to_vec())
}

/// A stencil in padded-buffer offsets (subtracted from a point's index) with its weights.
struct Stencil {
    back: Vec<usize>,
    weights: Vec<f64>,
}

impl Stencil {
    fn new(offs: &[Vec<isize>], padded_strides: &[usize], weights: Vec<f64>) -> Stencil {
        // Offsets point back (every component <= 0), so each is minus a buffer distance.
        let back = linear(offs, padded_strides).iter().map(|&o| o.unsigned_abs()).collect();
        Stencil { back, weights }
    }

    /// `sum of weights[j] * x(i - back[j])` from 0.0, term by term in order.
    #[inline(always)]
    fn predict<T: Element>(&self, buf: &[T], i: usize) -> f64 {
        debug_assert!(self.back.iter().all(|&o| o <= i));
        let mut p = 0.0;
        for (&o, &w) in self.back.iter().zip(&self.weights) {
            // Safety: the walk predicts only points whose stencil lies within the padded
            // buffer (the padding is as deep as the stencil is far), so 0 <= i - o < i.
            p += w * unsafe { buf.get_unchecked(i - o) }.to_f64();
        }
        p
    }
}

/// The stencils for blocks of one shape, built once for all the blocks of an array.
pub struct Walker {
    shape: Vec<usize>,
    /// Strides of the padded buffer.
    ps: Vec<usize>,
    len: usize,
    /// Per class, its fitted stencil.
    classes: Vec<Stencil>,
    /// Lorenzo over the cube one cell back, for points whose class stencil reads absent cells.
    lorenzo: Stencil,
    /// What makes a class's stencil wholly stored at a point (section 14.2): along each
    /// dimension it reaches back along, the cube of the class one shorter there stored at the
    /// point one step back. That class's index is `3^(nd-1-k)` lower, so per dimension `k`:
    /// (buffer stride, that shift, the classes reaching back along `k`), and the classes
    /// available at a point are a few shifts and masks of its neighbours' (see `walk`).
    reduced: Vec<(usize, u32, u32)>,
    /// Class indices, larger stencils first.
    prefer: Vec<usize>,
}

impl Walker {
    /// The block shape the walker codes.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// `None` when the weights were fitted for another dimensionality than `shape`'s.
    pub fn new(shape: &[usize], w: &Weights) -> Option<Walker> {
        let nd = shape.len();
        if nd != w.ndim {
            return None;
        }
        let padded: Vec<usize> = shape.iter().map(|&n| n + PAD).collect();
        let ps = strides(&padded);
        let near = offsets(&vec![1; nd]);
        let all = classes(nd);
        let reduced = (0..nd)
            .map(|k| {
                let reaching = all.iter().enumerate().filter(|(_, c)| c[k] > 0).fold(0u32, |acc, (m, _)| acc | 1 << m);
                (ps[k], 3u32.pow((nd - 1 - k) as u32), reaching)
            })
            .collect();
        let volume = |c: &Vec<usize>| c.iter().map(|&r| r + 1).product::<usize>();
        let mut prefer: Vec<usize> = (0..all.len()).collect();
        prefer.sort_by_key(|&m| (std::cmp::Reverse(volume(&all[m])), std::cmp::Reverse(m)));
        Some(Walker {
            reduced,
            prefer,
            shape: shape.to_vec(),
            len: padded.iter().product(),
            classes: all.iter().zip(&w.classes).map(|(c, cw)| Stencil::new(&offsets(c), &ps, cw.clone())).collect(),
            lorenzo: Stencil::new(&near, &ps, lorenzo_signs(&near)),
            ps,
        })
    }
}

/// Visits the block in C order. A stored point of a full block is predicted from its class's
/// stencil. In a partial block, with `by_stored`, it takes the largest class whose stencil is
/// wholly stored (where boxes meet inside a large unit block, the stencil reaches across their
/// seam; where a box ends, it stays inside); with nothing stored behind it, Lorenzo. Without
/// `by_stored` (blocks written before that rule), its class's stencil when that is wholly
/// stored, else Lorenzo. An absent point (`present` false) takes the mean of the points one step
/// behind it along each dimension: the fitted weights extrapolate well from data but would
/// compound their own extrapolations across an absent region, while a mean stays within what it
/// averages.
fn walk<T: Element, V: Visit<T>>(walker: &Walker, values: Option<&[T]>, present: Option<&[bool]>, by_stored: bool, v: &mut V) -> Vec<T> {
    let [out] = walk_lanes(walker, [Lane { values, present, visitor: v }], by_stored);
    out
}

/// How many blocks `encode_lanes` and `decode_lanes` code in lockstep.
pub const LANES: usize = 4;

/// One block of a walk: its values (`None` when decoding), which of its cells are stored
/// (`None`: all) and its visitor.
struct Lane<'a, T, V> {
    values: Option<&'a [T]>,
    present: Option<&'a [bool]>,
    visitor: &'a mut V,
}

/// `walk` of `N` blocks at once, point by point in lockstep: each block's walk is one long
/// chain (a point's prediction waits for the reconstruction of the point before it), which
/// leaves the core idle most of the time; the chains of other blocks fill it. Each block is
/// coded exactly as alone. The padded buffers are the thread's spare ones: a write walks
/// thousands of blocks.
fn walk_lanes<T: Element, V: Visit<T>, const N: usize>(walker: &Walker, mut lanes: [Lane<'_, T, V>; N], by_stored: bool) -> [Vec<T>; N] {
    scratch::with_vec(|bufs: &mut Vec<T>| {
        scratch::with_vec(|stored: &mut Vec<bool>| {
            scratch::with_vec(|full: &mut Vec<u32>| {
                let len = walker.len;
                bufs.resize(N * len, T::default());
                // Which points of the padded buffer hold stored values (the padding and absent
                // points do not), for blocks with absent cells.
                let partial = lanes.iter().any(|l| l.present.is_some());
                stored.resize(if partial { N * len } else { 0 }, false);
                // With `by_stored`: per point of the buffer, bit `m` set if the cube of class
                // `m` behind it, the point included, is wholly stored.
                full.resize(if by_stored && partial { N * len } else { 0 }, 0);
                walk_in(walker, &mut lanes, bufs, stored, full, by_stored)
            })
        })
    })
}

/// `walk_lanes` with its padded buffers, zeroed, `N` times the walker's length each (`stored`
/// empty when every block is full, `full` empty unless classes are chosen by what is stored).
fn walk_in<T: Element, V: Visit<T>, const N: usize>(
    walker: &Walker,
    lanes: &mut [Lane<'_, T, V>; N],
    bufs: &mut [T],
    stored: &mut [bool],
    full: &mut [u32],
    by_stored: bool,
) -> [Vec<T>; N] {
    let Walker { shape, ps, classes, lorenzo, reduced, prefer, len } = walker;
    let len = *len;
    let every_class = u32::MAX >> (32 - classes.len());
    let nd = shape.len();
    let n = shape[nd - 1];
    let total: usize = shape.iter().product();
    let mut outs: [Vec<T>; N] = std::array::from_fn(|_| Vec::with_capacity(total));
    // Per lane, the row's terms from earlier rows (lane-major, so each lane's sums vectorize).
    let mut terms = vec![0.0f64; N * n];
    let mut k0 = 0;
    for_each_index(&shape[..nd - 1], |outer| {
        let base: usize = outer.iter().zip(ps.iter()).map(|(&p, &s)| (p + PAD) * s).sum::<usize>() + PAD;
        // The class digits of the row's slower dimensions; the last one follows x.
        let row_class = class_index(outer.iter().copied()) * 3;
        // From x = 2 on, a row's points share one class, which reaches two cells back along x:
        // its last two offsets are the row's own two points before, the others lie in earlier
        // rows. Those terms are summed for the whole row at once (vectorized), in the same order
        // as point by point, so only the last two wait for the row's own points. On a block's
        // lower faces (over half the points of an 8^3 block) the class is smaller, not absent.
        let row = &classes[row_class + 2];
        let earlier = row.back.len() - 2;
        let whole_row: [bool; N] = std::array::from_fn(|l| lanes[l].present.is_none() && n > 2);
        for l in (0..N).filter(|&l| whole_row[l]) {
            row_sums(&mut terms[l * n + 2..(l + 1) * n], &bufs[l * len..(l + 1) * len], base + 2, &row.back[..earlier], &row.weights);
        }
        for x in 0..n {
            let k = k0 + x;
            for (l, lane) in lanes.iter_mut().enumerate() {
                let (buf, stored, full) = (&mut bufs[l * len..(l + 1) * len], lane_part(stored, l, len), lane_part(full, l, len));
                let i = base + x;
                let pred = if whole_row[l] && x >= 2 {
                    terms[l * n + x] + row.weights[earlier] * buf[i - 2].to_f64() + row.weights[earlier + 1] * buf[i - 1].to_f64()
                } else if lane.present.is_some_and(|m| !m[k]) {
                    absent_fill(buf, i, ps, outer, x)
                } else if by_stored && lane.present.is_some() {
                    // The largest class whose stencil is wholly stored: its cube less the point is
                    // the cubes one shorter, one step back along each dimension it reaches along.
                    // Class m is available along k if it does not reach along k, or if class
                    // m - shift is at the point one step back along k.
                    let avail =
                        reduced.iter().fold(every_class, |acc, &(stride, shift, reaching)| acc & ((full[i - stride] << shift) | !reaching));
                    full[i] = avail;
                    let best = &classes[prefer.iter().copied().find(|&m| avail >> m & 1 == 1).unwrap_or(0)];
                    // With nothing stored behind it, a point reads the absent cells' fill.
                    if best.back.is_empty() {
                        lorenzo.predict(buf, i)
                    } else {
                        best.predict(buf, i)
                    }
                } else {
                    let class = &classes[row_class + x.min(2)];
                    if lane.present.is_none() || class.back.iter().all(|&o| stored[i - o]) {
                        class.predict(buf, i)
                    } else {
                        lorenzo.predict(buf, i)
                    }
                };
                let value = lane.values.map_or_else(T::default, |vals| vals[k]);
                buf[i] = lane.visitor.visit(value, pred);
                if let Some(m) = lane.present {
                    stored[i] = m[k];
                }
            }
        }
        for (l, out) in outs.iter_mut().enumerate() {
            out.extend_from_slice(&bufs[l * len + base..l * len + base + n]);
        }
        k0 += n;
    });
    outs
}

crate::cpu::fast_fn!(
    /// `sums[j]`: the sum of `weights[t] * buf[start + j - back[t]]` over the terms `t`, from 0.0
    /// in order, as `Stencil::predict` sums one point's (the weights beyond `back` unused).
    fn row_sums<T: Element>(sums: &mut [f64], buf: &[T], start: usize, back: &[usize], weights: &[f64]) -> () => row_sums_in
);

#[inline(always)]
fn row_sums_in<T: Element>(sums: &mut [f64], buf: &[T], start: usize, back: &[usize], weights: &[f64]) {
    let n = sums.len();
    sums.fill(0.0);
    for (&o, &w) in back.iter().zip(weights) {
        for (p, x) in sums.iter_mut().zip(&buf[start - o..start - o + n]) {
            *p += w * x.to_f64();
        }
    }
}

/// Lane `l`'s part of a buffer of `N` lanes of `len` each, or the buffer itself when empty.
#[inline(always)]
fn lane_part<X>(buf: &mut [X], l: usize, len: usize) -> &mut [X] {
    if buf.is_empty() {
        buf
    } else {
        &mut buf[l * len..(l + 1) * len]
    }
}

/// `encode` of `LANES` blocks at once (see `walk_lanes`): the same codings, faster on whole
/// blocks (see `BlockSetEncoder::predict_blocks`).
pub fn encode_lanes<T: Element>(data: [&[T]; LANES], q: &Quantizer, walker: &Walker) -> [(Coded<T>, Vec<T>); LANES] {
    let mut symbols: [Vec<u16>; LANES] = data.map(|d| vec![0u16; d.len()]);
    let present: [Option<Vec<bool>>; LANES] = data.map(stored_cells);
    let mut visitors = symbols.each_mut().map(|s| EncodeVisitor::new(q, s));
    let mut rebuilt = {
        let mut visitor = visitors.each_mut().into_iter();
        let lanes: [_; LANES] = std::array::from_fn(|l| Lane {
            values: Some(data[l]),
            present: present[l].as_deref(),
            visitor: visitor.next().expect("a lane"),
        });
        walk_lanes(walker, lanes, true).into_iter()
    };
    let parts = visitors.map(|v| (v.exact, v.absent));
    let mut symbols = symbols.into_iter();
    parts.map(|(exact, absent)| {
        (Coded { symbols: symbols.next().expect("a lane"), exact, side: Vec::new(), absent }, rebuilt.next().expect("a lane"))
    })
}

/// `decode` of `LANES` whole blocks at once (see `walk_lanes`): their symbols and exact values.
pub fn decode_lanes<T: Element>(parts: [(&[u16], &[T]); LANES], q: &Quantizer, walker: &Walker) -> Result<[Vec<T>; LANES]> {
    let total: usize = walker.shape.iter().product();
    if let Some((s, _)) = parts.iter().find(|(s, _)| s.len() != total) {
        return Err(corrupt!("a block of {total} cells has {} symbols", s.len()));
    }
    let visitors: Vec<DecodeVisitor<'_, T>> = parts.iter().map(|&(s, e)| DecodeVisitor::new(q, s, e)).collect::<Result<_>>()?;
    let mut visitors: [DecodeVisitor<'_, T>; LANES] = visitors.try_into().unwrap_or_else(|_| unreachable!("a visitor per lane"));
    let mut visitor = visitors.each_mut().into_iter();
    let lanes: [_; LANES] = std::array::from_fn(|_| Lane { values: None, present: None, visitor: visitor.next().expect("a lane") });
    // Whole blocks walk alike under either rule for partial ones.
    let decoded = walk_lanes(walker, lanes, true);
    Ok(decoded)
}

/// Which cells of a block to encode are stored (`None`: all): NaN marks an absent cell (real
/// NaNs are patched out before prediction).
fn stored_cells<T: Element>(data: &[T]) -> Option<Vec<bool>> {
    data.iter().any(|x| x.to_f64().is_nan()).then(|| data.iter().map(|x| !x.to_f64().is_nan()).collect())
}

/// An absent point's value: the mean of the points one step behind it along each dimension it
/// is not on the lower face of (0 at the block's first point), summed from 0 in dimension order.
#[inline(always)]
fn absent_fill<T: Element>(buf: &[T], i: usize, ps: &[usize], outer: &[usize], x: usize) -> f64 {
    let nd = ps.len();
    if nd == 3 && x > 0 && outer[0] > 0 && outer[1] > 0 {
        // Inside a 3-D block, where most absent points are: the same sum, unrolled.
        return (0.0 + buf[i - ps[0]].to_f64() + buf[i - ps[1]].to_f64() + buf[i - 1].to_f64()) / 3.0;
    }
    let (mut sum, mut count) = (0.0, 0u32);
    for (d, &stride) in ps.iter().enumerate() {
        if (if d + 1 == nd { x } else { outer[d] }) > 0 {
            sum += buf[i - stride].to_f64();
            count += 1;
        }
    }
    if count == 0 {
        0.0
    } else {
        sum / count as f64
    }
}

/// Codes a block of the walker's shape (`data` in C order, NaN at absent cells), partial
/// blocks choosing classes by what is stored (`walk`); returns the coding and the values a
/// decoder rebuilds (in C order, meaningless at absent cells).
pub fn encode<T: Element>(data: &[T], q: &Quantizer, walker: &Walker) -> (Coded<T>, Vec<T>) {
    encode_with(data, q, walker, true)
}

/// `encode`, or with `by_stored` false as blocks of predictor code 4 were coded.
fn encode_with<T: Element>(data: &[T], q: &Quantizer, walker: &Walker, by_stored: bool) -> (Coded<T>, Vec<T>) {
    let mut symbols = vec![0u16; data.len()];
    let mut v = EncodeVisitor::new(q, &mut symbols);
    let rebuilt = walk(walker, Some(data), stored_cells(data).as_deref(), by_stored, &mut v);
    let (exact, absent) = (v.exact, v.absent);
    (Coded { symbols, exact, side: Vec::new(), absent }, rebuilt)
}

/// Decodes a block whose stored cells are `present` (`None`: all); `symbols` has the zero-residual
/// code at the absent ones. `by_stored`: partial blocks chose classes by what is stored (as
/// `encode` codes them), else by position (format.md 14.2).
pub fn decode<T: Element>(
    q: &Quantizer,
    symbols: &[u16],
    exact: &[T],
    walker: &Walker,
    present: Option<&[bool]>,
    by_stored: bool,
) -> Result<Vec<T>> {
    let mut v = DecodeVisitor::new(q, symbols, exact)?;
    Ok(walk(walker, None, present, by_stored, &mut v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantizer::DEFAULT_RADIUS;

    fn smooth(shape: &[usize], phase: f64) -> Vec<f64> {
        let n: usize = shape.iter().product();
        let st = strides(shape);
        (0..n)
            .map(|i| {
                let c: Vec<f64> = st.iter().zip(shape).map(|(&s, &m)| ((i / s) % m) as f64).collect();
                // Not a sum of functions of fewer coordinates, which Lorenzo predicts exactly.
                let (x, y, z) = (c[0], c.get(1).copied().unwrap_or(0.0), c.get(2).copied().unwrap_or(0.0));
                (0.3 * x + 0.2 * y + phase).sin() * (0.25 * z - 0.1 * x).cos() * 50.0 + 1000.0
            })
            .collect()
    }

    #[test]
    fn offsets_are_the_cube_behind_in_c_order() {
        assert_eq!(offsets(&[2]), vec![vec![-2], vec![-1]]);
        assert_eq!(offsets(&[1, 1]), vec![vec![-1, -1], vec![-1, 0], vec![0, -1]]);
        assert_eq!(offsets(&[0, 2]), vec![vec![0, -2], vec![0, -1]]);
        assert_eq!(offsets(&[2, 2, 2]).len(), 26);
        assert!(offsets(&[0, 0]).is_empty());
        assert_eq!(lorenzo_signs(&offsets(&[1, 1])), vec![-1.0, 1.0, 1.0]);
        assert_eq!(classes(2).len(), 9);
        assert_eq!(class_index([5, 1].into_iter()), 7);
    }

    #[test]
    fn lorenzo_weights_reproduce_the_lorenzo_predictor() {
        for shape in [vec![9usize], vec![7, 6], vec![5, 4, 6]] {
            let data = smooth(&shape, 0.3);
            let q = Quantizer::new(1e-3, DEFAULT_RADIUS);
            let (ours, _) = encode(&data, &q, &Walker::new(&shape, &Weights::lorenzo(shape.len())).unwrap());
            let theirs = super::super::lorenzo::encode(&data, &shape, &q);
            assert_eq!(ours.symbols, theirs.symbols, "{shape:?}");
        }
    }

    /// Blocks in lockstep code and rebuild exactly as each alone, in 1 to 3 dimensions, with
    /// values kept exactly (a bound too tight for some residuals) among them.
    #[test]
    fn lanes_code_each_block_as_alone() {
        for shape in [vec![11usize], vec![7, 9], vec![5, 6, 8], vec![2, 2, 2]] {
            let big = vec![12usize; shape.len()];
            let samples: Vec<(Vec<f64>, Vec<usize>)> = (0..3).map(|k| (smooth(&big, k as f64), big.clone())).collect();
            let w = Weights::fit(&samples, 1e-3).expect("a fit");
            let walker = Walker::new(&shape, &w).unwrap();
            let mut next = crate::test_rng::xorshift(9);
            let blocks: Vec<Vec<f64>> = (0..LANES)
                .map(|l| smooth(&shape, l as f64 * 0.7).into_iter().map(|x| if next().is_multiple_of(13) { x * 1e9 } else { x }).collect())
                .collect();
            for eb in [1e-3, 1e-9] {
                let q = Quantizer::new(eb, crate::quantizer::DEFAULT_RADIUS);
                let lanes = encode_lanes(std::array::from_fn(|l| &blocks[l][..]), &q, &walker);
                for (l, (coded, rebuilt)) in lanes.iter().enumerate() {
                    let (alone, alone_rebuilt) = encode(&blocks[l], &q, &walker);
                    assert_eq!(coded.symbols, alone.symbols, "{shape:?} lane {l}");
                    assert_eq!(coded.exact, alone.exact);
                    assert_eq!(rebuilt, &alone_rebuilt);
                }
                let back = decode_lanes(std::array::from_fn(|l| (&lanes[l].0.symbols[..], &lanes[l].0.exact[..])), &q, &walker).unwrap();
                for (l, b) in back.iter().enumerate() {
                    assert_eq!(b, &lanes[l].1, "{shape:?} lane {l} decodes as encoded");
                }
            }
        }
    }

    #[test]
    fn fitted_weights_sum_to_one_and_beat_lorenzo_on_smooth_blocks() {
        let shape = [16usize, 16, 16];
        let samples: Vec<(Vec<f64>, Vec<usize>)> = (0..4).map(|k| (smooth(&shape, k as f64), shape.to_vec())).collect();
        let eb = 1e-2;
        let w = Weights::fit(&samples, eb).expect("a fit");
        assert!(w.classes.iter().skip(1).all(|c| (c.iter().sum::<f64>() - 1.0).abs() < 1e-5));
        let q = Quantizer::new(eb, DEFAULT_RADIUS);
        let spread = |s: &[u16]| s.iter().map(|&v| (v as i64 - q.zero_symbol() as i64).unsigned_abs()).sum::<u64>();
        let data = smooth(&shape, 7.0);
        let walker = Walker::new(&shape, &w).unwrap();
        let (ours, rebuilt) = encode(&data, &q, &walker);
        let theirs = super::super::lorenzo::encode(&data, &shape, &q);
        assert!(spread(&ours.symbols) * 4 < spread(&theirs.symbols) * 3, "{} vs {}", spread(&ours.symbols), spread(&theirs.symbols));
        let back = decode(&q, &ours.symbols, &ours.exact, &walker, None, true).unwrap();
        assert!(back.iter().zip(&data).all(|(a, b)| (a - b).abs() <= eb));
        assert_eq!(back, rebuilt, "the encoder rebuilds what the decoder does");
    }

    #[test]
    fn weights_round_trip_and_refuse_damage() {
        let shape = [12usize, 12];
        let w = Weights::fit(&[(smooth(&shape, 1.0), shape.to_vec())], 1e-3).unwrap();
        let mut bytes = Vec::new();
        w.write(&mut bytes);
        assert_eq!(Weights::read(&mut ByteReader::new(&bytes), false).unwrap(), w);
        assert!(Weights::read(&mut ByteReader::new(&bytes[..bytes.len() - 1]), false).is_err());
        let mut bad = bytes.clone();
        bad[0] = 4;
        assert!(Weights::read(&mut ByteReader::new(&bad), false).is_err());
        bad = bytes.clone();
        bad[1..4].copy_from_slice(&f32::INFINITY.to_le_bytes()[1..]);
        assert!(Weights::read(&mut ByteReader::new(&bad), false).is_err());
        // The tables of earlier arrays list every weight.
        let mut all = vec![2u8];
        for x in w.classes.iter().flatten() {
            all.extend_from_slice(&(*x as f32).to_le_bytes());
        }
        let old = Weights::read(&mut ByteReader::new(&all), true).unwrap();
        assert!(old.classes.iter().flatten().zip(w.classes.iter().flatten()).all(|(a, b)| (a - b).abs() < 1e-6));
    }

    /// The moments give each class the weights its own least squares on the same rows give.
    #[test]
    fn moments_fit_each_class_as_its_own_least_squares() {
        let shape = vec![12usize, 11, 10];
        let mut next = crate::test_rng::xorshift(5);
        let data: Vec<f64> = smooth(&shape, 0.7).into_iter().map(|x| x + (next() % 1000) as f64 * 1e-4).collect();
        let samples = vec![(data, shape.clone())];
        let eb = 1e-3;
        let w = Weights::fit(&samples, eb).unwrap();
        let far = offsets(&[2, 2, 2]);
        let rows = fit_rows(&samples, &far);
        for (m, class) in classes(3).iter().enumerate() {
            let offs = offsets(class);
            let k = offs.len();
            if k <= 1 {
                continue;
            }
            // Direct: regress y - x_0 on x_j - x_0 over the rows, with the same ridge.
            let lin = linear(&offs, &strides(&shape));
            let free = k - 1;
            let (mut g, mut b) = (vec![0.0; free * free], vec![0.0; free]);
            for &(_, i) in &rows {
                let x: Vec<f64> = lin.iter().map(|&o| samples[0].0[i.wrapping_add_signed(o)]).collect();
                let t = samples[0].0[i] - x[0];
                for a in 0..free {
                    b[a] += (x[a + 1] - x[0]) * t;
                    for c in 0..=a {
                        g[a * free + c] += (x[a + 1] - x[0]) * (x[c + 1] - x[0]);
                    }
                }
            }
            for a in 0..free {
                g[a * free + a] += rows.len() as f64 * 2.0 * eb * eb / 3.0;
            }
            let direct = with_first(&cholesky_solve(&mut g, &mut b, free).unwrap());
            for (got, want) in w.classes[m].iter().zip(&direct) {
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "class {class:?}: {got} vs {want}");
            }
        }
    }

    /// The classes partial blocks use are part of the format (section 14.2): these symbols were
    /// written by the first implementation of the rule, and must not change. The weights are
    /// fixed here (every class its own, none zero), not fitted: fitting is not the format's.
    #[test]
    fn partial_blocks_choose_the_classes_of_the_format() {
        let shape = [9usize, 8, 7];
        let n: usize = shape.iter().product();
        let mut next = crate::test_rng::xorshift(17);
        let w = Weights {
            ndim: 3,
            classes: classes(3)
                .iter()
                .map(|c| {
                    let signs = lorenzo_signs(&offsets(c));
                    let rest = (1.0 - 0.75 * signs.iter().sum::<f64>()) / signs.len().max(1) as f64;
                    signs.iter().map(|s| stored_weight(0.75 * s + rest)).collect()
                })
                .collect(),
        };
        let walker = Walker::new(&shape, &w).unwrap();
        let q = Quantizer::new(1e-3, DEFAULT_RADIUS);
        let mut all = Vec::new();
        for density in [2u64, 3, 5, 9] {
            let data: Vec<f64> =
                smooth(&shape, density as f64).into_iter().map(|x| if next().is_multiple_of(density) { f64::NAN } else { x }).collect();
            let (coded, _) = encode(&data, &q, &walker);
            assert_eq!(coded.symbols.len(), n);
            all.extend(coded.symbols.iter().flat_map(|s| s.to_le_bytes()));
        }
        assert_eq!(crate::bytes::crc32(&all), 1_242_507_394);
    }

    proptest::proptest! {
        // Whatever the data (spikes, plateaus, huge ranges, absent cells) and however poor the
        // fit, every stored cell decodes within the bound, and the decoder rebuilds exactly.
        #[test]
        fn any_block_keeps_the_bound(
            shape in proptest::collection::vec(1usize..7, 1..=3),
            seed in proptest::prelude::any::<u64>(),
            eb_exp in -12i32..2,
            fit_exp in -12i32..2,
            by_stored in proptest::prelude::any::<bool>(),
        ) {
            let n: usize = shape.iter().product();
            let mut next = crate::test_rng::xorshift(seed);
            let data: Vec<f64> = (0..n)
                .map(|k| match next() % 13 {
                    0 => f64::NAN, // absent
                    1 => (next() % 1000) as f64 * 1e30,
                    2 => -0.0,
                    3 => 7.0,
                    _ => k as f64 * 0.37 + (next() % 100) as f64 * 1e-3,
                })
                .collect();
            let eb = 10f64.powi(eb_exp);
            let samples = vec![(data.clone(), shape.clone())];
            let w = Weights::fit(&samples, 10f64.powi(fit_exp)).unwrap_or_else(|| Weights::lorenzo(shape.len()));
            let walker = Walker::new(&shape, &w).unwrap();
            let q = Quantizer::new(eb, DEFAULT_RADIUS);
            let (coded, _) = encode_with(&data, &q, &walker, by_stored);
            let present: Vec<bool> = data.iter().map(|x| !x.is_nan()).collect();
            let back = decode(&q, &coded.symbols, &coded.exact, &walker, Some(&present), by_stored).unwrap();
            for ((x, y), &p) in data.iter().zip(&back).zip(&present) {
                proptest::prop_assert!(!p || (x - y).abs() <= eb, "{x} {y} eb {eb}");
            }
            let absent: Vec<usize> = present.iter().enumerate().filter(|(_, &p)| !p).map(|(k, _)| k).collect();
            proptest::prop_assert_eq!(coded.absent, absent);
        }
    }
}
