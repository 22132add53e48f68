//! Bindings for the box algebra of `amrzip-amr` that the Python readers share with the store.

use amrzip_amr::boxes::{check_nesting as check, stored_mask as stored, Coverage};
use amrzip_amr::IBox;
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

type Boxes = Vec<(Vec<i64>, Vec<i64>)>;

/// check_nesting(levels, node): `levels` a list of (boxes, ref_ratio) per level, coarsest first;
/// `node` per dimension. Raises ValueError saying which boxes of a level overlap, or which box
/// of a level is not nested in the level below.
#[pyfunction]
pub fn check_nesting(py: Python<'_>, levels: Vec<(Boxes, Vec<i64>)>, node: Vec<bool>) -> PyResult<()> {
    let levels: Vec<(Vec<IBox>, Vec<i64>)> =
        levels.into_iter().map(|(b, r)| (b.into_iter().map(|(lo, hi)| IBox::new(lo, hi)).collect(), r)).collect();
    let dim = node.len();
    if levels.iter().any(|(b, r)| r.len() != dim || r.iter().any(|&v| v < 1) || b.iter().any(|b| b.lo.len() != dim || b.hi.len() != dim)) {
        return Err(PyValueError::new_err(format!("boxes and ratios must be {dim}-dimensional, ratios at least 1")));
    }
    let borrowed: Vec<(&[IBox], &[i64])> = levels.iter().map(|(b, r)| (&b[..], &r[..])).collect();
    py.detach(|| check(&borrowed, &node)).map_err(PyValueError::new_err)
}

/// stored_mask(lo, hi, finer, ratio, node) -> bool array (C order over the box) of the cells
/// the store keeps, those no box of `finer` (the next level's boxes, refined by `ratio`)
/// covers; None when none is covered.
#[pyfunction]
pub fn stored_mask<'py>(
    py: Python<'py>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    finer: Boxes,
    ratio: Vec<i64>,
    node: Vec<bool>,
) -> PyResult<Option<Bound<'py, PyArray1<bool>>>> {
    let dim = lo.len();
    let b = IBox::new(lo, hi);
    let finer: Vec<IBox> = finer.into_iter().map(|(lo, hi)| IBox::new(lo, hi)).collect();
    if b.is_empty() || hi_dims(&b, &finer, &ratio, &node) != dim {
        return Err(PyValueError::new_err(format!(
            "the box, the finer boxes, the ratio and the node flags must be {dim}-dimensional, the ratio at least 1 and the box not empty"
        )));
    }
    Ok(stored(&b, &Coverage::new(&finer, &ratio, &node)).map(|m| PyArray1::from_vec(py, m)))
}

/// The one dimensionality of everything given, or 0 if they differ.
fn hi_dims(b: &IBox, finer: &[IBox], ratio: &[i64], node: &[bool]) -> usize {
    let d = b.ndim();
    let same = b.hi.len() == d
        && ratio.len() == d
        && ratio.iter().all(|&r| r >= 1)
        && node.len() == d
        && finer.iter().all(|f| f.lo.len() == d && f.hi.len() == d);
    if same {
        d
    } else {
        0
    }
}
