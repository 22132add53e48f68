//! A table-driven context coder: residuals become tokens (the magnitude's bit length with two
//! bits below its leading one, and the sign) coded by two interleaved rANS states with a static
//! frequency table per context, and raw extra bits (the rest of the magnitude) on the side.
//!
//! The tables are learnt once from every symbol they will code (an array, or every block set
//! of a (level, field): AMRIC's shared lossless encoding) and stored once. Coding a symbol is
//! then a table lookup and a multiply, where the adaptive binary coder (`rangecoder`) spends one
//! probability update and one range division per decision, four to eight decisions a symbol.
//! Which context a symbol is coded in is the caller's model (`residuals`): the coder takes the
//! context per symbol.
//!
//! Stream (format.md 14.4): `rANS length varint | rANS bytes | extra bits`. The rANS bytes are
//! the two final states (u32 LE each, state 0 first) then 16-bit words (LE) in reading order;
//! the extra bits are packed LSB first, the last byte padded with zeros.

use super::bits::{BitReader, BitWriter};
use crate::bytes::{put_varint, ByteReader};
use crate::error::{corrupt, Result};

/// Magnitudes below this are tokens of their own; above, bit length and two bits below the
/// leading one.
const EXACT: u32 = 8;
/// Largest magnitude a token codes: a residual of the 65536-symbol alphabet around its middle.
const MAX_MAGNITUDE: u32 = 1 << 16;
/// Token `2m - 1 + negative` for magnitude token `m >= 1`, 0 for a zero residual.
pub const TOKENS: usize = 2 * magnitude_token(MAX_MAGNITUDE) as usize + 1;
/// Contexts a table set may hold (a token and a context fit a byte each).
pub const MAX_CONTEXTS: usize = 64;

/// Decoders read extra bits without a branch when the rarer of nonzero tokens with and without
/// them is more common than this (one-off, 1/64 multiresolution reads: a lognormal field, with
/// many of both, read 10% faster without the branch, and a smooth one, with few tokens with
/// extra bits, 8% faster with it).
const BRANCHLESS_SHARE: f64 = 0.1;

/// Frequencies of a table sum to `2^SCALE`.
const SCALE: u32 = 12;
const TOTAL: u32 = 1 << SCALE;
/// The states live in `[LOW, LOW << 16)` and move 16 bits at a time.
const LOW: u32 = 1 << 16;

const fn magnitude_token(m: u32) -> u32 {
    if m < EXACT {
        m
    } else {
        let k = 32 - m.leading_zeros();
        EXACT + (k - 4) * 4 + ((m >> (k - 3)) & 3)
    }
}

/// The token of residual `d` (`|d| <= 2^16`), with its extra bits: how many and their value.
/// Without a branch: zero, small and large magnitudes mix in every field, and a branch on which
/// mispredicts.
#[inline(always)]
pub fn tokenize(d: i32) -> (u8, u32, u32) {
    let m = d.unsigned_abs();
    let k = bit_length(m | 1);
    let large = m >= EXACT;
    let extra = if large { k - 3 } else { 0 };
    let t = if large { EXACT + (k.wrapping_sub(4) << 2) + ((m >> extra) & 3) } else { m };
    ((2 * t - (m != 0) as u32 + (d < 0) as u32) as u8, extra, m & ((1 << extra) - 1))
}

/// The bit length of `v < 2^24` (0 for 0), from the exponent of `v` as a float: a
/// conversion, which vector units have, where counting leading zeros needs AVX-512.
#[inline(always)]
pub fn bit_length(v: u32) -> u32 {
    // Through i32: vector units convert signed integers only.
    ((v as i32 as f32).to_bits() >> 23).saturating_sub(126)
}

/// Magnitude token `t`'s smallest magnitude and how many extra bits follow it.
#[inline(always)]
fn magnitude_base(t: u32) -> (u32, u32) {
    if t < EXACT {
        (t, 0)
    } else {
        let k = (t - EXACT) / 4 + 4;
        let extra = k - 3;
        ((4 | ((t - EXACT) % 4)) << extra, extra)
    }
}

/// Per token: `(magnitude base, extra bit count, negative)`, for decoding.
fn token_info() -> &'static [(u32, u32, bool); TOKENS] {
    static INFO: std::sync::OnceLock<[(u32, u32, bool); TOKENS]> = std::sync::OnceLock::new();
    INFO.get_or_init(|| {
        let mut info = [(0, 0, false); TOKENS];
        for (t, slot) in info.iter_mut().enumerate().skip(1) {
            let (base, extra) = magnitude_base((t as u32).div_ceil(2));
            *slot = (base, extra, t % 2 == 0);
        }
        info
    })
}

/// The residual of a token whose `token_info` is `(base, extra, negative)`, its extra bits read
/// from `bits`.
#[inline(always)]
fn detokenize((base, extra, negative): (u32, u32, bool), bits: &mut BitReader) -> Result<i32> {
    let m = if extra == 0 {
        base
    } else {
        bits.refill()?;
        let low = bits.buf as u32 & ((1 << extra) - 1);
        bits.consume(extra);
        base | low
    } as i32;
    Ok(if negative { -m } else { m })
}

