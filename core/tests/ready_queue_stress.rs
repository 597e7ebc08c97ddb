//! Stress test of `ReadyQueue` under real contention: 4 producers and 4 consumers over a queue of
//! 64 slots, 2,000,000 pushes and 2,000,000 pops, on however few CPUs the machine has.
//!
//! Checked: every pushed value is popped exactly once, and each consumer sees every producer's
//! values in the order that producer pushed them. Not checked: fairness, throughput, or that
//! the run reached any particular interleaving; a pass on one machine is evidence, not proof.

use bytemuck::{Pod, Zeroable};
use simpler_core::ready_queue::{Full, ReadyQueue};
use std::hint::spin_loop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PRODUCERS: u64 = 4;
const CONSUMERS: usize = 4;
const CAPACITY: usize = 64;
const PER_PRODUCER: u64 = 500_000;
const TOTAL: usize = (PRODUCERS * PER_PRODUCER) as usize;
/// Failed attempts a thread spins through before it yields its CPU. Eight threads share two
/// CPUs on the test machine, so a thread that only spins can hold back the one it waits for for
/// a whole time slice.
const SPINS_BEFORE_YIELD: u32 = 64;
/// A run that has not finished by then has lost a value or livelocked; the watchdog ends the
/// process instead of letting the test hang.
const DEADLINE: Duration = Duration::from_secs(30);

/// One cache line, the unit the region is allocated in so that it is 64-byte aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Line([u8; 64]);

fn encode(producer: u64, seq: u64) -> u64 {
    producer << 32 | seq
}

fn decode(value: u64) -> (u64, u64) {
    (value >> 32, value & 0xFFFF_FFFF)
}

/// Spins, and after `SPINS_BEFORE_YIELD` consecutive failures yields to the OS.
fn back_off(failures: &mut u32) {
    *failures += 1;
    if *failures % SPINS_BEFORE_YIELD == 0 {
        std::thread::yield_now();
    } else {
        spin_loop();
    }
}

/// Exits the process if the returned sender is not dropped within `DEADLINE`. A lost value or
/// a livelock inside the queue would otherwise hang the test instead of failing it.
fn watchdog() -> mpsc::Sender<()> {
    let (finished, deadline) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = deadline.recv_timeout(DEADLINE) {
            eprintln!(
                "ready_queue_stress: not finished after {DEADLINE:?}: \
                 a value was lost or a thread livelocked"
            );
            std::process::exit(101);
        }
    });
    finished
}

#[test]
fn every_value_is_popped_once_and_in_order_per_producer() {
    let layout = ReadyQueue::layout(CAPACITY).unwrap();
    let mut lines = vec![Line([0; 64]); layout.size().div_ceil(64)];
    let region: &mut [u8] = bytemuck::cast_slice_mut(&mut lines);
    let queue = ReadyQueue::init(region, &layout).unwrap();

    let popped_total = AtomicUsize::new(0);
    let full_retries = AtomicUsize::new(0);
    let empty_retries = AtomicUsize::new(0);
    let finished = watchdog();
    let started = Instant::now();

    let seen: Vec<Vec<u64>> = std::thread::scope(|s| {
        for producer in 0..PRODUCERS {
            let (queue, full_retries) = (&queue, &full_retries);
            s.spawn(move || {
                let mut retries = 0;
                for seq in 0..PER_PRODUCER {
                    let mut failures = 0;
                    let value = encode(producer, seq);
                    while let Err(Full(returned)) = queue.push(value) {
                        assert_eq!(returned, value, "Full carries the value back");
                        back_off(&mut failures);
                    }
                    retries += failures as usize;
                }
                full_retries.fetch_add(retries, Ordering::Relaxed);
            });
        }
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                s.spawn(|| {
                    let mut seen = Vec::with_capacity(TOTAL / CONSUMERS);
                    let mut retries = 0;
                    let mut failures = 0;
                    while popped_total.load(Ordering::Relaxed) < TOTAL {
                        match queue.pop() {
                            Some(value) => {
                                seen.push(value);
                                popped_total.fetch_add(1, Ordering::Relaxed);
                                retries += failures as usize;
                                failures = 0;
                            }
                            None => back_off(&mut failures),
                        }
                    }
                    empty_retries.fetch_add(retries + failures as usize, Ordering::Relaxed);
                    seen
                })
            })
            .collect();
        consumers.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    drop(finished);

    // Exactly once: every (producer, seq) is seen once, nothing else is seen.
    let mut times_seen = vec![0u8; TOTAL];
    for &value in seen.iter().flatten() {
        let (producer, seq) = decode(value);
        assert!(
            producer < PRODUCERS && seq < PER_PRODUCER,
            "popped a value nobody pushed: {value:#x}"
        );
        let index = (producer * PER_PRODUCER + seq) as usize;
        times_seen[index] = times_seen[index].saturating_add(1);
    }
    let popped: usize = seen.iter().map(Vec::len).sum();
    assert_eq!(popped, TOTAL, "pops != pushes");
    if let Some(index) = times_seen.iter().position(|&n| n != 1) {
        panic!(
            "producer {} seq {} was popped {} times",
            index as u64 / PER_PRODUCER,
            index as u64 % PER_PRODUCER,
            times_seen[index]
        );
    }

    // FIFO per producer as one consumer observes it.
    for (consumer, values) in seen.iter().enumerate() {
        let mut last = [None::<u64>; PRODUCERS as usize];
        for &value in values {
            let (producer, seq) = decode(value);
            let last = &mut last[producer as usize];
            if let Some(previous) = *last {
                assert!(
                    previous < seq,
                    "consumer {consumer} saw producer {producer} seq {seq} after seq {previous}"
                );
            }
            *last = Some(seq);
        }
    }
    assert_eq!(queue.pop(), None, "the queue is drained");
    assert_eq!(queue.len_estimate(), 0);

    println!(
        "{} operations ({TOTAL} pushes + {TOTAL} pops) in {elapsed:?}; \
         {} failed pushes (full), {} failed pops (empty); per consumer: {:?}",
        2 * TOTAL,
        full_retries.load(Ordering::Relaxed),
        empty_retries.load(Ordering::Relaxed),
        seen.iter().map(Vec::len).collect::<Vec<_>>()
    );
}
