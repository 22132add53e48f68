//! Bindings for `amrzip-store`: writing a snapshot from numpy box arrays, reading one back,
//! listing and checking stores, and decoding a store chunk for zarr-python. The Python package
//! (`python/amrzip/store/`) turns hierarchies and user arguments into these calls.

use crate::CorruptStreamError;
use amrzip_amr::{IBox, Layout};
use amrzip_codec::{DType, PredictorKind, Preset};
use amrzip_store::metadata::{dtype_name, BoundMode};
use amrzip_store::zarr_codec::{ChunkValues, ZarrCodec};
use amrzip_store::{self as store, Covered, ErrorKind};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{PyFileExistsError, PyKeyError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

create_exception!(
    _core,
    StoreError,
    CorruptStreamError,
    "The store is missing, damaged or not an amrzip store; the message names the file."
);

pub(crate) fn store_err(e: store::Error) -> PyErr {
    match e.kind {
        ErrorKind::Invalid | ErrorKind::Interrupted => PyValueError::new_err(e.message),
        ErrorKind::Corrupt | ErrorKind::NotAStore => StoreError::new_err(e.message),
        ErrorKind::Exists => PyFileExistsError::new_err(e.message),
        ErrorKind::NotFound => PyKeyError::new_err(e.message),
        ErrorKind::Io => PyOSError::new_err(e.message),
    }
}

fn ibox(b: (Vec<i64>, Vec<i64>)) -> IBox {
    IBox::new(b.0, b.1)
}

fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    d.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("missing {key:?}")))?.extract().map_err(Into::into)
}

pub(crate) fn dtype(name: &str) -> PyResult<DType> {
    match name {
        "float32" => Ok(DType::F32),
        "float64" => Ok(DType::F64),
        d => Err(PyValueError::new_err(format!("the store keeps float32 and float64 fields, not {d}"))),
    }
}

