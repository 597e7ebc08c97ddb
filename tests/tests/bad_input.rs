//! The bad-input catalogue of the wire (reference digest `wire_abi_l3.md` §7): the Descriptor
//! (D1-D15), Tensor (T1-T13) and Blob (B1-B8) groups, plus S1 (access vs tag) through the host
//! builder, and the accept cases the catalogue lists.
//!
//! Rules every case follows:
//! - it starts from the reference's valid base fixture (POSIX_SHM "psm_deadbeef", 8192 bytes,
//!   view at byte 4096, (2, 4, 8) FLOAT16 with strides (32, 8, 1)), or from another valid
//!   descriptor where the case needs a different backend, and changes exactly one thing;
//! - it asserts the specific error variant with its fields, never just "is an error";
//! - a tensor case is checked on both gates that exist: `Tensor::validate` / `ValidTensor::new`
//!   and the only decode path, `read_blob(..).tensor(i)` (the tensor's bytes are encoded here
//!   field by field at their ABI offsets, independently of the library).
//!
//! Check order is §3.4 (descriptor) then §3.5 (tensor); the T13 fuzz oracle models it, so a
//! tensor with several faults must report the first one in that order.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use simpler_core::blob::{read_blob, write_blob, BlobError, Count};
use simpler_core::geometry::GeometryError;
use simpler_core::limits::MAILBOX_ARGS_CAPACITY;
use simpler_core::{
    AccessMode, AddressSpace, ArgsError, BackendKind, BufferDescriptor, BufferHandle,
    CanonicalIdentity, ChipStorageTaskArgs, ChipTensor, CoreTaskArgs, DataType, DescriptorError,
    EntryError, OrchArgs, Resolved, TaskTensor, Tensor, TensorArgType, TensorError, ValidTensor,
};
use simpler_host::{TaskArgs, TaskArgsError};
use simpler_tests::fixtures::{
    base_descriptor, base_tensor, base_valid_tensor, fork_shm, identity, OWNER,
};

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

/// Extent of the base view: ((2-1)*32 + (4-1)*8 + (8-1)*1 + 1) elements * 2 bytes.
const BASE_EXTENT: u64 = 64 * 2;
const BASE_OFFSET: u64 = 4096;
const BASE_NBYTES: u64 = 8192;

/// A non-zero address for the address-carrying backends.
const ADDR: u64 = 0x7f12_3456_7000;

/// The wire bytes of `t`, written field by field at the ABI offsets (§2.3, §2.5), so a tensor
/// the library would never build can still be fed to the decode path.
fn encode(t: &Tensor) -> [u8; 144] {
    let mut b = [0u8; 144];
    let d = &t.buffer;
    b[0..2].copy_from_slice(&d.magic.to_le_bytes());
    b[2] = d.address_space;
    b[3] = d.access;
    b[4] = d.backend_kind;
    b[5..8].copy_from_slice(&d._pad0);
    b[8..16].copy_from_slice(&d.identity.owner_instance_id);
    b[16..24].copy_from_slice(&d.identity.buffer_id.to_le_bytes());
    b[24..28].copy_from_slice(&d.identity.generation.to_le_bytes());
    b[28..40].copy_from_slice(&d.identity._pad);
    b[40..48].copy_from_slice(&d.nbytes.to_le_bytes());
    b[48..52].copy_from_slice(&d.owner_worker_path_id.to_le_bytes());
    b[52..54].copy_from_slice(&d.body_len.to_le_bytes());
    b[54..56].copy_from_slice(&d._pad1.to_le_bytes());
    b[56..88].copy_from_slice(&d.body);
    b[88..96].copy_from_slice(&t.byte_offset.to_le_bytes());
    b[96..100].copy_from_slice(&t.ndims.to_le_bytes());
    for i in 0..5 {
        b[100 + 4 * i..104 + 4 * i].copy_from_slice(&t.shapes[i].to_le_bytes());
        b[120 + 4 * i..124 + 4 * i].copy_from_slice(&t.strides[i].to_le_bytes());
    }
    b[140] = t.dtype;
    b[141..144].copy_from_slice(&t._pad);
    b
}

/// A one-tensor blob (T = 1, S = 0) holding `bytes`, sized exactly: the element is the last
/// thing in the region, so any read past its 144 bytes would go out of bounds and panic.
fn one_tensor_blob(bytes: &[u8; 144]) -> Vec<u8> {
    let mut blob = Vec::with_capacity(8 + 144);
    blob.extend_from_slice(&1i32.to_le_bytes());
    blob.extend_from_slice(&0i32.to_le_bytes());
    blob.extend_from_slice(bytes);
    blob
}

/// Decodes `bytes` through the only decode path: the blob view.
fn decode(bytes: &[u8; 144]) -> Result<ValidTensor, BlobError> {
    let blob = one_tensor_blob(bytes);
    let view = read_blob(&blob)?;
    assert_eq!((view.tensor_count(), view.scalar_count()), (1, 0));
    view.tensor(0)
}

/// Asserts `t` is rejected with `expected` on every gate: `validate`, `ValidTensor::new` and
/// the blob decode path (as element 0).
#[track_caller]
fn assert_tensor_rejected(t: Tensor, expected: TensorError) {
    assert_eq!(t.validate(), Err(expected), "Tensor::validate");
    assert_eq!(ValidTensor::new(t), Err(expected), "ValidTensor::new");
    assert_eq!(
        decode(&encode(&t)),
        Err(BlobError::Tensor {
            index: 0,
            error: expected
        }),
        "read_blob(..).tensor(0)"
    );
}

/// Asserts `t` is accepted on every gate with extent `extent`, and that the decoded tensor is
/// equal to, and byte-identical with, what went in.
#[track_caller]
fn assert_tensor_accepted(t: Tensor, extent: u64) {
    assert_eq!(t.validate(), Ok(extent), "Tensor::validate");
    let valid = ValidTensor::new(t).expect("ValidTensor::new");
    let bytes = encode(&t);
    let decoded = decode(&bytes).expect("read_blob(..).tensor(0)");
    assert_eq!(decoded, valid);
    assert_eq!(
        decoded.as_bytes(),
        &bytes[..],
        "decode must not alter the bytes"
    );
    assert_eq!(decoded.extent_bytes(), extent);
}

/// Asserts `d` is rejected with `expected`, alone and inside the (otherwise valid) base view.
#[track_caller]
fn assert_descriptor_rejected(d: BufferDescriptor, expected: DescriptorError) {
    assert_eq!(d.validate(), Err(expected), "BufferDescriptor::validate");
    let mut t = base_tensor();
    t.buffer = d;
    assert_tensor_rejected(t, TensorError::Descriptor(expected));
}

/// `base_descriptor()` with one change.
fn desc_with(change: impl FnOnce(&mut BufferDescriptor)) -> BufferDescriptor {
    let mut d = base_descriptor();
    change(&mut d);
    d
}

/// `base_tensor()` with one change.
fn tensor_with(change: impl FnOnce(&mut Tensor)) -> Tensor {
    let mut t = base_tensor();
    change(&mut t);
    t
}

/// A valid descriptor of an address-carrying backend in its legal space (FORK_COW is READ).
fn address_descriptor(backend: BackendKind) -> BufferDescriptor {
    let (space, access) = match backend {
        BackendKind::ForkShm => (AddressSpace::Host, AccessMode::ReadWrite),
        BackendKind::ForkCow => (AddressSpace::Host, AccessMode::Read),
        BackendKind::DeviceMalloc | BackendKind::VmmWindow => {
            (AddressSpace::Device, AccessMode::ReadWrite)
        }
        other => panic!("{other} carries no address"),
    };
    BufferDescriptor::new(
        identity(2),
        space,
        access,
        backend,
        BASE_NBYTES,
        &ADDR.to_le_bytes(),
    )
    .expect("a valid address descriptor")
}

/// `BufferDescriptor::new` of a READWRITE HOST descriptor of `backend` with `body`, the base's
/// size and identity `buffer_id`: for the constructor's own checks.
fn host_rw(
    buffer_id: u64,
    backend: BackendKind,
    body: &[u8],
) -> Result<BufferDescriptor, DescriptorError> {
    BufferDescriptor::new(
        identity(buffer_id),
        AddressSpace::Host,
        AccessMode::ReadWrite,
        backend,
        BASE_NBYTES,
        body,
    )
}

const ADDRESS_BACKENDS: [BackendKind; 4] = [
    BackendKind::ForkShm,
    BackendKind::ForkCow,
    BackendKind::DeviceMalloc,
    BackendKind::VmmWindow,
];

/// A valid REMOTE_SIDECAR descriptor (empty body) in `space`.
fn sidecar_descriptor(space: AddressSpace) -> BufferDescriptor {
    BufferDescriptor::new(
        identity(3),
        space,
        AccessMode::ReadWrite,
        BackendKind::RemoteSidecar,
        BASE_NBYTES,
        &[],
    )
    .expect("a valid sidecar descriptor")
}

