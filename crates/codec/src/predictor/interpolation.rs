//! Multilevel spline interpolation (SZ3 style). The chunk is refined level by level: at stride
//! `s` every point with an odd multiple of `s` along one dimension is predicted from its
//! already-known neighbours at distance `s` and `3s` along that dimension, one dimension after
//! the other. Points of one pass never depend on each other, only on earlier passes.
//!
//! Coarse levels may use a tighter bound than the finest (QoZ): their points anchor every
//! finer prediction, so precision there pays back downstream. Level `l` (1 = finest) uses
//! `eb / min(alpha^(l-1), beta)`.
//!
//! Side information: the spline (u8: 0 linear, 1 cubic, 2 natural cubic), the dimension order
//! (u8), then the level-bound tuning (u8, an index into `TUNINGS`).

use super::{Coded, DecodeVisitor, EncodeVisitor, Visit, ZeroCounts};
use crate::bytes::ByteReader;
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::{for_each_index, strides};
use crate::quantizer::Quantizer;
use crate::threads;
use rayon::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::rc::Rc;

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

/// Weights of the four-point splines at offsets -3s, -s, s, 3s.
const CUBIC: [f64; 4] = [-1.0 / 16.0, 9.0 / 16.0, 9.0 / 16.0, -1.0 / 16.0];
const NATURAL: [f64; 4] = [-3.0 / 40.0, 23.0 / 40.0, 23.0 / 40.0, -3.0 / 40.0];
/// Quadratic through offsets -s, s, 3s (the first point of a line).
const QUAD_FIRST: [f64; 3] = [3.0 / 8.0, 6.0 / 8.0, -1.0 / 8.0];

/// Lagrange weights at 0 of the polynomial through `offsets`. Only the last interval of a line,
/// which may be shorter than the stride, needs this; elsewhere the fixed weights above apply.
/// (Multiresolution layouts use it towards an anchored last index.)
pub fn lagrange(offsets: &[f64], weights: &mut [f64]) {
    for (j, &oj) in offsets.iter().enumerate() {
        weights[j] = offsets.iter().enumerate().filter(|&(i, _)| i != j).map(|(_, &oi)| -oi / (oj - oi)).product();
    }
}

/// Prediction stencil of the point at `x` on a line whose last index is `m`, refined at stride
/// `s` (`s == 0`: the corner round, copying index 0): offsets along the line and weights.
/// Unused slots repeat the first offset with weight 0, so callers can always sum four terms.
#[derive(Clone, Copy)]
struct Stencil {
    offsets: [isize; 4],
    weights: [f64; 4],
}

impl Stencil {
    fn new(x: usize, s: usize, m: usize, spline: Spline) -> Stencil {
        let (si, xi, mi) = (s as isize, x as isize, m as isize);
        let fixed = |offsets: &[isize], weights: &[f64]| {
            let mut st = Stencil { offsets: [offsets[0]; 4], weights: [0.0; 4] };
            st.offsets[..offsets.len()].copy_from_slice(offsets);
            st.weights[..weights.len()].copy_from_slice(weights);
            st
        };
        if s == 0 {
            return fixed(&[-mi], &[1.0]);
        }
        let four = match spline {
            Spline::Linear => None,
            Spline::Cubic => Some(CUBIC),
            Spline::Natural => Some(NATURAL),
        };
        match four {
            None if x + s <= m => fixed(&[-si, si], &[0.5, 0.5]),
            Some(w) if x >= 3 * s && x + 3 * s <= m => fixed(&[-3 * si, -si, si, 3 * si], &w),
            Some(_) if x < 3 * s && x + 3 * s <= m => fixed(&[-si, si, 3 * si], &QUAD_FIRST),
            _ => {
                // Near the last index: the known points within reach, the last one possibly nearer.
                let (mut offsets, mut len) = ([0isize; 4], 0);
                let mut push = |o: isize| {
                    offsets[len] = o;
                    len += 1;
                };
                if four.is_some() && x >= 3 * s {
                    push(-3 * si);
                }
                push(-si);
                push(si.min(mi - xi));
                if four.is_some() && x + s < m {
                    push((3 * si).min(mi - xi));
                }
                let of = offsets.map(|o| o as f64);
                let mut w = [0.0; 4];
                lagrange(&of[..len], &mut w[..len]);
                fixed(&offsets[..len], &w[..len])
            }
        }
    }

    /// Scales the offsets from line positions to buffer indices.
    fn scaled(mut self, stride: usize) -> Stencil {
        for o in self.offsets.iter_mut() {
            *o *= stride as isize;
        }
        self
    }

    /// Smallest and largest offset: the span of buffer indices a prediction reads.
    fn reach(&self) -> (isize, isize) {
        (*self.offsets.iter().min().expect("four offsets"), *self.offsets.iter().max().expect("four offsets"))
    }

    /// The prediction at `i`. Safety: `i + offset` must be within the buffer for every offset
    /// (callers check a whole line or row with `SharedBuf::check_span` first).
    #[inline(always)]
    unsafe fn predict<T: Element, const S: bool>(&self, buf: &SharedBuf<T>, i: usize) -> f64 {
        self.weighted_sum::<T, S>(|j| buf.get_unchecked(i.wrapping_add_signed(self.offsets[j])))
    }

    /// `sum of weights[j] * term(j)`, term by term from 0.0 in order (format.md, section 7.4),
    /// in binary32 for f32 values walked with `S`, else in binary64. The one definition both
    /// `predict` and `predict_term` use, so they agree bit for bit.
    #[inline(always)]
    fn weighted_sum<T: Element, const S: bool>(&self, term: impl Fn(usize) -> T) -> f64 {
        if single::<T, S>() {
            let mut acc = 0.0f32;
            for (j, &w) in self.weights.iter().enumerate() {
                acc += w as f32 * term(j).to_f64() as f32;
            }
            return acc as f64;
        }
        let mut acc = 0.0;
        for (j, &w) in self.weights.iter().enumerate() {
            acc += w * term(j).to_f64();
        }
        acc
    }

    /// The terms of `predict` for the `m` consecutive points from `start`, as four runs of
    /// the buffer. Safety: as for `predict`, for every point; and no offset may be 0 or
    /// shorter than the run, so the terms never read the run itself.
    #[inline(always)]
    unsafe fn terms<'a, T: Element>(&self, buf: &'a SharedBuf<T>, start: usize, m: usize) -> [&'a [T]; 4] {
        self.offsets.map(|o| buf.run(start.wrapping_add_signed(o), m))
    }

    /// `predict` of the `k`th point of `terms`. Computed where the visitor uses it: a run of
    /// predictions stored and loaded back cost the row walk a good part of its time.
    #[inline(always)]
    fn predict_term<T: Element, const S: bool>(&self, terms: &[&[T]; 4], k: usize) -> f64 {
        self.weighted_sum::<T, S>(|j| terms[j][k])
    }
}

