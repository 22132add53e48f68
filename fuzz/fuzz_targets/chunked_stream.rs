//! Chunked-stream reader fuzz target (`cargo +nightly fuzz run chunked_stream`): reading,
//! decoding and describing must return, never panic or abort, on any input; and a stream that
//! reads must agree with its end block. Each input is read as given and again with its digest
//! made right, so that mutations reach the checks behind it.
#![no_main]

use amrzip_codec::DType;
use amrzip_store::chunked_stream::{Result, StreamReader};
use blake2::digest::{Update, VariableOutput};
use blake2::Blake2bVar;
use libfuzzer_sys::fuzz_target;
use std::io::{Cursor, Read};

/// Every chunk decoded: the elements they hold.
fn decode_all<R: Read>(reader: &mut StreamReader<R>) -> Result<u64> {
    let mut elements = 0;
    loop {
        let n = match reader.dtype() {
            DType::F32 => reader.next_chunk::<f32>()?.map(|(v, shape)| (v.len(), shape)),
            DType::F64 => reader.next_chunk::<f64>()?.map(|(v, shape)| (v.len(), shape)),
        };
        match n {
            Some((len, shape)) => {
                assert_eq!(Some(len), shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n)));
                elements += len as u64;
            }
            None => return Ok(elements),
        }
    }
}

fn read(s: &[u8]) {
    // The size known (refusing lengths past it before reading) or not, as from a pipe.
    if let Ok(mut reader) = StreamReader::seekable(Cursor::new(s), Some(1)) {
        let declared = reader.declared_counts();
        if let Ok(elements) = decode_all(&mut reader) {
            assert_eq!(declared.map(|(_, e)| e).ok(), Some(elements));
        }
    }
    if let Ok(mut reader) = StreamReader::new(s, None, Some(1)) {
        let _ = decode_all(&mut reader);
    }
    if let Ok(mut reader) = StreamReader::new(s, None, Some(1)) {
        if let Ok(d) = reader.describe() {
            assert_eq!(d.size, s.len() as u64);
            assert_eq!(d.records.iter().map(|r| r.size).sum::<u64>() + 8 * d.records.len() as u64 + 36, d.size);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    read(data);
    if let Some(at) = data.len().checked_sub(4) {
        let mut fixed = data.to_vec();
        let mut digest = Blake2bVar::new(4).expect("a 4-byte output");
        digest.update(&fixed[..at]);
        digest.finalize_variable(&mut fixed[at..]).expect("4 bytes");
        read(&fixed);
    }
});
