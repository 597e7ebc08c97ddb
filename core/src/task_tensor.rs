//! `TaskTensor`: the runtime's working tensor. 128 bytes, two cache lines.
//!
//! The chip argument's geometry plus what a runtime decides about a tensor: the task that
//! produced it, the version dependency tracking keys on, whether tracking is creator-only, and
//! two caches derived from the geometry. Orchestration, task payloads, the TensorMap and kernels
//! all see this type; [`TaskTensor::adopt`] is where a `ChipTensor` becomes one.
//!
//! | off | size | field | |
//! |---|---|---|---|
//! | 0 | 16 | `buffer` (address, size) | line 1: what submit and dispatch read |
//! | 16 | 8 | `owner_task_id` | |
//! | 24 | 8 | `start_offset` (elements) | |
//! | 32 | 4 | `version` | |
//! | 36 | 4 | `ndims` | |
//! | 40 | 1 | `dtype` | |
//! | 41 | 1 | `manual_dep` (0/1) | |
//! | 42 | 1 | `is_contiguous` (cache, 0/1) | |
//! | 43 | 1 | `address_space` | |
//! | 44 | 20 | `shapes[5]` | |
//! | 64 | 8 | `extent_elem_cache` | line 2 |
//! | 72 | 20 | `strides[5]` | |
//! | 92 | 36 | `_pad` | |
//!
//! Fields are private so the caches can never disagree with the geometry: every constructor and
//! [`TaskTensor::view`] recompute them.

use crate::buffer::AddressSpace;
use crate::chip::{BufferHandle, ChipTensor};
use crate::dtype::DataType;
use crate::geometry::{self, GeometryError};
use crate::limits::MAX_TENSOR_DIMS;
use bytemuck::{Pod, Zeroable};
use core::fmt;
use core::mem::offset_of;

/// A task's id: `(ring << 32) | local`, where `local` counts submits on that ring in one run.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Pod, Zeroable)]
pub struct TaskId(pub u64);

crate::assert_layout!(TaskId, size = 8);

impl TaskId {
    /// No task: an external tensor, or "no producer".
    pub const INVALID: TaskId = TaskId(u64::MAX);

    /// The id of the `local`-th task on `ring`.
    pub const fn new(ring: u32, local: u32) -> Self {
        Self(((ring as u64) << 32) | local as u64)
    }

    /// The ring the task was submitted on.
    pub const fn ring(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The task's position on its ring.
    pub const fn local(self) -> u32 {
        self.0 as u32
    }

    /// Whether this names a task.
    pub const fn is_valid(self) -> bool {
        self.0 != u64::MAX
    }
}

/// `task <local> of ring <ring>`, or `no task` for [`TaskId::INVALID`].
impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_valid() {
            write!(f, "task {} of ring {}", self.local(), self.ring())
        } else {
            f.write_str("no task")
        }
    }
}

/// The runtime's working tensor. See the module table for its layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct TaskTensor {
    buffer: BufferHandle,
    owner_task_id: TaskId,
    start_offset: u64,
    version: i32,
    ndims: u32,
    dtype: u8,
    manual_dep: u8,
    is_contiguous: u8,
    address_space: u8,
    shapes: [u32; MAX_TENSOR_DIMS],
    extent_elem_cache: u64,
    strides: [u32; MAX_TENSOR_DIMS],
    _pad: [u8; 36],
}

crate::assert_layout!(TaskTensor, size = 128, {
    buffer: 0, owner_task_id: 16, start_offset: 24, version: 32, ndims: 36, dtype: 40,
    manual_dep: 41, is_contiguous: 42, address_space: 43, shapes: 44, extent_elem_cache: 64,
    strides: 72, _pad: 92,
});
// Every field lies in the first `PACKED_WORDS` words.
static_assertions::const_assert!(offset_of!(TaskTensor, _pad) <= TaskTensor::PACKED_WORDS * 8);

