//! The host crate's operating-system calls, and with them its only `unsafe` code.
//!
//! What lives here, by user:
//!
//! - memory, for level 3: [`Mapping`] (an owned `mmap`, unmapped on drop: anonymous shared
//!   or private, or a POSIX shared-memory object) and [`Region`] (a window into memory its
//!   owner keeps mapped); for hbg and the Graph recorder: [`PrivateMapping`] (zero pages
//!   touched only where written, borrowed as plain bytes) and [`ZeroedArray`] (the same, as an
//!   array of plain-data values);
//! - POSIX shared-memory objects ([`shm_create`], [`shm_open`], [`shm_unlink`], [`fd_size`]);
//! - processes, for level 3: [`fork`], [`die_with_parent`], [`exit_now`], [`try_reap`],
//!   [`kill`], [`pid`];
//! - cross-process futex waits and wakes on words in shared memory, and a random nonce;
//! - the calling thread's own accounting and scheduling: [`minor_faults`] and
//!   [`thread_cpu_time`] (each hbg bind phase reads both), and
//!   [`yield_to_busier_threads`] (the Graph recorder threads).
//!
//! Everything above this module handles only safe types and functions, except the few `unsafe
//! fn`s here whose soundness depends on their caller ([`fork`], [`Mapping::bytes`],
//! [`Region::bytes_mut`]): each states its contract in a `# Safety` section, and each call
//! site says why it holds. ([`Region::bytes`] has such a contract too but stays a safe fn:
//! it is reachable from the public API.)
//!
//! A [`Region`] does not borrow its [`Mapping`]: its owner (a buffer, an import, the
//! FORK_SHM arena, a mailbox) keeps the mapping alive while the region is used, and a forked
//! child never unmaps what it inherited.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// An owned memory mapping, unmapped when dropped.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is a plain range of process memory with no thread affinity; all access
// goes through `Region`, whose methods copy bytes or hand out atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared access never creates overlapping `&mut`.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(len: usize, prot: i32, flags: i32, fd: i32) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses; no existing memory is
        // touched. The result is checked for MAP_FAILED before use.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { ptr, len })
    }

    /// A zero-filled mapping shared with every child forked after this call
    /// (`MAP_SHARED | MAP_ANONYMOUS`): the mailboxes, the doorbells and the FORK_SHM arena.
    pub fn anon_shared(len: usize) -> io::Result<Self> {
        Self::map(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )
    }

    /// A zero-filled private mapping: a child forked after this call sees a copy-on-write
    /// snapshot (FORK_COW).
    pub fn anon_private(len: usize) -> io::Result<Self> {
        Self::map(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )
    }

    /// Maps `len` bytes of a shared-memory object, read-only unless `writable`.
    pub fn shm(fd: &OwnedFd, len: usize, writable: bool) -> io::Result<Self> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        Self::map(len, prot, libc::MAP_SHARED, fd.as_raw_fd())
    }

    /// The whole mapping as a [`Region`], which the holder uses only while this mapping lives.
    pub fn region(&self) -> Region {
        Region {
            ptr: self.ptr.as_ptr(),
            len: self.len,
        }
    }

    /// Bytes mapped, as asked for (the kernel maps whole pages; the tail past `len` is not
    /// reachable through this type).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The mapping's first byte's address in this process (for FORK_SHM and FORK_COW, also
    /// in every child forked after it was made).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The 4-byte atomic at `offset` (4-aligned), borrowed from the mapping.
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        let end = offset.checked_add(4)?;
        if end > self.len || offset % 4 != 0 {
            return None;
        }
        // SAFETY: 4 bytes inside this live mapping, 4-aligned (mappings are page-aligned);
        // every process touches this word only through atomics; the borrow ends before the
        // mapping is dropped.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(offset).cast()) })
    }

    /// `len` bytes at `offset`, borrowed from the mapping; `None` when the range is not
    /// inside it.
    ///
    /// # Safety
    ///
    /// Nothing may write the range while the slice is held: no other thread, and no other
    /// process sharing the mapping (the mailbox protocol reads a frame only after its state
    /// word says the writer is done, and the writer touches it again only after the reader
    /// hands the frame back).
    pub unsafe fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: inside this live mapping; `u8` has no validity invariant; the borrow ends
        // before the mapping is dropped; the caller guarantees no writer meanwhile.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range this value mapped; every Region into it is tied to
        // its owner's lifetime by the callers (they keep the Mapping alive while they use it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A private, zero-filled anonymous mapping owned by one value: the hbg mirror's regions and
