//! Products of whole register blocks (bgemm's 128x128 and 64x64 tiles), with the thread's
//! queued prefetches ([`super::ahead`]) issued from the inner loop.
//!
//! On AVX-512F each 8x32 block of `c` is held in 16 registers; on AVX2 with FMA each 6x16
//! block in 12 (of 16: the rest hold `b`'s row and the broadcast), with 4x16 blocks for the
//! rows left over. Meanwhile `k` rows of a panel of `b` as wide as the block (16 KiB or 8 KiB
//! for `k = 128`) meet the block's rows of `a`, one broadcast each. On neither unit, `gemm`
//! takes these products.
//!
//! The panel is packed into a per-thread buffer, its rows side by side. In `b` its rows are
//! `n` floats apart, so for bgemm's `n = 128` they fall in a sixteenth (AVX2: an eighth) of
//! the first-level cache's sets, more lines than those sets hold: each row block after the
//! first found them evicted. Packed, the panel stays in the first-level cache across the row
//! blocks. The panel's first row block packs it, storing each row of `b` as it loads it for
//! its own multiply-adds: a separate copy pass cost about a tenth of a warm 128³ product.
//! `peak`'s warm 128³ product measures each unit (`tests/benches/README.md`). `a` is not packed: each of its rows is read in order, and
//! bgemm reads each slice of it for one product only. The depth loop issues one queued
//! prefetch per [`MACS_PER_LINE`] multiply-adds on either unit: 2,048 lines (128 KiB, the next
//! slice's `a` and `b`) over a 128x128x128 product.
//!
//! On AVX-512 each block also prefetches its own output lines for writing (PREFETCHW), one
//! with each of its first 16 queued prefetches. A bgemm product goes to a fresh stretch of the
//! heap, in no cache of this core, so each store of the block's results would first read its
//! line for ownership when it got there; hinted, those reads run under the block's
//! multiply-adds. They are spread rather than issued at once, as the queue's are, and do not
//! change its pace. (The AVX2 blocks do not hint theirs: on a Zen 4 made to run them, the same
//! hints changed nothing measurable; `tests/benches/README.md`.)
//!
//! Results: each output is one fused multiply-add chain over `p = 0, 1, ..., k - 1` from
//! zero on either unit (checked bit for bit against a scalar chain); the portable loop rounds
//! each product before its add, so it may differ from these by that rounding (the bound in
//! [`super`]'s tests).

use super::ahead::{self, Ahead};
use super::lanes::Unit;

/// The shape of a register block on one vector unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Rows of the block.
    pub mr: usize,
    /// Columns of the block.
    pub nr: usize,
}

/// AVX-512F's block: two registers of 16 per row.
pub const AVX512: Block = Block { mr: 8, nr: 32 };

/// AVX2's block as [`fits`] sees it: two registers of 8 per row, in blocks of 6 rows where
/// they fit and 4 for the rest, so `m` need only be a multiple of 4.
pub const AVX2: Block = Block { mr: 4, nr: 16 };

/// Multiply-adds per queued prefetch, on either unit.
pub const MACS_PER_LINE: usize = 1024;

/// AVX-512's depth steps per queued prefetch: an 8x32 block's step is 256 multiply-adds.
const AVX512_STEPS_PER_LINE: usize = MACS_PER_LINE / (AVX512.mr * AVX512.nr);

impl Block {
    /// `unit`'s block, `None` for the baseline (which has none).
    #[inline(always)]
    pub const fn of(unit: Unit) -> Option<Self> {
        match unit {
            Unit::Avx512 => Some(AVX512),
            Unit::Avx2 => Some(AVX2),
            Unit::Baseline => None,
        }
    }
}

/// The block of the widest unit this CPU has, `None` when it has neither.
#[inline(always)]
pub fn block() -> Option<Block> {
    Block::of(Unit::detect())
}

/// The rows of the product `c = a · b` taken here: `m`, as many whole rows as `a` and `c`
/// both have, when it is a non-zero multiple of the [`block`]'s rows, `n` one of its columns,
/// `b` holds `k × n` and the CPU has one of the units; else `None` (`gemm` takes the product).
#[inline(always)]
pub fn fits(a: &[f32], b: &[f32], c: &[f32], k: usize, n: usize) -> Option<usize> {
    let blk = block()?;
    if k == 0 || n == 0 || !n.is_multiple_of(blk.nr) || b.len() < k * n {
        return None;
    }
    let m = (c.len() / n).min(a.len() / k);
    (m > 0 && m.is_multiple_of(blk.mr)).then_some(m)
}

