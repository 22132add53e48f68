//! Entropy stages: canonical Huffman over quantization symbols (one codebook per stream), then a
//! general-purpose lossless pass (zstd) over each chunk's bytes.

pub mod huffman;

use crate::error::{corrupt, Result};
use std::io::Read;

pub fn zstd_compress(raw: &[u8], level: i32) -> Vec<u8> {
    // Writing into memory cannot fail except on allocation failure, which aborts anyway.
    zstd::bulk::compress(raw, level).expect("zstd compression into memory")
}

/// Decompresses exactly `raw_len` bytes. Memory grows with the bytes actually produced, so a
/// damaged length field cannot make us allocate more than the data really expands to.
pub fn zstd_decompress(stored: &[u8], raw_len: u64) -> Result<Vec<u8>> {
    let decoder = zstd::stream::read::Decoder::with_buffer(stored).map_err(|e| corrupt!("zstd: {e}"))?;
    let mut out = Vec::with_capacity(raw_len.min(stored.len() as u64 * 64) as usize);
    decoder.take(raw_len.saturating_add(1)).read_to_end(&mut out).map_err(|e| corrupt!("zstd: {e}"))?;
    if out.len() as u64 != raw_len {
        return Err(corrupt!("chunk decompresses to {} bytes, header says {raw_len}", out.len()));
    }
    Ok(out)
}
