//! Bindings for multiresolution (HZ) snapshots: writing arrays or a coalesced AMR hierarchy,
//! reading at a resolution, over a region, or progressively. `python/amrzip/multires.py` turns
//! user arguments (fractions, slices, rules) into these calls.

use crate::store::{spec, store_err, PySource};
use crate::variables::bound_of;
use amrzip_codec::Element;
use amrzip_hz::{Geometry, ResolutionMap};
use amrzip_store::multires::{self, FieldInput, MultiresSnapshot, Owned, Progressive};
use amrzip_store::{self as store, ErrorKind};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// A level `drop` levels below the finest.
fn below(g: &Geometry, drop: u32) -> u32 {
    g.levels().saturating_sub(drop)
}

/// The resolution map of `keep` (see `amrzip.multires.write`) over arrays of `shape`; the
/// threshold rules read `values`.
fn keep_map(keep: &Bound<'_, PyDict>, shape: &[usize], values: Option<&Owned>) -> PyResult<ResolutionMap> {
    let get = |k: &str| keep.get_item(k).ok().flatten();
    let tile: usize = get("tile").map(|v| v.extract()).transpose()?.unwrap_or(16);
    let g = Geometry::new(shape, amrzip_store::multires::DEFAULT_BLOCK_BITS).map_err(PyValueError::new_err)?;
    let elsewhere = below(&g, get("elsewhere").map(|v| v.extract()).transpose()?.unwrap_or(0));
    let pad = 3 - g.dims();
    let mut regions = Vec::new();
    if let Some(list) = get("regions") {
        for r in list.extract::<Vec<(Vec<usize>, Vec<usize>, u32)>>()? {
            if r.0.len() != g.dims() || r.1.len() != g.dims() {
                return Err(PyValueError::new_err(format!("region {:?}..{:?} has not the arrays' {} axes", r.0, r.1, g.dims())));
            }
            let (mut lo, mut hi) = ([0usize; 3], [1usize; 3]);
            lo[pad..].copy_from_slice(&r.0);
            hi[pad..].copy_from_slice(&r.1);
            regions.push((lo, hi, below(&g, r.2)));
        }
    }
    let rules: Vec<(f64, u32)> = get("thresholds")
        .map(|v| v.extract::<Vec<(f64, u32)>>())
        .transpose()?
        .unwrap_or_default()
        .into_iter()
        .map(|(t, d)| (t, below(&g, d)))
        .collect();
    let by_values = match (values, rules.is_empty()) {
        (_, true) => None,
        (Some(Owned::F32(v)), false) => Some(ResolutionMap::from_thresholds(&g, v, tile, elsewhere, &rules)),
        (Some(Owned::F64(v)), false) => Some(ResolutionMap::from_thresholds(&g, v, tile, elsewhere, &rules)),
        (None, false) => return Err(PyValueError::new_err("threshold rules need the field they apply to")),
    };
    let by_regions = ResolutionMap::from_regions(&g, tile, elsewhere, &regions).map_err(PyValueError::new_err)?;
    Ok(match by_values.transpose().map_err(PyValueError::new_err)? {
        None => by_regions,
        Some(m) => {
            let levels = m.levels().iter().zip(by_regions.levels()).map(|(a, b)| *a.max(b)).collect();
            ResolutionMap::new(&g, tile, levels).map_err(PyValueError::new_err)?
        }
    })
}

fn owned(a: &Bound<'_, PyAny>) -> PyResult<(Owned, Vec<usize>)> {
    fn values<T: numpy::Element + Copy>(a: &PyReadonlyArrayDyn<T>) -> Vec<T> {
        a.as_slice().map(|s| s.to_vec()).unwrap_or_else(|_| a.as_array().iter().copied().collect())
    }
    if let Ok(a) = a.extract::<PyReadonlyArrayDyn<f32>>() {
        return Ok((Owned::F32(values(&a)), a.shape().to_vec()));
    }
    if let Ok(a) = a.extract::<PyReadonlyArrayDyn<f64>>() {
        return Ok((Owned::F64(values(&a)), a.shape().to_vec()));
    }
    Err(PyValueError::new_err("arrays must be float32 or float64"))
}

