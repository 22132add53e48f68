//! How a level is cut: the unit block (the blocking factor the boxes honour, or larger edges
//! that predict better across box seams), the chunk (what a region read decodes: sized like the
//! boxes, or larger where that codes smaller) and the shard (how many chunks share one index).
//!
//! Units and chunks are chosen by measuring: every candidate is compressed on a sample of the
//! level's boxes. A level's fields are one array, so they share one chunk shape, chosen on
//! their summed sizes; each field keeps its own unit.

use amrzip_amr::boxes::for_each_cell;
use amrzip_amr::IBox;
use std::collections::{BTreeMap, BTreeSet};

/// Unit block edge when the boxes do not reveal a blocking factor, the largest one detected,
/// and the larger edges also tried: with absent cells costing nothing, a unit block larger
/// than the blocking factor often predicts better (fewer seams), sometimes worse (less context
/// where boxes end).
pub const DEFAULT_UNIT: usize = 8;
pub const MAX_UNIT: usize = 32;
pub const TRIED_UNITS: [usize; 2] = [16, 32];
/// A larger chunk also tried (it gives unit blocks of 32 cells room, and each chunk's header
/// and lossless frame are shared by more cells).
pub fn large_chunk(dim: usize) -> usize {
    [4096, 128, 32][dim - 1]
}
/// Chunk edge bounds in cells: large enough to amortise a chunk's header, small enough that
/// reads stay local.
fn chunk_edge_bounds(dim: usize) -> (usize, usize) {
    [(1024, 4096), (32, 128), (16, 32)][dim - 1]
}
/// A level's layout is chosen on a sample of its boxes of about this many cells (a quarter
/// million picks as well as a million on the benchmark hierarchies, in a quarter the time),
/// taken as this many runs of consecutive boxes: unit blocks larger than the boxes gain where
/// boxes meet, which a sample of scattered boxes would hide.
pub const TRIAL_CELLS: usize = 1 << 18;
pub const TRIAL_RUNS: usize = 8;
/// The speed preset's sample: half as many cells took a sixth off the Nyx-like hierarchy's
/// writes and chose the same layouts at rel 1e-2..1e-5 (in the ratio preset it lost up to 3.4%
/// of a field's ratio).
pub const SPEED_TRIAL_CELLS: usize = 1 << 17;

/// The sample budget of a level of `total` cells. The speed preset's trials on every box keep
/// their streams (the level is then coded once, by its trials), so a level less than twice
/// its budget is sampled whole: that costs less than a sample and a second coding.
pub fn trial_budget(speed: bool, total: usize) -> usize {
    match speed {
        false => TRIAL_CELLS,
        true if total <= 2 * SPEED_TRIAL_CELLS => total.max(1),
        true => SPEED_TRIAL_CELLS,
    }
}

/// A unit block whose blocks would be less than this share stored over the whole level is not
/// tried (the blocking factor's unit always is): a walk costs every cell of a block, absent
/// ones included, so such a unit costs more than twice the cells it codes, in its trial, its
/// coding and every read. In the ratio preset such units code the Nyx-like fields 3-5% smaller
/// (32-cell blocks over boxes of 8-16) but wrote up to 1.9x and read up to 1.6x as slowly; no
/// such unit won a `speed`-preset trial.
pub const MIN_FILL: f64 = 0.5;

/// The boxes' cells: node boxes reach one index past the cells they bound.
fn cell_boxes(boxes: &[IBox], node: &[bool]) -> Vec<IBox> {
    boxes
        .iter()
        .map(|b| IBox::new(b.lo.clone(), b.hi.iter().zip(&b.lo).zip(node).map(|((&h, &l), &n)| l.max(h - n as i64)).collect()))
        .collect()
}

