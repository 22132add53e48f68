//! HZ geometry: which axis each level refines, the lattice of each level, IDX blocks and HZ
//! indices.
//!
//! Arrays of 1 to 3 dimensions are handled as 3-D with leading axes of length 1 (axis 2 is the
//! fastest, C order). Axis `k` of length `n_k` takes `b_k = ceil(log2 n_k)` bits; the array is
//! the part below `n` of a padded box of `2^b_k` cells per axis. Level `j >= 1` refines axis
//! `axes[j - 1]`: after it the lattice spacing along axis `k` is `2^(b_k - c_k(j))`, where
//! `c_k(j)` counts the levels up to `j` that refine `k`. The points of level `j` are the points
//! of its lattice not on the lattice before it: along the refined axis they sit at odd
//! multiples of the new spacing. Levels come in rounds that refine each axis with bits left once,
//! in the geometry's axis *order* (by default 0, 1, 2; rounds are built finest first), so the
//! last `d` levels of a `d`-dimensional cube halve every axis once: dropping them reads every
//! other point along each axis, 1/2^d of the points. The order changes which points a level
//! holds, not the lattices the rounds end on, and costs bits: see [`choose_order`](crate::order::choose_order).

/// Axes of the internal 3-D view.
pub const AXES: usize = 3;
/// Block sizes allowed, in bits of HZ slots.
pub const BLOCK_BITS: std::ops::RangeInclusive<u32> = 6..=24;
/// At most this many bits of HZ index (levels) in all: 2^48 points.
pub const MAX_BITS: u32 = 48;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    dims: usize,
    shape: [usize; AXES],
    bits: [u32; AXES],
    /// `axes[j - 1]` is the axis level `j` refines.
    axes: Vec<u8>,
    /// `counts[j][k]`: levels `1..=j` refining axis `k`.
    counts: Vec<[u32; AXES]>,
    /// `first[k][c]`: the first level after which axis `k` has been refined `c` times.
    first: [Vec<u32>; AXES],
    block_bits: u32,
    /// The axes in the order each round refines them.
    order: [u8; AXES],
    /// Per axis: coordinates below `interior` hold the array's indices as they are, and
    /// coordinate `anchor` (`NO_ANCHOR`: none) holds its last index (see [`Geometry::anchored`]).
    interior: [usize; AXES],
    anchor: [usize; AXES],
}

const NO_ANCHOR: usize = usize::MAX;

/// The points of a level a block holds: lattice indices `lo..hi` per axis (a point of level `j`
/// at lattice index `i` sits at `start + step * i`, see [`Geometry::lattice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelBlock {
    pub level: u32,
    pub lo: [usize; AXES],
    pub hi: [usize; AXES],
}

impl LevelBlock {
    pub fn is_empty(&self) -> bool {
        (0..AXES).any(|k| self.lo[k] >= self.hi[k])
    }

    pub fn slots(&self) -> usize {
        (0..AXES).map(|k| self.hi[k].saturating_sub(self.lo[k])).product()
    }
}

/// Where a level's points sit: along axis `k`, at `start[k] + step[k] * i` for `i < count[k]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lattice {
    pub start: [usize; AXES],
    pub step: [usize; AXES],
    pub count: [usize; AXES],
}

fn ceil_log2(n: usize) -> u32 {
    usize::BITS - (n.max(1) - 1).leading_zeros()
}

impl Geometry {
    /// The axis order of IDX's default bitmask: the slowest axis first in every round.
    pub const DEFAULT_ORDER: [u8; AXES] = [0, 1, 2];

    /// The geometry of a C-order array of `shape` (1 to 3 axes, each at least 1) in blocks of
    /// `2^block_bits` HZ slots, in the default axis order.
    pub fn new(shape: &[usize], block_bits: u32) -> Result<Geometry, String> {
        Geometry::with_order(shape, block_bits, Geometry::DEFAULT_ORDER)
    }

    /// As [`new`](Self::new), each round refining the axes (of the internal 3-D view) in `order`.
    pub fn with_order(shape: &[usize], block_bits: u32, order: [u8; AXES]) -> Result<Geometry, String> {
        Geometry::with_layout(shape, block_bits, order, false)
    }

