//! The context-modelled entropy stage of a plain stream in ratio mode (format.md 5.6): the
//! symbols of each segment coded in the contexts of `residuals` (the window of residuals just
//! before), by one of two coders chosen per stream for the fewer bytes:
//!
//! - `Adaptive`: binary decisions whose probabilities start at one half and adapt. Nothing is
//!   stored beside the symbols, which is what small arrays need (a Huffman table or context
//!   tables can outweigh their symbols).
//! - `Tabled`: one static table per context learnt from the whole array and stored once in the
//!   header; decodes a token per step, for arrays large enough to pay for the tables.
//!
//! Against Huffman codes plus zstd, both follow regions of large and small residuals (a
//! lognormal field's dense parts, say) instead of paying one code for the mixture.

use super::rans::{self, Tables};
use super::residuals::{self, Layout, Start};
use crate::bytes::ByteReader;
use crate::error::{corrupt, Result};
use std::ops::Range;

/// Arrays of at most this many symbols are also tried with the adaptive coder: beyond, its
/// one-decision-at-a-time coding costs more time than the bytes it saves are worth.
const ADAPTIVE_TRIAL_SYMBOLS: usize = 1 << 18;
/// Arrays of at most this many symbols go to the adaptive coder without a trial of the tables,
/// which cannot pay for themselves there (none did on the real AMR arrays of 2^14 values or
/// fewer) and whose learning took a fifth of the time a small array takes to compress.
const ADAPTIVE_ONLY_SYMBOLS: usize = 1 << 14;
/// The fewest bytes a coded segment takes (the range coder's flush; a rANS stream's states and
/// length): a shorter one is refused before it is decoded.
pub const MIN_SEGMENT_BYTES: usize = 5;

#[derive(Clone, Debug, PartialEq)]
pub enum ContextCoder {
    Adaptive,
    Tabled(Tables),
}

impl ContextCoder {
    /// The coder for `segments` (each coded on its own, residual 0 at symbol `zero`) and the
    /// coded segments: the tables learnt from all of them, or for few symbols the adaptive
    /// coder where it comes out smaller (the sizes compared include the tables), or for very few
    /// the adaptive coder outright.
    pub fn choose(segments: &[&[u16]], zero: u16) -> (ContextCoder, Vec<Vec<u8>>) {
        use rayon::prelude::*;
        let n: usize = segments.iter().map(|s| s.len()).sum();
        let adaptive = || -> Vec<Vec<u8>> {
            segments.par_iter().map(|s| residuals::encode(s, zero, &Start::default(), &Layout::plain(s.len()))).collect()
        };
        if n <= ADAPTIVE_ONLY_SYMBOLS {
            return (ContextCoder::Adaptive, adaptive());
        }
        let (tabled, coded) = ContextCoder::tabled(segments, zero);
        if n > ADAPTIVE_TRIAL_SYMBOLS {
            return (tabled, coded);
        }
        let adaptive = adaptive();
        let size = |coder: &ContextCoder, coded: &[Vec<u8>]| coder.stored().len() + coded.iter().map(Vec::len).sum::<usize>();
        if size(&ContextCoder::Adaptive, &adaptive) <= size(&tabled, &coded) {
            (ContextCoder::Adaptive, adaptive)
        } else {
            (tabled, coded)
        }
    }

    /// The tabled coder for `segments`, learnt from all of them, and the coded segments: for
    /// callers that decode few symbols at a time and cannot afford the adaptive coder's decisions
    /// one by one (a multiresolution read's coarse levels).
    pub fn tabled(segments: &[&[u16]], zero: u16) -> (ContextCoder, Vec<Vec<u8>>) {
        use rayon::prelude::*;
        let models: Vec<rans::Encoder> = segments.par_iter().map(|s| residuals::model(s, zero, &Layout::plain(s.len()))).collect();
        let mut counts = rans::Counts::new(residuals::CONTEXTS);
        for m in &models {
            m.count(&mut counts);
        }
        let tables = counts.tables();
        let coded: Vec<Vec<u8>> = models
            .par_iter()
            .map(|m| {
                let mut out = Vec::new();
                m.finish(&tables, &mut out).expect("tables learnt from these very symbols");
                out
            })
            .collect();
        (ContextCoder::Tabled(tables), coded)
    }

