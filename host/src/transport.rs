//! How the host reaches a device: allocate and copy GM, run a job. The simulator is the
//! backend behind the default `sim` feature; an onboard backend implements the same trait.

use simpler_aicore::KernelFn;
use simpler_aicpu::{Rt, RtError, RunOutcome, SubmitHook, TraceEvent};
use simpler_core::OrchArgs;
use std::fmt;
use std::sync::Arc;

/// An orchestration function, as the host registers it.
pub type OrchFn = Arc<dyn Fn(&mut Rt<'_, '_>) -> Result<(), RtError> + Send + Sync>;

/// A submit hook shared with the device for one run.
pub type SharedHook = Arc<std::sync::Mutex<dyn SubmitHook + Send>>;

/// Where a traced run's events go.
pub type TraceSink = Arc<std::sync::Mutex<Vec<TraceEvent>>>;

/// What a run records besides its results.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Sees every submitted task.
    pub hook: Option<SharedHook>,
    /// Receives the run's trace events.
    pub trace: Option<TraceSink>,
}

/// The device did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The device could not be started: why.
    Start(String),
    /// The device stopped.
    Stopped,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Start(why) => write!(f, "device could not start: {why}"),
            Self::Stopped => f.write_str("device stopped"),
        }
    }
}

/// A device as the host drives it.
pub trait DeviceTransport: Send {
    /// The platform's name (`a2a3sim`, `a5sim`, ...).
    fn platform(&self) -> &'static str;
    /// Allocates `bytes` of GM for the current run; `None` when GM is full. Never overlaps a
    /// live persistent allocation.
    fn alloc(&self, bytes: u64) -> Result<Option<u64>, TransportError>;
    /// Releases every per-run allocation; persistent allocations are kept.
    fn free_all(&self) -> Result<(), TransportError>;
    /// Allocates `bytes` of persistent GM (`DEVICE_MALLOC`), kept across runs and
    /// [`Self::free_all`] until [`Self::free`]; 0 is taken as 1 byte; `None` when it does
    /// not fit.
    fn malloc(&self, bytes: u64) -> Result<Option<u64>, TransportError>;
    /// Releases the persistent allocation starting at `addr`; `false` when `addr` is not the
    /// start of a live persistent allocation.
    fn free(&self, addr: u64) -> Result<bool, TransportError>;
    /// Copies `data` to GM at `addr`; `false` when the range is outside GM.
    fn copy_to_device(&self, addr: u64, data: Vec<u8>) -> Result<bool, TransportError>;
    /// Copies `len` bytes of GM at `addr`; `None` when the range is outside GM.
    fn copy_from_device(&self, addr: u64, len: usize) -> Result<Option<Vec<u8>>, TransportError>;
    /// Runs an orchestration function with its kernel table and adopted entry arguments,
    /// recording what `options` ask for.
    fn run(
        &self,
        orch: OrchFn,
        kernels: Arc<[KernelFn]>,
        args: Box<OrchArgs>,
        options: RunOptions,
    ) -> Result<RunOutcome, TransportError>;
}

#[cfg(feature = "sim")]
mod sim {
    use super::*;
    use simpler_sim::{Device, DeviceError, Job};

    impl From<DeviceError> for TransportError {
        fn from(e: DeviceError) -> Self {
            match e {
                DeviceError::Stopped => Self::Stopped,
                other => Self::Start(format!("{other:?}")),
            }
        }
    }

    impl DeviceTransport for Device {
        fn platform(&self) -> &'static str {
            self.config().topology.name()
        }
        fn alloc(&self, bytes: u64) -> Result<Option<u64>, TransportError> {
            Ok(Device::alloc(self, bytes)?)
        }
        fn free_all(&self) -> Result<(), TransportError> {
            Ok(Device::free_all(self)?)
        }
        fn malloc(&self, bytes: u64) -> Result<Option<u64>, TransportError> {
            Ok(Device::malloc(self, bytes)?)
        }
        fn free(&self, addr: u64) -> Result<bool, TransportError> {
            Ok(Device::free(self, addr)?)
        }
        fn copy_to_device(&self, addr: u64, data: Vec<u8>) -> Result<bool, TransportError> {
            Ok(self.write(addr, data)?)
        }
        fn copy_from_device(
            &self,
            addr: u64,
            len: usize,
        ) -> Result<Option<Vec<u8>>, TransportError> {
            Ok(self.read(addr, len)?)
        }
        fn run(
            &self,
            orch: OrchFn,
            kernels: Arc<[KernelFn]>,
            args: Box<OrchArgs>,
            options: RunOptions,
        ) -> Result<RunOutcome, TransportError> {
            Ok(Device::run(
                self,
                Job {
                    orch,
                    kernels,
                    args,
                    hook: options.hook,
                    trace: options.trace,
                },
            )?)
        }
    }
}
