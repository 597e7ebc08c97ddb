//! Every error has a message: for each family of error messages, the typed error a real call
//! returns (or, where no cheap call reaches it, a representative value) and its `Display`
//! text; and the `source()` chain of a failed run, walked from the `WorkerError` down to the
//! root cause.
//!
//! The convention these check: each message is lower-case with no trailing period and says
//! what was wrong with which value and what the limit was; a wrapping variant says what failed
//! at its own level and returns the error it wraps from `source()`.

use simpler_aicore::gm::NoGm;
use simpler_aicore::{kernels, CoreTaskArgs, Gm, KernelCtx, KernelFailure};
use simpler_aicpu::graph_exec::GraphExecError;
use simpler_aicpu::{Rt, RtError, RunError, SchedError};
use simpler_core::buffer::DescriptorError;
use simpler_core::graph::{DefinitionError, FlatArray, TensorRole};
use simpler_core::handshake::{error_name, ERR_KERNEL_CODE, ERR_MEMORY, ERR_UNKNOWN_KERNEL};
use simpler_core::image::ImageError;
use simpler_core::mailbox::{ControlCopyRequest, CopyRequestError, LeaseError, PipelineSlotLease};
use simpler_core::orchestrator::{Blocked, GaveUp, SubmitError, TaskArg};
use simpler_core::ring::{HeapClaim, HeapRing};
use simpler_core::tensor_map::MapFull;
use simpler_core::{ArgDirection, DataType, TaskId, TaskTensor, TensorArgType};
use simpler_host::l3::L3Error;
use simpler_host::record::{GraphBoundary, RecordError, Uncacheable};
use simpler_host::RunOptions;
use simpler_host::{CallableHandle, ChipWorker, ErrorChain, HostTensor, OrchFn, WorkerError};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::assert_fails;
use simpler_tests::harness::input;
use std::error::Error;
use std::sync::Arc;

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

/// The message of `e` and of each of its causes, outermost first.
fn chain(e: &dyn Error) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push(c.to_string());
        cause = c.source();
    }
    out
}

/// Every message of the chain follows the style: lower-case start, no trailing period.
#[track_caller]
fn assert_style(e: &dyn Error) {
    for m in chain(e) {
        let first = m.chars().next().expect("a message is not empty");
        assert!(!first.is_uppercase(), "upper-case: {m:?}");
        assert!(!m.ends_with('.'), "trailing period: {m:?}");
    }
}

const SMALL: [u32; 2] = [16, 16];
const IN_OUT: [ArgDirection; 2] = [ArgDirection::In, ArgDirection::Out];

fn worker() -> ChipWorker {
    ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("the device starts")
}

fn output() -> TaskArg {
    TaskArg {
        tensor: TaskTensor::create_info(&SMALL, DataType::Float32).expect("a valid shape"),
        tag: TensorArgType::Output,
    }
}

fn entry2(rt: &mut Rt<'_, '_>) -> Result<(TaskTensor, TaskTensor), RtError> {
    match rt.args().tensors() {
        [a, f] => Ok((*a, *f)),
        _ => Err(rt.report_fatal(1)),
    }
}

fn in_out() -> Vec<HostTensor> {
    let n = SMALL.iter().product::<u32>() as usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    vec![
        HostTensor::f32(&a, &SMALL, ArgDirection::In),
        HostTensor::f32(&vec![0.0; n], &SMALL, ArgDirection::Out),
    ]
}

/// A callable whose orchestration submits `c = a + 1`, then `kernel(c)` (kernel id `kernel`
/// in a table of `[add_scalar, fail]`).
fn two_tasks(w: &mut ChipWorker, kernel: u32) -> CallableHandle {
    let orch: OrchFn = Arc::new(move |rt| {
        let (a, _) = entry2(rt)?;
        let mut t0 = [input(a), output()];
        rt.submit_aiv(0, &mut t0, &[1.0f32.to_bits() as u64])?;
        rt.submit_aiv(kernel, &mut [input(t0[1].tensor), output()], &[])?;
        Ok(())
    });
    w.register_callable(
        orch,
        vec![kernels::add_scalar, kernels::fail],
        IN_OUT.to_vec(),
    )
}

