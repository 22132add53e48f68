//! The lossless stage: a chunk's bytes are cut into frames of `FRAME_BYTES` (the last one
//! shorter), each passed through zstd or stored as is, so frames compress and decompress in
//! parallel. Layout: per frame, a flag (u8: 0 stored, 1 zstd) and its stored length (varint);
//! then the frames' bytes in order. The frame count follows from the chunk's raw length.

use crate::bytes::{put_varint, ByteReader};
use crate::error::{corrupt, Result};
use rayon::prelude::*;
use std::io::Read;

pub const FRAME_BYTES: usize = 1 << 20;

/// The smallest zstd frame (magic, frame header, one empty block) is longer than this; a frame
/// claiming fewer bytes is refused before any output is allocated for it.
const MIN_ZSTD_FRAME: u64 = 9;

pub fn zstd_compress(raw: &[u8], level: i32) -> Vec<u8> {
    // Writing into memory cannot fail except on allocation failure, which aborts anyway.
    zstd::bulk::compress(raw, level).expect("zstd compression into memory")
}

/// Packs `raw`; `level_for(frame)` gives the zstd level to try on a frame, or `None` to store it.
/// A frame is stored whenever zstd would not shrink it.
pub fn pack(raw: &[u8], level_for: impl Fn(&[u8]) -> Option<i32> + Sync) -> Vec<u8> {
    let frames: Vec<(u8, Vec<u8>)> = raw
        .par_chunks(FRAME_BYTES)
        .map(|frame| match level_for(frame).map(|level| zstd_compress(frame, level)) {
            Some(packed) if packed.len() < frame.len() => (1, packed),
            _ => (0, frame.to_vec()),
        })
        .collect();
    let mut out = Vec::with_capacity(frames.iter().map(|f| f.1.len() + 4).sum());
    for (flag, bytes) in &frames {
        out.push(*flag);
        put_varint(&mut out, bytes.len() as u64);
    }
    for (_, bytes) in &frames {
        out.extend_from_slice(bytes);
    }
    out
}

/// Inverse of `pack` for a chunk of `raw_len` bytes.
pub fn unpack(stored: &[u8], raw_len: u64) -> Result<Vec<u8>> {
    let n_frames = raw_len.div_ceil(FRAME_BYTES as u64);
    // Every frame costs at least two table bytes: check before sizing anything by the count.
    if n_frames > stored.len() as u64 / 2 {
        return Err(corrupt!("{raw_len} raw bytes need {n_frames} frames, more than {} stored bytes can describe", stored.len()));
    }
    let mut r = ByteReader::new(stored);
    let mut table = Vec::with_capacity(n_frames as usize);
    for k in 0..n_frames {
        let flag = r.u8("frame kind")?;
        let len = r.bounded_varint(stored.len() as u64, "frame length")?;
        let raw = (raw_len - k * FRAME_BYTES as u64).min(FRAME_BYTES as u64);
        match flag {
            0 if len == raw => {}
            0 => return Err(corrupt!("stored frame of {len} bytes should hold {raw}")),
            1 if len >= MIN_ZSTD_FRAME => {}
            1 => return Err(corrupt!("zstd frame of {len} bytes is too short")),
            f => return Err(corrupt!("unknown frame kind {f}")),
        }
        table.push((flag, len as usize));
    }
    let mut bodies = Vec::with_capacity(table.len());
    for &(_, len) in &table {
        bodies.push(r.take(len, "frame")?);
    }
    if r.remaining() != 0 {
        return Err(corrupt!("{} unexpected bytes after the last frame", r.remaining()));
    }
    let mut out = vec![0u8; raw_len as usize];
    out.par_chunks_mut(FRAME_BYTES).zip(&table).zip(&bodies).try_for_each(|((dst, &(flag, _)), body)| {
        if flag == 0 {
            dst.copy_from_slice(body);
            Ok(())
        } else {
            zstd_decompress_into(body, dst)
        }
    })?;
    Ok(out)
}

/// Decompresses one zstd frame that must fill `dst` exactly.
fn zstd_decompress_into(body: &[u8], dst: &mut [u8]) -> Result<()> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(body).map_err(|e| corrupt!("zstd: {e}"))?.single_frame();
    decoder.read_exact(dst).map_err(|e| corrupt!("zstd frame shorter than its {} bytes: {e}", dst.len()))?;
    let mut probe = [0u8; 1];
    match decoder.read(&mut probe) {
        Ok(0) => Ok(()),
        Ok(_) => Err(corrupt!("zstd frame longer than its {} bytes", dst.len())),
        Err(e) => Err(corrupt!("zstd: {e}")),
    }
}
