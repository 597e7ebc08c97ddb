//! `ChipWorker`: one chip (a simulated device) and the callables registered on it.
//!
//! `init` starts a simulated device once (or `with_transport` takes any other backend);
//! `register_callable` records an orchestration function, its
//! kernel table and its entry signature; `run` stages the entry tensors into GM, builds and
//! adopts the chip entry (`ChipStorageTaskArgs` → `OrchArgs`), runs, and copies every output
//! back. A failed run leaves the worker usable for the next one.

use crate::transport::{DeviceTransport, OrchFn, RunOptions, SharedHook, TransportError};
use simpler_aicore::KernelFn;
use simpler_aicpu::{RunError, RunOutcome};
use simpler_core::{
    AddressSpace, ArgDirection, ChipStorageTaskArgs, ChipTensor, DataType, EntryError, OrchArgs,
};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A host tensor passed to a run: its bytes, shape and element type, and how the callable
/// uses it (IN: copied to the device; OUT: copied back; INOUT: both).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Row-major bytes.
    pub data: Vec<u8>,
    /// Shape.
    pub shapes: Vec<u32>,
    /// Element type.
    pub dtype: DataType,
    /// How the callable uses it.
    pub dir: ArgDirection,
}

impl HostTensor {
    /// An f32 tensor of `shapes` holding `values`.
    pub fn f32(values: &[f32], shapes: &[u32], dir: ArgDirection) -> Self {
        Self {
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            shapes: shapes.to_vec(),
            dtype: DataType::Float32,
            dir,
        }
    }

    /// The data read as f32 values.
    pub fn to_f32(&self) -> Vec<f32> {
        self.data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}

/// A registered callable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallableHandle(usize);

struct Callable {
    orch: OrchFn,
    kernels: Arc<[KernelFn]>,
    signature: Vec<ArgDirection>,
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
    /// A tensor's direction is not the one the callable's signature gives it.
    Direction {
        /// The tensor.
        index: usize,
        /// The signature's direction.
        expected: ArgDirection,
        /// The direction given.
        got: ArgDirection,
    },
    /// A tensor's data does not match its shape and dtype.
    TensorSize {
        /// The tensor.
        index: usize,
        /// Bytes its shape needs.
        expected: u64,
        /// Bytes given.
        got: usize,
    },
    /// GM cannot hold the entry tensors.
    OutOfDeviceMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The chip entry could not be built.
    Entry(EntryError),
    /// The run failed.
    Run(RunError),
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport(e) => e.fmt(f),
            Self::UnknownCallable => f.write_str("unknown callable handle"),
            Self::Signature { expected, got } => {
                write!(f, "callable takes {expected} tensors, {got} given")
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
            Self::Entry(e) => write!(f, "chip entry: {e}"),
            Self::Run(e) => write!(f, "run failed: {e:?}"),
        }
    }
}

impl std::error::Error for WorkerError {}

impl From<TransportError> for WorkerError {
    fn from(e: TransportError) -> Self {
        Self::Transport(e)
    }
}

/// Puts the device's events on the host's clock (they count from the device run's start) and
/// adds the host's phases: staging, the run, copying back.
fn record_host_phases(sink: &crate::transport::TraceSink, marks: [Duration; 4]) {
    use simpler_aicpu::trace::HOST_TRACK;
    use simpler_aicpu::{EventKind, TraceEvent};
    let ns = |d: Duration| d.as_nanos() as u64;
    let shift = ns(marks[1]);
    let mut events = sink.lock().unwrap_or_else(|e| e.into_inner());
    for e in events.iter_mut() {
        e.start_ns += shift;
        e.end_ns += shift;
    }
    for phase in 0..3 {
        events.push(TraceEvent {
            track: HOST_TRACK,
            kind: EventKind::Host,
            task: simpler_core::TaskId::INVALID,
            kernel: phase as u32,
            start_ns: ns(marks[phase]),
            end_ns: ns(marks[phase + 1]),
            value: 0,
        });
    }
}

/// What a successful run reports.
#[derive(Clone, Copy, Debug)]
pub struct RunReport {
    /// The device's account of the run.
    pub outcome: RunOutcome,
    /// Host time: staging, the run, copying back.
    pub host: Duration,
}

