//! Model of GM's access ledger (`sim/src/ledger.rs`): an access the ledger admits never runs
//! beside one it conflicts with.
//!
//! Each thread registers an access to overlapping words, makes it if admitted (plain loads and
//! stores of loom's checked cells for a bulk access, atomic ones for an atomic access) and frees
//! it. Loom reports a plain access that is not ordered with another access to the same cell, so
//! an admission the ledger should have refused fails the model; the ledger's own atomics are
//! loom's (through `simpler_core::sync`), and under loom the ledger has two lines of two entries.
//! Loom treats `SeqCst` loads and stores as acquire and release only, without their single
//! order, so under loom the ledger puts a `SeqCst` fence between publishing an entry and
//! reading the others, where the real build relies on that order (the ledger's module docs):
//! the models check the rest of its argument, resting on the fence.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p
//! simpler-sim --test loom_ledger -- --nocapture`
#![cfg(loom)]
// The model makes the plain accesses the ledger guards, through loom's checked cells.
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use simpler_core::sync::Ordering;
use simpler_sim::ledger::{Access, Ledger, Refusal};
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

/// The words two accesses share: one checked plain cell and one atomic word over the same
/// "bytes" (loom checks plain accesses of each against every other access of it).
struct Words {
    ledger: Ledger,
    plain: UnsafeCell<u64>,
    word: AtomicU64,
}

/// What one thread does: register `access` to words `range` from line `home`; if admitted,
/// touch the shared words as that access would; free the entry. Whether it was admitted.
fn access(w: &Words, home: usize, range: (u64, u64), access: Access) -> bool {
    access_in(w, home, range, access, false)
}

/// [`access`], in an entry the thread owns ([`Ledger::own`]) when `owned` (an atomic access),
/// as a device thread's arena registers its small accesses; the entry is disowned after.
fn access_in(w: &Words, home: usize, range: (u64, u64), access: Access, owned: bool) -> bool {
    let own = owned.then(|| w.ledger.own(home).expect("an atomic entry is free"));
    let registered = match own {
        Some(index) => w.ledger.register_owned(index, range.0, range.1, access),
        None => w.ledger.register(home, range.0, range.1, access),
    };
    let held = match registered {
        Ok(h) => h,
        Err(Refusal::Conflict) => {
            if let Some(index) = own {
                w.ledger.disown(index);
            }
            return false;
        }
        Err(Refusal::Full) => panic!("a ledger of four entries a side is never full here"),
    };
    match access {
        Access::BulkWrite => w.plain.with_mut(|p| {
            // SAFETY: the arena's plain copy over registered words, modelled: `p` is the
            // cell's own pointer, and loom fails the model if another access is not ordered
            // with this one.
            unsafe { *p += 1 }
        }),
        Access::BulkRead => {
            w.plain.with(|p| {
                // SAFETY: as for the write, a plain load of the checked cell.
                unsafe { core::ptr::read(p) }
            });
            // SAFETY: a plain load of the atomic word; loom checks that no atomic store to it
            // is concurrent.
            unsafe { w.word.unsync_load() };
        }
        Access::AtomicWrite => w.word.store(1, Ordering::Relaxed),
        Access::AtomicRead => {
            w.word.load(Ordering::Relaxed);
        }
    }
    // As the arena's copies free theirs.
    match own {
        Some(index) => {
            w.ledger.release_owned(held);
            w.ledger.disown(index);
        }
        None => w.ledger.release_own(held),
    }
    true
}

/// Explores two threads making `a` and `b` (line, words, access), at most three preemptions
/// per execution (`LOOM_MAX_PREEMPTIONS` overrides), and prints the interleaving count.
/// Returns how many executions admitted both, and how many there were.
fn check(
    name: &'static str,
    a: (usize, (u64, u64), Access),
    b: (usize, (u64, u64), Access),
) -> (usize, usize) {
    check_in(name, (a, false), (b, false))
}

/// [`check`], each side registering in an owned entry where its flag says.
fn check_in(
    name: &'static str,
    (a, a_owned): ((usize, (u64, u64), Access), bool),
    (b, b_owned): ((usize, (u64, u64), Access), bool),
) -> (usize, usize) {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let both = std::sync::Arc::new(AtomicUsize::new(0));
    let (counted, admitted) = (runs.clone(), both.clone());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(3));
    builder.check(move || {
        counted.fetch_add(1, StdOrdering::Relaxed);
        let w = Arc::new(Words {
            ledger: Ledger::new(),
            plain: UnsafeCell::new(0),
            word: AtomicU64::new(0),
        });
        let other = w.clone();
        let t = loom::thread::spawn(move || access_in(&other, b.0, b.1, b.2, b_owned));
        let first = access_in(&w, a.0, a.1, a.2, a_owned);
        let second = t.join().unwrap();
        if first && second {
            admitted.fetch_add(1, StdOrdering::Relaxed);
        }
        // Every entry is free again, whatever was admitted.
        assert_eq!(w.ledger.held(), 0, "{name}: an entry outlived its access");
    });
    println!(
        "loom {name} {} interleavings",
        runs.load(StdOrdering::Relaxed)
    );
    (
        both.load(StdOrdering::Relaxed),
        runs.load(StdOrdering::Relaxed),
    )
}

#[test]
fn two_overlapping_bulk_writes_never_run_together() {
    // Each admitted alone in some execution, one after the other in others (so freeing is
    // checked too): loom fails the model on any execution where both plain writes race.
    let (both, _) = check(
        "ledger_bulk_writes",
        (0, (0, 4), Access::BulkWrite),
        (1, (2, 6), Access::BulkWrite),
    );
    assert!(both > 0, "some execution runs the two one after the other");
}

#[test]
fn a_bulk_read_never_runs_beside_an_atomic_write() {
    // The atomic side reads only the bulk table, through the held-bulk mask.
    let (both, _) = check(
        "ledger_bulk_read_atomic_write",
        (0, (0, 1), Access::AtomicWrite),
        (1, (0, 2), Access::BulkRead),
    );
    assert!(both > 0, "some execution runs the two one after the other");
}

#[test]
fn two_atomic_writes_and_two_bulk_reads_are_both_admitted() {
    // The pairs that never race are never refused, in any interleaving.
    for (name, kind) in [
        ("ledger_atomic_writes", Access::AtomicWrite),
        ("ledger_bulk_reads", Access::BulkRead),
    ] {
        let (both, runs) = check(name, (0, (1, 3), kind), (1, (0, 2), kind));
        assert_eq!(both, runs, "{name}: refused in some execution");
    }
}

#[test]
fn a_bulk_read_never_runs_beside_an_owned_atomic_write() {
    // The owned entry is published by a swap, as while the ledger is heavy (it is never light
    // under loom, which cannot model the barrier light mode rests on).
    let (both, _) = check_in(
        "ledger_bulk_read_owned_write",
        ((0, (0, 1), Access::AtomicWrite), true),
        ((1, (0, 2), Access::BulkRead), false),
    );
    assert!(both > 0, "some execution runs the two one after the other");
}
