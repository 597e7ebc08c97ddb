//! The callables a Worker runs: chip callables (an orchestration function and its kernels,
//! run on a chip child's own device) and SUB callables (host functions run in a SUB child),
//! their ids, their registration before `init()`, and the digest a task frame names one by.
//! Its own file because the callable table is what crosses the fork: a child resolves every
//! task's digest against the copy it inherited, and nothing else here does.

use super::import::MappedArgs;
use super::worker::{Lifecycle, Worker};
use super::L3Error;
use crate::callable::Callable;
use std::sync::Arc;

/// A host function a SUB child runs: it receives the task's mapped tensors and scalars.
pub type SubFn = Arc<dyn Fn(&mut MappedArgs) -> Result<(), String> + Send + Sync>;

/// A chip callable registered on a Worker (valid only on that Worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChipCallableId {
    /// The serial of the Worker that registered it.
    pub(super) worker: u64,
    /// Its index in that Worker's chip callable table.
    pub(super) index: usize,
}

/// A SUB callable registered on a Worker (valid only on that Worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubCallableId {
    /// The serial of the Worker that registered it.
    pub(super) worker: u64,
    /// Its index in that Worker's SUB callable table.
    pub(super) index: usize,
}

/// A chip callable as the Worker keeps it (and every child inherits it at fork): what a chip
/// child registers on its own `ChipWorker` at start-up, and the digest task frames name it by.
// Without a device backend (no `sim` feature) no chip child starts, so nothing reads these.
#[cfg_attr(not(feature = "sim"), allow(dead_code))]
pub(super) struct ChipCallable {
    pub(super) name: String,
    pub(super) callable: Callable,
    pub(super) digest: [u8; 32],
}

/// A SUB callable as the Worker keeps it (and every child inherits it at fork), with the
/// digest task frames name it by.
pub(super) struct SubCallable {
    pub(super) name: String,
    pub(super) f: SubFn,
    pub(super) digest: [u8; 32],
}

/// 64-bit FNV-1a over `bytes`, with the standard offset basis `0xcbf2_9ce4_8422_2325` and
/// prime `0x100_0000_01b3` (unlike core's Graph keys, which hash from a different basis).
fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The 32-byte digest a task frame names its callable by: kind (1 chip, 2 SUB), the index
/// (u32 LE), the FNV-1a hash of the name (u64 LE), zeros. A child accepts a digest only if it
/// matches an entry of the table it inherited.
pub(super) fn digest(kind: u8, index: usize, name: &str) -> [u8; 32] {
    let mut d = [0u8; 32];
    d[0] = kind;
    d[1..5].copy_from_slice(&(index as u32).to_le_bytes());
    d[5..13].copy_from_slice(&fnv1a_64(name.as_bytes()).to_le_bytes());
    d
}

impl Worker {
    /// Registers a chip callable (before `init()`): an orchestration with its kernel table and
    /// signature, as a chip's [`crate::ChipWorker::register`] takes it.
    pub fn register_chip(
        &mut self,
        name: &str,
        callable: Callable,
    ) -> Result<ChipCallableId, L3Error> {
        if self.lifecycle != Lifecycle::New {
            return Err(L3Error::RegisterAfterInit);
        }
        let index = self.chip_callables.len();
        self.chip_callables.push(ChipCallable {
            name: name.to_string(),
            callable,
            digest: digest(1, index, name),
        });
        Ok(ChipCallableId {
            worker: self.serial,
            index,
        })
    }

    /// Registers a SUB callable (before `init()`).
    pub fn register_sub(&mut self, name: &str, f: SubFn) -> Result<SubCallableId, L3Error> {
        if self.lifecycle != Lifecycle::New {
            return Err(L3Error::RegisterAfterInit);
        }
        let index = self.sub_callables.len();
        self.sub_callables.push(SubCallable {
            name: name.to_string(),
            f,
            digest: digest(2, index, name),
        });
        Ok(SubCallableId {
            worker: self.serial,
            index,
        })
    }
}
