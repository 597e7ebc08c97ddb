//! Quick start: an own cube (AIC) and vector (AIV) kernel, an orchestration over them, and a
//! run on both runtimes checked against a golden computed here in plain Rust.
//!
//! `out = relu(A · B)`, with the product's K dimension split into tiles: each tile's partial
//! product is made on the cube core inside its own scope and added into an accumulator that
//! the outer scope owns (INOUT), then a vector task applies relu. `cargo run --release -p
//! simpler-host --example quickstart`.

use simpler_host::prelude::*;
use ArgDirection::{In, Out};

const M: u32 = 16;
const K: u32 = 64;
const N: u32 = 16;
/// The K extent of one partial product.
const TILE: u32 = 16;

/// AIC: `c = a · b`, for `a` of `[m, k]` (any strides) and `b` of `[k, n]`.
fn matmul(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [a, b, c] = kernel_args::tensors::<3>(ctx.args)?;
    let ((m, k), (_, n)) = (kernel_args::matrix(a, 0)?, kernel_args::matrix(b, 1)?);
    kernel_args::operand_of(c, 2, m * n)?;
    let [x, y, z] = stage::carve(ctx.local, [m * k, k * n, m * n])?;
    tile::load(ctx.gm, a, x)?;
    tile::load(ctx.gm, b, y)?;
    for (i, row) in z.chunks_exact_mut(n).enumerate() {
        for (j, out) in row.iter_mut().enumerate() {
            *out = (0..k).map(|p| x[i * k + p] * y[p * n + j]).sum();
        }
    }
    tile::store(ctx.gm, c, z)
}

/// AIV, elementwise over `[x, y]`: `y = f(y, x)` (`y` is read even when `f` ignores it).
fn vector(ctx: &mut KernelCtx<'_>, f: fn(f32, f32) -> f32) -> Result<(), KernelFailure> {
    let [x, y] = kernel_args::tensors::<2>(ctx.args)?;
    let n = kernel_args::operand(x, 0)?;
    kernel_args::operand_of(y, 1, n)?;
    let [p, q] = stage::carve(ctx.local, [n, n])?;
    tile::load(ctx.gm, x, p)?;
    tile::load(ctx.gm, y, q)?;
    q.iter_mut().zip(p.iter()).for_each(|(q, &p)| *q = f(*q, p));
    tile::store(ctx.gm, y, q)
}

/// AIV: `acc += x` (the accumulator is INOUT).
fn accumulate(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    vector(ctx, |acc, x| acc + x)
}

/// AIV: `out = max(x, 0)`.
fn relu(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    vector(ctx, |_, x| x.max(0.0))
}

fn callable() -> Callable {
    let mut table = KernelTable::new();
    let (mm, acc_k, relu_k) = (table.aic(matmul), table.aiv(accumulate), table.aiv(relu));
    Callable::new(table, Signature::new([In, In, Out]), move |s, entry| {
        let [a, b, out] = entry.tensors;
        let mn = TensorInfo::new(&[M, N], DataType::Float32).expect("a valid shape");
        let tile = |t: u32| {
            let a_t = a.view(&[M, TILE], &[0, t * TILE]).expect("inside A");
            (a_t, b.view(&[TILE, N], &[t * TILE, 0]).expect("inside B"))
        };
        // The accumulator outlives the inner scopes, so this scope allocates it; runtime
        // memory starts undefined, so the first partial product is written straight into it.
        let [acc] = s.alloc([mn])?;
        let (a0, b0) = tile(0);
        let first = s.task(mm).input(a0).input(b0);
        first.output_existing(acc).submit()?;
        for t in 1..K / TILE {
            s.scope(ScopeMode::Auto, |s| {
                let (a_t, b_t) = tile(t);
                let part = s.task(mm).input(a_t).input(b_t).output(mn).submit()?;
                s.task(acc_k).input(part.output(0)).inout(acc).submit()?;
                Ok(())
            })?;
        }
        let last = s.task(relu_k).input(acc).output_existing(out);
        last.submit().map(drop)
    })
}

/// The golden, from the definition: `max(sum_p a[i][p] * b[p][j], 0)` in f64.
fn golden(a: &[f32], b: &[f32]) -> Vec<f64> {
    let (k, n) = (K as usize, N as usize);
    let dot =
        |e: usize| (0..k).map(move |p| f64::from(a[e / n * k + p]) * f64::from(b[p * n + e % n]));
    (0..M as usize * n)
        .map(|e| dot(e).sum::<f64>().max(0.0))
        .collect()
}

fn main() -> Result<(), String> {
    let values = |n: u32, m: u32| (0..n).map(move |i| (i * 7 % m) as f32 / m as f32 - 0.5);
    let (a, b): (Vec<f32>, Vec<f32>) = (values(M * K, 13).collect(), values(K * N, 11).collect());
    let want = golden(&a, &b);
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3))
        .map_err(|e| ErrorChain(&e).to_string())?;
    let handle = worker.register(callable());
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let mut tensors = [
            HostTensor::f32(&a, &[M, K], In),
            HostTensor::f32(&b, &[K, N], In),
            HostTensor::f32(&vec![0.0; (M * N) as usize], &[M, N], Out),
        ];
        let report = worker
            .run(handle, &mut tensors, &[], RunOptions::on(runtime))
            .map_err(|e| ErrorChain(&e).to_string())?;
        let worst = (tensors[2].to_f32().iter().zip(&want))
            .map(|(&g, &w)| (g as f64 - w).abs())
            .fold(0.0, f64::max);
        println!(
            "{runtime:?}: {} tasks, max |out - golden| = {worst:.2e}",
            report.outcome.tasks
        );
        if worst > 1e-4 {
            return Err(format!("{runtime:?}: off the golden by {worst}"));
        }
    }
    println!("quickstart: PASS on tmr and hbg");
    Ok(())
}