/// Why a chip argument could not be adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdoptError {
    /// Its geometry is invalid.
    Geometry(GeometryError),
    /// Its address space byte is unknown.
    AddressSpace {
        /// The `address_space` byte the chip tensor holds.
        value: u8,
    },
    /// The view reaches past the buffer it names.
    OutOfBuffer {
        /// Start of the view, in elements.
        start_offset: u64,
        /// Elements the view spans.
        extent_elems: u64,
        /// The buffer's size in bytes.
        size: u64,
    },
}

impl From<GeometryError> for AdoptError {
    fn from(e: GeometryError) -> Self {
        Self::Geometry(e)
    }
}

impl fmt::Display for AdoptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Geometry(e) => e.fmt(f),
            Self::AddressSpace { value } => write!(f, "address_space {value} is unknown"),
            Self::OutOfBuffer {
                start_offset,
                extent_elems,
                size,
            } => write!(
                f,
                "view of {extent_elems} elements at element {start_offset} exceeds the {size}-byte buffer"
            ),
        }
    }
}

/// Why a view could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewError {
    /// Shapes and offsets must both have one entry per dimension of the source.
    Rank {
        /// The source's rank.
        expected: u32,
        /// Number of shapes given.
        shapes: usize,
        /// Number of offsets given.
        offsets: usize,
    },
    /// A view dimension of extent zero.
    ZeroShape {
        /// Index of the dimension, below the rank.
        dim: u8,
    },
    /// `offset + shape` exceeds the source's extent in a dimension.
    OutOfBounds {
        /// Index of the dimension, below the rank.
        dim: u8,
        /// The view's offset in it.
        offset: u32,
        /// The view's extent in it.
        shape: u32,
        /// The source's extent in it.
        limit: u32,
    },
}

impl fmt::Display for ViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Rank {
                expected,
                shapes,
                offsets,
            } => write!(
                f,
                "a view of a rank-{expected} tensor needs {expected} shapes and offsets, got {shapes} and {offsets}"
            ),
            Self::ZeroShape { dim } => write!(f, "view shape[{dim}] is 0"),
            Self::OutOfBounds {
                dim,
                offset,
                shape,
                limit,
            } => write!(
                f,
                "view dimension {dim}: offset {offset} + shape {shape} exceeds {limit}"
            ),
        }
    }
}

impl core::error::Error for AdoptError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Geometry(e) => Some(e),
            Self::AddressSpace { .. } | Self::OutOfBuffer { .. } => None,
        }
    }
}

impl core::error::Error for ViewError {}

impl TaskTensor {
    /// Adopts a chip entry argument: checks its geometry and containment, computes the caches,
    /// and marks it external (no producer, version 0, automatic dependency tracking).
    pub fn adopt(c: &ChipTensor) -> Result<Self, AdoptError> {
        let g = geometry::check(c.ndims, &c.shapes, &c.strides, c.dtype)?;
        AddressSpace::from_raw(c.address_space).ok_or(AdoptError::AddressSpace {
            value: c.address_space,
        })?;
        let elems_in_buffer = c.buffer.size / g.dtype.elem_size() as u64;
        if c.start_offset > elems_in_buffer || g.extent_elems > elems_in_buffer - c.start_offset {
            return Err(AdoptError::OutOfBuffer {
                start_offset: c.start_offset,
                extent_elems: g.extent_elems,
                size: c.buffer.size,
            });
        }
        let mut t = Self {
            buffer: c.buffer,
            owner_task_id: TaskId::INVALID,
            start_offset: c.start_offset,
            version: 0,
            ndims: c.ndims,
            dtype: c.dtype,
            manual_dep: 0,
            is_contiguous: 0,
            address_space: c.address_space,
            shapes: c.shapes,
            extent_elem_cache: 0,
            strides: c.strides,
            _pad: [0; 36],
        };
        t.refresh_caches();
        Ok(t)
    }