    /// The bytes the tabled coder would take for a stream that `sample` stands for: blocks of its
    /// segments (residual 0 at `zero`), each a range of a segment's symbols standing for `weight`
    /// (>= 1) such blocks. Each block is modelled from a window before it, as the stream codes it.
    /// The tables learnt from the weighted counts as stored, and the tokens' ideal code lengths
    /// under them with their extra bits; nothing is coded.
    pub fn estimate(sample: &[(&[u16], Range<usize>, f64)], zero: u16) -> f64 {
        use rayon::prelude::*;
        let models: Vec<(rans::Encoder, usize)> = sample
            .par_iter()
            .map(|(segment, block, _)| {
                let from = block.start.saturating_sub(residuals::WINDOW);
                (residuals::model(&segment[from..block.end], zero, &Layout::plain(block.end - from)), block.start - from)
            })
            .collect();
        let mut counts = rans::Counts::new(residuals::CONTEXTS);
        for ((model, skip), &(_, _, weight)) in models.iter().zip(sample) {
            model.count_weighted(&mut counts, *skip, weight);
        }
        let tables = counts.tables();
        let bits = counts.coded_bits(&tables);
        ContextCoder::Tabled(tables).stored().len() as f64 + bits / 8.0
    }

    /// What the header keeps: `coder u8 (0 adaptive, 1 tabled) | the tables (tabled)`.
    pub fn stored(&self) -> Vec<u8> {
        match self {
            ContextCoder::Adaptive => vec![0],
            ContextCoder::Tabled(tables) => {
                let mut out = vec![1];
                tables.write(&mut out);
                out
            }
        }
    }

    pub fn read(bytes: &[u8]) -> Result<ContextCoder> {
        let mut r = ByteReader::new(bytes);
        let coder = match r.u8("context coder")? {
            0 => ContextCoder::Adaptive,
            1 => {
                let tables = Tables::read(&mut r)?;
                if tables.contexts() != residuals::CONTEXTS {
                    return Err(corrupt!("{} context tables, the model has {}", tables.contexts(), residuals::CONTEXTS));
                }
                ContextCoder::Tabled(tables)
            }
            c => return Err(corrupt!("unknown context coder {c}")),
        };
        if r.remaining() != 0 {
            return Err(corrupt!("{} unexpected bytes after the context coder", r.remaining()));
        }
        Ok(coder)
    }

    /// Decodes one segment into `out`, every symbol below `alphabet`.
    pub fn decode(&self, bytes: &[u8], zero: u16, alphabet: usize, out: &mut [u16]) -> Result<()> {
        match self {
            ContextCoder::Adaptive => residuals::decode(bytes, zero, alphabet, &Start::default(), &Layout::plain(out.len()), out),
            ContextCoder::Tabled(tables) => residuals::decode_tabled(bytes, zero, alphabet, tables, &Layout::plain(out.len()), out),
        }
    }

    /// How many of `segments` to give each parallel task: two, for `decode_pair`, where that
    /// still leaves every thread several, else one.
    pub fn pair_width(segments: usize) -> usize {
        if segments >= 4 * rayon::current_num_threads() {
            2
        } else {
            1
        }
    }

