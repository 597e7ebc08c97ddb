//! The machine's limits, measured: fp32 fused multiply-add throughput per thread and over all
//! CPUs, and memcpy bandwidth between warm buffers. The `peak` benchmark prints them; the
//! `scene` benchmark measures them in its own run so a kernel's GFLOP/s is quoted as a share of
//! a peak taken under the same load.
//!
//! The FMA loop keeps 12 independent accumulator chains per thread in registers: an FMA's
//! latency is 4 cycles and a core issues up to two per cycle, so 8 chains is the least that
//! saturates it and 12 leaves margin. Nothing touches memory inside the loop.
//!
//! `unsafe` here is calling a `#[target_feature]` function, only after the CPU was seen to
//! have that feature at run time.
#![allow(unsafe_code)]

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Independent accumulator chains per thread.
const CHAINS: usize = 12;
/// Inner iterations between two clock reads.
const BLOCK: u64 = 1 << 16;

/// The vector unit a measurement ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// 512-bit AVX-512F FMA.
    Avx512,
    /// 256-bit AVX2 with FMA.
    Avx2Fma,
    /// Whatever the compiler makes of a portable loop for the build's baseline target.
    Portable,
}

impl Isa {
    /// Vector width in bits (0 for the portable loop).
    pub fn bits(self) -> u32 {
        match self {
            Self::Avx512 => 512,
            Self::Avx2Fma => 256,
            Self::Portable => 0,
        }
    }
}

/// The widest FMA unit this CPU reports.
pub fn fma_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx2Fma;
        }
    }
    Isa::Portable
}

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// FLOP of `blocks` blocks of the loop on `isa`.
fn flop(isa: Isa, blocks: u64) -> f64 {
    let lanes = match isa {
        Isa::Avx512 => 16,
        Isa::Avx2Fma => 8,
        Isa::Portable => 8,
    };
    (blocks * BLOCK * CHAINS as u64 * lanes * 2) as f64
}

/// Runs whole blocks of the FMA loop for at least `secs`; returns the blocks run and the
/// accumulators' sum (so the work cannot be optimised away).
fn fma_for(isa: Isa, secs: f64) -> (u64, f32) {
    let until = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let (mut blocks, mut sink) = (0, 0.0f32);
    while blocks == 0 || start.elapsed() < until {
        sink += match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `fma_isa` returned `Avx512` only after detecting avx512f on this CPU.
            Isa::Avx512 => unsafe { x86::fma_avx512(BLOCK) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `fma_isa` returned `Avx2Fma` only after detecting avx2 and fma.
            Isa::Avx2Fma => unsafe { x86::fma_avx2(BLOCK) },
            _ => fma_portable(BLOCK),
        };
        blocks += 1;
    }
    (blocks, sink)
}

/// fp32 FMA GFLOP/s of `threads` threads started together, each running the loop for about
/// `secs` seconds on the widest unit ([`fma_isa`]): total FLOP over the slowest thread's time.
pub fn fma_gflops(threads: usize, secs: f64) -> f64 {
    let isa = fma_isa();
    let barrier = Barrier::new(threads);
    let results: Vec<(u64, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    let (blocks, sink) = fma_for(isa, secs);
                    let took = start.elapsed().as_secs_f64();
                    std::hint::black_box(sink);
                    (blocks, took)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: f64 = results.iter().map(|&(b, _)| flop(isa, b)).sum();
    let slowest = results.iter().map(|&(_, t)| t).fold(0.0, f64::max);
    total / slowest / 1e9
}

/// The portable loop: 12 chains of 8 lanes, which the compiler vectorises as far as the
/// baseline target allows (no FMA instruction on baseline x86-64: a multiply and an add).
fn fma_portable(iters: u64) -> f32 {
    let mut acc = [[0.5f32; 8]; CHAINS];
    let (x, y) = (
        std::hint::black_box(0.999_9f32),
        std::hint::black_box(1e-4f32),
    );
    for _ in 0..iters {
        for chain in acc.iter_mut() {
            for lane in chain.iter_mut() {
                *lane = *lane * x + y;
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;

    /// `iters` rounds of one FMA on each of 12 512-bit accumulators.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma_avx512(iters: u64) -> f32 {
        let x = _mm512_set1_ps(std::hint::black_box(0.999_9));
        let y = _mm512_set1_ps(std::hint::black_box(1e-4));
        let mut acc = [_mm512_set1_ps(0.5); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, x, y);
            }
        }
        let mut sum = _mm512_setzero_ps();
        for a in acc {
            sum = _mm512_add_ps(sum, a);
        }
        _mm512_reduce_add_ps(sum)
    }

    /// `iters` rounds of one FMA on each of 12 256-bit accumulators.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_avx2(iters: u64) -> f32 {
        let x = _mm256_set1_ps(std::hint::black_box(0.999_9));
        let y = _mm256_set1_ps(std::hint::black_box(1e-4));
        let mut acc = [_mm256_set1_ps(0.5); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, x, y);
            }
        }
        let mut lanes = [0.0f32; 8];
        let mut sum = _mm256_setzero_ps();
        for a in acc {
            sum = _mm256_add_ps(sum, a);
        }
        _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
        lanes.iter().sum()
    }
}

/// Two warm buffers for measuring memcpy bandwidth.
pub struct CopyBuffers {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl CopyBuffers {
    /// Two buffers of `bytes`, every page of both written once.
    pub fn new(bytes: usize) -> Self {
        let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        let dst = vec![1u8; bytes];
        Self { src, dst }
    }

