//! Status codes, the thread-local message of the last failure, and the guard every entry point
//! runs in.

use amrzip_codec::CodecError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The call succeeded.
pub const AMRZIP_OK: c_int = 0;
/// An argument is unusable: a NULL pointer, ndim outside 1..AMRZIP_MAX_NDIM, a shape whose size
/// overflows, an unknown dtype, a negative or non-finite bound, a buffer size that does not match.
pub const AMRZIP_ERR_INVALID: c_int = 1;
/// The input is not a valid amrzip stream, or a store or snapshot is damaged or is not one:
/// truncated, damaged, or something else altogether.
pub const AMRZIP_ERR_CORRUPT: c_int = 2;
/// The library failed: out of memory for a result, or a bug (a panic, caught).
pub const AMRZIP_ERR_INTERNAL: c_int = 3;
/// A snapshot of that name exists already (snapshots are never overwritten), or the store's
/// path is taken by something that is not a store.
pub const AMRZIP_ERR_EXISTS: c_int = 4;
/// No snapshot or field of that name.
pub const AMRZIP_ERR_NOT_FOUND: c_int = 5;
/// The operating system refused a file operation (permissions, a full disk...).
pub const AMRZIP_ERR_IO: c_int = 6;

/// Why a call failed: its status code and message.
#[derive(Debug)]
pub(crate) struct Error {
    code: c_int,
    message: String,
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error { code: AMRZIP_ERR_INVALID, message: message.into() }
    }

    pub(crate) fn corrupt(message: impl Into<String>) -> Error {
        Error { code: AMRZIP_ERR_CORRUPT, message: message.into() }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error { code: AMRZIP_ERR_INTERNAL, message: message.into() }
    }
}

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Error {
        let code = match e {
            CodecError::InvalidInput(_) => AMRZIP_ERR_INVALID,
            CodecError::Corrupt(_) => AMRZIP_ERR_CORRUPT,
        };
        Error { code, message: e.to_string() }
    }
}

impl From<amrzip_store::Error> for Error {
    fn from(e: amrzip_store::Error) -> Error {
        use amrzip_store::ErrorKind::*;
        let code = match e.kind {
            Invalid => AMRZIP_ERR_INVALID,
            Corrupt | NotAStore => AMRZIP_ERR_CORRUPT,
            Exists => AMRZIP_ERR_EXISTS,
            NotFound => AMRZIP_ERR_NOT_FOUND,
            Io => AMRZIP_ERR_IO,
            Interrupted => AMRZIP_ERR_INTERNAL,
        };
        Error { code, message: e.message }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: String) {
    let message = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // During thread exit the slot may already be gone; the status code still reports the failure.
    let _ = LAST_ERROR.try_with(|e| e.try_borrow_mut().map(|mut e| *e = message));
}

/// Runs the body of the entry point `function`: returns `AMRZIP_OK`, or the error's code after
/// recording `"function: message"` as this thread's last error. A panic becomes
/// `AMRZIP_ERR_INTERNAL`, since unwinding into C is undefined behaviour.
pub(crate) fn guard(function: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return AMRZIP_OK,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            Error::internal(format!("internal error (please report it): {}", what.as_deref().unwrap_or("panic")))
        }
    };
    // Formatting and storing the message allocate; a panic there must not escape either.
    let _ = catch_unwind(AssertUnwindSafe(|| set_last_error(format!("{function}: {}", error.message))));
    error.code
}

/// The message of the last call that failed in the calling thread, or "" if none has. Calls that
/// succeed leave it as it is, so read it right after a call returned nonzero. The string belongs
/// to the library and stays valid until the next failing call in the same thread.
#[no_mangle]
pub extern "C" fn amrzip_last_error() -> *const c_char {
    LAST_ERROR.try_with(|e| e.try_borrow().map(|e| e.as_ptr()).ok()).ok().flatten().unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: amrzip_last_error always returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(amrzip_last_error()) }.to_str().unwrap().to_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_with_its_message() {
        let status = guard("amrzip_test", || panic!("boom {}", 42));
        assert_eq!(status, AMRZIP_ERR_INTERNAL);
        let message = last_error();
        assert!(message.starts_with("amrzip_test: ") && message.contains("boom 42"), "{message}");
    }

    #[test]
    fn errors_keep_their_code_and_success_keeps_the_last_message() {
        std::thread::spawn(|| {
            assert_eq!(last_error(), "");
            assert_eq!(guard("f", || Err(Error::corrupt("bad\0bytes"))), AMRZIP_ERR_CORRUPT);
            assert_eq!(last_error(), "f: bad\\0bytes");
            assert_eq!(guard("g", || Ok(())), AMRZIP_OK);
            assert_eq!(last_error(), "f: bad\\0bytes");
        })
        .join()
        .unwrap();
    }
}
