//! Chunked streams: the encoder of records (for the zarr codec), the container's writer and
//! reader over Python outputs and sources (`amrzip_store::chunked_stream`, behind
//! `amrzip.StreamCompressor` / `StreamDecompressor`), and the helpers that build offline
//! codebooks.

use crate::{config, info_dict, to_bytes, to_py};
use amrzip_codec::{self as codec, CodebookSource, DType, Element, EncoderStats, Policy, StreamEncoder as Encoder, Thresholds};
use amrzip_store::chunked_stream::{self as container, AtomicFile, StreamReader, StreamWriter};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

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
        stats_dict(py, self.inner.stats())
    }
}

/// The encoder's choices so far, as `StreamCompressor.stats()` reports them.
fn stats_dict<'py>(py: Python<'py>, s: &EncoderStats) -> PyResult<Bound<'py, PyDict>> {
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

fn to_array<T: Element + numpy::Element>(py: Python<'_>, (values, shape): (Vec<T>, Vec<usize>)) -> PyResult<Bound<'_, PyAny>> {
    Ok(PyArray1::from_vec(py, values)
        .reshape(shape.clone())
        .map_err(|e| crate::CorruptStreamError::new_err(format!("shape {shape:?} cannot be a numpy array: {e}")))?
        .into_any())
}

/// Container errors as Python sees them: damage as CorruptStreamError, arguments as ValueError,
/// and what a Python file raised as itself (PyO3 unwraps a PyErr carried in an io::Error).
fn container_error(e: container::Error) -> PyErr {
    match e {
        container::Error::Codec(e) => to_py(e),
        container::Error::Io(e) => e.into(),
    }
}

/// A Python binary file, called through its methods with the GIL taken for each call, so that
/// the container code runs with the GIL released around it.
struct PyFile(Py<PyAny>);

impl Read for PyFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Python::attach(|py| -> PyResult<usize> {
            let data = self.0.call_method1(py, "read", (buf.len(),))?;
            let data: Cow<[u8]> = data.extract(py)?;
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            Ok(n)
        })
        .map_err(io::Error::other)
    }
}

impl Write for PyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Python::attach(|py| -> PyResult<usize> {
            let written = self.0.call_method1(py, "write", (PyBytes::new(py, buf),))?;
            // A raw file may write part and say how much; a buffered one writes all (some
            // file-like objects return None).
            Ok(written.extract::<Option<usize>>(py)?.unwrap_or(buf.len()).min(buf.len()))
        })
        .map_err(io::Error::other)
    }

    /// The caller owns the file, and flushes or closes it when it wants.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for PyFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        Python::attach(|py| {
            let at = match pos {
                SeekFrom::Start(n) => self.0.call_method1(py, "seek", (n, 0))?,
                SeekFrom::Current(n) => self.0.call_method1(py, "seek", (n, 1))?,
                SeekFrom::End(n) => self.0.call_method1(py, "seek", (n, 2))?,
            };
            at.extract::<u64>(py)
        })
        .map_err(io::Error::other)
    }
}

/// Where a ChunkedWriter writes: memory (returned by finish), a file of its own, or a Python file.
enum Output {
    Memory(Vec<u8>),
    File(AtomicFile),
    Python(PyFile),
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Output::Memory(v) => v.write(buf),
            Output::File(f) => f.write(buf),
            Output::Python(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Memory(v) => v.flush(),
            Output::File(f) => f.flush(),
            Output::Python(f) => f.flush(),
        }
    }
}

enum Writer {
    F32(StreamWriter<f32, Output>),
    F64(StreamWriter<f64, Output>),
}

/// `$body` with `$w` bound to the writer, whatever its element type.
macro_rules! with_writer {
    ($writer:expr, $w:ident => $body:expr) => {
        match $writer {
            Writer::F32($w) => $body,
            Writer::F64($w) => $body,
        }
    };
}

/// ChunkedWriter(dtype, chunk, bound_mode, bound, preset, threads, predictor, policy, keep,
/// rebuild, interval, path=None, file=None): a chunked stream written to `path` (atomically),
/// to the Python binary `file`, or else to memory.
#[pyclass(module = "amrzip._core")]
pub struct ChunkedWriter {
    inner: Writer,
}

