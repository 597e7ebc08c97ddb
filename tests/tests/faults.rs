//! Fault paths through a `ChipWorker`: every bad run ends with its specific typed error, and
//! the same worker then runs `vector_example` correctly.
//!
//! Cases:
//! 1. a task naming a kernel id past the callable's table;
//! 2. per-task caps: 33 tensors, 17 scalars (32 and 16 run);
//! 3. entry tensors that do not match the callable's signature, or whose data does not match
//!    their shape;
//! 4. a kernel that reports failure, in the middle of a chain;
//! 5. a ring much smaller than the graph: back-pressure that resolves (a long chain through an
//!    8-task window and a 256 KiB heap), and graphs that cannot drain (a scope larger than the
//!    window, a full window or heap whose head an open scope holds);
//! 6. an orchestration that never finishes, ended by the watchdog.
//!
//! Inside a run the device opens the entry scope (depth 1, ring 0); each `rt.scope` nests one
//! deeper: depth 2 uses ring 1, depth 3 ring 2, depths 4 and beyond share ring 3.

use simpler_core::handshake::{ERR_KERNEL_CODE, ERR_UNKNOWN_KERNEL};
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::{SubmitError, TaskArg};
use simpler_core::ring::RingConfig;
use simpler_core::scope::ScopeMode;
use simpler_core::{ArgDirection, DataType, TaskId, TaskTensor, TensorArgType};
use simpler_host::scenes;
use simpler_host::{CallableHandle, ChipWorker, HostTensor, WorkerError};
use simpler_host::{ChipArg, RunOptions};
use simpler_sim::aicore::{kernels, KernelFn};
use simpler_sim::aicpu::{Rt, RtError, SchedError};
use simpler_sim::{DeviceConfig, OrchFn, RunError, Topology};
use simpler_tests::assert_fails;
use simpler_tests::harness::input;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

/// The small tensors most cases use: 256 f32 elements (1 KiB).
const SMALL: [u32; 2] = [16, 16];
/// 16,384 f32 elements (64 KiB): four fill the tiny device's heap.
const LARGE: [u32; 2] = [128, 128];

/// The tiny device's window and heap.
const TINY_WINDOW: u32 = 8;
const TINY_HEAP: u64 = 256 << 10;

fn a2a3() -> DeviceConfig {
    DeviceConfig::new(Topology::A2a3)
}

/// An a2a3 device whose rings hold 8 tasks (7 live), 256 KiB of outputs and 16 edges each:
/// still enough for `vector_example` (one 64 KiB output on ring 0, three on ring 1).
fn tiny_ring() -> DeviceConfig {
    let mut config = a2a3();
    config.ring = RingConfig {
        window: TINY_WINDOW,
        heap_bytes: TINY_HEAP,
        edges: 16,
    };
    config
}

fn worker(config: DeviceConfig) -> ChipWorker {
    ChipWorker::init(config).expect("the device starts")
}

fn output(shape: &[u32]) -> TaskArg {
    TaskArg {
        tensor: TaskTensor::create_info(shape, DataType::Float32).expect("a valid shape"),
        tag: TensorArgType::Output,
    }
}

fn existing(tensor: TaskTensor) -> TaskArg {
    TaskArg {
        tensor,
        tag: TensorArgType::OutputExisting,
    }
}

fn f32_scalar(v: f32) -> u64 {
    v.to_bits() as u64
}

/// The entry tensors `[a, f]` of an `[In, Out]` callable.
fn entry2(rt: &mut Rt<'_, '_>) -> Result<[TaskTensor; 2], RtError> {
    match rt.args().tensors() {
        [a, f] => Ok([*a, *f]),
        _ => Err(rt.report_fatal(1)),
    }
}

const IN_OUT: [ArgDirection; 2] = [ArgDirection::In, ArgDirection::Out];

