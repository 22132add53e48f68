//! Bindings for the staging service's tables (`amrzip-staging`): `StagingCatalog` holds
//! everything the metadata server of `amrzip.stage` knows, and two functions give the
//! placement of Algorithm 1 and of a Hilbert-curve partition for benchmarks.

use amrzip_amr::IBox;
use amrzip_staging::{self as staging, BoxKey, Catalog, Hit, Record};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use std::sync::Mutex;

/// Most dservers `staging_simulate_placement` builds, against a mistyped count.
const MAX_SIMULATED_DSERVERS: usize = 1 << 24;
/// Most servers of `staging_hilbert_loads`: its grid has 16 to 16 x 2^ndim cells per server.
const MAX_HILBERT_SERVERS: usize = 1 << 20;

/// StagingCatalog(): the dservers and their workloads, the boxes of every timestep with where
/// their payloads are, and each timestep's polytree index. Thread-safe: every method runs
/// with the GIL released, one at a time.
#[pyclass(module = "amrzip._core", frozen)]
pub struct StagingCatalog {
    inner: Mutex<Catalog>,
}

fn key(timestep: u64, level: u32, lo: Vec<i64>, hi: Vec<i64>) -> BoxKey {
    BoxKey::new(timestep, level, lo, hi)
}

fn record_dict<'py>(py: Python<'py>, r: &Record) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("dserver", r.dserver)?;
    d.set_item("nbytes", r.nbytes)?;
    d.set_item("meta", PyBytes::new(py, &r.meta))?;
    Ok(d)
}

/// A query's answer in columns, gathered while the catalog is locked.
struct Columns {
    level: Vec<i32>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    dserver: Vec<i32>,
    nbytes: Vec<u64>,
    meta: Option<Vec<Vec<u8>>>,
}

impl Columns {
    fn new(hits: &[Hit<'_>], with_meta: bool) -> Columns {
        Columns {
            level: hits.iter().map(|h| h.level as i32).collect(),
            lo: hits.iter().flat_map(|h| h.bx.lo.iter().copied()).collect(),
            hi: hits.iter().flat_map(|h| h.bx.hi.iter().copied()).collect(),
            // Catalog ids stay below 2^31.
            dserver: hits.iter().map(|h| h.record.dserver as i32).collect(),
            nbytes: hits.iter().map(|h| h.record.nbytes).collect(),
            meta: with_meta.then(|| hits.iter().map(|h| h.record.meta.clone()).collect()),
        }
    }
}

impl StagingCatalog {
    /// Runs `f` on the catalog with the GIL released, so that other Python threads go on while
    /// it waits for the lock or works (an index build over 10^5 boxes takes a while).
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Catalog) -> R + Send) -> PyResult<R> {
        py.detach(|| {
            let mut c =
                self.inner.lock().map_err(|_| PyRuntimeError::new_err("the staging catalog was left inconsistent by an internal error"))?;
            Ok(f(&mut c))
        })
    }
}

#[pymethods]
impl StagingCatalog {
    #[new]
    fn new() -> Self {
        StagingCatalog { inner: Mutex::new(Catalog::new()) }
    }

    /// add_dserver(node, address, capacity) -> id: registers a data server (capacity in bytes,
    /// 0: unlimited); a known address is marked alive again with the new capacity.
    fn add_dserver(&self, py: Python<'_>, node: &str, address: &str, capacity: u64) -> PyResult<u32> {
        self.with(py, |c| c.add_dserver(node, address, capacity))?.map_err(PyValueError::new_err)
    }

    /// set_alive(id, alive): dead dservers take no new boxes.
    fn set_alive(&self, py: Python<'_>, id: u32, alive: bool) -> PyResult<()> {
        self.with(py, |c| c.set_alive(id, alive))?.map_err(PyValueError::new_err)
    }

