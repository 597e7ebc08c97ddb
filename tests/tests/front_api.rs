//! The typed front of task submission (`simpler_host::task`): kernel handles from a table, the
//! task builder, outputs returned as values, typed scalars read back by the kernel, and the
//! caps a built task is held to.

use simpler_host::prelude::*;
use std::sync::Arc;

const N: u32 = 256;

/// `out = in * scale + bias`: scale an f32 scalar, bias an i32 scalar (so both packings are
/// read back by the kernel's typed accessors).
fn scale_bias(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [input, output] = kernel_args::tensors::<2>(ctx.args)?;
    let n = kernel_args::operand(input, 0)?;
    kernel_args::operand_of(output, 1, n)?;
    let scale = kernel_args::scalar_f32(ctx.args, 0)?;
    let bias = kernel_args::scalar_i32(ctx.args, 1)? as f32;
    let [x] = stage::carve(ctx.local, [n])?;
    stage::load_range(ctx.gm, input, 0, 0, x)?;
    x.iter_mut().for_each(|v| *v = *v * scale + bias);
    stage::store_range(ctx.gm, output, 1, 0, x)
}

/// `out = a + b`.
fn add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [a, b, out] = kernel_args::tensors::<3>(ctx.args)?;
    let n = kernel_args::operand(a, 0)?;
    kernel_args::operand_of(b, 1, n)?;
    kernel_args::operand_of(out, 2, n)?;
    let [x, y] = stage::carve(ctx.local, [n, n])?;
    stage::load_range(ctx.gm, a, 0, 0, x)?;
    stage::load_range(ctx.gm, b, 1, 0, y)?;
    x.iter_mut().zip(y.iter()).for_each(|(p, q)| *p += q);
    stage::store_range(ctx.gm, out, 2, 0, x)
}

fn info() -> TaskTensor {
    TaskTensor::create_info(&[N], DataType::Float32).expect("a valid shape")
}

/// y = (x * 2 - 3) + (x * 0.5 + 7), through three tasks whose intermediates the runtime
/// allocates and the builder hands back.
fn orchestration(
    rt: &mut Rt<'_, '_>,
    scale_bias: AivKernel,
    add: AivKernel,
) -> Result<(), RtError> {
    let [x, y] = *rt.args().tensors() else {
        return Err(rt.report_fatal(1));
    };
    rt.scope(ScopeMode::Auto, |rt| {
        let left = rt
            .task(scale_bias)
            .input(x)
            .output(info())
            .scalar(2.0f32)
            .scalar(-3i32);
        let left = left.submit()?;
        let right = rt
            .task(scale_bias)
            .input(x)
            .output(info())
            .scalar(0.5f32)
            .scalar(7i32);
        let right = right.submit()?;
        rt.task(add)
            .input(left.output(0))
            .input(right.output(0))
            .output_existing(y)
            .submit()?;
        Ok(())
    })
}

#[test]
fn a_graph_built_from_kernel_handles_and_the_builder_computes_its_golden() {
    let mut table = KernelTable::new();
    let (sb, plus) = (table.aiv(scale_bias), table.aiv(add));
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
    let callable = worker.register_callable(
        Arc::new(move |rt: &mut Rt<'_, '_>| orchestration(rt, sb, plus)),
        table.into_kernels(),
        vec![ArgDirection::In, ArgDirection::Out],
    );
    let x: Vec<f32> = (0..N).map(|i| i as f32 * 0.25 - 10.0).collect();
    let mut tensors = [
        HostTensor::f32(&x, &[N], ArgDirection::In),
        HostTensor::f32(&vec![0.0; N as usize], &[N], ArgDirection::Out),
    ];
    let report = worker
        .run(callable, &mut tensors, &[], RunOptions::default())
        .expect("the run succeeds");
    assert_eq!((report.outcome.tasks, report.outcome.edges), (3, 2));
    let want: Vec<f32> = x
        .iter()
        .map(|&v| (v * 2.0 - 3.0) + (v * 0.5 + 7.0))
        .collect();
    assert_eq!(tensors[1].to_f32(), want);
}

#[test]
fn the_scalar_packing_is_what_the_kernel_accessors_read() {
    assert_eq!(1.5f32.to_word(), u64::from(1.5f32.to_bits()));
    assert_eq!((-3i32).to_word(), u64::MAX - 2, "sign-extended");
    assert_eq!(u32::MAX.to_word(), 0xFFFF_FFFF, "zero-extended");
    assert_eq!((-1i64).to_word(), u64::MAX);
    assert_eq!((true.to_word(), false.to_word()), (1, 0));
}

#[test]
fn mix_parts_land_on_their_core_slots() {
    fn noop(_: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
        Ok(())
    }
    let mut table = KernelTable::new();
    let (v0, cube, v1) = (table.aiv(noop), table.aic(noop), table.aiv(noop));
    assert_eq!(
        (v0.id(), cube.id(), v1.id()),
        (0, 1, 2),
        "ids in the order added"
    );
    let k = Mix::new().aic(cube).aiv0(v0).aiv1(v1).kernels();
    assert_eq!((k.aic, k.aiv0, k.aiv1), (1, 0, 2));
    let k = Mix::new().aic(cube).aiv1(v1).kernels();
    assert_eq!(
        (k.aic, k.aiv0, k.aiv1),
        (1, simpler_host::task::NO_KERNEL, 2)
    );
    assert_eq!(table.into_kernels().len(), 3);
}

#[test]
fn a_built_task_past_a_cap_is_refused_with_the_plain_submits_error() {
    fn noop(_: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
        Ok(())
    }
    let mut table = KernelTable::new();
    let k = table.aiv(noop);
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
    let callable = worker.register_callable(
        Arc::new(move |rt: &mut Rt<'_, '_>| {
            let mut task = rt.task(k);
            for _ in 0..40 {
                task = task.output(info());
            }
            match task.submit() {
                Err(e) => {
                    assert_eq!(
                        e,
                        RtError::Submit(SubmitError::TooManyTensors {
                            count: 40,
                            limit: 32
                        })
                    );
                    assert_eq!(
                        ErrorChain(&e).to_string(),
                        "the submit was refused: task has 40 tensor arguments; a task carries at most 32"
                    );
                    Ok(())
                }
                Ok(_) => Err(rt.report_fatal(7)),
            }
        }),
        table.into_kernels(),
        vec![],
    );
    let report = worker
        .run(
            callable,
            &mut [] as &mut [ChipArg],
            &[],
            RunOptions::default(),
        )
        .expect("the orchestration saw the refusal");
    assert_eq!(report.outcome.tasks, 0);
}
