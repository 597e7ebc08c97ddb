//! `scene`: warm wall time per run of the example scenes on one simulated chip (a2a3sim,
//! 8 clusters), and bgemm's GFLOP/s.
//!
//! Each scene case gets one `ChipWorker` (device set up once), one warm-up round, then
//! `ROUNDS` rounds; a round is one `ChipWorker::run` with its outputs reset, checked against
//! the case's golden. Printed per case: median and minimum device time per run (orchestration
//! start to the last scheduler stopping) and host time per run (staging the entry tensors, the
//! run, copying back), and for bgemm the GFLOP/s of the device time: 2·loop·tile³ per GEMM
//! task, from the case's `A` shape `[groups, grid_k, loop, tile, tile]`, times the GEMM tasks
//! the run dispatched. Also per case: the host overhead per warm round, the wall time of the
//! `ChipWorker::run` call (what its caller waits for) minus the device time, median and minimum;
//! and the median minor page faults the process takes during one warm `run` call (a count, so
//! it does not depend on the machine's load; hbg's idle recorder threads left out), which must
//! stay below 256 plus one per 64 pages of entry tensors. The round's tensors are the prepared
//! ones, reset in place between rounds (`HostTensor::reset_outputs_from`) from one fresh copy
//! of each tensor a run writes that does not start all zero (one that does is zeroed in
//! place); inputs are held once. Cases whose scene is not registered are skipped.
//!
//! bgemm's GFLOP/s is also printed as `<case>_share_of_peak`: its median over the two-core
//! fp32 FMA peak ([`simpler_tests::peak`]), measured in this run before the cases and again
//! after them, the higher of the two (printed as `fp32_fma_gflops_all_cores`).
//!
//! For each bgemm case, `<case>_traffic_ms`: the median of three replays of the case's memory
//! traffic with no arithmetic on every CPU ([`simpler_tests::peak::bgemm_traffic_ms`], over
//! buffers of the entry tensors' sizes on huge pages, as GM is, allocated after every case's
//! resident-memory figure), a floor under its device time on this machine; and
//! `<case>_share_of_peak_bound`, the share of the peak a run as fast as that floor would reach.
//!
//! Per case also `<case>_sched_cpu_ms` and `<case>_device_thread_cpu_ms`: the median CPU
//! time per warm `run` call of the scheduler threads together and of the device thread (the
//! orchestrator during the run, and the run's setup and reset), from
//! `/proc/self/task/*/schedstat` (not printed where the kernel has no such file). On a machine
//! with fewer CPUs than these threads the device time is bound by their sum, so a change
//! that moves work rather than removing it shows here.
//!
//! After each case, `<case>_max_rss_mb`: the process's peak resident memory (`VmHWM`) during
//! the case, from its preparation on (the mark is reset before each case; what the cases
//! before it left resident, and the process's own start-up, count too), and
//! `<case>_max_rss_over_live`: that peak over the bytes the case holds live on the host, its
//! entry tensors and the fresh copies their outputs are reset from. The simulated device's GM
//! holds a copy of the entry tensors besides, so a large case cannot read below one plus its
//! entry bytes over its live bytes (1.84 for bgemm Case0). Where the kernel cannot reset the
//! mark (`/proc/self/clear_refs`), the figures are high-water marks over the cases before it.
//!
//! What an earlier case leaves resident is the allocator's: once a large block is freed,
//! glibc raises its mmap threshold, and the next case's blocks below it come from the heap,
//! which keeps its pages when they are freed. So bgemm Case0 after paged attention reads
//! about 50 MiB more than alone, but as it does alone with `MALLOC_MMAP_THRESHOLD_=131072` (a
//! fixed threshold) in the environment. Run a case alone (`SCENE_CASES=Case0`) for its own
//! peak. `SCENE_RSS_POINTS=1` prints the resident memory and its high-water mark at each step
//! of a case (prepared, device up, templates held, each run and check) to stderr, to see
//! where a peak comes from.
//!
//! Not shown: the reference's figures come from its own C++ simulator on the same kind of
//! machine (vector_example 58.7 ms, Bgemm64 65.5 ms, bgemm Case0 3.3 GFLOP/s); the kernels here
//! run on the host's vector units (`simpler_sim::tile_ops`) on operands lent in place from GM
//! (`Gm::lend`) where they can be, so bgemm measures them (and any tile moves left) as much as
//! the runtime.
//!
//! Run: `cargo bench -p simpler-tests --bench scene` (`SCENE_ROUNDS=n`, `SCENE_CASES=a,b`;
//! `SIMPLER_BENCH_SMOKE=1`: one round of each case but the two largest).

