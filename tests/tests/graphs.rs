//! Graphs on the hbg runtime with the recorder pool: eight bodies recorded once per bind on
//! recorder threads, replayed, committed in submission order; storage reuse across binds;
//! failures after an outer task was submitted.

use simpler_aicore::kernels;
use simpler_aicpu::{GraphBody, Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, TaskTensor, TensorArgType};
use simpler_host::hbg::HbgError;
use simpler_host::record::StandUpPart;
use simpler_host::{ChipArg, ChipWorker, HostTensor, WorkerError};
use simpler_host::{RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::Arc;

const ADD_SCALAR: u32 = 0;
const N: u32 = 256;
/// Bodies, and invocations of each per bind.
const BODIES: usize = 8;
const REPS: u32 = 2;

/// The entry's two tensors as one node's arguments: `x` read, `y` written in place.
fn x_into_y(rt: &mut Rt<'_, '_>) -> Result<[TaskArg; 2], RtError> {
    match rt.args().tensors() {
        [x, y] => Ok([
            TaskArg {
                tensor: *x,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: *y,
                tag: TensorArgType::OutputExisting,
            },
        ]),
        _ => Err(rt.report_fatal(1)),
    }
}

/// Body k: y = x + (k + 1), then y = y + (k + 1) again (two nodes, the second after the
/// first: a write-after-write on y and a read of it).
macro_rules! bodies {
    ($($name:ident = $k:expr),*) => {
        $(fn $name(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
            let mut first = x_into_y(rt)?;
            let y = first[1].tensor;
            let s = (($k + 1) as f32).to_bits() as u64;
            rt.submit_aiv(ADD_SCALAR, &mut first, &[s])?;
            let mut second = [
                TaskArg { tensor: y, tag: TensorArgType::Input },
                TaskArg { tensor: y, tag: TensorArgType::OutputExisting },
            ];
            rt.submit_aiv(ADD_SCALAR, &mut second, &[s])?;
            Ok(())
        })*
    };
}

bodies!(
    b0 = 0,
    b1 = 1,
    b2 = 2,
    b3 = 3,
    b4 = 4,
    b5 = 5,
    b6 = 6,
    b7 = 7
);
const ALL: [GraphBody; BODIES] = [b0, b1, b2, b3, b4, b5, b6, b7];

/// A body with a Graph inside: its recording is unsupported.
fn nested(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let mut inner = x_into_y(rt)?;
    rt.submit_graph(0, b0, &mut inner, &[])?;
    Ok(())
}

fn views(rt: &Rt<'_, '_>, k: usize, rep: u32) -> Result<[TaskArg; 2], RtError> {
    let [x, y] = match rt.args().tensors() {
        [x, y] => [*x, *y],
        _ => return Err(RtError::Fatal(2)),
    };
    let row = k as u32 * REPS + rep;
    let v = |t: TaskTensor| t.view(&[1, N], &[row, 0]).map_err(|_| RtError::Fatal(3));
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

/// Every body, twice, in the order b0 b0 b1 b1 ... b7 b7.
fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    for (k, body) in ALL.iter().enumerate() {
        for rep in 0..REPS {
            let mut b = views(rt, k, rep)?;
            rt.submit_graph(0, *body, &mut b, &[])?;
        }
    }
    Ok(())
}

/// b0 as usual, then a body with a nested Graph.
fn orchestrate_nested(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let mut b = views(rt, 0, 0)?;
    rt.submit_graph(0, b0, &mut b, &[])?;
    let mut b = views(rt, 1, 0)?;
    rt.submit_graph(0, nested, &mut b, &[])?;
    Ok(())
}

struct Fixture {
    w: ChipWorker,
    h: simpler_host::CallableHandle,
    x: Vec<f32>,
}

fn fixture(orch: fn(&mut Rt<'_, '_>) -> Result<(), RtError>) -> Fixture {
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    let h = w.register_callable(
        Arc::new(orch),
        vec![kernels::add_scalar],
        vec![ArgDirection::In, ArgDirection::Out],
    );
    let rows = (BODIES as u32 * REPS) as usize;
    let x = (0..rows * N as usize)
        .map(|i| (i % 97) as f32 * 0.5)
        .collect();
    Fixture { w, h, x }
}

fn args(f: &Fixture) -> Vec<ChipArg> {
    let rows = BODIES as u32 * REPS;
    vec![
        ChipArg::Host(HostTensor::f32(&f.x, &[rows, N], ArgDirection::In)),
        ChipArg::Host(HostTensor::f32(
            &vec![-1.0; f.x.len()],
            &[rows, N],
            ArgDirection::Out,
        )),
    ]
}

fn output(a: Vec<ChipArg>) -> Vec<f32> {
    match a.into_iter().nth(1) {
        Some(ChipArg::Host(t)) => t.to_f32(),
        _ => unreachable!("host tensors only"),
    }
}

#[test]
fn eight_bodies_record_on_the_pool_replay_and_reuse_every_thread_over_rounds() {
    let mut f = fixture(orchestrate);
    // The recorder threads' rotation is the subject: the commit waits for them rather than
    // recording queued jobs itself.
    f.w.set_commit_helps(false);
    assert_eq!(
        f.w.recorder_threads(),
        8,
        "started at callable registration"
    );
    let row = N as usize;
    for round in 0..6 {
        let mut a = args(&f);
        let bind =
            f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
                .expect("bind")
                .bind
                .expect("an hbg run reports its bind");
        assert_eq!(bind.graphs, [8, 8, 0], "round {round}");
        let y = output(a);
        for (i, (&got, &x)) in y.iter().zip(&f.x).enumerate() {
            let k = (i / row) / REPS as usize;
            let want = x + 2.0 * (k as f32 + 1.0);
            assert_eq!(got, want, "round {round}, element {i}");
        }
        // Committed in submission order: keys follow the submissions, heap blocks ascend.
        let commit = f.w.last_graph_commit();
        let keys: Vec<u64> = ALL
            .iter()
            .flat_map(|b| [*b as usize as u64; REPS as usize])
            .collect();
        assert_eq!(commit.iter().map(|c| c.0).collect::<Vec<_>>(), keys);
        assert!(commit.windows(2).all(|w| w[0].1 < w[1].1));
    }
    // Every recorder thread recorded at least two different bodies: its storage was reused.
    // (The pool may have grown past 8 threads if all were occupied at some submit.)
    let history = f.w.recorder_history();
    assert!(
        (8..=16).contains(&history.len()),
        "{} threads",
        history.len()
    );
    assert!(history.iter().filter(|k| !k.is_empty()).count() >= 8);
    for (t, keys) in history.iter().enumerate().filter(|(_, k)| !k.is_empty()) {
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 2, "thread {t} recorded {keys:?}");
    }
}

