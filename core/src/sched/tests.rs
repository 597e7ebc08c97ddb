//! The slot machine's transitions one step at a time, on one thread (so Miri checks them):
//! readiness, fan-in counting, lifetimes and in-order reclamation, driven through the
//! orchestrator's submit and the schedulers' calls. A file of its own so `sched.rs` holds only
//! the shared state and its transitions.

use super::*;
use crate::arg::TensorArgType;
use crate::cores::ActiveMask;
use crate::deps::ExplicitDep;
use crate::layout::Line;
use crate::orchestrator::{
    NoWait, Orchestrator, OrchestratorConfig, OrchestratorLayout, Task, TaskArg,
};
use crate::ring::RingConfig;
use crate::scope::ScopeMode;
use crate::{AddressSpace, BufferHandle, DataType, TaskTensor};
use std::vec;
use std::vec::Vec;

fn with_state(f: impl FnOnce(&mut Orchestrator<'_>, &SchedState<'_>)) {
    with_window(8, f);
}

/// [`with_state`] with rings of `window` slots (a power of two) and twice as many edges.
fn with_window(window: u32, f: impl FnOnce(&mut Orchestrator<'_>, &SchedState<'_>)) {
    let config = OrchestratorConfig {
        sched: SchedConfig::uniform(RingConfig {
            window,
            heap_bytes: 1 << 14,
            edges: 2 * window,
        }),
        map_buckets: 8,
        map_entries: 16,
        heap_base: [0x10_0000, 0x20_0000, 0x30_0000, 0x40_0000],
    };
    let layout = OrchestratorLayout::new(config).unwrap();
    let mut shared_mem = vec![Line([0; 64]); layout.sched().size() / 64];
    let mut orch_mem = vec![Line([0; 64]); layout.size().div_ceil(64)];
    let shared =
        SchedState::init(bytemuck::cast_slice_mut(&mut shared_mem), layout.sched()).unwrap();
    let mut orch =
        Orchestrator::init(bytemuck::cast_slice_mut(&mut orch_mem), &layout, &shared).unwrap();
    f(&mut orch, &shared);
}

fn output() -> TaskArg {
    TaskArg {
        tensor: TaskTensor::create_info(&[16], DataType::Float32).unwrap(),
        tag: TensorArgType::Output,
    }
}

fn input(tensor: TaskTensor) -> TaskArg {
    TaskArg {
        tensor,
        tag: TensorArgType::Input,
    }
}

fn external() -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr: 0x9000,
            size: 64,
        },
        0,
        &[16],
        &[1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap()
}

fn submit(
    orch: &mut Orchestrator<'_>,
    mask: ActiveMask,
    args: &mut [TaskArg],
    deps: &[ExplicitDep],
) -> TaskId {
    orch.submit(
        Task {
            mask,
            block_num: 1,
            args,
            deps,
            predicate: None,
        },
        &mut NoWait,
    )
    .unwrap()
}

fn status(shared: &SchedState<'_>, t: TaskId) -> SlotStatus {
    shared.slot(shared.slot_ref(t).unwrap()).status()
}

/// Runs a READY task to completion as a scheduler would.
fn run(shared: &SchedState<'_>, t: TaskId) {
    assert_eq!(status(shared, t), SlotStatus::Ready, "{t:?}");
    assert!(shared.mark_running(t));
    assert_eq!(status(shared, t), SlotStatus::Running);
    assert!(shared.complete_subtask(t));
}

fn pop_all(shared: &SchedState<'_>, shape: ResourceShape) -> Vec<TaskId> {
    core::iter::from_fn(|| shared.pop_ready(shape)).collect()
}