/// `[a, f]`: a = 0, 1, 2, ... and a zeroed output, both of `shape`.
fn in_out(shape: &[u32]) -> Vec<HostTensor> {
    let n = shape.iter().product::<u32>() as usize;
    let a: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    vec![
        HostTensor::f32(&a, shape, ArgDirection::In),
        HostTensor::f32(&vec![0.0; n], shape, ArgDirection::Out),
    ]
}

fn register(
    worker: &mut ChipWorker,
    orch: OrchFn,
    kernels: &[KernelFn],
    signature: &[ArgDirection],
) -> CallableHandle {
    worker.register_callable(orch, kernels.to_vec(), signature.to_vec())
}

/// Task ids an orchestration records for the test to compare with an error's fields.
#[derive(Clone, Default)]
struct Ids(Arc<Mutex<Vec<TaskId>>>);

impl Ids {
    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
    fn push(&self, id: TaskId) {
        self.0.lock().unwrap().push(id);
    }
    fn get(&self) -> Vec<TaskId> {
        self.0.lock().unwrap().clone()
    }

    /// An orchestration that clears the record, then runs `body` with it (`body` pushes the
    /// ids it wants the test to see).
    fn recording(
        &self,
        body: impl Fn(&mut Rt<'_, '_>, &Ids) -> Result<(), RtError> + Send + Sync + 'static,
    ) -> OrchFn {
        let seen = self.clone();
        Arc::new(move |rt| {
            seen.clear();
            body(rt, &seen)
        })
    }
}

/// Submits `count` tasks of the `empty` kernel (index 0), each with a fresh `shape` output,
/// recording their ids in `seen`.
fn fill_scope(rt: &mut Rt<'_, '_>, seen: &Ids, count: u32, shape: &[u32]) -> Result<(), RtError> {
    for _ in 0..count {
        seen.push(rt.submit_aiv(0, &mut [output(shape)], &[])?);
    }
    Ok(())
}

/// Runs `vector_example` on `worker` and checks its golden and graph: the worker survived.
#[track_caller]
fn assert_vector_example_runs(worker: &mut ChipWorker) {
    let scene = scenes::find("vector_example").expect("the vector scene");
    let prepared = scene.prepare("default").expect("its default case");
    let handle = worker.register(prepared.callable.clone());
    let mut tensors = prepared.tensors.clone();
    let report = worker
        .run(
            handle,
            &mut tensors,
            &prepared.scalars,
            RunOptions::default(),
        )
        .unwrap_or_else(|e| panic!("vector_example after a fault: {e}"));
    assert_eq!(report.outcome.result, Ok(()));
    let check = (prepared.check)(&tensors);
    assert!(
        check.pass,
        "vector_example after a fault: max diff {}",
        check.max_diff
    );
    assert_eq!(
        (Some(report.outcome.tasks), Some(report.outcome.edges)),
        (prepared.tasks, prepared.edges)
    );
}

// ------------------------------------------------------------------------------------------------
// 1. Unknown kernel id
// ------------------------------------------------------------------------------------------------

#[test]
fn a_kernel_id_past_the_table_is_err_unknown_kernel() {
    let mut w = worker(a2a3());
    let ids = Ids::default();
    let orch = ids.recording(move |rt, seen| {
        let [a, f] = entry2(rt)?;
        let mut args = [input(a), existing(f)];
        seen.push(rt.submit_aiv(7, &mut args, &[f32_scalar(1.0)])?);
        Ok(())
    });
    // A three-entry table: ids 0..=2.
    let table = [kernels::add, kernels::add_scalar, kernels::mul];
    let h = register(&mut w, orch, &table, &IN_OUT);
    for round in 0..2 {
        let mut tensors = in_out(&SMALL);
        let r = w.run(h, &mut tensors, &[], RunOptions::default());
        let [task] = ids.get()[..] else {
            panic!("round {round}: one task submitted, got {:?}", ids.get());
        };
        assert_fails!(
            r,
            WorkerError::Run(RunError::Scheduler(SchedError::KernelFailed {
                task: t,
                kernel: 7,
                code: ERR_UNKNOWN_KERNEL,
                detail: 7,
                ..
            })) if t == task
        );
        // A failed run copies nothing back.
        assert!(tensors[1].to_f32().iter().all(|&v| v == 0.0));
        assert_vector_example_runs(&mut w);
    }
}

