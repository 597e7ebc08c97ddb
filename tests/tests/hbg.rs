//! The host-built-graph runtime (hbg): the orchestration runs on the host into a mirror of
//! the shared state, the compact live image is shipped once, the device only schedules.

use simpler_core::ArgDirection;
use simpler_host::hbg::{BindPhase, HbgError};
use simpler_host::scenes::{self, Prepared};
use simpler_host::{ChipWorker, WorkerError};
use simpler_host::{RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::fixtures::{host_args, host_tensors, register_prepared};

fn worker() -> ChipWorker {
    ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device")
}

fn run_scene(w: &mut ChipWorker, scene: &str, case: &str, rounds: usize) {
    let p: Prepared = scenes::find(scene)
        .expect("scene")
        .prepare(case)
        .expect("case");
    let h = register_prepared(w, &p);
    for round in 0..rounds {
        let mut args = host_args(&p);
        let run = w
            .run(h, &mut args, &p.scalars, RunOptions::on(Runtime::Hbg))
            .expect("hbg run");
        let bind = run.bind.expect("an hbg run reports its bind");
        let tensors = host_tensors(args);
        let check = (p.check)(&tensors);
        assert!(
            check.pass,
            "{scene}/{case} round {round}: max diff {}",
            check.max_diff
        );
        assert_eq!(Some(run.outcome.tasks), p.tasks, "{scene}/{case}: tasks");
        assert_eq!(Some(run.outcome.edges), p.edges, "{scene}/{case}: edges");
        assert_eq!(Some(bind.tasks), p.tasks);
        assert!(bind.image_bytes > 0);
        assert!(
            bind.phases().all(|(_, ph)| ph.time.as_nanos() > 0),
            "{:?}",
            BindPhase::ALL
        );
    }
}

#[test]
fn vector_example_on_hbg() {
    run_scene(&mut worker(), "vector_example", "default", 3);
}

#[test]
fn bgemm_case1_on_hbg() {
    run_scene(&mut worker(), "bgemm", "Case1", 2);
}

#[test]
fn paged_attention_on_hbg() {
    let mut w = worker();
    run_scene(&mut w, "paged_attention", "CaseSmall1", 2);
    // The same worker then runs a different callable: the retained mirror is reused.
    run_scene(&mut w, "vector_example", "default", 1);
}

#[test]
fn paged_attention_manual_scope_on_hbg() {
    let mut w = worker();
    // CaseVarSeq4 has a one-block sequence, whose only UP declares both PV and the alloc task.
    for case in ["CaseSmall1", "CaseVarSeq4"] {
        run_scene(&mut w, "paged_attention_manual_scope", case, 2);
    }
}

#[test]
fn a_graph_that_does_not_fit_is_a_typed_error_not_a_wait() {
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.ring.window = 16; // bgemm Case1 has 128 tasks
    let mut w = ChipWorker::init(config).expect("device");
    let p = scenes::find("bgemm").unwrap().prepare("Case1").unwrap();
    let h = register_prepared(&mut w, &p);
    let mut args = host_args(&p);
    let err = w
        .run(h, &mut args, &p.scalars, RunOptions::on(Runtime::Hbg))
        .expect_err("too large");
    assert!(
        matches!(err, WorkerError::Hbg(HbgError::GraphTooLarge(_))),
        "{err}"
    );
    // The chain says what filled up: the 16-slot task window of ring 1 (bgemm's tasks are
    // submitted one scope deep).
    assert_eq!(
        simpler_host::ErrorChain(&err).to_string(),
        "host-built run: the graph does not fit the host mirror, where no task retires while \
         it is built; enlarge the rings or the heap: the submit was refused: ring 1's task \
         window is full and the waiter gave up"
    );
    // The same graph fits the tmr runtime, which retires tasks while it submits.
    let mut tensors = p.tensors.clone();
    w.run(h, &mut tensors, &p.scalars, RunOptions::default())
        .expect("tmr runs it");
    assert!((p.check)(&tensors).pass);
    let _ = ArgDirection::In;
}

/// On hbg nothing runs while the host builds the graph, so an orchestration that reads an
/// element of a task's output (`Rt::read_element` waits for the producer) can never be served:
/// that is its own error, naming the task waited for, not a graph too large for the mirror.
/// The same callable runs on tmr, where the producer completes while the orchestration waits.
#[test]
fn reading_an_element_nothing_has_produced_is_task_not_run_not_graph_too_large() {
    use simpler_aicore::kernels;
    use simpler_aicpu::RtError;
    use simpler_core::orchestrator::TaskArg;
    use simpler_core::{DataType, TaskTensor, TensorArgType};
    use simpler_host::{ChipArg, HostTensor, OrchFn};
    use simpler_tests::harness::input;
    use std::error::Error;
    use std::sync::{Arc, Mutex};

    const SHAPE: [u32; 2] = [16, 16];
    let produced = Arc::new(Mutex::new(None));
    let seen = produced.clone();
    // c = a + 1; read c[0]; f = c + 1.
    let orch: OrchFn = Arc::new(move |rt| {
        let [a, f] = rt.args().tensors() else {
            return Err(rt.report_fatal(1));
        };
        let (a, f) = (*a, *f);
        let mut t0 = [
            input(a),
            TaskArg {
                tensor: TaskTensor::create_info(&SHAPE, DataType::Float32).expect("shape"),
                tag: TensorArgType::Output,
            },
        ];
        let task = rt.submit_aiv(0, &mut t0, &[1.0f32.to_bits() as u64])?;
        *seen.lock().unwrap() = Some(task);
        let c0 = rt.read_element(&t0[1].tensor, 0)?;
        assert_eq!(f32::from_bits(c0 as u32), 1.0, "c[0] = a[0] + 1");
        let mut t1 = [
            input(t0[1].tensor),
            TaskArg {
                tensor: f,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_aiv(0, &mut t1, &[1.0f32.to_bits() as u64])?;
        Ok(())
    });
    let mut w = worker();
    let h = w.register_callable(
        orch,
        vec![kernels::add_scalar],
        vec![ArgDirection::In, ArgDirection::Out],
    );
    let n = SHAPE.iter().product::<u32>() as usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let tensors = vec![
        HostTensor::f32(&a, &SHAPE, ArgDirection::In),
        HostTensor::f32(&vec![0.0; n], &SHAPE, ArgDirection::Out),
    ];

    let mut args: Vec<ChipArg> = tensors.iter().cloned().map(ChipArg::Host).collect();
    let err = w
        .run(h, &mut args, &[], RunOptions::on(Runtime::Hbg))
        .expect_err("unservable on hbg");
    let task = produced
        .lock()
        .unwrap()
        .expect("the producer was submitted");
    assert!(
        matches!(
            &err,
            WorkerError::Hbg(HbgError::TaskNotRun {
                task: t,
                error: RtError::NotProduced { task: e },
            }) if *t == task && *e == task
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "host-built run: the orchestration waited for task 0 of ring 0 to complete, but no task \
         runs until the host has built the whole graph; read or write that element on the \
         device runtime (tmr) instead"
    );
    let cause = err
        .source()
        .and_then(Error::source)
        .expect("the orchestration's error");
    assert_eq!(
        cause.to_string(),
        "gave up waiting for task 0 of ring 0 to complete"
    );

    // On tmr the producer runs while the orchestration waits: f = a + 2.
    let mut tensors = tensors;
    w.run(h, &mut tensors, &[], RunOptions::default())
        .expect("tmr serves the wait");
    let want: Vec<f32> = a.iter().map(|v| v + 2.0).collect();
    assert_eq!(tensors[1].to_f32(), want);
}

#[test]
fn bgemm_case0_on_hbg() {
    // 1000 tasks; every intermediate stays live while the host builds, so the heap is sized
    // for the whole graph (as `simpler run --runtime hbg` does).
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.ring.heap_bytes = 256 << 20;
    config.gm_bytes = 512 << 20;
    let mut w = ChipWorker::init(config).expect("device");
    run_scene(&mut w, "bgemm", "Case0", 1);
}

#[test]
fn a_graph_recorded_once_replays_on_the_device() {
    let mut w = worker();
    let p = scenes::find("graph_vector")
        .unwrap()
        .prepare("default")
        .unwrap();
    let h = register_prepared(&mut w, &p);
    for round in 0..3 {
        let mut args = host_args(&p);
        let run = w
            .run(h, &mut args, &p.scalars, RunOptions::on(Runtime::Hbg))
            .expect("hbg run");
        let bind = run.bind.expect("an hbg run reports its bind");
        let tensors = host_tensors(args);
        let check = (p.check)(&tensors);
        assert!(check.pass, "round {round}: max diff {}", check.max_diff);
        // One Definition recorded, seven replays, nothing inline; one ring task per
        // invocation (the body's nodes take no ring slots).
        assert_eq!(bind.graphs, [1, 7, 0], "round {round}");
        assert_eq!(run.outcome.tasks, 8);
        assert_eq!(bind.tasks, 8);
    }
    // The same scene on tmr runs every body inline: 40 tasks, and the same golden.
    let mut tensors = p.tensors.clone();
    let report = w
        .run(h, &mut tensors, &p.scalars, RunOptions::default())
        .expect("tmr");
    assert_eq!(report.outcome.tasks, 40);
    assert!((p.check)(&tensors).pass);
}

#[test]
fn a_traced_bind_has_one_span_per_phase_in_order_and_the_device_events_inside_its_device_call() {
    use simpler_aicpu::EventKind;
    use simpler_host::hbg::{TRACE_BIND_WINDOW, TRACE_PHASE_BASE};
    let mut w = worker();
    let p = scenes::find("vector_example")
        .unwrap()
        .prepare("default")
        .unwrap();
    let h = register_prepared(&mut w, &p);
    let sink = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut args = host_args(&p);
    let options = RunOptions {
        trace: Some(sink.clone()),
        ..RunOptions::on(Runtime::Hbg)
    };
    let run = w
        .run(h, &mut args, &p.scalars, options)
        .expect("traced bind");
    let events = sink.lock().unwrap();
    let host: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Host && e.kernel != TRACE_BIND_WINDOW)
        .collect();
    // One bind-window span, from host_orch's start to graph_commit's end.
    let windows: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Host && e.kernel == TRACE_BIND_WINDOW)
        .collect();
    assert_eq!(windows.len(), 1);
    assert_eq!(
        windows[0].start_ns,
        host[BindPhase::HostOrch.index()].start_ns
    );
    assert_eq!(
        windows[0].end_ns,
        host[BindPhase::GraphCommit.index()].end_ns
    );
    let kinds: Vec<u32> = host.iter().map(|e| e.kernel - TRACE_PHASE_BASE).collect();
    assert_eq!(kinds, (0..BindPhase::ALL.len() as u32).collect::<Vec<_>>());
    for pair in host.windows(2) {
        assert!(pair[0].start_ns <= pair[0].end_ns);
        assert!(pair[0].end_ns <= pair[1].start_ns, "{pair:?}");
    }
    let (init, device) = (host[7], host[8]);
    let execs: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Exec)
        .collect();
    assert_eq!(execs.len() as u64, run.outcome.dispatched);
    assert!(execs
        .iter()
        .all(|e| e.start_ns >= init.start_ns && e.end_ns <= device.end_ns));
    // An untraced bind records nothing into the sink.
    let recorded = events.len();
    drop(events);
    let mut args = host_args(&p);
    w.run(h, &mut args, &p.scalars, RunOptions::on(Runtime::Hbg))
        .expect("bind");
    assert_eq!(sink.lock().unwrap().len(), recorded);
}

#[test]
fn host_only_is_refused_on_tmr_and_leaves_the_tensors_and_the_worker_as_they_were() {
    let mut w = worker();
    let p = scenes::find("vector_example")
        .unwrap()
        .prepare("default")
        .unwrap();
    let h = register_prepared(&mut w, &p);
    let mut tensors = p.tensors.clone();
    let options = RunOptions {
        host_only: true,
        ..RunOptions::default()
    };
    let err = w
        .run(h, &mut tensors, &p.scalars, options)
        .expect_err("tmr has no host-only mode");
    assert!(matches!(err, WorkerError::HostOnlyNeedsHbg), "{err}");
    assert_eq!(
        err.to_string(),
        "host-only mode builds the graph on the host: it needs the hbg runtime"
    );
    assert_eq!(tensors, p.tensors);
    let report = w
        .run(h, &mut tensors, &p.scalars, RunOptions::default())
        .expect("the next run runs");
    assert!(report.bind.is_none());
    assert!((p.check)(&tensors).pass);
}

/// The other element waits hbg cannot serve fail the same way, naming the task waited for: a
/// read of an external tensor an INOUT task writes (a TensorMap writer, no creator), and a
/// write to an allocation a submitted task reads (the allocation completed at submit; the write
/// waits for its consumer). Both callables run on tmr, where the tasks complete meanwhile.
#[test]
fn element_waits_for_a_writer_or_a_consumer_are_task_not_run() {
    use simpler_aicore::kernels;
    use simpler_aicpu::RtError;
    use simpler_core::orchestrator::TaskArg;
    use simpler_core::{DataType, TaskTensor, TensorArgType};
    use simpler_host::{ChipArg, HostTensor, OrchFn};
    use std::sync::{Arc, Mutex};

    const N: u32 = 16;
    let waited = Arc::new(Mutex::new(None));
    // x += 1 (in place, INOUT); read x[0].
    let seen = waited.clone();
    let read: OrchFn = Arc::new(move |rt| {
        let [x, _] = rt.args().tensors() else {
            return Err(rt.report_fatal(1));
        };
        let x = *x;
        let mut args = [
            TaskArg {
                tensor: x,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: x,
                tag: TensorArgType::InOut,
            },
        ];
        let writer = rt.submit_aiv(0, &mut args, &[1.0f32.to_bits() as u64])?;
        *seen.lock().unwrap() = Some(writer);
        // x[0] = 0 + 1 once the writer ran.
        let x0 = rt.read_element(&x, 0)?;
        if f32::from_bits(x0 as u32) != 1.0 {
            return Err(rt.report_fatal(2));
        }
        Ok(())
    });
    // s = alloc; f = s + 1; s[0] = 5.
    let seen = waited.clone();
    let write: OrchFn = Arc::new(move |rt| {
        let [_, f] = rt.args().tensors() else {
            return Err(rt.report_fatal(1));
        };
        let f = *f;
        let mut s = [TaskArg {
            tensor: TaskTensor::create_info(&[N], DataType::Float32).expect("shape"),
            tag: TensorArgType::Output,
        }];
        let alloc = rt.alloc_tensors(&mut s)?;
        *seen.lock().unwrap() = Some(alloc);
        let s = s[0].tensor;
        let mut args = [
            TaskArg {
                tensor: s,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: f,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_aiv(0, &mut args, &[1.0f32.to_bits() as u64])?;
        rt.write_element(&s, 0, 5.0f32.to_bits() as u64)
    });
    let mut w = worker();
    for (what, orch) in [("read", read), ("write", write)] {
        let h = w.register_callable(
            orch,
            vec![kernels::add_scalar],
            vec![ArgDirection::InOut, ArgDirection::Out],
        );
        let tensors = vec![
            HostTensor::f32(&[0.0; N as usize], &[N], ArgDirection::InOut),
            HostTensor::f32(&[0.0; N as usize], &[N], ArgDirection::Out),
        ];
        let mut args: Vec<ChipArg> = tensors.iter().cloned().map(ChipArg::Host).collect();
        let err = w
            .run(h, &mut args, &[], RunOptions::on(Runtime::Hbg))
            .expect_err("unservable on hbg");
        let task = waited
            .lock()
            .unwrap()
            .take()
            .expect("the task was submitted");
        assert!(
            matches!(
                &err,
                WorkerError::Hbg(HbgError::TaskNotRun {
                    task: t,
                    error: RtError::NotProduced { task: e },
                }) if *t == task && *e == task
            ),
            "{what}: {err:?}"
        );
        let mut tensors = tensors;
        w.run(h, &mut tensors, &[], RunOptions::default())
            .unwrap_or_else(|e| panic!("{what}: tmr serves the wait: {e:?}"));
    }
}
