//! What the orchestration's element reads and writes wait for, on the simulator (both
//! topologies), as the reference's `get_tensor_data` / `set_tensor_data` do: a read waits for
//! the tensor's creator and every TensorMap writer of it; a write also for the consumers that
//! retain those producers.
//!
//! Every task the order is about is queued behind `burn`, a kernel that runs long on a scratch
//! tensor of its own (a fixed number of load-add-store rounds, no clock), so an element access
//! that does not wait for it reaches the tensor long before it runs: the assertions catch a
//! missing wait every time rather than by timing luck. Where the tensor has a creator, `burn`
//! starts only once the creator has completed (the simulator runs a scheduler's cores' kernels
//! one after another on its thread, so a creator sharing a thread with `burn` could otherwise
//! complete after it, and the creator-only wait of old end late enough to pass).

use simpler_aicore::kernels::{self, args, stage};
use simpler_aicore::{KernelCtx, KernelFailure};
use simpler_core::deps::ExplicitDep;
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, DataType, TaskTensor, TensorArgType};
use simpler_host::{ChipWorker, HostTensor, OrchFn, RunOptions};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::harness::arg;
use std::sync::{Arc, Mutex};

/// Kernel ids, in the order [`KERNELS`] registers them.
const ADD_SCALAR: u32 = 0;
const BURN: u32 = 1;
const BUMP: u32 = 2;

/// Rounds `burn` runs: long enough to outlast any submit and element access by far.
const BURN_ROUNDS: u64 = 20_000;

/// Elements of every tensor.
const N: usize = 16;

fn kernels() -> Vec<simpler_aicore::KernelFn> {
    vec![kernels::add_scalar, burn, bump]
}

/// `t += 1`, `scalar 0` times over. Tensors: `[t INOUT]`. Burns time deterministically.
fn burn(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [t] = args::tensors::<1>(ctx.args)?;
    let n = args::operand(t, 0)?;
    let rounds = args::scalar(ctx.args, 0)?;
    for _ in 0..rounds {
        let x = &mut ctx.local[..n];
        stage::load_range(ctx.gm, t, 0, 0, x)?;
        for v in x.iter_mut() {
            *v += 1.0;
        }
        stage::store_range(ctx.gm, t, 0, 0, x)?;
    }
    Ok(())
}

/// `out = x; x += 1`. Tensors: `[x INOUT, out OUTPUT_EXISTING]`: its `out` shows the `x` it
/// read.
fn bump(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [x, out] = args::tensors::<2>(ctx.args)?;
    let n = args::operand(x, 0)?;
    args::operand_of(out, 1, n)?;
    let v = &mut ctx.local[..n];
    stage::load_range(ctx.gm, x, 0, 0, v)?;
    stage::store_range(ctx.gm, out, 1, 0, v)?;
    for e in v.iter_mut() {
        *e += 1.0;
    }
    stage::store_range(ctx.gm, x, 0, 0, v)
}

fn f32_word(v: f32) -> u64 {
    u64::from(v.to_bits())
}

fn word_f32(w: u64) -> f32 {
    f32::from_bits(w as u32)
}

/// A fresh runtime-allocated f32 tensor of [`N`] elements, as an OUTPUT argument.
fn fresh() -> TaskArg {
    arg(
        TaskTensor::create_info(&[N as u32], DataType::Float32).expect("shape"),
        TensorArgType::Output,
    )
}

/// Submits `burn` on `scratch` after `deps`: the task the order-sensitive tasks wait for.
fn submit_burn(
    rt: &mut simpler_aicpu::Rt<'_, '_>,
    scratch: TaskTensor,
    deps: &[ExplicitDep],
) -> Result<simpler_core::TaskId, simpler_aicpu::RtError> {
    submit_after(
        rt,
        BURN,
        &mut [arg(scratch, TensorArgType::InOut)],
        &[BURN_ROUNDS],
        deps,
    )
}

/// Submits a one-block AIV task of `kernel` after `deps`.
fn submit_after(
    rt: &mut simpler_aicpu::Rt<'_, '_>,
    kernel: u32,
    args: &mut [TaskArg],
    scalars: &[u64],
    deps: &[ExplicitDep],
) -> Result<simpler_core::TaskId, simpler_aicpu::RtError> {
    let k = simpler_aicpu::MixedKernels {
        aic: simpler_aicpu::NO_KERNEL,
        aiv0: kernel,
        aiv1: simpler_aicpu::NO_KERNEL,
    };
    rt.submit(k, 1, args, scalars, deps)
}

