//! C API fuzz target: `amrzip_info` and `amrzip_decompress`, called as a C program calls them, on
//! any input return AMRZIP_OK or an error code with a message: never crash, never an internal
//! error, and never decode what `amrzip_info` rejected. Each input is tried as given and with
//! both checksums recomputed (see `checksums`).
#![no_main]

mod checksums;

use amrzip::codec::{amrzip_decompress, amrzip_info, AMRZIP_MAX_NDIM};
use amrzip::error::{amrzip_last_error, AMRZIP_ERR_CORRUPT, AMRZIP_ERR_INVALID, AMRZIP_OK};
use libfuzzer_sys::fuzz_target;
use std::ffi::{c_int, CStr};
use std::ptr;

/// Largest output buffer the target allocates; bigger arrays are only described.
const MAX_OUT: usize = 1 << 26;

fn assert_failed(status: c_int, codes: &[c_int]) {
    assert!(codes.contains(&status), "status {status}");
    // SAFETY: amrzip_last_error always returns a valid NUL-terminated string.
    assert!(!unsafe { CStr::from_ptr(amrzip_last_error()) }.is_empty());
}

fn call(s: &[u8]) {
    let (mut ndim, mut shape, mut out_bytes) = (0 as c_int, [0usize; AMRZIP_MAX_NDIM as usize], 0usize);
    // SAFETY: `s` is `s.len()` bytes; the outputs are valid and `shape` has AMRZIP_MAX_NDIM slots.
    let status = unsafe { amrzip_info(s.as_ptr(), s.len(), ptr::null_mut(), &mut ndim, shape.as_mut_ptr(), &mut out_bytes) };
    if status != AMRZIP_OK {
        assert_failed(status, &[AMRZIP_ERR_CORRUPT]);
        let mut out = [0u8; 64];
        // SAFETY: as above, and `out` is 64 writable bytes.
        let status = unsafe { amrzip_decompress(s.as_ptr(), s.len(), out.as_mut_ptr().cast(), out.len()) };
        assert_failed(status, &[AMRZIP_ERR_CORRUPT]);
        return;
    }
    let elements = shape[..ndim as usize].iter().product::<usize>();
    assert!(out_bytes == elements * 4 || out_bytes == elements * 8);
    assert!(shape[ndim as usize..].iter().all(|&n| n == 0));
    if out_bytes > MAX_OUT {
        return;
    }
    let mut out = vec![0u8; out_bytes + 1];
    // SAFETY: `out` has room for `out_bytes` + 1 bytes.
    let status = unsafe { amrzip_decompress(s.as_ptr(), s.len(), out.as_mut_ptr().cast(), out_bytes + 1) };
    assert_failed(status, &[AMRZIP_ERR_INVALID]);
    // SAFETY: as above.
    let status = unsafe { amrzip_decompress(s.as_ptr(), s.len(), out.as_mut_ptr().cast(), out_bytes) };
    if status != AMRZIP_OK {
        assert_failed(status, &[AMRZIP_ERR_CORRUPT]);
    }
}

fuzz_target!(|data: &[u8]| {
    call(data);
    if let Some(fixed) = checksums::with_checksums_fixed(data) {
        call(&fixed);
    }
});
