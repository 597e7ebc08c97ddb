//! `simpler-core`: the bytes the host and the device agree on, and the checks that guard them.
//!
//! Everything here is `#![no_std]` and allocation-free, so the same code runs in AICPU firmware,
//! in the simulator and on the host while it builds images. Every struct that crosses the
//! host-device or process boundary is `#[repr(C)]`, [`bytemuck::Pod`], and has its size and every
//! field offset asserted at compile time, so a layout drift is a build error, not a corrupt run.
//!
//! The three tensor types, and the one way each becomes the next:
//!
//! ```text
//!  wire Tensor (144 B, address-free)        -- crosses processes inside the TaskArgs blob
//!     | read_blob(..).tensor(i)             -- the only decode path; validates -> ValidTensor
//!     | ChipTensor::materialize(t, base)    -- resolved base + byte offset, strides kept
//!  ChipTensor (72 B, resolved buffer + view) -- the chip entry argument (ChipStorageTaskArgs)
//!     | TaskTensor::adopt(c)                -- the runtime's adoption point (set_orch_args)
//!  TaskTensor (128 B, + owner, version, caches) -- what orchestration, TensorMap and kernels see
//! ```
//!
//! ## The wire and the chip entry
//!
//! - [`dtype`]: `DataType` and element sizes.
//! - [`bf16`]: `Bf16`, with round-to-nearest-even conversion from `f32`.
//! - [`arg`]: argument tags, directions, access modes and the access-permission matrix.
//! - [`buffer`]: `CanonicalIdentity`, `BufferDescriptor`, address spaces, backends and descriptor
//!   validation.
//! - [`tensor`]: the address-free wire `Tensor` and its validation gate, `ValidTensor`.
//! - [`blob`]: the `TaskArgs` blob: `write_blob`, `read_blob` and the validating `TaskArgsView`.
//! - [`chip`]: `ChipTensor`, the chip entry argument, and its materialization from a wire tensor.
//! - [`args`]: fixed-capacity argument containers: `ChipStorageTaskArgs`, `OrchArgs`,
//!   `CoreTaskArgs`.
//! - [`limits`]: numeric limits of the ABI: dimensions, argument caps, mailbox room.
//! - [`geometry`]: saturating extent arithmetic and the geometry checks every tensor type shares.
//!
//! ## Tensors and dependencies
//!
//! - [`task_tensor`]: `TaskTensor`, the runtime's working tensor, `TaskId`, and the adoption point.
//! - [`overlap`]: whether two views of one buffer may share an element (range test, exact box
//!   test).
//! - [`tensor_map`]: the TensorMap: the live writers of every tracked region.
//! - [`deps`]: edge kinds, explicit dependencies and the per-tag dependency rules.
//! - [`predicate`]: dispatch predicates: run a task only if one element compares true.
//! - [`cores`]: core types, the per-task active-core mask and the resource shapes derived from it.
//!
//! ## The runtime's shared state
//!
//! - [`orchestrator`]: the orchestrator's submit path.
//! - [`sched`]: the state shared by the orchestrator and the schedulers, and the slot transitions.
//! - [`slot`]: task slots: the state machine, its counters and its lock.
//! - [`ring`]: ring selection, the heap ring, and the flow-control words shared with schedulers.
//! - [`edge`]: the dependency pool's cells and cursor.
//! - [`ready_queue`]: bounded lock-free MPMC ready queues (Vyukov).
//! - [`scope`]: the scope stack.
//! - [`layout`]: carving typed arrays out of caller-provided memory: `Layout`, `Carver`.
//! - [`sync`]: the atomics and spin hint of all shared state: `core`'s normally, the loom model
//!   checker's under `cfg(loom)`.
//!
//! ## Images the host builds
//!
//! - [`image`]: the compact live image: a state built in one memory, shipped field by field into
//!   another.
//! - [`graph`]: graph Definitions: the recorded-body image, its builder and validating reader, key
//!   hashing.
//!
//! ## Device and level-3 plumbing
//!
//! - [`handshake`]: the AICPU-AICore handshake: register values, tokens and the dispatch payload.
//! - [`boot`]: the firmware's boot table and the cores' register blocks and mailboxes.
//! - [`gm`]: device global memory access: the `Gm` trait kernels and the AICPU read and write
//!   through.
//! - [`mailbox`]: the L3 mailbox layout and the records that travel in it.
//! - [`doorbell`]: the L3 doorbell: a ring count to block on, generic over the futex that blocks.
#![no_std]

#[cfg(test)]
extern crate std;

#[cfg(target_endian = "big")]
compile_error!("the wire and image layouts are little-endian; big-endian targets are unsupported");

pub mod arg;
pub mod args;
pub mod bf16;
pub mod blob;
pub mod boot;
pub mod buffer;
pub mod chip;
pub mod cores;
pub mod deps;
pub mod doorbell;
pub mod dtype;
pub mod edge;
pub mod geometry;
pub mod gm;
pub mod graph;
pub mod handshake;
pub mod image;
pub mod layout;
pub mod limits;
pub mod mailbox;
pub mod orchestrator;
pub mod overlap;
pub mod predicate;
pub mod ready_queue;
pub mod ring;
pub mod sched;
pub mod scope;
pub mod slot;
pub mod sync;
pub mod task_tensor;
pub mod tensor;
pub mod tensor_map;

pub use arg::{access_permits, Access, AccessMode, ArgDirection, TensorArgType};
pub use args::{ArgsError, ChipStorageTaskArgs, CoreTaskArgs, EntryError, OrchArgs};
pub use bf16::Bf16;
pub use blob::{blob_size, read_blob, write_blob, BlobError, TaskArgsView};
pub use buffer::{AddressSpace, BackendKind, BufferDescriptor, CanonicalIdentity, DescriptorError};
pub use chip::{BufferHandle, ChipTensor, MaterializeError, Resolved};
pub use cores::{ActiveMask, CoreType, ResourceShape};
pub use dtype::DataType;
pub use geometry::GeometryError;
pub use task_tensor::{AdoptError, TaskId, TaskTensor, ViewError};
pub use tensor::{Tensor, TensorError, ValidTensor};
