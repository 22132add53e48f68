//! The number of worker threads, one setting for the whole process.

use crate::error::{guard, Error};
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// 0 stands for all cores (the codec's `None`).
/// cbindgen:ignore
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// The codec's thread setting for a call starting now.
pub(crate) fn threads() -> Option<usize> {
    Some(THREADS.load(Ordering::Relaxed)).filter(|&n| n > 0)
}

/// Sets how many worker threads each later call may use, in any thread of the process: `n` from
/// 1 to 1024, or 0 for all cores (the default). An MPI code running several ranks per node would
/// set its share of the cores. The threads start here, so that a failure to start them is
/// reported now: AMRZIP_ERR_INVALID, for that or for a value out of range, keeps the setting.
#[no_mangle]
pub extern "C" fn amrzip_set_threads(n: c_int) -> c_int {
    guard("amrzip_set_threads", || {
        let n = usize::try_from(n).map_err(|_| Error::invalid(format!("threads must be 0 (all cores) or more, got {n}")))?;
        if n > 0 {
            // Starts the pool now (the codec keeps it for later calls) and lets the codec judge `n`.
            amrzip_codec::start_threads(Some(n))?;
        }
        THREADS.store(n, Ordering::Relaxed);
        Ok(())
    })
}