use simpler_core::ArgDirection;
use simpler_host::scenes::{self, Prepared};
use simpler_host::RunOptions;
use simpler_host::{ChipWorker, HostTensor};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::measure::{
    peak_rss_bytes, process_minor_faults, report, report_summary, reset_peak_rss, sized, smoke,
    threads_minor_faults,
};
use std::time::Instant;

const ROUNDS: usize = 20;

/// (scene, case, at most this many rounds).
const CASES: &[(&str, &str, usize)] = &[
    ("vector_example", "default", ROUNDS),
    ("bgemm", "Bgemm64", ROUNDS),
    ("paged_attention", "CaseSmall1", ROUNDS),
    ("paged_attention", "Bench16704", ROUNDS),
    ("bgemm", "Case0", 5),
];

/// The cases a smoke run leaves out: each takes seconds to prepare and run.
const LARGE: &[&str] = &["Bench16704", "Case0"];

/// Floating-point operations of one bgemm GEMM task: `loop` products of two `tile × tile`
/// matrices, read off the `A` entry tensor `[groups, grid_k, loop, tile, tile]`.
fn flop_per_gemm(p: &Prepared) -> f64 {
    let &[_, _, incore_loop, tile, cols] = p.tensors[0].shapes.as_slice() else {
        panic!("bgemm's A is rank 5: {:?}", p.tensors[0].shapes);
    };
    assert_eq!(tile, cols, "bgemm's tiles are square");
    2.0 * incore_loop as f64 * (tile as f64).powi(3)
}

/// CPU nanoseconds so far of the scheduler threads together and of the device thread.
fn thread_cpu() -> [Option<u64>; 2] {
    [
        simpler_tests::measure::threads_cpu_ns("simpler-sched"),
        simpler_tests::measure::threads_cpu_ns("simpler-device"),
    ]
}

/// Minor faults of the whole process but hbg's Graph recorder threads: registration starts
/// them, a tmr run does not use them, and their start-up can overlap the first rounds.
fn run_faults() -> u64 {
    process_minor_faults() - threads_minor_faults("simpler-record")
}

