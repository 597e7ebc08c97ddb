//! Geometry shared by every tensor type: rank, per-dimension shape and element stride, dtype.
//!
//! Extents use saturating arithmetic: a product or sum that would exceed `u64` becomes
//! [`EXTENT_UNREPRESENTABLE`], which every validator rejects. No input can make these functions
//! overflow or panic.

use crate::dtype::DataType;
use crate::limits::MAX_TENSOR_DIMS;
use core::fmt;

/// The saturated extent: the view's span cannot be represented in 64 bits.
pub const EXTENT_UNREPRESENTABLE: u64 = u64::MAX;

/// A geometry that cannot describe a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeometryError {
    /// Rank outside `1..=MAX_TENSOR_DIMS`.
    NDims {
        /// The `ndims` the tensor holds.
        value: u32,
        /// The largest rank allowed.
        limit: u32,
    },
    /// Unknown dtype byte.
    DataType {
        /// The dtype byte the tensor holds.
        value: u8,
    },
    /// A used dimension has extent zero.
    ZeroShape {
        /// Index of the dimension, below the rank.
        dim: u8,
    },
    /// A used dimension has stride zero (broadcast is not representable).
    ZeroStride {
        /// Index of the dimension, below the rank.
        dim: u8,
    },
    /// A dimension at or past the rank carries a non-zero shape or stride.
    UnusedDim {
        /// Index of the dimension, at or past the rank.
        dim: u8,
        /// The shape it carries there.
        shape: u32,
        /// The stride it carries there.
        stride: u32,
    },
    /// The view's extent does not fit in 64 bits.
    ExtentOverflow,
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NDims { value, limit } => write!(f, "ndims {value} is outside 1..={limit}"),
            Self::DataType { value } => write!(
                f,
                "dtype {value} is unknown (defined values are 0..{})",
                DataType::COUNT
            ),
            Self::ZeroShape { dim } => write!(f, "shapes[{dim}] is 0"),
            Self::ZeroStride { dim } => write!(f, "strides[{dim}] is 0"),
            Self::UnusedDim { dim, shape, stride } => write!(
                f,
                "dimension {dim} is past ndims but has shape {shape}, stride {stride} (must be 0)"
            ),
            Self::ExtentOverflow => f.write_str("the view's extent overflows 64 bits"),
        }
    }
}

impl core::error::Error for GeometryError {}

/// What a successful [`check`] learned about a geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The element type the dtype byte names.
    pub dtype: DataType,
    /// Elements from the first to one past the last addressed element.
    pub extent_elems: u64,
    /// `extent_elems` times the element size; never saturated.
    pub extent_bytes: u64,
}

/// Checks rank, dtype, every dimension and the extent, in that order.
#[inline]
pub fn check(
    ndims: u32,
    shapes: &[u32; MAX_TENSOR_DIMS],
    strides: &[u32; MAX_TENSOR_DIMS],
    dtype: u8,
) -> Result<Checked, GeometryError> {
    let dtype = check_rank_dtype(ndims, dtype)?;
    check_dims(ndims, shapes, strides, dtype)
}

/// Checks the rank and decodes the dtype: the part of [`check`] that comes before the wire
/// gate's offset-alignment check.
#[inline]
pub fn check_rank_dtype(ndims: u32, dtype: u8) -> Result<DataType, GeometryError> {
    if ndims == 0 || ndims as usize > MAX_TENSOR_DIMS {
        return Err(GeometryError::NDims {
            value: ndims,
            limit: MAX_TENSOR_DIMS as u32,
        });
    }
    DataType::from_raw(dtype).ok_or(GeometryError::DataType { value: dtype })
}

/// Checks every dimension and the extent of a geometry whose rank and dtype passed
/// [`check_rank_dtype`].
#[inline]
pub fn check_dims(
    ndims: u32,
    shapes: &[u32; MAX_TENSOR_DIMS],
    strides: &[u32; MAX_TENSOR_DIMS],
    dtype: DataType,
) -> Result<Checked, GeometryError> {
    let rank = (ndims as usize).min(MAX_TENSOR_DIMS);
    let mut span: u64 = 0;
    for dim in 0..MAX_TENSOR_DIMS {
        let (shape, stride) = (shapes[dim], strides[dim]);
        if dim < rank {
            if shape == 0 {
                return Err(GeometryError::ZeroShape { dim: dim as u8 });
            }
            if stride == 0 {
                return Err(GeometryError::ZeroStride { dim: dim as u8 });
            }
            // (2^32-1)^2 < 2^64: one term never overflows; only the running sum can.
            span = span.saturating_add((shape as u64 - 1) * stride as u64);
        } else if shape != 0 || stride != 0 {
            return Err(GeometryError::UnusedDim {
                dim: dim as u8,
                shape,
                stride,
            });
        }
    }
    let extent_elems = span.saturating_add(1);
    let extent_bytes = extent_elems.saturating_mul(dtype.elem_size() as u64);
    if extent_bytes == EXTENT_UNREPRESENTABLE {
        return Err(GeometryError::ExtentOverflow);
    }
    Ok(Checked {
        dtype,
        extent_elems,
        extent_bytes,
    })
}

