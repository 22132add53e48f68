//! Decoder fuzz target: `info` and `decompress` must return, never panic or abort, on any input.
//! Each input is decoded as given and again with both checksums recomputed, so that mutations
//! reach the parsers behind the CRC32 checks.
#![no_main]

mod checksums;

use amrzip_codec::{decompress, info};
use libfuzzer_sys::fuzz_target;

fn decode(s: &[u8]) {
    let meta = info(s);
    for result in
        [decompress::<f32>(s, Some(1)).map(|(v, shape)| (v.len(), shape)), decompress::<f64>(s, Some(1)).map(|(v, shape)| (v.len(), shape))]
    {
        if let Ok((len, shape)) = result {
            assert_eq!(Some(len), shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n)));
            assert_eq!(meta.as_ref().map(|m| &m.shape), Ok(&shape));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    decode(data);
    if let Some(fixed) = checksums::with_checksums_fixed(data) {
        decode(&fixed);
    }
});
