//! Buffer identity and the address-free buffer descriptor carried inside every wire tensor.
//!
//! A descriptor names a backing by [`CanonicalIdentity`] and says how a consumer reaches it
//! (backend and body: a shared-memory name, or an address valid in a known space). It never
//! holds an address a consumer must trust across a process boundary without its backend.
//!
//! Layout (88 bytes, little-endian):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 2 | `magic` = 0x5342 |
//! | 2 | 1 | `address_space` |
//! | 3 | 1 | `access` |
//! | 4 | 1 | `backend_kind` |
//! | 5 | 3 | `_pad0` (not checked) |
//! | 8 | 32 | `identity` |
//! | 40 | 8 | `nbytes` (size of the whole backing) |
//! | 48 | 4 | `owner_worker_path_id` (diagnostic) |
//! | 52 | 2 | `body_len` (<= 32) |
//! | 54 | 2 | `_pad1` (not checked) |
//! | 56 | 32 | `body` (first `body_len` bytes meaningful, the rest zero) |

use crate::arg::AccessMode;
use bytemuck::{Pod, Zeroable};
use core::fmt;
use core::hash::{Hash, Hasher};

/// The descriptor's discriminator ("BS" in memory).
pub const BUFFER_DESCRIPTOR_MAGIC: u16 = 0x5342;
/// Bytes of the descriptor body.
pub const DESC_MAX_BYTES: usize = 32;
/// Body length of every address-carrying backend.
pub const BACKEND_ADDRESS_BODY_BYTES: usize = 8;

/// Where a backing lives.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressSpace {
    /// Host memory; the runtime stages it to the device and copies outputs back.
    Host = 0,
    /// Device memory owned by one chip; used in place.
    Device = 1,
}

impl AddressSpace {
    /// Decodes the wire byte; `None` for 2..=255.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Host),
            1 => Some(Self::Device),
            _ => None,
        }
    }
}

/// How a consumer reaches a backing. The set is frozen; unknown values are rejected.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Shared anonymous mapping made before a fork; the body is its address (same in the child).
    ForkShm = 0,
    /// Named POSIX shared memory; the body is the name.
    PosixShm = 1,
    /// A slice of a device communication window; the body is a device address.
    VmmWindow = 2,
    /// Described by a per-task sidecar on a remote wire; never materialized locally.
    RemoteSidecar = 3,
    /// Device memory from a chip's allocator; the body is the device pointer.
    DeviceMalloc = 4,
    /// Private copy-on-write mapping inherited across a fork; read-only by construction.
    ForkCow = 5,
}

impl BackendKind {
    /// Decodes the wire byte; `None` for 6..=255.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::ForkShm),
            1 => Some(Self::PosixShm),
            2 => Some(Self::VmmWindow),
            3 => Some(Self::RemoteSidecar),
            4 => Some(Self::DeviceMalloc),
            5 => Some(Self::ForkCow),
            _ => None,
        }
    }

    /// Backends that live in device memory; they require `AddressSpace::Device`.
    pub const fn is_device(self) -> bool {
        matches!(self, Self::VmmWindow | Self::DeviceMalloc)
    }

    /// Backends whose body is an 8-byte non-zero address.
    pub const fn carries_address(self) -> bool {
        matches!(
            self,
            Self::ForkShm | Self::ForkCow | Self::DeviceMalloc | Self::VmmWindow
        )
    }

    /// The reference's spelling, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ForkShm => "FORK_SHM",
            Self::PosixShm => "POSIX_SHM",
            Self::VmmWindow => "VMM_WINDOW",
            Self::RemoteSidecar => "REMOTE_SIDECAR",
            Self::DeviceMalloc => "DEVICE_MALLOC",
            Self::ForkCow => "FORK_COW",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The identity of one backing, the same at every level it is forwarded through. 32 bytes.
///
/// Equality and hashing fold only `owner_instance_id`, `buffer_id` and `generation`; the padding
/// never participates, so a dirty pad cannot split one backing into two.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CanonicalIdentity {
    /// Random nonce of the Worker incarnation that minted the backing (compared bytewise).
    pub owner_instance_id: [u8; 8],
    /// Unique within one owner incarnation.
    pub buffer_id: u64,
    /// Starts at 1; 0 means uninitialised and is rejected.
    pub generation: u32,
    /// Padding; ignored.
    pub _pad: [u8; 12],
}

