//! Entropy stages: canonical Huffman over quantization symbols (one codebook per stream: its
//! own, a built-in one from `offline`, or in a chunked stream the one of the record before),
//! then a general-purpose lossless pass (zstd, in independent frames) over each chunk's bytes;
//! or, in ratio mode where it is smaller, the symbols coded in context (`contexts`, over the
//! model of `residuals`), which the lossless pass leaves as they are.
//! `adaptive` decides, chunk after chunk, when a chunked stream needs a new codebook.

pub mod adaptive;
mod bits;
pub mod contexts;
pub mod frames;
pub mod huffman;
pub mod offline;
pub mod rangecoder;
pub mod rans;
pub mod residuals;
