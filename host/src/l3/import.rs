//! Resolving wire descriptors to memory in a consumer process: [`ImportRegistry`] under an
//! [`ImportContext`], and the [`MappedArgs`] a SUB callable receives.
//!
//! The registry maps each canonical identity once and keeps the mapping until the owner
//! releases the buffer (`IMPORT_RELEASE`) or the registry closes. A second descriptor under a
//! known identity must equal the first field for field, or it is refused with only the
//! differing fields named and the first mapping kept (callers may hold addresses into it).
//! A READ descriptor over POSIX shared memory is mapped read-only, so a write faults instead of
//! landing silently; a FORK-inherited address must lie inside a range the process really
//! inherited, so no descriptor can make the registry hand out an address it never mapped.

use crate::os::{fd_size, shm_open, Mapping, Region};
use simpler_core::blob::{BlobError, TaskArgsView};
use simpler_core::{
    AccessMode, AddressSpace, BackendKind, BufferDescriptor, CanonicalIdentity, DataType,
    ValidTensor,
};
use std::collections::HashMap;
use std::fmt;

/// Which side of the host-device relation a registry serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportContext {
    host_endpoint: bool,
    owner: Option<[u8; 8]>,
}

impl ImportContext {
    /// A host endpoint (a SUB child, the parent): refuses every DEVICE backing.
    pub const fn host() -> Self {
        Self {
            host_endpoint: true,
            owner: None,
        }
    }

    /// A device endpoint (a chip child) of the Worker whose nonce is `owner`: refuses DEVICE
    /// backings minted by any other Worker incarnation.
    pub const fn device(owner: [u8; 8]) -> Self {
        Self {
            host_endpoint: false,
            owner: Some(owner),
        }
    }

    /// Checks the endpoint rule for `desc` (on a cache miss, before any backend handling).
    pub fn check(&self, desc: &BufferDescriptor) -> Result<(), ImportError> {
        if desc.space() != Some(AddressSpace::Device) {
            return Ok(());
        }
        if self.host_endpoint {
            return Err(ImportError::EndpointRelation {
                reason: "a host endpoint cannot import a DEVICE backing".into(),
            });
        }
        if self.owner != Some(desc.identity.owner_instance_id) {
            return Err(ImportError::EndpointRelation {
                reason: format!(
                    "DEVICE backing owned by instance {} is not this endpoint's ({})",
                    hex(&desc.identity.owner_instance_id),
                    self.owner.map(|o| hex(&o)).unwrap_or_default()
                ),
            });
        }
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Memory this process inherited across `fork` and never unmaps while it runs: the FORK_SHM
/// arena and the FORK_COW buffers made before the fork. Only addresses inside these regions
/// resolve, so a descriptor cannot name memory the process never mapped.
#[derive(Clone, Debug, Default)]
pub struct ForkRanges {
    ranges: Vec<Region>,
}

impl ForkRanges {
    /// Adds a region made before the fork.
    pub fn add(&mut self, region: Region) {
        self.ranges.push(region);
    }

    /// The sub-region `[addr, addr + len)`, if it lies inside one inherited region.
    pub fn find(&self, addr: u64, len: u64) -> Option<Region> {
        let len = usize::try_from(len).ok()?;
        self.ranges.iter().find_map(|r| {
            let off = usize::try_from(addr.checked_sub(r.addr())?).ok()?;
            r.sub(off, len)
        })
    }
}

/// Why a descriptor or an argument list could not be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportError {
    /// The endpoint may not import this backing (`[UNSUPPORTED_ENDPOINT_RELATION]`).
    EndpointRelation {
        /// Which rule refused it.
        reason: String,
    },
    /// REMOTE_SIDECAR descriptors are never materialized locally.
    RemoteSidecar,
    /// A known identity arrived with a different descriptor; the first mapping is kept.
    Conflict {
        /// The identity already imported.
        identity: CanonicalIdentity,
        /// Only the differing fields, as `name: old -> new`.
        fields: Vec<String>,
    },
    /// The POSIX shared-memory object does not exist (the owner released it, or never made it).
    NotFound {
        /// The object's name (without the leading `/`).
        name: String,
    },
    /// The shared-memory object is shorter than its descriptor claims.
    TooSmall {
        /// The object's name (without the leading `/`).
        name: String,
        /// Its real size in bytes.
        size: u64,
        /// What the descriptor claims.
        nbytes: u64,
    },
    /// A FORK_* address outside every range this process inherited.
    NotInherited {
        /// The descriptor's address.
        addr: u64,
        /// The bytes claimed.
        nbytes: u64,
    },
    /// Opening or mapping failed.
    Os {
        /// What was being opened.
        what: String,
        /// The OS error.
        error: String,
    },
    /// The identity was never imported here.
    NotImported {
        /// The identity looked up.
        identity: CanonicalIdentity,
    },
    /// A DEVICE tensor reached a host process's argument mapping.
    DeviceArgument {
        /// The tensor's index.
        index: usize,
    },
    /// The blob failed to decode.
    Blob(BlobError),
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EndpointRelation { reason } => {
                write!(f, "[UNSUPPORTED_ENDPOINT_RELATION] {reason}")
            }
            Self::RemoteSidecar => f.write_str("REMOTE_SIDECAR backings are not materialized locally"),
            Self::Conflict { identity, fields } => write!(
                f,
                "buffer {} already imported with a different descriptor: {}",
                identity.buffer_id,
                fields.join(", ")
            ),
            Self::NotFound { name } => write!(
                f,
                "shared-memory object {name:?} does not exist (the owner released it or never created it)"
            ),
            Self::TooSmall { name, size, nbytes } => write!(
                f,
                "shared-memory object {name:?} is {size} bytes, short of the {nbytes} its descriptor claims"
            ),
            Self::NotInherited { addr, nbytes } => write!(
                f,
                "FORK backing at {addr:#x} ({nbytes} bytes) is not inside memory this process inherited"
            ),
            Self::Os { what, error } => write!(f, "cannot map {what}: {error}"),
            Self::NotImported { identity } => {
                write!(f, "buffer {} is not in the import registry", identity.buffer_id)
            }
            Self::DeviceArgument { index } => write!(
                f,
                "tensor {index} is a DEVICE backing, which cannot be mapped into a host process"
            ),
            Self::Blob(e) => write!(f, "task arguments: {e}"),
        }
    }
}

