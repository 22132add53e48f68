//! The `amrzip._core` extension module: a thin layer from numpy arrays and bytes to the Rust
//! codec. Argument checking that needs Python types lives in `python/amrzip/codec.py`.

use amrzip_codec::{self as codec, CodebookSource, CodecError, Config, DType, Element, ErrorBound, PredictorKind, Preset, StreamInfo};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::mem::MaybeUninit;

mod boxes;
mod multires;
mod staging;
mod store;
mod streaming;
mod variables;

/// glibc hands every buffer over 32 MiB back to the kernel on free, so each call on a large
/// field paid for page faults on fresh zeroed memory (a fifth of decompression time);
/// mimalloc keeps freed pages for the next call.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc options by their position in `mi_option_t` (mimalloc.h of the mimalloc v3 sources
/// that libmimalloc-sys 0.1.49 builds; that crate names no constant for them).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the allocator's options as the module loads; a `MIMALLOC_...` variable set by the user
/// wins over each.
///
/// - Purge delay: mimalloc gives freed pages back to the kernel a second after the free.
///   Between two calls on large fields a caller usually does other work for longer than that
///   (checking errors, a simulation step), so calls kept taking fresh page faults, on huge pages
///   that may wait for the kernel to compact memory: two-thread decoding varied by up to a third
///   from call to call. Freed pages are kept 10 s instead, jemalloc's default decay time.
/// - Arena eager commit: on a kernel that backs memory with transparent huge pages, arenas
///   committed whole at once took a 2 MiB page wherever a small allocation landed: a small
///   write's or read's first call paid for zeroing them, and its peak held them
///   (`benches/memory_bench.py`, docs/codec.md).
fn configure_allocator() {
    let options =
        [("MIMALLOC_PURGE_DELAY", MI_OPTION_PURGE_DELAY, 10_000), ("MIMALLOC_ARENA_EAGER_COMMIT", MI_OPTION_ARENA_EAGER_COMMIT, 0)];
    for (variable, option, value) in options {
        if std::env::var_os(variable).is_none() {
            // Safety: sets one of mimalloc's documented options; any value is valid.
            unsafe { libmimalloc_sys::mi_option_set(option, value) };
        }
    }
}

/// Gives the pages freed so far back to the kernel now, rather than after the purge delay. A
/// write calls it before it compresses a (level, field) of at least `RELEASE_AFTER_BYTES`, so
/// that its peak is what its largest (level, field) needs, not that plus what the allocator kept
/// of the layout trials and the (level, field)s before (`benches/memory_bench.py`). Before
/// small ones it does not: the memory kept is little and gets reused, and taking it back cost
/// a 50 ms write of a 0.7 MB hierarchy 15% in fresh page faults.
pub(crate) fn release_freed_pages() {
    // Safety: mimalloc's documented collection call, valid at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// See `release_freed_pages`.
pub(crate) const RELEASE_AFTER_BYTES: u64 = 1 << 20;

create_exception!(_core, CorruptStreamError, PyValueError, "The data is not a valid amrzip stream (damaged, truncated or not amrzip).");

pub(crate) fn to_py(e: CodecError) -> PyErr {
    match e {
        CodecError::InvalidInput(m) => PyValueError::new_err(m),
        CodecError::Corrupt(m) => CorruptStreamError::new_err(m),
    }
}

pub(crate) fn config(bound_mode: &str, bound: f64, preset: &str, threads: Option<usize>, predictor: Option<&str>) -> PyResult<Config> {
    let bound = match bound_mode {
        "abs" => ErrorBound::Absolute(bound),
        "rel" => ErrorBound::Relative(bound),
        "ratio" => ErrorBound::Ratio(bound),
        "psnr" => ErrorBound::Psnr(bound),
        m => return Err(PyValueError::new_err(format!("unknown bound mode {m:?} (expected 'abs', 'rel', 'ratio' or 'psnr')"))),
    };
    let preset = match preset {
        "ratio" => Preset::Ratio,
        "speed" => Preset::Speed,
        p => return Err(PyValueError::new_err(format!("unknown mode {p:?} (expected 'ratio' or 'speed')"))),
    };
    let predictor = predictor
        .map(|name| PredictorKind::from_name(name).ok_or_else(|| PyValueError::new_err(format!("unknown predictor {name:?}"))))
        .transpose()?;
    Ok(Config { bound, preset, threads, predictor })
}

fn compress_typed<'py, T: Element + numpy::Element>(
    py: Python<'py>,
    array: PyReadonlyArrayDyn<'py, T>,
    cfg: &Config,
) -> PyResult<Bound<'py, PyBytes>> {
    let shape = array.shape().to_vec();
    let data = array.as_slice().map_err(|_| PyValueError::new_err("array must be C-contiguous"))?;
    let out = py.detach(|| codec::compress(data, &shape, cfg)).map_err(to_py)?;
    to_bytes(py, &out, cfg.threads)
}