pub(crate) fn spec(s: &Bound<'_, PyDict>) -> PyResult<store::SnapshotSpec> {
    let fields: Vec<Bound<PyDict>> = get(s, "fields")?;
    let fields = fields
        .iter()
        .map(|f| {
            let mode: String = get(f, "mode")?;
            Ok(store::FieldSpec {
                name: get(f, "name")?,
                dtype: dtype(&get::<String>(f, "dtype")?)?,
                mode: BoundMode::from_name(&mode)
                    .ok_or_else(|| PyValueError::new_err(format!("bound mode must be 'rel' or 'abs', got {mode:?}")))?,
                bound: get(f, "bound")?,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let levels: Vec<Bound<PyDict>> = get(s, "levels")?;
    let levels = levels
        .iter()
        .map(|l| {
            Ok(store::LevelSpec {
                domain: ibox(get(l, "domain")?),
                ref_ratio: get(l, "ref_ratio")?,
                dx: get(l, "dx")?,
                boxes: get::<Vec<(Vec<i64>, Vec<i64>)>>(l, "boxes")?.into_iter().map(ibox).collect(),
                owners: get(l, "owners")?,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let source: String = get(s, "source")?;
    Ok(store::SnapshotSpec {
        node: get(s, "node")?,
        fields,
        levels,
        prob_lo: get(s, "prob_lo")?,
        prob_hi: get(s, "prob_hi")?,
        coord_sys: get(s, "coord_sys")?,
        time: get(s, "time")?,
        step: get(s, "step")?,
        source: serde_json::from_str(&source).map_err(|e| PyValueError::new_err(format!("source is not JSON: {e}")))?,
    })
}

fn options(o: &Bound<'_, PyDict>) -> PyResult<store::WriteOptions> {
    let preset = match get::<String>(o, "mode")?.as_str() {
        "ratio" => Preset::Ratio,
        "speed" => Preset::Speed,
        m => return Err(PyValueError::new_err(format!("mode must be 'ratio' or 'speed', got {m:?}"))),
    };
    let predictor = get::<Option<String>>(o, "predictor")?
        .map(|p| PredictorKind::from_name(&p).ok_or_else(|| PyValueError::new_err(format!("unknown predictor {p:?}"))))
        .transpose()?;
    Ok(store::WriteOptions {
        preset,
        unit: get(o, "unit")?,
        chunk: get(o, "chunk")?,
        threads: get(o, "threads")?,
        predictor,
        shared_tables: get(o, "sle")?,
        adaptive_block: get(o, "adaptive_block")?,
        conserve_mean: get(o, "conserve_mean")?,
    })
}

/// Where one box's values are: `n` values of the field's dtype from address `at`, in `layout`,
/// inside an array or buffer held for the write. Arrays are held, not taken as numpy read-only
/// borrows: the borrow checker keeps every borrowed view of one base array in a list it scans on
/// each borrow, and a level's boxes are often views of one buffer (a memory-mapped plotfile, a
/// level array cut into boxes), which made borrowing them quadratic (8,000 views of one array:
/// 0.33 s against 0.06 s for copies). The writer only reads them.
struct Span {
    at: usize,
    n: usize,
    layout: Layout,
    /// The values are in the other byte order (a file's), to be swapped as they are copied.
    swapped: bool,
}

impl Span {
    /// Whether the writer must copy the values: misaligned (f32 and f64 align to their size), or
    /// in the other byte order.
    fn copied(&self, dtype: DType) -> bool {
        self.swapped || !self.at.is_multiple_of(dtype.size())
    }
}

/// A box's values copied, aligned and in the machine's byte order. Memory-mapped plotfiles give
/// misaligned boxes (a FAB's values follow a text header of any length), and files written on
/// another machine the other byte order. Copied by numpy one by one through `convert`, under the
/// GIL, they held a two-thread write from a plotfile to one thread's speed (a 128^3 Nyx-like
/// plotfile in the `speed` preset: 2.05 s either way); copied here, on the write's threads, two
/// threads take 1.30 s.
enum Copied {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Copied {
    /// # Safety
    /// `span` holds its values of `dtype`, at any alignment, not written meanwhile.
    unsafe fn of(dtype: DType, span: &Span) -> Copied {
        // Read as byte arrays, which align to 1; in one pass, swapped or not.
        macro_rules! copy {
            ($float:ty, $bits:ty, $size:literal) => {{
                let bytes = unsafe { std::slice::from_raw_parts(span.at as *const [u8; $size], span.n) };
                let value = |b: &[u8; $size]| <$bits>::from_ne_bytes(*b);
                match span.swapped {
                    false => bytes.iter().map(|b| <$float>::from_bits(value(b))).collect(),
                    true => bytes.iter().map(|b| <$float>::from_bits(value(b).swap_bytes())).collect(),
                }
            }};
        }
        match dtype {
            DType::F32 => Copied::F32(copy!(f32, u32, 4)),
            DType::F64 => Copied::F64(copy!(f64, u64, 8)),
        }
    }
}

/// Box values as the writer takes them: what holds them, where each box's values are, and the
/// ghost widths of every box (empty: none).
type Spans<'py> = (Vec<Bound<'py, PyAny>>, Vec<Span>, Vec<usize>);

/// Box values from a Python function `boxes(level, field)`, called with the GIL held: a list of
/// arrays, or where every box's values sit in a few buffers (see `buffer_spans`). What it gives
/// stays held while the writer works on it without the GIL. An array that is not of the field's
/// dtype in native byte order and C- or Fortran-contiguous is passed through
/// `convert(array, field)` first (a misaligned one is copied, see `Copied`); every array must
/// have its box's shape. An exception either raises is kept to be raised again, and stops the
/// write.
pub(crate) struct PySource {
    boxes: Py<PyAny>,
    convert: Py<PyAny>,
    dtypes: Vec<DType>,
    names: Vec<String>,
    /// Per level, the shape of each box.
    shapes: Vec<Vec<Vec<usize>>>,
    /// The write's threads (misaligned arrays are copied on them).
    threads: Option<usize>,
    raised: Mutex<Option<PyErr>>,
}

impl PySource {
    /// The boxes of `spec` this rank holds (all of them when `rank` is None).
    pub(crate) fn new(
        spec: &store::SnapshotSpec,
        boxes: Py<PyAny>,
        convert: Py<PyAny>,
        rank: Option<i64>,
        threads: Option<usize>,
    ) -> PySource {
        PySource {
            boxes,
            convert,
            dtypes: spec.fields.iter().map(|f| f.dtype).collect(),
            names: spec.fields.iter().map(|f| f.name.clone()).collect(),
            shapes: spec
                .levels
                .iter()
                .map(|l| {
                    l.boxes
                        .iter()
                        .zip(l.owners.iter().map(Some).chain(std::iter::repeat(None)))
                        .filter(|(_, o)| rank.is_none() || *o == rank.as_ref())
                        .map(|(b, _)| b.shape())
                        .collect()
                })
                .collect(),
            threads,
            raised: Mutex::new(None),
        }
    }

    /// The exception a callback raised, if any (to raise again once the write has stopped).
    pub(crate) fn raised(self) -> Option<PyErr> {
        self.raised.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn keep(&self, e: PyErr) -> store::Error {
        let message = e.to_string();
        self.raised.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
        store::Error::new(ErrorKind::Interrupted, message)
    }

    /// Box `i`'s array `a` as the writer takes it, converted if need be: the array to hold and
    /// where its values are.
    fn borrow<'py>(&self, a: Bound<'py, PyAny>, level: usize, field: usize, i: usize) -> PyResult<(Bound<'py, PyAny>, Span)> {
        // The array, its values' span and its shape, if the writer can take it as it is.
        fn ready<'py, T: numpy::Element>(a: &Bound<'py, PyAny>) -> Option<(Bound<'py, PyAny>, Span, Vec<usize>)> {
            let array = a.cast::<PyArrayDyn<T>>().ok()?;
            let layout = if array.is_c_contiguous() {
                Layout::C
            } else if array.is_fortran_contiguous() {
                Layout::Fortran
            } else {
                return None;
            };
            let span = Span { at: array.data() as usize, n: array.len(), layout, swapped: false };
            Some((array.clone().into_any(), span, array.shape().to_vec()))
        }
        let take = |a: &Bound<'py, PyAny>| match self.dtypes[field] {
            DType::F32 => ready::<f32>(a),
            DType::F64 => ready::<f64>(a),
        };
        let (held, span, shape) = match take(&a) {
            Some(ready) => ready,
            None => {
                let converted = self.convert.bind(a.py()).call1((a, field))?;
                take(&converted).ok_or_else(|| {
                    let name = &self.names[field];
                    PyValueError::new_err(format!(
                        "level {level} field {name:?} box {i}: not a C- or Fortran-contiguous array of the field's dtype after conversion"
                    ))
                })?
            }
        };
        let want = &self.shapes[level][i];
        if &shape != want {
            let name = &self.names[field];
            return Err(PyValueError::new_err(format!(
                "level {level} field {name:?} box {i}: data of shape {shape:?}, box of shape {want:?}"
            )));
        }
        Ok((held, span))
    }

    /// The spans of the box arrays `got` (a list), each converted if need be, and what holds them.
    fn array_spans<'py>(&self, got: &Bound<'py, PyAny>, level: usize, field: usize) -> PyResult<Spans<'py>> {
        let arrays: Vec<Bound<PyAny>> = got.extract()?;
        if arrays.len() != self.shapes[level].len() {
            let (name, n) = (&self.names[field], self.shapes[level].len());
            return Err(PyValueError::new_err(format!("level {level} field {name:?}: data for {} boxes, {n} declared", arrays.len())));
        }
        let (held, spans) = arrays.into_iter().enumerate().map(|(i, a)| self.borrow(a, level, field, i)).collect::<PyResult<_>>()?;
        Ok((held, spans, Vec::new()))
    }

    /// The spans of every box in buffers, from `(buffers, buffer number per box, byte offset per
    /// box, "F" or "C", ghost width per dimension, whether the values are in the other byte
    /// order)` (see `Level.raw_loader`), each checked to lie inside its buffer; and the ghost
    /// widths, the same for every box.
    fn buffer_spans<'py>(&self, got: &Bound<'py, PyTuple>, level: usize, field: usize) -> PyResult<Spans<'py>> {
        let name = &self.names[field];
        let bad = |what: String| PyValueError::new_err(format!("level {level} field {name:?}: {what}"));
        type Raw<'py> =
            (Vec<Bound<'py, PyAny>>, numpy::PyReadonlyArray1<'py, i64>, numpy::PyReadonlyArray1<'py, i64>, String, Vec<usize>, bool);
        let (buffers, which, offsets, order, ghost, swapped): Raw<'py> =
            got.extract().map_err(|e| bad(format!("not (buffers, buffer per box, offset per box, order, ghost widths, swapped): {e}")))?;
        let layout = match order.as_str() {
            "F" => Layout::Fortran,
            "C" => Layout::C,
            o => return Err(bad(format!("order {o:?}, not \"F\" or \"C\""))),
        };
        let extents = buffers
            .iter()
            .enumerate()
            .map(|(k, b)| {
                let a = b.cast::<PyArray1<u8>>().ok().filter(|a| a.is_c_contiguous());
                a.map(|a| (a.data() as usize, a.len())).ok_or_else(|| bad(format!("buffer {k} is not a contiguous 1-D uint8 array")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (which, offsets) = (which.as_slice()?, offsets.as_slice()?);
        let shapes = &self.shapes[level];
        if which.len() != shapes.len() || offsets.len() != shapes.len() {
            return Err(bad(format!("{} buffer numbers and {} offsets for {} boxes", which.len(), offsets.len(), shapes.len())));
        }
        let size = self.dtypes[field].size();
        let spans = (0..shapes.len())
            .map(|i| {
                if ghost.len() != shapes[i].len() {
                    return Err(bad(format!("ghost widths {ghost:?} for a {}-dimensional box", shapes[i].len())));
                }
                // The box grown by its ghost cells, as the buffer holds it.
                let n = shapes[i]
                    .iter()
                    .zip(&ghost)
                    .try_fold(1usize, |n, (&e, &g)| g.checked_mul(2).and_then(|g| g.checked_add(e)).and_then(|e| e.checked_mul(n)))
                    .ok_or_else(|| bad(format!("box {i}: ghost widths {ghost:?} too large")))?;
                let (w, off) = (which[i], offsets[i]);
                let &(at, len) = usize::try_from(w)
                    .ok()
                    .and_then(|w| extents.get(w))
                    .ok_or_else(|| bad(format!("box {i}: buffer {w}, of {}", extents.len())))?;
                let inside =
                    usize::try_from(off).ok().filter(|&o| n.checked_mul(size).and_then(|b| b.checked_add(o)).is_some_and(|e| e <= len));
                let off =
                    inside.ok_or_else(|| bad(format!("box {i}: {n} values from byte {off} do not fit in buffer {w} of {len} bytes")))?;
                Ok(Span { at: at + off, n, layout, swapped })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok((buffers, spans, ghost))
    }
}

impl store::BoxSource for PySource {
    fn with_boxes(&self, level: usize, field: usize, f: &mut dyn FnMut(&[store::BoxData]) -> store::Result<()>) -> store::Result<()> {
        Python::attach(|py| {
            let got = self.boxes.bind(py).call1((level, field)).map_err(|e| self.keep(e))?;
            // What the spans point into, held until the writer returns.
            let (_held, spans, ghost) = match got.cast::<PyTuple>() {
                Ok(t) => self.buffer_spans(t, level, field),
                Err(_) => self.array_spans(&got, level, field),
            }
            .map_err(|e| self.keep(e))?;
            let dtype = self.dtypes[field];
            let copies: Vec<Option<Copied>> = if !spans.iter().any(|s| s.copied(dtype)) {
                Vec::new()
            } else {
                py.detach(|| {
                    amrzip_codec::run_with_threads(self.threads, || {
                        // SAFETY: every span lies in an array or buffer held in `_held`; the
                        // writer never writes to them.
                        Ok(spans.par_iter().map(|s| s.copied(dtype).then(|| unsafe { Copied::of(dtype, s) })).collect())
                    })
                })
                .map_err(|e| self.keep(PyValueError::new_err(e.to_string())))?
            };
            let data: Vec<store::BoxData> = spans
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    // SAFETY: aligned and in native order (else copied above), at least one
                    // value (a box has a cell), inside what `_held` holds until the writer
                    // returns, never written.
                    let values = match (copies.get(i).and_then(Option::as_ref), dtype) {
                        (Some(Copied::F32(v)), _) => store::Values::F32(v),
                        (Some(Copied::F64(v)), _) => store::Values::F64(v),
                        (None, DType::F32) => store::Values::F32(unsafe { std::slice::from_raw_parts(s.at as *const f32, s.n) }),
                        (None, DType::F64) => store::Values::F64(unsafe { std::slice::from_raw_parts(s.at as *const f64, s.n) }),
                    };
                    store::BoxData { values, layout: s.layout, ghost: ghost.clone() }
                })
                .collect();
            let work = OnSameThread(|| f(&data));
            py.detach(move || work.run())
        })
    }
}

/// A closure that `Python::detach` may run although it is not `Send`: detach runs it on the
/// calling thread (it only releases the GIL meanwhile), and what it borrows (the writer's
/// state, slices of arrays and buffers held until the call returns) touches no Python object.
struct OnSameThread<F>(F);
// Safety: see above; the value never leaves the thread that made it.
unsafe impl<F> Send for OnSameThread<F> {}

impl<R, F: FnOnce() -> R> OnSameThread<F> {
    fn run(self) -> R {
        (self.0)()
    }
}

/// A process group from Python: an object with `rank`, `size` and the methods
/// `all_gather(bytes) -> list[bytes]`, `exchange(data, lengths) -> (uint8 array, lengths)` (the
/// messages to each rank one after another, and what came from each) and
/// `write_at(path, offset, bytes)` (`amrzip.parallel`'s adapter of an mpi4py communicator).
pub(crate) struct PyCollective {
    comm: Py<PyAny>,
    rank: usize,
    size: usize,
}

impl PyCollective {
    pub(crate) fn from_py(py: Python<'_>, comm: Option<Py<PyAny>>) -> PyResult<Option<PyCollective>> {
        comm.map(|c| {
            let (rank, size) = (c.getattr(py, "rank")?.extract(py)?, c.getattr(py, "size")?.extract(py)?);
            Ok(PyCollective { comm: c, rank, size })
        })
        .transpose()
    }

    fn call<'py, A: pyo3::call::PyCallArgs<'py>>(
        py: Python<'py>,
        comm: &Py<PyAny>,
        method: &str,
        args: A,
    ) -> store::Result<Bound<'py, PyAny>> {
        comm.bind(py).call_method1(method, args).map_err(|e| store::Error::new(ErrorKind::Io, format!("{method}: {e}")))
    }

    fn byte_lists(list: Bound<PyAny>, method: &str) -> store::Result<Vec<Vec<u8>>> {
        let items: Vec<Bound<PyBytes>> = list.extract().map_err(|e| store::Error::new(ErrorKind::Io, format!("{method} returned {e}")))?;
        Ok(items.iter().map(|b| b.as_bytes().to_vec()).collect())
    }
}

impl store::parallel::Collective for PyCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_gather(&self, bytes: Vec<u8>) -> store::Result<Vec<Vec<u8>>> {
        Python::attach(|py| Self::byte_lists(Self::call(py, &self.comm, "all_gather", (PyBytes::new(py, &bytes),))?, "all_gather"))
    }
    fn exchange(&self, to: Vec<Vec<u8>>) -> store::Result<Vec<Vec<u8>>> {
        Python::attach(|py| {
            // One buffer each way (the messages one after another, and their lengths): the
            // bytes are copied once into Python and once out.
            let total = to.iter().map(Vec::len).sum();
            let data = PyBytes::new_with(py, total, |buf| {
                let mut at = 0;
                for m in &to {
                    buf[at..at + m.len()].copy_from_slice(m);
                    at += m.len();
                }
                Ok(())
            })
            .map_err(|e| store::Error::new(ErrorKind::Io, format!("exchange: {e}")))?;
            let lengths: Vec<usize> = to.iter().map(Vec::len).collect();
            drop(to);
            let got = Self::call(py, &self.comm, "exchange", (data, lengths))?;
            let bad = |e: PyErr| store::Error::new(ErrorKind::Io, format!("exchange returned {e}"));
            let (data, lengths): (Bound<PyAny>, Vec<usize>) = got.extract().map_err(bad)?;
            let data: numpy::PyReadonlyArray1<u8> = data.extract().map_err(bad)?;
            let data = data.as_slice().map_err(|e| store::Error::new(ErrorKind::Io, format!("exchange returned {e}")))?;
            if lengths.iter().sum::<usize>() != data.len() {
                return Err(store::Error::new(ErrorKind::Io, "exchange returned lengths that do not add up to its data"));
            }
            let mut at = 0;
            Ok(lengths
                .iter()
                .map(|&n| {
                    at += n;
                    data[at - n..at].to_vec()
                })
                .collect())
        })
    }
    fn write_at(&self, path: &std::path::Path, offset: u64, bytes: &[u8]) -> store::Result<()> {
        Python::attach(|py| {
            Self::call(py, &self.comm, "write_at", (path.to_string_lossy().as_ref(), offset, PyBytes::new(py, bytes))).map(|_| ())
        })
    }
}

/// write_snapshot(path, name, spec, boxes, options, progress=None, comm=None) -> dict
///
/// `spec`: fields (name, dtype, mode, bound), levels (domain, ref_ratio, dx, boxes, owners),
/// node, prob_lo, prob_hi, coord_sys, time, step, source (JSON text). `boxes(level, field)`
/// returns the field's arrays for every box of the level, indexed [i, j, k], of the box's
/// shape; `convert(array, field)` makes one of them C- or Fortran-contiguous, aligned, of the
/// field's dtype in native byte order, when it is not. `progress(level, field)` is called as
/// each starts. An exception any of them raises stops the write, and is raised again. With
/// `comm` (see `PyCollective`), every rank of it calls this at once: `spec` lists every rank's
/// boxes, `owners` the rank of each, and `boxes` returns this rank's arrays only.
#[pyfunction]
#[pyo3(signature = (path, name, spec, boxes, convert, options, progress=None, comm=None))]
#[allow(clippy::too_many_arguments)]
pub fn write_snapshot<'py>(
    py: Python<'py>,
    path: PathBuf,
    name: &str,
    spec: &Bound<'py, PyDict>,
    boxes: Py<PyAny>,
    convert: Py<PyAny>,
    options: &Bound<'py, PyDict>,
    progress: Option<Py<PyAny>>,
    comm: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let spec = self::spec(spec)?;
    let opts = self::options(options)?;
    let comm = PyCollective::from_py(py, comm)?;
    let rank = comm.as_ref().map(|c| c.rank as i64);
    let source = PySource::new(&spec, boxes, convert, rank, opts.threads);
    // Raw bytes per (level, field): before a large one, the write hands its freed pages back.
    let raw: Vec<Vec<u64>> = spec.levels.iter().map(|l| spec.fields.iter().map(|f| l.raw_bytes(f.dtype)).collect()).collect();
    let result = py.detach(|| {
        let mut report = |level: usize, field: usize| -> store::Result<()> {
            if raw[level][field] >= crate::RELEASE_AFTER_BYTES {
                crate::release_freed_pages();
            }
            let Some(cb) = &progress else { return Ok(()) };
            Python::attach(|py| cb.call1(py, (level, field)).map(|_| ())).map_err(|e| source.keep(e))
        };
        match &comm {
            Some(c) => store::write_snapshot_parallel(c, &path, name, &spec, &source, &opts, &mut report),
            None => store::write_snapshot(&path, name, &spec, &source, &opts, &mut report),
        }
    });
    if let Some(e) = source.raised() {
        return Err(e);
    }
    let summary = result.map_err(store_err)?;
    let d = PyDict::new(py);
    d.set_item("snapshot", &summary.snapshot)?;
    d.set_item("path", summary.path.to_string_lossy().as_ref())?;
    let levels = PyList::empty(py);
    for (l, fields) in summary.fields.iter().enumerate() {
        let per_field = PyDict::new(py);
        for (f, s) in fields.iter().enumerate() {
            let stats = stats_dict(py, &s.stats)?;
            stats.set_item("unit", s.unit)?;
            stats.set_item("chunk", s.chunk)?;
            stats.set_item("predictor", &s.predictor)?;
            per_field.set_item(&spec.fields[f].name, stats)?;
        }
        let level = PyDict::new(py);
        level.set_item("level", l)?;
        level.set_item("fields", per_field)?;
        levels.append(level)?;
    }
    d.set_item("levels", levels)?;
    d.set_item("original_bytes", summary.original_bytes)?;
    d.set_item("stored_bytes", summary.stored_bytes)?;
    Ok(d)
}

fn stats_dict<'py>(py: Python<'py>, s: &store::array::FieldStats) -> PyResult<Bound<'py, PyDict>> {
    let stats = PyDict::new(py);
    stats.set_item("stored_cells", s.stored_cells)?;
    stats.set_item("blocks", s.blocks)?;
    stats.set_item("partial_blocks", s.partial_blocks)?;
    stats.set_item("chunks", s.chunks)?;
    stats.set_item("original_bytes", s.original_bytes)?;
    stats.set_item("stored_bytes", s.stored_bytes)?;
    Ok(stats)
}

/// A level for `simulate_owners`: (domain, ref_ratio, boxes, holders).
type SimulatedLevel = ((Vec<i64>, Vec<i64>), Vec<i64>, Vec<(Vec<i64>, Vec<i64>)>, Vec<i64>);

/// simulate_owners(levels, node, ranks) -> (cells owned per rank, cells moved)
///
/// `levels`: per level (domain, ref_ratio, boxes, holders), boxes as (lo, hi). What a parallel
/// write's chunk owner assignment would give with `ranks` ranks (see
/// `amrzip_store::parallel::simulate_owners`), for scaling studies past the machine at hand.
#[pyfunction]
pub fn simulate_owners(py: Python<'_>, levels: Vec<SimulatedLevel>, node: Vec<bool>, ranks: usize) -> PyResult<(Vec<f64>, u64)> {
    if ranks == 0 || levels.iter().any(|l| l.2.len() != l.3.len() || l.3.iter().any(|&h| h < 0 || h as usize >= ranks)) {
        return Err(PyValueError::new_err("every box needs a holder among the ranks, and ranks must be >= 1"));
    }
    let levels: Vec<store::parallel::SimulatedLevel> = levels
        .into_iter()
        .map(|(domain, ref_ratio, boxes, holders)| store::parallel::SimulatedLevel {
            domain: ibox(domain),
            ref_ratio,
            boxes: boxes.into_iter().map(ibox).collect(),
            holders,
        })
        .collect();
    Ok(py.detach(|| store::parallel::simulate_owners(&levels, &node, ranks)))
}

/// check(path, repair) -> JSON text of the report (see `amrzip_store::check::check`).
#[pyfunction]
pub fn check(py: Python<'_>, path: PathBuf, repair: bool) -> PyResult<String> {
    py.detach(|| store::check::check(&path, repair)).map(|v| v.to_string()).map_err(store_err)
}

/// check_snapshot_name(name): raises ValueError unless `name` can name a snapshot.
#[pyfunction]
pub fn check_snapshot_name(name: &str) -> PyResult<()> {
    store::layout::check_snapshot_name(name).map_err(store_err)
}

/// snapshots(path) -> list of (name, path): the committed snapshots, oldest first.
#[pyfunction]
pub fn snapshots(path: PathBuf) -> PyResult<Vec<(String, String)>> {
    let s = store::Store::open(&path).map_err(store_err)?;
    Ok(s.snapshots().map_err(store_err)?.into_iter().map(|e| (e.name, e.path.to_string_lossy().into_owned())).collect())
}

fn covered(name: &str) -> PyResult<Covered> {
    match name {
        "average" => Ok(Covered::Average),
        "nan" => Ok(Covered::Nan),
        c => Err(PyValueError::new_err(format!("covered must be 'average' or 'nan', got {c:?}"))),
    }
}

/// Snapshot(path): the snapshot file (or version-1 folder) at `path`, opened for reading.
/// `Snapshot.latest(store, name=None)` opens one of a store by name.
#[pyclass(module = "amrzip._core", frozen)]
pub struct Snapshot {
    inner: Arc<store::Snapshot>,
}

impl Snapshot {
    fn array<'py, T: store::reader::Value + numpy::Element>(
        py: Python<'py>,
        values: Vec<T>,
        shape: Vec<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyArray1::from_vec(py, values).reshape(shape)?.into_any())
    }
}

