//! Unit blocks (AMRIC): a level's index space is cut by a lattice of unit blocks anchored at the
//! level domain's low corner; the store's chunks are whole numbers of unit blocks. A block
//! gathers the cells of every box that touches it; cells no box stores (outside the boxes, or
//! covered by the next level) are left out through the block's mask, and blocks with no stored
//! cell do not exist.

use crate::IBox;
use amrzip_codec::blockset::{Block, BlockInfo};
use amrzip_codec::{for_each_index, strides, Element};
use std::collections::BTreeMap;

/// Memory order of a box's array indexed `[i, j, k]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Last index fastest (numpy's default).
    C,
    /// First index (x) fastest, as AMReX and Chombo store boxes.
    Fortran,
}

/// One box's data: inclusive cell bounds, its values, and which cells to store (C order over
/// the box; `None`: all of them). The values may cover the box grown by `ghost` cells per
/// dimension (empty: none), as simulation codes hold them; ghost cells are never stored.
pub struct BoxView<'a, T> {
    pub lo: Vec<i64>,
    pub hi: Vec<i64>,
    pub data: &'a [T],
    pub layout: Layout,
    pub stored: Option<&'a [bool]>,
    pub ghost: Vec<usize>,
}

impl<T> BoxView<'_, T> {
    pub fn shape(&self) -> Vec<usize> {
        self.lo.iter().zip(&self.hi).map(|(&l, &h)| (h - l + 1) as usize).collect()
    }

    /// Corner and shape of the array `data` spans: the box grown by its ghost cells.
    fn data_extent(&self) -> (Vec<i64>, Vec<usize>) {
        let g = |d: usize| self.ghost.get(d).copied().unwrap_or(0);
        (
            (0..self.lo.len()).map(|d| self.lo[d] - g(d) as i64).collect(),
            self.shape().iter().enumerate().map(|(d, &n)| n + 2 * g(d)).collect(),
        )
    }

    fn check(&self, ndim: usize) -> Result<(), String> {
        if self.lo.len() != ndim || self.hi.len() != ndim || self.lo.iter().zip(&self.hi).any(|(l, h)| h < l) {
            return Err(format!("box {:?}..{:?} is not a non-empty {ndim}-dimensional box", self.lo, self.hi));
        }
        if !self.ghost.is_empty() && self.ghost.len() != ndim {
            return Err(format!("box {:?}..{:?}: ghost widths {:?} are not {ndim}-dimensional", self.lo, self.hi, self.ghost));
        }
        let n = self.shape().iter().try_fold(1usize, |a, &e| a.checked_mul(e));
        let grown = self.data_extent().1.iter().try_fold(1usize, |a, &e| a.checked_mul(e));
        let (Some(n), Some(grown)) = (n, grown) else {
            return Err(format!("box {:?}..{:?} is too large", self.lo, self.hi));
        };
        if self.data.len() != grown || self.stored.is_some_and(|s| s.len() != n) {
            return Err(format!(
                "box {:?}..{:?} with ghost widths {:?} spans {grown} cells but has {} values",
                self.lo,
                self.hi,
                self.ghost,
                self.data.len()
            ));
        }
        Ok(())
    }
}

/// The lattice: `origin` (the level domain's low corner), the unit block shape and the chunk
/// shape, both in cells, the chunk a whole number of unit blocks per dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct Tiling {
    pub origin: Vec<i64>,
    pub unit: Vec<usize>,
    pub chunk: Vec<usize>,
}

impl Tiling {
    pub fn new(origin: Vec<i64>, unit: Vec<usize>, chunk: Vec<usize>) -> Result<Tiling, String> {
        let nd = origin.len();
        if !(1..=MAX_DIM).contains(&nd) || unit.len() != nd || chunk.len() != nd {
            return Err(format!("origin, unit and chunk must all have 1 to 4 dimensions, got {origin:?}, {unit:?}, {chunk:?}"));
        }
        if unit.contains(&0) || chunk.iter().zip(&unit).any(|(&c, &u)| c == 0 || c % u != 0) {
            return Err(format!("chunk shape {chunk:?} must be a nonzero multiple of the unit block {unit:?}"));
        }
        Ok(Tiling { origin, unit, chunk })
    }

