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
pub const WINDOW: usize = 8;
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

/// Up to this many earlier cells of a block that are a cell's neighbours in space.
pub const NEIGHBOURS: usize = 6;

/// Where a stream's symbols have neighbours in space (format.md 14.3): the stream is a list of
/// parts, unit blocks of one shape walked in C order (each stored cell coding one symbol) and
/// runs of symbols with none known (then the window stands in for them).
pub struct Layout<'a> {
    /// Per cell of the block shape, the cells before it that are its neighbours, the first
    /// `count` of them meaningful: the shape's cell count for one past the block's lower faces.
    cells: &'a [[u32; NEIGHBOURS]],
    count: u32,
    parts: Vec<Part<'a>>,
}

pub enum Part<'a> {
    /// A block walked in C order; `Some(mask)` says which of its cells are stored.
    Block(Option<&'a [bool]>),
    /// This many symbols with no neighbours in space.
    Run(usize),
}

impl<'a> Layout<'a> {
    /// Symbols in a row with no neighbours in space: a plain stream's.
    pub fn plain(n: usize) -> Layout<'static> {
        Layout { cells: &[], count: 1, parts: vec![Part::Run(n)] }
    }

    /// Blocks of a shape whose cells have neighbours `cells` (see the field; `count` of them,
    /// 1 to `NEIGHBOURS`), and runs, in stream order. Every mask has the shape's cells.
    pub fn blocks(cells: &'a [[u32; NEIGHBOURS]], count: u32, parts: Vec<Part<'a>>) -> Layout<'a> {
        debug_assert!((1..=NEIGHBOURS as u32).contains(&count));
        debug_assert!(parts.iter().all(|p| !matches!(p, Part::Block(Some(m)) if m.len() != cells.len())));
        Layout { cells, count, parts }
    }

    /// How many symbols the stream has.
    pub fn symbols(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Block(None) => self.cells.len(),
                Part::Block(Some(m)) => m.iter().filter(|&&v| v).count(),
                Part::Run(n) => *n,
            })
            .sum()
    }
}

/// Codes the residuals of the symbols `layout` lays out through `coder`, `d(i)` giving the
/// `i`-th (when encoding); returns each residual coded to `out`.
#[inline(always)]
fn walk(layout: &Layout, coder: &mut impl SymbolCoder, d: impl Fn(usize) -> i32, mut out: impl FnMut(i32) -> Result<()>) -> Result<()> {
    let mut state = State::new();
    let mut i = 0;
    let n = layout.cells.len();
    let count = layout.count as usize;
    // The capped magnitudes of the block's cells walked so far (0 where not stored), and a 0
    // past the end for neighbours past the block's faces.
    let mut mags = vec![0u32; n + 1];
    for part in &layout.parts {
        match *part {
            Part::Run(len) => {
                for _ in 0..len {
                    // Without neighbours in space, the window counts twice.
                    let r = state.code(coder, state.w.sum, d(i))?;
                    out(r)?;
                    i += 1;
                }
            }
            Part::Block(mask) => {
                for (k, near) in layout.cells.iter().enumerate() {
                    if mask.is_some_and(|m| !m[k]) {
                        mags[k] = 0;
                        continue;
                    }
                    let r = state.code(coder, spatial(near, count, &mags), d(i))?;
                    out(r)?;
                    mags[k] = r.unsigned_abs().min(CAP);
                    i += 1;
                }
            }
        }
    }
    Ok(())
}

/// The magnitudes `mags` of a cell's first `count` neighbours `near`, summed in the window's
/// units (8 magnitudes' worth).
#[inline(always)]
fn spatial(near: &[u32; NEIGHBOURS], count: usize, mags: &[u32]) -> u32 {
    let sum = near[..count].iter().map(|&j| mags[j as usize]).sum::<u32>() * WINDOW as u32;
    // The counts blocks have (1, 3 or 6 neighbours in 1 to 3 dimensions) as constants, which
    // the compiler divides by with a multiplication.
    match count {
        6 => sum / 6,
        3 => sum / 3,
        c => sum / c as u32,
    }
}

/// What the contexts remember of the residuals coded so far.
struct State {
    w: Window,
    prev_negative: bool,
}

impl State {
    fn new() -> State {
        State { w: Window::new(), prev_negative: false }
    }

