//! Carving typed arrays out of caller-provided memory.
//!
//! `core` never allocates: every sizeable structure (the TensorMap, the rings, the slot states,
//! the ready queues) is a view over memory its caller provides, usually a segment of an image
//! the host builds and ships. A structure describes its memory with a [`Layout`], computed from
//! its configuration alone, which is also the layout function the host sizes its images with.
//! Initialising the structure hands the same `Layout` to a [`Carver`] over the memory, so the
//! size the host reserved and the arrays the structure uses cannot disagree.
//!
//! Regions must start on a [`REGION_ALIGN`]-byte boundary; every array inside is aligned to its
//! element type, at most [`REGION_ALIGN`].
//!
//! The fixed layouts of records that cross a boundary (wire, image, mailbox) are pinned with
//! [`assert_layout!`](crate::assert_layout), defined here because it is the other half of the
//! same promise: what a structure's bytes look like.

use bytemuck::Pod;
use core::fmt;
use core::marker::PhantomData;
use core::mem::{align_of, size_of};

/// Compile-time checks of a type's layout: its size, optionally its alignment, and the byte
/// offset of each listed field. A layout drift is then a build error that names the type (and
/// the field), not a corrupt run.
///
/// ```
/// #[repr(C)]
/// struct Pair {
///     tag: u32,
///     value: u64,
/// }
/// simpler_core::assert_layout!(Pair, size = 16, align = 8, { tag: 0, value: 8 });
/// simpler_core::assert_layout!([Pair; 2], size = 32);
/// ```
///
/// It expands to an anonymous `const` item, so it stands wherever an item can, and attributes
/// on the invocation apply to it: the atomic-bearing shared state puts `#[cfg(not(loom))]` on
/// its invocations, because the loom build's atomics ([`crate::sync`]) are larger than the
/// hardware's. It needs nothing but `core`, so other crates can use it as well.
#[macro_export]
macro_rules! assert_layout {
    (
        $ty:ty,
        size = $size:expr
        $(, align = $align:expr)?
        $(, { $($field:tt : $offset:expr),+ $(,)? })?
        $(,)?
    ) => {
        const _: () = {
            ::core::assert!(
                ::core::mem::size_of::<$ty>() == $size,
                ::core::concat!("size_of::<", ::core::stringify!($ty), ">() changed")
            );
            $(::core::assert!(
                ::core::mem::align_of::<$ty>() == $align,
                ::core::concat!("align_of::<", ::core::stringify!($ty), ">() changed")
            );)?
            $($(::core::assert!(
                ::core::mem::offset_of!($ty, $field) == $offset,
                ::core::concat!(
                    "offset of ",
                    ::core::stringify!($ty),
                    "::",
                    ::core::stringify!($field),
                    " changed"
                )
            );)+)?
        };
    };
}

/// Alignment every region must start on (one cache line).
pub const REGION_ALIGN: usize = 64;

/// Why a region could not be laid out or carved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// The configuration needs more bytes than `usize` can count.
    TooLarge,
    /// The region is shorter than the layout needs.
    RegionTooSmall {
        /// Bytes the layout needs.
        needed: usize,
        /// Length of the region given, in bytes.
        provided: usize,
    },
    /// The region does not start on a [`REGION_ALIGN`]-byte boundary.
    Misaligned {
        /// The region's address modulo [`REGION_ALIGN`].
        offset: usize,
    },
    /// A span was carved out of layout order, or belongs to another layout.
    SpanOutOfOrder {
        /// The span's offset.
        offset: usize,
    },
    /// A configuration value is out of range.
    Config {
        /// The configuration field's name, such as `ring.window`.
        field: &'static str,
        /// The value it was given.
        value: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TooLarge => f.write_str("layout size overflows usize"),
            Self::RegionTooSmall { needed, provided } => {
                write!(
                    f,
                    "region of {provided} bytes is smaller than the {needed} the layout needs"
                )
            }
            Self::Misaligned { offset } => write!(
                f,
                "region starts {offset} bytes past a {REGION_ALIGN}-byte boundary"
            ),
            Self::SpanOutOfOrder { offset } => {
                write!(f, "span at offset {offset} is out of layout order")
            }
            Self::Config { field, value } => {
                write!(f, "configuration {field} = {value} is invalid")
            }
        }
    }
}

impl core::error::Error for LayoutError {}

/// One cache line of bytes: the unit nested regions are reserved in.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Line(pub [u8; REGION_ALIGN]);

crate::assert_layout!(Line, size = REGION_ALIGN, align = REGION_ALIGN);

/// Where one array of `T` lives inside a region.
pub struct Span<T> {
    offset: usize,
    len: usize,
    _type: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for Span<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Span {{ offset: {}, len: {} }}", self.offset, self.len)
    }
}

impl<T> Clone for Span<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Span<T> {}

impl<T> Span<T> {
    /// An empty span, as a placeholder before layout.
    pub const fn empty() -> Self {
        Self {
            offset: 0,
            len: 0,
            _type: PhantomData,
        }
    }
    /// Byte offset from the region's start.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Computes the offsets of consecutive arrays in a region.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    size: usize,
}