fn summaries<'py>(py: Python<'py>, s: &[multires::FieldSummary]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for f in s {
        let d = PyDict::new(py);
        d.set_item("name", &f.name)?;
        d.set_item("raw_bytes", f.raw_bytes)?;
        d.set_item("stored_bytes", f.stored_bytes)?;
        d.set_item("abs_bound", f.abs_bound)?;
        d.set_item("blocks_stored", f.blocks_stored)?;
        d.set_item("blocks", f.blocks)?;
        out.append(d)?;
    }
    Ok(out)
}

fn attributes(text: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("attributes: {e}")))
}

/// write_multires_arrays(path, name, fields, block_bits, attributes_json, keep=None, keep_field=None,
/// threads=None, progress=None): fields are dicts {name, array, mode, bound}.
#[pyfunction]
#[pyo3(signature = (path, name, fields, block_bits, attributes_json, keep=None, keep_field=None, threads=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn write_multires_arrays<'py>(
    py: Python<'py>,
    path: PathBuf,
    name: &str,
    fields: Vec<Bound<'py, PyDict>>,
    block_bits: u32,
    attributes_json: &str,
    keep: Option<Bound<'py, PyDict>>,
    keep_field: Option<usize>,
    threads: Option<usize>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let attrs = attributes(attributes_json)?;
    let item = |d: &Bound<'py, PyDict>, k: &str| d.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("field without {k:?}")));
    let mut specs = Vec::new();
    for d in &fields {
        specs.push((
            item(d, "name")?.extract::<String>()?,
            item(d, "array")?.unbind(),
            bound_of(&item(d, "mode")?.extract::<String>()?, item(d, "bound")?.extract()?)?,
        ));
    }
    // One map for every field, from the rule's field's values.
    let map = match &keep {
        None => None,
        Some(k) => {
            let (values, shape) = match keep_field {
                Some(i) => {
                    let (v, s) = owned(specs.get(i).ok_or_else(|| PyValueError::new_err("no such field for the rule"))?.1.bind(py))?;
                    (Some(v), s)
                }
                None => (None, owned(specs[0].1.bind(py))?.1),
            };
            Some(keep_map(k, &shape, values.as_ref())?)
        }
    };
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut next = |i: usize| -> store::Result<FieldInput> {
            Python::attach(|py| -> PyResult<FieldInput> {
                if let Some(cb) = &progress {
                    cb.call1(py, (i,))?;
                }
                let (values, shape) = owned(specs[i].1.bind(py))?;
                Ok(FieldInput { name: specs[i].0.clone(), values, shape, bound: specs[i].2, map: map.clone(), attributes: Value::Null })
            })
            .map_err(|e| {
                let m = e.to_string();
                raised = Some(e);
                store::Error::new(ErrorKind::Interrupted, m)
            })
        };
        multires::write(&path, name, specs.len(), &mut next, block_bits, attrs, threads)
    });
    if let Some(e) = raised {
        return Err(e);
    }
    summaries(py, &result.map_err(store_err)?)
}

