//! The AMRZone polytree index over one timestep (section III-C): an edge goes from a box of
//! level `l` to every box of level `l + 1` that refines part of it, so that a spatial query
//! descends from the coarse boxes it meets through their children only (Algorithm 2) instead
//! of testing every box of every level.
//!
//! Boxes are cell-centred and inclusive; `ratios[l]` refines level `l` into level `l + 1` per
//! axis. Coordinates must leave the extent of every box (`hi - lo + 1`) within `i64`; refined
//! boxes and regions saturate at the `i64` range, which keeps every overlap test exact.
//!
//! Algorithm 2 starts from level 0 alone, which misses fine boxes whose coarse parents were
//! not written (yet), or that stick out of the coarser level. Such boxes are roots as well:
//! a box of level `l + 1` is a root unless the boxes of level `l` cover all of its cells
//! coarsened. With those roots the descent finds exactly what a scan of every level finds:
//! a fine box meeting the refined region at some cell has, below that cell, a coarse box
//! meeting the region, and that box has an edge to it.

use amrzip_amr::boxes::BoxIndex;
use amrzip_amr::IBox;
use rayon::prelude::*;

/// Levels a hierarchy may have.
pub const MAX_LEVELS: usize = 64;

/// The fine cells of a box's (or region's) cells, clamped to the `i64` range.
pub fn refine(b: &IBox, ratio: &[i64]) -> IBox {
    let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    IBox {
        lo: b.lo.iter().zip(ratio).map(|(&l, &r)| clamp(i128::from(l) * i128::from(r))).collect(),
        hi: b.hi.iter().zip(ratio).map(|(&h, &r)| clamp((i128::from(h) + 1) * i128::from(r) - 1)).collect(),
    }
}

/// Checks that the levels' boxes share a dimension of 1 to 8 and are not empty, and that the
/// ratios cover every level but the finest, with one positive ratio per axis.
pub fn check_hierarchy(levels: &[Vec<IBox>], ratios: &[Vec<i64>]) -> Result<(), String> {
    if levels.len() > MAX_LEVELS {
        return Err(format!("{} levels given, at most {MAX_LEVELS} are supported", levels.len()));
    }
    let Some(ndim) = levels.iter().flatten().next().map(IBox::ndim) else { return Ok(()) };
    for (l, boxes) in levels.iter().enumerate() {
        if let Some((i, b)) = boxes.iter().enumerate().find(|(_, b)| b.ndim() != ndim || b.hi.len() != ndim || b.is_empty()) {
            return Err(format!("box {i} of level {l} ({:?}..={:?}) is empty or not {ndim}-dimensional", b.lo, b.hi));
        }
    }
    if ndim > crate::MAX_DIMS {
        return Err(format!("boxes have {ndim} axes, at most {} are supported", crate::MAX_DIMS));
    }
    if ratios.len() + 1 < levels.len() {
        return Err(format!("{} levels need {} refinement ratios, {} given", levels.len(), levels.len() - 1, ratios.len()));
    }
    for (l, r) in ratios.iter().enumerate().take(levels.len().saturating_sub(1)) {
        if r.len() != ndim || r.iter().any(|&v| v < 1) {
            return Err(format!("the refinement ratio of level {l}, {r:?}, must have {ndim} entries of at least 1"));
        }
    }
    Ok(())
}

/// The index over one timestep's levels.
pub struct Polytree {
    levels: Vec<Vec<IBox>>,
    ratios: Vec<Vec<i64>>,
    /// Per level but the finest, the boxes of the next level each box has an edge to:
    /// box `i`'s are `targets[offsets[i]..offsets[i + 1]]`.
    children: Vec<(Vec<usize>, Vec<u32>)>,
    /// Per level, the roots (all of level 0) indexed in space, and their box numbers.
    roots: Vec<(BoxIndex, Vec<u32>)>,
    /// Per level, the bit of its first box in a query's visited bitmap.
    first_bit: Vec<usize>,
    edges: usize,
}

/// One bit per box of every level: a query's boxes already visited.
struct Visited(Vec<u64>);

impl Visited {
    /// Marks `bit`; false when it was marked already.
    fn insert(&mut self, bit: usize) -> bool {
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        let new = self.0[word] & mask == 0;
        self.0[word] |= mask;
        new
    }
}

