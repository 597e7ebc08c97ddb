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
    /// Raw [`DataType`](crate::dtype::DataType) byte.
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
    // The caller has checked every stride non-zero; a zero one answers "does not fit".
    let dims = out.iter_mut().zip(strides).zip(shapes).zip(radix);
    for (((o, &s), &shape), &r) in dims {
        let s = s as u64;
        if s == 0 {
            return None;
        }
        *o = rest / s;
        rest %= s;
        if *o + shape as u64 > r {
            return None;
        }
    }
    (rest == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

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

    // The tests below take their expectations from the elements each view addresses,
    // enumerated one by one, or from hand-worked coordinates; none asks another function of
    // this file.

    /// The bytes a view addresses, sorted, each once.
    struct Bytes(Vec<u64>);

    impl Bytes {
        fn is_disjoint(&self, other: &Self) -> bool {
            let (mut i, mut j) = (0, 0);
            while i < self.0.len() && j < other.0.len() {
                match self.0[i].cmp(&other.0[j]) {
                    core::cmp::Ordering::Less => i += 1,
                    core::cmp::Ordering::Greater => j += 1,
                    core::cmp::Ordering::Equal => return false,
                }
            }
            true
        }
        fn is_superset(&self, other: &Self) -> bool {
            let mut i = 0;
            other.0.iter().all(|b| {
                while i < self.0.len() && self.0[i] < *b {
                    i += 1;
                }
                i < self.0.len() && self.0[i] == *b
            })
        }
        fn shared(&self, other: &Self) -> usize {
            other
                .0
                .iter()
                .filter(|b| self.0.binary_search(b).is_ok())
                .count()
        }
    }

    /// Every byte `f` addresses: `(start + Σ i_d·stride_d)·size` and the `size - 1` bytes
    /// after it, for every index `i` below the shape.
    fn bytes_of(f: &Footprint) -> Bytes {
        let n = f.ndims as usize;
        let size = f.elem_size as u64;
        let mut out = Vec::new();
        let mut idx = [0u32; MAX_TENSOR_DIMS];
        loop {
            let elem = f.start
                + (0..n)
                    .map(|d| idx[d] as u64 * f.strides[d] as u64)
                    .sum::<u64>();
            out.extend(elem * size..(elem + 1) * size);
            let mut d = n;
            loop {
                if d == 0 {
                    out.sort_unstable();
                    out.dedup();
                    return Bytes(out);
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < f.shapes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }

    /// The answer the exact test owes two views: no shared byte is `None`, the probe holding
    /// every byte of the entry is `Covered`, anything else `Partial`.
    fn from_elements(probe: &Bytes, entry: &Bytes) -> Overlap {
        if probe.is_disjoint(entry) {
            Overlap::None
        } else if probe.is_superset(entry) {
            Overlap::Covered
        } else {
            Overlap::Partial
        }
    }

    /// Whether the byte ranges `[first, last]` of two views meet (so the range test alone
    /// cannot separate them).
    fn ranges_meet(a: &Bytes, b: &Bytes) -> bool {
        a.0[0] <= *b.0.last().unwrap() && b.0[0] <= *a.0.last().unwrap()
    }

    /// Row-major strides of a buffer with `radix` elements per dimension.
    fn strides_of(radix: &[u32]) -> Vec<u32> {
        let mut strides = std::vec![1u32; radix.len()];
        for d in (0..radix.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * radix[d + 1];
        }
        strides
    }

    /// The box `lo[d]..lo[d] + shape[d]` of a buffer laid out with `strides`.
    fn boxed(strides: &[u32], lo: &[u32], shape: &[u32]) -> Footprint {
        let start = lo
            .iter()
            .zip(strides)
            .map(|(&l, &s)| l as u64 * s as u64)
            .sum();
        fp(start, shape, strides)
    }

    /// In a 6^n buffer (n = 1..=5), the box [2, 4) in every dimension against the same box
    /// moved in one dimension d: to [4, 6) or [0, 2) it touches without sharing an element,
    /// to [3, 5) it shares a slab. For d past the outermost the byte ranges interleave, so
    /// only the per-dimension test can tell the touching boxes apart.
    #[test]
    fn boxes_that_touch_in_any_dimension_share_nothing() {
        for rank in 1..=MAX_TENSOR_DIMS {
            let radix = [6u32; MAX_TENSOR_DIMS];
            let strides = strides_of(&radix[..rank]);
            let elems = 6u64.pow(rank as u32);
            let shape = [2u32; MAX_TENSOR_DIMS];
            let lo = [2u32; MAX_TENSOR_DIMS];
            let a = boxed(&strides, &lo[..rank], &shape[..rank]);
            let ea = bytes_of(&a);
            for d in 0..rank {
                for (moved_to, expect) in [
                    (4, Overlap::None),
                    (0, Overlap::None),
                    (3, Overlap::Partial),
                    (1, Overlap::Partial),
                ] {
                    let mut lo_b = lo;
                    lo_b[d] = moved_to;
                    let b = boxed(&strides, &lo_b[..rank], &shape[..rank]);
                    let eb = bytes_of(&b);
                    assert_eq!(
                        ea.is_disjoint(&eb),
                        expect == Overlap::None,
                        "test premise, rank {rank} dim {d} to {moved_to}"
                    );
                    if d > 0 {
                        assert!(ranges_meet(&ea, &eb), "test premise, rank {rank} dim {d}");
                    }
                    assert_eq!(
                        check(&a, &b, elems),
                        expect,
                        "rank {rank}: box [2,4) against [{moved_to},{}) in dim {d}",
                        moved_to + 2
                    );
                    assert_eq!(
                        check(&b, &a, elems),
                        expect,
                        "rank {rank}: box [{moved_to},{}) in dim {d} against [2,4)",
                        moved_to + 2
                    );
                }
            }
        }
    }

    /// Boxes [2, 4) and [3, 5) in every dimension share exactly the element at 3, 3, ...; a
    /// one-element box inside a box is covered by it and only partly covers it.
    #[test]
    fn boxes_sharing_one_element_overlap() {
        for rank in 1..=MAX_TENSOR_DIMS {
            let strides = strides_of(&[6u32; MAX_TENSOR_DIMS][..rank]);
            let elems = 6u64.pow(rank as u32);
            let at = |lo: u32, size: u32| {
                boxed(
                    &strides,
                    &[lo; MAX_TENSOR_DIMS][..rank],
                    &[size; MAX_TENSOR_DIMS][..rank],
                )
            };
            let (a, b) = (at(2, 2), at(3, 2));
            let shared = bytes_of(&a).shared(&bytes_of(&b));
            assert_eq!(shared, 4, "test premise: one FLOAT32 element, rank {rank}");
            assert_eq!(check(&a, &b, elems), Overlap::Partial, "rank {rank}");
            assert_eq!(check(&b, &a, elems), Overlap::Partial, "rank {rank}");
            // The box's far corner and its first element, alone.
            for corner in [3, 2] {
                let one = at(corner, 1);
                assert_eq!(
                    check(&a, &one, elems),
                    Overlap::Covered,
                    "rank {rank} {corner}"
                );
                assert_eq!(
                    check(&one, &a, elems),
                    Overlap::Partial,
                    "rank {rank} {corner}"
                );
            }
        }
    }

    /// In a 6x6x6 buffer, a probe box covers an entry box exactly when it holds it in every
    /// dimension: one short end in any dimension makes it partial.
    #[test]
    fn a_box_covers_only_what_it_holds_in_every_dimension() {
        let strides = strides_of(&[6, 6, 6]);
        let entry = boxed(&strides, &[1, 2, 3], &[2, 2, 2]);
        let probe = boxed(&strides, &[1, 1, 2], &[3, 3, 3]);
        assert_eq!(check(&probe, &entry, 216), Overlap::Covered);
        assert_eq!(check(&entry, &probe, 216), Overlap::Partial);
        for d in 0..3 {
            // The probe starts one past the entry in dimension d, or ends one short of it.
            let mut late = ([1, 1, 2], [3, 3, 3]);
            late.0[d] = [1, 2, 3][d] + 1;
            late.1[d] = 2;
            let mut short = ([1, 1, 2], [3, 3, 3]);
            short.1[d] = [1, 2, 3][d] + 1 - short.0[d];
            for (lo, shape) in [late, short] {
                let p = boxed(&strides, &lo, &shape);
                assert!(
                    !bytes_of(&p).is_superset(&bytes_of(&entry))
                        && !bytes_of(&p).is_disjoint(&bytes_of(&entry)),
                    "test premise, dim {d}: {lo:?} {shape:?}"
                );
                assert_eq!(
                    check(&p, &entry, 216),
                    Overlap::Partial,
                    "dim {d}: {lo:?} {shape:?}"
                );
            }
        }
    }

    /// Every box of a few small mixed-radix layouts (some with padding past the boxes' reach,
    /// some whose rows are dense) against every other: the answer is exactly what their
    /// elements say.
    #[test]
    fn every_pair_of_boxes_of_a_small_layout_is_decided_exactly() {
        // (elements per dimension of the buffer, the largest box corner).
        let layouts: &[(&[u32], &[u32])] = if cfg!(miri) {
            &[(&[2, 3], &[2, 3])]
        } else {
            &[
                (&[3, 5], &[3, 5]),
                (&[3, 8], &[3, 5]),
                (&[2, 2, 3], &[2, 2, 3]),
                (&[2, 3, 2, 2], &[2, 3, 2, 2]),
            ]
        };
        for &(radix, reach) in layouts {
            let strides = strides_of(radix);
            let elems: u64 = radix.iter().map(|&r| r as u64).product();
            // Every box [lo, hi) with hi <= reach, per dimension.
            let mut boxes = std::vec![(Vec::new(), Vec::new())];
            for &r in reach {
                let mut next = Vec::new();
                for (lo, shape) in &boxes {
                    for l in 0..r {
                        for h in l + 1..=r {
                            let (mut lo, mut shape): (Vec<u32>, Vec<u32>) =
                                (lo.clone(), shape.clone());
                            lo.push(l);
                            shape.push(h - l);
                            next.push((lo, shape));
                        }
                    }
                }
                boxes = next;
            }
            let views: Vec<(Footprint, Bytes)> = boxes
                .iter()
                .map(|(lo, shape)| {
                    let f = boxed(&strides, lo, shape);
                    (f, bytes_of(&f))
                })
                .collect();
            for (p, pb) in &views {
                for (e, eb) in &views {
                    assert_eq!(
                        check(p, e, elems),
                        from_elements(pb, eb),
                        "layout {radix:?}: probe {p:?} entry {e:?}"
                    );
                }
            }
        }
    }

    /// Pairs the exact test does not apply to, each sharing no element although their byte
    /// ranges meet: the test may only answer "may overlap". Next to each, the same pair made
    /// exact where one exists, which is decided.
    #[test]
    fn without_the_exact_test_disjoint_views_may_overlap() {
        let shares_nothing = |a: &Footprint, b: &Footprint| {
            let (ea, eb) = (bytes_of(a), bytes_of(b));
            ea.is_disjoint(&eb) && ranges_meet(&ea, &eb)
        };
        // Different strides: elements {0, 1, 8, 9} and {2, 4, 10, 12}.
        let a = fp(0, &[2, 2], &[8, 1]);
        let b = fp(2, &[2, 2], &[8, 2]);
        assert!(shares_nothing(&a, &b));
        assert_eq!(check(&a, &b, 16), Overlap::Partial);
        assert_eq!(check(&b, &a, 16), Overlap::Partial);
        // Different dtypes, same strides: FLOAT32 elements 0 and 8 (bytes 0..4, 32..36)
        // against FLOAT16 element 4 (bytes 8..10).
        let f32s = fp(0, &[2, 1], &[8, 1]);
        let mut f16 = fp(4, &[1, 1], &[8, 1]);
        f16.dtype = 1;
        f16.elem_size = 2;
        assert!(shares_nothing(&f32s, &f16));
        assert_eq!(check(&f32s, &f16, 16), Overlap::Partial);
        assert_eq!(check(&f16, &f32s, 32), Overlap::Partial);
        // As FLOAT32 element 2 (bytes 8..12) the same entry is decided.
        assert_eq!(check(&f32s, &fp(2, &[1, 1], &[8, 1]), 16), Overlap::None);
        // Innermost stride not 1: even and odd elements.
        let even = fp(0, &[4], &[2]);
        let odd = fp(1, &[4], &[2]);
        assert!(shares_nothing(&even, &odd));
        assert_eq!(check(&even, &odd, 8), Overlap::Partial);
        // A stride that is not a multiple of the next: {0, 5} and {2}.
        let a = fp(0, &[2, 1, 1], &[5, 2, 1]);
        let b = fp(2, &[1, 1, 1], &[5, 2, 1]);
        assert!(shares_nothing(&a, &b));
        assert_eq!(check(&a, &b, 10), Overlap::Partial);
        // Rows of 4 with columns 0..2 and 2..4: decided in a buffer of three whole rows, not
        // in one of 10 elements (the outer coordinate has no radix).
        let left = fp(0, &[2, 2], &[4, 1]);
        let right = fp(2, &[2, 2], &[4, 1]);
        assert!(shares_nothing(&left, &right));
        assert_eq!(check(&left, &right, 12), Overlap::None);
        assert_eq!(check(&left, &right, 10), Overlap::Partial);
        // Not a box: three columns from column 2 of rows of 4 run into the next row
        // ({2, 3, 4, 6, 7, 8}); element 5 is not among them.
        let wraps = fp(2, &[2, 3], &[4, 1]);
        let five = fp(5, &[1, 1], &[4, 1]);
        assert!(shares_nothing(&wraps, &five));
        assert_eq!(check(&wraps, &five, 16), Overlap::Partial);
        assert_eq!(check(&five, &wraps, 16), Overlap::Partial);
        // A newer version depends on disjoint boxes and disjoint ranges alike.
        let mut newer = left;
        newer.version = 1;
        assert_eq!(check(&newer, &right, 12), Overlap::Partial);
        assert_eq!(check(&right, &newer, 12), Overlap::None);
    }

    /// The same view again is covered whatever its layout, also where no exact test applies
    /// (transposed, stepped, FLOAT16, running into the next row), and in a buffer whose size
    /// is no whole number of rows.
    #[test]
    fn the_same_view_again_is_covered_in_any_layout() {
        let mut half = fp(2, &[2, 2], &[8, 1]);
        half.dtype = 1;
        half.elem_size = 2;
        for v in [
            fp(0, &[4, 4], &[1, 4]),
            fp(1, &[4], &[2]),
            fp(0, &[2, 1, 1], &[5, 2, 1]),
            fp(2, &[2, 3], &[4, 1]),
            fp(3, &[2, 2], &[3, 2]),
            half,
        ] {
            assert!(bytes_of(&v).is_superset(&bytes_of(&v)), "test premise");
            assert!(!v.contiguous, "test premise: {v:?} is dense");
            assert_eq!(check(&v, &v, 17), Overlap::Covered, "{v:?}");
        }
    }

    /// In a 2x3x4 buffer (strides 12, 4, 1), a view of two rows from row 2 of a plane runs
    /// into the next plane: it is no box, and the exact test must not treat it as one. Against
    /// the first row of plane 1, which it shares, the answer is "may overlap", not "disjoint
    /// in dimension 0".
    #[test]
    fn a_view_running_past_a_middle_dimension_is_no_box() {
        let strides = strides_of(&[2, 3, 4]);
        // Rows 2 and 3 of plane 0, in both planes' column 0..2: elements 8, 9, 12, 13 and
        // 20, 21, 24, 25 (row 3 of plane 0 is row 0 of plane 1).
        let wraps = boxed(&strides, &[0, 2, 0], &[2, 2, 2]);
        let row = boxed(&strides, &[1, 0, 0], &[1, 1, 4]);
        let (ew, er) = (bytes_of(&wraps), bytes_of(&row));
        assert_eq!(er.shared(&ew), 2 * 4, "test premise: elements 12 and 13");
        assert!(!wraps.contiguous, "test premise");
        assert_eq!(check(&row, &wraps, 24), Overlap::Partial);
        assert_eq!(check(&wraps, &row, 24), Overlap::Partial);
        // The same in a 5-D 2x2x3x2x2 buffer, wrapping in dimension 2.
        let strides = strides_of(&[2, 2, 3, 2, 2]);
        let wraps = boxed(&strides, &[0, 0, 2, 0, 0], &[1, 1, 2, 1, 1]);
        let next = boxed(&strides, &[0, 1, 0, 0, 0], &[1, 1, 1, 2, 1]);
        assert!(
            !bytes_of(&wraps).is_disjoint(&bytes_of(&next)),
            "test premise"
        );
        assert_eq!(check(&next, &wraps, 48), Overlap::Partial);
        assert_eq!(check(&wraps, &next, 48), Overlap::Partial);
    }

    /// Views that share a byte are never answered `None`, and `Covered` only when the probe
    /// holds every byte of the entry, whatever their layouts: row-major, padded, transposed,
    /// stepped and FLOAT16 views of one 64-byte buffer.
    #[test]
    fn no_answer_contradicts_the_elements() {
        let mut views: Vec<Footprint> = Vec::new();
        let shapes: &[(&[u32], &[u32])] = &[
            (&[4, 4], &[4, 1]),
            (&[4, 4], &[1, 4]),
            (&[2, 2], &[8, 1]),
            (&[2, 2], &[4, 2]),
            (&[3], &[5]),
            (&[8], &[1]),
        ];
        let starts = if cfg!(miri) { 0..2 } else { 0..8 };
        for &(shape, strides) in shapes {
            for start in starts.clone() {
                let f = fp(start, shape, strides);
                if f.start + f.extent <= 16 {
                    views.push(f);
                }
                let mut half = fp(start * 2, shape, strides);
                half.dtype = 1;
                half.elem_size = 2;
                if half.start + half.extent <= 32 {
                    views.push(half);
                }
            }
        }
        let views: Vec<(Footprint, Bytes)> = views.into_iter().map(|f| (f, bytes_of(&f))).collect();
        for (p, pb) in &views {
            for (e, eb) in &views {
                let got = check(p, e, 64 / p.elem_size as u64);
                if !pb.is_disjoint(eb) {
                    assert_ne!(got, Overlap::None, "probe {p:?} entry {e:?}");
                }
                if got == Overlap::Covered {
                    assert!(pb.is_superset(eb), "probe {p:?} entry {e:?}");
                }
            }
        }
    }
}