/// Token counts per context, for learning tables.
#[derive(Clone)]
pub struct Counts {
    counts: Vec<[u32; TOKENS]>,
}

impl Counts {
    pub fn new(contexts: usize) -> Counts {
        assert!(contexts <= MAX_CONTEXTS, "at most {MAX_CONTEXTS} contexts");
        Counts { counts: vec![[0; TOKENS]; contexts] }
    }

    #[inline(always)]
    pub fn add(&mut self, context: usize, token: u8) {
        self.add_n(context, token, 1);
    }

    #[inline(always)]
    fn add_n(&mut self, context: usize, token: u8, n: u32) {
        let c = &mut self.counts[context][token as usize];
        *c = c.saturating_add(n);
    }

    /// The counts, context after context, for adding up those of other processes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.counts.iter().flatten().flat_map(|c| c.to_le_bytes()).collect()
    }

    /// Adds counts written by `to_le_bytes` (of as many contexts).
    pub fn merge_le_bytes(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() != self.counts.len() * TOKENS * 4 {
            return false;
        }
        for (c, b) in self.counts.iter_mut().flatten().zip(bytes.chunks_exact(4)) {
            *c = c.saturating_add(u32::from_le_bytes(b.try_into().expect("4 bytes")));
        }
        true
    }

    pub fn merge(&mut self, other: &Counts) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_add(*y);
            }
        }
    }

    /// The bits the tokens counted take under `tables`: their ideal code lengths, which the rANS
    /// words come within a few hundredths of a percent of, and their extra bits.
    pub fn coded_bits(&self, tables: &Tables) -> f64 {
        let info = token_info();
        let mut bits = 0.0;
        for (c, n) in self.counts.iter().enumerate() {
            if let Some(table) = tables.of(c) {
                for ((&v, &e), &(_, extra, _)) in n.iter().zip(&table.entries).zip(info) {
                    if v > 0 {
                        let (f, _) = Table::split(e);
                        bits += v as f64 * ((TOTAL as f64 / f as f64).log2() + extra as f64);
                    }
                }
            }
        }
        bits
    }

    /// Tables for coding exactly the tokens counted (or any whose counts are not zero).
    /// Contexts share a table where a table of their own would cost more to store than it
    /// saves: runs of consecutive contexts are merged greedily, the merge saving most first,
    /// while one saves bits (a small array stores few tables, a large one one per context).
    pub fn tables(&self) -> Tables {
        // (first context, counts, cost in bits) per run.
        let mut runs: Vec<(usize, [u32; TOKENS], f64)> = self.counts.iter().enumerate().map(|(c, n)| (c, *n, run_cost(n))).collect();
        while runs.len() > 1 {
            let merged = |k: usize| {
                let mut n = runs[k].1;
                for (a, b) in n.iter_mut().zip(&runs[k + 1].1) {
                    *a = a.saturating_add(*b);
                }
                let cost = run_cost(&n);
                (runs[k].2 + runs[k + 1].2 - cost, n, cost)
            };
            let (k, (saving, n, cost)) =
                (0..runs.len() - 1).map(|k| (k, merged(k))).max_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(b.0.cmp(&a.0))).expect("two runs");
            if saving <= 0.0 {
                break;
            }
            runs[k] = (runs[k].0, n, cost);
            runs.remove(k + 1);
        }
        let mut starts = vec![false; self.counts.len()];
        for r in &runs {
            starts[r.0] = true;
        }
        Tables::new(starts, runs.iter().map(|r| r.1.map(|n| if n == 0 { 0 } else { level_of(n) })).collect())
    }
}

/// What a byte of a table weighs against a byte of coded tokens: every region read reads the
/// tables of its arrays whole, and only the chunks it touches. At 4, one box of the 48^3
/// Nyx-like level 0 reads 9.8% of the level's bytes instead of 10.6%; the 12.7 MB Nyx-like
/// density at 1e-4 grows by 0.1%.
const TABLE_WEIGHT: f64 = 4.0;

/// Bits a run of contexts sharing one table spends: its tokens at their frequencies, and the
/// table as stored (weighed by `TABLE_WEIGHT`).
fn run_cost(n: &[u32; TOKENS]) -> f64 {
    let total: f64 = n.iter().map(|&v| v as f64).sum();
    let coded: f64 = n.iter().filter(|&&v| v > 0).map(|&v| v as f64 * (total / v as f64).log2()).sum();
    let mut table = Vec::new();
    write_levels(&n.map(|v| u8::from(v > 0)), &mut table);
    coded + 8.0 * TABLE_WEIGHT * table.len() as f64
}

