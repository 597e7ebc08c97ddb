//! The simulated device's global memory: one arena of 64-bit atomic words, shared by the host
//! (copies), the AICPU (element reads and writes) and every core (tile moves, leases).
//!
//! Every access registers its word range in the GM's access [`Ledger`](crate::ledger) while
//! it runs, which is what lets whole words move in bulk without `unsafe` being unsound:
//!
//! - A read or write of whole words (8-byte aligned start and length) of at least 4 KiB is a
//!   *bulk* access: one plain memory copy, at the speed of `memcpy`.
//! - Any other range moves word by word with atomics (relaxed loads and stores, and a
//!   compare-and-swap for a partial word at either end, so neighbouring bytes written by
//!   another core are kept).
//! - [`Gm::lend`] and [`Gm::lend_mut`] lend a whole-word f32 range in place (`&[f32]`,
//!   `&mut [f32]`) for as long as the guard lives: bulk accesses too.
//!
//! The ledger refuses an access that overlaps another in progress when one of the two writes
//! and one is bulk (the pairs that would be a data race), as a
//! [`GmFaultKind::Conflict`](simpler_core::gm::GmFaultKind); atomic accesses beside each other
//! are never refused, as before.
//! A GM too large for the ledger (2^31 words and more) has none: it moves every word
//! atomically and lends nothing.
//!
//! Ordering between a producer's writes and a consumer's reads comes from the handshake
//! (the FIN status store releases, the scheduler's read acquires); between the host's copies
//! and a run, from the run's request and its answer (a channel each way); between two bulk
//! accesses of different threads, from the ledger (its module docs).

use crate::ledger::{Access, Held, Ledger, Refusal, LINES, MAX_WORDS};
use crate::pages::{Pages, ZeroPages};
use simpler_core::gm::{Gm, GmFault, GmMut, GmRef, Lease};
use std::sync::atomic::{AtomicU64, Ordering};

/// Smallest whole-word access moved in bulk (bytes). Below it the atomic word loop costs about
/// what a bulk registration's read of every thread's atomic entries would, and an atomic
/// registration reads only the bulk table, which small accesses leave alone.
const BULK_MIN: usize = 4096;

/// Longest range [`GmArena::prefetch_now`] hints at (bytes): small tiles, whose few lines a
/// kernel would otherwise wait for one miss at a time. Longer ones are queued
/// ([`Gm::prefetch`]).
pub const PREFETCH_MAX: usize = 16 << 10;

/// Words of padding allocated before GM so its first word can start a host cache line.
const LINE_WORDS: usize = 8;

/// GM's backing store: zeroed 64-bit atomic words, allocated once per device, and the ledger
/// of accesses to them. The device's threads and the host's handle share one and reach it
/// through a [`GmArena`] each, so the host copies in and out of GM on its own thread.
///
/// The words are fresh zero pages from the kernel ([`ZeroPages`]), committed on first touch:
/// the resident memory follows what runs write (or read), not the arena's size. GM's first
/// word is the first one of the allocation on a 64-byte boundary, so a device address that is
/// a multiple of 64 bytes from the base (every device allocation is) starts a host cache line,
/// and two cores' tiles do not share one.
pub struct GmWords {
    /// The allocation: `LINE_WORDS` more than GM has, for the alignment.
    all: ZeroPages<AtomicU64>,
    /// Index in `all` of GM's first word.
    first: usize,
    /// Words GM has.
    words: usize,
    /// The accesses in progress; `None` for a GM of [`MAX_WORDS`] words or more.
    ledger: Option<Box<Ledger>>,
}

impl GmWords {
    /// `words` zeroed words, no page of them touched, on base pages.
    pub fn zeroed(words: usize) -> Self {
        Self::zeroed_on(words, Pages::Base)
    }

    /// `words` zeroed words, no page of them touched, backed as `pages` says (the device's
    /// GM asks for huge pages: [`crate::pages`]).
    pub fn zeroed_on(words: usize, pages: Pages) -> Self {
        let all = ZeroPages::<AtomicU64>::new(words + LINE_WORDS, pages);
        // Words to skip to the next 64-byte boundary (a mapping starts on a page; the
        // allocator's fallback elsewhere only on 8 bytes).
        let first = (64 - all.as_ptr() as usize % 64) % 64 / 8;
        let ledger = ((words as u64) < MAX_WORDS).then(|| Box::new(Ledger::new()));
        Self {
            all,
            first,
            words,
            ledger,
        }
    }

    /// GM's words.
    fn slice(&self) -> &[AtomicU64] {
        &self.all[self.first..self.first + self.words]
    }

