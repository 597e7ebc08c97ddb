//! `submit`: the tmr orchestrator's submit path per task (TensorMap lookup and insert, ring
//! claim, wiring, publish), in-process, no kernels.
//!
//! Workloads (`simpler_tests::workloads`): the scenes' own task streams
//! (`simpler_host::scenes::{paged_attention, bgemm}::stream`, run on a bare orchestrator): the
//! paged-attention case Bench16704, batch 64 x 65 KV blocks = 16,704 tasks (the stream of the
//! reference's 0.874 us/task AICPU figure), and bgemm Case0, 250 groups x grid_k 2 = 1000 tasks,
//! tile 128 (each view spanning the case's 4 incore-loop tiles). Each runs on its own runtime at
//! the default sizes (`OrchestratorConfig::with_heaps`: windows 16,384, heaps 256 MiB, 16,384
//! edges per ring, TensorMap 65,536 entries), allocated once; rounds run back to back on it, so
//! the rings wrap as in a long run. A round is one whole stream inside an outer AUTO scope; each
//! batch element (group) sits in its own inner scope, and after each inner `scope_end` the
//! `Drain` stand-in (record off) completes every ready task, as a scheduler keeping up would, so
//! slots retire.
//!
//! Four runtimes: each workload with write-after-read tracking off (the default, the
//! reference's behaviour) and on (`Orchestrator::set_track_war`); `<w>_war_cost_ratio` is the
//! median orchestrator time with tracking over without. `SUBMIT_WAR=0` skips the tracking arms.
//!
//! Arms, interleaved per sample (pa, pa_war, bgemm, bgemm_war; each a whole and a split
//! sample):
//! - whole: one clock read around the round; `<w>_round_ns_per_task` is orchestration plus
//!   drain;
//! - split: the `drain.run()` calls (and any wait the orchestrator made, which also drains) are
//!   timed and subtracted: `<w>_ns_per_task` is the orchestrator alone (submits, views of the
//!   external tensors and output descriptions, paged attention's block-table and context-length
//!   reads, scope calls), `<w>_drain_ns_per_task` the scheduler stand-in.
//!
//! A sample is one round of paged attention (16,704 tasks) or 16 rounds of bgemm (16,000 tasks).
//! Counts beside the durations: host heap allocations per warm round (a counting global
//! allocator; 0 means the submit path and the drain allocate nothing), minor page faults per warm
//! round (`/proc/self/stat`), and the times a submit blocked on a full resource.
//!
//! Not shown: concurrency. The drain runs on the submitting thread, between scopes, so nothing
//! here measures cache-line traffic between an orchestrator and scheduler threads, nor the
//! orchestrator finding producers already complete (it never does within a scope here). The
//! split arm's figures include the clock reads around each drain (`clock_read_ns` is printed;
//! bgemm pays two per 4 tasks). Nor the payload writes: the bare orchestrator drops the kernel
//! ids and scalars the device runtime would stage per task.
//!
//! Run: `cargo bench -p simpler-tests --bench submit` (`SUBMIT_SAMPLES=n` for more samples;
//! `SIMPLER_BENCH_SMOKE=1`: one sample per arm).

use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, OrchestratorLayout, Waiter,
};
use simpler_core::scope::ScopeMode;
use simpler_tests::alloc_count::{self as counter, Counting};
use simpler_tests::harness::{with_runtime, Drain};
use simpler_tests::measure::{
    process_minor_faults as minflt, report, report_summary, sized, summarize,
};
use simpler_tests::workloads::{Backstop, Workload};
use std::hint::black_box;
use std::time::Instant;

#[global_allocator]
static GLOBAL: Counting = Counting;

const NAME: &str = "submit";
const HEAPS: [u64; 4] = [
    0x100_0000_0000,
    0x200_0000_0000,
    0x300_0000_0000,
    0x400_0000_0000,
];
/// Samples per arm; `SUBMIT_SAMPLES` overrides (at least 15 for reported figures; more for a
/// profiler run).
const SAMPLES: usize = 21;
const WARMUP_ROUNDS: usize = 3;
/// The paged-attention case: 64 sequences of 65 KV blocks.
const PA_CASE: &str = "Bench16704";
const PA_ROUNDS: usize = 1;
/// The bgemm case: 250 groups, grid_k 2, 128 x 128 tiles.
const BG_CASE: &str = "Case0";
const BG_ROUNDS: usize = 16;

