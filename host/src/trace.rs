//! Chrome trace-event JSON (what Perfetto and chrome://tracing open) from a run's events.
//!
//! One track per simulated core (a span per kernel execution, named by the task's submit
//! index and kernel), one per scheduler thread (spans for passes that made progress, and idle
//! waits), one for the orchestrator (a span per submit), and one for the host's phases (staging
//! the entry tensors, the run, copying back; for a host-built graph, every bind phase). Timestamps are microseconds from the host's call.

use crate::dag::DagRecorder;
use simpler_aicpu::trace::{HOST_PHASES, HOST_TRACK, ORCHESTRATOR_TRACK, SCHEDULER_TRACK};
use simpler_aicpu::{EventKind, TraceEvent};
use std::collections::BTreeSet;
use std::fmt::Write;

/// Puts a run's device events on the host's clock (they count from the device call's start,
/// `device_at` into the host's span) and appends one host-track span per `(kind, start, end)`
/// (`kind` indexes the host phase names `to_chrome_json` uses).
pub(crate) fn add_host_spans(
    sink: &crate::transport::TraceSink,
    device_at: std::time::Duration,
    spans: impl IntoIterator<Item = (u32, std::time::Duration, std::time::Duration)>,
) {
    let ns = |d: std::time::Duration| d.as_nanos() as u64;
    let mut events = sink.lock().unwrap_or_else(|e| e.into_inner());
    for e in events.iter_mut() {
        e.start_ns += ns(device_at);
        e.end_ns += ns(device_at);
    }
    events.extend(spans.into_iter().map(|(kind, start, end)| TraceEvent {
        track: HOST_TRACK,
        kind: EventKind::Host,
        task: simpler_core::TaskId::INVALID,
        kernel: kind,
        start_ns: ns(start),
        end_ns: ns(end),
        value: 0,
    }));
}

/// The track's display name.
pub fn track_name(track: u32) -> String {
    if track >= HOST_TRACK {
        "host".to_string()
    } else if track >= ORCHESTRATOR_TRACK {
        "orchestrator".to_string()
    } else if track >= SCHEDULER_TRACK {
        format!("scheduler {}", track - SCHEDULER_TRACK)
    } else {
        let slot = ["AIC", "AIV0", "AIV1"][(track % 3) as usize];
        format!("core {track} (cluster {} {slot})", track / 3)
    }
}

/// Writes `events` as Chrome trace-event JSON; `dag`, when given, names tasks by submit index.
pub fn to_chrome_json(events: &[TraceEvent], dag: Option<&DagRecorder>) -> String {
    let mut s = String::from("{\"traceEvents\": [\n");
    let tracks: BTreeSet<u32> = events.iter().map(|e| e.track).collect();
    let mut first = true;
    let mut sep = |s: &mut String| {
        if !first {
            s.push_str(",\n");
        }
        first = false;
    };
    for &t in &tracks {
        sep(&mut s);
        let _ = write!(
            s,
            "{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": {t}, \"args\": {{\"name\": \"{}\"}}}}",
            track_name(t)
        );
    }
    for e in events.iter().filter(|e| e.kind != EventKind::Counter) {
        let index = dag.and_then(|d| d.index_of(e.task));
        let name = match (e.kind, index) {
            (EventKind::Exec, Some(i)) => format!("task {i} k{}", e.kernel),
            (EventKind::Exec, None) => format!("task {:#x} k{}", e.task.0, e.kernel),
            (EventKind::Submit, Some(i)) => format!("submit {i}"),
            (EventKind::Submit, None) => "submit".to_string(),
            (EventKind::Completion, _) => "completion".to_string(),
            (EventKind::Dispatch, _) => "dispatch".to_string(),
            (EventKind::Idle, _) => "idle".to_string(),
            (EventKind::Counter, _) => "counter".to_string(),
            (EventKind::Host, _) if e.kernel == crate::hbg::TRACE_BIND_WINDOW => {
                "bind_window".to_string()
            }
            (EventKind::Host, _) => e
                .kernel
                .checked_sub(crate::hbg::TRACE_PHASE_BASE)
                .and_then(|i| crate::hbg::BindPhase::ALL.get(i as usize))
                .map(|p| p.name())
                .or_else(|| HOST_PHASES.get(e.kernel as usize).copied())
                .unwrap_or("host")
                .to_string(),
        };
        sep(&mut s);
        let _ = write!(
            s,
            "{{\"name\": \"{name}\", \"ph\": \"X\", \"pid\": 0, \"tid\": {}, \"ts\": {:.3}, \"dur\": {:.3}, \"args\": {{\"task\": {}}}}}",
            e.track,
            e.start_ns as f64 / 1e3,
            e.end_ns.saturating_sub(e.start_ns) as f64 / 1e3,
            index.map_or(-1, |i| i as i64)
        );
    }
    s.push_str("\n]}\n");
    s
}

