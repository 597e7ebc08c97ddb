//! Property tests for the task-argument blob (`simpler_core::blob`) and the host builder
//! (`simpler_host::TaskArgs`), judged by an oracle written in this file.
//!
//! The oracle restates the reference rules (wire ABI digest, sections 2-3: blob envelope,
//! `validate_buffer_descriptor`, `validate_tensor`) directly over the raw 144-byte element at the
//! reference's byte offsets. It shares no code with the library: it does not use the library's
//! structs, enums, element-size table or saturating arithmetic (extents are computed exactly in
//! `u128`). Every test compares the library with it in both directions: a tensor the library
//! accepts must satisfy every rule, and a tensor satisfying every rule must be accepted. When the
//! library rejects, the reason it gives (with its payload) must be the first violated rule in the
//! reference's order (section 3.4 for the descriptor, then section 3.5).
//!
//! * `arbitrary_bytes_never_panic`: 100,000 arbitrary byte strings through `read_blob` and the view.
//! * `structured_blobs_never_panic_and_accepted_tensors_hold_invariants`: 100,000 blobs, half with
//!   a small header and random / field-fuzzed elements, half valid blobs with 1-8 byte mutations.
//! * `encode_decode_round_trip`: 10,000 valid argument lists through `TaskArgs` and back.
//! * `extent_saturation_boundary`: the extents around `u64::MAX`, which random inputs rarely hit.

use proptest::array::uniform5;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;
use simpler_core::blob::{blob_size, read_blob, write_blob, BlobError, Count};
use simpler_core::{
    AccessMode, AddressSpace, BufferDescriptor, CanonicalIdentity, DescriptorError, GeometryError,
    Tensor, TensorArgType, TensorError, ValidTensor,
};
use simpler_host::{TaskArgs, TaskArgsError};

// =============================================================================================
// The reference, restated (wire_abi_l3.md sections 2.1-2.5, 3.2-3.5).
// =============================================================================================

const HEADER: usize = 8;
const ELEM: usize = 144;
const SCALAR: usize = 8;
const MAGIC: u16 = 0x5342;
const MAX_DIMS: usize = 5;
const BODY_MAX: usize = 32;
/// Element size per dtype value; values >= 15 are undefined.
const ELEM_SIZES: [u64; 15] = [4, 2, 4, 2, 1, 1, 2, 8, 8, 2, 4, 1, 1, 1, 1];

// Raw backend values.
const FORK_SHM: u8 = 0;
const POSIX_SHM: u8 = 1;
const VMM_WINDOW: u8 = 2;
const REMOTE_SIDECAR: u8 = 3;
const DEVICE_MALLOC: u8 = 4;
const FORK_COW: u8 = 5;
// Raw address spaces and access modes.
const HOST: u8 = 0;
const DEVICE: u8 = 1;
const READ: u8 = 0;
const WRITE: u8 = 1;

/// Byte offsets of the fields inside one 144-byte wire tensor.
mod off {
    pub const MAGIC: usize = 0;
    pub const SPACE: usize = 2;
    pub const ACCESS: usize = 3;
    pub const BACKEND: usize = 4;
    pub const PAD0: usize = 5;
    pub const OWNER: usize = 8;
    pub const BUFFER_ID: usize = 16;
    pub const GENERATION: usize = 24;
    pub const ID_PAD: usize = 28;
    pub const NBYTES: usize = 40;
    pub const PATH_ID: usize = 48;
    pub const BODY_LEN: usize = 52;
    pub const PAD1: usize = 54;
    pub const BODY: usize = 56;
    pub const BYTE_OFFSET: usize = 88;
    pub const NDIMS: usize = 96;
    pub const SHAPES: usize = 100;
    pub const STRIDES: usize = 120;
    pub const DTYPE: usize = 140;
    pub const PAD: usize = 141;
}

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn le64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
fn put16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

fn elem_size(dtype: u8) -> Option<u64> {
    ELEM_SIZES.get(dtype as usize).copied()
}

/// Exact extent in bytes: `(sum_{i<ndims} (shape_i - 1) * stride_i + 1) * elem` (a zero shape
/// contributes nothing).
fn exact_extent(ndims: usize, shapes: &[u32; 5], strides: &[u32; 5], elem: u64) -> u128 {
    let mut span: u128 = 0;
    for i in 0..ndims.min(MAX_DIMS) {
        span += (shapes[i] as u128).saturating_sub(1) * strides[i] as u128;
    }
    (span + 1) * elem as u128
}

/// One rule of the reference, with the values that break it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    Magic(u16),
    AddressSpace(u8),
    Access(u8),
    Backend(u8),
    BodyLen(u16),
    ZeroGeneration,
    /// (backend, address_space)
    Capability(u8, u8),
    /// access of a FORK_COW backing
    CowWritable(u8),
    /// (backend, body_len)
    AddressBodyLen(u8, u16),
    NullAddress(u8),
    EmptyShmName,
    /// (index, byte)
    ShmNameByte(u8, u8),
    SidecarBody(u16),
    /// (index, byte)
    BodyTail(u8, u8),
    NDims(u32),
    DType(u8),
    /// (byte_offset, elem_size)
    Misaligned(u64, u32),
    ZeroShape(u8),
    ZeroStride(u8),
    /// (dim, shape, stride)
    UnusedDim(u8, u32, u32),
    ExtentOverflow,
    /// (byte_offset, extent_bytes, nbytes)
    OutOfBacking(u64, u64, u64),
    /// A library error that no wire element can legitimately produce.
    Unexpected(String),
}

/// The oracle's verdict on one 144-byte element.
#[derive(Debug)]
struct Judgement {
    /// The first descriptor rule violated, in the reference's order (section 3.4).
    descriptor: Option<Rule>,
    /// Every view rule (section 3.5, steps 2-8) that is violated and can be evaluated.
    view: Vec<Rule>,
    /// The exact extent in bytes, when rank, dtype and every used dimension are sound.
    extent: Option<u128>,
}

