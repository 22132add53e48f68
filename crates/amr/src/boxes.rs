//! Box algebra on inclusive integer boxes, as AMReX and Chombo index them (x first).
//!
//! Boxes index cells unless `node` flags say otherwise: one flag per dimension, true where the
//! box indexes nodes (cell corners). Intersection does not depend on the index type; coarsening,
//! refinement and coverage do. A level's covered cells (those a box of the next level refines)
//! are not stored; readers rebuild them from the finer level.

/// An inclusive box `lo..=hi`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IBox {
    pub lo: Vec<i64>,
    pub hi: Vec<i64>,
}

impl IBox {
    pub fn new(lo: Vec<i64>, hi: Vec<i64>) -> IBox {
        IBox { lo, hi }
    }

    pub fn ndim(&self) -> usize {
        self.lo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lo.iter().zip(&self.hi).any(|(l, h)| h < l)
    }

    /// Cells per dimension (0 where empty).
    pub fn shape(&self) -> Vec<usize> {
        self.lo.iter().zip(&self.hi).map(|(&l, &h)| usize::try_from(h - l + 1).unwrap_or(0)).collect()
    }

    /// Number of cells, or None if it does not fit a usize.
    pub fn cells(&self) -> Option<usize> {
        self.shape().iter().try_fold(1usize, |acc, &n| acc.checked_mul(n))
    }

    pub fn contains(&self, other: &IBox) -> bool {
        self.lo.iter().zip(&other.lo).all(|(a, b)| a <= b) && self.hi.iter().zip(&other.hi).all(|(a, b)| b <= a)
    }

    pub fn intersect(&self, other: &IBox) -> Option<IBox> {
        let b = IBox {
            lo: self.lo.iter().zip(&other.lo).map(|(&a, &b)| a.max(b)).collect(),
            hi: self.hi.iter().zip(&other.hi).map(|(&a, &b)| a.min(b)).collect(),
        };
        (!b.is_empty()).then_some(b)
    }

    /// The coarse cells holding the box's cells (floor division, also below zero); along node
    /// dimensions the coarse nodes enclosing its nodes (`hi` rounds up).
    pub fn coarsen(&self, ratio: &[i64], node: &[bool]) -> IBox {
        IBox {
            lo: self.lo.iter().zip(ratio).map(|(&l, &r)| l.div_euclid(r)).collect(),
            hi: (0..self.ndim())
                .map(|d| if node[d] { -(-self.hi[d]).div_euclid(ratio[d]) } else { self.hi[d].div_euclid(ratio[d]) })
                .collect(),
        }
    }

    /// The fine cells of the box's cells; along node dimensions the fine nodes from its first
    /// node to its last.
    pub fn refine(&self, ratio: &[i64], node: &[bool]) -> IBox {
        IBox {
            lo: self.lo.iter().zip(ratio).map(|(&l, &r)| l * r).collect(),
            hi: (0..self.ndim()).map(|d| if node[d] { self.hi[d] * ratio[d] } else { (self.hi[d] + 1) * ratio[d] - 1 }).collect(),
        }
    }

    /// The coarse cells (or nodes) that a fine box covers wholly: along node dimensions a coarse
    /// node is covered where a fine node coincides with it (`lo` rounds up).
    pub fn covered_by_fine(&self, ratio: &[i64], node: &[bool]) -> IBox {
        IBox {
            lo: (0..self.ndim())
                .map(|d| if node[d] { -(-self.lo[d]).div_euclid(ratio[d]) } else { self.lo[d].div_euclid(ratio[d]) })
                .collect(),
            hi: self.hi.iter().zip(ratio).map(|(&h, &r)| h.div_euclid(r)).collect(),
        }
    }

    /// `self` minus `other` as disjoint boxes: slabs peeled off dimension by dimension.
    pub fn subtract(&self, other: &IBox) -> Vec<IBox> {
        if self.intersect(other).is_none() {
            return vec![self.clone()];
        }
        let mut out = Vec::new();
        let mut rest = self.clone();
        for d in 0..self.ndim() {
            if rest.lo[d] < other.lo[d] {
                let mut slab = rest.clone();
                slab.hi[d] = other.lo[d] - 1;
                out.push(slab);
                rest.lo[d] = other.lo[d];
            }
            if rest.hi[d] > other.hi[d] {
                let mut slab = rest.clone();
                slab.lo[d] = other.hi[d] + 1;
                out.push(slab);
                rest.hi[d] = other.hi[d];
            }
        }
        out
    }

    /// Offset of `cell` in a C-order array over this box.
    pub fn offset_c(&self, cell: &[i64]) -> usize {
        (0..self.ndim()).fold(0usize, |off, d| off * (self.hi[d] - self.lo[d] + 1) as usize + (cell[d] - self.lo[d]) as usize)
    }
}

/// The parts of `b` that the boxes of the next level (`finer`, in its index space, refined by
/// `ratio`) cover, one per fine box touching it.
pub fn covered_pieces(b: &IBox, finer: &[IBox], ratio: &[i64], node: &[bool]) -> Vec<IBox> {
    finer.iter().filter_map(|f| f.covered_by_fine(ratio, node).intersect(b)).collect()
}