#[pymethods]
impl ChunkedWriter {
    #[new]
    #[pyo3(signature = (dtype_name, chunk, bound_mode, bound, preset, threads, predictor, policy_name, keep, rebuild, interval, path=None, file=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dtype_name: &str,
        chunk: Vec<usize>,
        bound_mode: &str,
        bound: f64,
        preset: &str,
        threads: Option<usize>,
        predictor: Option<&str>,
        policy_name: &str,
        keep: f64,
        rebuild: f64,
        interval: u64,
        path: Option<PathBuf>,
        file: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let (config, policy) = (config(bound_mode, bound, preset, threads, predictor)?, policy(policy_name, keep, rebuild, interval)?);
        let out = match (path, file) {
            (Some(path), _) => Output::File(AtomicFile::create(path)?),
            (None, Some(file)) => Output::Python(PyFile(file)),
            (None, None) => Output::Memory(Vec::new()),
        };
        let inner = match dtype(dtype_name)? {
            DType::F32 => Writer::F32(StreamWriter::new(out, &chunk, config, policy).map_err(container_error)?),
            DType::F64 => Writer::F64(StreamWriter::new(out, &chunk, config, policy).map_err(container_error)?),
        };
        Ok(ChunkedWriter { inner })
    }

    /// write(array): a C-contiguous array of the stream's dtype in native byte order.
    fn write(&mut self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
        match &mut self.inner {
            Writer::F32(w) => {
                let a: PyReadonlyArrayDyn<f32> = array.extract()?;
                let (data, shape) = (slice(&a)?, a.shape().to_vec());
                py.detach(|| w.write(data, &shape))
            }
            Writer::F64(w) => {
                let a: PyReadonlyArrayDyn<f64> = array.extract()?;
                let (data, shape) = (slice(&a)?, a.shape().to_vec());
                py.detach(|| w.write(data, &shape))
            }
        }
        .map_err(container_error)
    }

    /// finish() -> bytes for a stream written to memory, else None (a path is then in place).
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        with_writer!(&mut self.inner, w => py.detach(|| w.finish())).map_err(container_error)?;
        match with_writer!(&mut self.inner, w => w.get_mut()) {
            Output::Memory(v) => Ok(Some(PyBytes::new(py, &std::mem::take(v)))),
            Output::File(f) => Ok(py.detach(|| f.commit()).map(|()| None)?),
            Output::Python(_) => Ok(None),
        }
    }

    /// abandon(): an unfinished stream written to a path leaves no file.
    fn abandon(&mut self) -> PyResult<()> {
        if let Output::File(f) = with_writer!(&mut self.inner, w => w.get_mut()) {
            f.discard()?;
        }
        Ok(())
    }

    #[getter]
    fn records(&self) -> u64 {
        with_writer!(&self.inner, w => w.records())
    }

    #[getter]
    fn elements(&self) -> u64 {
        with_writer!(&self.inner, w => w.elements())
    }

    #[getter]
    fn bytes_written(&self) -> u64 {
        with_writer!(&self.inner, w => w.bytes_written())
    }

    /// stats() -> dict of the encoder's choices so far.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, with_writer!(&self.inner, w => w.stats()))
    }
}

/// Where a ChunkedReader reads from.
enum Source {
    Memory(Cursor<Vec<u8>>),
    File(BufReader<File>),
    Python(PyFile),
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Memory(c) => c.read(buf),
            Source::File(f) => f.read(buf),
            Source::Python(f) => f.read(buf),
        }
    }
}

impl Seek for Source {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match self {
            Source::Memory(c) => c.seek(pos),
            Source::File(f) => f.seek(pos),
            Source::Python(f) => f.seek(pos),
        }
    }
}

/// The bytes a Python file holds past where it stands, if it can tell (a pipe cannot).
fn bytes_left(file: &Bound<'_, PyAny>) -> Option<u64> {
    let size = || -> PyResult<Option<u64>> {
        if !file.call_method0("seekable")?.is_truthy()? {
            return Ok(None);
        }
        let here: u64 = file.call_method0("tell")?.extract()?;
        let end: u64 = file.call_method1("seek", (0, 2))?.extract()?;
        file.call_method1("seek", (here,))?;
        Ok(Some(end.saturating_sub(here)))
    };
    size().ok().flatten()
}

