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

/// Checks a thread count and starts its pool (kept for later calls), without running anything
/// on it: handing a pool even empty work costs a round of thread wake-ups.
pub fn start(threads: Option<usize>) -> Result<()> {
    check(threads)?;
    threads.map_or(Ok(()), |n| pool(n).map(drop))
}

/// Refuses a thread count out of 1..=1024.
pub(crate) fn check(threads: Option<usize>) -> Result<()> {
    match threads {
        Some(0) => Err(CodecError::InvalidInput("threads must be at least 1".into())),
        Some(n) if n > 1024 => Err(CodecError::InvalidInput(format!("threads={n} is more than 1024"))),
        _ => Ok(()),
    }
}

/// `None` runs on rayon's global pool (all cores); `Some(n)` on a pool of exactly `n` threads,
/// `Some(1)` on the calling thread itself where it can (see `run_sized`): one thread gains
/// nothing from a pool but the cost of handing it the work.
pub fn run_with<R: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    check(threads)?;
    if threads == Some(1) {
        return alone(threads, work);
    }
    pooled(threads, work)
}

fn pooled<R: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    match threads {
        None if INLINE.with(|p| p.get().is_some()) && !IN_INLINE.get() => {
            // This thread belongs to its inline pool now (see `run_sized`), where rayon would
            // keep the work on one thread: go to a pool as large as the global one instead.
            static GLOBAL: OnceLock<usize> = OnceLock::new();
            let n = *GLOBAL.get_or_init(|| std::thread::spawn(rayon::current_num_threads).join().unwrap_or(1));
            pool(n)?.install(work)
        }
        None => work(),
        Some(n) => pool(n)?.install(work),
    }
}

/// Work on at most this many bytes runs on the calling thread (`run_sized`).
pub const INLINE_BYTES: usize = 1 << 16;

thread_local! {
    /// The calling thread as the only thread of a pool: built once per thread, on its first
    /// small call, and kept (rayon ties the thread to it for good). None when the thread
    /// already works for another pool.
    static INLINE: std::cell::OnceCell<Option<ThreadPool>> = const { std::cell::OnceCell::new() };
    /// Whether this thread is running work in its inline pool.
    static IN_INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `run_with` for work on about `bytes` bytes of data: small work runs on the calling thread,
/// alone, whatever `threads` says. Handing work to a pool and waiting for it costs about 60 us
/// of thread wake-ups on a virtual machine, more than compressing or decoding a 64 KiB array
/// on one core, and its parts are too small to share out. The bytes produced are the same on
/// any number of threads.
pub fn run_sized<R: Send>(threads: Option<usize>, bytes: usize, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    check(threads)?;
    if bytes > INLINE_BYTES && threads != Some(1) {
        return pooled(threads, work);
    }
    alone(threads, work)
}

/// Runs `work` on the calling thread as the only thread of its inline pool; work nested in
/// such work stays there, and a thread of another pool hands it to `threads`' pool.
fn alone<R: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    if IN_INLINE.get() {
        return work();
    }
    let inline = INLINE.with(|p| {
        p.get_or_init(|| {
            // A thread of a pool (nested call) keeps its pool; only free threads are taken over.
            rayon::current_thread_index()
                .is_none()
                .then(|| ThreadPoolBuilder::new().num_threads(1).use_current_thread().build().ok())
                .flatten()
        })
        .is_some()
    });
    if !inline {
        return pooled(threads, work);
    }
    IN_INLINE.set(true);
    let _reset = Reset;
    INLINE.with(|p| p.get().and_then(Option::as_ref).expect("built above").install(work))
}

/// Clears `IN_INLINE` however the inline work ends, panics included.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        IN_INLINE.set(false);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_work_runs_on_the_calling_thread_and_later_work_keeps_its_pools() {
        std::thread::spawn(|| {
            let caller = std::thread::current().id();
            let global = rayon::current_num_threads();
            // Small: here, alone, whatever the thread count asked.
            for threads in [None, Some(1), Some(2)] {
                let (on, n) = run_sized(threads, INLINE_BYTES, || Ok((std::thread::current().id(), rayon::current_num_threads()))).unwrap();
                assert_eq!((on, n), (caller, 1));
            }
            // One thread asked for: here too, however large the work.
            let (on, n) = run_with(Some(1), || Ok((std::thread::current().id(), rayon::current_num_threads()))).unwrap();
            assert_eq!((on, n), (caller, 1));
            assert_eq!(run_sized(Some(1), usize::MAX, || Ok(std::thread::current().id())).unwrap(), caller);
            // Large, and plain `run_with`, after this thread became an inline pool's thread.
            assert_eq!(run_sized(None, INLINE_BYTES + 1, || Ok(rayon::current_num_threads())).unwrap(), global);
            assert_eq!(run_with(None, || Ok(rayon::current_num_threads())).unwrap(), global);
            assert_eq!(run_with(Some(2), || Ok(rayon::current_num_threads())).unwrap(), 2);
            // Small work nested in a pool's work stays in that pool.
            let nested = run_with(Some(2), || run_sized(None, 8, || Ok(rayon::current_num_threads()))).unwrap();
            assert_eq!(nested, 2);
            // Bad thread counts are refused, small work or not.
            assert!(run_sized(Some(0), 8, || Ok(())).is_err());
            assert!(run_sized(Some(2000), 8, || Ok(())).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_panic_in_small_work_leaves_the_thread_usable() {
        std::thread::spawn(|| {
            let caught = std::panic::catch_unwind(|| run_sized(Some(1), 8, || -> Result<()> { panic!("in the work") }));
            assert!(caught.is_err());
            assert_eq!(
                run_with(None, || Ok(rayon::current_num_threads())).unwrap(),
                std::thread::spawn(rayon::current_num_threads).join().unwrap()
            );
            assert_eq!(run_sized(Some(1), 8, || Ok(rayon::current_num_threads())).unwrap(), 1);
        })
        .join()
        .unwrap();
    }
}
