//! Which cells of a level are stored: those in one of its boxes that no box of the next level
//! covers. Writers leave the others out; readers check every chunk they decode against it, so a
//! chunk that went missing, moved, or no longer matches edited box positions or chunk shapes is
//! an error naming it, never NaN or wrong values.

use crate::metadata::SnapshotMeta;
use amrzip_amr::boxes::{for_each_cell, BoxIndex, Coverage};
use amrzip_amr::{IBox, Tiling};
use amrzip_codec::blockset::Block;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Box numbers by the chunk they touch, for one chunk shape.
struct Buckets {
    boxes: HashMap<Vec<i64>, Vec<u32>>,
    covered: HashMap<Vec<i64>, Vec<u32>>,
}

pub struct LevelGeometry {
    /// The level's boxes.
    pub boxes: BoxIndex,
    /// The cells the next level's boxes cover, in this level's index space.
    pub coverage: Coverage,
    origin: Vec<i64>,
    buckets: Mutex<HashMap<Vec<usize>, Arc<Buckets>>>,
}

fn bucket(list: &[IBox], origin: &[i64], chunk: &[usize]) -> HashMap<Vec<i64>, Vec<u32>> {
    let mut map: HashMap<Vec<i64>, Vec<u32>> = HashMap::new();
    for (i, b) in list.iter().enumerate() {
        let span = IBox::new(
            (0..b.ndim()).map(|d| (b.lo[d] - origin[d]).div_euclid(chunk[d] as i64)).collect(),
            (0..b.ndim()).map(|d| (b.hi[d] - origin[d]).div_euclid(chunk[d] as i64)).collect(),
        );
        for_each_cell(&span, |c| map.entry(c.to_vec()).or_default().push(i as u32));
    }
    map
}