/// A chunked stream read record by record: ChunkedReader.open(path), .from_bytes(data) or
/// .from_file(binary file), each with threads=None.
#[pyclass(module = "amrzip._core")]
pub struct ChunkedReader {
    inner: StreamReader<Source>,
}

#[pymethods]
impl ChunkedReader {
    #[staticmethod]
    #[pyo3(signature = (path, threads=None))]
    fn open(path: PathBuf, threads: Option<usize>) -> PyResult<Self> {
        let inner = StreamReader::seekable(Source::File(BufReader::new(File::open(path)?)), threads).map_err(container_error)?;
        Ok(ChunkedReader { inner })
    }

    #[staticmethod]
    #[pyo3(signature = (data, threads=None))]
    fn from_bytes(data: &[u8], threads: Option<usize>) -> PyResult<Self> {
        let inner = StreamReader::seekable(Source::Memory(Cursor::new(data.to_vec())), threads).map_err(container_error)?;
        Ok(ChunkedReader { inner })
    }

    #[staticmethod]
    #[pyo3(signature = (file, threads=None))]
    fn from_file(file: &Bound<'_, PyAny>, threads: Option<usize>) -> PyResult<Self> {
        let left = bytes_left(file);
        let inner = StreamReader::new(Source::Python(PyFile(file.clone().unbind())), left, threads).map_err(container_error)?;
        Ok(ChunkedReader { inner })
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype().name()
    }

    /// next_chunk() -> the next record decoded, or None after the last (all checked).
    fn next_chunk<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let inner = &mut self.inner;
        match inner.dtype() {
            DType::F32 => py.detach(|| inner.next_chunk::<f32>()).map_err(container_error)?.map(|c| to_array(py, c)).transpose(),
            DType::F64 => py.detach(|| inner.next_chunk::<f64>()).map_err(container_error)?.map(|c| to_array(py, c)).transpose(),
        }
    }

    /// next_record() -> the next record's bytes (an amrzip stream, checked but not decoded), or
    /// None after the last.
    fn next_record<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let inner = &mut self.inner;
        let record = py.detach(|| inner.next_record()).map_err(container_error)?;
        Ok(record.map(|r| PyBytes::new(py, &r.bytes)))
    }

    /// declared_counts() -> (records, elements) as the end block states them, from the end of
    /// the source without reading the records.
    fn declared_counts(&mut self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let inner = &mut self.inner;
        py.detach(|| inner.declared_counts()).map_err(container_error)
    }

    /// describe() -> dict: the stream's structure from every record's header, read and checked
    /// but not decoded; `per_record` holds each record's `info` with its offset in the stream.
    fn describe<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &mut self.inner;
        let d = py.detach(|| inner.describe()).map_err(container_error)?;
        let per_record = d
            .records
            .iter()
            .map(|r| {
                let info = info_dict(py, &r.info)?;
                info.set_item("offset", r.offset)?;
                Ok(info)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let out = PyDict::new(py);
        out.set_item("format", "chunked")?;
        out.set_item("dtype", d.dtype.name())?;
        out.set_item("shape", d.shape())?;
        out.set_item("records", d.records.len())?;
        out.set_item("chunk_shape", d.chunk_shape().unwrap_or_default())?;
        for key in ["mode", "bound_mode", "bound"] {
            out.set_item(key, per_record.first().map(|first| first.get_item(key)).transpose()?.flatten())?;
        }
        out.set_item("abs_bound_range", d.abs_bound_range().map(|(lo, hi)| [lo, hi]))?;
        let predictors = PyDict::new(py);
        for (name, n) in d.records_per_predictor() {
            predictors.set_item(name, n)?;
        }
        out.set_item("records_per_predictor", predictors)?;
        let codebooks = PyDict::new(py);
        for (source, n) in d.codebooks() {
            let kind = match source {
                CodebookSource::Inline => "new",
                CodebookSource::Previous => "kept",
                CodebookSource::Offline => "built-in",
                CodebookSource::Contexts => "in context",
            };
            codebooks.set_item(kind, n)?;
        }
        out.set_item("codebooks", codebooks)?;
        out.set_item("compressed_size", d.size)?;
        out.set_item("original_size", d.original_size())?;
        out.set_item("ratio", d.original_size() as f64 / d.size as f64)?;
        out.set_item("per_record", PyList::new(py, per_record)?)?;
        Ok(out)
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
