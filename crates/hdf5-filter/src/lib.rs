//! HDF5 dynamic filter plugin for amrzip: `libh5zamrzip.so`, found by HDF5 through
//! `HDF5_PLUGIN_PATH` or registered by `import amrzip.hdf5`. Usage, parameters and the stored
//! chunk format are in docs/hdf5.md.
//!
//! Every entry point HDF5 calls catches panics (unwinding into C is undefined behaviour) and
//! reports failures the HDF5 way: a negative status or a zero size, with a message pushed on
//! HDF5's error stack.

pub mod chunk;
pub mod hdf5;
pub mod params;

use hdf5::{Hid, Step};
use params::Params;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// From the range HDF5 leaves for testing and unregistered filters (256-511); see docs/hdf5.md
/// for registering a permanent id. Must match `FILTER_ID` in python/amrzip/hdf5/__init__.py.
pub const FILTER_ID: c_int = 445;

const H5Z_CLASS_T_VERS: c_int = 1;
const H5PL_TYPE_FILTER: c_int = 0;
const H5Z_FLAG_DEFMASK: c_uint = 0x00ff;
const H5Z_FLAG_REVERSE: c_uint = 0x0100;

type CanApply = unsafe extern "C" fn(Hid, Hid, Hid) -> c_int;
type SetLocal = unsafe extern "C" fn(Hid, Hid, Hid) -> c_int;
type FilterFn = unsafe extern "C" fn(c_uint, usize, *const c_uint, usize, *mut usize, *mut *mut c_void) -> usize;

/// HDF5's `H5Z_class2_t`.
#[repr(C)]
pub struct H5ZClass2 {
    pub version: c_int,
    pub id: c_int,
    pub encoder_present: c_uint,
    pub decoder_present: c_uint,
    pub name: *const c_char,
    pub can_apply: Option<CanApply>,
    pub set_local: Option<SetLocal>,
    pub filter: Option<FilterFn>,
}

// SAFETY: immutable, and `name` points to a static string.
unsafe impl Sync for H5ZClass2 {}

pub static FILTER_CLASS: H5ZClass2 = H5ZClass2 {
    version: H5Z_CLASS_T_VERS,
    id: FILTER_ID,
    encoder_present: 1,
    decoder_present: 1,
    name: c"amrzip: error-bounded lossy compression of float32/float64".as_ptr(),
    can_apply: Some(can_apply),
    set_local: Some(set_local),
    filter: Some(filter),
};

#[no_mangle]
pub extern "C" fn H5PLget_plugin_type() -> c_int {
    H5PL_TYPE_FILTER
}

#[no_mangle]
pub extern "C" fn H5PLget_plugin_info() -> *const c_void {
    &FILTER_CLASS as *const H5ZClass2 as *const c_void
}

/// Points the plugin at the libhdf5 brought in by `library` (a path to libhdf5 or to any loaded
/// module linking it, e.g. h5py's h5z extension), for hosts that load HDF5 privately. Returns 0,
/// or -1 if that library is not loaded or is not HDF5.
///
/// # Safety
/// `library` must be a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn amrzip_h5_init(library: *const c_char) -> c_int {
    if library.is_null() {
        return -1;
    }
    let library = CStr::from_ptr(library);
    catch_unwind(|| hdf5::init_from(library)).map_or(-1, |r| if r.is_ok() { 0 } else { -1 })
}

/// Runs `f`, turning an error or a panic into `failed` and a message on HDF5's error stack.
fn guarded<R>(step: Step, func: &CStr, failed: R, f: impl FnOnce() -> Result<R, String>) -> R {
    let msg = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => return r,
        Ok(Err(msg)) => msg,
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            format!("internal error: {}", what.unwrap_or_else(|| "panic".into()))
        }
    };
    // Pushing the error calls into HDF5 through our own code: keep a panic there from escaping too.
    let _ = catch_unwind(AssertUnwindSafe(|| hdf5::push_error(step, func, &msg)));
    failed
}

fn hdf5_api() -> Result<hdf5::Api, String> {
    hdf5::api().ok_or_else(|| "cannot find the HDF5 library's functions in this process (see amrzip_h5_init)".into())
}