    pub fn ndim(&self) -> usize {
        self.origin.len()
    }

    /// Unit blocks per chunk along each dimension.
    pub fn blocks_per_chunk(&self) -> Vec<usize> {
        self.chunk.iter().zip(&self.unit).map(|(c, u)| c / u).collect()
    }

    /// Number of block positions in a chunk.
    pub fn block_count(&self) -> u64 {
        self.blocks_per_chunk().iter().map(|&n| n as u64).product()
    }

    /// The cells of chunk `chunk`.
    pub fn chunk_box(&self, chunk: &[i64]) -> IBox {
        let lo: Vec<i64> = (0..chunk.len()).map(|d| self.origin[d] + chunk[d] * self.chunk[d] as i64).collect();
        let hi = lo.iter().zip(&self.chunk).map(|(&l, &c)| l + c as i64 - 1).collect();
        IBox::new(lo, hi)
    }

    /// The cells of the unit block at `position` in chunk `chunk`.
    pub fn block_box(&self, chunk: &[i64], position: u64) -> IBox {
        let lo = self.block_lo(&self.block_at(chunk, position));
        let hi = lo.iter().zip(&self.unit).map(|(&l, &u)| l + u as i64 - 1).collect();
        IBox::new(lo, hi)
    }

    /// Lattice index of the unit block holding `cell` along dimension `d`.
    fn block_of(&self, d: usize, cell: i64) -> i64 {
        (cell - self.origin[d]).div_euclid(self.unit[d] as i64)
    }

    /// Chunk index and position inside it of the unit block at lattice index `block`.
    pub fn chunk_position(&self, block: &[i64]) -> (Vec<i64>, u64) {
        let per = self.blocks_per_chunk();
        let mut position = 0u64;
        let mut chunk = Vec::with_capacity(block.len());
        for (d, &b) in block.iter().enumerate() {
            chunk.push(b.div_euclid(per[d] as i64));
            position = position * per[d] as u64 + b.rem_euclid(per[d] as i64) as u64;
        }
        (chunk, position)
    }

    /// Lattice index of the block at `position` in `chunk`.
    pub fn block_at(&self, chunk: &[i64], mut position: u64) -> Vec<i64> {
        let per = self.blocks_per_chunk();
        let mut block = vec![0i64; chunk.len()];
        for d in (0..chunk.len()).rev() {
            block[d] = chunk[d] * per[d] as i64 + (position % per[d] as u64) as i64;
            position /= per[d] as u64;
        }
        block
    }

    /// Lowest cell of the block at lattice index `block`.
    fn block_lo(&self, block: &[i64]) -> Vec<i64> {
        block.iter().enumerate().map(|(d, &b)| self.block_start(d, b)).collect()
    }

    /// Lowest cell along dimension `d` of the blocks at lattice index `b` along it.
    fn block_start(&self, d: usize, b: i64) -> i64 {
        self.origin[d] + b * self.unit[d] as i64
    }
}

/// Calls `f(cell)` for every cell of the box `lo..=hi` (inclusive), in C order.
pub(crate) fn for_each_cell(lo: &[i64], hi: &[i64], mut f: impl FnMut(&[i64])) {
    let Some(extent) = lo.iter().zip(hi).map(|(&l, &h)| usize::try_from(h - l + 1).ok()).collect::<Option<Vec<usize>>>() else {
        return;
    };
    let mut cell = lo.to_vec();
    for_each_index(&extent, |pos| {
        for ((c, &l), &p) in cell.iter_mut().zip(lo).zip(pos) {
            *c = l + p as i64;
        }
        f(&cell)
    });
}

/// Offset of `cell` in an array over `lo..=hi` (shape `shape`) in `layout`.
pub(crate) fn offset(cell: &[i64], lo: &[i64], shape: &[usize], layout: Layout) -> usize {
    let mut off = 0usize;
    match layout {
        Layout::C => {
            for d in 0..cell.len() {
                off = off * shape[d] + (cell[d] - lo[d]) as usize;
            }
        }
        Layout::Fortran => {
            for d in (0..cell.len()).rev() {
                off = off * shape[d] + (cell[d] - lo[d]) as usize;
            }
        }
    }
    off
}

