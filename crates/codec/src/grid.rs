//! Array geometry: C-order strides, the chunk grid that splits an array into independently
//! coded boxes (the unit of parallelism and of random access), and copies between an array
//! and one of its chunks.

/// The C-order strides of `shape`: how many elements one step along each dimension moves.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

pub fn num_elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Element count, or `None` for a shape too large to address. Empty dimensions count as 1 in
/// that test, so the answer does not depend on their position and no partial product of a
/// valid shape can overflow.
pub fn checked_num_elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n.max(1)))?;
    Some(num_elements(shape))
}

/// Chunk edge lengths for chunks of at most `target` elements (a power of two): powers of two,
/// near-cubic, clamped to the array.
pub fn chunk_shape(shape: &[usize], target: usize) -> Vec<usize> {
    let d = shape.len() as u32;
    let edge_log2 = (target.trailing_zeros() / d).max(1);
    let mut chunk: Vec<usize> = shape.iter().map(|&n| n.min(1 << edge_log2).max(1)).collect();
    // Give back the budget unused by short dimensions to the long ones, fastest dimension first.
    for dim in (0..shape.len()).rev() {
        while num_elements(&chunk) * 2 <= target
            && chunk[dim] * 2 <= shape[dim].checked_next_power_of_two().unwrap_or(usize::MAX)
            && chunk[dim] < shape[dim]
        {
            chunk[dim] = (chunk[dim] * 2).min(shape[dim]);
        }
    }
    chunk
}

/// One chunk: its first index and its extent (edge chunks may be smaller than the grid pitch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkBox {
    pub origin: Vec<usize>,
    pub shape: Vec<usize>,
}

impl ChunkBox {
    // Chunks and sample boxes hold at least one element each: there is no empty box to ask about.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        num_elements(&self.shape)
    }
}

/// All chunks of `shape` cut at pitch `chunk`, in C order of their grid positions.
pub fn chunk_boxes(shape: &[usize], chunk: &[usize]) -> Vec<ChunkBox> {
    let counts: Vec<usize> = shape.iter().zip(chunk).map(|(&n, &c)| n.div_ceil(c)).collect();
    let total = num_elements(&counts);
    let mut boxes = Vec::with_capacity(total);
    let mut pos = vec![0usize; shape.len()];
    for _ in 0..total {
        let origin: Vec<usize> = pos.iter().zip(chunk).map(|(&p, &c)| p * c).collect();
        let extent = origin.iter().zip(shape).zip(chunk).map(|((&o, &n), &c)| c.min(n - o)).collect();
        boxes.push(ChunkBox { origin, shape: extent });
        for d in (0..shape.len()).rev() {
            pos[d] += 1;
            if pos[d] < counts[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    boxes
}

/// Calls `f` with every multi-index of a box of `extent`, in C order (last index fastest).
pub fn for_each_index(extent: &[usize], mut f: impl FnMut(&[usize])) {
    if extent.contains(&0) {
        return;
    }
    let mut pos = vec![0usize; extent.len()];
    loop {
        f(&pos);
        let mut d = extent.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            pos[d] += 1;
            if pos[d] < extent[d] {
                break;
            }
            pos[d] = 0;
        }
    }
}

/// Calls `row(array_offset, chunk_offset, len)` for every contiguous row of `b` inside an array
/// of `shape`: the chunk is stored C-order and densely, rows run along the last dimension.
pub fn for_each_row(shape: &[usize], b: &ChunkBox, mut row: impl FnMut(usize, usize, usize)) {
    let nd = shape.len();
    let st = strides(shape);
    let row_len = b.shape[nd - 1];
    let mut r = 0;
    for_each_index(&b.shape[..nd - 1], |pos| {
        let off: usize = b.origin[nd - 1] + (0..nd - 1).map(|d| (b.origin[d] + pos[d]) * st[d]).sum::<usize>();
        row(off, r * row_len, row_len);
        r += 1;
    });
}

/// Copies chunk `b` out of the C-order array `src`.
pub fn gather<T: Copy + Default>(src: &[T], shape: &[usize], b: &ChunkBox) -> Vec<T> {
    let mut out = vec![T::default(); b.len()];
    for_each_row(shape, b, |a, c, n| out[c..c + n].copy_from_slice(&src[a..a + n]));
    out
}

/// Destination array shared by the tasks that each write one chunk of it.
pub struct ChunkedOutput<T> {
    ptr: *mut T,
    len: usize,
}

// Safety: tasks write disjoint chunks (chunk boxes of one grid never overlap), and
// `scatter` checks every row stays inside the buffer.
unsafe impl<T: Send> Send for ChunkedOutput<T> {}
unsafe impl<T: Send> Sync for ChunkedOutput<T> {}

impl<T: Copy> ChunkedOutput<T> {
    pub fn new(buf: &mut [T]) -> Self {
        ChunkedOutput { ptr: buf.as_mut_ptr(), len: buf.len() }
    }

    /// Writes chunk `b` (dense, C-order in `src`) into the array. Callers must give each box of
    /// one chunk grid to at most one task, which is how `compressor::decompress` uses it.
    pub fn scatter(&self, shape: &[usize], b: &ChunkBox, src: &[T]) {
        assert_eq!(src.len(), b.len());
        for_each_row(shape, b, |a, c, n| {
            assert!(a + n <= self.len);
            // Safety: in bounds (asserted) and no other task writes these rows (disjoint boxes).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(c), self.ptr.add(a), n) };
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_tile_the_array_exactly() {
        for shape in [vec![7usize], vec![5, 9], vec![3, 4, 5], vec![2, 3, 1, 4], vec![300, 1]] {
            let chunk: Vec<usize> = shape.iter().map(|&n| (n / 2).max(1)).collect();
            let data: Vec<u32> = (0..num_elements(&shape) as u32).collect();
            let mut back = vec![u32::MAX; data.len()];
            let out = ChunkedOutput::new(&mut back);
            for b in chunk_boxes(&shape, &chunk) {
                out.scatter(&shape, &b, &gather(&data, &shape, &b));
            }
            assert_eq!(back, data);
        }
    }

    #[test]
    fn default_chunks_are_bounded() {
        let target = 1 << 21;
        for shape in [vec![256usize, 256, 256], vec![1800, 3600], vec![10_000_000], vec![3, 5], vec![64, 64, 64, 64]] {
            let c = chunk_shape(&shape, target);
            assert!(num_elements(&c) <= target, "{shape:?} -> {c:?}");
            assert!(c.iter().zip(&shape).all(|(&c, &n)| c >= 1 && c <= n));
        }
        assert_eq!(chunk_shape(&[256, 256, 256], target), vec![128, 128, 128]);
    }
}
