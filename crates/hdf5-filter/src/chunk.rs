//! One HDF5 chunk to and from its stored form: an amrzip stream of the chunk's valid part.
//!
//! The valid part is the chunk's first `valid` slabs along its slowest dimension. Decoding reads
//! `valid` back from the stream's own shape, so readers never need the writer's setting, and
//! fills the rest of the chunk with +0.0 (all-zero bytes in either byte order).

use crate::params::Params;
use amrzip_codec::{self as codec, Config, DType, Element, ErrorBound, Policy, StreamEncoder};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The codec takes at most 4 dimensions; deeper chunks have their slowest dimensions merged,
/// which keeps C order, and so slabs of the first dimension, intact.
pub fn codec_shape(dims: &[usize]) -> Vec<usize> {
    let merge = dims.len().saturating_sub(4);
    let mut shape = vec![dims[..=merge].iter().product()];
    shape.extend_from_slice(&dims[merge + 1..]);
    shape
}

/// Elements in one slab along the slowest dimension of the chunk.
fn slab_len(dims: &[usize]) -> usize {
    dims[1..].iter().product()
}

fn read_values<T: Element>(bytes: &[u8], big_endian: bool) -> Vec<T> {
    bytes
        .chunks_exact(T::BYTES)
        .map(|b| {
            if big_endian {
                let mut le = [0u8; 8];
                le[..T::BYTES].copy_from_slice(b);
                le[..T::BYTES].reverse();
                T::read_le(&le)
            } else {
                T::read_le(b)
            }
        })
        .collect()
}

fn write_values<T: Element>(values: &[T], big_endian: bool, out: &mut [u8]) {
    let mut le = Vec::with_capacity(T::BYTES);
    for (v, dst) in values.iter().zip(out.chunks_exact_mut(T::BYTES)) {
        le.clear();
        v.write_le(&mut le);
        dst.copy_from_slice(&le);
        if big_endian {
            dst.reverse();
        }
    }
}

/// Slabs holding data: the explicit `valid` if set, else up to the last slab with a value whose
/// bits are not all zero. Dropping all-zero trailing slabs is exact, since decoding restores
/// them as +0.0, so the automatic mode loses nothing even when those zeros are real data.
fn valid_slabs<T: Element>(values: &[T], p: &Params) -> usize {
    if p.user.valid > 0 {
        return p.user.valid as usize;
    }
    let slab = slab_len(&p.dims);
    values.iter().rposition(|v| v.to_bits_u64() != 0).map_or(0, |last| last / slab + 1)
}

fn encode_typed<T: Element>(bytes: &[u8], p: &Params) -> Result<Vec<u8>, String> {
    let values: Vec<T> = read_values(bytes, p.big_endian);
    let valid = valid_slabs(&values, p);
    let kept = valid * slab_len(&p.dims);
    let mut shape = codec_shape(&p.dims);
    shape[0] = kept / slab_len(&shape);
    let config = Config { preset: p.user.preset, ..Config::new(p.user.bound) };
    match p.user.bound {
        ErrorBound::Absolute(bound) => with_encoder(p, bound, config, |e| e.encode(&values[..kept], &shape)),
        // Relative, ratio and PSNR bounds are per chunk: each chunk is compressed on its own.
        _ => codec::compress(&values[..kept], &shape, &config),
    }
    .map_err(|e| e.to_string())
}

/// Encoders kept between chunks, one per set of filter parameters. The chunks of one dataset
/// look alike, and choosing the predictor by sampling costs several trial compressions of a
/// small chunk, so the first chunk chooses and the next ones reuse the choice (re-checked by
/// the encoder every few million elements). A new codebook per chunk (`Policy::Rebuild`) keeps
/// every chunk an ordinary, independent stream.
type Key = (u8, bool, Vec<usize>, u64, u8, u32);
const MAX_ENCODERS: usize = 64;

fn with_encoder<R>(p: &Params, bound: f64, config: Config, f: impl FnOnce(&mut StreamEncoder) -> codec::Result<R>) -> codec::Result<R> {
    static ENCODERS: OnceLock<Mutex<HashMap<Key, StreamEncoder>>> = OnceLock::new();
    let key: Key = (p.dtype as u8, p.big_endian, p.dims.clone(), bound.to_bits(), config.preset as u8, p.user.valid);
    let mut encoders = ENCODERS.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    if !encoders.contains_key(&key) {
        if encoders.len() >= MAX_ENCODERS {
            encoders.clear();
        }
        encoders.insert(key.clone(), StreamEncoder::new(config, Policy::Rebuild)?.standalone());
    }
    f(encoders.get_mut(&key).expect("inserted above"))
}