impl Layout {
    /// An empty layout.
    pub const fn new() -> Self {
        Self { size: 0 }
    }

    /// Reserves an array of `len` elements of `T`, aligned for `T`.
    pub fn array<T>(&mut self, len: usize) -> Result<Span<T>, LayoutError> {
        const { assert!(align_of::<T>() <= REGION_ALIGN) };
        let align = align_of::<T>();
        let offset = self
            .size
            .checked_add(align - 1)
            .ok_or(LayoutError::TooLarge)?
            & !(align - 1);
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or(LayoutError::TooLarge)?;
        self.size = offset.checked_add(bytes).ok_or(LayoutError::TooLarge)?;
        Ok(Span {
            offset,
            len,
            _type: PhantomData,
        })
    }

    /// Reserves a nested region of `bytes` bytes (rounded up to whole cache lines), for a
    /// structure with a layout of its own.
    pub fn region(&mut self, bytes: usize) -> Result<Span<Line>, LayoutError> {
        self.array::<Line>(bytes.div_ceil(REGION_ALIGN))
    }

    /// Bytes the region needs, rounded up to [`REGION_ALIGN`] so regions can be stacked.
    pub fn size(&self) -> usize {
        self.size.div_ceil(REGION_ALIGN) * REGION_ALIGN
    }
}

/// Hands out the arrays of a [`Layout`] from a region, in layout order.
pub struct Carver<'a> {
    rest: &'a mut [u8],
    consumed: usize,
}

impl<'a> Carver<'a> {
    /// Checks `region` against `layout` (alignment and size) and prepares to carve it.
    pub fn new(region: &'a mut [u8], layout: &Layout) -> Result<Self, LayoutError> {
        let offset = region.as_ptr() as usize % REGION_ALIGN;
        if offset != 0 {
            return Err(LayoutError::Misaligned { offset });
        }
        if region.len() < layout.size() {
            return Err(LayoutError::RegionTooSmall {
                needed: layout.size(),
                provided: region.len(),
            });
        }
        Ok(Self {
            rest: region,
            consumed: 0,
        })
    }

    fn take_bytes(&mut self, offset: usize, bytes: usize) -> Result<&'a mut [u8], LayoutError> {
        // Spans of the layout this carver was checked against always pass; a span from another
        // layout, or one carved out of order, is refused instead of panicking.
        let skip = offset.checked_sub(self.consumed);
        let end = skip.and_then(|s| s.checked_add(bytes));
        let (Some(skip), Some(end)) = (skip, end) else {
            return Err(LayoutError::SpanOutOfOrder { offset });
        };
        if end > self.rest.len() {
            return Err(LayoutError::RegionTooSmall {
                needed: self.consumed + end,
                provided: self.consumed + self.rest.len(),
            });
        }
        let rest = core::mem::take(&mut self.rest);
        let (taken, rest) = rest[skip..].split_at_mut(bytes);
        self.rest = rest;
        self.consumed = offset + bytes;
        Ok(taken)
    }

    /// The nested region `span` names, as bytes to hand to another structure's `init`.
    pub fn region(&mut self, span: Span<Line>) -> Result<&'a mut [u8], LayoutError> {
        Ok(bytemuck::cast_slice_mut(self.pod(span)?))
    }

    /// The array `span` names, as plain data.
    pub fn pod<T: Pod>(&mut self, span: Span<T>) -> Result<&'a mut [T], LayoutError> {
        let bytes = self.take_bytes(span.offset, span.len * size_of::<T>())?;
        // The region starts REGION_ALIGN-aligned and the span's offset is aligned for T.
        bytemuck::try_cast_slice_mut(bytes).map_err(|_| LayoutError::SpanOutOfOrder {
            offset: span.offset,
        })
    }

    /// The array `span` names, as shared atomic state, zero-initialised.
    pub fn atomic<T: AtomicPod>(&mut self, span: Span<T>) -> Result<&'a [T], LayoutError> {
        self.atomic_with(span, true)
    }

    /// The array `span` names, as shared atomic state, keeping the bytes already there (any
    /// bit pattern is a valid `T`). For large regions the caller has freshly allocated zeroed,
    /// so that untouched pages stay untouched.
    pub fn atomic_as_is<T: AtomicPod>(&mut self, span: Span<T>) -> Result<&'a [T], LayoutError> {
        self.atomic_with(span, false)
    }

    /// The array `span` names, as shared atomic state: zeroed first when `zero`, else as is.
    pub fn atomic_with<T: AtomicPod>(
        &mut self,
        span: Span<T>,
        zero: bool,
    ) -> Result<&'a [T], LayoutError> {
        let bytes = self.take_bytes(span.offset, span.len * size_of::<T>())?;
        if bytes.as_ptr() as usize % align_of::<T>() != 0 {
            return Err(LayoutError::SpanOutOfOrder {
                offset: span.offset,
            });
        }
        #[cfg(not(loom))]
        if zero {
            bytes.fill(0);
        }
        // Derived after the last use of `bytes` as a unique borrow, so the pointer's provenance
        // stays valid for the shared slice below.
        let ptr = bytes.as_mut_ptr().cast::<T>();
        // Loom's atomics are the checker's objects, not bit patterns: every element is
        // constructed in place (at zero), whatever `zero` asks, so a model never attaches to
        // state formatted in an earlier execution.
        #[cfg(loom)]
        for i in 0..span.len {
            let _ = zero;
            // SAFETY: element `i` lies inside the exclusively borrowed, T-aligned `bytes`
            // (len * size_of::<T>() bytes); writing overwrites bytes that were never a live T
            // of this execution, so nothing is dropped or aliased.
            #[allow(unsafe_code)]
            unsafe {
                ptr.add(i).write(T::default())
            };
        }
        // SAFETY: `bytes` is an exclusive borrow for 'a of exactly `len * size_of::<T>()` bytes
        // at an address aligned for T (checked above). `AtomicPod` guarantees every bit pattern,
        // zeroes or whatever the region held, is a valid T and that T is only mutated through
        // atomics, so a shared slice over the exclusively borrowed bytes is sound: nothing else
        // can reach those bytes for 'a.
        #[allow(unsafe_code)]
        let slice = unsafe { core::slice::from_raw_parts(ptr, span.len) };
        Ok(slice)
    }
}