    /// A tensor over memory the caller owns (an external or runtime-allocated buffer), with
    /// the given view, checked like an adopted argument.
    pub fn new(
        buffer: BufferHandle,
        start_offset: u64,
        shapes: &[u32],
        strides: &[u32],
        dtype: DataType,
        address_space: AddressSpace,
    ) -> Result<Self, AdoptError> {
        let rank = shapes.len();
        if rank == 0 || rank > MAX_TENSOR_DIMS || strides.len() != rank {
            return Err(GeometryError::NDims {
                value: u32::try_from(rank).unwrap_or(u32::MAX),
                limit: MAX_TENSOR_DIMS as u32,
            }
            .into());
        }
        let mut c = ChipTensor {
            buffer,
            start_offset,
            ndims: rank as u32,
            dtype: dtype.raw(),
            address_space: address_space as u8,
            ..ChipTensor::default()
        };
        c.shapes[..rank].copy_from_slice(shapes);
        c.strides[..rank].copy_from_slice(strides);
        Self::adopt(&c)
    }

    /// The description of an output the runtime allocates: a dense row-major tensor of
    /// `shapes` and `dtype` with no buffer yet. Submitting it as an OUTPUT argument gives it a
    /// buffer in the heap ring and makes the submitting task its owner.
    pub fn create_info(shapes: &[u32], dtype: DataType) -> Result<Self, AdoptError> {
        let rank = shapes.len().min(MAX_TENSOR_DIMS);
        let mut full = [0u32; MAX_TENSOR_DIMS];
        full[..rank].copy_from_slice(&shapes[..rank]);
        let strides = geometry::row_major_strides(shapes.len() as u32, &full);
        let size = geometry::numel(rank as u32, &full).saturating_mul(dtype.elem_size() as u64);
        Self::new(
            BufferHandle { addr: 0, size },
            0,
            shapes,
            &strides[..rank],
            dtype,
            AddressSpace::Device,
        )
    }

    /// Gives an output description its runtime-allocated buffer and its producer.
    pub(crate) fn bind_output(&mut self, addr: u64, owner: TaskId) {
        self.buffer.addr = addr;
        self.start_offset = 0;
        self.owner_task_id = owner;
    }

    /// Recomputes the extent and contiguity caches in one pass over the dimensions (the same
    /// answers as `geometry::extent_elems` and `geometry::is_row_major`).
    #[inline]
    fn refresh_caches(&mut self) {
        let rank = self.rank();
        let (mut span, mut dense, mut expected) = (0u64, true, 1u64);
        for dim in (0..rank).rev() {
            let (shape, stride) = (self.shapes[dim] as u64, self.strides[dim] as u64);
            // Without branches: a zero shape (a description's unused extent) adds nothing.
            span = span.saturating_add(shape.saturating_sub(1) * stride);
            dense &= (shape == 1) | (stride == expected);
            expected = expected.saturating_mul(shape);
        }
        self.extent_elem_cache = span.saturating_add(1);
        self.is_contiguous = dense as u8;
    }

    /// Words of [`Self::packed`].
    pub const PACKED_WORDS: usize = 12;

    /// The leading words of the tensor's 16 that views of one layout may differ in: its
    /// buffer (address and size), owner, start offset, version and rank. The words after them
    /// hold the element type, flags, shapes, extent, strides and padding.
    pub const VIEW_WORDS: usize = offset_of!(TaskTensor, dtype) / 8;

    /// The tensor as the words a payload record stores: every field, without the trailing
    /// padding (96 of its 128 bytes).
    #[inline]
    pub fn packed(&self) -> [u64; Self::PACKED_WORDS] {
        let words: &[u64; 16] = bytemuck::cast_ref(self);
        let mut out = [0u64; Self::PACKED_WORDS];
        out.copy_from_slice(&words[..Self::PACKED_WORDS]);
        out
    }