fn std_hash<T: Hash>(v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

#[test]
fn base_fixture_passes_every_gate() {
    assert_eq!(base_descriptor().validate(), Ok(()));
    assert_tensor_accepted(base_tensor(), BASE_EXTENT);
    // The independent encoder agrees with the library's own bytes.
    assert_eq!(&encode(&base_tensor())[..], base_valid_tensor().as_bytes());
}

// ------------------------------------------------------------------------------------------------
// Descriptor: each case alone must fail validate_buffer_descriptor (§3.4)
// ------------------------------------------------------------------------------------------------

#[test]
fn d01_magic_not_0x5342() {
    assert_descriptor_rejected(
        desc_with(|d| d.magic = 0),
        DescriptorError::Magic { value: 0 },
    );
    // Byte-swapped ("SB") and all-ones are no better.
    for value in [0x4253, 0xFFFF, 0x5343, 0x5242] {
        assert_descriptor_rejected(
            desc_with(|d| d.magic = value),
            DescriptorError::Magic { value },
        );
    }
}

/// D2-D4: a one-byte enum field past its last value. Per field: how to set it, one value
/// checked on every gate, the first illegal value (every value from it to 255 is checked by
/// `validate`), and the error naming the value.
#[test]
fn d02_to_d04_enum_byte_out_of_range() {
    type Set = fn(&mut BufferDescriptor, u8);
    type Expected = fn(u8) -> DescriptorError;
    let cases: [(&str, Set, u8, u8, Expected); 3] = [
        (
            "D2 address_space",
            |d, v| d.address_space = v,
            7,
            2,
            |value| DescriptorError::AddressSpace { value },
        ),
        (
            "D3 access",
            |d, v| d.access = v,
            9,
            3,
            |value| DescriptorError::Access { value },
        ),
        (
            "D4 backend_kind",
            |d, v| d.backend_kind = v,
            0x63,
            6,
            |value| DescriptorError::BackendKind { value },
        ),
    ];
    for (case, set, sample, first_illegal, expected) in cases {
        assert_descriptor_rejected(desc_with(|d| set(d, sample)), expected(sample));
        for value in first_illegal..=u8::MAX {
            assert_eq!(
                desc_with(|d| set(d, value)).validate(),
                Err(expected(value)),
                "{case} = {value}"
            );
        }
    }
}

#[test]
fn d05_body_len_over_32() {
    assert_descriptor_rejected(
        desc_with(|d| d.body_len = 0xFFFF),
        DescriptorError::BodyLen {
            value: 0xFFFF,
            limit: 32,
        },
    );
    // The first illegal length.
    assert_descriptor_rejected(
        desc_with(|d| d.body_len = 33),
        DescriptorError::BodyLen {
            value: 33,
            limit: 32,
        },
    );
}

#[test]
fn d06_generation_zero() {
    assert_descriptor_rejected(
        desc_with(|d| d.identity.generation = 0),
        DescriptorError::ZeroGeneration,
    );
}

/// D7: flips the address space of an otherwise valid descriptor of `backend`.
#[track_caller]
fn assert_capability_rejected(backend: BackendKind, space: AddressSpace) {
    let valid = if backend == BackendKind::PosixShm {
        base_descriptor()
    } else {
        address_descriptor(backend)
    };
    assert_eq!(valid.validate(), Ok(()));
    let mut d = valid;
    d.address_space = space as u8;
    let expected = DescriptorError::Capability {
        backend,
        address_space: space,
    };
    assert_descriptor_rejected(d, expected);
    // The constructor refuses the same combination.
    let body: &[u8] = if backend == BackendKind::PosixShm {
        b"psm_deadbeef"
    } else {
        &ADDR.to_le_bytes()
    };
    let access = AccessMode::from_raw(valid.access).unwrap();
    assert_eq!(
        BufferDescriptor::new(identity(2), space, access, backend, BASE_NBYTES, body),
        Err(expected)
    );
}

/// D7: a backend in an address space its capability excludes.
#[test]
fn d07_capability_backend_in_the_wrong_space() {
    for (backend, space) in [
        (BackendKind::VmmWindow, AddressSpace::Host),
        (BackendKind::DeviceMalloc, AddressSpace::Host),
        (BackendKind::ForkShm, AddressSpace::Device),
        (BackendKind::PosixShm, AddressSpace::Device),
        (BackendKind::ForkCow, AddressSpace::Device),
    ] {
        assert_capability_rejected(backend, space);
    }
}

#[test]
fn d07_accept_remote_sidecar_in_either_space() {
    for space in [AddressSpace::Host, AddressSpace::Device] {
        let d = sidecar_descriptor(space);
        assert_eq!(d.validate(), Ok(()), "{space:?}");
        // The base view over it passes the wire gate (refusal is a materialization matter).
        let mut t = base_tensor();
        t.buffer = d;
        assert_tensor_accepted(t, BASE_EXTENT);
    }
}

#[test]
fn d08_fork_cow_writable() {
    for access in [AccessMode::Write, AccessMode::ReadWrite] {
        let d = {
            let mut d = address_descriptor(BackendKind::ForkCow);
            d.access = access as u8;
            d
        };
        assert_descriptor_rejected(d, DescriptorError::CowWritable { access });
        assert_eq!(
            BufferDescriptor::new(
                identity(2),
                AddressSpace::Host,
                access,
                BackendKind::ForkCow,
                BASE_NBYTES,
                &ADDR.to_le_bytes()
            ),
            Err(DescriptorError::CowWritable { access })
        );
    }
    // FORK_SHM (the shared twin) may be written.
    assert_eq!(address_descriptor(BackendKind::ForkShm).validate(), Ok(()));
}

#[test]
fn d09_address_backend_body_len_not_8() {
    for backend in ADDRESS_BACKENDS {
        for len in [0u16, 3, 7, 9, 32] {
            let mut d = address_descriptor(backend);
            d.body_len = len;
            assert_descriptor_rejected(
                d,
                DescriptorError::AddressBodyLen {
                    backend,
                    value: len,
                },
            );
        }
    }
}

#[test]
fn d10_address_backend_null_address() {
    for backend in ADDRESS_BACKENDS {
        let mut d = address_descriptor(backend);
        d.body[..8].copy_from_slice(&[0; 8]);
        assert_descriptor_rejected(d, DescriptorError::NullAddress { backend });
    }
}

#[test]
fn d11_posix_shm_empty_name() {
    // body_len 0 with the old name left in the body: the schema check fires before the tail one.
    assert_descriptor_rejected(desc_with(|d| d.body_len = 0), DescriptorError::EmptyShmName);
    // And a clean empty body.
    assert_descriptor_rejected(
        desc_with(|d| {
            d.body_len = 0;
            d.body = [0; 32];
        }),
        DescriptorError::EmptyShmName,
    );
    assert_eq!(
        host_rw(1, BackendKind::PosixShm, b""),
        Err(DescriptorError::EmptyShmName)
    );
}

#[test]
fn d12_posix_shm_name_bad_byte() {
    for value in [0x00u8, 0x01, 0x20, b'/', 0x7F, 0xFF] {
        assert_descriptor_rejected(
            desc_with(|d| d.body[3] = value),
            DescriptorError::ShmNameByte { index: 3, value },
        );
        // At the first and the last position of the name too.
        assert_eq!(
            desc_with(|d| d.body[0] = value).validate(),
            Err(DescriptorError::ShmNameByte { index: 0, value })
        );
        assert_eq!(
            desc_with(|d| d.body[11] = value).validate(),
            Err(DescriptorError::ShmNameByte { index: 11, value })
        );
    }
    // A full 32-byte name at the edges of the legal range is accepted.
    let mut name = [b'!'; 32];
    name[31] = b'~';
    let d = host_rw(1, BackendKind::PosixShm, &name);
    assert!(matches!(d, Ok(ref d) if d.body() == name), "{d:?}");
}

#[test]
fn d13_remote_sidecar_with_body() {
    for space in [AddressSpace::Host, AddressSpace::Device] {
        let mut d = sidecar_descriptor(space);
        d.body_len = 8;
        d.body[..8].copy_from_slice(&ADDR.to_le_bytes());
        assert_descriptor_rejected(d, DescriptorError::SidecarBody { value: 8 });
    }
    assert_eq!(
        host_rw(3, BackendKind::RemoteSidecar, &ADDR.to_le_bytes()),
        Err(DescriptorError::SidecarBody { value: 8 })
    );
}

#[test]
fn d14_body_tail_not_zero() {
    // Base name is 12 bytes: the tail is body[12..32).
    for index in [12u8, 16, 31] {
        assert_descriptor_rejected(
            desc_with(|d| d.body[index as usize] = 0x5A),
            DescriptorError::BodyTail { index, value: 0x5A },
        );
    }
    // Address backends: the tail starts at 8.
    for backend in ADDRESS_BACKENDS {
        for index in [8u8, 16, 31] {
            let mut d = address_descriptor(backend);
            d.body[index as usize] = 0x01;
            assert_descriptor_rejected(d, DescriptorError::BodyTail { index, value: 0x01 });
        }
    }
    // REMOTE_SIDECAR: the whole body is tail.
    for index in [0u8, 16, 31] {
        let mut d = sidecar_descriptor(AddressSpace::Host);
        d.body[index as usize] = 0xFF;
        assert_descriptor_rejected(d, DescriptorError::BodyTail { index, value: 0xFF });
    }
}

#[test]
fn d15_constructor_body_too_long() {
    // owner_instance_id is a `[u8; 8]` in Rust (CanonicalIdentity::new takes `[u8; 8]`), so an
    // owner id that is not exactly 8 bytes cannot be expressed: it is a compile error, not a
    // runtime case. Only the body length is a runtime constructor check.
    for len in [33usize, 64, 4096] {
        let body = vec![b'a'; len];
        assert_eq!(
            host_rw(1, BackendKind::PosixShm, &body),
            Err(DescriptorError::BodyTooLong { len, limit: 32 })
        );
    }
    // The length check runs before anything else: an otherwise invalid descriptor (address
    // backend in the wrong space) with a long body still reports the length.
    assert_eq!(
        host_rw(1, BackendKind::DeviceMalloc, &[1; 33]),
        Err(DescriptorError::BodyTooLong { len: 33, limit: 32 })
    );
}

#[test]
fn d_accept_dirty_pads() {
    let base = base_descriptor();
    let dirty = desc_with(|d| {
        d._pad0 = [0xAA, 0xBB, 0xCC];
        d._pad1 = 0xDEAD;
        d.identity._pad = [0x5A; 12];
    });
    assert_eq!(dirty.validate(), Ok(()));
    assert_eq!(dirty, base, "pads never participate in descriptor equality");
    // And as part of a tensor, through every gate.
    let mut t = base_tensor();
    t.buffer = dirty;
    assert_tensor_accepted(t, BASE_EXTENT);
    assert_eq!(ValidTensor::new(t).unwrap(), base_valid_tensor());
}

#[test]
fn d_accept_identity_padding_does_not_change_equality_or_hash() {
    let a = identity(1);
    let mut b = a;
    b._pad = [0xFF; 12];
    assert_eq!(a, b);
    assert_eq!(a.hash64(), b.hash64());
    assert_eq!(std_hash(&a), std_hash(&b));
    // Controls: each identity field does change equality and the hash.
    let mut c = a;
    c.owner_instance_id[7] ^= 1;
    let mut e = a;
    e.buffer_id += 1;
    let mut g = a;
    g.generation += 1;
    for other in [c, e, g] {
        assert_ne!(a, other);
        assert_ne!(a.hash64(), other.hash64());
    }
    assert_eq!(CanonicalIdentity::new(OWNER, 1, 1), a);
}

// ------------------------------------------------------------------------------------------------
// Tensor: each case must fail validate_tensor (§3.5)
// ------------------------------------------------------------------------------------------------

#[test]
fn t01_ndims_zero() {
    assert_tensor_rejected(
        tensor_with(|t| t.ndims = 0),
        TensorError::Geometry(GeometryError::NDims { value: 0, limit: 5 }),
    );
    // Constructors: no shapes at all.
    assert_eq!(
        Tensor::new(base_descriptor(), 0, &[], &[], DataType::Float16),
        Err(TensorError::Geometry(GeometryError::NDims {
            value: 0,
            limit: 5
        }))
    );
    assert_eq!(
        Tensor::row_major(base_descriptor(), 0, &[], DataType::Float16),
        Err(TensorError::Geometry(GeometryError::NDims {
            value: 0,
            limit: 5
        }))
    );
}

#[test]
fn t02_ndims_above_5() {
    for value in [6u32, 0x63, u32::MAX] {
        assert_tensor_rejected(
            tensor_with(|t| t.ndims = value),
            TensorError::Geometry(GeometryError::NDims { value, limit: 5 }),
        );
    }
    assert_eq!(
        Tensor::new(base_descriptor(), 0, &[1; 6], &[1; 6], DataType::Float16),
        Err(TensorError::Geometry(GeometryError::NDims {
            value: 6,
            limit: 5
        }))
    );
    assert_eq!(
        Tensor::row_major(base_descriptor(), 0, &[1; 6], DataType::Float16),
        Err(TensorError::Geometry(GeometryError::NDims {
            value: 6,
            limit: 5
        }))
    );
}

#[test]
fn t03_dtype_unknown() {
    assert_tensor_rejected(
        tensor_with(|t| t.dtype = 0x7F),
        TensorError::Geometry(GeometryError::DataType { value: 0x7F }),
    );
    for value in DataType::COUNT..=u8::MAX {
        assert_eq!(
            tensor_with(|t| t.dtype = value).validate(),
            Err(TensorError::Geometry(GeometryError::DataType { value }))
        );
    }
}

#[test]
fn t04_byte_offset_misaligned() {
    for byte_offset in [4097u64, 3] {
        assert_tensor_rejected(
            tensor_with(|t| t.byte_offset = byte_offset),
            TensorError::MisalignedOffset {
                byte_offset,
                elem_size: 2,
            },
        );
    }
    // Every element size: an offset of one byte past an aligned origin (INT8 / FP4 have none).
    for dt in DataType::ALL {
        let elem = dt.elem_size();
        let t = tensor_with(|t| {
            t.dtype = dt.raw();
            t.byte_offset = 64 + 1;
        });
        if elem == 1 {
            assert!(t.validate().is_ok(), "{dt}: every offset is aligned");
        } else {
            assert_tensor_rejected(
                t,
                TensorError::MisalignedOffset {
                    byte_offset: 65,
                    elem_size: elem,
                },
            );
        }
    }
}

/// T5, T6: a zero extent or a zero stride in each used dimension.
#[test]
fn t05_t06_shape_or_stride_zero() {
    type Zero = fn(&mut Tensor, usize);
    type Expected = fn(u8) -> GeometryError;
    let cases: [(Zero, Expected); 2] = [
        (
            |t, dim| t.shapes[dim] = 0,
            |dim| GeometryError::ZeroShape { dim },
        ),
        (
            |t, dim| t.strides[dim] = 0,
            |dim| GeometryError::ZeroStride { dim },
        ),
    ];
    for (zero, expected) in cases {
        for dim in 0..3u8 {
            assert_tensor_rejected(
                tensor_with(|t| zero(t, dim as usize)),
                TensorError::Geometry(expected(dim)),
            );
        }
    }
}

#[test]
fn t07_unused_dim_nonzero() {
    // A shape of 1 (stride 0) or a stride with shape 0 past ndims leaves the extent unchanged,
    // so only the unused-dimension rule catches it. Per case: the change, and the dimension
    // with the shape and stride it leaves there.
    type Change = fn(&mut Tensor);
    let cases: [(Change, (u8, u32, u32)); 3] = [
        (|t| t.shapes[3] = 1, (3, 1, 0)),
        (|t| t.strides[4] = 5, (4, 0, 5)),
        (|t| t.shapes[4] = u32::MAX, (4, u32::MAX, 0)),
    ];
    for (change, (dim, shape, stride)) in cases {
        assert_tensor_rejected(
            tensor_with(change),
            TensorError::Geometry(GeometryError::UnusedDim { dim, shape, stride }),
        );
    }
}

/// A raw (unvalidated) tensor over `buffer`.
fn raw_tensor(
    buffer: BufferDescriptor,
    byte_offset: u64,
    shapes: &[u32],
    strides: &[u32],
    dtype: DataType,
) -> Tensor {
    let mut t = Tensor {
        buffer,
        byte_offset,
        ndims: shapes.len() as u32,
        shapes: [0; 5],
        strides: [0; 5],
        dtype: dtype.raw(),
        _pad: [0; 3],
    };
    t.shapes[..shapes.len()].copy_from_slice(shapes);
    t.strides[..strides.len()].copy_from_slice(strides);
    t
}

#[test]
fn t08_extent_overflow_1d_f32() {
    // (2^31 + 1 - 1) * 2^31 + 1 = 2^62 + 1 elements * 4 bytes = 2^64 + 4: an unsaturated
    // product wraps to 4 bytes, which would fit. Over the largest possible backing.
    let desc = fork_shm(5, ADDR, u64::MAX);
    let t = raw_tensor(desc, 0, &[(1 << 31) + 1], &[1 << 31], DataType::Float32);
    let wrapped = ((1u64 << 31) * (1u64 << 31) + 1).wrapping_mul(4);
    assert_eq!(wrapped, 4, "the unsaturated product wraps to 4 bytes");
    assert_tensor_rejected(t, TensorError::Geometry(GeometryError::ExtentOverflow));
    // Also over the base backing (the overflow is caught before containment).
    let mut t = t;
    t.buffer = base_descriptor();
    assert_tensor_rejected(t, TensorError::Geometry(GeometryError::ExtentOverflow));
}

#[test]
fn t08_extent_overflow_2d_i8_even_with_nbytes_max() {
    // (2^32-2)(2^32-1) + 6 * 2^31 + 1 = 2^64 + 3 elements of INT8: the sum wraps to 3 bytes.
    let desc = fork_shm(5, ADDR, u64::MAX);
    let t = raw_tensor(
        desc,
        0,
        &[u32::MAX, 7],
        &[u32::MAX, 1 << 31],
        DataType::Int8,
    );
    let span = (u32::MAX as u128 - 1) * u32::MAX as u128 + 6 * (1u128 << 31);
    assert_eq!(span + 1, (1u128 << 64) + 3);
    assert_tensor_rejected(t, TensorError::Geometry(GeometryError::ExtentOverflow));
    // The same over a POSIX_SHM backing of u64::MAX bytes.
    let mut t = t;
    t.buffer = desc_with(|d| d.nbytes = u64::MAX);
    assert_tensor_rejected(t, TensorError::Geometry(GeometryError::ExtentOverflow));
}

#[test]
fn t09_view_one_byte_past_backing() {
    // nbytes = offset + extent - 1.
    let nbytes = BASE_OFFSET + BASE_EXTENT - 1;
    assert_tensor_rejected(
        tensor_with(|t| t.buffer.nbytes = nbytes),
        TensorError::OutOfBacking {
            byte_offset: BASE_OFFSET,
            extent_bytes: BASE_EXTENT,
            nbytes,
        },
    );
}

#[test]
fn t09_origin_shifted_by_one_element_past_exact_fit() {
    let exact = BASE_OFFSET + BASE_EXTENT;
    let fit = tensor_with(|t| t.buffer.nbytes = exact);
    assert_tensor_accepted(fit, BASE_EXTENT);
    let mut shifted = fit;
    shifted.byte_offset += 2; // one FLOAT16 element
    assert_tensor_rejected(
        shifted,
        TensorError::OutOfBacking {
            byte_offset: BASE_OFFSET + 2,
            extent_bytes: BASE_EXTENT,
            nbytes: exact,
        },
    );
}

#[test]
fn t10_byte_offset_past_or_at_nbytes() {
    // byte_offset > nbytes (the subtraction nbytes - byte_offset must not underflow).
    for byte_offset in [BASE_NBYTES + 2, u64::MAX - 1] {
        assert_tensor_rejected(
            tensor_with(|t| t.byte_offset = byte_offset),
            TensorError::OutOfBacking {
                byte_offset,
                extent_bytes: BASE_EXTENT,
                nbytes: BASE_NBYTES,
            },
        );
    }
    // byte_offset == nbytes always fails: the extent is at least one element.
    assert_tensor_rejected(
        tensor_with(|t| t.byte_offset = BASE_NBYTES),
        TensorError::OutOfBacking {
            byte_offset: BASE_NBYTES,
            extent_bytes: BASE_EXTENT,
            nbytes: BASE_NBYTES,
        },
    );
    // Even a one-element view.
    let one = tensor_with(|t| {
        t.byte_offset = BASE_NBYTES;
        t.ndims = 1;
        t.shapes = [1, 0, 0, 0, 0];
        t.strides = [1, 0, 0, 0, 0];
    });
    assert_tensor_rejected(
        one,
        TensorError::OutOfBacking {
            byte_offset: BASE_NBYTES,
            extent_bytes: 2,
            nbytes: BASE_NBYTES,
        },
    );
}

#[test]
fn t11_nbytes_zero() {
    // The descriptor alone is legal with nbytes 0 ...
    let d = desc_with(|d| d.nbytes = 0);
    assert_eq!(d.validate(), Ok(()));
    // ... but any view over it fails containment.
    assert_tensor_rejected(
        tensor_with(|t| t.buffer.nbytes = 0),
        TensorError::OutOfBacking {
            byte_offset: BASE_OFFSET,
            extent_bytes: BASE_EXTENT,
            nbytes: 0,
        },
    );
    let mut t = raw_tensor(d, 0, &[1], &[1], DataType::Int8);
    assert_tensor_rejected(
        t,
        TensorError::OutOfBacking {
            byte_offset: 0,
            extent_bytes: 1,
            nbytes: 0,
        },
    );
    t.buffer.nbytes = 1;
    assert_tensor_accepted(t, 1);
}

#[test]
fn t12_constructor_rank_mismatch() {
    assert_eq!(
        Tensor::new(
            base_descriptor(),
            BASE_OFFSET,
            &[2, 4, 8],
            &[32, 8],
            DataType::Float16
        ),
        Err(TensorError::RankMismatch {
            shapes: 3,
            strides: 2
        })
    );
    assert_eq!(
        Tensor::new(
            base_descriptor(),
            BASE_OFFSET,
            &[2, 4],
            &[32, 8, 1],
            DataType::Float16
        ),
        Err(TensorError::RankMismatch {
            shapes: 2,
            strides: 3
        })
    );
    // The length check comes before the rank-range check.
    assert_eq!(
        Tensor::new(base_descriptor(), BASE_OFFSET, &[], &[1], DataType::Float16),
        Err(TensorError::RankMismatch {
            shapes: 0,
            strides: 1
        })
    );
}

#[test]
fn t_accept_exact_fit_view() {
    assert_tensor_accepted(
        tensor_with(|t| t.buffer.nbytes = BASE_OFFSET + BASE_EXTENT),
        BASE_EXTENT,
    );
    // A dense view filling its whole backing from byte 0.
    let d = fork_shm(9, ADDR, 2 * 3 * 4 * 4);
    let v = Tensor::row_major(d, 0, &[2, 3, 4], DataType::Float32).expect("exact fit");
    assert_eq!(v.extent_bytes(), d.nbytes);
    assert_tensor_accepted(*v, d.nbytes);
}

#[test]
fn t_accept_dirty_pad() {
    let t = tensor_with(|t| t._pad = [0xFF, 0x01, 0x80]);
    assert_tensor_accepted(t, BASE_EXTENT);
    assert_eq!(ValidTensor::new(t).unwrap(), base_valid_tensor());
}

// ---- T13: fuzz ---------------------------------------------------------------------------------

/// xorshift64 (Marsaglia), fixed seed: reproducible, no dependencies.
struct XorShift64(u64);

impl XorShift64 {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn fill(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next() as u8;
        }
    }
}

