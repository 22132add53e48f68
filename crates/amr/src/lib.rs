//! amrzip-amr: the cell-level work on AMR levels. A level's boxes are cut into unit blocks on a
//! lattice anchored at the level's domain corner (`unit_blocks`), grouped by the chunk of the
//! store they fall in, and compressed with one codebook per (level, field) (`level_codec`).
//! Box-level logic (coverage, coarsening, which boxes touch a region) works on a few hundred
//! boxes and stays in Python; everything that touches cells is here.

#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod level_codec;
pub mod unit_blocks;

pub use level_codec::{compress_level, decode_chunks, decode_region, trial_sizes, LevelStreams};
pub use unit_blocks::{BoxView, Layout, Tiling};