    /// dservers() -> list of dicts: id, node, address, capacity, load (bytes of pending and
    /// committed records), alive, boxes (number of those records).
    fn dservers<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.with(py, |c| c.dservers())?
            .into_iter()
            .map(|s| {
                let d = PyDict::new(py);
                d.set_item("id", s.id)?;
                d.set_item("node", s.node)?;
                d.set_item("address", s.address)?;
                d.set_item("capacity", s.capacity)?;
                d.set_item("load", s.load)?;
                d.set_item("alive", s.alive)?;
                d.set_item("boxes", s.boxes)?;
                Ok(d)
            })
            .collect()
    }

    /// place(timestep, level, lo, hi, nbytes, meta, version=0) -> (dserver, old dserver or
    /// None): records pending write `version` of the box (writers racing on a box give
    /// different versions); `old` is the dserver of the committed copy it will replace when
    /// that copy is elsewhere.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (timestep, level, lo, hi, nbytes, meta, version=0))]
    fn place(
        &self,
        py: Python<'_>,
        timestep: u64,
        level: u32,
        lo: Vec<i64>,
        hi: Vec<i64>,
        nbytes: u64,
        meta: &[u8],
        version: u64,
    ) -> PyResult<(u32, Option<u32>)> {
        let k = key(timestep, level, lo, hi);
        self.with(py, |c| c.place(&k, version, nbytes, meta.to_vec()))?.map_err(PyValueError::new_err)
    }

    /// commit(timestep, level, lo, hi, version=0): that pending write becomes the box's record.
    #[pyo3(signature = (timestep, level, lo, hi, version=0))]
    fn commit(&self, py: Python<'_>, timestep: u64, level: u32, lo: Vec<i64>, hi: Vec<i64>, version: u64) -> PyResult<()> {
        let k = key(timestep, level, lo, hi);
        self.with(py, |c| c.commit(&k, version))?.map_err(PyValueError::new_err)
    }

    /// abort(timestep, level, lo, hi, version=0) -> bool: forgets that pending write (False:
    /// there was none).
    #[pyo3(signature = (timestep, level, lo, hi, version=0))]
    fn abort(&self, py: Python<'_>, timestep: u64, level: u32, lo: Vec<i64>, hi: Vec<i64>, version: u64) -> PyResult<bool> {
        let k = key(timestep, level, lo, hi);
        self.with(py, |c| c.abort(&k, version))
    }

    /// locate(timestep, level, lo, hi) -> dict (dserver, nbytes, meta) or None: the committed record.
    fn locate<'py>(&self, py: Python<'py>, timestep: u64, level: u32, lo: Vec<i64>, hi: Vec<i64>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let k = key(timestep, level, lo, hi);
        self.with(py, |c| c.locate(&k).cloned())?.map(|r| record_dict(py, &r)).transpose()
    }

    /// remove(timestep, level, lo, hi) -> dict or None: deletes the committed record.
    fn remove<'py>(&self, py: Python<'py>, timestep: u64, level: u32, lo: Vec<i64>, hi: Vec<i64>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let k = key(timestep, level, lo, hi);
        self.with(py, |c| c.remove(&k))?.map(|r| record_dict(py, &r)).transpose()
    }

    /// drop_timestep(timestep) -> list of (level, lo, hi, dserver): every record (committed or
    /// pending) the timestep had, for the dservers to delete.
    fn drop_timestep<'py>(&self, py: Python<'py>, timestep: u64) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.with(py, |c| c.drop_timestep(timestep))?
            .into_iter()
            .map(|(k, d)| (k.level, PyTuple::new(py, k.bx.lo)?, PyTuple::new(py, k.bx.hi)?, d).into_pyobject(py))
            .collect()
    }

    /// timesteps() -> sorted list of the timesteps known.
    fn timesteps(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |c| c.timesteps())
    }

    /// summary(timestep) -> dict: levels (committed boxes per level), bytes (per level),
    /// indexed (whether refinement ratios are known, so that queries work).
    fn summary<'py>(&self, py: Python<'py>, timestep: u64) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |c| c.summary(timestep))?.map_err(PyValueError::new_err)?;
        let d = PyDict::new(py);
        d.set_item("levels", s.boxes)?;
        d.set_item("bytes", s.bytes)?;
        d.set_item("indexed", s.indexed)?;
        d.set_item("ndim", s.ndim)?;
        Ok(d)
    }

    /// build_index(timestep, ratios, threads=0) -> dict: levels (boxes per level), edges,
    /// seconds. `ratios[l]` refines level l into l + 1 per axis; threads 0: one per core.
    #[pyo3(signature = (timestep, ratios, threads=0))]
    fn build_index<'py>(&self, py: Python<'py>, timestep: u64, ratios: Vec<Vec<i64>>, threads: usize) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |c| c.build_index(timestep, ratios, threads))?.map_err(PyValueError::new_err)?;
        let d = PyDict::new(py);
        d.set_item("levels", s.boxes)?;
        d.set_item("edges", s.edges)?;
        d.set_item("seconds", s.seconds)?;
        Ok(d)
    }

    /// query(timestep, lo, hi, level_min=0, level_max=None, method="polytree", with_meta=False)
    /// -> dict of arrays: level (int32), lo and hi (int64, [n, ndim]), dserver (int32), nbytes
    /// (uint64), and with_meta a list "meta" of bytes. The committed boxes of levels
    /// level_min..=level_max meeting the region lo..=hi (level-0 cells), by level and position
    /// in the level; "scan" tests every box instead of descending the polytree.
    #[pyo3(signature = (timestep, lo, hi, level_min=0, level_max=None, method="polytree", with_meta=false))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        timestep: u64,
        lo: Vec<i64>,
        hi: Vec<i64>,
        level_min: usize,
        level_max: Option<usize>,
        method: &str,
        with_meta: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let scan = match method {
            "polytree" => false,
            "scan" => true,
            m => return Err(PyValueError::new_err(format!("unknown query method {m:?} (expected 'polytree' or 'scan')"))),
        };
        let ndim = lo.len();
        let region = IBox::new(lo, hi);
        let level_max = level_max.unwrap_or(usize::MAX);
        let cols = self
            .with(py, |c| {
                let hits =
                    if scan { c.scan(timestep, &region, level_min, level_max) } else { c.query(timestep, &region, level_min, level_max) };
                hits.map(|h| Columns::new(&h, with_meta))
            })?
            .map_err(PyValueError::new_err)?;
        let n = cols.level.len();
        let d = PyDict::new(py);
        d.set_item("level", PyArray1::from_vec(py, cols.level))?;
        d.set_item("lo", PyArray1::from_vec(py, cols.lo).reshape([n, ndim])?)?;
        d.set_item("hi", PyArray1::from_vec(py, cols.hi).reshape([n, ndim])?)?;
        d.set_item("dserver", PyArray1::from_vec(py, cols.dserver))?;
        d.set_item("nbytes", PyArray1::from_vec(py, cols.nbytes))?;
        if let Some(meta) = cols.meta {
            let meta: Vec<Bound<'py, PyBytes>> = meta.iter().map(|m| PyBytes::new(py, m)).collect();
            d.set_item("meta", meta)?;
        }
        Ok(d)
    }

    /// to_bytes() -> bytes: a snapshot of the dservers, committed boxes and refinement ratios
    /// (docs/format.md, section 18).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.with(py, |c| c.to_bytes())?))
    }

    /// from_bytes(data) -> StagingCatalog: restores a snapshot (dservers alive, pending writes
    /// gone); ValueError saying what is wrong with a damaged one.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        let c = py.detach(|| Catalog::from_bytes(data)).map_err(PyValueError::new_err)?;
        Ok(StagingCatalog { inner: Mutex::new(c) })
    }
}

