//! Graph recording (`simpler_host::record`): the invariants of recording-storage reuse and
//! the Definition a recording builds.

use simpler_core::graph::{DefinitionView, TensorSourceKind};
use simpler_core::{AddressSpace, ChipTensor, TaskTensor, TensorArgType};
use simpler_host::record::{GraphBody, GraphBoundary, RecordError, Recording, StandUpPart};
use simpler_host::scenes::{self, Prepared};
use simpler_host::RunOptions;
use simpler_tests::fixtures::boundary;

fn scene(name: &str, case: &str) -> (GraphBody, GraphBoundary, Prepared) {
    let p = scenes::find(name).unwrap().prepare(case).unwrap();
    let body = scenes::body(name).expect("a scene body");
    (body, boundary(&p, TensorArgType::InOut), p)
}

#[test]
fn vector_body_records_its_graph() {
    let (body, b, p) = scene("vector_example", "default");
    let mut r = Recording::new();
    let image = r.record(7, body, Some(&b)).expect("record").to_vec();
    let view = DefinitionView::parse(&image).expect("parse");
    assert!(view.verify_content_hash().is_ok());
    assert_eq!(Some(view.task_count() as u64), p.tasks);
    let edges: usize = (0..view.task_count())
        .map(|i| view.fanin(i).unwrap().count())
        .sum();
    assert_eq!(
        Some(edges as u64),
        p.edges,
        "the per-task submission's edge count"
    );
    // Node 0 reads two boundary tensors exactly and writes its own output.
    let kinds: Vec<u8> = view
        .node_tensor_sources(0)
        .unwrap()
        .map(|s| s.source)
        .collect();
    assert_eq!(
        kinds,
        [
            TensorSourceKind::BoundaryExact as u8,
            TensorSourceKind::BoundaryExact as u8,
            TensorSourceKind::OwnOutput as u8
        ]
    );
}

#[test]
fn a_short_body_after_a_long_one_gives_the_fresh_definition() {
    let (long, lb, _) = scene("bgemm", "Case1");
    let (short, sb, _) = scene("vector_example", "default");
    let mut fresh = Recording::new();
    let want = fresh.record(1, short, Some(&sb)).expect("fresh").to_vec();
    let mut reused = Recording::new();
    reused.record(2, long, Some(&lb)).expect("long");
    assert!(reused.node_slots() >= 128, "the long body's slots stay");
    let got = reused.record(1, short, Some(&sb)).expect("short").to_vec();
    assert_eq!(got, want);
    assert_eq!(reused.node_count(), 5);
}

#[test]
fn a_missing_boundary_is_an_error_not_a_crash() {
    let (body, _, _) = scene("vector_example", "default");
    let mut r = Recording::new();
    assert_eq!(
        r.record(1, body, None).unwrap_err(),
        RecordError::NoBoundary
    );
}

#[test]
fn a_failed_stand_up_leaves_storage_not_ready_and_the_next_recording_succeeds() {
    let (body, b, _) = scene("vector_example", "default");
    for part in [StandUpPart::HazardMap, StandUpPart::PackedRegion] {
        let mut r = Recording::new();
        r.inject_stand_up_failure(part);
        assert_eq!(
            r.record(1, body, Some(&b)).unwrap_err(),
            RecordError::StandUp(part)
        );
        assert!(!r.storage_ready());
        r.record(1, body, Some(&b))
            .expect("the retry stands the storage up");
        assert!(r.storage_ready());
    }
}

#[test]
fn packed_region_addresses_stay_put_across_recordings() {
    let (long, lb, _) = scene("bgemm", "Case1");
    let (short, sb, _) = scene("vector_example", "default");
    let mut r = Recording::new();
    r.record(1, short, Some(&sb)).unwrap();
    let region = r.packed_region();
    r.record(2, long, Some(&lb)).unwrap();
    r.record(3, short, Some(&sb)).unwrap();
    assert_eq!(r.packed_region(), region);
}

#[test]
fn an_uncacheable_boundary_is_refused() {
    let (body, mut b, _) = scene("vector_example", "default");
    b.tags[2] = TensorArgType::Output;
    let mut r = Recording::new();
    assert!(matches!(
        r.record(1, body, Some(&b)),
        Err(RecordError::Uncacheable(_))
    ));
}

