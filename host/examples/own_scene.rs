//! A scene of a crate's own, run through the scene framework: `w = softsign(alpha * x + y)`
//! over fp32 vectors, where `softsign(z) = z / (1 + |z|)`.
//!
//! Two AIV kernels of its own (`axpy`, `softsign`), an orchestration that submits one task of
//! each (the intermediate `z` allocated by the runtime), two cases (`small`, which fits the
//! core's local buffer in one chunk, and `streamed`, which passes through it in several), inputs
//! generated from a seed, and a golden computed in f64 by plain Rust that shares no code with
//! the kernels. `main` is one call: the `simpler` command for this scene.
//!
//! ```text
//! cargo run -p simpler-host --example own_scene -- list
//! cargo run -p simpler-host --example own_scene -- run own_scene --case streamed --rounds 5
//! cargo run -p simpler-host --example own_scene -- check        # every case once (what CI runs)
//! ```

use simpler_host::app;
use simpler_host::prelude::*;
use std::process::ExitCode;

/// `z = alpha * x + y`. Tensors `[x, y, z OUT]` of one element count; scalar 0 is `alpha` as
/// f32 bits. Both inputs stream through halves of the local buffer.
fn axpy(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [x, y, z] = kernel_args::tensors::<3>(ctx.args)?;
    let n = kernel_args::operand(x, 0)?;
    kernel_args::operand_of(y, 1, n)?;
    kernel_args::operand_of(z, 2, n)?;
    let alpha = kernel_args::scalar_f32(ctx.args, 0)?;
    let half = ctx.local.len() / 2;
    if half == 0 {
        return Err(KernelFailure::TooLarge {
            elems: n as u64,
            limit: 0,
        });
    }
    let gm = ctx.gm;
    let [bx, by] = stage::carve(ctx.local, [half, half])?;
    let mut done = 0;
    while done < n {
        let len = (n - done).min(half);
        let (bx, by) = (&mut bx[..len], &mut by[..len]);
        stage::load_range(gm, x, 0, done, bx)?;
        stage::load_range(gm, y, 1, done, by)?;
        for (a, b) in bx.iter_mut().zip(by.iter()) {
            *a = alpha * *a + b;
        }
        stage::store_range(gm, z, 2, done, bx)?;
        done += len;
    }
    Ok(())
}

/// `w = z / (1 + |z|)`. Tensors `[z, w OUT]` of one element count, streamed through the whole
/// local buffer.
fn softsign(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [z, w] = kernel_args::tensors::<2>(ctx.args)?;
    let n = kernel_args::operand(z, 0)?;
    kernel_args::operand_of(w, 1, n)?;
    let room = ctx.local.len();
    if room == 0 {
        return Err(KernelFailure::TooLarge {
            elems: n as u64,
            limit: 0,
        });
    }
    let mut done = 0;
    while done < n {
        let chunk = &mut ctx.local[..(n - done).min(room)];
        stage::load_range(ctx.gm, z, 0, done, chunk)?;
        chunk.iter_mut().for_each(|v| *v /= 1.0 + v.abs());
        stage::store_range(ctx.gm, w, 1, done, chunk)?;
        done += chunk.len();
    }
    Ok(())
}

/// Entry `[x, y, w OUT]` and one scalar, `alpha` (f32): `z = axpy(alpha, x, y)` into a tensor
/// the runtime allocates, then `w = softsign(z)`, which waits for it (one edge).
fn callable() -> Callable {
    let mut table = KernelTable::new();
    let (axpy, softsign) = (table.aiv(axpy), table.aiv(softsign));
    let signature = Signature::new([ArgDirection::In, ArgDirection::In, ArgDirection::Out]);
    Callable::new(table, signature.scalars::<1>(), move |s, entry| {
        let [x, y, w] = entry.tensors;
        let alpha: f32 = entry.scalar(0);
        let z = TensorInfo::new(x.shapes(), DataType::Float32).expect("the entry's shape");
        let first = s.task(axpy).input(x).input(y).output(z).scalar(alpha);
        let z = first.submit()?.output(0);
        s.task(softsign)
            .input(z)
            .output_existing(w)
            .submit()
            .map(drop)
    })
}

/// A case: the element count, `alpha`, and the inputs' seed.
struct Case {
    name: &'static str,
    elements: u32,
    alpha: f32,
    seed: u64,
}

const CASES: [Case; 2] = [
    Case {
        name: "small",
        elements: 4096,
        alpha: 0.5,
        seed: 0x0005_CE4E_0000_0001,
    },
    // More elements than the default local buffer holds: axpy takes three chunks (of half
    // the buffer each), softsign two.
    Case {
        name: "streamed",
        elements: LOCAL_BUFFER_WORDS as u32 + 5000,
        alpha: -1.25,
        seed: 0x0005_CE4E_0000_0002,
    },
];

/// Inputs in `[-4, 4)` from a 64-bit LCG (Knuth's MMIX constants), 24 bits each, exact in f32.
fn inputs(seed: u64, n: u32) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 40) as f32 / (1u32 << 21) as f32 - 4.0
        })
        .collect()
}

/// The golden, element by element in f64: `softsign(alpha * x + y)`.
fn golden(alpha: f32, x: &[f32], y: &[f32]) -> Vec<f64> {
    x.iter()
        .zip(y)
        .map(|(&x, &y)| {
            let z = alpha as f64 * x as f64 + y as f64;
            z / (1.0 + z.abs())
        })
        .collect()
}

/// The scene: its name, its cases, and a case prepared.
struct OwnScene;

impl Scene for OwnScene {
    fn name(&self) -> &'static str {
        "own_scene"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["small", "streamed"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        let c = CASES.iter().find(|c| c.name == case)?;
        let n = c.elements;
        let x = inputs(c.seed, n);
        let y = inputs(c.seed.rotate_left(17), n);
        let golden = golden(c.alpha, &x, &y);
        let tensors = vec![
            HostTensor::f32(&x, &[n], ArgDirection::In),
            HostTensor::f32(&y, &[n], ArgDirection::In),
            HostTensor::f32(&vec![0.0; n as usize], &[n], ArgDirection::Out),
        ];
        // f32 rounds alpha * x + y and the division each by half an ulp; |w| < 1, so 1e-6
        // absolute covers both with room, and an element from another position is far off.
        let check = golden_check(
            2,
            golden,
            Tolerance {
                atol: 1e-6,
                rtol: 1e-6,
            },
        );
        Some(
            Prepared::new(callable(), tensors, check)
                .with_scalars(vec![c.alpha.to_word()])
                .with_counts(2, 1),
        )
    }
}

fn main() -> ExitCode {
    app::main(&[&OwnScene])
}
