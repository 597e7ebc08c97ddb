//! The wire `Tensor`: a buffer descriptor plus a strided view, carrying no address. 144 bytes.
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 88 | `buffer` ([`BufferDescriptor`]) |
//! | 88 | 8 | `byte_offset` (bytes, a multiple of the element size) |
//! | 96 | 4 | `ndims` (1..=5) |
//! | 100 | 20 | `shapes[5]` (elements; zero past `ndims`) |
//! | 120 | 20 | `strides[5]` (element strides, each > 0; zero past `ndims`) |
//! | 140 | 1 | `dtype` |
//! | 141 | 3 | `_pad` (not checked) |
//!
//! A `Tensor` is plain data: any 144 bytes are a `Tensor`. A [`ValidTensor`] is one that passed
//! [`Tensor::validate`]; it is what the builders accept and what the blob view hands out, so code
//! that holds one never re-checks it and code that needs one cannot be given raw bytes.

use crate::buffer::{BufferDescriptor, DescriptorError};
use crate::dtype::DataType;
use crate::geometry::{self, GeometryError};
use crate::limits::MAX_TENSOR_DIMS;
use bytemuck::{Pod, Zeroable};
use core::fmt;
use core::mem::{offset_of, size_of};
use core::ops::Deref;
use static_assertions::const_assert_eq;

/// The address-free wire tensor. See the module table for its layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Tensor {
    /// The backing this view is over.
    pub buffer: BufferDescriptor,
    /// Start of the view within the backing, in bytes.
    pub byte_offset: u64,
    /// Rank.
    pub ndims: u32,
    /// Extent per dimension, in elements.
    pub shapes: [u32; MAX_TENSOR_DIMS],
    /// Stride per dimension, in elements.
    pub strides: [u32; MAX_TENSOR_DIMS],
    /// Raw [`DataType`].
    pub dtype: u8,
    /// Padding; not checked.
    pub _pad: [u8; 3],
}

const_assert_eq!(size_of::<Tensor>(), 144);
const_assert_eq!(core::mem::align_of::<Tensor>(), 8);
const_assert_eq!(offset_of!(Tensor, buffer), 0);
const_assert_eq!(offset_of!(Tensor, byte_offset), 88);
const_assert_eq!(offset_of!(Tensor, ndims), 96);
const_assert_eq!(offset_of!(Tensor, shapes), 100);
const_assert_eq!(offset_of!(Tensor, strides), 120);
const_assert_eq!(offset_of!(Tensor, dtype), 140);
const_assert_eq!(offset_of!(Tensor, _pad), 141);

/// Why a wire tensor must not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorError {
    /// Its buffer descriptor is invalid.
    Descriptor(DescriptorError),
    /// Its geometry is invalid.
    Geometry(GeometryError),
    /// `byte_offset` is not a multiple of the element size.
    MisalignedOffset {
        /// The offset found.
        byte_offset: u64,
        /// The element size it must divide by.
        elem_size: u32,
    },
    /// The view does not fit in the backing.
    OutOfBacking {
        /// Start of the view.
        byte_offset: u64,
        /// Bytes the view spans.
        extent_bytes: u64,
        /// Size of the backing.
        nbytes: u64,
    },
    /// A constructor was given shapes and strides of different lengths.
    RankMismatch {
        /// Number of shapes given.
        shapes: usize,
        /// Number of strides given.
        strides: usize,
    },
}

impl From<DescriptorError> for TensorError {
    fn from(e: DescriptorError) -> Self {
        Self::Descriptor(e)
    }
}

impl From<GeometryError> for TensorError {
    fn from(e: GeometryError) -> Self {
        Self::Geometry(e)
    }
}

impl fmt::Display for TensorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Descriptor(e) => write!(f, "buffer: {e}"),
            Self::Geometry(e) => e.fmt(f),
            Self::MisalignedOffset {
                byte_offset,
                elem_size,
            } => write!(
                f,
                "byte_offset {byte_offset} is not a multiple of the element size {elem_size}"
            ),
            Self::OutOfBacking {
                byte_offset,
                extent_bytes,
                nbytes,
            } => write!(
                f,
                "view [{byte_offset}, +{extent_bytes}) does not fit the {nbytes}-byte backing"
            ),
            Self::RankMismatch { shapes, strides } => {
                write!(f, "{shapes} shapes but {strides} strides")
            }
        }
    }
}

