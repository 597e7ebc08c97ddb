//! The operating-system calls the L3 level needs, and the only `unsafe` code in the host crate.
//!
//! Shared mappings (anonymous and POSIX shared-memory objects), `fork` and the child's
//! parent-death signal, reaping, signals, futex waits and wakes on words that live in shared
//! memory, and the random nonce. Everything above this module handles only safe types:
//! [`Mapping`] (an owned mapping, unmapped on drop) and [`Region`] (a checked window into memory
//! that outlives it).

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

    /// The whole mapping as a region.
    pub fn region(&self) -> Region {
        Region {
            ptr: self.ptr.as_ptr(),
            len: self.len,
        }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Its address in this process.
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

    /// The whole mapping as bytes the caller owns exclusively (to carve typed state out of).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the whole live mapping; `&mut self` makes this the only reference to it for
        // the borrow's duration; `u8` has no validity invariant.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// `len` bytes at `offset`, borrowed from the mapping. Another process may write them;
    /// the mailbox protocol reads them only after the state word says the writer is done.
    pub fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: inside this live mapping; `u8` has no validity invariant; the borrow ends
        // before the mapping is dropped.
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

/// A window into a [`Mapping`], used while the mapping lives (the owner keeps it alive: a
/// registry entry, the Worker's arena, or a mapping a forked child inherited and never unmaps). Reads and writes
/// copy bytes; other processes may write the same memory concurrently, which the protocol
/// above orders with the atomics this type hands out.
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
    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its address in this process.
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

    /// The bytes as a shared slice. The protocol guarantees no writer touches them while the
    /// slice is held (the dependency engine orders every writer after the readers it overlaps).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a live region of `len` bytes; `u8` has no alignment or validity invariant.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes as a mutable slice, for a task that owns the range for its duration (a SUB
    /// callable's writable argument). Faults if the mapping is read-only.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: a live region of `len` bytes; the dependency engine gives the running task
        // exclusive use of a range it writes, so no other reference aliases it meanwhile.
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

/// Forks the process. The child must finish with [`exit_now`] and never return into the
/// caller's frames (they belong to the parent's program).
pub fn fork() -> io::Result<Forked> {
    // SAFETY: the caller forks while it has no other threads of its own; the child runs only
    // code that touches its own copies of the parent's data and then calls `_exit`.
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
