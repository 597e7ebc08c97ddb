//! `dummy_task`: dependency-only tasks between a cube producer and a cube consumer (the
//! reference's `dummy_task` scene test, its four cases).
//!
//! Entry: three 16-element f32 tensors `X`, `Y`, `W` (all INOUT, every element `-1` on entry)
//! and one scalar, the case number (1 to 4). Two AIC kernels: `WRITE_CONST` (kernel 0) writes
//! 42 to element 0 of its one (INOUT) tensor; `COPY_FIRST` (kernel 1) copies element 0 of its
//! first tensor (INPUT) to element 0 of its second (INOUT). Dummy tasks run nothing, so the
//! only way 42 reaches `Y[0]` is the copy running after the producer, through the dummies.
//!
//! | case | graph, in submit order | tasks | edges |
//! |---|---|---|---|
//! | SingleDummyAutoDep | P (INOUT X) → D (INOUT X) → C (IN X, INOUT Y) | 3 | 2 |
//! | LongDummyChain | P → D1 → D2 → D3 → D4 → C, each dummy INOUT X | 6 | 5 |
//! | DummyExplicitDepBarrier | P_A (INOUT X), P_B (INOUT W), D after {P_A, P_B} with no tensors, C after D (IN X, INOUT Y) | 4 | 4 |
//! | DenseFanoutFanin | P (INOUT X), 18 dummies each after P, C after all 18 (IN X, INOUT Y) | 20 | 37 |
//!
//! In the first two cases every edge comes from the TensorMap: an INOUT of `X` looks up the
//! last writer of `X` and becomes its writer, so the dummies chain. In the last two, the
//! dummies carry no tensors and every edge to or from them is explicit (`WAIT | RETAIN`); the
//! consumer's INPUT of `X` still finds `X`'s last writer, the producer, through the TensorMap,
//! a WAIT-only edge: the fourth edge of case 3 (`P_A → C`, beside `P_A → D`, `P_B → D` and
//! `D → C`) and the 37th of case 4 (beside 18 `P → D` and 18 `D → C`). Every task is in the
//! orchestration's scope, open until the end, so no producer retires before a consumer names
//! it and the counts are those of every run.
//!
//! The golden is exact: `X[0] = Y[0] = 42`, and `W[0] = 42` in case 3 (its second producer);
//! every other element stays `-1`.

use super::{compare_each, Prepared, Scene};
use crate::callable::{Callable, Signature};
use crate::chip_worker::HostTensor;
use crate::scope::{Scope, Tensor};
use crate::task::{AicKernel, KernelTable, TaskOutputs};
use simpler_aicore::kernels::{args as kernel_args, stage};
use simpler_aicore::{KernelCtx, KernelFailure};
use simpler_aicpu::RtError;
use simpler_core::ArgDirection::InOut;

/// The scene.
pub struct DummyTask;

const CASE_NAMES: &[&str] = &[
    "SingleDummyAutoDep",
    "LongDummyChain",
    "DummyExplicitDepBarrier",
    "DenseFanoutFanin",
];

/// Elements of each entry tensor.
const LEN: u32 = 16;
/// What the producer writes.
const SENTINEL: f32 = 42.0;
/// Every entry element before the run.
const INIT: f32 = -1.0;
/// Dummies between producer and consumer in `LongDummyChain`.
const LONG_CHAIN_DUMMIES: usize = 4;
/// Dummies fanned out from the producer and into the consumer in `DenseFanoutFanin`.
const DENSE_DEP_COUNT: usize = 18;
/// The fatal code of a case number outside 1 to 4.
pub const UNKNOWN_CASE: u32 = 0xd7_0001;

/// AIC: element 0 of tensor 0 (INOUT) becomes 42.
fn write_const(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [x] = kernel_args::tensors::<1>(ctx.args)?;
    stage::store_range(ctx.gm, x, 0, 0, &[SENTINEL])
}

/// AIC: element 0 of tensor 1 (INOUT) becomes element 0 of tensor 0 (INPUT).
fn copy_first(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [src, dst] = kernel_args::tensors::<2>(ctx.args)?;
    let mut v = [0.0f32];
    stage::load_range(ctx.gm, src, 0, 0, &mut v)?;
    stage::store_range(ctx.gm, dst, 1, 0, &v)
}

/// The kernels, in the reference's order: `WRITE_CONST` 0, `COPY_FIRST` 1.
#[derive(Clone, Copy)]
struct Kernels {
    write_const: AicKernel,
    copy_first: AicKernel,
}

fn callable() -> Callable {
    let mut table = KernelTable::new();
    let k = Kernels {
        write_const: table.aic(write_const),
        copy_first: table.aic(copy_first),
    };
    let signature = Signature::new([InOut, InOut, InOut]).scalars::<1>();
    Callable::new(table, signature, move |s, entry| {
        let [x, y, w] = entry.tensors;
        orchestrate(s, k, [x, y, w], entry.scalars[0])
    })
}

