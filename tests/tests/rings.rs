//! Ring behaviour through the submit path: in-order reclamation across many wraps, a full ring
//! that never overwrites a live slot, and deadlocks reported as errors.

use simpler_core::orchestrator::{
    Blocked, GaveUp, NoWait, OrchestratorConfig, SubmitError, TaskArg, Waiter,
};
use simpler_core::ring::RingConfig;
use simpler_core::sched::SchedConfig;
use simpler_core::scope::ScopeMode;
use simpler_core::slot::SlotStatus;
use simpler_core::{DataType, TaskId, TaskTensor, TensorArgType};
use simpler_tests::harness::{aiv_task, input, with_runtime, Drain};

const HEAP_BASE: u64 = 0x4000_0000;

fn config(window: u32, heap_bytes: u64) -> OrchestratorConfig {
    OrchestratorConfig {
        sched: SchedConfig::uniform(RingConfig {
            window,
            heap_bytes,
            edges: 64,
        }),
        map_buckets: 16,
        map_entries: 256,
        heap_base: [HEAP_BASE; 4],
    }
}

fn output(kib: u32) -> TaskArg {
    TaskArg {
        tensor: TaskTensor::create_info(&[kib * 256], DataType::Float32).unwrap(),
        tag: TensorArgType::Output,
    }
}

#[test]
fn ten_windows_wrap_with_in_order_reclamation_and_no_live_overlap() {
    // Window 16, heap 12 KiB; each task consumes the previous task's 1-3 KiB output and makes
    // a new one, in scopes of 5 tasks. 200 tasks = 12.5 windows; the heap wraps many times.
    with_runtime(config(16, 12 << 10), |orch, shared| {
        let mut drain = Drain::new(shared);
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut live: Vec<(TaskId, u64, u64)> = Vec::new(); // task, heap start, end
        let mut prev: Option<TaskTensor> = None;
        let total = 200u32;
        for i in 0..total {
            if i % 5 == 0 {
                orch.scope_begin(ScopeMode::Auto).unwrap();
            }
            let mut args = vec![output(1 + i % 3)];
            if let Some(p) = prev {
                args.push(input(p));
            }
            let id = orch.submit(aiv_task(&mut args), &mut drain).unwrap();
            let out = args[0].tensor;
            let (start, end) = (out.buffer().addr, out.buffer().addr + out.extent_bytes());
            assert!(start >= HEAP_BASE && end <= HEAP_BASE + (12 << 10));
            // Every task below the watermark has retired; no live output may overlap the new one.
            let alive = shared.flow(1).last_alive();
            live.retain(|&(t, _, _)| t.local() >= alive);
            for &(t, s, e) in &live {
                assert!(
                    end <= s || e <= start,
                    "task {i} output [{start:#x},{end:#x}) overlaps live {t:?} [{s:#x},{e:#x})"
                );
                let slot = shared.task_slot(t).expect("a live task keeps its slot");
                assert_ne!(slot.status(), SlotStatus::Free);
            }
            live.push((id, start, end));
            prev = Some(out);
            if i % 5 == 4 {
                orch.scope_end().unwrap();
            }
        }
        drain.run();
        orch.scope_end().unwrap();
        assert_eq!(orch.submitted(1), total);
        assert_eq!(
            shared.flow(1).last_alive(),
            total,
            "every task retired, in order"
        );
        assert!(
            drain.waits > 0,
            "the small rings made the orchestrator wait"
        );
        // Completion respected the chain.
        let order: Vec<u32> = drain.completed.iter().map(|t| t.local()).collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "a chain completes in order"
        );
    });
}

/// A waiter that refuses to wait, recording what blocked.
struct Refuse(Vec<Blocked>);
impl Waiter for Refuse {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        self.0.push(on);
        Err(GaveUp)
    }
}

#[test]
fn a_full_window_blocks_and_never_overwrites_a_live_slot() {
    with_runtime(config(8, 1 << 20), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut ids = Vec::new();
        for _ in 0..6 {
            ids.push(
                orch.submit(aiv_task(&mut [output(1)]), &mut NoWait)
                    .unwrap(),
            );
        }
        orch.scope_end().unwrap();
        orch.scope_begin(ScopeMode::Auto).unwrap();
        // Ring 1 holds 6 released but uncompleted tasks; one more fits (window - 1 = 7 live).
        ids.push(
            orch.submit(aiv_task(&mut [output(1)]), &mut NoWait)
                .unwrap(),
        );
        let mut refuse = Refuse(Vec::new());
        // No scope pins the head now, so the claim waits; the waiter gives up.
        let r = orch.submit(aiv_task(&mut [output(1)]), &mut refuse);
        assert_eq!(
            r,
            Err(SubmitError::FlowControlDeadlock {
                ring: 1,
                head: None
            })
        );
        assert_eq!(refuse.0, vec![Blocked::TaskRing { ring: 1 }]);
        for (i, &t) in ids.iter().enumerate() {
            let slot = shared
                .task_slot(t)
                .unwrap_or_else(|| panic!("task {i} lost its slot"));
            assert_eq!(slot.status(), SlotStatus::Ready);
        }
        // The refused claim took nothing: the run goes on once tasks retire.
        assert_eq!(orch.submitted(1), 7);
        let mut drain = Drain::new(shared);
        assert_eq!(drain.run(), 7);
        orch.submit(aiv_task(&mut [output(1)]), &mut drain).unwrap();
    });
}

