//! Bindings for `amrzip-amr`: compress a (level, field) given as boxes, decode a region of it.
//! `python/amrzip/store/` prepares the boxes (coverage masks, bounds) and writes the chunks.

use crate::{config, to_py};
use amrzip_amr::{self as amr, BoxView, Layout, Tiling};
use amrzip_codec::Element;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

type BoxArgs<'py> = (Vec<i64>, Vec<i64>, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

fn tiling(origin: Vec<i64>, unit: Vec<usize>, chunk: Vec<usize>) -> PyResult<Tiling> {
    Tiling::new(origin, unit, chunk).map_err(PyValueError::new_err)
}

fn layout<T: numpy::Element>(a: &PyReadonlyArrayDyn<T>) -> PyResult<Layout> {
    if a.is_c_contiguous() {
        Ok(Layout::C)
    } else if a.is_fortran_contiguous() {
        Ok(Layout::Fortran)
    } else {
        Err(PyValueError::new_err("box arrays must be C- or Fortran-contiguous"))
    }
}

/// Whether the boxes hold float32 values (else they are taken as float64).
fn holds_f32(boxes: &[BoxArgs]) -> bool {
    boxes.first().is_some_and(|(_, _, a, _)| a.extract::<PyReadonlyArrayDyn<f32>>().is_ok())
}

/// How a level is compressed, besides the codec configuration.
struct LevelOptions {
    eb: f64,
    adaptive_block: bool,
    shared: bool,
    measure: bool,
}

/// The boxes' arrays, borrowed for the duration of a call (see [`views`]).
type Borrowed<'py, T> = Vec<(Vec<i64>, Vec<i64>, Layout, PyReadonlyArrayDyn<'py, T>, Option<PyReadonlyArrayDyn<'py, bool>>)>;

fn borrow<'py, T: Element + numpy::Element>(boxes: Vec<BoxArgs<'py>>) -> PyResult<Borrowed<'py, T>> {
    let mut arrays = Vec::with_capacity(boxes.len());
    for (lo, hi, data, stored) in boxes {
        let data: PyReadonlyArrayDyn<T> = data.extract()?;
        let stored: Option<PyReadonlyArrayDyn<bool>> = stored.map(|s| s.extract()).transpose()?;
        if stored.as_ref().is_some_and(|s| !s.is_c_contiguous()) {
            return Err(PyValueError::new_err("stored-cell masks must be C-contiguous"));
        }
        arrays.push((lo, hi, layout(&data)?, data, stored));
    }
    Ok(arrays)
}

fn views<'a, T: Element + numpy::Element>(arrays: &'a Borrowed<'_, T>) -> PyResult<Vec<BoxView<'a, T>>> {
    arrays
        .iter()
        .map(|(lo, hi, layout, data, stored)| {
            Ok(BoxView {
                lo: lo.clone(),
                hi: hi.clone(),
                data: data.as_slice().map_err(|e| PyValueError::new_err(e.to_string()))?,
                layout: *layout,
                stored: stored.as_ref().map(|s| s.as_slice()).transpose().map_err(|e| PyValueError::new_err(e.to_string()))?,
            })
        })
        .collect()
}

fn compress_typed<'py, T: Element + numpy::Element>(
    py: Python<'py>,
    boxes: Vec<BoxArgs<'py>>,
    tiling: &Tiling,
    cfg: &amrzip_codec::Config,
    o: &LevelOptions,
) -> PyResult<Bound<'py, PyDict>> {
    let arrays = borrow::<T>(boxes)?;
    let views = views(&arrays)?;
    let level = py
        .detach(|| {
            amrzip_codec::run_with_threads(cfg.threads, || {
                amr::compress_level(&views, tiling, cfg, o.eb, o.adaptive_block, o.shared, o.measure)
            })
        })
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("codebooks", level.codebooks.iter().map(|c| PyBytes::new(py, c)).collect::<Vec<_>>())?;
    d.set_item("predictor", level.predictor)?;
    let chunks = PyList::empty(py);
    for (idx, bytes) in &level.chunks {
        chunks.append((idx.clone(), PyBytes::new(py, bytes)))?;
    }
    d.set_item("chunks", chunks)?;
    d.set_item("blocks", level.blocks)?;
    d.set_item("partial_blocks", level.partial_blocks)?;
    d.set_item("stored_cells", level.stored_cells)?;
    d.set_item("error", level.error)?;
    Ok(d)
}

/// compress_level(boxes, origin, unit, chunk, eb, preset, threads=None, predictor=None,
/// adaptive_block=True, shared=True, measure=False) -> dict
///
/// With `measure`, `dict["error"]` is (sum of decoded - original, count) over the stored finite
/// cells, from decoding what was written; else None.
///
/// `boxes`: (lo, hi, array, stored mask or None) per box; arrays indexed [i, j, k], C- or
/// Fortran-contiguous, all float32 or all float64; masks C-contiguous bool.
#[pyfunction]
#[pyo3(signature = (boxes, origin, unit, chunk, eb, preset, threads=None, predictor=None, adaptive_block=true, shared=true, measure=false))]
#[allow(clippy::too_many_arguments)]
pub fn compress_level<'py>(
    py: Python<'py>,
    boxes: Vec<BoxArgs<'py>>,
    origin: Vec<i64>,
    unit: Vec<usize>,
    chunk: Vec<usize>,
    eb: f64,
    preset: &str,
    threads: Option<usize>,
    predictor: Option<&str>,
    adaptive_block: bool,
    shared: bool,
    measure: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config("abs", eb, preset, threads, predictor)?;
    let tiling = tiling(origin, unit, chunk)?;
    let options = LevelOptions { eb, adaptive_block, shared, measure };
    if holds_f32(&boxes) {
        compress_typed::<f32>(py, boxes, &tiling, &cfg, &options)
    } else {
        compress_typed::<f64>(py, boxes, &tiling, &cfg, &options)
    }
}

