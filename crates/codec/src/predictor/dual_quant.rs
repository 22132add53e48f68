//! Dual-quantization Lorenzo (cuSZ, CEAZ). Every value is first prequantized on its own to the
//! integer `p = round(x / 2eb)`; the Lorenzo residual is then taken on those integers. No point
//! depends on another's reconstruction, so both passes are plain array sweeps, and decoding is
//! a prefix sum along each dimension.
//!
//! Side information: the residuals outside the bin radius (count, then signed varints), then the
//! positions of values kept exactly because `p * 2eb` missed the bound (count, then varint gaps;
//! the values themselves are the chunk's exact values).

use super::Coded;
use crate::bytes::{put_signed_varint, put_varint, ByteReader};
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::strides;
use crate::quantizer::Quantizer;

/// Integers beyond this are not prequantized (their products would lose precision in f64).
const PREQUANT_LIMIT: f64 = (1u64 << 50) as f64;

/// Replaces `v` by its Lorenzo residual along every axis (zero outside the chunk).
fn difference(v: &mut [i64], shape: &[usize]) {
    for (axis, &st) in strides(shape).iter().enumerate() {
        let n = shape[axis];
        for outer in v.chunks_mut(n * st) {
            for j in (1..n).rev() {
                let (prev, cur) = outer[(j - 1) * st..(j + 1) * st].split_at_mut(st);
                for (c, p) in cur.iter_mut().zip(prev.iter()) {
                    *c = c.wrapping_sub(*p);
                }
            }
        }
    }
}

/// Inverse of `difference`: a prefix sum along every axis.
fn integrate(v: &mut [i64], shape: &[usize]) {
    for (axis, &st) in strides(shape).iter().enumerate() {
        let n = shape[axis];
        for outer in v.chunks_mut(n * st) {
            for j in 1..n {
                let (prev, cur) = outer[(j - 1) * st..(j + 1) * st].split_at_mut(st);
                for (c, p) in cur.iter_mut().zip(prev.iter()) {
                    *c = c.wrapping_add(*p);
                }
            }
        }
    }
}

#[inline(always)]
fn rebuild<T: Element>(p: i64, two_eb: f64) -> T {
    T::from_f64(p as f64 * two_eb)
}

pub fn encode<T: Element>(data: &[T], shape: &[usize], q: &Quantizer) -> Coded<T> {
    let eb = q.eb();
    let two_eb = 2.0 * eb;
    let inv = 0.5 / eb;
    let mut exact = Vec::new();
    let mut side = Vec::new();
    let mut overlay = Vec::new();
    let mut last = 0usize;
    let mut pq: Vec<i64> = data
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let t = x.to_f64() * inv;
            let p = if t.abs() < PREQUANT_LIMIT { if t >= 0.0 { (t + 0.5) as i64 } else { (t - 0.5) as i64 } } else { 0 };
            if !((rebuild::<T>(p, two_eb).to_f64() - x.to_f64()).abs() <= eb) {
                put_varint(&mut overlay, (i - last) as u64);
                last = i;
                exact.push(x);
            }
            p
        })
        .collect();
    difference(&mut pq, shape);
    let radius = (q.alphabet() / 2) as i64;
    let mut outliers = Vec::new();
    let mut n_outliers = 0u64;
    let symbols = pq
        .iter()
        .map(|&d| {
            if -radius < d && d < radius {
                (d + radius) as u16
            } else {
                put_signed_varint(&mut outliers, d);
                n_outliers += 1;
                0
            }
        })
        .collect();
    put_varint(&mut side, n_outliers);
    side.extend_from_slice(&outliers);
    put_varint(&mut side, exact.len() as u64);
    side.extend_from_slice(&overlay);
    Coded { symbols, exact, side }
}

pub fn decode<T: Element>(shape: &[usize], q: &Quantizer, symbols: &[u16], exact: &[T], side: &[u8]) -> Result<Vec<T>> {
    let n = symbols.len();
    let radius = (q.alphabet() / 2) as i64;
    let mut r = ByteReader::new(side);
    let n_outliers = r.bounded_varint(n as u64, "dual-quant outlier count")?;
    let zero_symbols = symbols.iter().filter(|&&s| s == 0).count() as u64;
    if n_outliers != zero_symbols {
        return Err(corrupt!("{zero_symbols} outlier symbols but {n_outliers} outliers stored"));
    }
    let mut v = Vec::with_capacity(n);
    for &s in symbols {
        v.push(if s == 0 { r.signed_varint("dual-quant outlier")? } else { s as i64 - radius });
    }
    integrate(&mut v, shape);
    let two_eb = 2.0 * q.eb();
    let mut out: Vec<T> = v.iter().map(|&p| rebuild(p, two_eb)).collect();
    let n_exact = r.bounded_varint(n as u64, "dual-quant exact count")? as usize;
    if n_exact != exact.len() {
        return Err(corrupt!("{n_exact} exact positions but {} exact values", exact.len()));
    }
    let mut pos = 0u64;
    for (k, &x) in exact.iter().enumerate() {
        let gap = r.varint("dual-quant exact position")?;
        if k > 0 && gap == 0 {
            return Err(corrupt!("dual-quant exact positions are not increasing"));
        }
        pos = pos.checked_add(gap).filter(|&p| p < n as u64).ok_or_else(|| corrupt!("dual-quant exact position out of range"))?;
        out[pos as usize] = x;
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after dual-quant side information", r.remaining()));
    }
    Ok(out)
}