/// The arithmetic of predictions and reconstructions: binary64 whatever the element type, or,
/// for f32 values, binary32, whose vectors hold twice the lanes (the speed preset's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arithmetic {
    Binary64 = 0,
    Binary32 = 1,
}

/// Everything that fixes an interpolation walk's results besides the data and the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub spline: Spline,
    pub order: DimOrder,
    pub bounds: LevelBounds,
    pub arithmetic: Arithmetic,
}

/// Whether the encoder codes `T` values under `eb` in binary32 when `arithmetic` asks for it:
/// only f32 values; a lossless request compares bits, in binary64; and a bound whose double
/// overflows binary32 would rebuild every point as infinity or NaN there.
fn encodes_in_binary32<T: Element>(arithmetic: Arithmetic, eb: f64) -> bool {
    arithmetic == Arithmetic::Binary32 && T::BYTES == 4 && eb > 0.0 && ((2.0 * eb) as f32).is_finite()
}

/// Whether a walk over `T` values that asks for binary32 (`S`) computes in it.
#[inline(always)]
fn single<T: Element, const S: bool>() -> bool {
    S && T::BYTES == 4
}

/// Points predicted and coded together by `Visit::visit_run`: enough to vectorize, few
/// enough to stay on the stack.
const RUN: usize = 256;

/// The chunk being rebuilt, written by several threads at once during a pass.
///
/// Safety rests on the pass structure: a pass writes only its own points, each from exactly one
/// line, and reads only points finished by earlier passes, so no element is written by two
/// threads or read while another thread writes it. Accesses are bounds-checked.
///
/// A decoder's buffer starts uninitialized (zeroing a whole field first was a tenth of the
/// decoding time): points are read only once their pass wrote them, and a visitor that does
/// not read values gets placeholders for the points it is about to write (`current`,
/// `visited_run`).
struct SharedBuf<T> {
    ptr: *mut T,
    len: usize,
}

unsafe impl<T: Send> Sync for SharedBuf<T> {}

impl<T: Element> SharedBuf<T> {
    fn new(buf: &mut [T]) -> Self {
        SharedBuf { ptr: buf.as_mut_ptr(), len: buf.len() }
    }
    fn uninit(buf: &mut [MaybeUninit<T>]) -> Self {
        SharedBuf { ptr: buf.as_mut_ptr().cast(), len: buf.len() }
    }
    /// The value of point `i` for visitor `V`, about to code it. Safety: as `get_unchecked`
    /// when `V` reads values.
    #[inline(always)]
    unsafe fn current<V: Visit<T>>(&self, i: usize) -> T {
        if V::READS_VALUES {
            self.get_unchecked(i)
        } else {
            T::default()
        }
    }
    /// `run_mut` for visitor `V`: cleared first when `V` does not read values, so the slice
    /// never shows memory that was not written. Safety: as `run_mut`.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn visited_run<V: Visit<T>>(&self, start: usize, m: usize) -> &mut [T] {
        if !V::READS_VALUES {
            debug_assert!(start + m <= self.len);
            std::ptr::write_bytes(self.ptr.add(start), 0, m);
        }
        self.run_mut(start, m)
    }
    /// Panics unless every index from `first + low` to `last + high` is within the buffer: one
    /// check per line or row, so the points inside need none.
    #[inline(always)]
    fn check_span(&self, first: usize, last: usize, (low, high): (isize, isize)) {
        assert!(first.checked_add_signed(low).is_some() && last.checked_add_signed(high).is_some_and(|end| end < self.len));
    }
    /// Safety: `i` in bounds (see `check_span`); see the type's comment for why no write races
    /// with this read.
    #[inline(always)]
    unsafe fn get_unchecked(&self, i: usize) -> T {
        debug_assert!(i < self.len);
        *self.ptr.add(i)
    }
    /// Safety: `i` in bounds; this line is the only writer of `i` (see the type's comment).
    #[inline(always)]
    unsafe fn set_unchecked(&self, i: usize, v: T) {
        debug_assert!(i < self.len);
        *self.ptr.add(i) = v
    }
    /// Elements `start..start + m`, finished by earlier passes. Safety: in bounds.
    #[inline(always)]
    unsafe fn run(&self, start: usize, m: usize) -> &[T] {
        debug_assert!(start + m <= self.len);
        std::slice::from_raw_parts(self.ptr.add(start), m)
    }
    /// Elements `start..start + m`, all written by the caller's row alone. Safety: in bounds,
    /// and no other live slice covers them.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn run_mut(&self, start: usize, m: usize) -> &mut [T] {
        debug_assert!(start + m <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(start), m)
    }
}

/// Visits the points of a pass along the contiguous dimension: one line, positions `xs`
/// (odd multiples of `s` in increasing order) with their `stencils`.
#[inline(always)]
fn line<T: Element, V: Visit<T>, const S: bool>(
    buf: &SharedBuf<T>,
    base: usize,
    xs: &[usize],
    stencils: &[Stencil],
    s: usize,
    n: usize,
    v: &mut V,
) {
    let Some((&first, &last)) = xs.first().zip(xs.last()) else { return };
    // Every stencil of the line reads within it: its points and their known neighbours.
    buf.check_span(base + first, base + last, (-(first as isize), (n - 1 - last) as isize));
    let visit_with = |x: usize, st: &Stencil, v: &mut V| {
        let i = base + x;
        // Safety: the stencils of a line reach only indices of that line (Stencil::new keeps
        // x + offset within 0..n), checked in bounds above.
        unsafe { buf.set_unchecked(i, v.visit(buf.current::<V>(i), st.predict::<T, S>(buf, i))) };
    };
    if s == 0 {
        for (&x, st) in xs.iter().zip(stencils) {
            visit_with(x, st, v);
        }
        return;
    }
    // Interior points (x >= 3s, x + 3s < n) share one stencil; the ends need their own.
    let interior = xs.partition_point(|&x| x < 3 * s);
    let tail = xs.partition_point(|&x| x + 3 * s < n).max(interior);
    for (&x, st) in xs[..interior].iter().zip(stencils) {
        visit_with(x, st, v);
    }
    if interior < tail {
        // Stride-2s points: gathered into a run, coded together, scattered back. The stride is
        // spelled out as a constant for the finest level (s = 1), where most of these points
        // are, so the compiler can turn the strided loads into vector shuffles.
        let st = stencils[interior];
        for group in xs[interior..tail].chunks(RUN) {
            // Safety: the points of the group are those of `xs`, as in `visit_with`.
            unsafe {
                if s == 1 {
                    strided_run::<T, V, S>(buf, base + group[0], 2, group.len(), &st, v);
                } else {
                    strided_run::<T, V, S>(buf, base + group[0], 2 * s, group.len(), &st, v);
                }
            }
        }
    }
    for (&x, st) in xs[tail..].iter().zip(&stencils[tail..]) {
        visit_with(x, st, v);
    }
}

