//! The access ledger: which GM word ranges are being accessed right now, and how, so that the arena
//! can move whole words with plain memory copies and lend ranges as `&[f32]` / `&mut [f32]` without
//! two threads ever racing on a byte.
//!
//! Every access through a [`GmArena`](crate::gm::GmArena) registers its word range in one entry of
//! the ledger for as long as it runs: a copy for the length of the copy, a lease for the life of
//! its guard. An entry says whether the access writes and whether it is *bulk* (plain, non-atomic
//! loads and stores: a copy of whole words, or a lease) or *atomic* (the arena's word-wise
//! atomics). Two accesses **conflict** when their ranges overlap, at least one writes, and at least
//! one is bulk: exactly the pairs that would be a data race (two atomic accesses never race, two
//! reads never race). A registration that finds a conflicting entry withdraws its own and is
//! refused; the arena reports it as a [`GmFaultKind::Conflict`](simpler_core::gm::GmFaultKind).
//!
//! The runtime never runs two tasks whose tensors conflict (its dependency tracking orders them),
//! so a refusal means a kernel touched memory outside its task's tensors, or a manual dependency
//! was missing: a bug in device code, reported instead of becoming undefined behaviour in the
//! simulator.
//!
//! ## Layout
//!
//! Two tables, one for atomic accesses and one for bulk ones, each of [`LINES`] cache lines of
//! [`ENTRIES`] 64-bit entries. An arena handle has a home line in each (the device gives each of
//! its threads its own) and claims a free entry there with a compare-and-swap, so claiming stays
//! correct even when one handle is shared by threads; a full home line spills to the next ones. A
//! bulk registration reads both tables; an atomic one only the bulk table (two atomic accesses
//! never conflict), which changes only as bulk accesses start and end, so a small atomic access
//! does not read the lines other threads' atomic accesses keep writing. An entry packs `start word
//! (31 bits) | end word (31 bits) | bulk | write`; zero is free (an empty range conflicts with
//! nothing). Ranges are in words of the arena, so GM of fewer than 2^31 words (16 GiB) has a
//! ledger; a larger GM has none and moves every word atomically.
//!
//! ## Memory ordering
//!
//! Registering is the store-buffering pattern (Dekker): publish one's own entry, then read every
//! other it could conflict with (every pair that can conflict has a bulk member, whose table both
//! sides read, and the bulk side reads both tables). A bulk registration publishes its entry and
//! then its bit in the held-bulk mask; an atomic one publishes its entry and then reads the mask
//! and the entries it names. Every one of these accesses (the claim's compare-and-swap, the
//! mask's read-modify-writes, every load of a scan) is `SeqCst`, so they all lie in one total
//! order consistent with each thread's program order: of two registrations at the same time,
//! the one whose publishing comes second in that order reads what the other published. So of
//! an atomic and a bulk registration, either the atomic one's mask load reads the bulk one's
//! bit (and then, the bit being set after the bulk entry was published, it reads that entry
//! too), or the bulk one's scan reads the atomic one's entry; and of two bulk ones, at least
//! one reads the other's entry. A registration that reads a conflicting entry withdraws its
//! own.
//!
//! Freeing clears the entry, then the bit, both releasing; the scans' loads acquire. A scan that
//! reads an entry freed (or reused for a range that does not conflict) thus synchronizes with the
//! freeing thread: the accesses the freed entry covered happen before everything the scanning
//! thread does after its scan. So a bulk access either is refused or is ordered with every
//! conflicting access, before or after it: never concurrent with it.
//!
//! No fence stands between publishing and reading: on x86-64 the claim's compare-and-swap is
//! a locked instruction, itself a full barrier, and a fence after it would put a second one on
//! every small access, the most frequent kind. The model checker cannot check this
//! argument as it stands: it treats a `SeqCst` access as acquire and release only, without the
//! single order. Under it (`cfg(loom)`) each registration issues a `SeqCst` fence between
//! publishing and reading, which gives the same guarantee by the fences' order, and
//! `sim/tests/loom_ledger.rs` checks everything else (which entries each side publishes and
//! reads, the frees' synchronization) on a ledger of two lines of two entries (what a
//! registration reads grows with the entries, and the argument does not depend on their
//! number).

#[cfg(loom)]
use simpler_core::sync::fence;
use simpler_core::sync::{AtomicU64, Ordering};

/// Cache lines of entries: one per thread of a device (its orchestrator, up to six scheduler
/// threads, the host) with no two sharing a line.
#[cfg(not(loom))]
pub const LINES: usize = 8;
/// Under the model checker, a small ledger (every load of a scan is a point it branches at).
#[cfg(loom)]
pub const LINES: usize = 2;

/// Entries per line (one 64-byte cache line of them).
#[cfg(not(loom))]
pub const ENTRIES: usize = 8;
/// Under the model checker, two per line (a full line still spills to the next).
#[cfg(loom)]
pub const ENTRIES: usize = 2;

/// Words an entry can address: a range's end is below this (31 bits).
pub const MAX_WORDS: u64 = 1 << 31;

