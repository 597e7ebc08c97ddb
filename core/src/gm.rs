//! Global memory (GM) as device code sees it: byte ranges read into and written from the core's
//! local buffers, the way an AICore moves tiles between GM and its unified buffer, and, where
//! the platform can, f32 ranges lent to a kernel to compute on in place.
//!
//! The device implements [`Gm`] over its memory bus; the simulator over its GM arena, checking
//! every range. A range outside GM is a [`GmFault`] of kind [`GmFaultKind::Outside`], which the
//! kernel reports as its failure; an access the platform refuses because another access in
//! progress overlaps it is one of kind [`GmFaultKind::Conflict`].
//!
//! ## Leases
//!
//! [`Gm::lend`] and [`Gm::lend_mut`] hand out a GM range as `&[f32]` ([`GmRef`]) or
//! `&mut [f32]` ([`GmMut`]) for as long as the guard lives, so a kernel can give its operands
//! straight to the tile operations instead of copying them through the local buffer. Their
//! default lends nothing (`None`): the caller then moves the data with [`Gm::read`] and
//! [`Gm::write`], which every platform has. A platform that lends keeps the lent bytes free of
//! any other access that could race with them (the simulator refuses such an access with a
//! conflict); the guard ends the lease when dropped. A guard that is leaked keeps its lease, so
//! later overlapping accesses are refused: leaking is never unsound.

/// Why an access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GmFaultKind {
    /// The range is not inside device memory.
    Outside,
    /// Another access in progress overlaps the range in a way that would race with this one
    /// (a lease, or a bulk copy beside a lease); the platform refused it instead.
    Conflict,
}

/// A GM access that was refused: outside device memory, or in conflict with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GmFault {
    /// First byte of the access.
    pub addr: u64,
    /// Length of the access, in bytes.
    pub len: u64,
    /// Why it was refused.
    pub kind: GmFaultKind,
}

impl GmFault {
    /// An access of `len` bytes at `addr` outside device memory.
    pub const fn outside(addr: u64, len: u64) -> Self {
        Self {
            addr,
            len,
            kind: GmFaultKind::Outside,
        }
    }

    /// An access of `len` bytes at `addr` refused for overlapping another in progress.
    pub const fn conflict(addr: u64, len: u64) -> Self {
        Self {
            addr,
            len,
            kind: GmFaultKind::Conflict,
        }
    }
}

impl core::fmt::Display for GmFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.kind {
            GmFaultKind::Outside => write!(
                f,
                "access of {} bytes at {:#x} is outside device memory",
                self.len, self.addr
            ),
            GmFaultKind::Conflict => write!(
                f,
                "access of {} bytes at {:#x} overlaps another access in progress",
                self.len, self.addr
            ),
        }
    }
}

impl core::error::Error for GmFault {}

/// Device global memory.
pub trait Gm: Sync {
    /// Copies `dst.len()` bytes at `addr` into `dst`.
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault>;
    /// Copies `src` to `addr`.
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault>;

    /// Lends the `elems` f32 values at `addr` for reading in place while the guard lives.
    /// `None`: this platform does not lend that range (use [`Gm::read`]); `Some(Err)`: the
    /// range is outside GM, or another access in progress would race with the lease.
    fn lend(&self, addr: u64, elems: usize) -> Option<Result<GmRef<'_>, GmFault>> {
        let _ = (addr, elems);
        None
    }

    /// Lends the `elems` f32 values at `addr` for reading and writing in place while the guard
    /// lives, as [`Gm::lend`] does; no other access may touch them meanwhile.
    fn lend_mut(&self, addr: u64, elems: usize) -> Option<Result<GmMut<'_>, GmFault>> {
        let _ = (addr, elems);
        None
    }

    /// Ends `lease`; its guard calls this when dropped. A platform that lends nothing never
    /// receives one.
    fn end_lease(&self, lease: Lease) {
        let _ = lease;
    }

    /// Hints that bytes `addr..addr + len` will be read soon, for a platform that can start
    /// moving them towards the core while it computes (a kernel's next slice). Nothing is
    /// read, written or checked: a range outside GM is ignored, and a platform that cannot
    /// prefetch does nothing.
    fn prefetch(&self, addr: u64, len: usize) {
        let _ = (addr, len);
    }
}

/// What a platform needs to end a lease: its own word for it. Only the platform that made it
/// can build one (its constructor is `unsafe`), and it is neither `Clone` nor `Copy`, so safe
/// code cannot end a lease it does not hold.
#[derive(Debug, PartialEq, Eq)]
pub struct Lease {
    index: u32,
    key: u64,
}

impl Lease {
    /// The lease the platform knows by `index` and `key`.
    ///
    /// # Safety
    ///
    /// Only the platform that lent a range may build its `Lease`, once, to put in the guard
    /// it returns: ending a lease while the guard's borrow is alive would let another access
    /// race with it.
    #[allow(unsafe_code)]
    pub const unsafe fn new(index: u32, key: u64) -> Self {
        Self { index, key }
    }

    /// The platform's words for the lease: `(index, key)`.
    pub const fn parts(&self) -> (u32, u64) {
        (self.index, self.key)
    }
}

/// A guard's lease, given back to the platform that made it when dropped.
struct LeaseEnd<'a> {
    gm: &'a dyn Gm,
    lease: Option<Lease>,
}

impl Drop for LeaseEnd<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.gm.end_lease(lease);
        }
    }
}

/// GM values lent for reading: derefs to `&[f32]`; ends the lease when dropped.
pub struct GmRef<'a> {
    data: &'a [f32],
    _end: LeaseEnd<'a>,
}

impl<'a> GmRef<'a> {
    /// The guard of `lease`, lending `data` and ended through `gm`.
    ///
    /// # Safety
    ///
    /// `data` must stay unwritten by anyone until `gm.end_lease(lease)` is called.
    #[allow(unsafe_code)]
    pub unsafe fn new(data: &'a [f32], gm: &'a dyn Gm, lease: Lease) -> Self {
        let lease = Some(lease);
        Self {
            data,
            _end: LeaseEnd { gm, lease },
        }
    }
}

impl core::ops::Deref for GmRef<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.data
    }
}

/// GM values lent for reading and writing: derefs to `&mut [f32]`; ends the lease when dropped.
pub struct GmMut<'a> {
    data: &'a mut [f32],
    _end: LeaseEnd<'a>,
}

impl<'a> GmMut<'a> {
    /// The guard of `lease`, lending `data` and ended through `gm`.
    ///
    /// # Safety
    ///
    /// Nobody else may read or write `data` until `gm.end_lease(lease)` is called.
    #[allow(unsafe_code)]
    pub unsafe fn new(data: &'a mut [f32], gm: &'a dyn Gm, lease: Lease) -> Self {
        let lease = Some(lease);
        Self {
            data,
            _end: LeaseEnd { gm, lease },
        }
    }
}

impl core::ops::Deref for GmMut<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.data
    }
}

impl core::ops::DerefMut for GmMut<'_> {
    fn deref_mut(&mut self) -> &mut [f32] {
        self.data
    }
}

/// A GM with no memory: every access is a [`GmFault`]. What host code that must never touch
/// device memory runs against (a recording's private runtime, a test's stand-in).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoGm;

impl Gm for NoGm {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        Err(GmFault::outside(addr, dst.len() as u64))
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        Err(GmFault::outside(addr, src.len() as u64))
    }
}
