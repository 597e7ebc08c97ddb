//! Every numeric cap of the ABI in one place, so a limit is named once and enforced by reference.

/// Maximum tensor rank on every tensor type (wire, chip and runtime).
pub const MAX_TENSOR_DIMS: usize = 5;

/// Tensors in one chip entry (`ChipStorageTaskArgs`).
pub const CHIP_MAX_TENSOR_ARGS: usize = 256;
/// Scalars in one chip entry (`ChipStorageTaskArgs`).
pub const CHIP_MAX_SCALAR_ARGS: usize = 128;

/// Tensors one task passes to its kernel (`CoreTaskArgs`).
pub const CORE_MAX_TENSOR_ARGS: usize = 32;
/// Scalars one task passes to its kernel (`CoreTaskArgs`).
pub const CORE_MAX_SCALAR_ARGS: usize = 16;

/// Size of one mailbox frame (three per child: control + two task frames).
pub const MAILBOX_FRAME_SIZE: usize = 65_536;
/// Offset of the TaskArgs blob inside a task frame.
pub const MAILBOX_OFF_TASK_ARGS_BLOB: usize = 1_208;
/// Offset of the sticky shutdown word; the args region ends here on every frame.
pub const MAILBOX_OFF_SHUTDOWN: usize = 65_224;
/// Room for one TaskArgs blob in a mailbox task frame: 64,016 bytes.
pub const MAILBOX_ARGS_CAPACITY: usize = MAILBOX_OFF_SHUTDOWN - MAILBOX_OFF_TASK_ARGS_BLOB;

static_assertions::const_assert_eq!(MAILBOX_ARGS_CAPACITY, 64_016);
// A chip entry at its full cap always fits one mailbox frame.
static_assertions::const_assert!(
    crate::blob::HEADER_BYTES
        + CHIP_MAX_TENSOR_ARGS * crate::blob::TENSOR_BYTES
        + CHIP_MAX_SCALAR_ARGS * crate::blob::SCALAR_BYTES
        <= MAILBOX_ARGS_CAPACITY
);