fn rd_u16(b: &[u8; 144], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn rd_u32(b: &[u8; 144], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn rd_u64(b: &[u8; 144], o: usize) -> u64 {
    let mut le = [0u8; 8];
    le.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(le)
}

/// Element size by the reference's table (§2.1), written out independently.
fn oracle_elem_size(dtype: u8) -> Option<u64> {
    match dtype {
        0 | 2 | 10 => Some(4),
        1 | 3 | 6 | 9 => Some(2),
        7 | 8 => Some(8),
        4 | 5 | 11 | 12 | 13 | 14 => Some(1),
        _ => None,
    }
}

/// The view's extent in bytes, in u128 (never saturates for 5 dims of u32).
fn oracle_extent(b: &[u8; 144], ndims: usize, elem: u64) -> u128 {
    let mut span: u128 = 0;
    for i in 0..ndims {
        let shape = rd_u32(b, 100 + 4 * i) as u128;
        let stride = rd_u32(b, 120 + 4 * i) as u128;
        span += (shape - 1) * stride;
    }
    (span + 1) * elem as u128
}

/// Every invariant an accepted wire tensor must satisfy (§3.4, §3.5), checked from the raw
/// bytes with u128 arithmetic. Returns the names of the violated ones.
fn violated_invariants(b: &[u8; 144]) -> Vec<&'static str> {
    let mut bad = Vec::new();
    macro_rules! check {
        ($ok:expr, $name:expr $(,)?) => {
            if !$ok {
                bad.push($name);
            }
        };
    }
    let space = b[2];
    let access = b[3];
    let backend = b[4];
    let body_len = rd_u16(b, 52) as usize;
    let body = &b[56..88];
    check!(rd_u16(b, 0) == 0x5342, "magic == 0x5342");
    check!(space <= 1, "address_space in {HOST, DEVICE}");
    check!(access <= 2, "access in {READ, WRITE, READWRITE}");
    check!(backend <= 5, "backend_kind <= 5");
    check!(body_len <= 32, "body_len <= 32");
    check!(rd_u32(b, 24) != 0, "generation != 0");
    let device_backend = backend == 2 || backend == 4;
    check!(
        backend == 3 || device_backend == (space == 1),
        "device backend <=> DEVICE space",
    );
    check!(backend != 5 || access == 0, "FORK_COW is READ");
    let len = body_len.min(32);
    match backend {
        0 | 2 | 4 | 5 => {
            check!(body_len == 8, "address body is 8 bytes");
            check!(body[..8] != [0; 8], "address is non-zero");
        }
        1 => {
            check!(body_len >= 1, "shm name is non-empty");
            check!(
                body[..len]
                    .iter()
                    .all(|&c| (0x21..=0x7E).contains(&c) && c != b'/'),
                "shm name bytes are 0x21..=0x7E and not '/'",
            );
        }
        3 => check!(body_len == 0, "sidecar has no body"),
        _ => {}
    }
    check!(body[len..].iter().all(|&c| c == 0), "body tail is zero");
    let ndims = rd_u32(b, 96);
    check!((1..=5).contains(&ndims), "ndims in 1..=5");
    let dtype = b[140];
    check!(dtype < 15, "dtype < 15");
    let (Some(elem), true) = (oracle_elem_size(dtype), (1..=5).contains(&ndims)) else {
        return bad;
    };
    let ndims = ndims as usize;
    for i in 0..5 {
        let (shape, stride) = (rd_u32(b, 100 + 4 * i), rd_u32(b, 120 + 4 * i));
        if i < ndims {
            check!(shape != 0, "used shape != 0");
            check!(stride != 0, "used stride != 0");
        } else {
            check!(shape == 0 && stride == 0, "unused shape and stride are 0");
        }
    }
    let byte_offset = rd_u64(b, 88);
    let nbytes = rd_u64(b, 40);
    check!(byte_offset.is_multiple_of(elem), "byte_offset % elem == 0");
    if bad.is_empty() {
        let extent = oracle_extent(b, ndims, elem);
        check!(extent < u64::MAX as u128, "extent representable in u64");
        check!(
            byte_offset as u128 + extent <= nbytes as u128,
            "byte_offset + extent <= nbytes",
        );
    }
    bad
}

fn oracle_backend(raw: u8) -> BackendKind {
    match raw {
        0 => BackendKind::ForkShm,
        1 => BackendKind::PosixShm,
        2 => BackendKind::VmmWindow,
        3 => BackendKind::RemoteSidecar,
        4 => BackendKind::DeviceMalloc,
        5 => BackendKind::ForkCow,
        _ => unreachable!(),
    }
}

/// An independent model of the gate: the first failing check, with the fields the library
/// reports, or the extent in bytes. Written from §3.4 / §3.5, in u128 arithmetic.
fn oracle(b: &[u8; 144]) -> Result<u64, TensorError> {
    use DescriptorError as D;
    use GeometryError as G;
    let desc = |e: D| Err(TensorError::Descriptor(e));
    let geom = |e: G| Err(TensorError::Geometry(e));
    // §3.4
    let magic = rd_u16(b, 0);
    if magic != 0x5342 {
        return desc(D::Magic { value: magic });
    }
    let (space, access, backend) = (b[2], b[3], b[4]);
    if space > 1 {
        return desc(D::AddressSpace { value: space });
    }
    if access > 2 {
        return desc(D::Access { value: access });
    }
    if backend > 5 {
        return desc(D::BackendKind { value: backend });
    }
    let body_len = rd_u16(b, 52);
    if body_len > 32 {
        return desc(D::BodyLen {
            value: body_len,
            limit: 32,
        });
    }
    if rd_u32(b, 24) == 0 {
        return desc(D::ZeroGeneration);
    }
    let bk = oracle_backend(backend);
    let device_backend = backend == 2 || backend == 4;
    if backend != 3 && device_backend != (space == 1) {
        return desc(D::Capability {
            backend: bk,
            address_space: if space == 1 {
                AddressSpace::Device
            } else {
                AddressSpace::Host
            },
        });
    }
    if backend == 5 && access != 0 {
        return desc(D::CowWritable {
            access: if access == 1 {
                AccessMode::Write
            } else {
                AccessMode::ReadWrite
            },
        });
    }
    let body = &b[56..88];
    let len = body_len as usize;
    match backend {
        0 | 2 | 4 | 5 => {
            if len != 8 {
                return desc(D::AddressBodyLen {
                    backend: bk,
                    value: body_len,
                });
            }
            if body[..8].iter().all(|&c| c == 0) {
                return desc(D::NullAddress { backend: bk });
            }
        }
        1 => {
            if len == 0 {
                return desc(D::EmptyShmName);
            }
            for (i, &c) in body[..len].iter().enumerate() {
                if !(0x21..=0x7E).contains(&c) || c == b'/' {
                    return desc(D::ShmNameByte {
                        index: i as u8,
                        value: c,
                    });
                }
            }
        }
        _ => {
            if len != 0 {
                return desc(D::SidecarBody { value: body_len });
            }
        }
    }
    for (i, &c) in body.iter().enumerate().skip(len) {
        if c != 0 {
            return desc(D::BodyTail {
                index: i as u8,
                value: c,
            });
        }
    }
    // §3.5
    let ndims = rd_u32(b, 96);
    if ndims == 0 || ndims > 5 {
        return geom(G::NDims {
            value: ndims,
            limit: 5,
        });
    }
    let dtype = b[140];
    let Some(elem) = oracle_elem_size(dtype) else {
        return geom(G::DataType { value: dtype });
    };
    let byte_offset = rd_u64(b, 88);
    if !byte_offset.is_multiple_of(elem) {
        return Err(TensorError::MisalignedOffset {
            byte_offset,
            elem_size: elem as u32,
        });
    }
    for i in 0..5 {
        let (shape, stride) = (rd_u32(b, 100 + 4 * i), rd_u32(b, 120 + 4 * i));
        if i < ndims as usize {
            if shape == 0 {
                return geom(G::ZeroShape { dim: i as u8 });
            }
            if stride == 0 {
                return geom(G::ZeroStride { dim: i as u8 });
            }
        } else if shape != 0 || stride != 0 {
            return geom(G::UnusedDim {
                dim: i as u8,
                shape,
                stride,
            });
        }
    }
    let extent = oracle_extent(b, ndims as usize, elem);
    // The reference saturates at u64::MAX and rejects the saturated value, so an extent of
    // exactly u64::MAX is rejected too.
    if extent >= u64::MAX as u128 {
        return geom(G::ExtentOverflow);
    }
    let nbytes = rd_u64(b, 40);
    if byte_offset as u128 + extent > nbytes as u128 {
        return Err(TensorError::OutOfBacking {
            byte_offset,
            extent_bytes: extent as u64,
            nbytes,
        });
    }
    Ok(extent as u64)
}

/// A coarse label of a gate outcome, for the coverage histogram.
fn outcome_label(r: &Result<u64, TensorError>) -> &'static str {
    use DescriptorError as D;
    use GeometryError as G;
    match r {
        Ok(_) => "accepted",
        Err(TensorError::Descriptor(d)) => match d {
            D::Magic { .. } => "D magic",
            D::AddressSpace { .. } => "D address_space",
            D::Access { .. } => "D access",
            D::BackendKind { .. } => "D backend_kind",
            D::BodyLen { .. } => "D body_len",
            D::ZeroGeneration => "D generation",
            D::Capability { .. } => "D capability",
            D::CowWritable { .. } => "D cow writable",
            D::AddressBodyLen { .. } => "D address body_len",
            D::NullAddress { .. } => "D null address",
            D::EmptyShmName => "D empty shm name",
            D::ShmNameByte { .. } => "D shm name byte",
            D::SidecarBody { .. } => "D sidecar body",
            D::BodyTail { .. } => "D body tail",
            D::BodyTooLong { .. } => "D body too long (constructor only!)",
        },
        Err(TensorError::Geometry(g)) => match g {
            G::NDims { .. } => "T ndims",
            G::DataType { .. } => "T dtype",
            G::ZeroShape { .. } => "T zero shape",
            G::ZeroStride { .. } => "T zero stride",
            G::UnusedDim { .. } => "T unused dim",
            G::ExtentOverflow => "T extent overflow",
        },
        Err(TensorError::MisalignedOffset { .. }) => "T misaligned offset",
        Err(TensorError::OutOfBacking { .. }) => "T out of backing",
        Err(TensorError::RankMismatch { .. }) => "T rank mismatch (constructor only!)",
    }
}

