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
use core::ops::Deref;

/// The address-free wire tensor. See the module table for its layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Tensor {
    /// The backing this view is over.
    pub buffer: BufferDescriptor,
    /// Start of the view within the backing, in bytes.
    pub byte_offset: u64,
    /// Rank: dimensions in use, `1..=MAX_TENSOR_DIMS`; `shapes` and `strides` are zero past it.
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

crate::assert_layout!(Tensor, size = 144, align = 8, {
    buffer: 0, byte_offset: 88, ndims: 96, shapes: 100, strides: 120, dtype: 140, _pad: 141,
});

/// Why a wire tensor must not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorError {
    /// Its buffer descriptor is invalid.
    Descriptor(DescriptorError),
    /// Its geometry is invalid.
    Geometry(GeometryError),
    /// `byte_offset` is not a multiple of the element size.
    MisalignedOffset {
        /// The tensor's `byte_offset`.
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

impl core::error::Error for TensorError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Descriptor(e) => Some(e),
            Self::Geometry(e) => Some(e),
            _ => None,
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

    /// The shapes of the dimensions in use (`ndims` of them, at most five).
    pub fn used_shapes(&self) -> &[u32] {
        &self.shapes[..(self.ndims as usize).min(MAX_TENSOR_DIMS)]
    }

    /// The strides of the dimensions in use (`ndims` of them, at most five).
    pub fn used_strides(&self) -> &[u32] {
        &self.strides[..(self.ndims as usize).min(MAX_TENSOR_DIMS)]
    }
}

/// A wire tensor that passed [`Tensor::validate`]. Only validation makes one.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct ValidTensor(Tensor);

impl ValidTensor {
    /// `tensor`, if [`Tensor::validate`] accepts it.
    #[inline]
    pub fn new(tensor: Tensor) -> Result<Self, TensorError> {
        tensor.validate()?;
        Ok(Self(tensor))
    }

    /// The wire tensor that passed validation.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arg::AccessMode;
    use crate::buffer::{AddressSpace, BackendKind, CanonicalIdentity};

    // Expectations come from the module table and hand-worked extents, never from the
    // function under test.

    fn desc(nbytes: u64) -> BufferDescriptor {
        BufferDescriptor::new(
            CanonicalIdentity::new([9; 8], 3, 1),
            AddressSpace::Host,
            AccessMode::ReadWrite,
            BackendKind::PosixShm,
            nbytes,
            b"t",
        )
        .unwrap()
    }

    /// A raw tensor: shapes and strides padded with zeros.
    fn raw(byte_offset: u64, shapes: &[u32], strides: &[u32], dtype: DataType) -> Tensor {
        let mut t = Tensor {
            buffer: desc(64),
            byte_offset,
            ndims: shapes.len() as u32,
            shapes: [0; MAX_TENSOR_DIMS],
            strides: [0; MAX_TENSOR_DIMS],
            dtype: dtype.raw(),
            _pad: [0; 3],
        };
        t.shapes[..shapes.len()].copy_from_slice(shapes);
        t.strides[..strides.len()].copy_from_slice(strides);
        t
    }

    #[test]
    fn validate_returns_the_extent_in_bytes() {
        // Elements 0 + {0, 1, 2} + {0, 4}: the last is 6, so 7 elements, 28 FLOAT32 bytes.
        let t = raw(0, &[2, 3], &[4, 1], DataType::Float32);
        assert_eq!(t.validate(), Ok(28));
        let v = ValidTensor::new(t).unwrap();
        assert_eq!(v.extent_bytes(), 28);
        // The same view as FLOAT16 spans 14 bytes.
        let h = ValidTensor::new(raw(0, &[2, 3], &[4, 1], DataType::Float16)).unwrap();
        assert_eq!(h.extent_bytes(), 14);
        assert_eq!(h.data_type(), DataType::Float16);
        assert_eq!(v.data_type(), DataType::Float32);
    }

    #[test]
    fn the_offset_must_be_a_multiple_of_the_element_size() {
        for (offset, dtype, ok) in [
            (4, DataType::Float32, true),
            (8, DataType::Float32, true),
            (2, DataType::Float32, false),
            (6, DataType::Float32, false),
            (1, DataType::Float16, false),
            (2, DataType::Float16, true),
            (4, DataType::Int64, false),
            (8, DataType::Int64, true),
            (1, DataType::Uint8, true),
            (3, DataType::Uint8, true),
        ] {
            let got = raw(offset, &[2], &[1], dtype).validate();
            if ok {
                assert!(got.is_ok(), "{offset} {dtype:?}: {got:?}");
            } else {
                assert_eq!(
                    got,
                    Err(TensorError::MisalignedOffset {
                        byte_offset: offset,
                        elem_size: dtype.elem_size()
                    }),
                    "{offset} {dtype:?}"
                );
            }
        }
    }

    #[test]
    fn the_view_must_fit_in_the_backing() {
        // 64-byte backing; a view of n FLOAT32 elements spans 4n bytes.
        let oob = |offset: u64, elems: u32| TensorError::OutOfBacking {
            byte_offset: offset,
            extent_bytes: 4 * elems as u64,
            nbytes: 64,
        };
        for (offset, elems, fits) in [
            (0, 16, true),
            (60, 1, true),
            (4, 15, true),
            (32, 8, true),
            (0, 17, false),
            (60, 2, false),
            (4, 16, false),
            (64, 1, false),
            (68, 1, false),
            (128, 1, false),
        ] {
            let got = raw(offset, &[elems], &[1], DataType::Float32).validate();
            if fits {
                assert_eq!(got, Ok(4 * elems as u64), "{offset} {elems}");
            } else {
                assert_eq!(got, Err(oob(offset, elems)), "{offset} {elems}");
            }
        }
    }

