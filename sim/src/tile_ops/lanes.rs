//! `exp`, row maxima and row sums written for the vector units: plain Rust over fixed lanes,
//! compiled once per unit (`#[target_feature]`) and chosen at run time, so the compiler's
//! auto-vectoriser turns each into AVX-512 or AVX2 code without intrinsics.
//!
//! ## Results
//!
//! Every body is written so that the compiler may not reorder its floating-point arithmetic
//! (Rust never contracts `a * b + c` into a fused multiply-add or reassociates a sum; where a
//! body wants one it says `mul_add`, exactly rounded everywhere), so the three builds of each
//! give the same bits on every CPU; only the portable loops of [`simpler_aicore::tile_ops`]
//! (the firmware's) differ:
//!
//! - [`exp`] is within 2 ulp of the exact value (`tests` sweep it against f64's `exp`) where
//!   libm's `expf` is within 1; below `-86.5` (`e^-86.5` is about 2.9e-38) it returns 0 and
//!   above `ln(f32::MAX)` infinity, NaN stays NaN. The scenes' softmax arguments are
//!   `s - max(s)`, at most 0, so the flush moves a term by less than 3e-38 against a row whose
//!   largest term is 1.
//! - [`sum`] adds in [`LANES`] partial sums (element `i` into lane `i % LANES`) and then adds
//!   the lanes pairwise: the same terms as the portable left-to-right sum in another order,
//!   within `n · ε · Σ|x|` of it (ε = 2⁻²⁴).
//! - [`max`] is exact: the order of a maximum does not change it (NaN skipped, as there).

/// Lanes of the partial sums and maxima: one AVX-512 register of f32, two of AVX2.
pub const LANES: usize = 16;

/// `e^x` for one value, branch-free, so that a loop of it vectorises.
///
/// Cody and Waite's reduction: `x = n·ln 2 + r` with `n = round(x·log2 e)`, so `|r| <= ln 2 / 2`;
/// `ln 2` is split in a part of 9 significant bits (so `n·C1` is exact for the `|n| <= 128`
/// that occur) and the rest. `e^r` is its Taylor polynomial to degree 7 (the remainder
/// `r^8 / 8!` is below 6e-9 of the result on that interval) in Horner's form of fused
/// multiply-adds, half the dependent steps of separate products and sums; and `2^n` is built
/// in the exponent bits as `2^(n - 1)` times 2, so that `n = 128` (for `x` up to
/// `ln(f32::MAX)`) does not overflow the field; `x >= -86.5` keeps `n >= -125`, so no factor
/// is subnormal.
///
/// `mul_add` is one instruction on every unit [`Unit::detect`] picks and on aarch64; on an
/// x86-64 without FMA (the baseline build) it is libm's exactly rounded `fmaf`: the same bits
/// at many times the cost.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 0.693359375 = 355 / 512, and ln 2 - 355 / 512.
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    // Adding 1.5 · 2^23 rounds to an integer (to nearest, ties to even) and leaves it in the
    // low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const LO: f32 = -86.5;
    const HI: f32 = 88.722_83;
    // NaN stays NaN here and is put back at the end.
    let xc = x.clamp(LO, HI);
    let t = xc.mul_add(LOG2E, ROUND);
    let n = t - ROUND;
    // The integer n, from t's bits: t's mantissa holds 2^22 + n.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (-n).mul_add(C2, (-n).mul_add(C1, xc));
    // Twice the polynomial, from twice its coefficients: scaling by 2 is exact at every step,
    // so this is exactly `2 · p` without the multiplication on the dependent chain.
    let mut p2: f32 = 2.0 / 5040.0;
    for c in [
        2.0 / 720.0,
        2.0 / 120.0,
        2.0 / 24.0,
        2.0 / 6.0,
        1.0,
        2.0,
        2.0,
    ] {
        p2 = p2.mul_add(r, c);
    }
    // n is -125..=128 here: 2^(n - 1) has a normal exponent, and 2p (in [1.4, 2.9]) times it
    // is never subnormal before the final rounding.
    let scale = f32::from_bits(((ni + 126) as u32) << 23);
    let y = p2 * scale;
    // Out of range and NaN: 0 below, infinity above, NaN itself; chosen from `x` alone, off
    // the polynomial's chain, and put in with one select.
    let special = if x < LO {
        0.0
    } else if x > HI {
        f32::INFINITY
    } else {
        x
    };
    if (LO..=HI).contains(&x) {
        y
    } else {
        special
    }
}

/// `x = e^(x - m)` for every element.
#[inline(always)]
pub fn exp_sub(x: &mut [f32], m: f32) {
    for v in x.iter_mut() {
        *v = exp(*v - m);
    }
}