crate::assert_layout!(CanonicalIdentity, size = 32, {
    owner_instance_id: 0, buffer_id: 8, generation: 16, _pad: 20,
});

impl CanonicalIdentity {
    /// An identity with clean padding.
    pub const fn new(owner_instance_id: [u8; 8], buffer_id: u64, generation: u32) -> Self {
        Self {
            owner_instance_id,
            buffer_id,
            generation,
            _pad: [0; 12],
        }
    }

    /// The reference's 64-bit identity hash (boost-style combine over the eight nonce bytes,
    /// the buffer id and the generation). Pads do not participate.
    pub fn hash64(&self) -> u64 {
        #[inline]
        fn combine(h: u64, v: u64) -> u64 {
            h ^ v
                .wrapping_add(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(h << 6)
                .wrapping_add(h >> 2)
        }
        let mut h = 0u64;
        for b in self.owner_instance_id {
            h = combine(h, b as u64);
        }
        h = combine(h, self.buffer_id);
        combine(h, self.generation as u64)
    }
}

impl PartialEq for CanonicalIdentity {
    fn eq(&self, other: &Self) -> bool {
        self.owner_instance_id == other.owner_instance_id
            && self.buffer_id == other.buffer_id
            && self.generation == other.generation
    }
}

impl Eq for CanonicalIdentity {}

impl Hash for CanonicalIdentity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.owner_instance_id.hash(state);
        self.buffer_id.hash(state);
        self.generation.hash(state);
    }
}

/// A byte a POSIX_SHM name may hold: printable ASCII without space, and not '/'.
#[inline]
const fn is_shm_name_byte(b: u8) -> bool {
    (b.wrapping_sub(0x21) < 0x7F - 0x21) & (b != b'/')
}

/// The wire description of a backing. 88 bytes; see the module table.
///
/// Construct with [`BufferDescriptor::new`], which validates. A descriptor decoded from bytes is
/// validated as part of its tensor by the blob view; [`BufferDescriptor::validate`] runs the same
/// checks on its own (for example on a control-copy request).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BufferDescriptor {
    /// Must be [`BUFFER_DESCRIPTOR_MAGIC`].
    pub magic: u16,
    /// Raw [`AddressSpace`].
    pub address_space: u8,
    /// Raw [`AccessMode`]: what the holder is granted.
    pub access: u8,
    /// Raw [`BackendKind`].
    pub backend_kind: u8,
    /// Padding; not checked.
    pub _pad0: [u8; 3],
    /// The backing's identity (owner instance, buffer id, generation): what every process
    /// names the buffer by.
    pub identity: CanonicalIdentity,
    /// Size of the whole backing in bytes.
    pub nbytes: u64,
    /// Process-local diagnostic id of the owner's tree path (0 = none); nothing keys on it.
    pub owner_worker_path_id: u32,
    /// Meaningful bytes of `body` (at most 32).
    pub body_len: u16,
    /// Padding; not checked.
    pub _pad1: u16,
    /// Backend-specific body: a shm name or an 8-byte little-endian address.
    pub body: [u8; DESC_MAX_BYTES],
}

crate::assert_layout!(BufferDescriptor, size = 88, {
    magic: 0, address_space: 2, access: 3, backend_kind: 4, _pad0: 5, identity: 8, nbytes: 40,
    owner_worker_path_id: 48, body_len: 52, _pad1: 54, body: 56,
});

