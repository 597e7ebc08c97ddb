//! `record`: Graph recording on one thread's retained storage.
//!
//! Workload: the bgemm Case1 orchestration (128 nodes) and the vector_example one (5 nodes)
//! recorded as Graph bodies over made-up boundaries, alternately, on one `Recording` (the
//! storage a recorder thread keeps): 2 warm-up rounds, then 41 samples of each. Printed: ns
//! per recorded node and us per Definition (the whole recording: reset, the body through the
//! private runtime, classification, the Definition image), median and minimum; the image size.
//!
//! Not shown: the pool's hand-off (see `bind`), and bodies wider than these.
//!
//! Run: `cargo bench -p simpler-tests --bench record` (`SIMPLER_BENCH_SMOKE=1`: one cold and
//! one warm sample of each).

use simpler_host::record::Recording;
use simpler_host::scenes;
use simpler_tests::measure::{report, report_summary, sized};
use std::time::Instant;

const SAMPLES: usize = 41;

use simpler_tests::fixtures::scene_boundary as boundary;

/// The nodes a recording of `scene`'s `case` body holds: the tasks its graph has.
fn nodes(scene: &str, case: &str) -> usize {
    let p = scenes::find(scene).and_then(|s| s.prepare(case)).unwrap();
    p.tasks
        .expect("the project's scenes state their task counts") as usize
}

fn main() {
    let arms = [
        (
            "bgemm_case1",
            scenes::body("bgemm").unwrap(),
            boundary("bgemm", "Case1"),
            nodes("bgemm", "Case1"),
        ),
        (
            "vector",
            scenes::body("vector_example").unwrap(),
            boundary("vector_example", "default"),
            nodes("vector_example", "default"),
        ),
    ];
    let samples = sized(SAMPLES, 1);
    // The first recording on fresh storage stands it up.
    let mut cold = Vec::with_capacity(5);
    for _ in 0..sized(5, 1) {
        let mut fresh = Recording::new();
        let start = Instant::now();
        fresh
            .record(1, arms[1].1, Some(&arms[1].2))
            .expect("record");
        cold.push(start.elapsed().as_secs_f64() * 1e6);
    }
    report_summary(
        "record",
        "cold_stand_up_and_first_definition",
        &mut cold,
        "us",
    );
    let mut r = Recording::new();
    let mut per_node = vec![Vec::with_capacity(samples); arms.len()];
    let mut per_def = vec![Vec::with_capacity(samples); arms.len()];
    let mut bytes = vec![0usize; arms.len()];
    for round in 0..samples + 2 {
        for (i, (name, body, b, nodes)) in arms.iter().enumerate() {
            let start = Instant::now();
            let n = r
                .record(i as u64 + 1, *body, Some(b))
                .expect("record")
                .len();
            let t = start.elapsed().as_secs_f64();
            assert_eq!(r.node_count(), *nodes, "{name}: nodes recorded");
            if round >= 2 {
                per_node[i].push(t * 1e9 / r.node_count() as f64);
                per_def[i].push(t * 1e6);
                bytes[i] = n;
            }
        }
    }
    for (i, (name, ..)) in arms.iter().enumerate() {
        report_summary(
            "record",
            &format!("{name}_per_node"),
            &mut per_node[i],
            "ns",
        );
        report_summary(
            "record",
            &format!("{name}_per_definition"),
            &mut per_def[i],
            "us",
        );
        report(
            "record",
            &format!("{name}_definition_bytes"),
            bytes[i] as f64,
            "B",
        );
    }
}
