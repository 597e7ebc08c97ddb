//! The submit path end to end on small hand-checked graphs.

use simpler_core::cores::ActiveMask;
use simpler_core::deps::{DepFlags, ExplicitDep};
use simpler_core::orchestrator::{NoWait, OrchestratorConfig, SubmitError, Task};
use simpler_core::ring::RingConfig;
use simpler_core::sched::SchedConfig;
use simpler_core::scope::ScopeMode;
use simpler_core::slot::SlotStatus;
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskId, TaskTensor, TensorArgType};
use simpler_tests::harness::{aiv_task, arg, with_runtime, Drain};

fn small() -> OrchestratorConfig {
    OrchestratorConfig {
        sched: SchedConfig::uniform(RingConfig {
            window: 64,
            heap_bytes: 1 << 20,
            edges: 256,
        }),
        map_buckets: 64,
        map_entries: 256,
        heap_base: [0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000],
    }
}

fn ext(addr: u64, n: u32) -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr,
            size: n as u64 * 4,
        },
        0,
        &[n],
        &[1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap()
}

fn fanin(shared: &simpler_core::sched::SchedState<'_>, t: TaskId) -> Vec<(TaskId, DepFlags)> {
    let mut v: Vec<_> = shared.fanin(t).collect();
    v.sort_by_key(|e| e.0);
    v
}

#[test]
fn vector_example_graph() {
    // f = (a + b + 1) * (a + b + 2) + (a + b): c = a+b; d = c+1; e = c+2; g = d*e; f = g+c.
    with_runtime(small(), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let (a, b, f) = (ext(0xA000, 128), ext(0xB000, 128), ext(0xF000, 128));
        let out = || TaskTensor::create_info(&[128], DataType::Float32).unwrap();
        let mut t0 = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(out(), TensorArgType::Output),
        ];
        let c0 = orch.submit(aiv_task(&mut t0), &mut NoWait).unwrap();
        let c = t0[2].tensor;
        assert_eq!(c.owner_task_id(), c0);
        assert_eq!(c.buffer().addr, 0x1000_0000);
        let mut t1 = [
            arg(c, TensorArgType::Input),
            arg(out(), TensorArgType::Output),
        ];
        let c1 = orch.submit(aiv_task(&mut t1), &mut NoWait).unwrap();
        let mut t2 = [
            arg(c, TensorArgType::Input),
            arg(out(), TensorArgType::Output),
        ];
        let c2 = orch.submit(aiv_task(&mut t2), &mut NoWait).unwrap();
        let (d, e) = (t1[1].tensor, t2[1].tensor);
        assert_eq!(
            e.buffer().addr,
            0x1000_0000 + 2 * 512u64.div_ceil(1024) * 1024
        );
        let mut t3 = [
            arg(d, TensorArgType::Input),
            arg(e, TensorArgType::Input),
            arg(out(), TensorArgType::Output),
        ];
        let c3 = orch.submit(aiv_task(&mut t3), &mut NoWait).unwrap();
        let g = t3[2].tensor;
        let mut t4 = [
            arg(g, TensorArgType::Input),
            arg(c, TensorArgType::Input),
            arg(f, TensorArgType::OutputExisting),
        ];
        let c4 = orch.submit(aiv_task(&mut t4), &mut NoWait).unwrap();

        let wr = DepFlags::WAIT | DepFlags::RETAIN;
        assert_eq!(fanin(shared, c0), vec![]);
        assert_eq!(fanin(shared, c1), vec![(c0, wr)]);
        assert_eq!(fanin(shared, c2), vec![(c0, wr)]);
        assert_eq!(fanin(shared, c3), vec![(c1, wr), (c2, wr)]);
        assert_eq!(fanin(shared, c4), vec![(c0, wr), (c3, wr)]);

        let mut drain = Drain::new(shared);
        assert_eq!(drain.run(), 5);
        let pos = |t| drain.completed.iter().position(|&c| c == t).unwrap();
        assert_eq!(drain.completed.len(), 5);
        assert!(pos(c0) < pos(c1) && pos(c0) < pos(c2));
        assert!(pos(c1) < pos(c3) && pos(c2) < pos(c3) && pos(c3) < pos(c4));
        // Everything completed but the scope still holds every task.
        assert_eq!(shared.flow(0).last_alive(), 0);
        orch.scope_end().unwrap();
        assert_eq!(
            shared.flow(0).last_alive(),
            5,
            "all five retire when the scope ends"
        );
        for t in [c0, c1, c2, c3, c4] {
            assert!(
                shared.task_slot(t).is_none()
                    || shared.task_slot(t).unwrap().status() == SlotStatus::Free
            );
        }
    });
}

