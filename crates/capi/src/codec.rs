//! Whole arrays in and out of the codec: `amrzip_compress`, `amrzip_info`, `amrzip_decompress`.

use crate::error::{guard, Error, Result};
use crate::memory::to_c_buffer;
use crate::threads::threads;
use amrzip_codec::{Config, DType, Element, ErrorBound};
use std::ffi::{c_int, c_void};
use std::{ptr, slice};

/// Most dimensions an array may have; `amrzip_info` writes this many shape entries.
pub const AMRZIP_MAX_NDIM: c_int = 4;

/// Element type of an array or stream: float (IEEE binary32) or double (binary64), in the
/// machine's byte order.
#[allow(non_camel_case_types)]
#[repr(C)]
pub enum amrzip_dtype {
    AMRZIP_F32 = 0,
    AMRZIP_F64 = 1,
}

/// An `amrzip_dtype` as C passes it. The header declares it as `amrzip_dtype` (cbindgen.toml),
/// but Rust reads a plain integer: a value outside the enum would be undefined behaviour in a
/// Rust enum, and here it is an error.
#[repr(transparent)]
pub struct DtypeCode(c_int);

impl DtypeCode {
    pub(crate) fn get(&self) -> Result<DType> {
        match self.0 {
            c if c == amrzip_dtype::AMRZIP_F32 as c_int => Ok(DType::F32),
            c if c == amrzip_dtype::AMRZIP_F64 as c_int => Ok(DType::F64),
            c => Err(Error::invalid(format!("dtype must be AMRZIP_F32 (0) or AMRZIP_F64 (1), got {c}"))),
        }
    }

    pub(crate) fn of(dtype: DType) -> DtypeCode {
        DtypeCode(match dtype {
            DType::F32 => amrzip_dtype::AMRZIP_F32,
            DType::F64 => amrzip_dtype::AMRZIP_F64,
        } as c_int)
    }
}

/// Bytes of an array of `dtype` and `shape`, if that fits in memory (slices are at most
/// `isize::MAX` bytes).
fn array_bytes(dtype: DType, shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(dtype.size(), |bytes, &n| bytes.checked_mul(n)).filter(|&b| b <= isize::MAX as usize)
}

/// Compresses the array `data` of `ndim` dimensions (1 to AMRZIP_MAX_NDIM) and `shape` (C order:
/// the last index varies fastest) so that every decoded value is within `abs_bound` of the
/// original (0: lossless; NaN and infinities are kept bit for bit). On success `*out` points to
/// the stream, `*out_len` bytes long, which the caller releases with `amrzip_free`. On failure
/// `*out` is NULL and `*out_len` 0 (if they are not NULL themselves).
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers, ndim out of range, a shape whose size
/// overflows, an unknown dtype, `abs_bound` negative, NaN or infinite, `data` not aligned for its
/// type) or AMRZIP_ERR_INTERNAL. Safe to call from several threads at once.
///
/// # Safety
/// `shape` holds `ndim` values; `data` holds as many elements of `dtype` as their product (it may
/// be NULL if that is 0); `out` and `out_len` are writable.
#[no_mangle]
pub unsafe extern "C" fn amrzip_compress(
    data: *const c_void,
    dtype: DtypeCode,
    ndim: c_int,
    shape: *const usize,
    abs_bound: f64,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> c_int {
    guard("amrzip_compress", || {
        if out.is_null() || out_len.is_null() {
            return Err(Error::invalid("out and out_len must not be NULL"));
        }
        // SAFETY: both checked non-NULL, and writable per the contract.
        unsafe { (out.write(ptr::null_mut()), out_len.write(0)) };
        let dtype = dtype.get()?;
        // SAFETY: per the contract, `shape` holds `ndim` values.
        let shape = unsafe { read_shape(ndim, shape) }?;
        let n = array_bytes(dtype, &shape)
            .ok_or_else(|| Error::invalid(format!("an array of shape {shape:?} is too large for this machine")))?
            / dtype.size();
        let config = Config { threads: threads(), ..Config::new(ErrorBound::Absolute(abs_bound)) };
        // SAFETY: per the contract, `data` holds `n` elements of `dtype`.
        let stream = match dtype {
            DType::F32 => amrzip_codec::compress(unsafe { elements::<f32>(data, n) }?, &shape, &config)?,
            DType::F64 => amrzip_codec::compress(unsafe { elements::<f64>(data, n) }?, &shape, &config)?,
        };
        let buffer = to_c_buffer(&stream)?;
        // SAFETY: checked non-NULL above.
        unsafe { (out.write(buffer), out_len.write(stream.len())) };
        Ok(())
    })
}

/// # Safety
/// `shape` is NULL or holds `ndim` values, aligned or not.
unsafe fn read_shape(ndim: c_int, shape: *const usize) -> Result<Vec<usize>> {
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|n| (1..=AMRZIP_MAX_NDIM as usize).contains(n))
        .ok_or_else(|| Error::invalid(format!("ndim must be 1 to {AMRZIP_MAX_NDIM}, got {ndim}")))?;
    if shape.is_null() {
        return Err(Error::invalid("shape must not be NULL"));
    }
    // SAFETY: per the contract, `shape` holds `ndim` values.
    Ok((0..ndim).map(|i| unsafe { shape.add(i).read_unaligned() }).collect())
}