/// The largest power of two within the bounds not above the median of the boxes' smallest edges.
pub fn chunk_edge(boxes: &[IBox], dim: usize) -> usize {
    let (lo, hi) = chunk_edge_bounds(dim);
    if boxes.is_empty() {
        return hi;
    }
    let mut smallest: Vec<usize> = boxes.iter().map(|b| b.shape().into_iter().min().unwrap_or(1)).collect();
    smallest.sort_unstable();
    let typical = smallest[boxes.len() / 2];
    let mut edge = hi;
    while edge > lo && edge > typical {
        edge /= 2;
    }
    edge
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// The blocking factor the boxes honour: the largest power of two (at most `MAX_UNIT`)
/// dividing every box corner and size relative to the domain corner; `DEFAULT_UNIT` when that
/// is below 4 (unaligned boxes then make partial unit blocks, whose absent cells cost almost
/// nothing).
pub fn detect_unit(boxes: &[IBox], domain_lo: &[i64]) -> usize {
    let mut g = 0;
    for b in boxes {
        for ((&l, &h), &o) in b.lo.iter().zip(&b.hi).zip(domain_lo) {
            g = gcd(gcd(g, l - o), h + 1 - o);
        }
    }
    let mut unit = MAX_UNIT as i64;
    while unit > 1 && g % unit != 0 {
        unit /= 2;
    }
    if unit >= 4 {
        unit as usize
    } else {
        DEFAULT_UNIT
    }
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Candidate (unit edge, chunk edge) pairs of a level, the blocking factor's unit first. `unit`
/// and `chunk` are the user's (chunk rounded up to a multiple of the unit), else measured: each
/// unit with the largest chunk edge it tiles, the large one or else the box-sized one. Trials
/// of a unit with both never picked the box-sized edge: on the benchmark and real hierarchies
/// (every level, both presets, rel 1e-2 and 1e-4) the larger chunks coded every field no larger
/// (fewer chunk headers, longer zstd frames) and took smaller indexes, and trying both cost 14%
/// of a `speed` write of the Nyx-like hierarchy. A level that stores no cell (all covered) takes
/// the box-sized edge: reading it checks that each chunk its boxes touch stores nothing, which
/// costs the chunk's cells, and 32^3 chunks over 8-16 cell boxes read the PeleLMeX file's
/// covered levels 1.4x as slowly.
pub fn candidates(
    boxes: &[IBox],
    node: &[bool],
    domain_lo: &[i64],
    unit: Option<usize>,
    chunk: Option<usize>,
    stores_cells: bool,
) -> Vec<(usize, usize)> {
    let dim = domain_lo.len();
    let cells = cell_boxes(boxes, node);
    let first = unit.unwrap_or_else(|| detect_unit(&cells, domain_lo));
    let units: Vec<usize> = match unit {
        Some(u) => vec![u],
        None => std::iter::once(first).chain(TRIED_UNITS.into_iter().filter(|&u| u > first)).collect(),
    };
    if let Some(c) = chunk {
        return units.into_iter().filter(|&u| u <= c.max(first)).map(|u| (u, round_up(c, u))).collect();
    }
    let local = box_edge(&cells, dim, first);
    // The large edge, no larger than the power of two the boxes reach from the domain corner
    // (node boxes to their last node): beyond that it only makes a level of one chunk take a
    // larger index.
    let reach = boxes.iter().flat_map(|b| b.hi.iter().zip(domain_lo).map(|(&h, &o)| (h - o + 1).max(1) as usize)).max().unwrap_or(1);
    let reach = reach.next_power_of_two();
    let large = if stores_cells { round_up(local.max(large_chunk(dim).min(reach)), first) } else { local };
    units.into_iter().filter_map(|u| [large, local].into_iter().find(|c| c.is_multiple_of(u)).map(|c| (u, c))).collect()
}

/// The chunk edge that follows a level's boxes (`cells`: their cells, see `cell_boxes`), a
/// multiple of `unit`: with it, reading one box touches about one chunk.
fn box_edge(cells: &[IBox], dim: usize, unit: usize) -> usize {
    round_up(chunk_edge(cells, dim).max(unit), unit)
}

/// `box_edge` of a level's boxes (`node`: per dimension, whether they hold nodes).
pub fn level_box_edge(boxes: &[IBox], node: &[bool], unit: usize) -> usize {
    box_edge(&cell_boxes(boxes, node), node.len(), unit)
}

/// Trial sizes: ((unit edge, chunk edge), bytes).
pub type Trials = Vec<((usize, usize), usize)>;

/// Trial sizes of `layouts`; `sizes(unit, edges)` measures one unit with several chunk edges
/// (predicting each block once). Per chunk edge, units are tried smallest first and larger
/// ones only while they keep shrinking the output: the size is unimodal in the unit edge on
/// the benchmark hierarchies, and the largest unit's trial walks the most absent cells.
pub fn trials<E>(layouts: &[(usize, usize)], mut sizes: impl FnMut(usize, &[usize]) -> Result<Vec<usize>, E>) -> Result<Trials, E> {
    let mut result = Vec::new();
    // Per chunk edge still tried: its last size.
    let mut previous: BTreeMap<usize, Option<usize>> = layouts.iter().map(|&(_, c)| (c, None)).collect();
    let units: BTreeSet<usize> = layouts.iter().map(|&(u, _)| u).collect();
    for u in units {
        let edges: Vec<usize> = layouts.iter().filter(|&&(v, c)| v == u && previous.contains_key(&c)).map(|&(_, c)| c).collect();
        if edges.is_empty() {
            continue;
        }
        for (c, size) in edges.iter().zip(sizes(u, &edges)?) {
            result.push(((u, *c), size));
            match previous[c] {
                Some(p) if size > p => {
                    previous.remove(c);
                }
                _ => {
                    previous.insert(*c, Some(size));
                }
            }
        }
    }
    Ok(result)
}

/// The chunk edge of a level from its fields' trials plus `overhead(edge)` (the shard indexes
/// and entries that edge costs, on the trials' scale): the one of smallest total, `first_edge`
/// (the first candidate's) without trials. Larger chunks make a box read decode more cells (up to
/// 8x a 16^3 box's in 3-D), but reads cache decoded chunks, so reading every box decodes each
/// chunk once, and one box read from a fresh open is mostly the open.
pub fn choose_edge(per_field: &[Trials], first_edge: usize, overhead: impl Fn(usize) -> usize) -> usize {
    let mut edges: Vec<usize> = Vec::new();
    for t in per_field.iter().flatten() {
        if !edges.contains(&t.0 .1) {
            edges.push(t.0 .1);
        }
    }
    let total = |c: usize| -> Option<usize> {
        let coded = per_field.iter().map(|t| t.iter().filter(|((_, e), _)| *e == c).map(|&(_, s)| s).min()).sum::<Option<usize>>();
        coded.map(|s| s + overhead(c))
    };
    edges.iter().copied().filter_map(|c| Some((total(c)?, c))).min().map_or(first_edge, |(_, c)| c)
}

/// A field's unit for chunk edge `edge`: the one of smallest trial size (0 without trials).
/// Decided on the sample alone: settling close calls on all the boxes coded a level twice more.
/// On the Nyx-like density that costs 0.1% at 1e-4, and with the trials' one predictor choice
/// about 4% at 1e-3 (README, AMR snapshots).
pub fn choose_unit(trials: &[((usize, usize), usize)], edge: usize) -> usize {
    trials.iter().filter(|((_, c), _)| *c == edge).min_by_key(|&&((u, _), s)| (s, u)).map_or(0, |&((u, _), _)| u)
}

/// Which boxes (by index) a layout trial compresses: all, or `TRIAL_RUNS` runs of consecutive
/// boxes of about `TRIAL_CELLS` cells in all.
pub fn trial_sample(cells: &[usize], budget: usize) -> Vec<usize> {
    let total: usize = cells.iter().sum();
    let step = total.div_ceil(budget).max(1);
    let n = cells.len();
    if step == 1 {
        return (0..n).collect();
    }
    let run = n.div_ceil(step * TRIAL_RUNS).max(1);
    let mut picked = BTreeSet::new();
    for k in 0..TRIAL_RUNS {
        let start = k * (n - run) / (TRIAL_RUNS - 1);
        picked.extend(start..start + run);
    }
    picked.into_iter().collect()
}

/// What one shard costs besides its index: its zip entry, a local header (30 bytes) and a
/// central directory record (46) each with the shard's name (`level_2/c/0/3/1/2`, ~18): 110
/// bytes a shard measured on the benchmark snapshots.
const SHARD_ENTRY_BYTES: usize = 112;
/// A box read reads the index of every shard it touches whole: indexes stay under this.
const SHARD_INDEX_MAX: usize = 16 << 10;

/// Chunks per shard edge (a power of two): the fewest bytes of indexes and entries over the
/// chunks present (`present`, spatial chunk indices), the larger of equals, with each index
/// at most `SHARD_INDEX_MAX`. Dense levels get large shards, sparse ones small.
pub fn shard_factor(present: &BTreeSet<Vec<i64>>, fields: usize, grid: &[usize]) -> usize {
    shard_layout(present, fields, grid).1
}

/// Bytes of shard indexes and zip entries a level with chunks of edge `edge` takes: the chunks
/// its boxes (`boxes`, indices from the index space's corner `origin`) touch, sharded as
/// `shard_factor` would. The trials measure coded chunks only; at tight chunk edges on sparse
/// levels the indexes' empty slots are several percent of a level.
pub fn index_bytes(boxes: &[IBox], origin: &[i64], space: &[usize], fields: usize, edge: usize) -> usize {
    let grid: Vec<usize> = space.iter().map(|&n| n.div_ceil(edge)).collect();
    let mut present = BTreeSet::new();
    for b in boxes {
        let lo: Vec<i64> = b.lo.iter().zip(origin).map(|(&l, &o)| (l - o).div_euclid(edge as i64)).collect();
        let hi: Vec<i64> = b.hi.iter().zip(origin).map(|(&h, &o)| (h - o).div_euclid(edge as i64)).collect();
        for_each_cell(&IBox::new(lo, hi), |c| {
            present.insert(c.to_vec());
        });
    }
    shard_layout(&present, fields, &grid).0
}

/// (bytes of indexes and entries, chunks per shard edge) of the cheapest shard edge.
fn shard_layout(present: &BTreeSet<Vec<i64>>, fields: usize, grid: &[usize]) -> (usize, usize) {
    let dims = grid.len();
    let widest = grid.iter().copied().max().unwrap_or(1);
    let mut best = (usize::MAX, 1);
    let mut m = 1usize;
    loop {
        let inner = fields * m.pow(dims as u32);
        if m > 1 && 16 * inner + 4 > SHARD_INDEX_MAX {
            break;
        }
        let shards: BTreeSet<Vec<i64>> = present.iter().map(|c| c.iter().map(|&i| i.div_euclid(m as i64)).collect()).collect();
        let cost = shards.len() * (SHARD_ENTRY_BYTES + 16 * inner + 4);
        if cost <= best.0 {
            best = (cost, m);
        }
        if m >= widest {
            break;
        }
        m *= 2;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_that_are_no_power_of_two_get_chunks_they_tile() {
        let boxes = vec![IBox::from_slices(&[0, 0], &[31, 31]), IBox::from_slices(&[32, 0], &[63, 31])];
        for u in [3, 5, 6, 7, 12, 256] {
            let c = candidates(&boxes, &[false, false], &[0, 0], Some(u), None, true);
            assert!(!c.is_empty() && c.iter().all(|&(v, e)| v == u && e % u == 0), "{u}: {c:?}");
            let c = candidates(&boxes, &[false, false], &[0, 0], Some(u), Some(20), true);
            assert!(!c.is_empty() && c.iter().all(|&(v, e)| v == u && e % u == 0 && e >= 20), "{u}: {c:?}");
        }
        // Unit 32 detected; with it a chunk larger than the boxes, up to where they reach.
        let c = candidates(&boxes, &[false, false], &[0, 0], None, None, true);
        assert_eq!(c, vec![(32, 64)]);
        assert_eq!(candidates(&boxes[..1], &[false, false], &[0, 0], None, None, true), vec![(32, 32)]);
        let wide = [IBox::from_slices(&[0, 0], &[31, 31]), IBox::from_slices(&[32, 0], &[1023, 31])];
        assert_eq!(candidates(&wide, &[false, false], &[0, 0], None, None, true), vec![(32, 128)]);
        // Nodes one past the cells: 65 indices take a chunk of 128.
        assert_eq!(candidates(&[IBox::from_slices(&[0, 0], &[64, 31])], &[true, false], &[0, 0], None, None, true), vec![(32, 128)]);
        // A level storing no cell keeps chunks the size of its boxes.
        assert_eq!(candidates(&boxes, &[false, false], &[0, 0], None, None, false), vec![(32, 32)]);
    }

    #[test]
    fn trials_stop_growing_the_unit_once_it_stops_paying() {
        let layouts = [(8, 16), (16, 16), (32, 16), (8, 32), (16, 32), (32, 32)];
        let size = |u: usize, c: usize| match (u, c) {
            (8, 16) => 100,
            (16, 16) => 90,
            (32, 16) => 95,
            _ => 1000 / u,
        };
        let sizes = |u: usize, edges: &[usize]| -> Result<Vec<usize>, ()> { Ok(edges.iter().map(|&c| size(u, c)).collect()) };
        let t = trials(&layouts, sizes).unwrap();
        // Edge 16: 8 -> 100, 16 -> 90, 32 -> 95 (worse, but measured); edge 32 keeps growing.
        assert_eq!(t.len(), 6);
        assert_eq!(choose_edge(std::slice::from_ref(&t), 16, |_| 0), 32);
        assert_eq!(choose_unit(&t, 16), 16);
    }

    #[test]
    fn the_edge_of_fewest_bytes_wins() {
        let t = vec![((8, 16), 100), ((8, 32), 99)];
        assert_eq!(choose_edge(std::slice::from_ref(&t), 16, |_| 0), 32);
        // The small chunks' indexes count.
        let t = vec![((8, 16), 100), ((8, 32), 110)];
        assert_eq!(choose_edge(std::slice::from_ref(&t), 16, |_| 0), 16);
        assert_eq!(choose_edge(std::slice::from_ref(&t), 16, |c| if c == 16 { 20 } else { 0 }), 32);
        // Summed over fields: one field's large gain is weighed against the others; the best
        // unit of each edge counts.
        let a = vec![((8, 16), 100), ((8, 32), 10), ((16, 32), 5)];
        let b = vec![((8, 16), 1000), ((8, 32), 1100)];
        assert_eq!(choose_edge(&[a, b], 16, |_| 0), 16);
        // Ties go to the smaller chunks; no trials, to the box-sized edge.
        assert_eq!(choose_edge(&[vec![((8, 16), 100), ((8, 32), 100)]], 16, |_| 0), 16);
        assert_eq!(choose_edge(&[], 16, |_| 0), 16);
    }

    #[test]
    fn shards_grow_with_density() {
        let dense: BTreeSet<Vec<i64>> = (0..8).flat_map(|i| (0..8).map(move |j| vec![i, j])).collect();
        assert!(shard_factor(&dense, 1, &[8, 8]) == 8);
        let sparse: BTreeSet<Vec<i64>> = [vec![0, 0], vec![63, 63]].into_iter().collect();
        assert_eq!(shard_factor(&sparse, 1, &[64, 64]), 1);
        // Many fields make indexes large: shards stay small.
        assert!(shard_factor(&dense, 400, &[8, 8]) <= 2);
    }

    #[test]
    fn samples_are_runs_of_neighbours() {
        assert_eq!(trial_sample(&[10; 5], TRIAL_CELLS), vec![0, 1, 2, 3, 4]);
        let s = trial_sample(&vec![1 << 12; 1000], TRIAL_CELLS);
        assert!(s.len() < 1000 && s.len() >= 8);
        assert!(s.windows(2).filter(|w| w[1] != w[0] + 1).count() < TRIAL_RUNS);
    }
}