/// image buffers, a Graph recorder's private runtime. Its pages are the kernel's zero pages
/// until first written, so standing up tens of MB costs only the pages a bind touches (an
/// aligned heap allocation would be zeroed eagerly).
///
/// Unlike [`Mapping`] it hands out no [`Region`], and no other process writes it (a child
/// forked later gets a copy-on-write snapshot), so borrowing it as bytes is safe.
#[derive(Debug)]
pub struct PrivateMapping {
    map: Mapping,
}

impl PrivateMapping {
    /// Maps `len` zero bytes (`MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE`); `len` 0 is
    /// refused.
    pub fn new(len: usize) -> io::Result<Self> {
        Ok(Self {
            map: Mapping::anon_private(len)?,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// The whole mapping, borrowed.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the whole live mapping, borrowed from `self` (so it is not unmapped while
        // the slice lives); nothing writes it meanwhile: no `Region` into it exists, no other
        // process writes a private mapping, and writing here needs `&mut self`; `u8` has no
        // validity invariant.
        unsafe { std::slice::from_raw_parts(self.map.ptr.as_ptr(), self.map.len) }
    }

    /// The whole mapping as bytes the caller owns exclusively (to carve typed state out of).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the whole live mapping; `&mut self` makes this the only reference to it for
        // the borrow's duration (no `Region` into it exists, and no other process writes a
        // private mapping); `u8` has no validity invariant.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.as_ptr(), self.map.len) }
    }
}

/// `len` zeroed `T`s on a [`PrivateMapping`]: fresh zero pages from the kernel, each committed
/// only when first written. The allocator's zeroed allocation gives that only above its mmap
/// threshold, which glibc raises as large blocks are freed; below it, and always on a thread's
/// own arena, it clears the memory page by page and commits it all at once.
pub struct ZeroedArray<T> {
    /// Exactly the elements' bytes; `None` for no element.
    map: Option<PrivateMapping>,
    _elem: std::marker::PhantomData<T>,
}

impl<T> Default for ZeroedArray<T> {
    /// No element, nothing mapped.
    fn default() -> Self {
        Self {
            map: None,
            _elem: std::marker::PhantomData,
        }
    }
}

impl<T: bytemuck::Pod> ZeroedArray<T> {
    /// Maps `len` zeroed elements (nothing for `len` 0).
    pub fn new(len: usize) -> io::Result<Self> {
        // A mapping starts on a page, so a `T` aligned to a page or less can be cast onto it;
        // the element count is the mapping's length over the element's size.
        const { assert!(std::mem::align_of::<T>() <= 4096 && std::mem::size_of::<T>() > 0) };
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "array size overflows"))?;
        let map = (bytes > 0)
            .then(|| PrivateMapping::new(bytes))
            .transpose()?;
        Ok(Self {
            map,
            _elem: std::marker::PhantomData,
        })
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.map
            .as_ref()
            .map_or(&[], |m| bytemuck::cast_slice(m.bytes()))
    }
}

impl<T: bytemuck::Pod> std::ops::DerefMut for ZeroedArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.map {
            Some(m) => bytemuck::cast_slice_mut(m.bytes_mut()),
            None => &mut [],
        }
    }
}

/// A window into a [`Mapping`], used while the mapping lives: the owner keeps it alive (a
/// registry entry, the Worker's arena, a buffer, or a mapping a forked child inherited and
/// never unmaps); the type itself does not borrow it. Reads and writes copy bytes; other
/// processes may write the same memory concurrently, which the level-3 protocol orders with
/// the mailbox's atomic state words.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is an address range; see `Mapping`.
unsafe impl Send for Region {}
// SAFETY: see `Mapping`.
unsafe impl Sync for Region {}