/// A table's levels: `first token varint | span varint (0: no table) | the levels of the span`,
/// each zero level followed by a varint of how many more zeros follow it (a table mixing small
/// and large residuals has a gap between them).
fn write_levels(l: &[u8; TOKENS], out: &mut Vec<u8>) {
    let (Some(lo), Some(hi)) = (l.iter().position(|&v| v != 0), l.iter().rposition(|&v| v != 0)) else {
        out.extend_from_slice(&[0, 0]);
        return;
    };
    put_varint(out, lo as u64);
    put_varint(out, (hi - lo + 1) as u64);
    let mut t = lo;
    while t <= hi {
        out.push(l[t]);
        if l[t] == 0 {
            let zeros = l[t..=hi].iter().take_while(|&&v| v == 0).count();
            put_varint(out, zeros as u64 - 1);
            t += zeros;
        } else {
            t += 1;
        }
    }
}

fn read_levels(r: &mut ByteReader) -> Result<[u8; TOKENS]> {
    let lo = r.bounded_varint(TOKENS as u64, "first token")? as usize;
    let span = r.bounded_varint((TOKENS - lo) as u64, "token span")? as usize;
    let mut l = [0u8; TOKENS];
    let mut t = lo;
    while t < lo + span {
        l[t] = r.u8("token level")?;
        t += if l[t] == 0 { 1 + r.bounded_varint((lo + span - t - 1) as u64, "zero levels")? as usize } else { 1 };
    }
    if span > 0 && (l[lo] == 0 || l[lo + span - 1] == 0) {
        return Err(corrupt!("a table's span must start and end with a token that occurs"));
    }
    Ok(l)
}

/// A count stored as a level: `count ~ 2^(level / 8)` (a table need not be exact: a count off
/// by 4.5% costs a few thousandths of a bit per token).
fn level_of(n: u32) -> u8 {
    // The nearest level, in integers: the largest level whose count is at most n * 2^(1/16).
    let target = n as u64 * 1_044_274 / 1_000_000;
    (1..=255u8).rev().find(|&l| count_of(l) <= target.max(1)).unwrap_or(1)
}

/// The pseudo-count of a stored level (0: the token never occurs).
fn count_of(level: u8) -> u64 {
    // round(256 * 2^(k/8)) for k = 0..7: integers, so every platform builds the same tables.
    const STEPS: [u64; 8] = [256, 279, 304, 332, 362, 395, 431, 470];
    if level == 0 {
        0
    } else {
        ((STEPS[level as usize % 8] << (level / 8)) >> 8).max(1)
    }
}

/// One context's table: per token its frequency (the frequencies sum to `TOTAL`) and its
/// cumulative start in one word (`Table::split`), and per slot of `[0, TOTAL)` its token.
/// Inline, so that a decoder goes from a context to its slots in one load: decoding is a chain
/// of dependent loads, each symbol's context waiting for the last symbol.
#[derive(Clone)]
struct Table {
    entries: [u32; TOKENS],
    slots: [u8; TOTAL as usize],
}

impl Table {
    /// `None` when no token has a count.
    fn new(levels: &[u8; TOKENS]) -> Option<Table> {
        let counts: Vec<u64> = levels.iter().map(|&l| count_of(l)).collect();
        let sum: u64 = counts.iter().sum();
        if sum == 0 {
            return None;
        }
        // Scaled down, each present token keeping at least 1; the rounding error goes to (or
        // comes from) the largest frequencies.
        let mut freq: Vec<u32> = counts.iter().map(|&c| if c == 0 { 0 } else { ((c * TOTAL as u64) / sum).max(1) as u32 }).collect();
        let mut total: u32 = freq.iter().sum();
        while total != TOTAL {
            let largest = (0..TOKENS).max_by_key(|&t| (freq[t], std::cmp::Reverse(t))).expect("tokens");
            if total < TOTAL {
                freq[largest] += TOTAL - total;
                total = TOTAL;
            } else {
                // Take from the largest what it can give while keeping 1.
                let give = (total - TOTAL).min(freq[largest] - 1);
                if give == 0 {
                    // Every present token at 1 and still over: impossible, TOKENS < TOTAL.
                    unreachable!("more tokens than slots");
                }
                freq[largest] -= give;
                total -= give;
            }
        }
        let mut t = Table { entries: [0; TOKENS], slots: [0; TOTAL as usize] };
        let mut at = 0u32;
        for (k, &f) in freq.iter().enumerate() {
            // The frequency takes 13 bits (up to `TOTAL`), the start 12 (below `TOTAL` for a token
            // that occurs; one that does not has 0 for both).
            t.entries[k] = if f == 0 { 0 } else { f << SCALE | at };
            t.slots[at as usize..(at + f) as usize].fill(k as u8);
            at += f;
        }
        Some(t)
    }

    /// A token's frequency and start, from its entry.
    #[inline(always)]
    fn split(entry: u32) -> (u32, u32) {
        (entry >> SCALE, entry & (TOTAL - 1))
    }
}