    /// As [`with_order`](Self::with_order), with each axis's last index anchored: along an axis
    /// of `n >= 2` points, index `n - 1` sits at coordinate `2^b`, `b = ceil(log2(n - 1))`, on
    /// the axis's coarsest lattice, and indices below it at their own coordinates; coordinates
    /// `n - 1 .. 2^b` hold no point. IDX pads an axis past its last index, so the last point of
    /// every line at every level has no neighbour on its far side and is extrapolated; anchored,
    /// it is interpolated towards the last index, as the codec's interpolation does (17.4).
    /// The padded extent doubles where `n - 1` is not a power of two; the blocks past the array
    /// hold nothing and are not stored.
    pub fn anchored(shape: &[usize], block_bits: u32, order: [u8; AXES]) -> Result<Geometry, String> {
        Geometry::with_layout(shape, block_bits, order, true)
    }

    fn with_layout(shape: &[usize], block_bits: u32, order: [u8; AXES], anchored: bool) -> Result<Geometry, String> {
        if (0..AXES as u8).any(|k| !order.contains(&k)) {
            return Err(format!("axis order {order:?} is not a permutation of the axes 0..{AXES}"));
        }
        if shape.is_empty() || shape.len() > AXES {
            return Err(format!("HZ layouts take arrays of 1 to {AXES} dimensions, not {}", shape.len()));
        }
        if shape.contains(&0) {
            return Err(format!("array shape {shape:?} has an empty axis"));
        }
        if !BLOCK_BITS.contains(&block_bits) {
            return Err(format!("block size 2^{block_bits} outside 2^{}..2^{}", BLOCK_BITS.start(), BLOCK_BITS.end()));
        }
        let dims = shape.len();
        let mut padded = [1usize; AXES];
        padded[AXES - dims..].copy_from_slice(shape);
        let anchor = padded.map(|n| if anchored && n >= 2 { 1usize << ceil_log2(n - 1) } else { NO_ANCHOR });
        let interior: [usize; AXES] = std::array::from_fn(|k| if anchor[k] == NO_ANCHOR { padded[k] } else { padded[k] - 1 });
        let bits: [u32; AXES] =
            std::array::from_fn(|k| if anchor[k] == NO_ANCHOR { ceil_log2(padded[k]) } else { ceil_log2(anchor[k] + 1) });
        if bits.iter().sum::<u32>() > MAX_BITS {
            return Err(format!("array shape {shape:?} needs more than 2^{MAX_BITS} HZ slots"));
        }
        let mut left = bits;
        let mut fine_first = Vec::new();
        while left.iter().any(|&b| b > 0) {
            for k in order.iter().rev().map(|&k| k as usize) {
                if left[k] > 0 {
                    left[k] -= 1;
                    fine_first.push(k as u8);
                }
            }
        }
        let axes: Vec<u8> = fine_first.into_iter().rev().collect();
        let mut counts = vec![[0u32; AXES]];
        for &a in &axes {
            let mut c = *counts.last().unwrap();
            c[a as usize] += 1;
            counts.push(c);
        }
        let first = std::array::from_fn(|k| {
            let mut f = vec![0u32];
            for (j, c) in counts.iter().enumerate().skip(1) {
                if c[k] as usize == f.len() {
                    f.push(j as u32);
                }
            }
            f
        });
        Ok(Geometry { dims, shape: padded, bits, axes, counts, first, block_bits, order, interior, anchor })
    }

    pub fn order(&self) -> [u8; AXES] {
        self.order
    }

    /// Whether the last indices are anchored (see [`anchored`](Self::anchored)).
    pub fn is_anchored(&self) -> bool {
        self.anchor.iter().any(|&a| a != NO_ANCHOR)
    }

    /// Coordinates along axis `k` below this hold the indices as they are.
    #[inline(always)]
    pub fn interior(&self, k: usize) -> usize {
        self.interior[k]
    }

    /// The coordinate of axis `k`'s last index, where anchored.
    #[inline(always)]
    pub fn anchor(&self, k: usize) -> Option<usize> {
        (self.anchor[k] != NO_ANCHOR).then_some(self.anchor[k])
    }

    /// Whether coordinate `c` of axis `k` holds a point.
    #[inline(always)]
    pub fn valid(&self, k: usize, c: usize) -> bool {
        c < self.interior[k] || c == self.anchor[k]
    }