#[test]
fn writers_and_readers_of_an_external_buffer() {
    with_runtime(small(), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let x = ext(0x10_0000, 64);
        let lo = x.view(&[32], &[0]).unwrap();
        let hi = x.view(&[32], &[32]).unwrap();
        let w_lo = orch
            .submit(
                aiv_task(&mut [arg(lo, TensorArgType::OutputExisting)]),
                &mut NoWait,
            )
            .unwrap();
        let w_hi = orch
            .submit(
                aiv_task(&mut [arg(hi, TensorArgType::OutputExisting)]),
                &mut NoWait,
            )
            .unwrap();
        // A reader of the low half waits for its writer only.
        let r_lo = orch
            .submit(aiv_task(&mut [arg(lo, TensorArgType::Input)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, r_lo), vec![(w_lo, DepFlags::WAIT)]);
        // An INOUT over the whole buffer waits for both and evicts both (it covers them).
        let rw = orch
            .submit(aiv_task(&mut [arg(x, TensorArgType::InOut)]), &mut NoWait)
            .unwrap();
        assert_eq!(
            fanin(shared, rw),
            vec![(w_lo, DepFlags::WAIT), (w_hi, DepFlags::WAIT)]
        );
        // A later reader of the high half sees only the INOUT writer.
        let r_hi = orch
            .submit(aiv_task(&mut [arg(hi, TensorArgType::Input)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, r_hi), vec![(rw, DepFlags::WAIT)]);
        // No write-after-read: a new writer of the low half does not wait for readers.
        let w2 = orch
            .submit(
                aiv_task(&mut [arg(lo, TensorArgType::OutputExisting)]),
                &mut NoWait,
            )
            .unwrap();
        assert_eq!(fanin(shared, w2), vec![]);
        // Explicit dependencies are added on request; a duplicate merges its kinds. The reader
        // of the low half also waits for the whole-buffer INOUT, which w2 did not evict (an
        // OUTPUT_EXISTING writer looks nothing up).
        let deps = [ExplicitDep::wait(r_lo), ExplicitDep::on(w2)];
        let mut args = [arg(lo, TensorArgType::Input)];
        let t = orch
            .submit(
                Task {
                    mask: ActiveMask::AIC,
                    block_num: 1,
                    args: &mut args,
                    deps: &deps,
                    predicate: None,
                },
                &mut NoWait,
            )
            .unwrap();
        assert_eq!(
            fanin(shared, t),
            vec![
                (r_lo, DepFlags::WAIT),
                (rw, DepFlags::WAIT),
                (w2, DepFlags::WAIT | DepFlags::RETAIN)
            ]
        );
        orch.scope_end().unwrap();
    });
}

#[test]
fn manual_scopes_and_manual_dep_tensors_skip_inference() {
    with_runtime(small(), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let x = ext(0x20_0000, 16);
        let w = orch
            .submit(aiv_task(&mut [arg(x, TensorArgType::InOut)]), &mut NoWait)
            .unwrap();
        let r = orch
            .submit(
                aiv_task(&mut [arg(x.with_manual_dep(true), TensorArgType::Input)]),
                &mut NoWait,
            )
            .unwrap();
        assert_eq!(fanin(shared, r), vec![]);
        orch.scope_begin(ScopeMode::Manual).unwrap();
        assert_eq!(
            orch.scope_begin(ScopeMode::Auto),
            Err(simpler_core::scope::ScopeError::AutoInsideManual)
        );
        let m = orch
            .submit(aiv_task(&mut [arg(x, TensorArgType::InOut)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, m), vec![], "MANUAL: no lookup");
        orch.scope_end().unwrap();
        // The MANUAL writer was not registered: a reader finds only the AUTO one.
        let r2 = orch
            .submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, r2), vec![(w, DepFlags::WAIT)]);
        orch.scope_end().unwrap();
    });
}

