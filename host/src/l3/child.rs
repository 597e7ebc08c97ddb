//! What a forked child runs: the mailbox loop of a chip child (a `ChipWorker` on its own
//! simulated device) or a SUB child (host callables).
//!
//! The child starts from a copy of the parent's memory at `fork`; it reads only the values
//! [`ChildSetup`] points at (its mailbox, the doorbells, the callable tables, the inherited
//! ranges) and never returns into the parent's frames: it ends with `_exit`. Every failure in
//! a task, including a panic in a callable, becomes that task's error word and message; only
//! a broken process ends the loop.

// Without a device backend (no `sim` feature) chip children cannot start; the chip path
// is compiled out and its data goes unread.
#![cfg_attr(not(feature = "sim"), allow(unused_imports, dead_code))]

use super::callable::{ChipCallable, SubCallable};
use super::engine::LaneKind;
use super::import::{view_offsets, ForkRanges, ImportContext, ImportRegistry, ImportedView};
use super::mailbox::{
    Bells, Mailbox, CONTROL_FRAME, CTRL_OFF_ARG0, CTRL_OFF_RESULT, SCHEDULER_BELL, TASK_FRAME,
};
use crate::os;
use crate::ErrorChain;
use simpler_core::blob::read_blob;
#[cfg(feature = "sim")]
use simpler_core::mailbox::ControlCopyRequest;
use simpler_core::mailbox::{ControlCommand, MailboxState};
use simpler_core::CanonicalIdentity;
#[cfg(feature = "sim")]
use simpler_core::{AccessMode, AddressSpace, ArgDirection, BackendKind, ValidTensor};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// Error word values a child writes.
const ERR_TASK: u32 = 1;

/// What a child needs, borrowed from the parent's memory it inherited.
pub(super) struct ChildSetup<'a> {
    pub(super) lane: usize,
    pub(super) kind: LaneKind,
    pub(super) mailbox: &'a Mailbox,
    pub(super) bells: &'a Bells,
    pub(super) nonce: [u8; 8],
    pub(super) fork: &'a ForkRanges,
    pub(super) chip_callables: &'a [ChipCallable],
    pub(super) sub_callables: &'a [SubCallable],
    #[cfg(feature = "sim")]
    pub(super) device: &'a simpler_sim::DeviceConfig,
    pub(super) parent: i32,
}

/// The child's entry: never returns.
pub(super) fn child_main(setup: ChildSetup<'_>) -> ! {
    if os::die_with_parent(setup.parent) {
        os::exit_now(1);
    }
    let code = match catch_unwind(AssertUnwindSafe(|| serve(&setup))) {
        Ok(()) => 0,
        Err(_) => 101,
    };
    os::exit_now(code)
}

// One per child process, made once: the chip variant's size costs nothing.
#[allow(clippy::large_enum_variant)]
enum Role {
    #[cfg(feature = "sim")]
    Chip {
        worker: crate::ChipWorker,
        handles: Vec<crate::CallableHandle>,
    },
    Sub,
}

fn start(setup: &ChildSetup<'_>) -> Result<Role, String> {
    match setup.kind {
        LaneKind::Sub(_) => Ok(Role::Sub),
        #[cfg(feature = "sim")]
        LaneKind::Chip(_) => {
            let mut worker = crate::ChipWorker::init(*setup.device)
                .map_err(|e| format!("device start: {}", ErrorChain(&e)))?;
            let handles = setup
                .chip_callables
                .iter()
                .map(|c| worker.register(c.callable.clone()))
                .collect();
            Ok(Role::Chip { worker, handles })
        }
        #[cfg(not(feature = "sim"))]
        LaneKind::Chip(_) => Err("this build has no device backend (feature `sim`)".into()),
    }
}

