//! Golden bytes: fixed arguments encode to bytes written out here by hand, field by field, from
//! the layout tables (wire_abi_l3.md §2.3, §2.5, §3.2; the ChipTensor table of #1974). Nothing
//! in this file derives an expected byte from the encoder.

use simpler_core::blob::{read_blob, write_blob};
use simpler_core::TensorArgType;
use simpler_core::{AddressSpace, ChipTensor, Resolved};
use simpler_host::TaskArgs;
use simpler_tests::fixtures::base_valid_tensor;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    assert_eq!(digits.len() % 2, 0, "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// The base tensor: POSIX_SHM "psm_deadbeef", 8192 B, READWRITE, HOST, identity
/// (11..88, buffer 1, generation 1); view at byte 4096, (2, 4, 8) FLOAT16, strides (32, 8, 1).
const BASE_TENSOR: &str = concat!(
    // BufferDescriptor, 88 bytes
    "42 53",                               // 0   magic 0x5342, little-endian
    "00",                                  // 2   address_space HOST
    "02",                                  // 3   access READWRITE
    "01",                                  // 4   backend_kind POSIX_SHM
    "00 00 00",                            // 5   _pad0
    "11 22 33 44 55 66 77 88",             // 8   identity.owner_instance_id
    "01 00 00 00 00 00 00 00",             // 16  identity.buffer_id = 1
    "01 00 00 00",                         // 24  identity.generation = 1
    "00 00 00 00 00 00 00 00 00 00 00 00", // 28 identity._pad
    "00 20 00 00 00 00 00 00",             // 40  nbytes = 8192
    "00 00 00 00",                         // 48  owner_worker_path_id
    "0c 00",                               // 52  body_len = 12
    "00 00",                               // 54  _pad1
    "70 73 6d 5f 64 65 61 64 62 65 65 66", // 56 body "psm_deadbeef"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00", // 68 body tail (20)
    // the view
    "00 10 00 00 00 00 00 00", // 88  byte_offset = 4096
    "03 00 00 00",             // 96  ndims = 3
    "02 00 00 00 04 00 00 00 08 00 00 00 00 00 00 00 00 00 00 00", // 100 shapes
    "20 00 00 00 08 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00", // 120 strides
    "01",                      // 140 dtype FLOAT16
    "00 00 00",                // 141 _pad
);

#[test]
fn wire_tensor_bytes_match_the_layout_table() {
    let expected = hex(BASE_TENSOR);
    assert_eq!(expected.len(), 144);
    assert_eq!(base_valid_tensor().as_bytes(), &expected[..]);
}

#[test]
fn task_args_blob_bytes_match_the_layout_table() {
    let mut args = TaskArgs::new();
    args.add_tensor(base_valid_tensor(), TensorArgType::InOut)
        .unwrap();
    args.add_scalar(0x0102_0304_0506_0708);
    args.add_scalar(u64::MAX);
    let expected = hex(&[
        "01 00 00 00",             // tensor count 1
        "02 00 00 00",             // scalar count 2
        BASE_TENSOR,               // the tensor; its tag does not travel
        "08 07 06 05 04 03 02 01", // scalar 0
        "ff ff ff ff ff ff ff ff", // scalar 1
    ]
    .concat());
    assert_eq!(expected.len(), 8 + 144 + 16);
    assert_eq!(args.blob_size(), expected.len());
    assert_eq!(args.to_mailbox_blob().unwrap(), expected);

    // Written into a larger region, only the blob's prefix is touched.
    let mut region = vec![0xEEu8; 400];
    assert_eq!(
        write_blob(&mut region, args.tensors(), args.scalars()),
        Ok(168)
    );
    assert_eq!(&region[..168], &expected[..]);
    assert!(region[168..].iter().all(|&b| b == 0xEE));

    // And the hand-written bytes decode to the same arguments.
    let view = read_blob(&expected).unwrap();
    assert_eq!((view.tensor_count(), view.scalar_count()), (1, 2));
    assert_eq!(view.tensor(0).unwrap(), base_valid_tensor());
    assert_eq!(view.scalar(0), Ok(0x0102_0304_0506_0708));
    assert_eq!(view.scalar(1), Ok(u64::MAX));
}

#[test]
fn chip_tensor_bytes_match_the_layout_table() {
    // The base tensor resolved at 0x10000 in HOST space: the address folds in the byte offset,
    // the size is the view's extent ((1*32 + 3*8 + 7*1) + 1 elements of 2 bytes = 128), strides
    // are kept.
    let chip = ChipTensor::materialize(
        &base_valid_tensor(),
        Resolved {
            base: 0x10000,
            address_space: AddressSpace::Host,
        },
    )
    .unwrap();
    let expected = hex(concat!(
        "00 10 01 00 00 00 00 00", // 0  buffer.addr = 0x11000
        "80 00 00 00 00 00 00 00", // 8  buffer.size = 128
        "00 00 00 00 00 00 00 00", // 16 start_offset = 0
        "02 00 00 00 04 00 00 00 08 00 00 00 00 00 00 00 00 00 00 00", // 24 shapes
        "20 00 00 00 08 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00", // 44 strides
        "03 00 00 00",             // 64 ndims
        "01",                      // 68 dtype FLOAT16
        "00",                      // 69 address_space HOST
        "00 00",                   // 70 _pad
    ));
    assert_eq!(expected.len(), 72);
    assert_eq!(bytemuck::bytes_of(&chip), &expected[..]);
}
