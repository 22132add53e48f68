//! Compressed HZ levels (docs/format.md section 17).
//!
//! Level `j` refines one axis: its points sit halfway between points of coarser levels along
//! that axis, so each is predicted by cubic interpolation from the four coarser neighbours
//! along it (fewer near edges and where adaptive resolution left neighbours out; towards an
//! anchored last index, the polynomial through the true positions), quantized against the
//! bound and coded. The encoder predicts from values as the decoder rebuilds them, so every
//! stored point is within the bound at every resolution it appears in, and a level depends only
//! on coarser ones: the blocks of a level decode independently, in parallel, and a
//! reduced-resolution or region read decodes only the blocks it needs.
//!
//! Each block is one payload: its symbols under its level's coders, then the values kept
//! exactly. A level's coder statistics are shared by all its blocks and stored once, in the
//! index (SLE): a Huffman codebook (the payload then through zstd where that makes it smaller),
//! or, where a sample says it comes out enough smaller and it does, the codec's context-modelled
//! coder with its tables. Points predicted from one side only (line ends of unanchored layouts)
//! get a Huffman codebook of their own where that is smaller, and a block whose residuals are
//! all zero is its counts alone. Payloads are stored in HZ order, so the blocks of a reduced
//! resolution are a prefix of the data.

use crate::geometry::{Geometry, LevelBlock, AXES};
use crate::resolution::ResolutionMap;
use amrzip_codec::stages::{
    crc32, entropy_bits, gather, lagrange, put_varint, zstd_compress, ChunkBox, Codebook, ContextCoder, Histogram, Quantizer,
    DEFAULT_RADIUS,
};
use amrzip_codec::{ByteReader, CodecError, Config, DType, Element, ErrorBound, Result};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Version 5 stores a block's symbols in snake order (`SymbolOrder::Snake`); version 4 a spline
/// per level, a block's symbols densest axis last, block lengths as varints and blocks of zero
/// residuals as length 0 alone (17.2, 17.3); version 3 the axis order, anchoring and a bitmap of
/// the stored blocks; version 2 coded one-sided points apart. Indexes of versions 1 to 4 (cubic
/// everywhere and symbols in C order before 4; versions 1 and 2 in the default order,
/// unanchored) are still read.
const MAGIC: &[u8; 8] = b"AMRZHZ05";
const MAGIC_V4: &[u8; 8] = b"AMRZHZ04";
const MAGIC_V3: &[u8; 8] = b"AMRZHZ03";
const MAGIC_V2: &[u8; 8] = b"AMRZHZ02";
const MAGIC_V1: &[u8; 8] = b"AMRZHZ01";
/// Payload flag of a block whose every symbol is a zero residual, with no exact values.
const ALL_ZERO: u8 = 4;
/// Payload flag of a context-coded block through zstd (as flag 1 is of a Huffman-coded one).
const CONTEXT_ZSTD: u8 = 5;
/// The predictor byte of indexes before version 4: cubic at every level.
const CUBIC: u8 = 1;
const ZSTD_LEVEL: i32 = 1;
/// The residual-0 symbol and the alphabet of the quantizer's symbols.
const ZERO: u16 = DEFAULT_RADIUS as u16;
const ALPHABET: usize = 2 * DEFAULT_RADIUS as usize;
/// Levels of fewer symbols keep Huffman codes: context tables would outweigh what they save.
const CONTEXT_MIN_SYMBOLS: usize = 1 << 14;
/// The context coder is tried where the sample promises this much less than Huffman codes and
/// it does: in the finest round of levels, the round before it, and the rounds before that (the
/// levels of 1/64 and coarser reads, which every reduced read decodes). Coarser levels must gain
/// more, as they are decoded more often: in the finest round at 5%, the turbulent benchmark
/// field at 1e-2 came out 2.7% larger (its finest level kept Huffman codes); at 1% everywhere,
/// its 1/64 reads took 1.6x as long for 1-2% fewer bytes. Each symbol order that puts nearer
/// neighbours in the contexts (densest axis last, then snaking rows) made the context coder
/// gain more and take more coarse levels: with snaking rows and 10% for the coarsest rounds,
/// the cosmology field's 1/64 read at 1e-4 took 4.1 ms against 2.9 ms at 15%, for 0.24% fewer
/// bytes (the smooth field's 4.2 against 3.6 ms, for 3.8% fewer).
const CONTEXT_GAINS: [f64; 3] = [0.99, 0.95, 0.85];
/// Points of the sub-box on which each level-bound tuning is tried (`TUNINGS`): the
/// tuning a 96^3 box chose agreed with whole-array trials in 13 of the 15 benchmark cases
/// (a 64^3 box in 12); the two others were at rel 1e-2, 3-6% larger. Arrays up to twice
/// this are tried whole.
const TUNING_TRIAL_POINTS: usize = 96 * 96 * 96;
/// Both splines are tried on every this many planes of every block of a level: whole blocks
/// as a sample missed the sparse peaks of a density field, where the choice is made. Levels of
/// fewer than `SPLINE_SAMPLE_MIN` points are tried whole (order-0 entropies of a few thousand
/// widely spread residuals say little).
const SPLINE_SAMPLE_PLANES: usize = 8;
const SPLINE_SAMPLE_MIN: usize = 1 << 18;
/// Symbols per sampled run, and runs sampled per level, for the context coder's estimate.
const SAMPLE_RUN: usize = 4096;
const SAMPLE_RUNS: usize = 64;

/// Level-wise bounds (QoZ, as the codec's interpolation): the points of a level whose spacing
/// along its refined axis is `2^(l-1)` are coded within `eb / min(alpha^(l-1), beta)`. Coarse
/// points anchor every finer prediction, so precision there pays back downstream. The tuning is
/// stored as its index. The writer tries each on a centred sub-box of the array (anchored
/// layouts: the sub-box's line ends are interpolated as the array's are); with resolution maps
/// it takes the first. Rough fields want the coarse levels no tighter (the second: 1-3.5%
/// smaller on the turbulent fields, and on the cosmology and lognormal ones below 1e-2), smooth
/// ones the first (the smooth field at 1e-3, 1.5x smaller than with the second).
const TUNINGS: [(f64, f64); 3] = [(1.5, 2.0), (1.0, 1.0), (2.0, 4.0)];

/// The bound of level `j`'s points under tuning `t`.
fn level_eb(g: &Geometry, j: u32, eb: f64, t: u8) -> f64 {
    let (alpha, beta) = TUNINGS[t as usize];
    let l = if j == 0 { 64 } else { g.spacing(j)[g.axis(j)].trailing_zeros() + 1 };
    eb / (1..l).fold(1.0f64, |d, _| (d * alpha).min(beta))
}

/// How a level's points are interpolated from their coarser neighbours along its axis. Cubic
/// wins on smooth fields; linear where the field is rough at the level's spacing, as the fine
/// levels of density fields with sharp peaks (cosmology: 6% smaller at 1e-2, 2.6% at 1e-3),
/// whose cubic's far neighbours add more error than they remove. The codec makes the same
/// choice per array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spline {
    Linear = 0,
    Cubic = 1,
}

impl Spline {
    fn from_code(code: u8) -> Option<Spline> {
        match code {
            0 => Some(Spline::Linear),
            1 => Some(Spline::Cubic),
            _ => None,
        }
    }
}

/// A level's coder, shared by its blocks.
enum Coder {
    // Boxed: a codebook's tables are several times the other variants' size.
    Huffman(Box<Codebook>),
    Context(ContextCoder),
    /// Block 0 as one codec stream (see `encode`): nothing shared to store.
    Stream,
}

impl Coder {
    fn kind(&self) -> u8 {
        match self {
            Coder::Huffman(_) => 1,
            Coder::Context(_) => 2,
            Coder::Stream => 3,
        }
    }

    fn stored(&self) -> Vec<u8> {
        match self {
            Coder::Huffman(b) => book_bytes(b),
            Coder::Context(c) => c.stored(),
            Coder::Stream => Vec::new(),
        }
    }
}

/// A Huffman codebook as the index stores it.
fn book_bytes(book: &Codebook) -> Vec<u8> {
    let mut out = Vec::new();
    book.write(&mut out);
    out
}

/// Per axis, the coordinates of points on the lattice of spacing `s` in the box `lo..hi`.
fn lattice_coordinates(g: &Geometry, s: [usize; AXES], lo: [usize; AXES], hi: [usize; AXES]) -> [Vec<usize>; AXES] {
    std::array::from_fn(|k| g.coordinates(k, s[k], lo[k].div_ceil(s[k]) * s[k], hi[k]).collect())
}

/// The lattice of block 0 (every point of levels up to `first_block_levels`) as a C-order array
/// of `buffer_shape(first_block_levels)`, from a view at a level no coarser.
fn gather_first<T: Element>(g: &Geometry, v: View<T>) -> Vec<T> {
    let c = lattice_coordinates(g, g.spacing(g.first_block_levels()), [0; AXES], g.extent());
    let mut out = Vec::with_capacity(c.iter().map(Vec::len).product());
    for &x0 in &c[0] {
        for &x1 in &c[1] {
            // Safety: lattice points of the array, inside the view.
            out.extend(c[2].iter().map(|&x2| unsafe { *v.ptr.add(v.offset([x0, x1, x2])) }));
        }
    }
    out
}

/// Writes block 0's lattice `values` into `v`: the points in its box on its own lattice (a read
/// coarser than block 0 keeps only those).
fn scatter_first<T: Element>(g: &Geometry, values: &[T], v: View<T>) {
    let c = lattice_coordinates(g, g.spacing(g.first_block_levels()), [0; AXES], g.extent());
    let on = |x: usize, k: usize| x & ((1usize << v.shift[k]) - 1) == 0;
    let mut i = 0;
    for &x0 in &c[0] {
        for &x1 in &c[1] {
            for &x2 in &c[2] {
                let x = [x0, x1, x2];
                if v.holds(x) && (0..AXES).all(|k| on(x[k], k)) {
                    // Safety: a lattice point of the array on the view's lattice.
                    unsafe { *v.ptr.add(v.offset(x)) = values[i] };
                }
                i += 1;
            }
        }
    }
}

fn corrupt(message: impl Into<String>) -> CodecError {
    CodecError::Corrupt(message.into())
}

/// A C-order buffer of the array subsampled on the lattice of some level over a box `lo..hi` of
/// coordinates (`lo` on that lattice): along each axis, the lattice's coordinates that hold
/// points, back to back (an anchored last index right after the interior ones).
#[derive(Clone, Copy)]
struct View<T> {
    ptr: *mut T,
    strides: [usize; AXES],
    shift: [u32; AXES],
    /// Per axis, the slot of the anchored last index counted from coordinate 0 (`usize::MAX`
    /// unanchored): a coordinate's slot is `min(c >> shift, cap)`.
    cap: [usize; AXES],
    lo_slot: [usize; AXES],
    lo: [usize; AXES],
    hi: [usize; AXES],
}

// Safety: blocks of one level write disjoint points and read only points of coarser levels,
// which no one writes meanwhile (see `walk`).
unsafe impl<T: Send> Send for View<T> {}
unsafe impl<T: Send> Sync for View<T> {}

impl<T> View<T> {
    /// The whole array at `level`.
    fn new(g: &Geometry, level: u32, buffer: &mut [T]) -> View<T> {
        View::boxed(g, level, ([0; AXES], g.extent()), buffer)
    }

    /// The box `lo..hi` of coordinates at `level` (`lo` a multiple of the level's spacing).
    fn boxed(g: &Geometry, level: u32, (lo, hi): ([usize; AXES], [usize; AXES]), buffer: &mut [T]) -> View<T> {
        let shape = box_shape(g, level, lo, hi);
        assert_eq!(buffer.len(), shape.iter().product::<usize>(), "buffer is not the box at level {level}");
        let s = g.spacing(level);
        let shift = s.map(|s| s.trailing_zeros());
        let cap: [usize; AXES] = std::array::from_fn(|k| if g.anchor(k).is_some() { g.interior(k).div_ceil(s[k]) } else { usize::MAX });
        View {
            ptr: buffer.as_mut_ptr(),
            strides: [shape[1] * shape[2], shape[2], 1],
            shift,
            cap,
            lo_slot: std::array::from_fn(|k| (lo[k] >> shift[k]).min(cap[k])),
            lo,
            hi,
        }
    }