/// Folds `x` into [`LANES`] lanes with `op` (element `i` into lane `i % LANES`, each lane from
/// `init`), then the lanes into one by halving: a few vector steps instead of a chain of
/// sixteen. The order is fixed by this source, so every unit gives the same bits.
#[inline(always)]
fn fold_lanes(x: &[f32], init: f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = op(*a, v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(rest) {
        *a = op(*a, v);
    }
    halve(acc, op)
}

const _: () = assert!(LANES == 16, "`halve` folds sixteen lanes");

/// Folds the [`LANES`] lanes into one by halving: lane `i` with lane `i + width`, for
/// `width` 8, 4, 2 and 1, each step over arrays of fixed length.
#[inline(always)]
fn halve(acc: [f32; LANES], op: impl Fn(f32, f32) -> f32) -> f32 {
    let h8: [f32; 8] = core::array::from_fn(|i| op(acc[i], acc[i + 8]));
    let h4: [f32; 4] = core::array::from_fn(|i| op(h8[i], h8[i + 4]));
    let h2: [f32; 2] = core::array::from_fn(|i| op(h4[i], h4[i + 2]));
    op(h2[0], h2[1])
}

/// The sum of `x` in [`LANES`] partial sums (see the module docs for the order).
#[inline(always)]
pub fn sum(x: &[f32]) -> f32 {
    fold_lanes(x, 0.0, |a, b| a + b)
}

/// The largest element of `x` (`-inf` when empty; NaN elements skipped).
#[inline(always)]
pub fn max(x: &[f32]) -> f32 {
    fold_lanes(x, f32::NEG_INFINITY, f32::max)
}

/// The vector unit the bodies run on, detected once per call (the standard library caches
/// the CPU's answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// AVX-512F.
    Avx512,
    /// AVX2 with FMA.
    Avx2,
    /// The build's baseline target.
    Baseline,
}

impl Unit {
    /// Every unit this CPU has, the baseline first (for the tests, which run each).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let mut u = vec![Self::Baseline];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                u.push(Self::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                u.push(Self::Avx512);
            }
        }
        u
    }

    /// The widest unit this CPU has.
    #[inline(always)]
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Self::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Self::Avx2;
            }
        }
        Self::Baseline
    }
}

