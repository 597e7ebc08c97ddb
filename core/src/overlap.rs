//! Whether two views of one buffer may share an element.
//!
//! The test is the reference's, in three levels, and it only ever errs towards "may overlap":
//!
//! 1. A dependency-tracking version newer than the recorded writer's always depends.
//! 2. **1-D range.** Each view spans `[start, start + extent)` elements, compared in bytes
//!    (views of one buffer may reinterpret its dtype); disjoint spans share nothing. The same
//!    view again, or a dense probe whose byte range holds the entry's, is covered.
//! 3. **Exact box test** when both views use the same strides and those strides describe a
//!    mixed-radix layout (innermost stride 1, each stride a multiple of the next, a whole number
//!    of outer rows in the buffer). Then every element offset has unique per-dimension
//!    coordinates, each view is a box in that coordinate space, and two boxes share an element
//!    exactly when they intersect in every dimension. The probe containing the entry's box in
//!    every dimension is [`Overlap::Covered`].
//! 4. Anything else (transposes, step slices with different strides, dtype reinterpretation)
//!    is [`Overlap::Partial`]: "may overlap".

use crate::limits::MAX_TENSOR_DIMS;

/// The answer of the overlap test. Only `None` proves the views disjoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// The views share no element.
    None,
    /// The views may share elements (or the test could not tell).
    Partial,
    /// The probe contains every element of the entry.
    Covered,
}

/// The geometry the overlap test reads, common to a probe tensor and a recorded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Start of the view, in elements from the buffer's address.
    pub start: u64,
    /// Elements from the first to one past the last addressed element.
    pub extent: u64,
    /// Dependency-tracking version.
    pub version: i32,
    /// Rank (1..=5).
    pub ndims: u32,
    /// Raw dtype.
    pub dtype: u8,
    /// Element size in bytes (non-zero).
    pub elem_size: u32,
    /// Whether the view is dense row-major (it touches every element of its range).
    pub contiguous: bool,
    /// Extent per dimension.
    pub shapes: [u32; MAX_TENSOR_DIMS],
    /// Element stride per dimension.
    pub strides: [u32; MAX_TENSOR_DIMS],
}

/// Tests `probe` (the new access) against `entry` (an earlier writer's region of the same
/// buffer). `buffer_elems` is the probe buffer's size in elements, which bounds the outermost
/// coordinate.
pub fn check(probe: &Footprint, entry: &Footprint, buffer_elems: u64) -> Overlap {
    if probe.version > entry.version {
        return Overlap::Partial;
    }
    // Ranges in bytes: views of one buffer may use different dtypes.
    let bytes = |f: &Footprint| {
        let e = f.elem_size.max(1) as u64;
        (
            f.start.saturating_mul(e),
            f.start.saturating_add(f.extent).saturating_mul(e),
        )
    };
    let (p_start, p_end) = bytes(probe);
    let (e_start, e_end) = bytes(entry);
    if p_end <= e_start || e_end <= p_start {
        return Overlap::None;
    }
    // The same view again (an accumulator written by one task, read or updated by the next)
    // and a dense probe whose range holds the entry's are covered without the box test.
    if probe.dtype == entry.dtype
        && probe.start == entry.start
        && probe.ndims == entry.ndims
        && probe.shapes == entry.shapes
        && probe.strides == entry.strides
        || probe.contiguous && p_start <= e_start && e_end <= p_end
    {
        return Overlap::Covered;
    }
    match box_test(probe, entry, buffer_elems) {
        Some(o) => o,
        None => Overlap::Partial,
    }
}

/// The exact test; `None` when its preconditions do not hold.
fn box_test(probe: &Footprint, entry: &Footprint, buffer_elems: u64) -> Option<Overlap> {
    let n = probe.ndims as usize;
    if probe.dtype != entry.dtype || probe.ndims != entry.ndims || n == 0 || n > MAX_TENSOR_DIMS {
        return None;
    }
    if probe.strides != entry.strides {
        return None;
    }
    let strides = &probe.strides[..n];
    if strides[n - 1] != 1 {
        return None;
    }
    // Reference shape: A[i] = stride[i-1] / stride[i] for i >= 1, A[0] = rows in the buffer.
    let mut radix = [0u64; MAX_TENSOR_DIMS];
    for i in 1..n {
        if strides[i] == 0 || strides[i - 1] % strides[i] != 0 {
            return None;
        }
        radix[i] = (strides[i - 1] / strides[i]) as u64;
    }
    let outer = strides[0] as u64;
    if outer == 0 || buffer_elems % outer != 0 {
        return None;
    }
    radix[0] = buffer_elems / outer;

    let p = coords(probe.start, strides, &probe.shapes[..n], &radix[..n])?;
    let e = coords(entry.start, strides, &entry.shapes[..n], &radix[..n])?;
    let mut covered = true;
    for i in 0..n {
        let (p_lo, p_hi) = (p[i], p[i] + probe.shapes[i] as u64);
        let (e_lo, e_hi) = (e[i], e[i] + entry.shapes[i] as u64);
        if p_hi <= e_lo || e_hi <= p_lo {
            return Some(Overlap::None);
        }
        covered &= p_lo <= e_lo && e_hi <= p_hi;
    }
    Some(if covered {
        Overlap::Covered
    } else {
        Overlap::Partial
    })
}