/// Codes the `m` points `first + k * step` of a line with stencil `st` (an interior one: odd
/// multiples of `step / 2` within three of them). The known points between them are copied
/// out once, so each term of the predictions is a contiguous run and the predictions
/// vectorize. Safety: as for `Stencil::predict`, for every point.
#[inline(always)]
unsafe fn strided_run<T: Element, V: Visit<T>, const S: bool>(
    buf: &SharedBuf<T>,
    first: usize,
    step: usize,
    m: usize,
    st: &Stencil,
    v: &mut V,
) {
    let m = m.min(RUN);
    let half = (step / 2) as isize;
    // known[j] is the point at first + (2j - 3) * step / 2; the stencil reads some of j..j + 4.
    let slot = |o: isize| ((o / half + 3) / 2) as usize;
    let (low, high) = st.reach();
    let mut known = [MaybeUninit::<T>::uninit(); RUN + 3];
    for (j, x) in known.iter_mut().enumerate().take(m + slot(high)).skip(slot(low)) {
        x.write(buf.get_unchecked((first + j * step).wrapping_add_signed(-3 * half)));
    }
    // Safety: each term's m elements lie in the range written above.
    let terms = st.offsets.map(|o| std::slice::from_raw_parts(known.as_ptr().add(slot(o)).cast::<T>(), m));
    code_gathered::<T, V, S>(buf, first, step, m, st, &terms, v);
}

/// Visits one row of a pass along another dimension: every point of the row shares the
/// position `x` along the refined dimension, hence one stencil, applied across the row.
#[inline(always)]
fn row<T: Element, V: Visit<T>, const S: bool>(buf: &SharedBuf<T>, base: usize, cs: &[usize], st: &Stencil, v: &mut V) {
    let Some((&first, &last)) = cs.first().zip(cs.last()) else { return };
    let (low, high) = st.reach();
    buf.check_span(base + first, base + last, (low.min(0), high.max(0)));
    if last - first + 1 == cs.len() {
        // A contiguous row: the stencil's terms are rows of earlier passes at least a row
        // length away (its offsets are multiples of a slower dimension's stride).
        let (mut start, end) = (base + first, base + last + 1);
        while start < end {
            let m = (end - start).min(RUN);
            // Safety: within the span checked above; the run is this row's own points.
            unsafe {
                let terms = st.terms(buf, start, m);
                v.visit_run(buf.visited_run::<V>(start, m), |k| st.predict_term::<T, S>(&terms, k));
            }
            start += m;
        }
        return;
    }
    // A row of a coarser level: its points lie at a fixed stride, but for the last index of
    // the dimension, which may be nearer. The strided points and each term of their
    // predictions are gathered into runs, so the arithmetic vectorizes.
    let d = cs[1] - cs[0];
    let strided = if last - first == (cs.len() - 1) * d { cs.len() } else { cs.len() - 1 };
    debug_assert!(cs[..strided].iter().enumerate().all(|(j, &c)| c == first + j * d));
    let mut done = 0;
    while done < strided {
        let m = (strided - done).min(RUN);
        // Safety: cs increases, so every read lies between base + first + low and
        // base + last + high, checked above.
        unsafe { gathered_run::<T, V, S>(buf, base + first + done * d, d, m, st, v) };
        done += m;
    }
    for &c in &cs[strided..] {
        let i = base + c;
        // Safety: as above.
        unsafe { buf.set_unchecked(i, v.visit(buf.current::<V>(i), st.predict::<T, S>(buf, i))) };
    }
}

/// Codes the `m` points `first + k * step` with stencil `st`, each of its terms gathered into
/// a run first. Safety: as for `Stencil::predict`, for every point.
#[inline(always)]
unsafe fn gathered_run<T: Element, V: Visit<T>, const S: bool>(
    buf: &SharedBuf<T>,
    first: usize,
    step: usize,
    m: usize,
    st: &Stencil,
    v: &mut V,
) {
    let m = m.min(RUN);
    let mut gathered = [[MaybeUninit::<T>::uninit(); RUN]; 4];
    for (term, &o) in gathered.iter_mut().zip(&st.offsets) {
        for (k, x) in term[..m].iter_mut().enumerate() {
            x.write(buf.get_unchecked((first + k * step).wrapping_add_signed(o)));
        }
    }
    // Safety: the first m elements of each term were written above.
    let terms = [0, 1, 2, 3].map(|t| std::slice::from_raw_parts(gathered[t].as_ptr().cast::<T>(), m));
    code_gathered::<T, V, S>(buf, first, step, m, st, &terms, v);
}

/// Codes the `m` points `first + k * step`, given the terms of their predictions: gathered
/// into a run (read only if the visitor reads values), coded together, scattered back.
/// Uninitialized stack buffers: clearing them cost more than coding the short rows of small
/// blocks. Safety: the points are in bounds and this line or row's own.
#[inline(always)]
unsafe fn code_gathered<T: Element, V: Visit<T>, const S: bool>(
    buf: &SharedBuf<T>,
    first: usize,
    step: usize,
    m: usize,
    st: &Stencil,
    terms: &[&[T]; 4],
    v: &mut V,
) {
    let mut run = [MaybeUninit::<T>::uninit(); RUN];
    for (k, x) in run[..m].iter_mut().enumerate() {
        x.write(buf.current::<V>(first + k * step));
    }
    // Safety: the first m elements were written above.
    let vals = std::slice::from_raw_parts_mut(run.as_mut_ptr().cast::<T>(), m);
    v.visit_run(vals, |k| st.predict_term::<T, S>(terms, k));
    for (k, &x) in vals.iter().enumerate() {
        buf.set_unchecked(first + k * step, x);
    }
}

/// A tuning of the level-wise bounds, stored in streams as its index in `TUNINGS`. Level `l`
/// (1 = finest) divides the bound by `min(alpha^(l-1), beta)`; a fixed table keeps every
/// divisor an exact binary fraction, so any decoder computes the same bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelBounds(u8);

/// (alpha, beta) per tuning.
const TUNINGS: [(f64, f64); 3] = [(1.5, 2.0), (1.0, 1.0), (2.0, 4.0)];

impl LevelBounds {
    /// Every tuning, the usual winner first.
    pub fn all() -> impl Iterator<Item = LevelBounds> {
        (0..TUNINGS.len() as u8).map(LevelBounds)
    }