impl Judgement {
    fn valid(&self) -> bool {
        self.descriptor.is_none() && self.view.is_empty()
    }
}

/// Section 3.4, in order; the first violation.
fn descriptor_violation(b: &[u8]) -> Option<Rule> {
    let magic = le16(b, off::MAGIC);
    if magic != MAGIC {
        return Some(Rule::Magic(magic));
    }
    let space = b[off::SPACE];
    if space > DEVICE {
        return Some(Rule::AddressSpace(space));
    }
    let access = b[off::ACCESS];
    if access > 2 {
        return Some(Rule::Access(access));
    }
    let backend = b[off::BACKEND];
    if backend > FORK_COW {
        return Some(Rule::Backend(backend));
    }
    let body_len = le16(b, off::BODY_LEN);
    if body_len as usize > BODY_MAX {
        return Some(Rule::BodyLen(body_len));
    }
    if le32(b, off::GENERATION) == 0 {
        return Some(Rule::ZeroGeneration);
    }
    let device_backend = backend == VMM_WINDOW || backend == DEVICE_MALLOC;
    if backend != REMOTE_SIDECAR && device_backend != (space == DEVICE) {
        return Some(Rule::Capability(backend, space));
    }
    if backend == FORK_COW && access != READ {
        return Some(Rule::CowWritable(access));
    }
    let body = &b[off::BODY..off::BODY + BODY_MAX];
    let len = body_len as usize;
    match backend {
        FORK_SHM | FORK_COW | DEVICE_MALLOC | VMM_WINDOW => {
            if len != 8 {
                return Some(Rule::AddressBodyLen(backend, body_len));
            }
            if body[..8].iter().all(|&c| c == 0) {
                return Some(Rule::NullAddress(backend));
            }
        }
        POSIX_SHM => {
            if len == 0 {
                return Some(Rule::EmptyShmName);
            }
            for (i, &c) in body[..len].iter().enumerate() {
                if !(0x21..=0x7E).contains(&c) || c == b'/' {
                    return Some(Rule::ShmNameByte(i as u8, c));
                }
            }
        }
        _ => {
            // REMOTE_SIDECAR
            if len != 0 {
                return Some(Rule::SidecarBody(body_len));
            }
        }
    }
    for (i, &c) in body.iter().enumerate().skip(len) {
        if c != 0 {
            return Some(Rule::BodyTail(i as u8, c));
        }
    }
    None
}

/// Section 3.5 steps 2-8: every violation that can be evaluated, in the reference's order
/// (rank, dtype, offset alignment, used dimensions, unused dimensions, extent, containment).
fn view_violations(b: &[u8]) -> (Vec<Rule>, Option<u128>) {
    let mut v = Vec::new();
    let ndims = le32(b, off::NDIMS);
    let dtype = b[off::DTYPE];
    let byte_offset = le64(b, off::BYTE_OFFSET);
    let nbytes = le64(b, off::NBYTES);
    let mut shapes = [0u32; 5];
    let mut strides = [0u32; 5];
    for i in 0..MAX_DIMS {
        shapes[i] = le32(b, off::SHAPES + 4 * i);
        strides[i] = le32(b, off::STRIDES + 4 * i);
    }
    let rank_ok = (1..=MAX_DIMS as u32).contains(&ndims);
    if !rank_ok {
        v.push(Rule::NDims(ndims));
    }
    let elem = elem_size(dtype);
    match elem {
        None => v.push(Rule::DType(dtype)),
        Some(e) => {
            if !byte_offset.is_multiple_of(e) {
                v.push(Rule::Misaligned(byte_offset, e as u32));
            }
        }
    }
    let mut dims_ok = rank_ok;
    if rank_ok {
        for i in 0..MAX_DIMS {
            if i < ndims as usize {
                if shapes[i] == 0 {
                    v.push(Rule::ZeroShape(i as u8));
                    dims_ok = false;
                }
                if strides[i] == 0 {
                    v.push(Rule::ZeroStride(i as u8));
                    dims_ok = false;
                }
            } else if shapes[i] != 0 || strides[i] != 0 {
                v.push(Rule::UnusedDim(i as u8, shapes[i], strides[i]));
                dims_ok = false;
            }
        }
    }
    let mut extent = None;
    if let (true, Some(e)) = (dims_ok, elem) {
        let x = exact_extent(ndims as usize, &shapes, &strides, e);
        extent = Some(x);
        // A u64 extent of u64::MAX (or more) is the reference's "unrepresentable".
        if x >= u64::MAX as u128 {
            v.push(Rule::ExtentOverflow);
        } else if byte_offset as u128 + x > nbytes as u128 {
            v.push(Rule::OutOfBacking(byte_offset, x as u64, nbytes));
        }
    }
    (v, extent)
}

fn judge(b: &[u8]) -> Judgement {
    assert_eq!(b.len(), ELEM);
    let (view, extent) = view_violations(b);
    Judgement {
        descriptor: descriptor_violation(b),
        view,
        extent,
    }
}

/// The oracle's reading of the envelope (section 3.3).
#[derive(Debug, PartialEq, Eq)]
enum Envelope {
    NoHeader,
    NegativeTensors(i32),
    NegativeScalars(i32),
    Exceeds { t: u64, s: u64, needed: u128 },
    Ok { t: usize, s: usize, needed: usize },
}

fn envelope(src: &[u8]) -> Envelope {
    if src.len() < HEADER {
        return Envelope::NoHeader;
    }
    let t = i32::from_le_bytes([src[0], src[1], src[2], src[3]]);
    let s = i32::from_le_bytes([src[4], src[5], src[6], src[7]]);
    if t < 0 {
        return Envelope::NegativeTensors(t);
    }
    if s < 0 {
        return Envelope::NegativeScalars(s);
    }
    let needed = HEADER as u128 + ELEM as u128 * t as u128 + SCALAR as u128 * s as u128;
    if needed > src.len() as u128 {
        return Envelope::Exceeds {
            t: t as u64,
            s: s as u64,
            needed,
        };
    }
    Envelope::Ok {
        t: t as usize,
        s: s as usize,
        needed: needed as usize,
    }
}

