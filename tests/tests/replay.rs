//! Guarded replay of a whole hbg bind: a bind whose guard (callable, entry layout and
//! addresses, entry scalars, every entry byte the orchestration read) matches the slot's last
//! bind ships the retained image without running the orchestration; one that does not runs
//! normally and replaces it; verification runs the orchestration anyway and refuses a replay
//! that would differ.
//!
//! Expected values are the arithmetic written here (y = x + s per row) or the scenes' f64
//! goldens, never a run's.

use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, TensorArgType};
use simpler_host::hbg::{BindReplay, HbgError};
use simpler_host::scenes;
use simpler_host::{
    ChipArg, ChipWorker, DeviceTensor, HostTensor, RunOptions, Runtime, WorkerError,
};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

const ADD_SCALAR: u32 = 0;
const N: u32 = 64;
const ROWS: u32 = 4;

/// Orchestrations run so far, per test (each test uses its own counter).
static RUNS_A: AtomicU32 = AtomicU32::new(0);
static RUNS_B: AtomicU32 = AtomicU32::new(0);
/// A value the `captured` orchestration reads from outside its entry.
static CAPTURED: AtomicU32 = AtomicU32::new(1);

/// One add-scalar task per row of the first `rows` rows, where `rows` is element 0 of the
/// entry's `n` tensor (read through `read_element`), s = the entry scalar.
fn rows_from_entry(rt: &mut Rt<'_, '_>, runs: &AtomicU32, s: u64) -> Result<(), RtError> {
    runs.fetch_add(1, Ordering::Relaxed);
    let [n, x, y] = match rt.args().tensors() {
        [n, x, y] => [*n, *x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let rows = rt.read_element(&n, 0)? as u32;
    for k in 0..rows.min(ROWS) {
        let v =
            |t: simpler_core::TaskTensor| t.view(&[1, N], &[k, 0]).map_err(|_| RtError::Fatal(3));
        let mut args = [
            TaskArg {
                tensor: v(x)?,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: v(y)?,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_aiv(ADD_SCALAR, &mut args, &[s])?;
    }
    Ok(())
}

fn counted_a(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let s = rt.args().scalars()[0];
    rows_from_entry(rt, &RUNS_A, s)
}

fn counted_b(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let s = rt.args().scalars()[0];
    rows_from_entry(rt, &RUNS_B, s)
}

/// Adds the captured value instead of the entry scalar: what a guard cannot see.
fn captured(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let c = CAPTURED.load(Ordering::Relaxed) as f32;
    rows_from_entry(rt, &RUNS_B, c.to_bits() as u64)
}

fn worker(
    orch: fn(&mut Rt<'_, '_>) -> Result<(), RtError>,
    replay: BindReplay,
) -> (ChipWorker, simpler_host::CallableHandle) {
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    w.set_bind_replay(replay);
    let h = w.register_callable(
        Arc::new(orch),
        vec![kernels::add_scalar],
        vec![ArgDirection::In, ArgDirection::In, ArgDirection::Out],
    );
    (w, h)
}

/// The entry: n = [rows], x = seed-dependent values, y zeroed.
fn entry(rows: u32, seed: u32) -> Vec<ChipArg> {
    let x: Vec<f32> = (0..ROWS * N)
        .map(|i| (seed * 100 + i % 89) as f32)
        .collect();
    vec![
        ChipArg::Host(HostTensor {
            data: rows.to_le_bytes().to_vec(),
            shapes: vec![1],
            dtype: simpler_core::DataType::Uint32,
            dir: ArgDirection::In,
        }),
        ChipArg::Host(HostTensor::f32(&x, &[ROWS, N], ArgDirection::In)),
        ChipArg::Host(HostTensor::f32(
            &vec![0.0; (ROWS * N) as usize],
            &[ROWS, N],
            ArgDirection::Out,
        )),
    ]
}

/// y = x + s on the first `rows` rows, 0 elsewhere.
fn check(args: &[ChipArg], rows: u32, seed: u32, s: f32) {
    let y = args[2].host().unwrap().to_f32();
    for (i, v) in y.iter().enumerate() {
        let row = i as u32 / N;
        let want = if row < rows {
            (seed * 100 + i as u32 % 89) as f32 + s
        } else {
            0.0
        };
        assert_eq!(*v, want, "element {i}");
    }
}

fn hbg() -> RunOptions {
    RunOptions::on(Runtime::Hbg)
}

const ON: BindReplay = BindReplay {
    enabled: true,
    verify: false,
};

#[test]
fn a_bind_that_matches_its_guard_replays_without_running_the_orchestration() {
    let (mut w, h) = worker(counted_a, ON);
    let s = 2.5f32.to_bits() as u64;
    let before = RUNS_A.load(Ordering::Relaxed);
    for seed in 0..4 {
        // New x every bind: kernels read it, the orchestration does not.
        let mut a = entry(3, seed);
        let r = w.run(h, &mut a, &[s], hbg()).expect("run");
        assert_eq!(r.bind.unwrap().replayed, seed > 0, "bind {seed}");
        check(&a, 3, seed, 2.5);
    }
    assert_eq!(
        RUNS_A.load(Ordering::Relaxed) - before,
        1,
        "one orchestration in four binds"
    );
    // Another entry scalar: the guard fails, the bind runs and its image replaces the old.
    let mut a = entry(3, 9);
    let r = w
        .run(h, &mut a, &[1.0f32.to_bits() as u64], hbg())
        .expect("run");
    assert!(!r.bind.unwrap().replayed);
    check(&a, 3, 9, 1.0);
    assert_eq!(RUNS_A.load(Ordering::Relaxed) - before, 2);
    // Off: every bind runs its orchestration.
    w.set_bind_replay(BindReplay {
        enabled: false,
        verify: false,
    });
    let r = w
        .run(h, &mut entry(3, 9), &[1.0f32.to_bits() as u64], hbg())
        .expect("run");
    assert!(!r.bind.unwrap().replayed);
    assert_eq!(RUNS_A.load(Ordering::Relaxed) - before, 3);
}

#[test]
fn a_changed_element_the_orchestration_read_invalidates_the_replay() {
    let (mut w, h) = worker(counted_b, ON);
    let s = 1.0f32.to_bits() as u64;
    let mut a = entry(2, 1);
    w.run(h, &mut a, &[s], hbg()).expect("first");
    check(&a, 2, 1, 1.0);
    let mut a = entry(2, 2);
    assert!(
        w.run(h, &mut a, &[s], hbg())
            .unwrap()
            .bind
            .unwrap()
            .replayed
    );
    check(&a, 2, 2, 1.0);
    // n, which the orchestration read, changes: no replay, and the new graph is right.
    let mut a = entry(4, 3);
    assert!(
        !w.run(h, &mut a, &[s], hbg())
            .unwrap()
            .bind
            .unwrap()
            .replayed
    );
    check(&a, 4, 3, 1.0);
    let mut a = entry(4, 4);
    assert!(
        w.run(h, &mut a, &[s], hbg())
            .unwrap()
            .bind
            .unwrap()
            .replayed
    );
    check(&a, 4, 4, 1.0);
}

#[test]
fn verification_refuses_a_replay_that_would_differ() {
    let (mut w, h) = worker(
        captured,
        BindReplay {
            enabled: true,
            verify: true,
        },
    );
    CAPTURED.store(1, Ordering::Relaxed);
    let mut a = entry(2, 1);
    w.run(h, &mut a, &[0], hbg()).expect("first");
    check(&a, 2, 1, 1.0);
    // The same guard and the same captured value: verified, the same image.
    let mut a = entry(2, 2);
    w.run(h, &mut a, &[0], hbg()).expect("verified");
    check(&a, 2, 2, 1.0);
    // The captured value changes behind the guard's back.
    CAPTURED.store(5, Ordering::Relaxed);
    let e = w.run(h, &mut entry(2, 3), &[0], hbg()).expect_err("caught");
    assert!(
        matches!(e, WorkerError::Hbg(HbgError::ReplayChanged { .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("built a different image"), "{e}");
    // The worker goes on: the bind that was refused left its image as the slot's last, so
    // the next bind with the new value matches it.
    let mut a = entry(2, 4);
    w.run(h, &mut a, &[0], hbg()).expect("after the refusal");
    check(&a, 2, 4, 5.0);
}

#[test]
fn paged_attention_replays_until_a_context_length_changes() {
    // Two cases of one geometry (batch 1, 256-token model): 33 and 128 valid tokens. The
    // orchestration reads context_lens and the block table to size its tiles.
    let short = scenes::find("paged_attention")
        .unwrap()
        .prepare("CaseSmall1")
        .unwrap();
    let long = scenes::find("paged_attention")
        .unwrap()
        .prepare("CaseSmall2")
        .unwrap();
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    w.set_bind_replay(ON);
    let h = w.register(short.callable.clone());
    for (prepared, replayed) in [
        (&short, false),
        (&short, true),
        (&long, false),
        (&long, true),
    ] {
        let mut a = prepared.tensors.clone();
        let r = w.run(h, &mut a, &prepared.scalars, hbg()).expect("run");
        assert_eq!(r.bind.unwrap().replayed, replayed);
        let c = (prepared.check)(&a);
        assert!(c.pass, "golden (max diff {})", c.max_diff);
    }
}

/// Host tensors copied into fresh persistent device allocations, as device entry tensors:
/// the entry of a bind whose buffers live at other addresses than the last bind's. Returns
/// the entry and each allocation's address.
fn on_device(w: &mut ChipWorker, tensors: &[HostTensor]) -> (Vec<ChipArg>, Vec<u64>) {
    let mut addrs = Vec::new();
    let args = tensors
        .iter()
        .map(|t| {
            let addr = w.malloc(t.data.len() as u64).expect("malloc");
            w.copy_to_device(addr, &t.data).expect("copy in");
            addrs.push(addr);
            ChipArg::Device(DeviceTensor::contiguous(addr, &t.shapes, t.dtype, t.dir))
        })
        .collect();
    (args, addrs)
}

/// The host tensors `template` describes, with the bytes now at `addrs` (a run's outputs).
fn from_device(w: &mut ChipWorker, template: &[HostTensor], addrs: &[u64]) -> Vec<HostTensor> {
    template
        .iter()
        .zip(addrs)
        .map(|(t, &addr)| {
            let mut t = t.clone();
            w.copy_from_device(addr, &mut t.data).expect("copy out");
            t
        })
        .collect()
}

/// The rows scene's entry with x and y in persistent device memory, n on the host (the
/// orchestration reads it, and only host copies are readable while binding).
fn rows_on_device(w: &mut ChipWorker, rows: u32, seed: u32) -> (Vec<ChipArg>, Vec<u64>) {
    let host = entry(rows, seed);
    let tensors: Vec<HostTensor> = host[1..]
        .iter()
        .map(|a| a.host().unwrap().clone())
        .collect();
    let (dev, addrs) = on_device(w, &tensors);
    (std::iter::once(host[0].clone()).chain(dev).collect(), addrs)
}

/// y = x + s on the first `rows` rows, read back from the device.
fn check_device(w: &mut ChipWorker, y: u64, rows: u32, seed: u32, s: f32) {
    let mut host = entry(rows, seed);
    if let ChipArg::Host(t) = &mut host[2] {
        w.copy_from_device(y, &mut t.data).expect("copy out");
    }
    check(&host, rows, seed, s);
}

#[test]
fn a_replay_follows_entry_buffers_to_new_addresses() {
    // Three sets of device buffers in turn: every bind after the first sees other addresses
    // than the bind before it in the same slot.
    static RUNS: AtomicU32 = AtomicU32::new(0);
    fn orch(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let s = rt.args().scalars()[0];
        rows_from_entry(rt, &RUNS, s)
    }
    for verify in [false, true] {
        let (mut w, h) = worker(
            orch,
            BindReplay {
                enabled: true,
                verify,
            },
        );
        let s = 0.5f32.to_bits() as u64;
        let before = RUNS.load(Ordering::Relaxed);
        let sets: Vec<_> = (0..3).map(|seed| rows_on_device(&mut w, 3, seed)).collect();
        assert_ne!(sets[0].1, sets[1].1, "distinct allocations");
        for round in 0..7 {
            let (args, addrs) = &sets[round % 3];
            let mut a = args.clone();
            // Verifying, the relocated image is compared byte for byte with the one the
            // orchestration builds at the new addresses: a relocation that missed or
            // misplaced an address fails the bind.
            let r = w.run(h, &mut a, &[s], hbg()).expect("run");
            assert_eq!(
                r.bind.unwrap().replayed,
                !verify && round > 0,
                "round {round}"
            );
            check_device(&mut w, addrs[1], 3, (round % 3) as u32, 0.5);
            // The next round in this set starts from a zeroed y again.
            w.copy_to_device(addrs[1], &vec![0u8; (ROWS * N * 4) as usize])
                .unwrap();
        }
        let runs = RUNS.load(Ordering::Relaxed) - before;
        assert_eq!(runs, if verify { 7 } else { 1 }, "verify {verify}");
    }
}

#[test]
fn a_replay_needs_the_entry_buffers_to_overlap_as_they_did() {
    let (mut w, h) = worker(counted_a, ON);
    let s = 1.5f32.to_bits() as u64;
    let (args, addrs) = rows_on_device(&mut w, 2, 1);
    let mut a = args.clone();
    w.run(h, &mut a, &[s], hbg()).expect("first");
    check_device(&mut w, addrs[1], 2, 1, 1.5);
    // In place: y is x's buffer. The layouts are unchanged, the addresses moved, but x and y
    // now overlap, so the dependencies are not the ones retained.
    let mut a = args.clone();
    let ChipArg::Device(x) = &a[1] else {
        unreachable!()
    };
    let x = x.clone();
    let ChipArg::Device(y) = &mut a[2] else {
        unreachable!()
    };
    y.addr = x.addr;
    let r = w.run(h, &mut a, &[s], hbg()).expect("in place");
    assert!(!r.bind.unwrap().replayed, "overlap changed");
    // x += s on rows 0 and 1, in place.
    let mut host = entry(2, 1);
    if let ChipArg::Host(t) = &mut host[2] {
        w.copy_from_device(addrs[0], &mut t.data).expect("copy out");
    }
    let got = host[2].host().unwrap().to_f32();
    for (i, v) in got.iter().enumerate() {
        let x = (100 + i as u32 % 89) as f32;
        let want = if (i as u32) / N < 2 { x + 1.5 } else { x };
        assert_eq!(*v, want, "element {i}");
    }
    // In place again, over another set's x: the buffers overlap as they did, at another
    // address, so the in-place image replays, relocated.
    let (other, other_addrs) = rows_on_device(&mut w, 2, 2);
    let mut a = other.clone();
    let ChipArg::Device(y) = &mut a[2] else {
        unreachable!()
    };
    y.addr = other_addrs[0];
    let r = w.run(h, &mut a, &[s], hbg()).expect("in place, moved");
    assert!(r.bind.unwrap().replayed, "same overlap, moved");
    let mut host = entry(2, 2);
    if let ChipArg::Host(t) = &mut host[2] {
        w.copy_from_device(other_addrs[0], &mut t.data)
            .expect("copy out");
    }
    let got = host[2].host().unwrap().to_f32();
    for (i, v) in got.iter().enumerate() {
        let x = (200 + i as u32 % 89) as f32;
        let want = if (i as u32) / N < 2 { x + 1.5 } else { x };
        assert_eq!(*v, want, "moved, element {i}");
    }
}

#[test]
fn dsv4_replays_onto_moved_entry_buffers_and_verifies_byte_for_byte() {
    // The Graph scene: its boundaries sit in the Graph staging, whose tensors move too.
    let prepared = scenes::find("dsv4_shaped")
        .unwrap()
        .prepare("default")
        .unwrap();
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    w.set_bind_replay(BindReplay {
        enabled: true,
        verify: true,
    });
    let h = w.register(prepared.callable.clone());
    let sets: Vec<_> = (0..2)
        .map(|_| on_device(&mut w, &prepared.tensors))
        .collect();
    for round in 0..4 {
        let (args, addrs) = &sets[round % 2];
        let mut a = args.clone();
        w.run(h, &mut a, &prepared.scalars, hbg())
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let out = from_device(&mut w, &prepared.tensors, addrs);
        let c = (prepared.check)(&out);
        assert!(c.pass, "round {round}: golden (max diff {})", c.max_diff);
        // Outputs back to their starting values for the set's next round.
        for (t, &addr) in prepared.tensors.iter().zip(addrs) {
            if t.dir != ArgDirection::In {
                w.copy_to_device(addr, &t.data).unwrap();
            }
        }
    }
    // Without verification every round replays the last verified bind's image, relocated
    // to its set's buffers.
    w.set_bind_replay(ON);
    for round in 0..4 {
        let (args, addrs) = &sets[round % 2];
        let mut a = args.clone();
        let r = w.run(h, &mut a, &prepared.scalars, hbg()).expect("run");
        assert!(r.bind.unwrap().replayed, "round {round}");
        let out = from_device(&mut w, &prepared.tensors, addrs);
        let c = (prepared.check)(&out);
        assert!(
            c.pass,
            "replayed round {round}: golden (max diff {})",
            c.max_diff
        );
        for (t, &addr) in prepared.tensors.iter().zip(addrs) {
            if t.dir != ArgDirection::In {
                w.copy_to_device(addr, &t.data).unwrap();
            }
        }
    }
}

#[test]
fn a_replay_follows_its_slots_graph_staging_and_heap_blocks_when_they_move() {
    // Slot 1's per-run memory is taken from under the persistent allocations: a device
    // allocation between two of its runs moves its entry staging, Graph staging and heap
    // blocks. The Graph scene's outer tasks hold the staging's and the heap blocks'
    // addresses.
    let prepared = scenes::find("dsv4_shaped")
        .unwrap()
        .prepare("default")
        .unwrap();
    for verify in [true, false] {
        let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
        w.set_bind_replay(BindReplay {
            enabled: true,
            verify,
        });
        let h = w.register(prepared.callable.clone());
        let entry = || -> Vec<ChipArg> {
            prepared
                .tensors
                .iter()
                .cloned()
                .map(ChipArg::Host)
                .collect()
        };
        let mut heaps = Vec::new();
        for round in 0..3 {
            // Two runs in flight: the first in slot 0, the second in slot 1.
            let first = w.submit(h, entry(), &prepared.scalars, hbg());
            let second = w.submit(h, entry(), &prepared.scalars, hbg());
            for (slot, run) in [first, second].into_iter().enumerate() {
                let done = w.wait(run).expect("collected");
                let r = done
                    .result
                    .unwrap_or_else(|e| panic!("round {round}, slot {slot}: {e}"));
                let host: Vec<_> = done
                    .args
                    .iter()
                    .filter_map(ChipArg::host)
                    .cloned()
                    .collect();
                let c = (prepared.check)(&host);
                assert!(
                    c.pass,
                    "round {round}, slot {slot}: golden (max diff {})",
                    c.max_diff
                );
                assert_eq!(
                    r.bind.unwrap().replayed,
                    !verify && round > 0,
                    "round {round}, slot {slot}"
                );
            }
            // The last bind was slot 1's: where its heap blocks went.
            heaps.push(w.last_graph_commit().first().map(|&(_, heap)| heap));
            w.malloc(1 << 20)
                .expect("a persistent allocation between rounds");
        }
        assert!(heaps[0].is_some(), "the scene commits Graphs");
        assert_ne!(heaps[0], heaps[1], "slot 1's heap blocks moved");
        assert_ne!(heaps[1], heaps[2], "and moved again");
    }
}
