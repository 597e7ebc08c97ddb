//! `peak`: this machine's limits, so every kernel figure can be quoted as a share of a peak
//! measured in the same run.
//!
//! - `fp32_fma_gflops_one_core` and `fp32_fma_gflops_all_cores`: fused multiply-adds on
//!   registers only, 12 independent accumulator chains per thread (enough to hide the FMA
//!   latency on every x86-64 core in use), the widest vector unit the CPU reports at run time
//!   (AVX-512F, else AVX2 with FMA, else a portable loop the compiler vectorises for the
//!   baseline target); one thread, then one per available CPU started together. A
//!   multiply-add counts as 2 FLOP.
//! - `memcpy_gbps`: bytes copied per second between two warm 64 MiB buffers (both written
//!   once before timing, so no first-touch page clearing is measured), one thread.
//! - `tile_matmul_gflops_host` and `tile_matmul_gflops_portable`: one 128x128x128 f32 product
//!   after another on one thread, through the simulator's tile operations
//!   (`simpler_sim::tile_ops::HostTileOps`) and through the firmware's portable loop
//!   (`simpler_aicore::Portable`), with `tile_matmul_share_of_one_core_peak` for the first.
//! - `tile_matmul_streamed_gflops_{prefetched,host,gemm}`: the same product over 128 MiB of
//!   distinct operand slices, each read once as bgemm's are: through the host's tile
//!   operations with the next slice queued for prefetch before each product
//!   (`simpler_sim::tile_ops::ahead`, what the `matmul` kernel's hint does), without it, and
//!   on `gemm` (`simpler_sim::tile_ops::matmul_on_gemm`), which packs each operand first.
//! - `tile_matmul_gflops_{avx2,avx512}`: the same warm product in each unit's register blocks
//!   the CPU has (`simpler_sim::tile_ops::blocked::matmul_on`), so that the AVX2 blocks are
//!   timed on an AVX-512 CPU too.
//! - `tile_softmax_ns_{baseline,avx2,avx512}`: one 16x16 softmax of rows with bf16 rounding
//!   (paged attention's `pa_softmax` tile, `simpler_sim::tile_ops::lanes::softmax_rows_on`),
//!   nanoseconds a call, on each vector unit the CPU has (the others are not printed).
//! - `isa`: which vector unit the FMA figures used (0 portable, 256 AVX2+FMA, 512 AVX-512F).
//!
//! Each figure is the median and the maximum of repeated samples (the maximum is the least
//! disturbed one on a shared machine). [`simpler_tests::peak`] holds the measuring code, which
//! the `scene` benchmark also runs so its GFLOP/s are quoted against a peak of the same run.
//!
//! Not shown: peaks under memory traffic, or with the frequency a long AVX-512 load settles at
//! on some parts; the all-core figure assumes the other tenants of the machine leave the CPUs
//! free for the sample (on a busy machine it reads low).
//!
//! Run: `cargo bench -p simpler-tests --bench peak` (`SIMPLER_BENCH_SMOKE=1`: one short sample).

use simpler_aicore::{Portable, TileOps};
use simpler_sim::tile_ops::lanes::{softmax_rows_on, Unit};
use simpler_sim::tile_ops::{ahead, blocked, matmul_on_gemm, HostTileOps};
use simpler_tests::measure::{report, sized};
use simpler_tests::peak;
use std::time::Instant;