// ---- Translating the library's answers into rules -------------------------------------------

fn descriptor_rule(e: &DescriptorError) -> Rule {
    match *e {
        DescriptorError::Magic { value } => Rule::Magic(value),
        DescriptorError::AddressSpace { value } => Rule::AddressSpace(value),
        DescriptorError::Access { value } => Rule::Access(value),
        DescriptorError::BackendKind { value } => Rule::Backend(value),
        DescriptorError::BodyLen { value, limit: 32 } => Rule::BodyLen(value),
        DescriptorError::ZeroGeneration => Rule::ZeroGeneration,
        DescriptorError::Capability {
            backend,
            address_space,
        } => Rule::Capability(backend as u8, address_space as u8),
        DescriptorError::CowWritable { access } => Rule::CowWritable(access as u8),
        DescriptorError::AddressBodyLen { backend, value } => {
            Rule::AddressBodyLen(backend as u8, value)
        }
        DescriptorError::NullAddress { backend } => Rule::NullAddress(backend as u8),
        DescriptorError::EmptyShmName => Rule::EmptyShmName,
        DescriptorError::ShmNameByte { index, value } => Rule::ShmNameByte(index, value),
        DescriptorError::SidecarBody { value } => Rule::SidecarBody(value),
        DescriptorError::BodyTail { index, value } => Rule::BodyTail(index, value),
        other => Rule::Unexpected(format!("{other:?}")),
    }
}

fn tensor_rule(e: &TensorError) -> Rule {
    match *e {
        TensorError::Descriptor(ref d) => descriptor_rule(d),
        TensorError::Geometry(g) => match g {
            GeometryError::NDims { value, limit: 5 } => Rule::NDims(value),
            GeometryError::DataType { value } => Rule::DType(value),
            GeometryError::ZeroShape { dim } => Rule::ZeroShape(dim),
            GeometryError::ZeroStride { dim } => Rule::ZeroStride(dim),
            GeometryError::UnusedDim { dim, shape, stride } => Rule::UnusedDim(dim, shape, stride),
            GeometryError::ExtentOverflow => Rule::ExtentOverflow,
            other => Rule::Unexpected(format!("{other:?}")),
        },
        TensorError::MisalignedOffset {
            byte_offset,
            elem_size,
        } => Rule::Misaligned(byte_offset, elem_size),
        TensorError::OutOfBacking {
            byte_offset,
            extent_bytes,
            nbytes,
        } => Rule::OutOfBacking(byte_offset, extent_bytes, nbytes),
        ref other => Rule::Unexpected(format!("{other:?}")),
    }
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

/// Checks one decoded element against the oracle, both ways.
fn check_element(
    index: usize,
    bytes: &[u8],
    got: &Result<ValidTensor, BlobError>,
) -> Result<(), TestCaseError> {
    let j = judge(bytes);
    match got {
        Ok(vt) => {
            // Too lax: the library accepted a tensor that breaks a rule.
            prop_assert!(
                j.valid(),
                "tensor {} accepted but the oracle finds {:?}; bytes {:02x?}",
                index,
                j,
                bytes
            );
            let extent = j.extent.expect("a valid tensor has an extent");
            // Every invariant of an accepted tensor, restated on the decoded value.
            prop_assert_eq!(vt.as_bytes(), bytes, "decoding must not change a byte");
            prop_assert_eq!(vt.buffer.magic, MAGIC);
            prop_assert!(vt.buffer.address_space <= DEVICE);
            prop_assert!(vt.buffer.access <= 2);
            prop_assert!(vt.buffer.backend_kind <= FORK_COW);
            prop_assert!(vt.buffer.body_len as usize <= BODY_MAX);
            prop_assert!(vt.buffer.identity.generation != 0);
            prop_assert!((1..=5).contains(&vt.ndims));
            let elem = elem_size(vt.dtype).expect("dtype < 15");
            prop_assert_eq!(vt.byte_offset % elem, 0);
            prop_assert_eq!(vt.byte_offset, le64(bytes, off::BYTE_OFFSET));
            prop_assert_eq!(vt.buffer.nbytes, le64(bytes, off::NBYTES));
            prop_assert!(vt.byte_offset as u128 + extent <= vt.buffer.nbytes as u128);
            prop_assert_eq!(vt.extent_bytes() as u128, extent);
            prop_assert_eq!(vt.validate(), Ok(extent as u64));
            Ok(())
        }
        Err(BlobError::Tensor { index: i, error }) => {
            prop_assert_eq!(*i, index);
            // Too strict: the library rejected a tensor that keeps every rule.
            prop_assert!(
                !j.valid(),
                "tensor {} rejected with {:?} but the oracle finds it valid; bytes {:02x?}",
                index,
                error,
                bytes
            );
            let rule = tensor_rule(error);
            match &j.descriptor {
                Some(first) => prop_assert_eq!(
                    &rule,
                    first,
                    "descriptor checks must run in the reference's order"
                ),
                None => prop_assert_eq!(
                    Some(&rule),
                    j.view.first(),
                    "tensor {}: the view checks must run in the reference's order; violated: {:?}",
                    index,
                    &j.view
                ),
            }
            Ok(())
        }
        Err(other) => Err(fail(format!("tensor {index}: unexpected error {other:?}"))),
    }
}

/// Runs a region through `read_blob`, the view and `TaskArgs::from_blob`, checking everything
/// against the oracle. Returns the number of tensors the library accepted.
fn check_blob(src: &[u8]) -> Result<usize, TestCaseError> {
    let env = envelope(src);
    let view = match (read_blob(src), env) {
        (Ok(view), Envelope::Ok { t, s, needed }) => {
            prop_assert_eq!(view.tensor_count(), t);
            prop_assert_eq!(view.scalar_count(), s);
            prop_assert_eq!(view.size(), needed);
            prop_assert_eq!(blob_size(t, s), Some(needed));
            view
        }
        (Err(BlobError::NoHeader { capacity }), Envelope::NoHeader) => {
            prop_assert_eq!(capacity, src.len());
            return Ok(0);
        }
        (Err(BlobError::NegativeCount { field, value }), Envelope::NegativeTensors(v)) => {
            prop_assert_eq!((field, value), (Count::Tensors, v));
            return Ok(0);
        }
        (Err(BlobError::NegativeCount { field, value }), Envelope::NegativeScalars(v)) => {
            prop_assert_eq!((field, value), (Count::Scalars, v));
            return Ok(0);
        }
        (
            Err(BlobError::Exceeds {
                tensors,
                scalars,
                needed,
                capacity,
            }),
            Envelope::Exceeds { t, s, needed: n },
        ) => {
            prop_assert_eq!(
                (tensors, scalars, needed as u128, capacity),
                (t, s, n, src.len())
            );
            return Ok(0);
        }
        (got, want) => {
            return Err(fail(format!(
                "read_blob of {} bytes gave {:?}, the oracle says {:?}",
                src.len(),
                got.map(|v| (v.tensor_count(), v.scalar_count())),
                want
            )))
        }
    };

    let t = view.tensor_count();
    let s = view.scalar_count();
    let mut decoded = Vec::with_capacity(t);
    let mut first_err = None;
    let mut accepted = 0;
    for i in 0..t {
        let bytes = &src[HEADER + ELEM * i..HEADER + ELEM * (i + 1)];
        let got = view.tensor(i);
        check_element(i, bytes, &got)?;
        match &got {
            Ok(_) => accepted += 1,
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some(*e);
                }
            }
        }
        decoded.push(got);
    }
    for bad in [t, t + 1, usize::MAX / ELEM + 1, usize::MAX] {
        prop_assert_eq!(
            view.tensor(bad),
            Err(BlobError::TensorIndex {
                index: bad,
                count: t
            })
        );
    }
    let iterated: Vec<_> = view.tensors().collect();
    prop_assert_eq!(&iterated, &decoded);
    prop_assert_eq!(view.validate_all(), first_err.map_or(Ok(()), Err));

    let base = HEADER + ELEM * t;
    let expected: Vec<u64> = (0..s).map(|k| le64(src, base + SCALAR * k)).collect();
    for (k, &want) in expected.iter().enumerate() {
        prop_assert_eq!(view.scalar(k), Ok(want));
    }
    for bad in [s, s + 1, usize::MAX / SCALAR + 1, usize::MAX] {
        prop_assert_eq!(
            view.scalar(bad),
            Err(BlobError::ScalarIndex {
                index: bad,
                count: s
            })
        );
    }
    prop_assert_eq!(view.scalars().collect::<Vec<_>>(), expected.clone());

    match TaskArgs::from_blob(&view) {
        Ok(args) => {
            prop_assert!(
                first_err.is_none(),
                "from_blob accepted a blob with {:?}",
                first_err
            );
            let oks: Vec<ValidTensor> = decoded.into_iter().map(Result::unwrap).collect();
            prop_assert_eq!(args.tensors(), &oks[..]);
            prop_assert!(args.tags().iter().all(|&g| g == TensorArgType::Input));
            prop_assert_eq!(args.scalars(), &expected[..]);
        }
        Err(e) => prop_assert_eq!(Some(e), first_err.map(TaskArgsError::Blob)),
    }
    Ok(accepted)
}