    #[inline(always)]
    fn holds(&self, x: [usize; AXES]) -> bool {
        (0..AXES).all(|k| self.lo[k] <= x[k] && x[k] < self.hi[k])
    }

    #[inline(always)]
    fn offset(&self, x: [usize; AXES]) -> usize {
        ((x[0] >> self.shift[0]).min(self.cap[0]) - self.lo_slot[0]) * self.strides[0]
            + ((x[1] >> self.shift[1]).min(self.cap[1]) - self.lo_slot[1]) * self.strides[1]
            + ((x[2] >> self.shift[2]).min(self.cap[2]) - self.lo_slot[2]) * self.strides[2]
    }
}

/// Slots per axis of a buffer of the lattice of `level` over the box `lo..hi` (`lo` on it).
fn box_shape(g: &Geometry, level: u32, lo: [usize; AXES], hi: [usize; AXES]) -> [usize; AXES] {
    let s = g.spacing(level);
    std::array::from_fn(|k| g.slots(k, s[k], lo[k], hi[k]))
}

/// How `walk` predicts the points of a level block, and every how many planes of its first
/// axis it visits (1 for all, more for a sample).
#[derive(Clone, Copy)]
struct Walk {
    spline: Spline,
    every: usize,
}

/// Visits the stored points of `b` in C order as `how` says, each with its prediction from
/// coarser levels; a point outside the view's box is visited as `None` (no prediction: its
/// neighbours may lie outside too), so that a reader still takes its symbol.
///
/// Safety: `v` is at a level no coarser than `b.level`; the caller lets no one else write the
/// points of `b`, nor any point of a level at least `b.level`'s that this reads. A point of the
/// box needs its neighbours in the box (a reader's box holds what its region's points need).
unsafe fn walk<T: Element>(
    g: &Geometry,
    map: Option<&ResolutionMap>,
    b: &LevelBlock,
    v: View<T>,
    how: Walk,
    mut visit: impl FnMut(Option<*mut T>, f64, bool),
) {
    if b.is_empty() {
        return;
    }
    if b.level == 0 {
        if map.is_none_or(|m| m.keeps(g, [0; AXES])) {
            visit(v.holds([0; AXES]).then(|| v.ptr.add(v.offset([0; AXES]))), 0.0, false);
        }
        return;
    }
    let a = g.axis(b.level);
    let s = g.spacing(b.level)[a];
    let (interior, anchor) = (g.interior(a), g.anchor(a));
    let o = ((s >> v.shift[a]) * v.strides[a]) as isize;
    let kept = |x: [usize; AXES], xa: usize| {
        let mut y = x;
        y[a] = xa;
        map.is_none_or(|m| m.keeps(g, y))
    };
    let cubic = how.spline == Spline::Cubic;
    g.for_each_point_every(b, how.every, |x| {
        if map.is_some_and(|m| !m.keeps(g, x)) {
            return;
        }
        let xa = x[a];
        // Most points: all four neighbours inside the interior and the view, none left out.
        if map.is_none() && xa >= 3 * s && xa + 3 * s < interior && xa - 3 * s >= v.lo[a] && xa + 3 * s < v.hi[a] && v.holds(x) {
            let p = v.ptr.add(v.offset(x));
            // The neighbours along a slow axis lie in other rows, which a level's short block
            // rows leave the hardware prefetcher no time to see coming: asked for a little
            // ahead, full reads took 10-25% less time and 1/8 reads of the 512^3 turbulent
            // field 22% less (one-off). A prefetch never faults, wherever it points.
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let ahead = p.wrapping_add(PREFETCH_AHEAD);
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_offset(-o) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_offset(o) as *const i8);
                if cubic {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_offset(-3 * o) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_offset(3 * o) as *const i8);
                }
            }
            let at = |k: isize| (*p.offset(k * o)).to_f64();
            return visit(Some(p), if cubic { cubic4(at) } else { 0.5 * (at(-1) + at(1)) }, false);
        }
        // The coarser points past `xa` along the axis: the next two of the lattice, the
        // anchored last index standing in for the first that holds no point.
        let next = |c: usize| if g.valid(a, c) { Some(c) } else { anchor.filter(|&e| e > xa) };
        let r1 = next(xa + s);
        let r3 = match r1 {
            Some(c) if c == xa + s => next(xa + 3 * s).filter(|&c3| c3 > c),
            _ => None,
        };
        let hb = kept(x, xa - s);
        let hc = r1.is_some_and(|c| kept(x, c));
        // Points without neighbours on both sides (line ends unanchored, and where a map leaves
        // points out) are extrapolated: their residuals are far larger than the others' (17.3).
        let one_sided = !(hb && hc);
        let ha = xa >= 3 * s && kept(x, xa - 3 * s);
        let hd = r3.is_some_and(|c| kept(x, c));
        // A read's box holds the neighbours of the points its region needs; a block's other
        // points in the box, whose neighbours it may not hold, are skipped like those outside.
        let (low, high) = (
            if ha { xa - 3 * s } else { xa - s },
            if hd {
                r3
            } else if hc {
                r1
            } else {
                None
            }
            .unwrap_or(xa),
        );
        if !v.holds(x) || low < v.lo[a] || high >= v.hi[a] {
            return visit(None, 0.0, one_sided);
        }
        let p = v.ptr.add(v.offset(x));
        let at = |k: isize| (*p.offset(k * o)).to_f64();
        // The anchored last index sits at its coordinate but counts at its index: nearer than
        // the stride, so the stencil's weights are the polynomial's through the true positions.
        if anchor.is_some_and(|e| e != interior && (r1 == Some(e) || r3 == Some(e))) {
            let (mut offsets, mut values, mut weights, mut len) = ([0.0f64; 4], [0.0f64; 4], [0.0f64; 4], 0);
            let far = |c: Option<usize>| c.filter(|_| cubic);
            for c in [far(ha.then(|| xa - 3 * s)), Some(xa - s), r1, far(r3.filter(|_| hd))].into_iter().flatten() {
                let mut y = x;
                y[a] = c;
                offsets[len] = g.index(a, c) as f64 - xa as f64;
                values[len] = (*v.ptr.add(v.offset(y))).to_f64();
                len += 1;
            }
            lagrange(&offsets[..len], &mut weights[..len]);
            // Summed term by term in order, so that encoder and decoder agree to the bit.
            let pred = weights[..len].iter().zip(&values).fold(0.0, |acc, (w, v)| acc + w * v);
            return visit(Some(p), pred, false);
        }
        let pred = match (hb, hc, ha, hd) {
            (true, true, ..) if !cubic => 0.5 * (at(-1) + at(1)),
            (true, true, true, true) => cubic4(at),
            (true, true, true, false) => (6.0 * at(-1) + 3.0 * at(1) - at(-3)) * 0.125,
            (true, true, false, true) => (3.0 * at(-1) + 6.0 * at(1) - at(3)) * 0.125,
            (true, true, false, false) => 0.5 * (at(-1) + at(1)),
            // Past the last point of a line (unanchored, IDX's padding: the line ends beyond the
            // array), extrapolated linearly from the two nearest on the side that is there, as
            // SZ3 does at a line's end. On the benchmark fields this beat both the nearest value
            // (smooth 1e-2: 1.4x the ratio) and a quadratic through three (cosmology 1e-2: 1.05x;
            // the quadratic won only on the smooth field at 1e-4).
            (true, false, true, _) => 1.5 * at(-1) - 0.5 * at(-3),
            (true, false, false, _) => at(-1),
            (false, true, _, true) => 1.5 * at(1) - 0.5 * at(3),
            (false, true, _, false) => at(1),
            (false, false, ..) => 0.0,
        };
        visit(Some(p), pred, one_sided);
    });
}

/// Values ahead of a point, along its row, whose neighbours `walk` prefetches (16-64 read as fast).
const PREFETCH_AHEAD: usize = 32;

/// The cubic through the four coarser neighbours at -3, -1, 1, 3 strides (`at`).
#[inline(always)]
fn cubic4(at: impl Fn(isize) -> f64) -> f64 {
    (9.0 * (at(-1) + at(1)) - at(-3) - at(3)) * 0.0625
}

/// The stored index of one array: its geometry, bound, resolution map, the codebooks of its
/// levels and where each block's payload lies in the data.
pub struct Index {
    pub geometry: Geometry,
    pub dtype: DType,
    /// The absolute error bound every stored point is within.
    pub eb: f64,
    /// Level-wise bounds, an index into `TUNINGS`.
    tuning: u8,
    pub map: Option<ResolutionMap>,
    /// Coder of block 0, then of each level after it (`None`: nothing coded).
    books: Vec<Option<Coder>>,
    /// The spline of block 0's walked levels, then of each level after it.
    splines: Vec<Spline>,
    /// How anchored layouts store a block's inner symbols (`stored_order`).
    order: SymbolOrder,
    /// Version 2: each level's one-sided points are coded apart, under `ends` (`None`: the
    /// level has none).
    split: bool,
    ends: Vec<Option<Codebook>>,
    /// The stored blocks in block order: number, offset in the data (the lengths before it),
    /// length, CRC-32. An anchored layout's padded extent holds many blocks past the array.
    table: Vec<Entry>,
}

#[derive(Clone, Copy)]
struct Entry {
    blk: u64,
    offset: u64,
    len: u32,
    crc: u32,
}

/// An encoded array: its index and its data (block payloads in HZ order).
pub struct Encoded {
    pub index: Vec<u8>,
    pub data: Vec<u8>,
    /// Blocks stored (the others are skipped: no point of them is kept).
    pub stored_blocks: usize,
}

impl Encoded {
    /// Index and data bytes.
    pub fn size(&self) -> usize {
        self.index.len() + self.data.len()
    }
}

fn book_of<'a>(books: &'a [Option<Coder>], g: &Geometry, level: u32) -> Option<&'a Coder> {
    books.get(group(g, level)).and_then(|b| b.as_ref())
}

/// The index's entry (coder, spline) of `level`: block 0's levels share the first.
fn group(g: &Geometry, level: u32) -> usize {
    level.saturating_sub(g.first_block_levels()) as usize
}

impl Index {
    /// How `walk` visits and predicts the points of `level`.
    fn walking(&self, level: u32) -> Walk {
        Walk { spline: self.splines[group(&self.geometry, level)], every: 1 }
    }
}

/// The order of a block's inner symbols in an anchored layout (blocks after 0; the others keep
/// walk order). The context coder's contexts are the residuals just before a symbol, so the
/// nearer those are in space, the fewer bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SymbolOrder {
    /// Walk order, C (versions 1 to 3).
    Walk,
    /// The level's `dense_axes`, the last fastest (version 4).
    Dense,
    /// As `Dense`, every other row and every other plane reversed, so that a row's first
    /// symbols follow its neighbour row's last instead of the far end of it (version 5; on the
    /// cosmology benchmark field at 1e-4, the finest levels took 3.4% less than in `Dense`
    /// order, about what cutting the level into blocks had cost against one run over it).
    Snake,
}

/// Where block `blk`'s inner symbols are stored in another order than the walk's: the level
/// block, its level's `dense_axes` and whether rows snake. `walk` goes in C order, which keeps
/// its reads near each other in memory (in the dense order writes ran 2.5x slower); the symbols
/// are transposed on the way.
fn stored_order(g: &Geometry, blk: u64, order: SymbolOrder) -> Option<(LevelBlock, [usize; AXES], bool)> {
    if order == SymbolOrder::Walk || !g.is_anchored() || blk == 0 {
        return None;
    }
    let b = g.block(blk).into_iter().next()?;
    Some((b, g.dense_axes(b.level), order == SymbolOrder::Snake))
}

