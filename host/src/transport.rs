//! How the host reaches a device: allocate and copy GM, run a job. The simulator is the
//! backend behind the default `sim` feature; an onboard backend implements the same trait.

use simpler_aicore::KernelFn;
use simpler_aicpu::payloads::PayloadsLayout;
use simpler_aicpu::{Rt, RtError, RunOutcome, SubmitHook, TraceEvent};
use simpler_core::image::Usage;
use simpler_core::orchestrator::OrchestratorLayout;
use simpler_core::OrchArgs;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// An orchestration function, as the host registers it.
pub type OrchFn = Arc<dyn Fn(&mut Rt<'_, '_>) -> Result<(), RtError> + Send + Sync>;

/// A submit hook shared with the device for one run.
pub type SharedHook = Arc<std::sync::Mutex<dyn SubmitHook + Send>>;

/// Where a traced run's events go.
pub type TraceSink = Arc<std::sync::Mutex<Vec<TraceEvent>>>;

/// Which runtime runs a callable (see [`crate::ChipWorker::run`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// The device runs the orchestration function itself, beside its schedulers.
    #[default]
    Tmr,
    /// The host runs the orchestration function into a mirror of the device's shared state
    /// and ships the built graph; the device only schedules ([`crate::hbg`]).
    Hbg,
}

/// How [`crate::ChipWorker::run`] runs a callable and what it records besides its results.
/// The default is a tmr run recording nothing.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// The runtime that runs the callable.
    pub runtime: Runtime,
    /// Hbg only: stop the bind after building the graph on the host (nothing runs on the
    /// device, no output is written, the report's outcome counts the tasks built). A tmr run
    /// with it set is refused ([`crate::WorkerError::HostOnlyNeedsHbg`]).
    pub host_only: bool,
    /// Sees every task the device's orchestration submits (tmr; on hbg the orchestration runs
    /// on the host and the hook is not consulted).
    pub hook: Option<SharedHook>,
    /// Receives the run's trace events (on hbg also one span per bind phase on the host
    /// track).
    pub trace: Option<TraceSink>,
}

impl RunOptions {
    /// A run on `runtime`, recording nothing.
    pub fn on(runtime: Runtime) -> Self {
        Self {
            runtime,
            ..Self::default()
        }
    }

    /// A host-only hbg bind: the graph is built and measured, nothing runs on the device.
    pub fn host_only_hbg() -> Self {
        Self {
            host_only: true,
            ..Self::on(Runtime::Hbg)
        }
    }
}

/// A graph built on the host, as shipped: what it uses and its two compact live images.
#[derive(Clone, Copy, Debug)]
pub struct HostImage<'a> {
    /// How much of each array the images hold.
    pub usage: Usage,
    /// The shared state's image (`SchedState::export`).
    pub sched: &'a [u8],
    /// The payload records' image (the format `TaskPayloads::import` reads).
    pub payloads: &'a [u8],
    /// Edges the host's submits recorded.
    pub edges: u64,
}

/// The device did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The device could not be started: why.
    Start(String),
    /// The device stopped.
    Stopped,
    /// This backend does not offer the operation.
    Unsupported(&'static str),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Start(why) => write!(f, "device could not start: {why}"),
            Self::Stopped => f.write_str("device stopped"),
            Self::Unsupported(what) => write!(f, "this device backend does not run {what}"),
        }
    }
}

impl std::error::Error for TransportError {}

/// A run a backend started without waiting for it ([`DeviceTransport::launch`]): its outcome
/// comes from [`PendingRun::wait`]. A backend runs launched runs one at a time, in launch
/// order.
pub struct PendingRun(Pending);

enum Pending {
    /// The backend ran it to its end before returning (a backend without launches).
    Done(Option<RunOutcome>),
    /// Running on the device.
    Running(Box<dyn Launched>),
}

/// What a backend's launched run gives the host: its outcome, when it ends.
pub trait Launched: Send {
    /// Waits for the outcome.
    fn wait(self: Box<Self>) -> Result<RunOutcome, TransportError>;
    /// The outcome if the run ends within `timeout`; `Ok(None)` while it still runs.
    fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<RunOutcome>, TransportError>;
}

impl PendingRun {
    /// A run that already ended with `outcome`.
    pub fn done(outcome: RunOutcome) -> Self {
        Self(Pending::Done(Some(outcome)))
    }