/// write_multires_hierarchy(path, name, spec, boxes, convert, block_bits, attributes_json, threads=None,
/// progress=None): every field of the hierarchy coalesced into one HZ array.
#[pyfunction]
#[pyo3(signature = (path, name, spec, boxes, convert, block_bits, attributes_json, threads=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn write_multires_hierarchy<'py>(
    py: Python<'py>,
    path: PathBuf,
    name: &str,
    spec: &Bound<'py, PyDict>,
    boxes: Py<PyAny>,
    convert: Py<PyAny>,
    block_bits: u32,
    attributes_json: &str,
    threads: Option<usize>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let spec = self::spec(spec)?;
    let attrs = attributes(attributes_json)?;
    let source = PySource::new(&spec, boxes, convert, None, threads);
    let result = py.detach(|| {
        let mut next = |i: usize| -> store::Result<FieldInput> {
            if let Some(cb) = &progress {
                Python::attach(|py| cb.call1(py, (i,)).map(|_| ())).map_err(|e| source.keep(e))?;
            }
            let f = &spec.fields[i];
            let (values, shape, map, levels) = match f.dtype {
                amrzip_codec::DType::F32 => {
                    let c = multires::coalesce::<f32>(&spec, &source, i, block_bits)?;
                    (Owned::F32(c.values), c.shape, c.map, c.hz_levels)
                }
                amrzip_codec::DType::F64 => {
                    let c = multires::coalesce::<f64>(&spec, &source, i, block_bits)?;
                    (Owned::F64(c.values), c.shape, c.map, c.hz_levels)
                }
            };
            let bound = match f.mode {
                amrzip_store::metadata::BoundMode::Abs => multires::Bound::Abs(f.bound),
                amrzip_store::metadata::BoundMode::Rel => multires::Bound::Rel(f.bound),
            };
            let cells: usize = spec.levels.iter().flat_map(|l| &l.boxes).map(|b| b.cells().unwrap_or(0)).sum();
            let attributes = serde_json::json!({"amr_levels": levels, "amr_cells": cells, "index_order": "x-first"});
            Ok(FieldInput { name: f.name.clone(), values, shape, bound, map: Some(map), attributes })
        };
        multires::write(&path, name, spec.fields.len(), &mut next, block_bits, attrs, threads)
    });
    if let Some(e) = source.raised() {
        return Err(e);
    }
    summaries(py, &result.map_err(store_err)?)
}

/// hz_efficiency(shape, block_bits, keep) -> {efficiency, primary, secondary, written, blocks}:
/// IDX's storage efficiency for the points `keep` (as `write_multires_arrays` takes it, regions
/// only) stores, in blocks of 2^block_bits points.
#[pyfunction]
fn hz_efficiency<'py>(py: Python<'py>, shape: Vec<usize>, block_bits: u32, keep: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    let map = keep_map(&keep, &shape, None)?;
    let e = py.detach(|| amrzip_hz::resolution::efficiency(&shape, block_bits, Some(&map))).map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    d.set_item("efficiency", e.ratio())?;
    d.set_item("primary", e.primary)?;
    d.set_item("secondary", e.secondary)?;
    d.set_item("written", e.written)?;
    d.set_item("blocks", e.blocks)?;
    Ok(d)
}

/// The kind of snapshot `name` (default: the latest) of the store: "amr", "variables" or
/// "multires".
#[pyfunction]
#[pyo3(signature = (store_path, name=None))]
fn snapshot_kind(py: Python<'_>, store_path: PathBuf, name: Option<String>) -> PyResult<&'static str> {
    py.detach(|| {
        Ok(match store::Store::open(&store_path)?.find(name.as_deref())?.holds() {
            store::Holds::Multires => "multires",
            store::Holds::Variables => "variables",
            store::Holds::Amr => "amr",
        })
    })
    .map_err(store_err)
}

/// A multiresolution snapshot opened for reading.
#[pyclass(module = "amrzip._core", frozen)]
pub struct MultiresReader {
    inner: Arc<MultiresSnapshot>,
    threads: Option<usize>,
}

fn array<'py, T: Element + numpy::Element>(py: Python<'py>, (values, shape): (Vec<T>, Vec<usize>)) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyArray1::from_vec(py, values).reshape(shape)?.into_any())
}

type Region = Option<(Vec<usize>, Vec<usize>)>;

fn region_ref(r: &Region) -> Option<(&[usize], &[usize])> {
    r.as_ref().map(|(a, b)| (&a[..], &b[..]))
}