#[test]
fn a_consumer_becomes_ready_only_with_its_last_producer() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut p1 = [output()];
        let a = submit(orch, ActiveMask::AIV0, &mut p1, &[]);
        let mut p2 = [output()];
        let b = submit(orch, ActiveMask::AIV0, &mut p2, &[]);
        let mut c_args = [input(p1[0].tensor), input(p2[0].tensor)];
        let c = submit(orch, ActiveMask::AIC, &mut c_args, &[]);
        assert_eq!(status(shared, c), SlotStatus::Pending);
        let slot = shared.slot(shared.slot_ref(c).unwrap());
        // Two linked edges, then the publish's share: two releases short of the target.
        assert_eq!(slot.fanin_refcount.load(Ordering::Relaxed), FANIN_READY - 2);
        assert_eq!(slot.fanin_count.load(Ordering::Relaxed), 3);
        assert_eq!(pop_all(shared, ResourceShape::Aiv), [a, b]);
        run(shared, a);
        assert_eq!(
            status(shared, c),
            SlotStatus::Pending,
            "one producer is still running"
        );
        assert_eq!(shared.pop_ready(ResourceShape::Aic), None);
        run(shared, b);
        assert_eq!(status(shared, c), SlotStatus::Ready);
        assert_eq!(slot.fanin_refcount.load(Ordering::Relaxed), FANIN_READY);
        assert_eq!(
            pop_all(shared, ResourceShape::Aic),
            [c],
            "ready exactly once"
        );
    });
}

#[test]
fn a_producer_completed_before_the_submit_counts_at_once() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut p = [output()];
        let a = submit(orch, ActiveMask::AIV0, &mut p, &[]);
        assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(a));
        run(shared, a);
        assert_eq!(
            status(shared, a),
            SlotStatus::Completed,
            "its scope still holds it"
        );
        let mut c_args = [input(p[0].tensor)];
        let c = submit(orch, ActiveMask::AIV0, &mut c_args, &[]);
        assert_eq!(status(shared, c), SlotStatus::Ready, "ready at publish");
        let flags: Vec<_> = shared.fanin(c).collect();
        assert_eq!(flags, [(a, DepFlags::WAIT | DepFlags::RETAIN)]);
    });
}

#[test]
fn a_dummy_task_completes_from_ready_and_releases_its_consumers() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let gate = submit(orch, ActiveMask::empty(), &mut [], &[]);
        let deps = [ExplicitDep::wait(gate)];
        let c = submit(orch, ActiveMask::AIV0, &mut [], &deps);
        assert_eq!(status(shared, c), SlotStatus::Pending);
        assert_eq!(pop_all(shared, ResourceShape::Dummy), [gate]);
        shared.complete(gate);
        assert_eq!(status(shared, gate), SlotStatus::Completed);
        assert_eq!(status(shared, c), SlotStatus::Ready);
    });
}

#[test]
fn an_allocation_task_is_complete_at_once_and_retires_with_its_scope() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut out = [output()];
        let a = orch.alloc_tensors(&mut out, &mut NoWait).unwrap();
        assert_eq!(status(shared, a), SlotStatus::Completed);
        let mut c_args = [input(out[0].tensor)];
        let c = submit(orch, ActiveMask::AIV0, &mut c_args, &[]);
        assert_eq!(
            status(shared, c),
            SlotStatus::Ready,
            "its only producer is complete"
        );
        orch.scope_end().unwrap();
        // The consumer's creator edge pins the allocation task past its scope.
        assert_eq!(status(shared, a), SlotStatus::Completed);
        assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(c));
        run(shared, c);
        assert!(shared.drained(), "both retired, in order");
        assert_eq!(shared.flow(a.ring() as usize).last_alive(), 2);
    });
}

#[test]
fn a_retained_producer_outlives_its_scope_until_its_consumer_completes() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut p = [output()];
        let a = submit(orch, ActiveMask::AIV0, &mut p, &[]);
        let mut c_args = [input(p[0].tensor)];
        let c = submit(orch, ActiveMask::AIV0, &mut c_args, &[]);
        orch.scope_end().unwrap();
        assert_eq!(pop_all(shared, ResourceShape::Aiv), [a]);
        run(shared, a);
        assert_eq!(status(shared, a), SlotStatus::Completed, "pinned by c");
        assert_eq!(shared.flow(0).last_alive(), 0);
        assert_eq!(pop_all(shared, ResourceShape::Aiv), [c]);
        run(shared, c);
        assert_eq!(status(shared, a), SlotStatus::Free);
        assert_eq!(status(shared, c), SlotStatus::Free);
        assert_eq!(shared.flow(0).last_alive(), 2);
    });
}

