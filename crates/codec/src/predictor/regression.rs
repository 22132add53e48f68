//! Blockwise prediction (SZ2 style): the chunk is cut into blocks of edge `block`; each block is
//! predicted either by Lorenzo (error feedback across block seams) or by a linear model
//! `c0 + sum_d c_d * i_d` fitted to the block's original values, whichever the encoder's
//! estimate favours. Coefficients are quantized on a grid fine enough that their rounding moves
//! a prediction by at most eb/2, and coded as differences from the previous regression block.
//!
//! Side information: `block` (u8), one selection bit per block (LSB first, 1 = regression),
//! then `d + 1` signed varints per regression block.

use super::lorenzo::{walk_box, with_stencil, Padded, Stencil};
use super::{Coded, DecodeVisitor, EncodeVisitor, Visit};
use crate::bytes::{put_signed_varint, ByteReader};
use crate::element::Element;
use crate::error::{corrupt, Result};
use crate::grid::for_each_index;
use crate::quantizer::Quantizer;

/// Regression block edge per dimensionality when nothing else is known (SZ2/SZ3 practice).
pub fn default_block(ndim: usize) -> usize {
    match ndim {
        1 => 128,
        2 => 16,
        3 => 6,
        _ => 4,
    }
}

/// Largest quantized coefficient we accept; beyond it the block falls back to Lorenzo.
const COEFF_LIMIT: f64 = (1u64 << 50) as f64;

/// Typical extra error of Lorenzo from predicting with reconstructed (noisy) values, in units
/// of eb, by dimensionality: grows with the number of stencil points.
const LORENZO_NOISE: [f64; 4] = [0.5, 0.81, 1.22, 1.6];

#[derive(Clone, Copy)]
struct Grids {
    slope: f64,
    intercept: f64,
}

impl Grids {
    fn new(eb: f64, ndim: usize, block: usize) -> Grids {
        Grids { slope: eb / (2.0 * (ndim * block) as f64), intercept: eb / 2.0 }
    }
    fn step(&self, c: usize) -> f64 {
        if c == 0 {
            self.intercept
        } else {
            self.slope
        }
    }
}

/// Block boxes (origin, extent) of a chunk in C order of the block grid.
fn blocks(shape: &[usize], block: usize) -> Vec<(Vec<usize>, Vec<usize>)> {
    let counts: Vec<usize> = shape.iter().map(|&n| n.div_ceil(block)).collect();
    let mut out = Vec::new();
    for_each_index(&counts, |pos| {
        let origin: Vec<usize> = pos.iter().map(|&p| p * block).collect();
        let extent = origin.iter().zip(shape).map(|(&o, &n)| block.min(n - o)).collect();
        out.push((origin, extent));
    });
    out
}

/// Calls `f(start, row_pred)` per row of the block: the row's first padded index and the linear
/// model at the row's first point (`coeffs[0]` = intercept at the block origin).
fn model_rows<T: Element>(
    p: &Padded<T>,
    origin: &[usize],
    extent: &[usize],
    coeffs: &[f64],
    rows: &mut Vec<usize>,
    mut f: impl FnMut(usize, f64),
) {
    let nd = extent.len();
    p.row_starts(origin, extent, rows);
    let mut r = 0;
    for_each_index(&extent[..nd - 1], |pos| {
        f(rows[r], coeffs[0] + (0..nd - 1).map(|d| coeffs[d + 1] * pos[d] as f64).sum::<f64>());
        r += 1;
    });
}

/// Visits the block with the linear model's predictions.
fn walk_regression<T: Element, V: Visit<T>>(
    p: &mut Padded<T>,
    origin: &[usize],
    extent: &[usize],
    coeffs: &[f64],
    rows: &mut Vec<usize>,
    v: &mut V,
) {
    let (n, slope) = (extent[extent.len() - 1], coeffs[extent.len()]);
    let mut starts = Vec::new();
    model_rows(p, origin, extent, coeffs, rows, |start, row_pred| starts.push((start, row_pred)));
    for (start, row_pred) in starts {
        for k in 0..n {
            p.buf[start + k] = v.visit(p.buf[start + k], row_pred + slope * k as f64);
        }
    }
}