/// Which cells of `b` to store (C order): those no box of the next level covers; None when no
/// cell is covered.
pub fn stored_mask(b: &IBox, finer: &[IBox], ratio: &[i64], node: &[bool]) -> Option<Vec<bool>> {
    let pieces = covered_pieces(b, finer, ratio, node);
    if pieces.is_empty() {
        return None;
    }
    let shape = b.shape();
    let n: usize = shape.iter().product();
    let mut mask = vec![true; n];
    let nd = b.ndim();
    for p in &pieces {
        // Row by row along the last dimension, contiguous in C order.
        let row = (p.hi[nd - 1] - p.lo[nd - 1] + 1) as usize;
        let mut starts = p.clone();
        starts.hi[nd - 1] = p.lo[nd - 1];
        for_each_cell(&starts, |cell| {
            let o = b.offset_c(cell);
            mask[o..o + row].iter_mut().for_each(|m| *m = false);
        });
    }
    Some(mask)
}

/// Checks that level `L + 1` nests in level `L`: every fine box, coarsened, lies in the union
/// of the coarse boxes. Returns the index of the first fine box that does not, with a coarse
/// cell of it that no coarse box holds.
pub fn first_unnested(coarse: &[IBox], finer: &[IBox], ratio: &[i64], node: &[bool]) -> Option<(usize, Vec<i64>)> {
    finer.iter().enumerate().find_map(|(i, f)| {
        // Node boxes end on the node past their last cell: nesting is judged on the cells.
        let cells = IBox { lo: f.lo.clone(), hi: f.hi.iter().zip(node).map(|(&h, &n)| h - n as i64).collect() };
        let cells = if cells.is_empty() { f.clone() } else { cells };
        let target = cells.coarsen(ratio, &vec![false; node.len()]);
        let mut rest = vec![target.clone()];
        for c in coarse {
            // A coarse box apart from the fine box's coarse cells leaves every piece as it is:
            // skipped without building anything (snapshots are validated on every open).
            if (0..target.ndim()).any(|d| c.lo[d] > target.hi[d] || c.hi[d] - (node[d] as i64) < target.lo[d]) {
                continue;
            }
            let c = IBox { lo: c.lo.clone(), hi: c.hi.iter().zip(node).map(|(&h, &n)| h - n as i64).collect() };
            rest = rest.iter().flat_map(|r| r.subtract(&c)).collect();
            if rest.is_empty() {
                return None;
            }
        }
        rest.first().map(|r| (i, r.lo.clone()))
    })
}

/// Calls `f(cell)` for every cell of `b` in C order.
pub fn for_each_cell(b: &IBox, mut f: impl FnMut(&[i64])) {
    if b.is_empty() {
        return;
    }
    let nd = b.ndim();
    let mut cell = b.lo.clone();
    loop {
        f(&cell);
        let mut d = nd;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            if cell[d] < b.hi[d] {
                cell[d] += 1;
                break;
            }
            cell[d] = b.lo[d];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(lo: &[i64], hi: &[i64]) -> IBox {
        IBox::new(lo.to_vec(), hi.to_vec())
    }

    #[test]
    fn coarsen_and_refine_round_trip_below_zero_and_on_nodes() {
        let c = b(&[-3, 4], &[5, 9]);
        assert_eq!(c.coarsen(&[2, 2], &[false, false]), b(&[-2, 2], &[2, 4]));
        assert_eq!(b(&[-2, 2], &[2, 4]).refine(&[2, 2], &[false, false]), b(&[-4, 4], &[5, 9]));
        assert_eq!(c.coarsen(&[2, 2], &[true, false]), b(&[-2, 2], &[3, 4]));
        assert_eq!(b(&[0, 0], &[2, 4]).refine(&[2, 2], &[true, false]), b(&[0, 0], &[4, 9]));
    }

    #[test]
    fn stored_mask_leaves_out_exactly_the_covered_cells() {
        let coarse = b(&[0, 0], &[7, 7]);
        let fine = vec![b(&[4, 4], &[9, 7]), b(&[20, 20], &[23, 23])];
        let mask = stored_mask(&coarse, &fine, &[2, 2], &[false, false]).unwrap();
        for i in 0..8i64 {
            for j in 0..8i64 {
                let covered = (2..=4).contains(&i) && (2..=3).contains(&j);
                assert_eq!(mask[(i * 8 + j) as usize], !covered, "({i}, {j})");
            }
        }
        assert!(stored_mask(&coarse, &[b(&[40, 40], &[41, 41])], &[2, 2], &[false, false]).is_none());
    }

    #[test]
    fn nesting_is_judged_on_the_union_of_coarse_boxes() {
        let coarse = vec![b(&[0, 0], &[3, 7]), b(&[4, 0], &[7, 7])];
        assert_eq!(first_unnested(&coarse, &[b(&[6, 2], &[9, 5])], &[2, 2], &[false, false]), None);
        assert_eq!(
            first_unnested(&coarse, &[b(&[0, 0], &[1, 1]), b(&[14, 14], &[17, 15])], &[2, 2], &[false, false]),
            Some((1, vec![8, 7]))
        );
        // A node box reaches the node past its last cell: still nested.
        assert_eq!(first_unnested(&[b(&[0, 0], &[4, 4])], &[b(&[0, 0], &[8, 8])], &[2, 2], &[true, true]), None);
    }

    #[test]
    fn subtract_gives_disjoint_pieces_of_the_rest() {
        let a = b(&[0, 0, 0], &[9, 9, 9]);
        let pieces = a.subtract(&b(&[3, 3, 3], &[5, 12, 5]));
        let total: usize = pieces.iter().map(|p| p.cells().unwrap()).sum();
        assert_eq!(total, 1000 - 3 * 7 * 3);
        for (i, p) in pieces.iter().enumerate() {
            for q in &pieces[i + 1..] {
                assert!(p.intersect(q).is_none());
            }
        }
    }
}