/// Elements spanned by a view, saturating: `sum((shape_i - 1) * stride_i) + 1` over the used
/// dimensions (a zero shape contributes nothing). `ndims` past the cap is clamped.
#[inline]
pub fn extent_elems(
    ndims: u32,
    shapes: &[u32; MAX_TENSOR_DIMS],
    strides: &[u32; MAX_TENSOR_DIMS],
) -> u64 {
    let rank = (ndims as usize).min(MAX_TENSOR_DIMS);
    let mut span: u64 = 0;
    for dim in 0..rank {
        let shape = shapes[dim] as u64;
        if shape != 0 {
            span = span.saturating_add((shape - 1) * strides[dim] as u64);
        }
    }
    span.saturating_add(1)
}

/// Number of elements in the view (product of the used shapes), saturating.
#[inline]
pub fn numel(ndims: u32, shapes: &[u32; MAX_TENSOR_DIMS]) -> u64 {
    let rank = (ndims as usize).min(MAX_TENSOR_DIMS);
    shapes[..rank]
        .iter()
        .fold(1u64, |n, &s| n.saturating_mul(s as u64))
}

/// Whether the view is dense row-major: the innermost stride is 1 and each outer stride is the
/// product of the inner shapes. A size-1 dimension's stride is ignored, as it never advances.
#[inline]
pub fn is_row_major(
    ndims: u32,
    shapes: &[u32; MAX_TENSOR_DIMS],
    strides: &[u32; MAX_TENSOR_DIMS],
) -> bool {
    let rank = (ndims as usize).min(MAX_TENSOR_DIMS);
    let mut expected: u64 = 1;
    for dim in (0..rank).rev() {
        if shapes[dim] != 1 && strides[dim] as u64 != expected {
            return false;
        }
        expected = expected.saturating_mul(shapes[dim] as u64);
    }
    true
}

/// Row-major element strides for `shapes` (zero past `ndims`). Saturates at `u32::MAX`, which a
/// validator then reports as an extent the backing cannot hold.
#[inline]
pub fn row_major_strides(ndims: u32, shapes: &[u32; MAX_TENSOR_DIMS]) -> [u32; MAX_TENSOR_DIMS] {
    let rank = (ndims as usize).min(MAX_TENSOR_DIMS);
    let mut strides = [0u32; MAX_TENSOR_DIMS];
    let mut next: u32 = 1;
    for dim in (0..rank).rev() {
        strides[dim] = next;
        next = next.saturating_mul(shapes[dim]);
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extent_of_a_strided_view() {
        // A 2x3 view of a 4x8 row-major matrix spans 1*8 + 2*1 + 1 = 11 elements.
        let shapes = [2, 3, 0, 0, 0];
        let strides = [8, 1, 0, 0, 0];
        assert_eq!(extent_elems(2, &shapes, &strides), 11);
        let c = check(2, &shapes, &strides, DataType::Float32.raw()).unwrap();
        assert_eq!((c.extent_elems, c.extent_bytes), (11, 44));
        assert!(!is_row_major(2, &shapes, &strides));
        assert!(is_row_major(2, &shapes, &[3, 1, 0, 0, 0]));
    }

    #[test]
    fn size_one_dimension_stride_does_not_break_contiguity() {
        assert!(is_row_major(2, &[1, 4, 0, 0, 0], &[99, 1, 0, 0, 0]));
        assert_eq!(row_major_strides(3, &[2, 3, 4, 0, 0]), [12, 4, 1, 0, 0]);
    }

    #[test]
    fn overflowing_extents_are_rejected_not_wrapped() {
        let f32 = DataType::Float32.raw();
        let r = check(1, &[(1 << 31) + 1, 0, 0, 0, 0], &[1 << 31, 0, 0, 0, 0], f32);
        assert_eq!(r, Err(GeometryError::ExtentOverflow));
        let i8 = DataType::Int8.raw();
        let r = check(
            2,
            &[u32::MAX, 7, 0, 0, 0],
            &[u32::MAX, 1 << 31, 0, 0, 0],
            i8,
        );
        assert_eq!(r, Err(GeometryError::ExtentOverflow));
    }
}
