//! The chip entry path end to end: host builder → blob → validated view → ChipStorageTaskArgs
//! (materialize, the one wire-to-chip conversion) → OrchArgs (adopt, the one chip-to-runtime
//! conversion). Expected values are computed here from the geometry, not read back from the
//! code under test.

use simpler_core::blob::read_blob;
use simpler_core::chip::MaterializeError;
use simpler_core::{
    AddressSpace, CanonicalIdentity, ChipStorageTaskArgs, DataType, EntryError, OrchArgs, Resolved,
    TaskId, Tensor, TensorArgType,
};
use simpler_host::TaskArgs;
use simpler_tests::fixtures::{base_valid_tensor, dense_f32, fork_shm, identity};

const SHM_BASE: u64 = 0x5000_0000;
const FORK_BASE: u64 = 0x7000_0000;

fn resolver(id: &CanonicalIdentity) -> Option<Resolved> {
    match id.buffer_id {
        1 => Some(Resolved {
            base: SHM_BASE,
            address_space: AddressSpace::Host,
        }),
        2 => Some(Resolved {
            base: FORK_BASE,
            address_space: AddressSpace::Device,
        }),
        _ => None,
    }
}

fn entry(args: &TaskArgs) -> Result<Box<ChipStorageTaskArgs>, EntryError> {
    let blob = args.to_mailbox_blob().unwrap();
    let view = read_blob(&blob)?;
    let mut chip = Box::<ChipStorageTaskArgs>::default();
    chip.materialize(&view, resolver)?;
    Ok(chip)
}

#[test]
fn strided_views_survive_materialize_and_adopt() {
    // A transposed 4x6 view over a 6x4 FLOAT32 backing (element strides (1, 4)), starting at
    // element 2 of buffer 2.
    let transposed = Tensor::new(
        fork_shm(2, 0xABC0, 96),
        8,
        &[4, 5],
        &[1, 4],
        DataType::Float32,
    )
    .unwrap();
    let mut args = TaskArgs::new();
    args.add_tensor(base_valid_tensor(), TensorArgType::Input)
        .unwrap();
    args.add_tensor(transposed, TensorArgType::InOut).unwrap();
    args.add_scalar(42);

    let chip = entry(&args).unwrap();
    assert_eq!(chip.tensors().len(), 2);
    assert_eq!(chip.scalars(), &[42]);

    let base = &chip.tensors()[0];
    assert_eq!(base.buffer.addr, SHM_BASE + 4096);
    // (2-1)*32 + (4-1)*8 + (8-1)*1 + 1 = 64 elements of FLOAT16.
    assert_eq!(base.buffer.size, 128);
    assert_eq!(base.start_offset, 0);
    assert_eq!(base.address_space, AddressSpace::Host as u8);

    let t = &chip.tensors()[1];
    assert_eq!(t.buffer.addr, FORK_BASE + 8);
    // (4-1)*1 + (5-1)*4 + 1 = 20 elements of FLOAT32.
    assert_eq!(t.buffer.size, 80);
    assert_eq!(&t.strides[..2], &[1, 4]);
    assert_eq!(t.address_space, AddressSpace::Device as u8);
    assert!(!t.is_contiguous());

    let mut orch = Box::<OrchArgs>::default();
    orch.adopt(&chip).unwrap();
    let a = &orch.tensors()[1];
    assert_eq!(a.owner_task_id(), TaskId::INVALID);
    assert_eq!((a.version(), a.manual_dep()), (0, false));
    assert_eq!(a.shapes(), &[4, 5]);
    assert_eq!(a.strides(), &[1, 4]);
    assert_eq!(a.dtype(), DataType::Float32);
    assert_eq!(a.data_addr(), FORK_BASE + 8);
    assert_eq!((a.extent_elems(), a.extent_bytes()), (20, 80));
    assert!(!a.is_contiguous());
    // (2, 4, 8) with strides (32, 8, 1) is dense row-major.
    assert!(orch.tensors()[0].is_contiguous());
    assert_eq!(orch.scalars(), &[42]);
}

#[test]
fn an_unknown_identity_fails_materialization_and_leaves_the_entry_empty() {
    let mut args = TaskArgs::new();
    args.add_tensor(base_valid_tensor(), TensorArgType::Input)
        .unwrap();
    args.add_tensor(dense_f32(9, &[16]), TensorArgType::Input)
        .unwrap();
    let blob = args.to_mailbox_blob().unwrap();
    let view = read_blob(&blob).unwrap();
    let mut chip = Box::<ChipStorageTaskArgs>::default();
    assert_eq!(
        chip.materialize(&view, resolver),
        Err(EntryError::Materialize {
            index: 1,
            error: MaterializeError::Unresolved {
                identity: identity(9)
            }
        })
    );
    assert!(chip.tensors().is_empty() && chip.scalars().is_empty());
}

#[test]
fn a_base_plus_offset_past_the_address_space_is_refused() {
    let mut args = TaskArgs::new();
    args.add_tensor(base_valid_tensor(), TensorArgType::Input)
        .unwrap();
    let blob = args.to_mailbox_blob().unwrap();
    let view = read_blob(&blob).unwrap();
    let mut chip = Box::<ChipStorageTaskArgs>::default();
    let high = |_: &CanonicalIdentity| {
        Some(Resolved {
            base: u64::MAX - 100,
            address_space: AddressSpace::Host,
        })
    };
    assert_eq!(
        chip.materialize(&view, high),
        Err(EntryError::Materialize {
            index: 0,
            error: MaterializeError::AddressOverflow {
                base: u64::MAX - 100,
                byte_offset: 4096
            }
        })
    );
}

#[test]
fn adoption_refuses_a_corrupt_chip_entry() {
    let mut args = TaskArgs::new();
    args.add_tensor(dense_f32(2, &[8, 8]), TensorArgType::Input)
        .unwrap();
    let chip = entry(&args).unwrap();
    // Corrupt the stored tensor count as shared memory might carry it.
    let mut bytes = bytemuck::bytes_of(&*chip).to_vec();
    bytes[19_456..19_460].copy_from_slice(&300u32.to_le_bytes());
    let corrupt: ChipStorageTaskArgs = bytemuck::pod_read_unaligned(&bytes);
    assert_eq!(corrupt.tensors().len(), 256, "reads clamp to the cap");
    let mut orch = Box::<OrchArgs>::default();
    assert_eq!(
        orch.adopt(&corrupt),
        Err(EntryError::Args(simpler_core::ArgsError::CorruptCount {
            value: 300,
            limit: 256
        }))
    );
    assert!(orch.tensors().is_empty());
}
