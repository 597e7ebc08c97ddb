//! The simulated device's global memory: one arena of 64-bit atomic words, shared by the host
//! (copies), the AICPU (element reads and writes) and every core (tile moves).
//!
//! Word-wise atomics make concurrent access by many threads well defined without `unsafe`:
//! whole words move with relaxed loads and stores; a partial word at either end of a range is
//! updated with a compare-and-swap so neighbouring bytes written by another core are kept.
//! Ordering between a producer's writes and a consumer's reads comes from the handshake
//! (the FIN status store releases, the scheduler's read acquires).

use simpler_core::gm::{Gm, GmFault};
use std::sync::atomic::{AtomicU64, Ordering};

/// GM as the device sees it: device addresses `base..base + len()`, backed by borrowed atomic
/// words; the device thread, every scheduler thread and every core share one.
pub struct GmArena<'a> {
    base: u64,
    words: &'a [AtomicU64],
}

impl<'a> GmArena<'a> {
    /// An arena over `words`, addressed from `base` (8-byte aligned).
    pub fn new(base: u64, words: &'a [AtomicU64]) -> Self {
        Self { base, words }
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

    fn offset(&self, addr: u64, len: usize) -> Result<u64, GmFault> {
        let fault = GmFault {
            addr,
            len: len as u64,
        };
        let off = addr.checked_sub(self.base).ok_or(fault)?;
        let end = off.checked_add(len as u64).ok_or(fault)?;
        if end > self.len() {
            return Err(fault);
        }
        Ok(off)
    }
}

impl Gm for GmArena<'_> {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let mut off = self.offset(addr, dst.len())?;
        let mut done = 0;
        while done < dst.len() {
            let word = self.words[(off / 8) as usize]
                .load(Ordering::Relaxed)
                .to_le_bytes();
            let at = (off % 8) as usize;
            let n = (8 - at).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&word[at..at + n]);
            done += n;
            off += n as u64;
        }
        Ok(())
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        let mut off = self.offset(addr, src.len())?;
        let mut done = 0;
        while done < src.len() {
            let cell = &self.words[(off / 8) as usize];
            let at = (off % 8) as usize;
            let n = (8 - at).min(src.len() - done);
            if n == 8 {
                let mut word = [0u8; 8];
                word.copy_from_slice(&src[done..done + 8]);
                cell.store(u64::from_le_bytes(word), Ordering::Relaxed);
            } else {
                let part = &src[done..done + n];
                // Keep the bytes of the word this write does not cover.
                let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    let mut word = old.to_le_bytes();
                    word[at..at + n].copy_from_slice(part);
                    Some(u64::from_le_bytes(word))
                });
            }
            done += n;
            off += n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_ranges_keep_their_neighbours() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let gm = GmArena::new(0x1000, &words);
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
}
