//! The simulator's compute units: [`TileOps`] on the host's vector units.
//!
//! Matrix products of whole register blocks (bgemm's 128x128 and 64x64 tiles: 8x32 on
//! AVX-512F, 6x16 and 4x16 on AVX2 with FMA) run on this crate's blocks ([`blocked`]), which
//! also issue the prefetches a kernel queued for its next slice ([`ahead`]), so the next
//! operands stream in while this product computes. Small products (paged attention's 16x16
//! tiles) run the portable loop compiled for the vector units ([`small`]). The rest go to the `gemm` crate, which picks its micro-kernel
//! for the widest vector unit the CPU reports when first called (AVX-512F with the `x86-v4`
//! feature, else AVX2 with FMA, else SSE or a portable loop) and blocks the product for the
//! caches. Every product runs on the calling thread (`Parallelism::None` for `gemm`): a
//! simulated core is one task on one host thread, and the device's other threads are the
//! other cores. `gemm` was chosen over `matrixmultiply`, the other well-kept pure-Rust
//! candidate, because it has AVX-512 micro-kernels and takes any row and column strides, so
//! `q kᵀ` needs no transpose; the blocks replace it where its packing copy was one more pass
//! over operands read once (`tests/benches/README.md`, `scene`).
//!
//! `exp`, row maxima and row sums ([`lanes`]) are plain Rust over 16 lanes, compiled for
//! AVX-512F and for AVX2 and chosen at run time: softmax's `exp` is most of paged attention's
//! arithmetic, and libm's scalar `expf` cost about 7 ns an element. The tile moves' bf16
//! widening and rounding are the portable loops compiled the same way (on the baseline target
//! the rounding's pack does not vectorise). The other elementwise
//! operations run the portable loops ([`TileOps`]' provided methods), which the compiler
//! vectorises for the baseline target already.
//!
//! Results: a product sums its `k` terms as fused multiply-adds ([`blocked`]) or in `gemm`'s
//! blocked order, not the portable loop's rounded product-then-add order; `tile_ops` tests bound the difference (see
//! [`simpler_aicore::tile_ops`] for the bound). `exp` is within 2 ulp where libm's is within
//! 1, and a row sum adds in 16 partial sums ([`lanes`] gives the bounds); every CPU gives the
//! same bits for these.

pub mod ahead;
pub mod blocked;
pub mod lanes;
pub mod small;

use simpler_aicore::TileOps;

/// The host's vector units as the cores' tile operations; one shared by every core.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostTileOps;

/// `c (m × n) = beta · a (m × k) · b`, with `b`'s element `(p, j)` at `p * b_rs + j * b_cs`;
/// `m` is as many whole rows as `a` and `c` both have. Returns false (doing nothing) when `b`
/// is too short for `k × n` under its strides, for the caller to run the portable loop, which
/// covers what it can.
#[allow(unsafe_code)] // `gemm`'s entry point takes raw pointers and strides
fn product(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    k: usize,
    n: usize,
    (b_rs, b_cs): (usize, usize),
    beta: f32,
) -> bool {
    if n == 0 || k == 0 {
        return false;
    }
    let m = (c.len() / n).min(a.len() / k);
    // The last element `b` is read at, for p = k - 1 and j = n - 1.
    let b_last = (k - 1) * b_rs + (n - 1) * b_cs;
    if m == 0 || b_last >= b.len() {
        return false;
    }
    // SAFETY: `gemm` reads `m × k` elements of `a` at `i * k + p` (`i < m`, `p < k`), all
    // below `m * k <= a.len()`; `k × n` of `b` at `p * b_rs + j * b_cs <= b_last < b.len()`;
    // and writes `m × n` of `c` at `i * n + j < m * n <= c.len()`. `c` is a unique borrow,
    // distinct from `a` and `b`, so nothing else reads or writes it meanwhile; `read_dst` is
    // false, so `c`'s old contents (which may be any bits) are never read. The call runs on
    // this thread only (`Parallelism::None`) and returns before the borrows end.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            0.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    true
}

/// `c = a · b` on `gemm` whatever the shape (the portable loop if `b` is short): the path
/// [`blocked`] replaced for whole blocks, kept callable for the `peak` benchmark's comparison.
pub fn matmul_on_gemm(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
    if !product(a, b, c, k, n, (n, 1), 1.0) {
        simpler_aicore::tile_ops::matmul(a, b, c, k, n);
    }
}

impl TileOps for HostTileOps {
    fn matmul(&self, a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
        if small::fits(c, k, n) {
            small::matmul_fast(a, b, c, k, n);
        } else if !blocked::fits(a, b, c, k, n)
            .is_some_and(|m| blocked::matmul_fast(a, b, c, k, n, m))
        {
            matmul_on_gemm(a, b, c, k, n);
        }
    }