// =============================================================================================
// Strategies.
// =============================================================================================

/// Which backend a generated valid tensor uses.
#[derive(Clone, Copy, Debug)]
enum ValidBackend {
    ForkShm,
    ForkCow,
    PosixShm,
    DeviceMalloc,
}

fn shm_name_bytes() -> Vec<u8> {
    (0x21u8..=0x7E).filter(|&c| c != b'/').collect()
}

/// A non-zero address, often a small one (so one overwritten byte can null it).
fn address() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..=255, 1u64..=u64::MAX]
}

/// Up to 5 (shape, stride) pairs, both positive. Bounded so every extent fits comfortably.
fn used_dims() -> impl Strategy<Value = Vec<(u32, u32)>> {
    let shape = prop_oneof![3 => 1u32..=8, 1 => 1u32..=(1 << 20)];
    let stride = prop_oneof![3 => 1u32..=64, 1 => 1u32..=(1 << 24)];
    vec((shape, stride), 1..=5)
}

/// Clean or dirty padding (pads are not checked, so both are valid and must travel as they are).
type Pads = ([u8; 3], [u8; 12], u16, [u8; 3]);

prop_compose! {
    /// A tensor that keeps every rule: FORK_SHM / FORK_COW (READ) / POSIX_SHM / DEVICE_MALLOC.
    fn valid_tensor()(
        backend in prop_oneof![
            Just(ValidBackend::ForkShm),
            Just(ValidBackend::ForkCow),
            Just(ValidBackend::PosixShm),
            Just(ValidBackend::DeviceMalloc),
        ],
        access in 0u8..=2,
        identity in (any::<[u8; 8]>(), any::<u64>(), prop_oneof![Just(1u32), 1u32..=u32::MAX]),
        path_id in any::<u32>(),
        body in (address(), vec(select(shm_name_bytes()), 1..=32)),
        dims in used_dims(),
        dtype in 0u8..15,
        offset_elems in prop_oneof![Just(0u64), 0u64..=1024, any::<u64>()],
        slack in prop_oneof![Just(0u64), 0u64..=4096, any::<u64>()],
        pads in proptest::option::weighted(0.25, any::<Pads>()),
    ) -> Tensor {
        let (owner, buffer_id, generation) = identity;
        let (addr, name) = body;
        let (space, access, kind, body): (AddressSpace, u8, u8, Vec<u8>) = match backend {
            ValidBackend::ForkShm => (AddressSpace::Host, access, FORK_SHM, addr.to_le_bytes().to_vec()),
            ValidBackend::ForkCow => (AddressSpace::Host, READ, FORK_COW, addr.to_le_bytes().to_vec()),
            ValidBackend::PosixShm => (AddressSpace::Host, access, POSIX_SHM, name),
            ValidBackend::DeviceMalloc => (AddressSpace::Device, access, DEVICE_MALLOC, addr.to_le_bytes().to_vec()),
        };
        let mut shapes = [0u32; 5];
        let mut strides = [0u32; 5];
        for (i, &(sh, st)) in dims.iter().enumerate() {
            shapes[i] = sh;
            strides[i] = st;
        }
        let elem = ELEM_SIZES[dtype as usize];
        let extent = exact_extent(dims.len(), &shapes, &strides, elem);
        let extent = u64::try_from(extent).expect("bounded dims keep the extent small");
        // byte_offset: a multiple of elem with byte_offset + extent <= u64::MAX.
        let max_elems = (u64::MAX - extent) / elem;
        let k = if offset_elems <= max_elems { offset_elems } else { offset_elems % (max_elems + 1) };
        let byte_offset = k * elem;
        let nbytes = (byte_offset + extent).saturating_add(slack);
        let mut body_arr = [0u8; BODY_MAX];
        body_arr[..body.len()].copy_from_slice(&body);
        let (pad0, id_pad, pad1, pad) = pads.unwrap_or_default();
        Tensor {
            buffer: BufferDescriptor {
                magic: MAGIC,
                address_space: space as u8,
                access,
                backend_kind: kind,
                _pad0: pad0,
                identity: CanonicalIdentity {
                    owner_instance_id: owner,
                    buffer_id,
                    generation,
                    _pad: id_pad,
                },
                nbytes,
                owner_worker_path_id: path_id,
                body_len: body.len() as u16,
                _pad1: pad1,
                body: body_arr,
            },
            byte_offset,
            ndims: dims.len() as u32,
            shapes,
            strides,
            dtype,
            _pad: pad,
        }
    }
}