/// Every outcome the gate can give a decoded tensor; the fuzz must reach each at least once.
const WIRE_OUTCOMES: [&str; 23] = [
    "accepted",
    "D magic",
    "D address_space",
    "D access",
    "D backend_kind",
    "D body_len",
    "D generation",
    "D capability",
    "D cow writable",
    "D address body_len",
    "D null address",
    "D empty shm name",
    "D shm name byte",
    "D sidecar body",
    "D body tail",
    "T ndims",
    "T dtype",
    "T zero shape",
    "T zero stride",
    "T unused dim",
    "T extent overflow",
    "T misaligned offset",
    "T out of backing",
];

/// One fuzz input. A quarter of the inputs are fully random bytes (the catalogue's case; almost
/// all die at the magic), the rest are steered so that every later check is reached too:
/// single-byte mutations of the base tensor, single-field replacements of it, and structured
/// tensors whose fields are drawn from plausible and hostile values.
fn fuzz_input(rng: &mut XorShift64, base: &[u8; 144]) -> [u8; 144] {
    let mut b = [0u8; 144];
    match rng.below(8) {
        // Fully random.
        0 | 1 => rng.fill(&mut b),
        // The base with 1..=4 random bytes replaced.
        2 | 3 => {
            b = *base;
            for _ in 0..1 + rng.below(4) {
                b[rng.below(144) as usize] = rng.next() as u8;
            }
        }
        // The base with one field replaced by a random or boundary value.
        4 => {
            b = *base;
            const FIELDS: [(usize, usize); 17] = [
                (0, 2),
                (2, 1),
                (3, 1),
                (4, 1),
                (24, 4),
                (40, 8),
                (52, 2),
                (56, 32),
                (88, 8),
                (96, 4),
                (100, 4),
                (104, 4),
                (108, 4),
                (112, 8),
                (120, 12),
                (132, 8),
                (140, 1),
            ];
            let (off, len) = FIELDS[rng.below(FIELDS.len() as u64) as usize];
            match rng.below(3) {
                0 => rng.fill(&mut b[off..off + len]),
                1 => b[off..off + len].fill(0),
                _ => b[off..off + len].fill(0xFF),
            }
        }
        // Structured.
        _ => structured_input(rng, &mut b),
    }
    b
}