/// How an encoder codes a token of one table: its frequency and start, the state above which it
/// renormalizes first, and the frequency's reciprocal, which makes the state's division a
/// multiplication: `x / freq == (x * reciprocal) >> shift` for every 32-bit `x` (Granlund and
/// Montgomery's round-up method with a 33-bit multiplier).
#[derive(Clone, Copy, Default)]
struct Coding {
    freq: u32,
    start: u32,
    limit: u64,
    reciprocal: u64,
    shift: u32,
}

impl Coding {
    /// Codes this token from state `x`, returning the state before it. A symbol writes at
    /// most one word: written always at `words[*kept]`, kept where the state renormalizes,
    /// without a branch that the symbols decide (and no predictor foresees).
    #[inline(always)]
    fn step(&self, x: u32, words: &mut [u16], kept: &mut usize) -> u32 {
        words[*kept] = x as u16;
        let renormalize = x as u64 >= self.limit;
        *kept += renormalize as usize;
        let y = if renormalize { x >> 16 } else { x };
        let q = ((y as u128 * self.reciprocal as u128) >> self.shift) as u32;
        (q << SCALE) + (y - q * self.freq) + self.start
    }

    fn new(entry: u32) -> Coding {
        let (freq, start) = Table::split(entry);
        if freq == 0 {
            return Coding::default();
        }
        // ceil(log2 freq), and the multiplier ceil(2^(32 + l) / freq) < 2^33.
        let l = u32::BITS - (freq - 1).leading_zeros();
        let reciprocal = (1u64 << (32 + l)).div_ceil(freq as u64);
        Coding { freq, start, limit: (freq as u64) << (32 - SCALE), reciprocal, shift: 32 + l }
    }
}

/// The tables of every context: what is stored once and shared by every stream they code.
/// Runs of consecutive contexts may share one table.
#[derive(Clone)]
pub struct Tables {
    /// Per context, the index of its table.
    of: Vec<u8>,
    levels: Vec<[u8; TOKENS]>,
    tables: Vec<Option<Table>>,
    /// Per table, its tokens' codings, made when an encoder first asks.
    codings: std::sync::OnceLock<Vec<Option<[Coding; TOKENS]>>>,
    /// Whether decoding reads extra bits without a branch (see `Decoder::residual`).
    branchless: bool,
}

impl PartialEq for Tables {
    fn eq(&self, other: &Tables) -> bool {
        (&self.of, &self.levels) == (&other.of, &other.levels)
    }
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tables({} contexts, {} tables)", self.of.len(), self.levels.len())
    }
}

impl Tables {
    /// `starts[c]`: context `c` starts a run with a table of its own (the next of `levels`).
    fn new(starts: Vec<bool>, levels: Vec<[u8; TOKENS]>) -> Tables {
        let of = starts.iter().scan(0u8, |next, &s| {
            *next += s as u8;
            Some(next.saturating_sub(1))
        });
        let tables = levels.iter().map(Table::new).collect();
        // The tokens counted (their levels are counts), nonzero ones and those with extra
        // bits: where neither kind is rare, a branch on the kind mispredicts too often.
        let info = token_info();
        let (mut nonzero, mut extra) = (0u64, 0u64);
        for (t, &(_, bits, _)) in info.iter().enumerate().skip(1) {
            let n: u64 = levels.iter().map(|l| count_of(l[t])).sum();
            nonzero += n;
            extra += if bits > 0 { n } else { 0 };
        }
        let share = extra as f64 / nonzero.max(1) as f64;
        Tables {
            of: of.collect(),
            levels,
            tables,
            codings: std::sync::OnceLock::new(),
            branchless: share.min(1.0 - share) > BRANCHLESS_SHARE,
        }
    }

    /// The codings of `context`'s tokens, if it has a table.
    fn coding(&self, context: usize) -> Option<&[Coding; TOKENS]> {
        let codings = self.codings.get_or_init(|| self.tables.iter().map(|t| t.as_ref().map(|t| t.entries.map(Coding::new))).collect());
        self.of.get(context).and_then(|&t| codings[t as usize].as_ref())
    }

    pub fn contexts(&self) -> usize {
        self.of.len()
    }

    /// The table of `context`, if it has one.
    #[inline(always)]
    fn of(&self, context: usize) -> Option<&Table> {
        self.of.get(context).and_then(|&t| self.tables[t as usize].as_ref())
    }

    /// `contexts varint | which contexts start a run, a bit each (LSB first), padded with zeros
    /// to whole bytes | per run: its table's levels (see `write_levels`)`.
    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.of.len() as u64);
        let mut bits = vec![0u8; self.of.len().div_ceil(8)];
        for c in 0..self.of.len() {
            if c == 0 || self.of[c] != self.of[c - 1] {
                bits[c / 8] |= 1 << (c % 8);
            }
        }
        out.extend_from_slice(&bits);
        for l in &self.levels {
            write_levels(l, out);
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Tables> {
        let n = r.bounded_varint(MAX_CONTEXTS as u64, "context count")? as usize;
        let bits = r.take(n.div_ceil(8), "context runs")?;
        let starts: Vec<bool> = (0..n).map(|c| bits[c / 8] >> (c % 8) & 1 == 1).collect();
        if n > 0 && !starts[0] || !n.is_multiple_of(8) && bits[n / 8] >> (n % 8) != 0 {
            return Err(corrupt!("context runs must start at context 0 and be padded with zeros"));
        }
        let levels = starts.iter().filter(|&&s| s).map(|_| read_levels(r)).collect::<Result<_>>()?;
        Ok(Tables::new(starts, levels))
    }
}

