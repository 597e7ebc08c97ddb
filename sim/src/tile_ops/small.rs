//! Products of small tiles, where `gemm`'s packing and blocking cost more than the arithmetic
//! (paged attention's 16x16x16 products took about 8,000 instructions each through it): the
//! portable i-k-j loop, compiled for the vector units ([`super::lanes`]' dispatch) and, for the
//! common widths, with the output row held in registers.
//!
//! Results: the same terms in the same order as [`simpler_aicore::tile_ops::matmul`] and
//! [`simpler_aicore::tile_ops::matmul_bt`] (each output a running sum from `p = 0`, no fused
//! multiply-add), so the same values as the firmware's loops, on every CPU.

/// Largest `m · n · k` taken this way; larger products go to `gemm`.
pub const MAX_VOLUME: usize = 32 * 32 * 32;
/// Largest `n · k` of a transposed product's right operand (transposed on the stack).
const MAX_BT: usize = 32 * 32;

/// `c (m × n) = a (m × k) · b (k × n)` for one row width `N` known at compile time: each
/// output row accumulates in `N` lanes.
#[inline(always)]
fn rows<const N: usize>(a: &[f32], b: &[f32], c: &mut [f32], k: usize) {
    for (c_row, a_row) in c.chunks_exact_mut(N).zip(a.chunks_exact(k)) {
        let mut acc = [0.0f32; N];
        for (&x, b_row) in a_row.iter().zip(b.chunks_exact(N)) {
            for (y, &z) in acc.iter_mut().zip(b_row) {
                *y += x * z;
            }
        }
        c_row.copy_from_slice(&acc);
    }
}

/// [`rows`] with the depth `K` known at compile time too: `a`'s row and `b` are arrays of
/// fixed length, so the loop over `p` unrolls and `b`'s rows are read at fixed offsets.
/// `NK = N · K`. The same terms in the same order.
#[inline(always)]
fn rows_fixed<const N: usize, const K: usize, const NK: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    const { assert!(NK == N * K, "NK is N times K") };
    let Some(b) = b.first_chunk::<NK>() else {
        return rows::<N>(a, b, c, K);
    };
    let (b_rows, _) = b.as_chunks::<N>();
    let (a_rows, _) = a.as_chunks::<K>();
    let (c_rows, _) = c.as_chunks_mut::<N>();
    for (c_row, a_row) in c_rows.iter_mut().zip(a_rows) {
        let mut acc = [0.0f32; N];
        for (&x, b_row) in a_row.iter().zip(b_rows) {
            for (y, &z) in acc.iter_mut().zip(b_row) {
                *y += x * z;
            }
        }
        *c_row = acc;
    }
}

/// The same for any width `n`, accumulating in `c`'s row.
#[inline(always)]
fn rows_any(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
    for (c_row, a_row) in c.chunks_exact_mut(n).zip(a.chunks_exact(k)) {
        c_row.fill(0.0);
        for (&x, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
            for (y, &z) in c_row.iter_mut().zip(b_row) {
                *y += x * z;
            }
        }
    }
}

/// [`rows`] for the widths with a register-held row, else [`rows_any`]; `k, n > 0`.
#[inline(always)]
fn product(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
    match (n, k) {
        (16, 16) => rows_fixed::<16, 16, 256>(a, b, c),
        _ => product_any(a, b, c, k, n),
    }
}

/// [`product`] for the widths without a fixed depth.
#[inline(always)]
fn product_any(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
    match n {
        8 => rows::<8>(a, b, c, k),
        16 => rows::<16>(a, b, c, k),
        32 => rows::<32>(a, b, c, k),
        _ => rows_any(a, b, c, k, n),
    }
}

std::thread_local! {
    /// Each thread's copy of a transposed right operand: kept, so that no call zeroes a fresh
    /// one (the copy writes every element it then reads).
    static TRANSPOSED: std::cell::Cell<Option<Box<[f32; MAX_BT]>>> = const {
        std::cell::Cell::new(None)
    };
}

/// `c = scale · a · bᵀ` (`b` is `n × k`, `n · k <= MAX_BT`, `b` holding all of it): `b`
/// transposed into this thread's copy, then [`product`]; each output is scaled after its sum,
/// as the portable dot product is.
///
/// The copy is taken out of its thread-local cell and put back, not borrowed inside the
/// cell's `with` closure: the closure would be compiled for the baseline target, without
/// the vector unit the caller was built for.
#[inline(always)]
fn product_bt(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, scale: f32) {
    let mut copy = TRANSPOSED.take().unwrap_or_else(|| Box::new([0.0; MAX_BT]));
    let bt = &mut copy[..n * k];
    match (n, k) {
        (8, 8) => transpose_square::<8, 64>(b, bt),
        (16, 16) => transpose_square::<16, 256>(b, bt),
        (32, 32) => transpose_square::<32, 1024>(b, bt),
        (8, _) => transpose::<8>(b, bt, k),
        (16, _) => transpose::<16>(b, bt, k),
        (32, _) => transpose::<32>(b, bt, k),
        _ => {
            for (j, b_row) in b.chunks_exact(k).take(n).enumerate() {
                for (v, t) in b_row.iter().zip(bt[j..].iter_mut().step_by(n)) {
                    *t = *v;
                }
            }
        }
    }
    product(a, bt, c, k, n);
    TRANSPOSED.set(Some(copy));
    // Only the rows the product wrote (as many as both `a` and `c` have).
    let written = (c.len() / n).min(a.len() / k) * n;
    for v in c.iter_mut().take(written) {
        *v *= scale;
    }
}

