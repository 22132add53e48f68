//! Recomputing a stream's two CRC32 checksums after a mutation, so that the mutation reaches the
//! parsers behind them instead of failing the checks. Shared by the fuzz targets.

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

/// `data` with both checksums made to match, if it is long enough to hold them where its header
/// says they are.
pub fn with_checksums_fixed(data: &[u8]) -> Option<Vec<u8>> {
    let end = header_end(data)?;
    let mut fixed = data.to_vec();
    let len = fixed.len();
    let crc = crc32fast::hash(&fixed[..end]);
    fixed[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32fast::hash(&fixed[end + 4..len - 4]);
    fixed[len - 4..].copy_from_slice(&crc.to_le_bytes());
    Some(fixed)
}
