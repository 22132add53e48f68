//! Entropy stages: canonical Huffman over quantization symbols (one codebook per stream: its
//! own, a built-in one from `offline`, or in a chunked stream the one of the record before),
//! then a general-purpose lossless pass (zstd, in independent frames) over each chunk's bytes.
//! `adaptive` decides, chunk after chunk, when a chunked stream needs a new codebook.

pub mod adaptive;
mod bits;
pub mod frames;
pub mod huffman;
pub mod offline;
pub mod rangecoder;
pub mod rans;
pub mod residuals;