#[test]
fn a_stand_up_failure_fails_the_bind_as_invalid_arguments_and_the_next_bind_succeeds() {
    for part in [StandUpPart::HazardMap, StandUpPart::PackedRegion] {
        let mut f = fixture(orchestrate);
        f.w.inject_recorder_stand_up_failure(part);
        let mut a = args(&f);
        let err =
            f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
                .expect_err("stand-up fails");
        assert!(
            matches!(&err, WorkerError::Hbg(HbgError::GraphFailed { reason, .. }) if reason.contains("stood up")),
            "{err}"
        );
        assert!(err.to_string().contains("invalid arguments"));
        let mut a = args(&f);
        let bind =
            f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
                .expect("the next bind stands up")
                .bind
                .expect("an hbg run reports its bind");
        assert_eq!(bind.graphs, [8, 8, 0]);
    }
}

#[test]
fn a_graph_nested_in_a_recorded_body_fails_the_bind() {
    let mut f = fixture(orchestrate_nested);
    let mut a = args(&f);
    let err =
        f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
            .expect_err("nested");
    assert!(
        matches!(&err, WorkerError::Hbg(HbgError::GraphFailed { reason, .. }) if reason.contains("nested")),
        "{err}"
    );
    // On tmr (no recording) the nested body simply runs inline.
    let mut tensors = vec![
        HostTensor::f32(&f.x, &[BODIES as u32 * REPS, N], ArgDirection::In),
        HostTensor::f32(
            &vec![-1.0; f.x.len()],
            &[BODIES as u32 * REPS, N],
            ArgDirection::Out,
        ),
    ];
    f.w.run(f.h, &mut tensors, &[], RunOptions::default())
        .expect("tmr");
    let y = tensors[1].to_f32();
    assert_eq!(y[0], f.x[0] + 2.0);
    let row1 = (REPS as usize) * N as usize;
    assert_eq!(y[row1], f.x[row1] + 2.0, "the nested b0 ran inline");
}

