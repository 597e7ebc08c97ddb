//! Waiting for a full resource: what a submit waits for ([`Blocked`]), the caller's policy
//! ([`Waiter`]), and the policy that never waits ([`NoWait`]). Its own file because it is the
//! whole contract between the submit path and whoever runs it (the device's orchestrator
//! thread, a host build, a test).

use crate::task_tensor::TaskId;
use core::fmt;
/// A resource a submit is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The ring's task window is full.
    TaskRing {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
    },
    /// The ring's heap cannot hold the task's outputs yet.
    Heap {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
        /// Bytes the task's outputs need (each output rounded up to 1024).
        bytes: u64,
    },
    /// The ring's dependency pool is full.
    EdgePool {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
    },
    /// The TensorMap's entry pool is full.
    TensorMap {
        /// Free entries the task's inserts need.
        needed: u32,
    },
    /// Not a full resource: the orchestration reads or writes an element of a tensor whose
    /// producer has not completed yet (`Rt::read_element`, `Rt::write_element`).
    Producer {
        /// The task whose completion is awaited.
        task: TaskId,
    },
    /// Not a full resource: the orchestration writes an element of a tensor whose producer
    /// has completed but is still referenced by a consumer that has not completed, or by its
    /// own completion, still under way (`Rt::write_element`). Every such reference is released
    /// inside a task's completion, so whatever wakes a [`Blocked::Producer`] wait (a task
    /// completing) wakes this one too.
    Consumers {
        /// The producer whose consumers are awaited.
        task: TaskId,
    },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TaskRing { ring } => write!(f, "ring {ring}'s task window is full"),
            Self::Heap { ring, bytes } => {
                write!(f, "ring {ring}'s heap cannot hold {bytes} more bytes yet")
            }
            Self::EdgePool { ring } => write!(f, "ring {ring}'s dependency pool is full"),
            Self::TensorMap { needed } => {
                write!(f, "the TensorMap has no room for {needed} more entries")
            }
            Self::Producer { task } => write!(f, "{task} has not completed"),
            Self::Consumers { task } => {
                write!(f, "{task} has consumers that have not completed")
            }
        }
    }
}

/// The caller's waiting policy for a full resource. Return `Ok` to try again (after spinning,
/// blocking on a wakeup, or, in a test, running the scheduler side); return `Err` to give up,
/// which fails the submit with the resource's overflow or deadlock error.
pub trait Waiter {
    /// Called each time a claim fails on `on`.
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp>;

    /// Called after a submit made its task ready at publish (every producer had completed),
    /// once the task is in its ready queue: the place to wake schedulers that may be blocked
    /// waiting for work. A completion that readies a task is the scheduler's own business;
    /// this covers the tasks only the orchestrator can know of. By default, nothing: a
    /// scheduler that never blocks (the firmware's) needs no wake.
    fn made_ready(&mut self) {}
}

impl<W: Waiter + ?Sized> Waiter for &mut W {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        (**self).wait(on)
    }

    fn made_ready(&mut self) {
        (**self).made_ready()
    }
}

/// A [`Waiter`] gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GaveUp;

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the waiter gave up")
    }
}

impl core::error::Error for GaveUp {}

/// A waiter that never waits: every full resource fails the submit at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoWait;

impl Waiter for NoWait {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        Err(GaveUp)
    }
}
