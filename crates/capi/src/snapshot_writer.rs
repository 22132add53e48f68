//! Writing a snapshot from a simulation's memory (in situ, as AMRIC does): declare the geometry,
//! the fields and the levels, add every box with a pointer to its data as the simulation holds it
//! (Fortran order, x fastest, with ghost cells, as AMReX's FABs are), and commit. Nothing is
//! copied: the boxes are compressed from the simulation's own arrays during the commit, which
//! writes the snapshot file and gives it its name atomically.

use crate::codec::DtypeCode;
use crate::error::{guard, Error, Result};
use crate::memory::{text, values};
use crate::threads::threads;
use amrzip_amr::{IBox, Layout};
use amrzip_codec::{DType, Preset};
use amrzip_store::metadata::BoundMode;
use amrzip_store::{self as store, BoxData, BoxSource, FieldSpec, LevelSpec, SnapshotSpec, Values, WriteOptions};
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;

/// How a field's error bound is given.
#[allow(non_camel_case_types)]
#[repr(C)]
pub enum amrzip_bound_mode {
    /// Every stored value within this absolute distance of the original.
    AMRZIP_ABS = 0,
    /// A fraction of the field's value range over the cells stored (all levels).
    AMRZIP_REL = 1,
}

/// One box of a level: its cells, ghost cells, owner and the address of each field's data.
struct BoxRecord {
    cells: IBox,
    ghost: Vec<usize>,
    owner: i64,
    data: Vec<*const c_void>,
}

/// The snapshot's physical domain, coordinate system, time and step.
#[derive(Clone)]
struct Geometry {
    prob_lo: Vec<f64>,
    prob_hi: Vec<f64>,
    coord_sys: i64,
    time: f64,
    step: i64,
}

struct Level {
    domain: IBox,
    ref_ratio: Vec<i64>,
    dx: Vec<f64>,
    boxes: Vec<BoxRecord>,
}

/// A snapshot being declared (opaque to C).
#[allow(non_camel_case_types)]
pub struct amrzip_writer {
    store: PathBuf,
    name: String,
    dim: usize,
    node: Vec<bool>,
    geometry: Option<Geometry>,
    fields: Vec<FieldSpec>,
    levels: Vec<Level>,
    preset: Preset,
}

/// The writer behind a handle, or an error if the handle is NULL.
///
/// # Safety
/// `w` is NULL or a writer from `amrzip_writer_open` not yet committed or aborted.
unsafe fn writer<'a>(w: *mut amrzip_writer) -> Result<&'a mut amrzip_writer> {
    // SAFETY: per the contract.
    unsafe { w.as_mut() }.ok_or_else(|| Error::invalid("the writer must not be NULL"))
}

/// Starts a snapshot `name` of the store at the folder `store_path` (created when it is not
/// there yet) of `dim` dimensions (1 to 3). `*out` receives the writer, to be given to
/// `amrzip_writer_commit` or `amrzip_writer_abort`, which free it; NULL on failure. Nothing is
/// written to the store before the commit. A writer is used by one thread at a time.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers, `dim` out of range, a name that is not
/// 1-128 letters, digits, '_', '.', '+', '-' starting with a letter or digit) or
/// AMRZIP_ERR_EXISTS (the snapshot exists).
///
/// # Safety
/// `store_path` and `name` are NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_open(
    store_path: *const c_char,
    name: *const c_char,
    dim: c_int,
    out: *mut *mut amrzip_writer,
) -> c_int {
    guard("amrzip_writer_open", || {
        if out.is_null() {
            return Err(Error::invalid("out must not be NULL"));
        }
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: NUL-terminated per the contract.
        let (path, name) = unsafe { (text(store_path, "store_path")?, text(name, "name")?) };
        let dim = usize::try_from(dim)
            .ok()
            .filter(|d| (1..=3).contains(d))
            .ok_or_else(|| Error::invalid(format!("dim must be 1 to 3, got {dim}")))?;
        store::layout::check_snapshot_name(name)?;
        let path = PathBuf::from(path);
        if store::Store::open(&path).is_ok_and(|s| s.exists(name)) {
            return Err(Error::from(store::Error::new(
                store::ErrorKind::Exists,
                format!("{}: snapshot {name:?} already exists", path.display()),
            )));
        }
        let w = amrzip_writer {
            store: path,
            name: name.to_string(),
            dim,
            node: vec![false; dim],
            geometry: None,
            fields: Vec::new(),
            levels: Vec::new(),
            preset: Preset::Ratio,
        };
        // SAFETY: checked non-NULL above.
        unsafe { out.write(Box::into_raw(Box::new(w))) };
        Ok(())
    })
}