/// Shared walk: `model(block_index, padded, origin, extent)` returns the dequantized
/// coefficients when the block uses regression.
fn walk<T: Element, V: Visit<T>>(
    p: &mut Padded<T>,
    block: usize,
    mut model: impl FnMut(usize, &Padded<T>, &[usize], &[usize]) -> Option<Vec<f64>>,
    v: &mut V,
) {
    let strides = p.strides.clone();
    let shape = p.shape.clone();
    let mut rows = Vec::new();
    with_stencil!(&strides, st => {
        for (b, (origin, extent)) in blocks(&shape, block).iter().enumerate() {
            match model(b, p, origin, extent) {
                Some(coeffs) => walk_regression(p, origin, extent, &coeffs, &mut rows, v),
                None => walk_box(p, &st, origin, extent, &mut rows, v),
            }
        }
    })
}

/// Least-squares fit of a linear model over the block's current (original) values.
fn fit<T: Element>(p: &Padded<T>, origin: &[usize], extent: &[usize], rows: &mut Vec<usize>) -> Vec<f64> {
    let nd = extent.len();
    let n = extent[nd - 1];
    let count: usize = extent.iter().product();
    let mut sum = 0.0;
    let mut moment = vec![0.0; nd];
    p.row_starts(origin, extent, rows);
    let mut r = 0;
    for_each_index(&extent[..nd - 1], |pos| {
        let row = &p.buf[rows[r]..rows[r] + n];
        r += 1;
        let mut row_sum = 0.0;
        let mut row_moment = 0.0;
        for (k, x) in row.iter().enumerate() {
            let x = x.to_f64();
            row_sum += x;
            row_moment += k as f64 * x;
        }
        sum += row_sum;
        for d in 0..nd - 1 {
            moment[d] += pos[d] as f64 * row_sum;
        }
        moment[nd - 1] += row_moment;
    });
    let count_f = count as f64;
    let mean = sum / count_f;
    let mut coeffs = vec![0.0; nd + 1];
    coeffs[0] = mean;
    for d in 0..nd {
        let b = extent[d] as f64;
        if extent[d] > 1 {
            let centre = (b - 1.0) / 2.0;
            coeffs[d + 1] = (moment[d] - centre * sum) * 12.0 / (count_f * (b * b - 1.0));
            coeffs[0] -= coeffs[d + 1] * centre;
        }
    }
    coeffs
}

/// Sum of absolute prediction errors of both candidates over the block, from current values.
fn estimate<T: Element, const K: usize>(
    p: &Padded<T>,
    st: &Stencil<K>,
    origin: &[usize],
    extent: &[usize],
    coeffs: &[f64],
    rows: &mut Vec<usize>,
) -> (f64, f64) {
    let (n, slope) = (extent[extent.len() - 1], coeffs[extent.len()]);
    let (mut lorenzo, mut regression) = (0.0, 0.0);
    model_rows(p, origin, extent, coeffs, rows, |start, row_pred| {
        for k in 0..n {
            let x = p.buf[start + k].to_f64();
            lorenzo += (st.predict(&p.buf, start + k) - x).abs();
            regression += (row_pred + slope * k as f64 - x).abs();
        }
    });
    (lorenzo, regression)
}

