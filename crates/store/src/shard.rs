//! Shards: the Zarr v3 `sharding_indexed` layout (chunks one after another, then an index of
//! `(offset, nbytes)` per inner chunk in C order, with a CRC-32C), so that zarr-python and zarrs
//! read them (docs/format.md 15.3):
//!
//! ```text
//! chunks:  position varint | block set (docs/format.md section 14)
//! index:   per inner chunk (offset u64, nbytes u64), both 2^64 - 1 when absent | CRC-32C u32
//! ```
//!
//! A chunk's position is its index in the array's whole chunk grid (C order over field, then
//! space): a reader that finds another number there has been handed a chunk from elsewhere, in
//! this shard or another. So a read checks a chunk without reading its shard's whole index.

use crate::error::{corrupt, Result};

const ABSENT: u64 = u64::MAX;

pub fn index_len(inner: usize) -> usize {
    16 * inner + 4
}

pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A shard of `chunks`, one entry per inner chunk in C order: the chunk's position in the
/// array and its block set, or `None` where absent.
pub fn build(chunks: &[Option<(u64, Vec<u8>)>]) -> Vec<u8> {
    let body: usize = chunks.iter().flatten().map(|(_, c)| c.len() + 10).sum();
    let mut out = Vec::with_capacity(body + index_len(chunks.len()));
    let mut index = Vec::with_capacity(index_len(chunks.len()));
    for chunk in chunks {
        match chunk {
            Some((position, set)) => {
                let start = out.len() as u64;
                put_varint(&mut out, *position);
                out.extend_from_slice(set);
                index.extend_from_slice(&start.to_le_bytes());
                index.extend_from_slice(&(out.len() as u64 - start).to_le_bytes());
            }
            None => {
                index.extend_from_slice(&ABSENT.to_le_bytes());
                index.extend_from_slice(&ABSENT.to_le_bytes());
            }
        }
    }
    let crc = crc32c::crc32c(&index);
    index.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&index);
    out
}

/// One index entry (16 bytes) of a shard whose chunks end at `body_end`: the chunk's byte range,
/// or None where absent.
pub fn entry(e: &[u8], body_end: u64) -> Result<Option<(u64, u64)>> {
    let offset = u64::from_le_bytes(e[..8].try_into().expect("16-byte entry"));
    let nbytes = u64::from_le_bytes(e[8..16].try_into().expect("16-byte entry"));
    if offset == ABSENT && nbytes == ABSENT {
        return Ok(None);
    }
    if nbytes == 0 || offset.checked_add(nbytes).is_none_or(|end| end > body_end) {
        return Err(corrupt!("index entry ({offset}, {nbytes}) lies outside the shard's chunks"));
    }
    Ok(Some((offset, nbytes)))
}

/// Parses and checks a whole index of `inner` entries: its CRC-32C, every entry inside the
/// shard's chunks (which end at `body_end`, where the index starts), none overlapping.
pub fn read_index(bytes: &[u8], inner: usize, body_end: u64) -> Result<Vec<Option<(u64, u64)>>> {
    if bytes.len() != index_len(inner) {
        return Err(corrupt!("shard index of {} bytes, {} expected", bytes.len(), index_len(inner)));
    }
    let (body, crc) = bytes.split_at(16 * inner);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt!("shard index checksum mismatch"));
    }
    let entries = body
        .chunks_exact(16)
        .enumerate()
        .map(|(k, e)| entry(e, body_end).map_err(|e| e.within(format!("entry {k}"))))
        .collect::<Result<Vec<_>>>()?;
    let mut ranges: Vec<(u64, u64, usize)> = entries.iter().enumerate().filter_map(|(k, e)| e.map(|(o, n)| (o, n, k))).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(corrupt!("shard index entries {} and {} overlap", w[0].2, w[1].2));
        }
    }
    Ok(entries)
}

/// The block set of a stored chunk, checking that it says it is at `position`.
pub fn open_chunk(bytes: &[u8], position: u64) -> Result<&[u8]> {
    let (found, len) = tag(bytes).ok_or_else(|| corrupt!("chunk at position {position} has no valid position tag"))?;
    if found != position {
        return Err(corrupt!("chunk at position {position} says it belongs at {found} (misplaced)"));
    }
    Ok(&bytes[len..])
}

/// A chunk's position tag and its length in bytes.
pub fn tag(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_round_trip_and_refuse_damage() {
        let chunks = vec![Some((40, b"first".to_vec())), None, None, Some((300, vec![9; 300]))];
        let shard = build(&chunks);
        let at = shard.len() - index_len(4);
        let index = read_index(&shard[at..], 4, at as u64).unwrap();
        for (k, c) in chunks.iter().enumerate() {
            match (c, index[k]) {
                (Some((p, c)), Some((o, n))) => assert_eq!(open_chunk(&shard[o as usize..(o + n) as usize], *p).unwrap(), c.as_slice()),
                (None, None) => {}
                _ => panic!("entry {k}"),
            }
        }
        // A chunk read as another position's; any flipped byte of the index.
        let (o, n) = index[3].unwrap();
        assert!(open_chunk(&shard[o as usize..(o + n) as usize], 40).is_err());
        for i in at..shard.len() {
            let mut bad = shard.clone();
            bad[i] ^= 1;
            assert!(read_index(&bad[at..], 4, at as u64).is_err(), "flip at {i}");
        }
        assert!(entry(&[0u8; 16], 10).is_err());
        assert!(entry(&[[5u8, 0, 0, 0, 0, 0, 0, 0], [6, 0, 0, 0, 0, 0, 0, 0]].concat(), 10).is_err());
    }
}