/// Per task (by submit index): its execution span (earliest start, latest end over its
/// subtasks), for tasks that ran on cores.
fn task_spans(events: &[TraceEvent], dag: &DagRecorder) -> Vec<Option<(u64, u64)>> {
    let mut spans = vec![None; dag.tasks().len()];
    for e in events.iter().filter(|e| e.kind == EventKind::Exec) {
        if let Some(i) = dag.index_of(e.task) {
            let s: &mut Option<(u64, u64)> = &mut spans[i];
            *s = Some(match *s {
                Some((a, b)) => (a.min(e.start_ns), b.max(e.end_ns)),
                None => (e.start_ns, e.end_ns),
            });
        }
    }
    spans
}

/// The longest chain of task durations through the graph: its tasks (submit indices, first to
/// last) and its length in ns.
pub fn critical_path(events: &[TraceEvent], dag: &DagRecorder) -> (Vec<usize>, u64) {
    let spans = task_spans(events, dag);
    let n = spans.len();
    let mut best = vec![0u64; n];
    let mut prev = vec![usize::MAX; n];
    let mut producers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in dag.edges().iter().filter(|e| e.wait) {
        if e.to < n {
            producers[e.to].push(e.from);
        }
    }
    for t in 0..n {
        let dur = spans[t].map_or(0, |(a, b)| b - a);
        let (p, len) = producers[t]
            .iter()
            .map(|&p| (p, best[p]))
            .max_by_key(|&(_, l)| l)
            .unwrap_or((usize::MAX, 0));
        best[t] = len + dur;
        prev[t] = p;
    }
    let Some((mut t, &len)) = best.iter().enumerate().max_by_key(|&(_, l)| *l) else {
        return (Vec::new(), 0);
    };
    let mut path = vec![t];
    while prev[t] != usize::MAX {
        t = prev[t];
        path.push(t);
    }
    path.reverse();
    (path, len)
}

