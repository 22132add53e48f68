//! Multilevel spline interpolation (SZ3 style). The chunk is refined level by level: at stride
//! `s` every point with an odd multiple of `s` along one dimension is predicted from its
//! already-known neighbours at distance `s` and `3s` along that dimension, one dimension after
//! the other. Points of one pass never depend on each other, only on earlier passes.
//!
//! Coarse levels may use a tighter bound than the finest (QoZ): their points anchor every
//! finer prediction, so precision there pays back downstream. Level `l` (1 = finest) uses
//! `eb / min(alpha^(l-1), beta)`.
//!
//! Side information: the spline (u8: 0 linear, 1 cubic, 2 natural cubic), the dimension order (u8), then alpha
//! and beta (f64 each).

use super::{Coded, DecodeVisitor, EncodeVisitor, Visit};
use crate::bytes::ByteReader;
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::{for_each_index, strides};
use crate::quantizer::Quantizer;
use rayon::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spline {
    Linear = 0,
    /// Cubic through four neighbours: fourth-order accurate on smooth data.
    Cubic = 1,
    /// Weights of a natural cubic spline: lower order, but damps less at frequencies near the
    /// sampling limit, so it wins on rough fields.
    Natural = 2,
}

/// Which dimension is refined first at every level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimOrder {
    /// Slowest-varying dimension first.
    Forward = 0,
    /// Fastest-varying (contiguous) dimension first.
    Backward = 1,
}

impl DimOrder {
    fn sequence(self, nd: usize) -> Vec<usize> {
        match self {
            DimOrder::Forward => (0..nd).collect(),
            DimOrder::Backward => (0..nd).rev().collect(),
        }
    }
}

#[inline(always)]
fn cubic(a: f64, b: f64, c: f64, d: f64) -> f64 {
    (-a + 9.0 * b + 9.0 * c - d) * (1.0 / 16.0)
}

#[inline(always)]
fn natural(a: f64, b: f64, c: f64, d: f64) -> f64 {
    (-3.0 * a + 23.0 * b + 23.0 * c - 3.0 * d) * (1.0 / 40.0)
}

/// Quadratic through points at -1, 1, 3, evaluated at 0.
#[inline(always)]
fn quad_right(b: f64, c: f64, d: f64) -> f64 {
    (3.0 * b + 6.0 * c - d) * (1.0 / 8.0)
}

/// Lagrange polynomial through the known points at `offsets` from the predicted point,
/// evaluated at it. Only the last interval of a line, which may be shorter than the stride,
/// needs this; everywhere else the offsets are regular and the fixed formulas above apply.
#[inline(never)]
fn lagrange(offsets: &[f64], values: &[f64]) -> f64 {
    let mut pred = 0.0;
    for (j, (&oj, &vj)) in offsets.iter().zip(values).enumerate() {
        let mut w = 1.0;
        for (i, &oi) in offsets.iter().enumerate() {
            if i != j {
                w *= -oi / (oj - oi);
            }
        }
        pred += w * vj;
    }
    pred
}

/// The chunk being rebuilt, written by several threads at once during a pass.
///
/// Safety rests on the pass structure: a pass writes only its own points, each from exactly one
/// line, and reads only points finished by earlier passes, so no element is written by two
/// threads or read while another thread writes it. Accesses are bounds-checked.
struct SharedBuf<T> {
    ptr: *mut T,
    len: usize,
}

unsafe impl<T: Send> Sync for SharedBuf<T> {}

impl<T: Copy> SharedBuf<T> {
    fn new(buf: &mut [T]) -> Self {
        SharedBuf { ptr: buf.as_mut_ptr(), len: buf.len() }
    }
    #[inline(always)]
    fn get(&self, i: usize) -> T {
        assert!(i < self.len);
        // Safety: in bounds; see the type's comment for why no write races with this read.
        unsafe { *self.ptr.add(i) }
    }
    #[inline(always)]
    fn set(&self, i: usize, v: T) {
        assert!(i < self.len);
        // Safety: in bounds; this line is the only writer of `i` (see the type's comment).
        unsafe { *self.ptr.add(i) = v }
    }
}

