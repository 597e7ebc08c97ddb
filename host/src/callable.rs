//! Callables with a signature: an orchestration written against [`Scope`] receives its entry
//! arguments in the shape its callable declares.
//!
//! A [`Signature`] names the direction of each entry tensor and how many scalars follow; its
//! sizes are part of its type, so the orchestration's [`Entry`] has exactly those tensors and
//! scalars (as arrays to destructure), and a signature that disagrees with the orchestration
//! does not compile. [`crate::ChipWorker::register`] keeps the signature, and a run whose
//! arguments do not fit it is refused at its start, before anything is staged
//! ([`crate::WorkerError::Signature`], [`crate::WorkerError::Direction`],
//! [`crate::WorkerError::Scalars`]).
//!
//! ```
//! use simpler_host::prelude::*;
//! use ArgDirection::{In, Out};
//!
//! fn copy(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
//!     let [src, dst] = kernel_args::tensors::<2>(ctx.args)?;
//!     let n = kernel_args::operand(src, 0)?;
//!     kernel_args::operand_of(dst, 1, n)?;
//!     let [x] = stage::carve(ctx.local, [n])?;
//!     stage::load_range(ctx.gm, src, 0, 0, x)?;
//!     stage::store_range(ctx.gm, dst, 1, 0, x)
//! }
//!
//! let mut table = KernelTable::new();
//! let k = table.aiv(copy);
//! let callable = Callable::new(table, Signature::new([In, Out]).scalars::<1>(), move |s, entry| {
//!     let Entry { tensors: [src, dst], scalars: [tag] } = entry;
//!     assert_eq!(tag, 7);
//!     s.task(k).input(src).output_existing(dst).submit().map(drop)
//! });
//! let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
//! let handle = worker.register(callable);
//! let mut tensors = [
//!     HostTensor::f32(&[1.0, 2.0], &[2], In),
//!     HostTensor::f32(&[0.0, 0.0], &[2], Out),
//! ];
//! worker.run(handle, &mut tensors, &[7], RunOptions::default()).expect("the run succeeds");
//! assert_eq!(tensors[1].to_f32(), [1.0, 2.0]);
//! // One scalar short: refused before the run starts.
//! let short = worker.run(handle, &mut tensors, &[], RunOptions::default());
//! assert!(matches!(short, Err(WorkerError::Scalars { expected: 1, got: 0 })));
//! ```

use crate::scope::{Scope, Tensor};
use crate::task::{KernelTable, TaskScalar};
use crate::transport::OrchFn;
use simpler_aicore::KernelFn;
use simpler_aicpu::{Rt, RtError};
use simpler_core::{ArgDirection, TaskTensor};
use std::sync::Arc;

/// The fatal code of an entry that does not fit the signature, which only a run that skipped
/// the worker's check (a callable driven by hand) can reach.
pub const ENTRY_MISMATCH: u32 = 0x656e_0001;

/// What a callable takes: `T` entry tensors with these directions, then `S` scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature<const T: usize, const S: usize> {
    tensors: [ArgDirection; T],
}

impl<const T: usize> Signature<T, 0> {
    /// Entry tensors with these directions, in order, and no scalars.
    pub const fn new(tensors: [ArgDirection; T]) -> Self {
        Self { tensors }
    }
}

impl<const T: usize, const S: usize> Signature<T, S> {
    /// The same tensors, followed by `N` scalars.
    pub const fn scalars<const N: usize>(self) -> Signature<T, N> {
        Signature {
            tensors: self.tensors,
        }
    }

    /// The entry tensors' directions.
    pub fn tensors(&self) -> &[ArgDirection; T] {
        &self.tensors
    }
}

/// A run's entry arguments as the orchestration receives them: the signature's tensors,
/// branded with the orchestration's scope, and its scalars as 64-bit words.
pub struct Entry<'s, const T: usize, const S: usize> {
    /// The entry tensors, in signature order.
    pub tensors: [Tensor<'s>; T],
    /// The entry scalars, in order, as the words the run was given.
    pub scalars: [u64; S],
}

impl<const T: usize, const S: usize> Entry<'_, T, S> {
    /// Scalar `i` read back as `V`, the inverse of how [`TaskScalar`] packs it (so a run given
    /// `2.5f32.to_word()` reads `2.5` here).
    ///
    /// # Panics
    ///
    /// If `i` is not below `S`: the signature is in the same program, so that is a programming
    /// error.
    pub fn scalar<V: TaskScalar>(&self, i: usize) -> V {
        V::from_word(self.scalars[i])
    }
}

/// An orchestration, its kernels and its signature: what [`crate::ChipWorker::register`]
/// takes.
#[derive(Clone)]
pub struct Callable {
    pub(crate) orch: OrchFn,
    pub(crate) kernels: Vec<KernelFn>,
    pub(crate) tensors: Vec<ArgDirection>,
    /// The scalars a run must give; `None` for a [`Self::raw`] callable, which reads its own.
    pub(crate) scalars: Option<usize>,
}

impl Callable {
    /// The orchestration `orch` over `kernels` (the table its kernel handles came from),
    /// taking the entry `signature` declares.
    pub fn new<const T: usize, const S: usize, F>(
        kernels: KernelTable,
        signature: Signature<T, S>,
        orch: F,
    ) -> Self
    where
        F: for<'s> Fn(&mut Scope<'s>, Entry<'s, T, S>) -> Result<(), RtError>
            + Send
            + Sync
            + 'static,
    {
        let orch: OrchFn = Arc::new(move |rt: &mut Rt<'_, '_>| {
            let args = rt.args();
            let tensors = <&[TaskTensor; T]>::try_from(args.tensors());
            let scalars = <&[u64; S]>::try_from(args.scalars());
            let (Ok(&tensors), Ok(&scalars)) = (tensors, scalars) else {
                return Err(rt.report_fatal(ENTRY_MISMATCH));
            };
            Scope::top(rt, |s| {
                let entry = Entry {
                    tensors: tensors.map(Tensor::new),
                    scalars,
                };
                orch(s, entry)
            })
        });
        Self {
            orch,
            kernels: kernels.into_kernels(),
            tensors: signature.tensors.to_vec(),
            scalars: Some(S),
        }
    }

    /// A low-level orchestration on [`Rt`] (a Graph body's form), with its kernel table by id
    /// and the directions of the tensors it takes; the scalars it reads from `rt.args()` are
    /// its own to check, and its tensors carry no scope.
    pub fn raw(orch: OrchFn, kernels: Vec<KernelFn>, signature: Vec<ArgDirection>) -> Self {
        Self {
            orch,
            kernels,
            tensors: signature,
            scalars: None,
        }
    }

    /// The entry tensors' directions.
    pub fn signature(&self) -> &[ArgDirection] {
        &self.tensors
    }

    /// How many scalars a run must give (`None`: not declared, a [`Self::raw`] callable).
    pub fn scalar_count(&self) -> Option<usize> {
        self.scalars
    }

    /// The kernel table, by id.
    pub fn kernels(&self) -> &[KernelFn] {
        &self.kernels
    }
}