    /// The arena over these words, addressed from `base` (8-byte aligned), registering its
    /// accesses in the ledger's line 0 first.
    pub fn arena(&self, base: u64) -> GmArena<'_> {
        self.arena_at(base, 0)
    }

    /// The arena over these words, addressed from `base` (8-byte aligned), registering its
    /// accesses in line `home` of the ledger first: a thread with a line of its own claims
    /// entries without touching another thread's cache line.
    pub fn arena_at(&self, base: u64, home: usize) -> GmArena<'_> {
        GmArena {
            base,
            words: self.slice(),
            ledger: self.ledger.as_deref(),
            home: home % LINES,
            owned: None,
        }
    }

    /// [`Self::arena_at`] for the calling thread's own use: its small (atomic) accesses on
    /// this thread register in a ledger entry held for the arena's life, without a locked
    /// instruction while the ledger is light ([`crate::ledger`]); on any other thread, or
    /// when the ledger has no entry to spare, it registers as [`Self::arena_at`]'s does.
    pub fn arena_owned(&self, base: u64, home: usize) -> GmArena<'_> {
        let mut arena = self.arena_at(base, home);
        arena.owned = self
            .ledger
            .as_deref()
            .and_then(|l| l.own(home % LINES))
            .map(|entry| Owned {
                entry,
                thread: thread_token(),
            });
        arena
    }

    /// Entries of the ledger held right now: accesses and leases in progress.
    pub fn accesses_in_progress(&self) -> usize {
        self.ledger.as_ref().map_or(0, |l| l.held())
    }

    /// Copies `src` to the words at device address `addr` (the words addressed from `base`)
    /// with one plain memory copy, without registering in the ledger: the host's bulk copy in
    /// between runs.
    ///
    /// # Safety
    ///
    /// No other thread may access these words while the call runs: no run may be under way and
    /// no other copy in or out. The copy is not atomic, so an access beside it is a data race.
    #[allow(unsafe_code)]
    pub unsafe fn write_exclusive(&self, base: u64, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        let off = self.arena(base).offset(addr, src.len())?;
        // SAFETY: `offset` checked that `off..off + src.len()` lies inside the
        // `self.words * 8` bytes of `self.slice()`, a slice of `AtomicU64`s (8 bytes each, no
        // padding), so every byte written belongs to an `AtomicU64`, whose `UnsafeCell`
        // permits writing through a pointer derived from a shared borrow (taken from the
        // whole slice, so its provenance covers the range). `src`
        // is host memory, distinct from GM. The caller guarantees that no other thread
        // accesses the words meanwhile, so the plain write races with nothing; later accesses
        // are ordered after it by whatever ends the caller's exclusive turn.
        unsafe {
            let gm = self.slice().as_ptr().cast::<u8>().cast_mut().add(off);
            std::ptr::copy_nonoverlapping(src.as_ptr(), gm, src.len());
        }
        Ok(())
    }

    /// Fills `dst` from the words at device address `addr` (the words addressed from `base`)
    /// with one plain memory copy; `dst` is unchanged on a fault.
    ///
    /// # Safety
    ///
    /// As for [`Self::write_exclusive`]: no other thread may access these words while the call
    /// runs.
    #[allow(unsafe_code)]
    pub unsafe fn read_exclusive(
        &self,
        base: u64,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), GmFault> {
        let off = self.arena(base).offset(addr, dst.len())?;
        // SAFETY: as in `write_exclusive`, the range lies inside `self.slice()` (checked by
        // `offset`); reading the bytes of `AtomicU64`s through a pointer derived from the
        // shared slice is allowed, and no other thread writes them meanwhile (the caller's
        // guarantee). `dst` is a unique borrow of host memory, distinct from GM.
        unsafe {
            let gm = self.slice().as_ptr().cast::<u8>().add(off);
            std::ptr::copy_nonoverlapping(gm, dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }
}

/// GM as the device sees it: device addresses `base..base + len()`, backed by borrowed atomic
/// words and their ledger; each device thread has its own (its own home line in the ledger),
/// the host one per copy.
pub struct GmArena<'a> {
    base: u64,
    words: &'a [AtomicU64],
    /// The GM's ledger; `None` when GM is too large for one (every access atomic, no leases).
    ledger: Option<&'a Ledger>,
    /// The ledger line this arena claims entries in first.
    home: usize,
    /// The ledger entry this arena's thread registers its atomic accesses in
    /// ([`GmWords::arena_owned`]).
    owned: Option<Owned>,
}

/// An atomic ledger entry held for one thread's accesses through one arena.
struct Owned {
    /// The entry's index.
    entry: usize,
    /// The thread that may register in it ([`thread_token`]).
    thread: usize,
}

std::thread_local! {
    /// A byte whose address names its thread among the threads alive.
    static TOKEN: u8 = const { 0 };
}

/// The calling thread's token: the address of its [`TOKEN`], distinct between threads alive
/// at once (a thread started after another ended may get the ended one's, which no live
/// thread then has).
#[inline(always)]
fn thread_token() -> usize {
    TOKEN.with(|t| t as *const u8 as usize)
}

impl Drop for GmArena<'_> {
    fn drop(&mut self) {
        if let (Some(ledger), Some(o)) = (self.ledger, &self.owned) {
            // No access of this arena is in progress: each ends before its call returns, and
            // dropping takes the arena from every borrow.
            ledger.disown(o.entry);
        }
    }
}

