//! The typed front of task submission (`simpler_host::task`): kernel handles from a table, the
//! task builder, outputs returned as values, typed scalars read back by the kernel, and the
//! caps a built task is held to.

use simpler_host::prelude::*;

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

fn info() -> TensorInfo {
    TensorInfo::new(&[N], DataType::Float32).expect("a valid shape")
}

/// y = (x * 2 - 3) + (x * 0.5 + 7), through three tasks whose intermediates the runtime
/// allocates and the builder hands back, inside an inner scope; the sum lands in an
/// accumulator the outer scope allocated, which a last task copies out with a scalar from the
/// entry (`k * acc`).
fn callable() -> Callable {
    let mut table = KernelTable::new();
    let (sb, plus) = (table.aiv(scale_bias), table.aiv(add));
    let signature = Signature::new([ArgDirection::In, ArgDirection::Out]).scalars::<1>();
    Callable::new(table, signature, move |s, entry| {
        let Entry {
            tensors: [x, y], ..
        } = entry;
        let k: f32 = entry.scalar(0);
        let [acc] = s.alloc([info()])?;
        s.scope(ScopeMode::Auto, |inner| {
            let left = inner
                .task(sb)
                .input(x)
                .output(info())
                .scalar(2.0f32)
                .scalar(-3i32)
                .submit()?;
            let right = inner
                .task(sb)
                .input(x)
                .output(info())
                .scalar(0.5f32)
                .scalar(7i32)
                .submit()?;
            inner
                .task(plus)
                .input(left.output(0))
                .input(right.output(0))
                .output_existing(acc)
                .submit()?;
            Ok(())
        })?;
        s.task(sb)
            .input(acc)
            .output_existing(y)
            .scalar(k)
            .scalar(0i32)
            .submit()?;
        Ok(())
    })
}

fn golden(x: &[f32], k: f32) -> Vec<f32> {
    x.iter()
        .map(|&v| ((v * 2.0 - 3.0) + (v * 0.5 + 7.0)) * k)
        .collect()
}

fn entry(x: &[f32]) -> [HostTensor; 2] {
    [
        HostTensor::f32(x, &[N], ArgDirection::In),
        HostTensor::f32(&vec![0.0; N as usize], &[N], ArgDirection::Out),
    ]
}

#[test]
fn a_typed_orchestration_computes_its_golden_on_both_runtimes() {
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
    let handle = worker.register(callable());
    let x: Vec<f32> = (0..N).map(|i| i as f32 * 0.25 - 10.0).collect();
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let mut tensors = entry(&x);
        let report = worker
            .run(
                handle,
                &mut tensors,
                &[3.0f32.to_word()],
                RunOptions {
                    runtime,
                    ..RunOptions::default()
                },
            )
            .expect("the run succeeds");
        // The allocation, three tasks in the scope, the copy-out; left and right feed the
        // sum, the allocation feeds the sum (its OUTPUT_EXISTING follows the creator) and the
        // sum feeds the copy-out.
        assert_eq!(report.outcome.tasks, 5, "{runtime:?}");
        assert_eq!(tensors[1].to_f32(), golden(&x, 3.0), "{runtime:?}");
    }
}

#[test]
fn a_run_that_does_not_fit_the_signature_is_refused_at_its_start() {
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
    let handle = worker.register(callable());
    let x = vec![1.0f32; N as usize];
    let k = [1.0f32.to_word()];
    let run = |worker: &mut ChipWorker, tensors: &mut [HostTensor], scalars: &[u64]| {
        let e = worker
            .run(handle, tensors, scalars, RunOptions::default())
            .expect_err("the run does not fit the signature");
        let message = ErrorChain(&e).to_string();
        (e, message)
    };
    let (e, message) = run(&mut worker, &mut entry(&x)[..1], &k);
    assert!(
        matches!(
            e,
            WorkerError::Signature {
                expected: 2,
                got: 1
            }
        ),
        "{e:?}"
    );
    assert_eq!(message, "callable takes 2 tensors, 1 given");
    let (e, message) = run(&mut worker, &mut entry(&x), &[]);
    assert!(
        matches!(
            e,
            WorkerError::Scalars {
                expected: 1,
                got: 0
            }
        ),
        "{e:?}"
    );
    assert_eq!(message, "callable takes 1 scalars, 0 given");
    let (e, _) = run(&mut worker, &mut entry(&x), &[1, 2]);
    assert!(
        matches!(
            e,
            WorkerError::Scalars {
                expected: 1,
                got: 2
            }
        ),
        "{e:?}"
    );
    let mut swapped = entry(&x);
    swapped[1].dir = ArgDirection::In;
    let (e, message) = run(&mut worker, &mut swapped, &k);
    assert!(
        matches!(
            e,
            WorkerError::Direction {
                index: 1,
                expected: ArgDirection::Out,
                got: ArgDirection::In
            }
        ),
        "{e:?}"
    );
    assert_eq!(message, "tensor 1 is In, the callable takes it Out");
    // Each refusal left the worker and its tensors as they were: a fitting run still passes.
    let mut tensors = entry(&x);
    worker
        .run(handle, &mut tensors, &k, RunOptions::default())
        .expect("a fitting run succeeds");
    assert_eq!(tensors[1].to_f32(), golden(&x, 1.0));
}

#[test]
fn entry_scalars_read_back_as_the_type_they_were_packed_from() {
    for v in [0.0f32, -1.5, f32::MAX, f32::MIN_POSITIVE] {
        assert_eq!(f32::from_word(v.to_word()).to_bits(), v.to_bits());
    }
    for v in [0i32, -3, i32::MIN, i32::MAX] {
        assert_eq!(i32::from_word(v.to_word()), v);
    }
    assert_eq!(u32::from_word(u32::MAX.to_word()), u32::MAX);
    assert_eq!(i64::from_word((-7i64).to_word()), -7);
    assert_eq!(u64::from_word(u64::MAX), u64::MAX);
    assert!(bool::from_word(true.to_word()) && !bool::from_word(false.to_word()));
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
    let callable = Callable::new(table, Signature::new([]), move |s, _| {
        let mut task = s.task(k);
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
            Ok(_) => Err(s.fail(7)),
        }
    });
    let handle = worker.register(callable);
    let report = worker
        .run(
            handle,
            &mut [] as &mut [ChipArg],
            &[],
            RunOptions::default(),
        )
        .expect("the orchestration saw the refusal");
    assert_eq!(report.outcome.tasks, 0);
}
