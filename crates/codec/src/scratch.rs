//! Per-thread spare buffers for the large temporaries of block coding. A write codes thousands
//! of blocks and frees each one's buffers before the next; the allocator keeps freed pages
//! resident for a while (for speed, see the Python extension), so fresh buffers per block
//! raised the resident peak of a write well above what it held live. Reusing one buffer per
//! thread and element type keeps it at the size of one block.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    static SPARE: RefCell<HashMap<TypeId, Box<dyn Any>>> = RefCell::new(HashMap::new());
}

/// Runs `f` on this thread's spare `Vec<T>`, emptied, its capacity kept. A nested call for the
/// same type gets a fresh vector.
pub(crate) fn with_vec<T: 'static, R>(f: impl FnOnce(&mut Vec<T>) -> R) -> R {
    let id = TypeId::of::<T>();
    let spare = SPARE.with(|s| s.borrow_mut().remove(&id));
    let mut v = spare.and_then(|b| b.downcast::<Vec<T>>().ok()).map_or_else(Vec::new, |b| *b);
    v.clear();
    let r = f(&mut v);
    SPARE.with(|s| s.borrow_mut().insert(id, Box::new(v)));
    r
}
