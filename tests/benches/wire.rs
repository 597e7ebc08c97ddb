//! `wire`: ns per tensor for `write_blob` and for `read_blob` with validation.
//!
//! Workload: one chip entry at its cap, 256 wire tensors (rank 3, FLOAT32) and 128 scalars, in
//! two descriptor mixes: all FORK_SHM (8-byte address body) and all POSIX_SHM (a 12-byte name,
//! each byte checked). Decoding copies each 144-byte element out of an unaligned mailbox-like
//! region and runs the full gate; the decoded tensors are consumed through `black_box`.
//! The arms run interleaved (write, read, write, read, ...) for `ROUNDS` samples of `ITERS` blobs
//! each; the median and the minimum per tensor are printed.
//!
//! Run: `cargo bench -p simpler-tests --bench wire` (`SIMPLER_BENCH_SMOKE=1`: one sample of
//! 4 blobs per arm).

use simpler_core::blob::{read_blob, write_blob};
use simpler_core::limits::MAILBOX_ARGS_CAPACITY;
use simpler_core::{
    AccessMode, AddressSpace, BackendKind, BufferDescriptor, DataType, Tensor, ValidTensor,
};
use simpler_tests::fixtures::{fork_shm, identity};
use simpler_tests::measure::{ns_per_item, report_summary, sized};
use std::hint::black_box;

const TENSORS: usize = 256;
const SCALARS: usize = 128;
const ROUNDS: usize = 31;
const ITERS: u64 = 400;

fn fork_tensors() -> Vec<ValidTensor> {
    (0..TENSORS as u64)
        .map(|i| {
            let desc = fork_shm(i + 1, 0x7f00_0000_0000 + i * 0x1_0000, 64 * 1024);
            Tensor::new(
                desc,
                256 * (i % 4),
                &[4, 16, 32],
                &[512, 32, 1],
                DataType::Float32,
            )
            .unwrap()
        })
        .collect()
}

fn shm_tensors() -> Vec<ValidTensor> {
    (0..TENSORS as u64)
        .map(|i| {
            let desc = BufferDescriptor::new(
                identity(i + 1),
                AddressSpace::Host,
                AccessMode::ReadWrite,
                BackendKind::PosixShm,
                64 * 1024,
                format!("psm_{i:08x}").as_bytes(),
            )
            .unwrap();
            Tensor::new(desc, 0, &[4, 16, 32], &[512, 32, 1], DataType::Float32).unwrap()
        })
        .collect()
}

fn main() {
    let scalars: Vec<u64> = (0..SCALARS as u64).collect();
    // One spare byte in front so the blob, like one inside a mailbox frame, starts unaligned for
    // the 8-byte tensor fields.
    let mut region = vec![0u8; MAILBOX_ARGS_CAPACITY + 1];
    let (rounds, iters) = (sized(ROUNDS, 1), sized(ITERS, 4));
    for (mix, tensors) in [("fork_shm", fork_tensors()), ("posix_shm", shm_tensors())] {
        // The blob holds what was written: every tensor decodes to its original, the scalars
        // come back in order.
        write_blob(&mut region[1..], &tensors, &scalars).unwrap();
        let view = read_blob(&region[1..]).unwrap();
        assert_eq!(view.tensor_count(), tensors.len(), "{mix}: tensors");
        for (i, t) in tensors.iter().enumerate() {
            assert_eq!(view.tensor(i).unwrap(), *t, "{mix}: tensor {i}");
        }
        assert!(view.scalars().eq(scalars.iter().copied()), "{mix}: scalars");
        let n = view.tensor_count() as u64;
        let mut write = Vec::with_capacity(rounds);
        let mut read = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            write.push(ns_per_item(iters, n, || {
                let n = write_blob(black_box(&mut region[1..]), &tensors, &scalars).unwrap();
                black_box(n);
            }));
            read.push(ns_per_item(iters, n, || {
                let view = read_blob(black_box(&region[1..])).unwrap();
                for i in 0..view.tensor_count() {
                    black_box(view.tensor(i).unwrap());
                }
                for s in view.scalars() {
                    black_box(s);
                }
            }));
        }
        report_summary(
            "wire",
            &format!("write_blob_{mix}"),
            &mut write,
            "ns/tensor",
        );
        report_summary(
            "wire",
            &format!("read_blob_validated_{mix}"),
            &mut read,
            "ns/tensor",
        );
    }
}
