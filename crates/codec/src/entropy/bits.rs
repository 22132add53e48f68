//! Bits packed least significant first, as the Huffman segments and codebooks and the context
//! coder's extra bits store them.

use crate::error::{corrupt, Result};

/// Packs bits into bytes it owns (a coder may collect them before it knows where they go).
#[derive(Default)]
pub(crate) struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    used: u32,
}

impl BitWriter {
    /// Appends the low `n` bits of `value` (`n <= 32`).
    #[inline(always)]
    pub(crate) fn put(&mut self, value: u32, n: u32) {
        self.acc |= (value as u64) << self.used;
        self.used += n;
        if self.used >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.used -= 32;
        }
    }

    /// Appends each `value | n << 16` as `put(value, n)` does (`n <= 14`, a rANS token's extra
    /// bits), without a branch on when bytes fill: four values are joined before they go in
    /// (at most 56 bits, with fewer than 8 pending), and every step stores a whole word and
    /// moves on by the bytes it completed (as the Huffman coder does with pairs of codes).
    #[inline(always)]
    pub(crate) fn put_all(&mut self, values: &[u32]) {
        let (mut acc, mut used) = (self.acc, self.used);
        let start = self.out.len();
        // At most (31 + 14 * values) bits: 2 bytes a value and 4 more, and the last store
        // reaches a word past them.
        self.out.resize(start + 2 * values.len() + 12, 0);
        let out = &mut self.out[start..];
        let mut at = 0;
        let mut put = |value: u64, n: u32| {
            acc |= value << used;
            used += n;
            out[at..at + 8].copy_from_slice(&acc.to_le_bytes());
            let done = used / 8;
            at += done as usize;
            acc >>= 8 * done;
            used %= 8;
        };
        let split = |v: u32| ((v & 0xffff) as u64, v >> 16);
        // The first value alone: up to 31 bits may be pending from `put`.
        let (first, rest) = values.split_at(values.len().min(1));
        for &v in first {
            let (v, n) = split(v);
            put(v, n);
        }
        let mut quads = rest.chunks_exact(4);
        for q in &mut quads {
            let [(v0, n0), (v1, n1), (v2, n2), (v3, n3)] = [q[0], q[1], q[2], q[3]].map(split);
            debug_assert!(n0.max(n1).max(n2).max(n3) <= 14);
            let (s2, s3) = (n0 + n1, n0 + n1 + n2);
            put(v0 | v1 << n0 | v2 << s2 | v3 << s3, s3 + n3);
        }
        for &v in quads.remainder() {
            let (v, n) = split(v);
            put(v, n);
        }
        self.out.truncate(start + at);
        (self.acc, self.used) = (acc, used);
    }

    /// The bits so far, the last byte padded with zeros.
    pub(crate) fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.out);
        out.extend_from_slice(&self.acc.to_le_bytes()[..self.used.div_ceil(8) as usize]);
    }
}

/// LSB-first bit reader. `buf` holds `cnt` valid bits; each bit above them is 0 or already the
/// stream bit of that position (left from a previous load), so a refill can OR in a fresh
/// 8-byte load unconditionally. Past the end of the input it reads zeros; `consumed` tells
/// whether any were used.
pub(crate) struct BitReader<'a> {
    bits: &'a [u8],
    /// Next byte to load at bit `cnt` of `buf`.
    pos: usize,
    pub(crate) buf: u64,
    cnt: u32,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(bits: &'a [u8]) -> Self {
        BitReader { bits, pos: 0, buf: 0, cnt: 0 }
    }

    /// Ensures at least 56 valid bits.
    #[inline(always)]
    pub(crate) fn refill(&mut self) -> Result<()> {
        let word = match self.bits.get(self.pos..self.pos + 8) {
            Some(b) => u64::from_le_bytes(b.try_into().unwrap()),
            None => self.tail_word()?,
        };
        self.buf |= word << self.cnt;
        self.pos += (63 - self.cnt as usize) >> 3;
        self.cnt |= 56;
        Ok(())
    }

    #[cold]
    fn tail_word(&self) -> Result<u64> {
        // Everything buffered already lies past the end: the stream ran out. Stopping here
        // bounds the work on a hostile (huge count, tiny stream) input.
        if self.pos >= self.bits.len() + 8 {
            return Err(corrupt!("bitstream truncated"));
        }
        let rest = self.bits.get(self.pos..).unwrap_or(&[]);
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        Ok(u64::from_le_bytes(b))
    }

    #[inline(always)]
    pub(crate) fn consume(&mut self, n: u32) {
        self.buf >>= n;
        self.cnt -= n;
    }

    pub(crate) fn consumed(&self) -> u64 {
        self.pos as u64 * 8 - self.cnt as u64
    }
}
