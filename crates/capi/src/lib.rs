//! The C API of amrzip: `libamrzip.so` and `libamrzip.a`, declared in `include/amrzip.h`, which
//! cbindgen generates from these sources (`make header`). Usage and contracts: docs/capi.md.
//!
//! Every entry point that can fail returns an `AMRZIP_*` status code and runs inside
//! [`error::guard`], which turns errors and panics into that code and a thread-local message:
//! nothing unwinds into C. `codec` compresses whole arrays; `snapshot_writer` and
//! `snapshot_reader` write and read snapshots of the AMR store behind opaque handles.

pub mod codec;
pub mod error;
pub mod memory;
pub mod snapshot_reader;
pub mod snapshot_writer;
pub mod threads;

use std::ffi::c_char;

/// The library's version, such as "0.1.0": the one linked at run time, which may differ from the
/// header a program was built with. The string is static: do not free it.
#[no_mangle]
pub extern "C" fn amrzip_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
