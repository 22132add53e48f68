//! Entropy stages: canonical Huffman over quantization symbols (one codebook per stream), then a
//! general-purpose lossless pass (zstd, in independent frames) over each chunk's bytes.

pub mod frames;
pub mod huffman;