/// With `SCENE_RSS_POINTS` set, prints the process's resident memory and its high-water mark
/// (`VmRSS`, `VmHWM`) at `point` of a case, to stderr: where a case's peak comes from.
fn rss_point(case: &str, point: &str) {
    if std::env::var_os("SCENE_RSS_POINTS").is_none() {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    eprintln!(
        "rss {case} {point}: VmRSS {} VmHWM {}",
        field("VmRSS:"),
        field("VmHWM:")
    );
}

fn main() {
    let rounds = std::env::var("SCENE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(sized(ROUNDS, 1));
    let only = std::env::var("SCENE_CASES").ok();
    let peak_secs = sized(0.3, 0.01);
    let mut peak = simpler_tests::peak::fma_gflops(simpler_tests::peak::cpus(), peak_secs);
    let mut shares = Vec::new();
    let mut replays = Vec::new();
    if !reset_peak_rss() {
        eprintln!("scene: no /proc/self/clear_refs; each max_rss covers the cases before it");
    }
    for &(scene, case, cap) in CASES {
        let name = format!("{scene}_{case}");
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|c| c == case || c == scene))
            || (smoke() && LARGE.contains(&case))
        {
            continue;
        }
        reset_peak_rss();
        let Some(mut prepared) = scenes::find(scene).and_then(|s| s.prepare(case)) else {
            continue;
        };
        rss_point(&name, "prepared");
        let flop = (scene == "bgemm").then(|| flop_per_gemm(&prepared));
        let mut config = DeviceConfig::new(Topology::A2a3);
        let entry: u64 = prepared
            .tensors
            .iter()
            .map(|t| t.data.len() as u64 + 1024)
            .sum();
        config.gm_bytes = config.gm_bytes.max(entry + (64 << 20));
        let mut worker = ChipWorker::init(config).expect("a device");
        let handle = worker.register(prepared.callable.clone());
        rss_point(&name, "device up");
        let (mut device, mut host, mut rate) = (Vec::new(), Vec::new(), Vec::new());
        let (mut overhead, mut faults) = (Vec::new(), Vec::new());
        let (mut sched_cpu, mut device_cpu) = (Vec::new(), Vec::new());
        // The round's tensors are the prepared ones; only those a run writes keep a fresh copy
        // to reset from between rounds (an input is never written back, so it needs none),
        // so the host holds each input once.
        let mut tensors = std::mem::take(&mut prepared.tensors);
        let fresh: Vec<Option<HostTensor>> = tensors
            .iter()
            .map(|t| (t.dir != ArgDirection::In).then(|| t.clone()))
            .collect();
        rss_point(&name, "templates held");
        for round in 0..=rounds.min(cap) {
            for (t, fresh) in tensors.iter_mut().zip(&fresh) {
                if let Some(fresh) = fresh {
                    t.reset_outputs_from(fresh);
                }
            }
            // The CPU times are read outside the fault count: reading them allocates.
            let cpu_before = thread_cpu();
            let faults_before = run_faults();
            let call = Instant::now();
            let r = worker
                .run(
                    handle,
                    &mut tensors,
                    &prepared.scalars,
                    RunOptions::default(),
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let call = call.elapsed();
            let faults_in_run = run_faults().saturating_sub(faults_before);
            let cpu_after = thread_cpu();
            rss_point(&name, "run");
            assert!(
                (prepared.check)(&tensors).pass,
                "{name} round {round} failed its golden"
            );
            assert_eq!(Some(r.outcome.tasks), prepared.tasks, "{name}: tasks run");
            rss_point(&name, "checked");
            if round == 0 {
                continue;
            }
            let d = r.outcome.device.as_secs_f64();
            device.push(d * 1e3);
            host.push(r.host.as_secs_f64() * 1e3);
            overhead.push((call.as_secs_f64() - d) * 1e3);
            faults.push(faults_in_run as f64);
            for (i, samples) in [&mut sched_cpu, &mut device_cpu].into_iter().enumerate() {
                if let (Some(a), Some(b)) = (cpu_before[i], cpu_after[i]) {
                    samples.push(b.saturating_sub(a) as f64 / 1e6);
                }
            }
            if let Some(flop) = flop {
                // Every K step of a group submits one GEMM and one ADD, one subtask each.
                assert_eq!(r.outcome.dispatched, r.outcome.tasks, "{name}: dispatched");
                let gemms = r.outcome.dispatched / 2;
                rate.push(gemms as f64 * flop / d / 1e9);
            }
        }
        report_summary("scene", &format!("{name}_device_ms"), &mut device, "ms");
        report_summary("scene", &format!("{name}_host_ms"), &mut host, "ms");
        report_summary(
            "scene",
            &format!("{name}_host_overhead_ms"),
            &mut overhead,
            "ms",
        );
        if let Some(s) = simpler_tests::measure::summarize(&mut faults) {
            report(
                "scene",
                &format!("{name}_minor_faults_per_warm_round"),
                s.median,
                "faults",
            );
            // A warm run reuses its staging and the host tensors' own bytes: its faults do
            // not grow with the entry (a run that copies through fresh buffers takes one per
            // page of them).
            let bound = 256.0 + (entry / 4096 / 64) as f64;
            assert!(
                s.median <= bound,
                "{name}: {} minor faults per warm round, more than {bound}",
                s.median
            );
        }
        for (figure, samples) in [
            ("sched_cpu_ms", &mut sched_cpu),
            ("device_thread_cpu_ms", &mut device_cpu),
        ] {
            if let Some(s) = simpler_tests::measure::summarize(samples) {
                report("scene", &format!("{name}_{figure}"), s.median, "ms");
            }
        }
        let max_rss = peak_rss_bytes();
        report(
            "scene",
            &format!("{name}_max_rss_mb"),
            max_rss as f64 / (1 << 20) as f64,
            "MiB",
        );
        let live: usize = tensors
            .iter()
            .chain(fresh.iter().flatten())
            .map(|t| t.data.len())
            .sum();
        report(
            "scene",
            &format!("{name}_max_rss_over_live"),
            max_rss as f64 / live.max(1) as f64,
            "times",
        );
        if let Some(s) = simpler_tests::measure::summarize(&mut rate) {
            report_summary("scene", &format!("{name}_gflops"), &mut rate, "GFLOP/s");
            shares.push((name.clone(), s.median));
        }
        if let Some(flop) = flop {
            let shape: Vec<usize> = tensors[0].shapes.iter().map(|&d| d as usize).collect();
            let Ok(shape) = <[usize; 5]>::try_from(shape) else {
                panic!("{name}: A is [groups, grid_k, loop, tile, tile]");
            };
            let gflop = (shape[0] * shape[1]) as f64 * flop / 1e9;
            let c_bytes = tensors[2].data.len();
            replays.push((name, shape, c_bytes, config.ring.heap_bytes as usize, gflop));
        }
    }
    // After every case's resident-memory figure, so the replays' buffers are in none of them.
    let mut bounds = Vec::new();
    for (name, shape, c_bytes, heap, gflop) in replays {
        let ms = traffic_ms(shape, c_bytes, heap);
        report("scene", &format!("{name}_traffic_ms"), ms, "ms");
        bounds.push((name, gflop / (ms / 1e3)));
    }
    peak = peak.max(simpler_tests::peak::fma_gflops(
        simpler_tests::peak::cpus(),
        peak_secs,
    ));
    report("scene", "fp32_fma_gflops_all_cores", peak, "GFLOP/s");
    for (name, gflops) in shares {
        report(
            "scene",
            &format!("{name}_share_of_peak"),
            gflops / peak,
            "fraction",
        );
    }
    for (name, gflops) in bounds {
        report(
            "scene",
            &format!("{name}_share_of_peak_bound"),
            gflops / peak,
            "fraction",
        );
    }
}

/// The median of three replays of a bgemm case's traffic on every CPU: `A` and `B` of
/// `shape`, `C` of `c_bytes`, products in a ring of `heap` bytes. Its buffers are its own,
/// written once before (so their pages are committed, on huge pages where the kernel grants
/// them, as GM's are) and freed after.
fn traffic_ms(shape: [usize; 5], c_bytes: usize, heap: usize) -> f64 {
    let ab = shape.iter().product::<usize>() * 4;
    let buffer = |bytes: usize| {
        let mut v = vec![0u8; bytes];
        simpler_sim::Pages::Huge.apply(&v);
        v.fill(1);
        v
    };
    let (a, b, mut c) = (buffer(ab), buffer(ab), buffer(c_bytes));
    let threads = simpler_tests::peak::cpus();
    let mut ms: Vec<f64> = (0..3)
        .map(|_| simpler_tests::peak::bgemm_traffic_ms(&a, &b, &mut c, shape, heap, threads))
        .collect();
    simpler_tests::measure::summarize(&mut ms).map_or(0.0, |s| s.median)
}
