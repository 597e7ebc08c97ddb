//! The simulated device's global memory: one arena of 64-bit atomic words, shared by the host
//! (copies), the AICPU (element reads and writes) and every core (tile moves).
//!
//! Word-wise atomics make concurrent access by many threads well defined without `unsafe`:
//! whole words move with relaxed loads and stores; a partial word at either end of a range is
//! updated with a compare-and-swap so neighbouring bytes written by another core are kept.
//! Ordering between a producer's writes and a consumer's reads comes from the handshake
//! (the FIN status store releases, the scheduler's read acquires); between the host's copies
//! and a run, from the run's request and its answer (a channel each way).

use simpler_core::gm::{Gm, GmFault};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Eight GM words on one host cache line. GM's backing store is a slice of these, so a device
/// address that is a multiple of 64 bytes from the base (every host allocation is) starts a
/// host cache line.
#[derive(Default)]
#[repr(C, align(64))]
pub struct WordLine([AtomicU64; 8]);

/// GM's backing store: zeroed 64-bit atomic words on whole cache lines, allocated once per
/// device. The device's threads and the host's handle share one and reach it through a
/// [`GmArena`] each, so the host copies in and out of GM on its own thread.
pub struct GmWords {
    lines: Box<[WordLine]>,
    /// Words GM has (the last line may hold a few more, never addressed).
    words: usize,
}

impl GmWords {
    /// `words` zeroed words.
    pub fn zeroed(words: usize) -> Self {
        Self {
            lines: (0..words.div_ceil(8))
                .map(|_| WordLine::default())
                .collect(),
            words,
        }
    }

    /// The arena over these words, addressed from `base` (8-byte aligned).
    pub fn arena(&self, base: u64) -> GmArena<'_> {
        GmArena {
            base,
            lines: &self.lines,
            words: self.words,
        }
    }

    /// Copies `src` to the words at device address `addr` (the words addressed from `base`)
    /// with plain memory copies: the host's bulk copy in, at the speed of `memcpy`, where
    /// [`Gm::write`] moves a word at a time. A copy of [`SPLIT_COPY_BYTES`] or more is made in
    /// two halves on two threads (the caller's and a scoped one): one core's copy does not
    /// reach the memory's bandwidth.
    ///
    /// # Safety
    ///
    /// No other thread may access these words while the call runs: no run may be under way and
    /// no other copy in or out. The copy is not atomic, so an access beside it is a data race.
    #[allow(unsafe_code)]
    pub unsafe fn write_exclusive(&self, base: u64, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        let off = self.arena(base).offset(addr, src.len())?;
        let (near, far) = src.split_at(split_point(src.len()));
        let copy = |at: usize, part: &[u8]| {
            // SAFETY: `offset` checked that the whole range `off..off + src.len()` lies inside
            // the first `self.words * 8` bytes of `self.lines`, and `part` is `src`'s bytes
            // from `at`, so its image in GM lies inside that range. `self.lines` is one
            // allocation of `WordLine`s, 64 bytes each, eight `AtomicU64`s and no padding: every
            // byte written belongs to an `AtomicU64`, whose `UnsafeCell` permits writing
            // through a pointer derived from a shared borrow (taken from the whole slice, so
            // its provenance covers the range). `part` is host memory, distinct from GM. The
            // two halves of a split copy are disjoint, and the caller guarantees that no other
            // thread accesses the words meanwhile, so each plain write races with nothing;
            // later accesses are ordered after it by the join below and by whatever ends the
            // caller's exclusive turn.
            unsafe {
                let gm = self.lines.as_ptr().cast::<u8>().cast_mut().add(off + at);
                std::ptr::copy_nonoverlapping(part.as_ptr(), gm, part.len());
            }
        };
        in_two(far.len(), || copy(0, near), || copy(near.len(), far));
        Ok(())
    }

    /// Fills `dst` from the words at device address `addr` (the words addressed from `base`)
    /// with plain memory copies, split as [`Self::write_exclusive`] splits; `dst` is unchanged
    /// on a fault.
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
        let (near, far) = dst.split_at_mut(split_point(dst.len()));
        let at = near.len();
        let copy = |from: usize, part: &mut [u8]| {
            // SAFETY: as in `write_exclusive`, the part's image in GM lies inside `self.lines`
            // (checked by `offset`); reading the bytes of `AtomicU64`s through a pointer derived
            // from the shared slice is allowed, and no other thread writes them meanwhile (the
            // caller's guarantee). `part` is a unique borrow of host memory, distinct from GM
            // and from the other half.
            unsafe {
                let gm = self.lines.as_ptr().cast::<u8>().add(off + from);
                std::ptr::copy_nonoverlapping(gm, part.as_mut_ptr(), part.len());
            }
        };
        let far_len = far.len();
        in_two(far_len, || copy(0, near), || copy(at, far));
        Ok(())
    }
}

