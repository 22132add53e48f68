//! Reading a snapshot back into a caller's buffer: open a snapshot of a store, learn its fields,
//! levels and boxes, and read one field of one level over any region, covered cells rebuilt from
//! the finer levels. Only the chunks the region touches are read and decoded.

use crate::codec::DtypeCode;
use crate::error::{guard, Error, Result};
use crate::memory::{text, write_values};
use amrzip_amr::IBox;
use amrzip_codec::{DType, Element};
use amrzip_store::reader::Value;
use amrzip_store::{Covered, Snapshot};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;

/// Covered cells (those a finer level refines) as the mean of the finer cells over them (for
/// node-centred data, the fine node on them).
pub const AMRZIP_COVERED_AVERAGE: c_int = 0;
/// Covered cells as NaN.
pub const AMRZIP_COVERED_NAN: c_int = 1;
/// Buffer order: x fastest, as AMReX and Fortran arrays are.
pub const AMRZIP_ORDER_FORTRAN: c_int = 0;
/// Buffer order: the last index fastest, as C arrays `a[i][j][k]` are.
pub const AMRZIP_ORDER_C: c_int = 1;

/// A snapshot opened for reading (opaque to C). Several threads may read through one reader at
/// once.
#[allow(non_camel_case_types)]
pub struct amrzip_reader {
    snapshot: Snapshot,
    /// The field names as C strings, for `amrzip_reader_field`.
    names: Vec<CString>,
}

/// # Safety
/// `r` is NULL or a reader from `amrzip_reader_open` not yet closed.
unsafe fn reader<'a>(r: *const amrzip_reader) -> Result<&'a amrzip_reader> {
    // SAFETY: per the contract.
    unsafe { r.as_ref() }.ok_or_else(|| Error::invalid("the reader must not be NULL"))
}

/// Opens snapshot `name` of the store at `store_path`, or its latest snapshot when `name` is
/// NULL. `*out` receives the reader (NULL on failure), to be closed with `amrzip_reader_close`.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers), AMRZIP_ERR_NOT_FOUND (no such
/// snapshot), AMRZIP_ERR_CORRUPT (not a store, or the snapshot's metadata is damaged) or
/// AMRZIP_ERR_IO.
///
/// # Safety
/// `store_path` is a NUL-terminated string, `name` one or NULL; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_open(store_path: *const c_char, name: *const c_char, out: *mut *mut amrzip_reader) -> c_int {
    guard("amrzip_reader_open", || {
        if out.is_null() {
            return Err(Error::invalid("out must not be NULL"));
        }
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: NUL-terminated per the contract (or NULL for `name`).
        let path = unsafe { text(store_path, "store_path") }?;
        let name = if name.is_null() { None } else { Some(unsafe { text(name, "name") }?) };
        let snapshot = Snapshot::open_in(Path::new(path), name)?;
        let names = snapshot.meta.fields.iter().map(|f| CString::new(f.replace('\0', "\\0")).unwrap_or_default()).collect();
        // SAFETY: checked non-NULL above.
        unsafe { out.write(Box::into_raw(Box::new(amrzip_reader { snapshot, names }))) };
        Ok(())
    })
}

/// Closes a reader. NULL is ignored.
///
/// # Safety
/// `r` is NULL or a reader from `amrzip_reader_open` not yet closed, that no other thread uses.
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_close(r: *mut amrzip_reader) {
    if !r.is_null() {
        // SAFETY: a reader from amrzip_reader_open, freed here once.
        drop(unsafe { Box::from_raw(r) });
    }
}

/// The snapshot's dimensionality, number of levels and number of fields, and its geometry:
/// `prob_lo`, `prob_hi` (`dim` values each), the coordinate system, time and step. Any output
/// may be NULL.
///
/// # Safety
/// `r` is a reader; the outputs are NULL or writable (`prob_lo`, `prob_hi` for 3 values).
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_info(
    r: *const amrzip_reader,
    dim: *mut c_int,
    num_levels: *mut c_int,
    num_fields: *mut c_int,
    prob_lo: *mut f64,
    prob_hi: *mut f64,
    coord_sys: *mut c_int,
    time: *mut f64,
    step: *mut i64,
) -> c_int {
    guard("amrzip_reader_info", || {
        // SAFETY: per the contract.
        let m = &unsafe { reader(r) }?.snapshot.meta;
        // SAFETY: each output NULL or writable per the contract.
        unsafe {
            write_values(dim, &[m.dim as c_int]);
            write_values(num_levels, &[m.levels.len() as c_int]);
            write_values(num_fields, &[m.fields.len() as c_int]);
            write_values(prob_lo, &m.prob_lo);
            write_values(prob_hi, &m.prob_hi);
            write_values(coord_sys, &[m.coord_sys as c_int]);
            write_values(time, &[m.time]);
            write_values(step, &[m.step]);
        }
        Ok(())
    })
}