fn structured_input(rng: &mut XorShift64, b: &mut [u8; 144]) {
    rng.fill(&mut b[..]); // pads and identity get random bytes
    let magic: u16 = if rng.chance(16) {
        rng.next() as u16
    } else {
        0x5342
    };
    b[0..2].copy_from_slice(&magic.to_le_bytes());
    let backend = if rng.chance(16) {
        rng.next() as u8
    } else {
        rng.below(6) as u8
    };
    let device = backend == 2 || backend == 4;
    let space = if rng.chance(12) {
        rng.next() as u8 % 4
    } else if rng.chance(2) {
        // REMOTE_SIDECAR may sit anywhere; others mostly in their own space.
        if backend == 3 {
            rng.below(2) as u8
        } else {
            device as u8
        }
    } else {
        device as u8
    };
    let access = if backend == 5 && !rng.chance(6) {
        0
    } else if rng.chance(16) {
        3 + rng.below(253) as u8
    } else {
        rng.below(3) as u8
    };
    b[2] = space;
    b[3] = access;
    b[4] = backend;
    let generation: u32 = if rng.chance(16) {
        0
    } else {
        1 + rng.below(4) as u32
    };
    b[24..28].copy_from_slice(&generation.to_le_bytes());
    // Body by backend, sometimes broken.
    let mut body = [0u8; 32];
    let mut body_len: u16;
    match backend {
        0 | 2 | 4 | 5 => {
            body_len = if rng.chance(10) {
                rng.below(33) as u16
            } else {
                8
            };
            let addr = if rng.chance(10) { 0 } else { rng.next() | 1 };
            body[..8].copy_from_slice(&addr.to_le_bytes());
            if body_len < 8 {
                // Keep the schema violation the only one in the body when it is short.
                body[body_len as usize..].fill(0);
            }
        }
        1 => {
            body_len = if rng.chance(12) {
                0
            } else {
                1 + rng.below(32) as u16
            };
            for c in &mut body[..body_len as usize] {
                *c = 0x21 + rng.below(0x5E) as u8;
                if *c == b'/' {
                    *c = b'_';
                }
            }
            if body_len > 0 && rng.chance(8) {
                let i = rng.below(body_len as u64) as usize;
                body[i] = [0x00, 0x20, b'/', 0x7F, 0x80, 0xFF][rng.below(6) as usize];
            }
        }
        _ => {
            body_len = if rng.chance(8) {
                1 + rng.below(32) as u16
            } else {
                0
            };
            rng.fill(&mut body[..body_len as usize]);
        }
    }
    if rng.chance(10) && body_len < 32 {
        let i = body_len as usize + rng.below(32 - body_len as u64) as usize;
        body[i] = 1 + rng.below(255) as u8;
    }
    if rng.chance(20) {
        body_len = 33 + rng.below(0xFFFF - 33) as u16;
    }
    b[52..54].copy_from_slice(&body_len.to_le_bytes());
    b[56..88].copy_from_slice(&body);
    // Geometry.
    let ndims: u32 = match rng.below(20) {
        0 => 0,
        1 => 6 + rng.below(100) as u32,
        _ => 1 + rng.below(5) as u32,
    };
    b[96..100].copy_from_slice(&ndims.to_le_bytes());
    let dtype = if rng.chance(16) {
        rng.next() as u8
    } else {
        rng.below(15) as u8
    };
    b[140] = dtype;
    for i in 0..5 {
        let used = (i as u32) < ndims;
        let (shape, stride): (u32, u32) = if used {
            let shape = match rng.below(24) {
                0 => 0,
                1 => u32::MAX - rng.below(4) as u32,
                2 => rng.next() as u32,
                _ => 1 + rng.below(16) as u32,
            };
            let stride = match rng.below(24) {
                0 => 0,
                1 => 1 << 31,
                2 => rng.next() as u32,
                _ => 1 + rng.below(64) as u32,
            };
            (shape, stride)
        } else if rng.chance(24) {
            (rng.below(2) as u32, rng.below(2) as u32 + 1)
        } else {
            (0, 0)
        };
        b[100 + 4 * i..104 + 4 * i].copy_from_slice(&shape.to_le_bytes());
        b[120 + 4 * i..124 + 4 * i].copy_from_slice(&stride.to_le_bytes());
    }
    // Offset and backing size: mostly a view that fits (exactly or loosely), sometimes not.
    let elem = oracle_elem_size(dtype).unwrap_or(1);
    let offset: u64 = match rng.below(10) {
        0 => rng.next(),
        1 => elem * rng.below(1 << 12) + 1,
        _ => elem * rng.below(1 << 12),
    };
    b[88..96].copy_from_slice(&offset.to_le_bytes());
    let fits = (1..=5).contains(&ndims) && (0..ndims as usize).all(|i| rd_u32(b, 100 + 4 * i) != 0);
    let extent = if fits {
        oracle_extent(b, ndims as usize, elem)
    } else {
        1
    };
    let need = offset as u128 + extent;
    let nbytes: u64 = match rng.below(10) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.next(),
        3 => need.saturating_sub(1).min(u64::MAX as u128) as u64,
        4 | 5 => need.min(u64::MAX as u128) as u64,
        _ => (need + rng.below(1 << 16) as u128).min(u64::MAX as u128) as u64,
    };
    b[40..48].copy_from_slice(&nbytes.to_le_bytes());
}

