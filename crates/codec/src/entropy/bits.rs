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
