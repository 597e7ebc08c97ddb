//! A core's side of its register block and mailbox, as the core loop's
//! [`CorePort`]: volatile 32-bit accesses at the handshake offsets, with the fences that make
//! the AICPU's payload visible before its token and the kernel's GM writes visible before FIN.
#![allow(unsafe_code)]

use crate::arch;
use simpler_aicore::core_loop::CorePort;
use simpler_core::boot::{BootError, BootTable, CoreMailbox, REG_STATUS, REG_TASK};
use simpler_core::handshake::DispatchPayload;

/// Core `index`'s registers and mailbox.
pub struct MmioCorePort {
    task: *const u32,
    status: *mut u32,
    mailbox: *mut CoreMailbox,
}

impl MmioCorePort {
    /// Core `index` of a boot table that passed `validate`.
    ///
    /// # Safety
    ///
    /// `boot` passed [`BootTable::validate`] and describes memory this CPU may access as the
    /// handshake allows; only this core's loop uses its status register and error words.
    pub unsafe fn new(boot: &BootTable, index: u32) -> Result<Self, BootError> {
        let regs = boot.reg_block(index).ok_or(BootError::Cores {
            cores: index,
            limit: boot.cores,
        })?;
        let mailbox =
            boot.mailboxes.base + index as u64 * core::mem::size_of::<CoreMailbox>() as u64;
        Ok(Self {
            task: (regs + REG_TASK) as usize as *const u32,
            status: (regs + REG_STATUS) as usize as *mut u32,
            mailbox: mailbox as usize as *mut CoreMailbox,
        })
    }
}

impl CorePort for MmioCorePort {
    #[inline(always)]
    fn read_task(&self) -> u32 {
        // SAFETY: `task` is this core's task register inside the validated register region,
        // 4-byte aligned; a volatile 32-bit load is how the register is read.
        let v = unsafe { core::ptr::read_volatile(self.task) };
        arch::acquire();
        v
    }

    #[inline(always)]
    fn write_status(&self, value: u32) {
        arch::release();
        // SAFETY: `status` is this core's status register (validated region, aligned); only
        // this core writes it.
        unsafe { core::ptr::write_volatile(self.status, value) }
    }

    #[inline(always)]
    fn write_error(&self, code: u32, detail: u32) {
        // SAFETY: the error words of this core's mailbox; only this core writes them, and the
        // AICPU reads them after the FIN that `write_status` releases.
        unsafe {
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*self.mailbox).error_code), code);
            core::ptr::write_volatile(
                core::ptr::addr_of_mut!((*self.mailbox).error_detail),
                detail,
            );
        }
    }

    #[inline(always)]
    fn payload(&self, parity: u32) -> &DispatchPayload {
        // SAFETY: the mailbox is in the validated mailbox region; the AICPU wrote this parity's
        // payload before the token `read_task` acquired, and does not write it again until it
        // has seen this task's FIN, so no write races the shared reference.
        unsafe {
            let p = core::ptr::addr_of!((*self.mailbox).payloads) as *const DispatchPayload;
            &*p.add((parity & 1) as usize)
        }
    }
}
