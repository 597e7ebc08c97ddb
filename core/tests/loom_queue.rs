//! Loom model of the Vyukov ready queue (`core/src/ready_queue.rs`): concurrent pushers and
//! poppers over a queue of 4, through a lap of the ring, lose and duplicate nothing.
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p simpler-core --test loom_queue`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use simpler_core::layout::Line;
use simpler_core::ready_queue::ReadyQueue;

/// Two producers push two values each (so the fourth and later pushes reuse cells a pop has
/// handed back), two consumers pop until every value is out; each value comes out once.
#[test]
fn every_pushed_value_is_popped_exactly_once() {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let mut builder = loom::model::Builder::new();
    // Unbounded, four threads of a few operations each do not finish in minutes; two
    // preemptions explore every interleaving with up to two forced switches.
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.max_branches = 100_000;
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let layout = ReadyQueue::layout(4).unwrap();
        let mem: &'static mut [Line] =
            Box::leak(vec![Line([0; 64]); layout.size() / 64].into_boxed_slice());
        let mem_ptr = mem as *mut [Line];
        let queue: &'static ReadyQueue<'static> = Box::leak(Box::new(
            ReadyQueue::init(bytemuck::cast_slice_mut(mem), &layout).unwrap(),
        ));
        let queue_ptr = queue as *const ReadyQueue<'static> as *mut ReadyQueue<'static>;
        const VALUES: usize = 4;
        let seen: Arc<Vec<AtomicUsize>> =
            Arc::new((0..VALUES).map(|_| AtomicUsize::new(0)).collect());
        let popped = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for p in 0..2u64 {
            threads.push(loom::thread::spawn(move || {
                for v in [p * 2, p * 2 + 1] {
                    while queue.push(v).is_err() {
                        loom::thread::yield_now();
                    }
                }
            }));
        }
        for _ in 0..2 {
            let (seen, popped) = (seen.clone(), popped.clone());
            threads.push(loom::thread::spawn(move || {
                while popped.load(Ordering::Acquire) < VALUES {
                    match queue.pop() {
                        Some(v) => {
                            assert_eq!(
                                seen[v as usize].fetch_add(1, Ordering::Relaxed),
                                0,
                                "value {v} popped twice"
                            );
                            popped.fetch_add(1, Ordering::AcqRel);
                        }
                        None => loom::thread::yield_now(),
                    }
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        for (v, n) in seen.iter().enumerate() {
            assert_eq!(n.load(Ordering::Relaxed), 1, "value {v}");
        }
        assert_eq!(queue.pop(), None);
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