#[test]
fn the_watermark_passes_tasks_in_order_only() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let first = submit(orch, ActiveMask::AIV0, &mut [input(external())], &[]);
        let second = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        orch.scope_end().unwrap();
        assert_eq!(pop_all(shared, ResourceShape::Aiv), [first, second]);
        run(shared, second);
        assert_eq!(
            status(shared, second),
            SlotStatus::Consumed,
            "behind a live task"
        );
        assert_eq!(shared.flow(0).last_alive(), 0);
        run(shared, first);
        assert_eq!(shared.flow(0).last_alive(), 2);
        assert_eq!(status(shared, second), SlotStatus::Free);
    });
}

#[test]
fn a_completion_of_a_task_no_longer_in_its_slot_is_ignored() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let a = submit(orch, ActiveMask::empty(), &mut [], &[]);
        orch.scope_end().unwrap();
        assert_eq!(pop_all(shared, ResourceShape::Dummy), [a]);
        shared.complete(a);
        assert_eq!(shared.flow(0).last_alive(), 1);
        // The slot keeps the retired id; a late completion or scope release changes nothing.
        shared.complete(TaskId::new(0, a.local() + 8));
        shared.release_scope(a);
        assert_eq!(status(shared, a), SlotStatus::Free);
        assert!(!shared.mark_running(a));
        assert!(!shared.complete_subtask(TaskId::new(0, a.local() + 8)));
    });
}

#[test]
fn a_configuration_out_of_range_is_refused_by_field() {
    let ring = |window, edges, heap_bytes| {
        SchedStateLayout::new(SchedConfig::uniform(RingConfig {
            window,
            edges,
            heap_bytes,
        }))
        .map(|_| ())
    };
    let refused = |field: &'static str, value: u64| Err(LayoutError::Config { field, value });
    assert_eq!(ring(4, 4, 1024), Ok(()), "the smallest valid ring");
    assert_eq!(ring(4, 4, u32::MAX as u64), Ok(()));
    for w in [2, 3, 6, 1 << 30] {
        assert_eq!(ring(w, 4, 1024), refused("ring.window", w as u64));
    }
    for e in [2, 6, 1 << 30] {
        assert_eq!(ring(4, e, 1024), refused("ring.edges", e as u64));
    }
    for h in [1023, u32::MAX as u64 + 1] {
        assert_eq!(ring(4, 4, h), refused("ring.heap_bytes", h));
    }
}

#[test]
fn drained_and_reset_return_to_the_formatted_state() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let a = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        assert!(!shared.drained(), "a live task");
        assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(a));
        run(shared, a);
        assert!(!shared.drained(), "its scope still holds it");
        orch.scope_end().unwrap();
        assert!(shared.drained());
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let b = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        shared.reset();
        for ring in 0..MAX_RINGS {
            let flow = shared.flow(ring);
            assert_eq!(flow.current_task_index.load(Ordering::Relaxed), 0);
            assert_eq!(flow.last_alive(), 0);
            assert_eq!(flow.advance_requests.load(Ordering::Relaxed), 0);
        }
        for t in [a, b] {
            let slot = shared.slot(shared.slot_ref(t).unwrap());
            assert_eq!(slot.status(), SlotStatus::Free);
            assert_eq!(slot.task_id(), TaskId(u64::MAX));
        }
        assert_eq!(
            shared.pop_ready(ResourceShape::Aiv),
            None,
            "b's queue entry is gone"
        );
    });
}

#[test]
fn reset_prefix_returns_what_a_build_used_to_the_formatted_state() {
    with_state(|orch, shared| {
        // Built with no scheduler running, as the host builds an image.
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let a = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        let b = submit(orch, ActiveMask::empty(), &mut [], &[ExplicitDep::wait(a)]);
        let usage = shared.usage(orch.edges_used()).unwrap();
        shared.reset_prefix(&usage);
        for t in [a, b] {
            let slot = shared.slot(shared.slot_ref(t).unwrap());
            assert_eq!(slot.status(), SlotStatus::Free);
            assert_eq!(slot.task_id(), TaskId(u64::MAX));
        }
        assert_eq!(shared.flow(0).current_task_index.load(Ordering::Relaxed), 0);
        assert_eq!(
            shared.pop_ready(ResourceShape::Aiv),
            None,
            "a's queue entry is gone"
        );
        assert!(shared.drained());
    });
}

