//! The counting global allocator of the tests and benchmarks that count heap allocations. A
//! `#[global_allocator]` has to be declared in each binary, so each one that counts holds
//! `#[global_allocator] static GLOBAL: Counting = Counting;` and reads the whole process's
//! count ([`process`]) or the calling thread's ([`thread`], what
//! `simpler_host::alloc_count::install` takes), and the bytes the calling thread asked for
//! ([`thread_bytes`]).
// The one place in this crate with `unsafe`: implementing `GlobalAlloc` requires it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Forwards to the system allocator and counts every allocation, reallocation included.
pub struct Counting;

static PROCESS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD: Cell<u64> = const { Cell::new(0) };
    static THREAD_BYTES: Cell<u64> = const { Cell::new(0) };
}

fn note(bytes: usize) {
    PROCESS.fetch_add(1, Ordering::Relaxed);
    // A thread being torn down has no slot left; the process count still has it.
    let _ = THREAD.try_with(|c| c.set(c.get() + 1));
    let _ = THREAD_BYTES.try_with(|c| c.set(c.get() + bytes as u64));
}

/// Allocations the whole process made so far (under [`Counting`]).
pub fn process() -> u64 {
    PROCESS.load(Ordering::Relaxed)
}

/// Allocations the calling thread made so far (under [`Counting`]).
pub fn thread() -> u64 {
    THREAD.with(Cell::get)
}

/// Bytes the calling thread's allocations asked for so far (under [`Counting`]; a reallocation
/// counts its new size).
pub fn thread_bytes() -> u64 {
    THREAD_BYTES.with(Cell::get)
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; counting touches only an atomic and `const`-initialised
// thread-local `Cell`s, none of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}
