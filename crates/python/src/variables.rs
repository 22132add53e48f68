//! Bindings for `amrzip_store::variables`: plain n-D variables written by many ranks
//! (`amrzip.parallel.Writer`) and read back (`amrzip.parallel.open_variables`).

use crate::store::{dtype, store_err, PyCollective};
use amrzip_codec::{DType, Element, Preset};
use amrzip_store::parallel::{Collective, Serial};
use amrzip_store::variables::{self as vars, Put, ReadMethod, Variable, VariablesOptions};
use amrzip_store::Values;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

/// A bound given as its kind (`"abs"` or `"rel"`) and value.
pub(crate) fn bound_of(kind: &str, value: f64) -> PyResult<vars::Bound> {
    match kind {
        "abs" => Ok(vars::Bound::Abs(value)),
        "rel" => Ok(vars::Bound::Rel(value)),
        k => Err(PyValueError::new_err(format!("bound kind must be 'abs' or 'rel', got {k:?}"))),
    }
}

/// A variable as Python describes it: (name, dtype, shape, chunks, "abs"|"rel", bound, fill).
type VariableArgs = (String, String, Vec<usize>, Vec<usize>, String, f64, f64);
/// A variable as the writer settled it: (name, dtype, shape, chunks).
type VariableShape = (String, &'static str, Vec<usize>, Vec<usize>);

fn preset(mode: &str) -> PyResult<Preset> {
    match mode {
        "ratio" => Ok(Preset::Ratio),
        "speed" => Ok(Preset::Speed),
        m => Err(PyValueError::new_err(format!("mode must be 'ratio' or 'speed', got {m:?}"))),
    }
}

fn with_comm<R>(py: Python<'_>, comm: Option<Py<PyAny>>, work: impl FnOnce(&dyn Collective) -> R + Send) -> PyResult<R>
where
    R: Send,
{
    let comm = PyCollective::from_py(py, comm)?;
    Ok(py.detach(|| match &comm {
        Some(c) => work(c),
        None => work(&Serial),
    }))
}

fn summary_dict<'py>(py: Python<'py>, s: &vars::VariablesSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", s.path.to_string_lossy().as_ref())?;
    d.set_item("stored_bytes", s.stored_bytes)?;
    d.set_item("original_bytes", s.variables.iter().map(|v| v.original_bytes).sum::<u64>())?;
    let per = PyDict::new(py);
    for v in &s.variables {
        let e = PyDict::new(py);
        e.set_item("abs_bound", v.abs_bound)?;
        e.set_item("chunks", v.chunks)?;
        e.set_item("original_bytes", v.original_bytes)?;
        e.set_item("stored_bytes", v.stored_bytes)?;
        per.set_item(&v.name, e)?;
    }
    d.set_item("variables", per)?;
    Ok(d)
}

/// VariablesWriter(path, name, variables, mode, aggregate, threads=None, comm=None)
///
/// A snapshot of variables being written by every rank of `comm` (this process alone when
/// None); `variables` lists (name, dtype, shape, chunks, "abs"|"rel", bound, fill). Creating,
/// `flush` and `close` are collective.
#[pyclass(module = "amrzip._core")]
pub struct VariablesWriter {
    inner: Option<vars::VariablesWriter>,
}

impl VariablesWriter {
    fn writer(&mut self) -> PyResult<&mut vars::VariablesWriter> {
        self.inner.as_mut().ok_or_else(|| PyValueError::new_err("the writer is closed"))
    }
}

#[pymethods]
impl VariablesWriter {
    #[new]
    #[pyo3(signature = (path, name, variables, mode, aggregate, threads=None, comm=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        name: &str,
        variables: Vec<VariableArgs>,
        mode: &str,
        aggregate: bool,
        threads: Option<usize>,
        comm: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let variables = variables
            .into_iter()
            .map(|(name, dt, shape, chunks, kind, bound, fill)| {
                Ok(Variable { name, dtype: dtype(&dt)?, shape, chunks, bound: bound_of(&kind, bound)?, fill })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let options = VariablesOptions { preset: preset(mode)?, aggregate, threads };
        let w = with_comm(py, comm, |c| vars::VariablesWriter::create(c, &path, name, variables, options))?.map_err(store_err)?;
        Ok(VariablesWriter { inner: Some(w) })
    }

    /// The variables with their chunk shapes: list of (name, dtype, shape, chunks).
    fn variables(&mut self) -> PyResult<Vec<VariableShape>> {
        Ok(self.writer()?.variables().iter().map(|v| (v.name.clone(), v.dtype.name(), v.shape.clone(), v.chunks.clone())).collect())
    }

    /// Raises ValueError unless a put of `len` values of `dtype` at (start, shape) fits variable
    /// `var` and touches no chunk an earlier flush wrote.
    fn check_put(&mut self, var: usize, start: Vec<usize>, shape: Vec<usize>, len: usize, dtype: &str) -> PyResult<()> {
        let dt = self::dtype(dtype)?;
        self.writer()?.check_put(var, &start, &shape, len, dt).map_err(store_err)
    }

    /// flush(puts, comm=None) -> dict: `puts` lists (variable number, start, C-contiguous array
    /// of the variable's dtype). Collective.
    #[pyo3(signature = (puts, comm=None))]
    fn flush<'py>(
        &mut self,
        py: Python<'py>,
        puts: Vec<(usize, Vec<usize>, Bound<'py, PyAny>)>,
        comm: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        enum Held<'py> {
            F32(PyReadonlyArrayDyn<'py, f32>),
            F64(PyReadonlyArrayDyn<'py, f64>),
        }
        let held: Vec<(usize, Vec<usize>, Vec<usize>, Held)> = puts
            .iter()
            .map(|(v, start, a)| {
                let held = match a.extract::<PyReadonlyArrayDyn<f32>>() {
                    Ok(x) => Held::F32(x),
                    Err(_) => Held::F64(a.extract::<PyReadonlyArrayDyn<f64>>()?),
                };
                let shape = match &held {
                    Held::F32(x) => x.shape().to_vec(),
                    Held::F64(x) => x.shape().to_vec(),
                };
                Ok((*v, start.clone(), shape, held))
            })
            .collect::<PyResult<_>>()?;
        let not_contiguous = |_| PyValueError::new_err("a put's array must be C-contiguous");
        let puts: Vec<Put> = held
            .iter()
            .map(|(var, start, shape, h)| {
                let values = match h {
                    Held::F32(x) => Values::F32(x.as_slice().map_err(not_contiguous)?),
                    Held::F64(x) => Values::F64(x.as_slice().map_err(not_contiguous)?),
                };
                Ok(Put { var: *var, start: start.clone(), shape: shape.clone(), values })
            })
            .collect::<PyResult<_>>()?;
        let w = self.writer()?;
        let report = with_comm(py, comm, |c| w.flush(c, &puts))?.map_err(store_err)?;
        let d = PyDict::new(py);
        d.set_item("chunks", report.chunks)?;
        d.set_item("rounds", report.rounds)?;
        d.set_item("sent_bytes", report.sent)?;
        Ok(d)
    }

    /// close(comm=None) -> dict: writes the metadata and commits (collective).
    #[pyo3(signature = (comm=None))]
    fn close<'py>(&mut self, py: Python<'py>, comm: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        let w = self.inner.take().ok_or_else(|| PyValueError::new_err("the writer is closed"))?;
        let s = with_comm(py, comm, |c| w.close(c))?.map_err(store_err)?;
        summary_dict(py, &s)
    }

    /// Drops the snapshot being written (nothing is committed).
    fn abandon(&mut self) {
        self.inner = None;
    }
}

/// VariablesFile(path, snapshot=None, file=False): a snapshot of variables opened for reading
/// (`path` a store and `snapshot` a name, default the latest; or `file=True` and `path` the
/// snapshot file).
#[pyclass(module = "amrzip._core")]
pub struct VariablesFile {
    inner: vars::VariablesFile,
}

fn to_array<'py, T: Element + numpy::Element>(py: Python<'py>, values: Vec<T>, shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyArray1::from_vec(py, values).reshape(shape.to_vec())?.into_any())
}

