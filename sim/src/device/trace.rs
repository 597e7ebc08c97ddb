//! Trace recording: where a traced run's events go ([`TraceSink`]), the fixed per-thread
//! buffer each thread records into (`TraceBuf`), and the submit hook that times the
//! orchestrator's submits (`TracingHook`).
//!
//! Its own file because recording is the one thing every device thread does alike: the
//! orchestrator and each scheduler thread own a `TraceBuf`, fill it without locking or
//! allocating during the run, and append it to the sink once the run ends. Without the crate's
//! `trace` feature no sink is ever armed and every event site folds away.

use super::state::RunState;
use simpler_aicpu::{EventKind, SubmitHook, SubmittedTask, TraceEvent};
use simpler_core::deps::DepFlags;
use simpler_core::TaskId;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where a traced run's events go: every thread appends its buffer when the run ends, so the
/// events are grouped by thread, each thread's in the order it recorded them.
pub type TraceSink = Arc<Mutex<Vec<TraceEvent>>>;

/// Events each thread can hold per run; more are counted as dropped
/// (`RunOutcome::trace_dropped`).
pub const TRACE_EVENTS_PER_THREAD: usize = 1 << 18;

/// A per-thread trace buffer, allocated once at the first traced run and never grown.
pub(super) struct TraceBuf {
    events: Vec<TraceEvent>,
    /// Events that did not fit this run.
    dropped: u64,
}

impl TraceBuf {
    /// An empty buffer that holds no memory until [`Self::arm`].
    pub(super) fn new() -> Self {
        Self {
            events: Vec::new(),
            dropped: 0,
        }
    }

    /// Readies the buffer for a traced run: reserves [`TRACE_EVENTS_PER_THREAD`] events the
    /// first time, empties it every time.
    pub(super) fn arm(&mut self) {
        if self.events.capacity() == 0 {
            self.events.reserve_exact(TRACE_EVENTS_PER_THREAD);
        }
        self.events.clear();
        self.dropped = 0;
    }

    /// Records `e`, or counts it as dropped when the buffer is full (it never grows).
    pub(super) fn push(&mut self, e: TraceEvent) {
        if self.events.len() < self.events.capacity() {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }

    /// Records a span of `kind` on `track` that names no task and no kernel.
    #[inline(always)]
    pub(super) fn span(&mut self, track: u32, kind: EventKind, start_ns: u64, end_ns: u64) {
        self.push(TraceEvent {
            track,
            kind,
            task: TaskId::INVALID,
            kernel: 0,
            start_ns,
            end_ns,
            value: 0,
        });
    }

    /// Appends the run's events to `sink`, adds the dropped count to the run's, and empties the
    /// buffer (keeping its memory).
    pub(super) fn flush(&mut self, state: &RunState, sink: &TraceSink) {
        sink.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(&self.events);
        state
            .trace_dropped
            .fetch_add(self.dropped, Ordering::SeqCst);
        self.events.clear();
    }
}

/// Records the orchestrator's submit spans and passes each task on to the caller's hook.
pub(super) struct TracingHook<'h> {
    /// The caller's hook ([`Job::hook`](super::Job::hook)), when there is one.
    pub(super) inner: Option<&'h mut (dyn SubmitHook + Send + 'static)>,
    /// The orchestrator's buffer.
    pub(super) buf: &'h mut TraceBuf,
    /// The run's start: event times count from it.
    pub(super) epoch: Instant,
    /// When the submit being recorded began, in ns from `epoch`.
    pub(super) started: u64,
}

impl SubmitHook for TracingHook<'_> {
    fn before_submit(&mut self) {
        self.started = self.epoch.elapsed().as_nanos() as u64;
        if let Some(h) = self.inner.as_deref_mut() {
            h.before_submit();
        }
    }
    fn submitted(
        &mut self,
        task: &SubmittedTask<'_>,
        fanin: &mut dyn Iterator<Item = (TaskId, DepFlags)>,
    ) {
        self.buf.push(TraceEvent {
            track: simpler_aicpu::trace::ORCHESTRATOR_TRACK,
            kind: EventKind::Submit,
            task: task.id,
            kernel: 0,
            start_ns: self.started,
            end_ns: self.epoch.elapsed().as_nanos() as u64,
            value: 0,
        });
        if let Some(h) = self.inner.as_deref_mut() {
            h.submitted(task, fanin);
        }
    }
}