fn ramp() -> Vec<f32> {
    (0..N).map(|i| i as f32).collect()
}

fn vector(data: &[f32], dir: ArgDirection) -> HostTensor {
    HostTensor::f32(data, &[N as u32], dir)
}

/// Runs `orch` over `tensors` with [`kernels`] on `topology`; panics if the run fails.
fn run(topology: Topology, orch: OrchFn, tensors: &mut [HostTensor]) {
    let mut worker = ChipWorker::init(DeviceConfig::new(topology)).expect("device");
    let dirs = tensors.iter().map(|t| t.dir).collect();
    let h = worker.register_callable(orch, kernels(), dirs);
    if let Err(e) = worker.run(h, tensors, &[], RunOptions::default()) {
        panic!("{topology:?}: {e:?}");
    }
}

/// A read of an external tensor (no creator) waits for its TensorMap writer: an INOUT task
/// queued behind `burn`. Waiting for the creator alone reads the entry's value.
#[test]
fn read_waits_for_the_tensormap_writer_of_an_external_tensor() {
    for topology in [Topology::A2a3, Topology::A5] {
        let seen = Arc::new(Mutex::new(None));
        let out = seen.clone();
        let orch: OrchFn = Arc::new(move |rt| {
            let [x, scratch, copy] = rt.args().tensors() else {
                return Err(rt.report_fatal(1));
            };
            let (x, scratch, copy) = (*x, *scratch, *copy);
            let slow = submit_burn(rt, scratch, &[])?;
            // x += 1 (bump), after the burn.
            submit_after(
                rt,
                BUMP,
                &mut [
                    arg(x, TensorArgType::InOut),
                    arg(copy, TensorArgType::OutputExisting),
                ],
                &[],
                &[ExplicitDep::on(slow)],
            )?;
            let x3 = rt.read_element(&x, 3)?;
            *out.lock().unwrap() = Some(word_f32(x3));
            Ok(())
        });
        let mut tensors = vec![
            vector(&ramp(), ArgDirection::InOut),
            vector(&[0.0; N], ArgDirection::InOut),
            vector(&[0.0; N], ArgDirection::Out),
        ];
        run(topology, orch, &mut tensors);
        assert_eq!(
            *seen.lock().unwrap(),
            Some(4.0),
            "{topology:?}: the read saw x before its writer ran"
        );
        assert_eq!(tensors[0].to_f32()[3], 4.0);
        assert_eq!(tensors[1].to_f32()[0], BURN_ROUNDS as f32, "the burn ran");
    }
}

/// A read of a task's output waits for the INOUT writer that follows its creator, not the
/// creator alone.
#[test]
fn read_waits_for_a_writer_after_the_creator() {
    for topology in [Topology::A2a3, Topology::A5] {
        let seen = Arc::new(Mutex::new(None));
        let out = seen.clone();
        let orch: OrchFn = Arc::new(move |rt| {
            let [a, scratch, copy] = rt.args().tensors() else {
                return Err(rt.report_fatal(1));
            };
            let (a, scratch, copy) = (*a, *scratch, *copy);
            // c = a + 1 (c created here, so its creator is this task).
            let mut t0 = [arg(a, TensorArgType::Input), fresh()];
            let creator = rt.submit_aiv(ADD_SCALAR, &mut t0, &[f32_word(1.0)])?;
            let c = t0[1].tensor;
            let slow = submit_burn(rt, scratch, &[ExplicitDep::on(creator)])?;
            // c += 1 (bump), after the burn: a writer of c the TensorMap knows.
            submit_after(
                rt,
                BUMP,
                &mut [
                    arg(c, TensorArgType::InOut),
                    arg(copy, TensorArgType::OutputExisting),
                ],
                &[],
                &[ExplicitDep::on(slow)],
            )?;
            let c3 = rt.read_element(&c, 3)?;
            *out.lock().unwrap() = Some(word_f32(c3));
            Ok(())
        });
        let mut tensors = vec![
            vector(&ramp(), ArgDirection::In),
            vector(&[0.0; N], ArgDirection::InOut),
            vector(&[0.0; N], ArgDirection::Out),
        ];
        run(topology, orch, &mut tensors);
        assert_eq!(
            tensors[2].to_f32()[3],
            4.0,
            "{topology:?}: the writer read c = a + 1"
        );
        // a[3] + 1, bumped once.
        assert_eq!(
            *seen.lock().unwrap(),
            Some(5.0),
            "{topology:?}: the read saw c before its INOUT writer ran"
        );
    }
}