#[test]
fn fanin_lists_every_producer_of_a_task_whose_edges_start_inside_the_pool() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        // Each consumer's edge list starts where the previous one's ended (cells 0, 3, 6,
        // 9 of a 16-cell pool), so a wrong cell mask reads another task's edges.
        let mut outs: Vec<TaskArg> = Vec::new();
        let mut producers = Vec::new();
        for _ in 0..3 {
            let mut o = [output()];
            producers.push(submit(orch, ActiveMask::AIV0, &mut o, &[]));
            outs.push(o[0]);
        }
        for _ in 0..4 {
            let mut args: Vec<TaskArg> = outs.iter().map(|o| input(o.tensor)).collect();
            let c = submit(orch, ActiveMask::AIV0, &mut args, &[]);
            let mut got: Vec<_> = shared.fanin(c).collect();
            got.sort_by_key(|e| e.0);
            let want: Vec<_> = producers
                .iter()
                .map(|&p| (p, DepFlags::WAIT | DepFlags::RETAIN))
                .collect();
            assert_eq!(got, want, "fanin of {c:?}");
        }
    });
}

#[test]
fn a_completion_releases_exactly_the_producers_it_retained() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let waited = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        let pinned = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        // Two edges of another task first: the consumer's list starts at cell 2, where a
        // wrong cell mask reads another task's edges.
        let filler = submit(
            orch,
            ActiveMask::AIV0,
            &mut [],
            &[ExplicitDep::wait(waited), ExplicitDep::wait(pinned)],
        );
        let deps = [
            ExplicitDep::wait(waited),
            ExplicitDep {
                task: pinned,
                flags: DepFlags::RETAIN,
            },
        ];
        let c = submit(orch, ActiveMask::AIV0, &mut [], &deps);
        let refs = |t: TaskId| {
            shared
                .slot(shared.slot_ref(t).unwrap())
                .fanout_refcount
                .load(Ordering::Relaxed)
        };
        assert_eq!(pop_all(shared, ResourceShape::Aiv), [waited, pinned]);
        run(shared, waited);
        run(shared, pinned);
        let mut ready = pop_all(shared, ResourceShape::Aiv);
        ready.sort();
        assert_eq!(ready, [filler, c]);
        run(shared, filler);
        let (w0, p0) = (refs(waited), refs(pinned));
        run(shared, c);
        assert_eq!(refs(waited), w0, "a WAIT-only edge holds no reference");
        assert_eq!(refs(pinned), p0 + 1, "the RETAIN edge is released once");
        orch.scope_end().unwrap();
        assert!(shared.drained());
    });
}

#[test]
fn an_spmd_task_completes_with_its_last_subtask_only() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        // Three blocks on a MIX of AIC and AIV0: six subtasks.
        let t = orch
            .submit(
                Task {
                    mask: ActiveMask::AIC | ActiveMask::AIV0,
                    block_num: 3,
                    args: &mut [],
                    deps: &[],
                    predicate: None,
                },
                &mut NoWait,
            )
            .unwrap();
        let shape = ActiveMask::AIC.union(ActiveMask::AIV0).normalized().shape();
        assert_eq!(shared.pop_ready(shape), Some(t));
        assert!(shared.mark_running(t));
        for k in 1..6 {
            assert!(
                !shared.complete_subtask(t),
                "completed after {k} of 6 subtasks"
            );
            assert_eq!(status(shared, t), SlotStatus::Running);
        }
        assert!(shared.complete_subtask(t));
        assert_eq!(status(shared, t), SlotStatus::Completed);
        assert_eq!(
            shared.slot(shared.slot_ref(t).unwrap()).active_mask(),
            ActiveMask::AIC | ActiveMask::AIV0
        );
    });
}

#[test]
fn a_consumed_producer_behind_the_watermark_gets_no_edge() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let old = submit(orch, ActiveMask::AIV0, &mut [], &[]);
        let q = submit(orch, ActiveMask::empty(), &mut [], &[]);
        assert_eq!(pop_all(shared, ResourceShape::Dummy), [q]);
        shared.complete(q);
        orch.scope_end().unwrap();
        // Completed, released by its scope, retained by nothing: consumed, but not retired
        // while `old`, ahead of it on the ring, is live.
        assert_eq!(status(shared, q), SlotStatus::Consumed);
        assert_eq!(shared.flow(0).last_alive(), 0);
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let c = submit(orch, ActiveMask::AIV0, &mut [], &[ExplicitDep::wait(q)]);
        assert_eq!(shared.fanin(c).count(), 0, "no edge to a consumed task");
        let _ = old;
    });
}