/// Whether `(k, n, m)` is a whole number of `blk`'s blocks over operands this long.
#[inline(always)]
fn whole_blocks(
    blk: Block,
    a: &[f32],
    b: &[f32],
    c: &[f32],
    (k, n, m): (usize, usize, usize),
) -> bool {
    k > 0
        && m.is_multiple_of(blk.mr)
        && n.is_multiple_of(blk.nr)
        && a.len() >= m * k
        && b.len() >= k * n
        && c.len() >= m * n
}

/// Rows of `b` a packed panel holds: products deeper than this read their panels in place.
const PANEL_ROWS: usize = 256;

/// One panel of `b` packed by its first row block: up to `PANEL_ROWS` rows of its 32
/// columns (AVX-512) or 16 (AVX2) side by side, on a cache line; one per thread.
#[repr(C, align(64))]
struct Panel([f32; PANEL_ROWS * AVX512.nr]);

std::thread_local! {
    /// This thread's panel: zeroed once, not on every product.
    static PANEL: std::cell::RefCell<Panel> =
        const { std::cell::RefCell::new(Panel([0.0; PANEL_ROWS * AVX512.nr])) };
}

/// Runs `blocks` with this thread's panel when `k` rows fit it, else with none (the panels
/// are then read in place).
#[inline(always)]
fn with_panel<R>(k: usize, blocks: impl FnOnce(Option<&mut Panel>) -> R) -> R {
    if k > PANEL_ROWS {
        return blocks(None);
    }
    PANEL.with_borrow_mut(|panel| blocks(Some(panel)))
}

/// `c (m × n) = a (m × k) · b (k × n)` within [`fits`]' `m`, one 8x32 block at a time, on
/// AVX-512F; `K` and `N`, when not 0, are `k` and `n` known at compile time (the scenes'
/// shapes), so the strides are constants. Each 32-column panel of `b` is packed into the
/// thread's [`Panel`] (when `k` fits it) by its first row block, for the others to read.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn product_avx512<const K: usize, const N: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (k, n, m): (usize, usize, usize),
    q: &mut Ahead,
) -> bool {
    let (k, n) = (if K == 0 { k } else { K }, if N == 0 { n } else { N });
    if !whole_blocks(AVX512, a, b, c, (k, n, m)) {
        return false;
    }
    with_panel(k, |panel| {
        blocks_avx512::<K, N>(a, b, c, (k, n, m), q, panel)
    })
}

/// [`product_avx512`]'s blocks over a shape it checked. With a `panel`, each 32-column panel
/// of `b` is packed into it by the panel's first row block, which reads `b` in place and
/// stores each row it loads (the module docs).
///
/// Written with the unit's intrinsics rather than as lanes for the compiler to vectorise:
/// left to itself, it vectorised the depth loop with gathers in one build and not in another.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn blocks_avx512<const K: usize, const N: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (k, n, m): (usize, usize, usize),
    q: &mut Ahead,
    mut panel: Option<&mut Panel>,
) -> bool {
    const MR: usize = AVX512.mr;
    const NR: usize = AVX512.nr;
    let (k, n) = (if K == 0 { k } else { K }, if N == 0 { n } else { N });
    for j0 in (0..n).step_by(NR) {
        let in_b = Rows {
            first: &b[j0..],
            stride: n,
        };
        match panel.as_deref_mut() {
            Some(panel) => {
                let packed = &mut panel.0[..k * NR];
                block_avx512::<K, true>(a, in_b, Some(&mut *packed), c, (k, n), (0, j0), q);
                let in_panel = Rows {
                    first: packed,
                    stride: NR,
                };
                for i0 in (MR..m).step_by(MR) {
                    block_avx512::<K, false>(a, in_panel, None, c, (k, n), (i0, j0), q);
                }
            }
            None => {
                for i0 in (0..m).step_by(MR) {
                    block_avx512::<K, false>(a, in_b, None, c, (k, n), (i0, j0), q);
                }
            }
        }
    }
    true
}

/// The rows of a 32-column panel of `b`: row `p`'s elements are `first[p * stride ..][..32]`.
#[derive(Clone, Copy)]
struct Rows<'s> {
    first: &'s [f32],
    stride: usize,
}