fn serve(setup: &ChildSetup<'_>) {
    let mb = setup.mailbox;
    let mut role = match start(setup) {
        Ok(r) => r,
        Err(message) => {
            mb.set_error(CONTROL_FRAME, ERR_TASK, &message);
            mb.set_state(CONTROL_FRAME, MailboxState::InitFailed);
            setup.bells.ring(SCHEDULER_BELL);
            return;
        }
    };
    let context = match setup.kind {
        LaneKind::Chip(_) => ImportContext::device(setup.nonce),
        LaneKind::Sub(_) => ImportContext::host(),
    };
    let mut registry = ImportRegistry::new(context, setup.fork.clone());
    mb.set_state(CONTROL_FRAME, MailboxState::InitReady);
    setup.bells.ring(SCHEDULER_BELL);
    let bell = Bells::child(setup.lane);
    let mut run_seen = 0u64;
    loop {
        let seen = setup.bells.seen(bell);
        if mb.shutdown_requested() {
            break;
        }
        let mut worked = false;
        if mb.state(CONTROL_FRAME) == MailboxState::ControlRequest as u32 {
            let r = control(setup, &mut role, &mut registry);
            let (code, msg, result) = match r {
                Ok(v) => (0, String::new(), v),
                Err(m) => (ERR_TASK, m, 0),
            };
            mb.write(CONTROL_FRAME, CTRL_OFF_RESULT, &result.to_le_bytes());
            mb.set_error(CONTROL_FRAME, code, &msg);
            mb.set_state(CONTROL_FRAME, MailboxState::ControlDone);
            setup.bells.ring(SCHEDULER_BELL);
            worked = true;
        }
        if mb.state(TASK_FRAME) == MailboxState::TaskReady as u32 {
            mb.accept();
            let run = mb.run_id();
            if run != run_seen {
                registry.forget_inherited();
                run_seen = run;
            }
            let r = catch_unwind(AssertUnwindSafe(|| task(setup, &mut role, &mut registry)))
                .unwrap_or_else(|p| Err(format!("task panicked: {}", panic_text(&p))));
            match r {
                Ok(()) => mb.set_error(TASK_FRAME, 0, ""),
                Err(m) => mb.set_error(TASK_FRAME, ERR_TASK, &m),
            }
            mb.set_state(TASK_FRAME, MailboxState::TaskDone);
            setup.bells.ring(SCHEDULER_BELL);
            worked = true;
        }
        if !worked {
            setup.bells.wait(bell, seen, Duration::from_millis(100));
            if os::die_with_parent(setup.parent) {
                break;
            }
        }
    }
    registry.close();
    #[cfg(feature = "sim")]
    if let Role::Chip { worker, .. } = role {
        worker.finalize();
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Resolves a digest against the table the child inherited; an unknown one is not prepared.
fn lookup<'c, T>(
    table: &'c [T],
    digest: &[u8; 32],
    kind: u8,
    name: impl Fn(&T) -> &str,
) -> Result<(usize, &'c T), String> {
    let index = u32::from_le_bytes([digest[1], digest[2], digest[3], digest[4]]) as usize;
    match table.get(index) {
        Some(c)
            if digest[0] == kind && *digest == super::callable::digest(kind, index, name(c)) =>
        {
            Ok((index, c))
        }
        _ => Err("callable digest is not prepared on this endpoint".into()),
    }
}

#[allow(unsafe_code)] // reads a mailbox frame in place: see the SAFETY comments
fn task(
    setup: &ChildSetup<'_>,
    role: &mut Role,
    registry: &mut ImportRegistry,
) -> Result<(), String> {
    let mb = setup.mailbox;
    let (digest, config, lease) = mb.task_header();
    lease
        .validate(1)
        .map_err(|e| format!("pipeline lease refused: {e:?}"))?;
    config
        .validate()
        .map_err(|e| format!("call config refused: {e}"))?;
    // SAFETY: called from `serve` after it observed TASK_READY and before it publishes
    // TASK_DONE, so the task frame is this child's; `view` (and everything decoded from it)
    // is dropped when this function returns, before that publication.
    let blob = unsafe { mb.blob() };
    let view = read_blob(blob).map_err(|e| format!("task arguments: {}", ErrorChain(&e)))?;
    match role {
        Role::Sub => {
            let (_, c) = lookup(setup.sub_callables, &digest, 2, |c| &c.name)?;
            let mut args = registry
                .mapped_args(&view)
                .map_err(|e| ErrorChain(&e).to_string())?;
            (c.f)(&mut args)
        }
        #[cfg(feature = "sim")]
        Role::Chip { worker, handles } => {
            let (index, c) = lookup(setup.chip_callables, &digest, 1, |c| &c.name)?;
            let tensors = view
                .tensors()
                .collect::<Result<Vec<ValidTensor>, _>>()
                .map_err(|e| format!("task arguments: {}", ErrorChain(&e)))?;
            if tensors.len() != c.callable.signature().len() {
                return Err(format!(
                    "the callable takes {} tensors, got {}",
                    c.callable.signature().len(),
                    tensors.len()
                ));
            }
            let views = registry
                .materialize_args(&tensors)
                .map_err(|e| ErrorChain(&e).to_string())?;
            let mut args = Vec::with_capacity(views.len());
            for (i, ((t, v), &dir)) in views.iter().zip(c.callable.signature()).enumerate() {
                args.push(chip_arg(i, t, v, dir)?);
            }
            let scalars: Vec<u64> = view.scalars().collect();
            worker
                .run(handles[index], &mut args, &scalars, Default::default())
                .map_err(|e| ErrorChain(&e).to_string())?;
            for ((t, v), arg) in views.iter().zip(&args) {
                if let crate::ChipArg::Host(h) = arg {
                    if h.dir != ArgDirection::In {
                        scatter(t, v, &h.data);
                    }
                }
            }
            Ok(())
        }
    }
}

/// One materialized argument as the chip takes it: a device view in place, or a host view
/// gathered into a staging tensor (exactly the view's elements, strides honoured).
#[cfg(feature = "sim")]
fn chip_arg(
    index: usize,
    t: &ValidTensor,
    v: &ImportedView,
    dir: ArgDirection,
) -> Result<crate::ChipArg, String> {
    if dir != ArgDirection::In && !v.writable {
        return Err(format!(
            "tensor {index}: the callable writes it, but its buffer grants READ only; refused"
        ));
    }
    let shapes = t.used_shapes().to_vec();
    let dtype = t.data_type();
    if v.device {
        return Ok(crate::ChipArg::Device(crate::DeviceTensor {
            addr: v.addr,
            shapes,
            strides: t.used_strides().to_vec(),
            dtype,
            dir,
        }));
    }
    let elem = dtype.elem_size() as usize;
    let region = v
        .region
        .ok_or_else(|| format!("tensor {index}: no host mapping"))?;
    // The region lies in an import `registry` holds until a later control request releases
    // it, and no control request is served while this task runs (one thread serves both
    // frames); the engine keeps every writer of the view's bytes waiting until this task
    // finishes; `src` is dropped before this function returns.
    let src = region.bytes();
    let numel: usize = shapes.iter().map(|&s| s as usize).product();
    let mut data = vec![0u8; numel * elem];
    if dir != ArgDirection::Out {
        for (k, off) in view_offsets(t.used_shapes(), t.used_strides()).enumerate() {
            let at = off as usize * elem;
            data[k * elem..(k + 1) * elem].copy_from_slice(&src[at..at + elem]);
        }
    }
    Ok(crate::ChipArg::Host(crate::HostTensor {
        data,
        shapes,
        dtype,
        dir,
    }))
}

/// Writes a staged result back into exactly the view's elements.
#[cfg(feature = "sim")]
fn scatter(t: &ValidTensor, v: &ImportedView, data: &[u8]) {
    let Some(region) = v.region else {
        return;
    };
    let elem = t.data_type().elem_size() as usize;
    for (k, off) in view_offsets(t.used_shapes(), t.used_strides()).enumerate() {
        region.write(off as usize * elem, &data[k * elem..(k + 1) * elem]);
    }
}

#[allow(unsafe_code)] // reads a mailbox frame in place: see the SAFETY comments
fn control(
    setup: &ChildSetup<'_>,
    role: &mut Role,
    registry: &mut ImportRegistry,
) -> Result<u64, String> {
    let mb = setup.mailbox;
    let mut cmd = [0u8; 8];
    mb.read(CONTROL_FRAME, 8, &mut cmd);
    let command = u64::from_le_bytes(cmd);
    #[cfg_attr(not(feature = "sim"), allow(unused_variables))]
    let arg0 = mb.control_u64(CTRL_OFF_ARG0);
    if command == ControlCommand::ImportRelease as u64 {
        // SAFETY: called from `serve` after it observed CONTROL_REQUEST and before it
        // publishes CONTROL_DONE, so the control frame is this child's; `slot` is dropped when
        // this function returns.
        let slot = unsafe { mb.control_slot() };
        let mut oid = [0u8; 8];
        oid.copy_from_slice(&slot[..8]);
        let buffer_id = u64::from_le_bytes(slot[8..16].try_into().unwrap_or([0; 8]));
        let generation = u32::from_le_bytes(slot[16..20].try_into().unwrap_or([0; 4]));
        registry.release(&CanonicalIdentity::new(oid, buffer_id, generation));
        return Ok(0);
    }
    match role {
        Role::Sub => Err(format!(
            "control command {command} is not served by a SUB worker"
        )),
        #[cfg(feature = "sim")]
        Role::Chip { worker, .. } => {
            if command == ControlCommand::Malloc as u64 {
                worker.malloc(arg0).map_err(|e| ErrorChain(&e).to_string())
            } else if command == ControlCommand::Free as u64 {
                worker
                    .free(arg0)
                    .map(|_| 0)
                    .map_err(|e| ErrorChain(&e).to_string())
            } else if command == ControlCommand::CopyTo as u64
                || command == ControlCommand::CopyFrom as u64
            {
                let to_device = command == ControlCommand::CopyTo as u64;
                // arg0 carries the request's length: a short request is refused, never filled
                // out with the previous request's bytes.
                // SAFETY: as for the ImportRelease slot above: the control frame is this
                // child's until `serve` publishes CONTROL_DONE, after this function returns.
                let slot = unsafe { mb.control_slot() };
                let len = usize::try_from(arg0).unwrap_or(usize::MAX).min(slot.len());
                let req = ControlCopyRequest::read(&slot[..len])
                    .map_err(|e| format!("copy request refused: {e:?}"))?;
                copy(setup, worker, registry, &req, to_device)
            } else {
                Err(format!("unknown control command {command}"))
            }
        }
    }
}

/// A control-plane copy, after both descriptors passed validation: the device side must be
/// this Worker's DEVICE_MALLOC memory granting the direction, the host side a host buffer
/// granting the opposite one, both at least `nbytes` long.
#[cfg(feature = "sim")]
fn copy(
    setup: &ChildSetup<'_>,
    worker: &mut crate::ChipWorker,
    registry: &mut ImportRegistry,
    req: &ControlCopyRequest,
    to_device: bool,
) -> Result<u64, String> {
    let (dev, host) = if to_device {
        (&req.dst, &req.src)
    } else {
        (&req.src, &req.dst)
    };
    if dev.space() != Some(AddressSpace::Device)
        || !matches!(
            dev.backend(),
            Some(BackendKind::DeviceMalloc | BackendKind::VmmWindow)
        )
    {
        return Err("the device side is not device memory".into());
    }
    ImportContext::device(setup.nonce)
        .check(dev)
        .map_err(|e| ErrorChain(&e).to_string())?;
    let dev_ok = match dev.access_mode() {
        Some(AccessMode::ReadWrite) => true,
        Some(AccessMode::Write) => to_device,
        Some(AccessMode::Read) => !to_device,
        None => false,
    };
    let host_ok = match host.access_mode() {
        Some(AccessMode::ReadWrite) => true,
        Some(AccessMode::Write) => !to_device,
        Some(AccessMode::Read) => to_device,
        None => false,
    };
    if !dev_ok {
        return Err("the device buffer's access does not grant this copy".into());
    }
    if !host_ok {
        return Err("the host buffer's access does not grant this copy".into());
    }
    if req.nbytes > dev.nbytes || req.nbytes > host.nbytes {
        return Err(format!(
            "{} bytes exceed a side (device {}, host {})",
            req.nbytes, dev.nbytes, host.nbytes
        ));
    }
    let addr = dev.body_address().unwrap_or(0);
    let imp = registry
        .materialize(host)
        .map_err(|e| ErrorChain(&e).to_string())?;
    let region = imp
        .region()
        .and_then(|r| r.sub(0, req.nbytes as usize))
        .ok_or("the host side is not host memory")?;
    if to_device {
        worker
            // The region lies in the import `materialize` just made or found, which `registry`
            // keeps while this request is served (on this thread); the host buffer is the
            // parent's to keep unwritten while it waits for this copy (a control copy is
            // ordered by its caller, not by the engine).
            .copy_to_device(addr, region.bytes())
            .map_err(|e| ErrorChain(&e).to_string())?;
    } else {
        let mut out = vec![0u8; req.nbytes as usize];
        worker
            .copy_from_device(addr, &mut out)
            .map_err(|e| ErrorChain(&e).to_string())?;
        region.write(0, &out);
    }
    Ok(0)
}