/// `bt = bᵀ` for a square `b` of `N × N` (`NN = N · N` elements): with every bound known at
/// compile time the compiler moves it in shuffled registers, where [`transpose`]'s gathers
/// cost a few times more on CPUs whose gather is microcoded. A `b` or `bt` shorter than
/// `NN` moves nothing (`fits_bt` keeps the callers' long enough).
#[inline(always)]
fn transpose_square<const N: usize, const NN: usize>(b: &[f32], bt: &mut [f32]) {
    const { assert!(NN == N * N, "NN is N squared") };
    let (Some(b), Some(bt)) = (b.first_chunk::<NN>(), bt.first_chunk_mut::<NN>()) else {
        return;
    };
    for j in 0..N {
        for p in 0..N {
            bt[p * N + j] = b[j * N + p];
        }
    }
}

/// `bt (k × N) = bᵀ` for `b` of `N × k` (at least that long): a row of `bt` at a time, each
/// a gather of one column of `b`, which the vector units do in one instruction.
#[inline(always)]
fn transpose<const N: usize>(b: &[f32], bt: &mut [f32], k: usize) {
    for (p, bt_row) in bt.chunks_exact_mut(N).take(k).enumerate() {
        for (j, t) in bt_row.iter_mut().enumerate() {
            *t = b.get(j * k + p).copied().unwrap_or(0.0);
        }
    }
}

crate::tile_ops::lanes::dispatched!(
    /// `c (m × n) = a (m × k) · b (k × n)` (`k, n > 0`) on the widest vector unit.
    matmul_fast, matmul_on, (a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) -> (), product
);
crate::tile_ops::lanes::dispatched!(
    /// `c = scale · a · bᵀ` (`b` of `n × k`, within [`fits_bt`]) on the widest vector unit.
    matmul_bt_fast, matmul_bt_on,
    (a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, scale: f32) -> (), product_bt
);

/// Whether a product of `c.len() / n` rows, depth `k` and width `n` is taken here.
#[inline(always)]
pub fn fits(c: &[f32], k: usize, n: usize) -> bool {
    k > 0 && n > 0 && c.len() / n * n * k <= MAX_VOLUME
}

/// Whether the transposed product's right operand fits the stack copy, and `b` holds all of
/// it (a shorter `b` goes to the portable loop, which covers what it can).
#[inline(always)]
pub fn fits_bt(b: &[f32], c: &[f32], k: usize, n: usize) -> bool {
    fits(c, k, n) && n * k <= MAX_BT && b.len() >= n * k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile_ops::lanes::Unit;
    use crate::tile_ops::test_values as values;
    use simpler_aicore::tile_ops::{matmul, matmul_bt};

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn small_products_give_the_portable_loops_values_on_every_unit() {
        let units = [Unit::Baseline, Unit::Avx2, Unit::Avx512];
        for (m, k, n) in [
            (16, 16, 16),
            (16, 16, 8),
            (8, 8, 8),
            (4, 32, 32),
            (2, 32, 16),
            (7, 5, 3),
            (1, 1, 1),
            (3, 9, 16),
        ] {
            let a = values(m * k, 3 + k as u64);
            let b = values(k * n, 11 + n as u64);
            let mut want = vec![0.0; m * n];
            matmul(&a, &b, &mut want, k, n);
            let mut want_bt = vec![0.0; m * n];
            matmul_bt(&a, &b, &mut want_bt, k, n, 0.25);
            for unit in units {
                let mut c = vec![f32::NAN; m * n];
                matmul_on(unit, &a, &b, &mut c, k, n);
                assert_eq!(bits(&c), bits(&want), "{unit:?} {m}x{k}x{n}");
                let mut c = vec![f32::NAN; m * n];
                matmul_bt_on(unit, &a, &b, &mut c, k, n, 0.25);
                // Zeros may differ in sign only; every value is the same.
                assert_eq!(c, want_bt, "{unit:?} {m}x{k}x{n} bt");
            }
        }
    }

    #[test]
    fn what_is_too_large_or_too_short_is_left_to_the_others() {
        let c = vec![0.0; 64 * 64];
        assert!(!fits(&c, 64, 64), "64x64x64 goes to gemm");
        assert!(fits(&c[..16 * 16], 16, 16));
        assert!(!fits(&c[..16], 0, 16), "k = 0");
        let b = vec![0.0; 16 * 16];
        assert!(fits_bt(&b, &c[..256], 16, 16));
        assert!(!fits_bt(&b[..255], &c[..256], 16, 16), "b short of n x k");
    }
}