/// The size from which a bulk copy between host memory and GM is split over two threads.
/// Below it, starting a thread costs more than the second half of the copy saves.
pub const SPLIT_COPY_BYTES: usize = 8 << 20;

/// Where a bulk copy of `len` bytes splits: the whole of it stays on the caller's thread below
/// [`SPLIT_COPY_BYTES`]; otherwise the middle, rounded down to a page.
fn split_point(len: usize) -> usize {
    if len < SPLIT_COPY_BYTES {
        len
    } else {
        len / 2 / 4096 * 4096
    }
}

/// Runs `near` on this thread and `far` on a scoped one, both to their end; both here when
/// `far` has no bytes to copy (`far_len`) or no thread can be started.
fn in_two(far_len: usize, near: impl FnOnce() + Send, far: impl FnOnce() + Send) {
    if far_len == 0 {
        near();
        return far();
    }
    let far = Mutex::new(Some(far));
    let take = || far.lock().unwrap_or_else(|e| e.into_inner()).take();
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("simpler-gm-copy".into())
            .spawn_scoped(s, || take().map(|f| f()));
        near();
        if let Ok(h) = spawned {
            let _ = h.join();
        }
    });
    // Left here when the thread could not start.
    if let Some(f) = take() {
        f();
    }
}

/// GM as the device sees it: device addresses `base..base + len()`, backed by borrowed atomic
/// words; the device thread, every scheduler thread, every core and the host share one.
pub struct GmArena<'a> {
    base: u64,
    lines: &'a [WordLine],
    words: usize,
}

impl GmArena<'_> {
    /// The first device address (the one the first word's first byte has).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of device memory: 8 per word.
    pub fn len(&self) -> u64 {
        self.words as u64 * 8
    }

    /// Whether the arena has no words (then every access faults but an empty one at `base`).
    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// Word `i` (below `self.words`).
    #[inline(always)]
    fn word(&self, i: usize) -> &AtomicU64 {
        &self.lines[i / 8].0[i % 8]
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
        let mut whole = dst.chunks_exact_mut(8);
        for chunk in whole.by_ref() {
            chunk.copy_from_slice(&self.word(i).load(Ordering::Relaxed).to_le_bytes());
            i += 1;
        }
        let tail = whole.into_remainder();
        if !tail.is_empty() {
            let word = self.word(i).load(Ordering::Relaxed).to_le_bytes();
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
        let mut whole = src.chunks_exact(8);
        for chunk in whole.by_ref() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(i)
                .store(u64::from_le_bytes(word), Ordering::Relaxed);
            i += 1;
        }
        let tail = whole.remainder();
        if !tail.is_empty() {
            self.store_part(i, 0, tail);
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
    fn exclusive_copies_match_the_word_copies_split_or_not() {
        let base = 0x1000;
        let words = GmWords::zeroed((3 * SPLIT_COPY_BYTES) / 8);
        let gm = words.arena(base);
        for (at, len) in [(3, 21), (8, 4096), (5, SPLIT_COPY_BYTES + 4099)] {
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