fn trial_sizes_typed<'py, T: Element + numpy::Element>(
    py: Python<'py>,
    boxes: Vec<BoxArgs<'py>>,
    tiling: &Tiling,
    chunks: &[Vec<usize>],
    cfg: &amrzip_codec::Config,
    o: &LevelOptions,
) -> PyResult<Vec<usize>> {
    let arrays = borrow::<T>(boxes)?;
    let views = views(&arrays)?;
    py.detach(|| {
        amrzip_codec::run_with_threads(cfg.threads, || amr::trial_sizes(&views, tiling, chunks, cfg, o.eb, o.adaptive_block, o.shared))
    })
    .map_err(to_py)
}

/// trial_sizes(boxes, origin, unit, chunks, eb, preset, threads=None, predictor=None,
/// adaptive_block=True, shared=True) -> list[int]
///
/// The bytes (chunks plus codebooks) `compress_level` would store with unit block `unit` and
/// each chunk shape of `chunks` (all multiples of the unit), each block predicted only once.
/// The predictor is chosen over the blocks grouped by the first chunk shape.
#[pyfunction]
#[pyo3(signature = (boxes, origin, unit, chunks, eb, preset, threads=None, predictor=None, adaptive_block=true, shared=true))]
#[allow(clippy::too_many_arguments)]
pub fn trial_sizes<'py>(
    py: Python<'py>,
    boxes: Vec<BoxArgs<'py>>,
    origin: Vec<i64>,
    unit: Vec<usize>,
    chunks: Vec<Vec<usize>>,
    eb: f64,
    preset: &str,
    threads: Option<usize>,
    predictor: Option<&str>,
    adaptive_block: bool,
    shared: bool,
) -> PyResult<Vec<usize>> {
    let first = chunks.first().cloned().ok_or_else(|| PyValueError::new_err("chunks must name at least one chunk shape"))?;
    let cfg = config("abs", eb, preset, threads, predictor)?;
    let tiling = tiling(origin, unit, first)?;
    let options = LevelOptions { eb, adaptive_block, shared, measure: false };
    if holds_f32(&boxes) {
        trial_sizes_typed::<f32>(py, boxes, &tiling, &chunks, &cfg, &options)
    } else {
        trial_sizes_typed::<f64>(py, boxes, &tiling, &chunks, &cfg, &options)
    }
}

fn decode_chunks_typed<'py, T: Element + numpy::Element>(
    py: Python<'py>,
    chunks: &[(Vec<i64>, Vec<u8>)],
    codebooks: &[Vec<u8>],
    tiling: &Tiling,
    eb: f64,
    threads: Option<usize>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let chunk_refs: Vec<(Vec<i64>, &[u8])> = chunks.iter().map(|(i, b)| (i.clone(), b.as_slice())).collect();
    let books: Vec<&[u8]> = codebooks.iter().map(Vec::as_slice).collect();
    let decoded: Vec<Vec<T>> =
        py.detach(|| amrzip_codec::run_with_threads(threads, || amr::decode_chunks(&chunk_refs, &books, tiling, eb))).map_err(to_py)?;
    decoded.into_iter().map(|values| Ok(PyArray1::from_vec(py, values).reshape(tiling.chunk.clone())?.into_any())).collect()
}

/// decode_chunks(chunks, codebooks, origin, unit, chunk, eb, dtype) -> list[ndarray]
///
/// `chunks`: (chunk index, bytes) of chunks of one (level, field); `eb` the bound they were
/// quantized with. Returns each chunk decoded over its own extent (C order, indexed [i, j, k];
/// cells it does not store are NaN), all decoded in parallel.
#[pyfunction]
#[pyo3(signature = (chunks, codebooks, origin, unit, chunk, eb, dtype, threads=None))]
#[allow(clippy::too_many_arguments)]
pub fn decode_chunks<'py>(
    py: Python<'py>,
    chunks: Vec<(Vec<i64>, Vec<u8>)>,
    codebooks: Vec<Vec<u8>>,
    origin: Vec<i64>,
    unit: Vec<usize>,
    chunk: Vec<usize>,
    eb: f64,
    dtype: &str,
    threads: Option<usize>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let tiling = tiling(origin, unit, chunk)?;
    match dtype {
        "float32" => decode_chunks_typed::<f32>(py, &chunks, &codebooks, &tiling, eb, threads),
        "float64" => decode_chunks_typed::<f64>(py, &chunks, &codebooks, &tiling, eb, threads),
        d => Err(PyValueError::new_err(format!("unsupported dtype {d:?}"))),
    }
}
