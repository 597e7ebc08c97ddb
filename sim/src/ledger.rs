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
//! correct even when one handle is shared by threads; a full home line spills to the next ones.
//! A device thread's own arena also holds one atomic entry for its life (light mode, below),
//! idle (a range that overlaps nothing) between its small accesses. A
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
//! ## Light mode
//!
//! A device thread's small accesses register in an entry it *owns* ([`Ledger::own`], through
//! [`GmWords::arena_owned`](crate::gm::GmWords::arena_owned)): claimed once, idle between
//! accesses, written only by its thread, so publishing a range there is a store, not a
//! claim. While the ledger is *light* ([`Ledger::lighten`], at each run's start) that store
//! is published with no barrier at all: the owned registration reads the mode, stores its
//! entry and reads the mask, with nothing but the compiler kept from reordering them. Before
//! a bulk registration reads the entries, it makes the ledger heavy: it marks the mode
//! switching and runs Linux's `membarrier` (private expedited), which makes every thread of
//! the process that is running execute a full barrier, and only then marks it heavy. For a
//! light registration, that barrier falls either after its entry store, and the bulk scan
//! (which follows the `membarrier` call, its own or the one that made the mode heavy) reads
//! the entry; or before its mask load, which then reads the bulk entry's bit, set before
//! the call, unless the mode load before it already read the switch and took the heavy path.
//! While the mode is not light, an owned registration publishes its entry with a `SeqCst`
//! swap (a locked instruction) and reads as every other registration does. Resetting the mode
//! to light starts a new epoch; a bulk registration checks after its scan that the epoch it
//! relied on is still current and not light, and otherwise scans again the same way: a light
//! registration of a later epoch read that reset, which in the `SeqCst` order of the mode's
//! and the mask's accesses comes after the bulk registration's check, and so after its bit.
//! Where `membarrier` is missing (another OS, an old kernel, or a sandbox that refuses it)
//! and under the model checker, the ledger is never light.
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
use std::sync::atomic::compiler_fence;

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

/// An owned entry while its owner has no access in progress: not zero, so no claim takes it,
/// and a range that overlaps nothing (it starts past its end).
const IDLE: u64 = (MAX_WORDS - 1) << 33;

/// [`Ledger::mode`]'s state, its low two bits; the bits above count the times it was made
/// light (its epoch).
const STATE: u64 = 3;
/// Owned atomic registrations need no barrier: a bulk registration first makes every thread
/// run one ([`heavy_barrier`]).
const LIGHT: u64 = 0;
/// A bulk registration is making the mode heavy: owned registrations take the barrier.
const SWITCHING: u64 = 1;
/// Owned atomic registrations take a barrier, as every other registration does.
const HEAVY: u64 = 2;

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
    bulk_held: LineWord,
    /// Whether owned atomic registrations may skip their barrier (the module docs' *light
    /// mode*): the state and epoch, alone on a cache line, read by every owned registration
    /// and written only as the mode changes.
    mode: LineWord,
}

