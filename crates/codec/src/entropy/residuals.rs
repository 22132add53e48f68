//! Quantization symbols coded in contexts of the size of the residuals just before: what a
//! block set's symbols are in ratio mode. One model, two coders: one token per symbol from a
//! static table per context (`rans`, `model` and `decode_tabled`, format.md 14.4), or adaptive
//! binary decisions (`rangecoder`, `encode` and `decode`, 14.3), described here.
//!
//! Residuals are heteroscedastic: where a field varies strongly (high density in a lognormal
//! field, say) the prediction errors of a whole region are large, elsewhere small, and one
//! static code for the mixture spends bits telling the regions apart at every symbol. Here
//! the context is the sum of the last `WINDOW` residual magnitudes (each capped at `CAP`) and of
//! the magnitudes of the symbol's neighbours in space (scaled to `WINDOW` of them), in octaves:
//! 17 classes. A symbol's residual `d = symbol - zero` is coded as
//!
//! - `d != 0`, with a probability per class;
//! - its sign, per class and sign of the last nonzero residual;
//! - the bit length `k` of `|d|` (1 to 16), in unary (`k > 1`, `k > 2`, ...), per class and step;
//! - the `k - 1` bits of `|d|` below its leading one, most significant first, per `k` and bit.
//!
//! The probabilities adapt as the symbols go. Every block set's stream starts from the same
//! state: learnt from the whole array and stored once beside its sets (format.md, 14.3).

use super::rangecoder::{Decoder, Encoder, Prob};
use super::rans;
use crate::bytes::{put_varint, ByteReader};
use crate::error::{corrupt, Result};

const CLASSES: usize = 17;
const WINDOW: usize = 8;
const CAP: u32 = (1 << 12) - 1;
/// Bit lengths of a residual magnitude: up to 16 (|d| <= 32768).
const LENGTHS: usize = 16;
/// Bits below a magnitude's leading one that have probabilities of their own; lower ones are
/// close to even and go at one half.
const MODELLED: usize = 2;

// The model's probabilities, one array: per class "nonzero"; per class and sign of the last
// nonzero residual "negative"; per class and step "longer"; per bit length and bit position a
// magnitude bit.
const NONZERO: usize = 0;
const NEGATIVE: usize = CLASSES;
const LONGER: usize = 3 * CLASSES;
const BITS: usize = LONGER + CLASSES * LENGTHS;
const CELLS: usize = BITS + (LENGTHS + 1) * LENGTHS;
/// A decision coded at one half, with no probability of its own.
const EVEN: usize = usize::MAX;

/// The last `WINDOW` magnitudes and their sum.
struct Window {
    ring: [u32; WINDOW],
    sum: u32,
    next: usize,
}

impl Window {
    fn new() -> Window {
        Window { ring: [0; WINDOW], sum: 0, next: 0 }
    }

    #[inline(always)]
    fn push(&mut self, magnitude: u32) {
        let m = magnitude.min(CAP);
        self.sum = self.sum + m - self.ring[self.next];
        self.ring[self.next] = m;
        self.next = (self.next + 1) % WINDOW;
    }
}

/// Codes the decisions of a symbol: a range coder either way, or counts for learning a
/// start. `bit` takes the decision (ignored when decoding) and returns it (decoded).
trait Coder {
    fn bit(&mut self, cell: usize, bit: bool) -> bool;
}

/// Codes residual `d` (ignored when decoding) under context class `c` through `coder`;
/// returns the residual coded.
#[inline(always)]
fn residual(coder: &mut impl Coder, c: usize, prev_negative: bool, d: i32) -> i32 {
    let mag = d.unsigned_abs();
    if !coder.bit(NONZERO + c, mag != 0) {
        return 0;
    }
    let negative = coder.bit(NEGATIVE + 2 * c + prev_negative as usize, d < 0);
    let length = (u32::BITS - mag.leading_zeros()) as usize;
    let mut k = 1;
    while k < LENGTHS && coder.bit(LONGER + c * LENGTHS + k, length > k) {
        k += 1;
    }
    let mut m = 1u32;
    for j in (0..k - 1).rev() {
        let cell = if j + 1 + MODELLED < k { EVEN } else { BITS + k * LENGTHS + j };
        m = m << 1 | coder.bit(cell, mag >> j & 1 == 1) as u32;
    }
    if negative {
        -(m as i32)
    } else {
        m as i32
    }
}