/// Predicts and visits the points at odd multiples of `s` below the last index `n - 1` of one
/// line; the last index itself is known from the first pass on, so no point is extrapolated.
#[inline(always)]
fn line<T: Element, V: Visit<T>>(buf: &SharedBuf<T>, base: usize, stride: usize, n: usize, s: usize, spline: Spline, v: &mut V) {
    let at = |x: usize| base + x * stride;
    let get = |buf: &SharedBuf<T>, x: usize| buf.get(at(x)).to_f64();
    let mut visit = |buf: &SharedBuf<T>, x: usize, pred: f64| {
        let i = at(x);
        buf.set(i, v.visit(buf.get(i), pred));
    };
    let m = n - 1;
    let mut x = s;
    match spline {
        Spline::Linear => {
            while x + s <= m {
                let pred = 0.5 * (get(buf, x - s) + get(buf, x + s));
                visit(buf, x, pred);
                x += 2 * s;
            }
        }
        Spline::Cubic | Spline::Natural => {
            let four_point = if spline == Spline::Cubic { cubic } else { natural };
            if x + 3 * s <= m {
                let pred = quad_right(get(buf, x - s), get(buf, x + s), get(buf, x + 3 * s));
                visit(buf, x, pred);
                x += 2 * s;
            }
            while x + 3 * s <= m {
                let pred = four_point(get(buf, x - 3 * s), get(buf, x - s), get(buf, x + s), get(buf, x + 3 * s));
                visit(buf, x, pred);
                x += 2 * s;
            }
        }
    }
    // The line's end: neighbours up to the last index, which may be nearer than the stride.
    while x < m {
        let mut offsets = [0f64; 4];
        let mut values = [0f64; 4];
        let mut k = 0;
        let mut take = |o: isize, buf: &SharedBuf<T>| {
            offsets[k] = o as f64;
            values[k] = get(buf, (x as isize + o) as usize);
            k += 1;
        };
        let cubic_like = spline != Spline::Linear;
        if cubic_like && x >= 3 * s {
            take(-3 * s as isize, buf);
        }
        take(-(s as isize), buf);
        take(s.min(m - x) as isize, buf);
        if cubic_like && x + s < m {
            take((3 * s).min(m - x) as isize, buf);
        }
        let pred = lagrange(&offsets[..k], &values[..k]);
        visit(buf, x, pred);
        x += 2 * s;
    }
}

/// The first passes: the last index of each dimension, predicted from index 0.
#[inline(always)]
fn corner_line<T: Element, V: Visit<T>>(buf: &SharedBuf<T>, base: usize, stride: usize, n: usize, v: &mut V) {
    let last = base + (n - 1) * stride;
    buf.set(last, v.visit(buf.get(last), buf.get(base).to_f64()));
}

/// Tuning of the level-wise bounds; `alpha = beta = 1` keeps one bound for all levels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LevelBounds {
    pub alpha: f64,
    pub beta: f64,
}

impl LevelBounds {
    pub const UNIFORM: LevelBounds = LevelBounds { alpha: 1.0, beta: 1.0 };

    fn quantizer(&self, q: &Quantizer, level: u32) -> Quantizer {
        q.with_eb(q.eb() / self.alpha.powi(level as i32 - 1).min(self.beta))
    }
}

/// One refinement pass: the lines along dimension `k` whose odd multiples of `s` it predicts
/// (`s == 0`: the corner pass, which predicts each line's last index from its first).
struct Pass {
    level: u32,
    k: usize,
    s: usize,
    bases: Vec<usize>,
    per_line: usize,
}

/// Lines handed to one task: enough points that scheduling costs nothing next to the work.
const GROUP_POINTS: usize = 1 << 15;

impl Pass {
    fn group_lines(&self) -> usize {
        (GROUP_POINTS / self.per_line.max(1)).max(1)
    }
}

