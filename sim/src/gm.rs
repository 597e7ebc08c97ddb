//! The simulated device's global memory: one arena of 64-bit atomic words, shared by the host
//! (copies), the AICPU (element reads and writes) and every core (tile moves).
//!
//! Word-wise atomics make concurrent access by many threads well defined without `unsafe`:
//! whole words move with relaxed loads and stores (on x86-64 and aarch64 plain moves, with one
//! bounds check per access), and a partial word at either
//! end of a range is updated with a compare-and-swap so neighbouring bytes written by another
//! core are kept.
//! Ordering between a producer's writes and a consumer's reads comes from the handshake
//! (the FIN status store releases, the scheduler's read acquires); between the host's copies
//! and a run, from the run's request and its answer (a channel each way).

use simpler_core::gm::{Gm, GmFault};
use std::sync::atomic::{AtomicU64, Ordering};

/// Words of padding allocated before GM so its first word can start a host cache line.
const LINE_WORDS: usize = 8;

/// GM's backing store: zeroed 64-bit atomic words, allocated once per device. The device's
/// threads and the host's handle share one and reach it through a [`GmArena`] each, so the
/// host copies in and out of GM on its own thread.
///
/// The words come from the allocator's zeroed allocation (`calloc`), which for an arena of
/// GM's size maps fresh pages the kernel supplies zeroed and commits on first touch: the
/// resident memory follows what runs write (or read), not the arena's size. GM's first word
/// is the first one of the allocation on a 64-byte boundary, so a device address that is a
/// multiple of 64 bytes from the base (every device allocation is) starts a host cache line,
/// and two cores' tiles do not share one.
pub struct GmWords {
    /// The allocation: `LINE_WORDS` more than GM has, for the alignment.
    all: Box<[AtomicU64]>,
    /// Index in `all` of GM's first word.
    first: usize,
    /// Words GM has.
    words: usize,
}

impl GmWords {
    /// `words` zeroed words, no page of them touched.
    pub fn zeroed(words: usize) -> Self {
        let all: Box<[AtomicU64]> = bytemuck::zeroed_slice_box(words + LINE_WORDS);
        // Words to skip to the next 64-byte boundary (the allocation is 8-byte aligned).
        let first = (64 - all.as_ptr() as usize % 64) % 64 / 8;
        Self { all, first, words }
    }

    /// GM's words.
    fn slice(&self) -> &[AtomicU64] {
        &self.all[self.first..self.first + self.words]
    }

    /// The arena over these words, addressed from `base` (8-byte aligned).
    pub fn arena(&self, base: u64) -> GmArena<'_> {
        GmArena {
            base,
            words: self.slice(),
        }
    }

    /// Copies `src` to the words at device address `addr` (the words addressed from `base`)
    /// with one plain memory copy: the host's bulk copy in, at the speed of `memcpy`, where
    /// [`Gm::write`] moves a word at a time.
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
/// words; the device thread, every scheduler thread, every core and the host share one.
pub struct GmArena<'a> {
    base: u64,
    words: &'a [AtomicU64],
}

impl GmArena<'_> {
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
        let fault = GmFault {
            addr,
            len: len as u64,
        };
        let off = addr.checked_sub(self.base).ok_or(fault)?;
        let end = off.checked_add(len as u64).ok_or(fault)?;
        if end > self.len() {
            return Err(fault);
        }
        Ok(off as usize)
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
}

impl GmArena<'_> {
    /// Reads whole words from `i` into `dst` (a multiple of 8 bytes, in range).
    #[inline]
    fn read_words(&self, i: usize, dst: &mut [u8]) {
        let words = &self.words[i..i + dst.len() / 8];
        for (bytes, word) in dst.chunks_exact_mut(8).zip(words) {
            bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
    }

    /// Writes `src` (a multiple of 8 bytes, in range) to whole words from `i`.
    #[inline]
    fn write_words(&self, i: usize, src: &[u8]) {
        let words = &self.words[i..i + src.len() / 8];
        for (bytes, word) in src.chunks_exact(8).zip(words) {
            word.store(le_word(bytes), Ordering::Relaxed);
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
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let off = self.offset(addr, dst.len())?;
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
        Ok(())
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        let off = self.offset(addr, src.len())?;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                len: 2
            })
        );
        assert_eq!(
            gm.write(0xFFF, &[0]),
            Err(GmFault {
                addr: 0xFFF,
                len: 1
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
                len: 8
            })
        );
        assert_eq!(out, [9; 8]);
        // SAFETY: as above.
        let fault = unsafe { words.write_exclusive(base, base - 1, &[1]) };
        assert_eq!(
            fault,
            Err(GmFault {
                addr: base - 1,
                len: 1
            })
        );
    }
}