/// Reorders a block's symbols between C order over its points (`counts` per axis) and the
/// stored order: the axes `axes`, the last fastest, with every other row and plane reversed if
/// `snake`. To it, or back from it with `back`. `None` when the symbols are not the block's
/// points.
fn transpose(symbols: &[u16], counts: [usize; AXES], axes: [usize; AXES], snake: bool, back: bool) -> Option<Vec<u16>> {
    if symbols.len() != counts.iter().product::<usize>() {
        return None;
    }
    let c_order = [counts[1] * counts[2], counts[2], 1];
    let [n0, n1, n2] = axes.map(|k| counts[k]);
    let [s0, s1, s2] = axes.map(|k| c_order[k]);
    let mut out = vec![0u16; symbols.len()];
    let mut i = 0;
    for a in 0..n0 {
        for row in 0..n1 {
            let b = if snake && a % 2 == 1 { n1 - 1 - row } else { row };
            let base = a * s0 + b * s1;
            let reversed = snake && (a * n1 + row) % 2 == 1;
            for c in 0..n2 {
                let j = base + if reversed { n2 - 1 - c } else { c } * s2;
                if back {
                    out[j] = symbols[i];
                } else {
                    out[i] = symbols[j];
                }
                i += 1;
            }
        }
    }
    Some(out)
}

/// A block's symbols: of the points predicted from both sides (in stored order, see
/// `stored_dense`), and of the one-sided ones (walk order); and the values kept exactly.
struct BlockSymbols<T> {
    blk: u64,
    inner: Vec<u16>,
    ends: Vec<u16>,
    exact: Vec<T>,
    /// Per symbol in walk order, whether it is an end symbol.
    one_sided: Vec<bool>,
}

impl<T: Clone> BlockSymbols<T> {
    /// The block with every symbol in the inner stream, in walk order.
    fn merged(&self) -> BlockSymbols<T> {
        let (mut inner, mut ends) = (self.inner.iter(), self.ends.iter());
        let all = self.one_sided.iter().map(|&e| *if e { ends.next() } else { inner.next() }.expect("a symbol a point")).collect();
        BlockSymbols { blk: self.blk, inner: all, ends: Vec::new(), exact: self.exact.clone(), one_sided: Vec::new() }
    }
}

/// One block's payload (17.3): a flag (0 Huffman bits as they are, 1 the same through zstd with
/// the raw length first, 2 context-coded, `CONTEXT_ZSTD` the same through zstd, `ALL_ZERO`), then the counts of inner symbols, end
/// symbols and exact values, the coded inner symbols, the coded end symbols, the exact values.
fn payload<T: Element>(flag: u8, coded: &[u8], ends: &[u8], b: &BlockSymbols<T>) -> Vec<u8> {
    if b.exact.is_empty() && b.inner.iter().chain(&b.ends).all(|&x| x == ZERO) {
        // Where the prediction is exact within the bound everywhere (fine levels at loose
        // bounds), a block is its counts alone.
        let mut out = vec![ALL_ZERO];
        put_varint(&mut out, b.inner.len() as u64);
        put_varint(&mut out, b.ends.len() as u64);
        return out;
    }
    let mut body = Vec::with_capacity(coded.len() + ends.len() + b.exact.len() * T::BYTES + 40);
    for n in [b.inner.len(), b.ends.len(), b.exact.len(), coded.len()] {
        put_varint(&mut body, n as u64);
    }
    body.extend_from_slice(coded);
    put_varint(&mut body, ends.len() as u64);
    body.extend_from_slice(ends);
    for &x in &b.exact {
        x.write_le(&mut body);
    }
    let mut out = Vec::with_capacity(body.len() + 11);
    // Huffman codes take a bit a symbol at least, which zstd packs where zero residuals run
    // long; context-coded inner symbols gain nothing from it, but their end symbols may.
    if flag == 0 || (flag == 2 && !b.ends.is_empty()) {
        let packed = zstd_compress(&body, ZSTD_LEVEL);
        if packed.len() + 10 < body.len() - body.len() / 32 {
            out.push(if flag == 0 { 1 } else { CONTEXT_ZSTD });
            put_varint(&mut out, body.len() as u64);
            out.extend_from_slice(&packed);
            return out;
        }
    }
    out.push(flag);
    out.extend_from_slice(&body);
    out
}

/// The bytes the context coder would take for `blocks`' symbols, from a sample of runs.
fn context_estimate(blocks: &[&[u16]]) -> f64 {
    let total: usize = blocks.iter().map(|b| b.len()).sum();
    let stride = (total / (SAMPLE_RUN * SAMPLE_RUNS)).max(1) * SAMPLE_RUN;
    let mut sample = Vec::new();
    for &b in blocks {
        for start in (0..b.len()).step_by(stride) {
            let end = (start + SAMPLE_RUN).min(b.len());
            sample.push((b, start..end, ((start + stride).min(b.len()) - start) as f64 / (end - start) as f64));
        }
    }
    ContextCoder::estimate(&sample, ZERO)
}

/// The bytes of a level's coding (`code_level`), its shared tables included.
fn coded_size(coder: &Coder, ends: &Option<Codebook>, payloads: &[Vec<u8>]) -> usize {
    coder.stored().len() + ends.as_ref().map_or(0, |e| book_bytes(e).len()) + payloads.iter().map(Vec::len).sum::<usize>()
}

/// Codes a level's blocks: the inner symbols by Huffman codes, or the context coder where a
/// sample says it takes less than `gain` times as much and it does; the end symbols by a
/// Huffman codebook of their own. Line ends are extrapolated,
/// and their residuals are spread wide where the others are mostly zero: one code for both
/// costs about half again as much (smooth 256^3 field at 1e-4, summed order-0 entropies of the
/// levels after block 0: 338 kB mixed, 213 kB apart).
fn code_level<T: Element + Sync>(coded: &[BlockSymbols<T>], gain: f64) -> Result<(Coder, Option<Codebook>, Vec<Vec<u8>>)> {
    let histogram = |symbols: &dyn Fn(&BlockSymbols<T>) -> &[u16]| {
        let mut h = Histogram::default();
        for b in coded {
            h.add(&Histogram::of(symbols(b)));
        }
        h
    };
    let ends_book = coded.iter().any(|b| !b.ends.is_empty()).then(|| Codebook::of(&histogram(&|b| &b.ends)));
    let ends: Vec<Vec<u8>> = coded
        .par_iter()
        .map(|b| {
            let mut bits = Vec::new();
            if let Some(book) = &ends_book {
                book.encode(&b.ends, &mut bits)?;
            }
            Ok(bits)
        })
        .collect::<Result<_>>()?;
    let book = Codebook::of(&histogram(&|b| &b.inner));
    let huffman: Vec<Vec<u8>> = coded
        .par_iter()
        .zip(&ends)
        .map(|(b, e)| {
            let mut bits = Vec::new();
            book.encode(&b.inner, &mut bits)?;
            Ok(payload(0, &bits, e, b))
        })
        .collect::<Result<_>>()?;
    let book = Coder::Huffman(Box::new(book));
    let huffman_size = coded_size(&book, &ends_book, &huffman);
    let symbols: Vec<&[u16]> = coded.iter().map(|b| &b.inner[..]).collect();
    if symbols.iter().map(|s| s.len()).sum::<usize>() >= CONTEXT_MIN_SYMBOLS && context_estimate(&symbols) < gain * huffman_size as f64 {
        // Tabled: the adaptive coder, which small levels would take, decodes a decision at a
        // time, and coarse levels are what every reduced read decodes (1/64 reads of the
        // cosmology field at 1e-4: 10.7 ms against 7.7 ms tabled; the coalesced advection file
        // is 4% larger without it).
        let (coder, segments) = ContextCoder::tabled(&symbols, ZERO);
        let payloads: Vec<Vec<u8>> = segments.iter().zip(coded).zip(&ends).map(|((seg, b), e)| payload(2, seg, e, b)).collect();
        let coder = Coder::Context(coder);
        if coded_size(&coder, &ends_book, &payloads) < huffman_size {
            return Ok((coder, ends_book, payloads));
        }
    }
    Ok((book, ends_book, huffman))
}

/// The spline whose residuals cost fewer bits (order-0 entropy, exact values at their size) on
/// a sample of the points of `blocks` of `level` (above block 0's), not yet coded in
/// `v`. A level reads only coarser ones, so the trial predicts exactly as coding will.
fn choose_spline<T: Element>(
    g: &Geometry,
    map: Option<&ResolutionMap>,
    level: u32,
    blocks: std::ops::Range<u64>,
    v: View<T>,
    eb: f64,
) -> Spline {
    let q = Quantizer::new(eb, DEFAULT_RADIUS);
    let blocks: Vec<u64> = blocks.collect();
    let every = if g.lattice(level).count.iter().product::<usize>() < SPLINE_SAMPLE_MIN { 1 } else { SPLINE_SAMPLE_PLANES };
    let cost = |spline: Spline| -> f64 {
        let how = Walk { spline, every };
        let (hist, exact) = blocks
            .par_iter()
            .map(|&blk| {
                let (mut symbols, mut exact) = (Vec::new(), 0usize);
                for lb in g.block(blk) {
                    // Safety: nothing is written, and the level's coarser points are final.
                    unsafe {
                        walk(g, map, &lb, v, how, |p, pred, one_sided| {
                            if !one_sided {
                                let p = p.expect("the encoder's view holds the whole array");
                                let s = q.quantize_value(*p, pred).0;
                                exact += (s == 0) as usize;
                                symbols.push(s);
                            }
                        })
                    };
                }
                (Histogram::of(&symbols), exact)
            })
            .reduce(
                || (Histogram::default(), 0),
                |(mut h, e), (h2, e2)| {
                    h.add(&h2);
                    (h, e + e2)
                },
            );
        entropy_bits(&hist.dense(ALPHABET)) + (exact * 8 * T::BYTES) as f64
    };
    if cost(Spline::Linear) < cost(Spline::Cubic) {
        Spline::Linear
    } else {
        Spline::Cubic
    }
}

/// Encodes `data` (C order, `g`'s shape) within `eb`, keeping the points `map` keeps (all
/// without one). Values at points not kept are never read. `data` is the work buffer: it ends
/// up holding the values as decoded.
pub fn encode<T: Element>(data: Vec<T>, g: &Geometry, map: Option<&ResolutionMap>, eb: f64) -> Result<Encoded> {
    if data.len() != g.shape3().iter().product::<usize>() {
        return Err(CodecError::InvalidInput(format!("{} values for an array of shape {:?}", data.len(), g.shape())));
    }
    if !(eb.is_finite() && eb >= 0.0) {
        return Err(CodecError::InvalidInput(format!("bound must be a finite number >= 0, got {eb}")));
    }
    if map.is_some() && g.is_anchored() {
        // A map's tiles and levels are the array's own (IDX's layout): AMR levels fill them.
        return Err(CodecError::InvalidInput("a resolution map needs the unanchored layout".into()));
    }
    if map.is_some() {
        return encode_with(data, g, map, eb, 0);
    }
    let tuning = if data.len() <= 2 * TUNING_TRIAL_POINTS {
        // Small: the trials are the encodings.
        let tried = (0..TUNINGS.len() as u8).map(|t| encode_with(data.clone(), g, None, eb, t)).collect::<Result<Vec<_>>>()?;
        return Ok(tried.into_iter().min_by_key(Encoded::size).expect("a tuning"));
    } else {
        let (sub, shape) = centred_box(&data, g, TUNING_TRIAL_POINTS);
        let layout = if g.is_anchored() { Geometry::anchored } else { Geometry::with_order };
        let sg = layout(&shape, g.block_bits(), g.order()).map_err(CodecError::InvalidInput)?;
        let sizes =
            (0..TUNINGS.len() as u8).map(|t| encode_with(sub.clone(), &sg, None, eb, t).map(|e| e.size())).collect::<Result<Vec<_>>>()?;
        (0..TUNINGS.len() as u8).min_by_key(|&t| sizes[t as usize]).expect("a tuning")
    };
    encode_with(data, g, None, eb, tuning)
}

/// The box of about `points` values (each axis cut to the same share) at the centre of `data`
/// (C order, `g`'s shape), and its shape.
fn centred_box<T: Element>(data: &[T], g: &Geometry, points: usize) -> (Vec<T>, Vec<usize>) {
    let n = g.shape3();
    let active = n.iter().filter(|&&k| k > 1).count().max(1) as f64;
    let share = (points as f64 / data.len() as f64).powf(1.0 / active).min(1.0);
    let e: [usize; AXES] = std::array::from_fn(|k| ((n[k] as f64 * share).ceil() as usize).clamp(1, n[k]));
    let b = ChunkBox { origin: (0..AXES).map(|k| (n[k] - e[k]) / 2).collect(), shape: e.to_vec() };
    (gather(data, &n, &b), e[AXES - g.dims()..].to_vec())
}