/// A `bytes` object holding `data`, copied on `threads` threads with the GIL released: one
/// thread copying a large stream into fresh memory (taking its page faults too) was a serial
/// phase of two-thread compression.
pub(crate) fn to_bytes<'py>(py: Python<'py>, data: &[u8], threads: Option<usize>) -> PyResult<Bound<'py, PyBytes>> {
    let len = ffi::Py_ssize_t::try_from(data.len()).map_err(|_| PyValueError::new_err("stream too large for a bytes object"))?;
    // Safety: PyBytes_FromStringAndSize with a null source returns a new bytes object of `len`
    // uninitialized bytes (or null with an exception set, which from_owned_ptr_or_err turns
    // into the error). Nothing else can see the object until it is returned, so its buffer is
    // written with the GIL released, and completely (join_into fills it or panics).
    unsafe {
        let ptr = ffi::PyBytes_FromStringAndSize(std::ptr::null(), len);
        let bytes = Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked::<PyBytes>();
        let buffer = std::slice::from_raw_parts_mut(ffi::PyBytes_AsString(ptr).cast::<MaybeUninit<u8>>(), data.len());
        py.detach(|| {
            codec::run_sized_with_threads(threads, data.len(), || {
                codec::join_into(&[data], buffer);
                Ok(())
            })
        })
        .map_err(to_py)?;
        Ok(bytes)
    }
}

/// compress(array, bound_mode, bound, preset, threads=None, predictor=None) -> bytes
#[pyfunction]
#[pyo3(signature = (array, bound_mode, bound, preset, threads=None, predictor=None))]
fn compress<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyAny>,
    bound_mode: &str,
    bound: f64,
    preset: &str,
    threads: Option<usize>,
    predictor: Option<&str>,
) -> PyResult<Bound<'py, PyBytes>> {
    let cfg = config(bound_mode, bound, preset, threads, predictor)?;
    match array.extract::<PyReadonlyArrayDyn<f32>>() {
        Ok(a) => compress_typed(py, a, &cfg),
        Err(_) => compress_typed::<f64>(py, array.extract()?, &cfg),
    }
}

fn decompress_typed<'py, T: Element + numpy::Element>(
    py: Python<'py>,
    data: &[u8],
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let (values, shape) = py.detach(|| codec::decompress::<T>(data, threads)).map_err(to_py)?;
    // numpy bounds the product of the non-empty dimensions too; such a stream is not ours.
    PyArray1::from_vec(py, values)
        .reshape(shape.clone())
        .map_err(|e| CorruptStreamError::new_err(format!("shape {shape:?} cannot be a numpy array: {e}")))
}

/// decompress(data, threads=None) -> numpy.ndarray
#[pyfunction]
#[pyo3(signature = (data, threads=None))]
fn decompress<'py>(py: Python<'py>, data: &[u8], threads: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
    match codec::dtype(data).map_err(to_py)? {
        DType::F32 => Ok(decompress_typed::<f32>(py, data, threads)?.into_any()),
        DType::F64 => Ok(decompress_typed::<f64>(py, data, threads)?.into_any()),
    }
}