/// Field `field`'s name (a string owned by the reader, valid until it is closed), element type
/// and absolute bound: every stored value is within it of the value written (a relative bound
/// became this when the snapshot was written). Any output may be NULL.
///
/// # Safety
/// `r` is a reader; the outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_field(
    r: *const amrzip_reader,
    field: c_int,
    name: *mut *const c_char,
    dtype: *mut DtypeCode,
    abs_bound: *mut f64,
) -> c_int {
    guard("amrzip_reader_field", || {
        // SAFETY: per the contract.
        let r = unsafe { reader(r) }?;
        let f = usize::try_from(field)
            .ok()
            .filter(|&f| f < r.names.len())
            .ok_or_else(|| Error::invalid(format!("field {field} out of range: the snapshot has {} fields", r.names.len())))?;
        // SAFETY: each output NULL or writable per the contract.
        unsafe {
            if !name.is_null() {
                name.write(r.names[f].as_ptr());
            }
            if !dtype.is_null() {
                dtype.write(DtypeCode::of(r.snapshot.meta.dtypes[f]));
            }
            write_values(abs_bound, &[r.snapshot.meta.bounds[f].abs]);
        }
        Ok(())
    })
}

/// The index of the field called `name`, to `*index`.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers) or AMRZIP_ERR_NOT_FOUND.
///
/// # Safety
/// `r` is a reader; `name` is a NUL-terminated string; `index` is writable.
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_field_index(r: *const amrzip_reader, name: *const c_char, index: *mut c_int) -> c_int {
    guard("amrzip_reader_field_index", || {
        // SAFETY: per the contract.
        let (r, name) = unsafe { (reader(r)?, text(name, "name")?) };
        if index.is_null() {
            return Err(Error::invalid("index must not be NULL"));
        }
        let f = r.snapshot.meta.field_index(name)?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { index.write(f as c_int) };
        Ok(())
    })
}

fn level_of(r: &amrzip_reader, level: c_int) -> Result<usize> {
    let n = r.snapshot.meta.levels.len();
    usize::try_from(level)
        .ok()
        .filter(|&l| l < n)
        .ok_or_else(|| Error::invalid(format!("level {level} out of range: the snapshot has {n} levels")))
}

/// Level `level`'s domain (inclusive cell indices, `dim` values each), refinement ratio to the
/// next level (all 1 at the finest), cell size and number of boxes. Any output may be NULL.
///
/// # Safety
/// `r` is a reader; the outputs are NULL or writable (arrays for `dim` values).
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_level(
    r: *const amrzip_reader,
    level: c_int,
    domain_lo: *mut i64,
    domain_hi: *mut i64,
    ref_ratio: *mut c_int,
    dx: *mut f64,
    num_boxes: *mut usize,
) -> c_int {
    guard("amrzip_reader_level", || {
        // SAFETY: per the contract.
        let r = unsafe { reader(r) }?;
        let lev = &r.snapshot.meta.levels[level_of(r, level)?];
        let ratio: Vec<c_int> = lev.ref_ratio.iter().map(|&v| v as c_int).collect();
        // SAFETY: each output NULL or writable per the contract.
        unsafe {
            write_values(domain_lo, &lev.domain.lo);
            write_values(domain_hi, &lev.domain.hi);
            write_values(ref_ratio, &ratio);
            write_values(dx, &lev.dx);
            write_values(num_boxes, &[lev.boxes.len()]);
        }
        Ok(())
    })
}

/// Box `index` of level `level`: its inclusive indices `lo`, `hi` (`dim` values each) and the
/// rank that owned it. Any output may be NULL.
///
/// # Safety
/// `r` is a reader; the outputs are NULL or writable (arrays for `dim` values).
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_box(
    r: *const amrzip_reader,
    level: c_int,
    index: usize,
    lo: *mut i64,
    hi: *mut i64,
    owner: *mut c_int,
) -> c_int {
    guard("amrzip_reader_box", || {
        // SAFETY: per the contract.
        let r = unsafe { reader(r) }?;
        let lev = &r.snapshot.meta.levels[level_of(r, level)?];
        let b = lev
            .boxes
            .get(index)
            .ok_or_else(|| Error::invalid(format!("box {index} out of range: level {level} has {} boxes", lev.boxes.len())))?;
        // SAFETY: each output NULL or writable per the contract.
        unsafe {
            write_values(lo, &b.lo);
            write_values(hi, &b.hi);
            write_values(owner, &[lev.owners[index] as c_int]);
        }
        Ok(())
    })
}

