//! A steady-state hbg bind allocates nothing on the recording path and for the SM mirror:
//! after two warm-up binds, ten further binds of a scene with Graphs make zero heap
//! allocations on the recorder threads (from taking a job to publishing its Definition) and
//! zero in the mirror's phases (`arena_build`, `shared_mem`), counted per thread by the
//! counting global allocator below through `simpler_host::alloc_count`. The binds are
//! host-only (the image is built, the device does not run), and in that mode the whole bind
//! allocates nothing on the binding thread either: entry staging, orchestration, commit and
//! export all reuse retained storage. The per-phase counts are printed
//! (`cargo test --test bind_alloc -- --nocapture`). A bind that runs the device also ships
//! the images, which the simulator's transport copies into the job; not counted here (the
//! entry tensors go in and out of GM from their own bytes: `host_staging.rs` counts that).

use simpler_host::hbg::{BindPhase, BindReport, GraphRetention};
use simpler_host::{alloc_count, scenes, ChipArg, ChipWorker};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::alloc_count::{self as counter, Counting};
use simpler_tests::fixtures::host_only_bind;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Two warm-up binds, then ten, of `scene`/`case` on hbg (host-only: the device is not the
/// subject); the ten reports.
fn warm_binds(scene: &str, case: &str, retention: GraphRetention) -> Vec<BindReport> {
    alloc_count::install(counter::thread);
    let p = scenes::find(scene).unwrap().prepare(case).unwrap();
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.ring.heap_bytes = 256 << 20;
    config.gm_bytes = 512 << 20;
    let mut w = ChipWorker::init(config).expect("device");
    w.set_graph_retention(retention).unwrap();
    let h = w.register(p.callable.clone());
    let mut args: Vec<ChipArg> = p.tensors.iter().cloned().map(ChipArg::Host).collect();
    let mut binds = Vec::with_capacity(10);
    for round in 0..12 {
        let bind = host_only_bind(&mut w, h, &mut args, &p.scalars);
        if round >= 2 {
            binds.push(bind);
        }
    }
    binds
}

/// Every bind records (retention off), so the recording path is exercised.
fn check(scene: &str, case: &str) {
    let binds = warm_binds(scene, case, GraphRetention::OFF);
    let mirror = [BindPhase::ArenaBuild, BindPhase::SharedMem];
    for (i, b) in binds.iter().enumerate() {
        let g = b.graph_phases;
        assert!(g.recorded_nodes > 0, "{scene} bind {i}: nothing recorded");
        assert_eq!(g.record_allocs, 0, "{scene} bind {i}: recording path");
        for m in mirror {
            assert_eq!(b.phase(m).allocs, 0, "{scene} bind {i}: {m}");
        }
    }
    let whole: Vec<u64> = binds
        .iter()
        .map(|b| b.phases().map(|(_, p)| p.allocs).sum())
        .collect();
    let by_phase: Vec<String> = binds[0]
        .phases()
        .map(|(phase, p)| format!("{phase} {}", p.allocs))
        .collect();
    println!(
        "{scene}: allocations per warm bind on the binding thread {whole:?} ({}); recording path 0",
        by_phase.join(", ")
    );
    assert_eq!(whole, [0; 10], "{scene}: the binding thread");
}

#[test]
fn the_counter_counts_this_threads_allocations() {
    alloc_count::install(counter::thread);
    let before = counter::thread();
    let v = std::hint::black_box(vec![1u8; 64]);
    assert_eq!(counter::thread() - before, 1);
    drop(v);
}

#[test]
fn graph_vector_warm_binds_allocate_nothing_to_record_or_mirror() {
    check("graph_vector", "default");
}

#[test]
fn dsv4_shaped_warm_binds_allocate_nothing_to_record_or_mirror() {
    check("dsv4_shaped", "default");
}

/// With retention on (verification off) a warm bind replays every Definition: nothing is
/// recorded, and the whole bind still allocates nothing on the binding thread.
fn check_retained(scene: &str, case: &str) {
    let retention = GraphRetention {
        verify: false,
        ..GraphRetention::default()
    };
    let binds = warm_binds(scene, case, retention);
    for (i, b) in binds.iter().enumerate() {
        let g = b.graph_phases;
        assert_eq!(g.recorded_nodes, 0, "{scene} bind {i}: recorded");
        assert_eq!(g.record_allocs, 0, "{scene} bind {i}: recording path");
        let whole: u64 = b.phases().map(|(_, p)| p.allocs).sum();
        assert_eq!(whole, 0, "{scene} bind {i}: the binding thread");
    }
}

#[test]
fn graph_vector_retained_warm_binds_record_and_allocate_nothing() {
    check_retained("graph_vector", "default");
}

#[test]
fn dsv4_shaped_retained_warm_binds_record_and_allocate_nothing() {
    check_retained("dsv4_shaped", "default");
}
