//! The `TaskArgs` blob: the one wire format for task arguments between processes.
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 4 | `i32` tensor count T |
//! | 4 | 4 | `i32` scalar count S |
//! | 8 | 144 T | wire [`Tensor`]s, raw |
//! | 8 + 144 T | 8 S | `u64` scalars |
//!
//! Tags do not travel: a decoded argument is an INPUT until its receiver re-tags it.
//!
//! [`read_blob`] bounds the envelope (header, counts, total size against the capacity);
//! [`TaskArgsView::tensor`] copies one element into an aligned value and validates it. That is
//! the only path from blob bytes to a tensor, so every tensor a receiver holds has passed the
//! gate, and a corrupt element k fails exactly when element k is decoded.

use crate::limits::MAX_TENSOR_DIMS;
use crate::tensor::{Tensor, TensorError, ValidTensor};
use core::fmt;

/// Bytes of the header (two `i32` counts).
pub const HEADER_BYTES: usize = 8;
/// Bytes per tensor element.
pub const TENSOR_BYTES: usize = core::mem::size_of::<Tensor>();
/// Bytes per scalar.
pub const SCALAR_BYTES: usize = 8;

const _: () = assert!(MAX_TENSOR_DIMS == 5 && TENSOR_BYTES == 144);

/// Which count of the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// The header's tensor count (its first `i32`).
    Tensors,
    /// The header's scalar count (its second `i32`).
    Scalars,
}

/// A blob that cannot be written or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobError {
    /// The region is too small to hold even the header.
    NoHeader {
        /// Length of the region given, in bytes.
        capacity: usize,
    },
    /// A header count is negative.
    NegativeCount {
        /// The header count that is negative.
        field: Count,
        /// The value the header holds.
        value: i32,
    },
    /// A count does not fit the header's `i32`.
    CountOverflow {
        /// The header count that overflows.
        field: Count,
        /// The count requested.
        value: usize,
    },
    /// The blob needs more bytes than the region holds.
    Exceeds {
        /// Tensors it declares.
        tensors: u64,
        /// Scalars it declares.
        scalars: u64,
        /// Bytes it needs.
        needed: u64,
        /// Length of the region, in bytes.
        capacity: usize,
    },
    /// A tensor index past the count.
    TensorIndex {
        /// The index asked for.
        index: usize,
        /// Tensors in the blob.
        count: usize,
    },
    /// A scalar index past the count.
    ScalarIndex {
        /// The index asked for.
        index: usize,
        /// Scalars in the blob.
        count: usize,
    },
    /// Tensor element `index` failed validation.
    Tensor {
        /// The tensor's position in the blob.
        index: usize,
        /// What its validation refused.
        error: TensorError,
    },
}

impl fmt::Display for BlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoHeader { capacity } => write!(
                f,
                "args region of {capacity} bytes cannot hold the {HEADER_BYTES}-byte header"
            ),
            Self::NegativeCount { field, value } => {
                write!(f, "{field:?} count {value} is negative (likely shm corruption)")
            }
            Self::CountOverflow { field, value } => {
                write!(f, "{field:?} count {value} exceeds i32::MAX")
            }
            Self::Exceeds {
                tensors,
                scalars,
                needed,
                capacity,
            } => write!(
                f,
                "args blob of {tensors} tensors and {scalars} scalars needs {needed} bytes, region holds {capacity}"
            ),
            Self::TensorIndex { index, count } => {
                write!(f, "tensor index {index} out of range (count {count})")
            }
            Self::ScalarIndex { index, count } => {
                write!(f, "scalar index {index} out of range (count {count})")
            }
            Self::Tensor { index, error } => write!(f, "tensor {index}: {error}"),
        }
    }
}