/// Codes a residual in its context (class, sign of the last nonzero residual): as binary
/// decisions (`Binary`) or as one token of a context's table (`rans`).
trait SymbolCoder {
    fn code(&mut self, class: usize, prev_negative: bool, d: i32) -> Result<i32>;
}

struct Binary<C>(C);

impl<C: Coder> SymbolCoder for Binary<C> {
    #[inline(always)]
    fn code(&mut self, class: usize, prev_negative: bool, d: i32) -> Result<i32> {
        Ok(residual(&mut self.0, class, prev_negative, d))
    }
}

/// Up to this many earlier symbols that are a symbol's neighbours in space.
pub const NEIGHBOURS: usize = 6;
/// An absent neighbour.
pub const NONE: u32 = u32::MAX;

/// Where a symbol's neighbours in space lie among the symbols before it: `Some` with up to
/// `NEIGHBOURS` indices (`NONE` for one outside its block or not stored) when its block's walk
/// is in C order, `None` when the walk is not (then the window stands in for them).
pub type Near = Option<[u32; NEIGHBOURS]>;

/// Codes `n` residuals through `coder`, `d(i)` giving the `i`-th (when encoding); returns
/// each residual coded to `out`. `near` (one entry per symbol) and `count` (how many neighbours
/// a symbol can have) give the spatial part of the context.
fn walk(
    n: usize,
    coder: &mut impl SymbolCoder,
    d: impl Fn(usize) -> i32,
    mut out: impl FnMut(i32) -> Result<()>,
    near: &[Near],
    count: u32,
) -> Result<()> {
    let mut w = Window::new();
    let mut prev_negative = false;
    // Capped magnitudes of the residuals coded so far.
    let mut mags: Vec<u32> = Vec::with_capacity(n);
    for i in 0..n {
        // The neighbours' sum in the window's units: 8 magnitudes' worth.
        let spatial = match near.get(i) {
            Some(Some(js)) => {
                let sum =
                    js.iter().filter(|&&j| j != NONE).map(|&j| mags.get(j as usize).copied().unwrap_or(0)).sum::<u32>() * WINDOW as u32;
                // The counts blocks have (1, 3 or 6 neighbours in 1 to 3 dimensions) as
                // constants, which the compiler divides by with a multiplication.
                match count {
                    6 => sum / 6,
                    3 => sum / 3,
                    c => sum / c.max(1),
                }
            }
            _ => w.sum,
        };
        let r = coder.code(class(w.sum + spatial), prev_negative, d(i))?;
        out(r)?;
        if r != 0 {
            prev_negative = r < 0;
        }
        let m = r.unsigned_abs().min(CAP);
        mags.push(m);
        w.push(m);
    }
    Ok(())
}

/// The context class of a sum: its bit length (at most 16, the sum being below `2^16`).
#[inline(always)]
fn class(sum: u32) -> usize {
    (u32::BITS - sum.leading_zeros()) as usize
}

/// The probabilities a stream starts from: one half everywhere, or learnt from the symbols of
/// a whole array and stored once beside its sets, so that a small set need not learn them
/// afresh (AMRIC's shared lossless encoding, for an adaptive coder).
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    cells: Vec<Prob>,
}

impl Default for Start {
    fn default() -> Start {
        Start { cells: vec![Prob::default(); CELLS] }
    }
}

/// How many decisions a learnt probability counts as: few enough that a set still adapts it
/// quickly to its own region. Probabilities learnt from fewer decisions are not stored.
const START_SEEN: u16 = 30;