#[test]
fn a_ring_whose_head_is_held_by_an_open_scope_is_a_deadlock() {
    // Depths 3 and 4 share ring 3. The depth-3 scope holds 4 tasks; the depth-4 scope fills the
    // ring. Even with every task completing, the head cannot retire until the depth-3 scope
    // closes, which cannot happen while the orchestrator waits inside the depth-4 scope.
    with_runtime(config(8, 1 << 20), |orch, shared| {
        for _ in 0..4 {
            orch.scope_begin(ScopeMode::Auto).unwrap();
        }
        let mut drain = Drain::new(shared);
        let head = orch.submit(aiv_task(&mut [output(1)]), &mut drain).unwrap();
        for _ in 0..3 {
            orch.submit(aiv_task(&mut [output(1)]), &mut drain).unwrap();
        }
        orch.scope_begin(ScopeMode::Auto).unwrap();
        for _ in 0..3 {
            orch.submit(aiv_task(&mut [output(1)]), &mut drain).unwrap();
        }
        let r = orch.submit(aiv_task(&mut [output(1)]), &mut drain);
        assert_eq!(
            r,
            Err(SubmitError::FlowControlDeadlock {
                ring: 3,
                head: Some(head)
            })
        );
        assert_eq!(head.ring(), 3);
    });
}

#[test]
fn a_heap_held_by_an_open_scope_is_a_deadlock() {
    with_runtime(config(64, 8 << 10), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut drain = Drain::new(shared);
        let head = orch.submit(aiv_task(&mut [output(4)]), &mut drain).unwrap();
        orch.submit(aiv_task(&mut [output(3)]), &mut drain).unwrap();
        let r = orch.submit(aiv_task(&mut [output(2)]), &mut drain);
        assert_eq!(
            r,
            Err(SubmitError::HeapRingDeadlock {
                ring: 0,
                head: Some(head)
            })
        );
        // The refused claim took nothing, so the run is not poisoned. Outputs larger than the
        // whole heap are refused before claiming anything.
        assert_eq!(
            orch.submit(aiv_task(&mut [output(9)]), &mut NoWait),
            Err(SubmitError::OutputsTooLarge {
                ring: 0,
                bytes: 9 << 10,
                heap: 8 << 10
            })
        );
    });
}

/// A waiter that counts the submits that made their task ready.
#[derive(Default)]
struct CountReady(u32);
impl Waiter for CountReady {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        Err(GaveUp)
    }
    fn made_ready(&mut self) {
        self.0 += 1;
    }
}

#[test]
fn a_submit_tells_its_waiter_exactly_when_it_made_the_task_ready() {
    with_runtime(config(16, 1 << 20), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut ready = CountReady::default();
        // No producer: ready at its publish, in the AIV queue when the waiter hears of it.
        let mut a = [output(1)];
        let first = orch.submit(aiv_task(&mut a), &mut ready).unwrap();
        assert_eq!(ready.0, 1);
        // Its reader waits for it: not ready at publish, so no call.
        let mut b = [input(a[0].tensor), output(1)];
        let second = orch.submit(aiv_task(&mut b), &mut ready).unwrap();
        assert_eq!(
            ready.0, 1,
            "a task with an outstanding producer is not ready"
        );
        let shape = simpler_core::cores::ResourceShape::Aiv;
        assert_eq!(shared.pop_ready(shape), Some(first));
        assert_eq!(shared.pop_ready(shape), None);
        // Once the producer has completed, a new reader is ready at its publish.
        assert!(shared.mark_running(first));
        shared.complete(first);
        assert_eq!(
            shared.pop_ready(shape),
            Some(second),
            "the completion readied it"
        );
        let mut c = [input(a[0].tensor), output(1)];
        let third = orch.submit(aiv_task(&mut c), &mut ready).unwrap();
        assert_eq!(ready.0, 2);
        assert_eq!(shared.pop_ready(shape), Some(third));
        orch.scope_end().unwrap();
    });
}