/// A write to a task's output waits until the consumers of its creator are done: an INPUT
/// reader and an INOUT consumer, both queued behind `burn`, read the old value (their outputs
/// prove it), and the write lands after the INOUT consumer's own update.
#[test]
fn write_waits_for_the_consumers_of_the_producer() {
    for topology in [Topology::A2a3, Topology::A5] {
        let seen = Arc::new(Mutex::new(None));
        let out = seen.clone();
        let orch: OrchFn = Arc::new(move |rt| {
            let [a, scratch, read, copy] = rt.args().tensors() else {
                return Err(rt.report_fatal(1));
            };
            let (a, scratch, read, copy) = (*a, *scratch, *read, *copy);
            // c = a + 0.
            let mut t0 = [arg(a, TensorArgType::Input), fresh()];
            let creator = rt.submit_aiv(ADD_SCALAR, &mut t0, &[f32_word(0.0)])?;
            let c = t0[1].tensor;
            let slow = submit_burn(rt, scratch, &[ExplicitDep::on(creator)])?;
            // An INPUT reader of c: read = c + 0, after the burn.
            let reader = submit_after(
                rt,
                ADD_SCALAR,
                &mut [
                    arg(c, TensorArgType::Input),
                    arg(read, TensorArgType::OutputExisting),
                ],
                &[f32_word(0.0)],
                &[ExplicitDep::on(slow)],
            )?;
            // An INOUT consumer: copy = c; c += 1, after the reader (write-after-read is ours
            // to order).
            submit_after(
                rt,
                BUMP,
                &mut [
                    arg(c, TensorArgType::InOut),
                    arg(copy, TensorArgType::OutputExisting),
                ],
                &[],
                &[ExplicitDep::on(reader)],
            )?;
            rt.write_element(&c, 0, f32_word(999.0))?;
            let c0 = rt.read_element(&c, 0)?;
            let c1 = rt.read_element(&c, 1)?;
            *out.lock().unwrap() = Some((word_f32(c0), word_f32(c1)));
            Ok(())
        });
        let a: Vec<f32> = (0..N).map(|i| 10.0 + i as f32).collect();
        let mut tensors = vec![
            vector(&a, ArgDirection::In),
            vector(&[0.0; N], ArgDirection::InOut),
            vector(&[0.0; N], ArgDirection::Out),
            vector(&[0.0; N], ArgDirection::Out),
        ];
        run(topology, orch, &mut tensors);
        assert_eq!(
            tensors[2].to_f32()[0],
            10.0,
            "{topology:?}: the INPUT reader saw the write"
        );
        assert_eq!(
            tensors[3].to_f32()[0],
            10.0,
            "{topology:?}: the INOUT consumer saw the write"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            Some((999.0, 12.0)),
            "{topology:?}: the write landed before the INOUT consumer's update"
        );
    }
}

/// A write to an external tensor waits for its TensorMap writer, an INOUT task (the
/// reference's way to make a reader visible to the write): the task reads the old value.
#[test]
fn write_to_an_external_tensor_waits_for_its_inout_task() {
    for topology in [Topology::A2a3, Topology::A5] {
        let orch: OrchFn = Arc::new(move |rt| {
            let [x, scratch, copy] = rt.args().tensors() else {
                return Err(rt.report_fatal(1));
            };
            let (x, scratch, copy) = (*x, *scratch, *copy);
            let slow = submit_burn(rt, scratch, &[])?;
            submit_after(
                rt,
                BUMP,
                &mut [
                    arg(x, TensorArgType::InOut),
                    arg(copy, TensorArgType::OutputExisting),
                ],
                &[],
                &[ExplicitDep::on(slow)],
            )?;
            rt.write_element(&x, 0, f32_word(999.0))
        });
        let mut tensors = vec![
            vector(&ramp(), ArgDirection::InOut),
            vector(&[0.0; N], ArgDirection::InOut),
            vector(&[0.0; N], ArgDirection::Out),
        ];
        run(topology, orch, &mut tensors);
        assert_eq!(
            tensors[2].to_f32()[0],
            0.0,
            "{topology:?}: the INOUT task saw the write"
        );
        assert_eq!(tensors[0].to_f32()[0], 999.0, "{topology:?}");
        assert_eq!(tensors[0].to_f32()[1], 2.0, "{topology:?}: x[1] bumped");
    }
}
