//! The AICPU ↔ AICore handshake, and the loop body every core runs.
//!
//! Each core has two registers. The AICPU writes the **task register**: a dispatch token
//! (a per-core sequence number below [`RESERVED_BASE`]), or the [`EXIT_SIGNAL`]. The core
//! writes the **status register**: the token with bit 31 clear when it has taken the task
//! (ACK) and set when it has finished it (FIN), or [`AICORE_IDLE`] after start-up and
//! [`AICORE_EXITED`] when it stops. A kernel failure is written to the core's error word before
//! its FIN.
//!
//! The task's payload sits in one of two [`DispatchPayload`] buffers per core, chosen by the
//! token's parity, so the AICPU can prepare the next task while the core still reads the
//! current one.
//!
//! ```text
//!   status:  IDLE ──(token t written)──▶ ACK|t ──(kernel returns)──▶ FIN|t ──(token t+1)──▶ ACK|t+1 …
//! ```
//!
//! The AICore's loop body that follows this protocol is `simpler_aicore::core_loop`.

use crate::args::CoreTaskArgs;
use bytemuck::{Pod, Zeroable};

/// Bit 31 of the status register: set for FIN, clear for ACK.
pub const FIN_BIT: u32 = 0x8000_0000;
/// Tokens at or above this value are reserved; dispatch tokens skip them.
pub const RESERVED_BASE: u32 = 0x7FFF_FFF0;
/// Task register: the AICPU asks the core to stop.
pub const EXIT_SIGNAL: u32 = 0x7FFF_FFF0;
/// Task register: the AICPU has opened the core's register window, no task yet.
pub const AICPU_IDLE: u32 = 0x7FFF_FFFD;
/// Status register: the core has exited.
pub const AICORE_EXITED: u32 = 0x7FFF_FFFE;
/// Status register: the core is up and has no task.
pub const AICORE_IDLE: u32 = 0x7FFF_FFFF;

/// The token that follows `token`, skipping the reserved values.
pub const fn next_token(token: u32) -> u32 {
    let next = token.wrapping_add(1) & !FIN_BIT;
    if next >= RESERVED_BASE {
        0
    } else {
        next
    }
}

/// What a core needs to run one task. Plain data, written by the AICPU before the token.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct DispatchPayload {
    /// Index into the callable's kernel table.
    pub kernel_id: u32,
    /// Block index in an SPMD launch.
    pub block_idx: u32,
    /// Blocks in the launch.
    pub block_num: u32,
    /// 0 on AIC and AIV0, 1 on AIV1.
    pub sub_block: u32,
    /// The task's arguments.
    pub args: CoreTaskArgs,
}

crate::assert_layout!(DispatchPayload, size = 16 + 4232);

/// Error word value of a core whose last task succeeded.
pub const NO_ERROR: u32 = 0;
/// Error word: the payload named a kernel id outside the table.
pub const ERR_UNKNOWN_KERNEL: u32 = 1;
/// Error word: the kernel rejected its arguments.
pub const ERR_BAD_ARGUMENTS: u32 = 2;
/// Error word: the data did not fit the local buffer.
pub const ERR_TOO_LARGE: u32 = 3;
/// Error word: a tensor named memory outside GM.
pub const ERR_MEMORY: u32 = 4;
/// Error word: a kernel-specific code follows in the detail word.
pub const ERR_KERNEL_CODE: u32 = 5;
/// Error word: a GM access overlapped another core's access in progress in a way that would
/// race (`GmFaultKind::Conflict`), and the platform refused it.
pub const ERR_GM_CONFLICT: u32 = 6;

/// The name of error word `code`, as messages print it; `None` for [`NO_ERROR`] and for a
/// code this ABI does not define.
pub const fn error_name(code: u32) -> Option<&'static str> {
    match code {
        ERR_UNKNOWN_KERNEL => Some("unknown kernel id"),
        ERR_BAD_ARGUMENTS => Some("bad arguments"),
        ERR_TOO_LARGE => Some("data too large for the local buffer"),
        ERR_MEMORY => Some("memory access outside GM"),
        ERR_KERNEL_CODE => Some("kernel-specific failure"),
        ERR_GM_CONFLICT => Some("GM access in conflict with another in progress"),
        _ => None,
    }
}

/// What the detail word holds next to error word `code`; `None` where [`error_name`] is.
pub const fn error_detail(code: u32) -> Option<&'static str> {
    match code {
        ERR_UNKNOWN_KERNEL => Some("the kernel id the payload named"),
        ERR_BAD_ARGUMENTS => Some("the tensor at fault, or the tensor count when too few"),
        ERR_TOO_LARGE => Some("elements needed"),
        ERR_MEMORY => Some("low 32 bits of the address"),
        ERR_KERNEL_CODE => Some("the kernel's own code"),
        ERR_GM_CONFLICT => Some("low 32 bits of the address"),
        _ => None,
    }
}