/// Number of refinement levels: strides 2^(levels-1) .. 1 cover every gap between index 0 and
/// the last index of the longest dimension.
fn levels(shape: &[usize]) -> u32 {
    let max_m = shape.iter().map(|&n| n.saturating_sub(1)).max().unwrap_or(0);
    if max_m <= 1 {
        0
    } else {
        usize::BITS - (max_m - 1).leading_zeros()
    }
}

/// Known coordinates along a dimension of `n` points at lattice `step`: its multiples below the
/// last index, and the last index.
fn lattice(n: usize, step: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n.saturating_sub(1)).step_by(step).collect();
    v.push(n - 1);
    v
}

/// Every pass of the walk, coarsest first; point 0 precedes them all.
fn passes(shape: &[usize], order: DimOrder) -> impl Iterator<Item = Pass> + '_ {
    let nd = shape.len();
    let st = strides(shape);
    let dims = order.sequence(nd);
    let top = levels(shape) + 1;
    // (level, stride) per round: the corner round, then the refinement levels.
    let rounds = std::iter::once((top, 0)).chain((1..top).rev().map(|l| (l, 1usize << (l - 1))));
    rounds.flat_map(move |(level, s)| {
        let st = st.clone();
        let dims = dims.clone();
        (0..nd).filter_map(move |m| {
            let k = dims[m];
            let last = shape[k] - 1;
            if last == 0 || (s > 0 && s >= last) {
                return None;
            }
            // Dimensions refined earlier in this round are known at stride s, the rest at 2s;
            // in the corner round, at their two ends and at 0 only.
            let coords: Vec<Vec<usize>> = (0..nd)
                .map(|d| {
                    let earlier = dims.iter().position(|&e| e == d).unwrap() < m;
                    match (d == k, s, earlier) {
                        (true, _, _) => vec![0],
                        (false, 0, true) => lattice(shape[d], usize::MAX),
                        (false, 0, false) => vec![0],
                        (false, _, true) => lattice(shape[d], s),
                        (false, _, false) => lattice(shape[d], 2 * s),
                    }
                })
                .collect();
            let counts: Vec<usize> = coords.iter().map(Vec::len).collect();
            let mut bases = Vec::with_capacity(counts.iter().product());
            for_each_index(&counts, |pos| bases.push((0..nd).map(|d| coords[d][pos[d]] * st[d]).sum()));
            let per_line = if s == 0 { 1 } else { (last - s).div_ceil(2 * s) };
            Some(Pass { level, k, s, bases, per_line })
        })
    })
}

fn first_quantizer(shape: &[usize], bounds: LevelBounds, q: &Quantizer) -> Quantizer {
    bounds.quantizer(q, levels(shape) + 1)
}

/// Visits one group of lines of a pass.
#[inline(always)]
fn visit_lines<T: Element, V: Visit<T>>(buf: &SharedBuf<T>, pass: &Pass, lines: &[usize], shape: &[usize], st: &[usize], spline: Spline, v: &mut V) {
    let (stride, n) = (st[pass.k], shape[pass.k]);
    for &base in lines {
        if pass.s == 0 {
            corner_line(buf, base, stride, n, v);
        } else {
            line(buf, base, stride, n, pass.s, spline, v);
        }
    }
}

