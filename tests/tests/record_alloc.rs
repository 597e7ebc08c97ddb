//! A warm recording allocates nothing: after two warm-up rounds, recording the same bodies
//! again on the same storage makes zero heap allocations (counted by a global allocator that
//! counts only on the thread that asks, so other tests' threads do not pollute the count).

use simpler_core::{AddressSpace, ArgDirection, ChipTensor, TaskTensor, TensorArgType};
use simpler_host::record::{GraphBoundary, Recording};
use simpler_host::scenes;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

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
    for round in 0..12 {
        if round == 2 {
            COUNTING.with(|c| c.set(true));
            // The counter counts: one allocation on this thread is seen.
            let probe = std::hint::black_box(Box::new(round));
            assert_eq!(ALLOCS.load(Ordering::Relaxed), 1);
            drop(probe);
            ALLOCS.store(0, Ordering::Relaxed);
        }
        for (k, (body, b)) in bodies.iter().enumerate() {
            let image = r.record(k as u64 + 1, *body, Some(b)).expect("record");
            assert!(!image.is_empty());
            nodes += r.node_count();
        }
    }
    COUNTING.with(|c| c.set(false));
    assert!(nodes > 0);
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        0,
        "allocations in 10 warm rounds"
    );
}