#[pymethods]
impl Snapshot {
    #[new]
    #[pyo3(signature = (path, threads=None))]
    fn new(py: Python<'_>, path: PathBuf, threads: Option<usize>) -> PyResult<Self> {
        let inner = py
            .detach(|| store::SnapshotEntry::at(&path).and_then(|e| store::Snapshot::open(&e)?.with_threads(threads)))
            .map_err(store_err)?;
        Ok(Snapshot { inner: Arc::new(inner) })
    }

    #[staticmethod]
    #[pyo3(signature = (store_path, name=None, threads=None))]
    fn latest(py: Python<'_>, store_path: PathBuf, name: Option<String>, threads: Option<usize>) -> PyResult<Self> {
        let inner = py.detach(|| store::Snapshot::open_in(&store_path, name.as_deref())?.with_threads(threads)).map_err(store_err)?;
        Ok(Snapshot { inner: Arc::new(inner) })
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn path(&self) -> String {
        self.inner.path.to_string_lossy().into_owned()
    }

    /// The metadata as JSON text, boxes as [lo, hi] lists.
    #[getter]
    fn meta_json(&self) -> String {
        self.inner.meta.to_plain_json().to_string()
    }

    #[getter]
    fn bytes_read(&self) -> u64 {
        self.inner.bytes_read()
    }

    /// Every byte the snapshot takes in the store.
    #[getter]
    fn stored_bytes(&self) -> u64 {
        self.inner.stored_bytes()
    }

    /// read(field, level, lo, hi, covered, whole_chunks) -> ndarray over the region.
    #[allow(clippy::too_many_arguments)]
    fn read<'py>(
        &self,
        py: Python<'py>,
        field: usize,
        level: usize,
        lo: Vec<i64>,
        hi: Vec<i64>,
        covered: &str,
        whole_chunks: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (covered, region) = (self::covered(covered)?, IBox::new(lo, hi));
        let shape = region.shape();
        let s = &self.inner;
        match s.meta.dtypes.get(field) {
            Some(DType::F32) => {
                Self::array(py, py.detach(|| s.read::<f32>(field, level, &region, covered, whole_chunks)).map_err(store_err)?, shape)
            }
            _ => Self::array(py, py.detach(|| s.read::<f64>(field, level, &region, covered, whole_chunks)).map_err(store_err)?, shape),
        }
    }

