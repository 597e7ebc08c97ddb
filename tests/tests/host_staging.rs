//! Host tensors on kept staging: a run copies IN and INOUT tensors to GM that is the same every
//! run, and OUT and INOUT tensors back into the host tensor's own bytes. Checked here, on both
//! runtimes, against results computed in this file:
//!
//! - rounds with different inputs on the same buffers each get their own result;
//! - an OUT tensor starts every run zeroed (neither the last run's output, left in the kept
//!   staging, nor the host's bytes);
//! - an IN tensor is copied in every run and never back, even when a kernel writes its staging;
//! - a warm run asks for no tensor-sized host buffer (the calling thread's allocated bytes,
//!   counted by the counting allocator below);
//! - `HostTensor::reset_outputs_from` readies a round's tensors in place.

use simpler_aicore::kernels;
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, TensorArgType};
use simpler_host::{CallableHandle, ChipWorker, HostTensor, OrchFn, RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::alloc_count::{self as counter, Counting};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: Counting = Counting;

const RUNTIMES: [Runtime; 2] = [Runtime::Tmr, Runtime::Hbg];

fn worker() -> ChipWorker {
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.gm_bytes = 64 << 20;
    ChipWorker::init(config).expect("a device")
}

fn arg(tensor: simpler_core::TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

/// `o = a + c`, one AIV task: tensors `[a IN, c INOUT, o OUT]` (`c` goes back unchanged).
fn add_callable(worker: &mut ChipWorker) -> CallableHandle {
    let orch: OrchFn = Arc::new(|rt| {
        let [a, c, o] = match rt.args().tensors() {
            [a, c, o] => [*a, *c, *o],
            _ => return Err(rt.report_fatal(1)),
        };
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(c, TensorArgType::Input),
            arg(o, TensorArgType::OutputExisting),
        ];
        rt.submit_aiv(0, &mut args, &[])?;
        Ok(())
    });
    let dirs = vec![ArgDirection::In, ArgDirection::InOut, ArgDirection::Out];
    worker.register_callable(orch, vec![kernels::add], dirs)
}

/// The signature of [`add_callable`], submitting nothing.
fn idle_callable(worker: &mut ChipWorker) -> CallableHandle {
    let orch: OrchFn = Arc::new(|_rt| Ok(()));
    let dirs = vec![ArgDirection::In, ArgDirection::InOut, ArgDirection::Out];
    worker.register_callable(orch, vec![kernels::add], dirs)
}

/// `x += 1` in `x`'s own staging, then `y = x + x`: tensors `[x IN, y OUT]`, so `y = 2 (x + 1)`
/// when `x` was staged afresh.
fn scribble_callable(worker: &mut ChipWorker) -> CallableHandle {
    let orch: OrchFn = Arc::new(|rt| {
        let [x, y] = match rt.args().tensors() {
            [x, y] => [*x, *y],
            _ => return Err(rt.report_fatal(1)),
        };
        let one = u64::from(1.0f32.to_bits());
        let mut bump = [
            arg(x, TensorArgType::Input),
            arg(x, TensorArgType::OutputExisting),
        ];
        rt.submit_aiv(0, &mut bump, &[one])?;
        let mut double = [
            arg(x, TensorArgType::Input),
            arg(x, TensorArgType::Input),
            arg(y, TensorArgType::OutputExisting),
        ];
        rt.submit_aiv(1, &mut double, &[])?;
        Ok(())
    });
    let dirs = vec![ArgDirection::In, ArgDirection::Out];
    worker.register_callable(orch, vec![kernels::add_scalar, kernels::add], dirs)
}

fn values(n: usize, salt: f32) -> Vec<f32> {
    (0..n).map(|i| (i % 251) as f32 * 0.5 + salt).collect()
}

fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// `a IN, c INOUT, o OUT` of `n` f32 each (`o` holding `o_fill`).
fn add_tensors(n: usize, salt: f32, o_fill: f32) -> Vec<HostTensor> {
    let shape = [n as u32];
    vec![
        HostTensor::f32(&values(n, salt), &shape, ArgDirection::In),
        HostTensor::f32(&values(n, 0.25), &shape, ArgDirection::InOut),
        HostTensor::f32(&vec![o_fill; n], &shape, ArgDirection::Out),
    ]
}

fn run(worker: &mut ChipWorker, h: CallableHandle, t: &mut [HostTensor], runtime: Runtime) {
    worker
        .run(h, t, &[], RunOptions::on(runtime))
        .unwrap_or_else(|e| panic!("{runtime:?}: {e}"));
}

#[test]
fn rounds_on_the_same_buffers_each_get_their_own_result() {
    const N: usize = 4096;
    for runtime in RUNTIMES {
        let mut worker = worker();
        let h = add_callable(&mut worker);
        let mut tensors = add_tensors(N, 0.0, 0.0);
        for round in 0..4 {
            let a = values(N, round as f32 * 3.0);
            tensors[0]
                .data
                .copy_from_slice(&simpler_tests::fixtures::f32_bytes(&a));
            let c = tensors[1].to_f32();
            run(&mut worker, h, &mut tensors, runtime);
            assert_eq!(tensors[0].to_f32(), a, "{runtime:?} round {round}: a");
            assert_eq!(tensors[1].to_f32(), c, "{runtime:?} round {round}: c");
            assert_eq!(
                tensors[2].to_f32(),
                add(&a, &c),
                "{runtime:?} round {round}"
            );
        }
    }
}

#[test]
fn an_out_tensor_starts_every_run_zeroed() {
    const N: usize = 4096;
    for runtime in RUNTIMES {
        let mut worker = worker();
        let (adds, idle) = (add_callable(&mut worker), idle_callable(&mut worker));
        let mut tensors = add_tensors(N, 1.0, 0.0);
        run(&mut worker, adds, &mut tensors, runtime);
        let sum = add(&tensors[0].to_f32(), &tensors[1].to_f32());
        assert_eq!(tensors[2].to_f32(), sum, "{runtime:?}");
        assert!(sum.iter().all(|&v| v != 0.0));
        // Same entry, so the same staging; nothing writes `o` this time, and the host's bytes
        // for it are not sent.
        let mut tensors = add_tensors(N, 1.0, 7.0);
        run(&mut worker, idle, &mut tensors, runtime);
        assert_eq!(tensors[2].to_f32(), vec![0.0; N], "{runtime:?}");
    }
}

#[test]
fn an_in_tensor_is_staged_every_run_and_never_copied_back() {
    const N: usize = 4096;
    for runtime in RUNTIMES {
        let mut worker = worker();
        let h = scribble_callable(&mut worker);
        let x = values(N, 2.0);
        let want: Vec<f32> = x.iter().map(|v| 2.0 * (v + 1.0)).collect();
        let mut tensors = vec![
            HostTensor::f32(&x, &[N as u32], ArgDirection::In),
            HostTensor::f32(&vec![0.0; N], &[N as u32], ArgDirection::Out),
        ];
        for round in 0..3 {
            run(&mut worker, h, &mut tensors, runtime);
            assert_eq!(tensors[0].to_f32(), x, "{runtime:?} round {round}: x");
            assert_eq!(tensors[1].to_f32(), want, "{runtime:?} round {round}: y");
        }
    }
}

#[test]
fn a_warm_run_asks_for_no_tensor_sized_host_buffer() {
    // Three 4 MiB tensors; a run that clones one for the device, or reads one back into a
    // fresh buffer, asks for at least 4 MiB.
    const N: usize = 1 << 20;
    for runtime in RUNTIMES {
        let mut worker = worker();
        let h = add_callable(&mut worker);
        let mut tensors = add_tensors(N, 0.5, 0.0);
        let want = add(&tensors[0].to_f32(), &tensors[1].to_f32());
        run(&mut worker, h, &mut tensors, runtime);
        for round in 0..3 {
            let before = counter::thread_bytes();
            run(&mut worker, h, &mut tensors, runtime);
            let asked = counter::thread_bytes() - before;
            assert!(
                asked < (N * 4 / 16) as u64,
                "{runtime:?} warm round {round} asked for {asked} bytes"
            );
            assert_eq!(tensors[2].to_f32(), want, "{runtime:?} round {round}");
        }
    }
}

#[test]
fn reset_outputs_from_restores_what_a_run_wrote_in_place() {
    let p = simpler_host::scenes::find("bgemm")
        .unwrap()
        .prepare("Bgemm64")
        .unwrap();
    let mut worker = worker();
    let h = simpler_tests::fixtures::register_prepared(&mut worker, &p);
    let mut tensors = p.tensors.clone();
    let buffers: Vec<*const u8> = tensors.iter().map(|t| t.data.as_ptr()).collect();
    for round in 0..3 {
        for (t, fresh) in tensors.iter_mut().zip(&p.tensors) {
            t.reset_outputs_from(fresh);
        }
        assert_eq!(tensors, p.tensors, "round {round}: reset to the template");
        worker
            .run(h, &mut tensors, &p.scalars, RunOptions::default())
            .unwrap();
        assert!((p.check)(&tensors).pass, "round {round}");
    }
    // The buffers are the ones cloned before the first round.
    let now: Vec<*const u8> = tensors.iter().map(|t| t.data.as_ptr()).collect();
    assert_eq!(now, buffers);
    // Without the reset, bgemm's INOUT accumulator starts from the last round's result.
    worker
        .run(h, &mut tensors, &p.scalars, RunOptions::default())
        .unwrap();
    assert!(!(p.check)(&tensors).pass, "an accumulator run twice");
}