/// `encode` with the level-wise bounds of tuning `tuning`.
fn encode_with<T: Element>(mut data: Vec<T>, g: &Geometry, map: Option<&ResolutionMap>, eb: f64, tuning: u8) -> Result<Encoded> {
    let v = View::new(g, g.levels(), &mut data);
    let code_block = |blk: u64, spline: Spline| {
        let mut b = BlockSymbols { blk, inner: Vec::new(), ends: Vec::new(), exact: Vec::new(), one_sided: Vec::new() };
        for lb in g.block(blk) {
            let q = Quantizer::new(level_eb(g, lb.level, eb, tuning), DEFAULT_RADIUS);
            // Safety: blocks of one level write their own points only (see `walk`).
            unsafe {
                walk(g, map, &lb, v, Walk { spline, every: 1 }, |p, pred, one_sided| {
                    let p = p.expect("the encoder's view holds the whole array");
                    let (s, r) = q.quantize_value(*p, pred);
                    if s == 0 {
                        b.exact.push(*p);
                    }
                    *p = r;
                    if one_sided { &mut b.ends } else { &mut b.inner }.push(s);
                    b.one_sided.push(one_sided);
                })
            };
        }
        if let Some((lb, axes, snake)) = stored_order(g, blk, SymbolOrder::Snake) {
            debug_assert!(b.ends.is_empty(), "anchored layouts predict every point from both sides");
            b.inner = transpose(&b.inner, g.point_counts(&lb), axes, snake, false).expect("a symbol a point");
        }
        b
    };
    let (mut books, mut ends, mut splines) = (Vec::new(), Vec::new(), Vec::new());
    let mut payloads: Vec<(u64, Vec<u8>)> = Vec::new();
    let fbl = g.first_block_levels();
    // Block 0 is read whole by every read, so it is coded as one array by the codec, which
    // anchors both ends of each line: HZ levels anchor only the first, and the coarse levels'
    // last points, predicted one-sided, took most of block 0's bytes on smooth fields (3.7x the
    // codec's on a 255^3 field). Where the map leaves some of its points out, it is walked.
    if map.is_none_or(|m| m.levels().iter().all(|&l| l as u32 >= fbl)) {
        let lattice = gather_first(g, v);
        let shape = &g.buffer_shape(fbl)[AXES - g.dims()..];
        let config = Config::new(ErrorBound::Absolute(level_eb(g, fbl, eb, tuning)));
        let stream = amrzip_codec::compress(&lattice, shape, &config)?;
        let (decoded, _) = amrzip_codec::decompress::<T>(&stream, None)?;
        scatter_first(g, &decoded, v);
        let mut p = vec![3u8];
        p.extend_from_slice(&stream);
        payloads.push((0, p));
        books.push(Some(Coder::Stream));
        ends.push(None);
        splines.push(Spline::Cubic);
    }
    for level in g.first_block_levels()..=g.levels() {
        if level == fbl && !books.is_empty() {
            continue;
        }
        let blocks = g.level_blocks(level);
        let spline =
            if level == fbl { Spline::Cubic } else { choose_spline(g, map, level, blocks.clone(), v, level_eb(g, level, eb, tuning)) };
        let coded: Vec<BlockSymbols<T>> =
            blocks.into_par_iter().map(|blk| code_block(blk, spline)).filter(|b| !(b.inner.is_empty() && b.ends.is_empty())).collect();
        splines.push(spline);
        if coded.is_empty() {
            books.push(None);
            ends.push(None);
            continue;
        }
        // The context coder's tables decode a few times slower than Huffman codes, and the levels
        // before the finest round are what reduced reads decode: there it must gain more.
        let round = (g.levels() - level) / g.shape3().iter().filter(|&&n| n > 1).count().max(1) as u32;
        let gain = CONTEXT_GAINS[(round as usize).min(CONTEXT_GAINS.len() - 1)];
        let (mut coder, mut ends_book, mut level_payloads) = code_level(&coded, gain)?;
        if ends_book.is_some() {
            // Where the end symbols are not much wider spread than the rest (rough fields,
            // coalesced AMR levels), one code for all is smaller than a second codebook with its
            // bit a symbol. A sample of blocks chose badly (line ends gather in the blocks of the
            // far faces), so the level is coded both ways.
            let merged: Vec<BlockSymbols<T>> = coded.par_iter().map(BlockSymbols::merged).collect();
            let one = code_level(&merged, gain)?;
            if coded_size(&one.0, &one.1, &one.2) < coded_size(&coder, &ends_book, &level_payloads) {
                (coder, ends_book, level_payloads) = one;
            }
        }
        payloads.extend(coded.iter().map(|c| c.blk).zip(level_payloads));
        books.push(Some(coder));
        ends.push(ends_book);
    }
    let mut table = Vec::with_capacity(payloads.len());
    let mut data_out = Vec::with_capacity(payloads.iter().map(|p| p.1.len()).sum());
    for (blk, p) in &payloads {
        // A block of zero residuals is its table entry alone: its counts follow from its points
        // (on the smooth field at 1e-2, 602 of the 722 blocks, 5.8 kB of the 12.9).
        let p: &[u8] = if p[0] == ALL_ZERO { &[] } else { p };
        table.push(Entry { blk: *blk, offset: data_out.len() as u64, len: p.len() as u32, crc: crc32(p) });
        data_out.extend_from_slice(p);
    }
    let index = Index {
        geometry: g.clone(),
        dtype: T::DTYPE,
        eb,
        tuning,
        map: map.cloned(),
        books,
        splines,
        order: SymbolOrder::Snake,
        split: true,
        ends,
        table,
    };
    Ok(Encoded { index: index.to_bytes(), data: data_out, stored_blocks: payloads.len() })
}