impl std::error::Error for ImportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Blob(e) => Some(e),
            _ => None,
        }
    }
}

/// One imported backing.
#[derive(Debug)]
pub struct Imported {
    desc: BufferDescriptor,
    base: u64,
    region: Option<Region>,
    _map: Option<Mapping>,
}

impl Imported {
    /// The descriptor it was imported under.
    pub fn descriptor(&self) -> &BufferDescriptor {
        &self.desc
    }

    /// Its base address in this process (host backings) or on the chip (device backings).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The whole backing as host memory, `None` for a device backing.
    pub fn region(&self) -> Option<Region> {
        self.region
    }

    /// Whether the descriptor grants writing.
    pub fn writable(&self) -> bool {
        matches!(
            self.desc.access_mode(),
            Some(AccessMode::Write | AccessMode::ReadWrite)
        )
    }

    /// Whether the backing is device memory.
    pub fn is_device(&self) -> bool {
        self.desc.space() == Some(AddressSpace::Device)
    }
}

/// Fields of two descriptors of one identity that differ, as `name: old -> new`.
pub fn differing_fields(old: &BufferDescriptor, new: &BufferDescriptor) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name}: {a} -> {b}"));
        }
    };
    field(
        "address_space",
        old.address_space.to_string(),
        new.address_space.to_string(),
    );
    field("access", old.access.to_string(), new.access.to_string());
    field(
        "backend_kind",
        old.backend_kind.to_string(),
        new.backend_kind.to_string(),
    );
    field("nbytes", old.nbytes.to_string(), new.nbytes.to_string());
    field(
        "owner_worker_path_id",
        old.owner_worker_path_id.to_string(),
        new.owner_worker_path_id.to_string(),
    );
    field(
        "body",
        format!("{:?}", body_text(old)),
        format!("{:?}", body_text(new)),
    );
    out
}

fn body_text(d: &BufferDescriptor) -> String {
    match d.backend() {
        Some(BackendKind::PosixShm) => String::from_utf8_lossy(d.body()).into_owned(),
        _ => hex(d.body()),
    }
}

/// The imports of one consumer process.
#[derive(Debug)]
pub struct ImportRegistry {
    context: ImportContext,
    fork: ForkRanges,
    entries: HashMap<CanonicalIdentity, Imported>,
}

impl ImportRegistry {
    /// An empty registry for `context`, trusting FORK addresses only inside `fork`.
    pub fn new(context: ImportContext, fork: ForkRanges) -> Self {
        Self {
            context,
            fork,
            entries: HashMap::new(),
        }
    }

    /// Maps `desc` once per identity and returns the import.
    pub fn materialize(&mut self, desc: &BufferDescriptor) -> Result<&Imported, ImportError> {
        if let Some(old) = self.entries.get(&desc.identity) {
            if old.desc != *desc {
                return Err(ImportError::Conflict {
                    identity: desc.identity,
                    fields: differing_fields(&old.desc, desc),
                });
            }
            return Ok(&self.entries[&desc.identity]);
        }
        self.context.check(desc)?;
        let imported = self.import(desc)?;
        Ok(self.entries.entry(desc.identity).or_insert(imported))
    }