    /// The tensor [`Self::packed`] gave `words` for (its padding zero).
    #[inline]
    pub fn from_packed(words: [u64; Self::PACKED_WORDS]) -> Self {
        let mut all = [0u64; 16];
        all[..Self::PACKED_WORDS].copy_from_slice(&words);
        bytemuck::cast(all)
    }

    /// A view of `shapes` starting at `offsets` (per-dimension element coordinates). Strides are
    /// kept, so a view of a view addresses exactly the source's elements; owner, version and
    /// `manual_dep` are inherited.
    #[inline(always)]
    pub fn view(&self, shapes: &[u32], offsets: &[u32]) -> Result<Self, ViewError> {
        self.view_or_else(shapes, offsets, |e| e)
    }

    /// [`Self::view`] with its error turned into the caller's by `f`. The view is built
    /// straight into the caller's result, where mapping the error of [`Self::view`]'s moves the
    /// 128-byte tensor from one result type to the other: an orchestration taking thousands of
    /// views per run pays that copy on every one.
    #[inline(always)]
    pub fn view_or_else<E>(
        &self,
        shapes: &[u32],
        offsets: &[u32],
        f: impl FnOnce(ViewError) -> E,
    ) -> Result<Self, E> {
        let rank = self.rank();
        if shapes.len() != rank || offsets.len() != rank {
            return Err(f(ViewError::Rank {
                expected: self.ndims,
                shapes: shapes.len(),
                offsets: offsets.len(),
            }));
        }
        // One pass, innermost dimension first, that also computes what `refresh_caches` would
        // (extent and contiguity) and defers the error: the checks fold into one flag, and only
        // a failed view walks the dimensions again to name the first bad one.
        let mut shapes_out = self.shapes;
        let (mut start, mut span, mut expected) = (self.start_offset, 0u64, 1u64);
        let (mut ok, mut dense) = (true, true);
        for dim in (0..rank).rev() {
            let (shape, offset, limit) = (shapes[dim], offsets[dim], self.shapes[dim]);
            let stride = self.strides[dim] as u64;
            ok &= (shape != 0) & (offset as u64 + shape as u64 <= limit as u64);
            // Inside the source (when `ok`), so these stay below the source's own extent; a
            // failed view's wrapped values are never used.
            start = start.wrapping_add(offset as u64 * stride);
            span = span.wrapping_add((shape as u64).saturating_sub(1) * stride);
            dense &= (shape == 1) | (stride == expected);
            expected = expected.saturating_mul(shape as u64);
            shapes_out[dim] = shape;
        }
        if !ok {
            return Err(f(Self::view_error(&self.shapes, shapes, offsets)));
        }
        Ok(Self {
            shapes: shapes_out,
            start_offset: start,
            extent_elem_cache: span.saturating_add(1),
            is_contiguous: dense as u8,
            ..*self
        })
    }

    /// Why a view of `shapes` at `offsets` over a source of extents `limits` is refused: its
    /// first dimension of zero extent or past the source's.
    #[cold]
    fn view_error(limits: &[u32; MAX_TENSOR_DIMS], shapes: &[u32], offsets: &[u32]) -> ViewError {
        for (dim, ((&shape, &offset), &limit)) in shapes.iter().zip(offsets).zip(limits).enumerate()
        {
            if shape == 0 {
                return ViewError::ZeroShape { dim: dim as u8 };
            }
            if offset as u64 + shape as u64 > limit as u64 {
                return ViewError::OutOfBounds {
                    dim: dim as u8,
                    offset,
                    shape,
                    limit,
                };
            }
        }
        // The caller found a bad dimension; an empty answer here would be a bug of the check.
        ViewError::ZeroShape { dim: 0 }
    }

    /// This tensor as produced by `task` (the creator edge consumers follow).
    pub fn with_owner(mut self, task: TaskId) -> Self {
        self.owner_task_id = task;
        self
    }