/// A word alone on its cache line ([`Ledger::bulk_held`], written only as bulk accesses start
/// and end and read by every registration; [`Ledger::mode`]).
#[repr(align(64))]
struct LineWord(AtomicU64);

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
            bulk_held: LineWord(AtomicU64::new(0)),
            mode: LineWord(AtomicU64::new(if heavy_barrier_available() {
                LIGHT
            } else {
                HEAVY
            })),
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
        // A bulk access can conflict with anything: it reads every entry, once every light
        // registration in flight is published (module docs), and again if the mode was made
        // light meanwhile. An atomic one can conflict only with bulk ones: it reads those the
        // mask names.
        let conflict = if bulk {
            loop {
                let relied = self.make_heavy();
                let found =
                    (0..2 * SIDE).any(|other| other != index && self.conflicts_with(other, value));
                let now = self.mode.0.load(Ordering::SeqCst);
                if now >> 2 == relied >> 2 && now & STATE != LIGHT {
                    break found;
                }
            }
        } else {
            self.bulk_conflict(value)
        };
        if conflict {
            self.release(held);
            return Err(Refusal::Conflict);
        }
        Ok(held)
    }

    /// Whether a bulk entry the held-bulk mask names conflicts with `value`.
    #[inline(always)]
    fn bulk_conflict(&self, value: u64) -> bool {
        let mut mask = self.bulk_held.0.load(Ordering::SeqCst);
        let mut found = false;
        while mask != 0 && !found {
            let bit = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            found = self.conflicts_with(SIDE + bit, value);
        }
        found
    }

    /// Makes the mode heavy if it is not, after every thread has run a barrier (so every
    /// light registration made before is published); the mode it relied on, whose epoch a
    /// bulk scan checks again after it has read the entries.
    fn make_heavy(&self) -> u64 {
        let m = self.mode.0.load(Ordering::SeqCst);
        if m & STATE == HEAVY {
            return m;
        }
        let epoch = m & !STATE;
        if m & STATE == LIGHT {
            // Losing the race to another switch, or to a reset, is fine: the barrier below is
            // run either way, and the caller checks the epoch after its scan.
            let _ = self.mode.0.compare_exchange(
                m,
                epoch | SWITCHING,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        heavy_barrier();
        let _ = self.mode.0.compare_exchange(
            epoch | SWITCHING,
            epoch | HEAVY,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        epoch | HEAVY
    }

    /// Returns the mode to light (a new epoch), where the platform has the barrier that
    /// light registrations need; the next bulk registration pays for it with one process-wide
    /// barrier (the module docs). Correct at any time; meant for the start of a run, after
    /// the host's copies made the mode heavy.
    pub fn lighten(&self) {
        if !heavy_barrier_available() {
            return;
        }
        let mut m = self.mode.0.load(Ordering::SeqCst);
        loop {
            if m & STATE == LIGHT {
                return;
            }
            let next = (m & !STATE).wrapping_add(STATE + 1) | LIGHT;
            match self
                .mode
                .0
                .compare_exchange(m, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return,
                Err(now) => m = now,
            }
        }
    }

    /// Whether owned atomic registrations skip their barrier right now (for tests).
    pub fn is_light(&self) -> bool {
        self.mode.0.load(Ordering::SeqCst) & STATE == LIGHT
    }

    /// Claims an atomic entry for one thread's atomic accesses, line `home` first, holding
    /// it idle until [`Ledger::disown`]; `None` when the atomic table is full. Only that
    /// thread may register through it ([`Ledger::register_owned`]).
    pub fn own(&self, home: usize) -> Option<usize> {
        self.claim(home, false, IDLE)
    }

    /// Frees an entry [`Ledger::own`] claimed, with no access of its owner in progress.
    pub fn disown(&self, index: usize) {
        self.entry(index).store(0, Ordering::Release);
    }

    /// Registers an atomic `access` (not bulk) to words `start..end` in the owned entry
    /// `index`. In light mode the entry is published with a plain store and no barrier: a
    /// bulk registration makes every thread run one first. Only the thread that owns the
    /// entry calls this, and never with one of its own registrations in it still held
    /// (accesses do not nest), so no other store to the entry can be lost; freed with
    /// [`Ledger::release_owned`].
    #[inline(always)]
    pub fn register_owned(
        &self,
        index: usize,
        start: u64,
        end: u64,
        access: Access,
    ) -> Result<Held, Refusal> {
        debug_assert!(
            start < end && end < MAX_WORDS && access.bits() & BULK == 0,
            "words {start}..{end} for an owned entry"
        );
        let value = pack(start, end, access);
        let entry = self.entry(index);
        if self.mode.0.load(Ordering::SeqCst) & STATE == LIGHT {
            entry.store(value, Ordering::Relaxed);
            // Only the compiler is kept from moving the store past the mask's load; the CPU
            // may, and a bulk registration's barrier on this thread covers that (module docs).
            compiler_fence(Ordering::SeqCst);
        } else {
            entry.swap(value, Ordering::SeqCst);
            #[cfg(loom)]
            fence(Ordering::SeqCst);
        }
        let held = Held { index, value };
        if self.bulk_conflict(value) {
            self.release_owned(held);
            return Err(Refusal::Conflict);
        }
        Ok(held)
    }

    /// Ends an access registered with [`Ledger::register_owned`]: its entry idle again.
    #[inline(always)]
    pub fn release_owned(&self, held: Held) {
        self.entry(held.index).store(IDLE, Ordering::Release);
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

    /// Entries holding an access right now (for tests and diagnostics); an owned entry
    /// while idle holds none.
    pub fn held(&self) -> usize {
        (0..2 * SIDE)
            .filter(|&i| !matches!(self.entry(i).load(Ordering::SeqCst), 0 | IDLE))
            .count()
    }
}

/// Whether [`heavy_barrier`] works here: on Linux, once the process has registered for
/// `membarrier`'s private expedited command (asked once); never under the model checker,
/// which cannot model it, so there the mode stays heavy.
fn heavy_barrier_available() -> bool {
    #[cfg(all(target_os = "linux", not(loom)))]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            membarrier(MEMBARRIER_REGISTER_PRIVATE_EXPEDITED)
                && membarrier(MEMBARRIER_PRIVATE_EXPEDITED)
        })
    }
    #[cfg(not(all(target_os = "linux", not(loom))))]
    false
}