    fn from_index(i: u8) -> Result<LevelBounds> {
        if (i as usize) < TUNINGS.len() {
            Ok(LevelBounds(i))
        } else {
            Err(corrupt!("unknown interpolation level tuning {i}"))
        }
    }

    fn quantizer(&self, q: &Quantizer, level: u32) -> Quantizer {
        let (alpha, beta) = TUNINGS[self.0 as usize];
        let divisor = (1..level).fold(1.0f64, |d, _| (d * alpha).min(beta));
        q.with_eb(q.eb() / divisor)
    }
}

/// One refinement pass: the points at odd multiples of `s` along dimension `k` (`s == 0`: the
/// corner round, each line's last index). Its points are the product of `coords` in C order,
/// visited as rows along the last (contiguous) dimension.
struct Pass {
    level: u32,
    k: usize,
    s: usize,
    coords: Vec<Vec<usize>>,
    /// Per row: buffer offset of its coordinate 0 in the last dimension, and the index in
    /// `coords[k]` of its position along `k` (rows across the refined dimension share one
    /// stencil).
    rows: Vec<(usize, usize)>,
    /// The stencil of each position of `coords[k]`, in buffer offsets: made once per pass, as
    /// the rows and lines of a pass share them (small blocks have many short rows).
    stencils: Vec<Stencil>,
}

/// Points handed to one task: enough that scheduling costs nothing next to the work.
const GROUP_POINTS: usize = 1 << 15;

impl Pass {
    fn row_len(&self) -> usize {
        self.coords[self.coords.len() - 1].len()
    }
    fn group_rows(&self) -> usize {
        (GROUP_POINTS / self.row_len().max(1)).max(1)
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
fn passes(shape: &[usize], order: DimOrder, spline: Spline) -> impl Iterator<Item = Pass> + '_ {
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
                        (true, 0, _) => vec![last],
                        (true, _, _) => (s..last).step_by(2 * s).collect(),
                        (false, 0, true) => lattice(shape[d], usize::MAX),
                        (false, 0, false) => vec![0],
                        (false, _, true) => lattice(shape[d], s),
                        (false, _, false) => lattice(shape[d], 2 * s),
                    }
                })
                .collect();
            let outer: Vec<usize> = coords[..nd - 1].iter().map(Vec::len).collect();
            let mut rows = Vec::with_capacity(outer.iter().product());
            for_each_index(&outer, |pos| {
                let base = (0..nd - 1).map(|d| coords[d][pos[d]] * st[d]).sum();
                rows.push((base, if k < nd - 1 { pos[k] } else { 0 }));
            });
            let stencils = coords[k].iter().map(|&x| Stencil::new(x, s, last, spline).scaled(st[k])).collect();
            Some(Pass { level, k, s, coords, rows, stencils })
        })
    })
}

/// Walks of at most this many points keep their passes for the next walk of the same shape.
const CACHED_WALK_POINTS: usize = 1 << 18;

/// Calls `f` on every pass of the walk, in order. Walks of at most `PLAN_POINTS` go through a
/// `Plan` instead; above it, arrays chunked alike (an HDF5 dataset's chunks, 64^3 unit blocks)
/// walk one shape again and again, so each thread keeps the passes of the last walk of at most
/// `CACHED_WALK_POINTS` it made.
fn for_each_pass(shape: &[usize], order: DimOrder, spline: Spline, mut f: impl FnMut(&Pass)) {
    type Cached = (Vec<usize>, DimOrder, Spline, Rc<[Pass]>);
    thread_local! {
        static LAST: RefCell<Option<Cached>> = const { RefCell::new(None) };
    }
    if shape.iter().product::<usize>() > CACHED_WALK_POINTS {
        return passes(shape, order, spline).for_each(|p| f(&p));
    }
    let cached = LAST.with(|last| {
        let mut last = last.borrow_mut();
        match last.as_ref() {
            Some((s, o, sp, all)) if s == shape && *o == order && *sp == spline => all.clone(),
            _ => {
                let all: Rc<[Pass]> = passes(shape, order, spline).collect();
                *last = Some((shape.to_vec(), order, spline, all.clone()));
                all
            }
        }
    });
    cached.iter().for_each(f);
}

/// Walks of at most this many points (unit blocks) go through a `Plan`: the rows of their
/// passes hold one to a few points, and walking them row by row cost several times the
/// arithmetic (one thread, 8^3 blocks: 14 against 5.2 ns a value coding, 8.4 against 2.3
/// decoding; 32^3: 6.5 against 5.0 and 4.8 against 2.3; one-off).
const PLAN_POINTS: usize = 1 << 15;
const _: () = assert!(PLAN_POINTS <= 1 << 16, "plans index points in 16 bits");

/// A small walk flattened: every point but point 0 in visiting order, with its stencil.
struct Plan {
    /// Per pass: its level and the end of its points in `points`.
    passes: Vec<(u32, usize)>,
    /// Buffer index of each point and its stencil's index in `stencils` (16 bits each: a plan
    /// holds at most 2^15 points, and a write keeps a few plans per thread).
    points: Vec<(u16, u16)>,
    stencils: Vec<Stencil>,
}

impl Plan {
    fn new(shape: &[usize], order: DimOrder, spline: Spline) -> Plan {
        let nd = shape.len();
        let n: usize = shape.iter().product();
        let mut plan = Plan { passes: Vec::new(), points: Vec::with_capacity(n), stencils: Vec::new() };
        // Each distinct stencil once: a line's interior points share theirs, and a long 1-D
        // walk would otherwise keep one per point.
        let mut ids: HashMap<([isize; 4], [u64; 4]), u16> = HashMap::new();
        for pass in passes(shape, order, spline) {
            let pass_ids: Vec<u16> = pass
                .stencils
                .iter()
                .map(|st| {
                    *ids.entry((st.offsets, st.weights.map(f64::to_bits))).or_insert_with(|| {
                        plan.stencils.push(*st);
                        u16::try_from(plan.stencils.len() - 1).expect("fewer than 2^16 stencils")
                    })
                })
                .collect();
            let cs = &pass.coords[nd - 1];
            for &(base, at) in &pass.rows {
                for (j, &c) in cs.iter().enumerate() {
                    // Along the contiguous dimension each point has its own stencil, across
                    // the others a row shares one (as `line` and `row` walk them).
                    let which = if pass.k == nd - 1 { j } else { at };
                    plan.points.push(((base + c) as u16, pass_ids[which]));
                }
            }
            plan.passes.push((pass.level, plan.points.len()));
        }
        // What the unchecked reads of `walk_plan` rely on: every term of every prediction
        // lies within the buffer.
        for &(i, st) in &plan.points {
            let (low, high) = plan.stencils[st as usize].reach();
            assert!((i as usize).checked_add_signed(low).is_some() && (i as usize).checked_add_signed(high).is_some_and(|e| e < n));
        }
        assert_eq!(plan.points.len() + 1, n, "interpolation passes cover the chunk");
        plan
    }
}

