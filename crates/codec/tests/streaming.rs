//! Chunked streams: every decoded value within the bound whatever the codebook policy and the
//! drift of the data, and a decoder that refuses damaged or out-of-order records cleanly.

use amrzip_codec::{info, CodebookSource, CodecError, Config, ErrorBound, Policy, Preset, StreamDecoder, StreamEncoder, Thresholds};
use proptest::prelude::*;

/// A deterministic field whose character is set per chunk: smooth, noisy, or constant.
fn chunk(kind: u8, rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    (0..rows * cols)
        .map(|i| {
            let (r, c) = ((i / cols) as f64, (i % cols) as f64);
            match kind % 3 {
                0 => ((r * 0.05).sin() * (c * 0.07).cos() * 10.0 + seed as f64 * 0.1) as f32,
                1 => (noise() * 100.0) as f32,
                _ => 3.5,
            }
        })
        .collect()
}

fn policies() -> impl Strategy<Value = Policy> {
    prop_oneof![
        (0.0f64..0.5, 0.5f64..1.2).prop_map(|(keep, rebuild)| Policy::Adaptive(Thresholds { keep, rebuild })),
        Just(Policy::Rebuild),
        (1u64..5000).prop_map(Policy::Interval),
    ]
}

fn encoder(bound: ErrorBound, policy: Policy, preset: Preset) -> StreamEncoder {
    StreamEncoder::new(Config { bound, preset, threads: Some(1), predictor: None }, policy).expect("valid settings")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_chunk_stays_within_the_bound(
        kinds in prop::collection::vec(0u8..3, 1..8),
        rows in 1usize..24,
        cols in 1usize..40,
        eb_log10 in -4.0f64..0.0,
        policy in policies(),
        speed in any::<bool>(),
    ) {
        let eb = 10f64.powf(eb_log10);
        let preset = if speed { Preset::Speed } else { Preset::Ratio };
        let mut enc = encoder(ErrorBound::Absolute(eb), policy, preset);
        let mut dec = StreamDecoder::new(Some(1));
        for (k, &kind) in kinds.iter().enumerate() {
            let data = chunk(kind, rows, cols, k as u64);
            let record = enc.encode(&data, &[rows, cols]).expect("encodes");
            let (out, shape) = dec.decode::<f32>(&record).expect("decodes in order");
            prop_assert_eq!(shape, vec![rows, cols]);
            for (x, y) in data.iter().zip(&out) {
                prop_assert!(((*x as f64) - (*y as f64)).abs() <= eb, "{} decoded as {} (bound {})", x, y, eb);
            }
        }
        let s = enc.stats();
        prop_assert_eq!(s.records, kinds.len() as u64);
        prop_assert_eq!(s.kept + s.rebuilt + s.offline, s.records);
    }

    #[test]
    fn ratio_streams_keep_each_recorded_bound(kinds in prop::collection::vec(0u8..3, 1..6), ratio in 2.0f64..50.0) {
        let mut enc = encoder(ErrorBound::Ratio(ratio), Policy::Adaptive(amrzip_codec::DEFAULT_THRESHOLDS), Preset::Ratio);
        let mut dec = StreamDecoder::new(None);
        for (k, &kind) in kinds.iter().enumerate() {
            let data = chunk(kind, 16, 32, k as u64);
            let record = enc.encode(&data, &[16, 32]).expect("encodes");
            let eb = info(&record).expect("valid header").abs_bound;
            let (out, _) = dec.decode::<f32>(&record).expect("decodes");
            for (x, y) in data.iter().zip(&out) {
                prop_assert!(((*x as f64) - (*y as f64)).abs() <= eb);
            }
        }
    }
}

/// Records of a three-chunk stream in which later records reuse the first one's codebook.
fn reusing_stream() -> Vec<Vec<u8>> {
    let mut enc = encoder(ErrorBound::Absolute(1e-2), Policy::Adaptive(Thresholds { keep: 1.0, rebuild: 1.0 }), Preset::Ratio);
    let records: Vec<Vec<u8>> = (0..3).map(|k| enc.encode(&chunk(0, 32, 32, k), &[32, 32]).unwrap()).collect();
    assert_eq!(enc.stats().kept, 2, "the test needs records that reuse a codebook");
    records
}

#[test]
fn a_reusing_record_needs_its_predecessor() {
    let records = reusing_stream();
    assert_eq!(info(&records[1]).unwrap().codebook_source, CodebookSource::Previous);
    let err = amrzip_codec::decompress::<f32>(&records[1], None).unwrap_err();
    assert!(matches!(&err, CodecError::Corrupt(m) if m.contains("record before it")), "{err}");
    let mut fresh = StreamDecoder::new(None);
    assert!(fresh.decode::<f32>(&records[1]).is_err());
}

#[test]
fn damaged_records_are_refused_without_panicking() {
    let records = reusing_stream();
    for (r, record) in records.iter().enumerate() {
        for i in 0..record.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = record.clone();
                bad[i] ^= flip;
                let mut dec = StreamDecoder::new(Some(1));
                for earlier in &records[..r] {
                    dec.decode::<f32>(earlier).unwrap();
                }
                // Checksums cover every byte, so every flip must be caught.
                assert!(dec.decode::<f32>(&bad).is_err(), "record {r}: flip {flip:#x} at byte {i} accepted");
            }
        }
        for cut in 0..record.len() {
            let mut dec = StreamDecoder::new(Some(1));
            for earlier in &records[..r] {
                dec.decode::<f32>(earlier).unwrap();
            }
            assert!(dec.decode::<f32>(&record[..cut]).is_err(), "record {r} truncated to {cut} accepted");
        }
    }
}

#[test]
fn relative_bounds_and_bad_settings_are_refused() {
    let cfg = |bound| Config { bound, preset: Preset::Ratio, threads: None, predictor: None };
    for bound in [ErrorBound::Relative(1e-3), ErrorBound::Absolute(-1.0), ErrorBound::Ratio(0.5), ErrorBound::Psnr(f64::NAN)] {
        assert!(matches!(StreamEncoder::new(cfg(bound), Policy::Rebuild), Err(CodecError::InvalidInput(_))), "{bound:?}");
    }
    let bad = Policy::Adaptive(Thresholds { keep: 0.5, rebuild: 0.1 });
    assert!(StreamEncoder::new(cfg(ErrorBound::Absolute(1.0)), bad).is_err());
}

#[test]
fn a_change_of_character_starts_over() {
    let mut enc = encoder(ErrorBound::Absolute(1e-3), Policy::Adaptive(amrzip_codec::DEFAULT_THRESHOLDS), Preset::Ratio);
    for (k, kind) in [0u8, 0, 1, 1, 0].into_iter().enumerate() {
        enc.encode(&chunk(kind, 32, 64, k as u64), &[32, 64]).unwrap();
    }
    assert!(enc.stats().reselected >= 1, "{:?}", enc.stats());
}
