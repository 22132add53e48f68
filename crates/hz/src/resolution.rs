//! Adaptive resolution: the finest HZ level kept in each tile of the array (PIDX's resolution
//! regions). A point is *primary* (stored) when its level is at most its tile's; the others are
//! neither coded nor written, and readers fill them from the nearest coarser primary point.
//!
//! Also the storage efficiency `E = P / (P + S)` of the paper (equation 1): an IDX block that
//! holds a primary point is written whole, and its other slots are secondary samples.

use crate::geometry::{Geometry, AXES};
use amrzip_codec::Element;
use rayon::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolutionMap {
    tile: usize,
    grid: [usize; AXES],
    finest: Vec<u8>,
}

impl ResolutionMap {
    /// Tiles of `tile` points per axis (a power of two) over `geometry`'s array, C order over
    /// the tile grid on the internal 3 axes; `finest[t]` is the finest level kept in tile `t`.
    pub fn new(geometry: &Geometry, tile: usize, finest: Vec<u8>) -> Result<ResolutionMap, String> {
        if !tile.is_power_of_two() {
            return Err(format!("resolution tile edge {tile} is not a power of two"));
        }
        let grid = geometry.shape3().map(|n| n.div_ceil(tile));
        let want: usize = grid.iter().product();
        if finest.len() != want {
            return Err(format!("resolution map has {} tiles, the array's tile grid {grid:?} has {want}", finest.len()));
        }
        Ok(ResolutionMap { tile, grid, finest })
    }

    /// Every tile at `level` except the tiles touching a box of `regions` (half-open, in the
    /// array's coordinates on the internal 3 axes), which keep their region's level (the finest
    /// where regions overlap).
    pub fn from_regions(
        geometry: &Geometry,
        tile: usize,
        level: u32,
        regions: &[([usize; AXES], [usize; AXES], u32)],
    ) -> Result<ResolutionMap, String> {
        let grid = geometry.shape3().map(|n| n.div_ceil(tile.max(1)));
        let mut finest = vec![clamp_level(level); grid.iter().product()];
        for (lo, hi, l) in regions {
            let t_lo: [usize; AXES] = std::array::from_fn(|k| (lo[k] / tile.max(1)).min(grid[k]));
            let t_hi: [usize; AXES] = std::array::from_fn(|k| hi[k].div_ceil(tile.max(1)).min(grid[k]));
            for t0 in t_lo[0]..t_hi[0] {
                for t1 in t_lo[1]..t_hi[1] {
                    for t2 in t_lo[2]..t_hi[2] {
                        let f = &mut finest[(t0 * grid[1] + t1) * grid[2] + t2];
                        *f = (*f).max(clamp_level(*l));
                    }
                }
            }
        }
        ResolutionMap::new(geometry, tile, finest)
    }

    /// Every tile at `elsewhere`, except tiles where a value reaches a rule's threshold, which
    /// keep that rule's level (the finest such): `rules` are (threshold, level). `values` are the
    /// array's (C order); NaN reaches no threshold.
    pub fn from_thresholds<T: Element>(
        geometry: &Geometry,
        values: &[T],
        tile: usize,
        elsewhere: u32,
        rules: &[(f64, u32)],
    ) -> Result<ResolutionMap, String> {
        let s = geometry.shape3();
        if values.len() != s.iter().product::<usize>() {
            return Err(format!("{} values for an array of shape {:?}", values.len(), geometry.shape()));
        }
        if !tile.is_power_of_two() {
            return Err(format!("resolution tile edge {tile} is not a power of two"));
        }
        let grid = s.map(|n| n.div_ceil(tile));
        let rows: Vec<Vec<u8>> = (0..grid[0])
            .into_par_iter()
            .map(|t0| {
                let mut highest = vec![f64::NEG_INFINITY; grid[1] * grid[2]];
                for x0 in t0 * tile..((t0 + 1) * tile).min(s[0]) {
                    for x1 in 0..s[1] {
                        let row = &values[(x0 * s[1] + x1) * s[2]..][..s[2]];
                        for (t2, part) in row.chunks(tile).enumerate() {
                            let h = &mut highest[(x1 / tile) * grid[2] + t2];
                            *h = part.iter().map(|v| v.to_f64()).fold(*h, |a, b| if b > a { b } else { a });
                        }
                    }
                }
                highest.iter().map(|&h| rules.iter().filter(|r| h >= r.0).map(|r| r.1).fold(elsewhere, u32::max)).map(clamp_level).collect()
            })
            .collect();
        ResolutionMap::new(geometry, tile, rows.concat())
    }

    pub fn tile(&self) -> usize {
        self.tile
    }

    pub fn grid(&self) -> [usize; AXES] {
        self.grid
    }

    /// The finest level of each tile, C order over the tile grid.
    pub fn levels(&self) -> &[u8] {
        &self.finest
    }

    /// The finest level kept at point `x`.
    #[inline(always)]
    pub fn finest_at(&self, x: [usize; AXES]) -> u32 {
        let t = self.tile.trailing_zeros();
        self.finest[((x[0] >> t) * self.grid[1] + (x[1] >> t)) * self.grid[2] + (x[2] >> t)] as u32
    }