/// A level's boxes by the chunks they touch, to gather the unit blocks of one chunk at a time:
/// a whole level's blocks, absent cells included, take more memory than its values.
pub struct ChunkPlan<'p, 'a, T> {
    boxes: &'p [BoxView<'a, T>],
    tiling: &'p Tiling,
    /// Per chunk touched, in lattice order: the boxes touching it, in box order.
    chunks: Vec<(Vec<i64>, Vec<usize>)>,
}

impl<'p, 'a, T: Element> ChunkPlan<'p, 'a, T> {
    pub fn new(boxes: &'p [BoxView<'a, T>], tiling: &'p Tiling) -> Result<Self, String> {
        let nd = tiling.ndim();
        let per = tiling.blocks_per_chunk();
        let mut touching: BTreeMap<Vec<i64>, Vec<usize>> = BTreeMap::new();
        for (i, b) in boxes.iter().enumerate() {
            b.check(nd)?;
            if b.lo.iter().zip(&tiling.origin).any(|(l, o)| l < o) {
                return Err(format!("box {:?}..{:?} starts below the level's domain corner {:?}", b.lo, b.hi, tiling.origin));
            }
            let first: Vec<i64> = (0..nd).map(|d| tiling.block_of(d, b.lo[d]).div_euclid(per[d] as i64)).collect();
            let last: Vec<i64> = (0..nd).map(|d| tiling.block_of(d, b.hi[d]).div_euclid(per[d] as i64)).collect();
            for_each_cell(&first, &last, |chunk| touching.entry(chunk.to_vec()).or_default().push(i));
        }
        Ok(ChunkPlan { boxes, tiling, chunks: touching.into_iter().collect() })
    }

    /// The chunks some box touches, in lattice order (a chunk may have no stored cell).
    pub fn chunks(&self) -> &[(Vec<i64>, Vec<usize>)] {
        &self.chunks
    }

    /// Calls `f(at, piece)` for each piece of a block some box of chunk `k` holds, box after
    /// box: `at` is the block's position in the chunk, `piece` where the cells lie.
    fn for_each_piece(&self, k: usize, mut f: impl FnMut(usize, &Piece<'a, T>)) {
        let tiling = self.tiling;
        let nd = tiling.ndim();
        let per = tiling.blocks_per_chunk();
        let unit_strides = padded(&strides(&tiling.unit));
        let (chunk, touching) = &self.chunks[k];
        let chunk_first: Vec<i64> = (0..nd).map(|d| chunk[d] * per[d] as i64).collect();
        for b in touching.iter().map(|&i| &self.boxes[i]) {
            let (data_lo, data_shape) = b.data_extent();
            let data_strides = match b.layout {
                Layout::C => padded(&strides(&data_shape)),
                Layout::Fortran => {
                    let mut s = [1usize; MAX_DIM];
                    for d in 1..nd {
                        s[d] = s[d - 1] * data_shape[d - 1];
                    }
                    s
                }
            };
            let stored_strides = padded(&strides(&b.shape()));
            // The dimension along which the data is contiguous: rows run along it.
            let inner = if b.layout == Layout::C { nd - 1 } else { 0 };
            let first: Vec<i64> = (0..nd).map(|d| tiling.block_of(d, b.lo[d]).max(chunk_first[d])).collect();
            let last: Vec<i64> = (0..nd).map(|d| tiling.block_of(d, b.hi[d]).min(chunk_first[d] + per[d] as i64 - 1)).collect();
            for_each_cell(&first, &last, |block| {
                // Per dimension: the block's first cell, the piece's first cell and its extent.
                let (mut blo, mut lo, mut extent) = ([0i64; MAX_DIM], [0i64; MAX_DIM], [1usize; MAX_DIM]);
                for d in 0..nd {
                    blo[d] = tiling.block_start(d, block[d]);
                    lo[d] = blo[d].max(b.lo[d]);
                    extent[d] = ((blo[d] + tiling.unit[d] as i64 - 1).min(b.hi[d]) - lo[d] + 1) as usize;
                }
                let piece = Piece {
                    data: b.data,
                    extent,
                    inner,
                    src: (strided_offset(&lo, &data_lo, &data_strides), data_strides),
                    dst: (strided_offset(&lo, &blo, &unit_strides), unit_strides),
                    stored: b.stored.map(|s| (s, strided_offset(&lo, &b.lo, &stored_strides), stored_strides)),
                };
                f(offset(block, &chunk_first, &per, Layout::C), &piece);
            });
        }
    }

    /// The unit blocks of chunk `k` of `chunks()`, by position; where boxes overlap, the later
    /// box's stored cells win.
    pub fn gather(&self, k: usize) -> Vec<Block<T>> {
        let n_unit: usize = self.tiling.unit.iter().product();
        // Per block position in the chunk: its values and stored cells, made when a box first
        // reaches it.
        let mut blocks: Vec<Option<(Vec<T>, Vec<bool>)>> = vec![None; self.tiling.blocks_per_chunk().iter().product()];
        self.for_each_piece(k, |at, piece| {
            let (values, mask) = blocks[at].get_or_insert_with(|| (vec![T::default(); n_unit], vec![false; n_unit]));
            let (n, step) = (piece.extent[piece.inner], piece.dst.1[piece.inner]);
            piece.rows(|src, dst, stored| {
                let data = &piece.data[src..src + n];
                match &piece.stored {
                    // A C-order box's rows run along the block's rows.
                    None if step == 1 => {
                        values[dst..dst + n].copy_from_slice(data);
                        mask[dst..dst + n].fill(true);
                    }
                    None => {
                        for (r, &v) in data.iter().enumerate() {
                            values[dst + r * step] = v;
                            mask[dst + r * step] = true;
                        }
                    }
                    Some((keep, _, strides)) => {
                        let along = strides[piece.inner];
                        for (r, &v) in data.iter().enumerate() {
                            if keep[stored + r * along] {
                                values[dst + r * step] = v;
                                mask[dst + r * step] = true;
                            }
                        }
                    }
                }
            });
        });
        blocks
            .into_iter()
            .enumerate()
            .filter_map(|(position, block)| {
                let (values, mask) = block?;
                let stored = mask.iter().filter(|&&m| m).count();
                (stored > 0).then(|| Block { position: position as u64, values, mask: (stored < n_unit).then_some(mask) })
            })
            .collect()
    }

    /// The share of the cells of the plan's unit blocks that some box stores (1 when no block
    /// exists): how much of a walk over the blocks codes values rather than absent cells.
    pub fn stored_fraction(&self) -> f64 {
        use rayon::prelude::*;
        let n_unit: usize = self.tiling.unit.iter().product();
        let (stored, blocks) = (0..self.chunks.len())
            .into_par_iter()
            .map(|k| self.block_info(k).iter().fold((0, 0), |(s, b), i| (s + i.stored, b + 1)))
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        if blocks == 0 {
            1.0
        } else {
            stored as f64 / (blocks * n_unit) as f64
        }
    }

    /// What `gather(k)` would give of each block, without copying values.
    pub fn block_info(&self, k: usize) -> Vec<BlockInfo> {
        let n_unit: usize = self.tiling.unit.iter().product();
        let mut masks: Vec<Option<Vec<bool>>> = vec![None; self.tiling.blocks_per_chunk().iter().product()];
        self.for_each_piece(k, |at, piece| {
            let mask = masks[at].get_or_insert_with(|| vec![false; n_unit]);
            let (n, step) = (piece.extent[piece.inner], piece.dst.1[piece.inner]);
            piece.rows(|_, dst, stored| match &piece.stored {
                None if step == 1 => mask[dst..dst + n].fill(true),
                None => (0..n).for_each(|r| mask[dst + r * step] = true),
                Some((keep, _, strides)) => (0..n).for_each(|r| mask[dst + r * step] |= keep[stored + r * strides[piece.inner]]),
            });
        });
        masks
            .into_iter()
            .flatten()
            .map(|mask| mask.iter().filter(|&&m| m).count())
            .filter(|&stored| stored > 0)
            .map(|stored| BlockInfo { fits: true, full: stored == n_unit, stored })
            .collect()
    }
}

