//! Graph Definitions retained across hbg binds: a later bind whose key and boundary signature
//! match replays the retained Definition (nothing recorded, nothing rebuilt, nothing uploaded);
//! another signature records a new one; verification catches a body changed under its key;
//! the caps evict oldest-used first and stay correct; `forget_graphs`, re-registration and
//! `finalize` free every retained device copy (counted by a transport that wraps the
//! simulator's and tracks its live persistent allocations).
//!
//! Expected values come from the bodies' arithmetic written here (x + s, twice), never from a
//! run.

use simpler_aicore::{kernels, KernelFn};
use simpler_aicpu::payloads::PayloadsLayout;
use simpler_aicpu::{GraphBody, Rt, RtError, RunOutcome};
use simpler_core::orchestrator::{OrchestratorLayout, TaskArg};
use simpler_core::{ArgDirection, OrchArgs, TensorArgType};
use simpler_host::callable::Callable;
use simpler_host::hbg::{BindReport, GraphRetention, HbgError};
use simpler_host::transport::HostImage;
use simpler_host::{
    CallableHandle, ChipArg, ChipWorker, DeviceTransport, HostTensor, OrchFn, TransportError,
    WorkerError,
};
use simpler_host::{RunOptions, Runtime};
use simpler_sim::{Device, DeviceConfig, Topology};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

const ADD_SCALAR: u32 = 0;
const N: u32 = 256;
const ROWS: u32 = 4;

/// The simulator, with its live persistent allocations tracked.
struct Tracked {
    inner: Device,
    live: Arc<Mutex<BTreeSet<u64>>>,
}

impl DeviceTransport for Tracked {
    fn platform(&self) -> &'static str {
        DeviceTransport::platform(&self.inner)
    }
    fn alloc(&self, bytes: u64) -> Result<Option<u64>, TransportError> {
        DeviceTransport::alloc(&self.inner, bytes)
    }
    fn free_all(&self) -> Result<(), TransportError> {
        DeviceTransport::free_all(&self.inner)
    }
    fn malloc(&self, bytes: u64) -> Result<Option<u64>, TransportError> {
        let at = DeviceTransport::malloc(&self.inner, bytes)?;
        if let Some(a) = at {
            self.live.lock().unwrap().insert(a);
        }
        Ok(at)
    }
    fn free(&self, addr: u64) -> Result<bool, TransportError> {
        let freed = DeviceTransport::free(&self.inner, addr)?;
        if freed {
            self.live.lock().unwrap().remove(&addr);
        }
        Ok(freed)
    }
    fn copy_to_device(&self, addr: u64, data: &[u8]) -> Result<bool, TransportError> {
        DeviceTransport::copy_to_device(&self.inner, addr, data)
    }
    fn copy_from_device(&self, addr: u64, out: &mut [u8]) -> Result<bool, TransportError> {
        DeviceTransport::copy_from_device(&self.inner, addr, out)
    }
    fn layouts(&self) -> Result<(OrchestratorLayout, PayloadsLayout), TransportError> {
        DeviceTransport::layouts(&self.inner)
    }
    fn run_prebuilt(
        &self,
        kernels: Arc<[KernelFn]>,
        image: HostImage<'_>,
        options: RunOptions,
    ) -> Result<RunOutcome, TransportError> {
        DeviceTransport::run_prebuilt(&self.inner, kernels, image, options)
    }
    fn run(
        &self,
        orch: OrchFn,
        kernels: Arc<[KernelFn]>,
        args: Box<OrchArgs>,
        options: RunOptions,
    ) -> Result<RunOutcome, TransportError> {
        DeviceTransport::run(&self.inner, orch, kernels, args, options)
    }
}

/// A worker over the tracked simulator, and its live persistent allocations.
fn tracked_worker() -> (ChipWorker, Arc<Mutex<BTreeSet<u64>>>) {
    let live = Arc::new(Mutex::new(BTreeSet::new()));
    let inner = Device::start(DeviceConfig::new(Topology::A2a3)).expect("device");
    let w = ChipWorker::with_transport(Box::new(Tracked {
        inner,
        live: live.clone(),
    }));
    (w, live)
}