/// One chip and its callables.
pub struct ChipWorker {
    device: Box<dyn DeviceTransport>,
    callables: Vec<Callable>,
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
        Self {
            device,
            callables: Vec::new(),
        }
    }

    /// The device's platform name.
    pub fn platform(&self) -> &'static str {
        self.device.platform()
    }

    /// Stops the device and drops the callables.
    pub fn finalize(self) {
        drop(self);
    }

    /// Registers an orchestration function with its kernel table (indexed by kernel id) and
    /// the directions of the tensors it takes.
    pub fn register_callable(
        &mut self,
        orch: OrchFn,
        kernels: Vec<KernelFn>,
        signature: Vec<ArgDirection>,
    ) -> CallableHandle {
        self.callables.push(Callable {
            orch,
            kernels: kernels.into(),
            signature,
        });
        CallableHandle(self.callables.len() - 1)
    }

    /// Runs `handle` with `tensors` and `scalars`; OUT and INOUT tensors receive the results.
    pub fn run(
        &mut self,
        handle: CallableHandle,
        tensors: &mut [HostTensor],
        scalars: &[u64],
    ) -> Result<RunReport, WorkerError> {
        self.run_with(handle, tensors, scalars, RunOptions::default())
    }

    /// [`Self::run`], showing every submitted task to `hook` (for example a
    /// [`crate::dag::DagRecorder`]).
    pub fn run_with_hook(
        &mut self,
        handle: CallableHandle,
        tensors: &mut [HostTensor],
        scalars: &[u64],
        hook: Option<SharedHook>,
    ) -> Result<RunReport, WorkerError> {
        let options = RunOptions { hook, trace: None };
        self.run_with(handle, tensors, scalars, options)
    }

    /// [`Self::run`], recording what `options` ask for (a submit hook, a trace).
    pub fn run_with(
        &mut self,
        handle: CallableHandle,
        tensors: &mut [HostTensor],
        scalars: &[u64],
        options: RunOptions,
    ) -> Result<RunReport, WorkerError> {
        let start = Instant::now();
        let callable = self
            .callables
            .get(handle.0)
            .ok_or(WorkerError::UnknownCallable)?;
        if callable.signature.len() != tensors.len() {
            return Err(WorkerError::Signature {
                expected: callable.signature.len(),
                got: tensors.len(),
            });
        }
        for (index, (t, &expected)) in tensors.iter().zip(&callable.signature).enumerate() {
            if t.dir != expected {
                return Err(WorkerError::Direction {
                    index,
                    expected,
                    got: t.dir,
                });
            }
        }
        self.device.free_all()?;
        let mut chip = Box::<ChipStorageTaskArgs>::default();
        let mut addrs = Vec::with_capacity(tensors.len());
        for (index, t) in tensors.iter().enumerate() {
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
                .alloc(bytes.max(1))?
                .ok_or(WorkerError::OutOfDeviceMemory { bytes })?;
            if t.dir != ArgDirection::Out && !self.device.copy_to_device(addr, t.data.clone())? {
                return Err(WorkerError::OutOfDeviceMemory { bytes });
            }
            let c = ChipTensor::contiguous(addr, &t.shapes, t.dtype, AddressSpace::Device);
            chip.push_tensor(c)
                .map_err(|e| WorkerError::Entry(EntryError::Args(e)))?;
            addrs.push(addr);
        }
        for &s in scalars {
            chip.push_scalar(s)
                .map_err(|e| WorkerError::Entry(EntryError::Args(e)))?;
        }
        let mut args = Box::<OrchArgs>::default();
        args.adopt(&chip).map_err(WorkerError::Entry)?;
        let sink = options.trace.clone();
        let run_start = start.elapsed();
        let outcome = self.device.run(
            callable.orch.clone(),
            callable.kernels.clone(),
            args,
            options,
        )?;
        let run_end = start.elapsed();
        if let Err(e) = outcome.result {
            return Err(WorkerError::Run(e));
        }
        for (t, &addr) in tensors.iter_mut().zip(&addrs) {
            if t.dir != ArgDirection::In {
                if let Some(data) = self.device.copy_from_device(addr, t.data.len())? {
                    t.data = data;
                }
            }
        }
        let host = start.elapsed();
        if let Some(sink) = sink {
            record_host_phases(&sink, [Duration::ZERO, run_start, run_end, host]);
        }
        Ok(RunReport { outcome, host })
    }
}