/// A copy's turn at its words ([`GmArena::begin_copy`]): where they start, and whether the
/// ledger holds them for a plain (non-atomic) copy; the registration ends when it drops.
struct CopyTurn<'a> {
    off: usize,
    plain: bool,
    _registered: Option<Registered<'a>>,
}

/// A registered access: the ledger entry it holds until dropped.
struct Registered<'a> {
    ledger: &'a Ledger,
    held: Option<Held>,
    /// Whether the entry is an owned one ([`Ledger::register_owned`]), left idle, not freed.
    owned: bool,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            if self.owned {
                self.ledger.release_owned(held);
            } else {
                self.ledger.release_own(held);
            }
        }
    }
}

impl GmArena<'_> {
    /// Returns the ledger of the words this arena is over to light mode (a new epoch): meant
    /// for the start of a run, after the host's copies made it heavy ([`Ledger::lighten`]).
    pub fn lighten(&self) {
        if let Some(l) = self.ledger {
            l.lighten();
        }
    }

    /// The first device address (the one the first word's first byte has).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of device memory: 8 per word.
    pub fn len(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// Whether the arena has no words (then every access faults but an empty one at `base`).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Word `i` (below `self.len() / 8`).
    #[inline(always)]
    fn word(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }

    fn offset(&self, addr: u64, len: usize) -> Result<usize, GmFault> {
        let fault = GmFault::outside(addr, len as u64);
        let off = addr.checked_sub(self.base).ok_or(fault)?;
        let end = off.checked_add(len as u64).ok_or(fault)?;
        if end > self.len() {
            return Err(fault);
        }
        Ok(off as usize)
    }

    /// Registers `access` to the words bytes `off..off + len` touch (in range, `len > 0`);
    /// `None` when GM has no ledger. A conflict, or a full ledger, is a
    /// [`GmFaultKind::Conflict`] at `addr`.
    #[inline(always)]
    fn register(
        &self,
        addr: u64,
        off: usize,
        len: usize,
        access: Access,
    ) -> Result<Option<Registered<'_>>, (GmFault, Refusal)> {
        let Some(ledger) = self.ledger else {
            return Ok(None);
        };
        let (start, end) = ((off / 8) as u64, (off + len).div_ceil(8) as u64);
        let atomic = matches!(access, Access::AtomicRead | Access::AtomicWrite);
        let (registered, owned) = match &self.owned {
            Some(o) if atomic && o.thread == thread_token() => {
                (ledger.register_owned(o.entry, start, end, access), true)
            }
            _ => (ledger.register(self.home, start, end, access), false),
        };
        match registered {
            Ok(held) => Ok(Some(Registered {
                ledger,
                held: Some(held),
                owned,
            })),
            Err(why) => Err((GmFault::conflict(addr, len as u64), why)),
        }
    }

    /// Stores `part` at byte `at` of word `i`, keeping the word's other bytes (which another
    /// core may be writing).
    fn store_part(&self, i: usize, at: usize, part: &[u8]) {
        let _ = self
            .word(i)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let mut word = old.to_le_bytes();
                word[at..at + part.len()].copy_from_slice(part);
                Some(u64::from_le_bytes(word))
            });
    }

    /// Reads whole words from `i` into `dst` (a multiple of 8 bytes, in range), atomically.
    #[inline]
    fn read_words(&self, i: usize, dst: &mut [u8]) {
        let words = &self.words[i..i + dst.len() / 8];
        for (bytes, word) in dst.chunks_exact_mut(8).zip(words) {
            bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
    }

    /// Writes `src` (a multiple of 8 bytes, in range) to whole words from `i`, atomically.
    #[inline]
    fn write_words(&self, i: usize, src: &[u8]) {
        let words = &self.words[i..i + src.len() / 8];
        for (bytes, word) in src.chunks_exact(8).zip(words) {
            word.store(le_word(bytes), Ordering::Relaxed);
        }
    }

    /// What a copy of `len` bytes at `addr` starts with: the range checked (its offset) and
    /// registered in the ledger, as a bulk access when it is whole words of at least
    /// [`BULK_MIN`] bytes, else as an atomic one. `None` for an empty copy.
    #[inline(always)]
    fn begin_copy(
        &self,
        addr: u64,
        len: usize,
        write: bool,
    ) -> Result<Option<CopyTurn<'_>>, GmFault> {
        let off = self.offset(addr, len)?;
        if len == 0 {
            return Ok(None);
        }
        let bulk = (off | len) & 7 == 0 && len >= BULK_MIN;
        let access = match (bulk, write) {
            (true, false) => Access::BulkRead,
            (true, true) => Access::BulkWrite,
            (false, false) => Access::AtomicRead,
            (false, true) => Access::AtomicWrite,
        };
        let registered = self.register(addr, off, len, access).map_err(|e| e.0)?;
        Ok(Some(CopyTurn {
            off,
            plain: bulk && registered.is_some(),
            _registered: registered,
        }))
    }

    /// Hints that bytes `addr..addr + len` will be accessed soon: on x86-64, a prefetch of
    /// each of their cache lines into the second-level cache
    /// ([`prefetch_line_l2`](crate::tile_ops::ahead)). Nothing is read or written and
    /// no access is registered; a range outside GM, or longer than [`PREFETCH_MAX`], is
    /// ignored (queue it with [`Gm::prefetch`]). Elsewhere, nothing.
    pub fn prefetch_now(&self, addr: u64, len: usize) {
        let Ok(off) = self.offset(addr, len) else {
            return;
        };
        if len == 0 || len > PREFETCH_MAX {
            return;
        }
        use crate::tile_ops::ahead::{prefetch_line_l2, LINE};
        // The pointers stay inside `self.words`: `offset` checked the range, and `first`
        // rounds down within it.
        let first = off / LINE * LINE;
        for line in (first..off + len).step_by(LINE) {
            prefetch_line_l2(self.byte_ptr(line));
        }
    }

    /// Where GM address `addr` lies in this process (for tests of what was prefetched).
    #[cfg(test)]
    pub(crate) fn host_ptr(&self, addr: u64) -> Option<*const u8> {
        let off = self.offset(addr, 1).ok()?;
        Some(self.byte_ptr(off).cast_const())
    }

    /// A pointer to byte `off` of GM, with the provenance of the whole word slice.
    #[inline(always)]
    fn byte_ptr(&self, off: usize) -> *mut u8 {
        // `wrapping_add` keeps this free of `unsafe`; callers pass `off` inside the slice.
        self.words
            .as_ptr()
            .cast::<u8>()
            .cast_mut()
            .wrapping_add(off)
    }

    /// The atomic read of a range that is not whole words (in range, `off` its offset).
    fn read_atomic(&self, off: usize, dst: &mut [u8]) {
        let (mut i, at) = (off / 8, off % 8);
        let mut dst = dst;
        if at != 0 && !dst.is_empty() {
            let n = (8 - at).min(dst.len());
            let word = self.word(i).load(Ordering::Relaxed).to_le_bytes();
            let (head, rest) = dst.split_at_mut(n);
            head.copy_from_slice(&word[at..at + n]);
            dst = rest;
            i += 1;
        }
        let whole = dst.len() / 8 * 8;
        let (words, tail) = dst.split_at_mut(whole);
        self.read_words(i, words);
        if !tail.is_empty() {
            let word = self
                .word(i + whole / 8)
                .load(Ordering::Relaxed)
                .to_le_bytes();
            tail.copy_from_slice(&word[..tail.len()]);
        }
    }

    /// The atomic write of a range that is not whole words (in range, `off` its offset).
    fn write_atomic(&self, off: usize, src: &[u8]) {
        let (mut i, at) = (off / 8, off % 8);
        let mut src = src;
        if at != 0 && !src.is_empty() {
            let n = (8 - at).min(src.len());
            self.store_part(i, at, &src[..n]);
            src = &src[n..];
            i += 1;
        }
        let whole = src.len() / 8 * 8;
        let (words, tail) = src.split_at(whole);
        self.write_words(i, words);
        if !tail.is_empty() {
            self.store_part(i + whole / 8, 0, tail);
        }
    }

    /// Registers a lease of `elems` f32 values at `addr` for `access` (bulk); `None` when
    /// this range is not lent (no ledger, not whole words, a big-endian host, or a full
    /// ledger), else the held entry or the fault, with the range's offset.
    fn lease(
        &self,
        addr: u64,
        elems: usize,
        access: Access,
    ) -> Option<Result<(usize, Held), GmFault>> {
        let ledger = self.ledger?;
        let len = elems.checked_mul(4)?;
        if cfg!(target_endian = "big") || len == 0 || len % 8 != 0 {
            return None;
        }
        let off = match self.offset(addr, len) {
            Ok(off) if off % 8 == 0 => off,
            Ok(_) => return None,
            Err(fault) => return Some(Err(fault)),
        };
        let (start, end) = (off as u64 / 8, (off + len) as u64 / 8);
        match ledger.register(self.home, start, end, access) {
            Ok(held) => Some(Ok((off, held))),
            Err(Refusal::Conflict) => Some(Err(GmFault::conflict(addr, len as u64))),
            Err(Refusal::Full) => None,
        }
    }
}

