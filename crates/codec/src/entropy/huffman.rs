//! Canonical Huffman coding of `u16` symbols, length-limited to [`MAX_CODE_LEN`] bits.
//!
//! One [`Codebook`] serves every chunk of a stream; each chunk is encoded into its own
//! bitstream so chunks decode independently. A bitstream carries no symbol count and no
//! terminator: the decoder is told how many symbols to produce.
//!
//! # Codes
//! Code lengths are Huffman's; where they exceed the limit, the rarest symbols' codes are
//! adjusted to fit (see `limit_lengths`). Codes are canonical as in
//! DEFLATE (RFC 1951, 3.2.2): the used symbols, sorted by (code length, symbol id), receive
//! consecutive code values; the first code of the shortest length is 0, and moving to the
//! next length appends a 0 bit (`next = (last + 1) << (new_len - old_len)`). A codebook with
//! a single used symbol gives it the 1-bit code `0`; otherwise the code is complete (Kraft
//! sum exactly 1).
//!
//! # Bit order
//! Bits are packed LSB-first: stream bit `i` is bit `i % 8` (value `1 << (i % 8)`) of byte
//! `i / 8`. Each code is written most significant code bit first, so read as a little-endian
//! integer a code appears bit-reversed (the DEFLATE convention). Symbols follow one another
//! with no alignment; the last byte is padded with zero bits.
//!
//! # Serialized codebook
//! Integers marked varint are LEB128: 7 bits per byte, least significant group first, high
//! bit set on every byte but the last, at most 10 bytes.
//! ```text
//! runs          varint  number of maximal runs of consecutive used symbols; 0 = empty codebook,
//!                       nothing follows
//! runs times:
//!   gap         varint  first run: its first symbol id; later runs: first symbol id minus
//!                       (last symbol id of the previous run + 2), runs never touch
//!   len_minus_1 varint  number of symbols in the run, minus 1
//! lengths       ceil(5 * n / 8) bytes, n = number of used symbols: for each used symbol in
//!               increasing id order, (code length - 1) as a 5-bit field, fields packed
//!               LSB-first as in the bitstream; padding bits are 0
//! ```
//! A reader rejects symbol ids >= the alphabet size, lengths above [`MAX_CODE_LEN`], nonzero
//! padding, and any code that is not complete (a lone symbol must have length 1).

use super::bits::{BitReader, BitWriter};
use crate::cpu;
use crate::error::{corrupt, CodecError, Result};
use rayon::prelude::*;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// Longest code. 24 bits keep an encoder table entry (code + length) in a `u32`, let the
/// decoder's slow path read one 24-bit window, and still leave room for very skewed
/// histograms over the full 65536-symbol alphabet.
pub const MAX_CODE_LEN: u32 = 24;

const MAX_ALPHABET: usize = 1 << 16;
const CODE_MASK: u32 = (1 << MAX_CODE_LEN) - 1;
/// Bytes the encoder stores at a time, and symbols it makes room for at a time.
const WORD: usize = 8;
const ENCODE_BLOCK: usize = 1 << 12;

/// Bits indexing the primary decode table: 2^12 entries of 8 bytes = 32 KiB, inside L1 on
/// current cores; 12 rather than 11 bits takes the slow path far less on broad histograms.
const TABLE_BITS: u32 = 12;
/// For codebooks whose codes are longer than TABLE_BITS often enough (`WIDE_SHARE`), the
/// slow path would dominate: a table of 2^14 entries (128 KiB, in L2) covers most of them,
/// and decoding several streams in lockstep hides the longer loads.
const WIDE_TABLE_BITS: u32 = 14;
/// Share of the code space (the implied probability) above which codes longer than
/// TABLE_BITS make a codebook take the wide table.
const WIDE_SHARE: f64 = 1.0 / 16.0;
/// Symbols one table entry can hold.
const SYMS_PER_ENTRY: usize = 3;
/// A refill leaves at least 56 bits in the buffer; each table hit consumes at most
/// WIDE_TABLE_BITS.
const LOOKUPS_PER_REFILL: usize = 56 / WIDE_TABLE_BITS as usize;

/// Indexed by the next `bits` stream bits. An entry packs up to three symbols (bits 0..48),
/// the bits they take together (48..56), the length of the first symbol alone (56..60) and
/// the symbol count (60..64). Count 0 means the first code is longer than `bits` (or
/// unused): take the canonical slow path, starting at the code length in bits 0..8.
struct DecodeTable {
    entries: Box<[u64]>,
    bits: u32,
}

cpu::fast_fn!(
    /// `Codebook::encode`, whose loop shifts by a variable amount for every symbol (BMI2).
    fn encode_bits(codebook: &Codebook, symbols: &[u16], out: &mut Vec<u8>) -> Result<()> => Codebook::encode_in
);

pub struct Codebook {
    /// Symbol 0's entry (the quantizer's escape), kept apart: it lies half the alphabet away
    /// from the symbols around the zero residual, and a table spanning both would be most of
    /// a small array's coding time to build and to write.
    zero: u32,
    /// Indexed by symbol - `enc_first`, from the first to the last used symbol other than 0:
    /// bit-reversed code | length << 24 (0 = unused).
    enc: Vec<u32>,
    enc_first: usize,
    /// Primary decode table, built on first use (encoders never need it).
    dec: OnceLock<DecodeTable>,
    /// Used symbols in canonical order (length, then id).
    sorted: Vec<u16>,
    /// Slow path, per length l: exclusive upper bound of the codes of length <= l, left-aligned
    /// to MAX_CODE_LEN bits, and the offset turning a code of length l into an index of `sorted`.
    limit: [u32; MAX_CODE_LEN as usize + 1],
    base: [u32; MAX_CODE_LEN as usize + 1],
}

/// Symbol counts over the range of symbols seen, not the whole alphabet: a small array's few
/// symbols would otherwise pay for clearing and scanning 65536 counts at every step (over half
/// the compression time of an 8x8x8 array). Symbol 0, the escape, is counted apart, or the
/// range would reach from it to the symbols around the zero residual.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    zeros: u64,
    first: usize,
    counts: Vec<u64>,
}

impl Histogram {
    /// The counts of `symbols`, block by block in parallel.
    pub fn of(symbols: &[u16]) -> Histogram {
        let parts: Vec<Histogram> = symbols.par_chunks(COUNT_BLOCK).map(count_block).collect();
        let mut h = Histogram::default();
        for part in &parts {
            h.add(part);
        }
        h
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Histogram) {
        self.zeros += other.zeros;
        self.add_range(other.first, &other.counts);
    }

    /// Adds the counts of `symbols`. For many short symbol lists (unit blocks, samples).
    pub fn add_symbols(&mut self, symbols: &[u16]) {
        for block in symbols.chunks(COUNT_BLOCK) {
            self.add(&count_block(block));
        }
    }

