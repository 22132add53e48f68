//! The Hilbert curve in up to 8 dimensions, and the static partition that DataSpaces-like
//! staging services build on it: the domain cut into cells along the curve, each server owning
//! a contiguous stretch. AMRZone's evaluation compares its runtime placement against this.

use amrzip_amr::IBox;
use rayon::prelude::*;

/// The most axes [`hilbert_index`] and [`hilbert_loads`] take.
pub const MAX_DIMS: usize = 8;

/// The position of a cell along the Hilbert curve that fills a grid of `2^bits` cells per axis
/// (`coords.len()` axes, `bits * coords.len() <= 64`). Consecutive positions are neighbouring
/// cells.
///
/// Skilling's construction ("Programming the Hilbert curve", AIP Conf. Proc. 707, 2004): the
/// coordinates are turned in place into the "transposed" index, whose bits read across the
/// axes, most significant bit plane first, give the position. Going from the coarsest bit
/// plane down, each plane's bit either reflects the lower bits of axis 0 or swaps them with
/// those of the axis at hand, undoing the rotations and reflections of the sub-cubes; a Gray
/// code then turns the corner sequence into ranks.
pub fn hilbert_index(coords: &[u32], bits: u32) -> u64 {
    let n = coords.len();
    assert!((1..=MAX_DIMS).contains(&n) && bits as usize * n <= 64 && bits <= 32, "{n} axes of {bits} bits");
    if bits == 0 {
        return 0;
    }
    let mut x = [0u32; MAX_DIMS];
    let x = &mut x[..n];
    x.copy_from_slice(coords);
    let top = 1u32 << (bits - 1);
    let mut q = top;
    while q > 1 {
        let lower = q - 1;
        for i in 0..n {
            if x[i] & q != 0 {
                x[0] ^= lower;
            } else {
                let t = (x[0] ^ x[i]) & lower;
                x[0] ^= t;
                x[i] ^= t;
            }
        }
        q >>= 1;
    }
    for i in 1..n {
        x[i] ^= x[i - 1];
    }
    let mut t = 0;
    let mut q = top;
    while q > 1 {
        if x[n - 1] & q != 0 {
            t ^= q - 1;
        }
        q >>= 1;
    }
    let mut h = 0u64;
    for b in (0..bits).rev() {
        for &xi in x.iter() {
            h = (h << 1) | u64::from(((xi ^ t) >> b) & 1);
        }
    }
    h
}

/// Boxes per parallel task in [`hilbert_loads`]; partial loads are summed in task order so
/// that the result does not depend on the number of threads.
const BOXES_PER_TASK: usize = 1024;

