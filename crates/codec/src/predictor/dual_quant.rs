//! Dual-quantization Lorenzo (cuSZ, CEAZ). Every value is first prequantized on its own to the
//! integer `p = round(x / 2eb)`, whose reconstruction `p * 2eb` is within the bound; the Lorenzo
//! residual is then taken on those integers. No point depends on another's reconstruction, so
//! encoding is a few array sweeps, and decoding is a prefix sum along each dimension.
//!
//! Side information: the residuals outside the bin radius (count, then signed varints, in
//! symbol order), then the positions of values kept exactly because `p * 2eb` missed the bound
//! (count, then varint gaps; the values are the chunk's exact values).

use super::{Coded, ZeroCounts};
use crate::bytes::{put_signed_varint, put_varint, ByteReader};
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::strides;
use crate::quantizer::{round_to_int, Quantizer};
use rayon::prelude::*;

/// Integers beyond this are not prequantized (their products would lose precision in f64).
const PREQUANT_LIMIT: f64 = (1u64 << 50) as f64;
const BLOCK: usize = 1 << 16;

#[inline(always)]
fn rebuild<T: Element>(p: i64, two_eb: f64) -> T {
    T::from_f64(p as f64 * two_eb)
}

/// Prequantized integers, and the values (with positions) whose integer misses the bound.
struct Prequantized<T> {
    p: Vec<i64>,
    exact: Vec<(usize, T)>,
}

fn prequantize<T: Element>(data: &[T], eb: f64) -> Prequantized<T> {
    let (two_eb, inv) = (2.0 * eb, 0.5 / eb);
    let mut p = vec![0i64; data.len()];
    let exact: Vec<Vec<(usize, T)>> = p
        .par_chunks_mut(BLOCK)
        .zip(data.par_chunks(BLOCK))
        .enumerate()
        .map(|(b, (out, block))| {
            let mut missed = Vec::new();
            for (k, (o, &x)) in out.iter_mut().zip(block).enumerate() {
                let t = x.to_f64() * inv;
                *o = if t.abs() < PREQUANT_LIMIT { round_to_int(t) } else { 0 };
                // Negated so that a NaN error (an overflowed product) counts as a miss.
                if !((rebuild::<T>(*o, two_eb).to_f64() - x.to_f64()).abs() <= eb) {
                    missed.push((b * BLOCK + k, x));
                }
            }
            missed
        })
        .collect();
    Prequantized { p, exact: exact.concat() }
}

fn write_overlay<T: Element>(side: &mut Vec<u8>, exact: &[(usize, T)]) {
    put_varint(side, exact.len() as u64);
    let mut last = 0;
    for &(i, _) in exact {
        put_varint(side, (i - last) as u64);
        last = i;
    }
}

/// Rebuilds the floats from the integers and puts the exactly kept values back.
fn finish<T: Element>(p: &[i64], eb: f64, r: &mut ByteReader, exact: &[T]) -> Result<Vec<T>> {
    let n = p.len();
    let two_eb = 2.0 * eb;
    let mut out = vec![T::default(); n];
    out.par_chunks_mut(BLOCK).zip(p.par_chunks(BLOCK)).for_each(|(o, p)| {
        for (o, &p) in o.iter_mut().zip(p) {
            *o = rebuild(p, two_eb);
        }
    });
    let n_exact = r.bounded_varint(n as u64, "dual-quant exact count")? as usize;
    if n_exact != exact.len() {
        return Err(corrupt!("{n_exact} exact positions but {} exact values", exact.len()));
    }
    let mut previous = None;
    for &x in exact {
        let pos = r.next_position(previous, n, "dual-quant exact position")?;
        out[pos] = x;
        previous = Some(pos);
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after dual-quant side information", r.remaining()));
    }
    Ok(out)
}

fn write_outliers(side: &mut Vec<u8>, outliers: &[i64]) {
    put_varint(side, outliers.len() as u64);
    for &d in outliers {
        put_signed_varint(side, d);
    }
}

/// `zero_symbols`: how many of the chunk's `n` symbols are 0.
fn read_outliers(r: &mut ByteReader, n: usize, zero_symbols: usize) -> Result<Vec<i64>> {
    let count = r.bounded_varint(n as u64, "dual-quant outlier count")?;
    if count != zero_symbols as u64 {
        return Err(corrupt!("{zero_symbols} outlier symbols but {count} outliers stored"));
    }
    (0..count).map(|_| r.signed_varint("dual-quant outlier")).collect()
}

/// Replaces `v` by its Lorenzo residual along every axis (zero outside the chunk).
fn difference(v: &mut [i64], shape: &[usize]) {
    for (axis, &st) in strides(shape).iter().enumerate() {
        let n = shape[axis];
        v.par_chunks_mut(n * st).for_each(|outer| {
            for j in (1..n).rev() {
                let (prev, cur) = outer[(j - 1) * st..(j + 1) * st].split_at_mut(st);
                for (c, p) in cur.iter_mut().zip(prev.iter()) {
                    *c = c.wrapping_sub(*p);
                }
            }
        });
    }
}

/// Inverse of `difference`: a prefix sum along every axis.
fn integrate(v: &mut [i64], shape: &[usize]) {
    for (axis, &st) in strides(shape).iter().enumerate() {
        let n = shape[axis];
        v.par_chunks_mut(n * st).for_each(|outer| {
            for j in 1..n {
                let (prev, cur) = outer[(j - 1) * st..(j + 1) * st].split_at_mut(st);
                for (c, p) in cur.iter_mut().zip(prev.iter()) {
                    *c = c.wrapping_add(*p);
                }
            }
        });
    }
}

pub fn encode<T: Element>(data: &[T], shape: &[usize], q: &Quantizer) -> Coded<T> {
    let Prequantized { mut p, exact } = prequantize(data, q.eb());
    difference(&mut p, shape);
    let radius = (q.alphabet() / 2) as i64;
    let symbols: Vec<u16> = p.par_iter().map(|&d| if q.accepts(d) { (d + radius) as u16 } else { 0 }).collect();
    let outliers: Vec<i64> = p.iter().filter(|&&d| !q.accepts(d)).copied().collect();
    let mut side = Vec::new();
    write_outliers(&mut side, &outliers);
    write_overlay(&mut side, &exact);
    Coded { symbols, exact: exact.into_iter().map(|(_, x)| x).collect(), side, absent: Vec::new() }
}

pub fn decode<T: Element>(shape: &[usize], q: &Quantizer, symbols: &[u16], zeros: &ZeroCounts, exact: &[T], side: &[u8]) -> Result<Vec<T>> {
    let radius = (q.alphabet() / 2) as i64;
    let mut r = ByteReader::new(side);
    let mut outliers = read_outliers(&mut r, symbols.len(), zeros.total())?.into_iter();
    let mut v: Vec<i64> = symbols.iter().map(|&s| if s == 0 { outliers.next().unwrap_or(0) } else { s as i64 - radius }).collect();
    integrate(&mut v, shape);
    finish(&v, q.eb(), &mut r, exact)
}