    fn import(&self, desc: &BufferDescriptor) -> Result<Imported, ImportError> {
        let backend = desc.backend().ok_or(ImportError::Os {
            what: "descriptor".into(),
            error: "unknown backend".into(),
        })?;
        let nbytes = desc.nbytes;
        match backend {
            BackendKind::RemoteSidecar => Err(ImportError::RemoteSidecar),
            BackendKind::DeviceMalloc | BackendKind::VmmWindow => Ok(Imported {
                desc: *desc,
                base: desc.body_address().unwrap_or(0),
                region: None,
                _map: None,
            }),
            BackendKind::ForkShm | BackendKind::ForkCow => {
                let addr = desc.body_address().unwrap_or(0);
                let region = self
                    .fork
                    .find(addr, nbytes)
                    .ok_or(ImportError::NotInherited { addr, nbytes })?;
                Ok(Imported {
                    desc: *desc,
                    base: addr,
                    region: Some(region),
                    _map: None,
                })
            }
            BackendKind::PosixShm => {
                let name = String::from_utf8_lossy(desc.body()).into_owned();
                let writable = desc.access_mode() != Some(AccessMode::Read);
                let fd = shm_open(&name, writable).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        ImportError::NotFound { name: name.clone() }
                    } else {
                        ImportError::Os {
                            what: name.clone(),
                            error: e.to_string(),
                        }
                    }
                })?;
                let size = fd_size(&fd).map_err(|e| ImportError::Os {
                    what: name.clone(),
                    error: e.to_string(),
                })?;
                if size < nbytes {
                    return Err(ImportError::TooSmall { name, size, nbytes });
                }
                let map = Mapping::shm(&fd, nbytes.max(1) as usize, writable).map_err(|e| {
                    ImportError::Os {
                        what: name.clone(),
                        error: e.to_string(),
                    }
                })?;
                let region = map.region().sub(0, nbytes as usize);
                Ok(Imported {
                    desc: *desc,
                    base: map.addr(),
                    region,
                    _map: Some(map),
                })
            }
        }
    }

    /// Imports every tensor of one call and returns the imports of **this call's** tensors
    /// only, in argument order.
    pub fn materialize_args<'a>(
        &mut self,
        tensors: &'a [ValidTensor],
    ) -> Result<Vec<(&'a ValidTensor, ImportedView)>, ImportError> {
        let mut out = Vec::with_capacity(tensors.len());
        for t in tensors {
            let imp = self.materialize(&t.buffer)?;
            out.push((t, ImportedView::of(imp, t)));
        }
        Ok(out)
    }

    /// Decodes a SUB task's blob and maps its arguments for a host callable; any DEVICE tensor
    /// is refused. The arguments point into this registry's imports: use them only while
    /// those stay imported (no [`Self::release`] of their buffers, no [`Self::close`], and
    /// the registry alive), as a child does for the one task they belong to.
    pub fn mapped_args(&mut self, view: &TaskArgsView<'_>) -> Result<MappedArgs, ImportError> {
        let mut args = Vec::with_capacity(view.tensor_count());
        for index in 0..view.tensor_count() {
            let t = view.tensor(index).map_err(ImportError::Blob)?;
            if t.buffer.space() == Some(AddressSpace::Device) {
                return Err(ImportError::DeviceArgument { index });
            }
            let imp = self.materialize(&t.buffer)?;
            let v = ImportedView::of(imp, &t);
            args.push(MappedArg {
                region: v.region,
                writable: v.writable,
                shapes: t.used_shapes().to_vec(),
                strides: t.used_strides().to_vec(),
                dtype: t.data_type(),
            });
        }
        let scalars = view.scalars().collect();
        Ok(MappedArgs { args, scalars })
    }

    /// The import of `identity`, if any (never maps).
    pub fn resolve(&self, identity: &CanonicalIdentity) -> Result<&Imported, ImportError> {
        self.entries.get(identity).ok_or(ImportError::NotImported {
            identity: *identity,
        })
    }

    /// Drops the mapping of `identity` (the owner released it); false if never imported.
    pub fn release(&mut self, identity: &CanonicalIdentity) -> bool {
        self.entries.remove(identity).is_some()
    }

    /// Forgets every FORK-inherited import (they hold no mapping, so this costs nothing but the
    /// map-once conflict check across the boundary). A child calls it when a new run starts, so
    /// the run-scoped intermediates of earlier runs do not accumulate.
    pub fn forget_inherited(&mut self) {
        self.entries.retain(|_, e| {
            !matches!(
                e.desc.backend(),
                Some(BackendKind::ForkShm | BackendKind::ForkCow)
            )
        });
    }

    /// How many backings are imported.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is imported.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every mapping.
    pub fn close(&mut self) {
        self.entries.clear();
    }
}

