//! Buffers the Worker owns: their backings, descriptors and life.
//!
//! | backend | made by | how a child reaches it |
//! |---|---|---|
//! | POSIX_SHM | `shm_open` of a name unique to the Worker's nonce, any time | maps it by name (map-once) |
//! | FORK_SHM | a slice of the shared arena the Worker maps before it forks | the same address, inherited |
//! | FORK_COW | a private mapping made before `init()` (READ only) | its copy-on-write snapshot at the same address |
//! | DEVICE_MALLOC | `alloc_child_tensor`: device memory on one chip | only that chip, by address |
//!
//! A [`Buffer`] is a cheap handle; the Worker keeps every live buffer in its registry until
//! `release_buffer` or `close`. Closing sets `closed` first (so no new tensor or descriptor is
//! derived), then unlinks the name; the mapping goes when the last handle drops.

use super::L3Error;
use crate::os::{shm_create, shm_unlink, Mapping, Region};
use simpler_core::{
    AccessMode, AddressSpace, BackendKind, BufferDescriptor, CanonicalIdentity, DataType, Tensor,
    ValidTensor,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Allocation granule of the FORK_SHM arena.
const ARENA_ALIGN: u64 = 1024;

pub(super) enum Backing {
    Shm {
        name: String,
        map: Mapping,
    },
    Arena {
        arena: Arc<Arena>,
        offset: u64,
        region: Region,
    },
    Cow {
        map: Mapping,
    },
    Device {
        chip: usize,
        addr: u64,
    },
}

pub(super) struct BufferInner {
    pub(super) desc: BufferDescriptor,
    pub(super) backing: Backing,
    closed: AtomicBool,
    unlinked: AtomicBool,
}

/// A buffer the Worker owns, named on the wire by its [`BufferDescriptor`].
#[derive(Clone)]
pub struct Buffer {
    pub(super) inner: Arc<BufferInner>,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("buffer_id", &self.inner.desc.identity.buffer_id)
            .field("backend", &self.inner.desc.backend())
            .field("nbytes", &self.inner.desc.nbytes)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Buffer {
    pub(super) fn new(desc: BufferDescriptor, backing: Backing) -> Self {
        Self {
            inner: Arc::new(BufferInner {
                desc,
                backing,
                closed: AtomicBool::new(false),
                unlinked: AtomicBool::new(false),
            }),
        }
    }

    fn live(&self) -> Result<&BufferInner, L3Error> {
        if self.is_closed() {
            return Err(L3Error::BufferClosed {
                buffer_id: self.inner.desc.identity.buffer_id,
            });
        }
        Ok(&self.inner)
    }

    /// The descriptor; refused once the buffer is released.
    pub fn descriptor(&self) -> Result<BufferDescriptor, L3Error> {
        Ok(self.live()?.desc)
    }

    /// The identity (available after release too, for diagnostics).
    pub fn identity(&self) -> CanonicalIdentity {
        self.inner.desc.identity
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.inner.desc.nbytes
    }

    /// The backend it was created with (POSIX_SHM, FORK_SHM, FORK_COW or DEVICE_MALLOC).
    pub fn backend(&self) -> BackendKind {
        self.inner
            .desc
            .backend()
            .expect("the Worker mints only valid descriptors")
    }

    /// Whether the buffer was released.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The chip a DEVICE_MALLOC buffer lives on.
    pub fn chip(&self) -> Option<usize> {
        match self.inner.backing {
            Backing::Device { chip, .. } => Some(chip),
            _ => None,
        }
    }

    /// A dense row-major wire tensor of `shapes` at `byte_offset`; refused once released.
    pub fn tensor(
        &self,
        shapes: &[u32],
        dtype: DataType,
        byte_offset: u64,
    ) -> Result<ValidTensor, L3Error> {
        Tensor::row_major(self.live()?.desc, byte_offset, shapes, dtype).map_err(L3Error::Tensor)
    }

    /// A strided wire tensor (element strides); refused once released.
    pub fn tensor_strided(
        &self,
        shapes: &[u32],
        strides: &[u32],
        dtype: DataType,
        byte_offset: u64,
    ) -> Result<ValidTensor, L3Error> {
        Tensor::new(self.live()?.desc, byte_offset, shapes, strides, dtype).map_err(L3Error::Tensor)
    }

    fn host_region(&self) -> Result<Region, L3Error> {
        let inner = self.live()?;
        match &inner.backing {
            Backing::Shm { map, .. } | Backing::Cow { map } => Ok(map
                .region()
                .sub(0, inner.desc.nbytes as usize)
                .expect("mapped at least nbytes")),
            Backing::Arena { region, .. } => Ok(*region),
            Backing::Device { .. } => Err(L3Error::DeviceBufferAccess {
                buffer_id: inner.desc.identity.buffer_id,
            }),
        }
    }

    /// Copies `data` into the buffer at `offset` (host backings; the owner always may write,
    /// whatever access it grants consumers).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), L3Error> {
        let r = self.host_region()?;
        if r.write(offset as usize, data) {
            Ok(())
        } else {
            Err(L3Error::BufferRange {
                offset,
                len: data.len() as u64,
                nbytes: self.nbytes(),
            })
        }
    }

    /// Copies `out.len()` bytes from `offset` (host backings).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), L3Error> {
        let r = self.host_region()?;
        if r.read(offset as usize, out) {
            Ok(())
        } else {
            Err(L3Error::BufferRange {
                offset,
                len: out.len() as u64,
                nbytes: self.nbytes(),
            })
        }
    }

    /// Writes f32 values at byte `offset`.
    pub fn write_f32s(&self, offset: u64, values: &[f32]) -> Result<(), L3Error> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(offset, &bytes)
    }

    /// Reads `n` f32 values at byte `offset`.
    pub fn read_f32s(&self, offset: u64, n: usize) -> Result<Vec<f32>, L3Error> {
        let mut bytes = vec![0u8; n * 4];
        self.read(offset, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// The POSIX shared-memory name, if this is a POSIX_SHM buffer.
    pub fn shm_name(&self) -> Option<&str> {
        match &self.inner.backing {
            Backing::Shm { name, .. } => Some(name),
            _ => None,
        }
    }

    /// Marks the buffer closed and unlinks its name (idempotent; an unlink that failed is
    /// retried by the next call). Returns the first unlink error.
    pub(super) fn close(&self) -> Result<(), L3Error> {
        self.inner.closed.store(true, Ordering::Release);
        if let Backing::Shm { name, .. } = &self.inner.backing {
            if !self.inner.unlinked.load(Ordering::Acquire) {
                match shm_unlink(name) {
                    Ok(()) => self.inner.unlinked.store(true, Ordering::Release),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        self.inner.unlinked.store(true, Ordering::Release)
                    }
                    Err(e) => return Err(L3Error::Os(format!("unlink {name}: {e}"))),
                }
            }
        }
        Ok(())
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        if let Backing::Arena { arena, offset, .. } = &self.backing {
            arena.free(*offset);
        }
        if let Backing::Shm { name, .. } = &self.backing {
            if !self.unlinked.load(Ordering::Acquire) {
                let _ = shm_unlink(name);
            }
        }
    }
}

