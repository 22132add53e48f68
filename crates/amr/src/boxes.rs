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

    pub fn from_slices(lo: &[i64], hi: &[i64]) -> IBox {
        IBox { lo: lo.to_vec(), hi: hi.to_vec() }
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

    /// Whether the boxes share a cell (`intersect` without making the intersection).
    pub fn overlaps(&self, other: &IBox) -> bool {
        self.lo.iter().zip(&other.hi).all(|(l, h)| l <= h) && other.lo.iter().zip(&self.hi).all(|(l, h)| l <= h)
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

/// The cells of a level that the boxes of the next level cover, indexed so that the pieces of
/// each of thousands of boxes are found without trying every fine box.
pub struct Coverage {
    index: BoxIndex,
}

impl Coverage {
    /// The coverage by `finer` (the next level's boxes, in its index space, refined by `ratio`).
    pub fn new(finer: &[IBox], ratio: &[i64], node: &[bool]) -> Coverage {
        Coverage { index: BoxIndex::new(finer.iter().map(|f| f.covered_by_fine(ratio, node)).filter(|c| !c.is_empty()).collect()) }
    }

    /// The covered cells, one box per fine box (those that cover any).
    pub fn boxes(&self) -> &[IBox] {
        &self.index.boxes
    }

    /// The covered parts of `b`, one per fine box touching it, in the fine boxes' order.
    pub fn pieces(&self, b: &IBox) -> Vec<IBox> {
        self.index.meeting(b).into_iter().filter_map(|i| self.index.boxes[i].intersect(b)).collect()
    }
}

/// Which cells of `b` to store (C order): those `coverage` leaves uncovered; None when no cell
/// is covered.
pub fn stored_mask(b: &IBox, coverage: &Coverage) -> Option<Vec<bool>> {
    let pieces = coverage.pieces(b);
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

/// The cells a box spans: a node box spans the cells between its nodes (a box one node thick
/// keeps the cell above that node, so it still counts).
fn cells_of(b: &IBox, node: &[bool]) -> IBox {
    IBox::new(b.lo.clone(), b.hi.iter().zip(&b.lo).zip(node).map(|((&h, &l), &n)| l.max(h - n as i64)).collect())
}

/// Box numbers by the cells of a coarse grid they touch, to find the boxes that may meet a
/// given one among thousands without trying them all. The grid's cell is the boxes' median
/// extent, so a typical box lands in a few cells.
pub struct BoxIndex {
    boxes: Vec<IBox>,
    cell: Vec<i64>,
    buckets: Buckets,
    /// The grid cells any box touches (None: no box).
    reach: Option<IBox>,
}

/// A grid cell's box numbers, in box order.
enum Buckets {
    /// Every grid cell of the reach, in C order: cell `k`'s boxes are `ids[starts[k]..starts[k + 1]]`.
    /// Hashing a key per grid cell took most of a store's opening (its levels' nesting check).
    Dense { starts: Vec<usize>, ids: Vec<u32> },
    /// Only the cells some box touches, where the reach is mostly empty.
    Sparse(std::collections::HashMap<Vec<i64>, Vec<u32>>),
}

/// The cells of the grid of cell `cell` that `b` touches.
fn grid_span(cell: &[i64], b: &IBox) -> IBox {
    IBox::new(
        b.lo.iter().zip(cell).map(|(&l, &c)| l.div_euclid(c)).collect(),
        b.hi.iter().zip(cell).map(|(&h, &c)| h.div_euclid(c)).collect(),
    )
}

/// A dense grid may have this many cells per box (plus `DENSE_SLACK`): a level covering little
/// of its domain keeps its boxes' cells in a map instead.
const DENSE_PER_BOX: usize = 64;
const DENSE_SLACK: usize = 4096;

impl BoxIndex {
    pub fn new(boxes: Vec<IBox>) -> BoxIndex {
        let nd = boxes.first().map_or(0, IBox::ndim);
        let cell: Vec<i64> = (0..nd)
            .map(|d| {
                let mut e: Vec<i64> = boxes.iter().map(|b| b.hi[d] - b.lo[d] + 1).collect();
                e.sort_unstable();
                e[e.len() / 2].max(1)
            })
            .collect();
        let spans: Vec<IBox> = boxes.iter().map(|b| grid_span(&cell, b)).collect();
        let reach = spans.iter().cloned().reduce(|r, s| {
            IBox::new(r.lo.iter().zip(&s.lo).map(|(&a, &b)| a.min(b)).collect(), r.hi.iter().zip(&s.hi).map(|(&a, &b)| a.max(b)).collect())
        });
        let dense = reach.as_ref().and_then(IBox::cells).filter(|&n| n <= DENSE_PER_BOX * boxes.len() + DENSE_SLACK);
        let buckets = match (dense, &reach) {
            (Some(n), Some(reach)) => {
                // Counted, then filled in box order.
                let mut starts = vec![0usize; n + 1];
                spans.iter().for_each(|s| for_each_cell(s, |c| starts[reach.offset_c(c) + 1] += 1));
                (0..n).for_each(|k| starts[k + 1] += starts[k]);
                let mut next = starts.clone();
                let mut ids = vec![0u32; starts[n]];
                for (i, s) in spans.iter().enumerate() {
                    for_each_cell(s, |c| {
                        let k = reach.offset_c(c);
                        ids[next[k]] = i as u32;
                        next[k] += 1;
                    });
                }
                Buckets::Dense { starts, ids }
            }
            _ => {
                let mut map: std::collections::HashMap<Vec<i64>, Vec<u32>> = std::collections::HashMap::new();
                for (i, s) in spans.iter().enumerate() {
                    for_each_cell(s, |c| map.entry(c.to_vec()).or_default().push(i as u32));
                }
                Buckets::Sparse(map)
            }
        };
        BoxIndex { boxes, cell, buckets, reach }
    }

    pub fn boxes(&self) -> &[IBox] {
        &self.boxes
    }

    /// The boxes that meet `b`, in increasing order.
    pub fn meeting(&self, b: &IBox) -> Vec<usize> {
        let mut out = Vec::new();
        // Clipped to where boxes are, so that a huge query walks no empty grid cells.
        let Some((reach, span)) = self.reach.as_ref().and_then(|r| Some((r, grid_span(&self.cell, b).intersect(r)?))) else { return out };
        let mut add = |ids: &[u32]| out.extend(ids.iter().map(|&i| i as usize).filter(|&i| self.boxes[i].intersect(b).is_some()));
        for_each_cell(&span, |c| match &self.buckets {
            Buckets::Dense { starts, ids } => {
                let k = reach.offset_c(c);
                add(&ids[starts[k]..starts[k + 1]]);
            }
            Buckets::Sparse(map) => {
                if let Some(ids) = map.get(c) {
                    add(ids);
                }
            }
        });
        out.sort_unstable();
        out.dedup();
        out
    }
}

fn fmt_box(b: &IBox) -> String {
    let t = |v: &[i64]| {
        if v.len() == 1 {
            format!("({},)", v[0])
        } else {
            format!("({})", v.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))
        }
    };
    format!("({}, {})", t(&b.lo), t(&b.hi))
}

/// Checks the boxes of a hierarchy's levels (`levels[L]`: the boxes and the refinement ratio to
/// level L + 1, coarsest first): within a level the boxes share no cell (AMReX and Chombo write
/// disjoint box arrays, and covered cells are counted box by box), and every box of level L + 1,
/// coarsened, lies in the union of level L's boxes. Node boxes are judged on the cells between
/// their nodes. Returns the first problem, described.
pub fn check_nesting(levels: &[(&[IBox], &[i64])], node: &[bool]) -> Result<(), String> {
    let cells: Vec<Vec<IBox>> = levels.iter().map(|(boxes, _)| boxes.iter().map(|b| cells_of(b, node)).collect()).collect();
    let indexes: Vec<BoxIndex> = cells.iter().map(|c| BoxIndex::new(c.clone())).collect();
    for (l, (c, index)) in cells.iter().zip(&indexes).enumerate() {
        for (i, b) in c.iter().enumerate() {
            if let Some(&j) = index.meeting(b).iter().find(|&&j| j != i) {
                let (a, z) = (i.min(j), i.max(j));
                return Err(format!("boxes {a} {} and {z} {} of level {l} overlap", fmt_box(&levels[l].0[a]), fmt_box(&levels[l].0[z])));
            }
        }
    }
    let cell_nodes = vec![false; node.len()];
    for l in 0..levels.len().saturating_sub(1) {
        let ratio = levels[l].1;
        for (i, f) in cells[l + 1].iter().enumerate() {
            let shrunk = f.coarsen(ratio, &cell_nodes);
            // The coarse boxes are disjoint: the box is inside their union when the cells it
            // shares with them add up to all of its cells.
            let shared: u128 = indexes[l]
                .meeting(&shrunk)
                .iter()
                .map(|&j| cells[l][j].intersect(&shrunk).map_or(0, |p| p.cells().unwrap_or(0) as u128))
                .sum();
            if shared < shrunk.cells().map_or(u128::MAX, |n| n as u128) {
                return Err(format!(
                    "level {} is not nested in level {l}: its box {i} {}, coarsened by {ratio:?} to {}, is not inside level {l}'s boxes",
                    l + 1,
                    fmt_box(&levels[l + 1].0[i]),
                    fmt_box(&shrunk)
                ));
            }
        }
    }
    Ok(())
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

    #[test]
    fn coarsen_and_refine_round_trip_below_zero_and_on_nodes() {
        let c = IBox::from_slices(&[-3, 4], &[5, 9]);
        assert_eq!(c.coarsen(&[2, 2], &[false, false]), IBox::from_slices(&[-2, 2], &[2, 4]));
        assert_eq!(IBox::from_slices(&[-2, 2], &[2, 4]).refine(&[2, 2], &[false, false]), IBox::from_slices(&[-4, 4], &[5, 9]));
        assert_eq!(c.coarsen(&[2, 2], &[true, false]), IBox::from_slices(&[-2, 2], &[3, 4]));
        assert_eq!(IBox::from_slices(&[0, 0], &[2, 4]).refine(&[2, 2], &[true, false]), IBox::from_slices(&[0, 0], &[4, 9]));
    }

    #[test]
    fn stored_mask_leaves_out_exactly_the_covered_cells() {
        let coarse = IBox::from_slices(&[0, 0], &[7, 7]);
        let fine = vec![IBox::from_slices(&[4, 4], &[9, 7]), IBox::from_slices(&[20, 20], &[23, 23])];
        let mask = stored_mask(&coarse, &Coverage::new(&fine, &[2, 2], &[false, false])).unwrap();
        for i in 0..8i64 {
            for j in 0..8i64 {
                let covered = (2..=4).contains(&i) && (2..=3).contains(&j);
                assert_eq!(mask[(i * 8 + j) as usize], !covered, "({i}, {j})");
            }
        }
        assert!(stored_mask(&coarse, &Coverage::new(&[IBox::from_slices(&[40, 40], &[41, 41])], &[2, 2], &[false, false])).is_none());
    }

    #[test]
    fn nesting_is_judged_on_the_union_of_coarse_boxes() {
        let coarse = vec![IBox::from_slices(&[0, 0], &[3, 7]), IBox::from_slices(&[4, 0], &[7, 7])];
        let no = [false, false];
        assert_eq!(check_nesting(&[(&coarse, &[2, 2]), (&[IBox::from_slices(&[6, 2], &[9, 5])], &[1, 1])], &no), Ok(()));
        let e = check_nesting(
            &[(&coarse, &[2, 2]), (&[IBox::from_slices(&[0, 0], &[1, 1]), IBox::from_slices(&[14, 14], &[17, 15])], &[1, 1])],
            &no,
        )
        .unwrap_err();
        assert!(e.contains("level 1 is not nested in level 0: its box 1 ((14, 14), (17, 15))"), "{e}");
        // Node boxes reach the node past their last cell, and neighbours share face nodes.
        let nodes = [true, true];
        let coarse = vec![IBox::from_slices(&[0, 0], &[4, 4]), IBox::from_slices(&[4, 0], &[8, 4])];
        assert_eq!(check_nesting(&[(&coarse, &[2, 2]), (&[IBox::from_slices(&[0, 0], &[16, 8])], &[1, 1])], &nodes), Ok(()));
        let e = check_nesting(&[(&[IBox::from_slices(&[0, 0], &[4, 4]), IBox::from_slices(&[3, 0], &[8, 4])], &[1, 1])], &no).unwrap_err();
        assert!(e.contains("boxes 0 ((0, 0), (4, 4)) and 1 ((3, 0), (8, 4)) of level 0 overlap"), "{e}");
    }

    #[test]
    fn many_boxes_are_checked_through_the_index() {
        // 40 x 40 unit boxes, nested by a level of 2 x 2 boxes under each, all but one.
        let coarse: Vec<IBox> =
            (0..40).flat_map(|i| (0..40).map(move |j| IBox::from_slices(&[2 * i, 2 * j], &[2 * i + 1, 2 * j + 1]))).collect();
        let mut fine: Vec<IBox> =
            (0..80).flat_map(|i| (0..80).map(move |j| IBox::from_slices(&[2 * i, 2 * j], &[2 * i + 1, 2 * j + 1]))).collect();
        assert_eq!(check_nesting(&[(&coarse, &[2, 2]), (&fine, &[1, 1])], &[false, false]), Ok(()));
        fine.push(IBox::from_slices(&[160, 0], &[161, 1]));
        assert!(check_nesting(&[(&coarse, &[2, 2]), (&fine, &[1, 1])], &[false, false]).unwrap_err().contains("box 6400"));
    }

    #[test]
    fn box_index_finds_exactly_the_boxes_that_meet_a_query() {
        // Pseudo-random boxes, clustered (a dense grid) and spread over a huge domain (a map),
        // against every query a brute force answers; queries reach past the boxes and below 0.
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut next = |n: i64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % n as u64) as i64
        };
        for spread in [64, 1 << 40] {
            let boxes: Vec<IBox> = (0..300)
                .map(|_| {
                    let lo: Vec<i64> = (0..3).map(|_| next(spread) - spread / 4).collect();
                    let hi: Vec<i64> = lo.iter().map(|&l| l + next(12)).collect();
                    IBox::new(lo, hi)
                })
                .collect();
            let index = BoxIndex::new(boxes.clone());
            assert_eq!(matches!(index.buckets, Buckets::Dense { .. }), spread == 64);
            for _ in 0..300 {
                let lo: Vec<i64> = (0..3).map(|_| next(spread + 40) - spread / 4 - 20).collect();
                let q = IBox::new(lo.clone(), lo.iter().map(|&l| l + next(30)).collect());
                let want: Vec<usize> = (0..boxes.len()).filter(|&i| boxes[i].intersect(&q).is_some()).collect();
                assert_eq!(index.meeting(&q), want);
            }
        }
        assert!(BoxIndex::new(Vec::new()).meeting(&IBox::from_slices(&[0], &[5])).is_empty());
    }

    #[test]
    fn subtract_gives_disjoint_pieces_of_the_rest() {
        let a = IBox::from_slices(&[0, 0, 0], &[9, 9, 9]);
        let pieces = a.subtract(&IBox::from_slices(&[3, 3, 3], &[5, 12, 5]));
        let total: usize = pieces.iter().map(|p| p.cells().unwrap()).sum();
        assert_eq!(total, 1000 - 3 * 7 * 3);
        for (i, p) in pieces.iter().enumerate() {
            for q in &pieces[i + 1..] {
                assert!(p.intersect(q).is_none());
            }
        }
    }
}