/// The 8x32 block of `c` at rows `i0..`, columns `j0..`, over the panel `rows` (in `b`, or
/// packed); with `PACK`, each row of the panel is also stored into `pack` (`k` rows of 32
/// side by side) as it is loaded. One queued prefetch per [`AVX512_STEPS_PER_LINE`] depth
/// steps.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(unsafe_code)] // unaligned vector loads and stores: see the SAFETY comments
fn block_avx512<const K: usize, const PACK: bool>(
    a: &[f32],
    rows: Rows<'_>,
    pack: Option<&mut [f32]>,
    c: &mut [f32],
    (k, n): (usize, usize),
    (i0, j0): (usize, usize),
    q: &mut Ahead,
) {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps};
    use std::arch::x86_64::{_mm512_setzero_ps, _mm512_storeu_ps};
    const MR: usize = AVX512.mr;
    const NR: usize = AVX512.nr;
    let k = if K == 0 { k } else { K };
    // The last row of `a`, of the panel and of the pack exist (the caller's checks, restated
    // so that an out-of-range call panics here instead of touching memory past the slices).
    assert!((i0 + MR) * k <= a.len() && (k - 1) * rows.stride + NR <= rows.first.len());
    let pack = pack.map(|p| &mut p[..k * NR]);
    assert_eq!(pack.is_some(), PACK);
    let pack = pack.map_or(core::ptr::null_mut(), |p| p.as_mut_ptr());
    let (a_rows, b_rows) = (a[i0 * k..].as_ptr(), rows.first.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 2 * MR];
    // One multiply-add step of the block at depth `p < k`.
    let step = |p: usize, acc: &mut [__m512; 2 * MR]| {
        // SAFETY: `p < k`, so elements `p * stride .. + NR` of the panel are within the
        // length asserted above; `b_rows` is its first element.
        let (lo, hi) = unsafe {
            let row = b_rows.add(p * rows.stride);
            (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)))
        };
        if PACK {
            // SAFETY: with `PACK`, `pack` is the first of `k * NR` elements of a unique
            // borrow (asserted above), and `p * NR + NR <= k * NR`.
            unsafe {
                _mm512_storeu_ps(pack.add(p * NR), lo);
                _mm512_storeu_ps(pack.add(p * NR + 16), hi);
            }
        }
        for r in 0..MR {
            // SAFETY: `(i0 + r) * k + p < (i0 + MR) * k <= a.len()` (asserted above);
            // `a_rows` is `a` from `i0 * k`.
            let x = _mm512_set1_ps(unsafe { *a_rows.add(r * k + p) });
            acc[2 * r] = _mm512_fmadd_ps(x, lo, acc[2 * r]);
            acc[2 * r + 1] = _mm512_fmadd_ps(x, hi, acc[2 * r + 1]);
        }
    };
    // The block's output lines, taken for writing one per group of steps from the first, two
    // a row (a row's 128 bytes; a third line, where `c` is not on a line, is left to its
    // store): the module docs.
    let outs = c[i0 * n + j0..].as_ptr().cast::<u8>();
    let outs = outs.wrapping_sub(outs as usize % ahead::LINE);
    let hints = ahead::WriteHints::get();
    // Whole groups of steps, one queued prefetch each, then the rest with one more.
    let whole = k - k % AVX512_STEPS_PER_LINE;
    for (g, p0) in (0..whole).step_by(AVX512_STEPS_PER_LINE).enumerate() {
        q.step();
        if let Some(hints) = hints.filter(|_| g < 2 * MR) {
            let line = (g / 2) * n * 4 + (g % 2) * ahead::LINE;
            hints.prefetch(outs.wrapping_add(line));
        }
        for p in p0..p0 + AVX512_STEPS_PER_LINE {
            step(p, &mut acc);
        }
    }
    if whole < k {
        q.step();
        for p in whole..k {
            step(p, &mut acc);
        }
    }
    for r in 0..MR {
        let out = c[(i0 + r) * n + j0..][..NR].as_mut_ptr();
        // SAFETY: `out` starts `NR` elements of `c` (the slice just taken), and `c` is a
        // unique borrow, so these two stores of 16 touch only those.
        unsafe {
            _mm512_storeu_ps(out, acc[2 * r]);
            _mm512_storeu_ps(out.add(16), acc[2 * r + 1]);
        }
    }
}