impl Start {
    /// Learns from the symbol streams `streams` (with their `near` tables, see `encode`), each
    /// coded as its own stream.
    pub fn learn<'a>(streams: impl IntoIterator<Item = (&'a [u16], &'a [Near])>, zero: u16, count: u32) -> Start {
        struct Counts(Vec<[u64; 2]>);
        impl Coder for Counts {
            #[inline(always)]
            fn bit(&mut self, cell: usize, bit: bool) -> bool {
                if cell != EVEN {
                    self.0[cell][bit as usize] += 1;
                }
                bit
            }
        }
        let mut counts = Binary(Counts(vec![[0; 2]; CELLS]));
        for (symbols, near) in streams {
            walk(symbols.len(), &mut counts, |i| symbols[i] as i32 - zero as i32, |_| Ok(()), near, count).expect("counting cannot fail");
        }
        let cells = counts
            .0
             .0
            .iter()
            .map(|&[zeros, ones]| match Prob::learnt(zeros, ones, START_SEEN).parts() {
                (p, seen) if seen == START_SEEN => stored(((p >> 8) as u8).max(1)).expect("a nonzero byte"),
                _ => Prob::default(),
            })
            .collect();
        Start { cells }
    }

    /// `count varint | per learnt probability: gap varint (cells skipped), p u8`, the
    /// probability `(256 p + 128) / 65536` (a start need not be precise: it adapts).
    pub fn write(&self, out: &mut Vec<u8>) {
        let learnt: Vec<(usize, Prob)> = self.cells.iter().copied().enumerate().filter(|&(_, p)| p != Prob::default()).collect();
        put_varint(out, learnt.len() as u64);
        let mut next = 0;
        for (i, p) in learnt {
            put_varint(out, (i - next) as u64);
            next = i + 1;
            out.push((p.parts().0 >> 8) as u8);
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Start> {
        let count = r.bounded_varint(CELLS as u64, "learnt probability count")? as usize;
        let mut cells = vec![Prob::default(); CELLS];
        let mut next = 0u64;
        for _ in 0..count {
            let i = next + r.bounded_varint(CELLS as u64, "learnt probability gap")?;
            let cell = cells.get_mut(i as usize).ok_or_else(|| corrupt!("learnt probability {i} past the model's {CELLS}"))?;
            let p = r.u8("learnt probability")?;
            *cell = stored(p).ok_or_else(|| corrupt!("learnt probability 0"))?;
            next = i + 1;
        }
        Ok(Start { cells })
    }
}

/// The probability a start's byte `p` stands for, counting `START_SEEN` decisions; `None`
/// for 0.
fn stored(p: u8) -> Option<Prob> {
    (p > 0).then(|| Prob::from_parts((p as u16) << 8 | 128, START_SEEN).expect("within 1..65535"))
}

/// The range-coded bytes of `symbols` starting from `start`, residual 0 being symbol `zero`.
/// `near[i]` lists the neighbours in space of symbol `i` (`count`: how many a symbol can have);
/// an empty `near` means none are known.
pub fn encode(symbols: &[u16], zero: u16, start: &Start, near: &[Near], count: u32) -> Vec<u8> {
    struct Coding {
        enc: Encoder,
        model: Vec<Prob>,
    }
    impl Coder for Coding {
        #[inline(always)]
        fn bit(&mut self, cell: usize, bit: bool) -> bool {
            match self.model.get_mut(cell) {
                Some(p) => self.enc.bit(p, bit),
                None => self.enc.bit(&mut Prob::default(), bit),
            }
            bit
        }
    }
    let mut coding = Binary(Coding { enc: Encoder::default(), model: start.cells.clone() });
    walk(symbols.len(), &mut coding, |i| symbols[i] as i32 - zero as i32, |_| Ok(()), near, count).expect("encoding cannot fail");
    coding.0.enc.finish()
}

/// Decodes `out.len()` symbols coded by `encode` from `start` with the same `near` and
/// `count`; each must be below `alphabet`.
pub fn decode(bytes: &[u8], zero: u16, alphabet: usize, start: &Start, near: &[Near], count: u32, out: &mut [u16]) -> Result<()> {
    struct Decoding<'a> {
        dec: Decoder<'a>,
        model: Vec<Prob>,
    }
    impl Coder for Decoding<'_> {
        #[inline(always)]
        fn bit(&mut self, cell: usize, _: bool) -> bool {
            match self.model.get_mut(cell) {
                Some(p) => self.dec.bit(p),
                None => self.dec.bit(&mut Prob::default()),
            }
        }
    }
    let mut decoding = Binary(Decoding { dec: Decoder::new(bytes)?, model: start.cells.clone() });
    walk(out.len(), &mut decoding, |_| 0, into(out, zero, alphabet), near, count)?;
    decoding.0.dec.finish()
}