/// Runs a full memory barrier on every thread of the process that is running now (the
/// others run one when next scheduled): what lets light registrations skip theirs. Only
/// called where [`heavy_barrier_available`] said it works. A process forked from one that
/// registered is not registered itself, so a refused command registers and tries again, and
/// then falls back to the global command (slower, and needing no registration); a failure of
/// that too means no barrier can be had, and light registrations may be in flight, so it
/// panics rather than go on unsound.
fn heavy_barrier() {
    #[cfg(all(target_os = "linux", not(loom)))]
    {
        let done = membarrier(MEMBARRIER_PRIVATE_EXPEDITED)
            || (membarrier(MEMBARRIER_REGISTER_PRIVATE_EXPEDITED)
                && membarrier(MEMBARRIER_PRIVATE_EXPEDITED))
            || membarrier(MEMBARRIER_GLOBAL);
        assert!(done, "membarrier failed after it had worked");
    }
}

/// `membarrier`'s commands (Linux's `MEMBARRIER_CMD_*`).
#[cfg(all(target_os = "linux", not(loom)))]
const MEMBARRIER_GLOBAL: libc::c_int = 1;
#[cfg(all(target_os = "linux", not(loom)))]
const MEMBARRIER_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(all(target_os = "linux", not(loom)))]
const MEMBARRIER_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Whether Linux's `membarrier(cmd, 0, 0)` succeeded.
#[cfg(all(target_os = "linux", not(loom)))]
#[allow(unsafe_code)] // the system call: see its SAFETY comment
fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: `membarrier` takes a command and two integer arguments and reads or writes no
    // memory of the caller's; an unknown command or a kernel without it returns an error.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        ) == 0
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
    fn an_owned_entry_meets_bulk_accesses_as_a_claimed_one_does_light_or_heavy() {
        use Access::*;
        let l = Ledger::new();
        let own = l.own(1).unwrap();
        // Idle, it holds no access and blocks nothing.
        assert_eq!(l.held(), 0);
        let bulk = l.register(2, 0, 100, BulkWrite).unwrap();
        l.release(bulk);
        // A bulk registration made the ledger heavy; a new run's reset makes it light again
        // where the platform has the barrier.
        assert!(!l.is_light());
        l.lighten();
        assert_eq!(l.is_light(), heavy_barrier_available());
        for round in 0..2 {
            if round == 1 {
                // The same checks with the ledger heavy.
                l.release(l.register(2, 500, 600, BulkRead).unwrap());
                assert!(!l.is_light());
            }
            let w = l.register_owned(own, 10, 20, AtomicWrite).unwrap();
            assert_eq!(l.held(), 1);
            // A bulk read over the owned write races with it: refused; a read beside it
            // and an atomic access over it are not.
            assert_eq!(l.register(2, 15, 25, BulkRead), Err(Refusal::Conflict));
            l.release(l.register(2, 20, 30, BulkRead).unwrap());
            l.release(l.register(3, 0, 30, AtomicWrite).unwrap());
            l.release_owned(w);
            assert_eq!(l.held(), 0);
            // Idle again: the bulk read is admitted, and an owned write under it refused.
            let r = l.register(2, 15, 25, BulkRead).unwrap();
            assert_eq!(
                l.register_owned(own, 24, 40, AtomicWrite),
                Err(Refusal::Conflict)
            );
            // An owned read beside a bulk read is fine.
            l.release_owned(l.register_owned(own, 24, 40, AtomicRead).unwrap());
            l.release(r);
            assert_eq!(l.held(), 0);
        }
        // Disowned, the entry is free for any claim.
        l.disown(own);
        let all: Vec<Held> = (0..SIDE)
            .map(|i| l.register(1, i as u64, i as u64 + 1, AtomicRead).unwrap())
            .collect();
        assert_eq!(l.held(), SIDE);
        all.into_iter().for_each(|h| l.release(h));
    }

    #[test]
    fn owned_entries_are_taken_from_the_claims_and_a_light_reset_starts_an_epoch() {
        let l = Ledger::new();
        let owned: Vec<usize> = (0..SIDE).map(|_| l.own(0).unwrap()).collect();
        // Every atomic entry owned: no claim or owner finds one, though none holds an access.
        assert_eq!(l.own(0), None);
        assert_eq!(l.register(0, 1, 2, Access::AtomicRead), Err(Refusal::Full));
        assert_eq!(l.held(), 0);
        l.disown(owned[SIDE - 1]);
        l.release(l.register(0, 1, 2, Access::AtomicRead).unwrap());
        // Each reset to light is a new epoch; one while light changes nothing.
        if heavy_barrier_available() {
            let before = l.mode.0.load(Ordering::SeqCst);
            l.lighten();
            assert_eq!(l.mode.0.load(Ordering::SeqCst), before);
            l.release(l.register(0, 1, 2, Access::BulkRead).unwrap());
            assert_eq!(l.mode.0.load(Ordering::SeqCst), before | HEAVY);
            l.lighten();
            assert_eq!(l.mode.0.load(Ordering::SeqCst), before + 4);
        }
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