/// What a fuzzed descriptor body holds before `body_len` cuts it.
#[derive(Clone, Debug)]
enum BodyContent {
    Address(u64),
    Name(Vec<u8>),
    Random([u8; 32]),
}

fn body_content() -> impl Strategy<Value = BodyContent> {
    // Mostly legal name bytes, some of the boundary and forbidden ones.
    let bad_name_bytes = vec![0x00u8, 0x20, b'/', 0x7F, 0x80, 0xFF];
    let name_byte = prop_oneof![40 => select(shm_name_bytes()), 1 => select(bad_name_bytes)];
    prop_oneof![
        4 => prop_oneof![Just(0u64), 1u64..=255, any::<u64>()].prop_map(BodyContent::Address),
        4 => vec(name_byte, 0..=33).prop_map(BodyContent::Name),
        1 => any::<[u8; 32]>().prop_map(BodyContent::Random),
    ]
}

prop_compose! {
    /// The 88 descriptor bytes, mostly consistent, with every field sometimes off by a little
    /// or by a lot. `None` means "consistent with the backend".
    fn fuzz_descriptor()(
        magic in prop_oneof![20 => Just(MAGIC), 1 => any::<u16>()],
        backend in prop_oneof![20 => 0u8..=5, 1 => 6u8..=7, 1 => any::<u8>()],
        space in prop_oneof![16 => Just(None), 2 => (0u8..=2).prop_map(Some), 1 => any::<u8>().prop_map(Some)],
        access in prop_oneof![16 => Just(None), 2 => (0u8..=3).prop_map(Some), 1 => any::<u8>().prop_map(Some)],
        generation in prop_oneof![8 => Just(1u32), 1 => Just(0u32), 8 => any::<u32>()],
        ident in any::<([u8; 8], u64, [u8; 12], [u8; 3], u32, u16)>(),
        body_len in prop_oneof![16 => Just(None), 2 => (0u16..=34).prop_map(Some), 1 => any::<u16>().prop_map(Some)],
        body in body_content(),
        dirty_tail in prop_oneof![20 => Just(None), 1 => (any::<Index>(), 1u8..=255).prop_map(Some)],
    ) -> [u8; 88] {
        let (owner, buffer_id, id_pad, pad0, path_id, pad1) = ident;
        let mut b = [0u8; 88];
        put16(&mut b, off::MAGIC, magic);
        let space = space.unwrap_or(match backend {
            VMM_WINDOW | DEVICE_MALLOC => DEVICE,
            REMOTE_SIDECAR => (buffer_id & 1) as u8,
            _ => HOST,
        });
        let access = access.unwrap_or(if backend == FORK_COW { READ } else { ((buffer_id >> 1) % 3) as u8 });
        b[off::SPACE] = space;
        b[off::ACCESS] = access;
        b[off::BACKEND] = backend;
        b[off::PAD0..off::PAD0 + 3].copy_from_slice(&pad0);
        b[off::OWNER..off::OWNER + 8].copy_from_slice(&owner);
        put64(&mut b, off::BUFFER_ID, buffer_id);
        put32(&mut b, off::GENERATION, generation);
        b[off::ID_PAD..off::ID_PAD + 12].copy_from_slice(&id_pad);
        put32(&mut b, off::PATH_ID, path_id);
        put16(&mut b, off::PAD1, pad1);
        let mut body_bytes = [0u8; BODY_MAX];
        let natural = match &body {
            BodyContent::Address(a) => {
                body_bytes[..8].copy_from_slice(&a.to_le_bytes());
                8
            }
            BodyContent::Name(n) => {
                let n = &n[..n.len().min(BODY_MAX)];
                body_bytes[..n.len()].copy_from_slice(n);
                n.len() as u16
            }
            BodyContent::Random(r) => {
                body_bytes = *r;
                BODY_MAX as u16
            }
        };
        let body_len = body_len.unwrap_or(match backend {
            FORK_SHM | FORK_COW | DEVICE_MALLOC | VMM_WINDOW => 8,
            REMOTE_SIDECAR => 0,
            _ => natural,
        });
        put16(&mut b, off::BODY_LEN, body_len);
        // Clean tail past body_len, then maybe one dirty byte in it.
        let len = (body_len as usize).min(BODY_MAX);
        for c in &mut body_bytes[len..] {
            *c = 0;
        }
        if let (Some((at, v)), true) = (dirty_tail, len < BODY_MAX) {
            body_bytes[len + at.index(BODY_MAX - len)] = v;
        }
        b[off::BODY..off::BODY + BODY_MAX].copy_from_slice(&body_bytes);
        b
    }
}