/// The `n` elements at `data`, which must be aligned for `T` (any C array of `T` is).
///
/// # Safety
/// `data` is NULL or points to `n` readable elements of `T`.
unsafe fn elements<'a, T: Element>(data: *const c_void, n: usize) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    let data = data.cast::<T>();
    if data.is_null() {
        return Err(Error::invalid("data must not be NULL"));
    }
    if !data.is_aligned() {
        return Err(Error::invalid(format!("data must be aligned to {} bytes for {}", align_of::<T>(), T::DTYPE.name())));
    }
    // SAFETY: non-NULL and aligned; `n` elements long per the contract.
    Ok(unsafe { slice::from_raw_parts(data, n) })
}

/// # Safety
/// `input` is NULL or points to `len` readable bytes.
unsafe fn stream<'a>(input: *const u8, len: usize) -> Result<&'a [u8]> {
    if input.is_null() {
        return Err(Error::invalid("in must not be NULL"));
    }
    if len > isize::MAX as usize {
        return Err(Error::invalid(format!("len {len} is larger than any buffer")));
    }
    // SAFETY: non-NULL, and `len` bytes long per the contract (bytes need no alignment).
    Ok(unsafe { slice::from_raw_parts(input, len) })
}

/// The validated stream's element type and shape, and the size of its decoded array.
fn describe(stream: &[u8]) -> Result<(DType, Vec<usize>, usize)> {
    let info = amrzip_codec::info(stream)?;
    let bytes = array_bytes(info.dtype, &info.shape)
        .ok_or_else(|| Error::corrupt(format!("an array of shape {:?} is too large for this machine", info.shape)))?;
    Ok((info.dtype, info.shape, bytes))
}

