//! `mixed_example`: per iteration, in its own scope, a task of each resource shape: the three
//! MIX shapes beside plain AIC and AIV tasks (the reference's `mixed_example` scene test, its
//! cases `case1`, 4 iterations, and `case2`, 1).
//!
//! Entry (15 tensors, f32): inputs `A`, `B` (`[128, 128]`) and `D`, `E`, `G`, `H` (16,384
//! elements); outputs `C`, `F`, `I`, `J`, `K`, `L`, `M`, `N`, `O` of one 16,384-element tile
//! per iteration, in the order `A B C D E F G H I J K L M N O`. The iteration count is the
//! length of `C` in tiles. Kernels, in the reference's order (a kernel of a MIX task finds its
//! operands at its place in the task's shared argument list):
//!
//! | id | kernel | core | reads, writes (argument positions) |
//! |---|---|---|---|
//! | 0 | MATMUL | AIC | 0 · 1 → 2 |
//! | 1 | ADD | AIV | 3 + 4 → 5 |
//! | 2 | MUL | AIV | 6 · 7 → 8 |
//! | 3 | ADD_STANDALONE | AIV | 0 + 1 → 2 |
//! | 4 | MUL_STANDALONE | AIV | 3 · 4 → 5 |
//!
//! Iteration `i`, in an AUTO scope, writes tile `i` of each output (OUTPUT_EXISTING views):
//!
//! 1. AIC + AIV0 + AIV1 (0, 1, 2): `C = A·B`, `F = D + E`, `I = G·H`;
//! 2. AIC (0): `J = A·B`;
//! 3. AIV (3): `K = D + E`;
//! 4. AIV0 + AIV1 (3, 4): `L = D + E`, `M = G·H`;
//! 5. AIC + AIV0 (0, 1): `N = A·B`, `O = D + E`.
//!
//! No task reads what another writes, and an OUTPUT_EXISTING takes no TensorMap lookup, so the
//! graph has 5 tasks per iteration and no edges (20 and 0 for `case1`, 5 and 0 for `case2`).
//!
//! Inputs are multiples of 1/16 in [-1, 1) from the scenes' xorshift64* source, so every
//! product, sum and matmul entry (128 terms of whole 1/256ths, at most 2^15 of them) is exact
//! in f32 in any summation order, and the golden (f64, the definitions) is checked exactly.
//! The reference checks within 1e-3 because its random-normal inputs round.

use super::{compare_each, Prepared, Scene, XorShift};
use crate::callable::{Callable, Signature};
use crate::chip_worker::HostTensor;
use crate::scope::Tensor;
use crate::task::{KernelTable, Mix};
use simpler_aicore::kernels::args::{self as kernel_args, bad};
use simpler_aicore::kernels::stage;
use simpler_aicore::{tile, KernelCtx, KernelFailure};
use simpler_core::scope::ScopeMode;
use simpler_core::ArgDirection::{self, In, Out};
use simpler_core::TaskTensor;

/// The scene.
pub struct MixedExample;

/// Rows and columns of `A` and `B`.
const MATMUL_SIZE: u32 = 128;
/// Elements of one output tile.
const TILE: u32 = MATMUL_SIZE * MATMUL_SIZE;
/// The fatal code of an entry whose outputs are not whole tiles of the same count.
pub const BAD_ENTRY: u32 = 0x3e_0001;

/// Tensors `first..first + 3` of the task.
fn triple(ctx: &KernelCtx<'_>, first: usize) -> Result<[TaskTensor; 3], KernelFailure> {
    let all = ctx.args.tensors();
    match all.get(first..first + 3) {
        Some(&[a, b, c]) => Ok([a, b, c]),
        _ => Err(bad(all.len())),
    }
}

/// `t[first + 2] = t[first] · t[first + 1]`: an `[m, k]` by `[k, n]` product into `m · n`
/// elements (of any shape).
fn matmul_at(ctx: &mut KernelCtx<'_>, first: usize) -> Result<(), KernelFailure> {
    let [a, b, c] = triple(ctx, first)?;
    let (m, k) = kernel_args::matrix(&a, first)?;
    let (k_b, n) = kernel_args::matrix(&b, first + 1)?;
    if k_b != k {
        return Err(bad(first + 1));
    }
    let mn = kernel_args::product(m, n, first + 2)?;
    kernel_args::operand_of(&c, first + 2, mn)?;
    let mk = kernel_args::product(m, k, first)?;
    let kn = kernel_args::product(k, n, first + 1)?;
    let [x, y, z] = stage::carve(ctx.local, [mk, kn, mn])?;
    tile::load(ctx.gm, &a, x)?;
    tile::load(ctx.gm, &b, y)?;
    for (row, a_row) in z.chunks_exact_mut(n).zip(x.chunks_exact(k)) {
        row.fill(0.0);
        for (&p, b_row) in a_row.iter().zip(y.chunks_exact(n)) {
            for (out, &q) in row.iter_mut().zip(b_row) {
                *out += p * q;
            }
        }
    }
    tile::store(ctx.gm, &c, z)
}