/// Sets the physical domain (`prob_lo`, `prob_hi`: `dim` values each), the coordinate system
/// (0 Cartesian, 1 cylindrical, 2 spherical, as AMReX numbers them), the time and the step.
/// Required before the commit.
///
/// # Safety
/// `w` is a writer; `prob_lo` and `prob_hi` hold `dim` values.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_set_geometry(
    w: *mut amrzip_writer,
    prob_lo: *const f64,
    prob_hi: *const f64,
    coord_sys: c_int,
    time: f64,
    step: i64,
) -> c_int {
    guard("amrzip_writer_set_geometry", || {
        // SAFETY: per the contract.
        let w = unsafe { writer(w) }?;
        // SAFETY: `dim` values each per the contract.
        let (lo, hi) = unsafe { (values(prob_lo, w.dim, "prob_lo")?, values(prob_hi, w.dim, "prob_hi")?) };
        if !(0..=2).contains(&coord_sys) {
            return Err(Error::invalid(format!("coord_sys must be 0, 1 or 2, got {coord_sys}")));
        }
        w.geometry = Some(Geometry { prob_lo: lo, prob_hi: hi, coord_sys: coord_sys as i64, time, step });
        Ok(())
    })
}

/// Marks the dimensions along which the data sits on nodes (`node[d]` nonzero) rather than in
/// cells: boxes then index nodes, one more than the cells they bound. Default: cells.
///
/// # Safety
/// `w` is a writer; `node` holds `dim` values.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_set_nodal(w: *mut amrzip_writer, node: *const c_int) -> c_int {
    guard("amrzip_writer_set_nodal", || {
        // SAFETY: per the contract.
        let w = unsafe { writer(w) }?;
        // SAFETY: `dim` values per the contract.
        w.node = unsafe { values(node, w.dim, "node") }?.into_iter().map(|n| n != 0).collect();
        Ok(())
    })
}

/// Compresses for speed (`speed` nonzero: one fixed predictor setup, a lighter lossless stage)
/// instead of for the smallest output (the default).
///
/// # Safety
/// `w` is a writer.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_set_speed(w: *mut amrzip_writer, speed: c_int) -> c_int {
    guard("amrzip_writer_set_speed", || {
        // SAFETY: per the contract.
        unsafe { writer(w) }?.preset = if speed != 0 { Preset::Speed } else { Preset::Ratio };
        Ok(())
    })
}

/// Declares the next field: its name, element type and error bound (`mode` AMRZIP_ABS or
/// AMRZIP_REL, `bound` a finite number >= 0; 0 is lossless). Fields are declared before any box
/// is added; the field index used by `amrzip_writer_add_box` is the order of declaration.
///
/// # Safety
/// `w` is a writer; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_add_field(
    w: *mut amrzip_writer,
    name: *const c_char,
    dtype: DtypeCode,
    mode: c_int,
    bound: f64,
) -> c_int {
    guard("amrzip_writer_add_field", || {
        // SAFETY: per the contract.
        let w = unsafe { writer(w) }?;
        // SAFETY: NUL-terminated per the contract.
        let name = unsafe { text(name, "name") }?;
        let dtype = dtype.get()?;
        let mode = match mode {
            0 => BoundMode::Abs,
            1 => BoundMode::Rel,
            m => return Err(Error::invalid(format!("mode must be AMRZIP_ABS (0) or AMRZIP_REL (1), got {m}"))),
        };
        if !(bound.is_finite() && bound >= 0.0) {
            return Err(Error::invalid(format!("the bound of field {name:?} must be a finite number >= 0, got {bound}")));
        }
        if w.levels.iter().any(|l| !l.boxes.is_empty()) {
            return Err(Error::invalid(format!("field {name:?} declared after boxes were added: declare every field first")));
        }
        if name.is_empty() || w.fields.iter().any(|f| f.name == name) {
            return Err(Error::invalid(format!("field name {name:?} is empty or declared twice")));
        }
        w.fields.push(FieldSpec { name: name.to_string(), dtype, mode, bound });
        Ok(())
    })
}