/// Copies `values` (C order over a region of `shape`) to `out` in `order`.
fn place<T: Element>(values: &[T], shape: &[usize], order: c_int, out: &mut [T]) -> Result<()> {
    match order {
        AMRZIP_ORDER_C => out.copy_from_slice(values),
        AMRZIP_ORDER_FORTRAN => {
            // Strides of the C-order source along each dimension, walked in Fortran order.
            let mut strides = vec![1usize; shape.len()];
            for d in (0..shape.len().saturating_sub(1)).rev() {
                strides[d] = strides[d + 1] * shape[d + 1];
            }
            let mut index = vec![0usize; shape.len()];
            for o in out.iter_mut() {
                *o = values[index.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()];
                for d in 0..shape.len() {
                    index[d] += 1;
                    if index[d] < shape[d] {
                        break;
                    }
                    index[d] = 0;
                }
            }
        }
        o => return Err(Error::invalid(format!("order must be AMRZIP_ORDER_FORTRAN (0) or AMRZIP_ORDER_C (1), got {o}"))),
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn read_typed<T: Value>(
    r: &amrzip_reader,
    field: usize,
    level: usize,
    region: &IBox,
    covered: Covered,
    order: c_int,
    out: *mut c_void,
    n: usize,
) -> Result<()> {
    // Decodes on the threads amrzip_set_threads gives calls starting now.
    let values =
        amrzip_codec::run_with_threads(crate::threads::threads(), || Ok(r.snapshot.read::<T>(field, level, region, covered, false)))??;
    if out.is_null() || !out.cast::<T>().is_aligned() {
        return Err(Error::invalid(format!("out must be a buffer aligned for {}", T::DTYPE.name())));
    }
    // SAFETY: non-NULL and aligned; `out_bytes` (checked to be `n` elements) long per the contract.
    let out = unsafe { std::slice::from_raw_parts_mut(out.cast::<T>(), n) };
    place(&values, &region.shape(), order, out)
}

/// Reads field `field` of level `level` over the region `lo`..`hi` (inclusive indices of the
/// level, `dim` values each) into `out`, which must be exactly `out_bytes` long: the region's
/// cells times 4 (float fields) or 8 (double fields). `order` is AMRZIP_ORDER_FORTRAN (x fastest)
/// or AMRZIP_ORDER_C. Cells outside every box are NaN; covered cells as `covered` says
/// (AMRZIP_COVERED_AVERAGE or AMRZIP_COVERED_NAN). Every stored cell is within the field's bound
/// of what was written. Several threads may read through one reader at once.
///
/// Returns AMRZIP_OK, AMRZIP_ERR_INVALID (an argument out of range, a buffer of the wrong size)
/// or AMRZIP_ERR_CORRUPT (a chunk the region needs is missing or damaged, named in the message).
///
/// # Safety
/// `r` is a reader; `lo`, `hi` hold `dim` values; `out` is writable for `out_bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amrzip_reader_read(
    r: *const amrzip_reader,
    field: c_int,
    level: c_int,
    lo: *const i64,
    hi: *const i64,
    covered: c_int,
    order: c_int,
    out: *mut c_void,
    out_bytes: usize,
) -> c_int {
    guard("amrzip_reader_read", || {
        // SAFETY: per the contract.
        let r = unsafe { reader(r) }?;
        let meta = &r.snapshot.meta;
        let f = usize::try_from(field)
            .ok()
            .filter(|&f| f < meta.fields.len())
            .ok_or_else(|| Error::invalid(format!("field {field} out of range: the snapshot has {} fields", meta.fields.len())))?;
        let level = level_of(r, level)?;
        // SAFETY: `dim` values each per the contract.
        let region = unsafe { IBox::new(crate::memory::values(lo, meta.dim, "lo")?, crate::memory::values(hi, meta.dim, "hi")?) };
        let covered = match covered {
            AMRZIP_COVERED_AVERAGE => Covered::Average,
            AMRZIP_COVERED_NAN => Covered::Nan,
            c => return Err(Error::invalid(format!("covered must be AMRZIP_COVERED_AVERAGE (0) or AMRZIP_COVERED_NAN (1), got {c}"))),
        };
        let size = meta.dtypes[f].size();
        let n = region.cells().filter(|n| n.checked_mul(size) == Some(out_bytes)).ok_or_else(|| {
            Error::invalid(format!(
                "out_bytes is {out_bytes}: the region {:?}..{:?} of field {:?} takes {} bytes",
                region.lo,
                region.hi,
                meta.fields[f],
                region.cells().map_or(0, |n| n * size)
            ))
        })?;
        match meta.dtypes[f] {
            DType::F32 => read_typed::<f32>(r, f, level, &region, covered, order, out, n),
            DType::F64 => read_typed::<f64>(r, f, level, &region, covered, order, out, n),
        }
    })
}