#[test]
fn t13_fuzz_random_buffers() {
    const N: usize = 4096;
    let mut rng = XorShift64(0x5342_7f5e_ed00_0013);
    let base = encode(&base_tensor());
    let mut histogram = std::collections::BTreeMap::<&'static str, usize>::new();
    for n in 0..N {
        let bytes = fuzz_input(&mut rng, &base);
        // The only decode path; the element is the last 144 bytes of an exactly sized region.
        let got = decode(&bytes).map_err(|e| match e {
            BlobError::Tensor { index: 0, error } => error,
            other => panic!("input {n}: envelope error {other:?} for a well-formed envelope"),
        });
        let got_extent = got.as_ref().map(|v| v.extent_bytes()).map_err(|e| *e);
        let expected = oracle(&bytes);
        assert_eq!(got_extent, expected, "input {n}: {bytes:02x?}");
        match &got {
            Ok(v) => {
                // Every invariant holds, the decoded value is byte-identical to the input, and
                // re-validation agrees.
                let violated = violated_invariants(&bytes);
                assert!(
                    violated.is_empty(),
                    "input {n}: accepted but violates {violated:?}"
                );
                assert_eq!(v.as_bytes(), &bytes[..], "input {n}");
                assert_eq!(v.validate(), Ok(v.extent_bytes()), "input {n}");
            }
            Err(_) => {
                assert!(
                    !violated_invariants(&bytes).is_empty(),
                    "input {n}: rejected but satisfies every invariant"
                );
            }
        }
        *histogram.entry(outcome_label(&got_extent)).or_default() += 1;
    }
    eprintln!("t13 outcomes over {N} inputs: {histogram:#?}");
    for outcome in WIRE_OUTCOMES {
        assert!(
            histogram.contains_key(outcome),
            "the fuzz never reached {outcome:?}: {histogram:#?}"
        );
    }
    assert!(
        histogram["accepted"] >= 256,
        "too few accepted inputs: {histogram:#?}"
    );
}

#[test]
fn t13_all_zero_and_all_ff_rejected() {
    use DescriptorError as D;
    assert_eq!(
        decode(&[0x00; 144]).map(drop),
        Err(BlobError::Tensor {
            index: 0,
            error: TensorError::Descriptor(D::Magic { value: 0x0000 })
        })
    );
    assert_eq!(
        decode(&[0xFF; 144]).map(drop),
        Err(BlobError::Tensor {
            index: 0,
            error: TensorError::Descriptor(D::Magic { value: 0xFFFF })
        })
    );
    // With only the magic fixed, each buffer fails on the next check in §3.4 order.
    let mut zero = [0x00; 144];
    zero[0..2].copy_from_slice(&0x5342u16.to_le_bytes());
    assert_eq!(
        decode(&zero).map(drop),
        Err(BlobError::Tensor {
            index: 0,
            error: TensorError::Descriptor(D::ZeroGeneration)
        })
    );
    let mut ones = [0xFF; 144];
    ones[0..2].copy_from_slice(&0x5342u16.to_le_bytes());
    assert_eq!(
        decode(&ones).map(drop),
        Err(BlobError::Tensor {
            index: 0,
            error: TensorError::Descriptor(D::AddressSpace { value: 0xFF })
        })
    );
}

#[test]
fn order_alignment_checked_before_geometry() {
    // Two faults: misaligned offset (step 4) and a zero shape (step 5). The reference reports
    // the first.
    let t = tensor_with(|t| {
        t.byte_offset = 4097;
        t.shapes[1] = 0;
    });
    let expected = TensorError::MisalignedOffset {
        byte_offset: 4097,
        elem_size: 2,
    };
    assert_eq!(oracle(&encode(&t)), Err(expected));
    assert_tensor_rejected(t, expected);
}

// ------------------------------------------------------------------------------------------------
// Blob envelope / view (§3.2, §3.3)
// ------------------------------------------------------------------------------------------------

fn header(t: i32, s: i32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&t.to_le_bytes());
    h[4..].copy_from_slice(&s.to_le_bytes());
    h
}

/// A valid blob of `tensors` base tensors and `scalars` scalars (0, 1, 2, ...).
fn valid_blob(tensors: usize, scalars: usize) -> Vec<u8> {
    let ts = vec![base_valid_tensor(); tensors];
    let ss: Vec<u64> = (0..scalars as u64).collect();
    let mut blob = vec![0u8; 8 + 144 * tensors + 8 * scalars];
    assert_eq!(write_blob(&mut blob, &ts, &ss), Ok(blob.len()));
    blob
}

#[test]
fn b01_capacity_below_header() {
    let full = valid_blob(0, 0);
    for capacity in 0..8 {
        assert_eq!(
            read_blob(&full[..capacity]).map(|v| v.size()),
            Err(BlobError::NoHeader { capacity })
        );
    }
    // The boundary: an empty blob is exactly its header.
    let view = read_blob(&full[..8]).expect("an empty blob");
    assert_eq!(
        (view.tensor_count(), view.scalar_count(), view.size()),
        (0, 0, 8)
    );
}

