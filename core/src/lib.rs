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
//! Modules:
#![no_std]

#[cfg(test)]
extern crate std;

#[cfg(target_endian = "big")]
compile_error!("the wire and image layouts are little-endian; big-endian targets are unsupported");

// Argument tags, directions, access modes and the access-permission matrix.
pub mod arg;
// Fixed-capacity argument containers: `ChipStorageTaskArgs`, `OrchArgs`, `CoreTaskArgs`.
pub mod args;
// The `TaskArgs` blob: `write_blob`, `read_blob` and the validating `TaskArgsView`.
pub mod blob;
// `Bf16`, with round-to-nearest-even conversion from `f32`.
pub mod bf16;
// `CanonicalIdentity`, `BufferDescriptor`, address spaces, backends and descriptor validation.
pub mod buffer;
// `ChipTensor`, the chip entry argument, and its materialization from a wire tensor.
pub mod chip;
// Core types, the per-task active-core mask and the resource shapes derived from it.
pub mod cores;
// Edge kinds, explicit dependencies and the per-tag dependency rules.
pub mod deps;
// The L3 doorbell: a ring count to block on, generic over the futex that blocks.
pub mod doorbell;
// `DataType` and element sizes.
pub mod dtype;
// The dependency pool's cells and cursor.
pub mod edge;
// Device global memory access: the `Gm` trait kernels and the AICPU read and write through.
pub mod gm;
// The AICPU-AICore handshake: register values, tokens and the dispatch payload.
pub mod handshake;
// Saturating extent arithmetic and the geometry checks every tensor type shares.
pub mod geometry;
// Graph Definitions: the recorded-body image, its builder and validating reader, key hashing.
pub mod graph;
// The compact live image: a state built in one memory, shipped field by field into another.
pub mod image;
// Carving typed arrays out of caller-provided memory: `Layout`, `Carver`.
pub mod layout;
// The L3 mailbox layout and the records that travel in it.
pub mod mailbox;
// Numeric limits of the ABI: dimensions, argument caps, mailbox room.
pub mod limits;
// The orchestrator's submit path.
pub mod orchestrator;
// Whether two views of one buffer may share an element (range test, exact box test).
pub mod overlap;
// Dispatch predicates: run a task only if one element compares true.
pub mod predicate;
// Bounded lock-free MPMC ready queues (Vyukov).
pub mod ready_queue;
// Ring selection, the heap ring, and the flow-control words shared with schedulers.
pub mod ring;
// The state shared by the orchestrator and the schedulers, and the slot transitions.
pub mod sched;
// The scope stack.
pub mod scope;
// The atomics and spin hint of all shared state: `core`'s normally, the loom model checker's
// under `cfg(loom)`.
pub mod sync;
// Task slots: the state machine, its counters and its lock.
pub mod slot;
// `TaskTensor`, the runtime's working tensor, `TaskId`, and the adoption point.
pub mod task_tensor;
// The address-free wire `Tensor` and its validation gate, `ValidTensor`.
pub mod tensor;
// The TensorMap: the live writers of every tracked region.
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