impl Index {
    fn to_bytes(&self) -> Vec<u8> {
        let g = &self.geometry;
        let mut out = MAGIC.to_vec();
        out.push(g.dims() as u8);
        for &n in g.shape() {
            out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        out.push(self.dtype as u8);
        out.push(g.block_bits() as u8);
        out.extend_from_slice(&g.order());
        out.push(g.is_anchored() as u8);
        out.extend_from_slice(&self.eb.to_le_bytes());
        out.push(self.tuning);
        match &self.map {
            None => out.extend_from_slice(&0u32.to_le_bytes()),
            Some(m) => {
                out.extend_from_slice(&(m.tile() as u32).to_le_bytes());
                let packed = zstd_compress(m.levels(), 3);
                put_varint(&mut out, packed.len() as u64);
                out.extend_from_slice(&packed);
            }
        }
        put_varint(&mut out, self.books.len() as u64);
        debug_assert!(self.split && self.order == SymbolOrder::Snake, "indexes are written in the current version");
        for ((book, ends), &spline) in self.books.iter().zip(&self.ends).zip(&self.splines) {
            let bytes = book.as_ref().map(Coder::stored).unwrap_or_default();
            out.push(book.as_ref().map_or(0, Coder::kind));
            out.push(spline as u8);
            put_varint(&mut out, bytes.len() as u64);
            out.extend_from_slice(&bytes);
            let bytes = ends.as_ref().map(book_bytes).unwrap_or_default();
            put_varint(&mut out, bytes.len() as u64);
            out.extend_from_slice(&bytes);
        }
        // How many blocks are stored and, unless all are, which (a bitmap through zstd: a small
        // array's index is tens of bytes), then their lengths and checksums. Offsets are not
        // stored: blocks lie back to back in block order.
        put_varint(&mut out, self.table.len() as u64);
        if self.table.len() as u64 != g.blocks() {
            let mut bitmap = vec![0u8; (g.blocks() as usize).div_ceil(8)];
            for e in &self.table {
                bitmap[e.blk as usize / 8] |= 1 << (e.blk % 8);
            }
            let packed = zstd_compress(&bitmap, 3);
            put_varint(&mut out, packed.len() as u64);
            out.extend_from_slice(&packed);
        }
        for e in &self.table {
            put_varint(&mut out, e.len as u64);
            if e.len > 0 {
                out.extend_from_slice(&e.crc.to_le_bytes());
            }
        }
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and checks an index whose data holds `data_len` bytes.
    pub fn read(bytes: &[u8], data_len: u64) -> Result<Index> {
        let body = bytes.len().checked_sub(4).map(|n| &bytes[..n]).ok_or_else(|| corrupt("HZ index truncated"))?;
        let version = match bytes.get(..8) {
            Some(m) if m == &MAGIC[..] => 5,
            Some(m) if m == &MAGIC_V4[..] => 4,
            Some(m) if m == &MAGIC_V3[..] => 3,
            Some(m) if m == &MAGIC_V2[..] => 2,
            Some(m) if m == &MAGIC_V1[..] => 1,
            _ => return Err(corrupt("not an HZ index (bad magic)")),
        };
        let split = version >= 2;
        let symbol_order = match version {
            5 => SymbolOrder::Snake,
            4 => SymbolOrder::Dense,
            _ => SymbolOrder::Walk,
        };
        if crc32(body).to_le_bytes() != bytes[body.len()..] {
            return Err(corrupt("HZ index checksum mismatch"));
        }
        let mut r = ByteReader::new(&body[8..]);
        let dims = r.u8("HZ index dimensions")? as usize;
        if !(1..=AXES).contains(&dims) {
            return Err(corrupt(format!("HZ index has {dims} dimensions")));
        }
        let shape = (0..dims).map(|_| r.u64("HZ index shape").map(|n| n as usize)).collect::<Result<Vec<_>>>()?;
        let dtype = DType::from_code(r.u8("HZ index type")?).ok_or_else(|| corrupt("HZ index element type unknown"))?;
        let block_bits = r.u8("HZ index block size")? as u32;
        let (order, anchored) = if version >= 3 {
            let o = r.take(AXES, "HZ index axis order")?;
            let anchored = match r.u8("HZ index anchoring")? {
                0 => false,
                1 => true,
                a => return Err(corrupt(format!("HZ index anchoring {a} unknown"))),
            };
            ([o[0], o[1], o[2]], anchored)
        } else {
            (Geometry::DEFAULT_ORDER, false)
        };
        let layout = if anchored { Geometry::anchored } else { Geometry::with_order };
        let geometry = layout(&shape, block_bits, order).map_err(|e| corrupt(format!("HZ index: {e}")))?;
        let eb = r.f64("HZ index bound")?;
        if !(eb.is_finite() && eb >= 0.0) {
            return Err(corrupt(format!("HZ index bound {eb}")));
        }
        if version < 4 && r.u8("HZ index predictor")? != CUBIC {
            return Err(corrupt("HZ index predictor unknown"));
        }
        let tuning = r.u8("HZ index level bounds")?;
        if tuning as usize >= TUNINGS.len() {
            return Err(corrupt(format!("HZ index level bounds {tuning} unknown")));
        }
        let tile = r.u32("HZ index tile")? as usize;
        let map = if tile == 0 {
            None
        } else {
            let len = r.bounded_varint(r.remaining() as u64, "HZ resolution map length")? as usize;
            let tiles: usize = geometry.shape3().iter().map(|n| n.div_ceil(tile)).product();
            let frame = r.take(len, "HZ resolution map")?;
            // The frame says how much it holds: checked before anything is allocated for it.
            if !matches!(zstd::zstd_safe::get_frame_content_size(frame), Ok(Some(size)) if size == tiles as u64) {
                return Err(corrupt(format!("HZ resolution map does not hold the {tiles} tiles of the array")));
            }
            let levels =
                zstd::bulk::decompress(frame, tiles).map_err(|e| corrupt(format!("HZ resolution map does not decompress: {e}")))?;
            Some(ResolutionMap::new(&geometry, tile, levels).map_err(|e| corrupt(format!("HZ index: {e}")))?)
        };
        if map.is_some() && geometry.is_anchored() {
            return Err(corrupt("HZ index has a resolution map on an anchored layout"));
        }
        let groups = (geometry.levels() - geometry.first_block_levels() + 1) as u64;
        if r.varint("HZ codebook count")? != groups {
            return Err(corrupt(format!("HZ index should hold {groups} codebooks")));
        }
        let (mut books, mut ends, mut splines) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..groups {
            let kind = r.u8("HZ coder kind")?;
            splines.push(if version >= 4 {
                let code = r.u8("HZ level spline")?;
                Spline::from_code(code).ok_or_else(|| corrupt(format!("HZ level spline {code} unknown")))?
            } else {
                Spline::Cubic
            });
            let len = r.bounded_varint(r.remaining() as u64, "HZ coder length")? as usize;
            let bytes = r.take(len, "HZ coder")?;
            books.push(match kind {
                0 if len == 0 => None,
                1 => {
                    let (book, used) = Codebook::read(bytes, ALPHABET)?;
                    if used != len {
                        return Err(corrupt("HZ codebook length does not match its contents"));
                    }
                    Some(Coder::Huffman(Box::new(book)))
                }
                2 => Some(Coder::Context(ContextCoder::read(bytes)?)),
                3 if len == 0 => Some(Coder::Stream),
                _ => return Err(corrupt(format!("HZ coder kind {kind} unknown"))),
            });
            let len = if split { r.bounded_varint(r.remaining() as u64, "HZ end codebook length")? as usize } else { 0 };
            ends.push(if len == 0 {
                None
            } else {
                let (book, used) = Codebook::read(r.take(len, "HZ end codebook")?, ALPHABET)?;
                if used != len {
                    return Err(corrupt("HZ end codebook length does not match its contents"));
                }
                Some(book)
            });
        }
        let n = geometry.blocks() as usize;
        // The stored blocks: from the bitmap (version 3), or every block of the table (entries
        // of length 0 were skipped blocks).
        let count = if version >= 3 { r.bounded_varint(n as u64, "HZ stored block count")? as usize } else { n };
        let stored: Vec<u64> = if count < n {
            let len = r.bounded_varint(r.remaining() as u64, "HZ block bitmap length")? as usize;
            let frame = r.take(len, "HZ block bitmap")?;
            let want = n.div_ceil(8);
            if !matches!(zstd::zstd_safe::get_frame_content_size(frame), Ok(Some(size)) if size == want as u64) {
                return Err(corrupt(format!("HZ block bitmap does not hold the {n} blocks of the array")));
            }
            // An index may claim any size: the bitmap's room is asked for, not assumed.
            let mut bitmap = Vec::new();
            bitmap.try_reserve_exact(want).map_err(|_| corrupt(format!("HZ block bitmap of {want} bytes cannot be allocated")))?;
            bitmap.resize(want, 0u8);
            let got = zstd::bulk::decompress_to_buffer(frame, &mut bitmap[..])
                .map_err(|e| corrupt(format!("HZ block bitmap does not decompress: {e}")))?;
            if got != want {
                return Err(corrupt(format!("HZ block bitmap holds {got} bytes, not {want}")));
            }
            let stored: Vec<u64> = (0..n as u64).filter(|&b| bitmap[b as usize / 8] >> (b % 8) & 1 == 1).collect();
            if stored.len() != count {
                return Err(corrupt(format!("HZ block bitmap marks {} blocks, the index {count}", stored.len())));
            }
            stored
        } else {
            (0..n as u64).collect()
        };
        // Entries of 8 bytes (versions up to 3), or a varint length and, unless it is 0, the
        // checksum (a byte or more): checked against what is left before anything is allocated.
        let (fewest, exact) = if version >= 4 { (1, false) } else { (8, true) };
        let room = fewest * stored.len() as u64;
        if r.remaining() as u64 != room && (exact || (r.remaining() as u64) < room) {
            return Err(corrupt(format!(
                "HZ block table should hold {} entries in {}{room} bytes, found {}",
                stored.len(),
                if exact { "" } else { "at least " },
                r.remaining()
            )));
        }
        let mut table = Vec::with_capacity(stored.len());
        let mut end = 0u64;
        for blk in stored {
            let len = if version >= 4 { r.bounded_varint(u32::MAX as u64, "HZ block length")? as u32 } else { r.u32("HZ block length")? };
            // From version 4, a block of zero residuals alone is stored as length 0, nothing else.
            let zero = version >= 4 && len == 0;
            let crc = if zero { 0 } else { r.u32("HZ block checksum")? };
            if len == 0 && !zero {
                if version >= 3 {
                    return Err(corrupt(format!("HZ block {blk} is stored empty")));
                }
                continue;
            }
            if end + len as u64 > data_len {
                return Err(corrupt(format!("HZ block {blk} ({len} bytes at {end}) runs past the data's {data_len} bytes")));
            }
            if !geometry.is_block(blk) {
                return Err(corrupt(format!("HZ block {blk} is stored but names no block (its levels are block 0's)")));
            }
            if book_of(&books, &geometry, geometry.block_level(blk)).is_none() {
                return Err(corrupt(format!("HZ block {blk} is stored but its level has no codebook")));
            }
            table.push(Entry { blk, offset: end, len, crc });
            end += len as u64;
        }
        if end != data_len {
            return Err(corrupt(format!("HZ data holds {data_len} bytes, its blocks {end}")));
        }
        if r.remaining() != 0 {
            return Err(corrupt(format!("HZ block table has {} bytes past its last entry", r.remaining())));
        }
        Ok(Index { geometry, dtype, eb, tuning, map, books, splines, order: symbol_order, split, ends, table })
    }

    fn entry(&self, blk: u64) -> Option<&Entry> {
        self.table.binary_search_by_key(&blk, |e| e.blk).ok().map(|i| &self.table[i])
    }

    /// Byte range of block `blk` in the data (None: skipped).
    pub fn block_range(&self, blk: u64) -> Option<(u64, u64)> {
        self.entry(blk).map(|e| (e.offset, e.len as u64))
    }

    /// Blocks stored, of all.
    pub fn stored_blocks(&self) -> usize {
        self.table.len()
    }

    /// The coder of block 0 and of each level after it: "huffman", "context" or "none".
    pub fn coders(&self) -> Vec<&'static str> {
        self.books
            .iter()
            .map(|b| match b {
                None => "none",
                Some(Coder::Huffman(_)) => "huffman",
                Some(Coder::Context(_)) => "context",
                Some(Coder::Stream) => "stream",
            })
            .collect()
    }

    /// Bytes of the blocks of each level (block 0's at its finest level).
    pub fn level_bytes(&self) -> Vec<u64> {
        let g = &self.geometry;
        let mut out = vec![0u64; g.levels() as usize + 1];
        for e in &self.table {
            out[g.block_level(e.blk) as usize] += e.len as u64;
        }
        out
    }

    /// Per level up to `top`, the box of coordinates whose points a read of `region` (of the
    /// array's indices; the whole array without one) at `top` needs: the region, grown from
    /// `top` down by the three lattice steps interpolation reads along each level's refined
    /// axis, and out to an anchored last index where that reaches past the interior.
    fn need(&self, top: u32, region: Option<([usize; AXES], [usize; AXES])>) -> Result<Vec<([usize; AXES], [usize; AXES])>> {
        let g = &self.geometry;
        let (shape, extent) = (g.shape3(), g.extent());
        let (lo, hi) = region.unwrap_or(([0; AXES], shape));
        if (0..AXES).any(|k| lo[k] >= hi[k] || hi[k] > shape[k]) {
            return Err(CodecError::InvalidInput(format!("region {lo:?}..{hi:?} is empty or outside the array {shape:?}")));
        }
        let lo = std::array::from_fn(|k| g.coordinate(k, lo[k]));
        let hi = std::array::from_fn(|k| g.coordinate(k, hi[k] - 1) + 1);
        let mut need = vec![(lo, hi); top as usize + 1];
        for j in (1..=top).rev() {
            let (mut l, mut h) = need[j as usize];
            let a = g.axis(j);
            let s = g.spacing(j)[a];
            l[a] = l[a].saturating_sub(3 * s);
            h[a] = (h[a] + 3 * s).min(extent[a]);
            if h[a] > g.interior(a) {
                h[a] = extent[a];
            }
            need[j as usize - 1] = (l, h);
        }
        Ok(need)
    }

    /// The stored blocks to decode, coarsest first, for the array at `level` over `region` (the
    /// whole array when None) in a read that goes on to level `top`: those of each level up to
    /// `level` that meet the region grown for `top` by what interpolation reads of the coarser
    /// levels. Growing it for `top` from the first step makes the blocks decoded then hold every
    /// point the later steps read (a block decoded for `level` alone may hold points outside what
    /// `level` needs, decoded from coarser points it did not read).
    pub fn blocks_for(&self, level: u32, top: u32, region: Option<([usize; AXES], [usize; AXES])>) -> Result<Vec<u64>> {
        let g = &self.geometry;
        if level > top || top > g.levels() {
            return Err(CodecError::InvalidInput(format!(
                "level {level} (towards {top}) is finer than the array's finest, {}",
                g.levels()
            )));
        }
        let need = self.need(top, region)?;
        let mut blocks = Vec::new();
        if self.block_range(0).is_some() {
            blocks.push(0);
        }
        for j in g.first_block_levels() + 1..=level {
            let (l, h) = need[j as usize];
            for blk in g.level_blocks(j) {
                if self.block_range(blk).is_none() {
                    continue;
                }
                let (bl, bh) = g.block_extent(&g.block(blk)[0]);
                if (0..AXES).all(|k| bl[k] < h[k] && l[k] < bh[k]) {
                    blocks.push(blk);
                }
            }
        }
        Ok(blocks)
    }
}

/// Decodes one block's payload into `v`.
/// A stored block of HZ levels, parsed and checked, its symbols not yet decoded (so that two
/// blocks' context-coded symbols can be decoded at once, see `decode_blocks`).
struct Parsed<'a> {
    blk: u64,
    coder: &'a Coder,
    /// The block's payload after its packing byte, unpacked.
    body: std::borrow::Cow<'a, [u8]>,
    all_zero: bool,
    /// Whether the payload states `n` and `m` (a block stored as length 0 does not: it has
    /// a zero symbol for each point its walk visits).
    counted: bool,
    /// Symbols of inner and one-sided points, and of exact values.
    n: usize,
    m: usize,
    n_exact: usize,
    /// Where the coded symbols, one-sided points' symbols and exact values lie in `body`.
    bits: std::ops::Range<usize>,
    end_bits: std::ops::Range<usize>,
    exact: std::ops::Range<usize>,
}

/// A stored block: block 0 as one codec stream, decoded, or HZ levels.
enum Stored<'a, T> {
    Stream(Vec<T>),
    Levels(Parsed<'a>),
}

