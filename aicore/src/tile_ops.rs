//! The core's compute units as a platform service: the heavy operations on tiles in the local
//! buffer (a matrix product, elementwise arithmetic, row reductions, `exp`) that a kernel hands
//! to whatever the platform runs them on.
//!
//! On the device these are the cube and vector units; the firmware's port runs the portable
//! loops of this module's provided methods ([`Portable`]). The simulator supplies its own
//! implementation that uses the host's vector units, chosen when the device starts
//! (`simpler_sim::tile_ops`). Kernels reach it through [`KernelCtx::ops`](crate::KernelCtx),
//! so the same kernel code runs on both.
//!
//! Every operation works on row-major f32 slices. A slice shorter than its stated shape makes
//! the operation cover only the whole rows it has (never a panic); slices are never resized.
//!
//! ## Results across implementations
//!
//! Arithmetic elementwise operations (add, mul, scale) give the same bits everywhere; `exp` may
//! differ by the implementation's accuracy (the portable loop's is libm's `expf`, within 1 ulp;
//! an implementation documents its own, and may flush results below about 1e-37 to 0). A
//! matrix product sums its `k` terms
//! in an order of the implementation's choosing (blocked, several partial sums per output), so
//! two implementations may differ by the rounding of a reordered f32 sum: at most about
//! `k · ε · Σ|a·b|` per element (ε = 2⁻²⁴), which for the scenes' 128-deep tiles of values in
//! [-1, 1] is below 1e-5 of the result's scale. Row reductions sum left to right in the
//! portable loops; an implementation may use partial sums, within the same bound.

/// The tile operations a platform provides. Every method has the portable implementation as
/// its default, so a platform overrides only what it runs faster.
pub trait TileOps: Sync {
    /// `c (m × n) = a (m × k) · b (k × n)`, with `m = c.len() / n`.
    fn matmul(&self, a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
        matmul(a, b, c, k, n);
    }

    /// `c (m × n) = scale · a (m × k) · bᵀ`, `b` being `(n × k)`, with `m = c.len() / n`: dot
    /// products of rows (attention's `q kᵀ`).
    fn matmul_bt(&self, a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, scale: f32) {
        matmul_bt(a, b, c, k, n, scale);
    }

    /// `x += y`, elementwise over the shorter of the two.
    fn add(&self, x: &mut [f32], y: &[f32]) {
        add(x, y);
    }

    /// `x *= y`, elementwise over the shorter of the two.
    fn mul(&self, x: &mut [f32], y: &[f32]) {
        mul(x, y);
    }

    /// `x += s` for every element.
    fn add_scalar(&self, x: &mut [f32], s: f32) {
        add_scalar(x, s);
    }

    /// `x *= s` for every element.
    fn scale(&self, x: &mut [f32], s: f32) {
        scale(x, s);
    }

    /// `x = exp(x - m)` for every element.
    fn exp_sub(&self, x: &mut [f32], m: f32) {
        for a in x.iter_mut() {
            *a = libm::expf(*a - m);
        }
    }

    /// The largest element of `x` (`-inf` for an empty slice; a NaN element is skipped).
    fn max(&self, x: &[f32]) -> f32 {
        x.iter().fold(f32::NEG_INFINITY, |acc, &v| acc.max(v))
    }

    /// The sum of `x`.
    fn sum(&self, x: &[f32]) -> f32 {
        x.iter().sum()
    }

    /// `dst[i] = src[i]` widened from bf16 (exact), over the shorter of the two: a tile load's
    /// conversion.
    fn widen_bf16(&self, src: &[u16], dst: &mut [f32]) {
        widen_bf16(src, dst);
    }

    /// `dst[i] = src[i]` rounded to bf16 ([`Bf16::from_f32`](simpler_core::Bf16::from_f32):
    /// to nearest, ties to even, NaN kept quiet), over the shorter of the two: a tile store's
    /// conversion. Every implementation gives these bits.
    fn narrow_bf16(&self, src: &[f32], dst: &mut [u16]) {
        narrow_bf16(src, dst);
    }

    /// Softmax numerators of a block of rows, in place: each row of `s` (`bs` wide) becomes
    /// `exp(x - max)` over its first `valid` columns (rounded to bf16 when `round`) and 0 past
    /// them; `m` and `l` get each row's max and the sum of its stored numerators. `valid` is
    /// `1..=bs`; rows beyond the shortest of `s`, `m` and `l` are left alone. The provided
    /// method is [`softmax_rows`] over this unit's `max`, `exp_sub` and `sum`; a platform may
    /// fuse them (one pass per row on its vector unit), within the bounds of those three.
    fn softmax_rows(
        &self,
        s: &mut [f32],
        m: &mut [f32],
        l: &mut [f32],
        bs: usize,
        valid: usize,
        round: bool,
    ) {
        softmax_rows(self, s, m, l, bs, valid, round);
    }
}