    /// read_boxes(field, level) -> [[ndarray per box] per level from `level` to the finest],
    /// covered cells averaged down (see `store::Snapshot::read_boxes`).
    fn read_boxes<'py>(&self, py: Python<'py>, field: usize, level: usize) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
        fn arrays<'py, T: store::reader::Value + numpy::Element>(
            py: Python<'py>,
            s: &store::Snapshot,
            field: usize,
            level: usize,
        ) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
            let levels = py.detach(|| s.read_boxes::<T>(field, level)).map_err(store_err)?;
            levels
                .into_iter()
                .zip(&s.meta.levels[level..])
                .map(|(values, lev)| values.into_iter().zip(&lev.boxes).map(|(v, b)| Snapshot::array(py, v, b.shape())).collect())
                .collect()
        }
        match self.inner.meta.dtypes.get(field) {
            Some(DType::F32) => arrays::<f32>(py, &self.inner, field, level),
            _ => arrays::<f64>(py, &self.inner, field, level),
        }
    }

    fn prefetch(&self, py: Python<'_>, field: usize, level: usize, finer: bool) -> PyResult<()> {
        let s = &self.inner;
        match s.meta.dtypes.get(field) {
            Some(DType::F32) => py.detach(|| s.prefetch::<f32>(field, level, finer)),
            _ => py.detach(|| s.prefetch::<f64>(field, level, finer)),
        }
        .map_err(store_err)
    }

    fn to_uniform<'py>(&self, py: Python<'py>, field: usize, level: usize) -> PyResult<Bound<'py, PyAny>> {
        let s = &self.inner;
        let shape = s.meta.levels.get(level).map(|_| s.meta.index_space(level).shape()).unwrap_or_default();
        match s.meta.dtypes.get(field) {
            Some(DType::F32) => Self::array(py, py.detach(|| s.to_uniform::<f32>(field, level)).map_err(store_err)?, shape),
            _ => Self::array(py, py.detach(|| s.to_uniform::<f64>(field, level)).map_err(store_err)?, shape),
        }
    }

    /// array_info(level, field) -> dict: how the (level, field) is coded, with its statistics.
    fn array_info<'py>(&self, py: Python<'py>, level: usize, field: usize) -> PyResult<Bound<'py, PyDict>> {
        let a = py.detach(|| self.inner.field_array(level, field)).map_err(store_err)?;
        let d = PyDict::new(py);
        d.set_item("dtype", dtype_name(a.codec.dtype))?;
        d.set_item("unit", a.codec.unit.clone())?;
        d.set_item("chunk", a.tiling.chunk.clone())?;
        d.set_item("origin", a.tiling.origin.clone())?;
        d.set_item("abs_bound", a.codec.abs_bound)?;
        d.set_item("eb", a.codec.eb)?;
        d.set_item("offset", a.codec.offset)?;
        d.set_item("predictor", &a.codec.predictor)?;
        d.set_item("table_bytes", a.codec.tables.clone().map(|t| a.tables()[t].len()).sum::<usize>())?;
        d.set_item("stats", stats_dict(py, &a.stats)?)?;
        Ok(d)
    }
}