#[pymethods]
impl MultiresReader {
    #[staticmethod]
    #[pyo3(signature = (store_path, name=None, threads=None))]
    fn latest(py: Python<'_>, store_path: PathBuf, name: Option<String>, threads: Option<usize>) -> PyResult<Self> {
        let inner = py.detach(|| MultiresSnapshot::open_in(&store_path, name.as_deref())).map_err(store_err)?;
        Ok(MultiresReader { inner: Arc::new(inner), threads })
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn path(&self) -> String {
        self.inner.path.to_string_lossy().into_owned()
    }

    #[getter]
    fn fields(&self) -> Vec<String> {
        self.inner.fields().into_iter().map(String::from).collect()
    }

    #[getter]
    fn bytes_read(&self) -> u64 {
        self.inner.bytes_read()
    }

    /// The fields' descriptions and the snapshot's attributes, as JSON text.
    #[getter]
    fn meta_json(&self) -> String {
        let fields: Vec<&Value> = (0..self.inner.fields().len()).map(|f| self.inner.doc(f)).collect();
        serde_json::json!({"fields": fields, "attributes": self.inner.attributes()}).to_string()
    }

    /// Stored bytes of each HZ level of field `field` (block 0's at its finest level).
    fn level_bytes(&self, field: usize) -> Vec<u64> {
        self.inner.hz_index(field).level_bytes()
    }

    /// read(field, level, region=None) -> ndarray of the field at HZ level `level`.
    #[pyo3(signature = (field, level, region=None))]
    fn read<'py>(&self, py: Python<'py>, field: usize, level: u32, region: Region) -> PyResult<Bound<'py, PyAny>> {
        let s = &self.inner;
        match s.hz_index(field).dtype {
            amrzip_codec::DType::F32 => {
                array(py, py.detach(|| s.read::<f32>(field, level, region_ref(&region), self.threads)).map_err(store_err)?)
            }
            amrzip_codec::DType::F64 => {
                array(py, py.detach(|| s.read::<f64>(field, level, region_ref(&region), self.threads)).map_err(store_err)?)
            }
        }
    }

    /// progressive(field, top, region=None) -> a read that refines up to level `top`.
    #[pyo3(signature = (field, top, region=None))]
    fn progressive(&self, field: usize, top: u32, region: Region) -> PyResult<ProgressiveRead> {
        let s = &self.inner;
        let state = match s.hz_index(field).dtype {
            amrzip_codec::DType::F32 => State::F32(s.start(field, top, region_ref(&region)).map_err(store_err)?),
            amrzip_codec::DType::F64 => State::F64(s.start(field, top, region_ref(&region)).map_err(store_err)?),
        };
        Ok(ProgressiveRead { snapshot: self.inner.clone(), threads: self.threads, state })
    }
}

enum State {
    F32(Progressive<f32>),
    F64(Progressive<f64>),
}

/// A progressive read: each `refine(level)` reads and decodes only the blocks it adds.
#[pyclass(module = "amrzip._core")]
pub struct ProgressiveRead {
    snapshot: Arc<MultiresSnapshot>,
    threads: Option<usize>,
    state: State,
}

#[pymethods]
impl ProgressiveRead {
    fn refine<'py>(&mut self, py: Python<'py>, level: u32) -> PyResult<Bound<'py, PyAny>> {
        let (s, threads) = (&self.snapshot, self.threads);
        match &mut self.state {
            State::F32(p) => array(py, py.detach(|| s.refine(p, level, threads)).map_err(store_err)?),
            State::F64(p) => array(py, py.detach(|| s.refine(p, level, threads)).map_err(store_err)?),
        }
    }

    #[getter]
    fn top(&self) -> u32 {
        match &self.state {
            State::F32(p) => p.top(),
            State::F64(p) => p.top(),
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(write_multires_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(write_multires_hierarchy, m)?)?;
    m.add_function(wrap_pyfunction!(snapshot_kind, m)?)?;
    m.add_function(wrap_pyfunction!(hz_efficiency, m)?)?;
    m.add_class::<MultiresReader>()?;
    m.add_class::<ProgressiveRead>()?;
    Ok(())
}