/// [`TileOps::softmax_rows`] through `ops`' `max`, `exp_sub` and `sum`, row by row.
#[inline(always)]
pub fn softmax_rows<T: TileOps + ?Sized>(
    ops: &T,
    s: &mut [f32],
    m: &mut [f32],
    l: &mut [f32],
    bs: usize,
    valid: usize,
    round: bool,
) {
    if bs == 0 {
        return;
    }
    let valid = valid.min(bs);
    let rows = s.chunks_exact_mut(bs).zip(m.iter_mut().zip(l.iter_mut()));
    for (row, (row_max, row_sum)) in rows {
        let (live, masked) = row.split_at_mut(valid);
        let max = ops.max(live);
        ops.exp_sub(live, max);
        if round {
            for x in live.iter_mut() {
                *x = simpler_core::Bf16::from_f32(*x).to_f32();
            }
        }
        masked.fill(0.0);
        *row_max = max;
        *row_sum = ops.sum(live);
    }
}

/// [`TileOps::add`] in portable code. The four elementwise bodies round each result once, so
/// a vector unit's build of them gives the same bits.
#[inline(always)]
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// [`TileOps::mul`] in portable code.
#[inline(always)]
pub fn mul(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a *= b;
    }
}

/// [`TileOps::add_scalar`] in portable code.
#[inline(always)]
pub fn add_scalar(x: &mut [f32], s: f32) {
    for a in x.iter_mut() {
        *a += s;
    }
}

/// [`TileOps::scale`] in portable code.
#[inline(always)]
pub fn scale(x: &mut [f32], s: f32) {
    for a in x.iter_mut() {
        *a *= s;
    }
}

/// [`TileOps::widen_bf16`] in portable code: a shift per element, which a vector unit does
/// many at a time.
#[inline(always)]
pub fn widen_bf16(src: &[u16], dst: &mut [f32]) {
    for (d, &h) in dst.iter_mut().zip(src) {
        *d = simpler_core::Bf16(h).to_f32();
    }
}

/// [`TileOps::narrow_bf16`] in portable code: [`Bf16::from_f32`](simpler_core::Bf16::from_f32)
/// per element, branch-free.
#[inline(always)]
pub fn narrow_bf16(src: &[f32], dst: &mut [u16]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = simpler_core::Bf16::from_f32(x).0;
    }
}

/// The portable loops, the device firmware's implementation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Portable;

impl TileOps for Portable {}

/// `c (m x n) = a (m x k) · b (k x n)` in portable code.
///
/// The loop order is i-k-j: the innermost loop adds a scaled row of `b` into a row of `c`, both
/// contiguous, so it vectorises and streams `b` once per row of `a`.
pub fn matmul(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize) {
    if n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    for (c_row, a_row) in c.chunks_exact_mut(n).zip(a.chunks_exact(k)) {
        c_row.fill(0.0);
        for (&x, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
            for (y, &z) in c_row.iter_mut().zip(b_row) {
                *y += x * z;
            }
        }
    }
}

/// `c (m x n) = scale · a (m x k) · bᵀ` (`b` is `n x k`) in portable code: one dot product of
/// two contiguous rows per output.
pub fn matmul_bt(a: &[f32], b: &[f32], c: &mut [f32], k: usize, n: usize, scale: f32) {
    if n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    for (c_row, a_row) in c.chunks_exact_mut(n).zip(a.chunks_exact(k)) {
        for (out, b_row) in c_row.iter_mut().zip(b.chunks_exact(k)) {
            let dot: f32 = a_row.iter().zip(b_row).map(|(&x, &y)| x * y).sum();
            *out = scale * dot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_products_match_hand_worked_values() {
        // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50].
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        let mut c = [9.0f32; 4];
        Portable.matmul(&a, &b, &mut c, 2, 2);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        // scale · a · bᵀ: [1 2; 3 4] · [5 7; 6 8] = [17 23; 39 53], halved.
        Portable.matmul_bt(&a, &b, &mut c, 2, 2, 0.5);
        assert_eq!(c, [8.5, 11.5, 19.5, 26.5]);
        // k = 0 is a zero product; a short c covers its whole rows only.
        Portable.matmul(&[], &[], &mut c, 0, 2);
        assert_eq!(c, [0.0; 4]);
        let mut short = [7.0f32; 3];
        Portable.matmul(&a, &b, &mut short, 2, 2);
        assert_eq!(short, [19.0, 22.0, 7.0]);
    }

    #[test]
    fn portable_elementwise_and_reductions() {
        let mut x = [1.0f32, -2.0, 3.0];
        Portable.add(&mut x, &[1.0, 1.0]);
        assert_eq!(x, [2.0, -1.0, 3.0]);
        Portable.mul(&mut x, &[2.0, 3.0, 0.5]);
        assert_eq!(x, [4.0, -3.0, 1.5]);
        Portable.add_scalar(&mut x, 1.0);
        Portable.scale(&mut x, 2.0);
        assert_eq!(x, [10.0, -4.0, 5.0]);
        assert_eq!(Portable.max(&x), 10.0);
        assert_eq!(Portable.max(&[]), f32::NEG_INFINITY);
        assert_eq!(Portable.sum(&x), 11.0);
        let mut e = [0.0f32, 1.0];
        Portable.exp_sub(&mut e, 1.0);
        // e^-1 = 0.36787944...
        assert!((e[0] - 0.367_879_44).abs() < 1e-7 && e[1] == 1.0, "{e:?}");
    }
}