/// A descriptor that must not be used. Variants follow the order of the checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescriptorError {
    /// `magic` is not 0x5342.
    Magic {
        /// The `magic` the descriptor holds.
        value: u16,
    },
    /// `address_space` is not HOST (0) or DEVICE (1).
    AddressSpace {
        /// The byte the descriptor holds there.
        value: u8,
    },
    /// `access` is not READ (0), WRITE (1) or READWRITE (2).
    Access {
        /// The byte the descriptor holds there.
        value: u8,
    },
    /// `backend_kind` is past the frozen set (0..=5).
    BackendKind {
        /// The byte the descriptor holds there.
        value: u8,
    },
    /// `body_len` exceeds the body.
    BodyLen {
        /// The descriptor's `body_len`.
        value: u16,
        /// The body's capacity, [`DESC_MAX_BYTES`].
        limit: u16,
    },
    /// `identity.generation` is 0 (uninitialised).
    ZeroGeneration,
    /// A device backend outside DEVICE space, or a host backend inside it.
    Capability {
        /// The descriptor's backend kind.
        backend: BackendKind,
        /// The space it claims.
        address_space: AddressSpace,
    },
    /// A FORK_COW backing granting a write: its writes would be silently lost.
    CowWritable {
        /// The access it claims.
        access: AccessMode,
    },
    /// An address backend whose body is not exactly 8 bytes.
    AddressBodyLen {
        /// The descriptor's backend kind.
        backend: BackendKind,
        /// The descriptor's `body_len`.
        value: u16,
    },
    /// An address backend whose address is 0.
    NullAddress {
        /// The descriptor's backend kind.
        backend: BackendKind,
    },
    /// A POSIX_SHM descriptor without a name.
    EmptyShmName,
    /// A POSIX_SHM name byte outside 0x21..=0x7E or equal to '/'.
    ShmNameByte {
        /// Position in the name.
        index: u8,
        /// The byte the descriptor holds there.
        value: u8,
    },
    /// A REMOTE_SIDECAR descriptor with a body (its description travels in the sidecar).
    SidecarBody {
        /// The descriptor's `body_len`.
        value: u16,
    },
    /// A non-zero byte past `body_len`.
    BodyTail {
        /// Position in the body.
        index: u8,
        /// The byte the descriptor holds there.
        value: u8,
    },
    /// A constructor was given a body longer than the descriptor holds.
    BodyTooLong {
        /// Length of the body given, in bytes.
        len: usize,
        /// The body's capacity, [`DESC_MAX_BYTES`].
        limit: usize,
    },
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Magic { value } => write!(
                f,
                "descriptor magic {value:#06x} is not {BUFFER_DESCRIPTOR_MAGIC:#06x}"
            ),
            Self::AddressSpace { value } => {
                write!(f, "address_space {value} is not HOST (0) or DEVICE (1)")
            }
            Self::Access { value } => write!(f, "access {value} is not READ, WRITE or READWRITE"),
            Self::BackendKind { value } => write!(f, "backend_kind {value} is unknown (0..=5)"),
            Self::BodyLen { value, limit } => write!(f, "body_len {value} exceeds {limit}"),
            Self::ZeroGeneration => f.write_str("identity generation is 0 (uninitialised)"),
            Self::Capability {
                backend,
                address_space,
            } => write!(f, "backend {backend} cannot live in {address_space:?} space"),
            Self::CowWritable { access } => {
                write!(f, "FORK_COW must be READ, not {access}: its writes would be lost")
            }
            Self::AddressBodyLen { backend, value } => write!(
                f,
                "backend {backend} needs an {BACKEND_ADDRESS_BODY_BYTES}-byte address body, got {value}"
            ),
            Self::NullAddress { backend } => write!(f, "backend {backend} has a null address"),
            Self::EmptyShmName => f.write_str("POSIX_SHM descriptor has an empty name"),
            Self::ShmNameByte { index, value } => write!(
                f,
                "POSIX_SHM name byte {index} is {value:#04x} (allowed: 0x21..=0x7e except '/')"
            ),
            Self::SidecarBody { value } => {
                write!(f, "REMOTE_SIDECAR descriptor must have no body, got {value} bytes")
            }
            Self::BodyTail { index, value } => {
                write!(f, "body byte {index} past body_len is {value:#04x}, must be 0")
            }
            Self::BodyTooLong { len, limit } => {
                write!(f, "descriptor body of {len} bytes exceeds {limit}")
            }
        }
    }
}

impl core::error::Error for DescriptorError {}

