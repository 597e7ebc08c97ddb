//! One key being recorded during a bind: [`Inflight`] is the meeting point of the submitting
//! (orchestration) thread, which begins it with the first invocation's boundary and compares
//! later ones against it, and the recorder thread, which publishes the Definition or the
//! failure; the commit waits on it. Its own file because it is the only state both sides
//! touch, under its lock and its status word.

use super::boundary::{alias_reps, GraphBoundary};
use super::RecordError;
use simpler_core::graph::GRAPH_MAX_TENSOR_ARGS;
use simpler_core::orchestrator::TaskArg;

/// Where an in-flight recording is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InflightStatus {
    /// A recorder thread is on it (or will be).
    Recording = 0,
    /// The Definition is ready.
    Ready = 1,
    /// The recording failed.
    Failed = 2,
}

/// One key being recorded during a bind. The submitting thread creates it (with the deep copy
/// of the first invocation's boundary, which lives here and never in recorder storage) and
/// compares later same-key submissions against that boundary under the lock; the recorder
/// thread reads the boundary, fills the result and publishes the status. Entries are reused
/// across binds, so a steady-state bind allocates nothing for them.
pub struct Inflight {
    status: std::sync::atomic::AtomicU8,
    inner: std::sync::Mutex<InflightInner>,
    cv: std::sync::Condvar,
}

/// An entry's state under its lock: the key, the boundary it was begun with, and what the
/// recording produced.
pub struct InflightInner {
    /// The Graph's full key, as the bind submitted it.
    pub full_key: u64,
    /// The first invocation's deep copy (`None` only before the entry's first use); later
    /// invocations of the key are compared against it.
    pub boundary: Option<GraphBoundary>,
    /// Its alias representatives ([`alias_reps`]), for comparing later invocations.
    pub reps: [u16; GRAPH_MAX_TENSOR_ARGS],
    /// The Definition image, once ready.
    pub image: Vec<u8>,
    /// Why the recording failed, once the status is [`InflightStatus::Failed`].
    pub error: Option<RecordError>,
    /// Which recorder thread recorded it.
    pub recorder: usize,
    /// Time the recorder spent running the body (`record_node`) and building the
    /// Definition (`build_definition`).
    pub times: (std::time::Duration, std::time::Duration),
    /// Heap allocations the recorder thread made for it, from taking the job to publishing
    /// the result ([`crate::alloc_count`]).
    pub allocs: u64,
}

impl Default for InflightInner {
    fn default() -> Self {
        Self {
            full_key: 0,
            boundary: None,
            reps: [0; GRAPH_MAX_TENSOR_ARGS],
            image: Vec::new(),
            error: None,
            recorder: 0,
            times: Default::default(),
            allocs: 0,
        }
    }
}

impl Default for Inflight {
    fn default() -> Self {
        Self {
            status: std::sync::atomic::AtomicU8::new(InflightStatus::Ready as u8),
            inner: std::sync::Mutex::new(InflightInner::default()),
            cv: std::sync::Condvar::new(),
        }
    }
}

impl Inflight {
    /// The status, read without the lock.
    pub fn status(&self) -> InflightStatus {
        match self.status.load(std::sync::atomic::Ordering::Acquire) {
            0 => InflightStatus::Recording,
            1 => InflightStatus::Ready,
            _ => InflightStatus::Failed,
        }
    }

    /// Locks the entry's state (a panic while it was held does not poison it for the rest).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, InflightInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prepares the entry for a new key: copies `boundary` into its retained storage. `reps`
    /// is the boundary's alias relation ([`alias_reps`]) when the caller knows it already (a
    /// retained Definition's boundary that this one matched has the same).
    pub fn begin(
        &self,
        full_key: u64,
        boundary: &[TaskArg],
        scalars: &[u64],
        reps: Option<&[u16; GRAPH_MAX_TENSOR_ARGS]>,
    ) {
        let mut inner = self.lock();
        inner.full_key = full_key;
        let b = inner.boundary.get_or_insert_with(GraphBoundary::default);
        b.assign(boundary.iter().map(|a| (a.tensor, a.tag)), scalars);
        inner.reps = match reps {
            Some(r) => *r,
            None => {
                let mut reps = [0u16; GRAPH_MAX_TENSOR_ARGS];
                alias_reps(&b.tensors, &mut reps);
                reps
            }
        };
        inner.error = None;
        inner.image.clear();
        self.status.store(
            InflightStatus::Recording as u8,
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Prepares the entry for the key it was begun for at an earlier bind, with the same
    /// boundary tensors and tags (the caller has confirmed they are the ones it holds): only
    /// the scalars' values are copied again.
    pub fn begin_same(&self, full_key: u64, scalars: &[u64]) {
        let mut inner = self.lock();
        inner.full_key = full_key;
        if let Some(b) = inner.boundary.as_mut() {
            b.scalars.clear();
            b.scalars.extend_from_slice(scalars);
        }
        inner.error = None;
        inner.image.clear();
        self.status.store(
            InflightStatus::Recording as u8,
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Marks an entry just begun ready without a recording: its Definition is one retained
    /// from an earlier bind, and the commit places that one.
    pub fn ready(&self) {
        self.status.store(
            InflightStatus::Ready as u8,
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Waits until the recording is done.
    pub fn wait(&self) -> InflightStatus {
        let mut inner = self.lock();
        while self.status() == InflightStatus::Recording {
            inner = self.cv.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
        drop(inner);
        self.status()
    }

    /// Publishes the recording's result; `allocs_before` is the recorder thread's allocation
    /// count when it took the job.
    pub(super) fn finish(
        &self,
        recorder: usize,
        times: (std::time::Duration, std::time::Duration),
        allocs_before: u64,
        result: Result<&[u8], RecordError>,
    ) {
        let mut inner = self.lock();
        inner.recorder = recorder;
        inner.times = times;
        let status = match result {
            Ok(image) => {
                inner.image.clear();
                inner.image.extend_from_slice(image);
                InflightStatus::Ready
            }
            Err(e) => {
                inner.error = Some(e);
                InflightStatus::Failed
            }
        };
        inner.allocs = crate::alloc_count::now().saturating_sub(allocs_before);
        self.status
            .store(status as u8, std::sync::atomic::Ordering::Release);
        drop(inner);
        self.cv.notify_all();
    }
}
