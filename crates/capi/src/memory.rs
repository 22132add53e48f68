//! Buffers the library allocates for the caller, and `amrzip_free` to release them.

use crate::error::{Error, Result};
use std::ffi::c_void;
use std::ptr;

/// A copy of `bytes` in memory from `malloc`, so that C can release it with a bare pointer,
/// through `amrzip_free`, without the length or Rust's allocator.
pub(crate) fn to_c_buffer(bytes: &[u8]) -> Result<*mut u8> {
    // SAFETY: malloc has no preconditions; at least 1 byte so that NULL only ever means failure.
    let buffer = unsafe { libc::malloc(bytes.len().max(1)) }.cast::<u8>();
    if buffer.is_null() {
        return Err(Error::internal(format!("out of memory for a buffer of {} bytes", bytes.len())));
    }
    // SAFETY: `buffer` was just allocated with room for `bytes`.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), buffer, bytes.len()) };
    Ok(buffer)
}

/// Releases a buffer the library allocated (such as `amrzip_compress`'s output). NULL is
/// ignored. Any thread may release any buffer, once.
///
/// # Safety
/// `ptr` is NULL or a buffer the library returned and that has not been released yet.
#[no_mangle]
pub unsafe extern "C" fn amrzip_free(ptr: *mut c_void) {
    // SAFETY: per the contract, `ptr` came from `to_c_buffer`'s malloc, or is NULL.
    unsafe { libc::free(ptr) }
}