/// [`product_avx512`] on AVX2 with FMA: each 16-wide panel in blocks of 6 rows (12
/// accumulators, enough multiply-adds in flight to cover their latency on both FMA pipes) and
/// then as many of 4 as make up `m` (`m` is a multiple of 4: at most two, as `4 · 3 = 12` is a
/// whole number of 6s), one queued prefetch per [`MACS_PER_LINE`] multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn product_avx2<const K: usize, const N: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (k, n, m): (usize, usize, usize),
    q: &mut Ahead,
) -> bool {
    let (k, n) = (if K == 0 { k } else { K }, if N == 0 { n } else { N });
    if !whole_blocks(AVX2, a, b, c, (k, n, m)) {
        return false;
    }
    with_panel(k, |panel| blocks_avx2::<K, N>(a, b, c, (k, n, m), q, panel))
}

/// [`product_avx2`]'s blocks over a shape it checked. With a `panel`, each 16-column panel of
/// `b` is packed into it by the panel's first row block, as on AVX-512
/// ([`blocks_avx512`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn blocks_avx2<const K: usize, const N: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (k, n, m): (usize, usize, usize),
    q: &mut Ahead,
    mut panel: Option<&mut Panel>,
) -> bool {
    const NR: usize = AVX2.nr;
    let (k, n) = (if K == 0 { k } else { K }, if N == 0 { n } else { N });
    // The rows in blocks of 6: all but the `(m / 4) % 3` blocks of 4 that make up the rest.
    let tall = m - 4 * (m / 4 % 3);
    // The first row block: of 6 rows when there are any such, else of 4.
    let first = if tall > 0 { 6 } else { 4 };
    let mut credit = 0;
    for j0 in (0..n).step_by(NR) {
        let in_b = Rows {
            first: &b[j0..],
            stride: n,
        };
        let packed = panel.as_deref_mut().map(|p| &mut p.0[..k * NR]);
        let rows = match packed {
            Some(packed) => {
                let at = (0, j0);
                if tall > 0 {
                    block_avx2::<6, true>(
                        a,
                        in_b,
                        Some(&mut *packed),
                        c,
                        (k, n),
                        at,
                        q,
                        &mut credit,
                    );
                } else {
                    block_avx2::<4, true>(
                        a,
                        in_b,
                        Some(&mut *packed),
                        c,
                        (k, n),
                        at,
                        q,
                        &mut credit,
                    );
                }
                Rows {
                    first: packed,
                    stride: NR,
                }
            }
            None => {
                let at = (0, j0);
                if tall > 0 {
                    block_avx2::<6, false>(a, in_b, None, c, (k, n), at, q, &mut credit);
                } else {
                    block_avx2::<4, false>(a, in_b, None, c, (k, n), at, q, &mut credit);
                }
                in_b
            }
        };
        for i0 in (first..tall).step_by(6) {
            block_avx2::<6, false>(a, rows, None, c, (k, n), (i0, j0), q, &mut credit);
        }
        for i0 in (tall.max(first)..m).step_by(4) {
            block_avx2::<4, false>(a, rows, None, c, (k, n), (i0, j0), q, &mut credit);
        }
    }
    true
}