/// Dimensions a tiling may have.
const MAX_DIM: usize = 4;

/// Offset of cell `cell` in an array starting at cell `from` with `strides` (over `from`'s
/// dimensions).
fn strided_offset(cell: &[i64; MAX_DIM], from: &[i64], strides: &[usize; MAX_DIM]) -> usize {
    cell.iter().zip(from).zip(strides).map(|((&c, &f), &s)| (c - f) as usize * s).sum()
}

/// `v` (at most `MAX_DIM` long) padded with zeros.
fn padded(v: &[usize]) -> [usize; MAX_DIM] {
    let mut out = [0; MAX_DIM];
    out[..v.len()].copy_from_slice(v);
    out
}

/// The cells a box holds of one block: an `extent` of cells whose `k`th along each dimension
/// lies at offset `o + sum k[d] * strides[d]` of the box's data (`src`), of the block (`dst`)
/// and of the box's stored-cell mask (`stored`, all stored when `None`). Rows run along
/// `inner`, where the data is contiguous. Past the tiling's dimensions extents are 1.
struct Piece<'a, T> {
    data: &'a [T],
    extent: [usize; MAX_DIM],
    inner: usize,
    src: (usize, [usize; MAX_DIM]),
    dst: (usize, [usize; MAX_DIM]),
    stored: Option<(&'a [bool], usize, [usize; MAX_DIM])>,
}

