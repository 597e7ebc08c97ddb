//! The cores one AICPU scheduler owns, over their memory-mapped register blocks: the firmware's
//! [`Platform`].
//!
//! A dispatch writes the payload into the core's mailbox, then [`Platform::write_task`] issues
//! a release barrier and the volatile 32-bit store of the token at `REG_TASK`; a completion is
//! the volatile load of `REG_STATUS` followed by an acquire barrier, after which the kernel's
//! GM writes and the core's error words are visible. The cycle clock is the system counter.
#![allow(unsafe_code)]

use simpler_aicore_firmware::arch;
use simpler_aicpu::Platform;
use simpler_core::boot::{BootError, BootTable, CoreMailbox, REG_STATUS, REG_TASK};
use simpler_core::handshake::DispatchPayload;

/// The most cores one image drives.
pub const MAX_CORES: usize = 108;

/// Register-block and mailbox addresses of the cores a scheduler owns. Core `i` of the
/// `Platform` is core `i` of the boot table.
pub struct MmioCores {
    regs: [usize; MAX_CORES],
    mailboxes: [usize; MAX_CORES],
    count: usize,
}

impl MmioCores {
    /// Every core of `boot`.
    ///
    /// # Safety
    ///
    /// `boot` passed [`BootTable::validate`]; this AICPU is the only writer of the cores' task
    /// registers and payloads.
    pub unsafe fn new(boot: &BootTable) -> Result<Self, BootError> {
        let count = boot.cores as usize;
        if count == 0 || count > MAX_CORES {
            return Err(BootError::Cores {
                cores: boot.cores,
                limit: MAX_CORES as u32,
            });
        }
        let mut regs = [0usize; MAX_CORES];
        let mut mailboxes = [0usize; MAX_CORES];
        let size = core::mem::size_of::<CoreMailbox>();
        for (i, (r, m)) in regs
            .iter_mut()
            .zip(mailboxes.iter_mut())
            .take(count)
            .enumerate()
        {
            *r = boot
                .reg_block(i as u32)
                .ok_or(BootError::Region { name: "reg_base" })? as usize;
            *m = boot.mailboxes.base as usize + i * size;
        }
        Ok(Self {
            regs,
            mailboxes,
            count,
        })
    }

    /// Cores driven.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no core is driven (never, once built).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Core `core`'s index, or core 0's for an index the scheduler never names (it names only
    /// the cores it was given, all below `count`).
    #[inline(always)]
    fn index(&self, core: usize) -> usize {
        if core < self.count && core < MAX_CORES {
            core
        } else {
            0
        }
    }

    #[inline(always)]
    fn reg(&self, core: usize, offset: u64) -> usize {
        let i = self.index(core);
        // `index` keeps `i` below MAX_CORES, so the checked access never fails.
        self.regs.get(i).copied().unwrap_or(0) + offset as usize
    }

    #[inline(always)]
    fn mailbox(&self, core: usize) -> *mut CoreMailbox {
        let i = self.index(core);
        self.mailboxes.get(i).copied().unwrap_or(0) as *mut CoreMailbox
    }

    /// Reads core `core`'s status register without a barrier (start-up and teardown polls,
    /// which order nothing).
    pub fn peek_status(&self, core: usize) -> u32 {
        // SAFETY: the status register of a validated core block, 4-byte aligned.
        unsafe { core::ptr::read_volatile(self.reg(core, REG_STATUS) as *const u32) }
    }
}

impl Platform for MmioCores {
    #[inline(always)]
    fn write_task(&mut self, core: usize, value: u32) {
        arch::release();
        // SAFETY: the task register of a validated core block, 4-byte aligned; only this
        // AICPU writes it.
        unsafe { core::ptr::write_volatile(self.reg(core, REG_TASK) as *mut u32, value) }
    }

    #[inline(always)]
    fn read_status(&self, core: usize) -> u32 {
        let v = self.peek_status(core);
        arch::acquire();
        v
    }

    #[inline(always)]
    fn read_error(&self, core: usize) -> (u32, u32) {
        let m = self.mailbox(core);
        // SAFETY: the error words of a validated mailbox; the core wrote them before the FIN
        // that `read_status` acquired.
        unsafe {
            (
                core::ptr::read_volatile(core::ptr::addr_of!((*m).error_code)),
                core::ptr::read_volatile(core::ptr::addr_of!((*m).error_detail)),
            )
        }
    }

    #[inline(always)]
    fn payload_mut(&mut self, core: usize, parity: u32) -> &mut DispatchPayload {
        let m = self.mailbox(core);
        // SAFETY: a payload of a validated mailbox. The scheduler fills parity `p` only for a
        // token of that parity, after the core's FIN of the previous token of that parity, so
        // the core is not reading it; `&mut self` keeps this the only reference this side.
        unsafe {
            let p = core::ptr::addr_of_mut!((*m).payloads) as *mut DispatchPayload;
            &mut *p.add((parity & 1) as usize)
        }
    }

    #[inline(always)]
    fn cycles(&self) -> u64 {
        arch::counter()
    }
}
