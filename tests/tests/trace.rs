//! A traced run: every task executes once on one core track, spans on a track never overlap,
//! and every task starts after all its producers ended.

use simpler_aicpu::{EventKind, TraceEvent};
use simpler_host::dag::DagRecorder;
use simpler_host::{scenes, ChipWorker, RunOptions, SharedHook, TraceSink};
use simpler_sim::{DeviceConfig, Topology};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

fn traced(scene: &str, case: &str, topology: Topology) -> (Vec<TraceEvent>, DagRecorder, u64) {
    traced_on(DeviceConfig::new(topology), scene, case)
}

fn traced_on(config: DeviceConfig, scene: &str, case: &str) -> (Vec<TraceEvent>, DagRecorder, u64) {
    let prepared = scenes::find(scene).unwrap().prepare(case).unwrap();
    let mut worker = ChipWorker::init(config).unwrap();
    let handle = worker.register(prepared.callable.clone());
    let dag = Arc::new(Mutex::new(DagRecorder::new()));
    let sink: TraceSink = Arc::new(Mutex::new(Vec::new()));
    let mut tensors = prepared.tensors.clone();
    let report = worker
        .run(
            handle,
            &mut tensors,
            &prepared.scalars,
            RunOptions {
                hook: Some(dag.clone() as SharedHook),
                trace: Some(sink.clone()),
                ..RunOptions::default()
            },
        )
        .unwrap();
    assert!((prepared.check)(&tensors).pass);
    let events = sink.lock().unwrap().clone();
    let dag = std::mem::take(&mut *dag.lock().unwrap());
    (events, dag, report.outcome.trace_dropped)
}