    /// Coordinates per axis up to the last that holds a point (the array's shape unanchored).
    pub fn extent(&self) -> [usize; AXES] {
        std::array::from_fn(|k| if self.anchor[k] == NO_ANCHOR { self.shape[k] } else { self.anchor[k] + 1 })
    }

    /// The array index of coordinate `c` of axis `k` (a valid one).
    #[inline(always)]
    pub fn index(&self, k: usize, c: usize) -> usize {
        c.min(self.interior[k])
    }

    /// The coordinate of array index `i` of axis `k`.
    pub fn coordinate(&self, k: usize, i: usize) -> usize {
        if i == self.interior[k] && self.anchor[k] != NO_ANCHOR {
            self.anchor[k]
        } else {
            i
        }
    }

    /// The coordinates holding points along axis `k` that are multiples of `s` in `lo..hi`
    /// (`lo` a multiple of `s`), increasing: where a buffer of a lattice of spacing `s` keeps
    /// its slots, back to back.
    pub fn coordinates(&self, k: usize, s: usize, lo: usize, hi: usize) -> impl Iterator<Item = usize> + Clone {
        let anchor = self.anchor[k];
        let far = (anchor != NO_ANCHOR && anchor.is_multiple_of(s) && lo <= anchor && anchor < hi).then_some(anchor);
        (lo..hi.min(self.interior[k])).step_by(s).chain(far)
    }

    /// Slots along axis `k` of a buffer of the lattice of spacing `s` over `lo..hi` (`lo` a
    /// multiple of `s`).
    pub fn slots(&self, k: usize, s: usize, lo: usize, hi: usize) -> usize {
        self.coordinates(k, s, lo, hi).count()
    }