    /// Decodes two segments, as `decode` each: the tabled coder's at once, one's symbols
    /// between the other's (see `residuals::decode_tabled_pair`).
    pub fn decode_pair(&self, segments: [(&[u8], &mut [u16]); 2], zero: u16, alphabet: usize) -> Result<()> {
        match self {
            ContextCoder::Tabled(tables) => residuals::decode_tabled_pair(segments, zero, alphabet, tables),
            ContextCoder::Adaptive => segments.into_iter().try_for_each(|(bytes, out)| self.decode(bytes, zero, alphabet, out)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(segments: &[Vec<u16>], zero: u16) -> ContextCoder {
        let views: Vec<&[u16]> = segments.iter().map(|s| &s[..]).collect();
        let (coder, coded) = ContextCoder::choose(&views, zero);
        let coder = ContextCoder::read(&coder.stored()).unwrap();
        for (s, bytes) in segments.iter().zip(&coded) {
            let mut out = vec![0u16; s.len()];
            coder.decode(bytes, zero, 2 * zero as usize, &mut out).unwrap();
            assert_eq!(&out, s);
        }
        coder
    }

    fn noisy(n: usize, spread: u64, zero: u16, seed: u64) -> Vec<u16> {
        let mut next = crate::test_rng::xorshift(seed);
        (0..n).map(|_| (zero as i64 + (next() % (2 * spread + 1)) as i64 - spread as i64) as u16).collect()
    }

    #[test]
    fn few_symbols_go_adaptive_and_many_go_tabled() {
        let zero = 32768;
        assert_eq!(round_trip(&[noisy(500, 3, zero, 1)], zero), ContextCoder::Adaptive);
        let big: Vec<Vec<u16>> = (0..3).map(|k| noisy(200_000, 40, zero, k)).collect();
        assert!(matches!(round_trip(&big, zero), ContextCoder::Tabled(_)));
    }

    #[test]
    fn estimates_come_near_the_coded_size() {
        let zero = 32768;
        let segments: Vec<Vec<u16>> = (0..3).map(|k| noisy(300_000, [2, 40, 900][k as usize], zero, k)).collect();
        let views: Vec<&[u16]> = segments.iter().map(|s| &s[..]).collect();
        let (coder, coded) = ContextCoder::choose(&views, zero);
        let size = (coder.stored().len() + coded.iter().map(Vec::len).sum::<usize>()) as f64;
        // Every symbol, then every other block standing for two.
        let whole: Vec<(&[u16], Range<usize>, f64)> = views.iter().map(|&s| (s, 0..s.len(), 1.0)).collect();
        let halves: Vec<(&[u16], Range<usize>, f64)> =
            views.iter().flat_map(|&s| (0..s.len()).step_by(2000).map(move |i| (s, i..s.len().min(i + 1000), 2.0))).collect();
        for (sample, within) in [(whole, 0.001), (halves, 0.01)] {
            let estimate = ContextCoder::estimate(&sample, zero);
            assert!((estimate / size - 1.0).abs() < within, "estimate {estimate:.0}, coded {size}");
        }
    }

    #[test]
    fn pairs_decode_as_each_alone() {
        let zero = 32768;
        // Unequal lengths either way round, an odd one, quiet and busy, and an empty segment.
        let segments: Vec<Vec<u16>> =
            [(70_000, 2), (50_001, 300), (0, 1), (90_000, 40)].iter().map(|&(n, s)| noisy(n, s, zero, n as u64)).collect();
        let views: Vec<&[u16]> = segments.iter().map(|s| &s[..]).collect();
        let (coder, coded) = ContextCoder::tabled(&views, zero);
        for (i, j) in [(0, 1), (1, 0), (2, 3), (3, 2), (1, 3)] {
            let (mut a, mut b) = (vec![0u16; segments[i].len()], vec![0u16; segments[j].len()]);
            coder.decode_pair([(&coded[i], &mut a), (&coded[j], &mut b)], zero, 2 * zero as usize).unwrap();
            assert_eq!((&a, &b), (&segments[i], &segments[j]));
            // A stream cut short fails the pair, whichever of the two it is.
            let cut = &coded[j][..coded[j].len() - 1];
            assert!(coder.decode_pair([(&coded[i], &mut a), (cut, &mut b)], zero, 2 * zero as usize).is_err());
        }
    }

    #[test]
    fn damaged_coders_are_refused() {
        assert!(ContextCoder::read(&[]).is_err());
        assert!(ContextCoder::read(&[2]).is_err());
        assert!(ContextCoder::read(&[0, 0]).is_err());
        let (coder, _) = ContextCoder::choose(&[&noisy(400_000, 9, 32768, 5)], 32768);
        let stored = coder.stored();
        assert!(ContextCoder::read(&stored[..stored.len() - 1]).is_err());
    }
}
