//! `gm`: moving tiles through the simulator's GM against the machine's memcpy.
//!
//! `copy_gbps`: a 64 MiB stream of 128x128 f32 tiles (64 KiB each), each loaded from one GM
//! region into a core's local buffer by the kernels' tile helper (`simpler_aicore::tile::load`)
//! and stored by `tile::store` to a second region; bytes of the stream per second, one thread.
//! Each tile is one whole-word access each way, so it moves as one bulk copy registered in
//! GM's access ledger (`simpler_sim::ledger`).
//! `memcpy_gbps`: the same bytes copied between two warm host buffers
//! (`simpler_tests::peak::CopyBuffers`). The two arms alternate, and `copy_share_of_memcpy` is
//! the ratio of their medians. The stream's GM is written once before timing, so neither arm
//! measures first-touch page clearing.
//!
//! `small_<move>_ns`: paged attention's tile moves, a 16x16 tile (256 elements) at a time
//! between GM and a local buffer as the kernels move them (`tile::load_on` with the simulator's
//! `HostTileOps`): `bf16_load` and `bf16_store` (widened and rounded on the vector unit) and `f32_load` and `f32_store` (1 KiB, below the bulk copy's 4 KiB: the atomic word
//! loop with its ledger entry); nanoseconds per move over a batch of 4,096 moves of the same
//! warm tile, so the figures leave out cache misses. The four kinds alternate batch by batch.
//!
//! The stream's local buffer is a core's (`simpler_sim::device::scheduler::LocalBuffer`),
//! which starts on a cache line as GM's tiles always do: glibc's copy of a few KiB or more
//! (`rep movsb`) ran at a third of its speed on this project's AMD machine when its two sides
//! sat 8 to 24 bytes apart modulo 4 KiB (a probe put a plain `Vec`'s buffer at each offset:
//! 0.23-0.31 of memcpy at 8, 16, 24 and -16 bytes, 0.63-0.81 at 0, 32, 48, 64, -32 and
//! 2 KiB), which a buffer from the allocator's 16-byte alignment can land on by chance.
//!
//! Not shown: moves of strided views (a row or an element at a time), the ledger's cost when other threads are registering at the
//! same time, and several cores moving at once (they share the memory bandwidth the
//! one-thread figures measure). Kernels that lend GM in place (`matmul`, `accumulate`) do not
//! copy at all.
//!
//! Run: `cargo bench -p simpler-tests --bench gm` (`SIMPLER_BENCH_SMOKE=1`: one small sample).

use simpler_aicore::tile;
use simpler_core::gm::Gm;
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskTensor};
use simpler_sim::device::scheduler::LocalBuffer;
use simpler_sim::gm::GmWords;
use simpler_sim::tile_ops::HostTileOps;
use simpler_tests::measure::{report, report_summary, sized, summarize};
use simpler_tests::peak::CopyBuffers;
use std::time::Instant;

const TILE: u32 = 128;
const TILE_BYTES: u64 = (TILE * TILE * 4) as u64;
const BASE: u64 = 0x1_0000_0000;

fn tile_at(addr: u64) -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr,
            size: TILE_BYTES,
        },
        0,
        &[TILE, TILE],
        &[TILE, 1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .expect("a tile view")
}

/// A dense 16x16 view at `addr`.
fn small_tile(addr: u64, dtype: DataType) -> TaskTensor {
    TaskTensor::new(
        BufferHandle { addr, size: 1024 },
        0,
        &[16, 16],
        &[16, 1],
        dtype,
        AddressSpace::Device,
    )
    .expect("a small tile view")
}

/// The `small_*` figures (module docs).
fn small_moves() {
    const MOVES: usize = 4096;
    let words = GmWords::zeroed(1 << 12);
    let gm = words.arena(BASE);
    // Multiples of 1/4 below 64 in magnitude: exact in bf16, so every round trip is exact.
    let values: Vec<f32> = (0..256).map(|i| i as f32 * 0.25 - 7.0).collect();
    let (bf16, f32) = (
        small_tile(BASE, DataType::Bfloat16),
        small_tile(BASE + 4096, DataType::Float32),
    );
    tile::store(&gm, &bf16, &values).unwrap();
    tile::store(&gm, &f32, &values).unwrap();
    let mut local = values.clone();
    let kinds = [
        ("bf16_load", bf16, false),
        ("bf16_store", bf16, true),
        ("f32_load", f32, false),
        ("f32_store", f32, true),
    ];
    let mut samples = vec![Vec::new(); kinds.len()];
    for _ in 0..sized(41, 1) {
        for ((_, t, store), ns) in kinds.iter().zip(&mut samples) {
            let start = Instant::now();
            for _ in 0..MOVES {
                if *store {
                    tile::store_on(&HostTileOps, &gm, std::hint::black_box(t), &local).unwrap();
                } else {
                    tile::load_on(&HostTileOps, &gm, std::hint::black_box(t), &mut local).unwrap();
                }
            }
            ns.push(start.elapsed().as_nanos() as f64 / MOVES as f64);
        }
    }
    // The moves kept the values: both tiles read back as first stored.
    for t in [bf16, f32] {
        let mut back = vec![0f32; 256];
        tile::load(&gm, &t, &mut back).unwrap();
        assert_eq!(
            back,
            values,
            "the small {:?} moves lost the tile",
            t.dtype()
        );
    }
    for ((name, _, _), ns) in kinds.iter().zip(&mut samples) {
        report_summary("gm", &format!("small_{name}_ns"), ns, "ns");
    }
}

fn main() {
    stream();
    small_moves();
}

/// `copy_gbps`, `memcpy_gbps` and their ratio (module docs).
fn stream() {
    let bytes: u64 = sized(64 << 20, 1 << 20);
    let samples = sized(9, 1);
    let words = GmWords::zeroed((2 * bytes / 8) as usize);
    let gm = words.arena(BASE);
    let fill: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    gm.write(BASE, &fill).unwrap();
    gm.write(BASE + bytes, &vec![0u8; bytes as usize]).unwrap();
    let mut buffer = LocalBuffer::new((TILE * TILE) as usize);
    let local = buffer.words();
    let mut host = CopyBuffers::new(bytes as usize);
    let (mut stream, mut copy) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let start = Instant::now();
        for at in (0..bytes).step_by(TILE_BYTES as usize) {
            tile::load(&gm, &tile_at(BASE + at), local).unwrap();
            tile::store(&gm, &tile_at(BASE + bytes + at), local).unwrap();
        }
        stream.push(bytes as f64 / start.elapsed().as_secs_f64() / 1e9);
        copy.push(host.gbps(1));
    }
    // The stream moved the bytes: the second region now equals the first.
    let mut back = vec![0u8; bytes as usize];
    gm.read(BASE + bytes, &mut back).unwrap();
    assert!(back == fill, "the tile stream did not copy its bytes");
    let s = summarize(&mut stream).unwrap().median;
    let c = summarize(&mut copy).unwrap().median;
    report_summary("gm", "copy_gbps", &mut stream, "GB/s");
    report_summary("gm", "memcpy_gbps", &mut copy, "GB/s");
    report("gm", "copy_share_of_memcpy", s / c, "fraction");
}