/// staging_simulate_placement(dservers_per_node, nbytes) -> uint64 array: the loads of the
/// dservers (numbered node by node) after Algorithm 1 places boxes of `nbytes` (uint64) in order.
#[pyfunction]
fn staging_simulate_placement<'py>(
    py: Python<'py>,
    dservers_per_node: Vec<usize>,
    nbytes: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let total = dservers_per_node.iter().try_fold(0usize, |a, &n| a.checked_add(n)).filter(|&t| t <= MAX_SIMULATED_DSERVERS);
    if total.is_none() {
        return Err(PyValueError::new_err(format!("at most {MAX_SIMULATED_DSERVERS} dservers can be simulated")));
    }
    let nbytes = nbytes.to_vec().map_err(|_| PyValueError::new_err("nbytes must be a 1-D uint64 array"))?;
    Ok(PyArray1::from_vec(py, py.detach(|| staging::simulate(&dservers_per_node, &nbytes))))
}

/// staging_hilbert_loads(lo, hi, nbytes, nservers) -> float64 array: the bytes per server of a
/// DataSpaces-style Hilbert-curve partition of the boxes' bounding box (lo and hi int64
/// [n, ndim] inclusive corners in one index space, nbytes float64 [n]); see
/// `amrzip_staging::hilbert::hilbert_loads`.
#[pyfunction]
fn staging_hilbert_loads<'py>(
    py: Python<'py>,
    lo: PyReadonlyArray2<'py, i64>,
    hi: PyReadonlyArray2<'py, i64>,
    nbytes: PyReadonlyArray1<'py, f64>,
    nservers: usize,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let (n, nd) = (lo.shape()[0], lo.shape()[1]);
    if hi.shape() != lo.shape() || nbytes.len() != n {
        return Err(PyValueError::new_err(format!(
            "lo {:?}, hi {:?} and nbytes [{}] must describe the same boxes",
            lo.shape(),
            hi.shape(),
            nbytes.len()
        )));
    }
    if !(1..=staging::MAX_DIMS).contains(&nd) {
        return Err(PyValueError::new_err(format!("boxes must have 1 to {} axes, not {nd}", staging::MAX_DIMS)));
    }
    if !(1..=MAX_HILBERT_SERVERS).contains(&nservers) {
        return Err(PyValueError::new_err(format!("nservers must be 1 to {MAX_HILBERT_SERVERS}")));
    }
    let (lo, hi) = (lo.as_array(), hi.as_array());
    let boxes: Vec<IBox> = (0..n).map(|i| IBox::new(lo.row(i).to_vec(), hi.row(i).to_vec())).collect();
    if let Some(i) = boxes.iter().position(IBox::is_empty) {
        return Err(PyValueError::new_err(format!("box {i} ({:?}..={:?}) is empty", boxes[i].lo, boxes[i].hi)));
    }
    let nbytes = nbytes.to_vec().map_err(|_| PyValueError::new_err("nbytes must be a 1-D float64 array"))?;
    Ok(PyArray1::from_vec(py, py.detach(|| staging::hilbert_loads(&boxes, &nbytes, nservers))))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StagingCatalog>()?;
    m.add_function(wrap_pyfunction!(staging_simulate_placement, m)?)?;
    m.add_function(wrap_pyfunction!(staging_hilbert_loads, m)?)?;
    Ok(())
}