    fn add_range(&mut self, first: usize, counts: &[u64]) {
        if counts.is_empty() {
            return;
        }
        if self.counts.is_empty() {
            (self.first, self.counts) = (first, counts.to_vec());
            return;
        }
        let lo = self.first.min(first);
        let hi = (self.first + self.counts.len()).max(first + counts.len());
        if (lo, hi) != (self.first, self.first + self.counts.len()) {
            let mut grown = vec![0u64; hi - lo];
            grown[self.first - lo..self.first - lo + self.counts.len()].copy_from_slice(&self.counts);
            (self.first, self.counts) = (lo, grown);
        }
        add_range(&mut self.counts, first - self.first, counts);
    }

    /// `zeros u64 | first u64 | counts u64...`, for adding up those of other processes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        [self.zeros, self.first as u64].iter().chain(&self.counts).flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Adds counts written by `to_le_bytes`; false if they are not such counts.
    pub fn merge_le_bytes(&mut self, bytes: &[u8]) -> bool {
        let words: Vec<u64> = bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
        match words.as_slice() {
            [zeros, first, counts @ ..]
                if bytes.len().is_multiple_of(8) && (*first as usize).saturating_add(counts.len()) <= MAX_ALPHABET =>
            {
                self.add(&Histogram { zeros: *zeros, first: *first as usize, counts: counts.to_vec() });
                true
            }
            _ => false,
        }
    }

    /// The number of symbols counted.
    pub fn total(&self) -> u64 {
        self.zeros + self.counts.iter().sum::<u64>()
    }

    /// The counts of symbols `0..alphabet` (which must hold every symbol counted).
    pub fn dense(&self, alphabet: usize) -> Vec<u64> {
        let mut h = vec![0u64; alphabet];
        add_range(&mut h, self.first, &self.counts);
        if self.zeros > 0 {
            h[0] += self.zeros;
        }
        h
    }
}

fn add_range(h: &mut [u64], lo: usize, counts: &[u64]) {
    h[lo..lo + counts.len()].iter_mut().zip(counts).for_each(|(a, b)| *a += b);
}

const COUNT_BLOCK: usize = 1 << 20;

cpu::fast_fn!(
    /// Counts of one block over its own symbol range: the first symbol and the counts from it.
    /// Four interleaved tables: runs of one symbol, the rule on smooth data, would otherwise
    /// wait on each increment's store before the next load; and a table over the block's range
    /// only costs far fewer page faults than one over the whole alphabet.
    fn count_block(symbols: &[u16]) -> Histogram => count_block_in
);

#[inline(always)]
fn count_block_in(symbols: &[u16]) -> Histogram {
    // The range of the symbols other than 0 (which wraps to the largest value for `min`).
    let (lo, hi) = symbols.iter().fold((u16::MAX, 0u16), |(lo, hi), &s| (lo.min(s.wrapping_sub(1)), hi.max(s)));
    let (lo, width) = (lo as usize + 1, (hi as usize + 1).saturating_sub(lo as usize + 1));
    // One column past the range counts the zeros: their offset wraps past it and is clamped
    // to it, without a branch.
    let columns = width + 1;
    let column = |s: u16| (s as usize).wrapping_sub(lo).min(width);
    let mut counts = vec![0u64; columns];
    if symbols.len() < 4 * columns {
        // Fewer symbols than counts to merge: one table.
        symbols.iter().for_each(|&s| counts[column(s)] += 1);
    } else {
        let mut lanes = vec![0u32; 4 * columns];
        let (quads, rest) = symbols.split_at(symbols.len() / 4 * 4);
        for q in quads.chunks_exact(4) {
            for (lane, &s) in q.iter().enumerate() {
                lanes[lane * columns + column(s)] += 1;
            }
        }
        for &s in rest {
            lanes[column(s)] += 1;
        }
        // Blocks of at most 2^20 symbols: no lane overflows.
        for (i, c) in counts.iter_mut().enumerate() {
            *c = (0..4).map(|lane| lanes[lane * columns + i] as u64).sum();
        }
    }
    let zeros = counts.pop().expect("the zeros' column");
    Histogram { zeros, first: if width == 0 { 0 } else { lo }, counts }
}

impl Codebook {
    /// `freq[s]` = count of symbol `s`; symbols with zero count get no code.
    ///
    /// Panics if `freq.len()` exceeds 65536 (symbols are `u16`).
    pub fn from_histogram(freq: &[u64]) -> Codebook {
        Codebook::from_counts(0, 0, freq)
    }

    /// The codebook of `h`'s counts (see `from_histogram`).
    pub fn of(h: &Histogram) -> Codebook {
        Codebook::from_counts(h.zeros, h.first, &h.counts)
    }

    /// `freq[i]` = count of symbol `first + i`, and `zeros` more of symbol 0.
    fn from_counts(zeros: u64, first: usize, freq: &[u64]) -> Codebook {
        assert!(first + freq.len() <= MAX_ALPHABET, "Huffman alphabet of {} symbols exceeds 65536", first + freq.len());
        let mut used: Vec<(u64, u16)> = freq.iter().enumerate().filter(|&(_, &f)| f > 0).map(|(s, &f)| (f, (first + s) as u16)).collect();
        match used.iter_mut().find(|u| u.1 == 0) {
            Some(u) => u.0 += zeros,
            None if zeros > 0 => used.push((zeros, 0)),
            None => {}
        }
        let mut lens: Vec<(u16, u8)> = match used.len() {
            0 => Vec::new(),
            1 => vec![(used[0].1, 1)],
            _ => {
                // Ties broken by symbol id so the code depends on nothing but the histogram.
                used.sort_unstable();
                // Tree weights reach the total; scale huge histograms so it fits in u64.
                let total: u128 = used.iter().map(|&(f, _)| f as u128).sum();
                let shift = (128 - total.leading_zeros()).saturating_sub(63);
                let weights: Vec<u64> = used.iter().map(|&(f, _)| (f >> shift).max(1)).collect();
                // Depths stay below ~92 (u64 weights), so they fit the u8.
                let mut lens_sorted = huffman_lengths(&weights);
                if lens_sorted[0] as u32 > MAX_CODE_LEN {
                    limit_lengths(&mut lens_sorted);
                }
                used.iter().zip(lens_sorted).map(|(&(_, s), l)| (s, l)).collect()
            }
        };
        lens.sort_unstable();
        Codebook::from_lengths(&lens)
    }