/// Checks stored block `blk` (`bytes`) against the index and parses it.
fn parse_block<'a, T: Element>(index: &'a Index, blk: u64, bytes: &'a [u8]) -> Result<Stored<'a, T>> {
    let g = &index.geometry;
    let &Entry { len, crc, .. } = index.entry(blk).ok_or_else(|| corrupt(format!("HZ block {blk} is not stored")))?;
    if bytes.len() != len as usize || crc32(bytes) != crc {
        return Err(corrupt(format!("HZ block {blk}: checksum mismatch")));
    }
    let coder = book_of(&index.books, g, g.block_level(blk)).ok_or_else(|| corrupt(format!("HZ block {blk}: no codebook")))?;
    if bytes.is_empty() {
        // Only versions 4 and 5 store a block as length 0 (`Index::read`): all zero residuals,
        // which a codec stream cannot be.
        if matches!(coder, Coder::Stream) {
            return Err(corrupt(format!("HZ block {blk}: a codec stream stored empty")));
        }
        let none = 0..0;
        return Ok(Stored::Levels(Parsed {
            blk,
            coder,
            body: Default::default(),
            all_zero: true,
            counted: false,
            n: 0,
            m: 0,
            n_exact: 0,
            bits: none.clone(),
            end_bits: none.clone(),
            exact: none,
        }));
    }
    let slots: usize = g.block(blk).iter().map(|b| b.slots()).sum();
    let flag = bytes.first().copied();
    let all_zero = index.split && flag == Some(ALL_ZERO);
    let context = flag == Some(2) || (index.split && flag == Some(CONTEXT_ZSTD));
    if !all_zero && (context != matches!(coder, Coder::Context(_)) || (flag == Some(3)) != matches!(coder, Coder::Stream)) {
        return Err(corrupt(format!("HZ block {blk}: coded otherwise than its level")));
    }
    if flag == Some(3) {
        let first_shape = g.buffer_shape(g.first_block_levels());
        let (values, shape) = amrzip_codec::decompress::<T>(&bytes[1..], Some(1)).map_err(|e| corrupt(format!("HZ block {blk}: {e}")))?;
        if shape != first_shape[AXES - g.dims()..] {
            return Err(corrupt(format!("HZ block {blk}: a stream of shape {shape:?}, not {:?}", &first_shape[AXES - g.dims()..])));
        }
        return Ok(Stored::Stream(values));
    }
    let body: std::borrow::Cow<[u8]> = if flag == Some(1) || (context && flag == Some(CONTEXT_ZSTD)) {
        let mut r = ByteReader::new(&bytes[1..]);
        let n = r.bounded_varint((slots * (2 + T::BYTES) + 64) as u64, "HZ block length")? as usize;
        let raw = zstd::bulk::decompress(&bytes[1 + r.position()..], n).map_err(|e| corrupt(format!("HZ block {blk}: {e}")))?;
        if raw.len() != n {
            return Err(corrupt(format!("HZ block {blk}: {} bytes decompressed, {n} expected", raw.len())));
        }
        raw.into()
    } else if matches!(flag, Some(0 | 2)) || all_zero {
        bytes[1..].into()
    } else {
        return Err(corrupt(format!("HZ block {blk}: unknown packing")));
    };
    let mut r = ByteReader::new(&body);
    let n = r.bounded_varint(slots as u64, "HZ block symbols")? as usize;
    let m = if index.split { r.bounded_varint((slots - n) as u64, "HZ block end symbols")? as usize } else { 0 };
    let (mut n_exact, mut bits, mut end_bits, mut exact) = (0, 0..0, 0..0, 0..0);
    if !all_zero {
        n_exact = r.bounded_varint((n + m) as u64, "HZ block exact values")? as usize;
        // The range of `body` the next `len` bytes take.
        let take = |r: &mut ByteReader, len: usize, what: &str| -> Result<std::ops::Range<usize>> {
            let at = r.position();
            r.take(len, what)?;
            Ok(at..at + len)
        };
        let len = r.bounded_varint(r.remaining() as u64, "HZ block bits")? as usize;
        bits = take(&mut r, len, "HZ block bits")?;
        if index.split {
            let len = r.bounded_varint(r.remaining() as u64, "HZ block end bits")? as usize;
            end_bits = take(&mut r, len, "HZ block end bits")?;
        }
        exact = take(&mut r, n_exact * T::BYTES, "HZ block exact values")?;
    }
    if r.remaining() != 0 {
        return Err(corrupt(format!("HZ block {blk}: {} bytes left over", r.remaining())));
    }
    Ok(Stored::Levels(Parsed { blk, coder, body, all_zero, counted: true, n, m, n_exact, bits, end_bits, exact }))
}

impl Parsed<'_> {
    /// The context coder of the block's inner points, if they are context-coded.
    fn context_coded(&self) -> Option<&ContextCoder> {
        match self.coder {
            Coder::Context(c) if !self.all_zero => Some(c),
            _ => None,
        }
    }
}

/// Decodes a parsed block of HZ levels into `v`; `inner`: its inner points' symbols when
/// already decoded (context-coded blocks, see `decode_blocks`).
fn decode_levels<T: Element>(index: &Index, p: &Parsed, inner: Option<Vec<u16>>, v: View<T>) -> Result<()> {
    let (g, blk) = (&index.geometry, p.blk);
    let fbl = g.first_block_levels();
    // Block 0 is walked into its own lattice, then the points a coarser read keeps are copied.
    let mut first = Vec::new();
    let target = if blk == 0 {
        first = vec![T::default(); g.buffer_shape(fbl).iter().product()];
        View::new(g, fbl, &mut first)
    } else {
        v
    };
    let (n, m, all_zero) = (p.n, p.m, p.all_zero);
    // A level without an end codebook codes its one-sided points with the others.
    let end_book = index.ends.get(g.block_level(blk).saturating_sub(fbl) as usize).and_then(Option::as_ref);
    let split = end_book.is_some();
    let (inner, ends) = if p.all_zero {
        (Vec::new(), Vec::new())
    } else {
        let inner = match (inner, p.coder) {
            (Some(inner), _) => inner,
            (None, Coder::Huffman(book)) => huffman_symbols(book, &p.body[p.bits.clone()], n)?,
            (None, Coder::Context(c)) => {
                let mut symbols = vec![0u16; n];
                c.decode(&p.body[p.bits.clone()], ZERO, ALPHABET, &mut symbols)?;
                symbols
            }
            (None, Coder::Stream) => unreachable!("checked against the flag in parse_block"),
        };
        let inner = match stored_order(g, blk, index.order) {
            Some((lb, axes, snake)) => {
                let counts = g.point_counts(&lb);
                transpose(&inner, counts, axes, snake, true).ok_or_else(|| {
                    corrupt(format!("HZ block {blk}: {n} symbols stored, its points take {}", counts.iter().product::<usize>()))
                })?
            }
            None => inner,
        };
        let ends = match (m, end_book) {
            (0, _) => Vec::new(),
            (_, Some(book)) => huffman_symbols(book, &p.body[p.end_bits.clone()], m)?,
            _ => return Err(corrupt(format!("HZ block {blk}: {m} end symbols but its level has no end codebook"))),
        };
        (inner, ends)
    };
    let (exact, n_exact) = (&p.body[p.exact.clone()], p.n_exact);
    let (mut k, mut k_end, mut e, mut bad) = (0usize, 0usize, 0usize, false);
    for b in g.block(blk) {
        let q = Quantizer::new(level_eb(g, b.level, index.eb, index.tuning), DEFAULT_RADIUS);
        // Safety: as in `encode`, blocks of one level write their own points only.
        unsafe {
            walk(g, index.map.as_ref(), &b, target, index.walking(b.level), |p, pred, one_sided| {
                let (stream, at) = if one_sided && split { (&ends, &mut k_end) } else { (&inner, &mut k) };
                let s = match stream.get(*at) {
                    _ if all_zero => ZERO,
                    Some(&s) => s,
                    None => {
                        bad = true;
                        return;
                    }
                };
                *at += 1;
                let value = if s != 0 {
                    p.map(|_| q.recover(s, pred))
                } else if e < n_exact {
                    e += 1;
                    Some(T::read_le(&exact[(e - 1) * T::BYTES..]))
                } else {
                    bad = true;
                    None
                };
                if let (Some(p), Some(value)) = (p, value) {
                    *p = value;
                }
            })
        };
    }
    if bad || (p.counted && (k != n || k_end != m)) || e != n_exact {
        return Err(corrupt(format!(
            "HZ block {blk}: {n} + {m} symbols and {n_exact} exact values stored, its points take {k} + {k_end} and {e}"
        )));
    }
    if blk == 0 {
        scatter_first(g, &first, v);
    }
    Ok(())
}

/// Decodes a parsed block into `v`.
fn decode_stored<T: Element>(index: &Index, stored: Stored<T>, v: View<T>) -> Result<()> {
    match stored {
        Stored::Stream(values) => {
            scatter_first(&index.geometry, &values, v);
            Ok(())
        }
        Stored::Levels(p) => decode_levels(index, &p, None, v),
    }
}

/// Decodes stored block `blk` (`bytes`) into `v`.
fn decode_block<T: Element>(index: &Index, blk: u64, bytes: &[u8], v: View<T>) -> Result<()> {
    decode_stored(index, parse_block::<T>(index, blk, bytes)?, v)
}

/// Decodes two stored blocks of one level into `v`, the symbols of context-coded ones at once.
fn decode_block_pair<T: Element>(index: &Index, blocks: [(u64, &[u8]); 2], v: View<T>) -> Result<()> {
    let [(a, a_bytes), (b, b_bytes)] = blocks;
    match (parse_block::<T>(index, a, a_bytes)?, parse_block::<T>(index, b, b_bytes)?) {
        (Stored::Levels(pa), Stored::Levels(pb)) if pa.context_coded().is_some() && pb.context_coded().is_some() => {
            let (mut sa, mut sb) = (vec![0u16; pa.n], vec![0u16; pb.n]);
            let coder = pa.context_coded().expect("matched above");
            coder.decode_pair([(&pa.body[pa.bits.clone()], &mut sa), (&pb.body[pb.bits.clone()], &mut sb)], ZERO, ALPHABET)?;
            decode_levels(index, &pa, Some(sa), v)?;
            decode_levels(index, &pb, Some(sb), v)
        }
        (sa, sb) => {
            decode_stored(index, sa, v)?;
            decode_stored(index, sb, v)
        }
    }
}

/// `n` symbols Huffman-decoded from `bits`.
fn huffman_symbols(book: &Codebook, bits: &[u8], n: usize) -> Result<Vec<u16>> {
    let mut symbols: Vec<MaybeUninit<u16>> = Vec::with_capacity(n);
    // Safety: `decode` writes every one of the n symbols on success.
    unsafe { symbols.set_len(n) };
    book.decode(bits, &mut symbols)?;
    Ok(symbols.into_iter().map(|s| unsafe { s.assume_init() }).collect())
}

/// Decodes `blocks` (coarsest first; `payload(blk)` gives each one's bytes) into `v`, the blocks
/// of one level in parallel.
fn decode_blocks<'a, T: Element>(
    index: &Index,
    blocks: &[u64],
    v: View<T>,
    payload: &(impl Fn(u64) -> Option<&'a [u8]> + Sync),
) -> Result<()> {
    let g = &index.geometry;
    let mut i = 0;
    while i < blocks.len() {
        let level = g.block_level(blocks[i]);
        let run = blocks[i..].iter().take_while(|&&b| g.block_level(b) == level).count();
        let bytes = |blk: u64| payload(blk).ok_or_else(|| corrupt(format!("HZ block {blk} was not read")));
        // Blocks go in pairs where that leaves every thread several (see `decode_block_pair`).
        let pairs = ContextCoder::pair_width(run);
        blocks[i..i + run].par_chunks(pairs).try_for_each(|pair| match *pair {
            [a, b] => decode_block_pair(index, [(a, bytes(a)?), (b, bytes(b)?)], v),
            [blk] => decode_block(index, blk, bytes(blk)?, v),
            _ => unreachable!("chunks of at most two"),
        })?;
        i += run;
    }
    Ok(())
}

/// Reads of whole arrays decode into the array at the level read; region reads of arrays larger
/// than this many points at that level decode the coarse levels into the whole array at the
/// finest level of at most this many points, and the finer ones into the box their region needs.
/// (One buffer of the whole array touched every page of it: a coarse level's points lie all over
/// it, and a 64^3 region of a 512^3 field took 45-95 ms, mostly page faults.) Unit tests take a
/// small limit, so that their small arrays go through both buffers.
const COARSE_POINTS: usize = if cfg!(test) { 1 << 9 } else { 1 << 21 };

/// A read of one array up to level `top` over a region, kept between steps so that a
/// progressive read decodes each block once: [`missing`](Self::missing) says which blocks a step
/// needs, [`read`](Self::read) decodes them and returns the region at that step's level.
pub struct Reader<T> {
    top: u32,
    /// The region asked for, of the array's indices, and its box of coordinates.
    request: Option<([usize; AXES], [usize; AXES])>,
    region: ([usize; AXES], [usize; AXES]),
    /// The whole array at `coarse_level`: every level up to it is decoded here.
    coarse_level: u32,
    coarse: Vec<T>,
    /// The box the finer levels need, at `top` (made when a step first goes past `coarse_level`).
    fine_box: ([usize; AXES], [usize; AXES]),
    fine: Vec<T>,
    decoded: std::collections::HashSet<u64>,
}

impl<T: Element> Reader<T> {
    /// A read of `index`'s array up to level `top` over `region` (the whole array when None).
    pub fn new(index: &Index, top: u32, region: Option<([usize; AXES], [usize; AXES])>) -> Result<Reader<T>> {
        let g = &index.geometry;
        if T::DTYPE != index.dtype {
            return Err(CodecError::InvalidInput(format!("array holds {}, not {}", index.dtype.name(), T::DTYPE.name())));
        }
        if top > g.levels() {
            return Err(CodecError::InvalidInput(format!("level {top} is finer than the array's finest, {}", g.levels())));
        }
        let need = index.need(top, region)?;
        let points = |j: u32| g.buffer_shape(j).iter().product::<usize>();
        let coarse_level = if region.is_none() || points(top) <= COARSE_POINTS {
            top
        } else {
            (0..=top).rev().find(|&j| points(j) <= COARSE_POINTS).unwrap_or(0).max(g.first_block_levels().min(top))
        };
        // The fine box: what the first level past `coarse_level` reads, on `top`'s lattice.
        let s = g.spacing(top);
        let (lo, hi) = need[coarse_level as usize];
        let fine_box = (std::array::from_fn(|k| lo[k] / s[k] * s[k]), hi);
        Ok(Reader {
            top,
            request: region,
            region: need[top as usize],
            coarse_level,
            coarse: zeroed(points(coarse_level))?,
            fine_box,
            fine: Vec::new(),
            decoded: Default::default(),
        })
    }