/// ZarrChunkDecoder(configuration_json, dtype): decodes chunks of an array stored with the
/// amrzip.amr codec, for zarr-python.
#[pyclass(module = "amrzip._core", frozen)]
pub struct ZarrChunkDecoder {
    codec: ZarrCodec,
}

#[pymethods]
impl ZarrChunkDecoder {
    #[new]
    fn new(configuration: &str, dtype_name: &str) -> PyResult<Self> {
        let config: serde_json::Value =
            serde_json::from_str(configuration).map_err(|e| PyValueError::new_err(format!("bad configuration: {e}")))?;
        Ok(ZarrChunkDecoder { codec: ZarrCodec::new(&config, dtype(dtype_name)?).map_err(store_err)? })
    }

    /// decode(data, shape) -> ndarray of `shape` (the chunk's spatial shape), in the field's type.
    fn decode<'py>(&self, py: Python<'py>, data: &[u8], shape: Vec<usize>) -> PyResult<Bound<'py, PyAny>> {
        // At most 8 bytes a value: sizes the work only (`run_sized`).
        let bytes = shape.iter().product::<usize>().saturating_mul(8);
        let decoded = py.detach(|| amrzip_codec::run_sized_with_threads(None, bytes, || Ok(self.codec.decode(data, &shape))));
        match decoded.map_err(|e| PyValueError::new_err(e.to_string()))?.map_err(store_err)? {
            ChunkValues::F32(v) => Snapshot::array(py, v, shape),
            ChunkValues::F64(v) => Snapshot::array(py, v, shape),
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("StoreError", m.py().get_type::<StoreError>())?;
    m.add_function(wrap_pyfunction!(write_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_owners, m)?)?;
    m.add_function(wrap_pyfunction!(snapshots, m)?)?;
    m.add_function(wrap_pyfunction!(check_snapshot_name, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_class::<Snapshot>()?;
    m.add_class::<ZarrChunkDecoder>()?;
    Ok(())
}