#[pymethods]
impl VariablesFile {
    #[new]
    #[pyo3(signature = (path, snapshot=None, file=false))]
    fn new(py: Python<'_>, path: PathBuf, snapshot: Option<String>, file: bool) -> PyResult<Self> {
        let inner = py
            .detach(|| if file { vars::VariablesFile::open(&path) } else { vars::VariablesFile::open_in(&path, snapshot.as_deref()) })
            .map_err(store_err)?;
        Ok(VariablesFile { inner })
    }

    /// list of dicts: name, dtype, shape, chunks, abs_bound, fill, chunks_written, stored_bytes.
    fn variables<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (i, v) in self.inner.variables.iter().enumerate() {
            let (written, stored) = self.inner.stored(i);
            let d = PyDict::new(py);
            d.set_item("name", &v.var.name)?;
            d.set_item("dtype", v.var.dtype.name())?;
            d.set_item("shape", v.var.shape.clone())?;
            d.set_item("chunks", v.var.chunks.clone())?;
            d.set_item("abs_bound", v.abs_bound)?;
            d.set_item("fill", v.var.fill)?;
            d.set_item("chunks_written", written)?;
            d.set_item("stored_bytes", stored)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// read(name, start, shape, threads=None) -> array: this process alone.
    #[pyo3(signature = (name, start, shape, threads=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        start: Vec<usize>,
        shape: Vec<usize>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self.inner.find(name).map_err(store_err)?;
        match self.inner.variables[v].var.dtype {
            DType::F32 => to_array(py, py.detach(|| self.inner.read::<f32>(v, &start, &shape, threads)).map_err(store_err)?, &shape),
            DType::F64 => to_array(py, py.detach(|| self.inner.read::<f64>(v, &start, &shape, threads)).map_err(store_err)?, &shape),
        }
    }

    /// read_collective(name, start, shape, comm, method=None) -> (array, method): every rank of
    /// `comm` at once, each its own region; `method` "collective", "independent" or None (chosen
    /// by overlap).
    #[pyo3(signature = (name, start, shape, comm, method=None))]
    fn read_collective<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        start: Vec<usize>,
        shape: Vec<usize>,
        comm: Option<Py<PyAny>>,
        method: Option<&str>,
    ) -> PyResult<(Bound<'py, PyAny>, &'static str)> {
        let method = match method {
            None => None,
            Some("collective") => Some(ReadMethod::Collective),
            Some("independent") => Some(ReadMethod::Independent),
            Some(m) => return Err(PyValueError::new_err(format!("method must be 'collective', 'independent' or None, got {m:?}"))),
        };
        let v = self.inner.find(name).map_err(store_err)?;
        let label = |m| match m {
            ReadMethod::Collective => "collective",
            ReadMethod::Independent => "independent",
        };
        match self.inner.variables[v].var.dtype {
            DType::F32 => {
                let (values, m) =
                    with_comm(py, comm, |c| self.inner.read_collective::<f32>(c, v, &start, &shape, method))?.map_err(store_err)?;
                Ok((to_array(py, values, &shape)?, label(m)))
            }
            DType::F64 => {
                let (values, m) =
                    with_comm(py, comm, |c| self.inner.read_collective::<f64>(c, v, &start, &shape, method))?.map_err(store_err)?;
                Ok((to_array(py, values, &shape)?, label(m)))
            }
        }
    }
}