impl<T> Piece<'_, T> {
    /// Calls `f(src, dst, stored)` for each row along `inner`, in C order of the other
    /// dimensions: the offsets of its first cell in the data, the block and the stored-cell
    /// mask (0 when all are stored). Rows are a unit block's edge long, so their offsets are
    /// stepped, not recomputed.
    fn rows(&self, mut f: impl FnMut(usize, usize, usize)) {
        // The three dimensions other than `inner`, each as (extent, [src, dst, stored] steps).
        let mut outer = [(1usize, [0usize; 3]); MAX_DIM - 1];
        let stored = self.stored.as_ref().map(|&(_, o, s)| (o, s));
        for (slot, d) in outer.iter_mut().zip((0..MAX_DIM).filter(|&d| d != self.inner)) {
            *slot = (self.extent[d], [self.src.1[d], self.dst.1[d], stored.map_or(0, |(_, s)| s[d])]);
        }
        let [(na, sa), (nb, sb), (nc, sc)] = outer;
        let mut a0 = [self.src.0, self.dst.0, stored.map_or(0, |(o, _)| o)];
        for _ in 0..na {
            let mut b0 = a0;
            for _ in 0..nb {
                let mut at = b0;
                for _ in 0..nc {
                    f(at[0], at[1], at[2]);
                    (0..3).for_each(|i| at[i] += sc[i]);
                }
                (0..3).for_each(|i| b0[i] += sb[i]);
            }
            (0..3).for_each(|i| a0[i] += sa[i]);
        }
    }
}

/// Copies the first `N` values of `src` to the start of `dst`.
#[inline(always)]
fn copy_row<T: Copy, const N: usize>(src: &[T], dst: &mut [T]) {
    let src: &[T; N] = src[..N].try_into().expect("N values");
    dst[..N].copy_from_slice(src);
}

