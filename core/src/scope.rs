//! The scope stack: which tasks each open scope holds, and whether dependency inference is on.
//!
//! Every task is submitted inside a scope and holds a reference from it (the [`SCOPE_BIT`] of
//! its fanout count) until the scope ends, so intermediates live at least as long as the scope
//! that produced them. Scope depth selects the ring (`ring_for_depth`). In a MANUAL scope the
//! TensorMap is neither consulted nor updated; an AUTO scope may not open inside a MANUAL one.
//!
//! [`SCOPE_BIT`]: crate::slot::SCOPE_BIT

use crate::ring::{ring_for_depth, MAX_SCOPE_DEPTH};
use crate::task_tensor::TaskId;
use core::fmt;

/// How dependencies are found inside a scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ScopeMode {
    /// Inferred from tensor overlap through the TensorMap.
    #[default]
    Auto,
    /// Only creator edges and explicit dependencies.
    Manual,
}

/// A scope operation that cannot be performed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeError {
    /// More than [`MAX_SCOPE_DEPTH`] nested scopes.
    TooDeep {
        /// The nesting limit, [`MAX_SCOPE_DEPTH`].
        limit: usize,
    },
    /// An AUTO scope inside a MANUAL one.
    AutoInsideManual,
    /// `scope_end` or a submit with no open scope.
    NoOpenScope,
    /// More tasks held by open scopes than the scope list can record.
    TasksOverflow {
        /// The list's capacity.
        capacity: usize,
    },
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TooDeep { limit } => write!(f, "scopes nest deeper than {limit}"),
            Self::AutoInsideManual => {
                f.write_str("an AUTO scope cannot open inside a MANUAL scope")
            }
            Self::NoOpenScope => f.write_str("no scope is open"),
            Self::TasksOverflow { capacity } => {
                write!(f, "open scopes hold more than {capacity} tasks")
            }
        }
    }
}

impl core::error::Error for ScopeError {}

/// The open scopes and the tasks each holds.
pub struct ScopeStack<'a> {
    tasks: &'a mut [u64],
    len: usize,
    begins: [u32; MAX_SCOPE_DEPTH],
    modes: [ScopeMode; MAX_SCOPE_DEPTH],
    depth: usize,
}

impl<'a> ScopeStack<'a> {
    /// An empty stack recording up to `tasks.len()` held tasks.
    pub fn new(tasks: &'a mut [u64]) -> Self {
        Self {
            tasks,
            len: 0,
            begins: [0; MAX_SCOPE_DEPTH],
            modes: [ScopeMode::Auto; MAX_SCOPE_DEPTH],
            depth: 0,
        }
    }

    /// Closes every scope without releasing anything (a new run starts on fresh slots).
    pub fn reset(&mut self) {
        self.len = 0;
        self.depth = 0;
    }

    /// Scopes open now (0 before the first `begin`); the innermost one's depth selects a
    /// submit's ring.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Opens a scope.
    pub fn begin(&mut self, mode: ScopeMode) -> Result<(), ScopeError> {
        if self.depth >= MAX_SCOPE_DEPTH {
            return Err(ScopeError::TooDeep {
                limit: MAX_SCOPE_DEPTH,
            });
        }
        if mode == ScopeMode::Auto && self.is_manual() {
            return Err(ScopeError::AutoInsideManual);
        }
        let (Some(begin), Some(m)) = (
            self.begins.get_mut(self.depth),
            self.modes.get_mut(self.depth),
        ) else {
            return Err(ScopeError::TooDeep {
                limit: MAX_SCOPE_DEPTH,
            });
        };
        *begin = self.len as u32;
        *m = mode;
        self.depth += 1;
        Ok(())
    }

    /// Closes the innermost scope and returns the tasks it held, oldest first.
    pub fn end(&mut self) -> Result<&[u64], ScopeError> {
        if self.depth == 0 {
            return Err(ScopeError::NoOpenScope);
        }
        self.depth -= 1;
        // `depth` never passes MAX_SCOPE_DEPTH (`begin` refuses that) and each begin is at
        // most `len`, at most `tasks.len()` (`push` refuses more): both lookups succeed.
        let begin = self.begins.get(self.depth).map_or(0, |&b| b as usize);
        let end = self.len;
        self.len = begin.min(end);
        Ok(self.tasks.get(begin..end).unwrap_or(&[]))
    }

    /// The ring a task submitted now goes to.
    pub fn ring(&self) -> Result<usize, ScopeError> {
        match self.depth {
            0 => Err(ScopeError::NoOpenScope),
            d => Ok(ring_for_depth(d - 1)),
        }
    }

    /// Whether the innermost scope is MANUAL (MANUAL scopes only nest MANUAL scopes).
    pub fn is_manual(&self) -> bool {
        let innermost = self.depth.checked_sub(1).and_then(|d| self.modes.get(d));
        innermost == Some(&ScopeMode::Manual)
    }

    /// Tasks the innermost scope holds.
    pub fn innermost_len(&self) -> usize {
        match self.depth {
            0 => 0,
            d => self.len - self.begins.get(d - 1).map_or(0, |&b| b as usize),
        }
    }

    /// Records a task in the innermost scope.
    pub fn push(&mut self, task: TaskId) -> Result<(), ScopeError> {
        if self.depth == 0 {
            return Err(ScopeError::NoOpenScope);
        }
        let capacity = self.tasks.len();
        let slot = self
            .tasks
            .get_mut(self.len)
            .ok_or(ScopeError::TasksOverflow { capacity })?;
        *slot = task.0;
        self.len += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_select_rings_and_return_their_tasks() {
        let mut storage = [0u64; 8];
        let mut s = ScopeStack::new(&mut storage);
        assert_eq!(s.ring(), Err(ScopeError::NoOpenScope));
        s.begin(ScopeMode::Auto).unwrap();
        s.push(TaskId(1)).unwrap();
        s.begin(ScopeMode::Manual).unwrap();
        assert_eq!(s.ring(), Ok(1));
        assert!(s.is_manual());
        assert_eq!(s.begin(ScopeMode::Auto), Err(ScopeError::AutoInsideManual));
        s.push(TaskId(2)).unwrap();
        s.push(TaskId(3)).unwrap();
        assert_eq!(s.innermost_len(), 2);
        assert_eq!(s.end().unwrap(), &[2, 3]);
        assert!(!s.is_manual());
        assert_eq!(s.end().unwrap(), &[1]);
        assert_eq!(s.end(), Err(ScopeError::NoOpenScope));
    }

    #[test]
    fn depth_and_capacity_limits_are_errors() {
        let mut storage = [0u64; 1];
        let mut s = ScopeStack::new(&mut storage);
        for _ in 0..MAX_SCOPE_DEPTH {
            s.begin(ScopeMode::Auto).unwrap();
        }
        assert_eq!(s.ring(), Ok(3));
        assert_eq!(
            s.begin(ScopeMode::Auto),
            Err(ScopeError::TooDeep { limit: 64 })
        );
        s.push(TaskId(1)).unwrap();
        assert_eq!(
            s.push(TaskId(2)),
            Err(ScopeError::TasksOverflow { capacity: 1 })
        );
    }
}