pub fn encode<T: Element>(data: &[T], shape: &[usize], q: &Quantizer, block: usize) -> Coded<T> {
    let nd = shape.len();
    let block = block.clamp(2, 255);
    let grids = Grids::new(q.eb(), nd, block);
    let n_blocks = blocks(shape, block).len();
    let mut selection = vec![0u8; n_blocks.div_ceil(8)];
    let mut coeff_bytes = Vec::new();
    let mut previous = vec![0i64; nd + 1];
    let mut p = Padded::from_dense(data, shape);
    let mut symbols = vec![0u16; data.len()];
    let mut v = EncodeVisitor::new(q, &mut symbols);
    let mut rows = Vec::new();
    let stencil_strides = p.strides.clone();
    let noise = LORENZO_NOISE[nd - 1] * q.eb();
    let model = |b: usize, p: &Padded<T>, origin: &[usize], extent: &[usize]| -> Option<Vec<f64>> {
        if q.eb() == 0.0 {
            return None;
        }
        let coeffs = fit(p, origin, extent, &mut rows);
        let quantized: Vec<f64> = coeffs.iter().enumerate().map(|(c, &x)| (x / grids.step(c)).round()).collect();
        // Negated so that NaN coefficients (from infinite sums) are refused too.
        if quantized.iter().any(|x| !(x.abs() < COEFF_LIMIT)) {
            return None;
        }
        let dequantized: Vec<f64> = quantized.iter().enumerate().map(|(c, &x)| x * grids.step(c)).collect();
        let (lorenzo, regression) = with_stencil!(&stencil_strides, st => estimate(p, &st, origin, extent, &dequantized, &mut rows));
        let count: usize = extent.iter().product();
        if regression >= lorenzo + noise * count as f64 {
            return None;
        }
        selection[b / 8] |= 1 << (b % 8);
        for (prev, &x) in previous.iter_mut().zip(&quantized) {
            put_signed_varint(&mut coeff_bytes, x as i64 - *prev);
            *prev = x as i64;
        }
        Some(dequantized)
    };
    walk(&mut p, block, model, &mut v);
    let mut side = vec![block as u8];
    side.extend_from_slice(&selection);
    side.extend_from_slice(&coeff_bytes);
    let (exact, absent) = (v.exact, v.absent);
    Coded { symbols, exact, side, absent }
}

/// The block edge recorded at the front of the side information.
pub fn block_of(side: &[u8]) -> Result<usize> {
    let block = *side.first().ok_or_else(|| corrupt!("regression side information is empty"))? as usize;
    if block < 2 {
        return Err(corrupt!("regression block edge {block} is below 2"));
    }
    Ok(block)
}

pub fn decode<T: Element>(shape: &[usize], q: &Quantizer, symbols: &[u16], exact: &[T], side: &[u8]) -> Result<Vec<T>> {
    let nd = shape.len();
    let block = block_of(side)?;
    let mut r = ByteReader::new(&side[1..]);
    let grids = Grids::new(q.eb(), nd, block);
    let n_blocks = blocks(shape, block).len();
    let selection = r.take(n_blocks.div_ceil(8), "regression block selection")?;
    if !n_blocks.is_multiple_of(8) && selection[selection.len() - 1] >> (n_blocks % 8) != 0 {
        return Err(corrupt!("regression selection has bits set past the last block"));
    }
    let mut models = Vec::with_capacity(n_blocks);
    let mut previous = vec![0i64; nd + 1];
    for b in 0..n_blocks {
        if selection[b / 8] >> (b % 8) & 1 == 0 {
            models.push(None);
            continue;
        }
        let mut coeffs = Vec::with_capacity(nd + 1);
        for (c, prev) in previous.iter_mut().enumerate() {
            *prev =
                prev.checked_add(r.signed_varint("regression coefficient")?).ok_or_else(|| corrupt!("regression coefficient overflows"))?;
            coeffs.push(*prev as f64 * grids.step(c));
        }
        models.push(Some(coeffs));
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after regression coefficients", r.remaining()));
    }
    let mut p = Padded::zeros(shape);
    let mut v = DecodeVisitor::new(q, symbols, exact)?;
    walk(&mut p, block, |b, _, _, _| models[b].take(), &mut v);
    Ok(p.to_dense())
}