/// Streams of at least this many tokens are counted in four tallies (`Encoder::count`), which
/// fewer would not pay for clearing.
const TALLY_SYMBOLS: usize = 1 << 14;

/// Collects a stream's tokens and contexts in coding order, to count them (learning tables) and
/// then code them backwards (`finish`) without modelling the stream twice.
#[derive(Default)]
pub struct Encoder {
    contexts: Vec<u8>,
    tokens: Vec<u8>,
    bits: BitWriter,
}

impl Encoder {
    pub fn with_capacity(n: usize) -> Encoder {
        Encoder { contexts: Vec::with_capacity(n), tokens: Vec::with_capacity(n), bits: BitWriter::default() }
    }

    /// Codes residual `d` (`|d| <= 2^16`) in `context`.
    #[cfg(test)]
    #[inline(always)]
    pub fn residual(&mut self, context: usize, d: i32) {
        let (token, extra, value) = tokenize(d);
        self.contexts.push(context as u8);
        self.tokens.push(token);
        self.bits.put(value, extra);
    }

    /// Codes residuals `d`, each in its context of `contexts`, as `residual` one by one.
    #[inline(always)]
    pub fn extend(&mut self, contexts: &[u8], d: &[i32]) {
        self.contexts.extend_from_slice(contexts);
        let start = self.tokens.len();
        self.tokens.resize(start + d.len(), 0);
        let mut extra_bits = vec![0u32; d.len()];
        for ((token, bits), &r) in self.tokens[start..].iter_mut().zip(&mut extra_bits).zip(d) {
            let (t, extra, value) = tokenize(r);
            *token = t;
            *bits = value | extra << 16;
        }
        self.bits.put_all(&extra_bits);
    }

    /// How many residuals the stream holds.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The residuals given to `residual`, in coding order: the model holds them whole, so a
    /// caller may drop its symbols once they are modelled.
    pub fn residuals(&self) -> Vec<i32> {
        let mut bytes = Vec::new();
        self.bits.append_to(&mut bytes);
        let mut bits = BitReader::new(&bytes);
        let info = token_info();
        self.tokens.iter().map(|&t| detokenize(info[t as usize], &mut bits).expect("the bits this encoder wrote")).collect()
    }

    /// Adds the stream's tokens to `counts`.
    pub fn count(&self, counts: &mut Counts) {
        let pairs = self.contexts.iter().zip(&self.tokens);
        if self.tokens.len() < TALLY_SYMBOLS {
            pairs.for_each(|(&c, &t)| counts.add(c as usize, t));
            return;
        }
        // Four tallies, a symbol's chosen by its position: in a run of one token every count
        // would otherwise wait for the last one's increment to reach memory.
        let mut tally = vec![[0u32; TOKENS]; 4 * counts.counts.len()];
        let (mut contexts, mut tokens) = (self.contexts.chunks_exact(4), self.tokens.chunks_exact(4));
        for (c, t) in (&mut contexts).zip(&mut tokens) {
            for k in 0..4 {
                tally[4 * c[k] as usize + k][t[k] as usize] += 1;
            }
        }
        for (&c, &t) in contexts.remainder().iter().zip(tokens.remainder()) {
            tally[4 * c as usize][t as usize] += 1;
        }
        for (c, rows) in tally.chunks_exact(4).enumerate() {
            for t in 0..TOKENS {
                let n = rows.iter().map(|r| r[t]).fold(0u32, u32::saturating_add);
                counts.add_n(c, t as u8, n);
            }
        }
    }

    /// Adds the stream's tokens from the `from`-th on to `counts`, `weight` (>= 1) times each, for
    /// a sample standing for more symbols: whole counts whose sum follows `weight`, every token
    /// counted at least once.
    pub fn count_weighted(&self, counts: &mut Counts, from: usize, weight: f64) {
        let mut owed = 0.0;
        for (&c, &t) in self.contexts.iter().zip(&self.tokens).skip(from) {
            owed += weight;
            let n = owed as u32;
            owed -= n as f64;
            counts.add_n(c as usize, t, n);
        }
    }