impl Region {
    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window holds no byte (a zero-length sub-region).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The window's first byte's address in this process.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The sub-region `[offset, offset + len)`, if inside.
    pub fn sub(&self, offset: usize, len: usize) -> Option<Region> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| Region {
            // SAFETY: offset <= len of a live region, so the pointer stays in (or one past) it.
            ptr: unsafe { self.ptr.add(offset) },
            len,
        })
    }

    /// Sets every byte of the window to zero (as [`Self::write`] of zeros, without a buffer).
    pub fn zero(&self) {
        // SAFETY: the window's `len` bytes lie in memory its owner keeps mapped; writing
        // through the raw pointer creates no reference that could alias another.
        unsafe { std::ptr::write_bytes(self.ptr, 0, self.len) };
    }

    /// Copies `out.len()` bytes from `offset`; `false` when the range is not inside.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let Some(src) = self.sub(offset, out.len()) else {
            return false;
        };
        // SAFETY: `src` lies inside this live region and `out` is a distinct local buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.ptr, out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `data` to `offset`; `false` when the range is not inside. The region must be
    /// writable (a read-only mapping faults, which is the point of mapping READ buffers so).
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        let Some(dst) = self.sub(offset, data.len()) else {
            return false;
        };
        // SAFETY: `dst` lies inside this live region and `data` is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.ptr, data.len()) };
        true
    }

    /// The bytes as a shared slice.
    ///
    /// Safe to call, unlike [`Self::bytes_mut`], because it is part of the public API (through
    /// `l3::import::Imported::region`); but the slice is only valid while the memory stays
    /// mapped and nothing (no thread of this process, no other process) writes it, which the
    /// holder of the region has to see to: the slice's lifetime is not tied to the mapping.
    /// At level 3 the dependency engine orders every writer of a range after the tasks that
    /// read it, and the registry keeps an import mapped until it is released.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: not guaranteed by this function alone (see its doc): a region of `len`
        // bytes its holder keeps mapped and unwritten while the slice lives; `u8` has no
        // alignment or validity invariant.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes as a mutable slice, for a holder that owns the range for the slice's life (a
    /// running SUB task's writable argument, a buffer being handed out). Faults if the
    /// mapping is read-only.
    ///
    /// # Safety
    ///
    /// The memory must stay mapped while the slice is held, and no other reference to it (in
    /// this process) and no access from another process may overlap the slice meanwhile: a
    /// `Region` is `Copy`, so nothing but the caller's protocol prevents a second slice over
    /// the same bytes.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: a region of `len` bytes the caller keeps mapped and uses exclusively for
        // the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