#[test]
fn a_scope_that_fills_its_ring_is_refused() {
    with_runtime(small(), |orch, _shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let x = ext(0x30_0000, 4);
        // A window of 64 keeps at most 63 tasks live; a scope holding 63 can never let a 64th
        // claim succeed.
        for _ in 0..63 {
            orch.submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait)
                .unwrap();
        }
        assert_eq!(
            orch.submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait),
            Err(SubmitError::ScopeDeadlock {
                ring: 0,
                tasks: 63,
                window: 64
            })
        );
    });
}

#[test]
fn a_failure_after_claiming_poisons_the_run() {
    let mut config = small();
    config.map_entries = 4;
    with_runtime(config, |orch, _shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        for i in 0..4 {
            let x = ext(0x40_0000 + i * 0x1000, 8);
            orch.submit(
                aiv_task(&mut [arg(x, TensorArgType::OutputExisting)]),
                &mut NoWait,
            )
            .unwrap();
        }
        let x = ext(0x50_0000, 8);
        assert_eq!(
            orch.submit(
                aiv_task(&mut [arg(x, TensorArgType::OutputExisting)]),
                &mut NoWait
            ),
            Err(SubmitError::TensorMapOverflow { needed: 1, free: 0 })
        );
        assert_eq!(
            orch.submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait),
            Err(SubmitError::Fatal)
        );
    });
}

#[test]
fn argument_limits_are_errors() {
    with_runtime(small(), |orch, _| {
        let x = ext(0x60_0000, 8);
        assert_eq!(
            orch.submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait),
            Err(SubmitError::Scope(
                simpler_core::scope::ScopeError::NoOpenScope
            ))
        );
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let mut many = vec![arg(x, TensorArgType::Input); 33];
        assert_eq!(
            orch.submit(aiv_task(&mut many), &mut NoWait),
            Err(SubmitError::TooManyTensors {
                count: 33,
                limit: 32
            })
        );
        let deps = vec![ExplicitDep::on(TaskId::new(0, 0)); 65];
        let mut one = [arg(x, TensorArgType::Input)];
        assert_eq!(
            orch.submit(
                Task {
                    mask: ActiveMask::AIV0,
                    block_num: 1,
                    args: &mut one,
                    deps: &deps,
                    predicate: None,
                },
                &mut NoWait
            ),
            Err(SubmitError::TooManyDeps {
                count: 65,
                limit: 64
            })
        );
        assert_eq!(
            orch.submit(
                Task {
                    mask: ActiveMask::AIV0,
                    block_num: 0,
                    args: &mut one,
                    deps: &[],
                    predicate: None,
                },
                &mut NoWait
            ),
            Err(SubmitError::ZeroBlocks)
        );
        // None of these claimed anything: the run continues.
        orch.submit(aiv_task(&mut one), &mut NoWait).unwrap();
    });
}

#[test]
fn write_after_read_is_tracked_only_when_asked() {
    for war in [false, true] {
        with_runtime(small(), |orch, shared| {
            orch.set_track_war(war);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let x = ext(0x70_0000, 64);
            let lo = x.view(&[32], &[0]).unwrap();
            let w0 = orch
                .submit(
                    aiv_task(&mut [arg(x, TensorArgType::OutputExisting)]),
                    &mut NoWait,
                )
                .unwrap();
            let r1 = orch
                .submit(aiv_task(&mut [arg(lo, TensorArgType::Input)]), &mut NoWait)
                .unwrap();
            let r2 = orch
                .submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait)
                .unwrap();
            // Readers never wait for readers.
            assert_eq!(fanin(shared, r2), vec![(w0, DepFlags::WAIT)]);
            let w3 = orch
                .submit(
                    aiv_task(&mut [arg(lo, TensorArgType::OutputExisting)]),
                    &mut NoWait,
                )
                .unwrap();
            let w4 = orch
                .submit(aiv_task(&mut [arg(x, TensorArgType::InOut)]), &mut NoWait)
                .unwrap();
            if war {
                // With tracking, a writer waits for earlier readers and writers.
                assert_eq!(
                    fanin(shared, w3),
                    vec![
                        (w0, DepFlags::WAIT),
                        (r1, DepFlags::WAIT),
                        (r2, DepFlags::WAIT)
                    ]
                );
                // w3 covered r1's region (evicted) but not r2's: w4 reaches r1 through w3.
                assert_eq!(
                    fanin(shared, w4),
                    vec![
                        (w0, DepFlags::WAIT),
                        (r2, DepFlags::WAIT),
                        (w3, DepFlags::WAIT)
                    ]
                );
            } else {
                assert_eq!(fanin(shared, w3), vec![]);
                assert_eq!(
                    fanin(shared, w4),
                    vec![(w0, DepFlags::WAIT), (w3, DepFlags::WAIT)]
                );
            }
        });
    }
}