    /// Whether the point at `x` is stored.
    #[inline(always)]
    pub fn keeps(&self, geometry: &Geometry, x: [usize; AXES]) -> bool {
        geometry.level_of(x) <= self.finest_at(x)
    }

    /// The stored point a reader shows at `x`: `x` itself when stored, else the point at `x`
    /// rounded down to the lattice of its tile's finest level (again, until a stored one).
    pub fn source(&self, geometry: &Geometry, mut x: [usize; AXES]) -> [usize; AXES] {
        while !self.keeps(geometry, x) {
            let s = geometry.spacing(self.finest_at(x).min(geometry.levels()));
            x = std::array::from_fn(|k| x[k] / s[k] * s[k]);
        }
        x
    }
}

fn clamp_level(l: u32) -> u8 {
    l.min(u8::MAX as u32) as u8
}

/// Storage efficiency of IDX blocks of `2^block_bits` slots: primary points, secondary slots
/// (the other slots of the blocks written) and the blocks written, out of all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Efficiency {
    pub primary: u64,
    pub secondary: u64,
    pub written: u64,
    pub blocks: u64,
}

impl Efficiency {
    /// `E = P / (P + S)`.
    pub fn ratio(&self) -> f64 {
        self.primary as f64 / (self.primary + self.secondary).max(1) as f64
    }
}

/// The efficiency of storing `map`'s primary points (every point without a map) in IDX blocks
/// of `2^block_bits` slots.
pub fn efficiency(shape: &[usize], block_bits: u32, map: Option<&ResolutionMap>) -> Result<Efficiency, String> {
    let g = Geometry::new(shape, block_bits)?;
    let slots = 1u64 << block_bits.min(g.levels());
    let mut e = Efficiency { blocks: g.blocks(), ..Efficiency::default() };
    for blk in 0..g.blocks() {
        let mut p = 0u64;
        for b in g.block(blk) {
            p += match map {
                None => b.slots() as u64,
                Some(m) => {
                    let mut n = 0u64;
                    g.for_each_point(&b, |x| n += m.keeps(&g, x) as u64);
                    n
                }
            };
        }
        if p > 0 {
            e.primary += p;
            e.secondary += slots - p;
            e.written += 1;
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_data_is_perfectly_efficient_and_regions_are_not() {
        let e = efficiency(&[64, 64], 8, None).unwrap();
        assert_eq!((e.ratio(), e.written, e.blocks), (1.0, 16, 16));
        let g = Geometry::new(&[64, 64], 8).unwrap();
        // One 16x16 corner at full resolution, nothing elsewhere but the origin.
        let m = ResolutionMap::from_regions(&g, 16, 0, &[([0, 0, 0], [1, 16, 16], g.levels())]).unwrap();
        let e = efficiency(&[64, 64], 8, Some(&m)).unwrap();
        assert_eq!(e.primary, 256);
        // Block 0 and one block of each level after it: 5 blocks of 256 slots.
        assert_eq!((e.written, e.ratio()), (5, 0.2), "{e:?}");
        // Smaller blocks waste less.
        let small = efficiency(&[64, 64], 6, Some(&m)).unwrap();
        assert!(small.ratio() > e.ratio());
    }

    #[test]
    fn sources_are_stored_points_of_the_same_tile_or_coarser() {
        let g = Geometry::new(&[32, 32, 32], 9).unwrap();
        let coarse = g.levels() - 6;
        let m = ResolutionMap::from_regions(&g, 8, coarse, &[([8, 8, 8], [16, 24, 16], g.levels())]).unwrap();
        for x in [[0, 0, 0], [3, 5, 7], [9, 9, 9], [31, 31, 31], [17, 3, 30]] {
            let s = m.source(&g, x);
            assert!(m.keeps(&g, s));
            assert!((0..AXES).all(|k| s[k] <= x[k] && x[k] - s[k] < 4));
        }
        assert_eq!(m.source(&g, [9, 9, 9]), [9, 9, 9]);
    }

    #[test]
    fn thresholds_pick_the_finest_rule_a_tile_reaches() {
        let g = Geometry::new(&[16, 16], 8).unwrap();
        let mut v = vec![0.0f32; 256];
        v[5 * 16 + 12] = 2.0; // tile (1, 3) of 4x4-point tiles
        v[15 * 16] = 1.0; // tile (3, 0)
        v[0] = f32::NAN;
        let m = ResolutionMap::from_thresholds(&g, &v, 4, 1, &[(1.0, 5), (2.0, 8)]).unwrap();
        let mut want = [1u8; 16];
        want[4 + 3] = 8;
        want[12] = 5;
        assert_eq!(m.levels(), &want[..]);
    }

    #[test]
    fn bad_maps_are_refused() {
        let g = Geometry::new(&[32, 32], 8).unwrap();
        assert!(ResolutionMap::new(&g, 3, vec![0; 121]).is_err());
        assert!(ResolutionMap::new(&g, 8, vec![0; 15]).is_err());
        assert!(ResolutionMap::new(&g, 8, vec![0; 16]).is_ok());
    }
}