#[test]
fn b02_negative_counts() {
    let region = [0u8; 64];
    let with = |h: [u8; 8]| {
        let mut r = region;
        r[..8].copy_from_slice(&h);
        r
    };
    // 0xFFFFFFFF read as i32 is -1.
    assert_eq!(
        read_blob(&with(header(-1, 0))).map(|v| v.size()),
        Err(BlobError::NegativeCount {
            field: Count::Tensors,
            value: -1
        })
    );
    assert_eq!(
        read_blob(&with(header(0, -1))).map(|v| v.size()),
        Err(BlobError::NegativeCount {
            field: Count::Scalars,
            value: -1
        })
    );
    assert_eq!(
        read_blob(&with(header(i32::MIN, 0))).map(|v| v.size()),
        Err(BlobError::NegativeCount {
            field: Count::Tensors,
            value: i32::MIN
        })
    );
    // Both negative: T is checked first. And a negative count is reported as such even when
    // the region is only a header (the sign check precedes the size check).
    assert_eq!(
        read_blob(&header(-1, -1)).map(|v| v.size()),
        Err(BlobError::NegativeCount {
            field: Count::Tensors,
            value: -1
        })
    );
    assert_eq!(
        read_blob(&header(0, -7)).map(|v| v.size()),
        Err(BlobError::NegativeCount {
            field: Count::Scalars,
            value: -7
        })
    );
}

#[test]
fn b03_header_claims_more_than_capacity() {
    // One tensor claimed, one byte short.
    let blob = valid_blob(1, 0);
    assert_eq!(
        read_blob(&blob[..blob.len() - 1]).map(|v| v.size()),
        Err(BlobError::Exceeds {
            tensors: 1,
            scalars: 0,
            needed: 152,
            capacity: 151
        })
    );
    // One scalar past the end.
    let blob = valid_blob(1, 2);
    assert_eq!(
        read_blob(&blob[..blob.len() - 1]).map(|v| v.size()),
        Err(BlobError::Exceeds {
            tensors: 1,
            scalars: 2,
            needed: 168,
            capacity: 167
        })
    );
    // T = i32::MAX in a mailbox-sized region: the size is computed without overflow.
    let mut region = vec![0u8; MAILBOX_ARGS_CAPACITY];
    let max = i32::MAX as u64;
    for (t, s) in [(i32::MAX, 0), (0, i32::MAX), (i32::MAX, i32::MAX)] {
        region[..8].copy_from_slice(&header(t, s));
        assert_eq!(
            read_blob(&region).map(|v| v.size()),
            Err(BlobError::Exceeds {
                tensors: t as u64,
                scalars: s as u64,
                needed: 8 + 144 * t as u64 + 8 * s as u64,
                capacity: MAILBOX_ARGS_CAPACITY
            })
        );
    }
    assert_eq!(8 + 144 * max + 8 * max, 326_417_514_352);
    // The exact fit is accepted (the envelope is bounded, not the element contents).
    let blob = valid_blob(2, 3);
    let view = read_blob(&blob).expect("exact fit");
    assert_eq!((view.tensor_count(), view.scalar_count()), (2, 3));
}

#[test]
fn b04_tensor_index_out_of_range() {
    // `tensor(i)` takes a usize, so the reference's i < 0 case cannot be expressed in Rust.
    let blob = valid_blob(2, 1);
    let view = read_blob(&blob).unwrap();
    assert!(view.tensor(1).is_ok());
    for index in [2usize, 3, usize::MAX / 144, usize::MAX] {
        assert_eq!(
            view.tensor(index).map(drop),
            Err(BlobError::TensorIndex { index, count: 2 })
        );
    }
    // The scalar accessor is bounded the same way.
    assert_eq!(view.scalar(0), Ok(0));
    assert_eq!(
        view.scalar(1),
        Err(BlobError::ScalarIndex { index: 1, count: 1 })
    );
    assert_eq!(
        view.scalar(usize::MAX),
        Err(BlobError::ScalarIndex {
            index: usize::MAX,
            count: 1
        })
    );
    // An empty blob has no tensor 0.
    let empty = valid_blob(0, 0);
    assert_eq!(
        read_blob(&empty).unwrap().tensor(0).map(drop),
        Err(BlobError::TensorIndex { index: 0, count: 0 })
    );
}

#[test]
fn b05_corrupt_element_fails_only_when_decoded() {
    let tensors = [
        base_valid_tensor(),
        Tensor::row_major(fork_shm(2, ADDR, 256), 0, &[8, 8], DataType::Float32).unwrap(),
        Tensor::row_major(fork_shm(3, ADDR + 0x1000, 64), 0, &[16], DataType::Int32).unwrap(),
    ];
    let scalars = [7u64, u64::MAX];
    let mut blob = vec![0u8; 8 + 3 * 144 + 2 * 8];
    write_blob(&mut blob, &tensors, &scalars).unwrap();
    // Corrupt element 1's magic.
    let at = 8 + 144;
    blob[at..at + 2].copy_from_slice(&[0, 0]);
    let expected = BlobError::Tensor {
        index: 1,
        error: TensorError::Descriptor(DescriptorError::Magic { value: 0 }),
    };

    // The envelope is fine.
    let view = read_blob(&blob).expect("the envelope is well-formed");
    assert_eq!((view.tensor_count(), view.scalar_count()), (3, 2));
    // Elements 0 and 2 decode; element 1 fails only when it is decoded.
    assert_eq!(view.tensor(0), Ok(tensors[0]));
    assert_eq!(view.tensor(2), Ok(tensors[2]));
    assert_eq!(view.tensor(1), Err(expected));
    assert_eq!(view.scalars().collect::<Vec<_>>(), scalars);
    assert_eq!(view.validate_all(), Err(expected));

    // Whole-blob decoders fail as a whole with the same error.
    assert_eq!(
        TaskArgs::from_blob(&view),
        Err(TaskArgsError::Blob(expected))
    );
    let mut chip = Box::<ChipStorageTaskArgs>::default();
    let resolve = |_: &CanonicalIdentity| {
        Some(Resolved {
            base: 0x1000_0000,
            address_space: AddressSpace::Host,
        })
    };
    assert_eq!(
        chip.materialize(&view, resolve),
        Err(EntryError::Decode(expected))
    );
    assert!(
        chip.tensors().is_empty() && chip.scalars().is_empty(),
        "left cleared"
    );

    // A different corruption of the same element (its view pushed past its backing).
    let mut blob2 = vec![0u8; blob.len()];
    write_blob(&mut blob2, &tensors, &scalars).unwrap();
    let off = 8 + 144 + 88;
    blob2[off..off + 8].copy_from_slice(&4u64.to_le_bytes());
    let view2 = read_blob(&blob2).unwrap();
    let expected2 = BlobError::Tensor {
        index: 1,
        error: TensorError::OutOfBacking {
            byte_offset: 4,
            extent_bytes: 256,
            nbytes: 256,
        },
    };
    assert_eq!(view2.tensor(0), Ok(tensors[0]));
    assert_eq!(view2.tensor(2), Ok(tensors[2]));
    assert_eq!(view2.tensor(1), Err(expected2));
    assert_eq!(
        TaskArgs::from_blob(&view2),
        Err(TaskArgsError::Blob(expected2))
    );
}

fn task_args_with(tensors: usize, scalars: usize) -> TaskArgs {
    let mut args = TaskArgs::new();
    let t = base_valid_tensor();
    for _ in 0..tensors {
        args.add_tensor(t, TensorArgType::Input).unwrap();
    }
    for s in 0..scalars as u64 {
        args.add_scalar(s);
    }
    args
}

#[test]
fn b06_encode_over_mailbox_capacity_refused_before_writing() {
    assert_eq!(MAILBOX_ARGS_CAPACITY, 64_016);
    // (tensors, scalars) at the limit, and one past it.
    let cases = [
        ((444, 0), (445, 0)),
        ((437, 128), (437, 136)), // 437 tensors + 128 scalars leave room for 7 more scalars
        ((0, 8_001), (0, 8_002)),
    ];
    for ((ft, fs), (bt, bs)) in cases {
        let fits = task_args_with(ft, fs);
        let blob = fits.to_mailbox_blob().expect("fits the mailbox");
        assert_eq!(blob.len(), 8 + 144 * ft + 8 * fs);
        assert!(blob.len() <= MAILBOX_ARGS_CAPACITY);

        let big = task_args_with(bt, bs);
        let needed = (8 + 144 * bt + 8 * bs) as u64;
        assert!(needed > MAILBOX_ARGS_CAPACITY as u64);
        let expected = BlobError::Exceeds {
            tensors: bt as u64,
            scalars: bs as u64,
            needed,
            capacity: MAILBOX_ARGS_CAPACITY,
        };
        assert_eq!(big.to_mailbox_blob(), Err(TaskArgsError::Blob(expected)));

        // Writing into the mailbox region itself is refused and leaves it untouched.
        let mut region = vec![0xA5u8; MAILBOX_ARGS_CAPACITY];
        assert_eq!(
            big.write_blob(&mut region),
            Err(TaskArgsError::Blob(expected))
        );
        assert!(
            region.iter().all(|&b| b == 0xA5),
            "({bt}, {bs}): region was written"
        );
        assert_eq!(
            write_blob(&mut region, big.tensors(), big.scalars()),
            Err(expected)
        );
        assert!(
            region.iter().all(|&b| b == 0xA5),
            "({bt}, {bs}): region was written"
        );
    }
    // The documented 445-tensor case in numbers.
    assert_eq!(8 + 144 * 445, 64_088);

    // A small destination is a small limit: one byte short, nothing written.
    let one = task_args_with(1, 1);
    let mut dst = vec![0x5Au8; 8 + 144 + 8 - 1];
    assert_eq!(
        one.write_blob(&mut dst),
        Err(TaskArgsError::Blob(BlobError::Exceeds {
            tensors: 1,
            scalars: 1,
            needed: 160,
            capacity: 159
        }))
    );
    assert!(dst.iter().all(|&b| b == 0x5A));
    let mut empty: [u8; 0] = [];
    assert_eq!(
        write_blob(&mut empty, &[], &[]),
        Err(BlobError::Exceeds {
            tensors: 0,
            scalars: 0,
            needed: 8,
            capacity: 0
        })
    );
}

