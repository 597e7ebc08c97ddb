//! Dispatch predicates end to end on the simulator: tmr, hbg, and Graph recording and replay.
//!
//! The scene is the reference's expert-tile gate (dsv4's `recv_count[expert][0] > tile_row`):
//! each expert owns `TILES` rows, and a row's task runs only if the expert's count exceeds the
//! tile index. A skipped task's output row keeps the value the host staged (-1).

use simpler_aicore::kernels;
use simpler_aicpu::scheduler::single;
use simpler_aicpu::{CoreSlot, MixedKernels, Rt, RtError, RunError, SchedError};
use simpler_core::graph::{DefinitionView, TensorSourceKind, TASK_ATTR_PREDICATE};
use simpler_core::orchestrator::TaskArg;
use simpler_core::predicate::{Predicate, PredicateError, PredicateOp};
use simpler_core::{
    AddressSpace, ArgDirection, BufferHandle, ChipTensor, DataType, TaskTensor, TensorArgType,
};
use simpler_host::record::{GraphBoundary, RecordError, Recording};
use simpler_host::{ChipArg, ChipWorker, HostTensor, WorkerError};
use simpler_host::{RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::Arc;

const ADD_SCALAR: u32 = 0;
const EXPERTS: u32 = 5;
const TILES: u32 = 3;
const ROWS: u32 = EXPERTS * TILES;
const N: u32 = 64;
const S: f32 = 0.5;
/// Column 0 is each expert's count; column 1 is noise no predicate reads. -1 checks that a
/// narrow element is sign-extended (read unsigned, it would pass every `> t`).
const COUNTS: [[i32; 2]; EXPERTS as usize] = [[2, 9], [0, 9], [3, 9], [-1, 9], [1, 9]];

fn row(t: &TaskTensor, r: u32) -> Result<TaskTensor, RtError> {
    t.view(&[1, N], &[r, 0]).map_err(|_| RtError::Fatal(3))
}

fn add(x: TaskTensor, y: TaskTensor) -> [TaskArg; 2] {
    [
        TaskArg {
            tensor: x,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: y,
            tag: TensorArgType::OutputExisting,
        },
    ]
}

fn aiv() -> MixedKernels {
    single(CoreSlot::Aiv0, ADD_SCALAR)
}

fn scalar() -> [u64; 1] {
    [S.to_bits() as u64]
}

/// Entry: counts [EXPERTS, 2] i32, x [ROWS, N], y [ROWS, N] (INOUT, staged at -1).
fn entry(rt: &Rt<'_, '_>) -> Result<[TaskTensor; 3], RtError> {
    match rt.args().tensors() {
        [c, x, y] => Ok([*c, *x, *y]),
        _ => Err(RtError::Fatal(1)),
    }
}

/// One task per row, gated on its expert's count.
fn gated(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [counts, x, y] = entry(rt)?;
    for e in 0..EXPERTS {
        for t in 0..TILES {
            let p = Predicate::new(&counts, &[e, 0], PredicateOp::Gt, t as i64)?;
            let r = e * TILES + t;
            let mut a = add(row(&x, r)?, row(&y, r)?);
            rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
        }
    }
    Ok(())
}

/// A Graph body over one expert: boundary (its count row [1, 2], its x rows, its y rows).
fn expert_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [count, x, y] = entry(rt)?;
    for t in 0..TILES {
        let p = Predicate::new(&count, &[0, 0], PredicateOp::Gt, t as i64)?;
        let mut a = add(row(&x, t)?, row(&y, t)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
    }
    Ok(())
}

/// Every expert through one Graph key: recorded once, replayed with each expert's count.
fn gated_graphs(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [counts, x, y] = entry(rt)?;
    for e in 0..EXPERTS {
        let rows = |t: &TaskTensor| {
            t.view(&[TILES, N], &[e * TILES, 0])
                .map_err(|_| RtError::Fatal(4))
        };
        let count = counts
            .view(&[1, 2], &[e, 0])
            .map_err(|_| RtError::Fatal(5))?;
        let mut b = [
            TaskArg {
                tensor: count,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: rows(&x)?,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: rows(&y)?,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_graph(0, expert_body, &mut b, &[])?;
    }
    Ok(())
}

/// The predicate reads a value a task produces: per row, a gate task writes `x[r] + c[r]`
/// into a runtime-allocated tile, and the row's task runs if the tile's first element is
/// positive (an f32's sign is its bit pattern's sign as an i32). The row task's kernel
/// arguments do not include the tile: only the predicate ties it to the gate task.
fn produced(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [_, x, y] = entry(rt)?;
    for r in 0..ROWS {
        let mut gate = gate_args(&x, r)?;
        rt.submit(aiv(), 1, &mut gate, &[gate_shift(r).to_bits() as u64], &[])?;
        let p = Predicate::new(&gate[1].tensor, &[0, 0], PredicateOp::Gt, 0)?;
        let mut a = add(row(&x, r)?, row(&y, r)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
    }
    Ok(())
}

/// A gate task's arguments: row `r` of `x` in, a fresh runtime-allocated `[1, N]` tile out.
fn gate_args(x: &TaskTensor, r: u32) -> Result<[TaskArg; 2], RtError> {
    Ok([
        TaskArg {
            tensor: row(x, r)?,
            tag: TensorArgType::Input,
        },
        TaskArg {
            tensor: TaskTensor::create_info(&[1, N], DataType::Float32)
                .map_err(|_| RtError::Fatal(6))?,
            tag: TensorArgType::Output,
        },
    ])
}

/// What the gate task of row `r` adds: rows alternate between a positive and a negative
/// first element.
fn gate_shift(r: u32) -> f32 {
    if r.is_multiple_of(2) {
        100.0
    } else {
        -100.0
    }
}

fn x_values() -> Vec<f32> {
    (0..ROWS * N).map(|i| (i % 89) as f32 * 0.25).collect()
}

fn worker(
    orch: fn(&mut Rt<'_, '_>) -> Result<(), RtError>,
) -> (ChipWorker, simpler_host::CallableHandle) {
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    let h = w.register_callable(
        Arc::new(orch),
        vec![kernels::add_scalar],
        vec![ArgDirection::In, ArgDirection::In, ArgDirection::InOut],
    );
    (w, h)
}

fn args() -> Vec<ChipArg> {
    let counts = HostTensor {
        data: COUNTS
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        shapes: vec![EXPERTS, 2],
        dtype: DataType::Int32,
        dir: ArgDirection::In,
    };
    let n = (ROWS * N) as usize;
    vec![
        ChipArg::Host(counts),
        ChipArg::Host(HostTensor::f32(&x_values(), &[ROWS, N], ArgDirection::In)),
        ChipArg::Host(HostTensor::f32(
            &vec![-1.0; n],
            &[ROWS, N],
            ArgDirection::InOut,
        )),
    ]
}

fn output(a: Vec<ChipArg>) -> Vec<f32> {
    match a.into_iter().nth(2) {
        Some(ChipArg::Host(t)) => t.to_f32(),
        _ => unreachable!("host tensors only"),
    }
}

/// Checks every row: `x + S` where `runs(row)`, the staged -1 elsewhere.
fn check(y: &[f32], runs: impl Fn(u32) -> bool, what: &str) {
    let x = x_values();
    for r in 0..ROWS {
        for c in [0, N / 2, N - 1] {
            let i = (r * N + c) as usize;
            let want = if runs(r) { x[i] + S } else { -1.0 };
            assert_eq!(y[i], want, "{what}: row {r}, column {c}");
        }
    }
}

fn expert_runs(r: u32) -> bool {
    let (e, t) = (r / TILES, r % TILES);
    COUNTS[e as usize][0] as i64 > t as i64
}

#[test]
fn a_failing_predicate_retires_its_task_unrun_on_tmr_and_hbg() {
    let (mut w, h) = worker(gated);
    let mut a = args();
    w.run(h, &mut a, &[], Default::default()).expect("tmr run");
    check(&output(a), expert_runs, "tmr");
    for round in 0..2 {
        let mut a = args();
        w.run(h, &mut a, &[], RunOptions::on(Runtime::Hbg))
            .expect("hbg bind");
        check(&output(a), expert_runs, &format!("hbg round {round}"));
    }
}

#[test]
fn a_predicate_on_a_produced_value_waits_for_its_producer() {
    let (mut w, h) = worker(produced);
    let x = x_values();
    let runs = |r: u32| x[(r * N) as usize] + gate_shift(r) > 0.0;
    for round in 0..3 {
        let mut a = args();
        w.run(h, &mut a, &[], Default::default()).expect("tmr run");
        check(&output(a), runs, &format!("tmr round {round}"));
        let mut a = args();
        w.run(h, &mut a, &[], RunOptions::on(Runtime::Hbg))
            .expect("hbg bind");
        check(&output(a), runs, &format!("hbg round {round}"));
    }
}

/// Recorded once, replayed four times: each replay's predicates read that invocation's count
/// (the operand is rebound through the boundary), not the recorded one.
#[test]
fn a_replayed_predicate_reads_its_invocations_boundary() {
    let (mut w, h) = worker(gated_graphs);
    for round in 0..2 {
        let mut a = args();
        let bind = w
            .run(h, &mut a, &[], RunOptions::on(Runtime::Hbg))
            .expect("bind")
            .bind
            .expect("an hbg run reports its bind");
        assert_eq!(
            bind.graphs,
            [1, EXPERTS as u64 - 1, 0],
            "recorded, replayed, inline"
        );
        check(&output(a), expert_runs, &format!("round {round}"));
    }
    // Inline on tmr, the same orchestration gives the same rows.
    let mut a = args();
    w.run(h, &mut a, &[], Default::default()).expect("tmr run");
    check(&output(a), expert_runs, "tmr inline");
}

/// A predicate whose element lies outside device memory stops the run with the scheduler's
/// predicate error, naming the task.
#[test]
fn a_predicate_outside_device_memory_fails_the_run() {
    fn orch(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let [_, x, y] = entry(rt)?;
        let nowhere = TaskTensor::new(
            BufferHandle {
                addr: 0xDEAD_0000_0000,
                size: 64,
            },
            0,
            &[16],
            &[1],
            DataType::Int32,
            AddressSpace::Device,
        )
        .map_err(|_| RtError::Fatal(7))?;
        let p = Predicate::new(&nowhere, &[3], PredicateOp::Eq, 0)?;
        let mut a = add(row(&x, 0)?, row(&y, 0)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
        Ok(())
    }
    let (mut w, h) = worker(orch);
    let mut a = args();
    match w.run(h, &mut a, &[], Default::default()) {
        Err(WorkerError::Run(RunError::Scheduler(SchedError::Predicate {
            error: PredicateError::Memory(fault),
            ..
        }))) => assert_eq!((fault.addr, fault.len), (0xDEAD_0000_0000 + 12, 4)),
        other => panic!("expected the predicate's memory fault, got {other:?}"),
    }
}

// ---- recording (hbg_recording.md §11, item 21) ------------------------------------------

fn boundary() -> GraphBoundary {
    let mut b = GraphBoundary::default();
    let shapes: [(&[u32], DataType, TensorArgType); 3] = [
        (&[1, 2], DataType::Int32, TensorArgType::Input),
        (&[TILES, N], DataType::Float32, TensorArgType::Input),
        (
            &[TILES, N],
            DataType::Float32,
            TensorArgType::OutputExisting,
        ),
    ];
    for (i, (s, dtype, tag)) in shapes.into_iter().enumerate() {
        let c =
            ChipTensor::contiguous(0x1000_0000 * (i as u64 + 1), s, dtype, AddressSpace::Device);
        b.tensors.push(TaskTensor::adopt(&c).expect("adopt"));
        b.tags.push(tag);
    }
    b
}

/// The Definition image of `body` recorded once over [`boundary`] with fresh storage.
fn recorded(body: fn(&mut Rt<'_, '_>) -> Result<(), RtError>) -> Vec<u8> {
    Recording::new()
        .record(1, body, Some(&boundary()))
        .expect("record")
        .to_vec()
}

#[test]
fn a_recorded_predicate_names_its_boundary_operand_element_and_comparison() {
    let image = recorded(expert_body);
    let view = DefinitionView::parse(&image).expect("parse");
    assert_eq!(view.task_count(), TILES as usize);
    assert_eq!(view.predicates().len(), TILES as usize);
    for t in 0..TILES as usize {
        let node = view.node(t).unwrap();
        assert_eq!(node.predicate_slot as usize, t + 1, "node {t}");
        assert_eq!(node.task_attrs & TASK_ATTR_PREDICATE, TASK_ATTR_PREDICATE);
        let p = view.node_predicate(t).unwrap();
        assert_eq!(
            p.operand_source.kind(),
            Some(TensorSourceKind::BoundaryExact)
        );
        assert_eq!(p.operand_source.source_index, 0);
        assert_eq!(
            (p.elem_offset, p.target, p.elem_size, p.op),
            (0, t as i64, 4, PredicateOp::Gt as u8)
        );
    }
}

#[test]
fn a_predicate_on_a_kernel_less_node_is_dropped() {
    fn body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let [count, x, y] = entry(rt)?;
        let p = Predicate::new(&count, &[0, 0], PredicateOp::Gt, 0)?;
        let mut a = add(row(&x, 0)?, row(&y, 0)?);
        rt.submit_predicated(&p, MixedKernels::NONE, 1, &mut a, &[], &[])?;
        let mut a = add(row(&x, 1)?, row(&y, 1)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
        Ok(())
    }
    let image = recorded(body);
    let view = DefinitionView::parse(&image).expect("parse");
    assert_eq!(view.task_count(), 2);
    assert_eq!(
        view.node(0).unwrap().predicate_slot,
        0,
        "the dummy's is dropped"
    );
    assert_eq!(view.node(0).unwrap().task_attrs & TASK_ATTR_PREDICATE, 0);
    assert_eq!(view.node(1).unwrap().predicate_slot, 1);
    assert_eq!(view.predicates().len(), 1);
}

#[test]
fn a_predicate_on_a_tensor_the_replay_cannot_rebind_aborts_the_recording() {
    fn body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let [_, x, y] = entry(rt)?;
        // Neither a boundary tensor nor an earlier node's output.
        let c = ChipTensor::contiguous(0x7000_0000, &[4], DataType::Int32, AddressSpace::Device);
        let foreign = TaskTensor::adopt(&c).map_err(|_| RtError::Fatal(8))?;
        let p = Predicate::new(&foreign, &[1], PredicateOp::Ne, 0)?;
        let mut a = add(row(&x, 0)?, row(&y, 0)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
        Ok(())
    }
    let mut r = Recording::new();
    assert_eq!(
        r.record(1, body, Some(&boundary())).unwrap_err(),
        RecordError::Unsupported("a predicate's operand is neither boundary nor internal")
    );
    // The storage is fine for the next body.
    r.record(2, expert_body, Some(&boundary()))
        .expect("the next recording");
}

#[test]
fn a_predicate_index_outside_its_operand_aborts_the_recording() {
    fn body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let [count, x, y] = entry(rt)?;
        let p = Predicate::new(&count, &[0, 2], PredicateOp::Gt, 0)?;
        let mut a = add(row(&x, 0)?, row(&y, 0)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
        Ok(())
    }
    let mut r = Recording::new();
    assert_eq!(
        r.record(1, body, Some(&boundary())).unwrap_err(),
        RecordError::Body(RtError::Predicate(PredicateError::Index {
            dim: 1,
            index: 2,
            shape: 2
        }))
    );
}

/// A predicate on a value an earlier node of the body produces: the operand is recorded as
/// that node's output, and the Definition has the edge the per-task submit derives from the
/// operand (the predicated node's kernel arguments do not include it).
#[test]
fn a_predicate_on_an_internal_value_records_its_producer_as_a_fanin() {
    fn body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
        let [_, x, y] = entry(rt)?;
        let mut gate = gate_args(&x, 0)?;
        rt.submit(aiv(), 1, &mut gate, &scalar(), &[])?;
        let p = Predicate::new(&gate[1].tensor, &[0, 5], PredicateOp::Gt, 0)?;
        let mut a = add(row(&x, 1)?, row(&y, 1)?);
        rt.submit_predicated(&p, aiv(), 1, &mut a, &scalar(), &[])?;
        Ok(())
    }
    let image = recorded(body);
    let view = DefinitionView::parse(&image).expect("parse");
    assert_eq!(view.task_count(), 2);
    let fanin: Vec<u16> = view.fanin(1).unwrap().collect();
    assert_eq!(fanin, [0], "the predicate's producer");
    let p = view.node_predicate(1).unwrap();
    assert_eq!(p.operand_source.kind(), Some(TensorSourceKind::Internal));
    assert_eq!(p.operand_source.source_index, 0);
    assert_eq!(p.elem_offset, 5);
}