/// How a fuzzed view picks its byte offset.
#[derive(Clone, Copy, Debug)]
enum OffsetSel {
    Elems(u64),
    Misaligned(u64, u64),
    Raw(u64),
    NearMax(u64),
}

/// How a fuzzed view picks its backing size.
#[derive(Clone, Copy, Debug)]
enum NbytesSel {
    /// offset + extent + delta
    Exact(i64),
    Raw(u64),
    Max,
}

const EDGE: [u32; 7] = [0, 1, 2, 1 << 31, u32::MAX - 1, u32::MAX, 1 << 16];

prop_compose! {
    /// One complete fuzzed element: a fuzzed descriptor and a fuzzed view over it, with the
    /// offset and the backing size placed around the containment boundary.
    fn fuzz_tensor()(
        desc in fuzz_descriptor(),
        ndims in prop_oneof![30 => 1u32..=5, 1 => Just(0u32), 1 => Just(6u32), 1 => any::<u32>()],
        dims in uniform5(prop_oneof![
            24 => (1u32..=16, 1u32..=64),
            4 => (1u32..=(1 << 20), 1u32..=(1 << 24)),
            1 => (select(EDGE.to_vec()), select(EDGE.to_vec())),
        ]),
        dirty_unused in prop_oneof![20 => Just(None), 1 => (0usize..5, any::<u32>(), any::<u32>()).prop_map(Some)],
        dtype in prop_oneof![20 => 0u8..15, 1 => 15u8..=16, 1 => any::<u8>()],
        offset in prop_oneof![
            8 => (0u64..=64).prop_map(OffsetSel::Elems),
            2 => (0u64..=64, 1u64..8).prop_map(|(k, m)| OffsetSel::Misaligned(k, m)),
            1 => any::<u64>().prop_map(OffsetSel::Raw),
            1 => (0u64..=16).prop_map(OffsetSel::NearMax),
        ],
        nbytes in prop_oneof![
            6 => (-2i64..=2).prop_map(NbytesSel::Exact),
            1 => any::<u64>().prop_map(NbytesSel::Raw),
            1 => Just(NbytesSel::Max),
        ],
        pad in any::<[u8; 3]>(),
    ) -> Vec<u8> {
        let mut b = vec![0u8; ELEM];
        b[..88].copy_from_slice(&desc);
        let rank = (ndims as usize).min(MAX_DIMS);
        let mut shapes = [0u32; 5];
        let mut strides = [0u32; 5];
        for i in 0..rank {
            shapes[i] = dims[i].0;
            strides[i] = dims[i].1;
        }
        if let Some((i, sh, st)) = dirty_unused {
            shapes[i] = sh;
            strides[i] = st;
        }
        let elem = elem_size(dtype).unwrap_or(1);
        let byte_offset = match offset {
            OffsetSel::Elems(k) => k * elem,
            OffsetSel::Misaligned(k, m) => k * elem + m % elem,
            OffsetSel::Raw(x) => x,
            OffsetSel::NearMax(k) => u64::MAX - k,
        };
        let extent = exact_extent(rank, &shapes, &strides, elem);
        let nbytes = match nbytes {
            NbytesSel::Exact(d) => {
                let n = byte_offset as i128 + extent as i128 + d as i128;
                n.clamp(0, u64::MAX as i128) as u64
            }
            NbytesSel::Raw(x) => x,
            NbytesSel::Max => u64::MAX,
        };
        put64(&mut b, off::NBYTES, nbytes);
        put64(&mut b, off::BYTE_OFFSET, byte_offset);
        put32(&mut b, off::NDIMS, ndims);
        for i in 0..MAX_DIMS {
            put32(&mut b, off::SHAPES + 4 * i, shapes[i]);
            put32(&mut b, off::STRIDES + 4 * i, strides[i]);
        }
        b[off::DTYPE] = dtype;
        b[off::PAD..off::PAD + 3].copy_from_slice(&pad);
        b
    }
}

/// How the end of a region is changed after the blob is laid out.
#[derive(Clone, Debug)]
enum Tail {
    Keep,
    Truncate(usize),
    Extend(Vec<u8>),
}

fn tail() -> impl Strategy<Value = Tail> {
    prop_oneof![
        6 => Just(Tail::Keep),
        1 => (1usize..=16).prop_map(Tail::Truncate),
        1 => vec(any::<u8>(), 1..=16).prop_map(Tail::Extend),
    ]
}

fn apply_tail(blob: &mut Vec<u8>, tail: &Tail) {
    match tail {
        Tail::Keep => {}
        Tail::Truncate(n) => blob.truncate(blob.len().saturating_sub(*n)),
        Tail::Extend(extra) => blob.extend_from_slice(extra),
    }
}

/// A header with T, S in 0..=4 and elements that are random bytes or field-fuzzed tensors.
fn small_header_blob() -> impl Strategy<Value = Vec<u8>> {
    (0usize..=4, 0usize..=4)
        .prop_flat_map(|(t, s)| {
            let element = prop_oneof![1 => vec(any::<u8>(), ELEM), 5 => fuzz_tensor()];
            (
                Just(t),
                Just(s),
                vec(element, t),
                vec(any::<u64>(), s),
                tail(),
            )
        })
        .prop_map(|(t, s, elements, scalars, tail)| {
            let mut blob = Vec::with_capacity(HEADER + ELEM * t + SCALAR * s + 16);
            blob.extend_from_slice(&(t as i32).to_le_bytes());
            blob.extend_from_slice(&(s as i32).to_le_bytes());
            for e in &elements {
                blob.extend_from_slice(e);
            }
            for v in &scalars {
                blob.extend_from_slice(&v.to_le_bytes());
            }
            apply_tail(&mut blob, &tail);
            blob
        })
}