/// Encodes the chunk; the passes' lines are spread over the thread pool in fixed groups, and
/// the groups' outputs concatenated in order, so the stream does not depend on the threads.
pub fn encode<T: Element>(data: &[T], shape: &[usize], q: &Quantizer, spline: Spline, order: DimOrder, bounds: LevelBounds) -> Coded<T> {
    let mut work = vec![T::default(); data.len()];
    work.par_chunks_mut(GROUP_POINTS).zip(data.par_chunks(GROUP_POINTS)).for_each(|(w, d)| w.copy_from_slice(d));
    let st = strides(shape);
    let mut v = EncodeVisitor::new(&first_quantizer(shape, bounds, q), data.len());
    work[0] = v.visit(work[0], 0.0);
    let (mut symbols, mut exact) = (v.symbols, v.exact);
    let buf = SharedBuf::new(&mut work);
    for pass in passes(shape, order) {
        let lq = bounds.quantizer(q, pass.level);
        let groups: Vec<(Vec<u16>, Vec<T>)> = pass
            .bases
            .par_chunks(pass.group_lines())
            .map(|lines| {
                let mut v = EncodeVisitor::new(&lq, lines.len() * pass.per_line);
                visit_lines(&buf, &pass, lines, shape, &st, spline, &mut v);
                (v.symbols, v.exact)
            })
            .collect();
        for (s, e) in groups {
            symbols.extend_from_slice(&s);
            exact.extend_from_slice(&e);
        }
    }
    let mut side = vec![spline as u8, order as u8];
    side.extend_from_slice(&bounds.alpha.to_le_bytes());
    side.extend_from_slice(&bounds.beta.to_le_bytes());
    Coded { symbols, exact, side }
}

pub fn decode<T: Element>(shape: &[usize], q: &Quantizer, symbols: &[u16], exact: &[T], side: &[u8]) -> Result<Vec<T>> {
    let mut r = ByteReader::new(side);
    let spline = match r.u8("interpolation spline")? {
        0 => Spline::Linear,
        1 => Spline::Cubic,
        2 => Spline::Natural,
        s => return Err(corrupt!("unknown interpolation spline {s}")),
    };
    let order = match r.u8("interpolation dimension order")? {
        0 => DimOrder::Forward,
        1 => DimOrder::Backward,
        o => return Err(corrupt!("unknown interpolation dimension order {o}")),
    };
    let bounds = LevelBounds { alpha: r.f64("interpolation alpha")?, beta: r.f64("interpolation beta")? };
    if !(bounds.alpha >= 1.0 && bounds.alpha <= 16.0 && bounds.beta >= 1.0 && bounds.beta <= 1024.0) {
        return Err(corrupt!("interpolation level bounds alpha={} beta={} out of range", bounds.alpha, bounds.beta));
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after interpolation parameters", r.remaining()));
    }
    let n: usize = shape.iter().product();
    if symbols.len() != n || symbols.iter().filter(|&&s| s == 0).count() != exact.len() {
        return Err(corrupt!("interpolation chunk has {} symbols and {} exact values for {n} points", symbols.len(), exact.len()));
    }
    let st = strides(shape);
    let mut work = vec![T::default(); n];
    let mut v = DecodeVisitor::new(&first_quantizer(shape, bounds, q), &symbols[..1], &exact[..(symbols[0] == 0) as usize])?;
    work[0] = v.visit(work[0], 0.0);
    let (mut sym_pos, mut exact_pos) = (1, (symbols[0] == 0) as usize);
    let buf = SharedBuf::new(&mut work);
    for pass in passes(shape, order) {
        let lq = bounds.quantizer(q, pass.level);
        let group_points = pass.group_lines() * pass.per_line;
        let pass_symbols = &symbols[sym_pos..sym_pos + pass.bases.len() * pass.per_line];
        // Each group's first exact value: the unpredictable symbols before it.
        let mut exact_starts: Vec<usize> = pass_symbols.par_chunks(group_points).map(|g| g.iter().filter(|&&s| s == 0).count()).collect();
        let mut acc = exact_pos;
        for c in exact_starts.iter_mut() {
            (*c, acc) = (acc, acc + *c);
        }
        pass.bases
            .par_chunks(pass.group_lines())
            .zip(pass_symbols.par_chunks(group_points))
            .enumerate()
            .try_for_each(|(g, (lines, syms))| {
                let unpredictable = syms.iter().filter(|&&s| s == 0).count();
                let mut v = DecodeVisitor::new(&lq, syms, &exact[exact_starts[g]..exact_starts[g] + unpredictable])?;
                visit_lines(&buf, &pass, lines, shape, &st, spline, &mut v);
                Ok::<(), crate::error::CodecError>(())
            })?;
        sym_pos += pass_symbols.len();
        exact_pos = acc;
    }
    Ok(work)
}