/// The drain, also standing in as the waiter, timing its waits and (in the split arm) the
/// drains after each of the stream's scopes.
struct Timed<'s> {
    drain: Drain<'s>,
    /// Whether to time the drains after each scope (the split arm).
    split: bool,
    /// Nanoseconds spent in waits since the sample started.
    wait_ns: u64,
    /// Nanoseconds spent in the per-scope drains since the sample started (split arm only).
    drain_ns: u64,
}

impl Waiter for Timed<'_> {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        let start = Instant::now();
        let r = Waiter::wait(&mut self.drain, on);
        self.wait_ns += start.elapsed().as_nanos() as u64;
        r
    }
}

impl Backstop for Timed<'_> {
    fn scope_closed(&mut self) {
        if self.split {
            let t = Instant::now();
            black_box(self.drain.run());
            self.drain_ns += t.elapsed().as_nanos() as u64;
        } else {
            black_box(self.drain.run());
        }
    }
}

/// Nanoseconds of one sample: everything, and the part spent draining (split arm only).
#[derive(Default)]
struct Span {
    total: u64,
    drain: u64,
    tasks: u64,
}

/// Runs `rounds` whole streams back to back.
fn sample(
    workload: &Workload,
    orch: &mut Orchestrator<'_>,
    w: &mut Timed<'_>,
    rounds: usize,
    split: bool,
) -> Span {
    let mut tasks = 0usize;
    w.split = split;
    w.wait_ns = 0;
    w.drain_ns = 0;
    let start = Instant::now();
    for _ in 0..rounds {
        orch.scope_begin(ScopeMode::Auto).expect("a scope opens");
        tasks += workload.run(orch, w).expect("the stream submits");
        orch.scope_end().expect("the scope closes");
        black_box(w.drain.run());
    }
    let total = start.elapsed().as_nanos() as u64;
    assert_eq!(
        tasks as u64,
        rounds as u64 * workload.tasks(),
        "the stream submits the scene's tasks"
    );
    Span {
        total,
        drain: w.drain_ns + w.wait_ns,
        tasks: tasks as u64,
    }
}

/// The median of `samples` (0 when empty).
fn median(samples: &[f64]) -> f64 {
    summarize(&mut samples.to_vec()).map_or(0.0, |s| s.median)
}

/// Per-workload samples and counts.
struct Arm<'a> {
    name: &'a str,
    workload: Workload,
    rounds: usize,
    round: Vec<f64>,
    orch: Vec<f64>,
    drain: Vec<f64>,
    allocs: u64,
    faults: u64,
    waits: u64,
    measured_rounds: u64,
}

impl<'a> Arm<'a> {
    fn new(name: &'a str, workload: Workload, rounds: usize) -> Self {
        Self {
            name,
            workload,
            rounds,
            round: Vec::new(),
            orch: Vec::new(),
            drain: Vec::new(),
            allocs: 0,
            faults: 0,
            waits: 0,
            measured_rounds: 0,
        }
    }

    /// The first rounds on fresh memory; returns the minor faults they took.
    fn warm_up(&mut self, orch: &mut Orchestrator<'_>, w: &mut Timed<'_>) -> u64 {
        let f0 = minflt();
        for _ in 0..WARMUP_ROUNDS {
            sample(&self.workload, orch, w, 1, false);
        }
        minflt() - f0
    }

    /// One whole-arm and one split-arm sample.
    fn step(&mut self, orch: &mut Orchestrator<'_>, w: &mut Timed<'_>) {
        let f0 = minflt();
        let waits0 = w.drain.waits;
        let a0 = counter::process();
        let whole = sample(&self.workload, orch, w, self.rounds, false);
        let split = sample(&self.workload, orch, w, self.rounds, true);
        let a1 = counter::process();
        self.allocs += a1 - a0;
        self.waits += w.drain.waits - waits0;
        self.faults += minflt() - f0;
        self.measured_rounds += 2 * self.rounds as u64;
        self.round.push(whole.total as f64 / whole.tasks as f64);
        self.orch
            .push((split.total - split.drain) as f64 / split.tasks as f64);
        self.drain.push(split.drain as f64 / split.tasks as f64);
    }