    /// Builds the tables from the code lengths of the used symbols (increasing, lengths >= 1),
    /// which form a complete code or a single symbol of length 1. Only the used symbols are
    /// visited: an array's few codes can lie far apart (the escape code 0 and those around the
    /// zero residual), and its encoder table spans the range between them.
    fn from_lengths(lens: &[(u16, u8)]) -> Codebook {
        const N: usize = MAX_CODE_LEN as usize + 1;
        let mut count = [0u32; N];
        for &(_, l) in lens {
            count[l as usize] += 1;
        }

        let mut next_code = [0u32; N];
        let mut next_index = [0u32; N];
        let mut limit = [0u32; N];
        let mut base = [0u32; N];
        let (mut code, mut index) = (0u32, 0u32);
        for l in 1..N {
            next_code[l] = code;
            next_index[l] = index;
            limit[l] = (code + count[l]) << (N - 1 - l);
            base[l] = index.wrapping_sub(code);
            index += count[l];
            code = (code + count[l]) << 1;
        }

        let nonzero = &lens[lens.first().is_some_and(|&(s, _)| s == 0) as usize..];
        let first = nonzero.first().map_or(0, |&(s, _)| s as usize);
        let mut enc = vec![0u32; nonzero.last().map_or(0, |&(s, _)| s as usize + 1 - first)];
        let mut zero = 0;
        let mut sorted = vec![0u16; index as usize];
        for &(s, l) in lens {
            let l = l as usize;
            let rev = next_code[l].reverse_bits() >> (32 - l);
            next_code[l] += 1;
            sorted[next_index[l] as usize] = s;
            next_index[l] += 1;
            let e = rev | (l as u32) << MAX_CODE_LEN;
            match s {
                0 => zero = e,
                _ => enc[s as usize - first] = e,
            }
        }
        Codebook { zero, enc, enc_first: first, dec: OnceLock::new(), sorted, limit, base }
    }

    /// Symbol `s`'s entry: bit-reversed code | length << 24, 0 when it has no code.
    #[inline(always)]
    fn entry(&self, s: usize) -> u32 {
        let e = self.enc.get(s.wrapping_sub(self.enc_first)).copied().unwrap_or(0);
        if s == 0 {
            self.zero
        } else {
            e
        }
    }

    /// The symbols with codes and their entries, in increasing symbol order.
    fn entries(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        let zero = (self.zero != 0).then_some((0, self.zero));
        zero.into_iter().chain(self.enc.iter().enumerate().filter(|&(_, &e)| e != 0).map(|(i, &e)| (self.enc_first + i, e)))
    }

    fn decode_table(&self) -> &DecodeTable {
        self.dec.get_or_init(|| {
            // The code space of the codes longer than TABLE_BITS, in units of 2^-MAX_CODE_LEN,
            // over the used symbols only (the encoder table spans the range between them).
            let lens = || self.sorted.iter().map(|&s| self.entry(s as usize) >> MAX_CODE_LEN);
            let long_space: u64 = lens().filter(|&l| l > TABLE_BITS).map(|l| 1u64 << (MAX_CODE_LEN - l)).sum();
            let wide = long_space as f64 > WIDE_SHARE * (1u64 << MAX_CODE_LEN) as f64;
            // No wider than the longest code: building the table is the whole decoding cost
            // of a small array, and a table wider than every code only repeats entries.
            let longest = lens().max().unwrap_or(1).max(1);
            self.build_table(longest.min(if wide { WIDE_TABLE_BITS } else { TABLE_BITS }))
        })
    }

    fn build_table(&self, table_bits: u32) -> DecodeTable {
        // The symbol and length of the code each index starts with, when it fits.
        let mut single = vec![0u32; 1 << table_bits];
        for (s, e) in self.entries() {
            let (l, rev) = (e >> MAX_CODE_LEN, e & CODE_MASK);
            if l <= table_bits {
                for slot in single[rev as usize..].iter_mut().step_by(1 << l) {
                    *slot = s as u32 | l << 16;
                }
            }
        }
        // Chain as many short codes as fit in the known bits of each index.
        let entries = (0..1usize << table_bits)
            .map(|idx| {
                let (mut bits, mut n, mut first_len, mut syms) = (0u32, 0u64, 0u32, 0u64);
                while (n as usize) < SYMS_PER_ENTRY {
                    let e = single[idx >> bits];
                    let l = e >> 16;
                    if l == 0 || bits + l > table_bits {
                        break;
                    }
                    if n == 0 {
                        first_len = l;
                    }
                    syms |= ((e & 0xFFFF) as u64) << (16 * n);
                    bits += l;
                    n += 1;
                }
                if n == 0 {
                    // A longer code: the slow path starts at the shortest length whose codes
                    // can begin with these bits (canonical codes grow with their length).
                    let prefix = (idx as u32).reverse_bits() >> (32 - table_bits) << (MAX_CODE_LEN - table_bits);
                    syms = (table_bits + 1..=MAX_CODE_LEN).find(|&l| prefix < self.limit[l as usize]).unwrap_or(MAX_CODE_LEN) as u64;
                }
                syms | (bits as u64) << 48 | (first_len as u64) << 56 | n << 60
            })
            .collect();
        DecodeTable { entries, bits: table_bits }
    }