/// Plans each thread keeps: the unit blocks of a level share one shape and settings, but a
/// write's trials and a read's levels go through a few in turn.
const CACHED_PLANS: usize = 4;

/// The plan of a walk of at most `PLAN_POINTS` points, from the thread's most recently used.
fn plan(shape: &[usize], order: DimOrder, spline: Spline) -> Rc<Plan> {
    type Cached = (Vec<usize>, DimOrder, Spline, Rc<Plan>);
    thread_local! {
        static RECENT: RefCell<Vec<Cached>> = const { RefCell::new(Vec::new()) };
    }
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        let hit = recent.iter().position(|(s, o, sp, _)| s == shape && *o == order && *sp == spline);
        let entry = match hit {
            Some(k) => recent.remove(k),
            None => {
                recent.truncate(CACHED_PLANS - 1);
                (shape.to_vec(), order, spline, Rc::new(Plan::new(shape, order, spline)))
            }
        };
        let plan = entry.3.clone();
        recent.insert(0, entry);
        plan
    })
}

/// Visits the points of `plan`, pass by pass, with the visitor `visitor(pass level, first
/// symbol, symbol count)` makes for each; `done(visitor, first symbol)` collects what it kept.
/// The buffer must hold the plan's whole shape.
#[inline(always)]
fn walk_plan<T: Element, V: Visit<T>, const S: bool>(
    plan: &Plan,
    buf: &SharedBuf<T>,
    mut visitor: impl FnMut(u32, usize, usize) -> V,
    mut done: impl FnMut(V, usize),
) {
    assert_eq!(buf.len, plan.points.len() + 1, "a plan walks a buffer of its shape");
    let mut start = 0;
    let mut preds = [0.0f64; RUN];
    let mut vals = [T::default(); RUN];
    for &(level, end) in &plan.passes {
        let mut v = visitor(level, start + 1, end - start);
        if !V::READS_VALUES {
            // Decoding a point is a lookup and an add: point by point beats the stores and
            // loads of a run (2.3 against 2.8 ns a value on 8^3 blocks, one-off).
            for &(i, st) in &plan.points[start..end] {
                let i = i as usize;
                // Safety: `Plan::new` checked every term of every point within the buffer, and
                // a pass reads only points of earlier passes.
                unsafe { buf.set_unchecked(i, v.visit(buf.current::<V>(i), plan.stencils[st as usize].predict::<T, S>(buf, i))) };
            }
            done(v, start + 1);
            start = end;
            continue;
        }
        // Coding quantizes a run in vector lanes (5.2 against 7.5 ns a value point by point):
        // a pass's points depend only on earlier passes, so they are predicted first, coded as
        // one run, then stored.
        for points in plan.points[start..end].chunks(RUN) {
            for ((p, x), &(i, st)) in preds.iter_mut().zip(vals.iter_mut()).zip(points) {
                // Safety: `Plan::new` checked every term of every point within the buffer, and
                // a pass reads only points of earlier passes.
                unsafe {
                    *p = plan.stencils[st as usize].predict::<T, S>(buf, i as usize);
                    *x = buf.current::<V>(i as usize);
                }
            }
            let m = points.len();
            v.visit_run(&mut vals[..m], |k| preds[k]);
            for (&x, &(i, _)) in vals.iter().zip(points) {
                // Safety: as above; each point is this pass's own.
                unsafe { buf.set_unchecked(i as usize, x) };
            }
        }
        done(v, start + 1);
        start = end;
    }
}

/// One group of rows of a pass, with what visiting them needs.
struct RowGroup<'a, T> {
    buf: &'a SharedBuf<T>,
    pass: &'a Pass,
    rows: &'a [(usize, usize)],
    shape: &'a [usize],
}

/// Visits one group of rows of a pass.
#[inline(always)]
fn visit_rows<T: Element, V: Visit<T>, const S: bool>(g: &RowGroup<T>, v: &mut V) {
    let RowGroup { buf, pass, rows, shape } = *g;
    let nd = shape.len();
    let cs = &pass.coords[nd - 1];
    for &(base, at) in rows {
        if pass.k == nd - 1 {
            line::<T, V, S>(buf, base, cs, &pass.stencils, pass.s, shape[nd - 1], v);
        } else {
            row::<T, V, S>(buf, base, cs, &pass.stencils[at], v);
        }
    }
}

/// `visit_rows` compiled for the widest vector unit the CPU has (512 bits only for visitors
/// that prefer them). Neither AVX2 nor AVX-512 changes a result: Rust never fuses a multiply
/// and an add on its own, and conversions round the same way.
fn visit_rows_fastest<T: Element, V: Visit<T>, const S: bool>(g: &RowGroup<T>, v: &mut V) {
    #[cfg(target_arch = "x86_64")]
    if V::WIDE_VECTORS && std::is_x86_feature_detected!("avx512f") {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<T: Element, V: Visit<T>, const S: bool>(g: &RowGroup<T>, v: &mut V) {
            visit_rows::<T, V, S>(g, v)
        }
        // Safety: the CPU has AVX-512F.
        return unsafe { avx512::<T, V, S>(g, v) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<T: Element, V: Visit<T>, const S: bool>(g: &RowGroup<T>, v: &mut V) {
            visit_rows::<T, V, S>(g, v)
        }
        // Safety: the CPU has AVX2.
        return unsafe { avx2::<T, V, S>(g, v) };
    }
    visit_rows::<T, V, S>(g, v)
}

/// The chunk's shape and the predictor's settings, as both walks need them.
#[derive(Clone, Copy)]
struct Walk<'a> {
    shape: &'a [usize],
    spline: Spline,
    order: DimOrder,
    q: &'a Quantizer,
    bounds: LevelBounds,
    /// Whether to walk the flattened `Plan` (the same results as the rows).
    flat: bool,
}

impl<'a> Walk<'a> {
    fn new(shape: &'a [usize], spline: Spline, order: DimOrder, q: &'a Quantizer, bounds: LevelBounds) -> Self {
        Walk { shape, spline, order, q, bounds, flat: shape.iter().product::<usize>() <= PLAN_POINTS }
    }
}

