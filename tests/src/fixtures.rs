//! Shared fixtures: the wire's base case, scene entries for running or recording a scene
//! without a device, and test data.
//!
//! The base case is the reference suite's: a POSIX_SHM backing named "psm_deadbeef" of 8192
//! bytes, viewed at byte 4096 as a (2, 4, 8) FLOAT16 tensor with strides (32, 8, 1). It must
//! pass every gate; each bad-input case changes exactly one thing.

use simpler_core::{
    AccessMode, AddressSpace, ArgDirection, BackendKind, BufferDescriptor, CanonicalIdentity,
    ChipTensor, DataType, TaskTensor, Tensor, TensorArgType, ValidTensor,
};
use simpler_host::hbg::BindReport;
use simpler_host::record::GraphBoundary;
use simpler_host::scenes::Prepared;
use simpler_host::{CallableHandle, ChipArg, ChipWorker, HostTensor, RunOptions};

/// The owner instance id (the Worker nonce a descriptor names) of every fixture identity: a
/// fixed pattern, so a case can build another identity under the same owner.
pub const OWNER: [u8; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];

/// Identity `buffer_id` of generation 1 under [`OWNER`].
pub fn identity(buffer_id: u64) -> CanonicalIdentity {
    CanonicalIdentity::new(OWNER, buffer_id, 1)
}

/// The base descriptor: POSIX_SHM "psm_deadbeef", 8192 bytes, READWRITE, HOST.
pub fn base_descriptor() -> BufferDescriptor {
    BufferDescriptor::new(
        identity(1),
        AddressSpace::Host,
        AccessMode::ReadWrite,
        BackendKind::PosixShm,
        8192,
        b"psm_deadbeef",
    )
    .expect("the base descriptor is valid")
}

/// The base tensor: (2, 4, 8) FLOAT16, strides (32, 8, 1), at byte 4096 of the base descriptor.
pub fn base_tensor() -> Tensor {
    *base_valid_tensor().get()
}

/// [`base_tensor`], validated.
pub fn base_valid_tensor() -> ValidTensor {
    Tensor::new(
        base_descriptor(),
        4096,
        &[2, 4, 8],
        &[32, 8, 1],
        DataType::Float16,
    )
    .expect("the base tensor is valid")
}

/// A FORK_SHM descriptor at `addr` of `nbytes`, READWRITE.
pub fn fork_shm(buffer_id: u64, addr: u64, nbytes: u64) -> BufferDescriptor {
    BufferDescriptor::new(
        identity(buffer_id),
        AddressSpace::Host,
        AccessMode::ReadWrite,
        BackendKind::ForkShm,
        nbytes,
        &addr.to_le_bytes(),
    )
    .expect("a FORK_SHM descriptor with a non-zero address is valid")
}

/// A dense row-major FLOAT32 tensor over a FORK_SHM backing that it exactly fills.
pub fn dense_f32(buffer_id: u64, shapes: &[u32]) -> ValidTensor {
    let numel: u64 = shapes.iter().map(|&s| s as u64).product();
    let desc = fork_shm(
        buffer_id,
        0x7f00_0000_0000 + buffer_id * 0x10_0000,
        numel * 4,
    );
    Tensor::row_major(desc, 0, shapes, DataType::Float32).expect("a dense view fits its backing")
}

/// The made-up device address of entry tensor `i` of a scene run without a device
/// ([`scene_boundary`], [`entry_tensor`]): `0x1000_0000 · (i + 1)`, so entries of up to
/// 256 MiB never overlap one another, nor the harness's heaps (from `0x100_0000_0000`).
pub const fn entry_addr(i: usize) -> u64 {
    0x1000_0000 * (i as u64 + 1)
}

/// Entry tensor `i` of a scene run without a device: dense, row-major, of `shapes` and
/// `dtype`, at [`entry_addr`]`(i)` in device space.
pub fn entry_tensor(i: usize, shapes: &[u32], dtype: DataType) -> TaskTensor {
    let c = ChipTensor::contiguous(entry_addr(i), shapes, dtype, AddressSpace::Device);
    assert!(
        c.buffer.size <= entry_addr(0),
        "entry tensor {i} ({} bytes) would overlap the next one",
        c.buffer.size
    );
    TaskTensor::adopt(&c).expect("a contiguous entry tensor")
}

/// A Graph boundary shaped like a prepared scene case's entry, for recording the scene's
/// body directly: entry tensor `i` is [`entry_tensor`]`(i, ..)`, tagged INPUT if IN, OUTPUT
/// EXISTING if OUT and `inout` otherwise (INOUT); the case's scalars follow.
pub fn boundary(p: &Prepared, inout: TensorArgType) -> GraphBoundary {
    let mut b = GraphBoundary::default();
    for (i, (t, dir)) in p.tensors.iter().zip(p.callable.signature()).enumerate() {
        b.tensors.push(entry_tensor(i, &t.shapes, t.dtype));
        b.tags.push(match dir {
            ArgDirection::In => TensorArgType::Input,
            ArgDirection::Out => TensorArgType::OutputExisting,
            _ => inout,
        });
    }
    b.scalars = p.scalars.clone();
    b
}

/// [`boundary`] of scene `name`'s case `case`, with INOUT tensors tagged OUTPUT_EXISTING.
pub fn scene_boundary(name: &str, case: &str) -> GraphBoundary {
    let p = simpler_host::scenes::find(name)
        .and_then(|s| s.prepare(case))
        .expect("scene and case");
    boundary(&p, TensorArgType::OutputExisting)
}

/// `values` as little-endian bytes, the layout of an f32 tensor's backing.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `n` bytes of a deterministic pattern, byte `i` being `(37 i + 11 + 101 salt) mod 251`: a
/// window of it shifted by less than 251 bytes matches nowhere, and a different `salt` gives
/// each buffer of a test its own bytes.
pub fn pattern(n: usize, salt: usize) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 37 + 11 + salt * 101) % 251) as u8)
        .collect()
}

/// Registers prepared case `p`'s callable (orchestration, kernel table, signature) on `w`.
pub fn register_prepared(w: &mut ChipWorker, p: &Prepared) -> CallableHandle {
    w.register(p.callable.clone())
}

/// Fresh copies of `p`'s entry tensors as host arguments of a run.
pub fn host_args(p: &Prepared) -> Vec<ChipArg> {
    p.tensors.iter().cloned().map(ChipArg::Host).collect()
}

/// The host tensors of a run's arguments, as the run left them; panics on a device argument.
pub fn host_tensors(args: Vec<ChipArg>) -> Vec<HostTensor> {
    args.into_iter()
        .map(|a| match a {
            ChipArg::Host(t) => t,
            ChipArg::Device(_) => unreachable!("host tensors only"),
        })
        .collect()
}

/// One host-only hbg bind of `args` (built and measured, nothing run on the device): its report.
///
/// # Panics
///
/// If the bind fails: the suites and benchmarks that call this bind scenes that must bind.
pub fn host_only_bind(
    w: &mut ChipWorker,
    h: CallableHandle,
    args: &mut [ChipArg],
    scalars: &[u64],
) -> BindReport {
    w.run(h, args, scalars, RunOptions::host_only_hbg())
        .expect("a host-only bind")
        .bind
        .expect("an hbg run reports its bind")
}
