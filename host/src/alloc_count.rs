//! Heap allocations per bind phase. Counting needs a counting `#[global_allocator]`, which
//! only a binary can install; such a program hands this module a reader of the calling
//! thread's count ([`install`]), and an hbg bind reads it at every phase boundary (on the
//! binding thread) and around every recording (on the recorder thread), so a
//! [`crate::hbg::BindReport`] says which phase allocated and whether the recording path did.
//! Without a reader every count is 0.

use std::sync::OnceLock;

static READER: OnceLock<fn() -> u64> = OnceLock::new();

/// Installs `reader`, which returns the calling thread's allocations so far; false if a
/// reader was installed already (the first one stays).
pub fn install(reader: fn() -> u64) -> bool {
    READER.set(reader).is_ok()
}

/// The calling thread's allocations so far, or 0 without a reader.
pub(crate) fn now() -> u64 {
    READER.get().map_or(0, |read| read())
}