/// Encodes the chunk. Each pass's rows are spread over the thread pool in fixed groups, each
/// quantizing straight into its part of the symbol array; the exact values are concatenated in
/// group order, so the stream does not depend on the number of threads.
fn encode_walk<T: Element, const S: bool>(buf: &mut [T], walk: &Walk) -> (Vec<u16>, Vec<T>, Vec<usize>) {
    let Walk { shape, spline, order, q, bounds, flat } = *walk;
    let n = buf.len();
    // Each task clears its part of the symbols just before writing it, in cache, rather than
    // all of them in a pass of its own.
    let mut symbols = Vec::with_capacity(n);
    let spare = &mut symbols.spare_capacity_mut()[..n];
    let mut v = EncodeVisitor::new(&bounds.quantizer(q, levels(shape) + 1), threads::init(&mut spare[..1], 0));
    buf[0] = v.visit(buf[0], 0.0);
    let (mut exact, mut absent) = (v.exact, v.absent);
    let buf = SharedBuf::new(buf);
    if flat {
        let plan = plan(shape, order, spline);
        let mut rest = &mut spare[1..];
        walk_plan::<T, _, S>(
            &plan,
            &buf,
            |level, _, count| {
                let (syms, later) = std::mem::take(&mut rest).split_at_mut(count);
                rest = later;
                EncodeVisitor::new(&bounds.quantizer(q, level), threads::init(syms, 0))
            },
            |v, first| {
                exact.extend(v.exact);
                absent.extend(v.absent.into_iter().map(|i| first + i));
            },
        );
        // Safety: every symbol was initialized, the first above and each pass's by `init`.
        unsafe { symbols.set_len(n) };
        return (symbols, exact, absent);
    }
    let mut pos = 1;
    for_each_pass(shape, order, spline, |pass| {
        let count = pass.rows.len() * pass.row_len();
        let lq = bounds.quantizer(q, pass.level);
        let group_points = pass.group_rows() * pass.row_len();
        let code = |rows: &[(usize, usize)], syms: &mut [MaybeUninit<u16>]| {
            let mut v = EncodeVisitor::new(&lq, threads::init(syms, 0));
            visit_rows_fastest::<T, _, S>(&RowGroup { buf: &buf, pass, rows, shape }, &mut v);
            (v.exact, v.absent)
        };
        let syms = &mut spare[pos..pos + count];
        // A pass of one group (every pass of a small unit block) is coded here, without a task.
        let groups: Vec<(Vec<T>, Vec<usize>)> = if count <= group_points {
            vec![code(&pass.rows, syms)]
        } else {
            pass.rows.par_chunks(pass.group_rows()).zip(syms.par_chunks_mut(group_points)).map(|(rows, syms)| code(rows, syms)).collect()
        };
        for (g, (e, a)) in groups.into_iter().enumerate() {
            exact.extend(e);
            absent.extend(a.into_iter().map(|i| pos + g * group_points + i));
        }
        pos += count;
    });
    // The passes visit every point but the first exactly once (see the tests), so this holds;
    // checked because the length below relies on it.
    assert_eq!(pos, n, "interpolation passes cover the chunk");
    // Safety: symbols 0..pos were initialized, the first one and each pass's range by `init`.
    unsafe { symbols.set_len(n) };
    (symbols, exact, absent)
}

/// Decodes the chunk pass by pass; each group of rows finds its first exact value by counting
/// the unpredictable symbols before it.
fn decode_walk<T: Element, const S: bool>(
    buf: &mut [MaybeUninit<T>],
    walk: &Walk,
    symbols: &[u16],
    zeros: &ZeroCounts,
    exact: &[T],
) -> Result<()> {
    let Walk { shape, spline, order, q, bounds, flat } = *walk;
    let n = buf.len();
    if symbols.len() != n || zeros.total() != exact.len() {
        return Err(corrupt!("interpolation chunk has {} symbols and {} exact values for {n} points", symbols.len(), exact.len()));
    }
    let first = (symbols[0] == 0) as usize;
    let mut v = DecodeVisitor::new(&bounds.quantizer(q, levels(shape) + 1), &symbols[..1], &exact[..first])?;
    buf[0].write(v.visit(T::default(), 0.0));
    let (mut sym_pos, mut exact_pos) = (1, first);
    let buf = SharedBuf::uninit(buf);
    if flat {
        // One visitor per pass, each given the exact values from the first its pass may take:
        // the count of 0 symbols matched them all above.
        let taken = std::cell::Cell::new(exact_pos);
        walk_plan::<T, _, S>(
            &plan(shape, order, spline),
            &buf,
            |level, first, count| {
                DecodeVisitor::counted(&bounds.quantizer(q, level), &symbols[first..first + count], &exact[taken.get()..])
            },
            |v, _| taken.set(taken.get() + v.next_exact),
        );
        return Ok(());
    }
    for_each_pass(shape, order, spline, |pass| {
        let lq = bounds.quantizer(q, pass.level);
        let group_points = pass.group_rows() * pass.row_len();
        let pass_symbols = &symbols[sym_pos..sym_pos + pass.rows.len() * pass.row_len()];
        let decode = |rows: &[(usize, usize)], syms: &[u16], exact: &[T]| {
            let mut v = DecodeVisitor::counted(&lq, syms, exact);
            visit_rows_fastest::<T, _, S>(&RowGroup { buf: &buf, pass, rows, shape }, &mut v);
        };
        if pass_symbols.len() <= group_points {
            // One group: decoded here, without a task, as in `encode_walk`.
            let count = zeros.count(symbols, sym_pos, sym_pos + pass_symbols.len());
            decode(&pass.rows, pass_symbols, &exact[exact_pos..exact_pos + count]);
            sym_pos += pass_symbols.len();
            exact_pos += count;
            return;
        }
        // Each group's exact values: as many as its 0 symbols, after those of earlier groups.
        let counts: Vec<usize> = (0..pass_symbols.len().div_ceil(group_points))
            .map(|g| {
                let start = sym_pos + g * group_points;
                zeros.count(symbols, start, (start + group_points).min(sym_pos + pass_symbols.len()))
            })
            .collect();
        let mut starts = Vec::with_capacity(counts.len());
        let mut acc = exact_pos;
        for &c in &counts {
            starts.push(acc);
            acc += c;
        }
        pass.rows
            .par_chunks(pass.group_rows())
            .zip(pass_symbols.par_chunks(group_points))
            .enumerate()
            .for_each(|(g, (rows, syms))| decode(rows, syms, &exact[starts[g]..starts[g] + counts[g]]));
        sym_pos += pass_symbols.len();
        exact_pos = acc;
    });
    assert_eq!(sym_pos, n, "interpolation passes cover the chunk");
    Ok(())
}