/// One argument's view of its import: the exact byte range `[byte_offset, byte_offset +
/// extent)` of the backing, at its address in this process (or on the chip).
#[derive(Clone, Copy, Debug)]
pub struct ImportedView {
    /// The view's first byte: the backing's base plus the tensor's byte offset.
    pub addr: u64,
    /// The view's extent in bytes.
    pub extent: u64,
    /// The view's bytes in this process (host backings).
    pub region: Option<Region>,
    /// Whether the descriptor grants writing.
    pub writable: bool,
    /// Whether the backing is device memory.
    pub device: bool,
}

impl ImportedView {
    fn of(imp: &Imported, t: &ValidTensor) -> Self {
        let extent = t.extent_bytes();
        // The wire gate proved byte_offset + extent <= nbytes, and the import maps nbytes.
        let region = imp
            .region
            .and_then(|r| r.sub(t.byte_offset as usize, extent as usize));
        Self {
            addr: imp.base + t.byte_offset,
            extent,
            region,
            writable: imp.writable(),
            device: imp.is_device(),
        }
    }
}

/// A SUB callable's tensor argument: exactly the bytes of its view.
#[derive(Debug)]
pub struct MappedArg {
    region: Option<Region>,
    writable: bool,
    /// The view's shape.
    pub shapes: Vec<u32>,
    /// The view's element strides.
    pub strides: Vec<u32>,
    /// The element type.
    pub dtype: DataType,
}

/// A write through a READ argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOnlyArg;

impl fmt::Display for ReadOnlyArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the argument's buffer grants READ only; writing is refused")
    }
}

impl std::error::Error for ReadOnlyArg {}

impl MappedArg {
    /// The view's bytes, from its first to one past its last element.
    pub fn bytes(&self) -> &[u8] {
        // The region lies in an import the registry that made this argument holds (or in
        // memory the child inherited at fork and never unmaps) for the task's duration, and
        // the dependency engine keeps every writer of these bytes waiting until the task that
        // reads them has finished (see `ImportRegistry::mapped_args` for the caller's part).
        self.region.as_ref().map(Region::bytes).unwrap_or(&[])
    }

    /// The view's bytes for writing; refused for a READ buffer.
    #[allow(unsafe_code)]
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], ReadOnlyArg> {
        if !self.writable {
            return Err(ReadOnlyArg);
        }
        let Some(region) = self.region.as_ref() else {
            return Ok(&mut []);
        };
        // SAFETY: the region stays mapped as for `bytes`; the engine gives the running task
        // exclusive use of a range it writes (no other task touches overlapping bytes until
        // it finishes, and the submit checks refuse two tracked arguments of one task that
        // overlap where either writes), and `&mut self` keeps this argument's own slices
        // apart.
        Ok(unsafe { region.bytes_mut() })
    }

    /// Whether the buffer grants writing.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The view's element `i` in row-major order over its shape, honouring strides (f32).
    pub fn read_f32s(&self) -> Vec<f32> {
        let elem = 4usize;
        let bytes = self.bytes();
        view_offsets(&self.shapes, &self.strides)
            .map(|o| {
                let at = o as usize * elem;
                f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]))
            })
            .collect()
    }

    /// Writes `values` (row-major over the shape) into the view (f32).
    pub fn write_f32s(&mut self, values: &[f32]) -> Result<(), ReadOnlyArg> {
        let offsets: Vec<u64> = view_offsets(&self.shapes, &self.strides).collect();
        let bytes = self.bytes_mut()?;
        for (o, v) in offsets.into_iter().zip(values) {
            let at = o as usize * 4;
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

/// Element offsets (from the view's first element) of every element of a strided view, in
/// row-major order of its shape.
pub fn view_offsets<'a>(shapes: &'a [u32], strides: &'a [u32]) -> impl Iterator<Item = u64> + 'a {
    let numel: u64 = shapes.iter().map(|&s| s as u64).product();
    (0..numel).map(move |mut linear| {
        let mut off = 0u64;
        for d in (0..shapes.len()).rev() {
            let s = shapes[d] as u64;
            off += (linear % s) * strides[d] as u64;
            linear /= s;
        }
        off
    })
}

/// What a SUB callable receives: its mapped tensors, then its scalars.
#[derive(Debug, Default)]
pub struct MappedArgs {
    /// The task's tensor arguments, in argument order.
    pub args: Vec<MappedArg>,
    /// The task's scalar arguments, in order.
    pub scalars: Vec<u64>,
}