impl BufferDescriptor {
    /// Builds and validates a descriptor with clean padding.
    pub fn new(
        identity: CanonicalIdentity,
        address_space: AddressSpace,
        access: AccessMode,
        backend: BackendKind,
        nbytes: u64,
        body: &[u8],
    ) -> Result<Self, DescriptorError> {
        if body.len() > DESC_MAX_BYTES {
            return Err(DescriptorError::BodyTooLong {
                len: body.len(),
                limit: DESC_MAX_BYTES,
            });
        }
        let mut desc = Self {
            magic: BUFFER_DESCRIPTOR_MAGIC,
            address_space: address_space as u8,
            access: access as u8,
            backend_kind: backend as u8,
            _pad0: [0; 3],
            identity,
            nbytes,
            owner_worker_path_id: 0,
            body_len: body.len() as u16,
            _pad1: 0,
            body: [0; DESC_MAX_BYTES],
        };
        desc.body[..body.len()].copy_from_slice(body);
        desc.validate()?;
        Ok(desc)
    }

    /// Runs every descriptor check, in the reference's order. Padding is not checked.
    pub fn validate(&self) -> Result<(), DescriptorError> {
        if self.magic != BUFFER_DESCRIPTOR_MAGIC {
            return Err(DescriptorError::Magic { value: self.magic });
        }
        let space =
            AddressSpace::from_raw(self.address_space).ok_or(DescriptorError::AddressSpace {
                value: self.address_space,
            })?;
        let access = AccessMode::from_raw(self.access)
            .ok_or(DescriptorError::Access { value: self.access })?;
        let backend =
            BackendKind::from_raw(self.backend_kind).ok_or(DescriptorError::BackendKind {
                value: self.backend_kind,
            })?;
        if self.body_len as usize > DESC_MAX_BYTES {
            return Err(DescriptorError::BodyLen {
                value: self.body_len,
                limit: DESC_MAX_BYTES as u16,
            });
        }
        if self.identity.generation == 0 {
            return Err(DescriptorError::ZeroGeneration);
        }
        if backend != BackendKind::RemoteSidecar
            && backend.is_device() != (space == AddressSpace::Device)
        {
            return Err(DescriptorError::Capability {
                backend,
                address_space: space,
            });
        }
        if backend == BackendKind::ForkCow && access != AccessMode::Read {
            return Err(DescriptorError::CowWritable { access });
        }
        let len = self.body_len as usize;
        match backend {
            BackendKind::ForkShm
            | BackendKind::ForkCow
            | BackendKind::DeviceMalloc
            | BackendKind::VmmWindow => {
                if len != BACKEND_ADDRESS_BODY_BYTES {
                    return Err(DescriptorError::AddressBodyLen {
                        backend,
                        value: self.body_len,
                    });
                }
                if self.body[..8] == [0; 8] {
                    return Err(DescriptorError::NullAddress { backend });
                }
            }
            BackendKind::PosixShm => {
                if len == 0 {
                    return Err(DescriptorError::EmptyShmName);
                }
                let name = &self.body[..len];
                // Branch-free scan first; locate the offending byte only on failure.
                let ok = name.iter().fold(true, |ok, &b| ok & is_shm_name_byte(b));
                if !ok {
                    let index = name.iter().position(|&b| !is_shm_name_byte(b)).unwrap_or(0);
                    return Err(DescriptorError::ShmNameByte {
                        index: index as u8,
                        value: name[index],
                    });
                }
            }
            BackendKind::RemoteSidecar => {
                if len != 0 {
                    return Err(DescriptorError::SidecarBody {
                        value: self.body_len,
                    });
                }
            }
        }
        let tail = &self.body[len..];
        if tail.iter().fold(0u8, |acc, &b| acc | b) != 0 {
            let index = tail.iter().position(|&b| b != 0).unwrap_or(0);
            return Err(DescriptorError::BodyTail {
                index: (len + index) as u8,
                value: tail[index],
            });
        }
        Ok(())
    }

    /// The meaningful body bytes (`body_len` clamped to the body size).
    pub fn body(&self) -> &[u8] {
        &self.body[..(self.body_len as usize).min(DESC_MAX_BYTES)]
    }