/// The run as an SVG swimlane: one lane per core, a box per task execution coloured by
/// kernel, the critical path's boxes outlined in red.
pub fn to_swimlane_svg(events: &[TraceEvent], dag: &DagRecorder) -> String {
    const LANE: u64 = 24;
    const LEFT: u64 = 170;
    const WIDTH: u64 = 1200;
    let execs: Vec<&TraceEvent> = events
        .iter()
        .filter(|e| e.kind == EventKind::Exec)
        .collect();
    let lanes: BTreeSet<u32> = execs.iter().map(|e| e.track).collect();
    let lane_of: std::collections::HashMap<u32, u64> = lanes
        .iter()
        .enumerate()
        .map(|(i, &t)| (t, i as u64))
        .collect();
    let t0 = execs.iter().map(|e| e.start_ns).min().unwrap_or(0);
    let t1 = execs
        .iter()
        .map(|e| e.end_ns)
        .max()
        .unwrap_or(1)
        .max(t0 + 1);
    let x = |t: u64| LEFT as f64 + (t - t0) as f64 * WIDTH as f64 / (t1 - t0) as f64;
    let (path, _) = critical_path(events, dag);
    let on_path: BTreeSet<usize> = path.into_iter().collect();
    let palette = [
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    ];
    let height = lanes.len() as u64 * LANE + 20;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"monospace\" font-size=\"11\">\n",
        LEFT + WIDTH + 10
    );
    for (&track, &lane) in &lane_of {
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{}\">{}</text>",
            lane * LANE + 16,
            track_name(track)
        );
    }
    for e in execs {
        let lane = lane_of[&e.track];
        let index = dag.index_of(e.task);
        let critical = index.is_some_and(|i| on_path.contains(&i));
        let (x0, x1) = (x(e.start_ns), x(e.end_ns));
        let _ = writeln!(
            s,
            "<rect class=\"task\" x=\"{x0:.1}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"{}\"><title>task {} kernel {}</title></rect>",
            lane * LANE + 4,
            (x1 - x0).max(0.5),
            LANE - 6,
            palette[e.kernel as usize % palette.len()],
            if critical { "#d00" } else { "none" },
            if critical { 2 } else { 0 },
            index.map_or(-1, |i| i as i64),
            e.kernel
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A plain-text scheduler report: per scheduler thread its passes (loops) and those that made
/// progress, its ready-queue hit rate (pops that found a task), the time its passes spent
/// handling completions and dispatching, its idle time and the subtasks its cores ran; the
/// makespan against the critical path.
pub fn report(events: &[TraceEvent], dag: &DagRecorder, schedulers: u32) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>7} {:>7} {:>9} {:>13} {:>12} {:>10} {:>9} {:>14} {:>13}",
        "thread",
        "loops",
        "passes",
        "ready hit",
        "completion us",
        "dispatch us",
        "idle us",
        "subtasks",
        "completion/task",
        "dispatch/task"
    );
    for t in 0..schedulers {
        let track = SCHEDULER_TRACK + t;
        let total = |k: EventKind| -> (usize, u64) {
            events
                .iter()
                .filter(|e| e.track == track && e.kind == k)
                .fold((0, 0), |(n, d), e| (n + 1, d + (e.end_ns - e.start_ns)))
        };
        let counter = |id: u32| {
            events
                .iter()
                .filter(|e| e.track == track && e.kind == EventKind::Counter && e.kernel == id)
                .map(|e| e.value)
                .sum::<u64>()
        };
        let loops = counter(simpler_aicpu::trace::COUNTER_LOOPS);
        let pops = counter(simpler_aicpu::trace::COUNTER_POPS);
        let hits = counter(simpler_aicpu::trace::COUNTER_POP_HITS);
        let (passes, completion) = total(EventKind::Completion);
        let (_, dispatch) = total(EventKind::Dispatch);
        let (_, idle) = total(EventKind::Idle);
        // Cluster c belongs to scheduler c % schedulers; a core's track is 3c + slot.
        let subtasks = events
            .iter()
            .filter(|e| {
                e.kind == EventKind::Exec
                    && e.track < SCHEDULER_TRACK
                    && (e.track / 3) % schedulers == t
            })
            .count();
        let per = |ns: u64| ns as f64 / 1e3 / subtasks.max(1) as f64;
        let _ = writeln!(
            s,
            "{:<12} {:>7} {:>7} {:>8.1}% {:>13.1} {:>12.1} {:>10.1} {:>9} {:>11.3} us {:>10.3} us",
            format!("scheduler {t}"),
            loops,
            passes,
            100.0 * hits as f64 / pops.max(1) as f64,
            completion as f64 / 1e3,
            dispatch as f64 / 1e3,
            idle as f64 / 1e3,
            subtasks,
            per(completion),
            per(dispatch)
        );
    }
    let execs = events.iter().filter(|e| e.kind == EventKind::Exec);
    let start = execs.clone().map(|e| e.start_ns).min().unwrap_or(0);
    let end = execs.map(|e| e.end_ns).max().unwrap_or(0);
    let (path, critical) = critical_path(events, dag);
    let _ = writeln!(
        s,
        "makespan {:.1} us, critical path {:.1} us over {} tasks ({:.0}% of the makespan)",
        end.saturating_sub(start) as f64 / 1e3,
        critical as f64 / 1e3,
        path.len(),
        100.0 * critical as f64 / end.saturating_sub(start).max(1) as f64
    );
    s
}