    /// This tensor with creator-only dependency tracking switched on or off.
    pub fn with_manual_dep(mut self, manual: bool) -> Self {
        self.manual_dep = manual as u8;
        self
    }

    /// This tensor with the given dependency-tracking version.
    pub fn with_version(mut self, version: i32) -> Self {
        self.version = version;
        self
    }

    /// The buffer the view is over.
    pub fn buffer(&self) -> BufferHandle {
        self.buffer
    }
    /// The producing task, or [`TaskId::INVALID`] for an external tensor.
    pub fn owner_task_id(&self) -> TaskId {
        self.owner_task_id
    }
    /// Start of the view, in elements from the buffer's address.
    pub fn start_offset(&self) -> u64 {
        self.start_offset
    }
    /// The dependency-tracking version.
    pub fn version(&self) -> i32 {
        self.version
    }
    /// Whether dependency tracking is creator-only for this tensor.
    pub fn manual_dep(&self) -> bool {
        self.manual_dep != 0
    }
    /// Rank: dimensions in use, `1..=MAX_TENSOR_DIMS` for a tensor that passed adoption.
    pub fn ndims(&self) -> u32 {
        self.ndims
    }
    fn rank(&self) -> usize {
        (self.ndims as usize).min(MAX_TENSOR_DIMS)
    }
    /// Shapes of all five dimensions (zero past the rank).
    pub(crate) fn shapes_all(&self) -> &[u32; MAX_TENSOR_DIMS] {
        &self.shapes
    }
    /// Strides of all five dimensions (zero past the rank).
    pub(crate) fn strides_all(&self) -> &[u32; MAX_TENSOR_DIMS] {
        &self.strides
    }
    /// The shapes of the dimensions in use, in elements (`ndims` of them).
    pub fn shapes(&self) -> &[u32] {
        &self.shapes[..self.rank()]
    }
    /// The used strides, in elements.
    pub fn strides(&self) -> &[u32] {
        &self.strides[..self.rank()]
    }
    /// Whether `other` lays its elements out as this tensor does and is tracked the same way:
    /// the same buffer size, rank, element type, shapes and strides, address space and
    /// manual-dependency flag. Start, address, owner and version may differ. The Graph recorder
    /// runs it per boundary tensor of every replayed invocation, so it compares a fixed set of
    /// words with no loop over the rank: the dimensions past the rank are zero (adoption refuses
    /// others, views keep them), and what is derived from the layout (extent, contiguity)
    /// agrees when the layout does. A tensor cast from bytes with other values there compares
    /// unequal, never wrongly equal.
    #[inline]
    pub fn same_layout(&self, other: &Self) -> bool {
        let a: &[u64; 16] = bytemuck::cast_ref(self);
        let b: &[u64; 16] = bytemuck::cast_ref(other);
        // Words 5..12 are bytes 40..96: dtype, manual_dep, is_contiguous, address_space, shapes,
        // extent_elem_cache, strides and four bytes of zero padding.
        const FROM: usize = TaskTensor::VIEW_WORDS;
        const TO: usize = TaskTensor::PACKED_WORDS;
        let mut diff = (self.buffer.size ^ other.buffer.size) | u64::from(self.ndims ^ other.ndims);
        for w in FROM..TO {
            diff |= a[w] ^ b[w];
        }
        diff == 0
    }