/// Submits case `case`'s graph (the module docs' table).
fn orchestrate<'s>(
    s: &mut Scope<'s>,
    k: Kernels,
    [x, y, w]: [Tensor<'s>; 3],
    case: u64,
) -> Result<(), RtError> {
    match case {
        1 | 2 => {
            s.task(k.write_const).inout(x).submit()?;
            let dummies = if case == 1 { 1 } else { LONG_CHAIN_DUMMIES };
            for _ in 0..dummies {
                s.dummy().inout(x).submit()?;
            }
            consume(s, k, x, y, &[])
        }
        3 => {
            let a = s.task(k.write_const).inout(x).submit()?;
            let b = s.task(k.write_const).inout(w).submit()?;
            let barrier = s.dummy().after(&a).after(&b).submit()?;
            consume(s, k, x, y, &[barrier])
        }
        4 => {
            let a = s.task(k.write_const).inout(x).submit()?;
            let mut dummies = Vec::with_capacity(DENSE_DEP_COUNT);
            for _ in 0..DENSE_DEP_COUNT {
                dummies.push(s.dummy().after(&a).submit()?);
            }
            consume(s, k, x, y, &dummies)
        }
        _ => Err(s.fail(UNKNOWN_CASE)),
    }
}

/// The consumer: copies `X[0]` to `Y[0]`, after `after` besides what its tensors imply.
fn consume(
    s: &mut Scope<'_>,
    k: Kernels,
    x: Tensor<'_>,
    y: Tensor<'_>,
    after: &[TaskOutputs<'_>],
) -> Result<(), RtError> {
    let mut consumer = s.task(k.copy_first).input(x).inout(y);
    for t in after {
        consumer = consumer.after(t);
    }
    consumer.submit().map(drop)
}

/// `(tasks, edges)` of case number `case` in the reference's graph (the module docs' table).
fn counts(case: u64) -> (u64, u64) {
    match case {
        1 => (3, 2),
        2 => (2 + LONG_CHAIN_DUMMIES as u64, 1 + LONG_CHAIN_DUMMIES as u64),
        3 => (4, 4),
        _ => (2 + DENSE_DEP_COUNT as u64, 2 * DENSE_DEP_COUNT as u64 + 1),
    }
}

impl Scene for DummyTask {
    fn name(&self) -> &'static str {
        "dummy_task"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        let number = CASE_NAMES.iter().position(|&c| c == case)? as u64 + 1;
        let init = vec![INIT; LEN as usize];
        let tensor = || HostTensor::f32(&init, &[LEN], InOut);
        // X[0] and Y[0] hold the sentinel; W[0] too where a producer writes W.
        let golden = |written: bool| -> Vec<f64> {
            let mut g = vec![f64::from(INIT); LEN as usize];
            if written {
                g[0] = f64::from(SENTINEL);
            }
            g
        };
        let want = vec![
            (0, golden(true)),
            (1, golden(true)),
            (2, golden(number == 3)),
        ];
        let (tasks, edges) = counts(number);
        Some(
            Prepared::new(
                callable(),
                vec![tensor(), tensor(), tensor()],
                Box::new(move |t| compare_each(t, &want, 0.0, 0.0)),
            )
            .with_scalars(vec![number])
            .with_counts(tasks, edges),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check passes exactly the golden and fails a consumer that ran before the producer
    /// (Y[0] still -1), a dummy that wrote (X[1] changed), and a W written outside case 3.
    #[test]
    fn the_check_is_exact() {
        for (number, name) in CASE_NAMES.iter().enumerate() {
            let p = DummyTask.prepare(name).unwrap();
            let mut x = vec![INIT; LEN as usize];
            x[0] = SENTINEL;
            let mut w = vec![INIT; LEN as usize];
            if number == 2 {
                w[0] = SENTINEL;
            }
            let with = |x: &[f32], y: &[f32], w: &[f32]| {
                let t = [x, y, w].map(|v| HostTensor::f32(v, &[LEN], InOut));
                (p.check)(&t).pass
            };
            assert!(with(&x, &x, &w), "{name}");
            let early = vec![INIT; LEN as usize];
            assert!(!with(&x, &early, &w), "{name}: Y[0] not copied");
            let mut touched = x.clone();
            touched[1] = 0.0;
            assert!(!with(&touched, &x, &w), "{name}: X[1] written");
            let mut other_w = w.clone();
            other_w[0] = if number == 2 { INIT } else { SENTINEL };
            assert!(!with(&x, &x, &other_w), "{name}: W[0]");
        }
        assert!(DummyTask.prepare("Case1").is_none());
    }
}