/// Writes the stored cells of `blocks` (those of `chunk`) that fall in `region_lo..=region_hi`
/// into `out`, a C-order array over the region. Returns how many cells were written.
pub fn scatter<T: Element>(
    blocks: &[Block<T>],
    chunk: &[i64],
    tiling: &Tiling,
    region_lo: &[i64],
    region_hi: &[i64],
    out: &mut [T],
) -> usize {
    let nd = tiling.ndim();
    let region_shape: Vec<usize> = region_lo.iter().zip(region_hi).map(|(&l, &h)| (h - l + 1) as usize).collect();
    let (unit_strides, region_strides) = (padded(&strides(&tiling.unit)), padded(&strides(&region_shape)));
    let mut written = 0;
    for b in blocks {
        let blo = tiling.block_lo(&tiling.block_at(chunk, b.position));
        // The block's cells in the region: their first cell and extent per dimension.
        let (mut lo, mut extent) = ([0i64; MAX_DIM], [1usize; MAX_DIM]);
        for d in 0..nd {
            lo[d] = blo[d].max(region_lo[d]);
            extent[d] = usize::try_from((blo[d] + tiling.unit[d] as i64 - 1).min(region_hi[d]) - lo[d] + 1).unwrap_or(0);
        }
        if extent.contains(&0) {
            continue;
        }
        let piece = Piece {
            data: &b.values,
            extent,
            inner: nd - 1,
            src: (strided_offset(&lo, &blo, &unit_strides), unit_strides),
            dst: (strided_offset(&lo, region_lo, &region_strides), region_strides),
            stored: None,
        };
        // Rows along the last dimension, contiguous in the block and in `out`.
        let row = extent[nd - 1];
        match &b.mask {
            // Rows of 8 (the usual unit edge) copied at a fixed length: a copy of a length
            // known only at run time is a call to memcpy per row.
            None if row == 8 => piece.rows(|src, dst, _| copy_row::<T, 8>(&piece.data[src..], &mut out[dst..])),
            None => piece.rows(|src, dst, _| out[dst..dst + row].copy_from_slice(&piece.data[src..src + row])),
            Some(m) => piece.rows(|src, dst, _| {
                // Branch-free, so that it vectorizes.
                let (values, out) = (&piece.data[src..src + row], &mut out[dst..dst + row]);
                for ((o, &v), &keep) in out.iter_mut().zip(values).zip(&m[src..src + row]) {
                    *o = if keep { v } else { *o };
                    written += keep as usize;
                }
            }),
        }
        if b.mask.is_none() {
            written += extent.iter().product::<usize>();
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_exactly_the_stored_cells() {
        let tiling = Tiling::new(vec![0, 0], vec![4, 4], vec![8, 8]).unwrap();
        // A 6x10 box in Fortran order, its cell (2, 5) not stored, plus a 2x2 box.
        let data: Vec<f64> = (0..60).map(|v| v as f64).collect();
        let mut stored = vec![true; 60];
        stored[12] = false; // cell (2, 5): C-order offset (2 - 1) * 10 + (5 - 3)
        let small = [100.0, 101.0, 102.0, 103.0];
        let boxes = vec![
            BoxView { lo: vec![1, 3], hi: vec![6, 12], data: &data, layout: Layout::Fortran, stored: Some(&stored), ghost: vec![] },
            BoxView { lo: vec![9, 0], hi: vec![10, 1], data: &small, layout: Layout::C, stored: None, ghost: vec![] },
        ];
        let plan = ChunkPlan::new(&boxes, &tiling).unwrap();
        let mut out = vec![f64::NAN; 12 * 14];
        let mut total = 0;
        for (k, (chunk, _)) in plan.chunks().iter().enumerate() {
            let blocks = plan.gather(k);
            assert!(blocks.windows(2).all(|w| w[0].position < w[1].position));
            total += scatter(&blocks, chunk, &tiling, &[0, 0], &[11, 13], &mut out);
        }
        assert_eq!(total, 59 + 4);
        for i in 1..=6 {
            for j in 3..=12 {
                let v = out[i * 14 + j];
                if (i, j) == (2, 5) {
                    assert!(v.is_nan());
                } else {
                    assert_eq!(v, ((i - 1) + 6 * (j - 3)) as f64);
                }
            }
        }
        assert_eq!(out[9 * 14 + 1], 101.0);
        assert_eq!(out[10 * 14], 102.0);
        // Block info agrees with the gathered blocks: 59 + 4 stored cells over 4 + 1 blocks.
        let info: Vec<BlockInfo> = (0..plan.chunks().len()).flat_map(|k| plan.block_info(k)).collect();
        let gathered: Vec<Block<f64>> = (0..plan.chunks().len()).flat_map(|k| plan.gather(k)).collect();
        assert_eq!(
            info.iter().map(|i| (i.stored, i.full)).collect::<Vec<_>>(),
            gathered
                .iter()
                .map(|b| (b.mask.as_ref().map_or(16, |m| m.iter().filter(|&&v| v).count()), b.mask.is_none()))
                .collect::<Vec<_>>()
        );
        assert!((plan.stored_fraction() - 63.0 / (16.0 * info.len() as f64)).abs() < 1e-12);
    }
}
