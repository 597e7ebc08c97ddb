//! `ChipTensor`: the chip entry argument, a resolved buffer plus a strided view. 72 bytes.
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 16 | `buffer` ([`BufferHandle`]: address, size in bytes) |
//! | 16 | 8 | `start_offset` (elements from `buffer.addr`) |
//! | 24 | 20 | `shapes[5]` |
//! | 44 | 20 | `strides[5]` |
//! | 64 | 4 | `ndims` |
//! | 68 | 1 | `dtype` |
//! | 69 | 1 | `address_space` |
//! | 70 | 2 | `_pad` |
//!
//! It carries nothing a runtime decides (no producer, no version): that is the `TaskTensor`
//! it is adopted into. [`ChipTensor::materialize`] is the one place a wire tensor becomes one.

use crate::buffer::{AddressSpace, CanonicalIdentity};
use crate::dtype::DataType;
use crate::geometry;
use crate::limits::MAX_TENSOR_DIMS;
use crate::tensor::ValidTensor;
use bytemuck::{Pod, Zeroable};
use core::fmt;

/// An address and a size in bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BufferHandle {
    /// Address of the first byte (in the space of the tensor's `address_space`).
    pub addr: u64,
    /// Bytes reachable from `addr`.
    pub size: u64,
}

crate::assert_layout!(BufferHandle, size = 16, { addr: 0, size: 8 });

/// The chip entry argument. See the module table for its layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ChipTensor {
    /// The buffer in this process: its local base address and size, as the resolver gave
    /// them.
    pub buffer: BufferHandle,
    /// Start of the view, in elements from `buffer.addr`.
    pub start_offset: u64,
    /// Extent per dimension, in elements.
    pub shapes: [u32; MAX_TENSOR_DIMS],
    /// Stride per dimension, in elements.
    pub strides: [u32; MAX_TENSOR_DIMS],
    /// Rank: dimensions in use, `1..=MAX_TENSOR_DIMS`; `shapes` and `strides` are zero past it.
    pub ndims: u32,
    /// Raw [`DataType`].
    pub dtype: u8,
    /// Raw [`AddressSpace`]: HOST is staged by the runtime, DEVICE is used in place.
    pub address_space: u8,
    /// Padding to the 8-byte boundary; zero.
    pub _pad: [u8; 2],
}

crate::assert_layout!(ChipTensor, size = 72, {
    buffer: 0, start_offset: 16, shapes: 24, strides: 44, ndims: 64, dtype: 68, address_space: 69,
    _pad: 70,
});

/// Where an import registry found a backing in this process or on this chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Local address of the backing's first byte.
    pub base: u64,
    /// The space that address lives in.
    pub address_space: AddressSpace,
}

/// Why a wire tensor could not become a `ChipTensor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaterializeError {
    /// The caller's resolver does not know the tensor's backing.
    Unresolved {
        /// The backing's identity.
        identity: CanonicalIdentity,
    },
    /// `base + byte_offset` does not fit an address.
    AddressOverflow {
        /// The backing's local base address, as the resolver gave it.
        base: u64,
        /// The view's byte offset.
        byte_offset: u64,
    },
}

impl fmt::Display for MaterializeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unresolved { identity } => write!(
                f,
                "canonical identity (owner {:02x?}, buffer {}, generation {}) is not in the import registry",
                identity.owner_instance_id, identity.buffer_id, identity.generation
            ),
            Self::AddressOverflow { base, byte_offset } => write!(
                f,
                "base {base:#x} + byte_offset {byte_offset} overflows the address space"
            ),
        }
    }
}

impl core::error::Error for MaterializeError {}

impl ChipTensor {
    /// Resolves a validated wire tensor against the local base of its backing.
    ///
    /// The byte offset is folded into the address (`start_offset` is 0), strides are kept as
    /// given, so transposed and step-sliced views survive, and `buffer.size` is the view's
    /// extent in bytes, not the backing's size.
    pub fn materialize(t: &ValidTensor, resolved: Resolved) -> Result<Self, MaterializeError> {
        let addr =
            resolved
                .base
                .checked_add(t.byte_offset)
                .ok_or(MaterializeError::AddressOverflow {
                    base: resolved.base,
                    byte_offset: t.byte_offset,
                })?;
        Ok(Self {
            buffer: BufferHandle {
                addr,
                size: t.extent_bytes(),
            },
            start_offset: 0,
            shapes: t.shapes,
            strides: t.strides,
            ndims: t.ndims,
            dtype: t.dtype,
            address_space: resolved.address_space as u8,
            _pad: [0; 2],
        })
    }

    /// A dense row-major tensor over `size` bytes at `addr`, for callers that hold memory
    /// directly (the in-process chip API). Geometry is checked when the runtime adopts it.
    pub fn contiguous(addr: u64, shapes: &[u32], dtype: DataType, space: AddressSpace) -> Self {
        let rank = shapes.len().min(MAX_TENSOR_DIMS);
        let mut full = [0u32; MAX_TENSOR_DIMS];
        full[..rank].copy_from_slice(&shapes[..rank]);
        let strides = geometry::row_major_strides(rank as u32, &full);
        let size = geometry::numel(rank as u32, &full).saturating_mul(dtype.elem_size() as u64);
        Self {
            buffer: BufferHandle { addr, size },
            start_offset: 0,
            shapes: full,
            strides,
            ndims: rank as u32,
            dtype: dtype.raw(),
            address_space: space as u8,
            _pad: [0; 2],
        }
    }

    /// Whether the view is dense row-major (computed from the geometry).
    pub fn is_contiguous(&self) -> bool {
        geometry::is_row_major(self.ndims, &self.shapes, &self.strides)
    }

    /// Elements the view spans (computed from the geometry, saturating).
    pub fn extent_elem(&self) -> u64 {
        geometry::extent_elems(self.ndims, &self.shapes, &self.strides)
    }
}