/// The `MR x 16` block of `c` at rows `i0..`, columns `j0..` (`MR <= 6`), inside the shapes
/// [`product_avx2`] checked: `i0 + MR <= m`, `j0 + 16 <= n`, `a` of `m × k`, `c` of `m × n`
/// at least; over the panel `rows` (in `b`, or packed), each row stored into `pack` as it is
/// loaded with `PACK`. `credit` carries the multiply-adds since the last prefetch.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(unsafe_code)] // unaligned vector loads and stores: see the SAFETY comments
#[allow(clippy::too_many_arguments)] // the block's operands, place and prefetch state
fn block_avx2<const MR: usize, const PACK: bool>(
    a: &[f32],
    rows: Rows<'_>,
    pack: Option<&mut [f32]>,
    c: &mut [f32],
    (k, n): (usize, usize),
    (i0, j0): (usize, usize),
    q: &mut Ahead,
    credit: &mut usize,
) {
    use std::arch::x86_64::{_mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps};
    use std::arch::x86_64::{_mm256_setzero_ps, _mm256_storeu_ps};
    const NR: usize = AVX2.nr;
    // The last row of `a`, of the panel and of the pack exist (the caller's checks, restated
    // so that an out-of-range call panics here instead of touching memory past the slices).
    assert!(MR <= 6 && (i0 + MR) * k <= a.len() && (k - 1) * rows.stride + NR <= rows.first.len());
    let pack = pack.map(|p| &mut p[..k * NR]);
    assert_eq!(pack.is_some(), PACK);
    let pack = pack.map_or(core::ptr::null_mut(), |p| p.as_mut_ptr());
    let mut acc = [_mm256_setzero_ps(); 12];
    let (a_rows, b_rows) = (a[i0 * k..].as_ptr(), rows.first.as_ptr());
    for p in 0..k {
        *credit += MR * NR;
        if *credit >= MACS_PER_LINE {
            *credit -= MACS_PER_LINE;
            q.step();
        }
        // SAFETY: `p < k`, so elements `p * stride .. + NR` of the panel are within the
        // length asserted above; `b_rows` is its first element.
        let (lo, hi) = unsafe {
            let row = b_rows.add(p * rows.stride);
            (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)))
        };
        if PACK {
            // SAFETY: with `PACK`, `pack` is the first of `k * NR` elements of a unique
            // borrow (asserted above), and `p * NR + NR <= k * NR`.
            unsafe {
                _mm256_storeu_ps(pack.add(p * NR), lo);
                _mm256_storeu_ps(pack.add(p * NR + 8), hi);
            }
        }
        for r in 0..MR {
            // SAFETY: `(i0 + r) * k + p < (i0 + MR) * k <= a.len()` (asserted above);
            // `a_rows` is `a` from `i0 * k`.
            let x = _mm256_set1_ps(unsafe { *a_rows.add(r * k + p) });
            acc[2 * r] = _mm256_fmadd_ps(x, lo, acc[2 * r]);
            acc[2 * r + 1] = _mm256_fmadd_ps(x, hi, acc[2 * r + 1]);
        }
    }
    for r in 0..MR {
        let out = c[(i0 + r) * n + j0..][..NR].as_mut_ptr();
        // SAFETY: `out` starts `NR` elements of `c` (the slice just taken), and `c` is a
        // unique borrow, so these two stores of 8 touch only those.
        unsafe {
            _mm256_storeu_ps(out, acc[2 * r]);
            _mm256_storeu_ps(out.add(8), acc[2 * r + 1]);
        }
    }
}

/// `c (m × n) = a · b` within [`fits`]' `m`, in the [`block`]s of the widest unit, issuing this
/// thread's queued prefetches as it goes: true when it ran (the CPU has AVX-512F, or AVX2 and
/// FMA, and the shape is within [`fits`]).
#[inline]
pub fn matmul_fast(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, m: usize) -> bool {
    matmul_on(Unit::detect(), a, b, c, k, n, m)
}