    fn report(&mut self, cold_faults: u64) {
        let tasks = self.workload.tasks();
        let n = self.name;
        report(NAME, &format!("{n}_tasks"), tasks as f64, "tasks");
        report_summary(NAME, &format!("{n}_ns_per_task"), &mut self.orch, "ns/task");
        report_summary(
            NAME,
            &format!("{n}_drain_ns_per_task"),
            &mut self.drain,
            "ns/task",
        );
        report_summary(
            NAME,
            &format!("{n}_round_ns_per_task"),
            &mut self.round,
            "ns/task",
        );
        let r = self.measured_rounds.max(1) as f64;
        report(
            NAME,
            &format!("{n}_heap_allocs_per_round"),
            self.allocs as f64 / r,
            "allocs",
        );
        report(
            NAME,
            &format!("{n}_minflt_per_round"),
            self.faults as f64 / r,
            "faults",
        );
        report(
            NAME,
            &format!("{n}_minflt_first_{WARMUP_ROUNDS}_rounds"),
            cold_faults as f64,
            "faults",
        );
        report(
            NAME,
            &format!("{n}_waits_per_round"),
            self.waits as f64 / r,
            "waits",
        );
    }
}

fn main() {
    let samples = std::env::var("SUBMIT_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(sized(SAMPLES, 1));
    let config = OrchestratorConfig::with_heaps(HEAPS);
    let layout = OrchestratorLayout::new(config).expect("the default configuration is valid");
    let bytes = layout.size() + layout.sched().size();

    // Clock cost, for reading the split arm.
    let mut clock = Vec::new();
    for _ in 0..samples {
        let start = Instant::now();
        for _ in 0..10_000 {
            black_box(Instant::now());
        }
        clock.push(start.elapsed().as_nanos() as f64 / 10_000.0);
    }
    // Building a runtime of the default sizes (allocate, format, free).
    let mut init = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        with_runtime(config, |orch, _| black_box(orch.submitted(0)));
        init.push(start.elapsed().as_nanos() as f64 / 1e6);
    }

    let mut pa = Arm::new("pa", Workload::paged_attention(PA_CASE), PA_ROUNDS);
    let mut bg = Arm::new("bgemm_case0", Workload::bgemm(BG_CASE), BG_ROUNDS);
    let mut pa_war = Arm::new("pa_war", Workload::paged_attention(PA_CASE), PA_ROUNDS);
    let mut bg_war = Arm::new("bgemm_case0_war", Workload::bgemm(BG_CASE), BG_ROUNDS);

    // Four runtimes: each workload without and with write-after-read tracking, every arm
    // sampled in turn.
    let colds = with_runtime(config, |pa_orch, pa_shared| {
        with_runtime(config, |bg_orch, bg_shared| {
            with_runtime(config, |paw_orch, paw_shared| {
                with_runtime(config, |bgw_orch, bgw_shared| {
                    paw_orch.set_track_war(true);
                    bgw_orch.set_track_war(true);
                    let timed = |shared| {
                        let mut drain = Drain::new(shared);
                        drain.record = false;
                        Timed {
                            drain,
                            split: false,
                            wait_ns: 0,
                            drain_ns: 0,
                        }
                    };
                    let mut pa_w = timed(pa_shared);
                    let mut bg_w = timed(bg_shared);
                    let mut paw_w = timed(paw_shared);
                    let mut bgw_w = timed(bgw_shared);
                    let colds = [
                        pa.warm_up(pa_orch, &mut pa_w),
                        bg.warm_up(bg_orch, &mut bg_w),
                        pa_war.warm_up(paw_orch, &mut paw_w),
                        bg_war.warm_up(bgw_orch, &mut bgw_w),
                    ];
                    let war = std::env::var("SUBMIT_WAR").map_or(true, |v| v != "0");
                    for _ in 0..samples {
                        pa.step(pa_orch, &mut pa_w);
                        if war {
                            pa_war.step(paw_orch, &mut paw_w);
                        }
                        bg.step(bg_orch, &mut bg_w);
                        if war {
                            bg_war.step(bgw_orch, &mut bgw_w);
                        }
                    }
                    colds
                })
            })
        })
    });

    report(
        NAME,
        "pa_war_cost_ratio",
        median(&pa_war.orch) / median(&pa.orch),
        "x",
    );
    report(
        NAME,
        "bgemm_case0_war_cost_ratio",
        median(&bg_war.orch) / median(&bg.orch),
        "x",
    );
    pa.report(colds[0]);
    bg.report(colds[1]);
    pa_war.report(colds[2]);
    bg_war.report(colds[3]);
    report(NAME, "runtime_bytes", bytes as f64, "bytes");
    if let Some(s) = summarize(&mut init) {
        report(NAME, "runtime_init_median", s.median, "ms");
    }
    report_summary(NAME, "clock_read", &mut clock, "ns");
}