/// Decomposes `start` into per-dimension coordinates; `None` if the box does not fit the radix.
fn coords(
    start: u64,
    strides: &[u32],
    shapes: &[u32],
    radix: &[u64],
) -> Option<[u64; MAX_TENSOR_DIMS]> {
    let mut out = [0u64; MAX_TENSOR_DIMS];
    let mut rest = start;
    for i in 0..strides.len() {
        let s = strides[i] as u64;
        out[i] = rest / s;
        rest %= s;
        if out[i] + shapes[i] as u64 > radix[i] {
            return None;
        }
    }
    (rest == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(start: u64, shapes: &[u32], strides: &[u32]) -> Footprint {
        let mut f = Footprint {
            start,
            extent: 0,
            version: 0,
            ndims: shapes.len() as u32,
            dtype: 0,
            elem_size: 4,
            contiguous: false,
            shapes: [0; 5],
            strides: [0; 5],
        };
        f.shapes[..shapes.len()].copy_from_slice(shapes);
        f.strides[..strides.len()].copy_from_slice(strides);
        f.extent = crate::geometry::extent_elems(f.ndims, &f.shapes, &f.strides);
        f.contiguous = crate::geometry::is_row_major(f.ndims, &f.shapes, &f.strides);
        f
    }

    #[test]
    fn column_blocks_of_a_matrix_are_disjoint_even_though_their_ranges_interleave() {
        // 16x16 row-major: columns 0..4 and 8..12 of every row.
        let a = fp(0, &[16, 4], &[16, 1]);
        let b = fp(8, &[16, 4], &[16, 1]);
        assert_eq!(check(&a, &b, 256), Overlap::None);
        // Columns 2..6 intersect columns 0..4.
        let c = fp(2, &[16, 4], &[16, 1]);
        assert_eq!(check(&a, &c, 256), Overlap::Partial);
        // The whole matrix covers a block; a block does not cover the matrix.
        let whole = fp(0, &[16, 16], &[16, 1]);
        assert_eq!(check(&whole, &b, 256), Overlap::Covered);
        assert_eq!(check(&b, &whole, 256), Overlap::Partial);
    }

    #[test]
    fn disjoint_ranges_need_no_geometry() {
        let a = fp(0, &[8], &[1]);
        let b = fp(8, &[2, 2], &[7, 3]);
        assert_eq!(check(&a, &b, 64), Overlap::None);
    }

    #[test]
    fn same_view_and_dense_supersets_are_covered() {
        let v = fp(3, &[2, 3], &[8, 1]);
        assert_eq!(check(&v, &v, 64), Overlap::Covered);
        let dense = fp(0, &[64], &[1]);
        let t = fp(0, &[4, 4], &[1, 4]);
        assert_eq!(check(&dense, &t, 64), Overlap::Covered);
        assert_eq!(check(&t, &dense, 64), Overlap::Partial);
    }

    #[test]
    fn incompatible_layouts_may_overlap() {
        // A transposed probe against a row-major entry over the same range: no exact test
        // applies. (The other way round, the dense probe covers the transposed entry.)
        let a = fp(0, &[4, 4], &[4, 1]);
        let t = fp(0, &[4, 4], &[1, 4]);
        assert_eq!(check(&t, &a, 16), Overlap::Partial);
        assert_eq!(check(&a, &t, 16), Overlap::Covered);
    }

    #[test]
    fn views_with_different_dtypes_are_compared_in_bytes() {
        // FLOAT32 elements [32, 64) and FLOAT16 elements [64, 128) are the same bytes.
        let f32 = fp(32, &[32], &[1]);
        let mut f16 = fp(64, &[64], &[1]);
        f16.dtype = 1;
        f16.elem_size = 2;
        assert_eq!(check(&f16, &f32, 128), Overlap::Covered);
        assert_eq!(check(&f32, &f16, 64), Overlap::Covered);
        let mut half = fp(64, &[32], &[1]);
        half.dtype = 1;
        half.elem_size = 2;
        assert_eq!(check(&half, &f32, 128), Overlap::Partial);
        assert_eq!(check(&f32, &half, 64), Overlap::Covered);
        let mut after = fp(128, &[8], &[1]);
        after.dtype = 1;
        after.elem_size = 2;
        assert_eq!(check(&after, &f32, 128), Overlap::None);
    }

    #[test]
    fn a_newer_version_always_depends() {
        let a = fp(0, &[4], &[1]);
        let mut b = fp(100, &[4], &[1]);
        b.version = 1;
        assert_eq!(check(&b, &a, 128), Overlap::Partial);
    }
}