/// [`matmul_fast`] in `unit`'s blocks, which must be a unit this CPU has (on any other, or
/// the baseline, it does nothing and returns false).
#[allow(unsafe_code)] // calling the `#[target_feature]` builds: see the SAFETY comments
pub fn matmul_on(
    unit: Unit,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    k: usize,
    n: usize,
    m: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let shape = (k, n, m);
        let avx512 = unit == Unit::Avx512 && std::arch::is_x86_feature_detected!("avx512f");
        let avx2 = unit == Unit::Avx2
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        if !avx512 && !avx2 {
            return false;
        }
        let mut q = ahead::take();
        let ran = if avx512 {
            // SAFETY: the CPU reports AVX-512F (checked above), the only feature this build
            // assumes beyond the baseline.
            unsafe {
                match (k, n) {
                    (128, 128) => product_avx512::<128, 128>(a, b, c, shape, &mut q),
                    (64, 64) => product_avx512::<64, 64>(a, b, c, shape, &mut q),
                    _ => product_avx512::<0, 0>(a, b, c, shape, &mut q),
                }
            }
        } else {
            // SAFETY: the CPU reports AVX2 and FMA (checked above), the only features this
            // build assumes beyond the baseline.
            unsafe {
                match (k, n) {
                    (128, 128) => product_avx2::<128, 128>(a, b, c, shape, &mut q),
                    (64, 64) => product_avx2::<64, 64>(a, b, c, shape, &mut q),
                    _ => product_avx2::<0, 0>(a, b, c, shape, &mut q),
                }
            }
        };
        ahead::put(q);
        ran
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (unit, a, b, c, k, n, m);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile_ops::test_values as values;

    /// The units this CPU has blocks for, with their blocks.
    fn units() -> Vec<(Unit, Block)> {
        Unit::available()
            .into_iter()
            .filter_map(|u| Block::of(u).map(|b| (u, b)))
            .collect()
    }

    /// Each output a scalar fused chain over `p` from zero.
    fn chained(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<u32> {
        let mut c = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    acc = a[i * k + p].mul_add(b[p * n + j], acc);
                }
                c.push(acc.to_bits());
            }
        }
        c
    }

    #[test]
    fn blocks_give_the_scalar_fused_chain() {
        for (m, k, n) in [
            (128, 128, 128),
            (64, 64, 64),
            (8, 1, 32),
            (16, 7, 96),
            (24, 130, 32),
            // Deeper than a packed panel holds: read in place.
            (8, PANEL_ROWS + 44, 64),
        ] {
            let a = values(m * k, 5 + m as u64);
            let b = values(k * n, 9 + k as u64);
            let want = chained(&a, &b, m, k, n);
            let c = vec![f32::NAN; (m + 1) * n];
            let widest = block().filter(|blk| m % blk.mr == 0 && n % blk.nr == 0);
            assert_eq!(fits(&a, &b, &c, k, n), widest.map(|_| m), "{m}x{k}x{n}");
            for (unit, blk) in units() {
                // One spare row of `c`, which `m` leaves alone.
                let mut c = vec![f32::NAN; (m + 1) * n];
                let ran = matmul_on(unit, &a, &b, &mut c, k, n, m);
                assert_eq!(
                    ran,
                    m % blk.mr == 0 && n % blk.nr == 0,
                    "{unit:?} {m}x{k}x{n}"
                );
                if ran {
                    let got: Vec<u32> = c[..m * n].iter().map(|v| v.to_bits()).collect();
                    assert!(got == want, "{unit:?} {m}x{k}x{n}");
                    assert!(c[m * n..].iter().all(|v| v.is_nan()), "{m}x{k}x{n}: past m");
                }
            }
        }
        // The baseline has no blocks.
        let mut c = vec![0.0; 64 * 64];
        assert!(!matmul_on(
            Unit::Baseline,
            &c.clone(),
            &c.clone(),
            &mut c,
            64,
            64,
            64
        ));
    }

    #[test]
    fn blocks_drain_one_queued_line_per_1024_multiply_adds() {
        let (m, k, n) = (16, 128, 64);
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let spare = vec![0u8; 1 << 20];
        for (unit, _) in units() {
            let mut c = vec![0.0; m * n];
            ahead::clear();
            ahead::queue(spare.as_ptr(), spare.len());
            let before = ahead::queued_lines();
            assert!(matmul_on(unit, &a, &b, &mut c, k, n, m), "{unit:?}");
            // A line per 1,024 multiply-adds, whatever the block.
            assert_eq!(before - ahead::queued_lines(), m * n * k / 1024, "{unit:?}");
            ahead::clear();
        }
    }

    #[test]
    fn shapes_off_the_blocks_are_left_to_the_others() {
        let (a, b, c) = (
            vec![0.0; 128 * 128],
            vec![0.0; 128 * 128],
            vec![0.0; 128 * 128],
        );
        assert_eq!(fits(&a, &b, &c, 128, 128).is_some(), block().is_some());
        assert_eq!(fits(&a, &b, &c[..7 * 128], 128, 128), None, "7 rows");
        assert_eq!(fits(&a, &b, &c, 128, 40), None, "40 columns");
        assert_eq!(fits(&a, &b[..128 * 127], &c, 128, 128), None, "b short");
        assert_eq!(fits(&a, &b, &c, 0, 128), None, "k = 0");
        // Called off its shapes anyway, it does nothing and says so.
        let mut c = vec![f32::NAN; 128 * 128];
        assert!(!matmul_fast(&a, &b, &mut c, 128, 128, 7));
        assert!(!matmul_fast(&a, &b[..100], &mut c, 128, 128, 8));
        assert!(c.iter().all(|v| v.is_nan()));
    }
}