/// The dataset's element type, or why the filter cannot take it.
fn element_type(api: &hdf5::Api, type_id: Hid) -> Result<(amrzip_codec::DType, bool), String> {
    // SAFETY: HDF5 calls with a valid datatype id.
    let (class, size, order) = unsafe { ((api.type_class)(type_id), (api.type_size)(type_id), (api.type_order)(type_id)) };
    let dtype = match (class, size) {
        (hdf5::H5T_FLOAT, 4) => amrzip_codec::DType::F32,
        (hdf5::H5T_FLOAT, 8) => amrzip_codec::DType::F64,
        _ => return Err(format!("only 32- and 64-bit floats can be compressed (type class {class}, {size} bytes)")),
    };
    let big_endian = match order {
        hdf5::H5T_ORDER_LE => false,
        hdf5::H5T_ORDER_BE => true,
        o => return Err(format!("unsupported float byte order {o}")),
    };
    Ok((dtype, big_endian))
}

/// Refuses datasets that are not float32/float64 (0), so that HDF5 reports it when the filter
/// is mandatory. For an optional filter (h5py's default) HDF5 goes on to `set_local`, which fails.
unsafe extern "C" fn can_apply(_dcpl: Hid, type_id: Hid, _space: Hid) -> c_int {
    guarded(Step::SetLocal, c"can_apply", -1, || Ok(c_int::from(element_type(&hdf5_api()?, type_id).is_ok())))
}

/// Checks the user's parameters and appends the element type and chunk shape (docs/hdf5.md).
unsafe extern "C" fn set_local(dcpl: Hid, type_id: Hid, _space: Hid) -> c_int {
    guarded(Step::SetLocal, c"set_local", -1, || {
        let api = hdf5_api()?;
        let (dtype, big_endian) = element_type(&api, type_id)?;
        let mut dims = [0u64; params::MAX_RANK];
        let rank = (api.get_chunk)(dcpl, params::MAX_RANK as c_int, dims.as_mut_ptr());
        if rank <= 0 {
            return Err("the dataset is not chunked".into());
        }
        // Room for a list copied from another dataset of the largest rank.
        const CAPACITY: usize = params::USER_VALUES + params::LOCAL_HEADER + params::MAX_RANK;
        let (mut flags, mut n, mut cd) = (0 as c_uint, CAPACITY, [0 as c_uint; CAPACITY]);
        let status =
            (api.get_filter_by_id2)(dcpl, FILTER_ID, &mut flags, &mut n, cd.as_mut_ptr(), 0, std::ptr::null_mut(), std::ptr::null_mut());
        if status < 0 {
            return Err("cannot read the filter's parameters".into());
        }
        let values = params::local_values(&cd[..n.min(CAPACITY)], dtype, big_endian, &dims[..rank as usize])?;
        if (api.modify_filter)(dcpl, FILTER_ID, flags & H5Z_FLAG_DEFMASK, values.len(), values.as_ptr()) < 0 {
            return Err("cannot store the filter's parameters".into());
        }
        Ok(0)
    })
}