/// `t[first + 2] = op(t[first], t[first + 1])` elementwise over equal element counts.
fn binary_at(
    ctx: &mut KernelCtx<'_>,
    first: usize,
    op: fn(f32, f32) -> f32,
) -> Result<(), KernelFailure> {
    let [a, b, c] = triple(ctx, first)?;
    let n = kernel_args::operand(&a, first)?;
    kernel_args::operand_of(&b, first + 1, n)?;
    kernel_args::operand_of(&c, first + 2, n)?;
    let [x, y] = stage::carve(ctx.local, [n, n])?;
    tile::load(ctx.gm, &a, x)?;
    tile::load(ctx.gm, &b, y)?;
    x.iter_mut()
        .zip(y.iter())
        .for_each(|(x, &y)| *x = op(*x, y));
    tile::store(ctx.gm, &c, x)
}

/// Kernel 0, AIC: arguments 0 · 1 → 2.
fn matmul(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    matmul_at(ctx, 0)
}

/// Kernel 1, AIV: arguments 3 + 4 → 5.
fn add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    binary_at(ctx, 3, |x, y| x + y)
}

/// Kernel 2, AIV: arguments 6 · 7 → 8.
fn mul(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    binary_at(ctx, 6, |x, y| x * y)
}

/// Kernel 3, AIV: arguments 0 + 1 → 2.
fn add_standalone(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    binary_at(ctx, 0, |x, y| x + y)
}

/// Kernel 4, AIV: arguments 3 · 4 → 5.
fn mul_standalone(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    binary_at(ctx, 3, |x, y| x * y)
}

/// The entry's directions, `A B C D E F G H I J K L M N O`.
const SIGNATURE: [ArgDirection; 15] = [
    In, In, Out, In, In, Out, In, In, Out, Out, Out, Out, Out, Out, Out,
];

fn callable() -> Callable {
    let mut table = KernelTable::new();
    let mm = table.aic(matmul);
    let add = table.aiv(add);
    let mul = table.aiv(mul);
    let add_sa = table.aiv(add_standalone);
    let mul_sa = table.aiv(mul_standalone);
    Callable::new(table, Signature::new(SIGNATURE), move |s, entry| {
        let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o] = entry.tensors;
        let outs = [c, f, i, j, k, l, m, n, o];
        let iters = c.numel() / u64::from(TILE);
        if outs.iter().any(|t| t.numel() != iters * u64::from(TILE)) {
            return Err(s.fail(BAD_ENTRY));
        }
        for it in 0..iters as u32 {
            let mut tiles: [Tensor<'_>; 9] = outs;
            for t in tiles.iter_mut() {
                match t.view(&[TILE], &[it * TILE]) {
                    Ok(v) => *t = v,
                    Err(_) => return Err(s.fail(BAD_ENTRY)),
                }
            }
            let [c, f, i, j, k, l, m, n, o] = tiles;
            s.scope(ScopeMode::Auto, |s| {
                let all = Mix::new().aic(mm).aiv0(add).aiv1(mul);
                s.task(all)
                    .input(a)
                    .input(b)
                    .output_existing(c)
                    .input(d)
                    .input(e)
                    .output_existing(f)
                    .input(g)
                    .input(h)
                    .output_existing(i)
                    .submit()?;
                s.task(mm).input(a).input(b).output_existing(j).submit()?;
                s.task(add_sa)
                    .input(d)
                    .input(e)
                    .output_existing(k)
                    .submit()?;
                let vectors = Mix::new().aiv0(add_sa).aiv1(mul_sa);
                s.task(vectors)
                    .input(d)
                    .input(e)
                    .output_existing(l)
                    .input(g)
                    .input(h)
                    .output_existing(m)
                    .submit()?;
                let cube_vector = Mix::new().aic(mm).aiv0(add);
                s.task(cube_vector)
                    .input(a)
                    .input(b)
                    .output_existing(n)
                    .input(d)
                    .input(e)
                    .output_existing(o)
                    .submit()?;
                Ok(())
            })?;
        }
        Ok(())
    })
}

/// `n` multiples of 1/16 in [-1, 1).
fn sixteenths(rng: &mut XorShift, n: u32) -> Vec<f32> {
    (0..n)
        .map(|_| ((rng.next_u64() >> 59) as f32 - 16.0) / 16.0)
        .collect()
}