/// Stores each decoded residual as the next symbol of `out`, refusing one outside `alphabet`.
fn into(out: &mut [u16], zero: u16, alphabet: usize) -> impl FnMut(i32) -> Result<()> + '_ {
    let mut slots = out.iter_mut();
    move |r| {
        let s = zero as i64 + r as i64;
        if !(0..alphabet as i64).contains(&s) {
            return Err(corrupt!("decoded symbol {s} outside the alphabet of {alphabet}"));
        }
        *slots.next().expect("one slot per symbol") = s as u16;
        Ok(())
    }
}

/// The table-driven coder's contexts: a class and the sign of the last nonzero residual.
pub const CONTEXTS: usize = 2 * CLASSES;

#[inline(always)]
fn context(class: usize, prev_negative: bool) -> usize {
    2 * class + prev_negative as usize
}

struct Tabled<C>(C);

impl SymbolCoder for Tabled<&mut rans::Encoder> {
    #[inline(always)]
    fn code(&mut self, class: usize, prev_negative: bool, d: i32) -> Result<i32> {
        self.0.residual(context(class, prev_negative), d);
        Ok(d)
    }
}

impl SymbolCoder for Tabled<&mut rans::Decoder<'_>> {
    #[inline(always)]
    fn code(&mut self, class: usize, prev_negative: bool, _: i32) -> Result<i32> {
        self.0.residual(context(class, prev_negative))
    }
}

/// The tokens and contexts of `symbols` (residual 0 at `zero`) as `encode` models them (`near`
/// and `count` as there), ready to count (learning the tables) and to code with the tables.
pub fn model(symbols: &[u16], zero: u16, near: &[Near], count: u32) -> rans::Encoder {
    let mut enc = rans::Encoder::with_capacity(symbols.len());
    walk(symbols.len(), &mut Tabled(&mut enc), |i| symbols[i] as i32 - zero as i32, |_| Ok(()), near, count)
        .expect("modelling cannot fail");
    enc
}