    /// Codes residual `d` (ignored when decoding) in the context of `spatial`, the neighbours'
    /// sum in the window's units; returns the residual coded.
    #[inline(always)]
    fn code(&mut self, coder: &mut impl SymbolCoder, spatial: u32, d: i32) -> Result<i32> {
        let r = coder.code(class(self.w.sum + spatial), self.prev_negative, d)?;
        self.push(r);
        Ok(r)
    }

    /// The next residual of a run (the window counting twice) from state `S` of `dec`, as
    /// `rans::Decoder::residual_at` without a refill; remembered.
    #[inline(always)]
    fn run_residual<const S: usize>(&mut self, dec: &mut rans::Decoder) -> Result<i32> {
        let r = dec.residual_at::<S, false>(context(class(2 * self.w.sum), self.prev_negative))?;
        self.push(r);
        Ok(r)
    }

    /// Remembers residual `r`, just coded.
    #[inline(always)]
    fn push(&mut self, r: i32) {
        if r != 0 {
            self.prev_negative = r < 0;
        }
        self.w.push(r.unsigned_abs().min(CAP));
    }
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
    /// What a start is learnt from (`from_counts`): the zeros and ones decided in each cell by
    /// the symbol streams `streams` (with their layouts, see `encode`), each coded as its own
    /// stream. Counts of streams coded apart add up.
    pub fn count<'a, 'b: 'a>(streams: impl IntoIterator<Item = (&'a [u16], &'a Layout<'b>)>, zero: u16) -> Vec<[u64; 2]> {
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
        for (symbols, layout) in streams {
            walk(layout, &mut counts, |i| symbols[i] as i32 - zero as i32, |_| Ok(())).expect("counting cannot fail");
        }
        counts.0 .0
    }

    /// The start learnt from `count`'s counts.
    pub fn from_counts(counts: &[[u64; 2]]) -> Start {
        let cells = counts
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

/// The range-coded bytes of `symbols` starting from `start`, residual 0 being symbol `zero`,
/// laid out as `layout` says (which must have as many symbols).
pub fn encode(symbols: &[u16], zero: u16, start: &Start, layout: &Layout) -> Vec<u8> {
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
    walk(layout, &mut coding, |i| symbols[i] as i32 - zero as i32, |_| Ok(())).expect("encoding cannot fail");
    coding.0.enc.finish()
}

/// Decodes the symbols coded by `encode` from `start` with the same `layout` into `out` (as many
/// as it lays out); each must be below `alphabet`.
pub fn decode(bytes: &[u8], zero: u16, alphabet: usize, start: &Start, layout: &Layout, out: &mut [u16]) -> Result<()> {
    check_length(layout, out)?;
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
    walk(layout, &mut decoding, |_| 0, into(out, zero, alphabet))?;
    decoding.0.dec.finish()
}

fn check_length(layout: &Layout, out: &[u16]) -> Result<()> {
    let n = layout.symbols();
    if n != out.len() {
        return Err(corrupt!("{n} symbols laid out for {} to decode", out.len()));
    }
    Ok(())
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

/// Modelling symbol by symbol, which `model` must match (tests).
#[cfg(test)]
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

/// The tokens and contexts of `symbols` (residual 0 at `zero`) as `encode` models them
/// (`layout` as there), ready to count (learning the tables) and to code with the tables.
pub fn model(symbols: &[u16], zero: u16, layout: &Layout) -> rans::Encoder {
    assert_eq!(layout.symbols(), symbols.len(), "a layout of as many symbols");
    model_batched(symbols, zero, layout)
}

crate::cpu::fast_fn!(
    /// `model`, a part (a block, or a run of up to `BATCH` symbols) at a time: an encoder
    /// knows every residual before it codes any, so the window's sums, the neighbours' and the
    /// contexts come from whole parts in loops the compiler vectorizes, instead of one symbol's
    /// state after another's as `walk` goes (which decoders must). 2.9x as fast on a plain
    /// stream of mixed quiet and busy regions.
    fn model_batched(symbols: &[u16], zero: u16, layout: &Layout) -> rans::Encoder => model_in
);

/// Symbols of a run modelled together (`model_batched`).
const BATCH: usize = 2048;

#[inline(always)]
fn model_in(symbols: &[u16], zero: u16, layout: &Layout) -> rans::Encoder {
    let mut enc = rans::Encoder::with_capacity(symbols.len());
    let mut batch = Batch { d: [0; BATCH], mags: [0; WINDOW + BATCH], sums: [0; BATCH], contexts: [0; BATCH], prev_negative: false };
    let (cells, count) = (layout.cells, layout.count as usize);
    // Per cell of the block shape its magnitude (0 where not stored), and a 0 past the end for
    // neighbours past the block's faces, as in `walk`.
    let mut block_mags = vec![0u32; cells.len() + 1];
    let mut near_sums = Vec::new();
    let mut rest = symbols;
    for part in &layout.parts {
        match *part {
            Part::Run(len) => {
                let (run, after) = rest.split_at(len);
                rest = after;
                for piece in run.chunks(BATCH) {
                    batch.code(&mut enc, piece, zero, None);
                }
            }
            Part::Block(mask) => {
                let mut stored = rest.iter();
                for (k, m) in block_mags[..cells.len()].iter_mut().enumerate() {
                    *m = match mask {
                        Some(mask) if !mask[k] => 0,
                        _ => (*stored.next().expect("one symbol per stored cell") as i32 - zero as i32).unsigned_abs().min(CAP),
                    };
                }
                let (block, after) = rest.split_at(rest.len() - stored.len());
                rest = after;
                near_sums.clear();
                let walked = cells.iter().enumerate().filter(|&(k, _)| mask.is_none_or(|m| m[k]));
                near_sums.extend(walked.map(|(_, near)| spatial(near, count, &block_mags)));
                for (piece, near) in block.chunks(BATCH).zip(near_sums.chunks(BATCH)) {
                    batch.code(&mut enc, piece, zero, Some(near));
                }
            }
        }
    }
    enc
}

/// What `model_in` carries from part to part: the window's last magnitudes and the sign of the
/// last nonzero residual, with room for a batch's sums and contexts.
struct Batch {
    d: [i32; BATCH],
    /// The window's `WINDOW` magnitudes (oldest first), then those of the batch.
    mags: [u32; WINDOW + BATCH],
    sums: [u32; BATCH],
    contexts: [u8; BATCH],
    prev_negative: bool,
}

impl Batch {
    /// Models `symbols` (at most `BATCH`; residual 0 at `zero`), in order, whose neighbours'
    /// sums in space are `spatial` (one each) or, in a run without neighbours, the window's
    /// again (as `walk`).
    #[inline(always)]
    fn code(&mut self, enc: &mut rans::Encoder, symbols: &[u16], zero: u16, spatial: Option<&[u32]>) {
        let n = symbols.len();
        for (r, &s) in self.d.iter_mut().zip(symbols) {
            *r = s as i32 - zero as i32;
        }
        let d = &self.d[..n];
        for (m, &r) in self.mags[WINDOW..WINDOW + n].iter_mut().zip(d) {
            *m = r.unsigned_abs().min(CAP);
        }
        let sums = &mut self.sums[..n];
        sums.fill(0);
        for k in 0..WINDOW {
            for (sum, &m) in sums.iter_mut().zip(&self.mags[k..k + n]) {
                *sum += m;
            }
        }
        let contexts = &mut self.contexts[..n];
        match spatial {
            None => sums.iter_mut().for_each(|sum| *sum *= 2),
            Some(spatial) => sums.iter_mut().zip(spatial).for_each(|(sum, &near)| *sum += near),
        }
        for (c, &sum) in contexts.iter_mut().zip(sums.iter()) {
            *c = context(rans::bit_length(sum) as usize, false) as u8;
        }
        // In a local and without a branch: the sign of the last nonzero residual is one serial
        // chain through the batch, and zero and nonzero residuals alternate unpredictably.
        let mut prev_negative = self.prev_negative;
        for (c, &r) in contexts.iter_mut().zip(d) {
            *c |= prev_negative as u8;
            prev_negative = (prev_negative & (r == 0)) | (r < 0);
        }
        self.prev_negative = prev_negative;
        enc.extend(contexts, d);
        self.mags.copy_within(n..n + WINDOW, 0);
    }
}

crate::cpu::fast_fn!(
    /// Decodes the symbols modelled by `model` and coded with `tables`, with the same `layout`,
    /// into `out` (as many as it lays out); each must be below `alphabet`.
    pub fn decode_tabled(bytes: &[u8], zero: u16, alphabet: usize, tables: &rans::Tables, layout: &Layout, out: &mut [u16]) -> Result<()> => decode_tabled_in
);

#[inline(always)]
fn decode_tabled_in(bytes: &[u8], zero: u16, alphabet: usize, tables: &rans::Tables, layout: &Layout, out: &mut [u16]) -> Result<()> {
    check_length(layout, out)?;
    let mut dec = rans::Decoder::new(bytes, tables)?;
    walk(layout, &mut Tabled(&mut dec), |_| 0, into(out, zero, alphabet))?;
    dec.finish()
}

crate::cpu::fast_fn!(
    /// `decode_tabled` of two plain streams (`Layout::plain`) at once, in lockstep: each symbol's
    /// context waits for the symbol before it, so one stream leaves the core idle most of the time,
    /// and a second, independent one fills it. The same symbols as decoding each alone.
    pub fn decode_tabled_pair(streams: [(&[u8], &mut [u16]); 2], zero: u16, alphabet: usize, tables: &rans::Tables) -> Result<()> => decode_tabled_pair_in
);

#[inline(always)]
fn decode_tabled_pair_in(streams: [(&[u8], &mut [u16]); 2], zero: u16, alphabet: usize, tables: &rans::Tables) -> Result<()> {
    let [(a_bytes, a_out), (b_bytes, b_out)] = streams;
    let (na, nb) = (a_out.len(), b_out.len());
    let mut a = (rans::Decoder::new(a_bytes, tables)?, State::new(), into(a_out, zero, alphabet));
    let mut b = (rans::Decoder::new(b_bytes, tables)?, State::new(), into(b_out, zero, alphabet));
    // Two symbols of each at a time, each stream's states in fields of their own.
    for _ in 0..na.min(nb) / 2 {
        a.0.refill()?;
        b.0.refill()?;
        let (ra, rb) = (a.1.run_residual::<0>(&mut a.0)?, b.1.run_residual::<0>(&mut b.0)?);
        (a.2)(ra)?;
        (b.2)(rb)?;
        let (ra, rb) = (a.1.run_residual::<1>(&mut a.0)?, b.1.run_residual::<1>(&mut b.0)?);
        (a.2)(ra)?;
        (b.2)(rb)?;
    }
    // Without neighbours in space, the window counts twice (as `walk` codes a run).
    for _ in 0..na.min(nb) % 2 {
        let ra = a.1.code(&mut Tabled(&mut a.0), a.1.w.sum, 0)?;
        let rb = b.1.code(&mut Tabled(&mut b.0), b.1.w.sum, 0)?;
        (a.2)(ra)?;
        (b.2)(rb)?;
    }
    let (longer, n) = if na > nb { (&mut a, na - nb) } else { (&mut b, nb - na) };
    for _ in 0..n {
        let r = longer.1.code(&mut Tabled(&mut longer.0), longer.1.w.sum, 0)?;
        (longer.2)(r)?;
    }
    a.0.finish()?;
    b.0.finish()
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
        decode(bytes, zero, 2 * zero as usize, &Start::default(), &Layout::plain(n), &mut out).map(|_| out)
    }

    #[test]
    fn regional_symbols_round_trip_near_their_conditional_entropy() {
        let zero = 32768u16;
        let symbols = regional(40_000, zero, 7);
        let bytes = encode(&symbols, zero, &Start::default(), &Layout::plain(symbols.len()));
        assert_eq!(decoded(&bytes, zero, symbols.len()).unwrap(), symbols);
        // Half the symbols uniform over 3 values (1.58 bits), half over 601 (9.23 bits).
        let ideal = 20_000.0 * (3f64.log2() + 601f64.log2()) / 8.0;
        assert!((bytes.len() as f64) < ideal * 1.05, "{} bytes, ideal {ideal:.0}", bytes.len());
    }

    /// The neighbours of a cell of 20 x 20 blocks: left, above and above-left, `NONE` (the cell
    /// count) past the faces.
    fn grid_cells(shift: bool) -> Vec<[u32; NEIGHBOURS]> {
        let none = 400u32;
        (0..400u32)
            .map(|k| {
                let (y, x) = (k / 20, k % 20);
                let mut n = [none; NEIGHBOURS];
                if x > 0 {
                    n[0] = if shift { (k - 1) / 2 } else { k - 1 };
                }
                if y > 0 {
                    n[1] = k - 20;
                }
                if x > 0 && y > 0 {
                    n[2] = k - 21;
                }
                n
            })
            .collect()
    }

    #[test]
    fn spatial_neighbours_round_trip_and_must_match() {
        let zero = 32768u16;
        let cells = grid_cells(false);
        // Full and partial blocks, and a run of symbols without neighbours between them.
        let mask: Vec<bool> = (0..400).map(|k| k % 7 != 3).collect();
        let parts = || vec![Part::Block(None), Part::Block(Some(&mask[..])), Part::Run(37), Part::Block(None)];
        let layout = Layout::blocks(&cells, 3, parts());
        let symbols = regional(layout.symbols(), zero, 11);
        assert_eq!(symbols.len(), 400 + mask.iter().filter(|&&m| m).count() + 37 + 400);
        let start = Start::from_counts(&Start::count([(&symbols[..], &layout)], zero));
        let bytes = encode(&symbols, zero, &start, &layout);
        let mut out = vec![0u16; symbols.len()];
        decode(&bytes, zero, 65536, &start, &layout, &mut out).unwrap();
        assert_eq!(out, symbols);
        let tables = {
            let mut counts = rans::Counts::new(CONTEXTS);
            model(&symbols, zero, &layout).count(&mut counts);
            counts.tables()
        };
        let mut coded = Vec::new();
        model(&symbols, zero, &layout).finish(&tables, &mut coded).unwrap();
        decode_tabled(&coded, zero, 65536, &tables, &layout, &mut out).unwrap();
        assert_eq!(out, symbols);
        // Other neighbours give other contexts: the symbols do not come back.
        let shifted = grid_cells(true);
        let other = Layout::blocks(&shifted, 3, parts());
        assert!(decode(&bytes, zero, 65536, &start, &other, &mut out).is_err() || out != symbols);
        // A layout of another length is refused before decoding.
        assert!(decode(&bytes, zero, 65536, &start, &layout, &mut out[1..]).is_err());
    }

    /// `model` and the symbol-by-symbol walk that decoders follow give the same stream.
    fn models_as_walked(symbols: &[u16], zero: u16, layout: &Layout) {
        let mut walked = rans::Encoder::with_capacity(symbols.len());
        walk(layout, &mut Tabled(&mut walked), |i| symbols[i] as i32 - zero as i32, |_| Ok(())).unwrap();
        let batched = model(symbols, zero, layout);
        let mut counts = rans::Counts::new(CONTEXTS);
        walked.count(&mut counts);
        let tables = counts.tables();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        batched.finish(&tables, &mut a).unwrap();
        walked.finish(&tables, &mut b).unwrap();
        assert_eq!(a, b, "{} symbols", symbols.len());
        assert_eq!(batched.residuals(), walked.residuals());
    }

    #[test]
    fn batched_models_match_the_walk() {
        let zero = 32768u16;
        // Quiet and busy regions, residuals past the cap, and lengths around the batch size.
        let mut symbols = regional(9_000, zero, 5);
        symbols.extend([0u16, 65535, zero, 1, 65534, zero + 4095, zero - 4096, zero + 4096]);
        for n in [0, 1, 7, BATCH - 1, BATCH, BATCH + 1, 4100, symbols.len()] {
            models_as_walked(&symbols[..n], zero, &Layout::plain(n));
        }
        // Blocks full and partly stored, in 1 to 3 neighbours, between runs.
        let cells = grid_cells(false);
        let mask: Vec<bool> = (0..400).map(|k| k % 7 != 3 && k % 11 != 5).collect();
        for count in [1, 3] {
            let layout = Layout::blocks(
                &cells,
                count,
                vec![Part::Run(5), Part::Block(None), Part::Block(Some(&mask[..])), Part::Run(BATCH + 37), Part::Block(Some(&mask[..]))],
            );
            models_as_walked(&symbols[..layout.symbols()], zero, &layout);
        }
    }

    #[test]
    fn extreme_symbols_round_trip() {
        let zero = 32768u16;
        let symbols: Vec<u16> = [0u16, 65535, zero, zero + 1, zero - 1, 1, 65534].iter().cycle().take(1000).copied().collect();
        assert_eq!(
            decoded(&encode(&symbols, zero, &Start::default(), &Layout::plain(symbols.len())), zero, symbols.len()).unwrap(),
            symbols
        );
        assert_eq!(decoded(&encode(&[], zero, &Start::default(), &Layout::plain(0)), zero, 0).unwrap(), Vec::<u16>::new());
    }

    #[test]
    fn damaged_streams_are_refused_or_decode_within_the_alphabet() {
        let zero = 32768u16;
        let symbols = regional(5000, zero, 3);
        let bytes = encode(&symbols, zero, &Start::default(), &Layout::plain(symbols.len()));
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
            if decode(&bad, zero, 40000, &Start::default(), &Layout::plain(symbols.len()), &mut out).is_ok() {
                assert!(out.iter().all(|&s| s < 40000));
            }
        }
    }
}