/// Declares the next level, coarsest first: its domain (`domain_lo`, `domain_hi`: inclusive
/// cell indices, `dim` values each; level L+1's must be level L's refined by L's ratio), its
/// refinement ratio to the next finer level (`dim` values; NULL or ignored for the finest level)
/// and its cell size `dx` (`dim` values). Its index (0, 1, ...) is what `amrzip_writer_add_box`
/// takes.
///
/// # Safety
/// `w` is a writer; the arrays hold `dim` values (`ref_ratio` may be NULL).
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_add_level(
    w: *mut amrzip_writer,
    domain_lo: *const i64,
    domain_hi: *const i64,
    ref_ratio: *const c_int,
    dx: *const f64,
) -> c_int {
    guard("amrzip_writer_add_level", || {
        // SAFETY: per the contract.
        let w = unsafe { writer(w) }?;
        let d = w.dim;
        // SAFETY: `dim` values each per the contract.
        let (lo, hi, dx) = unsafe { (values(domain_lo, d, "domain_lo")?, values(domain_hi, d, "domain_hi")?, values(dx, d, "dx")?) };
        let ref_ratio = if ref_ratio.is_null() {
            vec![1; d]
        } else {
            // SAFETY: `dim` values per the contract.
            unsafe { values(ref_ratio, d, "ref_ratio") }?.into_iter().map(i64::from).collect()
        };
        w.levels.push(Level { domain: IBox::new(lo, hi), ref_ratio, dx, boxes: Vec::new() });
        Ok(())
    })
}

/// Adds a box to level `level`: inclusive indices `lo`, `hi` (`dim` values each), `ngrow` ghost
/// cells on each side per dimension (`dim` values, or NULL for none), the rank `owner` that holds
/// it, and `data[f]` the address of field f's values (one pointer per declared field, of the
/// field's element type) over the box grown by its ghost cells, in Fortran order (x fastest), as
/// an AMReX FAB or a Chombo FArrayBox holds a component. Ghost cells are not stored.
///
/// The values are read during `amrzip_writer_commit`, not now: they must stay in place and
/// unchanged until it returns.
///
/// # Safety
/// `w` is a writer; `lo`, `hi` (and `ngrow` if not NULL) hold `dim` values; `data` holds one
/// pointer per declared field, each to the box's values as described, valid until the commit.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_add_box(
    w: *mut amrzip_writer,
    level: c_int,
    lo: *const i64,
    hi: *const i64,
    ngrow: *const c_int,
    owner: c_int,
    data: *const *const c_void,
) -> c_int {
    guard("amrzip_writer_add_box", || {
        // SAFETY: per the contract.
        let w = unsafe { writer(w) }?;
        let (d, nf) = (w.dim, w.fields.len());
        if nf == 0 {
            return Err(Error::invalid("no field declared: declare the fields before adding boxes"));
        }
        let n_levels = w.levels.len();
        let lev = usize::try_from(level)
            .ok()
            .and_then(|l| w.levels.get_mut(l))
            .ok_or_else(|| Error::invalid(format!("level {level} is not declared ({n_levels} levels are)")))?;
        // SAFETY: `dim` values each, `nf` pointers per the contract.
        let (lo, hi, data) = unsafe { (values(lo, d, "lo")?, values(hi, d, "hi")?, values(data, nf, "data")?) };
        let ghost = if ngrow.is_null() {
            vec![0; d]
        } else {
            // SAFETY: `dim` values per the contract.
            let g = unsafe { values(ngrow, d, "ngrow") }?;
            g.iter()
                .map(|&n| usize::try_from(n))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| Error::invalid(format!("ngrow {g:?} must not be negative")))?
        };
        let cells = IBox::new(lo, hi);
        if cells.is_empty() {
            return Err(Error::invalid(format!("box {:?}..{:?} is empty (hi < lo)", cells.lo, cells.hi)));
        }
        for (f, (&p, field)) in data.iter().zip(&w.fields).enumerate() {
            let align = if field.dtype == DType::F32 { align_of::<f32>() } else { align_of::<f64>() };
            if p.is_null() || !(p as usize).is_multiple_of(align) {
                return Err(Error::invalid(format!("data[{f}] (field {:?}) is NULL or not aligned for its type", field.name)));
            }
        }
        lev.boxes.push(BoxRecord { cells, ghost, owner: i64::from(owner), data });
        Ok(())
    })
}