fn shm_path(name: &str) -> io::Result<CString> {
    CString::new(format!("/{name}")).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Creates a new POSIX shared-memory object `name` (without the leading `/`) of `len` bytes.
pub fn shm_create(name: &str, len: usize) -> io::Result<OwnedFd> {
    let path = shm_path(name)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe {
        libc::shm_open(
            path.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by shm_open and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: resizing the object this process just created.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        let e = io::Error::last_os_error();
        let _ = shm_unlink(name);
        return Err(e);
    }
    Ok(fd)
}

/// Opens an existing POSIX shared-memory object, read-only unless `writable`.
pub fn shm_open(name: &str, writable: bool) -> io::Result<OwnedFd> {
    let path = shm_path(name)?;
    let flags = if writable {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    };
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::shm_open(path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by shm_open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The size of the object behind `fd`.
pub fn fd_size(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// Removes the name of a POSIX shared-memory object (mappings stay valid until unmapped).
pub fn shm_unlink(name: &str) -> io::Result<()> {
    let path = shm_path(name)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    if unsafe { libc::shm_unlink(path.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What `fork` returned in this process.
pub enum Forked {
    /// This is the parent; the child has this pid.
    Parent(i32),
    /// This is the child.
    Child,
}

/// Forks the process.
///
/// # Safety
///
/// In the child ([`Forked::Child`]) the caller must finish with [`exit_now`] and never return
/// into its frames, unwind or run the parent's destructors (they belong to the parent's
/// program: a destructor would, say, unlink the parent's shared-memory names). The child has
/// only the calling thread: the caller must not rely on another thread of the process, and
/// should fork before it starts threads of its own (a lock another thread held at the fork
/// stays held in the child; the child then blocks on it, and its parent's start-up deadline
/// reports it).
pub unsafe fn fork() -> io::Result<Forked> {
    // SAFETY: `fork` itself has no memory-safety preconditions; what the child may do
    // afterwards is the caller's contract above.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// In a child: asks for SIGKILL when the parent dies, and reports whether the parent is
/// already gone (then the child should exit at once).
pub fn die_with_parent(parent: i32) -> bool {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and no pointers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() != parent }
}

/// In a child: leaves the parent's session and process group, so a signal sent to the
/// parent's group (a job launcher ending the parent) does not reach it. Returns whether it
/// could. (Level 4's rank reaper is its one user.)
#[cfg(feature = "mpi")]
pub fn detach() -> bool {
    // SAFETY: setsid takes no arguments and touches no memory.
    unsafe { libc::setsid() != -1 }
}

/// This process's id.
pub fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Ends this process at once, running no destructors and no exit handlers.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildExit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl std::fmt::Display for ChildExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code(c) => write!(f, "exited with code {c}"),
            Self::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// Reaps `pid` if it has ended; `Ok(None)` while it runs.
pub fn try_reap(pid: i32) -> io::Result<Option<ChildExit>> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r == 0 {
        return Ok(None);
    }
    Ok(Some(if libc::WIFSIGNALED(status) {
        ChildExit::Signal(libc::WTERMSIG(status))
    } else {
        ChildExit::Code(libc::WEXITSTATUS(status))
    }))
}

/// Sends SIGKILL to `pid`.
pub fn kill(pid: i32) {
    // SAFETY: kill takes plain integers; a stale pid yields ESRCH, which is ignored.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Blocks while `word` holds `expected`, for at most `timeout`. Works across processes (the
/// word lives in a shared mapping, so the futex is not process-private). Returns on a wake, a
/// value change, a timeout or a signal; the caller re-checks its condition.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 4-byte atomic; `ts` outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter blocked on `word`, in any process.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 4-byte atomic.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Eight random bytes from the kernel.
pub fn random8() -> io::Result<[u8; 8]> {
    let mut out = [0u8; 8];
    let mut got = 0;
    while got < out.len() {
        // SAFETY: writes at most `out.len() - got` bytes into the tail of `out`.
        let r = unsafe { libc::getrandom(out[got..].as_mut_ptr().cast(), out.len() - got, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += r as usize;
    }
    Ok(out)
}

/// Minor page faults this thread has taken so far (`getrusage(RUSAGE_THREAD)`).
pub fn minor_faults() -> u64 {
    // SAFETY: an all-zero `rusage` is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer; RUSAGE_THREAD reads the calling thread's counters.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_minflt as u64
}

/// CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock id is a constant the kernel knows.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Makes the calling thread give way to the process's other threads when they want the same
/// CPU: `SCHED_BATCH` (a batch thread does not preempt a running one when it wakes) at nice
/// 10 (a smaller share). Best effort: where the system refuses, the thread keeps the default
/// policy; off Linux it does nothing.
pub fn yield_to_busier_threads() {
    #[cfg(target_os = "linux")]
    // SAFETY: both calls act on the calling thread (id 0) and read only the parameter struct
    // passed by reference, which lives across the call; failure is reported by the return
    // value, which is ignored (best effort).
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

#[cfg(test)]
mod tests {
    use super::{minor_faults, ZeroedArray};

    #[test]
    fn a_zeroed_array_is_committed_only_where_written() {
        // Two large blocks freed first: the first raises glibc's mmap threshold, the second
        // then comes from this thread's heap and stays there, written. A zeroed allocation
        // of the array's size would now be cleared page by page; the array must not be.
        for _ in 0..2 {
            let block = vec![1u8; 24 << 20];
            drop(std::hint::black_box(block));
        }
        let before = minor_faults();
        let mut words = ZeroedArray::<u64>::new(2 << 20).expect("16 MiB of address space");
        let made = minor_faults() - before;
        assert!(
            made < 16,
            "{made} faults making a 16 MiB array: its pages were touched"
        );
        assert!(words.iter().step_by(4099).all(|&w| w == 0));
        let before = minor_faults();
        for page in 0..8 {
            words[page * 512 + 3] = page as u64 + 1;
        }
        let written = minor_faults() - before;
        assert!(
            (8..16).contains(&written),
            "{written} faults writing 8 pages"
        );
        assert_eq!(words.len(), 2 << 20);
        assert_eq!(words[7 * 512 + 3], 8);
    }

    #[test]
    fn an_empty_zeroed_array_maps_nothing() {
        let empty = ZeroedArray::<u64>::new(0).expect("nothing to map");
        assert!(empty.is_empty());
        assert!(ZeroedArray::<u32>::default().is_empty());
    }
}
