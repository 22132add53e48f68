//! amrzip-staging: the tables of a staging service for AMR boxes after AMRZone (Zhang et al.,
//! "AMRZone: A Runtime AMR Data Sharing Framework For Scientific Applications", CCGrid 2017).
//!
//! - [`placement`]: the workload tables and Algorithm 1, which puts each box on the least
//!   loaded data server of the least loaded node as it arrives.
//! - [`hilbert`]: the Hilbert curve and the static partition along it that DataSpaces-like
//!   services use, as the baseline placement.
//! - [`polytree`]: the index of refinement edges between boxes of adjacent levels and the
//!   depth-first spatial query over it (Algorithm 2), with the linear scan it replaces.
//! - [`catalog`]: everything the metadata server keeps, in one object, and its snapshot.

pub mod catalog;
pub mod hilbert;
pub mod placement;
pub mod polytree;

pub use catalog::{BoxKey, Catalog, DServerStatus, Hit, IndexStats, Record, TimestepSummary};
pub use hilbert::{hilbert_index, hilbert_loads, MAX_DIMS};
pub use placement::{simulate, Workload};
pub use polytree::Polytree;
