//! The depth-two pipeline: `ChipWorker::submit` accepts a run without waiting for it, the host
//! builds the next run into the other slot while the device runs this one, and `wait` gives
//! each run's result and tensors back, in submission order.
//!
//! Slot isolation is shown with a gate: the in-flight run's kernel spins on a flag in
//! persistent device memory before it reads its input, and the flag is raised only after the
//! next run has been bound and staged (with a different input pattern). So the next bind runs
//! while the first run is provably on the device, and the first run's output shows whether
//! anything it reads was touched.
//!
//! Expected values are the arithmetic written here (y = x + s), never a run's.

use simpler_aicore::kernels::args::{scalar_f32, tensors};
use simpler_aicore::{kernels, KernelCtx, KernelFailure, KernelFn};
use simpler_aicpu::{Rt, RtError, RunError, SchedError};
use simpler_core::handshake::ERR_KERNEL_CODE;
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, DataType, TensorArgType};
use simpler_host::{
    CallableHandle, ChipArg, ChipWorker, DeviceTensor, HostTensor, RunOptions, Runtime, WorkerError,
};
use simpler_sim::{DeviceConfig, Topology};
use std::time::Duration;

/// Elements of x and y.
const N: usize = 1024;
/// Kernel ids of the table below.
const GATED_ADD: u64 = 0;
const ADD: u64 = 1;
const FAIL: u64 = 2;
/// The code the failing kernel fails with.
const FAIL_CODE: u32 = 77;

/// y = x + s once the flag (tensor 0, one u32 word in device memory) is nonzero. Spins (with a
/// yield) until then: a kernel that takes as long as the test wants.
fn gated_add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [flag, _, _] = tensors::<3>(ctx.args)?;
    let mut word = [0u8; 4];
    loop {
        ctx.gm.read(flag.data_addr(), &mut word)?;
        if u32::from_le_bytes(word) != 0 {
            break;
        }
        std::thread::yield_now();
    }
    add(ctx)
}

/// y = x + s (tensors `[flag, x, y]`, the flag unread).
fn add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [_, x, y] = tensors::<3>(ctx.args)?;
    let s = scalar_f32(ctx.args, 0)?;
    let mut v = vec![0f32; N];
    simpler_aicore::tile::load(ctx.gm, x, &mut v)?;
    for e in &mut v {
        *e += s;
    }
    simpler_aicore::tile::store(ctx.gm, y, &v)
}

fn fail(_: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    Err(KernelFailure::Code(FAIL_CODE))
}

/// One task: kernel `scalars[1]` over `[flag, x, y]` with scalar `scalars[0]` (s, f32 bits).
fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [flag, x, y] = match rt.args().tensors() {
        [f, x, y] => [*f, *x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let (s, kernel) = match rt.args().scalars() {
        [s, k] => (*s, *k as u32),
        _ => return Err(RtError::Fatal(3)),
    };
    let mut args = [
        TaskArg {
            tensor: flag,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: x,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ];
    rt.submit_aiv(kernel, &mut args, &[s])?;
    Ok(())
}

/// A worker with the callable registered and a one-word flag in persistent device memory
/// (raised: 1, or lowered: 0).
fn worker(raised: bool) -> (ChipWorker, CallableHandle, u64) {
    worker_with(raised, DeviceConfig::new(Topology::A2a3))
}

fn worker_with(raised: bool, config: DeviceConfig) -> (ChipWorker, CallableHandle, u64) {
    let mut w = ChipWorker::init(config).expect("device");
    let table: Vec<KernelFn> = vec![gated_add, add, fail, kernels::empty];
    let h = w.register_callable(
        std::sync::Arc::new(orchestrate),
        table,
        vec![ArgDirection::In, ArgDirection::In, ArgDirection::Out],
    );
    let flag = w.malloc(4).expect("flag");
    w.copy_to_device(flag, &(raised as u32).to_le_bytes())
        .expect("flag set");
    (w, h, flag)
}

/// The entry of one run: the flag, x = pattern(k), y.
fn entry(flag: u64, k: u32) -> Vec<ChipArg> {
    let x: Vec<f32> = (0..N).map(|i| pattern(k, i)).collect();
    vec![
        ChipArg::Device(DeviceTensor::contiguous(
            flag,
            &[1],
            DataType::Uint32,
            ArgDirection::In,
        )),
        ChipArg::Host(HostTensor::f32(&x, &[N as u32], ArgDirection::In)),
        ChipArg::Host(HostTensor::f32(
            &vec![0.0; N],
            &[N as u32],
            ArgDirection::Out,
        )),
    ]
}

/// Run `k`'s input element `i`: distinct per run.
fn pattern(k: u32, i: usize) -> f32 {
    (k * 1000 + (i as u32 % 997)) as f32
}

/// The scalars of run `k`: s = k / 4 and the kernel.
fn scalars(k: u32, kernel: u64) -> [u64; 2] {
    [((k as f32) / 4.0).to_bits() as u64, kernel]
}

/// Checks run `k`'s output: y = x + s.
fn check(k: u32, args: &[ChipArg]) {
    let y = args[2].host().expect("host y").to_f32();
    let s = k as f32 / 4.0;
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, pattern(k, i) + s, "run {k}, element {i}");
    }
}

