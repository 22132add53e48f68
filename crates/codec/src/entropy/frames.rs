//! The lossless stage: a chunk's bytes are cut into frames of `FRAME_BYTES` (the last one
//! shorter), each passed through zstd or stored as is, so frames compress and decompress in
//! parallel. Layout: per frame, a flag (u8: 0 stored, 1 zstd) and its stored length (varint);
//! then the frames' bytes in order. The frame count follows from the chunk's raw length.

use crate::bytes::{append_all, put_varint, ByteReader, MAX_VARINT_BYTES};
use crate::error::{corrupt, Result};
use crate::Preset;
use rayon::prelude::*;
use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Read;
use zstd::zstd_safe::{DCtx, ResetDirective};

pub const FRAME_BYTES: usize = 1 << 20;

/// The smallest zstd frame (magic, frame header, one empty block) is this long; a frame
/// claiming fewer bytes is refused before any output is allocated for it.
const MIN_ZSTD_FRAME: u64 = 9;

pub fn zstd_compress(raw: &[u8], level: i32) -> Vec<u8> {
    // One context per thread: creating one per call cost more than compressing the small
    // frames of unit-block chunks and samples.
    thread_local! {
        static CONTEXT: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    }
    // Writing into memory cannot fail except on allocation failure, which aborts anyway.
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        let compressor = match c.as_mut() {
            Some(compressor) => compressor,
            None => c.insert(zstd::bulk::Compressor::new(level).expect("a zstd context")),
        };
        compressor.set_compression_level(level).and_then(|_| compressor.compress(raw)).expect("zstd compression into memory")
    })
}

/// A frame through zstd, or `None` to store it. A level-1 trial on a slice tells dense
/// Huffman output (rough fields at tight bounds: zstd gains next to nothing) from sparse output
/// (long runs of one code), where a strong level pays: such frames code many values per byte.
/// A trial over the whole frame at the level chosen is the result.
pub fn packed_frame(preset: Preset, frame: &[u8]) -> Option<Vec<u8>> {
    const TRIAL: usize = 1 << 15;
    let whole = frame.len() <= 4 * TRIAL;
    let slice = if whole { frame } else { &frame[frame.len() / 2..][..TRIAL] };
    let trial = zstd_compress(slice, 1);
    let gain = slice.len() as f64 / trial.len().max(1) as f64;
    let level = match preset {
        Preset::Speed if gain < 1.03 => return None,
        Preset::Speed => 1,
        Preset::Ratio if gain >= 2.0 => 9,
        Preset::Ratio => 3,
    };
    Some(if whole && level == 1 { trial } else { zstd_compress(frame, level) })
}

/// Packs `raw`; `compress(frame)` gives a frame's zstd bytes, or `None` to store it. A frame
/// is stored whenever zstd would not shrink it.
pub fn pack(raw: &[u8], compress: impl Fn(&[u8]) -> Option<Vec<u8>> + Sync) -> Vec<u8> {
    let frames: Vec<(u8, Cow<[u8]>)> = raw
        .par_chunks(FRAME_BYTES)
        .map(|frame| match compress(frame) {
            Some(packed) if packed.len() < frame.len() => (1, Cow::Owned(packed)),
            _ => (0, Cow::Borrowed(frame)),
        })
        .collect();
    let mut out = Vec::with_capacity(frames.iter().map(|f| f.1.len() + 1 + MAX_VARINT_BYTES).sum());
    for (flag, bytes) in &frames {
        out.push(*flag);
        put_varint(&mut out, bytes.len() as u64);
    }
    append_all(&mut out, &frames.iter().map(|(_, bytes)| &bytes[..]).collect::<Vec<_>>());
    out
}

