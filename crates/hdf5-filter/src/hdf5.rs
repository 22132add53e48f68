//! The few HDF5 functions the plugin calls, looked up at run time in the libhdf5 that loaded it.
//!
//! The plugin does not link libhdf5: h5py wheels bundle one HDF5 (2.x, under a mangled file
//! name) and Debian's tools use another (1.10), and a linked plugin would pull a second copy of
//! the library into the process, with its own ID tables, rather than use the caller's. Where to
//! look, in order:
//! 1. the library named through `amrzip_h5_init` (`amrzip.hdf5` passes h5py's, the way
//!    hdf5plugin does), searched with its dependencies;
//! 2. the global symbol scope, which holds libhdf5 whenever a program links it (h5dump, C codes);
//! 3. on Linux, the first loaded object whose file name starts with `libhdf5` (h5py loads its
//!    copy privately, so this is how a bare `HDF5_PLUGIN_PATH` works with h5py).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::Mutex;

pub type Hid = i64;
pub const H5T_FLOAT: c_int = 1;
pub const H5T_ORDER_LE: c_int = 0;
pub const H5T_ORDER_BE: c_int = 1;
const H5E_DEFAULT: Hid = 0;

type EPush = unsafe extern "C" fn(Hid, *const c_char, *const c_char, c_uint, Hid, Hid, Hid, *const c_char, ...) -> c_int;

type GetChunk = unsafe extern "C" fn(Hid, c_int, *mut u64) -> c_int;
type TypeProp = unsafe extern "C" fn(Hid) -> c_int;
type TypeSize = unsafe extern "C" fn(Hid) -> usize;
type GetFilterById2 = unsafe extern "C" fn(Hid, c_int, *mut c_uint, *mut usize, *mut c_uint, usize, *mut c_char, *mut c_uint) -> c_int;
type ModifyFilter = unsafe extern "C" fn(Hid, c_int, c_uint, usize, *const c_uint) -> c_int;
// The second argument is hbool_t, whose width differs between builds: we only pass 0.
type Allocate = unsafe extern "C" fn(usize, c_uint) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;

#[derive(Clone, Copy)]
pub struct Api {
    pub get_chunk: GetChunk,
    pub type_class: TypeProp,
    pub type_size: TypeSize,
    pub type_order: TypeProp,
    pub get_filter_by_id2: GetFilterById2,
    pub modify_filter: ModifyFilter,
    // HDF5 >= 1.8.15; older libraries free filter buffers with free(), so malloc is right there.
    allocate: Option<Allocate>,
    free: Option<Free>,
    // Error reporting: H5Epush2 and the error class and message ids it takes (data symbols).
    push: Option<EPush>,
    err_class: Option<&'static Hid>,
    major_pline: Option<&'static Hid>,
    minor_filter: Option<&'static Hid>,
    minor_set_local: Option<&'static Hid>,
}

/// Which step failed, for the minor error code HDF5 reports.
#[derive(Clone, Copy)]
pub enum Step {
    Filter,
    SetLocal,
}

// SAFETY: function pointers and pointers to HDF5's immutable-after-init globals.
unsafe impl Send for Api {}

unsafe fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
    libc::dlsym(handle, name.as_ptr())
}

macro_rules! func {
    ($handle:expr, $name:literal, $ty:ty) => {{
        let p = symbol($handle, $name);
        // SAFETY: the symbol is the HDF5 function of that name, whose C signature $ty restates.
        if p.is_null() {
            None
        } else {
            Some(std::mem::transmute::<*mut c_void, $ty>(p))
        }
    }};
}

unsafe fn global(handle: *mut c_void, name: &CStr) -> Option<&'static Hid> {
    (symbol(handle, name) as *const Hid).as_ref()
}

/// All functions from one library, or `None` if it lacks any of the required ones.
unsafe fn from_handle(handle: *mut c_void) -> Option<Api> {
    Some(Api {
        get_chunk: func!(handle, c"H5Pget_chunk", GetChunk)?,
        type_class: func!(handle, c"H5Tget_class", TypeProp)?,
        type_size: func!(handle, c"H5Tget_size", TypeSize)?,
        type_order: func!(handle, c"H5Tget_order", TypeProp)?,
        get_filter_by_id2: func!(handle, c"H5Pget_filter_by_id2", GetFilterById2)?,
        modify_filter: func!(handle, c"H5Pmodify_filter", ModifyFilter)?,
        allocate: func!(handle, c"H5allocate_memory", Allocate),
        free: func!(handle, c"H5free_memory", Free),
        push: func!(handle, c"H5Epush2", EPush),
        err_class: global(handle, c"H5E_ERR_CLS_g"),
        major_pline: global(handle, c"H5E_PLINE_g"),
        minor_filter: global(handle, c"H5E_CANTFILTER_g"),
        minor_set_local: global(handle, c"H5E_SETLOCAL_g"),
    })
}