/// A predicate's operand takes part in dependency inference as an INPUT would, without being
/// a kernel argument: its creator (WAIT | RETAIN) and the writers of the region it lies in
/// (WAIT) become the predicated task's producers.
#[test]
fn a_predicates_operand_makes_its_producers_the_tasks_producers() {
    use simpler_core::predicate::{Predicate, PredicateOp};
    with_runtime(small(), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        // A runtime-allocated count (its creator), and an external buffer a task writes.
        let mut gate = [arg(
            TaskTensor::create_info(&[4], DataType::Int32).unwrap(),
            TensorArgType::Output,
        )];
        let creator = orch.submit(aiv_task(&mut gate), &mut NoWait).unwrap();
        let count = gate[0].tensor;
        let flags = ext(0xC000, 16);
        let writer = orch
            .submit(
                aiv_task(&mut [arg(flags, TensorArgType::OutputExisting)]),
                &mut NoWait,
            )
            .unwrap();
        let x = ext(0xA000, 16);
        let predicated = |orch: &mut simpler_core::orchestrator::Orchestrator<'_>,
                          p: &Predicate| {
            let mut args = [arg(x, TensorArgType::Input)];
            orch.submit(
                Task {
                    predicate: Some(p),
                    ..aiv_task(&mut args)
                },
                &mut NoWait,
            )
            .unwrap()
        };
        let on_count = Predicate::new(&count, &[2], PredicateOp::Gt, 0).unwrap();
        let t = predicated(orch, &on_count);
        assert_eq!(
            fanin(shared, t),
            vec![(creator, DepFlags::WAIT | DepFlags::RETAIN)]
        );
        let on_flag =
            Predicate::new(&flags.view(&[4], &[8]).unwrap(), &[3], PredicateOp::Ne, 0).unwrap();
        let t = predicated(orch, &on_flag);
        assert_eq!(fanin(shared, t), vec![(writer, DepFlags::WAIT)]);
        // The same task without a predicate depends on neither.
        let plain = orch
            .submit(aiv_task(&mut [arg(x, TensorArgType::Input)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, plain), vec![]);
        orch.scope_end().unwrap();
        Drain::new(shared).run();
        assert!(shared.drained());
    });
}

/// With write-after-read tracking, a predicate's read of a buffer is a read like an INPUT's:
/// a later writer of the element waits for the predicated task.
#[test]
fn with_war_tracking_a_later_writer_waits_for_a_predicates_read() {
    use simpler_core::predicate::{Predicate, PredicateOp};
    with_runtime(small(), |orch, shared| {
        orch.set_track_war(true);
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let flags = ext(0xC000, 16);
        let x = ext(0xA000, 16);
        let p = Predicate::new(&flags, &[5], PredicateOp::Eq, 1).unwrap();
        let mut args = [arg(x, TensorArgType::Input)];
        let reader = orch
            .submit(
                Task {
                    predicate: Some(&p),
                    ..aiv_task(&mut args)
                },
                &mut NoWait,
            )
            .unwrap();
        let writer = orch
            .submit(
                aiv_task(&mut [arg(flags, TensorArgType::OutputExisting)]),
                &mut NoWait,
            )
            .unwrap();
        assert_eq!(fanin(shared, writer), vec![(reader, DepFlags::WAIT)]);
        orch.scope_end().unwrap();
        Drain::new(shared).run();
        assert!(shared.drained());
    });
}