    pub fn top(&self) -> u32 {
        self.top
    }

    /// The stored blocks a read of level `level` needs that this one has not decoded, coarsest
    /// first (the blocks of a reduced resolution are a prefix of the data).
    pub fn missing(&self, index: &Index, level: u32) -> Result<Vec<u64>> {
        let mut blocks = index.blocks_for(level, self.top, self.request)?;
        blocks.retain(|b| !self.decoded.contains(b));
        Ok(blocks)
    }

    /// Decodes `blocks` (as [`missing`](Self::missing) gave them; `payload(blk)` their bytes) and
    /// returns the region at `level` (at most `top`), with its shape in the array's axes.
    pub fn read<'a>(
        &mut self,
        index: &Index,
        level: u32,
        blocks: &[u64],
        payload: impl Fn(u64) -> Option<&'a [u8]> + Sync,
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let g = &index.geometry;
        if level > self.top {
            return Err(CodecError::InvalidInput(format!("level {level} is finer than this read's finest, {}", self.top)));
        }
        let split = blocks.partition_point(|&b| g.block_level(b) <= self.coarse_level);
        let coarse = View::new(g, self.coarse_level, &mut self.coarse);
        decode_blocks(index, &blocks[..split], coarse, &payload)?;
        if level > self.coarse_level && self.fine.is_empty() {
            self.fine = zeroed(box_shape(g, self.top, self.fine_box.0, self.fine_box.1).iter().product())?;
            copy_lattice(g, self.coarse_level, coarse, View::boxed(g, self.top, self.fine_box, &mut self.fine));
        }
        let target = if level > self.coarse_level { View::boxed(g, self.top, self.fine_box, &mut self.fine) } else { coarse };
        decode_blocks(index, &blocks[split..], target, &payload)?;
        self.decoded.extend(blocks.iter().copied());
        if let Some(m) = &index.map {
            fill_holes(g, m, level, self.region, target, coarse);
        }
        Ok(extract(g, target, level, self.region))
    }
}

/// `n` zeros, or an error where they cannot be allocated (an index claiming a huge array would
/// otherwise abort the process). Zeroed pages come from the allocator untouched, so a buffer of
/// which a read writes a small part costs no more than that part.
fn zeroed<T: Element>(n: usize) -> Result<Vec<T>> {
    let fail = || CodecError::InvalidInput(format!("cannot allocate {n} values to read into"));
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| fail())?;
    // Safety: a non-zero size; all-zero bits are 0.0 for f32 and f64 (the only elements); the
    // pointer comes from the global allocator with this layout, as Vec requires.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        if p.is_null() {
            return Err(fail());
        }
        Ok(Vec::from_raw_parts(p, n, n))
    }
}

/// Copies the points of `from`'s lattice (the whole array at `level`) that `to`'s box holds.
fn copy_lattice<T: Element>(g: &Geometry, level: u32, from: View<T>, to: View<T>) {
    let c = lattice_coordinates(g, g.spacing(level), to.lo, to.hi);
    for &x0 in &c[0] {
        for &x1 in &c[1] {
            for &x2 in &c[2] {
                let x = [x0, x1, x2];
                // Safety: a point of the array in both views, which no one else touches now.
                unsafe { *to.ptr.add(to.offset(x)) = *from.ptr.add(from.offset(x)) };
            }
        }
    }
}

/// Points of `level`'s lattice in `region` that the map left out take the value of their source
/// (see [`ResolutionMap::source`]), which is stored and decoded: in `target` where its box holds
/// it, else in `coarse` (the whole array, on whose lattice such a source lies).
fn fill_holes<T: Element>(
    g: &Geometry,
    m: &ResolutionMap,
    level: u32,
    region: ([usize; AXES], [usize; AXES]),
    target: View<T>,
    coarse: View<T>,
) {
    let s = g.spacing(level);
    let first: [usize; AXES] = std::array::from_fn(|k| region.0[k].div_ceil(s[k]));
    let last: [usize; AXES] = std::array::from_fn(|k| region.1[k].div_ceil(s[k]));
    (first[0]..last[0]).into_par_iter().for_each(|i0| {
        for i1 in first[1]..last[1] {
            for i2 in first[2]..last[2] {
                let x = [i0 * s[0], i1 * s[1], i2 * s[2]];
                if !m.keeps(g, x) {
                    let src = m.source(g, x);
                    let from = if target.holds(src) { target } else { coarse };
                    // Safety: each thread writes its own rows and reads stored points only.
                    unsafe { *target.ptr.add(target.offset(x)) = *from.ptr.add(from.offset(src)) };
                }
            }
        }
    });
}