    /// The stream, appended to `out`. Fails if a token has no frequency in its context's table
    /// (tables learnt from other symbols than these).
    pub fn finish(&self, tables: &Tables, out: &mut Vec<u8>) -> Result<()> {
        let codings: [Option<&[Coding; TOKENS]>; MAX_CONTEXTS] = std::array::from_fn(|c| tables.coding(c));
        let mut words = vec![0u16; self.tokens.len()];
        let mut kept = 0;
        let coding = |c: u8, t: u8| -> Result<&Coding> {
            let Some(Some(coding)) = codings.get(c as usize) else { return Err(corrupt!("context {c} has no table")) };
            let k = &coding[t as usize];
            if k.freq == 0 {
                return Err(corrupt!("token {t} has no frequency in context {c}"));
            }
            Ok(k)
        };
        // Symbol i takes state i % 2: backwards, two at a time, so that both states stay in
        // registers rather than in an array indexed by the symbol.
        let (mut x0, mut x1) = (LOW, LOW);
        let even = self.tokens.len() & !1;
        if let (Some(&c), Some(&t)) = (self.contexts.get(even), self.tokens.get(even)) {
            x0 = Coding::step(coding(c, t)?, x0, &mut words, &mut kept);
        }
        for (c, t) in self.contexts[..even].rchunks_exact(2).zip(self.tokens[..even].rchunks_exact(2)) {
            x1 = Coding::step(coding(c[1], t[1])?, x1, &mut words, &mut kept);
            x0 = Coding::step(coding(c[0], t[0])?, x0, &mut words, &mut kept);
        }
        let mut rans = Vec::with_capacity(8 + 2 * kept);
        rans.extend_from_slice(&x0.to_le_bytes());
        rans.extend_from_slice(&x1.to_le_bytes());
        for w in words[..kept].iter().rev() {
            rans.extend_from_slice(&w.to_le_bytes());
        }
        put_varint(out, rans.len() as u64);
        out.extend_from_slice(&rans);
        self.bits.append_to(out);
        Ok(())
    }
}

/// Decodes a stream of `Encoder`, symbol by symbol in coding order.
pub struct Decoder<'a> {
    /// The state of this symbol, then the other's: the two alternate.
    state: u32,
    other: u32,
    words: &'a [u8],
    pos: usize,
    bits: BitReader<'a>,
    /// The extra bits' bytes, for checking at the end that they were all used.
    extra: &'a [u8],
    /// Per context its table, `None` past those the tables have.
    tables: [Option<&'a Table>; MAX_CONTEXTS],
    branchless: bool,
    info: &'static [(u32, u32, bool); TOKENS],
}