fn options(runtime: Runtime) -> RunOptions {
    RunOptions::on(runtime)
}

#[test]
fn ten_pipelined_runs_with_changing_entries_each_pass_their_golden() {
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let (mut w, h, flag) = worker(true);
        let mut in_flight = std::collections::VecDeque::new();
        for k in 0..10u32 {
            in_flight.push_back((
                k,
                w.submit(h, entry(flag, k), &scalars(k, ADD), options(runtime)),
            ));
            // Two in flight: the next submit binds while this one may run.
            if in_flight.len() == 2 {
                let (j, run) = in_flight.pop_front().unwrap();
                let done = w.wait(run).expect("own handle");
                done.result
                    .unwrap_or_else(|e| panic!("{runtime:?} run {j}: {e}"));
                check(j, &done.args);
            }
        }
        while let Some((j, run)) = in_flight.pop_front() {
            let done = w.wait(run).expect("own handle");
            done.result
                .unwrap_or_else(|e| panic!("{runtime:?} run {j}: {e}"));
            check(j, &done.args);
        }
        assert_eq!(w.runs_pending(), 0);
    }
}

#[test]
fn the_next_bind_does_not_disturb_the_run_in_flight() {
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let (mut w, h, flag) = worker(false);
        // Run 0 holds its core until the flag rises: it reads its input only then.
        let first = w.submit(h, entry(flag, 1), &scalars(1, GATED_ADD), options(runtime));
        // Bound and staged while run 0 is on the device (it cannot end before the flag).
        let second = w.submit(h, entry(flag, 2), &scalars(2, ADD), options(runtime));
        let first = match w
            .wait_timeout(first, Duration::from_millis(20))
            .expect("own")
        {
            Err(still_running) => still_running,
            Ok(_) => panic!("{runtime:?}: the gated run ended before its gate opened"),
        };
        w.copy_to_device(flag, &1u32.to_le_bytes()).expect("raise");
        let a = w.wait(first).expect("own handle");
        a.result
            .unwrap_or_else(|e| panic!("{runtime:?} gated run: {e}"));
        check(1, &a.args);
        let b = w.wait(second).expect("own handle");
        b.result
            .unwrap_or_else(|e| panic!("{runtime:?} second run: {e}"));
        check(2, &b.args);
    }
}

#[test]
fn results_come_back_in_submission_order_whatever_the_wait_order() {
    let (mut w, h, flag) = worker(true);
    let first = w.submit(h, entry(flag, 3), &scalars(3, ADD), options(Runtime::Hbg));
    let second = w.submit(h, entry(flag, 4), &scalars(4, ADD), options(Runtime::Hbg));
    assert_eq!((first.seq(), second.seq()), (0, 1));
    // Waiting for the second ends the first too; its result stays for its own wait.
    let b = w.wait(second).expect("own handle");
    b.result.expect("second");
    check(4, &b.args);
    assert_eq!(w.runs_pending(), 1);
    let a = w.wait(first).expect("own handle");
    a.result.expect("first");
    check(3, &a.args);
}