/// The entry bit of an access that writes.
const WRITE: u64 = 1;
/// The entry bit of a bulk (non-atomic) access.
const BULK: u64 = 2;

/// How an access touches its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Atomic loads.
    AtomicRead,
    /// Atomic stores or compare-and-swaps.
    AtomicWrite,
    /// Plain loads (a copy out, or a lease for reading).
    BulkRead,
    /// Plain stores (a copy in, or a lease for writing).
    BulkWrite,
}

impl Access {
    const fn bits(self) -> u64 {
        match self {
            Self::AtomicRead => 0,
            Self::AtomicWrite => WRITE,
            Self::BulkRead => BULK,
            Self::BulkWrite => BULK | WRITE,
        }
    }
}

/// One line of entries, alone on its cache line.
#[repr(align(64))]
struct Line([AtomicU64; ENTRIES]);

/// The ledger of one GM; every arena over the GM's words shares it.
///
/// Atomic and bulk accesses register in separate tables, so that an atomic access (small and
/// frequent) reads only the bulk table, which changes only when a bulk access or lease starts
/// or ends, and not the lines every other thread's atomic accesses keep writing: two atomic
/// accesses never conflict, so neither needs to see the other.
pub struct Ledger {
    /// The entries of atomic accesses (indices `0..SIDE`).
    atomic: [Line; LINES],
    /// The entries of bulk accesses (indices `SIDE..2 * SIDE`).
    bulk: [Line; LINES],
    /// Which bulk entries are held: bit `i` for entry `SIDE + i`, set after the entry is
    /// claimed and cleared after it is freed, so an atomic registration reads this one word
    /// and only the bulk entries it names (usually none).
    bulk_held: BulkMask,
}

/// [`Ledger::bulk_held`], alone on its cache line: written only as bulk accesses start and
/// end, read by every registration.
#[repr(align(64))]
struct BulkMask(AtomicU64);

/// Entries in each of the two tables.
const SIDE: usize = LINES * ENTRIES;

// The held-bulk mask has a bit per bulk entry.
const _: () = assert!(SIDE <= 64, "one mask bit per bulk entry");

/// An entry held by an access: where it is and what it holds.
#[derive(Debug, PartialEq, Eq)]
pub struct Held {
    /// Line and entry, as one index (`line * ENTRIES + entry`).
    index: usize,
    /// What the entry holds.
    value: u64,
}

impl Held {
    /// The held entry as a lease's two words, `(index, value)`; [`Held::from_parts`] is its
    /// inverse.
    pub fn parts(&self) -> (u32, u64) {
        (self.index as u32, self.value)
    }

    /// The entry [`Held::parts`] named.
    pub fn from_parts((index, value): (u32, u64)) -> Self {
        Self {
            index: index as usize,
            value,
        }
    }
}

/// Why a registration failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another access in progress conflicts with this one.
    Conflict,
    /// Every entry of the ledger is taken.
    Full,
}

/// The entry of `access` to words `start..end` (`start < end < MAX_WORDS`).
fn pack(start: u64, end: u64, access: Access) -> u64 {
    (start << 33) | (end << 2) | access.bits()
}

/// Words `start..end` and the access bits of entry `v`.
fn unpack(v: u64) -> (u64, u64, u64) {
    (v >> 33, (v >> 2) & (MAX_WORDS - 1), v & 3)
}

/// Whether two entries conflict: their ranges overlap, one writes and one is bulk.
fn conflicts(a: u64, b: u64) -> bool {
    let (a0, a1, ak) = unpack(a);
    let (b0, b1, bk) = unpack(b);
    a0 < b1 && b0 < a1 && (ak | bk) & WRITE != 0 && (ak | bk) & BULK != 0
}

impl Ledger {
    /// A ledger with every entry free.
    pub fn new() -> Self {
        let table = || core::array::from_fn(|_| Line(core::array::from_fn(|_| AtomicU64::new(0))));
        Self {
            atomic: table(),
            bulk: table(),
            bulk_held: BulkMask(AtomicU64::new(0)),
        }
    }

    /// Entry `index` of either table (`index < 2 * SIDE`; larger ones wrap).
    fn entry(&self, index: usize) -> &AtomicU64 {
        let index = index % (2 * SIDE);
        let table = if index < SIDE {
            &self.atomic
        } else {
            &self.bulk
        };
        &table[index % SIDE / ENTRIES].0[index % ENTRIES]
    }