/// Codes `work` and returns it rebuilt as a decoder will (the walk predicts from what it
/// rebuilt, in place).
pub fn encode<T: Element>(mut work: Vec<T>, shape: &[usize], q: &Quantizer, settings: Settings) -> (Coded<T>, Vec<T>) {
    let Settings { spline, order, bounds, arithmetic } = settings;
    let single = encodes_in_binary32::<T>(arithmetic, q.eb());
    let q = q.in_single(single);
    let walk = Walk::new(shape, spline, order, &q, bounds);
    let (symbols, exact, absent) =
        if single { encode_walk::<T, true>(&mut work, &walk) } else { encode_walk::<T, false>(&mut work, &walk) };
    let mut side = vec![spline as u8, order as u8, bounds.0];
    if single {
        side.push(Arithmetic::Binary32 as u8);
    }
    (Coded { symbols, exact, side, absent }, work)
}

/// The places in the walk (the order of its symbols) of the cells `mask` leaves out, which
/// the encoder of a partial block dropped: a walk over the cached passes, coding nothing.
pub fn absent_in_walk(shape: &[usize], settings: Settings, mask: &[bool]) -> Vec<usize> {
    let nd = shape.len();
    assert_eq!(mask.len(), shape.iter().product::<usize>(), "a mask per cell");
    let mut absent = Vec::new();
    if mask.first() == Some(&false) {
        absent.push(0);
    }
    if mask.len() <= PLAN_POINTS {
        let plan = plan(shape, settings.order, settings.spline);
        absent.extend(plan.points.iter().enumerate().filter(|(_, &(i, _))| !mask[i as usize]).map(|(k, _)| k + 1));
        return absent;
    }
    let mut pos = 1;
    for_each_pass(shape, settings.order, settings.spline, |pass| {
        let cs = &pass.coords[nd - 1];
        for &(base, _) in &pass.rows {
            for (j, &c) in cs.iter().enumerate() {
                if !mask[base + c] {
                    absent.push(pos + j);
                }
            }
            pos += cs.len();
        }
    });
    absent
}

/// The settings recorded in the side information: spline, dimension order, level tuning, and
/// a fourth byte only for binary32 arithmetic (streams without it are binary64).
pub fn settings(side: &[u8]) -> Result<Settings> {
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
    let bounds = LevelBounds::from_index(r.u8("interpolation level tuning")?)?;
    let arithmetic = match r.remaining() {
        0 => Arithmetic::Binary64,
        _ => match r.u8("interpolation arithmetic")? {
            1 => Arithmetic::Binary32,
            a => return Err(corrupt!("unknown interpolation arithmetic {a}")),
        },
    };
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after interpolation parameters", r.remaining()));
    }
    Ok(Settings { spline, order, bounds, arithmetic })
}