    /// Appends the serialized codebook (layout in the module docs) to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let lens: Vec<(usize, u32)> = self.entries().map(|(s, e)| (s, e >> MAX_CODE_LEN)).collect();
        let mut runs: Vec<(usize, usize)> = Vec::new(); // (first, last)
        for &(s, _) in &lens {
            match runs.last_mut() {
                Some(run) if run.1 + 1 == s => run.1 = s,
                _ => runs.push((s, s)),
            }
        }
        write_varint(out, runs.len() as u64);
        let mut prev_last: Option<usize> = None;
        for &(first, last) in &runs {
            write_varint(out, (first - prev_last.map_or(0, |p| p + 2)) as u64);
            write_varint(out, (last - first) as u64);
            prev_last = Some(last);
        }
        let mut w = BitWriter::default();
        for &(_, l) in &lens {
            w.put(l - 1, 5);
        }
        w.append_to(out);
    }

    /// Parses a codebook written by [`Codebook::write`] from the front of `input`; returns it
    /// and the number of bytes consumed. Symbols must be `< alphabet`.
    pub fn read(input: &[u8], alphabet: usize) -> Result<(Codebook, usize)> {
        let alphabet = alphabet.min(MAX_ALPHABET) as u64;
        let mut pos = 0;
        let runs = read_varint(input, &mut pos)?;
        if runs > alphabet {
            return Err(corrupt!("Huffman codebook has {runs} symbol runs for an alphabet of {alphabet}"));
        }
        // Symbols are checked < alphabet and strictly increasing before being pushed, so this
        // never grows past the alphabet whatever the input claims.
        let mut symbols: Vec<u16> = Vec::new();
        let mut next_min = 0u64; // smallest id the next run may start at
        for _ in 0..runs {
            let first = next_min.saturating_add(read_varint(input, &mut pos)?);
            let last = first.saturating_add(read_varint(input, &mut pos)?);
            if last >= alphabet {
                return Err(corrupt!("Huffman codebook symbol {last} out of range (alphabet {alphabet})"));
            }
            symbols.extend((first..=last).map(|s| s as u16));
            next_min = last + 2;
        }

        let n = symbols.len();
        let bytes = input.get(pos..pos + (5 * n).div_ceil(8)).ok_or_else(|| corrupt!("Huffman codebook truncated"))?;
        pos += bytes.len();
        let mut lens: Vec<(u16, u8)> = Vec::with_capacity(n);
        let mut kraft = 0u64; // in units of 2^-MAX_CODE_LEN
        for (i, &s) in symbols.iter().enumerate() {
            let bit = 5 * i;
            let pair = bytes[bit / 8] as u16 | (*bytes.get(bit / 8 + 1).unwrap_or(&0) as u16) << 8;
            let l = ((pair >> (bit % 8)) & 31) as u32 + 1;
            if l > MAX_CODE_LEN {
                return Err(corrupt!("Huffman code length {l} exceeds {MAX_CODE_LEN}"));
            }
            lens.push((s, l as u8));
            kraft += 1 << (MAX_CODE_LEN - l);
        }
        let used_bits = 5 * n % 8;
        if used_bits != 0 && bytes[bytes.len() - 1] >> used_bits != 0 {
            return Err(corrupt!("Huffman codebook has nonzero padding bits"));
        }
        let valid = match n {
            0 => true,
            1 => kraft == 1 << (MAX_CODE_LEN - 1),
            _ => kraft == 1 << MAX_CODE_LEN,
        };
        if !valid {
            return Err(corrupt!("Huffman code lengths do not form a complete prefix code"));
        }
        Ok((Codebook::from_lengths(&lens), pos))
    }

    /// Appends the bitstream of `symbols` to `out`. Fails with `InvalidInput`, leaving `out`
    /// as it was, if a symbol has no code.
    pub fn encode(&self, symbols: &[u16], out: &mut Vec<u8>) -> Result<()> {
        encode_bits(self, symbols, out)
    }

    #[inline(always)]
    fn encode_in(&self, symbols: &[u16], out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        // `acc` holds the `nbits` (< 8) bits not yet in whole bytes. Two codes are joined
        // before they go in (at most 2 * 24 + 7 bits), and every step stores the whole word
        // and moves on by the bytes it completed: no branch, and one dependency chain per
        // pair of symbols rather than per symbol.
        let (mut acc, mut nbits) = (0u64, 0u32);
        // A codeless symbol has length 0, whose length - 1 alone sets bit 31 (lengths are at
        // most 24): collected instead of branched on, as it adds no bits meanwhile.
        let mut lengths_less_one = 0u32;
        let code_of = |s: u16| {
            let e = self.entry(s as usize);
            ((e & CODE_MASK) as u64, e >> MAX_CODE_LEN)
        };
        // Block by block, so the buffer grows with the bits rather than for the longest codes.
        for block in symbols.chunks(ENCODE_BLOCK) {
            out.reserve(block.len() * MAX_CODE_LEN as usize / 8 + WORD);
            let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
            let mut pos = 0;
            let mut put = |code: u64, len: u32| {
                acc |= code << nbits;
                nbits += len;
                // Safety: pos is at most (7 + 24 * the block's symbols so far) / 8 bytes, and
                // the block reserved 3 bytes per symbol and a word more.
                unsafe { dst.add(pos).cast::<u64>().write_unaligned(acc.to_le()) };
                let done = nbits / 8;
                pos += done as usize;
                acc >>= 8 * done;
                nbits %= 8;
            };
            let mut pairs = block.chunks_exact(2);
            for pair in &mut pairs {
                let ((c0, l0), (c1, l1)) = (code_of(pair[0]), code_of(pair[1]));
                lengths_less_one |= l0.wrapping_sub(1) | l1.wrapping_sub(1);
                put(c0 | c1 << l0, l0 + l1);
            }
            for &s in pairs.remainder() {
                let (c, l) = code_of(s);
                lengths_less_one |= l.wrapping_sub(1);
                put(c, l);
            }
            // Safety: the stores wrote every byte up to the last `pos` + WORD.
            unsafe { out.set_len(out.len() + pos) };
        }
        if lengths_less_one >> 31 != 0 {
            out.truncate(start);
            return Err(CodecError::InvalidInput("Huffman encode: symbol without a code".into()));
        }
        if nbits > 0 {
            out.push(acc as u8);
        }
        Ok(())
    }

    /// Decodes exactly `out.len()` symbols from `bits` (see `decode_lockstep`).
    #[inline(always)]
    pub fn decode(&self, bits: &[u8], out: &mut [MaybeUninit<u16>]) -> Result<()> {
        self.decode_lockstep([bits], [out])
    }

    /// `decode` of `K` independent bitstreams at once. Each symbol's table lookup waits for
    /// the previous symbol's length, so one stream leaves the core idle most of the time;
    /// steps of several streams interleaved overlap those waits.
    ///
    /// The outputs may start uninitialized: on success every symbol of each has been written
    /// (a whole field's symbols, cleared first, cost a pass over memory of their own).
    #[inline(always)]
    pub fn decode_lockstep<const K: usize>(&self, bits: [&[u8]; K], outs: [&mut [MaybeUninit<u16>]; K]) -> Result<()> {
        let table = self.decode_table();
        let mut readers = bits.map(BitReader::new);
        let mut next = [0usize; K];
        // Rounds while every stream has room for a whole round's symbols.
        let round = LOOKUPS_PER_REFILL * SYMS_PER_ENTRY;
        while (0..K).all(|j| next[j] + round <= outs[j].len()) {
            for r in &mut readers {
                r.refill()?;
            }
            for _ in 0..LOOKUPS_PER_REFILL {
                for j in 0..K {
                    self.step(table, &mut readers[j], outs[j], &mut next[j])?;
                }
            }
        }
        for j in 0..K {
            // Streams advance at their own rates (a lookup yields one to three symbols), so
            // the others may be far from their ends: they go on alone, a round at a time.
            while next[j] + round <= outs[j].len() {
                readers[j].refill()?;
                for _ in 0..LOOKUPS_PER_REFILL {
                    self.step(table, &mut readers[j], outs[j], &mut next[j])?;
                }
            }
            self.finish(table, &mut readers[j], bits[j], outs[j], next[j])?;
        }
        Ok(())
    }

    /// Decodes the symbols of one table entry into `out[*next..]`, which must have room for
    /// `SYMS_PER_ENTRY` of them; the reader must hold at least `table.bits` bits.
    #[inline(always)]
    fn step(&self, table: &DecodeTable, r: &mut BitReader, out: &mut [MaybeUninit<u16>], next: &mut usize) -> Result<()> {
        let i = *next;
        let e = table.entries[r.buf as usize & (table.entries.len() - 1)];
        let k = (e >> 60) as usize;
        if k != 0 {
            // All three slots are written; those past `k` are overwritten later.
            let dst = &mut out[i..i + SYMS_PER_ENTRY];
            dst[0].write(e as u16);
            dst[1].write((e >> 16) as u16);
            dst[2].write((e >> 32) as u16);
            *next = i + k;
            r.consume((e >> 48) as u32 & 0xFF);
        } else {
            out[i].write(self.decode_long(r, table.bits, e as u32)?);
            *next = i + 1;
        }
        Ok(())
    }

    /// Decodes the symbols of `out` from `next` on, one at a time, then checks that the stream
    /// `bits` ends exactly there.
    #[inline(always)]
    fn finish(&self, table: &DecodeTable, r: &mut BitReader, bits: &[u8], out: &mut [MaybeUninit<u16>], next: usize) -> Result<()> {
        for slot in &mut out[next..] {
            r.refill()?;
            let e = table.entries[r.buf as usize & (table.entries.len() - 1)];
            if e >> 60 != 0 {
                slot.write(e as u16);
                r.consume((e >> 56) as u32 & 0xF);
            } else {
                slot.write(self.decode_long(r, table.bits, e as u32)?);
            }
        }
        let used = r.consumed();
        if used > bits.len() as u64 * 8 {
            return Err(corrupt!("Huffman bitstream truncated"));
        }
        // One encoding per symbol sequence: no trailing bytes, zero padding.
        if used.div_ceil(8) != bits.len() as u64 {
            return Err(corrupt!("{} bytes after the Huffman bitstream", bits.len() as u64 - used.div_ceil(8)));
        }
        if !used.is_multiple_of(8) && bits[bits.len() - 1] >> (used % 8) != 0 {
            return Err(corrupt!("nonzero padding after the Huffman bitstream"));
        }
        Ok(())
    }

    /// Canonical decode of a code longer than the table's `table_bits` (or an unused one), at
    /// least `shortest` bits long (what the table entry says). Leaves at least 56 bits in the
    /// buffer, so the caller's per-refill budget still holds.
    #[cold]
    #[inline(never)]
    fn decode_long(&self, r: &mut BitReader, table_bits: u32, shortest: u32) -> Result<u16> {
        r.refill()?;
        // The next MAX_CODE_LEN stream bits, first bit most significant.
        let window = (r.buf as u32).reverse_bits() >> (32 - MAX_CODE_LEN);
        for l in shortest.max(table_bits + 1)..=MAX_CODE_LEN {
            if window < self.limit[l as usize] {
                let idx = (window >> (MAX_CODE_LEN - l)).wrapping_add(self.base[l as usize]);
                let sym = *self.sorted.get(idx as usize).ok_or_else(|| corrupt!("invalid Huffman code"))?;
                r.consume(l);
                r.refill()?;
                return Ok(sym);
            }
        }
        Err(corrupt!("invalid Huffman code"))
    }

    /// Bits [`Codebook::encode`] would produce for symbols with histogram `freq`, or `None`
    /// if one of them has no code.
    pub fn encoded_bits(&self, freq: &[u64]) -> Option<u64> {
        let mut bits = 0u64;
        for (s, &f) in freq.iter().enumerate().filter(|&(_, &f)| f > 0) {
            let len = self.entry(s) >> MAX_CODE_LEN;
            if len == 0 {
                return None;
            }
            bits = bits.saturating_add(f.saturating_mul(len as u64));
        }
        Some(bits)
    }

    /// The run of consecutive symbols with codes around `center`, as (first, last); `None` if
    /// `center` has no code.
    pub fn coded_run(&self, center: usize) -> Option<(usize, usize)> {
        let coded = |s: usize| self.entry(s) != 0;
        if !coded(center) {
            return None;
        }
        let (mut first, mut last) = (center, center);
        while first > 0 && coded(first - 1) {
            first -= 1;
        }
        while coded(last + 1) {
            last += 1;
        }
        Some((first, last))
    }

    /// One past the largest symbol with a code (0 for an empty codebook).
    pub fn symbol_limit(&self) -> usize {
        match self.enc.len() {
            0 => (self.zero != 0) as usize,
            n => self.enc_first + n,
        }
    }

    #[cfg(test)]
    /// Number of used symbols.
    pub fn used_symbols(&self) -> usize {
        self.sorted.len()
    }
}