/// Describes the stream of `len` bytes at `in` without decoding it, after checking its header
/// and checksums: writes its element type to `*dtype`, its number of dimensions to `*ndim`, its
/// shape to `shape[0..ndim]` (and 0 to the rest of `shape[0..AMRZIP_MAX_NDIM]`) and the size of
/// the decoded array, the `out_bytes` that `amrzip_decompress` takes, to `*out_bytes`. Each of the
/// four outputs may be NULL if not wanted; nothing is written on failure.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (`in` NULL) or AMRZIP_ERR_CORRUPT. Safe to call from
/// several threads at once.
///
/// # Safety
/// `in` points to `len` readable bytes; the outputs are NULL or writable, `shape` for
/// AMRZIP_MAX_NDIM values.
#[no_mangle]
pub unsafe extern "C" fn amrzip_info(
    r#in: *const u8,
    len: usize,
    dtype: *mut DtypeCode,
    ndim: *mut c_int,
    shape: *mut usize,
    out_bytes: *mut usize,
) -> c_int {
    guard("amrzip_info", || {
        // SAFETY: per the contract, `in` holds `len` bytes.
        let (element, dims, bytes) = describe(unsafe { stream(r#in, len) }?)?;
        // SAFETY: each output is NULL, or writable per the contract (`shape` for AMRZIP_MAX_NDIM
        // values, and a validated stream has at most that many dimensions).
        unsafe {
            if !dtype.is_null() {
                dtype.write(DtypeCode::of(element));
            }
            if !ndim.is_null() {
                ndim.write(dims.len() as c_int);
            }
            if !shape.is_null() {
                for i in 0..AMRZIP_MAX_NDIM as usize {
                    shape.add(i).write_unaligned(dims.get(i).copied().unwrap_or(0));
                }
            }
            if !out_bytes.is_null() {
                out_bytes.write(bytes);
            }
        }
        Ok(())
    })
}

/// Decodes the stream of `len` bytes at `in` into `out`, which must be exactly `out_bytes` long:
/// the size `amrzip_info` reports (element count times 4 for AMRZIP_F32 or 8 for AMRZIP_F64).
/// The values are written in C order, in the stream's element type and the machine's byte order;
/// `out` needs no particular alignment. `out` is left as it is if the call fails before decoding
/// (any AMRZIP_ERR_INVALID, and a stream found damaged by its checksums), and may be partly
/// written if the call fails after.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (`in` NULL, `out` NULL with `out_bytes` nonzero,
/// `out_bytes` not the decoded size; the message gives the size needed), AMRZIP_ERR_CORRUPT or
/// AMRZIP_ERR_INTERNAL. Safe to call from several threads at once.
///
/// # Safety
/// `in` points to `len` readable bytes, `out` to `out_bytes` writable bytes (or is NULL if
/// `out_bytes` is 0).
#[no_mangle]
pub unsafe extern "C" fn amrzip_decompress(r#in: *const u8, len: usize, out: *mut c_void, out_bytes: usize) -> c_int {
    guard("amrzip_decompress", || {
        // SAFETY: per the contract, `in` holds `len` bytes.
        let stream = unsafe { stream(r#in, len) }?;
        let (dtype, shape, bytes) = describe(stream)?;
        if out_bytes != bytes {
            return Err(Error::invalid(format!(
                "out_bytes is {out_bytes}, but the stream decodes to {bytes} bytes ({} array of shape {shape:?})",
                dtype.name()
            )));
        }
        if out.is_null() && bytes > 0 {
            return Err(Error::invalid("out must not be NULL"));
        }
        // SAFETY: `out` holds `out_bytes` (= `bytes`) bytes per the contract.
        match dtype {
            DType::F32 => unsafe { decode_into::<f32>(stream, out, bytes) },
            DType::F64 => unsafe { decode_into::<f64>(stream, out, bytes) },
        }
    })
}

/// # Safety
/// `out` points to `bytes` writable bytes, or is NULL if `bytes` is 0.
unsafe fn decode_into<T: Element>(stream: &[u8], out: *mut c_void, bytes: usize) -> Result<()> {
    let (values, _) = amrzip_codec::decompress::<T>(stream, threads())?;
    if size_of_val(values.as_slice()) != bytes {
        return Err(Error::internal(format!("decoded {} values, not the {bytes} bytes the header gives", values.len())));
    }
    if bytes > 0 {
        // SAFETY: `out` has room for `bytes` bytes, which `values` holds; a caller's buffer cannot
        // overlap a vector just allocated.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr().cast::<u8>(), out.cast::<u8>(), bytes) };
    }
    Ok(())
}
