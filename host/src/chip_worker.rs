//! `ChipWorker`: one chip (a simulated device) and the callables registered on it.
//!
//! `init` starts a simulated device once (or `with_transport` takes any other backend);
//! `register_callable` records an orchestration function, its
//! kernel table and its entry signature; `run` stages the entry tensors into GM, builds and
//! adopts the chip entry (`ChipStorageTaskArgs` → `OrchArgs`), runs, and copies every output
//! back. A failed run leaves the worker usable for the next one.
//!
//! Persistent device memory (`DEVICE_MALLOC`): `malloc` / `free` manage GM that survives
//! across runs, `copy_to_device` / `copy_from_device` move bytes in and out of it, and
//! `run` takes entry tensors that already live there ([`ChipArg::Device`]) next to
//! staged host tensors ([`ChipArg::Host`]).

use crate::callable::Callable;
pub use crate::entry::{ChipArg, DeviceTensor, EntryArg, HostTensor};
pub use crate::pipeline::{Finished, RunHandle, PIPELINE_DEPTH};
pub(crate) use crate::pipeline::{Flight, Launch, Submitted, Tail};
use crate::transport::{DeviceTransport, OrchFn, RunOptions, TransportError};
use simpler_aicore::KernelFn;
use simpler_aicpu::{RunError, RunOutcome};
use simpler_core::limits::MAX_TENSOR_DIMS;
use simpler_core::{
    AddressSpace, AdoptError, ArgDirection, BufferHandle, ChipStorageTaskArgs, ChipTensor,
    EntryError, GeometryError, OrchArgs,
};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A registered callable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallableHandle(pub(crate) usize);

/// A callable as the worker keeps it.
pub(crate) struct Registered {
    pub(crate) orch: OrchFn,
    pub(crate) kernels: Arc<[KernelFn]>,
    pub(crate) signature: Vec<ArgDirection>,
    /// The scalars a run must give, when the callable declared them ([`Self::register`]).
    pub(crate) scalars: Option<usize>,
}

/// Why a worker call failed.
#[derive(Debug)]
pub enum WorkerError {
    /// The device could not start or stopped.
    Transport(TransportError),
    /// No callable behind the handle.
    UnknownCallable,
    /// The entry tensors do not match the callable's signature.
    Signature {
        /// Tensors the signature names.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// The run's scalars are not as many as the callable's signature declares.
    Scalars {
        /// Scalars the signature declares.
        expected: usize,
        /// Scalars given.
        got: usize,
    },
    /// A tensor's direction is not the one the callable's signature gives it.
    Direction {
        /// Index of the tensor among the run's arguments.
        index: usize,
        /// The signature's direction.
        expected: ArgDirection,
        /// The direction given.
        got: ArgDirection,
    },
    /// A tensor's data does not match its shape and dtype.
    TensorSize {
        /// Index of the tensor among the run's arguments.
        index: usize,
        /// Bytes its shape needs.
        expected: u64,
        /// Bytes given.
        got: usize,
    },
    /// GM cannot hold the entry tensors, or a persistent allocation.
    OutOfDeviceMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// `free` of an address that is not the start of a live persistent allocation.
    UnknownDeviceAddress {
        /// The address given.
        addr: u64,
    },
    /// A device range (a copy, or a device tensor's view) is not inside one live persistent
    /// allocation.
    DeviceRange {
        /// Start of the range.
        addr: u64,
        /// Bytes in the range.
        len: u64,
    },
    /// The chip entry could not be built.
    Entry(EntryError),
    /// The run failed.
    Run(RunError),
    /// A host-built run (hbg) failed before reaching the device.
    Hbg(crate::hbg::HbgError),
    /// [`RunOptions::host_only`] on a tmr run: only hbg builds a graph on the host.
    HostOnlyNeedsHbg,
    /// A run handle another worker gave.
    ForeignRun,
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport(e) => e.fmt(f),
            Self::UnknownCallable => f.write_str("unknown callable handle"),
            Self::Signature { expected, got } => {
                write!(f, "callable takes {expected} tensors, {got} given")
            }
            Self::Scalars { expected, got } => {
                write!(f, "callable takes {expected} scalars, {got} given")
            }
            Self::Direction {
                index,
                expected,
                got,
            } => write!(
                f,
                "tensor {index} is {got:?}, the callable takes it {expected:?}"
            ),
            Self::TensorSize {
                index,
                expected,
                got,
            } => write!(
                f,
                "tensor {index}: shape needs {expected} bytes, data has {got}"
            ),
            Self::OutOfDeviceMemory { bytes } => write!(f, "GM cannot hold {bytes} more bytes"),
            Self::UnknownDeviceAddress { addr } => {
                write!(f, "{addr:#x} is not the start of a live device allocation")
            }
            Self::DeviceRange { addr, len } => write!(
                f,
                "{len} bytes at {addr:#x} are not inside one live device allocation"
            ),
            Self::Entry(e) => write!(f, "chip entry: {e}"),
            Self::Run(_) => f.write_str("run failed"),
            Self::Hbg(e) => write!(f, "host-built run: {e}"),
            Self::HostOnlyNeedsHbg => {
                f.write_str("host-only mode builds the graph on the host: it needs the hbg runtime")
            }
            Self::ForeignRun => f.write_str("the run handle belongs to another worker"),
        }
    }
}

