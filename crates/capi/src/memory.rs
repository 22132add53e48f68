//! Buffers the library allocates for the caller, `amrzip_free` to release them, and the C
//! strings and arrays the caller passes in.

use crate::error::{Error, Result};
use std::ffi::{c_char, c_void, CStr};
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

/// The UTF-8 text of the C string `s`, named `what` in errors.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str> {
    if s.is_null() {
        return Err(Error::invalid(format!("{what} must not be NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| Error::invalid(format!("{what} is not UTF-8 text")))
}

/// The `n` values at `p` (any alignment), named `what` in errors.
///
/// # Safety
/// `p` is NULL or holds `n` readable values of `T`.
pub(crate) unsafe fn values<T: Copy>(p: *const T, n: usize, what: &str) -> Result<Vec<T>> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} must not be NULL")));
    }
    // SAFETY: non-NULL, `n` values per the contract; read unaligned, as C may pass any pointer.
    Ok((0..n).map(|i| unsafe { p.add(i).read_unaligned() }).collect())
}

/// Writes `v` to `p` unless `p` is NULL (an output the caller does not want).
///
/// # Safety
/// `p` is NULL or writable for `v.len()` values of `T`.
pub(crate) unsafe fn write_values<T: Copy>(p: *mut T, v: &[T]) {
    if !p.is_null() {
        for (i, &x) in v.iter().enumerate() {
            // SAFETY: writable for `v.len()` values per the contract.
            unsafe { p.add(i).write_unaligned(x) };
        }
    }
}