    fn matmul_bt(&self, a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, scale: f32) {
        // bᵀ's element (p, j) is b's (j, p), at j * k + p.
        if small::fits_bt(b, c, k, n) {
            small::matmul_bt_fast(a, b, c, k, n, scale);
        } else if !product(a, b, c, k, n, (1, k), scale) {
            simpler_aicore::tile_ops::matmul_bt(a, b, c, k, n, scale);
        }
    }

    fn add(&self, x: &mut [f32], y: &[f32]) {
        lanes::add_fast(x, y);
    }

    fn mul(&self, x: &mut [f32], y: &[f32]) {
        lanes::mul_fast(x, y);
    }

    fn add_scalar(&self, x: &mut [f32], s: f32) {
        lanes::add_scalar_fast(x, s);
    }

    fn scale(&self, x: &mut [f32], s: f32) {
        lanes::scale_fast(x, s);
    }

    fn exp_sub(&self, x: &mut [f32], m: f32) {
        lanes::exp_sub_fast(x, m);
    }

    fn widen_bf16(&self, src: &[u16], dst: &mut [f32]) {
        lanes::widen_bf16_fast(src, dst);
    }

    fn narrow_bf16(&self, src: &[f32], dst: &mut [u16]) {
        lanes::narrow_bf16_fast(src, dst);
    }

    fn max(&self, x: &[f32]) -> f32 {
        lanes::max_fast(x)
    }

    fn sum(&self, x: &[f32]) -> f32 {
        lanes::sum_fast(x)
    }

    fn softmax_rows(
        &self,
        s: &mut [f32],
        m: &mut [f32],
        l: &mut [f32],
        bs: usize,
        valid: usize,
        round: bool,
    ) {
        lanes::softmax_rows_fast(s, m, l, bs, valid, round);
    }
}

/// Uniform in [-1, 1) from a seeded xorshift, so the tests' inputs are reproducible.
#[cfg(test)]
pub(crate) fn test_values(len: usize, mut seed: u64) -> Vec<f32> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::test_values as values;
    use super::*;
    use simpler_aicore::Portable;

    /// Largest |x - exact| over the largest |exact|, against an f64 product.
    fn error(c: &[f32], exact: &[f64]) -> f64 {
        let scale = exact.iter().fold(0.0f64, |m, &v| m.max(v.abs()));
        let worst = c
            .iter()
            .zip(exact)
            .fold(0.0f64, |m, (&x, &e)| m.max((x as f64 - e).abs()));
        worst / scale
    }

    #[test]
    fn products_agree_with_an_f64_product_within_reordered_rounding() {
        for (m, k, n) in [
            (128, 128, 128),
            (16, 16, 16),
            (7, 33, 5),
            (1, 1, 1),
            (3, 128, 64),
        ] {
            let a = values(m * k, 1 + m as u64);
            let b = values(k * n, 7 + n as u64);
            let mut exact = vec![0.0f64; m * n];
            let mut exact_bt = vec![0.0f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    for p in 0..k {
                        exact[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                        // b read as (n × k) for the transposed product.
                        exact_bt[i * n + j] += a[i * k + p] as f64 * b[j * k + p] as f64;
                    }
                    exact_bt[i * n + j] *= 0.25;
                }
            }
            let (mut host, mut portable) = (vec![f32::NAN; m * n], vec![0.0; m * n]);
            HostTileOps.matmul(&a, &b, &mut host, k, n);
            Portable.matmul(&a, &b, &mut portable, k, n);
            // k · 2⁻²⁴ relative to the result's scale, with a margin of 4.
            let bound = 4.0 * k as f64 / (1u64 << 24) as f64;
            let (eh, ep) = (error(&host, &exact), error(&portable, &exact));
            assert!(
                eh <= bound && ep <= bound,
                "{m}x{k}x{n}: {eh} {ep} > {bound}"
            );
            HostTileOps.matmul_bt(&a, &b, &mut host, k, n, 0.25);
            Portable.matmul_bt(&a, &b, &mut portable, k, n, 0.25);
            let (eh, ep) = (error(&host, &exact_bt), error(&portable, &exact_bt));
            assert!(
                eh <= bound && ep <= bound,
                "{m}x{k}x{n} bt: {eh} {ep} > {bound}"
            );
        }
    }

    #[test]
    fn short_operands_cover_whole_rows_like_the_portable_loop() {
        let (a, b) = (values(6, 3), values(4, 5));
        // b too short for k × n = 2 × 3: the portable loop runs and covers what it can.
        let (mut host, mut portable) = ([9.0f32; 6], [9.0f32; 6]);
        HostTileOps.matmul(&a, &b, &mut host, 2, 3);
        Portable.matmul(&a, &b, &mut portable, 2, 3);
        assert_eq!(host, portable);
        // c of 1.5 rows: only its whole row is written.
        let mut c = [9.0f32; 3];
        HostTileOps.matmul(&a, &values(4, 5), &mut c[..3], 2, 2);
        assert_eq!(c[2], 9.0);
        // k = 0 is a zero product.
        HostTileOps.matmul(&[], &[], &mut c, 0, 3);
        assert_eq!(c, [0.0; 3]);
    }
}