impl std::error::Error for WorkerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Transport(e) => Some(e),
            Self::Entry(e) => Some(e),
            Self::Run(e) => Some(e),
            Self::Hbg(e) => Some(e),
            Self::UnknownCallable
            | Self::Signature { .. }
            | Self::Scalars { .. }
            | Self::Direction { .. }
            | Self::TensorSize { .. }
            | Self::OutOfDeviceMemory { .. }
            | Self::UnknownDeviceAddress { .. }
            | Self::DeviceRange { .. }
            | Self::HostOnlyNeedsHbg
            | Self::ForeignRun => None,
        }
    }
}

impl From<TransportError> for WorkerError {
    fn from(e: TransportError) -> Self {
        Self::Transport(e)
    }
}

/// What a successful run reports.
#[derive(Clone, Copy, Debug)]
pub struct RunReport {
    /// The device's account of the run.
    pub outcome: RunOutcome,
    /// Host time: staging, the run, copying back.
    pub host: Duration,
    /// The bind's account, phase by phase: `Some` on hbg, `None` on tmr.
    pub bind: Option<crate::hbg::BindReport>,
}

/// One chip, its callables and its persistent device memory.
///
/// Runs go through a depth-two pipeline ([`Self::submit`], [`Self::wait`]): each of its two
/// slots owns an SM mirror, payload records, an entry staging and per-run device memory
/// (staged entry tensors, Graph boundaries and per-bind Definitions, Graph heap blocks),
/// retained across runs; the host builds into a slot only when that slot's previous run has
/// finished on the device. Retained Graph Definitions are shared by both slots (placed once,
/// never evicted while a run in flight may read them). [`Self::run`] is the blocking form and
/// uses slot 0.
pub struct ChipWorker {
    pub(crate) device: Box<dyn DeviceTransport>,
    pub(crate) callables: Vec<Registered>,
    /// Per pipeline slot, the hbg runtime's retained host mirror (built at the slot's first
    /// host-built run).
    pub(crate) hbg: [Option<Box<crate::hbg::Mirror>>; PIPELINE_DEPTH],
    /// The slot of the last hbg bind (whose commit [`Self::last_graph_commit`] reports).
    pub(crate) last_hbg_slot: Option<usize>,
    /// The Graph recorder pool, started when the first callable is registered.
    pub(crate) recorders: Option<crate::record::RecorderPool>,
    /// Live persistent allocations: start → bytes.
    persistent: BTreeMap<u64, u64>,
    /// Per pipeline slot, the entry staging, retained across runs (held by the slot's run
    /// while it is in flight).
    pub(crate) staging: [Option<Box<Staging>>; PIPELINE_DEPTH],
    /// How Graph Definitions are retained across binds.
    pub(crate) retention: crate::hbg::GraphRetention,
    /// The retained Graph Definitions (lent to the mirror a bind builds into).
    pub(crate) kept: crate::hbg::Kept,
    /// How whole binds are replayed.
    pub(crate) replay: crate::hbg::BindReplay,
    /// The image a verified replay compares with (kept across binds).
    pub(crate) replay_check: Vec<u8>,
    /// Runs submitted and not yet collected, oldest first.
    pub(crate) runs: std::collections::VecDeque<Submitted>,
    /// The next run's sequence number.
    pub(crate) next_run: u64,
    /// This worker's identity, so a run handle of another worker is refused.
    pub(crate) id: u64,
}

