//! Decoder fuzz target: `info` and `decompress` must return, never panic or abort, on any input.
//! Each input is decoded as given and again with both checksums recomputed, so that mutations
//! reach the parsers behind the CRC32 checks.
#![no_main]

use amrzip_codec::{decompress, info};
use libfuzzer_sys::fuzz_target;

/// Offset of the header checksum: the fixed fields, 2 u64 per dimension, the codebook, the
/// chunk count and 17 bytes per chunk entry (layout in `crates/codec/src/stream.rs`).
fn header_end(s: &[u8]) -> Option<usize> {
    let ndim = *s.get(6)? as usize;
    let at = 32 + 16 * ndim;
    let cb_len = u32::from_le_bytes(s.get(at..at + 4)?.try_into().ok()?) as usize;
    let at = at.checked_add(4 + cb_len)?;
    let n_chunks = usize::try_from(u64::from_le_bytes(s.get(at..at.checked_add(8)?)?.try_into().ok()?)).ok()?;
    let end = at.checked_add(8)?.checked_add(n_chunks.checked_mul(17)?)?;
    (end + 8 <= s.len()).then_some(end)
}

fn decode(s: &[u8]) {
    let meta = info(s);
    for result in
        [decompress::<f32>(s, Some(1)).map(|(v, shape)| (v.len(), shape)), decompress::<f64>(s, Some(1)).map(|(v, shape)| (v.len(), shape))]
    {
        if let Ok((len, shape)) = result {
            assert_eq!(Some(len), shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n)));
            assert_eq!(meta.as_ref().map(|m| &m.shape), Ok(&shape));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    decode(data);
    if let Some(end) = header_end(data) {
        let mut fixed = data.to_vec();
        let len = fixed.len();
        let crc = crc32fast::hash(&fixed[..end]);
        fixed[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        let crc = crc32fast::hash(&fixed[end + 4..len - 4]);
        fixed[len - 4..].copy_from_slice(&crc.to_le_bytes());
        decode(&fixed);
    }
});