/// The little-endian word in `bytes` (exactly 8).
#[inline(always)]
fn le_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

impl Gm for GmArena<'_> {
    #[allow(unsafe_code)] // the bulk copy out: see its SAFETY comment
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let Some(turn) = self.begin_copy(addr, dst.len(), false)? else {
            return Ok(());
        };
        let off = turn.off;
        if turn.plain {
            // SAFETY: `offset` checked that bytes `off..off + dst.len()` lie inside
            // `self.words`, and `byte_ptr` derives the pointer from the whole slice; they are
            // the bytes of `AtomicU64`s, which may be read through a shared-derived pointer.
            // The ledger entry `turn` holds (bulk read of exactly these words, `off` and
            // the length being whole words) refuses every write to them, atomic or bulk,
            // until it is dropped after the copy, and every earlier write is ordered before
            // this copy (the ledger's memory-ordering argument), so the plain read races with
            // nothing. `dst` is a unique borrow of host memory, distinct from GM.
            unsafe {
                std::ptr::copy_nonoverlapping(self.byte_ptr(off), dst.as_mut_ptr(), dst.len());
            }
        } else {
            self.read_atomic(off, dst);
        }
        drop(turn);
        Ok(())
    }

    #[allow(unsafe_code)] // the bulk copy in: see its SAFETY comment
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        let Some(turn) = self.begin_copy(addr, src.len(), true)? else {
            return Ok(());
        };
        let off = turn.off;
        if turn.plain {
            // SAFETY: as in `read`: the bytes lie inside `self.words` and belong to
            // `AtomicU64`s, whose `UnsafeCell` permits writing through the shared-derived
            // pointer; the held bulk-write entry refuses every other access to these words
            // (read or write, atomic or bulk) until the copy is done, and orders the ones
            // before and after it. `src` is host memory, distinct from GM.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), self.byte_ptr(off), src.len());
            }
        } else {
            self.write_atomic(off, src);
        }
        drop(turn);
        Ok(())
    }

    #[allow(unsafe_code)] // the lent slice: see its SAFETY comment
    fn lend(&self, addr: u64, elems: usize) -> Option<Result<GmRef<'_>, GmFault>> {
        let (off, held) = match self.lease(addr, elems, Access::BulkRead)? {
            Ok(lease) => lease,
            Err(fault) => return Some(Err(fault)),
        };
        let (index, value) = held.parts();
        // SAFETY: bytes `off..off + 4 * elems` lie inside `self.words` (`lease` checked them
        // with `offset`), start on a word (so on an f32's alignment) and are whole words; the
        // pointer carries the provenance of the whole slice. They are `AtomicU64` bytes, and
        // any bit pattern is a valid f32 (the host is little-endian, as GM's words are). The
        // ledger entry just registered (bulk read of these words) refuses every write to them
        // until it is released, which only `end_lease` with this lease's parts does, called
        // when the guard drops (its borrow ends there); writes before it are ordered before
        // the lease (the ledger's argument). So nothing writes the slice while it is alive.
        // `Lease::new` is called once, here, for the guard.
        unsafe {
            let data = std::slice::from_raw_parts(self.byte_ptr(off).cast::<f32>(), elems);
            Some(Ok(GmRef::new(data, self, Lease::new(index, value))))
        }
    }

    #[allow(unsafe_code)] // the lent slice: see its SAFETY comment
    fn lend_mut(&self, addr: u64, elems: usize) -> Option<Result<GmMut<'_>, GmFault>> {
        let (off, held) = match self.lease(addr, elems, Access::BulkWrite)? {
            Ok(lease) => lease,
            Err(fault) => return Some(Err(fault)),
        };
        let (index, value) = held.parts();
        // SAFETY: as in `lend`, the bytes are whole, aligned words inside `self.words` that
        // any f32 may hold; writing them through the shared-derived pointer is allowed, as they
        // sit in `AtomicU64`'s `UnsafeCell`. The entry registered (bulk write) refuses every
        // other access to them, read or write, this thread's included, until the guard drops,
        // so the `&mut` is unique for its whole life.
        unsafe {
            let data = std::slice::from_raw_parts_mut(self.byte_ptr(off).cast::<f32>(), elems);
            Some(Ok(GmMut::new(data, self, Lease::new(index, value))))
        }
    }

    fn end_lease(&self, lease: Lease) {
        if let Some(ledger) = self.ledger {
            ledger.release(Held::from_parts(lease.parts()));
        }
    }

    /// Queues the range on this thread's prefetch queue ([`crate::tile_ops::ahead`]), which
    /// the tile operations that run next on this thread drain a line at a time; a range
    /// outside GM, or empty, is ignored.
    fn prefetch(&self, addr: u64, len: usize) {
        if let Ok(off) = self.offset(addr, len) {
            crate::tile_ops::ahead::queue(self.byte_ptr(off), len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_core::gm::GmFaultKind;
    use std::sync::Barrier;

    /// The f32 values `0..n` scaled, as GM bytes.
    fn f32_bytes(n: usize, scale: f32) -> Vec<u8> {
        (0..n)
            .flat_map(|i| (i as f32 * scale).to_le_bytes())
            .collect()
    }

    #[test]
    fn whole_word_copies_move_in_bulk_and_keep_their_neighbours() {
        let words = GmWords::zeroed(2048);
        let (a, b) = (words.arena_at(0x1000, 1), words.arena_at(0x1000, 2));
        a.write(0x1000, &[0xAA; 16384]).unwrap();
        a.write(0x1008, &[7u8; BULK_MIN]).unwrap();
        let mut out = vec![0u8; BULK_MIN + 16];
        b.read(0x1000, &mut out).unwrap();
        assert_eq!(&out[..8], &[0xAA; 8]);
        assert!(out[8..8 + BULK_MIN].iter().all(|&x| x == 7));
        assert_eq!(&out[8 + BULK_MIN..], &[0xAA; 8]);
        // A bulk copy overlapping another core's write lease is refused, as a small one is.
        let lease = a.lend_mut(0x3000, 2).unwrap().unwrap();
        let mut big = vec![0u8; BULK_MIN];
        assert_eq!(
            b.read(0x2008, &mut big),
            Err(GmFault::conflict(0x2008, BULK_MIN as u64))
        );
        drop(lease);
        b.read(0x2008, &mut big).unwrap();
        // Every access has left the ledger.
        assert_eq!(words.accesses_in_progress(), 0);
    }

    #[test]
    fn a_prefetch_queues_the_range_in_gm_and_registers_nothing() {
        use crate::tile_ops::ahead;
        let words = GmWords::zeroed(1 << 14);
        let (a, end) = (words.arena_at(0x1000, 1), 0x1000 + (8 << 14));
        ahead::clear();
        Gm::prefetch(&a, 0x1000, 4096);
        assert_eq!(ahead::queued_lines(), 4096 / ahead::LINE);
        // Outside GM (below, past the end, straddling it) and empty: nothing is queued.
        for (addr, len) in [(0x800, 64), (end, 64), (end - 8, 64)] {
            Gm::prefetch(&a, addr, len);
        }
        Gm::prefetch(&a, 0x2000, 0);
        assert_eq!(ahead::queued_lines(), 4096 / ahead::LINE);
        // The hint takes no part in the ledger: a write lease over the range is granted.
        assert_eq!(words.accesses_in_progress(), 0);
        assert!(a.lend_mut(0x1000, 1024).unwrap().is_ok());
        ahead::clear();
    }

    #[test]
    fn a_write_lease_refuses_every_overlapping_access_until_it_ends() {
        let words = GmWords::zeroed(64);
        // Two cores' arenas over one GM, each with its own ledger line.
        let (a, b) = (words.arena_at(0x1000, 1), words.arena_at(0x1000, 2));
        let mut c = a.lend_mut(0x1040, 16).unwrap().unwrap();
        c.copy_from_slice(&[2.5; 16]);
        let conflict = |addr, len| Err(GmFault::conflict(addr, len));
        // The other core: reads, writes (bulk or atomic) and leases of any overlapping byte.
        assert_eq!(b.read(0x1040, &mut [0u8; 64]), conflict(0x1040, 64));
        assert_eq!(b.read(0x107F, &mut [0u8; 1]), conflict(0x107F, 1));
        assert_eq!(b.write(0x103C, &[0u8; 8]), conflict(0x103C, 8));
        assert_eq!(b.write(0x1044, &[1u8; 3]), conflict(0x1044, 3));
        assert_eq!(
            b.lend(0x1060, 2).map(|r| r.err()),
            Some(Some(GmFault::conflict(0x1060, 8)))
        );
        // The lease holder itself: a copy of the lent bytes would alias its `&mut`.
        assert_eq!(a.read(0x1040, &mut [0u8; 8]), conflict(0x1040, 8));
        // Beside the lease, everything goes.
        b.write(0x1038, &[9u8; 8]).unwrap();
        b.read(0x1080, &mut [0u8; 8]).unwrap();
        assert_eq!(words.accesses_in_progress(), 1);
        drop(c);
        assert_eq!(words.accesses_in_progress(), 0);
        let mut out = vec![0u8; 64];
        b.read(0x1040, &mut out).unwrap();
        assert_eq!(
            out,
            [2.5f32; 16]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn read_leases_share_and_refuse_writers() {
        let words = GmWords::zeroed(64);
        let (a, b) = (words.arena_at(0x1000, 1), words.arena_at(0x1000, 2));
        a.write(0x1000, &f32_bytes(32, 0.5)).unwrap();
        let r1 = a.lend(0x1000, 32).unwrap().unwrap();
        let r2 = b.lend(0x1010, 4).unwrap().unwrap();
        assert_eq!((r1[3], r2[0]), (1.5, 2.0));
        // Reads beside a read lease: bulk and atomic.
        let mut out = [0u8; 6];
        b.read(0x1003, &mut out).unwrap();
        b.read(0x1000, &mut [0u8; 16]).unwrap();
        // Writes and write leases are refused.
        assert_eq!(
            b.write(0x1018, &[0u8; 2]),
            Err(GmFault::conflict(0x1018, 2))
        );
        assert_eq!(
            b.lend_mut(0x1070, 4).map(|r| r.err()),
            Some(Some(GmFault::conflict(0x1070, 16)))
        );
        drop((r1, r2));
        b.write(0x1018, &[0u8; 2]).unwrap();
    }

    #[test]
    fn what_is_not_lent_is_none_and_a_lease_outside_gm_is_a_fault() {
        let words = GmWords::zeroed(16);
        let gm = words.arena(0x1000);
        // Not whole words: an odd count, or a start inside a word.
        assert!(gm.lend(0x1000, 3).is_none());
        assert!(gm.lend_mut(0x1004, 2).is_none());
        assert!(gm.lend(0x1000, 0).is_none());
        assert_eq!(
            gm.lend(0x1078, 4).map(|r| r.err()),
            Some(Some(GmFault::outside(0x1078, 16)))
        );
        // A leaked lease keeps its entry: the bytes stay refused, never unsound.
        std::mem::forget(gm.lend_mut(0x1000, 2).unwrap().unwrap());
        assert_eq!(
            gm.read(0x1000, &mut [0u8; 8]),
            Err(GmFault::conflict(0x1000, 8))
        );
        assert_eq!(GmFault::conflict(1, 2).kind, GmFaultKind::Conflict);
    }

    #[test]
    fn a_read_lease_never_sees_another_cores_atomic_writes() {
        // One thread holds read leases of four words and checks they do not change while it
        // holds one; the other writes those words with small (atomic) writes as fast as it
        // can. Each side registers in a different table of the ledger: a write granted while
        // a lease is held would show as a change.
        let words = GmWords::zeroed(64);
        let done = std::sync::atomic::AtomicBool::new(false);
        let (granted, refused) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            let (words, done, granted, refused) = (&words, &done, &granted, &refused);
            s.spawn(move || {
                let gm = words.arena_at(0x1000, 1);
                for _ in 0..20_000 {
                    if let Some(Ok(lease)) = gm.lend(0x1000, 8) {
                        let seen: Vec<u32> = lease.iter().map(|v| v.to_bits()).collect();
                        std::hint::spin_loop();
                        assert_eq!(seen, lease.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                    }
                }
                done.store(true, Ordering::Relaxed);
            });
            s.spawn(move || {
                let gm = words.arena_at(0x1000, 2);
                let mut n = 0u32;
                while !done.load(Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    match gm.write(0x1004 + 4 * (n % 6) as u64, &n.to_le_bytes()) {
                        Ok(()) => granted.fetch_add(1, Ordering::Relaxed),
                        Err(f) => {
                            assert_eq!(f.kind, GmFaultKind::Conflict);
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            });
        });
        assert_eq!(words.accesses_in_progress(), 0);
    }

    #[test]
    fn a_read_lease_never_sees_an_owned_arenas_light_writes() {
        // As above, with the writer's atomic writes in an entry its thread owns, and the ledger
        // made light again before every lease, so that each lease's registration switches it
        // while light writes are in flight. Each write is long (4,003 bytes, not whole words)
        // and the leases cover its last bytes, so that a lease often begins while a write is
        // on its way to them.
        let words = GmWords::zeroed(1024);
        let done = std::sync::atomic::AtomicBool::new(false);
        let (granted, leases) = (AtomicU64::new(0), AtomicU64::new(0));
        let start = Barrier::new(2);
        std::thread::scope(|s| {
            let (words, done, granted, leases, start) = (&words, &done, &granted, &leases, &start);
            s.spawn(move || {
                let gm = words.arena_at(0x1000, 1);
                start.wait();
                // At least 4,000 tries, and on until both sides have had accesses admitted
                // (or a bound that a working ledger does not reach, for the assert below).
                for i in 0..1_000_000 {
                    let both =
                        granted.load(Ordering::Relaxed) > 0 && leases.load(Ordering::Relaxed) > 0;
                    if i >= 4_000 && both {
                        break;
                    }
                    gm.lighten();
                    if let Some(Ok(lease)) = gm.lend(0x1F80, 8) {
                        // Held long enough for the writer to get several writes in, were
                        // they admitted.
                        let seen: Vec<u32> = lease.iter().map(|v| v.to_bits()).collect();
                        for _ in 0..64 {
                            std::hint::spin_loop();
                            let now: Vec<u32> = lease.iter().map(|v| v.to_bits()).collect();
                            assert_eq!(seen, now);
                        }
                        leases.fetch_add(1, Ordering::Relaxed);
                    }
                }
                done.store(true, Ordering::Relaxed);
            });
            s.spawn(move || {
                let gm = words.arena_owned(0x1000, 2);
                start.wait();
                let mut n = 0u8;
                while !done.load(Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    if gm.write(0x1004, &[n; 4003]).is_ok() {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                    // A gap between writes, for leases to be admitted in.
                    std::thread::yield_now();
                }
            });
        });
        assert!(leases.load(Ordering::Relaxed) > 0 && granted.load(Ordering::Relaxed) > 0);
        assert_eq!(words.accesses_in_progress(), 0);
    }

    #[test]
    fn an_owned_arena_on_another_thread_registers_as_a_shared_one() {
        let words = GmWords::zeroed(64);
        let (owned, holder) = (words.arena_owned(0x1000, 1), words.arena_at(0x1000, 2));
        let lease = holder.lend_mut(0x1000, 4).unwrap().unwrap();
        // On its own thread and on another, a small write under the lease is refused and one
        // beside it admitted.
        std::thread::scope(|s| {
            let owned = &owned;
            for _ in 0..2 {
                let conflict = Err(GmFault::conflict(0x1008, 4));
                assert_eq!(owned.write(0x1008, &[1; 4]), conflict);
                owned.write(0x1010, &[1; 4]).unwrap();
                s.spawn(move || {
                    assert_eq!(owned.write(0x1008, &[1; 4]), conflict);
                    owned.write(0x1010, &[1; 4]).unwrap();
                })
                .join()
                .unwrap();
            }
        });
        drop(lease);
        assert_eq!(words.accesses_in_progress(), 0);
        let mut out = [0u8; 8];
        owned.read(0x1008, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 0]);
        owned.read(0x1010, &mut out).unwrap();
        assert_eq!(out, [1, 1, 1, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn two_cores_leasing_one_range_for_writing_never_hold_it_together() {
        // Each thread takes write leases of 32 bytes, the two overlapping by 16, as fast as it
        // can and, while it holds one, marks the words as its own; a lease granted to both at
        // once would see the other's mark. The ledger must refuse one of every overlapping
        // pair.
        let words = GmWords::zeroed(64);
        let owner = AtomicU64::new(0);
        let (granted, refused) = (AtomicU64::new(0), AtomicU64::new(0));
        let start = Barrier::new(2);
        std::thread::scope(|s| {
            for me in 1..=2u64 {
                let (words, owner, granted, refused, start) =
                    (&words, &owner, &granted, &refused, &start);
                s.spawn(move || {
                    let gm = words.arena_at(0x1000, me as usize);
                    start.wait();
                    for _ in 0..20_000 {
                        match gm.lend_mut(0x1000 + 16 * me, 8) {
                            Some(Ok(mut lease)) => {
                                assert_eq!(owner.swap(me, Ordering::SeqCst), 0, "two holders");
                                lease[0] = me as f32;
                                assert_eq!(lease[0], me as f32);
                                owner.store(0, Ordering::SeqCst);
                                granted.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(Err(f)) => {
                                assert_eq!(f.kind, GmFaultKind::Conflict);
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            None => panic!("whole words are lent"),
                        }
                    }
                });
            }
        });
        assert_eq!(
            granted.load(Ordering::Relaxed) + refused.load(Ordering::Relaxed),
            40_000
        );
        assert!(granted.load(Ordering::Relaxed) > 0);
        assert_eq!(words.accesses_in_progress(), 0);
    }

    #[test]
    fn unaligned_ranges_keep_their_neighbours() {
        let words = GmWords::zeroed(4);
        let gm = words.arena(0x1000);
        gm.write(0x1000, &[0xAA; 32]).unwrap();
        gm.write(0x1003, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
        let mut out = [0u8; 16];
        gm.read(0x1000, &mut out).unwrap();
        assert_eq!(
            out,
            [0xAA, 0xAA, 0xAA, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xAA, 0xAA, 0xAA]
        );
        assert_eq!(
            gm.read(0x101F, &mut [0u8; 2]),
            Err(GmFault {
                addr: 0x101F,
                len: 2,
                kind: GmFaultKind::Outside
            })
        );
        assert_eq!(
            gm.write(0xFFF, &[0]),
            Err(GmFault {
                addr: 0xFFF,
                len: 1,
                kind: GmFaultKind::Outside
            })
        );
        assert!(gm.read(0x1020, &mut []).is_ok());
    }

    #[test]
    #[allow(unsafe_code)] // the exclusive copies, on words no other thread can reach
    fn exclusive_copies_match_the_word_copies() {
        let base = 0x1000;
        let words = GmWords::zeroed(1 << 20);
        let gm = words.arena(base);
        for (at, len) in [(3, 21), (8, 4096), (5, (4 << 20) + 4099)] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + at) as u8).collect();
            let addr = base + at as u64;
            // SAFETY: `words` is this test's own; no other thread sees it.
            unsafe { words.write_exclusive(base, addr, &data) }.unwrap();
            let mut seen = vec![0u8; len + 2];
            gm.read(addr - 1, &mut seen).unwrap();
            assert_eq!(&seen[1..=len], &data[..], "at {at}, {len} bytes");
            // The bytes either side are as they were.
            assert_eq!((seen[0], seen[len + 1]), (0, 0), "at {at}, {len} bytes");
            let mut back = vec![0u8; len];
            // SAFETY: as above.
            unsafe { words.read_exclusive(base, addr, &mut back) }.unwrap();
            assert_eq!(back, data, "at {at}, {len} bytes");
            gm.write(addr, &vec![0u8; len]).unwrap();
        }
        let end = base + gm.len();
        let mut out = [9u8; 8];
        // SAFETY: as above.
        let fault = unsafe { words.read_exclusive(base, end - 4, &mut out) };
        assert_eq!(
            fault,
            Err(GmFault {
                addr: end - 4,
                len: 8,
                kind: GmFaultKind::Outside
            })
        );
        assert_eq!(out, [9; 8]);
        // SAFETY: as above.
        let fault = unsafe { words.write_exclusive(base, base - 1, &[1]) };
        assert_eq!(
            fault,
            Err(GmFault {
                addr: base - 1,
                len: 1,
                kind: GmFaultKind::Outside
            })
        );
    }
}
