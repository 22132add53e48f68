//! A binary adaptive range coder: each decision is coded with a probability that learns from
//! the decisions coded with it before, so a decision that is nearly certain costs a small
//! fraction of a bit (a Huffman code costs at least one bit per symbol).
//!
//! The coder keeps a 32-bit range and a 33-bit low end; probabilities are 16-bit estimates of
//! "the bit is 0", learnt as a running mean of the first decisions, then moved `1/2^ADAPT` of
//! the way to each coded bit. Bytes leave the low end once
//! the range falls below 2^24; a carry into bytes already produced is resolved by holding back
//! the last byte and the run of 0xFF bytes before it (format.md, 14.3).

use crate::error::{corrupt, Result};

const PROB_BITS: u32 = 16;
const ADAPT: u32 = 6;
const TOP: u32 = 1 << 24;

/// An adaptive estimate of the probability that a decision is 0, in units of `2^-PROB_BITS`,
/// and how many decisions it has learnt from (at most `MAX_SEEN`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prob {
    p: u16,
    seen: u16,
}

/// Past this many decisions an estimate moves `1/2^ADAPT` of the way to each new one.
pub const MAX_SEEN: u16 = (1 << ADAPT) - 2;

impl Default for Prob {
    fn default() -> Prob {
        Prob { p: 1 << (PROB_BITS - 1), seen: 0 }
    }
}

impl Prob {
    /// An estimate of `zeros` in `zeros + ones` decisions, trusted as `min(total, seen)` of them.
    pub fn learnt(zeros: u64, ones: u64, seen: u16) -> Prob {
        let total = zeros + ones;
        let p = ((zeros as f64 + 0.5) / (total as f64 + 1.0) * (1 << PROB_BITS) as f64).round();
        Prob { p: (p as u32).clamp(1, (1 << PROB_BITS) - 1) as u16, seen: total.min(seen.min(MAX_SEEN) as u64) as u16 }
    }

    /// `(p, seen)` as stored; `None` unless `0 < p < 2^PROB_BITS` and `seen <= MAX_SEEN`.
    pub fn from_parts(p: u16, seen: u16) -> Option<Prob> {
        (p > 0 && (p as u32) < 1 << PROB_BITS && seen <= MAX_SEEN).then_some(Prob { p, seen })
    }

    pub fn parts(self) -> (u16, u16) {
        (self.p, self.seen)
    }

    /// Moves the estimate `1/(seen + 2)` of the way to the bit: a running mean at first,
    /// so the first decisions teach fast, then a fixed rate that follows drift.
    #[inline(always)]
    fn update(&mut self, bit: bool) {
        let target: i32 = if bit { 0 } else { 1 << PROB_BITS };
        let step = (target - self.p as i32) / (self.seen as i32 + 2);
        self.p = (self.p as i32 + step) as u16;
        if self.seen < MAX_SEEN {
            self.seen += 1;
        }
    }
}

pub struct Encoder {
    low: u64,
    range: u32,
    /// The byte held back (a carry may still add to it) and how many bytes it stands for:
    /// itself and the 0xFF bytes after it.
    cache: u8,
    pending: u64,
    out: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder { low: 0, range: u32::MAX, cache: 0, pending: 1, out: Vec::new() }
    }
}

impl Encoder {
    #[inline(always)]
    pub fn bit(&mut self, p: &mut Prob, bit: bool) {
        let bound = (self.range >> PROB_BITS) * p.p as u32;
        if bit {
            self.low += bound as u64;
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        while self.range < TOP {
            self.range <<= 8;
            self.shift();
        }
    }

    fn shift(&mut self) {
        if (self.low as u32) < 0xFF00_0000 || self.low >> 32 != 0 {
            let carry = (self.low >> 32) as u8;
            let mut byte = self.cache;
            for _ in 0..self.pending {
                self.out.push(byte.wrapping_add(carry));
                byte = 0xFF;
            }
            self.pending = 0;
            self.cache = (self.low >> 24) as u8;
        }
        self.pending += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    /// The coded bytes: the first is always 0 (the held-back byte before any carry).
    pub fn finish(mut self) -> Vec<u8> {
        for _ in 0..5 {
            self.shift();
        }
        self.out
    }
}

pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> Decoder<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Decoder<'a>> {
        if bytes.len() < 5 || bytes[0] != 0 {
            return Err(corrupt!("range-coded symbols: {} bytes, or a first byte that is not 0", bytes.len()));
        }
        let code = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes"));
        Ok(Decoder { bytes, pos: 5, range: u32::MAX, code })
    }

    #[inline(always)]
    pub fn bit(&mut self, p: &mut Prob) -> bool {
        let bound = (self.range >> PROB_BITS) * p.p as u32;
        let bit = self.code >= bound;
        if bit {
            self.code -= bound;
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        while self.range < TOP {
            self.range <<= 8;
            // Past the end the coder reads zeros; `finish` then refuses the stream.
            self.code = self.code << 8 | *self.bytes.get(self.pos).unwrap_or(&0) as u32;
            self.pos += 1;
        }
        bit
    }

    /// Checks that decoding used exactly the bytes the encoder wrote.
    pub fn finish(self) -> Result<()> {
        if self.pos != self.bytes.len() {
            return Err(corrupt!("range-coded symbols end after {} of {} bytes", self.pos, self.bytes.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skewed_bits_round_trip_in_a_fraction_of_a_bit_each() {
        let mut state = 12345u64;
        let bits: Vec<bool> = (0..100_000)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 40) % 100 < 3
            })
            .collect();
        let mut enc = Encoder::default();
        let mut p = Prob::default();
        for &b in &bits {
            enc.bit(&mut p, b);
        }
        let bytes = enc.finish();
        // Entropy of a 3% bit: 0.194 bits.
        assert!(bytes.len() * 8 < bits.len() * 21 / 100, "{} bytes", bytes.len());
        let mut dec = Decoder::new(&bytes).unwrap();
        let mut p = Prob::default();
        assert!(bits.iter().all(|&b| dec.bit(&mut p) == b));
        dec.finish().unwrap();
    }

    #[test]
    fn carries_and_edges_round_trip() {
        // Long runs of certain bits drive the low end through carries and 0xFF runs.
        for pattern in [vec![true; 5000], vec![false; 5000], (0..5000).map(|i| i % 97 == 0).collect(), vec![]] {
            let mut enc = Encoder::default();
            let mut probs = [Prob::default(); 2];
            for (i, &b) in pattern.iter().enumerate() {
                enc.bit(&mut probs[i % 2], b);
            }
            let bytes = enc.finish();
            let mut dec = Decoder::new(&bytes).unwrap();
            let mut probs = [Prob::default(); 2];
            for (i, &b) in pattern.iter().enumerate() {
                assert_eq!(dec.bit(&mut probs[i % 2]), b, "bit {i}");
            }
            dec.finish().unwrap();
        }
    }
}