// ------------------------------------------------------------------------------------------------
// A failed run's chain: WorkerError -> RunError -> SchedError
// ------------------------------------------------------------------------------------------------

/// A kernel failure on the simulator, walked from the `WorkerError` through `source()` down to
/// the `SchedError`, whose message names the failure code.
#[test]
fn a_kernel_failure_walks_from_the_worker_error_to_the_named_code() {
    let mut w = worker();
    let h = two_tasks(&mut w, 1);
    let err = w
        .run(h, &mut in_out(), &[], RunOptions::default())
        .expect_err("the kernel fails");
    let mut sched = None;
    let mut cause: Option<&(dyn Error + 'static)> = Some(&err);
    let mut levels = 0;
    while let Some(e) = cause {
        if let Some(s) = e.downcast_ref::<SchedError>() {
            sched = Some(s);
        }
        levels += 1;
        cause = e.source();
    }
    let sched = sched.expect("the chain reaches the SchedError");
    let SchedError::KernelFailed {
        task,
        core,
        kernel,
        code,
        detail,
    } = *sched
    else {
        panic!("a kernel failure: {sched:?}");
    };
    assert_eq!(
        (task, kernel, code, detail),
        (TaskId::new(0, 1), 1, ERR_KERNEL_CODE, kernels::FAIL_CODE)
    );
    assert_eq!(error_name(code), Some("kernel-specific failure"));
    assert_eq!(levels, 3, "WorkerError, RunError, SchedError");
    assert_eq!(
        chain(&err),
        [
            "run failed".to_string(),
            "a scheduler stopped the run".to_string(),
            format!(
                "kernel 1 on core {core} failed on task 1 of ring 0: kernel-specific failure \
                 (detail {}: the kernel's own code)",
                kernels::FAIL_CODE
            ),
        ]
    );
    assert_eq!(ErrorChain(&err).to_string(), chain(&err).join(": "));
    assert_style(&err);

    // An id past the kernel table: the code's name, and the id as its detail.
    let h = two_tasks(&mut w, 7);
    let r = w.run(h, &mut in_out(), &[], RunOptions::default());
    assert_fails!(
        &r,
        WorkerError::Run(RunError::Scheduler(SchedError::KernelFailed {
            code: ERR_UNKNOWN_KERNEL,
            detail: 7,
            ..
        }))
    );
    let err = r.unwrap_err();
    let root = chain(&err).pop().unwrap();
    assert!(
        root.ends_with(": unknown kernel id (detail 7: the kernel id the payload named)"),
        "{root}"
    );
}

/// Every failure code has a name; an unknown one prints as a number.
#[test]
fn the_failure_codes_have_names() {
    let at = |code, detail| SchedError::KernelFailed {
        task: TaskId::new(2, 9),
        core: 5,
        kernel: 3,
        code,
        detail,
    };
    assert_eq!(
        at(ERR_MEMORY, 0x1000).to_string(),
        "kernel 3 on core 5 failed on task 9 of ring 2: memory access outside GM \
         (detail 0x1000: low 32 bits of the address)"
    );
    assert_eq!(
        at(99, 1).to_string(),
        "kernel 3 on core 5 failed on task 9 of ring 2: unknown error code 99 (detail 1)"
    );
    for code in 1..=5 {
        assert!(error_name(code).is_some(), "code {code}");
    }
    assert_eq!(error_name(0), None);
}

// ------------------------------------------------------------------------------------------------
// The orchestration's errors: RtError, SubmitError
// ------------------------------------------------------------------------------------------------

#[test]
fn a_submit_over_a_cap_says_the_count_and_the_cap() {
    let mut w = worker();
    let orch: OrchFn = Arc::new(|rt| {
        let (a, _) = entry2(rt)?;
        rt.submit_aiv(0, &mut vec![input(a); 40], &[])?;
        Ok(())
    });
    let h = w.register_callable(orch, vec![kernels::empty], IN_OUT.to_vec());
    let r = w.run(h, &mut in_out(), &[], RunOptions::default());
    assert_fails!(
        &r,
        WorkerError::Run(RunError::Orchestration(RtError::Submit(
            SubmitError::TooManyTensors {
                count: 40,
                limit: 32
            }
        )))
    );
    let err = r.unwrap_err();
    assert_eq!(
        chain(&err),
        [
            "run failed",
            "the orchestration failed",
            "the submit was refused",
            "task has 40 tensor arguments; a task carries at most 32",
        ]
    );
    assert_style(&err);

    let orch: OrchFn = Arc::new(|rt| {
        let (a, _) = entry2(rt)?;
        rt.submit_aiv(0, &mut [input(a)], &[0; 17])?;
        Ok(())
    });
    let h = w.register_callable(orch, vec![kernels::empty], IN_OUT.to_vec());
    let r = w.run(h, &mut in_out(), &[], RunOptions::default());
    assert_fails!(
        &r,
        WorkerError::Run(RunError::Orchestration(RtError::TooManyScalars {
            count: 17,
            limit: 16
        }))
    );
    let err = r.unwrap_err();
    assert_eq!(
        chain(&err).pop().unwrap(),
        "task has 17 scalars; a task carries at most 16"
    );
}

#[test]
fn an_element_past_the_tensor_says_the_index_and_the_size() {
    let mut w = worker();
    let orch: OrchFn = Arc::new(|rt| {
        let (a, _) = entry2(rt)?;
        rt.read_element(&a, 300)?;
        Ok(())
    });
    let h = w.register_callable(orch, vec![], IN_OUT.to_vec());
    let r = w.run(h, &mut in_out(), &[], RunOptions::default());
    assert_fails!(
        &r,
        WorkerError::Run(RunError::Orchestration(RtError::Index {
            index: 300,
            numel: 256
        }))
    );
    let err = r.unwrap_err();
    assert_eq!(
        chain(&err).pop().unwrap(),
        "element 300 is past the end of a tensor of 256 elements"
    );
}

#[test]
fn deadlocks_name_the_ring_and_the_task_holding_it() {
    let held = SubmitError::FlowControlDeadlock {
        ring: 1,
        head: Some(TaskId::new(1, 0)),
    };
    assert_eq!(
        held.to_string(),
        "ring 1's task window cannot drain: its oldest task (task 0 of ring 1) is held by an \
         open scope"
    );
    let gave_up = SubmitError::HeapRingDeadlock {
        ring: 2,
        head: None,
    };
    assert_eq!(
        gave_up.to_string(),
        "ring 2's heap is full and the waiter gave up"
    );
    assert_eq!(GaveUp.to_string(), "the waiter gave up");
    assert_eq!(
        Blocked::Heap {
            ring: 3,
            bytes: 2048
        }
        .to_string(),
        "ring 3's heap cannot hold 2048 more bytes yet"
    );
    assert_eq!(
        Blocked::Producer {
            task: TaskId::new(0, 4)
        }
        .to_string(),
        "task 4 of ring 0 has not completed"
    );
    assert_eq!(
        Blocked::Consumers {
            task: TaskId::new(1, 2)
        }
        .to_string(),
        "task 2 of ring 1 has consumers that have not completed"
    );
    assert_eq!(TaskId::INVALID.to_string(), "no task");
}

// ------------------------------------------------------------------------------------------------
// Kernels, device memory, Graph expansion
// ------------------------------------------------------------------------------------------------

#[test]
fn kernel_failures_and_gm_faults_say_what_was_refused() {
    let args = CoreTaskArgs::default();
    let mut local = [0f32; 16];
    let mut ctx = KernelCtx {
        gm: &NoGm,
        args: &args,
        local: &mut local,
        ops: &simpler_aicore::Portable,
        block_idx: 0,
        block_num: 1,
        sub_block: 0,
    };
    let e = kernels::add(&mut ctx).expect_err("add takes three tensors");
    assert_eq!(e, KernelFailure::BadArguments { index: 0 });
    assert_eq!(
        e.to_string(),
        "the kernel refused its arguments at tensor 0 (the tensor count, when too few)"
    );

    let fault = NoGm.read(0x2000, &mut [0; 8]).expect_err("no memory");
    let e = KernelFailure::from(fault);
    assert_eq!(
        chain(&e),
        [
            "a tensor names memory outside GM",
            "access of 8 bytes at 0x2000 is outside device memory",
        ]
    );
    assert_style(&e);
}

#[test]
fn graph_expansion_errors_say_what_was_wrong() {
    assert_eq!(
        GraphExecError::Definition { what: "fanout" }.to_string(),
        "the Definition image is out of bounds or contradicts its header (fanout)"
    );
    let e = SchedError::Graph {
        task: TaskId::new(1, 3),
        error: GraphExecError::Capacity,
    };
    assert_eq!(
        chain(&e),
        [
            "the Graph of outer task 3 of ring 1 could not be expanded",
            "more Graphs are ready at once than the 4 one scheduler thread expands",
        ]
    );
}

// ------------------------------------------------------------------------------------------------
// Rings, images, the TensorMap
// ------------------------------------------------------------------------------------------------

#[test]
fn ring_image_and_map_errors_say_the_size_and_the_limit() {
    let mut heap = HeapRing::new(4096);
    let e = heap.claim(8192).expect_err("larger than the heap");
    assert_eq!(e, HeapClaim::TooLarge);
    assert_eq!(e.to_string(), "the claim is larger than the whole heap");

    let short = ImageError::Short {
        needed: 120,
        got: 100,
    };
    assert_eq!(
        short.to_string(),
        "buffer of 100 bytes is too short: the image needs at least 120"
    );
    let e = RunError::Image(short);
    assert_eq!(
        chain(&e),
        [
            "the host-built image did not fit or did not parse",
            "buffer of 100 bytes is too short: the image needs at least 120",
        ]
    );

    let full = MapFull { needed: 9, free: 2 };
    assert_eq!(
        full.to_string(),
        "the TensorMap needs 9 free entries; 2 are free after freeing every retired task's"
    );
}

// ------------------------------------------------------------------------------------------------
// The L3 mailbox: leases and copy requests
// ------------------------------------------------------------------------------------------------

#[test]
fn leases_and_copy_requests_say_which_field_is_wrong() {
    let lease = PipelineSlotLease {
        slot_id: 5,
        reserved: 0,
        generation: 1,
    };
    let e = lease.validate(4).expect_err("slot 5 of 4");
    assert_eq!(e, LeaseError::Slot { slot: 5, frames: 4 });
    assert_eq!(
        e.to_string(),
        "lease names pipeline slot 5; the child has 4 task frames"
    );

    let e = ControlCopyRequest::read(&[0; 10]).expect_err("10 bytes");
    assert_eq!(e, CopyRequestError::Truncated { len: 10 });
    assert_eq!(
        e.to_string(),
        "copy request region is 10 bytes; a request takes 184"
    );

    // A zeroed request: the destination's magic is the first thing refused.
    let e = ControlCopyRequest::read(&[0; 184]).expect_err("zero magic");
    assert!(
        matches!(
            e,
            CopyRequestError::Dst(DescriptorError::Magic { value: 0 })
        ),
        "{e:?}"
    );
    let l3 = L3Error::CopyRequest(e);
    assert_eq!(
        chain(&l3),
        [
            "copy request refused",
            "copy request's destination descriptor is invalid",
            "descriptor magic 0x0000 is not 0x5342",
        ]
    );
    assert_style(&l3);
}

// ------------------------------------------------------------------------------------------------
// Graph Definitions and recordings
// ------------------------------------------------------------------------------------------------

#[test]
fn definition_and_recording_errors_name_their_tensor_and_array() {
    let e = DefinitionError::Rank {
        tensor: TensorRole::Node { node: 2, arg: 1 },
        ndims: 7,
    };
    assert_eq!(e.to_string(), "node 2's tensor 1: rank 7 is outside 1..=5");
    let e = DefinitionError::Range {
        node: 3,
        array: FlatArray::Fanins,
        offset: 10,
        count: 4,
        len: 12,
    };
    assert_eq!(
        e.to_string(),
        "node 3: fanins[10..+4] exceeds its 12 entries"
    );

    let e = GraphBoundary::default().cacheable().expect_err("no tensor");
    assert_eq!(e, Uncacheable::TensorCount(0));
    let e = RecordError::Uncacheable(e);
    assert_eq!(
        chain(&e),
        [
            "the boundary cannot be recorded",
            "the boundary has 0 tensors; a Graph boundary has 1 to 128",
        ]
    );
    assert_style(&e);
}