    /// The address an address-carrying backend names; `None` for other backends or a malformed
    /// body.
    pub fn body_address(&self) -> Option<u64> {
        let backend = BackendKind::from_raw(self.backend_kind)?;
        if !backend.carries_address() || self.body_len as usize != BACKEND_ADDRESS_BODY_BYTES {
            return None;
        }
        let mut le = [0u8; 8];
        le.copy_from_slice(&self.body[..8]);
        Some(u64::from_le_bytes(le))
    }

    /// The decoded address space, if the byte is valid.
    pub fn space(&self) -> Option<AddressSpace> {
        AddressSpace::from_raw(self.address_space)
    }

    /// The decoded access mode, if the byte is valid.
    pub fn access_mode(&self) -> Option<AccessMode> {
        AccessMode::from_raw(self.access)
    }

    /// The decoded backend, if the byte is valid.
    pub fn backend(&self) -> Option<BackendKind> {
        BackendKind::from_raw(self.backend_kind)
    }
}

/// Field-wise equality: identity, space, access, backend, size, path id, body length and the
/// meaningful body bytes. Padding and the body tail never participate.
impl PartialEq for BufferDescriptor {
    fn eq(&self, other: &Self) -> bool {
        self.identity == other.identity
            && self.address_space == other.address_space
            && self.access == other.access
            && self.backend_kind == other.backend_kind
            && self.nbytes == other.nbytes
            && self.owner_worker_path_id == other.owner_worker_path_id
            && self.body_len == other.body_len
            && self.body() == other.body()
    }
}