/// One byte edit of an encoded blob.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    Xor(u8),
    Set(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0u8..8).prop_map(|bit| Mutation::Xor(1 << bit)),
        (1u8..=255).prop_map(Mutation::Xor),
        prop_oneof![
            Just(0u8),
            Just(1),
            Just(0x7F),
            Just(0x80),
            Just(0xFF),
            any::<u8>()
        ]
        .prop_map(Mutation::Set),
    ]
}

/// Inputs of the structured test.
#[derive(Clone, Debug)]
enum Structured {
    /// A small header followed by random / fuzzed bytes.
    SmallHeader(Vec<u8>),
    /// A valid blob (T <= 4, S <= 4) and 1-8 byte edits plus an end change.
    Mutated {
        tensors: Vec<Tensor>,
        scalars: Vec<u64>,
        edits: Vec<(Index, Mutation)>,
        tail: Tail,
    },
}

fn structured() -> impl Strategy<Value = Structured> {
    prop_oneof![
        small_header_blob().prop_map(Structured::SmallHeader),
        (
            vec(valid_tensor(), 0..=4),
            vec(prop_oneof![Just(0u64), any::<u64>()], 0..=4),
            vec((any::<Index>(), mutation()), 1..=8),
            prop_oneof![6 => Just(Tail::Keep), 1 => tail()],
        )
            .prop_map(|(tensors, scalars, edits, tail)| Structured::Mutated {
                tensors,
                scalars,
                edits,
                tail,
            }),
    ]
}

/// Validates generated tensors, checking the oracle agrees they are valid.
fn validated(tensors: &[Tensor]) -> Result<Vec<ValidTensor>, TestCaseError> {
    tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let vt = ValidTensor::new(*t).map_err(|e| {
                fail(format!(
                    "generated tensor {i} rejected by the library: {e:?} ({t:?})"
                ))
            })?;
            let j = judge(vt.as_bytes());
            prop_assert!(j.valid(), "generated tensor {} breaks {:?}", i, j);
            Ok(vt)
        })
        .collect()
}

/// The tags a grant admits, per the reference matrix (section 3.6).
fn permitted(access: u8, tag: TensorArgType) -> bool {
    match tag {
        TensorArgType::Input => access != WRITE,
        TensorArgType::OutputExisting => access != READ,
        TensorArgType::InOut => access == 2,
        TensorArgType::Output | TensorArgType::NoDep => true,
    }
}

// =============================================================================================
// The properties.
// =============================================================================================

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 100_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Arbitrary bytes: `read_blob` bounds the envelope exactly as the oracle does, and on Ok
    /// every tensor and scalar decodes through the view without a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..=2048)) {
        check_blob(&bytes)?;
    }

    /// Small headers over random or field-fuzzed elements, and valid blobs with byte edits:
    /// nothing panics, every accepted tensor keeps every rule, every tensor that keeps every rule
    /// is accepted, and every rejection names a rule that is broken.
    #[test]
    fn structured_blobs_never_panic_and_accepted_tensors_hold_invariants(case in structured()) {
        match case {
            Structured::SmallHeader(blob) => {
                check_blob(&blob)?;
            }
            Structured::Mutated { tensors, scalars, edits, tail } => {
                let valid = validated(&tensors)?;
                let size = blob_size(valid.len(), scalars.len()).expect("small");
                let mut blob = vec![0u8; size];
                prop_assert_eq!(write_blob(&mut blob, &valid, &scalars), Ok(size));
                // Unedited, every element is accepted.
                prop_assert_eq!(check_blob(&blob)?, valid.len());
                for (at, m) in &edits {
                    let i = at.index(blob.len());
                    match *m {
                        Mutation::Xor(x) => blob[i] ^= x,
                        Mutation::Set(v) => blob[i] = v,
                    }
                }
                apply_tail(&mut blob, &tail);
                check_blob(&blob)?;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Valid arguments encode to exactly `blob_size(T, S)` bytes and decode to equal tensors
    /// with identical raw bytes, and equal scalars.
    #[test]
    fn encode_decode_round_trip(
        tensors in vec((valid_tensor(), select(TensorArgType::ALL.to_vec())), 0..=20),
        scalars in vec(any::<u64>(), 0..=16),
        slack in 0usize..=64,
    ) {
        let raw: Vec<Tensor> = tensors.iter().map(|(t, _)| *t).collect();
        let originals = validated(&raw)?;
        let mut args = TaskArgs::new();
        for (i, (vt, (_, tag))) in originals.iter().zip(&tensors).enumerate() {
            let granted = vt.buffer.access;
            let got = args.add_tensor(*vt, *tag);
            if permitted(granted, *tag) {
                prop_assert_eq!(got, Ok(()));
            } else {
                let granted = AccessMode::from_raw(granted).expect("valid access");
                prop_assert_eq!(got, Err(TaskArgsError::AccessDenied { index: i, tag: *tag, granted }));
                // OUTPUT is admitted by every grant.
                prop_assert_eq!(args.add_tensor(*vt, TensorArgType::Output), Ok(()));
            }
        }
        for &s in &scalars {
            args.add_scalar(s);
        }
        if let (Some(vt), false) = (originals.first(), scalars.is_empty()) {
            prop_assert_eq!(args.add_tensor(*vt, TensorArgType::Output), Err(TaskArgsError::TensorAfterScalar));
        }
        let (t, s) = (originals.len(), scalars.len());
        prop_assert_eq!((args.tensor_count(), args.scalar_count()), (t, s));

        let size = HEADER + ELEM * t + SCALAR * s;
        prop_assert_eq!(blob_size(t, s), Some(size));
        prop_assert_eq!(args.blob_size(), size);

        // Encode into a larger region holding garbage.
        let mut region = vec![0xA5u8; size + slack];
        prop_assert_eq!(args.write_blob(&mut region), Ok(size));
        prop_assert!(region[size..].iter().all(|&c| c == 0xA5), "wrote past the blob");
        let blob = &region[..size];
        prop_assert_eq!(args.to_mailbox_blob(), Ok(blob.to_vec()));

        // A region one byte short is refused before anything is written.
        let mut short = vec![0x5Au8; size - 1];
        let refused = matches!(
            args.write_blob(&mut short),
            Err(TaskArgsError::Blob(BlobError::Exceeds { .. }))
        );
        prop_assert!(refused, "a region one byte short was not refused");
        prop_assert!(short.iter().all(|&c| c == 0x5A), "a refused write touched the region");

        // The raw layout, independently.
        prop_assert_eq!(i32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]), t as i32);
        prop_assert_eq!(i32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]), s as i32);
        for (i, vt) in originals.iter().enumerate() {
            prop_assert_eq!(&blob[HEADER + ELEM * i..HEADER + ELEM * (i + 1)], vt.as_bytes());
        }
        for (k, &v) in scalars.iter().enumerate() {
            prop_assert_eq!(le64(blob, HEADER + ELEM * t + SCALAR * k), v);
        }

        // Decode, from the exact blob and from the whole region (trailing garbage is not read).
        for src in [blob, &region[..]] {
            prop_assert_eq!(check_blob(src)?, t);
            let view = read_blob(src).map_err(|e| fail(format!("{e:?}")))?;
            prop_assert_eq!(view.size(), size);
            let decoded = TaskArgs::from_blob(&view).map_err(|e| fail(format!("{e:?}")))?;
            prop_assert_eq!(decoded.tensors(), &originals[..]);
            prop_assert_eq!(decoded.tensors(), args.tensors());
            prop_assert!(decoded.tags().iter().all(|&g| g == TensorArgType::Input));
            prop_assert_eq!(decoded.scalars(), &scalars[..]);
            for (i, vt) in originals.iter().enumerate() {
                let got = view.tensor(i).map_err(|e| fail(format!("{e:?}")))?;
                prop_assert_eq!(got.as_bytes(), vt.as_bytes());
                prop_assert_eq!(decoded.tensor(i).map(|d| d.as_bytes()), Some(vt.as_bytes()));
            }
            // Re-encoding the decoded arguments reproduces the blob byte for byte.
            let mut again = vec![0u8; size];
            prop_assert_eq!(decoded.write_blob(&mut again), Ok(size));
            prop_assert_eq!(&again[..], blob);
        }
    }
}