    /// Registers `access` to words `start..end` (`start < end < MAX_WORDS`) in a free
    /// entry, trying line `home` first; refused if an entry held by another access conflicts
    /// with it, or if no entry is free.
    pub fn register(
        &self,
        home: usize,
        start: u64,
        end: u64,
        access: Access,
    ) -> Result<Held, Refusal> {
        debug_assert!(
            start < end && end < MAX_WORDS,
            "words {start}..{end} for the ledger"
        );
        let value = pack(start, end, access);
        let bulk = value & BULK != 0;
        let index = self.claim(home, bulk, value).ok_or(Refusal::Full)?;
        let held = Held { index, value };
        if bulk {
            self.bulk_held
                .0
                .fetch_or(1 << (index - SIDE), Ordering::SeqCst);
        }
        // Between publishing and reading, the accesses' single `SeqCst` order keeps the
        // store-buffering pattern sound; the model checker does not have that order, and
        // takes a fence for it (module docs).
        #[cfg(loom)]
        fence(Ordering::SeqCst);
        // A bulk access can conflict with anything: it reads every entry. An atomic one can
        // conflict only with bulk ones: it reads those the mask names.
        let conflict = if bulk {
            (0..2 * SIDE).any(|other| other != index && self.conflicts_with(other, value))
        } else {
            let mut mask = self.bulk_held.0.load(Ordering::SeqCst);
            let mut found = false;
            while mask != 0 && !found {
                let bit = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                found = self.conflicts_with(SIDE + bit, value);
            }
            found
        };
        if conflict {
            self.release(held);
            return Err(Refusal::Conflict);
        }
        Ok(held)
    }

    /// Whether entry `other` holds an access that conflicts with `value`.
    #[inline(always)]
    fn conflicts_with(&self, other: usize, value: u64) -> bool {
        let seen = self.entry(other).load(Ordering::SeqCst);
        seen != 0 && conflicts(value, seen)
    }

    /// Claims a free entry for `value` in the bulk or the atomic table, line `home` first; its
    /// index, or `None` when every entry of that table is taken.
    fn claim(&self, home: usize, bulk: bool, value: u64) -> Option<usize> {
        let table = if bulk { SIDE } else { 0 };
        for line in 0..LINES {
            let base = table + (home + line) % LINES * ENTRIES;
            for index in base..base + ENTRIES {
                let e = self.entry(index);
                if e.load(Ordering::Relaxed) == 0
                    && e.compare_exchange(0, value, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                {
                    return Some(index);
                }
            }
        }
        None
    }

    /// Frees a held entry; an entry that no longer holds what `held` says is left alone (a
    /// key from elsewhere frees nothing).
    pub fn release(&self, held: Held) {
        let freed = self
            .entry(held.index)
            .compare_exchange(held.value, 0, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok();
        if freed && held.index >= SIDE {
            self.bulk_held
                .0
                .fetch_and(!(1 << (held.index - SIDE)), Ordering::SeqCst);
        }
    }

    /// Frees the entry of an access this thread registered and still holds (a copy's, whose
    /// `held` came straight from [`Ledger::register`] and is dropped here): the entry holds
    /// `held`'s value until this store, since a held entry is written by nobody else (a
    /// claim takes only a free entry; [`Ledger::release`] takes only its own value, and no
    /// other key of this value exists). So a release store does what the compare-and-swap
    /// of [`Ledger::release`] does, without a locked instruction on every small access.
    pub fn release_own(&self, held: Held) {
        self.entry(held.index).store(0, Ordering::Release);
        if held.index >= SIDE {
            self.bulk_held
                .0
                .fetch_and(!(1 << (held.index - SIDE)), Ordering::SeqCst);
        }
    }

    /// Entries held right now (for tests and diagnostics).
    pub fn held(&self) -> usize {
        (0..2 * SIDE)
            .filter(|&i| self.entry(i).load(Ordering::SeqCst) != 0)
            .count()
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_the_racing_pairs_only() {
        use Access::*;
        let l = Ledger::new();
        let a = l.register(0, 10, 20, BulkRead).unwrap();
        // Reads beside a bulk read, and anything not overlapping, are fine.
        let b = l.register(1, 15, 25, BulkRead).unwrap();
        let c = l.register(1, 0, 30, AtomicRead).unwrap();
        let d = l.register(2, 30, 40, BulkWrite).unwrap();
        // A write overlapping a bulk read races with it.
        assert_eq!(l.register(3, 19, 20, AtomicWrite), Err(Refusal::Conflict));
        assert_eq!(l.register(3, 0, 11, BulkWrite), Err(Refusal::Conflict));
        // Anything overlapping a bulk write races with it.
        assert_eq!(l.register(3, 39, 41, AtomicRead), Err(Refusal::Conflict));
        assert_eq!(l.register(3, 29, 31, BulkRead), Err(Refusal::Conflict));
        // Two atomic writers never race.
        l.release(a);
        l.release(b);
        l.release(c);
        let e = l.register(0, 10, 20, AtomicWrite).unwrap();
        let f = l.register(1, 10, 20, AtomicWrite).unwrap();
        // A refused registration holds nothing.
        assert_eq!(l.held(), 3);
        for h in [d, e, f] {
            l.release(h);
        }
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn a_full_ledger_refuses_and_a_stale_key_frees_nothing() {
        let l = Ledger::new();
        let held: Vec<Held> = (0..LINES * ENTRIES)
            .map(|i| {
                l.register(0, i as u64, i as u64 + 1, Access::AtomicRead)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            l.register(3, 1000, 1001, Access::AtomicRead),
            Err(Refusal::Full)
        );
        let (index, value) = held[5].parts();
        l.release(Held::from_parts((index, value ^ (1 << 40))));
        assert_eq!(l.held(), SIDE);
        for h in held {
            l.release(Held::from_parts(h.parts()));
        }
        assert_eq!(l.held(), 0);
    }
}
