//! A warm recording allocates nothing: after two warm-up rounds, recording the same bodies
//! again on the same storage makes zero heap allocations (counted per thread by
//! `simpler_tests::alloc_count`, so other tests' threads do not pollute the count).

use simpler_core::{AddressSpace, ArgDirection, ChipTensor, TaskTensor, TensorArgType};
use simpler_host::record::{GraphBoundary, Recording};
use simpler_host::scenes;
use simpler_tests::alloc_count::{self as counter, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn boundary(name: &str, case: &str) -> GraphBoundary {
    let p = scenes::find(name).unwrap().prepare(case).unwrap();
    let mut b = GraphBoundary::default();
    for (i, (t, dir)) in p.tensors.iter().zip(&p.signature).enumerate() {
        let c = ChipTensor::contiguous(
            0x1000_0000 * (i as u64 + 1),
            &t.shapes,
            t.dtype,
            AddressSpace::Device,
        );
        b.tensors.push(TaskTensor::adopt(&c).unwrap());
        b.tags.push(match dir {
            ArgDirection::In => TensorArgType::Input,
            _ => TensorArgType::OutputExisting,
        });
    }
    b.scalars = p.scalars.clone();
    b
}

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