#[test]
fn a_definitions_edges_are_the_per_task_submissions_edges() {
    // The same body submitted task by task on tmr, with the DAG recorded at submit.
    let (body, b, p) = scene("bgemm", "Case1");
    let mut w =
        simpler_host::ChipWorker::init(simpler_sim::DeviceConfig::new(simpler_sim::Topology::A2a3))
            .expect("device");
    let h = w.register(p.callable.clone());
    let dag = std::sync::Arc::new(std::sync::Mutex::new(simpler_host::dag::DagRecorder::new()));
    let mut tensors = p.tensors.clone();
    w.run(
        h,
        &mut tensors,
        &p.scalars,
        RunOptions {
            hook: Some(dag.clone()),
            ..RunOptions::default()
        },
    )
    .expect("tmr run");
    let dag = dag.lock().unwrap();
    let mut want: Vec<(usize, usize)> = dag
        .edges()
        .iter()
        .filter(|e| e.wait)
        .map(|e| (e.from, e.to))
        .collect();
    want.sort_unstable();
    // The recorded Definition's fanin lists.
    let mut r = Recording::new();
    let image = r.record(3, body, Some(&b)).unwrap().to_vec();
    let view = DefinitionView::parse(&image).unwrap();
    assert_eq!(view.task_count(), dag.tasks().len());
    let mut got: Vec<(usize, usize)> = (0..view.task_count())
        .flat_map(|i| view.fanin(i).unwrap().map(move |p| (p as usize, i)))
        .collect();
    got.sort_unstable();
    assert_eq!(got, want);
    assert!(!got.is_empty());
}

/// A body of 1100 kernel-less nodes: past the node cap.
fn too_long(rt: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
    for _ in 0..1100 {
        rt.submit_dummy(&mut [], &[])?;
    }
    Ok(())
}

#[test]
fn an_overshooting_body_finishes_unsupported_and_the_next_recording_is_fresh() {
    let (short, sb, _) = scene("vector_example", "default");
    let mut fresh = Recording::new();
    let want = fresh.record(1, short, Some(&sb)).unwrap().to_vec();
    let mut r = Recording::new();
    assert_eq!(
        r.record(9, too_long, Some(&sb)).unwrap_err(),
        RecordError::Unsupported("more than 1024 nodes")
    );
    // The body ran to its end: every node up to the cap was recorded.
    assert_eq!(r.node_count(), 1024);
    assert!(r.node_slots() <= 1024, "node slots stay within the cap");
    let got = r.record(1, short, Some(&sb)).unwrap().to_vec();
    assert_eq!(got, want);
}

/// A body whose one node takes a 5-D view of its boundary tensor.
fn wide(rt: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
    let t = rt.args().tensors()[0];
    let v = t
        .view(&[1, 1, 1, 1, 4], &[0, 0, 0, 0, 0])
        .map_err(|_| simpler_aicpu::RtError::Fatal(1))?;
    let mut a = [simpler_core::orchestrator::TaskArg {
        tensor: v,
        tag: TensorArgType::Input,
    }];
    rt.submit_dummy(&mut a, &[])?;
    Ok(())
}

/// The same with a 1-D view.
fn narrow(rt: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
    let t = rt.args().tensors()[1];
    let mut a = [simpler_core::orchestrator::TaskArg {
        tensor: t,
        tag: TensorArgType::Input,
    }];
    rt.submit_dummy(&mut a, &[])?;
    Ok(())
}

#[test]
fn a_narrow_tensor_recorded_after_a_wide_one_inherits_no_stale_strides() {
    let mut b = GraphBoundary::default();
    let five = ChipTensor::contiguous(
        0x1000_0000,
        &[2, 2, 2, 2, 4],
        simpler_core::DataType::Float32,
        AddressSpace::Device,
    );
    let one = ChipTensor::contiguous(
        0x2000_0000,
        &[64],
        simpler_core::DataType::Float32,
        AddressSpace::Device,
    );
    b.tensors = vec![
        TaskTensor::adopt(&five).unwrap(),
        TaskTensor::adopt(&one).unwrap(),
    ];
    b.tags = vec![TensorArgType::Input, TensorArgType::Input];
    let mut r = Recording::new();
    r.record(1, wide, Some(&b)).unwrap();
    assert_eq!(r.node_tensors(0)[0].ndims(), 5);
    r.record(2, narrow, Some(&b)).unwrap();
    let t = r.node_tensors(0)[0];
    assert_eq!(t.ndims(), 1);
    // The packed slot was written from a fresh value: every stride past rank 1 is zero.
    let bytes = bytemuck::bytes_of(&t);
    let strides: Vec<u32> = bytes[72..92]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(&strides[1..], &[0, 0, 0, 0]);
    let mut fresh = Recording::new();
    assert_eq!(
        fresh.record(2, narrow, Some(&b)).unwrap(),
        r.record(2, narrow, Some(&b)).unwrap()
    );
}

/// First task: a dummy with three scalars.
fn scalars_first(rt: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
    let t = rt.args().tensors()[0];
    let mut a = [simpler_core::orchestrator::TaskArg {
        tensor: t,
        tag: TensorArgType::Input,
    }];
    rt.submit(
        simpler_aicpu::MixedKernels::NONE,
        1,
        &mut a,
        &[7, 8, 9],
        &[],
    )?;
    Ok(())
}