/// HDF5's filter callback: compresses `nbytes` at `*buf` (a whole chunk) or, with
/// H5Z_FLAG_REVERSE, decompresses them back to a whole chunk. On success the old buffer is
/// freed and replaced; on failure (0) nothing is touched.
unsafe extern "C" fn filter(
    flags: c_uint,
    cd_nelmts: usize,
    cd_values: *const c_uint,
    nbytes: usize,
    buf_size: *mut usize,
    buf: *mut *mut c_void,
) -> usize {
    guarded(Step::Filter, c"filter", 0, || {
        if buf.is_null() || buf_size.is_null() || (*buf).is_null() || (cd_values.is_null() && cd_nelmts > 0) {
            return Err("null buffer or parameters".into());
        }
        let cd = if cd_nelmts == 0 { &[][..] } else { std::slice::from_raw_parts(cd_values, cd_nelmts) };
        let p: Params = params::parse(cd)?;
        let input = std::slice::from_raw_parts(*buf as *const u8, nbytes);
        let (out, len) = if flags & H5Z_FLAG_REVERSE == 0 {
            let stream = chunk::encode(input, &p)?;
            let out = hdf5::allocate(stream.len());
            if out.is_null() {
                return Err(format!("cannot allocate {} bytes", stream.len()));
            }
            std::ptr::copy_nonoverlapping(stream.as_ptr(), out as *mut u8, stream.len());
            (out, stream.len())
        } else {
            let len = chunk::chunk_bytes(&p);
            let out = hdf5::allocate(len);
            if out.is_null() {
                return Err(format!("cannot allocate {len} bytes"));
            }
            // Decode into the new buffer; free it again if the chunk turns out to be bad.
            let dst = std::slice::from_raw_parts_mut(out as *mut u8, len);
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| chunk::decode(input, &p, dst)))
                .unwrap_or_else(|_| Err("internal error: panic while decoding".into()))
            {
                hdf5::free(out);
                return Err(e);
            }
            (out, len)
        };
        hdf5::free(*buf);
        *buf = out;
        *buf_size = len;
        Ok(len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use amrzip_codec::{DType, ErrorBound, Preset};
    use params::{user_values, UserParams};

    fn cd(dims: &[u64], valid: u32) -> Vec<u32> {
        let user = user_values(&UserParams { bound: ErrorBound::Absolute(1e-3), preset: Preset::Speed, valid });
        params::local_values(&user, DType::F32, false, dims).unwrap()
    }

    fn malloc_copy(bytes: &[u8]) -> *mut c_void {
        let p = hdf5::allocate(bytes.len());
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len()) };
        p
    }

    fn call(flags: c_uint, cd: &[u32], data: &[u8]) -> (usize, *mut c_void, usize) {
        let mut buf = malloc_copy(data);
        let mut size = data.len();
        let n = unsafe { filter(flags, cd.len(), cd.as_ptr(), data.len(), &mut size, &mut buf) };
        (n, buf, size)
    }

    #[test]
    fn class_struct_is_what_hdf5_expects() {
        assert_eq!(H5PLget_plugin_type(), 0);
        let class = unsafe { &*(H5PLget_plugin_info() as *const H5ZClass2) };
        assert_eq!((class.version, class.id, class.encoder_present, class.decoder_present), (1, 445, 1, 1));
        assert!((256..512).contains(&class.id));
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<H5ZClass2>(), 48);
    }

    #[test]
    fn filter_round_trip_through_the_c_entry_point() {
        let values: Vec<f32> = (0..600).map(|i| if i < 450 { (i as f32 * 0.05).cos() } else { 0.0 }).collect();
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let cd = cd(&[20, 30], 0);
        let (n, buf, size) = call(0, &cd, &raw);
        assert!(n > 0 && n < raw.len() && size == n);
        let stored = unsafe { std::slice::from_raw_parts(buf as *const u8, n) }.to_vec();
        unsafe { hdf5::free(buf) };
        assert_eq!(amrzip_codec::info(&stored).unwrap().shape, vec![15, 30]);

        let (n, buf, size) = call(H5Z_FLAG_REVERSE, &cd, &stored);
        assert_eq!((n, size), (raw.len(), raw.len()));
        let back = unsafe { std::slice::from_raw_parts(buf as *const f32, 600) };
        assert!(values.iter().zip(back).all(|(a, b)| (a - b).abs() <= 1e-3));
        unsafe { hdf5::free(buf) };
    }

    #[test]
    fn failures_return_zero_and_leave_the_buffer_alone() {
        let raw = vec![0u8; 400];
        let cd = cd(&[100], 0);
        // Corrupt chunk.
        let (n, buf, size) = call(H5Z_FLAG_REVERSE, &cd, b"AMRZ not really a stream");
        assert_eq!(n, 0);
        assert_eq!(size, 24);
        assert_eq!(unsafe { std::slice::from_raw_parts(buf as *const u8, 4) }, b"AMRZ");
        unsafe { hdf5::free(buf) };
        // Missing set_local part, wrong chunk size, no parameters at all.
        for (cd, data) in [(&cd[..6], &raw[..]), (&cd[..], &raw[..396]), (&[][..], &raw[..])] {
            let (n, buf, _) = call(0, cd, data);
            assert_eq!(n, 0);
            unsafe { hdf5::free(buf) };
        }
        let mut size = 0;
        assert_eq!(unsafe { filter(0, cd.len(), cd.as_ptr(), 0, &mut size, std::ptr::null_mut()) }, 0);
    }

    #[test]
    fn panics_become_failures() {
        let r = guarded(Step::Filter, c"test", 7usize, || panic!("boom"));
        assert_eq!(r, 7);
    }
}