/// The extents around `u64::MAX`: a view spanning `u64::MAX - 1` bytes fits a backing of
/// `u64::MAX` bytes, one spanning exactly `u64::MAX` bytes is the reference's "unrepresentable",
/// and anything larger overflows. Random inputs almost never land here.
#[test]
fn extent_saturation_boundary() {
    const UINT8: u8 = 5;
    const FLOAT16: u8 = 1;
    // (2^32 - 2)(2^32 - 1) + 4 (3 * 2^30 - 2) = 2^64 - 6; the third dimension adds k.
    let big = u32::MAX;
    let mid = 3 * (1u32 << 30) - 2;
    let overflow = || Some(Rule::ExtentOverflow);
    let past_end = Some(Rule::OutOfBacking(2, u64::MAX - 1, u64::MAX));
    let cases: [(u32, u8, u64, Option<Rule>); 7] = [
        // k, dtype, byte_offset, expected rejection
        (3, UINT8, 0, None),         // extent u64::MAX - 1
        (3, UINT8, 1, None),         // exactly fills u64::MAX
        (3, UINT8, 2, past_end),     // one byte past the end
        (4, UINT8, 0, overflow()),   // extent exactly u64::MAX
        (5, UINT8, 0, overflow()),   // extent 2^64
        (0, UINT8, 0, None),         // extent u64::MAX - 4
        (3, FLOAT16, 0, overflow()), // 2 * (2^64 - 2)
    ];
    let base = simpler_tests::fixtures::base_valid_tensor();
    for (k, dtype, byte_offset, want) in cases {
        let mut blob = vec![0u8; HEADER + ELEM];
        blob[..4].copy_from_slice(&1i32.to_le_bytes());
        let b = &mut blob[HEADER..];
        b.copy_from_slice(base.as_bytes());
        put64(b, off::NBYTES, u64::MAX);
        put64(b, off::BYTE_OFFSET, byte_offset);
        put32(b, off::NDIMS, 3);
        for (i, (shape, stride)) in [(big, big), (5, mid), (1 + k, 1), (0, 0), (0, 0)]
            .into_iter()
            .enumerate()
        {
            put32(b, off::SHAPES + 4 * i, shape);
            put32(b, off::STRIDES + 4 * i, stride);
        }
        b[off::DTYPE] = dtype;
        let case = format!("k={k} dtype={dtype} byte_offset={byte_offset}");
        // The oracle and the library agree, in both directions.
        let accepted = check_blob(&blob).unwrap_or_else(|e| panic!("{case}: {e}"));
        // And both give the expected answer.
        let j = judge(&blob[HEADER..]);
        let got = read_blob(&blob).unwrap().tensor(0);
        match want {
            None => {
                assert_eq!(accepted, 1, "{case}");
                assert!(j.valid(), "{case}: {j:?}");
                let extent = exact_extent(3, &[big, 5, 1 + k, 0, 0], &[big, mid, 1, 0, 0], 1);
                assert_eq!(got.unwrap().extent_bytes() as u128, extent, "{case}");
            }
            Some(rule) => {
                assert_eq!(accepted, 0, "{case}");
                assert_eq!(j.view.first(), Some(&rule), "{case}");
                match got {
                    Err(BlobError::Tensor { index: 0, error }) => {
                        assert_eq!(tensor_rule(&error), rule, "{case}")
                    }
                    other => panic!("{case}: {other:?}"),
                }
            }
        }
    }
}