/// Decodes `out.len()` symbols modelled by `model` and coded with `tables`, with the same
/// `near` and `count`; each must be below `alphabet`.
pub fn decode_tabled(
    bytes: &[u8],
    zero: u16,
    alphabet: usize,
    tables: &rans::Tables,
    near: &[Near],
    count: u32,
    out: &mut [u16],
) -> Result<()> {
    let mut dec = rans::Decoder::new(bytes, tables)?;
    walk(out.len(), &mut Tabled(&mut dec), |_| 0, into(out, zero, alphabet), near, count)?;
    dec.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Symbols around `zero` whose spread switches between regions, as residuals of a field
    /// with quiet and busy parts.
    fn regional(n: usize, zero: u16, seed: u64) -> Vec<u16> {
        let mut next = crate::test_rng::xorshift(seed);
        (0..n)
            .map(|i| {
                let spread = if (i / 500) % 2 == 0 { 1 } else { 300 };
                let d = (next() % (2 * spread + 1)) as i64 - spread as i64;
                (zero as i64 + d) as u16
            })
            .collect()
    }

    fn decoded(bytes: &[u8], zero: u16, n: usize) -> Result<Vec<u16>> {
        let mut out = vec![0u16; n];
        decode(bytes, zero, 2 * zero as usize, &Start::default(), &[], 1, &mut out).map(|_| out)
    }

    #[test]
    fn regional_symbols_round_trip_near_their_conditional_entropy() {
        let zero = 32768u16;
        let symbols = regional(40_000, zero, 7);
        let bytes = encode(&symbols, zero, &Start::default(), &[], 1);
        assert_eq!(decoded(&bytes, zero, symbols.len()).unwrap(), symbols);
        // Half the symbols uniform over 3 values (1.58 bits), half over 601 (9.23 bits).
        let ideal = 20_000.0 * (3f64.log2() + 601f64.log2()) / 8.0;
        assert!((bytes.len() as f64) < ideal * 1.05, "{} bytes, ideal {ideal:.0}", bytes.len());
    }

    #[test]
    fn spatial_neighbours_round_trip_and_must_match() {
        let zero = 32768u16;
        let symbols = regional(6000, zero, 11);
        // Rows of 20: the neighbours above and before, some missing.
        let near: Vec<Near> = (0..symbols.len())
            .map(|i| {
                (i % 7 != 3).then(|| {
                    let mut n = [NONE; NEIGHBOURS];
                    if i % 20 > 0 {
                        n[0] = i as u32 - 1;
                    }
                    if i >= 20 {
                        n[1] = i as u32 - 20;
                    }
                    n
                })
            })
            .collect();
        let start = Start::learn([(&symbols[..], &near[..])], zero, 3);
        let bytes = encode(&symbols, zero, &start, &near, 3);
        let mut out = vec![0u16; symbols.len()];
        decode(&bytes, zero, 65536, &start, &near, 3, &mut out).unwrap();
        assert_eq!(out, symbols);
        // Other neighbours give other contexts: the symbols do not come back.
        let shifted: Vec<Near> = near
            .iter()
            .map(|n| {
                n.map(|mut n| {
                    n[0] = if n[0] == NONE { NONE } else { n[0] / 2 };
                    n
                })
            })
            .collect();
        assert!(decode(&bytes, zero, 65536, &start, &shifted, 3, &mut out).is_err() || out != symbols);
    }

    #[test]
    fn extreme_symbols_round_trip() {
        let zero = 32768u16;
        let symbols: Vec<u16> = [0u16, 65535, zero, zero + 1, zero - 1, 1, 65534].iter().cycle().take(1000).copied().collect();
        assert_eq!(decoded(&encode(&symbols, zero, &Start::default(), &[], 1), zero, symbols.len()).unwrap(), symbols);
        assert_eq!(decoded(&encode(&[], zero, &Start::default(), &[], 1), zero, 0).unwrap(), Vec::<u16>::new());
    }

    #[test]
    fn damaged_streams_are_refused_or_decode_within_the_alphabet() {
        let zero = 32768u16;
        let symbols = regional(5000, zero, 3);
        let bytes = encode(&symbols, zero, &Start::default(), &[], 1);
        assert!(decoded(&bytes[..bytes.len() - 1], zero, symbols.len()).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decoded(&longer, zero, symbols.len()).is_err());
        assert!(decoded(&bytes, zero, symbols.len() + 50).is_err(), "more symbols than coded");
        // A flipped byte decodes to other symbols or fails, but never panics or leaves the
        // alphabet (block sets carry a checksum on top).
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x5A;
            let _ = decoded(&bad, zero, symbols.len());
            let mut out = vec![0u16; symbols.len()];
            if decode(&bad, zero, 40000, &Start::default(), &[], 1, &mut out).is_ok() {
                assert!(out.iter().all(|&s| s < 40000));
            }
        }
    }
}