/// The accumulator pattern: each INOUT of exactly the region the previous writer wrote takes
/// that writer's TensorMap entry over (no new entry). A task passing the same region twice
/// (INOUT, then INPUT or INOUT again) does not depend on itself through the entry it took
/// over, and its readers still find it as the region's writer. Then the next writer of an
/// overlapping region finds exactly one writer.
#[test]
fn an_accumulator_takes_its_predecessors_entry_over() {
    with_runtime(small(), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let x = ext(0x10_0000, 64);
        let acc = x.view(&[32], &[0]).unwrap();
        let first = orch
            .submit(aiv_task(&mut [arg(acc, TensorArgType::InOut)]), &mut NoWait)
            .unwrap();
        assert_eq!(orch.tensor_map().live_entries(), 1);
        let mut prev = first;
        for _ in 0..3 {
            let t = orch
                .submit(aiv_task(&mut [arg(acc, TensorArgType::InOut)]), &mut NoWait)
                .unwrap();
            assert_eq!(fanin(shared, t), vec![(prev, DepFlags::WAIT)]);
            assert_eq!(orch.tensor_map().live_entries(), 1, "taken over, not added");
            prev = t;
        }
        // The same region as INOUT then INPUT, then twice as INOUT: only the previous writer.
        let both = orch
            .submit(
                aiv_task(&mut [
                    arg(acc, TensorArgType::InOut),
                    arg(acc, TensorArgType::Input),
                ]),
                &mut NoWait,
            )
            .unwrap();
        assert_eq!(fanin(shared, both), vec![(prev, DepFlags::WAIT)]);
        let twice = orch
            .submit(
                aiv_task(&mut [
                    arg(acc, TensorArgType::InOut),
                    arg(acc, TensorArgType::InOut),
                ]),
                &mut NoWait,
            )
            .unwrap();
        assert_eq!(fanin(shared, twice), vec![(both, DepFlags::WAIT)]);
        // An INOUT over the region and beyond takes over nothing (not the same region), and
        // evicts the entry.
        let wide = orch
            .submit(aiv_task(&mut [arg(x, TensorArgType::InOut)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, wide), vec![(twice, DepFlags::WAIT)]);
        let reader = orch
            .submit(aiv_task(&mut [arg(acc, TensorArgType::Input)]), &mut NoWait)
            .unwrap();
        assert_eq!(fanin(shared, reader), vec![(wide, DepFlags::WAIT)]);
        assert_eq!(orch.tensor_map().live_entries(), 1);
        orch.scope_end().unwrap();
    });
}

/// What `Rt::write_element` reads: the TensorMap writers of a region (`writers_of`), and
/// whether a producer's retaining consumers are done (`fanout_released`), its open scope's
/// reference aside.
#[test]
fn writers_of_and_fanout_released() {
    use simpler_core::cores::ResourceShape;
    with_runtime(small(), |orch, shared| {
        orch.scope_begin(ScopeMode::Auto).unwrap();
        let x = ext(0xA000, 64);
        let out = TaskTensor::create_info(&[64], DataType::Float32).unwrap();
        let mut t0 = [arg(out, TensorArgType::Output)];
        let p = orch.submit(aiv_task(&mut t0), &mut NoWait).unwrap();
        let c = t0[0].tensor;
        let mut t1 = [arg(x, TensorArgType::InOut)];
        let w = orch.submit(aiv_task(&mut t1), &mut NoWait).unwrap();
        let mut t2 = [arg(c, TensorArgType::Input)];
        let r = orch.submit(aiv_task(&mut t2), &mut NoWait).unwrap();
        let writers = |orch: &mut simpler_core::orchestrator::Orchestrator<'_>, t| {
            let mut v = Vec::new();
            orch.writers_of(t, |task| v.push(task));
            v
        };
        assert_eq!(writers(orch, &x), vec![w], "the INOUT registered x");
        assert_eq!(
            writers(orch, &c),
            vec![],
            "an OUTPUT is found through its creator"
        );
        // Not completed: its own completion's reference is outstanding.
        assert!(!shared.fanout_released(p));
        let run = |task| {
            assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(task));
            assert!(shared.mark_running(task));
            assert!(shared.complete_subtask(task));
        };
        run(p);
        assert!(!shared.fanout_released(p), "r retains p");
        run(w);
        assert!(shared.fanout_released(w), "nothing retains w");
        run(r);
        assert!(
            shared.fanout_released(p),
            "r completed; the scope's reference is masked"
        );
        assert_eq!(shared.task_slot(p).unwrap().status(), SlotStatus::Completed);
        orch.scope_end().unwrap();
    });
}