impl Polytree {
    /// Builds the index on a pool of `threads` threads (0: one per core). Candidate children
    /// and parents of a box are found through a grid index of the next (or previous) level,
    /// never by trying every pair.
    pub fn build(levels: &[Vec<IBox>], ratios: &[Vec<i64>], threads: usize) -> Result<Polytree, String> {
        check_hierarchy(levels, ratios)?;
        if levels.iter().any(|b| b.len() > u32::MAX as usize) {
            return Err("a level has more than 2^32 - 1 boxes".to_string());
        }
        let pool =
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| format!("cannot start {threads} threads: {e}"))?;
        let nlev = levels.len();
        let ratios: Vec<Vec<i64>> = ratios[..nlev.saturating_sub(1)].to_vec();
        pool.install(|| {
            let mut indexes: Vec<BoxIndex> = levels.par_iter().map(|b| BoxIndex::new(b.clone())).collect();
            let mut children = Vec::with_capacity(nlev.saturating_sub(1));
            let mut root_ids = Vec::with_capacity(nlev);
            let mut edges = 0;
            for l in 0..nlev {
                if l + 1 < nlev {
                    let lists: Vec<Vec<u32>> = levels[l]
                        .par_iter()
                        .map(|b| indexes[l + 1].meeting(&refine(b, &ratios[l])).into_iter().map(|i| i as u32).collect())
                        .collect();
                    let mut offsets = Vec::with_capacity(lists.len() + 1);
                    offsets.push(0);
                    let mut targets = Vec::with_capacity(lists.iter().map(Vec::len).sum());
                    for list in lists {
                        targets.extend(list);
                        offsets.push(targets.len());
                    }
                    edges += targets.len();
                    children.push((offsets, targets));
                }
                root_ids.push(if l == 0 {
                    (0..levels[0].len() as u32).collect()
                } else {
                    let (coarse, ratio) = (&indexes[l - 1], &ratios[l - 1]);
                    let cells = vec![false; ratio.len()];
                    (0..levels[l].len() as u32)
                        .into_par_iter()
                        .filter(|&i| {
                            let shadow = levels[l][i as usize].coarsen(ratio, &cells);
                            !covered(&shadow, coarse.meeting(&shadow).into_iter().map(|j| &coarse.boxes()[j]))
                        })
                        .collect::<Vec<u32>>()
                });
            }
            // Level 0's roots are all its boxes: its grid index serves as is.
            let mut roots = Vec::with_capacity(nlev);
            for (l, ids) in root_ids.into_iter().enumerate() {
                let index = match l {
                    0 => std::mem::replace(&mut indexes[0], BoxIndex::new(Vec::new())),
                    _ => BoxIndex::new(ids.iter().map(|&i| levels[l][i as usize].clone()).collect()),
                };
                roots.push((index, ids));
            }
            let first_bit = levels.iter().scan(0, |next, b| Some(std::mem::replace(next, *next + b.len()))).collect();
            Ok(Polytree { levels: levels.to_vec(), ratios, children, roots, first_bit, edges })
        })
    }

    pub fn levels(&self) -> &[Vec<IBox>] {
        &self.levels
    }

    /// The number of refinement edges.
    pub fn edges(&self) -> usize {
        self.edges
    }

    /// The number of roots per level (level 0: all its boxes).
    pub fn roots(&self) -> Vec<usize> {
        self.roots.iter().map(|(_, ids)| ids.len()).collect()
    }

    /// The boxes of levels `level_min..=level_max` that meet `region` (level-0 cells,
    /// refined by the ratios down the levels), as (level, box number) sorted. Algorithm 2:
    /// depth first from the roots meeting the region, through edges to boxes meeting it; a
    /// box reached twice is reported once. `region` must have the boxes' dimension.
    pub fn query(&self, region: &IBox, level_min: usize, level_max: usize) -> Vec<(usize, usize)> {
        let top = level_max.min(self.levels.len().saturating_sub(1));
        if self.levels.is_empty() || level_min > top {
            return Vec::new();
        }
        let regions = regions(region, &self.ratios, top);
        let bits = self.first_bit[top] + self.levels[top].len();
        let mut seen = Visited(vec![0; bits.div_ceil(64)]);
        let mut out = Vec::new();
        let mut stack = Vec::new();
        for (l, (index, ids)) in self.roots[..=top].iter().enumerate() {
            for r in index.meeting(&regions[l]) {
                let i = ids[r] as usize;
                if seen.insert(self.first_bit[l] + i) {
                    stack.push((l, i));
                }
                while let Some((l, i)) = stack.pop() {
                    if l >= level_min {
                        out.push((l, i));
                    }
                    if l < top {
                        let (offsets, targets) = &self.children[l];
                        for &c in &targets[offsets[i]..offsets[i + 1]] {
                            let c = c as usize;
                            if self.levels[l + 1][c].overlaps(&regions[l + 1]) && seen.insert(self.first_bit[l + 1] + c) {
                                stack.push((l + 1, c));
                            }
                        }
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }
}

/// `region` at each level `0..=top`.
fn regions(region: &IBox, ratios: &[Vec<i64>], top: usize) -> Vec<IBox> {
    let mut out = vec![region.clone()];
    for r in &ratios[..top] {
        let next = refine(out.last().unwrap_or(region), r);
        out.push(next);
    }
    out
}

/// Whether the union of `boxes` covers `b`.
fn covered<'a>(b: &IBox, boxes: impl Iterator<Item = &'a IBox>) -> bool {
    let mut rest = vec![b.clone()];
    for c in boxes {
        if c.contains(b) {
            return true;
        }
        rest = rest.into_iter().flat_map(|p| p.subtract(c)).collect();
        if rest.is_empty() {
            return true;
        }
    }
    false
}

/// The linear-scan baseline of [`Polytree::query`]: every box of levels
/// `level_min..=level_max` is tested against the refined region. Same answer, same order.
pub fn scan(levels: &[Vec<IBox>], ratios: &[Vec<i64>], region: &IBox, level_min: usize, level_max: usize) -> Vec<(usize, usize)> {
    let top = level_max.min(levels.len().saturating_sub(1));
    if levels.is_empty() || level_min > top {
        return Vec::new();
    }
    let regions = regions(region, ratios, top);
    (level_min..=top)
        .flat_map(|l| {
            let region = &regions[l];
            levels[l].iter().enumerate().filter(move |(_, b)| b.overlaps(region)).map(move |(i, _)| (l, i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(lo: &[i64], hi: &[i64]) -> IBox {
        IBox::from_slices(lo, hi)
    }

    #[test]
    fn edges_follow_refinement_and_a_shared_child_is_reported_once() {
        // Two coarse boxes side by side, one fine box straddling them, one fine box under the
        // first only, and one fine box sticking out of level 0 (a root).
        let levels =
            vec![vec![b(&[0, 0], &[3, 3]), b(&[4, 0], &[7, 3])], vec![b(&[6, 2], &[9, 5]), b(&[0, 0], &[1, 1]), b(&[14, 6], &[17, 9])]];
        let ratios = vec![vec![2, 2]];
        let t = Polytree::build(&levels, &ratios, 2).unwrap();
        assert_eq!(t.edges(), 4);
        assert_eq!(t.roots(), vec![2, 1]);
        let all = b(&[-10, -10], &[100, 100]);
        assert_eq!(t.query(&all, 0, 5), vec![(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(t.query(&all, 1, 1), vec![(1, 0), (1, 1), (1, 2)]);
        assert_eq!(t.query(&all, 0, 0), vec![(0, 0), (0, 1)]);
        // The second coarse box only: its cell (4, 1) refines to fine cells (8..9, 2..3).
        assert_eq!(t.query(&b(&[4, 1], &[4, 1]), 0, 1), vec![(0, 1), (1, 0)]);
        assert_eq!(t.query(&b(&[4, 0], &[4, 0]), 0, 1), vec![(0, 1)]);
        // Only the protruding box's coarse shadow.
        assert_eq!(t.query(&b(&[8, 4], &[8, 4]), 0, 1), vec![(1, 2)]);
        assert!(t.query(&all, 2, 3).is_empty());
    }

    #[test]
    fn partly_covered_boxes_are_roots() {
        let levels = vec![vec![b(&[0], &[3])], vec![b(&[4], &[9]), b(&[2], &[7])], vec![b(&[18], &[19])]];
        let ratios = vec![vec![2], vec![2]];
        let t = Polytree::build(&levels, &ratios, 1).unwrap();
        // Fine box 0 reaches past the coarse box's cell 3; fine box 1 is inside it. The level-2
        // box lies under fine box 0's cell 9 only.
        assert_eq!(t.roots(), vec![1, 1, 0]);
        assert_eq!(t.query(&b(&[4], &[4]), 0, 2), vec![(1, 0), (2, 0)]);
        assert_eq!(t.query(&b(&[4], &[4]), 0, 2), scan(&levels, &ratios, &b(&[4], &[4]), 0, 2));
    }

    #[test]
    fn bad_hierarchies_are_refused() {
        let e = Polytree::build(&[vec![b(&[0], &[1])], vec![b(&[0], &[1])]], &[], 1).err().unwrap();
        assert!(e.contains("2 levels need 1 refinement ratios, 0 given"), "{e}");
        let e = Polytree::build(&[vec![b(&[0], &[1])], vec![b(&[0, 0], &[1, 1])]], &[vec![2]], 1).err().unwrap();
        assert!(e.contains("box 0 of level 1"), "{e}");
        let e = Polytree::build(&[vec![b(&[0], &[1])], vec![]], &[vec![0]], 1).err().unwrap();
        assert!(e.contains("[0]"), "{e}");
        let t = Polytree::build(&[], &[], 1).unwrap();
        assert!(t.query(&b(&[0], &[1]), 0, 9).is_empty());
    }

    #[test]
    fn coordinates_near_the_ends_of_i64_saturate() {
        let big = i64::MAX / 2;
        let levels = vec![vec![b(&[big - 10], &[big])], vec![b(&[i64::MAX - 20], &[i64::MAX - 1])]];
        let ratios = vec![vec![2]];
        let t = Polytree::build(&levels, &ratios, 1).unwrap();
        assert_eq!(t.edges(), 1);
        let region = b(&[big], &[i64::MAX]);
        assert_eq!(t.query(&region, 0, 1), vec![(0, 0), (1, 0)]);
        assert_eq!(scan(&levels, &ratios, &region, 0, 1), vec![(0, 0), (1, 0)]);
    }

    /// A hierarchy of `nlev` levels: level 0 random boxes; each finer box, with probability
    /// `nested`, a piece of a refined box of the level above, else anywhere in the refined
    /// domain (possibly overlapping others, possibly unparented).
    fn hierarchy(seed: u64, nd: usize, nlev: usize, nested: f64) -> (Vec<Vec<IBox>>, Vec<Vec<i64>>) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let ratios: Vec<Vec<i64>> = (0..nlev.saturating_sub(1))
            .map(|_| {
                let iso = [2, 4][rng.usize(0..2)];
                (0..nd).map(|_| if rng.u8(0..4) == 0 { [1, 2, 4][rng.usize(0..3)] } else { iso }).collect()
            })
            .collect();
        let random_box = |rng: &mut fastrand::Rng, within: &IBox| {
            let mut lo = Vec::new();
            let mut hi = Vec::new();
            for d in 0..nd {
                let a = rng.i64(within.lo[d]..=within.hi[d]);
                let z = rng.i64(a..=within.hi[d].min(a + (within.hi[d] - within.lo[d]) / 2 + 1));
                lo.push(a);
                hi.push(z);
            }
            IBox::new(lo, hi)
        };
        let mut domain = IBox::new(vec![-8; nd], vec![23; nd]);
        let mut levels: Vec<Vec<IBox>> = vec![(0..rng.usize(1..12)).map(|_| random_box(&mut rng, &domain)).collect()];
        for r in &ratios {
            domain = refine(&domain, r);
            let coarse = levels.last().unwrap().clone();
            let n = rng.usize(0..25);
            levels.push(
                (0..n)
                    .map(|_| {
                        if rng.f64() < nested && !coarse.is_empty() {
                            let parent = refine(&coarse[rng.usize(0..coarse.len())], r);
                            random_box(&mut rng, &parent)
                        } else {
                            random_box(&mut rng, &domain)
                        }
                    })
                    .collect(),
            );
        }
        (levels, ratios)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        #[test]
        fn polytree_answers_as_the_scan(
            seed in any::<u64>(),
            nd in 1usize..=3,
            nlev in 1usize..=4,
            nested in prop_oneof![Just(1.0), Just(0.8), Just(0.0)],
            threads in 1usize..=3,
        ) {
            let (levels, ratios) = hierarchy(seed, nd, nlev, nested);
            let t = Polytree::build(&levels, &ratios, threads).unwrap();
            let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
            for _ in 0..20 {
                let lo: Vec<i64> = (0..nd).map(|_| rng.i64(-12..28)).collect();
                let hi: Vec<i64> = lo.iter().map(|&l| l + rng.i64(0..12)).collect();
                let region = IBox::new(lo, hi);
                let (lmin, lmax) = (rng.usize(0..nlev + 1), rng.usize(0..nlev + 2));
                prop_assert_eq!(t.query(&region, lmin, lmax), scan(&levels, &ratios, &region, lmin, lmax), "region {:?}, levels {}..={}", region, lmin, lmax);
            }
        }
    }
}