// ------------------------------------------------------------------------------------------------
// 2. Per-task caps
// ------------------------------------------------------------------------------------------------

/// A callable that submits one good task (`f = a + 1`), then an `empty` task with `tensors`
/// copies of `a` and `scalars` scalars.
fn caps_callable(w: &mut ChipWorker, tensors: usize, scalars: usize) -> CallableHandle {
    let orch: OrchFn = Arc::new(move |rt| {
        let [a, f] = entry2(rt)?;
        rt.submit_aiv(0, &mut [input(a), existing(f)], &[f32_scalar(1.0)])?;
        let mut args = vec![input(a); tensors];
        let s: Vec<u64> = (0..scalars as u64).collect();
        rt.submit_aiv(1, &mut args, &s)?;
        Ok(())
    });
    register(w, orch, &[kernels::add_scalar, kernels::empty], &IN_OUT)
}

#[test]
fn a_task_with_33_tensors_is_too_many_tensors() {
    assert_eq!(CORE_MAX_TENSOR_ARGS, 32);
    let mut w = worker(a2a3());
    let over = caps_callable(&mut w, 33, 0);
    assert_fails!(
        w.run(over, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Orchestration(RtError::Submit(
            SubmitError::TooManyTensors {
                count: 33,
                limit: 32
            }
        )))
    );
    assert_vector_example_runs(&mut w);

    // The cap itself runs, and yields f = a + 1.
    let at = caps_callable(&mut w, 32, 0);
    let mut tensors = in_out(&SMALL);
    let report = w
        .run(at, &mut tensors, &[], RunOptions::default())
        .expect("32 tensors run");
    assert_eq!(report.outcome.tasks, 2);
    let want: Vec<f32> = tensors[0].to_f32().iter().map(|v| v + 1.0).collect();
    assert_eq!(tensors[1].to_f32(), want);

    // An allocation task is held to the same cap.
    let orch: OrchFn = Arc::new(|rt| {
        let mut outs = vec![output(&SMALL); 33];
        rt.alloc_tensors(&mut outs)?;
        Ok(())
    });
    let alloc = register(&mut w, orch, &[], &IN_OUT);
    assert_fails!(
        w.run(alloc, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Orchestration(RtError::Submit(
            SubmitError::TooManyTensors {
                count: 33,
                limit: 32
            }
        )))
    );
    assert_vector_example_runs(&mut w);
}

#[test]
fn a_task_with_17_scalars_is_too_many_scalars() {
    assert_eq!(CORE_MAX_SCALAR_ARGS, 16);
    let mut w = worker(a2a3());
    let over = caps_callable(&mut w, 1, 17);
    assert_fails!(
        w.run(over, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Orchestration(RtError::TooManyScalars {
            count: 17,
            limit: 16
        }))
    );
    assert_vector_example_runs(&mut w);

    let at = caps_callable(&mut w, 1, 16);
    let report = w
        .run(at, &mut in_out(&SMALL), &[], RunOptions::default())
        .expect("16 scalars run");
    assert_eq!(report.outcome.tasks, 2);
    assert_vector_example_runs(&mut w);
}

// ------------------------------------------------------------------------------------------------
// 3. Entry tensors vs the signature and their shapes
// ------------------------------------------------------------------------------------------------

