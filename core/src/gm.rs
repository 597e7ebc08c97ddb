//! Global memory (GM) as device code sees it: byte ranges read into and written from the core's
//! local buffers, the way an AICore moves tiles between GM and its unified buffer.
//!
//! The device implements [`Gm`] over its memory bus; the simulator over its GM arena, checking
//! every range. A range outside GM is a [`GmFault`], which the kernel reports as its failure.

/// An access outside device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GmFault {
    /// First byte of the access.
    pub addr: u64,
    /// Length of the access, in bytes.
    pub len: u64,
}

impl core::fmt::Display for GmFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "access of {} bytes at {:#x} is outside device memory",
            self.len, self.addr
        )
    }
}

impl core::error::Error for GmFault {}

/// Device global memory.
pub trait Gm: Sync {
    /// Copies `dst.len()` bytes at `addr` into `dst`.
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault>;
    /// Copies `src` to `addr`.
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault>;
}

/// A GM with no memory: every access is a [`GmFault`]. What host code that must never touch
/// device memory runs against (a recording's private runtime, a test's stand-in).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoGm;

impl Gm for NoGm {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: dst.len() as u64,
        })
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: src.len() as u64,
        })
    }
}