/// Compresses a chunk as HDF5 hands it to the filter (the dataset's file type, so big-endian
/// data arrives big-endian).
pub fn encode(bytes: &[u8], p: &Params) -> Result<Vec<u8>, String> {
    let expected = chunk_bytes(p);
    if bytes.len() != expected {
        return Err(format!("got {} bytes for a chunk of {expected}", bytes.len()));
    }
    match p.dtype {
        DType::F32 => encode_typed::<f32>(bytes, p),
        DType::F64 => encode_typed::<f64>(bytes, p),
    }
}

/// Size of the decoded chunk, which HDF5 expects back whatever the valid part was.
pub fn chunk_bytes(p: &Params) -> usize {
    p.dims.iter().product::<usize>() * p.dtype.size()
}

fn decode_typed<T: Element>(stream: &[u8], p: &Params, out: &mut [u8]) -> Result<(), String> {
    let (values, _) = codec::decompress::<T>(stream, None).map_err(|e| e.to_string())?;
    let n = values.len() * T::BYTES;
    write_values(&values, p.big_endian, &mut out[..n]);
    out[n..].fill(0);
    Ok(())
}

/// Decompresses a stored chunk into `out` (exactly [`chunk_bytes`] long). The stream's header is
/// checked against the chunk before any payload is decoded.
pub fn decode(stream: &[u8], p: &Params, out: &mut [u8]) -> Result<(), String> {
    assert_eq!(out.len(), chunk_bytes(p), "output buffer size");
    let info = codec::info(stream).map_err(|e| e.to_string())?;
    if info.dtype != p.dtype {
        return Err(format!("chunk holds {} but the dataset is {}", info.dtype.name(), p.dtype.name()));
    }
    let full = codec_shape(&p.dims);
    let slab = slab_len(&p.dims);
    let fits = info.shape.len() == full.len()
        && info.shape[1..] == full[1..]
        && info.shape[0] <= full[0]
        && (info.shape[0] * slab_len(&full)).is_multiple_of(slab);
    if !fits {
        return Err(format!("chunk holds shape {:?}, which does not fit the chunk {:?}", info.shape, p.dims));
    }
    match p.dtype {
        DType::F32 => decode_typed::<f32>(stream, p, out),
        DType::F64 => decode_typed::<f64>(stream, p, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{parse, user_values, UserParams};
    use amrzip_codec::{ErrorBound, Preset};

    pub fn params(dtype: DType, big_endian: bool, dims: &[usize], bound: ErrorBound, valid: u32) -> Params {
        let user = UserParams { bound, preset: Preset::Ratio, valid };
        let mut cd = user_values(&user).to_vec();
        cd.extend([dtype as u32, u32::from(big_endian), dims.len() as u32]);
        cd.extend(dims.iter().map(|&d| d as u32));
        parse(&cd).unwrap()
    }

    fn to_bytes(v: &[f64], dtype: DType, big_endian: bool) -> Vec<u8> {
        let mut out = vec![0u8; v.len() * dtype.size()];
        match dtype {
            DType::F32 => write_values(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), big_endian, &mut out),
            DType::F64 => write_values(v, big_endian, &mut out),
        }
        out
    }

    fn from_bytes(b: &[u8], dtype: DType, big_endian: bool) -> Vec<f64> {
        match dtype {
            DType::F32 => read_values::<f32>(b, big_endian).into_iter().map(f64::from).collect(),
            DType::F64 => read_values::<f64>(b, big_endian),
        }
    }

    fn field(n: usize) -> Vec<f64> {
        (0..n).map(|i| (i as f64 * 0.01).sin() * 10.0 + 20.0).collect()
    }

    fn round_trip(p: &Params, values: &[f64]) -> (Vec<f64>, Vec<u8>) {
        let stored = encode(&to_bytes(values, p.dtype, p.big_endian), p).unwrap();
        let mut out = vec![0xAAu8; chunk_bytes(p)];
        decode(&stored, p, &mut out).unwrap();
        (from_bytes(&out, p.dtype, p.big_endian), stored)
    }

    #[test]
    fn round_trip_types_orders_ranks() {
        for dtype in [DType::F32, DType::F64] {
            for big_endian in [false, true] {
                for dims in [vec![1000], vec![30, 40], vec![6, 7, 8], vec![2, 3, 4, 5], vec![2, 2, 3, 4, 5, 3]] {
                    let p = params(dtype, big_endian, &dims, ErrorBound::Absolute(1e-2), 0);
                    let values = field(dims.iter().product());
                    let (back, stored) = round_trip(&p, &values);
                    assert_eq!(amrzip_codec::info(&stored).unwrap().shape, codec_shape(&dims));
                    for (a, b) in values.iter().zip(&back) {
                        assert!((a - b).abs() <= 1e-2 * 1.0001, "{dtype:?} {big_endian} {dims:?}: {a} vs {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn trailing_zero_slabs_are_dropped_and_restored_exactly() {
        let dims = [10, 50];
        let p = params(DType::F32, false, &dims, ErrorBound::Absolute(1e-3), 0);
        let mut values = field(500);
        values[7 * 50..].fill(0.0);
        values[7 * 50 - 1] = 0.0; // a zero inside the last valid slab stays part of it
        let (back, stored) = round_trip(&p, &values);
        assert_eq!(amrzip_codec::info(&stored).unwrap().shape, vec![7, 50]);
        assert!(back[7 * 50..].iter().all(|v| v.to_bits() == 0));
        // Only the valid part is stored: padding costs nothing (the chunk's encoder may have
        // kept a predictor choice from earlier chunks, so the bytes need not equal `compress`).
        let alone = amrzip_codec::compress(
            &values[..350].iter().map(|&x| x as f32).collect::<Vec<_>>(),
            &[7, 50],
            &Config::new(ErrorBound::Absolute(1e-3)),
        )
        .unwrap();
        assert!(stored.len() <= alone.len() + alone.len() / 10 + 64, "{} bytes against {}", stored.len(), alone.len());
        // -0.0 is not padding: it is compressed like any other value.
        let mut neg = vec![0.0; 500];
        neg[499] = -0.0;
        let (_, stored) = round_trip(&p, &neg);
        assert_eq!(amrzip_codec::info(&stored).unwrap().shape, vec![10, 50]);
        // All zeros: an empty stream.
        let (back, stored) = round_trip(&p, &vec![0.0; 500]);
        assert_eq!(amrzip_codec::info(&stored).unwrap().shape, vec![0, 50]);
        assert!(back.iter().all(|v| v.to_bits() == 0));
    }

    #[test]
    fn explicit_valid_ignores_what_follows() {
        let p = params(DType::F64, false, &[4, 25], ErrorBound::Relative(1e-4), 3);
        let mut values = field(100);
        values[75..].fill(1e30); // garbage padding must not widen the relative bound
        let (back, stored) = round_trip(&p, &values);
        assert_eq!(amrzip_codec::info(&stored).unwrap().shape, vec![3, 25]);
        let (lo, hi) = values[..75].iter().fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        for (a, b) in values[..75].iter().zip(&back) {
            assert!((a - b).abs() <= 1e-4 * (hi - lo) * 1.0001);
        }
        assert!(back[75..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn merged_dims_keep_slabs() {
        let dims = [3, 2, 2, 2, 5];
        assert_eq!(codec_shape(&dims), vec![6, 2, 2, 5]);
        let p = params(DType::F32, false, &dims, ErrorBound::Absolute(1e-3), 2);
        let (_, stored) = round_trip(&p, &field(120));
        assert_eq!(amrzip_codec::info(&stored).unwrap().shape, vec![4, 2, 2, 5]);
    }

    #[test]
    fn nonfinite_values_survive() {
        let p = params(DType::F32, true, &[64], ErrorBound::Absolute(1e-3), 0);
        let mut values = field(64);
        values[3] = f64::NAN;
        values[10] = f64::INFINITY;
        values[63] = f64::NEG_INFINITY;
        let (back, _) = round_trip(&p, &values);
        assert!(back[3].is_nan());
        assert_eq!(back[10], f64::INFINITY);
        assert_eq!(back[63], f64::NEG_INFINITY);
    }

    #[test]
    fn mismatched_or_damaged_streams_are_refused() {
        let p = params(DType::F32, false, &[10, 10], ErrorBound::Absolute(1e-3), 0);
        let stored = encode(&to_bytes(&field(100), DType::F32, false), &p).unwrap();
        let mut out = vec![0u8; chunk_bytes(&p)];
        let other_type = params(DType::F64, false, &[10, 10], ErrorBound::Absolute(1e-3), 0);
        assert!(decode(&stored, &other_type, &mut vec![0u8; chunk_bytes(&other_type)]).is_err());
        let smaller = params(DType::F32, false, &[5, 10], ErrorBound::Absolute(1e-3), 0);
        assert!(decode(&stored, &smaller, &mut vec![0u8; chunk_bytes(&smaller)]).is_err());
        let other_slab = params(DType::F32, false, &[20, 5], ErrorBound::Absolute(1e-3), 0);
        assert!(decode(&stored, &other_slab, &mut vec![0u8; chunk_bytes(&other_slab)]).is_err());
        for cut in [0, 3, stored.len() / 2, stored.len() - 1] {
            assert!(decode(&stored[..cut], &p, &mut out).is_err(), "truncated at {cut}");
        }
        for at in (0..stored.len()).step_by(7) {
            let mut bad = stored.clone();
            bad[at] ^= 0x5A;
            assert!(decode(&bad, &p, &mut out).is_err(), "flipped byte {at}");
        }
        assert!(encode(&[0u8; 12], &p).is_err(), "wrong chunk size");
    }
}