#[test]
fn entry_tensors_must_match_the_signature_and_their_shapes() {
    let mut w = worker(a2a3());
    let scene = scenes::find("vector_example").expect("the vector scene");
    let prepared = scene.prepare("default").expect("its default case");
    let h = w.register(prepared.callable.clone());
    assert_eq!(prepared.callable.signature().len(), 3);

    // Too few, too many, none.
    let mut two = prepared.tensors[..2].to_vec();
    assert_fails!(
        w.run(h, &mut two, &[], RunOptions::default()),
        WorkerError::Signature {
            expected: 3,
            got: 2
        }
    );
    let mut four = prepared.tensors.clone();
    four.push(prepared.tensors[0].clone());
    assert_fails!(
        w.run(h, &mut four, &[], RunOptions::default()),
        WorkerError::Signature {
            expected: 3,
            got: 4
        }
    );
    assert_fails!(
        w.run(h, &mut [] as &mut [ChipArg], &[], RunOptions::default()),
        WorkerError::Signature {
            expected: 3,
            got: 0
        }
    );
    assert_vector_example_runs(&mut w);

    // Tensor 1 one element short of its 128x128 f32 shape.
    let mut short = prepared.tensors.clone();
    short[1].data.truncate(65_532);
    assert_fails!(
        w.run(h, &mut short, &[], RunOptions::default()),
        WorkerError::TensorSize {
            index: 1,
            expected: 65_536,
            got: 65_532
        }
    );
    // Tensor 2 (the output) with a shape that needs more than its data.
    let mut wide = prepared.tensors.clone();
    wide[2].shapes = vec![128, 129];
    assert_fails!(
        w.run(h, &mut wide, &[], RunOptions::default()),
        WorkerError::TensorSize {
            index: 2,
            expected: 66_048,
            got: 65_536
        }
    );
    // Tensor 0 with one byte too many.
    let mut long = prepared.tensors.clone();
    long[0].data.push(0);
    assert_fails!(
        w.run(h, &mut long, &[], RunOptions::default()),
        WorkerError::TensorSize {
            index: 0,
            expected: 65_536,
            got: 65_537
        }
    );
    // A handle this worker never gave out (the 10th of another worker).
    let mut other = worker(a2a3());
    let foreign = (0..10)
        .map(|_| register(&mut other, Arc::new(|_| Ok(())), &[], &IN_OUT))
        .last()
        .expect("ten handles");
    drop(other);
    assert_fails!(
        w.run(foreign, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::UnknownCallable
    );
    assert_vector_example_runs(&mut w);

    // The same handle with the right tensors still runs.
    let mut tensors = prepared.tensors.clone();
    w.run(h, &mut tensors, &prepared.scalars, RunOptions::default())
        .expect("the right tensors run");
    assert!((prepared.check)(&tensors).pass);
}

// ------------------------------------------------------------------------------------------------
// 4. A kernel that reports failure
// ------------------------------------------------------------------------------------------------

#[test]
fn a_failing_kernel_ends_the_run_with_its_code() {
    let mut w = worker(a2a3());
    let ids = Ids::default();
    // c = a + 1 → d = fail(c) → f = d + 1: the run ends at the middle task, f is never written.
    let orch = ids.recording(move |rt, seen| {
        let [a, f] = entry2(rt)?;
        let mut t0 = [input(a), output(&SMALL)];
        seen.push(rt.submit_aiv(0, &mut t0, &[f32_scalar(1.0)])?);
        let mut t1 = [input(t0[1].tensor), output(&SMALL)];
        seen.push(rt.submit_aiv(1, &mut t1, &[])?);
        let mut t2 = [input(t1[1].tensor), existing(f)];
        seen.push(rt.submit_aiv(0, &mut t2, &[f32_scalar(1.0)])?);
        Ok(())
    });
    let h = register(&mut w, orch, &[kernels::add_scalar, kernels::fail], &IN_OUT);
    for round in 0..2 {
        let mut tensors = in_out(&SMALL);
        let r = w.run(h, &mut tensors, &[], RunOptions::default());
        let submitted = ids.get();
        // The orchestration may have been aborted before its last submit.
        assert!(submitted.len() >= 2, "round {round}: {submitted:?}");
        assert_fails!(
            r,
            WorkerError::Run(RunError::Scheduler(SchedError::KernelFailed {
                task,
                kernel: 1,
                code: ERR_KERNEL_CODE,
                detail: kernels::FAIL_CODE,
                ..
            })) if task == submitted[1]
        );
        assert!(tensors[1].to_f32().iter().all(|&v| v == 0.0));
        assert_vector_example_runs(&mut w);
    }
}

// ------------------------------------------------------------------------------------------------
// 5. Rings too small for the graph
// ------------------------------------------------------------------------------------------------

/// `f = a + len`, by a chain of `len` `add_scalar(+1)` tasks in scopes of `per_scope` (at least
/// 2) on ring 1. Inside a scope each task consumes the previous one's runtime output; the last
/// task of a scope writes `f`, which the next scope's first task reads, so no runtime tensor
/// outlives the scope that made it. Kernel table: `[add_scalar, fail]`; task `fail_at` (if
/// any) runs `fail`.
fn chain(len: u32, per_scope: u32, shape: &'static [u32], fail_at: Option<u32>) -> OrchFn {
    assert!(per_scope >= 2 && len >= per_scope);
    Arc::new(move |rt| {
        let [a, f] = entry2(rt)?;
        let mut done = 0;
        while done < len {
            let n = per_scope.min(len - done);
            let first = if done == 0 { a } else { f };
            rt.scope(ScopeMode::Auto, |rt| {
                let mut prev = first;
                for i in 0..n {
                    let last = i + 1 == n;
                    let mut args = [input(prev), if last { existing(f) } else { output(shape) }];
                    let kernel = u32::from(fail_at == Some(done + i));
                    rt.submit_aiv(kernel, &mut args, &[f32_scalar(1.0)])?;
                    prev = args[1].tensor;
                }
                Ok(())
            })?;
            done += n;
        }
        Ok(())
    })
}

const CHAIN_TABLE: [KernelFn; 2] = [kernels::add_scalar, kernels::fail];

#[track_caller]
fn run_chain(w: &mut ChipWorker, len: u32, per_scope: u32, shape: &'static [u32]) {
    let h = register(w, chain(len, per_scope, shape, None), &CHAIN_TABLE, &IN_OUT);
    let mut tensors = in_out(shape);
    let report = w
        .run(h, &mut tensors, &[], RunOptions::default())
        .unwrap_or_else(|e| panic!("chain of {len} in scopes of {per_scope}: {e}"));
    assert_eq!(report.outcome.result, Ok(()));
    assert_eq!(report.outcome.tasks, len as u64);
    assert_eq!(report.outcome.dispatched, len as u64);
    let want: Vec<f32> = tensors[0].to_f32().iter().map(|v| v + len as f32).collect();
    let got = tensors[1].to_f32();
    let bad = got.iter().zip(&want).position(|(g, w)| g != w);
    assert_eq!(
        bad,
        None,
        "chain of {len} in scopes of {per_scope}: element {bad:?}: {:?} != {:?}",
        bad.map(|i| got[i]),
        bad.map(|i| want[i])
    );
}

#[test]
fn a_tiny_ring_applies_back_pressure_and_the_chain_completes() {
    let mut w = worker(tiny_ring());
    // Window-bound: 1 KiB outputs, 120 tasks through an 8-slot window (15 wraps).
    run_chain(&mut w, 120, 5, &SMALL);
    // The largest scope the window admits: 7 tasks, so each scope waits until every task of
    // the one before has retired.
    run_chain(&mut w, 70, TINY_WINDOW - 1, &SMALL);
    // Heap-bound: 64 KiB outputs, three per scope, in a heap that holds four.
    run_chain(&mut w, 24, 4, &LARGE);
    assert_vector_example_runs(&mut w);
    // And the same chains again on the reused rings.
    run_chain(&mut w, 120, 5, &SMALL);
    run_chain(&mut w, 24, 4, &LARGE);
}

/// A kernel failure while the orchestrator waits on a full ring is reported as the kernel
/// failure (as when the orchestrator is not waiting, case 4), not as the ring error the
/// orchestrator's abandoned wait turns into.
#[test]
fn a_kernel_failure_under_back_pressure_is_reported_as_the_kernel_failure() {
    let mut w = worker(tiny_ring());
    // Task 12 of 200 fails while the orchestrator is far ahead, waiting for the 8-slot window.
    let h = register(
        &mut w,
        chain(200, 5, &SMALL, Some(12)),
        &CHAIN_TABLE,
        &IN_OUT,
    );
    assert_fails!(
        w.run(h, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Scheduler(SchedError::KernelFailed {
            kernel: 1,
            code: ERR_KERNEL_CODE,
            detail: kernels::FAIL_CODE,
            ..
        }))
    );
    assert_vector_example_runs(&mut w);
}

/// A callable that submits `count` `empty` tasks with 1 KiB outputs at scope depth
/// `depth` (2 = ring 1, ...), recording their ids.
fn scope_filler(w: &mut ChipWorker, depth: usize, count: u32, ids: &Ids) -> CallableHandle {
    fn nest(
        rt: &mut Rt<'_, '_>,
        depth: usize,
        body: &dyn Fn(&mut Rt) -> Result<(), RtError>,
    ) -> Result<(), RtError> {
        if depth <= 1 {
            body(rt)
        } else {
            rt.scope(ScopeMode::Auto, |rt| nest(rt, depth - 1, body))
        }
    }
    let orch =
        ids.recording(move |rt, seen| nest(rt, depth, &|rt| fill_scope(rt, seen, count, &SMALL)));
    register(w, orch, &[kernels::empty], &IN_OUT)
}

#[test]
fn a_scope_holding_more_tasks_than_the_window_is_a_scope_deadlock() {
    let mut w = worker(tiny_ring());
    let ids = Ids::default();
    // Ring 1 (depth 2): the 8th task of one scope can never be claimed.
    let h = scope_filler(&mut w, 2, TINY_WINDOW, &ids);
    assert_fails!(
        w.run(h, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Orchestration(RtError::Submit(
            SubmitError::ScopeDeadlock {
                ring: 1,
                tasks: 7,
                window: TINY_WINDOW
            }
        )))
    );
    assert_eq!(ids.get().len(), TINY_WINDOW as usize - 1);
    assert_vector_example_runs(&mut w);

    // The entry scope (ring 0) is held to the same rule.
    let h = scope_filler(&mut w, 1, 20, &ids);
    assert_fails!(
        w.run(h, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Orchestration(RtError::Submit(
            SubmitError::ScopeDeadlock {
                ring: 0,
                tasks: 7,
                window: TINY_WINDOW
            }
        )))
    );
    assert_vector_example_runs(&mut w);

    // One fewer runs.
    let h = scope_filler(&mut w, 2, TINY_WINDOW - 1, &ids);
    w.run(h, &mut in_out(&SMALL), &[], RunOptions::default())
        .expect("a scope of window - 1 tasks runs");
    run_chain(&mut w, 40, 5, &SMALL);
}

#[test]
fn a_full_ring_whose_head_an_outer_scope_holds_is_a_flow_control_deadlock() {
    let mut w = worker(tiny_ring());
    let ids = Ids::default();
    // Depths 4 and 5 share ring 3. The depth-4 scope holds 4 tasks and stays open while the
    // depth-5 scope fills the ring (7 live); the 8th claim waits for a head that cannot retire.
    let orch = ids.recording(move |rt, seen| {
        rt.scope(ScopeMode::Auto, |rt| {
            rt.scope(ScopeMode::Auto, |rt| {
                rt.scope(ScopeMode::Auto, |rt| {
                    fill_scope(rt, seen, 4, &SMALL)?;
                    rt.scope(ScopeMode::Auto, |rt| fill_scope(rt, seen, 4, &SMALL))
                })
            })
        })
    });
    let h = register(&mut w, orch, &[kernels::empty], &IN_OUT);
    for round in 0..2 {
        let r = w.run(h, &mut in_out(&SMALL), &[], RunOptions::default());
        let submitted = ids.get();
        assert_eq!(submitted.len(), 7, "round {round}");
        assert!(submitted.iter().all(|t| t.ring() == 3));
        assert_fails!(
            r,
            WorkerError::Run(RunError::Orchestration(RtError::Submit(
                SubmitError::FlowControlDeadlock {
                    ring: 3,
                    head: Some(head)
                }
            ))) if head == submitted[0] && head == TaskId::new(3, 0)
        );
        assert_vector_example_runs(&mut w);
    }
    run_chain(&mut w, 40, 5, &SMALL);
}

#[test]
fn a_full_heap_whose_head_the_open_scope_holds_is_a_heap_ring_deadlock() {
    let mut w = worker(tiny_ring());
    let ids = Ids::default();
    // Ring 1's 256 KiB heap holds four 64 KiB outputs of one scope; the fifth cannot fit.
    let orch = ids
        .recording(move |rt, seen| rt.scope(ScopeMode::Auto, |rt| fill_scope(rt, seen, 5, &LARGE)));
    let h = register(&mut w, orch, &[kernels::empty], &IN_OUT);
    let r = w.run(h, &mut in_out(&SMALL), &[], RunOptions::default());
    let submitted = ids.get();
    assert_eq!(submitted.len(), 4);
    assert_fails!(
        r,
        WorkerError::Run(RunError::Orchestration(RtError::Submit(
            SubmitError::HeapRingDeadlock {
                ring: 1,
                head: Some(head)
            }
        ))) if head == submitted[0]
    );
    assert_vector_example_runs(&mut w);
    run_chain(&mut w, 24, 4, &LARGE);
}

// ------------------------------------------------------------------------------------------------
// 6. An orchestration that never finishes
// ------------------------------------------------------------------------------------------------

#[test]
fn an_orchestration_that_never_finishes_is_ended_by_the_watchdog() {
    const WATCHDOG: Duration = Duration::from_millis(300);
    let mut config = a2a3();
    config.watchdog = WATCHDOG;
    let mut w = worker(config);
    let saw = Arc::new(Mutex::new(None));

    // Spins until the run is aborted, then returns Ok.
    let quiet: OrchFn = Arc::new(|rt| {
        while !rt.is_fatal() {
            std::hint::spin_loop();
        }
        Ok(())
    });
    // Runs one task, spins, then submits again: the submit reports the abort.
    let seen = saw.clone();
    let loud: OrchFn = Arc::new(move |rt| {
        let [a, f] = entry2(rt)?;
        rt.submit_aiv(0, &mut [input(a), existing(f)], &[f32_scalar(1.0)])?;
        while !rt.is_fatal() {
            std::hint::spin_loop();
        }
        let r = rt.submit_aiv(0, &mut [input(f), existing(f)], &[f32_scalar(1.0)]);
        *seen.lock().unwrap() = Some(r);
        r.map(|_| ())
    });
    let table: [KernelFn; 1] = [kernels::add_scalar];
    for orch in [quiet, loud] {
        let h = register(&mut w, orch, &table, &IN_OUT);
        let start = Instant::now();
        let r = w.run(h, &mut in_out(&SMALL), &[], RunOptions::default());
        let took = start.elapsed();
        assert_fails!(r, WorkerError::Run(RunError::Timeout));
        // The watchdog times each run from its start (it polls every 20 ms).
        assert!(took >= WATCHDOG, "timed out after {took:?}");
        assert!(took < Duration::from_secs(5), "timed out after {took:?}");
        assert_vector_example_runs(&mut w);
    }
    assert!(
        matches!(*saw.lock().unwrap(), Some(Err(RtError::Aborted(_)))),
        "the submit after the abort: {:?}",
        saw.lock().unwrap()
    );
}

/// A run that starts right after a timed-out run gets the whole watchdog period, timed from
/// its own start: here a run whose orchestration takes 60 ms before its first submit, against
/// a 300 ms watchdog.
#[test]
fn a_run_right_after_a_timeout_gets_the_whole_watchdog_period() {
    let mut config = a2a3();
    config.watchdog = Duration::from_millis(300);
    let mut w = worker(config);
    let spin: OrchFn = Arc::new(|rt| {
        while !rt.is_fatal() {
            std::hint::spin_loop();
        }
        Ok(())
    });
    let slow_start: OrchFn = Arc::new(|rt| {
        std::thread::sleep(Duration::from_millis(60));
        let [a, f] = entry2(rt)?;
        rt.submit_aiv(0, &mut [input(a), existing(f)], &[f32_scalar(1.0)])?;
        Ok(())
    });
    let table: [KernelFn; 1] = [kernels::add_scalar];
    let spin = register(&mut w, spin, &table, &IN_OUT);
    let slow_start = register(&mut w, slow_start, &table, &IN_OUT);
    assert_fails!(
        w.run(spin, &mut in_out(&SMALL), &[], RunOptions::default()),
        WorkerError::Run(RunError::Timeout)
    );
    w.run(slow_start, &mut in_out(&SMALL), &[], RunOptions::default())
        .expect("60 ms without progress is within a 300 ms watchdog");
}

#[test]
fn tensor_directions_must_match_the_signature() {
    use simpler_core::ArgDirection;
    use simpler_host::WorkerError;
    let mut worker =
        simpler_host::ChipWorker::init(simpler_sim::DeviceConfig::new(simpler_sim::Topology::A2a3))
            .unwrap();
    let scene = simpler_host::scenes::find("vector_example").unwrap();
    let prepared = scene.prepare("default").unwrap();
    let handle = worker.register(prepared.callable.clone());
    let mut tensors = prepared.tensors.clone();
    tensors[2].dir = ArgDirection::In;
    match worker.run(
        handle,
        &mut tensors,
        &prepared.scalars,
        RunOptions::default(),
    ) {
        Err(WorkerError::Direction {
            index: 2,
            expected: ArgDirection::Out,
            got: ArgDirection::In,
        }) => {}
        other => panic!("expected a direction error, got {other:?}"),
    }
    let mut tensors = prepared.tensors.clone();
    worker
        .run(
            handle,
            &mut tensors,
            &prepared.scalars,
            RunOptions::default(),
        )
        .unwrap();
    assert!((prepared.check)(&tensors).pass);
}

/// A backend that has stopped: every request fails.
struct Stopped;

impl simpler_host::DeviceTransport for Stopped {
    fn platform(&self) -> &'static str {
        "stopped"
    }
    fn alloc(&self, _: u64) -> Result<Option<u64>, simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
    fn free_all(&self) -> Result<(), simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
    fn malloc(&self, _: u64) -> Result<Option<u64>, simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
    fn free(&self, _: u64) -> Result<bool, simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
    fn copy_to_device(&self, _: u64, _: &[u8]) -> Result<bool, simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
    fn copy_from_device(&self, _: u64, _: &mut [u8]) -> Result<bool, simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
    fn run(
        &self,
        _: OrchFn,
        _: Arc<[simpler_aicore::KernelFn]>,
        _: Box<simpler_core::OrchArgs>,
        _: simpler_host::RunOptions,
    ) -> Result<simpler_sim::RunOutcome, simpler_host::TransportError> {
        Err(simpler_host::TransportError::Stopped)
    }
}

#[test]
fn a_stopped_device_is_a_transport_error() {
    let mut worker = simpler_host::ChipWorker::with_transport(Box::new(Stopped));
    assert_eq!(worker.platform(), "stopped");
    let prepared = simpler_host::scenes::find("vector_example")
        .unwrap()
        .prepare("default")
        .unwrap();
    let handle = worker.register(prepared.callable);
    let mut tensors = prepared.tensors;
    match worker.run(handle, &mut tensors, &[], RunOptions::default()) {
        Err(simpler_host::WorkerError::Transport(simpler_host::TransportError::Stopped)) => {}
        other => panic!("expected a transport error, got {other:?}"),
    }
}