/// info(data) -> dict
#[pyfunction]
fn info<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    info_dict(py, &codec::info(data).map_err(to_py)?)
}

/// What `info` says of a stream, also for each record of a chunked stream.
pub(crate) fn info_dict<'py>(py: Python<'py>, i: &StreamInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("dtype", i.dtype.name())?;
    d.set_item("shape", i.shape.clone())?;
    d.set_item(
        "mode",
        match i.preset {
            Preset::Ratio => "ratio",
            Preset::Speed => "speed",
        },
    )?;
    let (kind, value) = match i.bound {
        ErrorBound::Absolute(v) => ("abs", v),
        ErrorBound::Relative(v) => ("rel", v),
        ErrorBound::Ratio(v) => ("ratio", v),
        ErrorBound::Psnr(v) => ("psnr", v),
    };
    d.set_item("bound_mode", kind)?;
    d.set_item("bound", value)?;
    d.set_item("abs_bound", i.abs_bound)?;
    let names: Vec<&str> = i.predictors.iter().map(|(k, _)| k.name()).collect();
    d.set_item("predictor", names.join("+"))?;
    let counts = PyDict::new(py);
    for (k, n) in &i.predictors {
        counts.set_item(k.name(), n)?;
    }
    d.set_item("chunks_per_predictor", counts)?;
    d.set_item("chunk_shape", i.chunk_shape.clone())?;
    let codebook = match (i.codebook_source, i.offline_codebook) {
        (CodebookSource::Offline, Some(id)) => {
            let name = codec::offline_codebooks().into_iter().find(|(i, _)| *i == id).map_or_else(|| "unknown".to_string(), |(_, n)| n);
            format!("built-in {id} ({name})")
        }
        (CodebookSource::Previous, _) => "previous record".to_string(),
        (CodebookSource::Contexts, _) => "none: coded in context".to_string(),
        _ => "inline".to_string(),
    };
    d.set_item("codebook", codebook)?;
    d.set_item("compressed_size", i.compressed_size)?;
    d.set_item("original_size", i.original_size)?;
    d.set_item("ratio", if i.compressed_size > 0 { i.original_size as f64 / i.compressed_size as f64 } else { 0.0 })?;
    Ok(d)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    configure_allocator();
    m.add_function(wrap_pyfunction!(compress, m)?)?;
    m.add_function(wrap_pyfunction!(decompress, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add("CorruptStreamError", m.py().get_type::<CorruptStreamError>())?;
    m.add("DEFAULT_THRESHOLDS", (codec::DEFAULT_THRESHOLDS.keep, codec::DEFAULT_THRESHOLDS.rebuild))?;
    store::register(m)?;
    multires::register(m)?;
    staging::register(m)?;
    m.add_function(wrap_pyfunction!(boxes::check_nesting, m)?)?;
    m.add_function(wrap_pyfunction!(boxes::stored_mask, m)?)?;
    m.add_class::<streaming::StreamEncoder>()?;
    m.add_class::<variables::VariablesWriter>()?;
    m.add_class::<variables::VariablesFile>()?;
    m.add_class::<streaming::ChunkedWriter>()?;
    m.add_class::<streaming::ChunkedReader>()?;
    m.add("CACHE_BYTES", amrzip_store::reader::CACHE_BYTES)?;
    m.add("CHUNKED_MAGIC", PyBytes::new(m.py(), &amrzip_store::chunked_stream::MAGIC))?;
    m.add("CHUNKED_VERSION", amrzip_store::chunked_stream::VERSION)?;
    m.add_function(wrap_pyfunction!(streaming::_symbol_histogram, m)?)?;
    m.add_function(wrap_pyfunction!(streaming::_offline_codebook_set, m)?)?;
    m.add_function(wrap_pyfunction!(streaming::offline_codebooks, m)?)?;
    m.add_function(wrap_pyfunction!(streaming::_codebook_costs, m)?)?;
    Ok(())
}