/// Defines `pub fn $name` running `$body` (one of the bodies above) compiled for the unit
/// [`Unit::detect`] finds, plus `$name` on an explicit unit for the tests.
macro_rules! dispatched {
    ($(#[$doc:meta])* $name:ident, $on:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $body:path) => {
        $crate::tile_ops::lanes::dispatched!(
            $(#[$doc])* $name, $on, ($($arg: $ty),*) -> $ret, $body, avx512: $body
        );
    };
    ($(#[$doc:meta])* $name:ident, $on:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $body:path,
     avx512: $body512:path) => {
        $(#[$doc])*
        #[inline]
        pub fn $name($($arg: $ty),*) -> $ret {
            $on($crate::tile_ops::lanes::Unit::detect(), $($arg),*)
        }

        /// The same on `unit`, which must be one this CPU has (a unit it lacks runs the
        /// baseline build).
        #[allow(unsafe_code)] // calling the `#[target_feature]` builds: see the SAFETY comments
        pub fn $on(unit: $crate::tile_ops::lanes::Unit, $($arg: $ty),*) -> $ret {
            use $crate::tile_ops::lanes::Unit;
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) -> $ret {
                    $body512($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                match unit {
                    Unit::Avx512 if std::arch::is_x86_feature_detected!("avx512f") => {
                        // SAFETY: the CPU reports AVX-512F (checked just above), the only
                        // feature this build assumes beyond the baseline.
                        return unsafe { avx512($($arg),*) };
                    }
                    Unit::Avx2
                        if std::arch::is_x86_feature_detected!("avx2")
                            && std::arch::is_x86_feature_detected!("fma") =>
                    {
                        // SAFETY: the CPU reports AVX2 and FMA (checked just above), the only
                        // features this build assumes beyond the baseline.
                        return unsafe { avx2($($arg),*) };
                    }
                    _ => {}
                }
            }
            let _ = unit;
            $body($($arg),*)
        }
    };
}

pub(crate) use dispatched;

/// [`simpler_aicore::TileOps::softmax_rows`] by passes over the whole tile instead of row by
/// row: a row is a register or two, so one row's `exp` is a single chain of dependent steps
/// with nothing to overlap it, while over the tile the vector unit keeps many chains in
/// flight. Every element goes through the same operations as in the row-wise order (subtract
/// its row's maximum, [`exp`], round, sum in [`LANES`] lanes), so the bits are those of the
/// row-wise order over the same bodies; the masked columns' `exp` is computed and thrown
/// away, which costs less than skipping it.
///
/// Each row's live columns are taken as [`fold_lanes`] takes them, written out so that the
/// whole chunks are arrays of fixed length: the row passes are whole vector operations, and
/// only the live columns past the last whole chunk go element by element (chunk `c`'s element
/// `i` into lane `i`, the rest into lanes `0..`, then [`halve`]).
#[inline(always)]
fn softmax_rows(s: &mut [f32], m: &mut [f32], l: &mut [f32], bs: usize, valid: usize, round: bool) {
    softmax_rows_with(s, m, l, bs, valid, round, softmax_block);
}

/// [`softmax_rows`] with the blocks of full rows done by `block` ([`softmax_block`] or a
/// unit's own, with the same bits).
#[inline(always)]
fn softmax_rows_with(
    s: &mut [f32],
    m: &mut [f32],
    l: &mut [f32],
    bs: usize,
    valid: usize,
    round: bool,
    block: BlockFn,
) {
    if bs == 0 {
        return;
    }
    let valid = valid.min(bs);
    let rows = (s.len() / bs).min(m.len()).min(l.len());
    let s = &mut s[..rows * bs];
    if bs == LANES && valid == LANES {
        return softmax_full_rows(s, &mut m[..rows], &mut l[..rows], round, block);
    }
    // Live columns: `full` whole chunks of lanes, then `part` more.
    let (full, part) = (valid / LANES, valid % LANES);
    for (row, row_max) in s.chunks_exact_mut(bs).zip(m.iter_mut()) {
        let (head, tail) = row.split_at_mut(full * LANES);
        let (chunks, _) = head.as_chunks_mut::<LANES>();
        let live = &mut tail[..part];
        let mut acc = [f32::NEG_INFINITY; LANES];
        for chunk in chunks.iter() {
            for (a, &v) in acc.iter_mut().zip(chunk) {
                *a = a.max(v);
            }
        }
        for (a, &v) in acc.iter_mut().zip(live.iter()) {
            *a = a.max(v);
        }
        let top = halve(acc, f32::max);
        for chunk in chunks.iter_mut() {
            for v in chunk.iter_mut() {
                *v -= top;
            }
        }
        for v in live.iter_mut() {
            *v -= top;
        }
        *row_max = top;
    }
    if round {
        for v in s.iter_mut() {
            *v = simpler_core::Bf16::from_f32(exp(*v)).to_f32();
        }
    } else {
        for v in s.iter_mut() {
            *v = exp(*v);
        }
    }
    for (row, row_sum) in s.chunks_exact_mut(bs).zip(l.iter_mut()) {
        let (head, tail) = row.split_at_mut(full * LANES);
        let (chunks, _) = head.as_chunks::<LANES>();
        let (live, masked) = tail.split_at_mut(part);
        masked.fill(0.0);
        let mut acc = [0.0f32; LANES];
        for chunk in chunks.iter() {
            for (a, &v) in acc.iter_mut().zip(chunk) {
                *a += v;
            }
        }
        for (a, &v) in acc.iter_mut().zip(live.iter()) {
            *a += v;
        }
        *row_sum = halve(acc, |a, b| a + b);
    }
}

/// [`softmax_rows`] for rows of exactly [`LANES`] columns, all live (paged attention's 16-token
/// blocks but a sequence's last), a block of [`LANES`] rows at a time (the rows past the last
/// whole block padded to one): each row is one array of lanes, the rows' maxima and sums come
/// out of [`halve_rows`] as one array, and the passes over a block's rows are written out
/// (`each_row`) rather than looped. Looped, the compiler vectorises across the rows instead,
/// a lane per row, with gathers and scatters of a column at a time, which cost several
/// times the whole-row operations. The same operations on every element as the general
/// passes, so the same bits.
#[inline(always)]
fn softmax_full_rows(
    s: &mut [f32],
    m: &mut [f32],
    l: &mut [f32],
    round: bool,
    softmax_block: BlockFn,
) {
    let (rows, _) = s.as_chunks_mut::<LANES>();
    let mut m = m.chunks_mut(LANES);
    let mut l = l.chunks_mut(LANES);
    for block in rows.chunks_mut(LANES) {
        let (Some(m), Some(l)) = (m.next(), l.next()) else {
            return;
        };
        let n = block.len();
        if let Ok(block) = <&mut [[f32; LANES]; LANES]>::try_from(&mut *block) {
            softmax_block(block, m, l, round);
        } else {
            // The padding rows are zeros: finite, and thrown away.
            let mut whole = [[0.0f32; LANES]; LANES];
            whole[..n].copy_from_slice(block);
            let (mut mm, mut ll) = ([0.0f32; LANES], [0.0f32; LANES]);
            softmax_block(&mut whole, &mut mm, &mut ll, round);
            block.copy_from_slice(&whole[..n]);
            m.copy_from_slice(&mm[..n]);
            l.copy_from_slice(&ll[..n]);
        }
    }
}

/// A block of [`LANES`] full rows.
type Block = [[f32; LANES]; LANES];

/// What does a block of full rows: [`softmax_block`] or a unit's own. A function item, not a
/// closure, so that it is inlined into each unit's build (a closure's body was compiled once,
/// for the baseline, with `mul_add` a call to libm).
type BlockFn = fn(&mut Block, &mut [f32], &mut [f32], bool);

/// [`softmax_full_rows`] on one block of [`LANES`] rows; `m` and `l` take as many of the
/// block's maxima and sums as they have room for.
#[inline(always)]
fn softmax_block(b: &mut Block, m: &mut [f32], l: &mut [f32], round: bool) {
    let mut top = [0.0f32; LANES];
    each_row(|r| {
        let row = &mut b[r];
        let acc: [f32; LANES] = core::array::from_fn(|i| f32::NEG_INFINITY.max(row[i]));
        let t = halve(acc, f32::max);
        for v in row.iter_mut() {
            *v -= t;
        }
        top[r] = t;
    });
    exp_block(b, round);
    let mut sums = [0.0f32; LANES];
    each_row(|r| {
        let row = &b[r];
        let acc: [f32; LANES] = core::array::from_fn(|i| 0.0 + row[i]);
        sums[r] = halve(acc, |a, b| a + b);
    });
    let n = m.len().min(LANES);
    m[..n].copy_from_slice(&top[..n]);
    let n = l.len().min(LANES);
    l[..n].copy_from_slice(&sums[..n]);
}

/// `e^x` of every element of a block, rounded to bf16 when `round`.
#[inline(always)]
fn exp_block(b: &mut Block, round: bool) {
    for row in b.iter_mut() {
        for v in row.iter_mut() {
            *v = if round {
                simpler_core::Bf16::from_f32(exp(*v)).to_f32()
            } else {
                exp(*v)
            };
        }
    }
}

/// `f(r)` for each row `r` of a block, written out: straight-line code, no loop for the
/// compiler to vectorise across the rows.
#[inline(always)]
fn each_row(mut f: impl FnMut(usize)) {
    const _: () = assert!(LANES == 16, "`each_row` writes out sixteen rows");
    f(0);
    f(1);
    f(2);
    f(3);
    f(4);
    f(5);
    f(6);
    f(7);
    f(8);
    f(9);
    f(10);
    f(11);
    f(12);
    f(13);
    f(14);
    f(15);
}

/// [`softmax_rows`] on AVX-512, with [`avx512::softmax_block`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn softmax_rows_avx512(
    s: &mut [f32],
    m: &mut [f32],
    l: &mut [f32],
    bs: usize,
    valid: usize,
    round: bool,
) {
    softmax_rows_with(s, m, l, bs, valid, round, |b, m, l, round| {
        avx512::softmax_block(b, m, l, round)
    });
}

/// A block's reductions in AVX-512 registers, where the compiler's own vectorisation of
/// [`softmax_block`] spends most of its time moving each row's partial results through the
/// stack.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{exp_block, Block, LANES};
    use std::arch::x86_64::*;

    /// Row `r` of `b` as a register.
    #[target_feature(enable = "avx512f")]
    #[allow(unsafe_code)] // an unaligned load: see its SAFETY comment
    fn load(row: &[f32; LANES]) -> __m512 {
        // SAFETY: `row` is 16 f32 (64 bytes), readable for the borrow; the load has no
        // alignment requirement.
        unsafe { _mm512_loadu_ps(row.as_ptr()) }
    }

    /// `v` into `row`.
    #[target_feature(enable = "avx512f")]
    #[allow(unsafe_code)] // an unaligned store: see its SAFETY comment
    fn store(row: &mut [f32; LANES], v: __m512) {
        // SAFETY: `row` is 16 f32 (64 bytes), writable and not aliased for the borrow; the
        // store has no alignment requirement.
        unsafe { _mm512_storeu_ps(row.as_mut_ptr(), v) }
    }

    /// [`super::halve`] of each of the 16 rows `r` at once, row `r`'s result in lane `r`:
    /// at each step two registers of partial results become one, the pairs (lane `i` with
    /// lane `i + 8`, then `i` with `i + 4`, `i + 2`, `i + 1`) and their order as in
    /// [`super::halve`]: two rows' eight partials per register, then four rows' four, eight
    /// rows' two (rows `k` and `k + 4` in block `k`), sixteen rows' one (rows `k`, `k + 4`,
    /// `k + 8`, `k + 12` in block `k`), and a last permutation into row order.
    #[target_feature(enable = "avx512f")]
    fn halve_rows(r: &[__m512; LANES], op: impl Fn(__m512, __m512) -> __m512) -> __m512 {
        let v1: [__m512; 8] = core::array::from_fn(|j| {
            let (a, b) = (r[2 * j], r[2 * j + 1]);
            op(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xEE>(a, b),
            )
        });
        let v2: [__m512; 4] = core::array::from_fn(|j| {
            let (a, b) = (v1[2 * j], v1[2 * j + 1]);
            op(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xDD>(a, b),
            )
        });
        let v3: [__m512; 2] = core::array::from_fn(|j| {
            let (a, b) = (v2[2 * j], v2[2 * j + 1]);
            op(
                _mm512_shuffle_ps::<0x44>(a, b),
                _mm512_shuffle_ps::<0xEE>(a, b),
            )
        });
        let (a, b) = (v3[0], v3[1]);
        let v4 = op(
            _mm512_shuffle_ps::<0x88>(a, b),
            _mm512_shuffle_ps::<0xDD>(a, b),
        );
        // Lane 4k + j holds row k + 4j.
        let rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(rows, v4)
    }

    /// [`super::softmax_block`] with the rows' maxima and sums from [`halve_rows`]: the same
    /// operations on every element, so the same bits (a zero maximum's sign aside, which
    /// `f32::max` leaves open too; either zero gives every other value the same bits).
    #[target_feature(enable = "avx512f")]
    pub(super) fn softmax_block(b: &mut Block, m: &mut [f32], l: &mut [f32], round: bool) {
        let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
        // `f32::NEG_INFINITY.max(x)`: NaN becomes -inf, everything else stays.
        let rows: [__m512; LANES] = core::array::from_fn(|r| {
            let x = load(&b[r]);
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(x, x), neg_inf, x)
        });
        let mut top = [0.0f32; LANES];
        store(&mut top, halve_rows(&rows, |a, b| _mm512_max_ps(a, b)));
        for (row, &t) in b.iter_mut().zip(&top) {
            let v = _mm512_sub_ps(load(row), _mm512_set1_ps(t));
            store(row, v);
        }
        exp_block(b, round);
        let zero = _mm512_setzero_ps();
        let rows: [__m512; LANES] = core::array::from_fn(|r| _mm512_add_ps(zero, load(&b[r])));
        let mut sums = [0.0f32; LANES];
        store(&mut sums, halve_rows(&rows, |a, b| _mm512_add_ps(a, b)));
        let n = m.len().min(LANES);
        m[..n].copy_from_slice(&top[..n]);
        let n = l.len().min(LANES);
        l[..n].copy_from_slice(&sums[..n]);
    }
}

dispatched!(
    /// [`simpler_aicore::tile_ops::widen_bf16`] on the widest vector unit (exact everywhere).
    widen_bf16_fast, widen_bf16_on, (src: &[u16], dst: &mut [f32]) -> (),
    simpler_aicore::tile_ops::widen_bf16
);
dispatched!(
    /// [`simpler_aicore::tile_ops::narrow_bf16`] on the widest vector unit (the same bits as
    /// the portable loop: integer steps and one select).
    narrow_bf16_fast, narrow_bf16_on, (src: &[f32], dst: &mut [u16]) -> (),
    simpler_aicore::tile_ops::narrow_bf16
);
dispatched!(
    /// [`exp_sub`] on the widest vector unit.
    exp_sub_fast, exp_sub_on, (x: &mut [f32], m: f32) -> (), exp_sub
);
dispatched!(
    /// [`simpler_aicore::tile_ops::add`] on the widest vector unit (the same bits).
    add_fast, add_on, (x: &mut [f32], y: &[f32]) -> (), simpler_aicore::tile_ops::add
);
dispatched!(
    /// [`simpler_aicore::tile_ops::mul`] on the widest vector unit (the same bits).
    mul_fast, mul_on, (x: &mut [f32], y: &[f32]) -> (), simpler_aicore::tile_ops::mul
);
dispatched!(
    /// [`simpler_aicore::tile_ops::add_scalar`] on the widest vector unit (the same bits).
    add_scalar_fast, add_scalar_on, (x: &mut [f32], s: f32) -> (), simpler_aicore::tile_ops::add_scalar
);
dispatched!(
    /// [`simpler_aicore::tile_ops::scale`] on the widest vector unit (the same bits).
    scale_fast, scale_on, (x: &mut [f32], s: f32) -> (), simpler_aicore::tile_ops::scale
);
dispatched!(
    /// [`sum`] on the widest vector unit.
    sum_fast, sum_on, (x: &[f32]) -> f32, sum
);
dispatched!(
    /// [`max`] on the widest vector unit.
    max_fast, max_on, (x: &[f32]) -> f32, max
);
dispatched!(
    /// Softmax's rows ([`simpler_aicore::TileOps::softmax_rows`]) fused on the widest vector
    /// unit: [`max`], [`exp`] and [`sum`] by passes over the tile, with the bf16 rounding
    /// between, in one piece.
    softmax_rows_fast, softmax_rows_on,
    (s: &mut [f32], m: &mut [f32], l: &mut [f32], bs: usize, valid: usize, round: bool) -> (),
    softmax_rows, avx512: softmax_rows_avx512
);

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_aicore::TileOps;

    /// The bodies above as tile operations: the generic row-by-row softmax over them is the
    /// order the tile-wise one must match bit for bit.
    struct Bodies;

    impl TileOps for Bodies {
        #[inline(always)]
        fn exp_sub(&self, x: &mut [f32], m: f32) {
            exp_sub(x, m);
        }

        #[inline(always)]
        fn max(&self, x: &[f32]) -> f32 {
            max(x)
        }

        #[inline(always)]
        fn sum(&self, x: &[f32]) -> f32 {
            sum(x)
        }
    }

    #[test]
    fn elementwise_ops_on_every_unit_give_the_portable_bits() {
        /// The firmware's loops: the trait's defaults.
        struct Portable;
        impl TileOps for Portable {}
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        // Lengths around the lanes' widths; values whose results are subnormal, overflow to
        // infinity, or are NaN.
        for len in [0, 1, 7, 15, 16, 17, 33, 1000] {
            let x: Vec<f32> = (0..len)
                .map(|i| match i % 5 {
                    0 => 1.5e-38,
                    1 => -3.0e38,
                    2 => f32::NAN,
                    _ => (i as f32).sin() * 1e3,
                })
                .collect();
            // Longer than `x` (only `x`'s elements change) and shorter (its tail is kept).
            let long: Vec<f32> = (0..len + 3)
                .map(|i| (i as f32).cos() * 7.0 - 3.0e38)
                .collect();
            let short = &long[..len / 2];
            for unit in Unit::available() {
                let check = |name: &str, want: fn(&mut [f32]), got: &dyn Fn(&mut [f32])| {
                    let (mut w, mut g) = (x.clone(), x.clone());
                    want(&mut w);
                    got(&mut g);
                    assert_eq!(bits(&g), bits(&w), "{name} on {unit:?}, {len} elements");
                };
                check("add_scalar", |v| Portable.add_scalar(v, -1e-38), &|v| {
                    add_scalar_on(unit, v, -1e-38)
                });
                check("scale", |v| Portable.scale(v, 3.0), &|v| {
                    scale_on(unit, v, 3.0)
                });
                for y in [&long[..], short] {
                    let (mut w, mut g) = (x.clone(), x.clone());
                    Portable.add(&mut w, y);
                    add_on(unit, &mut g, y);
                    assert_eq!(bits(&g), bits(&w), "add on {unit:?}, {len} and {}", y.len());
                    let (mut w, mut g) = (x.clone(), x.clone());
                    Portable.mul(&mut w, y);
                    mul_on(unit, &mut g, y);
                    assert_eq!(bits(&g), bits(&w), "mul on {unit:?}, {len} and {}", y.len());
                    assert_eq!(bits(&g[y.len().min(len)..]), bits(&x[y.len().min(len)..]));
                }
            }
        }
    }

    /// Distance in units in the last place between two finite f32 of the same sign.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value_over_its_normal_range() {
        // Every 997th f32 bit pattern from -86.5 to ln(f32::MAX): about 2.3 million values.
        let (lo, hi) = (-86.5f32, 88.722_83f32);
        let mut worst = (0, 0.0f32);
        let mut check = |x: f32| {
            let exact = (x as f64).exp() as f32;
            let got = exp(x);
            let d = ulps(got, exact);
            if d > worst.0 {
                worst = (d, x);
            }
        };
        let mut bits = lo.to_bits();
        while f32::from_bits(bits) <= -1e-30 {
            check(f32::from_bits(bits));
            bits -= 997;
        }
        let mut bits = 0u32;
        while f32::from_bits(bits) <= hi {
            check(f32::from_bits(bits));
            bits += 997;
        }
        for x in [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, lo, hi, 88.0, -86.4] {
            check(x);
        }
        assert!(worst.0 <= 2, "{} ulp at {}", worst.0, worst.1);
    }

    #[test]
    fn exp_flushes_below_its_range_and_keeps_the_special_values() {
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-86.6), 0.0);
        assert_eq!(exp(-1e30), 0.0);
        assert_eq!(exp(88.8), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
        // Just below the overflow the value is finite and close to f32::MAX.
        let top = exp(88.72);
        assert!(top.is_finite() && top > 3.3e38, "{top}");
    }

    #[test]
    fn every_unit_gives_the_same_bits() {
        let mut x: Vec<f32> = (0..1000)
            .map(|i| (i as f32 * 0.37).sin() * 30.0 - 10.0)
            .collect();
        x.extend([f32::NAN, f32::NEG_INFINITY, 100.0, -100.0, 0.0]);
        let want_exp: Vec<u32> = x.iter().map(|&v| exp(v - 1.5).to_bits()).collect();
        for unit in Unit::available() {
            for len in [0, 1, 15, 16, 17, 33, x.len()] {
                let mut y = x[..len].to_vec();
                exp_sub_on(unit, &mut y, 1.5);
                let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want_exp[..len], "{unit:?}, {len} elements");
                let finite = &x[..len.min(1000)];
                assert_eq!(
                    sum_on(unit, finite).to_bits(),
                    sum(finite).to_bits(),
                    "{unit:?} sum"
                );
                assert_eq!(max_on(unit, &x[..len]).to_bits(), max(&x[..len]).to_bits());
            }
        }
    }

    #[test]
    fn bf16_conversions_on_every_unit_are_exact_and_round_to_nearest_even() {
        // Widening is the shift into the upper half, for every one of the 65,536 patterns.
        let halves: Vec<u16> = (0..=u16::MAX).collect();
        for unit in Unit::available() {
            let mut wide = vec![0.0f32; halves.len()];
            widen_bf16_on(unit, &halves, &mut wide);
            for (&h, w) in halves.iter().zip(&wide) {
                assert_eq!(w.to_bits(), (h as u32) << 16, "{unit:?} {h:#06x}");
            }
        }
        // Rounding, worked by hand: exact, below, at and above the half-way point with an
        // even and an odd kept part, a carry into the exponent, overflow to infinity, the
        // infinities, and NaNs made quiet with their sign kept.
        let cases: [(u32, u16); 12] = [
            (0x3F80_0000, 0x3F80),
            (0x3F80_7FFF, 0x3F80),
            (0x3F80_8000, 0x3F80),
            (0x3F80_8001, 0x3F81),
            (0x3F81_8000, 0x3F82),
            (0xBF81_7FFF, 0xBF81),
            (0x3FFF_FFFF, 0x4000),
            (0x7F7F_FFFF, 0x7F80),
            (0x7F80_0000, 0x7F80),
            (0xFF80_0000, 0xFF80),
            (0x7F80_0001, 0x7FC0),
            (0xFFC0_1234, 0xFFC0),
        ];
        // And a sweep of patterns, which every unit must round as the portable loop does.
        let sweep: Vec<f32> = (0..200_000u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .collect();
        let mut want = vec![0u16; sweep.len()];
        simpler_aicore::tile_ops::narrow_bf16(&sweep, &mut want);
        for unit in Unit::available() {
            let src: Vec<f32> = cases.iter().map(|&(b, _)| f32::from_bits(b)).collect();
            let mut out = vec![0u16; src.len()];
            narrow_bf16_on(unit, &src, &mut out);
            for (&(bits, half), &got) in cases.iter().zip(&out) {
                assert_eq!(got, half, "{unit:?} {bits:#010x}");
            }
            let mut got = vec![0u16; sweep.len()];
            narrow_bf16_on(unit, &sweep, &mut got);
            assert_eq!(got, want, "{unit:?} sweep");
        }
    }

    #[test]
    fn sums_and_maxima_agree_with_the_plain_loops() {
        let x: Vec<f32> = (0..1037)
            .map(|i| ((i * 7919) % 1000) as f32 / 999.0 - 0.3)
            .collect();
        for len in [0, 1, 5, 16, 31, 64, 1037] {
            let v = &x[..len];
            let exact: f64 = v.iter().map(|&a| a as f64).sum();
            let abs: f64 = v.iter().map(|&a| (a as f64).abs()).sum();
            let bound = len as f64 * abs / (1u64 << 24) as f64;
            assert!((sum_fast(v) as f64 - exact).abs() <= bound, "{len}");
            assert_eq!(
                max_fast(v),
                v.iter().fold(f32::NEG_INFINITY, |m, &a| m.max(a))
            );
        }
        assert_eq!(max_fast(&[f32::NAN, -3.0, f32::NAN]), -3.0);
        assert_eq!(sum_fast(&[]), 0.0);
    }

    #[test]
    fn tile_wise_softmax_gives_the_row_wise_bits() {
        // Rows with masked tails holding values exp would overflow on, NaN included: they must
        // come out 0 and leave the live columns alone. Rows of one and of two whole chunks of
        // lanes (the chunked passes) and of a width that is not (the sliced ones).
        let cases = [
            (
                16,
                [(16, true), (16, false), (11, true), (3, false), (0, true)],
            ),
            (
                32,
                [(32, true), (17, false), (16, true), (5, true), (0, false)],
            ),
            (
                12,
                [(12, true), (12, false), (7, true), (1, false), (0, true)],
            ),
        ];
        for ((bs, valids), rows) in cases.into_iter().flat_map(|c| [(c, 7), (c, 16), (c, 23)]) {
            let mut s0: Vec<f32> = (0..rows * bs)
                .map(|i| ((i * 53) % 31) as f32 * 0.7 - 9.0)
                .collect();
            s0[rows * bs - 1] = f32::NAN;
            s0[bs + 11] = 200.0;
            for (valid, round) in valids {
                let (mut s_r, mut m_r, mut l_r) = (s0.clone(), vec![0.0; rows], vec![0.0; rows]);
                simpler_aicore::tile_ops::softmax_rows(
                    &Bodies, &mut s_r, &mut m_r, &mut l_r, bs, valid, round,
                );
                for unit in Unit::available() {
                    let (mut s, mut m, mut l) = (s0.clone(), vec![0.0; rows], vec![0.0; rows]);
                    softmax_rows_on(unit, &mut s, &mut m, &mut l, bs, valid, round);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&s), bits(&s_r), "{unit:?} {bs} valid {valid}: values");
                    assert_eq!(bits(&m), bits(&m_r), "{unit:?} {bs} valid {valid}: maxima");
                    assert_eq!(bits(&l), bits(&l_r), "{unit:?} {bs} valid {valid}: sums");
                }
            }
        }
    }

    #[test]
    fn fused_softmax_rows_match_the_portable_rows_within_exp_and_sum_rounding() {
        use simpler_aicore::Portable;
        let (rows, bs) = (5, 16);
        let s0: Vec<f32> = (0..rows * bs)
            .map(|i| ((i * 37) % 23) as f32 * 0.4 - 3.0)
            .collect();
        for (valid, round) in [(16, true), (16, false), (9, true), (1, false)] {
            let (mut s_p, mut m_p, mut l_p) = (s0.clone(), vec![0.0; rows], vec![0.0; rows]);
            Portable.softmax_rows(&mut s_p, &mut m_p, &mut l_p, bs, valid, round);
            let mut first: Option<Vec<u32>> = None;
            for unit in Unit::available() {
                let (mut s, mut m, mut l) = (s0.clone(), vec![0.0; rows], vec![0.0; rows]);
                softmax_rows_on(unit, &mut s, &mut m, &mut l, bs, valid, round);
                assert_eq!(m, m_p, "the maxima are exact");
                for (row, (got, want)) in s.chunks(bs).zip(s_p.chunks(bs)).enumerate() {
                    assert!(
                        got[valid..].iter().all(|&v| v == 0.0),
                        "masked columns are 0"
                    );
                    for (g, w) in got.iter().zip(want) {
                        // 2 ulp of exp, and one bf16 rounding step apart at most when rounded.
                        let tol = if round { 1.0 / 128.0 } else { 3e-7 } * w.abs();
                        assert!((g - w).abs() <= tol, "row {row}: {g} against {w}");
                    }
                }
                for (g, w) in l.iter().zip(&l_p) {
                    assert!((g - w).abs() <= 1e-2 * w.abs(), "{g} against {w}");
                }
                let all: Vec<u32> = s.iter().chain(&m).chain(&l).map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(all),
                    Some(f) => assert_eq!(&all, f, "{unit:?} gives other bits"),
                }
            }
        }
    }
}
