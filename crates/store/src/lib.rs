//! amrzip-store: every on-disk format of amrzip beyond a single compressed stream, in one
//! implementation that Python, C and the MPI writer call.
//!
//! - The AMR snapshot store: a folder whose snapshots are each one file, a Zarr v3 hierarchy in
//!   a zip archive; a level's fields are one array whose chunks live in shards. Snapshots are
//!   committed atomically by many writers at once and survive a crash at any instant
//!   (`docs/format.md`, section 15).
//! - Multiresolution snapshots: arrays in HZ order, compressed level by level, read at a reduced
//!   resolution, over a region or progressively ([`multires`], `docs/format.md` section 17).
//! - The chunked-stream container (AMRS): one stream of records written chunk after chunk
//!   (`docs/format.md`, section 13), in [`chunked_stream`].

// Negated float comparisons are deliberate: they make NaN fail a check.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod archive;
pub mod array;
pub mod check;
pub mod chunked_stream;
pub mod chunking;
pub mod conservation;
pub mod error;
pub mod geometry;
pub mod layout;
pub mod metadata;
pub mod multires;
pub mod parallel;
pub mod reader;
pub mod shard;
pub mod store;
pub mod variables;
pub mod writer;
pub mod zarr_codec;

pub use error::{Error, ErrorKind, Result};
pub use reader::{Covered, Snapshot};
pub use store::{Holds, SnapshotEntry, SnapshotKind, Store};
pub use writer::{
    write_snapshot, write_snapshot_parallel, BoxData, BoxSource, FieldSpec, LevelSpec, SnapshotSpec, Values, WriteOptions, WriteSummary,
};