    /// GB/s of `reps` copies of the whole source into the destination (bytes copied, not
    /// bytes read plus written).
    pub fn gbps(&mut self, reps: usize) -> f64 {
        let start = Instant::now();
        for _ in 0..reps {
            self.dst.copy_from_slice(std::hint::black_box(&self.src));
            std::hint::black_box(&mut self.dst);
        }
        (self.src.len() * reps) as f64 / start.elapsed().as_secs_f64() / 1e9
    }
}

/// bgemm's memory traffic with no arithmetic: how long `threads` threads take to move what a
/// bgemm run moves, a floor under its device time on this machine.
///
/// `a` and `b` are the entry tensors' bytes, `[groups, grid_k, loop, tile, tile]` f32 each, `c`
/// the `[groups · loop, tile, tile]` output's (overwritten with meaningless bytes). Per GEMM
/// task `(g, k)`, as the scene's: every cache line of the `loop` slices of `a[g, k]` and
/// `b[g, k]` read once, a product of `loop` tiles written whole into a ring of the heap's
/// bytes (each thread its share, wrapping as the heap's claims do), then the ADD: the
/// product added into `c[g]`, read and written whole. Thread `t` takes the groups
/// `g ≡ t (mod threads)`, so each owns the `c` rows it adds into. The stores are ordinary
/// ones, so an output line missing from the cache is read for ownership, as the kernels'
/// are.
///
/// Not shown: the order the runtime runs the tasks in, and the compute the run overlaps
/// with its misses; so a run can come close to this time, not below it.
pub fn bgemm_traffic_ms(
    a: &[u8],
    b: &[u8],
    c: &mut [u8],
    [groups, grid_k, lp, tile, cols]: [usize; 5],
    heap: usize,
    threads: usize,
) -> f64 {
    let slice = tile * cols * 4;
    let product = lp * slice;
    let threads = threads.max(1);
    assert!(
        a.len() >= groups * grid_k * product && b.len() == a.len(),
        "a and b are [groups, grid_k, loop, tile, tile] f32"
    );
    assert!(
        c.len() >= groups * product,
        "c is [groups · loop, tile, tile] f32"
    );
    let ring = (heap / threads).max(product);
    let mut owned: Vec<Vec<(usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (g, c_g) in c.chunks_exact_mut(product).take(groups).enumerate() {
        owned[g % threads].push((g, c_g));
    }
    let barrier = Barrier::new(threads);
    // From the first thread's start to the last one's end, each read on its own thread (a
    // thread's start-up and join are not traffic).
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = owned
            .into_iter()
            .map(|mine| {
                let barrier = &barrier;
                s.spawn(move || {
                    // Written before the clock starts, so no page of it faults in the replay.
                    let mut heap = vec![1u8; ring];
                    let mut top = 0;
                    let mut seen = 0u64;
                    barrier.wait();
                    let start = Instant::now();
                    for (g, c_g) in mine {
                        for k in 0..grid_k {
                            let at = (g * grid_k + k) * product;
                            for src in [&a[at..at + product], &b[at..at + product]] {
                                // One byte per line: the line is what moves.
                                seen += src.iter().step_by(64).map(|&x| x as u64).sum::<u64>();
                            }
                            if ring - top < product {
                                top = 0;
                            }
                            let p = &mut heap[top..top + product];
                            top += product;
                            let salt = seen as u8;
                            for (i, o) in p.iter_mut().enumerate() {
                                *o = i as u8 ^ salt;
                            }
                            for (x, y) in c_g.iter_mut().zip(p.iter()) {
                                *x = x.wrapping_add(*y);
                            }
                        }
                    }
                    std::hint::black_box(seen);
                    (start, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a replay thread"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first).as_secs_f64() * 1e3,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bgemm_replay_adds_every_product_into_its_own_group() {
        // Two groups of two K steps, one 16 × 16 slice each: `c[g]` gets two products added,
        // each byte `i ^ salt`; with the inputs zero the salt is 0, so every byte of `c` ends
        // as `2 · (i mod 256)` whichever thread ran the group.
        let shape = [2, 2, 1, 16, 16];
        let n = 2 * 2 * 16 * 16 * 4;
        let (a, b) = (vec![0u8; n], vec![0u8; n]);
        let mut c = vec![0u8; 2 * 16 * 16 * 4];
        let ms = bgemm_traffic_ms(&a, &b, &mut c, shape, 4096, 2);
        assert!(ms >= 0.0);
        for g in c.chunks_exact(1024) {
            for (i, &x) in g.iter().enumerate() {
                assert_eq!(x, (2 * i) as u8, "byte {i}");
            }
        }
    }

    #[test]
    fn every_isa_the_cpu_has_computes_the_same_recurrence() {
        // acc' = acc * x + y from 0.5, in f32, per lane; all lanes and chains agree, so the
        // sum is lanes * chains * the scalar recurrence (within rounding of the FMA's single
        // rounding against the portable loop's two).
        let mut scalar = 0.5f32;
        for _ in 0..1000 {
            scalar = scalar * 0.999_9 + 1e-4;
        }
        let portable = fma_portable(1000);
        assert!(
            (portable - scalar * 96.0).abs() < 1e-3,
            "{portable} vs {scalar}"
        );
        #[cfg(target_arch = "x86_64")]
        {
            if fma_isa() == Isa::Avx512 {
                // SAFETY: detected above.
                let v = unsafe { x86::fma_avx512(1000) };
                assert!((v - scalar * 192.0).abs() < 1e-2, "{v} vs {scalar}");
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: detected above.
                let v = unsafe { x86::fma_avx2(1000) };
                assert!((v - scalar * 96.0).abs() < 1e-2, "{v} vs {scalar}");
            }
        }
    }

    #[test]
    fn a_copy_moves_the_bytes() {
        let mut b = CopyBuffers::new(1 << 16);
        assert!(b.gbps(1) > 0.0);
        assert_eq!(b.dst, b.src);
    }
}
