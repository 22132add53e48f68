//! amrzip-hz: the hierarchical Z (HZ) order of PIDX's IDX format as a compressed layout.
//!
//! An array's points are ordered coarse to fine: HZ level 0 is the origin, and each level
//! after it refines one axis by two (the order of axes is the *bitmask*), so the points of
//! levels `0..=j` are the array subsampled on a lattice, and reading them reads a prefix of
//! the layout. Levels are cut into IDX blocks of `2^block_bits` slots; a block is a box of its
//! level's lattice, and a block no stored point falls in is skipped.
//!
//! - [`geometry`]: the bitmask, levels, lattices, blocks and HZ indices.
//! - [`order`]: the axis order of the bitmask, chosen from the data.
//! - [`resolution`]: adaptive resolution (the finest level kept per tile of the array), region
//!   and AMR rules, and the storage efficiency `E = P / (P + S)` of IDX blocks.
//! - [`codec`]: compressed HZ levels. Each level is predicted from the coarser ones and quantized
//!   within the bound at its own points, so a prefix decodes to a reduced resolution.

pub mod codec;
pub mod geometry;
pub mod order;
pub mod resolution;

pub use codec::{encode, Encoded, Index, Reader};
pub use geometry::{Geometry, LevelBlock};
pub use order::choose_order;
pub use resolution::ResolutionMap;