    #[test]
    fn validation_reports_descriptor_and_geometry_errors() {
        let mut t = raw(0, &[2], &[1], DataType::Float32);
        t.buffer.magic = 1;
        assert_eq!(
            t.validate(),
            Err(TensorError::Descriptor(DescriptorError::Magic { value: 1 }))
        );
        let mut t = raw(0, &[2], &[1], DataType::Float32);
        t.strides[0] = 0;
        assert_eq!(
            t.validate(),
            Err(TensorError::Geometry(GeometryError::ZeroStride { dim: 0 }))
        );
        assert_eq!(
            TensorError::from(DescriptorError::ZeroGeneration),
            TensorError::Descriptor(DescriptorError::ZeroGeneration)
        );
        assert_eq!(
            TensorError::from(GeometryError::ExtentOverflow),
            TensorError::Geometry(GeometryError::ExtentOverflow)
        );
    }

    #[test]
    fn constructors_check_the_rank_and_fill_the_strides() {
        let nd = |value| {
            Err(TensorError::Geometry(GeometryError::NDims {
                value,
                limit: 5,
            }))
        };
        let b = desc(1 << 20);
        let f = DataType::Uint8;
        assert_eq!(
            Tensor::new(b, 0, &[2, 2], &[1], f).map(|_| ()),
            Err(TensorError::RankMismatch {
                shapes: 2,
                strides: 1
            })
        );
        assert_eq!(Tensor::new(b, 0, &[], &[], f).map(|_| ()), nd(0));
        assert_eq!(Tensor::new(b, 0, &[1; 6], &[1; 6], f).map(|_| ()), nd(6));
        assert_eq!(Tensor::row_major(b, 0, &[], f).map(|_| ()), nd(0));
        assert_eq!(Tensor::row_major(b, 0, &[1; 6], f).map(|_| ()), nd(6));
        // Row-major strides of 2x3x4: 12, 4, 1; of 5 dims 2x2x2x2x3: 24, 12, 6, 3, 1.
        let t = Tensor::row_major(b, 8, &[2, 3, 4], DataType::Float32).unwrap();
        assert_eq!(t.used_shapes(), &[2, 3, 4]);
        assert_eq!(t.used_strides(), &[12, 4, 1]);
        assert_eq!(t.get().byte_offset, 8);
        assert_eq!(t.byte_offset, 8);
        assert_eq!(t.get().strides, [12, 4, 1, 0, 0]);
        let t5 = Tensor::row_major(b, 0, &[2, 2, 2, 2, 3], f).unwrap();
        assert_eq!(t5.used_strides(), &[24, 12, 6, 3, 1]);
        assert_eq!(t5.used_shapes(), &[2, 2, 2, 2, 3]);
        let s = Tensor::new(b, 0, &[3, 2], &[1, 5], f).unwrap();
        assert_eq!(s.used_strides(), &[1, 5]);
        assert_eq!(s.get().shapes, [3, 2, 0, 0, 0]);
    }

    #[test]
    fn the_wire_bytes_follow_the_table() {
        let t = Tensor::new(desc(64), 8, &[2, 3], &[4, 1], DataType::Float16).unwrap();
        let bytes = t.as_bytes();
        assert_eq!(bytes.len(), 144);
        assert_eq!(&bytes[0..2], &[0x42, 0x53]);
        assert_eq!(&bytes[88..96], &8u64.to_le_bytes());
        assert_eq!(&bytes[96..100], &2u32.to_le_bytes());
        assert_eq!(&bytes[100..108], &[2, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&bytes[120..128], &[4, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(bytes[140], 1);
    }

    #[test]
    fn equality_reads_every_field_but_the_padding() {
        let a = ValidTensor(raw(4, &[2, 3], &[4, 1], DataType::Float32));
        let mut padded = a;
        padded.0._pad = [1, 2, 3];
        assert_eq!(a, padded);
        let changes: [&dyn Fn(&mut Tensor); 6] = [
            &|t| t.buffer.nbytes = 128,
            &|t| t.byte_offset = 8,
            &|t| t.ndims = 1,
            &|t| t.shapes[0] = 1,
            &|t| t.strides[0] = 3,
            &|t| t.dtype = 2,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut b = a;
            change(&mut b.0);
            assert_ne!(a, b, "change {i}");
            assert_ne!(b, a, "change {i}");
        }
    }

    #[test]
    fn tensor_errors_read_as_documented() {
        let cases = [
            (
                TensorError::Descriptor(DescriptorError::ZeroGeneration),
                "buffer: identity generation is 0 (uninitialised)",
            ),
            (
                TensorError::Geometry(GeometryError::ZeroShape { dim: 1 }),
                "shapes[1] is 0",
            ),
            (
                TensorError::MisalignedOffset {
                    byte_offset: 6,
                    elem_size: 4,
                },
                "byte_offset 6 is not a multiple of the element size 4",
            ),
            (
                TensorError::OutOfBacking {
                    byte_offset: 60,
                    extent_bytes: 8,
                    nbytes: 64,
                },
                "view [60, +8) does not fit the 64-byte backing",
            ),
            (
                TensorError::RankMismatch {
                    shapes: 2,
                    strides: 1,
                },
                "2 shapes but 1 strides",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(std::format!("{e}"), text);
        }
    }
}