    /// The element type. Every constructor checked it, so it is always defined.
    pub fn dtype(&self) -> DataType {
        DataType::from_raw(self.dtype).unwrap_or(DataType::Uint8)
    }
    /// Where the buffer lives.
    pub fn address_space(&self) -> AddressSpace {
        AddressSpace::from_raw(self.address_space).unwrap_or(AddressSpace::Host)
    }
    /// Whether the view is dense row-major.
    pub fn is_contiguous(&self) -> bool {
        self.is_contiguous != 0
    }
    /// Elements from the view's first to one past its last addressed element.
    pub fn extent_elems(&self) -> u64 {
        self.extent_elem_cache
    }
    /// [`Self::extent_elems`] in bytes.
    pub fn extent_bytes(&self) -> u64 {
        self.extent_elem_cache * self.dtype().elem_size() as u64
    }
    /// Number of elements in the view.
    pub fn numel(&self) -> u64 {
        geometry::numel(self.ndims, &self.shapes)
    }
    /// Device address of element `index` of the view, counted in row-major order over its
    /// shape; `None` past the last element. Wrapping, like [`Self::data_addr`].
    pub fn element_addr(&self, index: u64) -> Option<u64> {
        if index >= self.numel() {
            return None;
        }
        let mut rest = index;
        let mut offset = self.start_offset;
        for (&shape, &stride) in self.shapes().iter().zip(self.strides()).rev() {
            offset = offset.wrapping_add((rest % shape as u64).wrapping_mul(stride as u64));
            rest /= shape as u64;
        }
        Some(
            self.buffer
                .addr
                .wrapping_add(offset.wrapping_mul(self.dtype().elem_size() as u64)),
        )
    }
    /// Address of the view's first element.
    pub fn data_addr(&self) -> u64 {
        // Wrapping: an address is opaque here; only the device dereferences it.
        self.buffer.addr.wrapping_add(
            self.start_offset
                .wrapping_mul(self.dtype().elem_size() as u64),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(rows: u32, cols: u32) -> TaskTensor {
        let size = rows as u64 * cols as u64 * 4;
        TaskTensor::new(
            BufferHandle { addr: 0x1000, size },
            0,
            &[rows, cols],
            &[cols, 1],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap()
    }

    #[test]
    fn element_addresses_follow_the_views_strides_in_row_major_order() {
        // Rows 2..4, columns 3..6 of a 6 x 10 f32 matrix at 0x1000.
        let v = matrix(6, 10).view(&[2, 3], &[2, 3]).unwrap();
        let at = |row: u64, col: u64| 0x1000 + ((2 + row) * 10 + 3 + col) * 4;
        let got: std::vec::Vec<u64> = (0..6).map(|i| v.element_addr(i).unwrap()).collect();
        let want = [at(0, 0), at(0, 1), at(0, 2), at(1, 0), at(1, 1), at(1, 2)];
        assert_eq!(got, want);
        assert_eq!(v.element_addr(6), None, "past the last element");
        assert_eq!(v.element_addr(0), Some(v.data_addr()));
    }

    #[test]
    fn task_id_packs_ring_and_local() {
        let id = TaskId::new(3, 17);
        assert_eq!((id.ring(), id.local()), (3, 17));
        assert!(id.is_valid());
        assert!(!TaskId::INVALID.is_valid());
    }

    #[test]
    fn the_packed_words_hold_every_field() {
        let m = matrix(6, 10)
            .with_owner(TaskId::new(2, 77))
            .with_version(3)
            .with_manual_dep(true);
        let v = m.view(&[2, 3], &[4, 5]).unwrap();
        for t in [m, v] {
            assert_eq!(TaskTensor::from_packed(t.packed()), t);
        }
        // A 5-D tensor's last stride is in the last packed word.
        let five = TaskTensor::new(
            BufferHandle {
                addr: 0x2000,
                size: 1 << 20,
            },
            0,
            &[2, 3, 4, 5, 6],
            &[720, 240, 60, 12, 2],
            DataType::Int8,
            AddressSpace::Device,
        )
        .unwrap();
        assert_eq!(TaskTensor::from_packed(five.packed()).strides()[4], 2);
        assert_eq!(TaskTensor::from_packed(five.packed()), five);
    }

    #[test]
    fn view_keeps_strides_and_moves_the_origin() {
        let m = matrix(8, 16);
        assert!(m.is_contiguous());
        assert_eq!((m.extent_elems(), m.extent_bytes()), (128, 512));
        let v = m.view(&[2, 4], &[3, 5]).unwrap();
        assert_eq!(v.strides(), &[16, 1]);
        assert_eq!(v.start_offset(), 3 * 16 + 5);
        assert_eq!(v.extent_elems(), 16 + 4);
        assert!(!v.is_contiguous());
        assert_eq!(v.data_addr(), 0x1000 + (3 * 16 + 5) * 4);
        // A full-width row block stays contiguous.
        assert!(m.view(&[2, 16], &[4, 0]).unwrap().is_contiguous());
        // A view of a view addresses the source's elements.
        let vv = v.view(&[1, 2], &[1, 2]).unwrap();
        assert_eq!(vv.start_offset(), (3 + 1) * 16 + 5 + 2);
    }

    #[test]
    fn view_rejects_bad_requests() {
        let m = matrix(8, 16);
        assert_eq!(
            m.view(&[2], &[0]),
            Err(ViewError::Rank {
                expected: 2,
                shapes: 1,
                offsets: 1
            })
        );
        assert_eq!(
            m.view(&[2, 0], &[0, 0]),
            Err(ViewError::ZeroShape { dim: 1 })
        );
        assert_eq!(
            m.view(&[2, 4], &[0, 13]),
            Err(ViewError::OutOfBounds {
                dim: 1,
                offset: 13,
                shape: 4,
                limit: 16
            })
        );
    }

    #[test]
    fn adopt_checks_containment_and_marks_external() {
        let c = ChipTensor::contiguous(0x4000, &[4, 4], DataType::Float16, AddressSpace::Host);
        let t = TaskTensor::adopt(&c).unwrap();
        assert_eq!(t.owner_task_id(), TaskId::INVALID);
        assert_eq!((t.version(), t.manual_dep()), (0, false));
        assert_eq!(t.extent_bytes(), 32);
        let mut short = c;
        short.buffer.size = 30;
        assert_eq!(
            TaskTensor::adopt(&short),
            Err(AdoptError::OutOfBuffer {
                start_offset: 0,
                extent_elems: 16,
                size: 30
            })
        );
        let mut bad = c;
        bad.dtype = 200;
        assert_eq!(
            TaskTensor::adopt(&bad),
            Err(AdoptError::Geometry(GeometryError::DataType { value: 200 }))
        );
    }

    #[test]
    fn same_layout_compares_the_layout_and_tracking_not_the_place() {
        let m = matrix(8, 16);
        let v = m.view(&[2, 4], &[3, 5]).unwrap();
        // Another place in the buffer, another buffer of the size, another owner and version.
        let moved = m.view(&[2, 4], &[1, 0]).unwrap();
        assert!(v.same_layout(&moved));
        let mut elsewhere = v.with_owner(TaskId::new(1, 7)).with_version(3);
        elsewhere.buffer.addr = 0x9000;
        assert!(v.same_layout(&elsewhere));
        // What the recording depends on differs.
        assert!(!v.same_layout(&m.view(&[2, 5], &[3, 5]).unwrap()));
        assert!(!v.same_layout(&v.with_manual_dep(true)));
        let mut bigger = v;
        bigger.buffer.size += 4;
        assert!(!v.same_layout(&bigger));
        let transposed = TaskTensor::new(
            m.buffer(),
            0,
            &[8, 16],
            &[1, 8],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap();
        assert!(!m.same_layout(&transposed));
        let halves = TaskTensor::new(
            m.buffer(),
            0,
            &[16, 16],
            &[16, 1],
            DataType::Float16,
            AddressSpace::Device,
        )
        .unwrap();
        assert!(!halves.same_layout(
            &TaskTensor::new(
                m.buffer(),
                0,
                &[16, 16],
                &[16, 1],
                DataType::Int16,
                AddressSpace::Device
            )
            .unwrap()
        ));
    }
}
