//! Chunked-stream encoder and decoder objects, and the helpers that build offline codebooks.

use crate::{config, to_bytes, to_py};
use amrzip_codec::{self as codec, DType, Element, Policy, StreamDecoder as Decoder, StreamEncoder as Encoder, Thresholds};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

fn dtype(name: &str) -> PyResult<DType> {
    match name {
        "float32" => Ok(DType::F32),
        "float64" => Ok(DType::F64),
        d => Err(PyValueError::new_err(format!("unsupported dtype {d:?} (expected 'float32' or 'float64')"))),
    }
}

fn policy(name: &str, keep: f64, rebuild: f64, interval: u64) -> PyResult<Policy> {
    match name {
        "adaptive" => Ok(Policy::Adaptive(Thresholds { keep, rebuild })),
        "rebuild" => Ok(Policy::Rebuild),
        "interval" => Ok(Policy::Interval(interval)),
        p => Err(PyValueError::new_err(format!("unknown codebook policy {p:?} (expected 'adaptive', 'rebuild' or 'interval')"))),
    }
}

fn slice<'a, T: Element + numpy::Element>(a: &'a PyReadonlyArrayDyn<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| PyValueError::new_err("array must be C-contiguous"))
}

/// StreamEncoder(dtype, bound_mode, bound, preset, threads, predictor, policy, keep, rebuild, interval)
#[pyclass(module = "amrzip._core")]
pub struct StreamEncoder {
    inner: Encoder,
    dtype: DType,
}

#[pymethods]
impl StreamEncoder {
    #[new]
    #[pyo3(signature = (dtype_name, bound_mode, bound, preset, threads, predictor, policy_name, keep, rebuild, interval))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dtype_name: &str,
        bound_mode: &str,
        bound: f64,
        preset: &str,
        threads: Option<usize>,
        predictor: Option<&str>,
        policy_name: &str,
        keep: f64,
        rebuild: f64,
        interval: u64,
    ) -> PyResult<Self> {
        let cfg = config(bound_mode, bound, preset, threads, predictor)?;
        let inner = Encoder::new(cfg, policy(policy_name, keep, rebuild, interval)?).map_err(to_py)?;
        Ok(StreamEncoder { inner, dtype: dtype(dtype_name)? })
    }

    /// encode(array) -> bytes: the next record.
    fn encode<'py>(&mut self, py: Python<'py>, array: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let inner = &mut self.inner;
        let out = match self.dtype {
            DType::F32 => {
                let a: PyReadonlyArrayDyn<f32> = array.extract()?;
                let (data, shape) = (slice(&a)?, a.shape().to_vec());
                py.detach(|| inner.encode(data, &shape))
            }
            DType::F64 => {
                let a: PyReadonlyArrayDyn<f64> = array.extract()?;
                let (data, shape) = (slice(&a)?, a.shape().to_vec());
                py.detach(|| inner.encode(data, &shape))
            }
        }
        .map_err(to_py)?;
        to_bytes(py, &out, self.inner.threads())
    }

    /// stats() -> dict of the encoder's choices so far.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        for (k, v) in [
            ("records", s.records),
            ("kept", s.kept),
            ("rebuilt", s.rebuilt),
            ("offline", s.offline),
            ("reselected", s.reselected),
            ("elements", s.elements),
            ("bytes_out", s.bytes_out),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

/// StreamDecoder(dtype, threads)
#[pyclass(module = "amrzip._core")]
pub struct StreamDecoder {
    inner: Decoder,
    dtype: DType,
}

fn to_array<T: Element + numpy::Element>(py: Python<'_>, (values, shape): (Vec<T>, Vec<usize>)) -> PyResult<Bound<'_, PyAny>> {
    Ok(PyArray1::from_vec(py, values)
        .reshape(shape.clone())
        .map_err(|e| crate::CorruptStreamError::new_err(format!("shape {shape:?} cannot be a numpy array: {e}")))?
        .into_any())
}

#[pymethods]
impl StreamDecoder {
    #[new]
    #[pyo3(signature = (dtype_name, threads=None))]
    fn new(dtype_name: &str, threads: Option<usize>) -> PyResult<Self> {
        Ok(StreamDecoder { inner: Decoder::new(threads), dtype: dtype(dtype_name)? })
    }

    /// decode(record) -> numpy.ndarray
    fn decode<'py>(&mut self, py: Python<'py>, record: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let inner = &mut self.inner;
        match self.dtype {
            DType::F32 => to_array(py, py.detach(|| inner.decode::<f32>(record)).map_err(to_py)?),
            DType::F64 => to_array(py, py.detach(|| inner.decode::<f64>(record)).map_err(to_py)?),
        }
    }
}

fn histogram_typed<T: Element + numpy::Element>(
    py: Python<'_>,
    a: PyReadonlyArrayDyn<'_, T>,
    cfg: &codec::Config,
    eb: f64,
) -> PyResult<Vec<u64>> {
    let (data, shape) = (slice(&a)?, a.shape().to_vec());
    py.detach(|| codec::symbol_histogram(data, &shape, cfg, eb)).map_err(to_py)
}

/// _symbol_histogram(array, abs_bound, preset) -> numpy uint64 array over the alphabet
#[pyfunction]
pub fn _symbol_histogram<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyAny>,
    abs_bound: f64,
    preset: &str,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let cfg = config("abs", abs_bound, preset, None, None)?;
    let h = match array.extract::<PyReadonlyArrayDyn<f32>>() {
        Ok(a) => histogram_typed(py, a, &cfg, abs_bound)?,
        Err(_) => histogram_typed::<f64>(py, array.extract()?, &cfg, abs_bound)?,
    };
    Ok(PyArray1::from_vec(py, h))
}

/// _offline_codebook_set([(id, name, histogram)]) -> bytes
#[pyfunction]
pub fn _offline_codebook_set<'py>(py: Python<'py>, books: Vec<(u8, String, Vec<u64>)>) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &codec::offline_codebook_set(&books))
}

/// _codebook_costs(histogram) -> (exact bits, exact table bytes, [(built-in id, bits)])
#[pyfunction]
pub fn _codebook_costs(histogram: Vec<u64>) -> (u64, usize, Vec<(u8, u64)>) {
    codec::codebook_costs(&histogram)
}

/// offline_codebooks() -> list of (id, name) built into the library
#[pyfunction]
pub fn offline_codebooks() -> Vec<(u8, String)> {
    codec::offline_codebooks()
}