/// Copies row 1 of boundary tensor 1 (a [2, 16, 16] view) into boundary tensor 2.
fn copy_second_row(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [_, rows, out] = match rt.args().tensors() {
        [a, b, c] => [*a, *b, *c],
        _ => return Err(rt.report_fatal(1)),
    };
    let sub = rows
        .view(&[1, 16, 16], &[1, 0, 0])
        .map_err(|_| RtError::Fatal(2))?;
    let mut a = [
        TaskArg {
            tensor: sub,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: out,
            tag: TensorArgType::OutputExisting,
        },
    ];
    rt.submit_aiv(ADD_SCALAR, &mut a, &[0])?;
    Ok(())
}

/// Two invocations whose boundary holds two views of one buffer at different distances.
fn orchestrate_aliased(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [a, f] = match rt.args().tensors() {
        [a, f] => [*a, *f],
        _ => return Err(rt.report_fatal(1)),
    };
    for inv in 0..2u32 {
        let v = |t: TaskTensor, s: &[u32], o: &[u32]| t.view(s, o).map_err(|_| RtError::Fatal(3));
        let mut boundary = [
            TaskArg {
                tensor: v(a, &[1, 16, 16], &[0, 0, 0])?,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: v(a, &[2, 16, 16], &[inv + 1, 0, 0])?,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: v(f, &[1, 16, 16], &[inv, 0, 0])?,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_graph(0, copy_second_row, &mut boundary, &[])?;
    }
    Ok(())
}

#[test]
fn a_replay_whose_aliased_views_are_spaced_differently_runs_inline_and_stays_right() {
    // Regression: the two boundary views of `a` are 1 row apart in the first invocation and
    // 2 in the second; replaying the first's Definition would read the wrong row.
    let a: Vec<f32> = (0..4 * 256).map(|i| (i / 256) as f32).collect();
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    let h = w.register_callable(
        Arc::new(orchestrate_aliased),
        vec![kernels::add_scalar],
        vec![ArgDirection::In, ArgDirection::Out],
    );
    let mut args = vec![
        ChipArg::Host(HostTensor::f32(&a, &[4, 16, 16], ArgDirection::In)),
        ChipArg::Host(HostTensor::f32(
            &[0.0; 512],
            &[2, 16, 16],
            ArgDirection::Out,
        )),
    ];
    let bind = w
        .run(h, &mut args, &[], RunOptions::on(Runtime::Hbg))
        .expect("bind")
        .bind
        .expect("an hbg run reports its bind");
    assert_eq!(bind.graphs, [1, 0, 1]);
    let y = output(args);
    // Invocation k copies row k + 2 of `a`, whose every element is k + 2.
    assert!(y[..256].iter().all(|&v| v == 2.0), "{:?}", &y[..4]);
    assert!(y[256..].iter().all(|&v| v == 3.0), "{:?}", &y[256..260]);
}

/// Adds boundary scalar 0 (f32 bits) to `x` into `y`, passing the scalar on unchanged.
fn add_forwarded(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let mut a = x_into_y(rt)?;
    rt.submit_aiv(ADD_SCALAR, &mut a, &rt.args().scalars()[..1])?;
    Ok(())
}

/// The same, through a copy of the scalar: a plain value to the recorder.
fn add_copied(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let s = rt.args().scalars()[0];
    let mut a = x_into_y(rt)?;
    rt.submit_aiv(ADD_SCALAR, &mut a, &[s])?;
    Ok(())
}

/// Three invocations of `body` over rows 0..3 with the values 1, 3 and 5.
fn three_values(rt: &mut Rt<'_, '_>, body: GraphBody) -> Result<(), RtError> {
    for (k, value) in [(0usize, 1.0f32), (1, 3.0), (2, 5.0)] {
        let mut b = views(rt, k, 0)?;
        rt.submit_graph(0, body, &mut b, &[value.to_bits() as u64])?;
    }
    Ok(())
}

#[test]
fn a_forwarded_boundary_scalar_is_a_per_invocation_value() {
    fn orch(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        three_values(rt, add_forwarded)
    }
    let mut f = fixture(orch);
    for round in 0..2 {
        let mut a = args(&f);
        let bind =
            f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
                .expect("bind")
                .bind
                .expect("an hbg run reports its bind");
        assert_eq!(bind.graphs, [1, 2, 0], "recorded, replayed, inline");
        let y = output(a);
        let row = (REPS * N) as usize;
        for (k, v) in [1.0f32, 3.0, 5.0].iter().enumerate() {
            assert_eq!(y[k * row], f.x[k * row] + v, "round {round}, row {k}");
            let last = k * row + N as usize - 1;
            assert_eq!(y[last], f.x[last] + v, "round {round}, row {k}, last");
        }
    }
}

/// The documented trap: a value computed from a boundary scalar (here a copy into a local)
/// is static Definition data, so every replay reuses the first invocation's value. Inline
/// (tmr) each invocation has its own.
#[test]
fn a_value_computed_from_a_boundary_scalar_is_static_definition_data() {
    fn orch(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        three_values(rt, add_copied)
    }
    let mut f = fixture(orch);
    let mut a = args(&f);
    let bind =
        f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
            .expect("bind")
            .bind
            .expect("an hbg run reports its bind");
    assert_eq!(bind.graphs, [1, 2, 0]);
    let y = output(a);
    let row = (REPS * N) as usize;
    for k in 0..3 {
        assert_eq!(y[k * row], f.x[k * row] + 1.0, "row {k} replays value 1");
    }
    let mut a = args(&f);
    f.w.run(f.h, &mut a, &[], Default::default())
        .expect("tmr run");
    let y = output(a);
    for (k, v) in [1.0f32, 3.0, 5.0].iter().enumerate() {
        assert_eq!(y[k * row], f.x[k * row] + v, "inline row {k}");
    }
}

/// With every recording deferred to the commit, the commit records a lone job itself rather
/// than wake a recorder thread and wait for it to be scheduled; with eight jobs it records
/// some and the recorder threads it woke the rest. Every result stays right.
#[test]
fn the_commit_records_queued_jobs_itself_and_wakes_recorders_only_for_the_others() {
    use simpler_host::hbg::GraphRetention;
    fn one(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let mut b = views(rt, 0, 0)?;
        rt.submit_graph(0, b0, &mut b, &[])?;
        Ok(())
    }
    for (orch, jobs) in [
        (one as fn(&mut Rt<'_, '_>) -> Result<(), RtError>, 1u64),
        (orchestrate, 8),
    ] {
        let mut f = fixture(orch);
        f.w.set_graph_retention(GraphRetention::OFF).unwrap();
        f.w.set_recordings_while_building(0);
        for round in 0..3 {
            let mut a = args(&f);
            let bind =
                f.w.run(f.h, &mut a, &[], RunOptions::on(Runtime::Hbg))
                    .expect("bind")
                    .bind
                    .expect("an hbg run reports its bind");
            let g = bind.graph_phases;
            assert_eq!(g.definitions_built, jobs, "round {round}");
            assert!(g.commit_recordings >= 1, "round {round}: {g:?}");
            if jobs == 1 {
                assert_eq!(g.commit_recordings, 1, "round {round}");
                assert_eq!(g.recorder_wakes, 0, "round {round}: no recorder woken");
            }
            let y = output(a);
            let rows = if jobs == 1 { 1 } else { BODIES * REPS as usize };
            for (i, (&got, &x)) in y.iter().zip(&f.x).enumerate().take(rows * N as usize) {
                let k = (i / N as usize) / REPS as usize;
                assert_eq!(
                    got,
                    x + 2.0 * (k as f32 + 1.0),
                    "round {round}, element {i}"
                );
            }
        }
    }
}