#[test]
fn a_failing_run_fails_alone_and_the_worker_goes_on() {
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let (mut w, h, flag) = worker(false);
        let good = w.submit(h, entry(flag, 5), &scalars(5, GATED_ADD), options(runtime));
        // A kernel failure, launched behind the good run.
        let failing = w.submit(h, entry(flag, 6), &scalars(6, FAIL), options(runtime));
        w.copy_to_device(flag, &1u32.to_le_bytes()).expect("raise");
        let a = w.wait(good).expect("own handle");
        a.result
            .unwrap_or_else(|e| panic!("{runtime:?} good run: {e}"));
        check(5, &a.args);
        let f = w.wait(failing).expect("own handle");
        match f.result {
            Err(WorkerError::Run(RunError::Scheduler(SchedError::KernelFailed {
                kernel,
                code,
                detail,
                ..
            }))) => {
                assert_eq!(
                    (kernel, code, detail),
                    (FAIL as u32, ERR_KERNEL_CODE, FAIL_CODE)
                );
            }
            other => panic!("{runtime:?}: expected the kernel's failure, got {other:?}"),
        }
        // Bad input: too few tensors for the signature, refused at its bind.
        let mut short = entry(flag, 7);
        short.pop();
        let bad = w.submit(h, short, &scalars(7, ADD), options(runtime));
        let next = w.submit(h, entry(flag, 8), &scalars(8, ADD), options(runtime));
        let e = w
            .wait(bad)
            .expect("own handle")
            .result
            .expect_err("refused");
        assert!(
            matches!(
                e,
                WorkerError::Signature {
                    expected: 3,
                    got: 2
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "callable takes 3 tensors, 2 given");
        let n = w.wait(next).expect("own handle");
        n.result
            .unwrap_or_else(|e| panic!("{runtime:?} run after the failures: {e}"));
        check(8, &n.args);
    }
}

#[test]
fn a_handle_of_another_worker_is_refused() {
    let (mut w, h, flag) = worker(true);
    let (mut other, _, _) = worker(true);
    let run = w.submit(h, entry(flag, 9), &scalars(9, ADD), options(Runtime::Hbg));
    let e = other.wait(run).expect_err("foreign");
    assert!(matches!(e, WorkerError::ForeignRun), "{e:?}");
    assert_eq!(e.to_string(), "the run handle belongs to another worker");
}

#[test]
fn a_run_the_watchdog_ends_fails_alone() {
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let mut config = DeviceConfig::new(Topology::A2a3);
        config.watchdog = Duration::from_millis(250);
        let (mut w, h, flag) = worker_with(false, config);
        // Run 0's kernel holds its core past the watchdog period: no pass or step makes
        // progress meanwhile, so the watchdog ends the run once the kernel returns.
        let stuck = w.submit(
            h,
            entry(flag, 10),
            &scalars(10, GATED_ADD),
            options(runtime),
        );
        let after = w.submit(h, entry(flag, 11), &scalars(11, ADD), options(runtime));
        // Not a measurement: the gate stays shut well past the watchdog period.
        std::thread::sleep(Duration::from_millis(1200));
        w.copy_to_device(flag, &1u32.to_le_bytes()).expect("raise");
        let e = w
            .wait(stuck)
            .expect("own handle")
            .result
            .expect_err("timed out");
        assert!(
            matches!(e, WorkerError::Run(RunError::Timeout)),
            "{runtime:?}: {e:?}"
        );
        let b = w.wait(after).expect("own handle");
        b.result
            .unwrap_or_else(|e| panic!("{runtime:?} run after the timeout: {e}"));
        check(11, &b.args);
    }
}