/// `a · b` for `[s, s]` row-major matrices, in f64.
fn matmul_golden(a: &[f32], b: &[f32], s: usize) -> Vec<f64> {
    (0..s * s)
        .map(|e| {
            let (r, col) = (e / s, e % s);
            (0..s)
                .map(|p| f64::from(a[r * s + p]) * f64::from(b[p * s + col]))
                .sum()
        })
        .collect()
}

impl Scene for MixedExample {
    fn name(&self) -> &'static str {
        "mixed_example"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["case1", "case2"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        let iters: u32 = match case {
            "case1" => 4,
            "case2" => 1,
            _ => return None,
        };
        let mut rng = XorShift(0x6d69_7865_645f_6578);
        let [a, b, d, e, g, h] = [(); 6].map(|_| sixteenths(&mut rng, TILE));
        let side = MATMUL_SIZE as usize;
        let product = matmul_golden(&a, &b, side);
        let sum: Vec<f64> = d
            .iter()
            .zip(&e)
            .map(|(&x, &y)| f64::from(x) + f64::from(y))
            .collect();
        let prod: Vec<f64> = g
            .iter()
            .zip(&h)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .collect();
        let repeat = |tile: &[f64]| -> Vec<f64> { tile.repeat(iters as usize) };
        // Output positions in the entry: C F I J K L M N O.
        let golden = vec![
            (2, repeat(&product)),
            (5, repeat(&sum)),
            (8, repeat(&prod)),
            (9, repeat(&product)),
            (10, repeat(&sum)),
            (11, repeat(&sum)),
            (12, repeat(&prod)),
            (13, repeat(&product)),
            (14, repeat(&sum)),
        ];
        let matrix = [MATMUL_SIZE, MATMUL_SIZE];
        let out = || HostTensor::f32(&vec![0.0; (iters * TILE) as usize], &[iters * TILE], Out);
        let vector = |v: &[f32]| HostTensor::f32(v, &[TILE], In);
        let tensors = vec![
            HostTensor::f32(&a, &matrix, In),
            HostTensor::f32(&b, &matrix, In),
            out(),
            vector(&d),
            vector(&e),
            out(),
            vector(&g),
            vector(&h),
            out(),
            out(),
            out(),
            out(),
            out(),
            out(),
            out(),
        ];
        Some(
            Prepared::new(
                callable(),
                tensors,
                Box::new(move |t| compare_each(t, &golden, 0.0, 0.0)),
            )
            .with_counts(5 * u64::from(iters), 0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden's matmul is the definition (checked on a 2x2), and the check fails any one
    /// output tile left unwritten (zero), in either case.
    #[test]
    fn the_golden_is_the_definition_and_every_output_is_checked() {
        assert_eq!(
            matmul_golden(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 2),
            [19.0, 22.0, 43.0, 50.0]
        );
        for case in ["case1", "case2"] {
            let p = MixedExample.prepare(case).unwrap();
            assert_eq!(p.tensors.len(), 15);
            let f = |t: &HostTensor| t.to_f32();
            let (a, b) = (f(&p.tensors[0]), f(&p.tensors[1]));
            let (d, e, g, h) = (
                f(&p.tensors[3]),
                f(&p.tensors[4]),
                f(&p.tensors[6]),
                f(&p.tensors[7]),
            );
            let side = MATMUL_SIZE as usize;
            let mut mm = vec![0.0f32; side * side];
            for r in 0..side {
                for c in 0..side {
                    mm[r * side + c] = (0..side).map(|k| a[r * side + k] * b[k * side + c]).sum();
                }
            }
            let sum: Vec<f32> = d.iter().zip(&e).map(|(x, y)| x + y).collect();
            let prod: Vec<f32> = g.iter().zip(&h).map(|(x, y)| x * y).collect();
            let mut t = p.tensors.clone();
            let iters = t[2].to_f32().len() / TILE as usize;
            for (i, tile) in [
                (2, &mm),
                (5, &sum),
                (8, &prod),
                (9, &mm),
                (10, &sum),
                (11, &sum),
                (12, &prod),
                (13, &mm),
                (14, &sum),
            ] {
                let n = (iters * TILE as usize) as u32;
                t[i] = HostTensor::f32(&tile.repeat(iters), &[n], Out);
            }
            assert!((p.check)(&t).pass, "{case}: f32 results are exact");
            for i in [2, 5, 8, 9, 10, 11, 12, 13, 14] {
                let mut v = t[i].to_f32();
                v[(iters - 1) * TILE as usize..].fill(0.0);
                let mut broken = t.clone();
                broken[i] = HostTensor::f32(&v, &[v.len() as u32], Out);
                assert!(!(p.check)(&broken).pass, "{case}: output {i}'s last tile");
            }
        }
    }
}
