//! Graph recording (`simpler_host::record`): the invariants of recording-storage reuse and
//! the Definition a recording builds.

use simpler_core::graph::{DefinitionView, TensorSourceKind};
use simpler_core::{AddressSpace, ArgDirection, ChipTensor, TaskTensor, TensorArgType};
use simpler_host::record::{GraphBody, GraphBoundary, RecordError, Recording, StandUpPart};
use simpler_host::scenes::{self, Prepared};

/// The boundary a scene's entry would have, at made-up device addresses.
fn boundary(p: &Prepared) -> GraphBoundary {
    let mut b = GraphBoundary::default();
    for (i, (t, dir)) in p.tensors.iter().zip(&p.signature).enumerate() {
        let addr = 0x1000_0000 * (i as u64 + 1);
        let c = ChipTensor::contiguous(addr, &t.shapes, t.dtype, AddressSpace::Device);
        b.tensors.push(TaskTensor::adopt(&c).expect("adopt"));
        b.tags.push(match dir {
            ArgDirection::In => TensorArgType::Input,
            ArgDirection::Out => TensorArgType::OutputExisting,
            _ => TensorArgType::InOut,
        });
    }
    b.scalars = p.scalars.clone();
    b
}

fn scene(name: &str, case: &str) -> (GraphBody, GraphBoundary, Prepared) {
    let p = scenes::find(name).unwrap().prepare(case).unwrap();
    let body = scenes::body(name).expect("a scene body");
    (body, boundary(&p), p)
}

#[test]
fn vector_body_records_its_graph() {
    let (body, b, p) = scene("vector_example", "default");
    let mut r = Recording::new();
    let image = r.record(7, body, Some(&b)).expect("record").to_vec();
    let view = DefinitionView::parse(&image).expect("parse");
    assert!(view.verify_content_hash().is_ok());
    assert_eq!(view.task_count() as u64, p.tasks);
    let edges: usize = (0..view.task_count())
        .map(|i| view.fanin(i).unwrap().count())
        .sum();
    assert_eq!(
        edges as u64, p.edges,
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