#[test]
fn a_wait_added_to_a_retaining_edge_counts_its_producer_once() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut done_out = [output()];
        let done = submit(orch, ActiveMask::AIV0, &mut done_out, &[]);
        let mut live_out = [output()];
        let live = submit(orch, ActiveMask::AIV0, &mut live_out, &[]);
        assert_eq!(pop_all(shared, ResourceShape::Aiv), [done, live]);
        run(shared, done);
        // A RETAIN-only dependency first, then the creator edge adds WAIT to that edge.
        let pin = |t| ExplicitDep {
            task: t,
            flags: DepFlags::RETAIN,
        };
        let c1 = submit(
            orch,
            ActiveMask::AIV0,
            &mut [input(done_out[0].tensor)],
            &[pin(done)],
        );
        assert_eq!(
            status(shared, c1),
            SlotStatus::Ready,
            "its producer had completed"
        );
        let c2 = submit(
            orch,
            ActiveMask::AIV0,
            &mut [input(live_out[0].tensor)],
            &[pin(live)],
        );
        assert_eq!(
            status(shared, c2),
            SlotStatus::Pending,
            "its producer is running"
        );
        run(shared, live);
        assert_eq!(status(shared, c2), SlotStatus::Ready);
    });
}

#[test]
fn a_ring_full_of_tasks_its_open_scope_holds_names_the_head() {
    with_state(|orch, shared| {
        assert_eq!(shared.head_pinned_by_scope(0, 0), None, "an empty ring");
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let tasks: Vec<TaskId> = (0..4)
            .map(|_| submit(orch, ActiveMask::AIV0, &mut [], &[]))
            .collect();
        let ring = tasks[0].ring() as usize;
        assert_eq!(shared.head_pinned_by_scope(ring, 0), Some(tasks[0]));
        // The head asked about is the one at the caller's watermark, in its own slot.
        assert_eq!(shared.head_pinned_by_scope(ring, 2), Some(tasks[2]));
        // A watermark a whole window later maps to the same slot, which holds another task.
        assert_eq!(shared.head_pinned_by_scope(ring, 2 + 8), None);
        assert_eq!(
            shared.head_pinned_by_scope(ring + 1, 0),
            None,
            "another ring"
        );
        orch.scope_end().unwrap();
        // Released by its scope, the head retires once it runs: not a deadlock.
        assert_eq!(shared.head_pinned_by_scope(ring, 0), None);
        for t in pop_all(shared, ResourceShape::Aiv) {
            run(shared, t);
        }
        assert!(shared.drained());
        assert_eq!(shared.head_pinned_by_scope(ring, 4), None, "drained");
    });
}

#[test]
fn a_wrapped_submit_epoch_forgets_the_edges_marked_before_it() {
    with_state(|orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut p = [output()];
        let producer = submit(orch, ActiveMask::AIV0, &mut p, &[]);
        let first = submit(orch, ActiveMask::AIV0, &mut [input(p[0].tensor)], &[]);
        assert_eq!(orch.edges_recorded(), 1);
        // `first` was the run's second submit: its edge mark on the producer carries
        // epoch 2. Wrap the epoch so the second submit after the wrap has epoch 2 again.
        orch.set_epoch(u32::MAX);
        submit(orch, ActiveMask::AIV0, &mut [], &[]);
        let second = submit(orch, ActiveMask::AIV0, &mut [input(p[0].tensor)], &[]);
        assert_eq!(orch.edges_recorded(), 2, "an edge of its own");
        assert_eq!(status(shared, first), SlotStatus::Pending);
        assert_eq!(
            status(shared, second),
            SlotStatus::Pending,
            "it waits for the producer"
        );
        assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(producer));
        run(shared, producer);
        assert_eq!(status(shared, second), SlotStatus::Ready);
    });
}