/// The bytes each of `nservers` servers holds when boxes are distributed as DataSpaces does:
/// the bounding box of all `boxes` (one index space, say the finest level's) is cut into
/// `2^b` cells per axis, `b` the smallest with `2^(b * ndim) >= 16 * nservers`; the cells are
/// ordered along the Hilbert curve and the curve is cut into `nservers` equal stretches (the
/// cell at position `h` goes to server `h * nservers / 2^(b * ndim)`). A box's `nbytes` are
/// shared among the cells it overlaps in proportion to the overlapped volume, grid cells being
/// the exact (real-valued) subdivision of the bounding box.
///
/// Panics unless `nservers >= 1`, `nbytes` has one entry per box, and the boxes are non-empty
/// and share a dimension of 1 to [`MAX_DIMS`]. The grid holds at least `16 * nservers` cells.
pub fn hilbert_loads(boxes: &[IBox], nbytes: &[f64], nservers: usize) -> Vec<f64> {
    assert!(nservers >= 1, "no server to load");
    assert_eq!(boxes.len(), nbytes.len(), "one size per box");
    let Some(first) = boxes.first() else { return vec![0.0; nservers] };
    let nd = first.ndim();
    assert!(
        (1..=MAX_DIMS).contains(&nd) && boxes.iter().all(|b| b.ndim() == nd && b.hi.len() == nd && !b.is_empty()),
        "boxes must be non-empty and share 1 to {MAX_DIMS} axes"
    );
    let lo: Vec<i64> = (0..nd).map(|d| boxes.iter().map(|b| b.lo[d]).min().unwrap_or(0)).collect();
    let hi: Vec<i64> = (0..nd).map(|d| boxes.iter().map(|b| b.hi[d]).max().unwrap_or(0)).collect();
    let wanted = 16u128 * nservers as u128;
    let mut bits = 0u32;
    while 1u128 << (bits as usize * nd) < wanted {
        bits += 1;
    }
    let total_bits = bits as usize * nd;
    let per_axis = 1usize << bits;
    let ncells = 1usize << total_bits;

    // Server of each cell, cells in C order over the grid (axis 0 slowest).
    let server: Vec<u32> = (0..ncells)
        .into_par_iter()
        .map(|c| {
            let mut coords = [0u32; MAX_DIMS];
            let mut rest = c;
            for d in (0..nd).rev() {
                coords[d] = (rest % per_axis) as u32;
                rest /= per_axis;
            }
            let h = hilbert_index(&coords[..nd], bits);
            ((u128::from(h) * nservers as u128) >> total_bits) as u32
        })
        .collect();

    let g = per_axis as i128;
    let extent: Vec<i128> = (0..nd).map(|d| i128::from(hi[d]) - i128::from(lo[d]) + 1).collect();
    let partials: Vec<Vec<f64>> = boxes
        .par_chunks(BOXES_PER_TASK)
        .zip(nbytes.par_chunks(BOXES_PER_TASK))
        .map(|(boxes, nbytes)| {
            let mut loads = vec![0.0; nservers];
            // Per axis: the first grid cell the box overlaps and the overlapped fraction of
            // the box in each cell from there.
            let mut spans: Vec<(usize, Vec<f64>)> = vec![(0, Vec::new()); nd];
            for (b, &bytes) in boxes.iter().zip(nbytes) {
                for (d, (first, fractions)) in spans.iter_mut().enumerate() {
                    // In units of 1/G of a cell: the box spans [a G, z G), cell k spans [k E, (k+1) E).
                    let a = (i128::from(b.lo[d]) - i128::from(lo[d])) * g;
                    let z = (i128::from(b.hi[d]) - i128::from(lo[d]) + 1) * g;
                    let e = extent[d];
                    let (k0, k1) = (a / e, (z - 1) / e);
                    *first = k0 as usize;
                    fractions.clear();
                    fractions.extend((k0..=k1).map(|k| (z.min((k + 1) * e) - a.max(k * e)) as f64 / (z - a) as f64));
                }
                let mut at = [0usize; MAX_DIMS];
                'cells: loop {
                    let mut cell = 0usize;
                    let mut share = bytes;
                    for (d, (first, fractions)) in spans.iter().enumerate() {
                        cell = cell * per_axis + first + at[d];
                        share *= fractions[at[d]];
                    }
                    loads[server[cell] as usize] += share;
                    for d in (0..nd).rev() {
                        at[d] += 1;
                        if at[d] < spans[d].1.len() {
                            continue 'cells;
                        }
                        at[d] = 0;
                    }
                    break;
                }
            }
            loads
        })
        .collect();
    let mut loads = vec![0.0; nservers];
    for p in partials {
        loads.iter_mut().zip(p).for_each(|(l, v)| *l += v);
    }
    loads
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(nd: usize, bits: u32) -> Vec<Vec<u32>> {
        let side = 1u32 << bits;
        let mut cells = vec![vec![]];
        for _ in 0..nd {
            cells = cells.into_iter().flat_map(|c| (0..side).map(move |v| [c.clone(), vec![v]].concat())).collect();
        }
        cells
    }

    #[test]
    fn the_curve_visits_every_cell_once_in_unit_steps() {
        for nd in 1..=5 {
            for bits in 1..=(12 / nd as u32).min(5) {
                let mut by_index: Vec<(u64, Vec<u32>)> = grid(nd, bits).into_iter().map(|c| (hilbert_index(&c, bits), c)).collect();
                by_index.sort();
                let n = by_index.len() as u64;
                assert_eq!(n, 1 << (bits as usize * nd));
                for (i, (h, _)) in by_index.iter().enumerate() {
                    assert_eq!(*h, i as u64, "{nd} axes, {bits} bits: a position is missing or taken twice");
                }
                for pair in by_index.windows(2) {
                    let step: u32 = pair[0].1.iter().zip(&pair[1].1).map(|(a, b)| a.abs_diff(*b)).sum();
                    assert_eq!(step, 1, "{nd} axes, {bits} bits: {:?} then {:?}", pair[0].1, pair[1].1);
                }
                // It starts at the origin.
                assert!(by_index[0].1.iter().all(|&v| v == 0));
            }
        }
    }

    #[test]
    fn eight_axes_and_wide_coordinates() {
        assert_eq!(hilbert_index(&[0; 8], 8), 0);
        let mut seen: Vec<u64> = grid(8, 1).iter().map(|c| hilbert_index(c, 1)).collect();
        seen.sort();
        assert_eq!(seen, (0..256).collect::<Vec<_>>());
        // 2 x 32 bits fill the 64-bit index.
        let corner = hilbert_index(&[u32::MAX, 0], 32);
        assert_eq!(corner, u64::MAX);
    }

    #[test]
    fn one_axis_is_the_identity() {
        for v in 0..64 {
            assert_eq!(hilbert_index(&[v], 6), u64::from(v));
        }
    }

    #[test]
    fn loads_conserve_bytes() {
        let mut rng = fastrand::Rng::with_seed(3);
        for nd in 1..=3 {
            let boxes: Vec<IBox> = (0..500)
                .map(|_| {
                    let lo: Vec<i64> = (0..nd).map(|_| rng.i64(-50..200)).collect();
                    let hi = lo.iter().map(|&l| l + rng.i64(0..30)).collect();
                    IBox::new(lo, hi)
                })
                .collect();
            let nbytes: Vec<f64> = (0..boxes.len()).map(|_| rng.f64() * 1e6).collect();
            for nservers in [1, 3, 64, 1000] {
                let loads = hilbert_loads(&boxes, &nbytes, nservers);
                assert_eq!(loads.len(), nservers);
                let (sum, want): (f64, f64) = (loads.iter().sum(), nbytes.iter().sum());
                assert!((sum - want).abs() <= 1e-9 * want, "{nd}-D, {nservers} servers: {sum} of {want}");
            }
        }
    }

    #[test]
    fn a_box_over_the_whole_domain_loads_servers_evenly() {
        let b = IBox::from_slices(&[0, 0], &[9, 6]);
        let loads = hilbert_loads(std::slice::from_ref(&b), &[64.0], 4);
        for l in loads {
            assert!((l - 16.0).abs() < 1e-9, "{l}");
        }
        // Along one axis the curve runs left to right: two unit boxes at the ends go to the first
        // and the last server.
        let boxes = [IBox::from_slices(&[0], &[0]), IBox::from_slices(&[99], &[99])];
        assert_eq!(hilbert_loads(&boxes, &[1.0, 2.0], 5), vec![1.0, 0.0, 0.0, 0.0, 2.0]);
        assert_eq!(hilbert_loads(&[], &[], 3), vec![0.0; 3]);
    }
}
