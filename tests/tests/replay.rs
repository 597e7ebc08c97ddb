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
use simpler_host::{ChipArg, ChipWorker, HostTensor, RunOptions, Runtime, WorkerError};
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