/// First task: an allocation (which writes no payload record).
fn alloc_first(rt: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
    let info = TaskTensor::create_info(&[64], simpler_core::DataType::Float32)
        .map_err(|_| simpler_aicpu::RtError::Fatal(1))?;
    let mut out = [simpler_core::orchestrator::TaskArg {
        tensor: info,
        tag: TensorArgType::Output,
    }];
    rt.alloc_tensors(&mut out)?;
    Ok(())
}

#[test]
fn an_allocation_node_has_no_scalars_whatever_was_recorded_before() {
    let one = ChipTensor::contiguous(
        0x2000_0000,
        &[64],
        simpler_core::DataType::Float32,
        AddressSpace::Device,
    );
    let b = GraphBoundary {
        tensors: vec![TaskTensor::adopt(&one).unwrap()],
        tags: vec![TensorArgType::Input],
        scalars: vec![],
    };
    let mut fresh = Recording::new();
    let want = fresh.record(5, alloc_first, Some(&b)).unwrap().to_vec();
    let mut r = Recording::new();
    r.record(4, scalars_first, Some(&b)).unwrap();
    let got = r.record(5, alloc_first, Some(&b)).unwrap().to_vec();
    assert_eq!(got, want);
    let view = DefinitionView::parse(&got).unwrap();
    assert_eq!(view.node(0).unwrap().scalar_count, 0);
}

/// A boundary over two buffers: rows `r0` and `r0 + gap` of a `[4, 16]` f32 buffer at `a`,
/// and a `[16]` buffer at `b`.
fn spaced(a: u64, b: u64, r0: u32, gap: u32) -> Vec<simpler_core::orchestrator::TaskArg> {
    use simpler_core::orchestrator::TaskArg;
    let buf = |addr, shape: &[u32]| {
        let c = ChipTensor::contiguous(
            addr,
            shape,
            simpler_core::DataType::Float32,
            AddressSpace::Device,
        );
        TaskTensor::adopt(&c).expect("adopt")
    };
    let x = buf(a, &[4, 16]);
    [
        (x.view(&[1, 16], &[r0, 0]).unwrap(), TensorArgType::Input),
        (
            x.view(&[1, 16], &[r0 + gap, 0]).unwrap(),
            TensorArgType::Input,
        ),
        (buf(b, &[16]), TensorArgType::InOut),
    ]
    .into_iter()
    .map(|(tensor, tag)| TaskArg { tensor, tag })
    .collect()
}

fn deep(args: &[simpler_core::orchestrator::TaskArg], scalars: &[u64]) -> GraphBoundary {
    GraphBoundary {
        tensors: args.iter().map(|a| a.tensor).collect(),
        tags: args.iter().map(|a| a.tag).collect(),
        scalars: scalars.to_vec(),
    }
}

#[test]
fn a_replay_compared_from_its_arguments_gets_the_deep_copys_verdict() {
    let first_args = spaced(0x10_0000, 0x20_0000, 0, 1);
    let first = deep(&first_args, &[7, 8]);
    let mut reps = [0u16; simpler_core::graph::GRAPH_MAX_TENSOR_ARGS];
    simpler_host::record::alias_reps(&first.tensors, &mut reps);
    let mut retagged = spaced(0x50_0000, 0x60_0000, 2, 1);
    retagged[2].tag = TensorArgType::OutputExisting;
    let mut reshaped = spaced(0x50_0000, 0x60_0000, 2, 1);
    reshaped[2].tensor = reshaped[2].tensor.view(&[8], &[0]).unwrap();
    let cases: [(&str, Vec<_>, Vec<u64>, bool); 6] = [
        // Other addresses, other rows at the same spacing, other scalar values: a replay.
        (
            "rebased",
            spaced(0x50_0000, 0x60_0000, 2, 1),
            vec![1, 2],
            true,
        ),
        ("same", first_args.clone(), vec![7, 8], true),
        (
            "respaced",
            spaced(0x50_0000, 0x60_0000, 0, 2),
            vec![7, 8],
            false,
        ),
        ("retagged", retagged, vec![7, 8], false),
        ("reshaped", reshaped, vec![7, 8], false),
        ("scalar count", first_args.clone(), vec![7], false),
    ];
    for (name, args, scalars, expected) in cases {
        assert_eq!(
            first.matches(&deep(&args, &scalars)),
            expected,
            "{name}: deep copy"
        );
        assert_eq!(
            first.matches_args(&reps, &args, scalars.len()),
            expected,
            "{name}: from the arguments"
        );
    }
    // A different tensor count never matches.
    assert!(!first.matches_args(&reps, &first_args[..2], 2));
}