    /// The user's number of dimensions.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The shape in the user's dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape[AXES - self.dims..]
    }

    /// The shape on the internal 3 axes.
    pub fn shape3(&self) -> [usize; AXES] {
        self.shape
    }

    pub fn block_bits(&self) -> u32 {
        self.block_bits
    }

    /// The finest level (the total number of bits); levels are `0..=levels()`.
    pub fn levels(&self) -> u32 {
        self.axes.len() as u32
    }

    /// The axis level `j >= 1` refines.
    pub fn axis(&self, j: u32) -> usize {
        self.axes[j as usize - 1] as usize
    }

    /// IDX's bitmask string: `V`, then the axis each level refines, coarsest first, numbered
    /// as the user's axes (0 = the slowest).
    pub fn bitmask(&self) -> String {
        let offset = (AXES - self.dims) as u8;
        std::iter::once('V').chain(self.axes.iter().map(|&a| char::from(b'0' + a - offset))).collect()
    }

    /// Lattice spacing along each axis once levels `0..=j` are in.
    pub fn spacing(&self, j: u32) -> [usize; AXES] {
        std::array::from_fn(|k| 1usize << (self.bits[k] - self.counts[j as usize][k]))
    }

    /// The shape of the array subsampled at level `j` (every point of levels `0..=j`).
    pub fn reduced_shape(&self, j: u32) -> [usize; AXES] {
        let s = self.spacing(j);
        std::array::from_fn(|k| self.shape[k].div_ceil(s[k]))
    }

    /// The shape of a buffer of every point of levels `0..=j`: the reduced shape, plus a slot
    /// for an anchored last index not on that lattice of the array's indices.
    pub fn buffer_shape(&self, j: u32) -> [usize; AXES] {
        let (s, e) = (self.spacing(j), self.extent());
        std::array::from_fn(|k| self.slots(k, s[k], 0, e[k]))
    }

    /// Where level `j`'s points sit.
    pub fn lattice(&self, j: u32) -> Lattice {
        if j == 0 {
            return Lattice { start: [0; AXES], step: [1; AXES], count: [1; AXES] };
        }
        let (s, e) = (self.spacing(j), self.extent());
        let a = self.axis(j);
        let mut lattice = Lattice { start: [0; AXES], step: s, count: std::array::from_fn(|k| e[k].div_ceil(s[k])) };
        lattice.start[a] = s[a];
        lattice.step[a] = 2 * s[a];
        lattice.count[a] = if e[a] > s[a] { (e[a] - s[a]).div_ceil(2 * s[a]) } else { 0 };
        lattice
    }

    /// The level holding the point at `x`: the first whose lattice it is on.
    pub fn level_of(&self, x: [usize; AXES]) -> u32 {
        (0..AXES)
            .map(|k| {
                let tz = if x[k] == 0 { self.bits[k] } else { x[k].trailing_zeros().min(self.bits[k]) };
                self.first[k][(self.bits[k] - tz) as usize]
            })
            .max()
            .unwrap_or(0)
    }

    /// The point's HZ index: `2^(level - 1)` plus its Z index among its level's points
    /// (bits of levels `1..level`, coarsest most significant); 0 for the origin.
    pub fn hz_index(&self, x: [usize; AXES]) -> u64 {
        let j = self.level_of(x);
        if j == 0 {
            return 0;
        }
        let lattice = self.lattice(j);
        let mut coord: [u64; AXES] = std::array::from_fn(|k| ((x[k] - lattice.start[k]) / lattice.step[k]) as u64);
        let mut z = 0u64;
        for l in (1..j).rev() {
            let k = self.axis(l);
            z |= (coord[k] & 1) << (j - 1 - l);
            coord[k] >>= 1;
        }
        (1u64 << (j - 1)) | z
    }

    /// Levels that go into block 0. IDX's first block holds HZ slots `0..2^block_bits`; an
    /// axis whose anchoring doubled its padded extent adds a level, so that block 0 holds about
    /// as many points as unanchored (the slots past the array hold none) and the same lattice.
    pub fn first_block_levels(&self) -> u32 {
        let doubled = (0..AXES).filter(|&k| self.bits[k] > ceil_log2(self.shape[k])).count() as u32;
        (self.block_bits + doubled).min(self.levels())
    }

    /// Number of blocks of the padded HZ space (stored or skipped).
    pub fn blocks(&self) -> u64 {
        1u64 << self.levels().saturating_sub(self.block_bits)
    }

    /// Global block numbers of level `j`'s blocks (block 0 holds levels up to
    /// [`first_block_levels`](Self::first_block_levels)).
    pub fn level_blocks(&self, j: u32) -> std::ops::Range<u64> {
        if j <= self.first_block_levels() {
            return 0..1;
        }
        let n = 1u64 << (j - 1 - self.block_bits);
        n..2 * n
    }

    /// The level of block `g` (for block 0: its finest level).
    pub fn block_level(&self, g: u64) -> u32 {
        if g == 0 {
            self.first_block_levels()
        } else {
            self.block_bits + 1 + (63 - g.leading_zeros())
        }
    }

    /// Whether block `g` exists: the numbers of levels that block 0 holds past `block_bits`
    /// (see [`first_block_levels`](Self::first_block_levels)) name no block.
    pub fn is_block(&self, g: u64) -> bool {
        g == 0 || (g < self.blocks() && self.block_level(g) > self.first_block_levels())
    }

    /// The points of block `g`, one [`LevelBlock`] per level it holds (empty ones included for
    /// block 0, whose levels are whole; none for a number that names no block).
    pub fn block(&self, g: u64) -> Vec<LevelBlock> {
        if g == 0 {
            return (0..=self.first_block_levels()).map(|j| LevelBlock { level: j, lo: [0; AXES], hi: self.lattice(j).count }).collect();
        }
        if !self.is_block(g) {
            return Vec::new();
        }
        let j = self.block_level(g);
        let i = g - self.level_blocks(j).start;
        let (top, bb) = ((j - 1 - self.block_bits) as usize, self.block_bits as usize);
        let mut c = [0usize; AXES];
        for l in 1..=top {
            let k = self.axis(l as u32);
            c[k] = 2 * c[k] + ((i >> (top - l)) & 1) as usize;
        }
        let count = self.lattice(j).count;
        let (inner, outer) = (self.counts[j as usize - 1], self.counts[j as usize - 1 - bb]);
        let mut b = LevelBlock { level: j, lo: [0; AXES], hi: [0; AXES] };
        for k in 0..AXES {
            let e = 1usize << (inner[k] - outer[k]);
            b.lo[k] = (c[k] * e).min(count[k]);
            b.hi[k] = ((c[k] + 1) * e).min(count[k]);
        }
        vec![b]
    }

    /// Calls `f` with the coordinates of every point of `b` (the slots that hold one), in C
    /// order of its lattice.
    pub fn for_each_point(&self, b: &LevelBlock, f: impl FnMut([usize; AXES])) {
        self.for_each_point_every(b, 1, f)
    }

    /// As [`for_each_point`](Self::for_each_point), in every `every`-th plane of the first axis
    /// only (a sample).
    pub fn for_each_point_every(&self, b: &LevelBlock, every: usize, mut f: impl FnMut([usize; AXES])) {
        let l = self.lattice(b.level);
        let at = |k: usize, i: usize| l.start[k] + l.step[k] * i;
        for i0 in (b.lo[0]..b.hi[0]).filter(|&i| self.valid(0, at(0, i))).step_by(every) {
            for i1 in (b.lo[1]..b.hi[1]).filter(|&i| self.valid(1, at(1, i))) {
                for i2 in (b.lo[2]..b.hi[2]).filter(|&i| self.valid(2, at(2, i))) {
                    f([at(0, i0), at(1, i1), at(2, i2)]);
                }
            }
        }
    }

    /// Per axis, how many of `b`'s slots hold points: its points are their product.
    pub fn point_counts(&self, b: &LevelBlock) -> [usize; AXES] {
        let l = self.lattice(b.level);
        std::array::from_fn(|k| (b.lo[k]..b.hi[k]).filter(|&i| self.valid(k, l.start[k] + l.step[k] * i)).count())
    }

    /// The axes of level `j` ordered so that its points lie nearest each other along the last:
    /// axes of one point first, then the others by their points' step along them, largest
    /// first (ties in axis order).
    pub fn dense_axes(&self, j: u32) -> [usize; AXES] {
        let l = self.lattice(j);
        let mut axes = [0, 1, 2];
        axes.sort_by_key(|&k| (l.count[k] > 1, std::cmp::Reverse(l.step[k]), k));
        axes
    }

    /// The box of coordinates (half-open, per axis) a level block's slots span.
    pub fn block_extent(&self, b: &LevelBlock) -> ([usize; AXES], [usize; AXES]) {
        let l = self.lattice(b.level);
        (
            std::array::from_fn(|k| l.start[k] + l.step[k] * b.lo[k]),
            std::array::from_fn(|k| l.start[k] + l.step[k] * (b.hi[k].max(b.lo[k] + 1) - 1) + 1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coordinates of every index of the array.
    fn points(g: &Geometry) -> Vec<[usize; AXES]> {
        let s = g.shape3();
        let mut out = Vec::new();
        for x0 in 0..s[0] {
            for x1 in 0..s[1] {
                for x2 in 0..s[2] {
                    out.push([g.coordinate(0, x0), g.coordinate(1, x1), g.coordinate(2, x2)]);
                }
            }
        }
        out
    }

    fn layouts(shape: &[usize], bb: u32, order: [u8; AXES]) -> [Geometry; 2] {
        [Geometry::with_order(shape, bb, order).unwrap(), Geometry::anchored(shape, bb, order).unwrap()]
    }

    #[test]
    fn anchoring_puts_the_last_index_on_the_coarsest_lattice() {
        let g = Geometry::anchored(&[256, 9, 2], 6, Geometry::DEFAULT_ORDER).unwrap();
        assert_eq!(g.extent(), [257, 9, 2]);
        assert_eq!((g.coordinate(0, 255), g.coordinate(0, 254), g.coordinate(1, 8), g.coordinate(2, 1)), (256, 254, 8, 1));
        assert!(!g.valid(0, 255) && g.valid(0, 256) && g.valid(1, 8));
        assert_eq!(g.level_of([256, 0, 0]), 1);
        // Buffers keep a slot for the last index where the lattice of indices does not.
        let s = g.spacing(g.levels() - 3);
        assert_eq!(s, [2, 2, 2]);
        assert_eq!(g.buffer_shape(g.levels() - 3), [129, 5, 1]);
        assert_eq!(g.reduced_shape(g.levels() - 3), [128, 5, 1]);
        assert_eq!(g.coordinates(0, 2, 250, 257).collect::<Vec<_>>(), [250, 252, 254, 256]);
        assert_eq!(g.slots(0, 4, 248, 257), 3);
    }

    #[test]
    fn hz_indices_are_a_permutation_whose_prefixes_are_lattices() {
        for (shape, order) in [
            (vec![8usize, 8, 8], Geometry::DEFAULT_ORDER),
            (vec![8, 8, 8], [2, 0, 1]),
            (vec![4, 16], [0, 2, 1]),
            (vec![32], [1, 2, 0]),
            (vec![5, 7, 3], [1, 0, 2]),
            (vec![1, 9, 2], [2, 1, 0]),
        ] {
            for g in layouts(&shape, 6, order) {
                let mut seen = std::collections::HashSet::new();
                for x in points(&g) {
                    let h = g.hz_index(x);
                    assert!(h < 1u64 << g.levels(), "{shape:?} {x:?} {h}");
                    assert!(seen.insert(h), "{shape:?}: {x:?} repeats HZ index {h}");
                    // The prefix up to level j is the lattice of spacing(j).
                    let j = g.level_of(x);
                    let s = g.spacing(j);
                    assert!((0..AXES).all(|k| x[k] % s[k] == 0));
                    if j > 0 {
                        let s = g.spacing(j - 1);
                        assert!((0..AXES).any(|k| x[k] % s[k] != 0));
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_partition_every_level() {
        for (shape, bb, order) in [
            (vec![16usize, 16, 16], 6u32, Geometry::DEFAULT_ORDER),
            (vec![16, 16, 16], 6, [2, 1, 0]),
            (vec![12, 20], 6, [0, 2, 1]),
            (vec![100], 6, Geometry::DEFAULT_ORDER),
            (vec![9, 17, 33], 7, [1, 2, 0]),
        ] {
            for g in layouts(&shape, bb, order) {
                let mut held = std::collections::HashMap::new();
                for blk in 0..g.blocks() {
                    for b in g.block(blk) {
                        g.for_each_point(&b, |x| {
                            assert!((0..AXES).all(|k| g.valid(k, x[k])));
                            assert_eq!(g.level_of(x), b.level);
                            // A block holds a run of HZ indices 2^bb long; block 0 the first
                            // 2^fbl (2^bb unanchored).
                            let h = g.hz_index(x);
                            assert_eq!(if h >> g.first_block_levels() == 0 { 0 } else { h >> bb }, blk, "{shape:?} {x:?}");
                            assert!(held.insert(x, blk).is_none());
                        });
                    }
                }
                assert_eq!(held.len(), shape.iter().product::<usize>());
                assert!(points(&g).iter().all(|x| held.contains_key(x)));
            }
        }
    }

    #[test]
    fn bitmask_halves_every_axis_last() {
        let g = Geometry::new(&[64, 64, 64], 10).unwrap();
        assert_eq!(g.bitmask(), "V012012012012012012");
        assert_eq!(g.reduced_shape(g.levels() - 3), [32, 32, 32]);
        assert_eq!(g.reduced_shape(g.levels() - 6), [16, 16, 16]);
        let g = Geometry::new(&[10, 300], 10).unwrap();
        assert_eq!(g.levels(), 4 + 9);
        assert_eq!(g.reduced_shape(g.levels() - 2), [1, 5, 150]);
        // Another order changes which axis each level of a round refines, not where rounds end.
        let g = Geometry::with_order(&[64, 64, 64], 10, [2, 0, 1]).unwrap();
        assert_eq!(g.bitmask(), "V201201201201201201");
        assert_eq!(g.reduced_shape(g.levels() - 3), [32, 32, 32]);
        assert_eq!(g.reduced_shape(g.levels() - 1), [64, 32, 64]);
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(Geometry::new(&[], 10).is_err());
        assert!(Geometry::new(&[1, 2, 3, 4], 10).is_err());
        assert!(Geometry::new(&[0, 4], 10).is_err());
        assert!(Geometry::new(&[4, 4], 2).is_err());
        assert!(Geometry::new(&[1 << 20, 1 << 20, 1 << 20], 10).is_err());
        assert!(Geometry::with_order(&[4, 4], 6, [0, 1, 1]).is_err());
        assert!(Geometry::with_order(&[4, 4], 6, [0, 1, 3]).is_err());
    }
}
