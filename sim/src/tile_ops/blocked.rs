//! Products of whole 8x32 blocks (bgemm's 128x128 and 64x64 tiles), register-blocked, with
//! the thread's queued prefetches ([`super::ahead`]) issued from the inner loop.
//!
//! Each 8x32 block of `c` is held in 16 AVX-512 registers while `k` rows of a 32-wide panel
//! of `b` (16 KiB for `k = 128`, so it stays in the first-level cache across the row blocks)
//! meet 8 rows of `a`, one broadcast each. Without AVX-512F, `gemm` takes these products. Neither operand is
//! packed: bgemm's operands are read once, from memory no other task reads, so a packed copy
//! would be one more pass over them. Every fourth step of the depth loop issues one queued
//! prefetch, 2,048 lines (128 KiB, the next slice's `a` and `b`) over a 128x128x128 product.
//!
//! Results: each output is one fused multiply-add chain over `p = 0, 1, ..., k - 1` from
//! zero (checked bit for bit against a scalar chain); the portable loop rounds each product
//! before its add, so it may differ from these by that rounding (the bound in [`super`]'s
//! tests).

use super::ahead::{self, Ahead};

/// Rows of a block.
pub const MR: usize = 8;
/// Columns of a block.
pub const NR: usize = 32;
/// Depth steps per queued prefetch.
const STEPS_PER_LINE: usize = 4;

/// The rows of the product `c = a · b` taken here: `m`, as many whole rows as `a` and `c`
/// both have, when it is a non-zero multiple of [`MR`], `n` one of [`NR`], `b` holds `k × n`
/// and the CPU has AVX-512F; else `None` (`gemm` takes the product).
#[inline(always)]
pub fn fits(a: &[f32], b: &[f32], c: &[f32], k: usize, n: usize) -> Option<usize> {
    if k == 0 || n == 0 || !n.is_multiple_of(NR) || b.len() < k * n {
        return None;
    }
    let m = (c.len() / n).min(a.len() / k);
    (m > 0 && m.is_multiple_of(MR) && super::lanes::Unit::detect() == super::lanes::Unit::Avx512)
        .then_some(m)
}

/// `c (m × n) = a (m × k) · b (k × n)` within [`fits`]' `m`, one 8x32 block at a time, on
/// AVX-512F; `K` and `N`, when not 0, are `k` and `n` known at compile time (the scenes'
/// shapes), so the strides are constants.
///
/// Written with the unit's intrinsics rather than as lanes for the compiler to vectorise:
/// left to itself, it vectorised the depth loop with gathers in one build and not in another.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)] // unaligned vector loads and stores: see the SAFETY comments
fn product_avx512<const K: usize, const N: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (k, n, m): (usize, usize, usize),
    q: &mut Ahead,
) -> bool {
    use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps};
    use std::arch::x86_64::{_mm512_setzero_ps, _mm512_storeu_ps};
    let (k, n) = (if K == 0 { k } else { K }, if N == 0 { n } else { N });
    if !m.is_multiple_of(MR)
        || !n.is_multiple_of(NR)
        || a.len() < m * k
        || b.len() < k * n
        || c.len() < m * n
    {
        return false;
    }
    for j0 in (0..n).step_by(NR) {
        for i0 in (0..m).step_by(MR) {
            let mut acc = [_mm512_setzero_ps(); 2 * MR];
            let (a_rows, b_panel) = (a[i0 * k..].as_ptr(), b[j0..].as_ptr());
            for p in 0..k {
                if p.is_multiple_of(STEPS_PER_LINE) {
                    q.step();
                }
                // SAFETY: `p < k` and `j0 + NR <= n`, so elements `p * n + j0 .. + NR` of `b`
                // are below `k * n <= b.len()` (checked above); `b_panel` is `b` from `j0`.
                let (lo, hi) = unsafe {
                    let row = b_panel.add(p * n);
                    (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)))
                };
                for r in 0..MR {
                    // SAFETY: `(i0 + r) * k + p < m * k <= a.len()` (`i0 + r < m`, `p < k`);
                    // `a_rows` is `a` from `i0 * k`.
                    let x = _mm512_set1_ps(unsafe { *a_rows.add(r * k + p) });
                    acc[2 * r] = _mm512_fmadd_ps(x, lo, acc[2 * r]);
                    acc[2 * r + 1] = _mm512_fmadd_ps(x, hi, acc[2 * r + 1]);
                }
            }
            for r in 0..MR {
                let out = c[(i0 + r) * n + j0..][..NR].as_mut_ptr();
                // SAFETY: `out` starts `NR` elements of `c` (the slice just taken), and
                // `c` is a unique borrow, so these two stores of 16 touch only those.
                unsafe {
                    _mm512_storeu_ps(out, acc[2 * r]);
                    _mm512_storeu_ps(out.add(16), acc[2 * r + 1]);
                }
            }
        }
    }
    true
}