/// The FORK_SHM arena: one shared mapping made before the fork, carved first-fit.
pub(super) struct Arena {
    map: Mapping,
    live: Mutex<BTreeMap<u64, u64>>,
}

impl Arena {
    pub(super) fn new(bytes: usize) -> Result<Self, L3Error> {
        Ok(Self {
            map: Mapping::anon_shared(bytes.max(4096))
                .map_err(|e| L3Error::Os(format!("FORK_SHM arena: {e}")))?,
            live: Mutex::new(BTreeMap::new()),
        })
    }

    pub(super) fn region(&self) -> Region {
        self.map.region()
    }

    /// First fit, `ARENA_ALIGN`-aligned; returns the offset.
    pub(super) fn alloc(&self, bytes: u64) -> Option<u64> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let cap = self.map.len() as u64;
        let mut at = 0u64;
        for (&start, &len) in live.iter() {
            if at.checked_add(bytes)? <= start {
                break;
            }
            at = (start + len).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        }
        if at.checked_add(bytes)? > cap {
            return None;
        }
        live.insert(at, bytes);
        Some(at)
    }

    fn free(&self, offset: u64) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&offset);
    }
}

/// Makes the descriptor of a new backing.
pub(super) fn descriptor(
    identity: CanonicalIdentity,
    space: AddressSpace,
    access: AccessMode,
    backend: BackendKind,
    nbytes: u64,
    body: &[u8],
) -> Result<BufferDescriptor, L3Error> {
    BufferDescriptor::new(identity, space, access, backend, nbytes, body)
        .map_err(L3Error::Descriptor)
}