impl Eq for BufferDescriptor {}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> CanonicalIdentity {
        CanonicalIdentity::new(*b"\x01\x02\x03\x04\x05\x06\x07\x08", 7, 1)
    }

    #[test]
    fn identity_padding_does_not_change_equality_or_hash() {
        let a = id();
        let mut b = a;
        b._pad = [0xAA; 12];
        assert_eq!(a, b);
        assert_eq!(a.hash64(), b.hash64());
        let mut c = a;
        c.buffer_id += 1;
        assert_ne!(a, c);
        assert_ne!(a.hash64(), c.hash64());
    }

    #[test]
    fn descriptor_equality_ignores_padding_and_body_tail() {
        let a = BufferDescriptor::new(
            id(),
            AddressSpace::Host,
            AccessMode::ReadWrite,
            BackendKind::PosixShm,
            4096,
            b"psm_x",
        )
        .unwrap();
        let mut b = a;
        b._pad0 = [1, 2, 3];
        b._pad1 = 9;
        b.body[20] = 0x55; // invalid, but equality only looks at the meaningful bytes
        assert_eq!(a, b);
        let mut c = a;
        c.nbytes = 8192;
        assert_ne!(a, c);
    }

    #[test]
    fn body_address_reads_little_endian() {
        let d = BufferDescriptor::new(
            id(),
            AddressSpace::Device,
            AccessMode::Read,
            BackendKind::DeviceMalloc,
            64,
            &0x1122_3344_5566_7788u64.to_le_bytes(),
        )
        .unwrap();
        assert_eq!(d.body_address(), Some(0x1122_3344_5566_7788));
    }

    // The tests below take their expectations from the module table, the variants' documents
    // and hand-worked values; none asks another function of this file for the answer.

    /// A valid descriptor with raw fields, for tests that then break one field.
    fn raw(space: u8, access: u8, backend: u8, body: &[u8]) -> BufferDescriptor {
        let mut d = BufferDescriptor {
            magic: 0x5342,
            address_space: space,
            access,
            backend_kind: backend,
            _pad0: [0; 3],
            identity: id(),
            nbytes: 64,
            owner_worker_path_id: 0,
            body_len: body.len() as u16,
            _pad1: 0,
            body: [0; 32],
        };
        d.body[..body.len()].copy_from_slice(body);
        d
    }

    const ADDR: [u8; 8] = [0x10, 0, 0, 0, 0, 0, 0, 0];

    #[test]
    fn wire_bytes_decode_to_exactly_the_frozen_sets() {
        assert_eq!(AddressSpace::from_raw(0), Some(AddressSpace::Host));
        assert_eq!(AddressSpace::from_raw(1), Some(AddressSpace::Device));
        for raw in 2..=255u8 {
            assert_eq!(AddressSpace::from_raw(raw), None, "{raw}");
        }
        let kinds = [
            (0, BackendKind::ForkShm, false, true, "FORK_SHM"),
            (1, BackendKind::PosixShm, false, false, "POSIX_SHM"),
            (2, BackendKind::VmmWindow, true, true, "VMM_WINDOW"),
            (
                3,
                BackendKind::RemoteSidecar,
                false,
                false,
                "REMOTE_SIDECAR",
            ),
            (4, BackendKind::DeviceMalloc, true, true, "DEVICE_MALLOC"),
            (5, BackendKind::ForkCow, false, true, "FORK_COW"),
        ];
        for (raw, kind, device, address, name) in kinds {
            assert_eq!(BackendKind::from_raw(raw), Some(kind), "{raw}");
            assert_eq!(kind.is_device(), device, "{name}");
            assert_eq!(kind.carries_address(), address, "{name}");
            assert_eq!(kind.name(), name);
            assert_eq!(std::format!("{kind}"), name);
        }
        for raw in 6..=255u8 {
            assert_eq!(BackendKind::from_raw(raw), None, "{raw}");
        }
    }

    #[test]
    fn identity_hash_is_the_reference_combine() {
        // h = h ^ (v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)) over the nonce bytes 1..=8,
        // buffer id 7 and generation 1, worked out in 64-bit wrapping arithmetic.
        assert_eq!(id().hash64(), 0x99cf_96c5_97c5_00a7);
        // One combine of 0 into 0 is the constant itself.
        let zero = CanonicalIdentity::new([0; 8], 0, 0);
        assert_ne!(zero.hash64(), id().hash64());
    }

    #[test]
    fn identity_equality_and_hash_fold_every_identifying_field() {
        use core::hash::BuildHasher;
        let hasher = std::hash::RandomState::new();
        let a = id();
        let mut padded = a;
        padded._pad = [0xFF; 12];
        assert_eq!(hasher.hash_one(a), hasher.hash_one(padded));
        let mut others = [a; 3];
        others[0].owner_instance_id[7] ^= 1;
        others[1].buffer_id = 8;
        others[2].generation = 2;
        for o in others {
            assert_ne!(a, o, "{o:?}");
            assert_ne!(o, a, "{o:?}");
            assert_ne!(hasher.hash_one(a), hasher.hash_one(o), "{o:?}");
        }
    }

    #[test]
    fn shm_name_bytes_are_printable_ascii_without_space_or_slash() {
        for b in 0..=255u8 {
            let want = (0x21..=0x7E).contains(&b) && b != b'/';
            assert_eq!(is_shm_name_byte(b), want, "{b:#04x}");
        }
    }

    #[test]
    fn every_backend_has_a_valid_form() {
        let ok = [
            raw(0, 2, 0, &ADDR),
            raw(0, 2, 1, b"psm_x"),
            raw(1, 2, 2, &ADDR),
            raw(0, 2, 3, b""),
            raw(1, 2, 3, b""),
            raw(1, 1, 4, &ADDR),
            raw(0, 0, 5, &ADDR),
            // The longest body, a 32-byte name.
            raw(0, 0, 1, &[b'a'; 32]),
            // An address whose only set byte is the last.
            raw(0, 1, 0, &[0, 0, 0, 0, 0, 0, 0, 1]),
        ];
        for d in ok {
            assert_eq!(d.validate(), Ok(()), "{d:?}");
        }
    }

    #[test]
    fn each_descriptor_check_names_its_field() {
        use DescriptorError as E;
        let good = raw(0, 2, 1, b"psm_x");
        let broken = |f: &dyn Fn(&mut BufferDescriptor)| {
            let mut d = good;
            f(&mut d);
            d.validate()
        };
        assert_eq!(
            broken(&|d| d.magic = 0x4253),
            Err(E::Magic { value: 0x4253 })
        );
        assert_eq!(
            broken(&|d| d.address_space = 2),
            Err(E::AddressSpace { value: 2 })
        );
        assert_eq!(broken(&|d| d.access = 3), Err(E::Access { value: 3 }));
        assert_eq!(
            broken(&|d| d.backend_kind = 6),
            Err(E::BackendKind { value: 6 })
        );
        assert_eq!(
            broken(&|d| d.body_len = 33),
            Err(E::BodyLen {
                value: 33,
                limit: 32
            })
        );
        assert_eq!(
            broken(&|d| d.identity.generation = 0),
            Err(E::ZeroGeneration)
        );
        // Device backends need DEVICE space, host ones HOST; a sidecar may claim either.
        assert_eq!(
            raw(0, 2, 4, &ADDR).validate(),
            Err(E::Capability {
                backend: BackendKind::DeviceMalloc,
                address_space: AddressSpace::Host
            })
        );
        assert_eq!(
            raw(0, 2, 2, &ADDR).validate(),
            Err(E::Capability {
                backend: BackendKind::VmmWindow,
                address_space: AddressSpace::Host
            })
        );
        assert_eq!(
            raw(1, 2, 1, b"x").validate(),
            Err(E::Capability {
                backend: BackendKind::PosixShm,
                address_space: AddressSpace::Device
            })
        );
        for access in [AccessMode::Write, AccessMode::ReadWrite] {
            assert_eq!(
                raw(0, access as u8, 5, &ADDR).validate(),
                Err(E::CowWritable { access })
            );
        }
        for len in [0usize, 7, 9] {
            assert_eq!(
                raw(0, 0, 0, &[1; 9][..len]).validate(),
                Err(E::AddressBodyLen {
                    backend: BackendKind::ForkShm,
                    value: len as u16
                })
            );
        }
        assert_eq!(
            raw(1, 0, 4, &[0; 8]).validate(),
            Err(E::NullAddress {
                backend: BackendKind::DeviceMalloc
            })
        );
        assert_eq!(raw(0, 0, 1, b"").validate(), Err(E::EmptyShmName));
        // The first offending byte, not the first good one nor a later bad one.
        assert_eq!(
            raw(0, 0, 1, b"ab/ c").validate(),
            Err(E::ShmNameByte {
                index: 2,
                value: b'/'
            })
        );
        assert_eq!(
            raw(0, 0, 1, b"a b").validate(),
            Err(E::ShmNameByte {
                index: 1,
                value: b' '
            })
        );
        assert_eq!(
            raw(0, 0, 3, b"x").validate(),
            Err(E::SidecarBody { value: 1 })
        );
        // Tail bytes 2..32 of a two-byte name: byte 2 is clean, byte 5 is the first dirty one.
        assert_eq!(
            broken(&|d| {
                d.body_len = 2;
                d.body[2..5].fill(0);
                d.body[5] = 7;
                d.body[9] = 8;
            }),
            Err(E::BodyTail { index: 5, value: 7 })
        );
        // Two equal dirty bytes, which cancel in an exclusive or.
        assert_eq!(
            broken(&|d| {
                d.body_len = 2;
                d.body[2..].fill(0);
                d.body[6] = 0x40;
                d.body[31] = 0x40;
            }),
            Err(E::BodyTail {
                index: 6,
                value: 0x40
            })
        );
        // The first check that fails is reported.
        assert_eq!(
            broken(&|d| {
                d.magic = 0;
                d.address_space = 9;
            }),
            Err(E::Magic { value: 0 })
        );
    }

    #[test]
    fn descriptor_errors_read_as_documented() {
        use DescriptorError as E;
        let cases: [(E, &str); 15] = [
            (
                E::Magic { value: 0x12 },
                "descriptor magic 0x0012 is not 0x5342",
            ),
            (
                E::AddressSpace { value: 2 },
                "address_space 2 is not HOST (0) or DEVICE (1)",
            ),
            (
                E::Access { value: 3 },
                "access 3 is not READ, WRITE or READWRITE",
            ),
            (
                E::BackendKind { value: 6 },
                "backend_kind 6 is unknown (0..=5)",
            ),
            (
                E::BodyLen {
                    value: 33,
                    limit: 32,
                },
                "body_len 33 exceeds 32",
            ),
            (
                E::ZeroGeneration,
                "identity generation is 0 (uninitialised)",
            ),
            (
                E::Capability {
                    backend: BackendKind::DeviceMalloc,
                    address_space: AddressSpace::Host,
                },
                "backend DEVICE_MALLOC cannot live in Host space",
            ),
            (
                E::CowWritable {
                    access: AccessMode::Write,
                },
                "FORK_COW must be READ, not WRITE: its writes would be lost",
            ),
            (
                E::AddressBodyLen {
                    backend: BackendKind::ForkShm,
                    value: 7,
                },
                "backend FORK_SHM needs an 8-byte address body, got 7",
            ),
            (
                E::NullAddress {
                    backend: BackendKind::VmmWindow,
                },
                "backend VMM_WINDOW has a null address",
            ),
            (E::EmptyShmName, "POSIX_SHM descriptor has an empty name"),
            (
                E::ShmNameByte {
                    index: 2,
                    value: b'/',
                },
                "POSIX_SHM name byte 2 is 0x2f (allowed: 0x21..=0x7e except '/')",
            ),
            (
                E::SidecarBody { value: 4 },
                "REMOTE_SIDECAR descriptor must have no body, got 4 bytes",
            ),
            (
                E::BodyTail { index: 5, value: 7 },
                "body byte 5 past body_len is 0x07, must be 0",
            ),
            (
                E::BodyTooLong { len: 33, limit: 32 },
                "descriptor body of 33 bytes exceeds 32",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(std::format!("{e}"), text);
        }
    }

    #[test]
    fn new_rejects_a_long_body_and_validates() {
        let mk = |body: &[u8]| {
            BufferDescriptor::new(
                id(),
                AddressSpace::Host,
                AccessMode::Read,
                BackendKind::PosixShm,
                64,
                body,
            )
        };
        assert_eq!(
            mk(&[b'a'; 33]),
            Err(DescriptorError::BodyTooLong { len: 33, limit: 32 })
        );
        assert_eq!(mk(b""), Err(DescriptorError::EmptyShmName));
        assert_eq!(mk(&[b'a'; 32]).unwrap().body(), &[b'a'; 32]);
    }

    #[test]
    fn accessors_decode_the_raw_fields() {
        let d = raw(1, 1, 2, &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        assert_eq!(d.space(), Some(AddressSpace::Device));
        assert_eq!(d.access_mode(), Some(AccessMode::Write));
        assert_eq!(d.backend(), Some(BackendKind::VmmWindow));
        assert_eq!(d.body_address(), Some(0x1122_3344_5566_7788));
        let bad = raw(2, 3, 6, &ADDR);
        assert_eq!(bad.space(), None);
        assert_eq!(bad.access_mode(), None);
        assert_eq!(bad.backend(), None);
        assert_eq!(bad.body_address(), None);
        let shm = raw(0, 1, 1, b"psm_x");
        assert_eq!(shm.body(), b"psm_x");
        // Not an address backend, even with an 8-byte body.
        assert_eq!(raw(0, 1, 1, b"12345678").body_address(), None);
        // An address backend whose body is not 8 bytes.
        assert_eq!(raw(0, 1, 0, &ADDR[..7]).body_address(), None);
        let mut long = shm;
        long.body_len = 40;
        assert_eq!(long.body().len(), 32);
    }

    #[test]
    fn descriptor_equality_reads_every_identifying_field() {
        let a = raw(0, 2, 1, b"psm_x");
        let changes: [&dyn Fn(&mut BufferDescriptor); 8] = [
            &|d| d.identity.buffer_id = 99,
            &|d| d.address_space = 1,
            &|d| d.access = 0,
            &|d| d.backend_kind = 3,
            &|d| d.nbytes = 65,
            &|d| d.owner_worker_path_id = 4,
            &|d| d.body_len = 4,
            &|d| d.body[1] = b'q',
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut b = a;
            change(&mut b);
            assert_ne!(a, b, "change {i}");
            assert_ne!(b, a, "change {i}");
        }
        assert_eq!(a, a);
    }
}
