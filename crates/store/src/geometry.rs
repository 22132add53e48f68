//! Which cells of a level are stored: those in one of its boxes that no box of the next level
//! covers. Writers leave the others out; readers check every chunk they decode against it, so a
//! chunk that went missing, moved, or no longer matches edited box positions or chunk shapes is
//! an error naming it, never NaN or wrong values.

use crate::metadata::SnapshotMeta;
use amrzip_amr::boxes::{for_each_cell, BoxIndex, Coverage};
use amrzip_amr::{IBox, Tiling};
use amrzip_codec::blockset::Block;
use amrzip_codec::for_each_row;
use amrzip_codec::stages::ChunkBox;
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
        let region = tiling.chunk_box(index);
        let mut mask = vec![false; tiling.chunk.iter().product()];
        paint(&mut mask, &region, self.boxes.boxes(), ids, true);
        if let Some(ids) = buckets.covered.get(index) {
            paint(&mut mask, &region, self.coverage.boxes(), ids, false);
        }
        mask.contains(&true).then_some(mask)
    }

    /// Checks decoded `blocks` of chunk `index` against the stored cells: the same unit blocks,
    /// each with the same cells. Returns what differs.
    pub fn check_blocks<T>(&self, tiling: &Tiling, index: &[i64], blocks: &[Block<T>]) -> Result<(), String> {
        let buckets = self.buckets(&tiling.chunk);
        let ids = buckets.boxes.get(index).map_or(&[][..], Vec::as_slice);
        let covers = buckets.covered.get(index).map_or(&[][..], Vec::as_slice);
        let per = tiling.blocks_per_chunk();
        let positions: usize = per.iter().product();
        // The decoded block at each position; positions must rise, as encoders write them.
        let mut at: Vec<Option<&Block<T>>> = vec![None; if ids.is_empty() { 0 } else { positions }];
        let mut previous = None;
        for b in blocks {
            let p = usize::try_from(b.position).ok().filter(|&p| p < at.len() && previous.is_none_or(|q| q < p));
            let Some(p) = p else {
                return Err(format!("holds a unit block at position {}, where the boxes store no cell", b.position));
            };
            at[p] = Some(b);
            previous = Some(p);
        }
        if ids.is_empty() {
            return Ok(());
        }
        // Block by block: one that no box meets stores nothing; one inside a box that no finer
        // box meets stores every cell; only the others are painted cell by cell (a mask of the
        // whole chunk, painted and counted row by row, was 14% of a `speed` read).
        let (boxes, covered) = (self.boxes.boxes(), self.coverage.boxes());
        let mut cells = vec![false; tiling.unit.iter().product()];
        for (position, &decoded) in at.iter().enumerate() {
            let block = tiling.block_box(index, position as u64);
            let meets = |list: &[IBox], ids: &[u32]| ids.iter().any(|&i| list[i as usize].overlaps(&block));
            let (stored, same) = if !meets(boxes, ids) {
                (false, true)
            } else if decoded.is_none_or(|d| d.mask.is_none())
                && ids.iter().any(|&i| boxes[i as usize].contains(&block))
                && !meets(covered, covers)
            {
                (true, true)
            } else {
                cells.fill(false);
                paint(&mut cells, &block, boxes, ids, true);
                paint(&mut cells, &block, covered, covers, false);
                let same = match decoded.and_then(|d| d.mask.as_ref()) {
                    None => !cells.contains(&false),
                    Some(m) => m.get(..cells.len()) == Some(&cells[..]),
                };
                (cells.contains(&true), same)
            };
            let error = match (stored, decoded) {
                (true, None) => format!("has no unit block at position {position}, where the boxes store cells"),
                (false, Some(_)) => format!("holds a unit block at position {position}, where the boxes store no cell"),
                (true, Some(_)) if !same => format!("unit block at position {position} does not hold the cells the boxes store there"),
                _ => continue,
            };
            return Err(error);
        }
        Ok(())
    }
}

/// Sets to `value` the cells of `block` (C order) that boxes `ids` of `list` hold.
fn paint(cells: &mut [bool], block: &IBox, list: &[IBox], ids: &[u32], value: bool) {
    let shape = block.shape();
    // Boxes that miss the block are passed over before `intersect` allocates.
    for &i in ids.iter().filter(|&&i| list[i as usize].overlaps(block)) {
        if let Some(part) = list[i as usize].intersect(block) {
            let origin = part.lo.iter().zip(&block.lo).map(|(&p, &r)| (p - r) as usize).collect();
            for_each_row(&shape, &ChunkBox { origin, shape: part.shape() }, |o, _, n| cells[o..o + n].fill(value));
        }
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
        // Block (0, 1) lies inside the box, clear of the cover: whole. A mask naming every cell
        // says the same; one missing a cell does not.
        let mut spelled = blocks.clone();
        spelled[1].mask = Some(vec![true; 16]);
        assert_eq!(geometry.check_blocks(&tiling, &[0, 0], &spelled), Ok(()));
        spelled[1].mask.as_mut().unwrap()[5] = false;
        assert!(geometry.check_blocks(&tiling, &[0, 0], &spelled).unwrap_err().contains("position 1"));
        let mut partial = blocks.clone();
        partial[1].mask = None;
        partial[0].mask = None; // block (0, 0) meets the cover
        assert!(geometry.check_blocks(&tiling, &[0, 0], &partial).unwrap_err().contains("position 0 does not hold"));
    }

    #[test]
    fn a_block_split_between_boxes_is_whole_when_they_fill_it() {
        // Two boxes meet inside every block of the 8x8 chunk: rows 0..1 and rows 2..7.
        let split = |lo: i64| LevelGeometry {
            boxes: BoxIndex::new(vec![IBox::from_slices(&[0, 0], &[1, 7]), IBox::from_slices(&[lo, 0], &[7, 7])]),
            coverage: Coverage::new(&[], &[2, 2], &[false, false]),
            origin: vec![0, 0],
            buckets: Mutex::new(HashMap::new()),
        };
        let tiling = Tiling::new(vec![0, 0], vec![4, 4], vec![8, 8]).unwrap();
        let whole: Vec<Block<f64>> = (0..4).map(|p| Block { position: p, values: vec![0.0; 16], mask: None }).collect();
        assert_eq!(split(2).check_blocks(&tiling, &[0, 0], &whole), Ok(()));
        // With row 2 in no box, blocks (0, 0) and (0, 1) lack a row.
        let err = split(3).check_blocks(&tiling, &[0, 0], &whole).unwrap_err();
        assert!(err.contains("position 0 does not hold"), "{err}");
    }
}
