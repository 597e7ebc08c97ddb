//! GM as firmware sees it: physical memory the boot table names, read and written with plain
//! copies after a range check.
#![allow(unsafe_code)]

use simpler_core::boot::Region;
use simpler_core::gm::{Gm, GmFault};

/// Device memory over the physical range `region`.
#[derive(Clone, Copy, Debug)]
pub struct PhysGm {
    region: Region,
}

impl PhysGm {
    /// GM over `region`, which must be memory this image may read and write for as long as the
    /// value lives (the boot table's `gm` region, checked by `BootTable::validate`).
    ///
    /// # Safety
    ///
    /// `region` is mapped, readable and writable memory that no Rust reference covers; other
    /// CPUs touch it only in the turns the register handshake gives them.
    pub const unsafe fn new(region: Region) -> Self {
        Self { region }
    }

    fn check(&self, addr: u64, len: usize) -> Result<(), GmFault> {
        if self.region.contains(addr, len as u64) {
            Ok(())
        } else {
            Err(GmFault {
                addr,
                len: len as u64, kind: simpler_core::gm::GmFaultKind::Outside })
        }
    }
}

impl Gm for PhysGm {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        self.check(addr, dst.len())?;
        // SAFETY: `[addr, addr + len)` lies in the GM region (checked above), which `new`'s
        // contract makes readable memory no reference aliases; `dst` is a distinct buffer.
        unsafe {
            core::ptr::copy_nonoverlapping(addr as usize as *const u8, dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        self.check(addr, src.len())?;
        // SAFETY: as in `read`, for a writable destination.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), addr as usize as *mut u8, src.len())
        };
        Ok(())
    }
}
