//! amrzip-amr: the cell-level work on AMR levels. A level's boxes are cut into unit blocks on a
//! lattice anchored at the level's domain corner (`unit_blocks`), grouped by the chunk of the
//! store they fall in, and compressed with one codebook per (level, field) (`level_codec`).
//! `boxes` is the box algebra (coverage, coarsening, nesting) the store's writer and reader
//! share.

#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod boxes;
pub mod level_codec;
pub mod unit_blocks;

pub use boxes::IBox;
pub use level_codec::{
    choose_predictor, compress_level, decode_blocks, decode_blocks_many, decode_chunk, decode_chunks, decode_region, trial_layouts, Keep,
    LevelStreams, SharedTables, Spread, Trial,
};
pub use unit_blocks::{BoxView, ChunkPlan, Layout, Tiling};