/// Inverse of `pack` for a chunk of `raw_len` bytes. A chunk whose frames are all stored is
/// its frames' bytes as they lie, and is returned without a copy (the dense codes of rough
/// fields at tight bounds are stored, and are the largest chunks).
pub fn unpack(stored: &[u8], raw_len: u64) -> Result<Cow<'_, [u8]>> {
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
    if table.iter().all(|&(flag, _)| flag == 0) {
        // The lengths were checked against raw_len above and the bodies are contiguous.
        let start = stored.len() - table.iter().map(|&(_, len)| len).sum::<usize>();
        return Ok(Cow::Borrowed(&stored[start..]));
    }
    // Each zstd frame decodes into its own buffer, grown by the bytes it really produces: a
    // frame that claims more than its data expands to fails before the chunk is ever allocated
    // whole. Then all frames are copied into place in parallel (one thread joining them was a
    // tenth of a two-thread decode of a dense field).
    let parts: Vec<Cow<[u8]>> = table
        .par_iter()
        .zip(&bodies)
        .enumerate()
        .map(|(k, (&(flag, _), &body))| {
            let raw = (raw_len - k as u64 * FRAME_BYTES as u64).min(FRAME_BYTES as u64) as usize;
            if flag == 0 {
                Ok(Cow::Borrowed(body))
            } else {
                zstd_frame(body, raw).map(Cow::Owned)
            }
        })
        .collect::<Result<_>>()?;
    // Every part holds exactly its frame's share of raw_len (checked above and by zstd_frame).
    let mut out = Vec::with_capacity(raw_len as usize);
    append_all(&mut out, &parts.iter().map(|part| &part[..]).collect::<Vec<_>>());
    Ok(Cow::Owned(out))
}

/// Decompresses one zstd frame that must hold exactly `raw` bytes and nothing after it.
fn zstd_frame(body: &[u8], raw: usize) -> Result<Vec<u8>> {
    // One context per thread, as for compression: the unit-block sets of an AMR read decode
    // many small frames, and creating a context per frame showed in profiles.
    thread_local! {
        static CONTEXT: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
    }
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        let context = match c.as_mut() {
            Some(context) => context,
            None => c.insert(DCtx::try_create().ok_or_else(|| corrupt!("cannot create a zstd context"))?),
        };
        // A frame that failed halfway may have left the context mid-frame.
        context.reset(ResetDirective::SessionOnly).map_err(|e| corrupt!("zstd: {}", zstd::zstd_safe::get_error_name(e)))?;
        let mut decoder = zstd::stream::read::Decoder::with_context(body, context).single_frame();
        let mut out = Vec::new();
        (&mut decoder).take(raw as u64 + 1).read_to_end(&mut out).map_err(|e| corrupt!("zstd frame: {e}"))?;
        if out.len() != raw {
            return Err(corrupt!("zstd frame holds {} bytes, not {raw}", out.len()));
        }
        if !decoder.finish().is_empty() {
            return Err(corrupt!("bytes after the zstd frame"));
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(raw: &[u8], level: Option<i32>) -> Vec<u8> {
        pack(raw, |frame| level.map(|level| zstd_compress(frame, level)))
    }

    #[test]
    fn frames_round_trip_stored_and_zstd() {
        let raw: Vec<u8> = (0..FRAME_BYTES * 2 + 77).map(|i| (i / 3 % 251) as u8).collect();
        for level in [None, Some(1), Some(9)] {
            assert_eq!(*unpack(&packed(&raw, level), raw.len() as u64).unwrap(), raw);
        }
    }

    #[test]
    fn a_frame_claiming_more_than_it_holds_is_refused() {
        // A valid zstd frame of 1000 zeros, filed as a chunk claiming 2 GiB of raw bytes.
        let body = zstd_compress(&[0u8; 1000], 3);
        let mut stored = Vec::new();
        for _ in 0..2048 {
            stored.push(1);
            put_varint(&mut stored, body.len() as u64);
        }
        for _ in 0..2048 {
            stored.extend_from_slice(&body);
        }
        assert!(matches!(unpack(&stored, 1 << 31), Err(crate::error::CodecError::Corrupt(_))));
    }

    #[test]
    fn bytes_after_a_zstd_frame_are_refused() {
        let raw = vec![7u8; 5000];
        let mut body = zstd_compress(&raw, 3);
        body.extend_from_slice(&zstd_compress(&raw, 3));
        let mut stored = vec![1];
        put_varint(&mut stored, body.len() as u64);
        stored.extend_from_slice(&body);
        assert!(unpack(&stored, raw.len() as u64).is_err());
    }
}