/// A POSIX_SHM buffer of `nbytes`, named after the owner's nonce and the buffer id.
pub(super) fn create_shm(
    identity: CanonicalIdentity,
    access: AccessMode,
    nbytes: u64,
) -> Result<Buffer, L3Error> {
    let name = shm_name(&identity);
    let fd = shm_create(&name, nbytes as usize)
        .map_err(|e| L3Error::Os(format!("shm_open {name}: {e}")))?;
    let map = match Mapping::shm(&fd, nbytes as usize, true) {
        Ok(m) => m,
        Err(e) => {
            let _ = shm_unlink(&name);
            return Err(L3Error::Os(format!("mmap {name}: {e}")));
        }
    };
    let desc = match descriptor(
        identity,
        AddressSpace::Host,
        access,
        BackendKind::PosixShm,
        nbytes,
        name.as_bytes(),
    ) {
        Ok(d) => d,
        Err(e) => {
            let _ = shm_unlink(&name);
            return Err(e);
        }
    };
    Ok(Buffer::new(desc, Backing::Shm { name, map }))
}

/// The prefix of every POSIX shared-memory name a Worker with this nonce makes.
pub fn shm_prefix(owner_instance_id: &[u8; 8]) -> String {
    let hex: String = owner_instance_id
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("spl_{hex}_")
}

fn shm_name(identity: &CanonicalIdentity) -> String {
    format!(
        "{}{}",
        shm_prefix(&identity.owner_instance_id),
        identity.buffer_id
    )
}

/// A FORK_SHM buffer carved from the arena.
pub(super) fn create_arena(
    arena: &Arc<Arena>,
    identity: CanonicalIdentity,
    access: AccessMode,
    nbytes: u64,
) -> Result<Buffer, L3Error> {
    let offset = arena
        .alloc(nbytes)
        .ok_or(L3Error::ArenaFull { bytes: nbytes })?;
    let region = arena
        .region()
        .sub(offset as usize, nbytes as usize)
        .expect("the arena allocator stays inside the arena");
    // Fresh arena memory may hold a released buffer's bytes; hand it out zeroed.
    region.zero();
    let desc = descriptor(
        identity,
        AddressSpace::Host,
        access,
        BackendKind::ForkShm,
        nbytes,
        &region.addr().to_le_bytes(),
    );
    let desc = match desc {
        Ok(d) => d,
        Err(e) => {
            arena.free(offset);
            return Err(e);
        }
    };
    Ok(Buffer::new(
        desc,
        Backing::Arena {
            arena: arena.clone(),
            offset,
            region,
        },
    ))
}

/// A FORK_COW buffer: a private mapping, READ only for consumers.
pub(super) fn create_cow(identity: CanonicalIdentity, nbytes: u64) -> Result<Buffer, L3Error> {
    let map = Mapping::anon_private(nbytes as usize)
        .map_err(|e| L3Error::Os(format!("FORK_COW mapping: {e}")))?;
    let desc = descriptor(
        identity,
        AddressSpace::Host,
        AccessMode::Read,
        BackendKind::ForkCow,
        nbytes,
        &map.addr().to_le_bytes(),
    )?;
    Ok(Buffer::new(desc, Backing::Cow { map }))
}

impl Buffer {
    /// The region of a FORK_COW buffer (inherited by children forked later).
    pub(super) fn cow_region(&self) -> Option<Region> {
        match &self.inner.backing {
            Backing::Cow { map } => Some(map.region()),
            _ => None,
        }
    }
}
