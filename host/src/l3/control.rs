//! The Worker's buffers and control requests: creating and releasing buffers (and telling
//! every child to drop its mapping), device allocations on a chip, control-plane copies
//! between host and device buffers with both sides' checks, and the control-frame round trip
//! they all go through. Its own file because this is the Worker's synchronous request path,
//! beside the task path that `orch` and the engine drive.

use super::buffer::{self, Backing, Buffer};
use super::mailbox::{Bells, CONTROL_FRAME, CTRL_OFF_RESULT, SCHEDULER_BELL};
use super::worker::{Lifecycle, Worker};
use super::L3Error;
use crate::os;
use simpler_core::mailbox::{ControlCommand, ControlCopyRequest, MailboxState};
use simpler_core::{
    access_permits, AccessMode, AddressSpace, BackendKind, CanonicalIdentity, TensorArgType,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Worker {
    pub(super) fn lock_buffers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<CanonicalIdentity, Buffer>> {
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn mint(&self) -> CanonicalIdentity {
        CanonicalIdentity::new(
            self.nonce,
            self.next_buffer_id.fetch_add(1, Ordering::Relaxed),
            1,
        )
    }

    /// Creates a host buffer of `nbytes` granting consumers `access`: POSIX_SHM or FORK_SHM at
    /// any time, FORK_COW (READ only) before `init()`.
    pub fn create_buffer(
        &self,
        nbytes: u64,
        access: AccessMode,
        backend: BackendKind,
    ) -> Result<Buffer, L3Error> {
        if matches!(self.lifecycle, Lifecycle::Closing | Lifecycle::Closed) {
            return Err(L3Error::Closed);
        }
        if nbytes == 0 {
            return Err(L3Error::ZeroSizeBuffer);
        }
        if self.config.chips + self.config.sub_workers == 0 {
            return Err(L3Error::NoBufferConsumer);
        }
        let id = self.mint();
        let buf = match backend {
            BackendKind::PosixShm => buffer::create_shm(id, access, nbytes)?,
            BackendKind::ForkShm => buffer::create_arena(&self.arena, id, access, nbytes)?,
            BackendKind::ForkCow => {
                if self.lifecycle != Lifecycle::New {
                    return Err(L3Error::ForkCowAfterInit);
                }
                if access != AccessMode::Read {
                    return Err(L3Error::ForkCowAccess);
                }
                buffer::create_cow(id, nbytes)?
            }
            other => {
                return Err(L3Error::UnsupportedBackend {
                    backend: other as u8,
                })
            }
        };
        self.lock_buffers().insert(buf.identity(), buf.clone());
        Ok(buf)
    }

    /// A dense wire tensor over `buffer` at `byte_offset` (the reference's `make_tensor_arg`).
    pub fn make_tensor_arg(
        &self,
        buffer: &Buffer,
        shapes: &[u32],
        dtype: simpler_core::DataType,
        byte_offset: u64,
    ) -> Result<simpler_core::ValidTensor, L3Error> {
        buffer.tensor(shapes, dtype, byte_offset)
    }

    /// Ends `buffer`'s life: refused while a run in flight names it; otherwise closes it
    /// (unlinking its name), tells every child to drop its mapping, and frees device memory.
    pub fn release_buffer(&self, buffer: &Buffer) -> Result<(), L3Error> {
        let identity = buffer.identity();
        let known = self.lock_buffers().contains_key(&identity);
        if !known {
            return Err(if buffer.is_closed() {
                L3Error::BufferClosed {
                    buffer_id: identity.buffer_id,
                }
            } else {
                L3Error::UnknownBuffer {
                    buffer_id: identity.buffer_id,
                }
            });
        }
        if let Some(shared) = &self.shared {
            if shared.in_flight_names(&identity) {
                return Err(L3Error::BufferInUse {
                    buffer_id: identity.buffer_id,
                });
            }
        }
        let result = buffer.close();
        if let (Backing::Device { chip, addr }, Ok(_)) = (&buffer.inner.backing, self.shared()) {
            let _ = self.control(*chip, ControlCommand::Free, *addr, &[]);
            self.lock_device_allocs()[*chip].remove(addr);
        }
        self.broadcast_release(&identity);
        self.lock_buffers().remove(&identity);
        result
    }

    fn broadcast_release(&self, identity: &CanonicalIdentity) {
        let Ok(shared) = self.shared() else {
            return;
        };
        let mut payload = [0u8; 32];
        payload[..8].copy_from_slice(&identity.owner_instance_id);
        payload[8..16].copy_from_slice(&identity.buffer_id.to_le_bytes());
        payload[16..20].copy_from_slice(&identity.generation.to_le_bytes());
        for lane in 0..shared.lanes.len() {
            // Best effort: the owner already unlinked; a child that fails only keeps a mapping.
            if let Err(e) = self.control(lane, ControlCommand::ImportRelease, 0, &payload) {
                log::debug!("import release on {}: {e}", shared.lanes[lane].kind);
            }
        }
    }

    pub(super) fn lock_device_allocs(&self) -> std::sync::MutexGuard<'_, Vec<BTreeMap<u64, u64>>> {
        self.device_allocs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `nbytes` of device memory on `chip` (DEVICE_MALLOC, READWRITE). It lives
    /// until released; fill it with [`Self::copy_to`].
    pub fn alloc_child_tensor(&self, chip: usize, nbytes: u64) -> Result<Buffer, L3Error> {
        let shared = self.shared()?;
        if chip >= shared.chips {
            return Err(L3Error::UnknownChip {
                chip,
                chips: shared.chips,
            });
        }
        if nbytes == 0 {
            return Err(L3Error::ZeroSizeBuffer);
        }
        let addr = self.control(chip, ControlCommand::Malloc, nbytes, &[])?;
        let desc = buffer::descriptor(
            self.mint(),
            AddressSpace::Device,
            AccessMode::ReadWrite,
            BackendKind::DeviceMalloc,
            nbytes,
            &addr.to_le_bytes(),
        )?;
        self.lock_device_allocs()[chip].insert(addr, nbytes);
        let buf = Buffer::new(desc, Backing::Device { chip, addr });
        self.lock_buffers().insert(buf.identity(), buf.clone());
        Ok(buf)
    }

    /// Copies the first `nbytes` of host buffer `src` into device buffer `dst`.
    pub fn copy_to(&self, dst: &Buffer, src: &Buffer, nbytes: u64) -> Result<(), L3Error> {
        self.copy(ControlCommand::CopyTo, dst, src, nbytes)
    }

    /// Copies the first `nbytes` of device buffer `src` into host buffer `dst`.
    pub fn copy_from(&self, dst: &Buffer, src: &Buffer, nbytes: u64) -> Result<(), L3Error> {
        self.copy(ControlCommand::CopyFrom, dst, src, nbytes)
    }

    fn copy(
        &self,
        command: ControlCommand,
        dst: &Buffer,
        src: &Buffer,
        nbytes: u64,
    ) -> Result<(), L3Error> {
        self.shared()?;
        let to_device = command == ControlCommand::CopyTo;
        let (device, host) = if to_device { (dst, src) } else { (src, dst) };
        let ddesc = device.descriptor()?;
        let hdesc = host.descriptor()?;
        // Device side: a DEVICE_MALLOC buffer of this Worker, live, big enough, granting the
        // direction.
        let Backing::Device { chip, addr } = device.inner.backing else {
            return Err(L3Error::CopyDevice {
                reason: format!(
                    "{} buffer {} is not device memory",
                    backend_name(&ddesc),
                    ddesc.identity.buffer_id
                ),
            });
        };
        let need = if to_device {
            TensorArgType::OutputExisting
        } else {
            TensorArgType::Input
        };
        if !access_permits(ddesc.access_mode().unwrap_or(AccessMode::Read), need) {
            return Err(L3Error::CopyDevice {
                reason: format!("access {:?} does not grant the copy", ddesc.access_mode()),
            });
        }
        if nbytes > ddesc.nbytes {
            return Err(L3Error::CopyDevice {
                reason: format!("{nbytes} bytes exceed the device buffer's {}", ddesc.nbytes),
            });
        }
        if self.lock_device_allocs()[chip].get(&addr) != Some(&ddesc.nbytes) {
            return Err(L3Error::CopyDevice {
                reason: format!("{addr:#x} is not a live allocation on chip {chip}"),
            });
        }
        // Host side: a HOST buffer granting the opposite direction.
        if hdesc.space() != Some(AddressSpace::Host) {
            return Err(L3Error::CopyHost {
                reason: "the host side is DEVICE memory".into(),
            });
        }
        let host_need = if to_device {
            TensorArgType::Input
        } else {
            TensorArgType::OutputExisting
        };
        if !access_permits(hdesc.access_mode().unwrap_or(AccessMode::Read), host_need) {
            return Err(L3Error::CopyHost {
                reason: format!(
                    "access {:?} does not grant {}",
                    hdesc.access_mode(),
                    if to_device { "reading" } else { "writing" }
                ),
            });
        }
        if nbytes > hdesc.nbytes {
            return Err(L3Error::CopyHost {
                reason: format!("{nbytes} bytes exceed the host buffer's {}", hdesc.nbytes),
            });
        }
        let request = ControlCopyRequest {
            dst: if to_device { ddesc } else { hdesc },
            src: if to_device { hdesc } else { ddesc },
            nbytes,
        };
        let bytes = bytemuck::bytes_of(&request);
        self.control(chip, command, bytes.len() as u64, bytes)
            .map(|_| ())
    }

    /// Sends the raw bytes of a copy request to chip `chip` (for tests of the child's own
    /// validation: the child must refuse a request whose descriptors are invalid).
    pub fn send_raw_copy_request(
        &self,
        chip: usize,
        to_device: bool,
        request: &[u8],
    ) -> Result<(), L3Error> {
        let shared = self.shared()?;
        if chip >= shared.chips {
            return Err(L3Error::UnknownChip {
                chip,
                chips: shared.chips,
            });
        }
        let command = if to_device {
            ControlCommand::CopyTo
        } else {
            ControlCommand::CopyFrom
        };
        self.control(chip, command, request.len() as u64, request)
            .map(|_| ())
    }

    /// One control request to lane `lane`, waited for: returns the result word.
    fn control(
        &self,
        lane: usize,
        command: ControlCommand,
        arg0: u64,
        payload: &[u8],
    ) -> Result<u64, L3Error> {
        let shared = self.shared()?;
        let l = &shared.lanes[lane];
        let endpoint = l.kind.to_string();
        let _serial = l.control.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = shared.is_dead(lane) {
            return Err(L3Error::Control {
                endpoint,
                message: format!("child is gone: {reason}"),
            });
        }
        if !l.mailbox.post_control(command as u64, arg0, payload) {
            return Err(L3Error::Control {
                endpoint,
                message: "request does not fit the control frame".into(),
            });
        }
        l.mailbox
            .set_state(CONTROL_FRAME, MailboxState::ControlRequest);
        shared.bells.ring(Bells::child(lane));
        let deadline = Instant::now() + self.config.control_timeout;
        loop {
            let seen = shared.bells.seen(SCHEDULER_BELL);
            if l.mailbox.state(CONTROL_FRAME) == MailboxState::ControlDone as u32 {
                break;
            }
            if let Some(exit) = l.exit() {
                let reason = format!("{endpoint} (pid {}) {exit}", l.pid.load(Ordering::Relaxed));
                shared.mark_dead(lane, reason.clone());
                return Err(L3Error::Control {
                    endpoint,
                    message: format!("child is gone: {reason}"),
                });
            }
            if Instant::now() >= deadline {
                // The child may still answer later; nothing else may use this frame now.
                shared.mark_dead(lane, "control request timed out".into());
                os::kill(l.pid.load(Ordering::Acquire));
                return Err(L3Error::Control {
                    endpoint,
                    message: "no answer before the control timeout; endpoint poisoned".into(),
                });
            }
            shared
                .bells
                .wait(SCHEDULER_BELL, seen, Duration::from_millis(20));
        }
        let (code, message) = l.mailbox.error(CONTROL_FRAME);
        let result = l.mailbox.control_u64(CTRL_OFF_RESULT);
        l.mailbox.set_state(CONTROL_FRAME, MailboxState::Idle);
        if code != 0 {
            return Err(L3Error::Control { endpoint, message });
        }
        Ok(result)
    }
}

fn backend_name(d: &simpler_core::BufferDescriptor) -> &'static str {
    d.backend().map_or("unknown", BackendKind::name)
}