fn chip_tensor() -> ChipTensor {
    ChipTensor::contiguous(0x1000_0000, &[4, 4], DataType::Float32, AddressSpace::Host)
}

fn task_tensor() -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr: 0x1000_0000,
            size: 64,
        },
        0,
        &[4, 4],
        &[4, 1],
        DataType::Float32,
        AddressSpace::Host,
    )
    .unwrap()
}

/// B7: `args` takes `tensors` tensors (each made by `push_tensor`) and `scalars` scalars, and
/// refuses one more of each with the cap named.
#[track_caller]
fn assert_caps<A: ?Sized>(
    args: &mut A,
    (tensors, scalars): (usize, usize),
    push_tensor: impl Fn(&mut A) -> Result<(), ArgsError>,
    push_scalar: impl Fn(&mut A, u64) -> Result<(), ArgsError>,
) {
    for _ in 0..tensors {
        push_tensor(args).unwrap();
    }
    assert_eq!(
        push_tensor(args),
        Err(ArgsError::TooManyTensors { limit: tensors })
    );
    for s in 0..scalars as u64 {
        push_scalar(args, s).unwrap();
    }
    assert_eq!(
        push_scalar(args, scalars as u64),
        Err(ArgsError::TooManyScalars { limit: scalars })
    );
}

#[test]
fn b07_chip_storage_caps() {
    let mut chip = Box::<ChipStorageTaskArgs>::default();
    assert_caps(
        &mut *chip,
        (256, 128),
        |c| c.push_tensor(chip_tensor()),
        |c, s| c.push_scalar(s),
    );
    assert_eq!(chip.tensors().len(), 256);
    assert_eq!(chip.scalars().len(), 128);
    assert_eq!(chip.check_counts(), Ok(()));
}

#[test]
fn b07_orch_args_caps() {
    let mut orch = Box::<OrchArgs>::default();
    assert_caps(
        &mut *orch,
        (256, 128),
        |o| o.push_tensor(task_tensor()),
        |o, s| o.push_scalar(s),
    );
}

#[test]
fn b07_core_task_args_caps() {
    let mut core = CoreTaskArgs::new();
    assert_caps(
        &mut core,
        (32, 16),
        |c| c.push_tensor(task_tensor()),
        |c, s| c.push_scalar(s),
    );
    assert_eq!(core.tensors().len(), 32);
    assert_eq!(core.scalars().len(), 16);
}

#[test]
fn b07_materialize_past_chip_caps() {
    let resolve = |_: &CanonicalIdentity| {
        Some(Resolved {
            base: 0x1000_0000,
            address_space: AddressSpace::Host,
        })
    };
    let mut chip = Box::<ChipStorageTaskArgs>::default();

    // At the caps: accepted (and it fits the mailbox, unlike what the builder can carry).
    let blob = valid_blob(256, 128);
    assert!(blob.len() <= MAILBOX_ARGS_CAPACITY);
    chip.materialize(&read_blob(&blob).unwrap(), resolve)
        .unwrap();
    assert_eq!((chip.tensors().len(), chip.scalars().len()), (256, 128));

    // A valid blob of 257 tensors: every element decodes, the 257th does not fit the entry.
    let blob = valid_blob(257, 0);
    let view = read_blob(&blob).unwrap();
    assert_eq!(view.validate_all(), Ok(()));
    assert_eq!(
        chip.materialize(&view, resolve),
        Err(EntryError::Args(ArgsError::TooManyTensors { limit: 256 }))
    );
    assert!(chip.tensors().is_empty(), "left cleared");

    // 129 scalars.
    let blob = valid_blob(1, 129);
    assert_eq!(
        chip.materialize(&read_blob(&blob).unwrap(), resolve),
        Err(EntryError::Args(ArgsError::TooManyScalars { limit: 128 }))
    );
    assert!(
        chip.tensors().is_empty() && chip.scalars().is_empty(),
        "left cleared"
    );
}

#[test]
fn b08_tensor_after_scalar() {
    // Host builder.
    let mut args = TaskArgs::new();
    args.add_tensor(base_valid_tensor(), TensorArgType::Input)
        .unwrap();
    args.add_scalar(1);
    assert_eq!(
        args.add_tensor(base_valid_tensor(), TensorArgType::Input),
        Err(TaskArgsError::TensorAfterScalar)
    );
    assert_eq!((args.tensor_count(), args.scalar_count()), (1, 1));
    // Even as the first tensor.
    let mut args = TaskArgs::new();
    args.add_scalar(1);
    assert_eq!(
        args.add_tensor(base_valid_tensor(), TensorArgType::Output),
        Err(TaskArgsError::TensorAfterScalar)
    );
    assert_eq!(args.tensor_count(), 0);

    // Core containers.
    let mut chip = Box::<ChipStorageTaskArgs>::default();
    chip.push_tensor(chip_tensor()).unwrap();
    chip.push_scalar(1).unwrap();
    assert_eq!(
        chip.push_tensor(chip_tensor()),
        Err(ArgsError::TensorAfterScalar)
    );
    assert_eq!((chip.tensors().len(), chip.scalars().len()), (1, 1));

    let mut core = CoreTaskArgs::new();
    core.push_scalar(1).unwrap();
    assert_eq!(
        core.push_tensor(task_tensor()),
        Err(ArgsError::TensorAfterScalar)
    );
    assert!(core.tensors().is_empty());

    let mut orch = Box::<OrchArgs>::default();
    orch.push_scalar(1).unwrap();
    assert_eq!(
        orch.push_tensor(task_tensor()),
        Err(ArgsError::TensorAfterScalar)
    );
    assert!(orch.tensors().is_empty());
}

// ------------------------------------------------------------------------------------------------
// Submit: S1, access vs tag, through the host builder
// ------------------------------------------------------------------------------------------------

/// The base tensor over a backing granting `access`.
fn granted(access: AccessMode) -> ValidTensor {
    let mut t = base_tensor();
    t.buffer.access = access as u8;
    ValidTensor::new(t).unwrap()
}

#[test]
fn s01_access_vs_tag() {
    use AccessMode::{Read, ReadWrite, Write};
    use TensorArgType::{InOut, Input, NoDep, Output, OutputExisting};
    // There is no submit path in the workspace yet; the builder checks when a tensor is added
    // and when it is re-tagged, which is earlier than the reference's submit-time re-check.
    let denied = [
        (Write, Input),
        (Read, OutputExisting),
        (Read, InOut),
        (Write, InOut),
    ];
    for (access, tag) in denied {
        let mut args = TaskArgs::new();
        args.add_tensor(granted(ReadWrite), Input).unwrap();
        assert_eq!(
            args.add_tensor(granted(access), tag),
            Err(TaskArgsError::AccessDenied {
                index: 1,
                tag,
                granted: access
            }),
            "{tag} over {access}"
        );
        assert_eq!(args.tensor_count(), 1, "a refused tensor is not added");
    }

    // set_tag after a legal add.
    for (access, legal, tag) in [
        (Read, Input, InOut),
        (Read, Input, OutputExisting),
        (Write, OutputExisting, Input),
        (Write, Output, InOut),
    ] {
        let mut args = TaskArgs::new();
        args.add_tensor(granted(access), legal).unwrap();
        assert_eq!(
            args.set_tag(0, tag),
            Err(TaskArgsError::AccessDenied {
                index: 0,
                tag,
                granted: access
            }),
            "set_tag {legal} -> {tag} over {access}"
        );
        assert_eq!(
            args.tag(0),
            Some(legal),
            "a refused re-tag keeps the old tag"
        );
    }
    let mut args = TaskArgs::new();
    args.add_tensor(granted(Read), Input).unwrap();
    assert_eq!(
        args.set_tag(1, Input),
        Err(TaskArgsError::TensorIndex { index: 1, count: 1 })
    );

    // Accepted: READ admits INPUT, OUTPUT, NO_DEP; WRITE admits OUTPUT, OUTPUT_EXISTING, NO_DEP;
    // READWRITE admits all (OUTPUT and NO_DEP are unconstrained, as in the reference).
    let admitted = [
        (Read, vec![Input, Output, NoDep]),
        (Write, vec![Output, OutputExisting, NoDep]),
        (ReadWrite, vec![Input, Output, InOut, OutputExisting, NoDep]),
    ];
    for (access, tags) in admitted {
        let mut args = TaskArgs::new();
        for &tag in &tags {
            assert_eq!(
                args.add_tensor(granted(access), tag),
                Ok(()),
                "{tag} over {access}"
            );
            assert_eq!(args.set_tag(0, tag), Ok(()), "set_tag {tag} over {access}");
        }
        assert_eq!(args.tensor_count(), tags.len());
    }
}