/// Shared state made only of atomics (and padding), valid for any bit pattern, zero included.
///
/// # Safety
/// Implementors must be `#[repr(C)]` structs (or arrays) whose fields are all
/// `core::sync::atomic` integer types or plain integer padding, so that reinterpreting
/// zero-filled bytes as `Self` is sound and all mutation goes through atomic operations.
///
/// Under `cfg(loom)` the atomics are the model checker's and are constructed, not carved
/// ([`crate::sync`]): the trait then also asks for `Default`, the all-zero value.
#[allow(unsafe_code)]
#[cfg(not(loom))]
pub unsafe trait AtomicPod: Sync {}

/// Shared state made only of atomics, constructed at its all-zero value by `Default` (the loom
/// build of the trait; see [`crate::sync`]).
///
/// # Safety
/// As the normal build's: `#[repr(C)]`, atomics and integer padding only.
#[allow(unsafe_code)]
#[cfg(loom)]
pub unsafe trait AtomicPod: Sync + Default {}

#[allow(unsafe_code)]
// SAFETY: atomic integers have the size, alignment and bit validity of their integer types.
unsafe impl AtomicPod for crate::sync::AtomicU32 {}
#[allow(unsafe_code)]
// SAFETY: as above.
unsafe impl AtomicPod for crate::sync::AtomicU64 {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{AtomicU64, Ordering};

    #[repr(C, align(64))]
    struct Region([u8; 1024]);

    #[test]
    fn arrays_are_aligned_and_carved_in_order() {
        let mut layout = Layout::new();
        let a = layout.array::<u8>(3).unwrap();
        let b = layout.array::<u64>(4).unwrap();
        let c = layout.array::<AtomicU64>(2).unwrap();
        assert_eq!((a.offset(), b.offset(), c.offset()), (0, 8, 40));
        assert_eq!(layout.size(), 64);

        let mut region = Region([0xAB; 1024]);
        let mut carver = Carver::new(&mut region.0, &layout).unwrap();
        let a = carver.pod(a).unwrap();
        let b = carver.pod(b).unwrap();
        let c = carver.atomic(c).unwrap();
        a.fill(1);
        b.fill(u64::MAX);
        assert_eq!(c[1].load(Ordering::Relaxed), 0, "atomics are zeroed");
        c[1].store(7, Ordering::Relaxed);
        assert_eq!(c[1].load(Ordering::Relaxed), 7);
    }

    #[test]
    fn short_or_misaligned_regions_are_refused() {
        let mut layout = Layout::new();
        layout.array::<u64>(100).unwrap();
        let mut region = Region([0; 1024]);
        assert_eq!(
            Carver::new(&mut region.0[..700], &layout).err(),
            Some(LayoutError::RegionTooSmall {
                needed: 832,
                provided: 700
            })
        );
        assert_eq!(
            Carver::new(&mut region.0[8..], &layout).err(),
            Some(LayoutError::Misaligned { offset: 8 })
        );
        let mut carver = Carver::new(&mut region.0, &layout).unwrap();
        let mut other = Layout::new();
        let late = other.array::<u64>(1).unwrap();
        let _ = other.array::<u64>(200).unwrap();
        let beyond = other.array::<u64>(1).unwrap();
        assert!(
            carver.pod(beyond).is_err(),
            "a span past the region is refused"
        );
        assert!(carver.pod(late).is_ok());
        assert_eq!(
            carver.pod(late).err(),
            Some(LayoutError::SpanOutOfOrder { offset: 0 }),
            "a span before the cursor is refused"
        );
        let mut huge = Layout::new();
        assert_eq!(
            huge.array::<u64>(usize::MAX / 4).err(),
            Some(LayoutError::TooLarge)
        );
    }
}
