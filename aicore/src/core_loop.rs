//! The loop body every AICore runs, over the handshake in `simpler_core::handshake`.
//!
//! [`CoreLoop::step`] is one iteration: the device wraps it in `loop {}`, the simulator steps
//! it when the core has work.

use crate::kernel::{KernelCtx, KernelFailure, KernelFn};
use simpler_core::gm::{Gm, GmFaultKind};
use simpler_core::handshake::*;

use crate::tile_ops::{Portable, TileOps};

/// The core's side of its registers and payloads.
pub trait CorePort {
    /// Reads the task register (acquire: the payload written before it is visible).
    fn read_task(&self) -> u32;
    /// Writes the status register (release: the kernel's GM writes are visible first).
    fn write_status(&self, value: u32);
    /// Records why the current task failed (`code`, `detail`), before its FIN.
    fn write_error(&self, code: u32, detail: u32);
    /// The payload buffer of parity `parity` (0 or 1).
    fn payload(&self, parity: u32) -> &DispatchPayload;
    /// The core's compute units, which its kernels hand their tile math to (the portable
    /// loops unless the platform has faster ones).
    fn tile_ops(&self) -> &dyn TileOps {
        &Portable
    }
}

/// What one step of the loop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// No new task.
    Idle,
    /// Ran the task with this token.
    Ran(u32),
    /// Received the exit signal and reported it.
    Exited,
}

/// A core's loop state.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreLoop {
    last: Option<u32>,
}

impl CoreLoop {
    /// A core that has taken no task yet.
    pub const fn new() -> Self {
        Self { last: None }
    }

    /// The token in `port`'s task register when it is one this loop has not run yet (what its
    /// next [`Self::step`] would run); `None` when idle, exiting or already run.
    pub fn pending(&self, port: &impl CorePort) -> Option<u32> {
        let token = port.read_task();
        (token < RESERVED_BASE && self.last != Some(token)).then_some(token)
    }

    /// Forgets the last token (a new run starts its tokens again).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// One iteration: take a new token if there is one, run its kernel, report FIN.
    pub fn step(
        &mut self,
        port: &impl CorePort,
        gm: &dyn Gm,
        kernels: &[KernelFn],
        local: &mut [f32],
    ) -> Step {
        let token = port.read_task();
        if token == EXIT_SIGNAL {
            port.write_status(AICORE_EXITED);
            return Step::Exited;
        }
        if token >= RESERVED_BASE || self.last == Some(token) {
            return Step::Idle;
        }
        self.last = Some(token);
        port.write_status(token);
        let payload = port.payload(token & 1);
        let result = match kernels.get(payload.kernel_id as usize) {
            Some(kernel) => kernel(&mut KernelCtx {
                gm,
                args: &payload.args,
                local,
                ops: port.tile_ops(),
                block_idx: payload.block_idx,
                block_num: payload.block_num,
                sub_block: payload.sub_block,
            }),
            None => {
                port.write_error(ERR_UNKNOWN_KERNEL, payload.kernel_id);
                port.write_status(token | FIN_BIT);
                return Step::Ran(token);
            }
        };
        match result {
            Ok(()) => port.write_error(NO_ERROR, 0),
            Err(KernelFailure::BadArguments { index }) => {
                port.write_error(ERR_BAD_ARGUMENTS, index)
            }
            Err(KernelFailure::TooLarge { elems, .. }) => {
                port.write_error(ERR_TOO_LARGE, elems.min(u32::MAX as u64) as u32)
            }
            Err(KernelFailure::Memory(f)) if f.kind == GmFaultKind::Conflict => {
                port.write_error(ERR_GM_CONFLICT, f.addr as u32)
            }
            Err(KernelFailure::Memory(f)) => port.write_error(ERR_MEMORY, f.addr as u32),
            Err(KernelFailure::Code(c)) => port.write_error(ERR_KERNEL_CODE, c),
        }
        port.write_status(token | FIN_BIT);
        Step::Ran(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;
    use simpler_core::gm::GmFault;

    /// A core's registers as plain cells, with one zeroed payload per parity.
    struct Port {
        task: Cell<u32>,
        status: Cell<u32>,
        payloads: [DispatchPayload; 2],
    }

    impl CorePort for Port {
        fn read_task(&self) -> u32 {
            self.task.get()
        }
        fn write_status(&self, value: u32) {
            self.status.set(value);
        }
        fn write_error(&self, _code: u32, _detail: u32) {}
        fn payload(&self, parity: u32) -> &DispatchPayload {
            &self.payloads[(parity & 1) as usize]
        }
    }

    /// GM with nothing in it: the kernel below never touches it.
    struct NoGm;

    impl Gm for NoGm {
        fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
            Err(GmFault::outside(addr, dst.len() as u64))
        }
        fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
            Err(GmFault::outside(addr, src.len() as u64))
        }
    }

    fn nothing(_: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
        Ok(())
    }

    #[test]
    fn pending_names_the_token_the_next_step_runs_and_nothing_else() {
        let port = Port {
            task: Cell::new(AICPU_IDLE),
            status: Cell::new(AICORE_IDLE),
            payloads: [bytemuck::Zeroable::zeroed(); 2],
        };
        let kernels: [KernelFn; 1] = [nothing];
        let mut local = [0.0f32; 4];
        let mut core = CoreLoop::new();
        assert_eq!(core.pending(&port), None, "an idle register");
        port.task.set(6);
        assert_eq!(core.pending(&port), Some(6));
        assert_eq!(core.step(&port, &NoGm, &kernels, &mut local), Step::Ran(6));
        assert_eq!(port.status.get(), 6 | FIN_BIT);
        assert_eq!(core.pending(&port), None, "token 6 has run");
        assert_eq!(core.step(&port, &NoGm, &kernels, &mut local), Step::Idle);
        port.task.set(7);
        assert_eq!(core.pending(&port), Some(7));
        port.task.set(EXIT_SIGNAL);
        assert_eq!(core.pending(&port), None, "the exit signal is no task");
        core.reset();
        port.task.set(6);
        assert_eq!(
            core.pending(&port),
            Some(6),
            "a new run starts its tokens again"
        );
    }
}