pub fn decode<T: Element>(shape: &[usize], q: &Quantizer, symbols: &[u16], zeros: &ZeroCounts, exact: &[T], side: &[u8]) -> Result<Vec<T>> {
    let Settings { spline, order, bounds, arithmetic } = settings(side)?;
    // f64 values are always coded in binary64.
    let single = arithmetic == Arithmetic::Binary32 && T::BYTES == 4;
    let q = q.in_single(single);
    let walk = Walk::new(shape, spline, order, &q, bounds);
    let n = shape.iter().product();
    let mut work = Vec::with_capacity(n);
    let out = &mut work.spare_capacity_mut()[..n];
    // NaN would spread from a point read before its pass wrote it into what the tests check.
    threads::poison(out, T::from_f64(f64::NAN));
    if single {
        decode_walk::<T, true>(out, &walk, symbols, zeros, exact)?;
    } else {
        decode_walk::<T, false>(out, &walk, symbols, zeros, exact)?;
    }
    // Safety: the walk wrote every point (it checks that its passes covered them all).
    unsafe { work.set_len(n) };
    Ok(work)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_visit_every_point_but_the_first_exactly_once() {
        for shape in [
            vec![1usize],
            vec![2],
            vec![3],
            vec![17],
            vec![256],
            vec![5, 1],
            vec![1, 7],
            vec![9, 6],
            vec![2, 2, 2],
            vec![33, 5, 17],
            vec![3, 4, 5, 6],
        ] {
            for order in [DimOrder::Forward, DimOrder::Backward] {
                let st = strides(&shape);
                let n: usize = shape.iter().product();
                let mut seen = vec![0u32; n];
                seen[0] += 1;
                for pass in passes(&shape, order, Spline::Cubic) {
                    let last = shape.len() - 1;
                    for &(base, at) in &pass.rows {
                        for &c in &pass.coords[last] {
                            let i = base + c;
                            assert!(pass.k == last || (i / st[pass.k]) % shape[pass.k] == pass.coords[pass.k][at]);
                            seen[i] += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "{shape:?} {order:?}: {seen:?}");
            }
        }
    }

    /// The values the encoder's walk leaves behind (what it predicted from) and the decoder's.
    fn both_walks<T: Element>(data: &[T], shape: &[usize], eb: f64, chosen: Settings) -> (Vec<T>, Vec<T>) {
        let Settings { spline, order, bounds, arithmetic } = chosen;
        let single = encodes_in_binary32::<T>(arithmetic, eb);
        let q = Quantizer::new(eb, crate::quantizer::DEFAULT_RADIUS);
        let q = q.in_single(single);
        let walk = Walk::new(shape, spline, order, &q, bounds);
        let mut walked = data.to_vec();
        let (symbols, exact, _) =
            if single { encode_walk::<T, true>(&mut walked, &walk) } else { encode_walk::<T, false>(&mut walked, &walk) };
        let (coded, work) = encode(data.to_vec(), shape, &q, chosen);
        assert_eq!(
            work.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>(),
            walked.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>()
        );
        assert_eq!((&coded.symbols, coded.exact.len()), (&symbols, exact.len()));
        assert_eq!(settings(&coded.side).unwrap().arithmetic, if single { Arithmetic::Binary32 } else { Arithmetic::Binary64 });
        let decoded = decode(shape, &q, &coded.symbols, &ZeroCounts::of(&coded.symbols), &coded.exact, &coded.side).unwrap();
        (work, decoded)
    }

    #[test]
    fn flattened_plans_walk_as_the_rows_do() {
        // Unit-block shapes and odd ones, with values kept exactly (huge jumps) and "don't
        // care" cells (NaN): the same symbols, exact values, absent cells and rebuilt values,
        // bit for bit, coding and decoding.
        fn check<T: Element>(value: impl Fn(f64) -> T) {
            let shapes = [
                vec![8usize, 8, 8],
                vec![4, 8, 16],
                vec![16, 16, 16],
                vec![20, 32, 33],
                vec![5, 7, 3],
                vec![9, 17],
                vec![300],
                vec![3, 4, 5, 6],
                vec![1, 8, 8],
            ];
            for shape in shapes {
                let n: usize = shape.iter().product();
                let data: Vec<T> = (0..n)
                    .map(|i| match i % 97 {
                        13 => value(f64::NAN),
                        41 => value(1e30),
                        _ => value((i as f64 * 0.37).sin() * 100.0 + (i % 7) as f64 * 10.0),
                    })
                    .collect();
                for arithmetic in [Arithmetic::Binary64, Arithmetic::Binary32] {
                    for (spline, order) in
                        [(Spline::Cubic, DimOrder::Backward), (Spline::Natural, DimOrder::Forward), (Spline::Linear, DimOrder::Forward)]
                    {
                        for bounds in LevelBounds::all() {
                            let single = encodes_in_binary32::<T>(arithmetic, 0.5);
                            let q = Quantizer::new(0.5, crate::quantizer::DEFAULT_RADIUS).in_single(single);
                            let run = |flat: bool| {
                                let walk = Walk { shape: &shape, spline, order, q: &q, bounds, flat };
                                let mut walked = data.clone();
                                let (symbols, exact, absent) = if single {
                                    encode_walk::<T, true>(&mut walked, &walk)
                                } else {
                                    encode_walk::<T, false>(&mut walked, &walk)
                                };
                                let mut out = vec![MaybeUninit::<T>::uninit(); n];
                                let zeros = ZeroCounts::of(&symbols);
                                if single {
                                    decode_walk::<T, true>(&mut out, &walk, &symbols, &zeros, &exact).unwrap();
                                } else {
                                    decode_walk::<T, false>(&mut out, &walk, &symbols, &zeros, &exact).unwrap();
                                }
                                // Safety: the walk wrote every point.
                                let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
                                let decoded: Vec<T> = out.into_iter().map(|x| unsafe { x.assume_init() }).collect();
                                (symbols, bits(&exact), absent, bits(&walked), bits(&decoded))
                            };
                            let (rows, flat) = (run(false), run(true));
                            assert!(!rows.1.is_empty() && !rows.2.is_empty(), "{shape:?}: the data exercise exact and absent cells");
                            assert!(rows == flat, "{shape:?} {spline:?} {order:?} {bounds:?} {arithmetic:?}");
                            assert_eq!(rows.3.iter().zip(&data).filter(|(_, x)| !x.to_f64().is_nan()).count(), n - rows.2.len());
                        }
                    }
                }
            }
        }
        check::<f64>(|x| x);
        check::<f32>(|x| x as f32);
    }

    #[test]
    fn decoder_rebuilds_what_the_encoder_predicted_from() {
        fn check<T: Element>(value: impl Fn(f64) -> T) {
            for shape in [vec![300usize], vec![37, 41], vec![9, 17, 33], vec![3, 4, 5, 6]] {
                let n: usize = shape.iter().product();
                let data: Vec<T> = (0..n).map(|i| value((i as f64 * 0.37).sin() * 100.0 + (i % 7) as f64 * 1e3)).collect();
                for arithmetic in [Arithmetic::Binary64, Arithmetic::Binary32] {
                    for (spline, order) in
                        [(Spline::Cubic, DimOrder::Backward), (Spline::Natural, DimOrder::Forward), (Spline::Linear, DimOrder::Backward)]
                    {
                        for eb in [0.0, 1e-4, 0.5, 1e6, 1e39] {
                            let settings = Settings { spline, order, bounds: LevelBounds(0), arithmetic };
                            let (encoder, decoder) = both_walks(&data, &shape, eb, settings);
                            let bits = |v: &[T]| v.iter().map(|x| x.to_bits_u64()).collect::<Vec<_>>();
                            assert_eq!(bits(&encoder), bits(&decoder), "{shape:?} {settings:?} {eb}");
                            assert!(decoder.iter().zip(&data).all(|(r, x)| (r.to_f64() - x.to_f64()).abs() <= eb));
                        }
                    }
                }
            }
        }
        check(|v| v as f32);
        check(|v| v);
    }

    #[test]
    fn absent_cells_are_found_in_walk_order_without_coding() {
        let mut next = crate::test_rng::xorshift(7);
        for shape in [vec![16usize, 16, 16], vec![5, 9, 3], vec![8, 8], vec![13]] {
            let n: usize = shape.iter().product();
            for order in [DimOrder::Forward, DimOrder::Backward] {
                let settings = Settings { spline: Spline::Cubic, order, bounds: LevelBounds(0), arithmetic: Arithmetic::Binary64 };
                let mask: Vec<bool> = (0..n).map(|_| next() % 10 < 7).collect();
                let stand_in: Vec<f64> = mask.iter().map(|&m| if m { 0.0 } else { f64::NAN }).collect();
                let (coded, _) = encode(stand_in, &shape, &Quantizer::new(1e-3, crate::quantizer::DEFAULT_RADIUS), settings);
                assert_eq!(absent_in_walk(&shape, settings, &mask), coded.absent, "{shape:?} {order:?}");
            }
        }
    }

    #[test]
    fn arithmetic_byte_is_optional_and_validated() {
        let plain = Settings { spline: Spline::Cubic, order: DimOrder::Backward, bounds: LevelBounds(2), arithmetic: Arithmetic::Binary64 };
        assert_eq!(settings(&[1, 1, 2]).unwrap(), plain);
        assert_eq!(settings(&[1, 1, 2, 1]).unwrap(), Settings { arithmetic: Arithmetic::Binary32, ..plain });
        for side in [&[1u8, 1, 2, 0][..], &[1, 1, 2, 2], &[1, 1, 2, 1, 0], &[1, 1]] {
            assert!(settings(side).is_err(), "{side:?}");
        }
    }

    #[test]
    fn stencils_reproduce_polynomials_they_are_exact_for() {
        // Lagrange and the fixed weights must be exact on a quadratic (cubic: on a cubic).
        let f = |t: f64| 0.5 * t * t - 3.0 * t + 2.0;
        // (x, s, m): x an odd multiple of s below the last index m.
        for (x, s, m) in [(1usize, 1usize, 4usize), (3, 1, 8), (7, 1, 8), (6, 2, 10), (12, 4, 13), (8, 8, 19), (24, 8, 30)] {
            for spline in [Spline::Cubic, Spline::Natural, Spline::Linear] {
                let st = Stencil::new(x, s, m, spline);
                let p: f64 = (0..4).map(|j| st.weights[j] * f(x as f64 + st.offsets[j] as f64)).sum();
                let points = st.weights.iter().filter(|&&w| w != 0.0).count();
                let natural_interior = spline == Spline::Natural && x >= 3 * s && x + 3 * s <= m;
                if points >= 3 && !natural_interior {
                    assert!((p - f(x as f64)).abs() < 1e-9, "{x} {s} {m} {spline:?}: {p} vs {}", f(x as f64));
                }
                let total: f64 = st.weights.iter().sum();
                assert!((total - 1.0).abs() < 1e-12, "weights of {x} {s} {m} {spline:?} sum to {total}");
            }
        }
    }
}
