//! Loom model of the Vyukov ready queue (`core/src/ready_queue.rs`): concurrent pushers and
//! poppers over a queue of 4, through a lap of the ring, lose and duplicate nothing.
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p simpler-core --test loom_queue`.
#![cfg(loom)]
// The workspace denies unsafe code; a model needs it to free the state it leaked for its
// threads or to reach loom's cells through raw pointers. Each block says why it is sound.
#![allow(unsafe_code)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use simpler_core::layout::Line;
use simpler_core::ready_queue::ReadyQueue;

/// The main thread pushes three values into a queue of two cells (the third push reuses a
/// cell a pop handed back, a lap on, and pops itself while the queue is full); two threads
/// make two pop attempts each meanwhile; the main thread then pops what is left. Every value
/// comes out exactly once. The poppers try a fixed number of times instead of spinning, which
/// keeps the model's state space small.
#[test]
fn every_pushed_value_is_popped_exactly_once() {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let mut builder = loom::model::Builder::new();
    // Three threads of a handful of operations each: two forced switches of thread explore
    // every interleaving with up to two preemptions in a few seconds.
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let layout = ReadyQueue::layout(2).unwrap();
        let mem: &'static mut [Line] =
            Box::leak(vec![Line([0; 64]); layout.size() / 64].into_boxed_slice());
        let mem_ptr = mem as *mut [Line];
        let queue: &'static ReadyQueue<'static> = Box::leak(Box::new(
            ReadyQueue::init(bytemuck::cast_slice_mut(mem), &layout).unwrap(),
        ));
        let queue_ptr = queue as *const ReadyQueue<'static> as *mut ReadyQueue<'static>;
        const VALUES: usize = 3;
        let seen: Arc<Vec<AtomicUsize>> =
            Arc::new((0..VALUES).map(|_| AtomicUsize::new(0)).collect());
        let take = |seen: &[AtomicUsize], v: u64| {
            assert_eq!(
                seen[v as usize].fetch_add(1, Ordering::Relaxed),
                0,
                "value {v} popped twice"
            );
        };
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let seen = seen.clone();
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        if let Some(v) = queue.pop() {
                            take(&seen, v);
                        }
                    }
                })
            })
            .collect();
        for v in 0..VALUES as u64 {
            while queue.push(v).is_err() {
                if let Some(w) = queue.pop() {
                    take(&seen, w);
                } else {
                    loom::thread::yield_now();
                }
            }
        }
        for t in poppers {
            t.join().unwrap();
        }
        while let Some(v) = queue.pop() {
            take(&seen, v);
        }
        for (v, n) in seen.iter().enumerate() {
            assert_eq!(n.load(Ordering::Relaxed), 1, "value {v}");
        }
        // SAFETY: both were leaked above only to hand `'static` references to this
        // execution's threads, all joined; each pointer came from `Box::leak` of that type
        // and is freed once, the queue view before its memory.
        unsafe {
            drop(Box::from_raw(queue_ptr));
            drop(Box::from_raw(mem_ptr));
        }
    });
    println!(
        "loom ready_queue {} interleavings",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}
