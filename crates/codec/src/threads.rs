//! Runs codec work on a rayon pool of the size the caller asked for. Pools are cached per size
//! because building one costs far more than compressing a small array.

use crate::error::{CodecError, Result};
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex, OnceLock};

static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();

fn pool(threads: usize) -> Result<Arc<ThreadPool>> {
    let mut pools = POOLS.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&threads) {
        return Ok(p.clone());
    }
    let p = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("amrzip-{i}"))
        .build()
        .map_err(|e| CodecError::InvalidInput(format!("cannot start {threads} threads: {e}")))?;
    let p = Arc::new(p);
    pools.insert(threads, p.clone());
    Ok(p)
}

/// `None` runs on rayon's global pool (all cores); `Some(n)` on a pool of exactly `n` threads.
pub fn run_with<R: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    match threads {
        None => work(),
        Some(0) => Err(CodecError::InvalidInput("threads must be at least 1".into())),
        Some(n) if n > 1024 => Err(CodecError::InvalidInput(format!("threads={n} is more than 1024"))),
        Some(n) => pool(n)?.install(work),
    }
}

/// `n` copies of `value`, written by all threads. A large buffer's first write also takes its
/// page faults; done by one thread, that is a serial phase the other cores wait through.
pub fn filled<T: Copy + Send + Sync>(value: T, n: usize) -> Vec<T> {
    use rayon::prelude::*;
    let mut v = Vec::with_capacity(n);
    v.spare_capacity_mut()[..n].par_chunks_mut(1 << 16).for_each(|c| c.fill(MaybeUninit::new(value)));
    // Safety: the loop above initialized all n elements.
    unsafe { v.set_len(n) };
    v
}

/// Fills `part` with `value` and returns it as initialized: for buffers allocated without
/// initializing, where each task clears the part it is about to write while it is in cache.
pub fn init<T: Copy>(part: &mut [MaybeUninit<T>], value: T) -> &mut [T] {
    part.fill(MaybeUninit::new(value));
    // Safety: every element was just written.
    unsafe { std::slice::from_raw_parts_mut(part.as_mut_ptr().cast(), part.len()) }
}

/// Debug builds fill `part`, a buffer that starts uninitialized, with `value`: one chosen so
/// that reading an element before it is written changes what the tests check. Release builds
/// leave it as it is.
pub fn poison<T: Copy>(part: &mut [MaybeUninit<T>], value: T) {
    if cfg!(debug_assertions) {
        part.fill(MaybeUninit::new(value));
    }
}
