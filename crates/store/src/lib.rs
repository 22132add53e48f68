//! amrzip-store: every on-disk format of amrzip beyond a single compressed stream, in one
//! implementation that Python, C and the MPI writer call.
//!
//! - The AMR snapshot store: a folder whose snapshots are each one file, a Zarr v3 hierarchy in
//!   a zip archive; a level's fields are one array whose chunks live in shards. Snapshots are
//!   committed atomically by many writers at once and survive a crash at any instant
//!   (`docs/format.md`, section 15).
//! - The chunked-stream container (AMRS): one stream of records written chunk after chunk
//!   (`docs/format.md`, section 13), in [`chunked_stream`].

pub mod chunked_stream;
