//! Ratio-mode streams of many symbol segments (2^20 symbols each): coded in context where that
//! is clearly smaller, decoded within the bound either way.

use amrzip_codec::{compress, decompress, info, CodebookSource, Config, ErrorBound};

/// Uniform draws in [-0.5, 0.5) (xorshift64).
fn noise(seed: u64) -> impl FnMut() -> f64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    }
}

/// A field whose roughness switches between quiet and busy regions (a lognormal density's voids
/// and halos, say): residual sizes that one Huffman code cannot follow.
fn regional(n: usize, seed: u64) -> Vec<f64> {
    let mut next = noise(seed);
    (0..n).map(|i| (i as f64 * 1e-4).sin() + next() * if (i / 4096) % 3 == 0 { 0.05 } else { 5e-5 }).collect()
}

/// Uniform noise of one amplitude: residuals of one size everywhere, nothing for contexts.
fn even(n: usize, seed: u64) -> Vec<f64> {
    let mut next = noise(seed);
    (0..n).map(|_| next()).collect()
}

fn round_trip(data: &[f64], rel: f64) -> CodebookSource {
    let config = Config::new(ErrorBound::Relative(rel));
    let stream = compress(data, &[data.len()], &config).unwrap();
    let (out, shape) = decompress::<f64>(&stream, None).unwrap();
    assert_eq!(shape, [data.len()]);
    let (lo, hi) = data.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let eb = rel * (hi - lo);
    let worst = data.iter().zip(&out).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= eb, "error {worst} over the bound {eb}");
    info(&stream).unwrap().codebook_source
}

#[test]
fn many_segments_take_contexts_where_regions_differ_and_huffman_where_not() {
    let n = 4 << 20;
    assert_eq!(round_trip(&regional(n, 3), 1e-5), CodebookSource::Contexts);
    assert_eq!(round_trip(&even(n, 5), 1e-3), CodebookSource::Inline);
}

#[test]
fn segments_decoded_two_at_a_time_give_the_same_values() {
    // One chunk of 4 segments: one thread decodes them in pairs, more threads one by one.
    let shape = [64, 256, 256];
    let data = regional(shape.iter().product(), 7);
    let stream = compress(&data, &shape, &Config::new(ErrorBound::Relative(1e-5))).unwrap();
    assert_eq!(info(&stream).unwrap().codebook_source, CodebookSource::Contexts);
    let (paired, _) = decompress::<f64>(&stream, Some(1)).unwrap();
    assert_eq!(decompress::<f64>(&stream, Some(8)).unwrap().0, paired);
    let (lo, hi) = data.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert!(data.iter().zip(&paired).all(|(a, b)| (a - b).abs() <= 1e-5 * (hi - lo)));
}
