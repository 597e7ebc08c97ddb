//! A warm recording allocates nothing: after two warm-up rounds, recording the same bodies
//! again on the same storage makes zero heap allocations (counted per thread by
//! `simpler_tests::alloc_count`, so other tests' threads do not pollute the count).

use simpler_host::record::Recording;
use simpler_host::scenes;
use simpler_tests::alloc_count::{self as counter, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

use simpler_tests::fixtures::scene_boundary as boundary;

#[test]
fn warm_recordings_allocate_nothing() {
    let bodies = [
        (scenes::body("bgemm").unwrap(), boundary("bgemm", "Case1")),
        (
            scenes::body("vector_example").unwrap(),
            boundary("vector_example", "default"),
        ),
    ];
    let mut r = Recording::new();
    let mut nodes = 0;
    let mut from = 0;
    for round in 0..12 {
        if round == 2 {
            // The counter counts: one allocation on this thread is seen.
            let before = counter::thread();
            let probe = std::hint::black_box(Box::new(round));
            assert_eq!(counter::thread() - before, 1);
            drop(probe);
            from = counter::thread();
        }
        for (k, (body, b)) in bodies.iter().enumerate() {
            let image = r.record(k as u64 + 1, *body, Some(b)).expect("record");
            assert!(!image.is_empty());
            nodes += r.node_count();
        }
    }
    assert!(nodes > 0);
    assert_eq!(counter::thread() - from, 0, "allocations in 10 warm rounds");
}