/// GFLOP/s of `reps` warm 128x128x128 products, each `product(a, b, c, t)` with `t = 128`.
fn tile_matmul_with(
    reps: usize,
    mut product: impl FnMut(&[f32], &[f32], &mut [f32], usize),
) -> f64 {
    const T: usize = 128;
    let a: Vec<f32> = (0..T * T).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
    let b: Vec<f32> = (0..T * T).map(|i| (i % 7) as f32 / 7.0 - 0.5).collect();
    let mut c = vec![0f32; T * T];
    let start = Instant::now();
    for _ in 0..reps {
        product(&a, std::hint::black_box(&b), &mut c, T);
    }
    std::hint::black_box(&c);
    (2 * T * T * T * reps) as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// GFLOP/s of `reps` 128x128x128 products on `ops`.
fn tile_matmul(ops: &dyn TileOps, reps: usize) -> f64 {
    tile_matmul_with(reps, |a, b, c, t| ops.matmul(a, b, c, t, t))
}

/// GFLOP/s of `reps` 128x128x128 products in `unit`'s register blocks
/// (`simpler_sim::tile_ops::blocked`), which must be a unit this CPU has blocks for.
fn tile_matmul_on(unit: Unit, reps: usize) -> f64 {
    tile_matmul_with(reps, |a, b, c, t| {
        let ran = blocked::matmul_on(unit, a, b, c, t, t, t);
        assert!(ran, "{unit:?} has no blocks here");
    })
}

/// The vector units this CPU has, with their figures' names.
fn units() -> Vec<(Unit, &'static str)> {
    let mut units = vec![(Unit::Baseline, "baseline")];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            units.push((Unit::Avx2, "avx2"));
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            units.push((Unit::Avx512, "avx512"));
        }
    }
    units
}

/// Nanoseconds a call of `reps` 16x16 softmaxes (bf16 rounding, every column live) on `unit`,
/// each on a fresh copy of the same scores.
fn tile_softmax(unit: Unit, reps: usize) -> f64 {
    const T: usize = 16;
    let s0: Vec<f32> = (0..T * T)
        .map(|i| ((i * 53) % 31) as f32 * 0.7 - 9.0)
        .collect();
    let (mut s, mut m, mut l) = (s0.clone(), vec![0f32; T], vec![0f32; T]);
    let start = Instant::now();
    for _ in 0..reps {
        s.copy_from_slice(&s0);
        softmax_rows_on(
            unit,
            std::hint::black_box(&mut s),
            &mut m,
            &mut l,
            T,
            T,
            true,
        );
    }
    std::hint::black_box((&s, &m, &l));
    start.elapsed().as_nanos() as f64 / reps as f64
}

/// Distinct 128x128 operand slices, read once each per sample as bgemm's are.
struct Slices {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

/// Which path a streamed sample multiplies on.
#[derive(Clone, Copy)]
enum Streamed {
    /// The host's tile operations, the next slice queued for prefetch before each product.
    Prefetched,
    /// The host's tile operations, no hint.
    Host,
    /// `gemm`.
    Gemm,
}

impl Slices {
    const T: usize = 128;

    fn new(bytes: usize) -> Self {
        let elems = (bytes / 2 / 4).max(Self::T * Self::T);
        let elems = elems / (Self::T * Self::T) * Self::T * Self::T;
        Self {
            a: (0..elems).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect(),
            b: (0..elems).map(|i| (i % 7) as f32 / 7.0 - 0.5).collect(),
            c: vec![0.0; Self::T * Self::T],
        }
    }