/// One run's entry: the chip arguments, their adoption for the orchestration, and where each
/// host tensor was placed in GM (`None` for device tensors).
#[derive(Default)]
pub(crate) struct Staging {
    pub(crate) chip: Box<ChipStorageTaskArgs>,
    pub(crate) orch_args: Box<OrchArgs>,
    pub(crate) staged: Vec<Option<u64>>,
}

impl ChipWorker {
    /// Starts a simulated device of `config`.
    #[cfg(feature = "sim")]
    pub fn init(config: simpler_sim::DeviceConfig) -> Result<Self, WorkerError> {
        let device = simpler_sim::Device::start(config).map_err(TransportError::from)?;
        Ok(Self::with_transport(Box::new(device)))
    }

    /// A worker over any device backend.
    pub fn with_transport(device: Box<dyn DeviceTransport>) -> Self {
        static WORKERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self {
            device,
            callables: Vec::new(),
            hbg: [None, None],
            last_hbg_slot: None,
            recorders: None,
            persistent: BTreeMap::new(),
            staging: [None, None],
            retention: crate::hbg::GraphRetention::default(),
            kept: crate::hbg::Kept::default(),
            replay: crate::hbg::BindReplay::default(),
            replay_check: Vec::new(),
            runs: std::collections::VecDeque::new(),
            next_run: 0,
            id: WORKERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The device's platform name.
    pub fn platform(&self) -> &'static str {
        self.device.platform()
    }

    /// Stops the device and drops the callables (and with them every persistent allocation),
    /// freeing the retained Graph Definitions' host and device copies first.
    pub fn finalize(mut self) {
        if let Err(e) = self.forget_graphs() {
            log::warn!("finalize: the retained Graph Definitions could not be freed: {e}");
        }
        drop(self);
    }

    /// Allocates `bytes` of persistent device memory (`DEVICE_MALLOC`, 0 taken as 1 byte): it
    /// keeps its contents across runs until [`Self::free`]. Per-run staging never overlaps
    /// it, and the last run's staging (dead once the run returned) does not hold it back.
    pub fn malloc(&mut self, bytes: u64) -> Result<u64, WorkerError> {
        // The staged tensors of a slot with no run in flight are still bump-allocated on the
        // device; they are of no use once that run ended, and would keep a large malloc from
        // fitting. A slot whose run is in flight keeps its memory.
        for slot in 0..PIPELINE_DEPTH {
            if !self.slot_busy(slot) && (slot == 0 || self.device.pipelines()) {
                self.device.free_slot(slot)?;
            }
        }
        let addr = self
            .device
            .malloc(bytes)?
            .ok_or(WorkerError::OutOfDeviceMemory { bytes })?;
        self.persistent.insert(addr, bytes.max(1));
        Ok(addr)
    }

    /// Releases the persistent allocation that starts at `addr`.
    pub fn free(&mut self, addr: u64) -> Result<(), WorkerError> {
        if !self.persistent.contains_key(&addr) {
            return Err(WorkerError::UnknownDeviceAddress { addr });
        }
        let freed = self.device.free(addr)?;
        self.persistent.remove(&addr);
        if freed {
            Ok(())
        } else {
            Err(WorkerError::UnknownDeviceAddress { addr })
        }
    }

    /// Copies `data` to device memory at `addr`; the range must lie inside one live
    /// persistent allocation.
    pub fn copy_to_device(&mut self, addr: u64, data: &[u8]) -> Result<(), WorkerError> {
        let len = data.len() as u64;
        self.check_range(addr, len)?;
        if self.device.copy_to_device(addr, data)? {
            Ok(())
        } else {
            Err(WorkerError::DeviceRange { addr, len })
        }
    }

    /// Fills `out` from device memory at `addr`; the range must lie inside one live
    /// persistent allocation.
    pub fn copy_from_device(&mut self, addr: u64, out: &mut [u8]) -> Result<(), WorkerError> {
        let len = out.len() as u64;
        self.check_range(addr, len)?;
        if self.device.copy_from_device(addr, out)? {
            Ok(())
        } else {
            Err(WorkerError::DeviceRange { addr, len })
        }
    }

    /// Whether `[addr, addr + len)` lies inside one live persistent allocation (an empty
    /// range must still start inside one).
    fn check_range(&self, addr: u64, len: u64) -> Result<(), WorkerError> {
        let inside = self
            .persistent
            .range(..=addr)
            .next_back()
            .is_some_and(|(&start, &bytes)| {
                let end = start.saturating_add(bytes);
                addr < end && addr.checked_add(len).is_some_and(|e| e <= end)
            });
        if inside {
            Ok(())
        } else {
            Err(WorkerError::DeviceRange { addr, len })
        }
    }

    /// Registers an orchestration function with its kernel table (indexed by kernel id) and
    /// the directions of the tensors it takes.
    pub fn register_callable(
        &mut self,
        orch: OrchFn,
        kernels: Vec<KernelFn>,
        signature: Vec<ArgDirection>,
    ) -> CallableHandle {
        // Recorder threads park from registration on, so a bind's first Graph does not pay
        // for starting them.
        self.recorders
            .get_or_insert_with(crate::record::RecorderPool::start);
        self.callables.push(Registered {
            orch,
            kernels: kernels.into(),
            signature,
            scalars: None,
        });
        CallableHandle(self.callables.len() - 1)
    }

    /// Registers a [`Callable`]: an orchestration with its kernel table and signature. A run
    /// of it must give the signature's tensors, with their directions, and exactly its scalars
    /// when it declares them ([`Callable::new`]).
    pub fn register(&mut self, callable: Callable) -> CallableHandle {
        let Callable {
            orch,
            kernels,
            tensors,
            scalars,
        } = callable;
        let handle = self.register_callable(orch, kernels, tensors);
        self.callables[handle.0].scalars = scalars;
        handle
    }

    /// Registers `callable` again in `handle`'s place (its orchestration, kernels or
    /// signature changed): the Graph Definitions retained for the old one are dropped, host
    /// and device copies, so its next bind records every Graph again.
    pub fn reregister(
        &mut self,
        handle: CallableHandle,
        callable: Callable,
    ) -> Result<(), WorkerError> {
        if handle.0 >= self.callables.len() {
            return Err(WorkerError::UnknownCallable);
        }
        self.forget_graphs_of(handle)?;
        let Callable {
            orch,
            kernels,
            tensors,
            scalars,
        } = callable;
        self.callables[handle.0] = Registered {
            orch,
            kernels: kernels.into(),
            signature: tensors,
            scalars,
        };
        Ok(())
    }

    /// Runs `handle` with entry tensors `args` and `scalars`; OUT and INOUT tensors receive
    /// the results. A failed run leaves the worker usable and the host tensors as they were.
    ///
    /// `args` are [`ChipArg`]s, or [`HostTensor`]s when all of them are host bytes. A host
    /// tensor is staged in per-run GM, the same GM every run with the same entry (IN and INOUT
    /// copied in, OUT and INOUT copied back into the tensor's own bytes; an OUT tensor's
    /// staging starts every run zeroed, its host bytes unread); a device tensor is used in
    /// place, and its whole view must lie inside one live persistent allocation
    /// ([`WorkerError::DeviceRange`] otherwise). A device tensor with no dimensions,
    /// more than the chip allows, or strides not matching its shape is refused as an adoption
    /// error of its rank.
    ///
    /// `options` choose the runtime and what is recorded ([`RunOptions`]):
    /// - [`Runtime::Tmr`](crate::Runtime::Tmr) (the default): the device runs the orchestration function beside its
    ///   schedulers; the hook sees every submitted task (for example a
    ///   [`crate::dag::DagRecorder`]); a trace gets the device's events and three host spans
    ///   (staging, the run, copying back). The report's `bind` is `None`.
    ///   [`RunOptions::host_only`] is refused ([`WorkerError::HostOnlyNeedsHbg`]).
    /// - [`Runtime::Hbg`](crate::Runtime::Hbg): the orchestration runs here, on the host, into the retained mirror;
    ///   the device receives the compact live image and only schedules ([`crate::hbg`] lists
    ///   the phases). The report's `bind` is `Some`. With `host_only` the bind stops after
    ///   building the image: nothing runs, no output is written, the outcome counts the tasks
    ///   built. A trace gets the device's events (placed from the start of the device call)
    ///   and one span per bind phase on the host track.
    pub fn run<A: EntryArg>(
        &mut self,
        handle: CallableHandle,
        args: &mut [A],
        scalars: &[u64],
        options: RunOptions,
    ) -> Result<RunReport, WorkerError> {
        // The blocking form of `submit` + `wait` in slot 0, on the caller's slice: runs
        // submitted before it end first (their results stay for `wait`).
        self.settle_all();
        A::as_chip_args(args, |args| {
            match self.launch(0, handle, args, scalars, options)? {
                Launch::Done(report) => Ok(report),
                Launch::Running(flight) => self.finish(*flight, args),
            }
        })
    }

    /// The tmr run of [`Self::run`] in pipeline slot `slot`, up to the device: the entry
    /// staged and copied in, the run launched.
    pub(crate) fn launch_tmr(
        &mut self,
        slot: usize,
        handle: CallableHandle,
        args: &mut [ChipArg],
        scalars: &[u64],
        options: RunOptions,
    ) -> Result<Launch, WorkerError> {
        let start = Instant::now();
        let mut staging = self.staging[slot].take().unwrap_or_default();
        self.prepare(slot, handle, args, scalars, true, &mut staging)?;
        let callable = &self.callables[handle.0];
        let sink = options.trace.clone();
        let run_start = start.elapsed();
        // The orchestration reads the adopted entry on the device: the job takes a copy, so
        // the slot's staging keeps its own for the next run.
        let orch_args = Box::new(*staging.orch_args);
        let pending = self.device.launch(
            callable.orch.clone(),
            callable.kernels.clone(),
            orch_args,
            options,
        )?;
        Ok(Launch::Running(Box::new(Flight {
            pending,
            slot,
            staging,
            kept_bind: None,
            tail: Tail::Tmr {
                start,
                run_start,
                sink,
            },
        })))
    }

    /// The end of a launched tmr run: its outcome checked, the outputs copied back, the host's
    /// spans traced.
    pub(crate) fn finish_tmr(
        &mut self,
        outcome: RunOutcome,
        args: &mut [ChipArg],
        staged: &[Option<u64>],
        start: Instant,
        run_start: Duration,
        sink: Option<crate::transport::TraceSink>,
    ) -> Result<RunReport, WorkerError> {
        let run_end = start.elapsed();
        if let Err(e) = outcome.result {
            return Err(WorkerError::Run(e));
        }
        self.copy_back(args, staged)?;
        let host = start.elapsed();
        if let Some(sink) = sink {
            // The host's phases: staging, the run, copying back.
            let marks = [Duration::ZERO, run_start, run_end, host];
            crate::trace::add_host_spans(
                &sink,
                run_start,
                (0..3).map(|k| (k as u32, marks[k], marks[k + 1])),
            );
        }
        Ok(RunReport {
            outcome,
            host,
            bind: None,
        })
    }

    /// Checks `args` against `handle`'s signature, stages every host tensor in per-run GM,
    /// and adopts the chip entry. Returns the entry and where each host tensor was staged
    /// (`None` for a device tensor).
    ///
    /// With `copy` false the host tensors get their GM but not their contents: the caller
    /// copies them in later with [`Self::copy_in`] (hbg does, after building the graph, so the
    /// orchestration does not run on caches the inputs just flushed).
    /// The entry goes into `out`, whose storage is reused (a retained one makes this allocate
    /// nothing).
    pub(crate) fn prepare(
        &mut self,
        slot: usize,
        handle: CallableHandle,
        args: &[ChipArg],
        scalars: &[u64],
        copy: bool,
        out: &mut Staging,
    ) -> Result<(), WorkerError> {
        let callable = self
            .callables
            .get(handle.0)
            .ok_or(WorkerError::UnknownCallable)?;
        if callable.signature.len() != args.len() {
            return Err(WorkerError::Signature {
                expected: callable.signature.len(),
                got: args.len(),
            });
        }
        if let Some(expected) = callable.scalars.filter(|&n| n != scalars.len()) {
            return Err(WorkerError::Scalars {
                expected,
                got: scalars.len(),
            });
        }
        for (index, (t, &expected)) in args.iter().zip(&callable.signature).enumerate() {
            if t.dir() != expected {
                return Err(WorkerError::Direction {
                    index,
                    expected,
                    got: t.dir(),
                });
            }
        }
        self.device.free_slot(slot)?;
        let Staging {
            chip,
            orch_args,
            staged,
        } = out;
        chip.clear();
        staged.clear();
        for (index, arg) in args.iter().enumerate() {
            let (c, at) = match arg {
                ChipArg::Host(t) => {
                    let addr = self.stage(slot, index, t)?;
                    let c = ChipTensor::contiguous(addr, &t.shapes, t.dtype, AddressSpace::Device);
                    (c, Some(addr))
                }
                ChipArg::Device(t) => (self.device_view(index, t)?, None),
            };
            chip.push_tensor(c)
                .map_err(|e| WorkerError::Entry(EntryError::Args(e)))?;
            staged.push(at);
        }
        for &s in scalars {
            chip.push_scalar(s)
                .map_err(|e| WorkerError::Entry(EntryError::Args(e)))?;
        }
        orch_args.adopt(chip).map_err(WorkerError::Entry)?;
        if copy {
            Self::copy_in(&*self.device, args, staged)?;
        }
        Ok(())
    }

    /// Copies every IN and INOUT host tensor to where [`Self::prepare`] placed it (without
    /// copying), straight from the tensor's own bytes; zeroes the staging of every OUT tensor.
    ///
    /// An OUT tensor's host bytes are not sent: the callable does not read them. Its staging is
    /// the same GM every run (see [`Self::stage`]), so it still holds the previous run's
    /// output; zeroing it keeps a kernel that leaves part of its output unwritten from handing
    /// back the previous run's values as this run's. A pure OUT starts every run as it starts
    /// the first one, on fresh (zeroed) GM.
    pub(crate) fn copy_in(
        device: &dyn DeviceTransport,
        args: &[ChipArg],
        staged: &[Option<u64>],
    ) -> Result<(), WorkerError> {
        for (arg, at) in args.iter().zip(staged) {
            if let (ChipArg::Host(t), Some(addr)) = (arg, *at) {
                let copied = if t.dir == ArgDirection::Out {
                    zero_device(device, addr, t.data.len())?
                } else {
                    device.copy_to_device(addr, &t.data)?
                };
                if !copied {
                    return Err(WorkerError::OutOfDeviceMemory {
                        bytes: t.data.len() as u64,
                    });
                }
            }
        }
        Ok(())
    }

    /// Copies every OUT and INOUT host tensor back from where it was staged, into the tensor's
    /// own bytes (no allocation). IN tensors are not copied back: a run leaves their host bytes
    /// as they were, whatever the kernels did to the staged copy.
    pub(crate) fn copy_back(
        &self,
        args: &mut [ChipArg],
        staged: &[Option<u64>],
    ) -> Result<(), WorkerError> {
        for (arg, at) in args.iter_mut().zip(staged) {
            if let (ChipArg::Host(t), Some(addr)) = (arg, *at) {
                if t.dir != ArgDirection::In && !self.device.copy_from_device(addr, &mut t.data)? {
                    return Err(WorkerError::DeviceRange {
                        addr,
                        len: t.data.len() as u64,
                    });
                }
            }
        }
        Ok(())
    }

    /// Places host tensor `index` in per-run GM (its contents go in with [`Self::copy_in`]).
    ///
    /// Per-run GM is a bump that starts over at every run ([`Self::prepare`] frees it first),
    /// so runs with the same entry place every tensor at the same address: the staging buffers
    /// are kept across runs, no run allocates fresh device memory, and on the simulator the
    /// pages behind them stay resident (no page faults, no clearing by the OS).
    fn stage(&self, slot: usize, index: usize, t: &HostTensor) -> Result<u64, WorkerError> {
        let numel: u64 = t.shapes.iter().map(|&s| s as u64).product();
        let bytes = numel * t.dtype.elem_size() as u64;
        if bytes != t.data.len() as u64 {
            return Err(WorkerError::TensorSize {
                index,
                expected: bytes,
                got: t.data.len(),
            });
        }
        let addr = self
            .device
            .alloc_in(slot, bytes.max(1))?
            .ok_or(WorkerError::OutOfDeviceMemory { bytes })?;
        Ok(addr)
    }

    /// The chip tensor of device tensor `index`, its view checked against the live persistent
    /// allocations.
    fn device_view(&self, index: usize, t: &DeviceTensor) -> Result<ChipTensor, WorkerError> {
        let rank = t.shapes.len();
        if rank == 0 || rank > MAX_TENSOR_DIMS || t.strides.len() != rank {
            return Err(WorkerError::Entry(EntryError::Adopt {
                index,
                error: AdoptError::Geometry(GeometryError::NDims {
                    value: u32::try_from(rank).unwrap_or(u32::MAX),
                    limit: MAX_TENSOR_DIMS as u32,
                }),
            }));
        }
        let mut c = ChipTensor {
            ndims: rank as u32,
            dtype: t.dtype.raw(),
            address_space: AddressSpace::Device as u8,
            ..ChipTensor::default()
        };
        c.shapes[..rank].copy_from_slice(&t.shapes);
        c.strides[..rank].copy_from_slice(&t.strides);
        let len = c.extent_elem().saturating_mul(t.dtype.elem_size() as u64);
        self.check_range(t.addr, len)?;
        c.buffer = BufferHandle {
            addr: t.addr,
            size: len,
        };
        Ok(c)
    }
}

/// Zeroes `len` bytes of GM at `addr` from a static block of zeros (no allocation); `false`
/// when the range is outside GM.
fn zero_device(device: &dyn DeviceTransport, addr: u64, len: usize) -> Result<bool, WorkerError> {
    static ZEROS: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(ZEROS.len());
        if !device.copy_to_device(addr + done as u64, &ZEROS[..n])? {
            return Ok(false);
        }
        done += n;
    }
    Ok(true)
}