    /// A run whose outcome was taken (waiting on it answers [`TransportError::Stopped`]).
    pub(crate) fn done_stopped() -> Self {
        Self(Pending::Done(None))
    }

    /// A run still running on the device.
    pub fn running(run: Box<dyn Launched>) -> Self {
        Self(Pending::Running(run))
    }

    /// Waits for the run's outcome.
    pub fn wait(self) -> Result<RunOutcome, TransportError> {
        match self.0 {
            Pending::Done(o) => o.ok_or(TransportError::Stopped),
            Pending::Running(r) => r.wait(),
        }
    }

    /// The outcome if the run ends within `timeout`; `Ok(None)` while it still runs (call
    /// again, or [`Self::wait`]). After it gave the outcome once, the run is spent.
    pub fn wait_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<RunOutcome>, TransportError> {
        match &mut self.0 {
            Pending::Done(o) => o.take().map(Some).ok_or(TransportError::Stopped),
            Pending::Running(r) => r.wait_timeout(timeout),
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
    /// [`Self::alloc`] in run slot `slot` (0 or 1): the two slots' per-run memory never
    /// overlaps, so a run can be staged in one while the other's is in flight. A backend with
    /// one slot has only slot 0.
    fn alloc_in(&self, slot: usize, bytes: u64) -> Result<Option<u64>, TransportError> {
        match slot {
            0 => self.alloc(bytes),
            _ => Err(TransportError::Unsupported("a second run slot")),
        }
    }
    /// Releases every per-run allocation of run slot `slot`.
    fn free_slot(&self, slot: usize) -> Result<(), TransportError> {
        match slot {
            0 => self.free_all(),
            _ => Err(TransportError::Unsupported("a second run slot")),
        }
    }
    /// Whether [`Self::launch`] and [`Self::launch_prebuilt`] return before the run ends and
    /// [`Self::alloc_in`] has a second slot (a depth-two pipeline is possible).
    fn pipelines(&self) -> bool {
        false
    }
    /// Allocates `bytes` of persistent GM (`DEVICE_MALLOC`), kept across runs and
    /// [`Self::free_all`] until [`Self::free`]; 0 is taken as 1 byte; `None` when it does
    /// not fit.
    fn malloc(&self, bytes: u64) -> Result<Option<u64>, TransportError>;
    /// Releases the persistent allocation starting at `addr`; `false` when `addr` is not the
    /// start of a live persistent allocation.
    fn free(&self, addr: u64) -> Result<bool, TransportError>;
    /// Copies `data` to GM at `addr`; `false` when the range is outside GM.
    fn copy_to_device(&self, addr: u64, data: &[u8]) -> Result<bool, TransportError>;
    /// Fills `out` from GM at `addr`; `false` when the range is outside GM.
    fn copy_from_device(&self, addr: u64, out: &mut [u8]) -> Result<bool, TransportError>;
    /// The layouts of the device's shared state (inside the orchestrator's) and of its task
    /// payload records, so the host can build a graph into a mirror that imports as is (hbg).
    fn layouts(&self) -> Result<(OrchestratorLayout, PayloadsLayout), TransportError> {
        Err(TransportError::Unsupported("host-built graphs"))
    }
    /// Runs a graph the host built (hbg): ships the compact live images of the shared state
    /// and the payload records, and runs the device's schedulers only.
    fn run_prebuilt(
        &self,
        kernels: Arc<[KernelFn]>,
        image: HostImage<'_>,
        options: RunOptions,
    ) -> Result<RunOutcome, TransportError> {
        let _ = (kernels, image, options);
        Err(TransportError::Unsupported("host-built graphs"))
    }
    /// [`Self::run_prebuilt`] without waiting for the run: it starts after every run launched
    /// before it. By default it runs to its end first.
    fn launch_prebuilt(
        &self,
        kernels: Arc<[KernelFn]>,
        image: HostImage<'_>,
        options: RunOptions,
    ) -> Result<PendingRun, TransportError> {
        self.run_prebuilt(kernels, image, options)
            .map(PendingRun::done)
    }
    /// [`Self::run`] without waiting for the run: it starts after every run launched before
    /// it. By default it runs to its end first.
    fn launch(
        &self,
        orch: OrchFn,
        kernels: Arc<[KernelFn]>,
        args: Box<OrchArgs>,
        options: RunOptions,
    ) -> Result<PendingRun, TransportError> {
        self.run(orch, kernels, args, options).map(PendingRun::done)
    }
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
                other => Self::Start(crate::ErrorChain(&other).to_string()),
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
        fn alloc_in(&self, slot: usize, bytes: u64) -> Result<Option<u64>, TransportError> {
            Ok(Device::alloc_in(self, slot, bytes)?)
        }
        fn free_slot(&self, slot: usize) -> Result<(), TransportError> {
            Ok(Device::free_slot(self, slot)?)
        }
        fn pipelines(&self) -> bool {
            true
        }
        fn malloc(&self, bytes: u64) -> Result<Option<u64>, TransportError> {
            Ok(Device::malloc(self, bytes)?)
        }
        fn free(&self, addr: u64) -> Result<bool, TransportError> {
            Ok(Device::free(self, addr)?)
        }
        fn copy_to_device(&self, addr: u64, data: &[u8]) -> Result<bool, TransportError> {
            Ok(self.write(addr, data)?)
        }
        fn copy_from_device(&self, addr: u64, out: &mut [u8]) -> Result<bool, TransportError> {
            Ok(self.read(addr, out)?)
        }
        fn layouts(&self) -> Result<(OrchestratorLayout, PayloadsLayout), TransportError> {
            let l = self.config().layouts()?;
            Ok((l.orchestrator, l.payloads))
        }
        fn run_prebuilt(
            &self,
            kernels: Arc<[KernelFn]>,
            image: HostImage<'_>,
            options: RunOptions,
        ) -> Result<RunOutcome, TransportError> {
            Ok(Device::run(self, prebuilt_job(kernels, image, options))?)
        }
        fn launch_prebuilt(
            &self,
            kernels: Arc<[KernelFn]>,
            image: HostImage<'_>,
            options: RunOptions,
        ) -> Result<PendingRun, TransportError> {
            let pending = Device::launch(self, prebuilt_job(kernels, image, options))?;
            Ok(PendingRun::running(Box::new(pending)))
        }
        fn run(
            &self,
            orch: OrchFn,
            kernels: Arc<[KernelFn]>,
            args: Box<OrchArgs>,
            options: RunOptions,
        ) -> Result<RunOutcome, TransportError> {
            Ok(Device::run(self, orch_job(orch, kernels, args, options))?)
        }
        fn launch(
            &self,
            orch: OrchFn,
            kernels: Arc<[KernelFn]>,
            args: Box<OrchArgs>,
            options: RunOptions,
        ) -> Result<PendingRun, TransportError> {
            let pending = Device::launch(self, orch_job(orch, kernels, args, options))?;
            Ok(PendingRun::running(Box::new(pending)))
        }
    }

    impl Launched for simpler_sim::Pending {
        fn wait(self: Box<Self>) -> Result<RunOutcome, TransportError> {
            Ok(simpler_sim::Pending::wait(*self)?)
        }
        fn wait_timeout(
            &mut self,
            timeout: Duration,
        ) -> Result<Option<RunOutcome>, TransportError> {
            Ok(simpler_sim::Pending::wait_timeout(self, timeout)?)
        }
    }

    /// A run of a graph the host built. The simulator's "H2D" is one copy of each live image
    /// into the job, so the host's buffers are free again as soon as the job exists.
    fn prebuilt_job(kernels: Arc<[KernelFn]>, image: HostImage<'_>, options: RunOptions) -> Job {
        let prebuilt = Arc::new(simpler_sim::Prebuilt {
            usage: image.usage,
            sched: image.sched.to_vec(),
            payloads: image.payloads.to_vec(),
            edges: image.edges,
        });
        let never: OrchFn = Arc::new(|_rt| Ok(()));
        Job {
            prebuilt: Some(prebuilt),
            orch: never,
            kernels,
            args: Box::default(),
            hook: options.hook,
            trace: options.trace,
        }
    }

    /// A run of an orchestration function on the device.
    fn orch_job(
        orch: OrchFn,
        kernels: Arc<[KernelFn]>,
        args: Box<OrchArgs>,
        options: RunOptions,
    ) -> Job {
        Job {
            prebuilt: None,
            orch,
            kernels,
            args,
            hook: options.hook,
            trace: options.trace,
        }
    }
}