/// The declared boxes' values, as the store's writer asks for them.
struct Memory<'a> {
    w: &'a amrzip_writer,
}

impl BoxSource for Memory<'_> {
    fn with_boxes(&self, level: usize, field: usize, f: &mut dyn FnMut(&[BoxData]) -> store::Result<()>) -> store::Result<()> {
        let dtype = self.w.fields[field].dtype;
        let boxes: Vec<BoxData> = self.w.levels[level]
            .boxes
            .iter()
            .map(|b| {
                let n: usize = b.cells.shape().iter().zip(&b.ghost).map(|(&s, &g)| s + 2 * g).product();
                let p = b.data[field];
                // SAFETY: `amrzip_writer_add_box`'s contract: the box's values, of the field's
                // type, over the grown box, aligned (checked) and in place until the commit ends.
                let values = unsafe {
                    match dtype {
                        DType::F32 => Values::F32(std::slice::from_raw_parts(p.cast::<f32>(), n)),
                        DType::F64 => Values::F64(std::slice::from_raw_parts(p.cast::<f64>(), n)),
                    }
                };
                BoxData { values, layout: Layout::Fortran, ghost: b.ghost.clone() }
            })
            .collect();
        f(&boxes)
    }
}

fn commit(w: &amrzip_writer) -> Result<()> {
    let Geometry { prob_lo, prob_hi, coord_sys, time, step } =
        w.geometry.clone().ok_or_else(|| Error::invalid("no geometry: call amrzip_writer_set_geometry before committing"))?;
    if w.fields.is_empty() || w.levels.is_empty() {
        return Err(Error::invalid("a snapshot needs at least one field and one level"));
    }
    let last = w.levels.len() - 1;
    let spec = SnapshotSpec {
        node: w.node.clone(),
        fields: w.fields.iter().map(|f| FieldSpec { name: f.name.clone(), dtype: f.dtype, mode: f.mode, bound: f.bound }).collect(),
        levels: w
            .levels
            .iter()
            .enumerate()
            .map(|(l, lev)| LevelSpec {
                domain: lev.domain.clone(),
                // The finest level refines into nothing.
                ref_ratio: if l == last { vec![1; w.dim] } else { lev.ref_ratio.clone() },
                dx: lev.dx.clone(),
                boxes: lev.boxes.iter().map(|b| b.cells.clone()).collect(),
                owners: lev.boxes.iter().map(|b| b.owner).collect(),
            })
            .collect(),
        prob_lo,
        prob_hi,
        coord_sys,
        time,
        step,
        source: serde_json::json!({"format": "C API", "library": concat!("amrzip ", env!("CARGO_PKG_VERSION"))}),
    };
    let options = WriteOptions { preset: w.preset, threads: threads(), ..WriteOptions::default() };
    store::write_snapshot(&w.store, &w.name, &spec, &Memory { w }, &options, &mut |_, _| Ok(()))?;
    Ok(())
}

/// Compresses every box and commits the snapshot: once this returns AMRZIP_OK the snapshot is
/// in the store, whole, under its name; on failure the store is as it was. The writer is freed
/// either way.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (missing geometry, no field or level, levels that do
/// not nest or refine each other, boxes outside their domain), AMRZIP_ERR_EXISTS (another writer
/// committed that name meanwhile), AMRZIP_ERR_CORRUPT (the store is damaged) or AMRZIP_ERR_IO.
///
/// # Safety
/// `w` is a writer from `amrzip_writer_open` not yet committed or aborted; every box's data is
/// still in place.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_commit(w: *mut amrzip_writer) -> c_int {
    guard("amrzip_writer_commit", || {
        if w.is_null() {
            return Err(Error::invalid("the writer must not be NULL"));
        }
        // SAFETY: a writer from amrzip_writer_open, freed here once.
        let w = unsafe { Box::from_raw(w) };
        commit(&w)
    })
}

/// Abandons the snapshot (nothing was written) and frees the writer. NULL is ignored.
///
/// # Safety
/// `w` is NULL or a writer from `amrzip_writer_open` not yet committed or aborted.
#[no_mangle]
pub unsafe extern "C" fn amrzip_writer_abort(w: *mut amrzip_writer) {
    if !w.is_null() {
        // SAFETY: a writer from amrzip_writer_open, freed here once.
        drop(unsafe { Box::from_raw(w) });
    }
}
