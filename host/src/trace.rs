//! Chrome trace-event JSON (what Perfetto and chrome://tracing open) from a run's events.
//!
//! One track per simulated core (a span per kernel execution, named by the task's submit
//! index and kernel), one per scheduler thread (spans for passes that made progress, and idle
//! waits), and one for the orchestrator (a span per submit). Timestamps are microseconds from
//! the run's start.

use crate::dag::DagRecorder;
use simpler_aicpu::trace::{ORCHESTRATOR_TRACK, SCHEDULER_TRACK};
use simpler_aicpu::{EventKind, TraceEvent};
use std::collections::BTreeSet;
use std::fmt::Write;

/// The track's display name.
pub fn track_name(track: u32) -> String {
    if track >= ORCHESTRATOR_TRACK {
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
    for e in events {
        let index = dag.and_then(|d| d.index_of(e.task));
        let name = match (e.kind, index) {
            (EventKind::Exec, Some(i)) => format!("task {i} k{}", e.kernel),
            (EventKind::Exec, None) => format!("task {:#x} k{}", e.task.0, e.kernel),
            (EventKind::Submit, Some(i)) => format!("submit {i}"),
            (EventKind::Submit, None) => "submit".to_string(),
            (EventKind::Schedule, _) => "schedule".to_string(),
            (EventKind::Idle, _) => "idle".to_string(),
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