    /// GFLOP/s of one product per slice, in order, on `how`.
    fn gflops(&mut self, how: Streamed) -> f64 {
        let slice = Self::T * Self::T;
        let (a, b, c) = (&self.a, &self.b, &mut self.c);
        let slices = a.len() / slice;
        let start = Instant::now();
        for s in 0..slices {
            let (sa, sb) = (&a[s * slice..][..slice], &b[s * slice..][..slice]);
            match how {
                Streamed::Prefetched | Streamed::Host => {
                    if matches!(how, Streamed::Prefetched) && s + 1 < slices {
                        for next in [
                            &a[(s + 1) * slice..][..slice],
                            &b[(s + 1) * slice..][..slice],
                        ] {
                            ahead::queue(next.as_ptr().cast(), slice * 4);
                        }
                    }
                    HostTileOps.matmul(sa, sb, c, Self::T, Self::T);
                }
                Streamed::Gemm => matmul_on_gemm(sa, sb, c, Self::T, Self::T),
            }
        }
        ahead::clear();
        std::hint::black_box(&c);
        (2 * slice * Self::T * slices) as f64 / start.elapsed().as_secs_f64() / 1e9
    }
}

fn main() {
    let samples = sized(7, 1);
    let isa = peak::fma_isa();
    report("peak", "isa", isa.bits() as f64, "bits");
    let mut one = Vec::new();
    let mut all = Vec::new();
    let mut copy = Vec::new();
    let (mut host, mut portable) = (Vec::new(), Vec::new());
    let mut bufs = peak::CopyBuffers::new(sized(64 << 20, 1 << 20));
    let mut slices = Slices::new(sized(128 << 20, 1 << 20));
    let mut streamed = [Vec::new(), Vec::new(), Vec::new()];
    let units = units();
    let mut softmax: Vec<Vec<f64>> = vec![Vec::new(); units.len()];
    let blocked_units: Vec<(Unit, &str)> = units
        .iter()
        .copied()
        .filter(|&(u, _)| blocked::Block::of(u).is_some())
        .collect();
    let mut by_unit: Vec<Vec<f64>> = vec![Vec::new(); blocked_units.len()];
    // Interleaved: a drift of the machine's load moves every figure alike.
    for _ in 0..samples {
        one.push(peak::fma_gflops(1, sized(0.2, 0.01)));
        all.push(peak::fma_gflops(peak::cpus(), sized(0.2, 0.01)));
        copy.push(bufs.gbps(sized(8, 1)));
        host.push(tile_matmul(&HostTileOps, sized(2000, 2)));
        portable.push(tile_matmul(&Portable, sized(100, 1)));
        for (xs, &(unit, _)) in softmax.iter_mut().zip(&units) {
            xs.push(tile_softmax(unit, sized(20_000, 10)));
        }
        for (xs, &(unit, _)) in by_unit.iter_mut().zip(&blocked_units) {
            xs.push(tile_matmul_on(unit, sized(2000, 2)));
        }
        for (xs, how) in
            streamed
                .iter_mut()
                .zip([Streamed::Prefetched, Streamed::Host, Streamed::Gemm])
        {
            xs.push(slices.gflops(how));
        }
    }
    let [prefetched, streamed_host, streamed_gemm] = streamed;
    let one_core = simpler_tests::measure::summarize(&mut one.clone())
        .unwrap()
        .median;
    let host_median = simpler_tests::measure::summarize(&mut host.clone())
        .unwrap()
        .median;
    report(
        "peak",
        "tile_matmul_share_of_one_core_peak",
        host_median / one_core,
        "fraction",
    );
    for (figure, mut xs, unit) in [
        ("fp32_fma_gflops_one_core", one, "GFLOP/s"),
        ("fp32_fma_gflops_all_cores", all, "GFLOP/s"),
        ("memcpy_gbps", copy, "GB/s"),
        ("tile_matmul_gflops_host", host, "GFLOP/s"),
        ("tile_matmul_gflops_portable", portable, "GFLOP/s"),
        (
            "tile_matmul_streamed_gflops_prefetched",
            prefetched,
            "GFLOP/s",
        ),
        ("tile_matmul_streamed_gflops_host", streamed_host, "GFLOP/s"),
        ("tile_matmul_streamed_gflops_gemm", streamed_gemm, "GFLOP/s"),
    ] {
        let s = simpler_tests::measure::summarize(&mut xs).expect("samples");
        report("peak", &format!("{figure}_median"), s.median, unit);
        report("peak", &format!("{figure}_max"), *xs.last().unwrap(), unit);
        assert!(s.median > 0.0, "{figure}: {}", s.median);
    }
    for (mut xs, &(_, name)) in by_unit.into_iter().zip(&blocked_units) {
        let s = simpler_tests::measure::summarize(&mut xs).expect("samples");
        let figure = format!("tile_matmul_gflops_{name}");
        report("peak", &format!("{figure}_median"), s.median, "GFLOP/s");
        report(
            "peak",
            &format!("{figure}_max"),
            *xs.last().unwrap(),
            "GFLOP/s",
        );
        assert!(s.median > 0.0, "{figure}: {}", s.median);
    }
    for (mut xs, &(_, name)) in softmax.into_iter().zip(&units) {
        let s = simpler_tests::measure::summarize(&mut xs).expect("samples");
        report(
            "peak",
            &format!("tile_softmax_ns_{name}_median"),
            s.median,
            "ns",
        );
        // The least disturbed sample of a time is its smallest.
        report("peak", &format!("tile_softmax_ns_{name}_min"), xs[0], "ns");
        assert!(s.median > 0.0, "softmax {name}: {}", s.median);
    }
    report("peak", "cpus", peak::cpus() as f64, "cpus");
}