/// Shannon entropy of a histogram, in bits for the whole sample (0 when empty).
pub fn entropy_bits(freq: &[u64]) -> f64 {
    let total: f64 = freq.iter().map(|&f| f as f64).sum();
    freq.iter().filter(|&&f| f > 0).map(|&f| f as f64 * (total / f as f64).log2()).sum()
}

/// Unrestricted Huffman code lengths for `w` sorted ascending (len >= 2), so non-increasing;
/// `lens[0]` is the longest. In place in O(n), after Moffat and Katajainen: the array holds
/// first the internal nodes' weights and parent links, then their depths, then leaf depths.
fn huffman_lengths(w: &[u64]) -> Vec<u8> {
    let n = w.len();
    let mut a = w.to_vec();
    // Build the tree: internal nodes are formed in order of weight at a[0..n-1]; `root` is the
    // next internal node not yet given a parent, `leaf` the next leaf not yet used.
    a[0] += a[1];
    let (mut root, mut leaf) = (0, 2);
    for next in 1..n - 1 {
        for second in [false, true] {
            let from_internal = leaf >= n || (root < next && a[root] < a[leaf]);
            let child = if from_internal {
                let c = a[root];
                a[root] = next as u64;
                root += 1;
                c
            } else {
                leaf += 1;
                a[leaf - 1]
            };
            a[next] = if second { a[next] + child } else { child };
        }
    }
    // Internal node depths, from the root (a[n-2]) down: parents always come later.
    a[n - 2] = 0;
    for next in (0..n - 2).rev() {
        a[next] = a[a[next] as usize] + 1;
    }
    // Leaf depths: at each depth, the slots not taken by internal nodes are leaves, assigned
    // from the heaviest leaf (a[n-1]) down.
    let mut lens = vec![0u8; n];
    let (mut avail, mut depth, mut root, mut next) = (1usize, 0u64, n as isize - 2, n);
    while avail > 0 {
        let mut used = 0;
        while root >= 0 && a[root as usize] == depth {
            used += 1;
            root -= 1;
        }
        for _ in used..avail {
            next -= 1;
            lens[next] = depth as u8;
        }
        avail = 2 * used;
        depth += 1;
    }
    lens
}