#[test]
fn slot_names_round_trip() {
    for raw in 0..8u32 {
        let s = SlotStatus::from_raw(raw);
        assert_eq!(s as u32, if raw <= 6 { raw } else { 0 });
    }
    let r = SlotRef::new(3, 12345);
    assert_eq!((r.ring(), r.index()), (3, 12345));
}

#[test]
fn a_completion_keeps_readied_tasks_while_their_shape_has_room_and_queues_the_rest() {
    with_window(64, |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut pa = [output()];
        let p = submit(orch, ActiveMask::AIC, &mut pa, &[]);
        // Consumers of p: one AIV more than a keeper has room for, two AIC, one MIX
        // (AIC + AIV0).
        let consumer = |orch: &mut Orchestrator<'_>, mask| {
            let mut args = [input(pa[0].tensor)];
            submit(orch, mask, &mut args, &[])
        };
        let vector: Vec<TaskId> = (0..=KEEP_PER_SHAPE)
            .map(|_| consumer(orch, ActiveMask::AIV0))
            .collect();
        let cube = [
            consumer(orch, ActiveMask::AIC),
            consumer(orch, ActiveMask::AIC),
        ];
        let mix = consumer(orch, ActiveMask::AIC | ActiveMask::AIV0);
        assert_eq!(shared.pop_ready(ResourceShape::Aic), Some(p));
        assert!(shared.mark_running(p));
        let mut kept = Kept::default();
        assert!(kept.is_empty());
        assert!(shared.complete_subtask_keeping(p, Some(&mut kept)));
        for &t in vector.iter().chain(&cube).chain([&mix]) {
            assert_eq!(status(shared, t), SlotStatus::Ready, "{t:?}");
        }
        assert!(kept.take_queued(), "one AIV consumer found no room");
        assert_eq!(kept.tasks().count(), KEEP_PER_SHAPE + 2);
        // Every AIV consumer but one is kept and the last queued; both AIC ones are kept.
        let mut aiv: Vec<TaskId> = core::iter::from_fn(|| kept.take(ResourceShape::Aiv)).collect();
        assert_eq!(aiv.len(), KEEP_PER_SHAPE);
        aiv.push(shared.pop_ready(ResourceShape::Aiv).unwrap());
        aiv.sort_by_key(|t| t.0);
        assert_eq!(aiv, vector, "each AIV consumer once, kept or queued");
        let mut aic = [kept.take(ResourceShape::Aic), kept.take(ResourceShape::Aic)];
        aic.sort_by_key(|t| t.map(|t| t.0));
        assert_eq!(aic, cube.map(Some));
        assert_eq!(kept.take(ResourceShape::Aic), None);
        assert_eq!(shared.pop_ready(ResourceShape::Aiv), None);
        assert_eq!(shared.pop_ready(ResourceShape::Aic), None);
        assert_eq!(shared.pop_ready(ResourceShape::Mix), Some(mix));
        assert_eq!(kept.take(ResourceShape::Mix), None, "MIX is never kept");
        assert!(kept.is_empty());
        assert!(!shared.queue_kept(&mut kept));
        // What a pass does not run, queue_kept queues: every task kept, once.
        for &t in &vector {
            run(shared, t);
        }
        let mut again = Kept::default();
        let mut qa = [output()];
        let q = submit(orch, ActiveMask::AIV0, &mut qa, &[]);
        let r: Vec<TaskId> = (0..2)
            .map(|_| {
                let mut ra = [input(qa[0].tensor)];
                submit(orch, ActiveMask::AIV0, &mut ra, &[])
            })
            .collect();
        assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(q));
        assert!(shared.mark_running(q));
        assert!(shared.complete_subtask_keeping(q, Some(&mut again)));
        assert!(!again.take_queued(), "both consumers fit");
        assert_eq!(
            shared.pop_ready(ResourceShape::Aiv),
            None,
            "the consumers are kept, not queued"
        );
        assert!(shared.queue_kept(&mut again));
        assert!(again.is_empty());
        assert!(again.take_queued());
        let mut queued: Vec<TaskId> =
            core::iter::from_fn(|| shared.pop_ready(ResourceShape::Aiv)).collect();
        queued.sort_by_key(|t| t.0);
        assert_eq!(queued, r);
        orch.scope_end().unwrap();
    });
}