/// `c (m × n) = a · b` within [`fits`]' `m`, 8x32 blocks on AVX-512F, issuing this thread's
/// queued prefetches as it goes: true when it ran (the CPU has AVX-512F, and the shape is
/// within [`fits`]).
#[allow(unsafe_code)] // calling the `#[target_feature]` build: see the SAFETY comment
pub fn matmul_fast(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, m: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        let mut q = ahead::take();
        let shape = (k, n, m);
        // SAFETY: the CPU reports AVX-512F (checked just above), the only feature these
        // builds assume beyond the baseline.
        let ran = unsafe {
            match (k, n) {
                (128, 128) => product_avx512::<128, 128>(a, b, c, shape, &mut q),
                (64, 64) => product_avx512::<64, 64>(a, b, c, shape, &mut q),
                _ => product_avx512::<0, 0>(a, b, c, shape, &mut q),
            }
        };
        ahead::put(q);
        return ran;
    }
    let _ = (a, b, c, k, n, m);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile_ops::test_values as values;

    fn avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
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
        ] {
            let a = values(m * k, 5 + m as u64);
            let b = values(k * n, 9 + k as u64);
            // One spare row of `c`, which `m` leaves alone.
            let mut c = vec![f32::NAN; (m + 1) * n];
            let ran = matmul_fast(&a, &b, &mut c, k, n, m);
            assert_eq!(ran, avx512(), "{m}x{k}x{n}");
            assert_eq!(fits(&a, &b, &c, k, n), ran.then_some(m));
            if ran {
                let got: Vec<u32> = c[..m * n].iter().map(|v| v.to_bits()).collect();
                assert!(got == chained(&a, &b, m, k, n), "{m}x{k}x{n}");
                assert!(c[m * n..].iter().all(|v| v.is_nan()), "{m}x{k}x{n}: past m");
            }
        }
    }

    #[test]
    fn blocks_drain_one_queued_line_every_four_depth_steps() {
        let (m, k, n) = (16, 128, 64);
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let mut c = vec![0.0; m * n];
        let spare = vec![0u8; 1 << 20];
        ahead::clear();
        ahead::queue(spare.as_ptr(), spare.len());
        let before = ahead::queued_lines();
        let drained = if matmul_fast(&a, &b, &mut c, k, n, m) {
            (m / MR) * (n / NR) * k / STEPS_PER_LINE
        } else {
            0
        };
        assert_eq!(before - ahead::queued_lines(), drained);
        ahead::clear();
    }

    #[test]
    fn shapes_off_the_blocks_are_left_to_the_others() {
        let (a, b, c) = (
            vec![0.0; 128 * 128],
            vec![0.0; 128 * 128],
            vec![0.0; 128 * 128],
        );
        assert_eq!(fits(&a, &b, &c, 128, 128).is_some(), avx512());
        assert_eq!(fits(&a, &b, &c[..7 * 128], 128, 128), None, "7 rows");
        assert_eq!(fits(&a, &b, &c, 128, 48), None, "48 columns");
        assert_eq!(fits(&a, &b[..128 * 127], &c, 128, 128), None, "b short");
        assert_eq!(fits(&a, &b, &c, 0, 128), None, "k = 0");
        // Called off its shapes anyway, it does nothing and says so.
        let mut c = vec![f32::NAN; 128 * 128];
        assert!(!matmul_fast(&a, &b, &mut c, 128, 128, 7));
        assert!(!matmul_fast(&a, &b[..100], &mut c, 128, 128, 8));
        assert!(c.iter().all(|v| v.is_nan()));
    }
}