/// Shortens the lengths (non-increasing, forming a complete code) to at most MAX_CODE_LEN,
/// keeping the code complete (the adjustment of JPEG, ITU T.81 Annex K.3): two sibling leaves
/// at the deepest level give way to one leaf at their parent, and the other moves under a
/// shallower leaf, which splits into two. Only the rarest symbols change, so the loss is tiny.
fn limit_lengths(lens: &mut [u8]) {
    let mut count = [0usize; 256];
    for &l in lens.iter() {
        count[l as usize] += 1;
    }
    let max = MAX_CODE_LEN as usize;
    for i in (max + 1..=lens[0] as usize).rev() {
        while count[i] > 0 {
            // A leaf at depth <= i-2 exists: with all of them at i-1 >= 24 or deeper, the code
            // would have 2^24 symbols.
            let mut j = i - 2;
            while count[j] == 0 {
                j -= 1;
            }
            count[i] -= 2;
            count[i - 1] += 1;
            count[j + 1] += 2;
            count[j] -= 1;
        }
    }
    // The longest codes go to the lightest symbols, as before.
    let mut rest = &mut lens[..];
    for l in (1..=max).rev() {
        let (now, later) = rest.split_at_mut(count[l]);
        now.fill(l as u8);
        rest = later;
    }
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(input: &[u8], pos: &mut usize) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *input.get(*pos).ok_or_else(|| corrupt!("Huffman codebook truncated"))?;
        *pos += 1;
        v |= ((b & 0x7F) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(corrupt!("Huffman codebook varint too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(symbols: &[u16], alphabet: usize) -> Vec<u64> {
        Histogram::of(symbols).dense(alphabet)
    }

    #[test]
    fn sparse_histograms_add_up_like_dense_ones() {
        // Zeros (the escape, counted apart) alone, with others, and every symbol 0.
        let lists: [&[u16]; 8] = [&[], &[500, 501, 501], &[3, 3, 700], &[600], &[65535, 0], &[0, 0, 0], &[0, 32768, 0, 32770, 1], &[0]];
        let mut sum = Histogram::default();
        let mut dense = vec![0u64; 1 << 16];
        for (k, list) in lists.iter().enumerate() {
            if k % 2 == 0 {
                sum.add(&Histogram::of(list));
            } else {
                sum.add_symbols(list);
            }
            list.iter().for_each(|&s| dense[s as usize] += 1);
            assert_eq!(sum.dense(1 << 16), dense);
        }
        assert_eq!(sum.total(), 18);
        let book = Codebook::of(&sum);
        assert_eq!(lengths(&book), lengths(&Codebook::from_histogram(&dense)));
        assert_eq!(book.encoded_bits(&dense), Codebook::from_histogram(&dense).encoded_bits(&dense));
        for list in [&[0u16, 0, 0][..], &[0], &[0, 32768, 32768, 32769]] {
            let cb = Codebook::of(&Histogram::of(list));
            assert_eq!(lengths(&cb), lengths(&Codebook::from_histogram(&histogram(list, 1 << 16))));
            encode_decode(&cb, list);
        }
    }
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    fn as_uninit(out: &mut [u16]) -> &mut [MaybeUninit<u16>] {
        // Safety: same layout, and the decoder writes only `u16`s.
        unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), out.len()) }
    }

    fn decode(cb: &Codebook, bits: &[u8], out: &mut [u16]) -> Result<()> {
        cb.decode(bits, as_uninit(out))
    }

    /// (symbol, code length) of every used symbol.
    fn lengths(cb: &Codebook) -> Vec<(usize, u32)> {
        cb.entries().map(|(s, e)| (s, e >> MAX_CODE_LEN)).collect()
    }

    fn kraft(cb: &Codebook) -> u64 {
        lengths(cb).iter().map(|&(_, l)| 1u64 << (MAX_CODE_LEN - l)).sum()
    }

    /// Cost of an unrestricted Huffman code, the textbook way.
    fn reference_cost(freq: &[u64]) -> u64 {
        let mut heap: BinaryHeap<Reverse<u64>> = freq.iter().filter(|&&f| f > 0).map(|&f| Reverse(f)).collect();
        let mut cost = 0;
        while heap.len() > 1 {
            let (Reverse(a), Reverse(b)) = (heap.pop().unwrap(), heap.pop().unwrap());
            cost += a + b;
            heap.push(Reverse(a + b));
        }
        cost
    }

    /// Encodes, decodes, and round-trips the codebook through write/read.
    fn round_trip(symbols: &[u16], alphabet: usize) -> Codebook {
        let freq = histogram(symbols, alphabet);
        let cb = Codebook::from_histogram(&freq);
        let mut bits = Vec::new();
        cb.encode(symbols, &mut bits).unwrap();
        let nbits = cb.encoded_bits(&freq).expect("every symbol has a code");
        assert_eq!(bits.len() as u64, nbits.div_ceil(8));

        // `read` must parse from any offset and report exactly the bytes it used.
        let mut ser = vec![0xAB];
        cb.write(&mut ser);
        ser.push(0xCD);
        let (read, used) = Codebook::read(&ser[1..], alphabet).unwrap();
        assert_eq!(used, ser.len() - 2);
        assert_eq!(lengths(&read), lengths(&cb));

        let mut out = vec![0u16; symbols.len()];
        decode(&read, &bits, &mut out).unwrap();
        assert_eq!(out, symbols);
        cb
    }

    #[test]
    fn bit_order_and_layout_match_the_docs() {
        // Lengths: symbol 2 -> 1 bit, symbols 0 and 1 -> 2 bits; codes 2 = 0, 0 = 10, 1 = 11.
        let cb = Codebook::from_histogram(&[1, 1, 2]);
        let mut bits = Vec::new();
        cb.encode(&[2, 0, 1], &mut bits).unwrap();
        assert_eq!(bits, [0b11010]);
        let mut ser = Vec::new();
        cb.write(&mut ser);
        // 1 run, starting at 0, of 3 symbols; 5-bit fields 1, 1, 0.
        assert_eq!(ser, [1, 0, 2, 0b0010_0001, 0]);
    }

    #[test]
    fn empty_codebook() {
        let cb = Codebook::from_histogram(&[0; 10]);
        assert_eq!(cb.used_symbols(), 0);
        let mut bits = Vec::new();
        cb.encode(&[], &mut bits).unwrap();
        assert!(bits.is_empty());
        assert!(cb.encode(&[3], &mut bits).is_err());
        let mut ser = Vec::new();
        cb.write(&mut ser);
        assert_eq!(ser, [0]);
        let (read, used) = Codebook::read(&ser, 10).unwrap();
        assert_eq!((read.used_symbols(), used), (0, 1));
        decode(&read, &[], &mut []).unwrap();
        assert!(decode(&read, &[0xFF; 16], &mut [0; 1]).is_err());
        assert_eq!(entropy_bits(&[0; 10]), 0.0);
    }

    #[test]
    fn single_symbol() {
        let symbols = vec![7u16; 1000];
        let cb = round_trip(&symbols, 8);
        assert_eq!(lengths(&cb), [(7, 1)]);
        let mut out = [0u16; 4];
        assert!(decode(&cb, &[0b0000_0100], &mut out).is_err(), "bit 1 is not a code");
        let mut ser = Vec::new();
        cb.write(&mut ser);
        assert!(Codebook::read(&ser, 7).is_err(), "symbol 7 outside an alphabet of 7");
    }

    fn encode_decode(cb: &Codebook, symbols: &[u16]) {
        let mut bits = Vec::new();
        cb.encode(symbols, &mut bits).unwrap();
        let mut out = vec![0; symbols.len()];
        decode(cb, &bits, &mut out).unwrap();
        assert_eq!(out, symbols);
    }

    #[test]
    fn skew_is_limited_to_max_code_len() {
        // Fibonacci counts and powers of two make the unrestricted Huffman tree a 40-deep chain.
        let mut fib = vec![1u64, 1];
        while fib.len() < 40 {
            fib.push(fib[fib.len() - 1] + fib[fib.len() - 2]);
        }
        let pow2: Vec<u64> = (0..40).map(|k| 1 << k).collect();
        // Every symbol, in runs long enough for the decoder's fast loop to meet long codes.
        let symbols: Vec<u16> = (0..40u16).flat_map(|s| [s; 20]).chain((0..40).rev()).collect();
        for freq in [fib, pow2] {
            let cb = Codebook::from_histogram(&freq);
            assert_eq!(lengths(&cb).iter().map(|&(_, l)| l).max(), Some(MAX_CODE_LEN));
            assert_eq!(kraft(&cb), 1 << MAX_CODE_LEN);
            encode_decode(&cb, &symbols);
        }

        // One symbol at 99.9999...%, a thousand seen once, counts near u64::MAX.
        let mut freq = vec![1u64; 1000];
        freq[500] = u64::MAX;
        freq[501] = u64::MAX / 3;
        let cb = Codebook::from_histogram(&freq);
        assert_eq!(lengths(&cb)[500], (500, 1));
        assert_eq!(kraft(&cb), 1 << MAX_CODE_LEN);
        encode_decode(&cb, &(0..1000).chain([500; 5000]).chain(0..1000).collect::<Vec<u16>>());
    }

    #[test]
    fn broad_codebooks_decode_through_the_wide_table() {
        // Near-uniform over 6000 symbols: codes of 12 and 13 bits, most of them too long for
        // the narrow table; a peaked histogram keeps the narrow one.
        let broad: Vec<u16> = (0..60_000u32).map(|i| (i * 7919 % 6000) as u16).collect();
        let cb = Codebook::from_histogram(&histogram(&broad, 6000));
        assert_eq!(cb.decode_table().bits, 13, "wide, but no wider than the longest code");
        encode_decode(&cb, &broad);
        let peaked: Vec<u16> = (0..60_000u32).map(|i| if i % 50 == 0 { (i % 6000) as u16 } else { 3000 + (i % 3) as u16 }).collect();
        let cb = Codebook::from_histogram(&histogram(&peaked, 6000));
        assert!(cb.decode_table().bits <= TABLE_BITS);
        encode_decode(&cb, &peaked);
    }

    #[test]
    fn short_codes_get_a_table_of_their_longest_length() {
        // A small array's histogram: a few symbols, codes of at most 4 bits.
        let symbols: Vec<u16> = (0..200u32).map(|i| [7, 7, 7, 7, 8, 8, 6, 9, 5, 10][i as usize % 10]).collect();
        let cb = Codebook::from_histogram(&histogram(&symbols, 16));
        let longest = lengths(&cb).iter().map(|&(_, l)| l).max().unwrap();
        assert!(longest <= 4);
        assert_eq!(cb.decode_table().bits, longest);
        encode_decode(&cb, &symbols);
    }

    #[test]
    fn full_alphabet() {
        // Peaked at 32768, every symbol present.
        let symbols: Vec<u16> =
            (0..=u16::MAX).chain((0..200_000u32).map(|i| (32768 + (i.wrapping_mul(2654435761) >> 27) as i32 - 16) as u16)).collect();
        let cb = round_trip(&symbols, 65536);
        assert_eq!(cb.used_symbols(), 65536);
    }

    #[test]
    fn codebook_of_300_symbols_is_small() {
        let symbols: Vec<u16> = (0..30_000u32).map(|i| (1000 + (i * 7919 % 300)) as u16).chain([5000, 6000]).collect();
        let cb = Codebook::from_histogram(&histogram(&symbols, 8000));
        let mut ser = Vec::new();
        cb.write(&mut ser);
        assert_eq!(cb.used_symbols(), 302);
        assert!(ser.len() <= 200, "{} bytes", ser.len());
    }

    #[test]
    fn missing_symbol_is_invalid_input() {
        let cb = Codebook::from_histogram(&[0, 5, 0, 3]);
        let mut bits = vec![9];
        for bad in [[1u16, 0, 3], [1, 2, 3], [1, 3, 4], [1, 3, 60000]] {
            assert!(matches!(cb.encode(&bad, &mut bits), Err(CodecError::InvalidInput(_))));
            assert_eq!(bits, [9]);
        }
    }

    #[test]
    fn read_rejects_invalid_codebooks() {
        let with_lengths = |lens: &[u32]| {
            let mut ser = vec![1, 0, lens.len() as u8 - 1];
            let mut w = BitWriter::default();
            for &l in lens {
                w.put(l - 1, 5);
            }
            w.append_to(&mut ser);
            ser
        };
        assert!(Codebook::read(&with_lengths(&[1, 2, 2]), 3).is_ok());
        assert!(Codebook::read(&with_lengths(&[1, 1, 2]), 3).is_err(), "over-subscribed");
        assert!(Codebook::read(&with_lengths(&[2, 2, 2]), 3).is_err(), "incomplete");
        assert!(Codebook::read(&with_lengths(&[2]), 3).is_err(), "lone symbol must have length 1");
        assert!(Codebook::read(&with_lengths(&[1, 25]), 3).is_err(), "too long");
        assert!(Codebook::read(&with_lengths(&[1, 2, 2]), 2).is_err(), "symbol out of range");
        let mut padded = with_lengths(&[1, 2, 2]);
        *padded.last_mut().unwrap() |= 0x80;
        assert!(Codebook::read(&padded, 3).is_err(), "nonzero padding");
        assert!(Codebook::read(&[0x80; 11], 3).is_err(), "overlong varint");
        assert!(Codebook::read(&[1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0], 65536).is_err());

        let cb = Codebook::from_histogram(&[3, 0, 0, 9, 9, 9, 1, 0, 4]);
        let mut ser = Vec::new();
        cb.write(&mut ser);
        for cut in 0..ser.len() {
            assert!(Codebook::read(&ser[..cut], 9).is_err());
        }
        assert!(Codebook::read(&ser, 9).is_ok());
    }

    #[test]
    fn huge_count_tiny_stream_fails_fast() {
        let cb = Codebook::from_histogram(&[1, 1, 1, 1, 1, 1, 1, 1000]);
        let mut out = vec![0u16; 50_000_000];
        assert!(decode(&cb, &[0xFF], &mut out).is_err());
    }

    #[test]
    fn entropy_estimate() {
        assert!((entropy_bits(&[1, 1, 2]) - 6.0).abs() < 1e-12);
        assert!((entropy_bits(&[5, 0, 5, 5, 5]) - 40.0).abs() < 1e-12);
    }

    /// Symbol streams peaked around a centre, with outliers anywhere in the alphabet.
    fn peaked_stream() -> impl Strategy<Value = (Vec<u16>, usize)> {
        (1usize..3000, 0u32..=100).prop_flat_map(|(alphabet, peak)| {
            let sym = (any::<u32>(), any::<u16>()).prop_map(move |(r, x)| {
                let centre = alphabet / 2;
                match r % 100 {
                    p if p < peak => centre as u16,
                    p if p < 95 => (centre + (r as usize >> 8) % 9).min(alphabet - 1) as u16,
                    _ => (x as usize % alphabet) as u16,
                }
            });
            (prop::collection::vec(sym, 0..3000), Just(alphabet))
        })
    }

    proptest! {
        #[test]
        fn round_trips((symbols, alphabet) in peaked_stream()) {
            let cb = round_trip(&symbols, alphabet);
            let freq = histogram(&symbols, alphabet);
            let max = lengths(&cb).iter().map(|&(_, l)| l).max().unwrap_or(0);
            if max < MAX_CODE_LEN && cb.used_symbols() > 1 {
                prop_assert_eq!(cb.encoded_bits(&freq), Some(reference_cost(&freq)));
            }
            prop_assert!(cb.encoded_bits(&freq).expect("every symbol has a code") as f64 >= entropy_bits(&freq) - 1e-6);
        }

        #[test]
        fn random_histograms_make_valid_codes(
            freq in prop::collection::vec(prop_oneof![Just(0u64), 1u64..4, any::<u64>()], 1..600),
        ) {
            let cb = Codebook::from_histogram(&freq);
            let used = freq.iter().filter(|&&f| f > 0).count();
            prop_assert_eq!(cb.used_symbols(), used);
            match used {
                0 => prop_assert_eq!(kraft(&cb), 0),
                1 => prop_assert_eq!(kraft(&cb), 1 << (MAX_CODE_LEN - 1)),
                _ => prop_assert_eq!(kraft(&cb), 1 << MAX_CODE_LEN),
            }
            let mut ser = Vec::new();
            cb.write(&mut ser);
            prop_assert!(Codebook::read(&ser, freq.len()).is_ok());
        }

        #[test]
        fn read_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), alphabet in 0usize..70_000) {
            if let Ok((cb, used)) = Codebook::read(&bytes, alphabet) {
                prop_assert!(used <= bytes.len());
                prop_assert!(lengths(&cb).iter().all(|&(s, _)| s < alphabet));
                let mut out = vec![0u16; 100];
                let _ = decode(&cb, &bytes, &mut out);
            }
        }

        #[test]
        fn mutated_codebooks_never_panic(
            (symbols, alphabet) in peaked_stream(),
            flips in prop::collection::vec(any::<(usize, u8)>(), 1..4),
        ) {
            let cb = Codebook::from_histogram(&histogram(&symbols, alphabet));
            let mut ser = Vec::new();
            cb.write(&mut ser);
            for (at, x) in flips {
                let n = ser.len();
                ser[at % n] ^= x;
            }
            if let Ok((cb, _)) = Codebook::read(&ser, alphabet) {
                let mut out = vec![0u16; 64];
                let _ = decode(&cb, &ser, &mut out);
            }
        }

        #[test]
        fn damaged_bitstreams_never_panic(
            (symbols, alphabet) in peaked_stream(),
            flips in prop::collection::vec(any::<(usize, u8)>(), 0..4),
            cut in 0usize..8,
            extra in 0usize..40,
        ) {
            let cb = Codebook::from_histogram(&histogram(&symbols, alphabet));
            let mut bits = Vec::new();
            cb.encode(&symbols, &mut bits).unwrap();
            let mut out = vec![0u16; symbols.len()];
            if cut > 0 && !bits.is_empty() {
                // Every byte holds at least one bit of a code: dropping any must be noticed.
                let keep = bits.len().saturating_sub(cut);
                prop_assert!(decode(&cb, &bits[..keep], &mut out).is_err());
            }
            for (at, x) in flips {
                if !bits.is_empty() {
                    let n = bits.len();
                    bits[at % n] ^= x;
                }
            }
            let _ = decode(&cb, &bits, &mut out);
            let mut longer = vec![0u16; symbols.len() + extra];
            let _ = decode(&cb, &bits, &mut longer);
        }

        #[test]
        fn lockstep_decodes_like_one_stream_at_a_time(
            (symbols, alphabet) in peaked_stream(),
            cuts in prop::array::uniform3(any::<prop::sample::Index>()),
            flip in prop::option::of((0usize..4, any::<prop::sample::Index>(), 1u8..=255)),
        ) {
            let cb = Codebook::from_histogram(&histogram(&symbols, alphabet));
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(symbols.len() + 1)).collect();
            at.sort();
            let parts = [&symbols[..at[0]], &symbols[at[0]..at[1]], &symbols[at[1]..at[2]], &symbols[at[2]..]];
            let mut streams: Vec<Vec<u8>> = parts.iter().map(|p| {
                let mut bits = Vec::new();
                cb.encode(p, &mut bits).unwrap();
                bits
            }).collect();
            if let Some((j, pos, x)) = flip {
                if !streams[j].is_empty() {
                    let k = pos.index(streams[j].len());
                    streams[j][k] ^= x;
                }
            }
            let mut one: Vec<Vec<u16>> = parts.iter().map(|p| vec![0u16; p.len()]).collect();
            let alone: Vec<bool> = streams.iter().zip(&mut one).map(|(b, o)| decode(&cb, b, o).is_ok()).collect();
            let mut together: Vec<Vec<u16>> = parts.iter().map(|p| vec![0u16; p.len()]).collect();
            let [a, b, c, d] = &mut together[..] else { unreachable!() };
            let result = cb.decode_lockstep([&streams[0][..], &streams[1], &streams[2], &streams[3]], [a, b, c, d].map(|o| as_uninit(o)));
            prop_assert_eq!(result.is_ok(), alone.iter().all(|&ok| ok));
            if result.is_ok() {
                prop_assert_eq!(&together, &one);
            }
            if flip.is_none() {
                prop_assert_eq!(together.concat(), symbols);
            }
        }

        #[test]
        fn random_bitstreams_never_panic(
            // Wide dynamic range, so long codes and the slow path are exercised too.
            freq in prop::collection::vec(prop_oneof![0u64..50, (0u32..40).prop_map(|k| 1u64 << k)], 1..300),
            bits in prop::collection::vec(any::<u8>(), 0..200),
            n in 0usize..400,
        ) {
            let cb = Codebook::from_histogram(&freq);
            let mut out = vec![0u16; n];
            if decode(&cb, &bits, &mut out).is_ok() {
                prop_assert!(out.iter().all(|&s| freq[s as usize] > 0));
            }
        }
    }
}