impl Tensor {
    /// Builds a strided view over `buffer` and validates it. Returns the validated form: a wire
    /// tensor is only ever built through the gate.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(
        buffer: BufferDescriptor,
        byte_offset: u64,
        shapes: &[u32],
        strides: &[u32],
        dtype: DataType,
    ) -> Result<ValidTensor, TensorError> {
        if shapes.len() != strides.len() {
            return Err(TensorError::RankMismatch {
                shapes: shapes.len(),
                strides: strides.len(),
            });
        }
        if shapes.is_empty() || shapes.len() > MAX_TENSOR_DIMS {
            return Err(GeometryError::NDims {
                value: u32::try_from(shapes.len()).unwrap_or(u32::MAX),
                limit: MAX_TENSOR_DIMS as u32,
            }
            .into());
        }
        let mut t = Tensor {
            buffer,
            byte_offset,
            ndims: shapes.len() as u32,
            shapes: [0; MAX_TENSOR_DIMS],
            strides: [0; MAX_TENSOR_DIMS],
            dtype: dtype.raw(),
            _pad: [0; 3],
        };
        t.shapes[..shapes.len()].copy_from_slice(shapes);
        t.strides[..strides.len()].copy_from_slice(strides);
        ValidTensor::new(t)
    }

    /// Builds a dense row-major view over `buffer` and validates it.
    pub fn row_major(
        buffer: BufferDescriptor,
        byte_offset: u64,
        shapes: &[u32],
        dtype: DataType,
    ) -> Result<ValidTensor, TensorError> {
        if shapes.is_empty() || shapes.len() > MAX_TENSOR_DIMS {
            return Err(GeometryError::NDims {
                value: u32::try_from(shapes.len()).unwrap_or(u32::MAX),
                limit: MAX_TENSOR_DIMS as u32,
            }
            .into());
        }
        let mut full = [0u32; MAX_TENSOR_DIMS];
        full[..shapes.len()].copy_from_slice(shapes);
        let strides = geometry::row_major_strides(shapes.len() as u32, &full);
        Self::new(buffer, byte_offset, shapes, &strides[..shapes.len()], dtype)
    }

    /// Runs every check of the wire gate, in the reference's order: the descriptor; the rank
    /// and dtype; the offset's alignment to the element size; every shape and stride, unused
    /// dimensions and the extent; containment of the view in the backing. Returns the view's
    /// extent in bytes. Reads nothing outside `self`.
    #[inline]
    pub fn validate(&self) -> Result<u64, TensorError> {
        self.buffer.validate()?;
        let dtype = geometry::check_rank_dtype(self.ndims, self.dtype)?;
        let elem_size = dtype.elem_size();
        // Element sizes are powers of two.
        if self.byte_offset & (elem_size as u64 - 1) != 0 {
            return Err(TensorError::MisalignedOffset {
                byte_offset: self.byte_offset,
                elem_size,
            });
        }
        let g = geometry::check_dims(self.ndims, &self.shapes, &self.strides, dtype)?;
        let nbytes = self.buffer.nbytes;
        if self.byte_offset > nbytes || g.extent_bytes > nbytes - self.byte_offset {
            return Err(TensorError::OutOfBacking {
                byte_offset: self.byte_offset,
                extent_bytes: g.extent_bytes,
                nbytes,
            });
        }
        Ok(g.extent_bytes)
    }

    /// The used shapes.
    pub fn used_shapes(&self) -> &[u32] {
        &self.shapes[..(self.ndims as usize).min(MAX_TENSOR_DIMS)]
    }

    /// The used strides.
    pub fn used_strides(&self) -> &[u32] {
        &self.strides[..(self.ndims as usize).min(MAX_TENSOR_DIMS)]
    }
}

/// A wire tensor that passed [`Tensor::validate`]. Only validation makes one.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct ValidTensor(Tensor);

impl ValidTensor {
    /// Validates `tensor`.
    #[inline]
    pub fn new(tensor: Tensor) -> Result<Self, TensorError> {
        tensor.validate()?;
        Ok(Self(tensor))
    }

    /// The validated tensor.
    #[inline]
    pub fn get(&self) -> &Tensor {
        &self.0
    }

    /// The decoded dtype (known valid).
    #[inline]
    pub fn data_type(&self) -> DataType {
        // Validation proved the byte is a defined dtype; the fallback is unreachable.
        DataType::from_raw(self.0.dtype).unwrap_or(DataType::Uint8)
    }

    /// Bytes the view spans, from its first to one past its last element.
    #[inline]
    pub fn extent_bytes(&self) -> u64 {
        geometry::extent_elems(self.0.ndims, &self.0.shapes, &self.0.strides)
            .saturating_mul(self.data_type().elem_size() as u64)
    }

    /// The raw 144 bytes, as they travel.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::bytes_of(&self.0)
    }
}

impl Deref for ValidTensor {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.0
    }
}

impl PartialEq for ValidTensor {
    /// Same backing (field-wise descriptor equality) and the same view; padding ignored.
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.0, &other.0);
        a.buffer == b.buffer
            && a.byte_offset == b.byte_offset
            && a.ndims == b.ndims
            && a.shapes == b.shapes
            && a.strides == b.strides
            && a.dtype == b.dtype
    }
}

impl Eq for ValidTensor {}
