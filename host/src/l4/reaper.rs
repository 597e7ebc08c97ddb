//! A rank's reaper: a process forked at start-up that outlives the rank only to unlink the
//! shared-memory names the rank's L3 Worker left behind. A rank that is killed (or crashes)
//! runs no destructor, so its `POSIX_SHM` buffers would stay in `/dev/shm` on its host; the
//! reaper waits on a socket the rank holds open for its whole life, and when the kernel closes
//! it (the rank exited, however), removes every name under the rank's prefix. After a clean
//! `close()` there is nothing left to remove.

use super::L4Error;
use crate::os::{self, Forked};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

/// The rank's end of the reaper's socket, before the reaper knows whose names to watch.
pub(super) struct Reaper {
    stream: UnixStream,
}

impl Reaper {
    /// Forks the reaper. Called before the rank starts any thread (the L3 Worker's are later).
    #[allow(unsafe_code)] // the fork: see its SAFETY comment
    pub(super) fn start() -> Result<Self, L4Error> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| L4Error::Mpi(format!("reaper socket: {e}")))?;
        // SAFETY: the rank has started no thread yet (this runs first in `rank::start`), so
        // the child holds no lock another thread took; it only reads its socket, lists and
        // unlinks files, and ends with `exit_now`, never returning into the rank's frames.
        match unsafe { os::fork() } {
            Ok(Forked::Child) => {
                drop(ours);
                // Out of the rank's process group: the launcher that ends a dead rank's
                // group must not end its reaper before the reaper has done its work.
                os::detach();
                reap(theirs);
                os::exit_now(0)
            }
            Ok(Forked::Parent(_)) => Ok(Self { stream: ours }),
            Err(e) => Err(L4Error::Mpi(format!("reaper fork: {e}"))),
        }
    }

    /// Tells the reaper the prefix of the names to remove once this process is gone, and keeps
    /// the socket open for the rest of the process's life (the kernel closes it at exit).
    pub(super) fn watch(mut self, prefix: &str) -> Result<(), L4Error> {
        writeln!(self.stream, "{prefix}")
            .map_err(|e| L4Error::Mpi(format!("reaper socket: {e}")))?;
        std::mem::forget(self.stream);
        Ok(())
    }
}

/// The reaper's life: the prefix, then end of file (the rank is gone), then the names.
fn reap(mut socket: UnixStream) {
    let mut got = Vec::new();
    let _ = socket.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    // Only a Worker's own prefix (never an empty one, which would match every name).
    let Some(prefix) = text
        .lines()
        .next()
        .filter(|p| p.starts_with("spl_") && p.len() > 4)
    else {
        return;
    };
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        if let Some(name) = entry.file_name().to_str() {
            if name.starts_with(prefix) {
                let _ = os::shm_unlink(name);
            }
        }
    }
}
