//! Little-endian byte writing and bounds-checked reading shared by the stream header and the
//! predictors' side information, the checksum that covers them, and the parallel joining of a
//! stream's parts. Every read is checked: a short buffer is a `Corrupt` error.

use crate::element::Element;
use crate::error::{corrupt, Result};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// CRC-32 of `bytes`: blocks hashed in parallel, their states combined in order. One thread
/// hashing a whole stream was a tenth of a two-thread decode of a dense field.
pub fn crc32(bytes: &[u8]) -> u32 {
    const BLOCK: usize = 1 << 20;
    if bytes.len() <= BLOCK {
        return crc32fast::hash(bytes);
    }
    let hash = |block: &[u8]| {
        let mut h = crc32fast::Hasher::new();
        h.update(block);
        h
    };
    bytes
        .par_chunks(BLOCK)
        .map(hash)
        .reduce_with(|mut a, b| {
            a.combine(&b);
            a
        })
        .map_or_else(|| crc32fast::hash(&[]), |h| h.finalize())
}

/// Appends `parts` to `out` one after another, copied in pieces of at most 1 MiB on all
/// threads: one thread joining the parts of a large stream was a serial phase of two-thread
/// runs, and the first write of fresh memory also takes its page faults.
pub fn append_all(out: &mut Vec<u8>, parts: &[&[u8]]) {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(total);
    join_into(parts, &mut out.spare_capacity_mut()[..total]);
    // Safety: join_into wrote all `total` bytes.
    unsafe { out.set_len(out.len() + total) };
}

/// Writes `parts` one after another into `out`, which must be exactly as long as they are
/// together (panics otherwise), in parallel as `append_all`.
pub fn join_into(parts: &[&[u8]], out: &mut [MaybeUninit<u8>]) {
    const PIECE: usize = 1 << 20;
    let mut rest = out;
    let mut copies = Vec::new();
    for part in parts {
        let (slot, tail) = std::mem::take(&mut rest).split_at_mut(part.len());
        copies.extend(part.chunks(PIECE).zip(slot.chunks_mut(PIECE)));
        rest = tail;
    }
    assert!(rest.is_empty(), "parts fill the output exactly");
    copies.into_par_iter().for_each(|(from, to)| {
        for (t, &f) in to.iter_mut().zip(from) {
            t.write(f);
        }
    });
}

/// The longest `put_varint` output (a u64 in 7-bit groups).
pub const MAX_VARINT_BYTES: usize = 10;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_signed_varint(out: &mut Vec<u8>, v: i64) {
    put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        ByteReader { buf, pos: 0 }
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(corrupt!("{what}: needs {n} bytes, only {} left", self.remaining()));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    pub fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    pub fn element<T: Element>(&mut self, what: &str) -> Result<T> {
        Ok(T::read_le(self.take(T::BYTES, what)?))
    }
    pub fn varint(&mut self, what: &str) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err(corrupt!("{what}: varint longer than 64 bits"))
    }
    pub fn signed_varint(&mut self, what: &str) -> Result<i64> {
        let u = self.varint(what)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
    /// The next of a list of strictly increasing positions below `n`, stored as gaps (the first
    /// from 0); `previous` is the position read before, if any.
    pub fn next_position(&mut self, previous: Option<usize>, n: usize, what: &str) -> Result<usize> {
        let gap = self.varint(what)?;
        if previous.is_some() && gap == 0 {
            return Err(corrupt!("{what}: positions are not increasing"));
        }
        previous
            .unwrap_or(0)
            .checked_add(usize::try_from(gap).unwrap_or(usize::MAX))
            .filter(|&p| p < n)
            .ok_or_else(|| corrupt!("{what}: position out of range"))
    }
    /// A varint that must not exceed `max`, so callers can size allocations by it safely.
    pub fn bounded_varint(&mut self, max: u64, what: &str) -> Result<u64> {
        let v = self.varint(what)?;
        if v > max {
            return Err(corrupt!("{what}: {v} exceeds the limit {max}"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_all_joins_parts_in_order() {
        let big: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i * 7 % 251) as u8).collect();
        let parts: [&[u8]; 5] = [b"head", &[], &big, &big[5..(1 << 20) + 9], b"tail"];
        let mut out = b"kept".to_vec();
        append_all(&mut out, &parts);
        assert_eq!(out, [&b"kept"[..]].iter().chain(&parts).copied().collect::<Vec<&[u8]>>().concat());
    }

    #[test]
    #[should_panic(expected = "parts fill the output exactly")]
    fn join_into_refuses_a_longer_output() {
        join_into(&[b"abc"], &mut [MaybeUninit::new(0u8); 4]);
    }

    #[test]
    fn crc32_in_blocks_is_the_crc32_of_the_whole() {
        let data: Vec<u8> = (0..(3 << 20) + 77).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for n in [0, 1, 1 << 20, (1 << 20) + 1, 2 << 20, data.len()] {
            assert_eq!(crc32(&data[..n]), crc32fast::hash(&data[..n]), "{n} bytes");
        }
    }
}