impl LevelGeometry {
    pub fn of(meta: &SnapshotMeta, level: usize) -> LevelGeometry {
        let lev = &meta.levels[level];
        let finer = meta.levels.get(level + 1).map_or(&[][..], |f| &f.boxes[..]);
        let coverage = Coverage::new(finer, &lev.ref_ratio, &meta.node);
        LevelGeometry {
            boxes: BoxIndex::new(lev.boxes.clone()),
            coverage,
            origin: lev.domain.lo.clone(),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn buckets(&self, chunk: &[usize]) -> Arc<Buckets> {
        let mut all = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        all.entry(chunk.to_vec())
            .or_insert_with(|| {
                Arc::new(Buckets {
                    boxes: bucket(self.boxes.boxes(), &self.origin, chunk),
                    covered: bucket(self.coverage.boxes(), &self.origin, chunk),
                })
            })
            .clone()
    }

    /// The stored cells of chunk `index` (C order over the chunk's extent), or None where it
    /// stores none.
    pub fn chunk_mask(&self, tiling: &Tiling, index: &[i64]) -> Option<Vec<bool>> {
        let buckets = self.buckets(&tiling.chunk);
        let ids = buckets.boxes.get(index)?;
        let lo: Vec<i64> = (0..index.len()).map(|d| tiling.origin[d] + index[d] * tiling.chunk[d] as i64).collect();
        let hi: Vec<i64> = lo.iter().zip(&tiling.chunk).map(|(&l, &c)| l + c as i64 - 1).collect();
        let region = IBox::new(lo, hi);
        let mut mask = vec![false; tiling.chunk.iter().product()];
        let mut paint = |list: &[IBox], ids: &[u32], value: bool| {
            for &i in ids {
                if let Some(part) = list[i as usize].intersect(&region) {
                    let nd = part.ndim();
                    let row = (part.hi[nd - 1] - part.lo[nd - 1] + 1) as usize;
                    let mut starts = part.clone();
                    starts.hi[nd - 1] = part.lo[nd - 1];
                    for_each_cell(&starts, |cell| {
                        let o = region.offset_c(cell);
                        mask[o..o + row].iter_mut().for_each(|m| *m = value);
                    });
                }
            }
        };
        paint(self.boxes.boxes(), ids, true);
        if let Some(ids) = buckets.covered.get(index) {
            paint(self.coverage.boxes(), ids, false);
        }
        mask.contains(&true).then_some(mask)
    }

    /// Checks decoded `blocks` of chunk `index` against the stored cells: the same unit blocks,
    /// each with the same cells. Returns what differs.
    pub fn check_blocks<T>(&self, tiling: &Tiling, index: &[i64], blocks: &[Block<T>]) -> Result<(), String> {
        let mask = self.chunk_mask(tiling, index).unwrap_or_default();
        let per = tiling.blocks_per_chunk();
        let mut blocks = blocks.iter().peekable();
        let mut found = None;
        let mut position = 0u64;
        if !mask.is_empty() {
            let grid = IBox::new(vec![0; per.len()], per.iter().map(|&n| n as i64 - 1).collect());
            let chunk_box = IBox::new(vec![0; per.len()], tiling.chunk.iter().map(|&c| c as i64 - 1).collect());
            let nd = per.len();
            let row = tiling.unit[nd - 1];
            let (mut lo, mut hi) = (vec![0i64; nd], vec![0i64; nd]);
            for_each_cell(&grid, |b| {
                if found.is_some() {
                    return;
                }
                // The block's rows along the last dimension, in C order: each a run of the mask,
                // compared with the decoded block of this position, if any, as they go.
                for d in 0..nd {
                    lo[d] = b[d] * tiling.unit[d] as i64;
                    hi[d] = if d + 1 == nd { lo[d] } else { lo[d] + tiling.unit[d] as i64 - 1 };
                }
                let decoded = blocks.next_if(|d| d.position == position);
                let (mut stored, mut same, mut at) = (false, true, 0);
                for_each_cell(&IBox::new(lo.clone(), hi.clone()), |c| {
                    let o = chunk_box.offset_c(c);
                    let cells = &mask[o..o + row];
                    // One counting pass (it vectorizes; `contains` and `all` went byte by byte).
                    let count: usize = cells.iter().map(|&c| c as usize).sum();
                    stored |= count > 0;
                    same &= match decoded.and_then(|d| d.mask.as_ref()) {
                        None => count == row,
                        Some(m) => m.get(at..at + row) == Some(cells),
                    };
                    at += row;
                });
                found = match (stored, decoded) {
                    (true, None) => Some(format!("has no unit block at position {position}, where the boxes store cells")),
                    (false, Some(_)) => Some(format!("holds a unit block at position {position}, where the boxes store no cell")),
                    (true, Some(_)) if !same => {
                        Some(format!("unit block at position {position} does not hold the cells the boxes store there"))
                    }
                    _ => None,
                };
                position += 1;
            });
        }
        if let Some(e) = found {
            return Err(e);
        }
        if let Some(b) = blocks.next() {
            return Err(format!("holds a unit block at position {}, where the boxes store no cell", b.position));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_checked_cell_by_cell_against_the_stored_cells() {
        // One 8x8 chunk of 4x4 unit blocks; the box stores rows 0..5, the finer level covers 0..1 x 0..1.
        let geometry = LevelGeometry {
            boxes: BoxIndex::new(vec![IBox::from_slices(&[0, 0], &[5, 7])]),
            coverage: Coverage::new(&[IBox::from_slices(&[0, 0], &[3, 3])], &[2, 2], &[false, false]),
            origin: vec![0, 0],
            buckets: Mutex::new(HashMap::new()),
        };
        let tiling = Tiling::new(vec![0, 0], vec![4, 4], vec![8, 8]).unwrap();
        let stored = |i: i64, j: i64| i <= 5 && !(i <= 1 && j <= 1);
        // The expected blocks, cell by cell in C order within each block.
        let mut blocks: Vec<Block<f64>> = Vec::new();
        for (position, (bi, bj)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
            let mask: Vec<bool> = (0..16).map(|c| stored(bi * 4 + c / 4, bj * 4 + c % 4)).collect();
            let full = mask.iter().all(|&m| m);
            blocks.push(Block { position: position as u64, values: vec![0.0; 16], mask: (!full).then_some(mask) });
        }
        assert_eq!(geometry.check_blocks(&tiling, &[0, 0], &blocks), Ok(()));
        let mut moved = blocks.clone();
        moved[2].mask.as_mut().unwrap()[9] = true; // cell (6, 1): outside the box
        assert!(geometry.check_blocks(&tiling, &[0, 0], &moved).unwrap_err().contains("position 2"));
        assert!(geometry.check_blocks(&tiling, &[0, 0], &blocks[..3]).unwrap_err().contains("no unit block at position 3"));
        let mut extra = blocks.clone();
        extra.push(Block { position: 9, values: vec![0.0; 16], mask: None });
        assert!(geometry.check_blocks(&tiling, &[0, 0], &extra).unwrap_err().contains("position 9"));
    }
}