/// Retention on with the default caps, verification off (each test says when it verifies).
fn retained(max_definitions: usize, max_bytes: usize) -> GraphRetention {
    GraphRetention {
        max_definitions,
        max_bytes,
        verify: false,
    }
}

/// Row `k` of the entry's `x` (read) and `y` (written), `len` elements wide from column 0.
fn row(rt: &Rt<'_, '_>, k: u32, len: u32) -> Result<[TaskArg; 2], RtError> {
    let [x, y] = match rt.args().tensors() {
        [x, y] => [*x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let v = |t: simpler_core::TaskTensor| t.view(&[1, len], &[k, 0]).map_err(|_| RtError::Fatal(3));
    Ok([
        TaskArg {
            tensor: v(x)?,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: v(y)?,
            tag: TensorArgType::OutputExisting,
        },
    ])
}

/// y = x + s, then y = y + s, with s the body's boundary scalar 0 forwarded (a per-invocation
/// value).
fn twice_forwarded(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [x, y] = match rt.args().tensors() {
        [x, y] => [*x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let mut first = [
        TaskArg {
            tensor: x,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ];
    rt.submit_aiv(ADD_SCALAR, &mut first, &rt.args().scalars()[..1])?;
    let mut second = [
        TaskArg {
            tensor: y,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ];
    rt.submit_aiv(ADD_SCALAR, &mut second, &rt.args().scalars()[..1])?;
    Ok(())
}

/// The value `captured` body adds in its second node, read from outside the body (what a key
/// does not name).
static CAPTURED: AtomicU32 = AtomicU32::new(0);

/// y = x + 1, then y = y + CAPTURED (a value captured at recording).
fn captured(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [x, y] = match rt.args().tensors() {
        [x, y] => [*x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let mut first = [
        TaskArg {
            tensor: x,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ];
    rt.submit_aiv(ADD_SCALAR, &mut first, &[1.0f32.to_bits() as u64])?;
    let mut second = [
        TaskArg {
            tensor: y,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ];
    let c = CAPTURED.load(Ordering::Relaxed) as f32;
    rt.submit_aiv(ADD_SCALAR, &mut second, &[c.to_bits() as u64])?;
    Ok(())
}

/// Registers `orch` over x [ROWS, N] (in) and y [ROWS, N] (out) with `scalars` entry scalars.
fn register(
    w: &mut ChipWorker,
    orch: fn(&mut Rt<'_, '_>) -> Result<(), RtError>,
    scalars: usize,
) -> CallableHandle {
    w.register(callable(orch, scalars))
}

fn callable(orch: fn(&mut Rt<'_, '_>) -> Result<(), RtError>, _scalars: usize) -> Callable {
    Callable::raw(
        Arc::new(orch),
        vec![kernels::add_scalar],
        vec![ArgDirection::In, ArgDirection::Out],
    )
}

/// x's element i of bind `b`.
fn x_value(b: u32, i: usize) -> f32 {
    ((i % 53) as f32) * 0.25 + b as f32
}

/// Binds once on the device with x from bind `b`; returns the report and y.
fn bind(
    w: &mut ChipWorker,
    h: CallableHandle,
    b: u32,
    scalars: &[u64],
) -> Result<(BindReport, Vec<f32>), WorkerError> {
    let n = (ROWS * N) as usize;
    let x: Vec<f32> = (0..n).map(|i| x_value(b, i)).collect();
    let mut args = vec![
        ChipArg::Host(HostTensor::f32(&x, &[ROWS, N], ArgDirection::In)),
        ChipArg::Host(HostTensor::f32(
            &vec![-1.0; n],
            &[ROWS, N],
            ArgDirection::Out,
        )),
    ];
    let run = w.run(h, &mut args, scalars, RunOptions::on(Runtime::Hbg))?;
    let y = match args.pop() {
        Some(ChipArg::Host(t)) => t.to_f32(),
        _ => unreachable!("host tensors"),
    };
    Ok((run.bind.expect("an hbg bind"), y))
}

fn bits(v: f32) -> u64 {
    v.to_bits() as u64
}

/// Per row k, the body over row k with s = scalar[k]: the `ROWS` invocations share the key.
fn per_row(rt: &mut Rt<'_, '_>, key: u64, body: GraphBody, len: u32) -> Result<(), RtError> {
    for k in 0..ROWS {
        let mut b = row(rt, k, len)?;
        let s = rt.args().scalars()[k as usize];
        rt.submit_graph(key, body, &mut b, &[s])?;
    }
    Ok(())
}

fn rows_full(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    per_row(rt, 0, twice_forwarded, N)
}

#[test]
fn the_test_suite_verifies() {
    let (w, _) = tracked_worker();
    assert!(
        w.graph_retention().verify,
        "the workspace's .cargo/config.toml turns verification on for the tests"
    );
}

#[test]
fn a_warm_bind_with_new_data_and_scalars_replays_without_recording() {
    let (mut w, live) = tracked_worker();
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let h = register(&mut w, rows_full, ROWS as usize);
    let mut built = 0;
    for b in 0..10u32 {
        let s: Vec<f32> = (0..ROWS).map(|k| (k + 2 * b) as f32 * 0.5).collect();
        let scalars: Vec<u64> = s.iter().map(|&v| bits(v)).collect();
        let (report, y) = bind(&mut w, h, b, &scalars).expect("bind");
        for (k, &sk) in s.iter().enumerate() {
            for i in [0, 1, N as usize - 1] {
                let at = k * N as usize + i;
                assert_eq!(y[at], x_value(b, at) + sk + sk, "bind {b} row {k} col {i}");
            }
        }
        let g = report.graph_phases;
        built += g.definitions_built;
        if b > 0 {
            assert_eq!(report.graphs, [0, ROWS as u64, 0], "bind {b}");
            assert_eq!(g.recorded_nodes, 0, "bind {b}");
            assert_eq!(g.definitions_built, 0, "bind {b}");
            assert_eq!(g.definition_bytes_uploaded, 0, "bind {b}");
            assert_eq!(g.recorder_wakes, 0, "bind {b}");
            assert_eq!(g.retained_hits, 1, "bind {b}");
        }
        // From the third bind on, the bind before replayed every submission too: each is
        // accepted by following it (its boundary found staged), whatever the new scalars.
        let followed = if b >= 2 { ROWS as u64 } else { 0 };
        assert_eq!(g.followed, followed, "bind {b}");
    }
    assert_eq!(built, 1, "one recording in ten binds");
    assert_eq!(w.retained_graphs().0, 1);
    assert_eq!(live.lock().unwrap().len(), 1, "one device copy");
}

/// Rows 0..ROWS with the body over `N` columns when scalar ROWS is 0, over N / 2 when it is 1:
/// one key, two boundary signatures (the view's shape).
fn rows_by_width(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let len = if rt.args().scalars()[ROWS as usize] == 0 {
        N
    } else {
        N / 2
    };
    per_row(rt, 7, twice_forwarded, len)
}

#[test]
fn a_key_reused_with_another_boundary_signature_records_a_new_definition() {
    let (mut w, live) = tracked_worker();
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let h = register(&mut w, rows_by_width, ROWS as usize + 1);
    let s = 1.5f32;
    // Also: a bind whose submissions are the last bind's follows it (bind 4), and one whose
    // signature changed under the key (bind 5) stops following it and replays the other
    // Definition.
    for (b, wide, expect_built, expect_followed) in [
        (0u32, 0u64, 1u64, 0u64),
        (1, 1, 1, 0),
        (2, 0, 0, 0),
        (3, 1, 0, 0),
        (4, 1, 0, ROWS as u64),
        (5, 0, 0, 0),
    ] {
        let (report, y) = bind_rows(&mut w, h, b, s, wide);
        assert_eq!(
            report.graph_phases.definitions_built, expect_built,
            "bind {b} (width variant {wide})"
        );
        assert_eq!(report.graph_phases.followed, expect_followed, "bind {b}");
        assert_eq!(report.graphs, [expect_built, ROWS as u64 - expect_built, 0]);
        let len = if wide == 0 { N } else { N / 2 } as usize;
        for k in 0..ROWS as usize {
            let at = k * N as usize;
            assert_eq!(
                y[at + len - 1],
                x_value(b, at + len - 1) + 2.0 * s,
                "bind {b}"
            );
        }
    }
    assert_eq!(w.retained_graphs().0, 2, "one per signature");
    assert_eq!(live.lock().unwrap().len(), 2);
}

/// Binds `h` (bind `b`'s x) with s for every row's scalar and `extra` after them.
fn bind_rows(
    w: &mut ChipWorker,
    h: CallableHandle,
    b: u32,
    s: f32,
    extra: u64,
) -> (BindReport, Vec<f32>) {
    let mut scalars = vec![bits(s); ROWS as usize];
    scalars.push(extra);
    bind(w, h, b, &scalars).expect("bind")
}

/// Row `k` of bind `b`'s y holds x + 2s at its first and its `len`-th column.
fn assert_row(y: &[f32], b: u32, k: usize, len: usize, s: f32) {
    let at = k * N as usize;
    for i in [0, len - 1] {
        assert_eq!(
            y[at + i],
            x_value(b, at + i) + 2.0 * s,
            "bind {b} row {k} col {i}"
        );
    }
}

/// Rows 0..ROWS under one key, the last one over N / 2 columns when scalar ROWS is 1 (a
/// boundary that no longer matches the key's first invocation in the bind).
fn last_row_narrowed(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let narrow = rt.args().scalars()[ROWS as usize] == 1;
    for k in 0..ROWS {
        let len = if narrow && k == ROWS - 1 { N / 2 } else { N };
        let mut b = row(rt, k, len)?;
        let s = rt.args().scalars()[k as usize];
        rt.submit_graph(11, twice_forwarded, &mut b, &[s])?;
    }
    Ok(())
}

#[test]
fn a_bind_that_departs_from_the_last_one_midway_is_accepted_afresh_from_there() {
    let (mut w, _) = tracked_worker();
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let h = register(&mut w, last_row_narrowed, ROWS as usize + 1);
    let s = 0.75f32;
    let rows = ROWS as u64;
    // (bind, last row narrowed, followed, graphs [recorded, replayed, inline]): bind 0
    // records; bind 1 replays the retained Definition; bind 2 follows bind 1 throughout;
    // bind 3 follows it up to the last row, whose boundary no longer matches the key's
    // first invocation: that row runs inline, as it would without the memo; bind 4 follows
    // bind 3 up to the row bind 3 did not replay.
    for (b, narrow, followed, graphs) in [
        (0u32, 0u64, 0u64, [1, rows - 1, 0]),
        (1, 0, 0, [0, rows, 0]),
        (2, 0, rows, [0, rows, 0]),
        (3, 1, rows - 1, [0, rows - 1, 1]),
        (4, 1, rows - 1, [0, rows - 1, 1]),
    ] {
        let (report, y) = bind_rows(&mut w, h, b, s, narrow);
        assert_eq!(report.graph_phases.followed, followed, "bind {b}");
        assert_eq!(report.graphs, graphs, "bind {b}");
        for k in 0..ROWS as usize {
            let narrowed = narrow == 1 && k == ROWS as usize - 1;
            assert_row(&y, b, k, if narrowed { N / 2 } else { N } as usize, s);
        }
    }
}

/// The first `scalar[ROWS]` rows under one key.
fn first_rows(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let rows = rt.args().scalars()[ROWS as usize] as u32;
    for k in 0..rows {
        let mut b = row(rt, k, N)?;
        let s = rt.args().scalars()[k as usize];
        rt.submit_graph(13, twice_forwarded, &mut b, &[s])?;
    }
    Ok(())
}

#[test]
fn a_bind_with_fewer_or_more_submissions_follows_the_common_prefix() {
    let (mut w, _) = tracked_worker();
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let h = register(&mut w, first_rows, ROWS as usize + 1);
    let s = 1.25f32;
    let rows = ROWS as u64;
    // (bind, rows submitted, followed): bind 0 records and bind 1 replays (nothing to follow
    // yet); bind 2 follows bind 1 throughout; bind 3 submits half as many, all followed;
    // bind 4 follows those and goes on past the end of what bind 3 remembered; bind 5
    // follows bind 4 throughout.
    for (b, n, followed) in [
        (0u32, rows, 0u64),
        (1, rows, 0),
        (2, rows, rows),
        (3, rows / 2, rows / 2),
        (4, rows, rows / 2),
        (5, rows, rows),
    ] {
        let (report, y) = bind_rows(&mut w, h, b, s, n);
        assert_eq!(report.graph_phases.followed, followed, "bind {b}");
        let recorded = u64::from(b == 0);
        assert_eq!(report.graphs, [recorded, n - recorded, 0], "bind {b}");
        for k in 0..n as usize {
            assert_row(&y, b, k, N as usize, s);
        }
    }
}

fn one_captured(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let mut b = row(rt, 0, N)?;
    rt.submit_graph(3, captured, &mut b, &[])?;
    Ok(())
}

#[test]
fn verification_catches_a_body_changed_under_the_same_key() {
    let (mut w, _) = tracked_worker();
    w.set_graph_retention(GraphRetention {
        verify: true,
        ..retained(64, 1 << 20)
    })
    .unwrap();
    let h = register(&mut w, one_captured, 0);
    CAPTURED.store(2, Ordering::Relaxed);
    let (report, y) = bind(&mut w, h, 0, &[]).expect("first bind");
    assert_eq!(y[5], x_value(0, 5) + 1.0 + 2.0);
    assert_eq!(report.graph_phases.definitions_built, 1);
    let key = w.last_graph_commit()[0].0;
    // The same body: recorded again, verified, replayed from the retained copy.
    let (report, y) = bind(&mut w, h, 1, &[]).expect("verified bind");
    assert_eq!(y[5], x_value(1, 5) + 1.0 + 2.0);
    assert_eq!(
        report.graph_phases.definitions_built, 1,
        "verification records"
    );
    assert_eq!(
        report.graph_phases.definition_bytes_uploaded, 0,
        "and uploads nothing"
    );
    // The captured value changes, the key does not: node 1's scalar differs.
    CAPTURED.store(5, Ordering::Relaxed);
    match bind(&mut w, h, 2, &[]) {
        Err(WorkerError::Hbg(HbgError::GraphChanged { key: k, node })) => {
            assert_eq!(k, key);
            assert_eq!(node, Some(1), "the second node's scalar changed");
        }
        other => panic!(
            "expected GraphChanged, got {:?}",
            other.map(|(r, _)| r.graphs)
        ),
    }
    // Without verification the retained Definition replays with the value it captured: the
    // documented trap.
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let (_, y) = bind(&mut w, h, 3, &[]).expect("replayed bind");
    assert_eq!(y[5], x_value(3, 5) + 1.0 + 2.0, "the captured 2, not 5");
    CAPTURED.store(0, Ordering::Relaxed);
}

/// Body `scalar[0]` of three, each under its own key.
fn one_of_three(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let which = rt.args().scalars()[0];
    let mut b = row(rt, 0, N)?;
    let s = [bits((which + 1) as f32)];
    rt.submit_graph(100 + which, twice_forwarded, &mut b, &s)?;
    Ok(())
}

#[test]
fn eviction_at_the_cap_rerecords_oldest_used_first_and_stays_correct() {
    let (mut w, live) = tracked_worker();
    w.set_graph_retention(retained(2, 1 << 20)).unwrap();
    let h = register(&mut w, one_of_three, 1);
    // Bodies 0, 1, 0, 2 (evicts 1: 0 was used more recently), 0 (kept), 1 (evicts 2).
    for (b, which, expect_built) in [
        (0u32, 0u64, 1u64),
        (1, 1, 1),
        (2, 0, 0),
        (3, 2, 1),
        (4, 0, 0),
        (5, 1, 1),
        (6, 0, 0),
    ] {
        let (report, y) = bind(&mut w, h, b, &[which]).expect("bind");
        assert_eq!(
            report.graph_phases.definitions_built, expect_built,
            "bind {b}"
        );
        let s = (which + 1) as f32;
        assert_eq!(y[9], x_value(b, 9) + 2.0 * s, "bind {b}");
        assert!(w.retained_graphs().0 <= 2);
        assert_eq!(
            live.lock().unwrap().len(),
            w.retained_graphs().0,
            "bind {b}"
        );
    }
    // A byte cap below one Definition: every bind records, and stays correct.
    w.set_graph_retention(retained(2, 64)).unwrap();
    assert_eq!(
        w.retained_graphs(),
        (0, 0),
        "lowered caps drop what is over them"
    );
    for b in 7..10u32 {
        let (report, y) = bind(&mut w, h, b, &[0]).expect("bind over the byte cap");
        assert_eq!(report.graph_phases.definitions_built, 1, "bind {b}");
        assert_eq!(y[9], x_value(b, 9) + 2.0, "bind {b}");
    }
    assert!(live.lock().unwrap().is_empty());
}

#[test]
fn forget_graphs_reregistration_and_finalize_free_every_retained_copy() {
    let (mut w, live) = tracked_worker();
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let h = register(&mut w, one_of_three, 1);
    let other = register(&mut w, rows_full, ROWS as usize);
    // A user allocation of its own, which none of this may free.
    let mine = w.malloc(4096).expect("malloc");
    for which in 0..3 {
        bind(&mut w, h, which as u32, &[which]).expect("bind");
    }
    bind(&mut w, other, 0, &[bits(1.0); ROWS as usize]).expect("bind");
    assert_eq!(w.retained_graphs().0, 4);
    assert_eq!(live.lock().unwrap().len(), 5);
    w.forget_graphs().unwrap();
    assert_eq!(w.retained_graphs(), (0, 0));
    assert_eq!(*live.lock().unwrap(), BTreeSet::from([mine]));
    let (report, _) = bind(&mut w, h, 0, &[0]).expect("bind after forget");
    assert_eq!(report.graph_phases.definitions_built, 1, "records again");
    bind(&mut w, other, 1, &[bits(1.0); ROWS as usize]).expect("bind");
    assert_eq!(w.retained_graphs().0, 2);
    // Re-registering `h` drops its Definitions, not the other callable's.
    w.reregister(h, callable(one_of_three, 1)).unwrap();
    assert_eq!(w.retained_graphs().0, 1);
    assert_eq!(live.lock().unwrap().len(), 2);
    let (report, y) = bind(&mut w, h, 2, &[0]).expect("bind after re-registration");
    assert_eq!(report.graph_phases.definitions_built, 1);
    assert_eq!(y[9], x_value(2, 9) + 2.0);
    w.free(mine).unwrap();
    assert_eq!(live.lock().unwrap().len(), w.retained_graphs().0);
    w.finalize();
    assert!(live.lock().unwrap().is_empty(), "finalize frees the rest");
}

/// y = x + s, one node (s forwarded).
fn add_once(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [x, y] = match rt.args().tensors() {
        [x, y] => [*x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let mut a = [
        TaskArg {
            tensor: x,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ];
    rt.submit_aiv(ADD_SCALAR, &mut a, &rt.args().scalars()[..1])?;
    Ok(())
}

/// One submission of `add_once` under key 9 over row `scalar[1]`, its `y` view marked for
/// manual dependencies when `scalar[2]` is 1.
fn one_row_flagged(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let (row_k, manual) = (rt.args().scalars()[1] as u32, rt.args().scalars()[2] == 1);
    let mut b = row(rt, row_k, N)?;
    b[1].tensor = b[1].tensor.with_manual_dep(manual);
    let s = rt.args().scalars()[0];
    rt.submit_graph(9, add_once, &mut b, &[s])?;
    Ok(())
}

#[test]
fn the_signature_holds_the_manual_dependency_flag_and_the_view_offset() {
    let (mut w, _) = tracked_worker();
    w.set_graph_retention(retained(64, 1 << 20)).unwrap();
    let h = register(&mut w, one_row_flagged, 3);
    let s = 0.75f32;
    // (row, manual flag, Definitions built): a new flag or a new row is a new signature; a
    // signature seen before replays.
    for (b, (row_k, manual, expect_built)) in [
        (0u64, 0u64, 1u64),
        (0, 0, 0),
        (0, 1, 1),
        (2, 0, 1),
        (0, 1, 0),
        (2, 0, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let b = b as u32;
        let (report, y) = bind(&mut w, h, b, &[bits(s), row_k, manual]).expect("bind");
        assert_eq!(
            report.graph_phases.definitions_built, expect_built,
            "bind {b}: row {row_k}, manual {manual}"
        );
        let at = row_k as usize * N as usize + 3;
        assert_eq!(y[at], x_value(b, at) + s, "bind {b}");
    }
    assert_eq!(w.retained_graphs().0, 3);
}

/// The command's `--phases` table carries the bind window; `--verify-graphs` verifies every
/// warm round (which passes: the scene's body depends only on its key) and
/// `--no-retain-graphs` records every round.
#[test]
fn the_command_reports_the_bind_window_and_takes_the_retention_flags() {
    use simpler_host::app::{run_cli, Exit};
    for flag in ["--verify-graphs", "--no-retain-graphs", "--host-only"] {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let args = [
            "simpler",
            "run",
            "graph_vector",
            "--runtime",
            "hbg",
            "--phases",
            "--rounds",
            "3",
            flag,
            // Every round binds (a replayed round would record nothing whatever the flag).
            "--no-replay",
        ];
        let exit = run_cli(simpler_host::scenes::all(), args, &mut out, &mut err);
        let out = String::from_utf8(out).unwrap();
        assert!(
            matches!(exit, Exit::Success),
            "{flag}: {out}{}",
            String::from_utf8_lossy(&err)
        );
        let row = out
            .lines()
            .find(|l| l.starts_with("bind_window "))
            .unwrap_or_else(|| panic!("{flag}: no bind_window row in {out}"));
        // min, median, max, each a number of microseconds.
        let figures: Vec<f64> = row
            .split_whitespace()
            .skip(1)
            .take(3)
            .map(|f| f.parse().expect("a figure"))
            .collect();
        assert!(
            figures[0] <= figures[1] && figures[1] <= figures[2],
            "{row}"
        );
        assert!(out.lines().next().unwrap().contains("graph_vector"));
        assert!(out.contains("bind_window ms"), "the per-round column");
        // Warm rounds record (verification, retention off) or replay the retained Definition.
        let graphs = out
            .lines()
            .find(|l| l.starts_with("graphs (median us)"))
            .unwrap();
        let record_node: f64 = graphs
            .split("record_node ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{graphs}"));
        if flag == "--host-only" {
            assert_eq!(
                record_node, 0.0,
                "{flag}: retained, nothing recorded: {graphs}"
            );
        } else {
            assert!(record_node > 0.0, "{flag}: every round records: {graphs}");
        }
    }
}

/// By default a warm round whose guard matches the last round's replays its bind (the
/// per-round line says so); `--no-replay` binds every round.
#[test]
fn the_command_replays_warm_rounds_unless_told_not_to() {
    use simpler_host::app::{run_cli, Exit};
    for (extra, replays) in [(None, true), (Some("--no-replay"), false)] {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut args = vec![
            "simpler",
            "run",
            "graph_vector",
            "--runtime",
            "hbg",
            "--rounds",
            "3",
        ];
        args.extend(extra);
        let exit = run_cli(simpler_host::scenes::all(), args, &mut out, &mut err);
        let out = String::from_utf8(out).unwrap();
        assert!(
            matches!(exit, Exit::Success),
            "{out}{}",
            String::from_utf8_lossy(&err)
        );
        let rounds: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        assert_eq!(rounds.len(), 3, "{out}");
        assert!(rounds.iter().all(|l| l.contains("PASS")), "{out}");
        assert!(
            !rounds[0].ends_with("replayed"),
            "the cold round binds: {out}"
        );
        for l in &rounds[1..] {
            assert_eq!(l.ends_with(", replayed"), replays, "{extra:?}: {l}");
        }
    }
}