/// The points of `level`'s lattice of the array's indices inside `region` (coordinates), from
/// `v`, with their shape in the array's axes: an anchored last index counts where that lattice
/// has it.
fn extract<T: Element>(g: &Geometry, v: View<T>, level: u32, region: ([usize; AXES], [usize; AXES])) -> (Vec<T>, Vec<usize>) {
    let s = g.spacing(level);
    let mut c = lattice_coordinates(g, s, region.0, region.1);
    for (k, c) in c.iter_mut().enumerate() {
        if g.anchor(k).is_some_and(|e| e != g.interior(k) && !g.interior(k).is_multiple_of(s[k])) {
            c.retain(|&x| x < g.interior(k));
        }
    }
    let mut out = Vec::with_capacity(c.iter().map(Vec::len).product());
    for &x0 in &c[0] {
        for &x1 in &c[1] {
            // Safety: points of the region, which the view holds.
            out.extend(c[2].iter().map(|&x2| unsafe { *v.ptr.add(v.offset([x0, x1, x2])) }));
        }
    }
    (out, c.map(|c| c.len())[AXES - g.dims()..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(shape: &[usize]) -> Vec<f64> {
        let n: usize = shape.iter().product();
        let last = *shape.last().unwrap();
        (0..n)
            .map(|i| ((i % last) as f64 * 0.13).sin() * 3.0 + ((i / last) as f64 * 0.07).cos() + (i as f64 * 0.618).fract() * 0.01)
            .collect()
    }

    /// A xorshift generator from `seed`.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// `index`'s array at `level` over `region`, its blocks' bytes from `data`.
    fn read<T: Element>(index: &Index, data: &[u8], level: u32, region: Option<([usize; 3], [usize; 3])>) -> Result<(Vec<T>, Vec<usize>)> {
        let mut r = Reader::new(index, level, region)?;
        let blocks = r.missing(index, level)?;
        r.read(index, level, &blocks, |b| index.block_range(b).map(|(o, l)| &data[o as usize..(o + l) as usize]))
    }

    fn roundtrip(shape: &[usize], bb: u32, eb: f64, map: Option<ResolutionMap>) -> (Vec<f64>, Vec<f64>, Index, Encoded) {
        roundtrip_in(LAYOUTS[0], shape, bb, eb, map)
    }

    /// Layouts (axis order, anchored) for the tests that go through several.
    const LAYOUTS: [([u8; 3], bool); 4] =
        [(Geometry::DEFAULT_ORDER, false), ([2, 1, 0], false), (Geometry::DEFAULT_ORDER, true), ([1, 2, 0], true)];

    fn roundtrip_in(
        (order, anchored): ([u8; 3], bool),
        shape: &[usize],
        bb: u32,
        eb: f64,
        map: Option<ResolutionMap>,
    ) -> (Vec<f64>, Vec<f64>, Index, Encoded) {
        let g = if anchored { Geometry::anchored(shape, bb, order) } else { Geometry::with_order(shape, bb, order) }.unwrap();
        let data = field(shape);
        let enc = encode(data.clone(), &g, map.as_ref(), eb).unwrap();
        let index = Index::read(&enc.index, enc.data.len() as u64).unwrap();
        assert_eq!(index.geometry, g, "the index keeps the geometry, order included");
        assert_eq!(enc.stored_blocks, index.stored_blocks());
        let (out, got) = read::<f64>(&index, &enc.data, g.levels(), None).unwrap();
        assert_eq!(got, shape);
        (data, out, index, enc)
    }

    #[test]
    fn blocks_predicted_exactly_are_their_counts_and_line_ends_are_coded_apart() {
        // A linear ramp: interpolation is exact inside, extrapolation at line ends is too, so
        // every block of the levels after block 0 holds only zero residuals.
        let shape = [32usize, 32, 32];
        let g = Geometry::new(&shape, 6).unwrap();
        let ramp: Vec<f64> = (0..32 * 32 * 32).map(|i| (i % 32) as f64 * 0.5 + (i / 1024) as f64).collect();
        let enc = encode(ramp.clone(), &g, None, 1e-6).unwrap();
        let index = Index::read(&enc.index, enc.data.len() as u64).unwrap();
        let (first, len) = index.block_range(0).unwrap();
        assert_eq!(first, 0);
        // Each is its table entry alone: a length of 0, no checksum, no payload.
        for blk in 1..g.blocks() {
            assert_eq!(index.block_range(blk).unwrap().1, 0, "block {blk}");
        }
        assert_eq!(enc.data.len() as u64, len);
        assert!(enc.index.len() < 2 * g.blocks() as usize, "{} index bytes", enc.index.len());
        let (out, _) = read::<f64>(&index, &enc.data, g.levels(), None).unwrap();
        assert!(ramp.iter().zip(&out).all(|(a, b)| (a - b).abs() <= 1e-6));
        // Region and reduced reads take their zeros too.
        let (part, _) = read::<f64>(&index, &enc.data, g.levels() - 3, Some(([4, 0, 8], [20, 32, 30]))).unwrap();
        assert!(!part.is_empty());
        // On a curved field the one-sided points get a codebook of their own per level.
        let (data, out, index, _) = roundtrip(&[64, 64], 6, 1e-4, None);
        assert!(index.ends.iter().any(Option::is_some));
        assert!(data.iter().zip(&out).all(|(a, b)| (a - b).abs() <= 1e-4));
    }

    #[test]
    fn anchored_last_indices_leave_no_point_one_sided() {
        // A smooth field on axes of 2^k points: unanchored, the last point of every line at
        // every level is extrapolated; anchored, each is interpolated towards the last index.
        let shape = [32usize, 48, 64];
        let data: Vec<f64> = (0..32 * 48 * 64)
            .map(|i| {
                let (x, y, z) = ((i / (48 * 64)) as f64, ((i / 64) % 48) as f64, (i % 64) as f64);
                (0.11 * x).sin() * (0.07 * y).cos() + (0.09 * z).sin()
            })
            .collect();
        let mut sizes = Vec::new();
        for anchored in [false, true] {
            let g = if anchored { Geometry::anchored(&shape, 12, Geometry::DEFAULT_ORDER) } else { Geometry::new(&shape, 12) }.unwrap();
            let enc = encode(data.clone(), &g, None, 1e-5).unwrap();
            let index = Index::read(&enc.index, enc.data.len() as u64).unwrap();
            assert_eq!(index.ends.iter().all(Option::is_none), anchored);
            let (out, got) = read::<f64>(&index, &enc.data, g.levels(), None).unwrap();
            assert_eq!(got, shape);
            assert!(data.iter().zip(&out).all(|(a, b)| (a - b).abs() <= 1e-5));
            sizes.push(enc.index.len() + enc.data.len());
        }
        assert!(sizes[1] < sizes[0], "{sizes:?}");
        // Resolution maps are IDX's (AMR levels fill them): anchored layouts take none.
        let g = Geometry::anchored(&shape, 9, Geometry::DEFAULT_ORDER).unwrap();
        let map = ResolutionMap::from_regions(&g, 8, g.levels() - 3, &[]).unwrap();
        assert!(encode(data, &g, Some(&map), 1e-5).is_err());
    }

    #[test]
    fn every_point_is_within_the_bound() {
        for layout in LAYOUTS {
            for (shape, bb) in [(vec![33usize, 17, 20], 8u32), (vec![64, 64], 6), (vec![1000], 7), (vec![5, 3, 2], 6)] {
                let (data, out, _, _) = roundtrip_in(layout, &shape, bb, 1e-3, None);
                let worst = data.iter().zip(&out).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                assert!(worst <= 1e-3, "{shape:?} {layout:?}: {worst}");
            }
        }
    }

    #[test]
    fn reduced_and_region_reads_match_the_full_read() {
        let shape = [40usize, 36, 50];
        for layout in LAYOUTS {
            let (_, full, index, enc) = roundtrip_in(layout, &shape, 9, 1e-4, None);
            let g = &index.geometry;
            for drop in [0u32, 3, 6, 12] {
                let level = g.levels() - drop;
                let s = g.spacing(level);
                for region in [None, Some(([3, 10, 7], [21, 30, 49]))] {
                    let blocks = index.blocks_for(level, level, region).unwrap();
                    let (out, got) = read::<f64>(&index, &enc.data, level, region).unwrap();
                    let (lo, hi) = region.unwrap_or(([0; 3], shape));
                    let first: [usize; 3] = std::array::from_fn(|k| lo[k].div_ceil(s[k]));
                    let count: [usize; 3] = std::array::from_fn(|k| hi[k].div_ceil(s[k]) - first[k]);
                    assert_eq!(got, count);
                    for i0 in 0..count[0] {
                        for i1 in 0..count[1] {
                            for i2 in 0..count[2] {
                                let x = [(first[0] + i0) * s[0], (first[1] + i1) * s[1], (first[2] + i2) * s[2]];
                                let f = full[(x[0] * shape[1] + x[1]) * shape[2] + x[2]];
                                assert_eq!(out[(i0 * count[1] + i1) * count[2] + i2], f, "level {level} region {region:?}");
                            }
                        }
                    }
                    if region.is_some() || drop > 0 {
                        assert!(blocks.len() < index.stored_blocks(), "{} of {}", blocks.len(), index.stored_blocks());
                    }
                }
            }
        }
    }

    #[test]
    fn progressive_reads_decode_each_block_once_and_match_single_reads() {
        let shape = [40usize, 36, 50];
        for layout in LAYOUTS {
            let (_, _, index, enc) = roundtrip_in(layout, &shape, 9, 1e-4, None);
            let top = index.geometry.levels();
            let region = Some(([5, 0, 20], [30, 17, 50]));
            let mut r = Reader::<f64>::new(&index, top, region).unwrap();
            let mut seen = std::collections::HashSet::new();
            for level in [top - 9, top - 6, top - 3, top] {
                let blocks = r.missing(&index, level).unwrap();
                assert!(blocks.iter().all(|b| seen.insert(*b)), "a block decoded twice");
                let step =
                    r.read(&index, level, &blocks, |b| index.block_range(b).map(|(o, l)| &enc.data[o as usize..(o + l) as usize])).unwrap();
                assert_eq!(step, read::<f64>(&index, &enc.data, level, region).unwrap(), "level {level}");
            }
        }
    }

    #[test]
    fn adaptive_resolution_keeps_the_bound_where_stored_and_fills_the_rest() {
        let shape = [32usize, 32, 32];
        let g = Geometry::new(&shape, 8).unwrap();
        let map = ResolutionMap::from_regions(&g, 8, g.levels() - 6, &[([8, 0, 8], [16, 32, 24], g.levels())]).unwrap();
        let (data, out, index, enc) = roundtrip(&shape, 8, 1e-3, Some(map.clone()));
        let (_, _, full, full_enc) = roundtrip(&shape, 8, 1e-3, None);
        assert!(enc.data.len() * 2 < full_enc.data.len());
        // A region read (coarse levels whole, the rest in the region's box) shows the same.
        let (lo, hi) = ([4usize, 3, 2], [30usize, 29, 20]);
        let (part, _) = read::<f64>(&index, &enc.data, g.levels(), Some((lo, hi))).unwrap();
        let mut k = 0;
        for x0 in lo[0]..hi[0] {
            for x1 in lo[1]..hi[1] {
                for x2 in lo[2]..hi[2] {
                    assert_eq!(part[k], out[(x0 * 32 + x1) * 32 + x2]);
                    k += 1;
                }
            }
        }
        assert!(index.stored_blocks() < full.stored_blocks());
        for x0 in 0..32 {
            for x1 in 0..32 {
                for x2 in 0..32 {
                    let i = (x0 * 32 + x1) * 32 + x2;
                    let src = map.source(&g, [x0, x1, x2]);
                    let j = (src[0] * 32 + src[1]) * 32 + src[2];
                    assert!((out[i] - data[j]).abs() <= 1e-3);
                }
            }
        }
    }

    #[test]
    fn levels_take_the_context_coder_where_it_is_smaller() {
        // A field whose residuals are large in one half and tiny in the other: contexts follow
        // the regions where one Huffman code pays for the mixture.
        let shape = [64usize, 64, 64];
        let g = Geometry::new(&shape, 12).unwrap();
        let mut next = xorshift(12345);
        let data: Vec<f64> = (0..64 * 64 * 64)
            .map(|i| {
                let noise = (next() % 10_000) as f64 / 10_000.0;
                if i % 64 < 32 {
                    noise * 100.0
                } else {
                    noise * 0.01
                }
            })
            .collect();
        let enc = encode(data.clone(), &g, None, 0.005).unwrap();
        let index = Index::read(&enc.index, enc.data.len() as u64).unwrap();
        assert!(index.coders().contains(&"context"), "{:?}", index.coders());
        // Decoded two blocks at once (one thread) and one by one (more threads than that
        // leaves pairs to): the same values.
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| read::<f64>(&index, &enc.data, g.levels(), None).unwrap().0)
        };
        let out = on(1);
        assert!(data.iter().zip(&out).all(|(a, b)| (a - b).abs() <= 0.005));
        assert_eq!(out, on(64));
    }

    #[test]
    fn levels_take_the_spline_that_codes_smaller() {
        // Sparse spikes: each spreads its error over the cubic's four neighbours and the linear
        // one's two, so linear interpolation wins; on a smooth field, the cubic.
        let shape = [48usize, 40, 36];
        let mut next = xorshift(99);
        let spikes: Vec<f64> = (0..48 * 40 * 36).map(|_| if next().is_multiple_of(20) { 1.0 } else { 0.0 }).collect();
        let smooth: Vec<f64> = (0..48 * 40 * 36)
            .map(|i| {
                let (x, y, z) = ((i / (40 * 36)) as f64, ((i / 36) % 40) as f64, (i % 36) as f64);
                (0.11 * x).sin() * (0.07 * y).cos() + (0.09 * z).sin()
            })
            .collect();
        for (data, want) in [(spikes, Spline::Linear), (smooth, Spline::Cubic)] {
            let g = Geometry::anchored(&shape, 9, Geometry::DEFAULT_ORDER).unwrap();
            let enc = encode(data.clone(), &g, None, 1e-3).unwrap();
            let index = Index::read(&enc.index, enc.data.len() as u64).unwrap();
            let fine = &index.splines[index.splines.len() - 3..];
            assert!(fine.iter().all(|&s| s == want), "want {want:?}: {:?}", index.splines);
            let (out, _) = read::<f64>(&index, &enc.data, g.levels(), None).unwrap();
            assert!(data.iter().zip(&out).all(|(a, b)| (a - b).abs() <= 1e-3));
            // Every tuning of the level bounds was tried: none codes smaller.
            for t in 0..TUNINGS.len() as u8 {
                assert!(enc.size() <= encode_with(data.clone(), &g, None, 1e-3, t).unwrap().size());
            }
        }
        // An unknown spline is refused by name (the first group's byte after its kind).
        let (_, _, _, enc) = roundtrip_in(LAYOUTS[2], &[16, 16, 16], 6, 1e-3, None);
        let mut bad = enc.index[..enc.index.len() - 4].to_vec();
        assert!(bad[52] < 0x80, "a one-byte varint of groups");
        bad[54] = 7;
        let crc = crc32(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        let err = Index::read(&bad, enc.data.len() as u64).err().expect("refused");
        assert!(matches!(&err, CodecError::Corrupt(m) if m.contains("spline 7")), "{err:?}");
    }

    #[test]
    fn symbols_are_transposed_there_and_back() {
        let counts = [3usize, 5, 4];
        let symbols: Vec<u16> = (0..60).collect();
        let at = |i: u16| [i as i32 / 20, i as i32 / 4 % 5, i as i32 % 4];
        for axes in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1]] {
            for snake in [false, true] {
                let stored = transpose(&symbols, counts, axes, snake, false).unwrap();
                assert_eq!(transpose(&stored, counts, axes, snake, true).unwrap(), symbols);
                // The last of `axes` runs fastest; snaking, each symbol follows a neighbour.
                let last = axes[2];
                assert_eq!(stored[1] - stored[0], [20, 4, 1][last] as u16, "{axes:?}");
                let apart = |(a, b): (&u16, &u16)| (0..AXES).map(|k| (at(*a)[k] - at(*b)[k]).abs()).sum::<i32>();
                assert_eq!(stored.iter().zip(&stored[1..]).all(|p| apart(p) == 1), snake, "{axes:?}");
            }
        }
        assert!(transpose(&symbols[1..], counts, [2, 1, 0], true, true).is_none());
    }

    #[test]
    fn damage_is_reported() {
        // Block 0, a codec stream, claimed empty: refused, not decoded as zero residuals.
        let (_, _, mut index, enc) = roundtrip_in(LAYOUTS[2], &[16, 16, 16], 6, 1e-3, None);
        index.table[0].len = 0;
        index.table[0].crc = 0;
        let err = read::<f64>(&index, &enc.data, index.geometry.levels(), None);
        assert!(matches!(err, Err(CodecError::Corrupt(m)) if m.contains("stored empty")));
        let (_, _, index, enc) = roundtrip(&[16, 16, 16], 6, 1e-3, None);
        let mut bad = enc.index.clone();
        bad[20] ^= 1;
        assert!(Index::read(&bad, enc.data.len() as u64).is_err());
        assert!(Index::read(&enc.index, enc.data.len() as u64 + 1).is_err());
        let mut data = enc.data.clone();
        let (o, _) = index.block_range(3).unwrap();
        data[o as usize + 2] ^= 0x40;
        let err = read::<f64>(&index, &data, index.geometry.levels(), None);
        assert!(matches!(err, Err(CodecError::Corrupt(m)) if m.contains("block 3")));
    }

    #[test]
    fn an_index_claiming_a_huge_array_is_refused_not_allocated() {
        let g = Geometry::new(&[16, 16, 16], 6).unwrap();
        let map = ResolutionMap::from_regions(&g, 4, 3, &[([0, 0, 0], [8, 8, 8], g.levels())]).unwrap();
        let (_, _, _, enc) = roundtrip(&[16, 16, 16], 6, 1e-3, Some(map));
        // The shape (after magic and dims), made 2^16 per axis, the checksum made right again.
        let mut bad = enc.index[..enc.index.len() - 4].to_vec();
        for k in 0..3 {
            bad[9 + 8 * k..17 + 8 * k].copy_from_slice(&65536u64.to_le_bytes());
        }
        let crc = crc32(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        let err = Index::read(&bad, enc.data.len() as u64).err().expect("refused");
        assert!(matches!(&err, CodecError::Corrupt(m) if m.contains("resolution map")), "{err:?}");
        assert!(zeroed::<f64>(usize::MAX / 4).is_err());
    }

    #[test]
    fn nonfinite_values_are_kept() {
        let g = Geometry::new(&[20, 20], 6).unwrap();
        let mut data: Vec<f32> = (0..400).map(|i| i as f32 * 0.5).collect();
        data[7] = f32::NAN;
        data[100] = f32::INFINITY;
        data[399] = -1e30;
        let enc = encode(data.clone(), &g, None, 0.01).unwrap();
        let index = Index::read(&enc.index, enc.data.len() as u64).unwrap();
        let (out, _) = read::<f32>(&index, &enc.data, g.levels(), None).unwrap();
        for (a, b) in data.iter().zip(&out) {
            assert!(a.to_bits() == b.to_bits() || (a - b).abs() <= 0.01, "{a} {b}");
        }
    }
}
