//! The kernels that compute on GM in place (`matmul`, `accumulate`) over the simulator's GM:
//! the same bits as staging through the local buffer, and a typed refusal, not a race, when
//! another core holds the bytes they need.

use simpler_aicore::kernels::{accumulate, matmul};
use simpler_aicore::{CoreTaskArgs, Gm, GmFault, KernelCtx, KernelFailure, KernelFn, Portable};
use simpler_core::gm::GmFaultKind;
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskTensor};
use simpler_sim::gm::{GmArena, GmWords};

const BASE: u64 = 0x10_0000;
const N: u32 = 32;
const TILE_BYTES: u64 = (N * N * 4) as u64;

/// GM that only copies: what a platform that lends nothing gives a kernel.
struct CopyOnly<'a>(&'a GmArena<'a>);

impl Gm for CopyOnly<'_> {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        self.0.read(addr, dst)
    }
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        self.0.write(addr, src)
    }
}

/// The dense `N x N` f32 tile at tile index `i` of GM.
fn tile(i: u64) -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr: BASE + i * TILE_BYTES,
            size: TILE_BYTES,
        },
        0,
        &[N, N],
        &[N, 1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap()
}

fn run(kernel: KernelFn, gm: &dyn Gm, tensors: &[TaskTensor]) -> Result<(), KernelFailure> {
    let mut args = CoreTaskArgs::new();
    for &t in tensors {
        args.push_tensor(t).unwrap();
    }
    let mut local = vec![0.0f32; 64 * 1024];
    kernel(&mut KernelCtx {
        gm,
        args: &args,
        local: &mut local,
        ops: &Portable,
        block_idx: 0,
        block_num: 1,
        sub_block: 0,
    })
}

fn read_tile(gm: &GmArena<'_>, i: u64) -> Vec<u8> {
    let mut out = vec![0u8; TILE_BYTES as usize];
    gm.read(BASE + i * TILE_BYTES, &mut out).unwrap();
    out
}

#[test]
fn lent_operands_give_the_staged_bits() {
    let words = GmWords::zeroed((8 * TILE_BYTES / 8) as usize);
    let gm = words.arena_at(BASE, 1);
    let values: Vec<u8> = (0..2 * N * N)
        .flat_map(|i| ((i % 97) as f32 * 0.01 - 0.3).to_le_bytes())
        .collect();
    gm.write(BASE, &values).unwrap();
    // These tiles are whole words: the arena lends them, so the first pair runs in place.
    assert!(matches!(gm.lend(BASE, (N * N) as usize), Some(Ok(_))));
    // In place: C (tile 2) = A (tile 0) · B (tile 1), then tile 2 += tile 0.
    run(matmul, &gm, &[tile(0), tile(1), tile(2)]).unwrap();
    run(accumulate, &gm, &[tile(0), tile(2)]).unwrap();
    // Staged: the same into tile 3.
    let copy = CopyOnly(&gm);
    run(matmul, &copy, &[tile(0), tile(1), tile(3)]).unwrap();
    run(accumulate, &copy, &[tile(0), tile(3)]).unwrap();
    assert_eq!(read_tile(&gm, 2), read_tile(&gm, 3));
    assert!(read_tile(&gm, 2).iter().any(|&b| b != 0));
    // Every lease ended with its kernel.
    assert_eq!(words.accesses_in_progress(), 0);
}

#[test]
fn a_kernel_needing_bytes_another_core_holds_fails_with_a_conflict() {
    let words = GmWords::zeroed((8 * TILE_BYTES / 8) as usize);
    let (this_core, other_core) = (words.arena_at(BASE, 1), words.arena_at(BASE, 2));
    // The other core holds tile 2 for writing (as a kernel with a wrong tensor, or a missing
    // manual dependency, would): this core's product into tile 2 is refused, not raced.
    let held = other_core
        .lend_mut(BASE + 2 * TILE_BYTES, 4)
        .unwrap()
        .unwrap();
    let refused = run(matmul, &this_core, &[tile(0), tile(1), tile(2)]);
    let Err(KernelFailure::Memory(fault)) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(fault.kind, GmFaultKind::Conflict);
    assert_eq!(fault.addr, BASE + 2 * TILE_BYTES);
    // Reading what the other core is writing is refused too, staged or not.
    let refused = run(accumulate, &CopyOnly(&this_core), &[tile(2), tile(3)]);
    assert!(
        matches!(
            refused,
            Err(KernelFailure::Memory(GmFault {
                kind: GmFaultKind::Conflict,
                ..
            }))
        ),
        "{refused:?}"
    );
    // A refused kernel holds nothing; once the other core is done, the product runs.
    assert_eq!(words.accesses_in_progress(), 1);
    drop(held);
    run(matmul, &this_core, &[tile(0), tile(1), tile(2)]).unwrap();
    assert_eq!(words.accesses_in_progress(), 0);
}