fn check(scene: &str, case: &str, topology: Topology) {
    let (events, dag, dropped) = traced(scene, case, topology);
    assert_eq!(dropped, 0);
    // Every computing task runs exactly once, on a core track.
    let mut exec: HashMap<usize, &TraceEvent> = HashMap::new();
    for e in events.iter().filter(|e| e.kind == EventKind::Exec) {
        assert!(
            e.track < simpler_aicpu::trace::SCHEDULER_TRACK,
            "exec off a core track"
        );
        let i = dag
            .index_of(e.task)
            .expect("an executed task was submitted");
        assert!(
            exec.insert(i, e).is_none(),
            "{scene} {case}: task {i} ran twice"
        );
        assert!(e.end_ns >= e.start_ns);
    }
    for t in dag.tasks() {
        let runs = t.kind == "task";
        assert_eq!(
            exec.contains_key(&t.index),
            runs,
            "{scene} {case}: task {}",
            t.index
        );
    }
    // Spans on one track never overlap.
    let mut by_track: HashMap<u32, Vec<&TraceEvent>> = HashMap::new();
    for e in &events {
        by_track.entry(e.track).or_default().push(e);
    }
    for (track, mut spans) in by_track {
        spans.sort_by_key(|e| e.start_ns);
        for w in spans.windows(2) {
            assert!(
                w[0].end_ns <= w[1].start_ns,
                "{scene} {case}: overlapping spans on track {track}: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }
    // Every task starts after all its producers ended.
    for e in dag.edges().iter().filter(|e| e.wait) {
        if let (Some(p), Some(c)) = (exec.get(&e.from), exec.get(&e.to)) {
            assert!(
                p.end_ns <= c.start_ns,
                "{scene} {case}: task {} started before its producer {} ended",
                e.to,
                e.from
            );
        }
    }
    // The host's three phases come in order, and every device event lies within the run.
    let host: Vec<&TraceEvent> = events
        .iter()
        .filter(|e| e.kind == EventKind::Host)
        .collect();
    assert_eq!(host.len(), 3);
    assert!(host[0].end_ns <= host[1].start_ns && host[1].end_ns <= host[2].start_ns);
    for e in events.iter().filter(|e| e.kind != EventKind::Host) {
        assert!(
            host[1].start_ns <= e.start_ns && e.end_ns <= host[1].end_ns,
            "{e:?} outside the run phase"
        );
    }
    // The Chrome file names one span per execution.
    let json = simpler_host::trace::to_chrome_json(&events, Some(&dag));
    assert_eq!(json.matches("\"name\": \"task ").count(), exec.len());
}

#[test]
fn traced_scenes_run_each_task_once_in_dependency_order() {
    for topology in [Topology::A2a3, Topology::A5] {
        check("vector_example", "default", topology);
        check("paged_attention", "CaseVarSeq4", topology);
    }
}

#[test]
fn the_swimlane_has_one_box_per_execution_and_the_report_a_line_per_scheduler() {
    let (events, dag, _) = traced("paged_attention", "CaseSmall1", Topology::A2a3);
    let svg = simpler_host::trace::to_swimlane_svg(&events, &dag);
    let execs = events.iter().filter(|e| e.kind == EventKind::Exec).count();
    assert_eq!(execs, 12, "13 tasks, one of them an allocation");
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<rect class=\"task\"").count(), execs);
    assert_eq!(svg.matches("<rect").count(), svg.matches("</rect>").count());
    // The critical path is a chain of dependent tasks, and at least the longest single one.
    let (path, len) = simpler_host::trace::critical_path(&events, &dag);
    assert!(!path.is_empty() && len > 0);
    for w in path.windows(2) {
        assert!(
            dag.edges().iter().any(|e| e.from == w[0] && e.to == w[1]),
            "{w:?} is no edge"
        );
    }
    let report = simpler_host::trace::report(&events, &dag, 3);
    assert_eq!(
        report
            .lines()
            .filter(|l| l.starts_with("scheduler "))
            .count(),
        3
    );
    assert!(report.contains("critical path"));
}

/// Each task that waits on one cube task alone (bgemm's first ADD of a group, on its GEMM), by
/// whether the thread ran another cube task between the two: `(checked, interleaved)`. On a
/// chip of one cluster one thread steps every core, so the executions are one sequence.
fn sole_consumers_after_another_cube_task(case: &str) -> (usize, usize) {
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.clusters = 1;
    let (events, dag, dropped) = traced_on(config, "bgemm", case);
    assert_eq!(dropped, 0);
    let mut execs: Vec<&TraceEvent> = events
        .iter()
        .filter(|e| e.kind == EventKind::Exec)
        .collect();
    execs.sort_by_key(|e| e.start_ns);
    let order: Vec<usize> = execs
        .iter()
        .map(|e| {
            dag.index_of(e.task)
                .expect("an executed task was submitted")
        })
        .collect();
    let position: HashMap<usize, usize> = order.iter().enumerate().map(|(p, &t)| (t, p)).collect();
    let cube = |t: usize| dag.tasks()[t].kernels.aic != simpler_aicpu::NO_KERNEL;
    let (mut checked, mut interleaved) = (0, 0);
    for t in dag.tasks() {
        let producers: Vec<usize> = dag
            .edges()
            .iter()
            .filter(|e| e.wait && e.to == t.index)
            .map(|e| e.from)
            .collect();
        let &[p] = producers.as_slice() else {
            continue;
        };
        if !cube(p) || cube(t.index) {
            continue;
        }
        let (from, to) = (position[&p], position[&t.index]);
        assert!(
            from < to,
            "{case}: task {} ran before its producer {p}",
            t.index
        );
        checked += 1;
        interleaved += order[from + 1..to].iter().any(|&x| cube(x)) as usize;
    }
    (checked, interleaved)
}

#[test]
fn a_long_tasks_sole_consumer_runs_before_the_threads_next_cube_task() {
    // Case1's tensors are 256 KiB: after each GEMM the scheduler passes at once, and the
    // GEMM's ADD runs next, while the product is in the cache.
    let (checked, interleaved) = sole_consumers_after_another_cube_task("Case1");
    assert_eq!(checked, 32, "one first ADD per group");
    assert_eq!(interleaved, 0, "a GEMM ran between a GEMM and its ADD");
    // Bgemm64's are 16 KiB, short: the ADD waits for the round's pass, and the round's next
    // GEMM, placed by the same pass on the cube core stepped first, runs before it.
    let (checked, interleaved) = sole_consumers_after_another_cube_task("Bgemm64");
    assert_eq!(checked, 8);
    assert!(
        interleaved > 0,
        "short tasks have no pass after their kernels"
    );
}