impl<'a> Decoder<'a> {
    pub fn new(bytes: &'a [u8], tables: &'a Tables) -> Result<Decoder<'a>> {
        let mut r = ByteReader::new(bytes);
        let len = r.bounded_varint(r.remaining() as u64, "rANS length")? as usize;
        let rans = r.take(len, "rANS bytes")?;
        if len < 8 || !len.is_multiple_of(2) {
            return Err(corrupt!("rANS stream of {len} bytes"));
        }
        let state = |k: usize| u32::from_le_bytes(rans[4 * k..4 * k + 4].try_into().expect("4 bytes"));
        let (state, other) = (state(0), state(1));
        if state < LOW || other < LOW {
            return Err(corrupt!("rANS state below its range"));
        }
        let extra = &bytes[r.position()..];
        let branchless = tables.branchless;
        let tables = std::array::from_fn(|c| tables.of(c));
        Ok(Decoder { state, other, words: &rans[8..], pos: 0, bits: BitReader::new(extra), extra, tables, branchless, info: token_info() })
    }

    /// The next residual, coded in `context`.
    #[inline(always)]
    pub fn residual(&mut self, context: usize) -> Result<i32> {
        let r = self.residual_at::<0, true>(context);
        (self.state, self.other) = (self.other, self.state);
        r
    }

    /// Makes the extra bits of the next two residuals readable by `residual_at` (56 bits hold
    /// two tokens' 14 at most).
    #[inline(always)]
    pub fn refill(&mut self) -> Result<()> {
        if self.branchless {
            self.bits.refill()?;
        }
        Ok(())
    }

    /// The residual that state `S` (0: `state`, 1: `other`) decodes next, coded in `context`;
    /// with `REFILL`, refilling the extra bits first where the tables read them branchless.
    /// Decoding pairs of residuals as `residual_at::<0, false>` then `residual_at::<1, false>`
    /// after a `refill` keeps each state in a field of its own (`residual` swaps them through
    /// memory); after an even number of residuals, `residual` takes up where they leave off.
    #[inline(always)]
    pub fn residual_at<const S: usize, const REFILL: bool>(&mut self, context: usize) -> Result<i32> {
        let Some(Some(table)) = self.tables.get(context) else { return Err(corrupt!("context {context} has no table")) };
        let state = if S == 0 { &mut self.state } else { &mut self.other };
        let x = *state;
        let slot = x & (TOTAL - 1);
        let t = table.slots[slot as usize];
        let (f, s) = Table::split(table.entries[t as usize]);
        let x = f * (x >> SCALE) + slot - s;
        // Without a branch where the symbols decide: a state takes a word every few symbols,
        // which no predictor foresees. Past the end the coder reads zeros; `finish` then
        // refuses the stream.
        let w = self.words.get(self.pos..self.pos + 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        let renormalize = x < LOW;
        self.pos += 2 * renormalize as usize;
        *state = if renormalize { x << 16 | w as u32 } else { x };
        // Zero residuals, though, are runs in smooth data, where the branch pays.
        if t == 0 {
            return Ok(0);
        }
        if !self.branchless {
            return detokenize(self.info[t as usize], &mut self.bits);
        }
        // Tokens with and without extra bits both common: read as many as the token has, maybe
        // none, rather than branch on which.
        let (base, extra, negative) = self.info[t as usize];
        if REFILL {
            self.bits.refill()?;
        }
        let m = (base | (self.bits.buf as u32 & ((1u32 << extra) - 1))) as i32;
        self.bits.consume(extra);
        Ok(if negative { -m } else { m })
    }

    /// Checks that decoding used exactly the bytes the encoder wrote and ended where it began.
    pub fn finish(self) -> Result<()> {
        if self.pos != self.words.len() || (self.state, self.other) != (LOW, LOW) {
            return Err(corrupt!("rANS symbols end after {} of {} bytes, or in another state", self.pos, self.words.len()));
        }
        let used = self.bits.consumed();
        if used.div_ceil(8) != self.extra.len() as u64 {
            return Err(corrupt!("extra bits end after {} of {} bytes", used.div_ceil(8), self.extra.len()));
        }
        if !used.is_multiple_of(8) && self.extra[(used / 8) as usize] >> (used % 8) != 0 {
            return Err(corrupt!("extra bits padded with ones"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reciprocals_divide_every_state_exactly() {
        let mut next = crate::test_rng::xorshift(3);
        for freq in 1..=TOTAL {
            let k = Coding::new(freq << SCALE);
            let states = [0, 1, freq - 1, freq, u32::MAX, u32::MAX - 1, u32::MAX / freq * freq, (u32::MAX / freq) * freq - 1];
            for x in states.into_iter().chain((0..64).map(|_| next() as u32)) {
                assert_eq!(((x as u128 * k.reciprocal as u128) >> k.shift) as u32, x / freq, "{x} / {freq}");
            }
        }
    }

    #[test]
    fn tokens_cover_every_residual_once() {
        let info = token_info();
        for d in -(MAX_MAGNITUDE as i32)..=MAX_MAGNITUDE as i32 {
            let (t, extra, value) = tokenize(d);
            assert!((t as usize) < TOKENS);
            let (base, n, negative) = info[t as usize];
            assert_eq!(n, extra, "{d}");
            let m = (base | value) as i32;
            assert_eq!(if negative { -m } else { m }, d);
        }
    }

    #[test]
    fn the_model_gives_back_its_residuals() {
        let mut next = crate::test_rng::xorshift(9);
        let mut residuals: Vec<i32> = (0..20_000).map(|i| (next() % (1 + (i % 5000) as u64 * 13)) as i32 - (i % 5000) * 6).collect();
        residuals.extend([65536, -65536, 0, 1, -1, 7, 8, -8, 65535]);
        let mut enc = Encoder::default();
        for (i, &d) in residuals.iter().enumerate() {
            enc.residual(i % 3, d);
        }
        assert_eq!(enc.len(), residuals.len());
        assert_eq!(enc.residuals(), residuals);
    }

    #[test]
    fn levels_round_trip_within_a_step() {
        for n in [1u32, 2, 3, 7, 100, 1000, 65_535, 1 << 20, u32::MAX / 2] {
            let c = count_of(level_of(n)) as f64;
            assert!((c / n as f64 - 1.0).abs() < 0.05 || n < 20, "{n} -> {c}");
        }
    }

    fn code(residuals: &[(usize, i32)], contexts: usize) -> (Vec<u8>, Tables) {
        let mut counts = Counts::new(contexts);
        for &(c, d) in residuals {
            counts.add(c, tokenize(d).0);
        }
        let tables = counts.tables();
        let mut enc = Encoder::default();
        for &(c, d) in residuals {
            enc.residual(c, d);
        }
        let mut out = Vec::new();
        enc.finish(&tables, &mut out).unwrap();
        (out, tables)
    }

    fn decoded(bytes: &[u8], tables: &Tables, contexts: &[usize]) -> Result<Vec<i32>> {
        let mut dec = Decoder::new(bytes, tables)?;
        let out = contexts.iter().map(|&c| dec.residual(c)).collect::<Result<Vec<_>>>()?;
        dec.finish()?;
        Ok(out)
    }

    #[test]
    fn both_ways_of_reading_extra_bits_decode_the_same() {
        let mut next = crate::test_rng::xorshift(9);
        // Mostly small residuals (no extra bits), a few large: extra bits read on a branch.
        // Spread over 0..40: both kinds common, read without one.
        for (spread, branchless) in [(5u64, false), (40, true)] {
            let residuals: Vec<(usize, i32)> = (0..20_000)
                .map(|i| {
                    let d = if spread == 5 && i % 50 == 0 { 300 } else { (next() % (2 * spread + 1)) as i32 - spread as i32 };
                    (i % 2, d)
                })
                .collect();
            let (bytes, tables) = code(&residuals, 2);
            assert_eq!(tables.branchless, branchless, "spread {spread}");
            let contexts: Vec<usize> = residuals.iter().map(|r| r.0).collect();
            assert_eq!(decoded(&bytes, &tables, &contexts).unwrap(), residuals.iter().map(|r| r.1).collect::<Vec<_>>());
            // A stream missing its last extra-bit byte fails either way.
            assert!(decoded(&bytes[..bytes.len() - 1], &tables, &contexts).is_err());
        }
    }

    #[test]
    fn residuals_round_trip_near_their_entropy() {
        let mut next = crate::test_rng::xorshift(5);
        // Context 0: a narrow spread; context 1: a wide one, with the extremes.
        let mut residuals: Vec<(usize, i32)> =
            (0..50_000).map(|i| if i % 2 == 0 { (0, (next() % 3) as i32 - 1) } else { (1, (next() % 2001) as i32 - 1000) }).collect();
        residuals.extend([(1, 65536), (1, -65536), (1, 0), (0, 65535)]);
        let (bytes, tables) = code(&residuals, 2);
        let contexts: Vec<usize> = residuals.iter().map(|r| r.0).collect();
        assert_eq!(decoded(&bytes, &tables, &contexts).unwrap(), residuals.iter().map(|r| r.1).collect::<Vec<_>>());
        let ideal = 25_000.0 * (3f64.log2() + 2001f64.log2()) / 8.0;
        assert!((bytes.len() as f64) < ideal * 1.02, "{} bytes, ideal {ideal:.0}", bytes.len());
        let mut stored = Vec::new();
        tables.write(&mut stored);
        assert_eq!(Tables::read(&mut ByteReader::new(&stored)).unwrap(), tables);
    }

    #[test]
    fn contexts_share_a_table_where_their_own_would_not_pay() {
        let mut next = crate::test_rng::xorshift(9);
        // Context 0 narrow, 1 wide, 2 empty, 3 like 0: a large array keeps 0 and 1 apart and
        // gives 2 and 3 a run of their own (3's counts), a small one stores fewer tables.
        let draw = |next: &mut dyn FnMut() -> u64, c: usize| if c == 1 { (next() % 2001) as i32 - 1000 } else { (next() % 3) as i32 - 1 };
        for (n, tables) in [(200_000usize, 3..=3), (40, 1..=3)] {
            let residuals: Vec<(usize, i32)> = (0..n).map(|i| [0, 1, 3][i % 3]).map(|c| (c, draw(&mut next, c))).collect();
            let (bytes, t) = code(&residuals, 4);
            assert!(tables.contains(&t.levels.len()), "{n} symbols: {t:?}");
            let contexts: Vec<usize> = residuals.iter().map(|r| r.0).collect();
            assert_eq!(decoded(&bytes, &t, &contexts).unwrap(), residuals.iter().map(|r| r.1).collect::<Vec<_>>());
            let mut stored = Vec::new();
            t.write(&mut stored);
            assert_eq!(Tables::read(&mut ByteReader::new(&stored)).unwrap(), t);
            // The runs' bits: context 0 must start one, and the padding is zero.
            for bad in [stored[1] & !1, stored[1] | 0x80] {
                let mut damaged = stored.clone();
                damaged[1] = bad;
                assert!(Tables::read(&mut ByteReader::new(&damaged)).map_or(true, |d| d != t));
            }
        }
    }

    #[test]
    fn empty_and_one_symbol_streams_round_trip() {
        for residuals in [vec![], vec![(0usize, 0i32)], vec![(0, 5); 1000]] {
            let (bytes, tables) = code(&residuals, 1);
            let contexts: Vec<usize> = residuals.iter().map(|r| r.0).collect();
            assert_eq!(decoded(&bytes, &tables, &contexts).unwrap(), residuals.iter().map(|r| r.1).collect::<Vec<_>>());
        }
    }

    #[test]
    fn unknown_tokens_and_damage_are_refused() {
        let residuals: Vec<(usize, i32)> = (0..3000).map(|i| (i % 3, (i as i32 * 7919) % 41 - 20)).collect();
        let (bytes, tables) = code(&residuals, 3);
        // A token the tables never saw cannot be coded.
        let mut enc = Encoder::default();
        enc.residual(0, 30_000);
        assert!(enc.finish(&tables, &mut Vec::new()).is_err());
        let contexts: Vec<usize> = residuals.iter().map(|r| r.0).collect();
        assert!(decoded(&bytes[..bytes.len() - 1], &tables, &contexts).is_err());
        assert!(decoded(&bytes, &tables, &contexts[..contexts.len() - 1]).is_err());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x24;
            let _ = decoded(&bad, &tables, &contexts);
        }
        let mut stored = Vec::new();
        tables.write(&mut stored);
        for cut in 0..stored.len() {
            assert!(Tables::read(&mut ByteReader::new(&stored[..cut])).is_err());
        }
    }
}