#[cfg(target_os = "linux")]
unsafe fn scan_loaded() -> Option<Api> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, found: *mut c_void) -> c_int {
        let found = &mut *(found as *mut Vec<CString>);
        let name = (*info).dlpi_name;
        if !name.is_null() {
            let path = CStr::from_ptr(name);
            let file = path.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or_default();
            // libhdf5.so, libhdf5_serial.so, h5py's libhdf5-<hash>.so; not the hl/C++/Fortran ones.
            let is_core = file.starts_with(b"libhdf5")
                && !["_hl", "hl_", "_cpp", "fortran"].iter().any(|s| file.windows(s.len()).any(|w| w == s.as_bytes()));
            if is_core {
                found.push(path.to_owned());
            }
        }
        0
    }
    let mut found: Vec<CString> = Vec::new();
    libc::dl_iterate_phdr(Some(visit), &mut found as *mut Vec<CString> as *mut c_void);
    found.iter().find_map(|path| {
        // RTLD_NOLOAD: a handle to the copy already in the process, never a new one.
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            None
        } else {
            from_handle(handle)
        }
    })
}

#[cfg(not(target_os = "linux"))]
unsafe fn scan_loaded() -> Option<Api> {
    None
}

static API: Mutex<Option<Api>> = Mutex::new(None);

/// The HDF5 functions, resolved on first use.
pub fn api() -> Option<Api> {
    let mut cached = API.lock().unwrap_or_else(|e| e.into_inner());
    if cached.is_none() {
        // SAFETY: dlsym/dl_iterate_phdr on the live process; see from_handle.
        *cached = unsafe { from_handle(libc::RTLD_DEFAULT).or_else(|| scan_loaded()) };
    }
    *cached
}

/// Uses the libhdf5 that `library` (a path to it or to any loaded object depending on it) brings.
pub fn init_from(library: &CStr) -> Result<(), String> {
    // SAFETY: RTLD_NOLOAD only returns a handle to an object the process has already loaded.
    let api = unsafe {
        let handle = libc::dlopen(library.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return Err(format!("{} is not loaded in this process", library.to_string_lossy()));
        }
        from_handle(handle)
    };
    let api = api.ok_or_else(|| format!("no HDF5 functions found through {}", library.to_string_lossy()))?;
    *API.lock().unwrap_or_else(|e| e.into_inner()) = Some(api);
    Ok(())
}

/// A buffer HDF5 may free: from H5allocate_memory when available (a debug build of HDF5 keeps
/// its own bookkeeping around allocations), else from malloc, which is what HDF5 frees with.
pub fn allocate(size: usize) -> *mut c_void {
    let size = size.max(1);
    match api().and_then(|a| a.allocate) {
        // SAFETY: plain allocation calls.
        Some(alloc) => unsafe { alloc(size, 0) },
        None => unsafe { libc::malloc(size) },
    }
}

/// Frees a buffer that HDF5 handed to the filter or that [`allocate`] returned.
///
/// # Safety
/// `ptr` must come from HDF5's allocator (or [`allocate`]) and not be used afterwards.
pub unsafe fn free(ptr: *mut c_void) {
    match api().and_then(|a| a.free) {
        Some(free) => {
            free(ptr);
        }
        None => libc::free(ptr),
    }
}

/// Pushes `msg` on HDF5's error stack, so the failing call reports why (h5py puts it in the
/// exception, the tools print it). Does nothing if HDF5's error API is unavailable.
pub fn push_error(step: Step, func: &CStr, msg: &str) {
    let Some(api) = api() else { return };
    let minor = match step {
        Step::Filter => api.minor_filter,
        Step::SetLocal => api.minor_set_local,
    };
    let (Some(push), Some(class), Some(major), Some(minor)) = (api.push, api.err_class, api.major_pline, minor) else {
        return;
    };
    let msg = CString::new(format!("amrzip: {msg}").replace('\0', " ")).unwrap_or_default();
    // SAFETY: H5Epush2 with a "%s" format and one C string argument; the ids are HDF5's own,
    // set once when the library initialises.
    unsafe {
        push(H5E_DEFAULT, c"amrzip-hdf5".as_ptr(), func.as_ptr(), line!(), *class, *major, *minor, c"%s".as_ptr(), msg.as_ptr());
    }
}