impl core::error::Error for BlobError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Tensor { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Bytes a blob of `tensors` tensors and `scalars` scalars occupies; `None` if not representable.
pub const fn blob_size(tensors: usize, scalars: usize) -> Option<usize> {
    let t = match tensors.checked_mul(TENSOR_BYTES) {
        Some(t) => t,
        None => return None,
    };
    let s = match scalars.checked_mul(SCALAR_BYTES) {
        Some(s) => s,
        None => return None,
    };
    match HEADER_BYTES.checked_add(t) {
        Some(h) => h.checked_add(s),
        None => None,
    }
}

fn header_count(field: Count, value: usize) -> Result<i32, BlobError> {
    i32::try_from(value).map_err(|_| BlobError::CountOverflow { field, value })
}

/// Writes `tensors` then `scalars` into `dst` and returns the bytes written.
///
/// Refuses, before writing anything, a blob that does not fit `dst`. The mailbox passes its
/// 64,016-byte args region; a smaller `dst` is a smaller limit.
pub fn write_blob(
    dst: &mut [u8],
    tensors: &[ValidTensor],
    scalars: &[u64],
) -> Result<usize, BlobError> {
    let t = header_count(Count::Tensors, tensors.len())?;
    let s = header_count(Count::Scalars, scalars.len())?;
    let needed = match blob_size(tensors.len(), scalars.len()) {
        Some(n) if n <= dst.len() => n,
        other => {
            return Err(BlobError::Exceeds {
                tensors: tensors.len() as u64,
                scalars: scalars.len() as u64,
                needed: other.map_or(u64::MAX, |n| n as u64),
                capacity: dst.len(),
            })
        }
    };
    let (header, rest) = dst[..needed].split_at_mut(HEADER_BYTES);
    header[..4].copy_from_slice(&t.to_le_bytes());
    header[4..].copy_from_slice(&s.to_le_bytes());
    let (tensor_bytes, scalar_bytes) = rest.split_at_mut(tensors.len() * TENSOR_BYTES);
    for (chunk, tensor) in tensor_bytes.chunks_exact_mut(TENSOR_BYTES).zip(tensors) {
        chunk.copy_from_slice(tensor.as_bytes());
    }
    for (chunk, scalar) in scalar_bytes.chunks_exact_mut(SCALAR_BYTES).zip(scalars) {
        chunk.copy_from_slice(&scalar.to_le_bytes());
    }
    Ok(needed)
}

/// Bounds a blob's envelope in `src` (the whole region it may occupy) and returns a view.
pub fn read_blob(src: &[u8]) -> Result<TaskArgsView<'_>, BlobError> {
    if src.len() < HEADER_BYTES {
        return Err(BlobError::NoHeader {
            capacity: src.len(),
        });
    }
    let t = i32::from_le_bytes([src[0], src[1], src[2], src[3]]);
    let s = i32::from_le_bytes([src[4], src[5], src[6], src[7]]);
    if t < 0 {
        return Err(BlobError::NegativeCount {
            field: Count::Tensors,
            value: t,
        });
    }
    if s < 0 {
        return Err(BlobError::NegativeCount {
            field: Count::Scalars,
            value: s,
        });
    }
    // In u64: 8 + 144 * (2^31 - 1) + 8 * (2^31 - 1) cannot overflow.
    let (t, s) = (t as u64, s as u64);
    let needed = HEADER_BYTES as u64 + TENSOR_BYTES as u64 * t + SCALAR_BYTES as u64 * s;
    if needed > src.len() as u64 {
        return Err(BlobError::Exceeds {
            tensors: t,
            scalars: s,
            needed,
            capacity: src.len(),
        });
    }
    let tensor_end = HEADER_BYTES + TENSOR_BYTES * t as usize;
    Ok(TaskArgsView {
        tensor_bytes: &src[HEADER_BYTES..tensor_end],
        scalar_bytes: &src[tensor_end..needed as usize],
    })
}

/// A bounded blob. Tensors are decoded and validated one at a time, on access.
#[derive(Clone, Copy, Debug)]
pub struct TaskArgsView<'a> {
    tensor_bytes: &'a [u8],
    scalar_bytes: &'a [u8],
}

impl<'a> TaskArgsView<'a> {
    /// Tensors in the blob.
    pub fn tensor_count(&self) -> usize {
        self.tensor_bytes.len() / TENSOR_BYTES
    }

    /// Scalars in the blob.
    pub fn scalar_count(&self) -> usize {
        self.scalar_bytes.len() / SCALAR_BYTES
    }

    /// Bytes the blob occupies, header included.
    pub fn size(&self) -> usize {
        HEADER_BYTES + self.tensor_bytes.len() + self.scalar_bytes.len()
    }

    /// Decodes and validates tensor `index`.
    #[inline]
    pub fn tensor(&self, index: usize) -> Result<ValidTensor, BlobError> {
        let count = self.tensor_count();
        let start = index.wrapping_mul(TENSOR_BYTES);
        let Some(bytes) = (index < count)
            .then(|| self.tensor_bytes.get(start..start + TENSOR_BYTES))
            .flatten()
        else {
            return Err(BlobError::TensorIndex { index, count });
        };
        // The source may be unaligned (it sits in a mailbox); copy into an aligned value.
        let tensor: Tensor = bytemuck::pod_read_unaligned(bytes);
        ValidTensor::new(tensor).map_err(|error| BlobError::Tensor { index, error })
    }

    /// Scalar `index` (its eight little-endian bytes); [`BlobError::ScalarIndex`] past the
    /// count.
    #[inline]
    pub fn scalar(&self, index: usize) -> Result<u64, BlobError> {
        let count = self.scalar_count();
        let start = index.wrapping_mul(SCALAR_BYTES);
        match (index < count)
            .then(|| self.scalar_bytes.get(start..start + SCALAR_BYTES))
            .flatten()
        {
            Some(b) => {
                let mut le = [0u8; 8];
                le.copy_from_slice(b);
                Ok(u64::from_le_bytes(le))
            }
            None => Err(BlobError::ScalarIndex { index, count }),
        }
    }

    /// Every tensor, decoded and validated in order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = Result<ValidTensor, BlobError>> + 'a {
        let view = *self;
        (0..view.tensor_count()).map(move |i| view.tensor(i))
    }

    /// Every scalar, in order.
    pub fn scalars(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.scalar_bytes.chunks_exact(SCALAR_BYTES).map(|b| {
            let mut le = [0u8; 8];
            le.copy_from_slice(b);
            u64::from_le_bytes(le)
        })
    }

    /// Validates every tensor; the first failure is returned.
    pub fn validate_all(&self) -> Result<(), BlobError> {
        self.tensors().try_for_each(|t| t.map(drop))
    }
}
