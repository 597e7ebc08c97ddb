//! Property tests of Graph Definition images through the public API: random DAGs build, parse
//! and verify; the fanout CSR is exactly the transpose of the fanin CSR; the roots are exactly
//! the nodes without producers; leftovers past `node_count` never reach the image; and the
//! reader never panics, whatever bytes it is given.

use proptest::prelude::*;
use simpler_core::arg::TensorArgType;
use simpler_core::graph::{
    build_definition, definition_size, DefinitionBoundary, DefinitionInput, DefinitionView,
    ExecutionStorageShape, RecordedNode, RecordedScalarSource, RecordedTensorSource,
    TensorSourceKind,
};
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskTensor};

fn boundary_tensor() -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr: 0x4000,
            size: 64 * 64 * 2,
        },
        0,
        &[64, 64],
        &[64, 1],
        DataType::Float16,
        AddressSpace::Device,
    )
    .unwrap()
}

/// One recording in owned storage.
struct Body {
    nodes: Vec<RecordedNode>,
    tensors: Vec<TaskTensor>,
    tensor_sources: Vec<RecordedTensorSource>,
    scalars: Vec<u64>,
    scalar_sources: Vec<RecordedScalarSource>,
    fanins: Vec<usize>,
    boundary: Vec<TaskTensor>,
    tags: Vec<TensorArgType>,
    node_count: usize,
}

impl Body {
    fn input(&self) -> DefinitionInput<'_> {
        DefinitionInput {
            full_key: 42,
            node_count: self.node_count,
            nodes: &self.nodes,
            tensors: &self.tensors,
            tensor_sources: &self.tensor_sources,
            scalars: &self.scalars,
            scalar_sources: &self.scalar_sources,
            fanins: &self.fanins,
            boundary: Some(DefinitionBoundary {
                tensors: &self.boundary,
                tags: &self.tags,
                scalar_count: 1,
            }),
            storage: ExecutionStorageShape {
                header_bytes: 128,
                node_bytes: 300,
            },
            ..DefinitionInput::default()
        }
    }

    fn build(&self) -> Vec<u8> {
        let input = self.input();
        let mut out = vec![0u8; definition_size(&input).unwrap()];
        let len = build_definition(&input, &mut out).unwrap();
        assert_eq!(len, out.len());
        out
    }
}

/// A DAG of `masks.len()` nodes: node `i` consumes every earlier `j` (within the last 64)
/// whose bit is set in `masks[i]`, listed in an order scrambled by `orders[i]`.
fn body(masks: &[u64], orders: &[u64]) -> Body {
    let bt = boundary_tensor();
    let mut b = Body {
        nodes: Vec::new(),
        tensors: Vec::new(),
        tensor_sources: Vec::new(),
        scalars: Vec::new(),
        scalar_sources: Vec::new(),
        fanins: Vec::new(),
        boundary: vec![bt, bt],
        tags: vec![TensorArgType::Input, TensorArgType::InOut],
        node_count: masks.len(),
    };
    for (i, (&mask, &order)) in masks.iter().zip(orders).enumerate() {
        let mut producers: Vec<usize> = (i.saturating_sub(64)..i)
            .filter(|&j| mask >> (j % 64) & 1 == 1)
            .collect();
        if !producers.is_empty() {
            let k = order as usize % producers.len();
            producers.rotate_left(k);
        }
        if order & 1 == 1 {
            producers.reverse();
        }
        let mut node = RecordedNode {
            kernel_ids: [i as i32, -1, -1],
            active_mask: 1,
            logical_block_num: 1,
            total_required_subtasks: 1,
            total_output_size: (order % 300) * 7,
            tensor_offset: b.tensors.len() as u32,
            tensor_source_offset: b.tensor_sources.len() as u32,
            scalar_offset: b.scalars.len() as u32,
            fanin_offset: b.fanins.len() as u32,
            fanin_count: producers.len() as u32,
            ..RecordedNode::default()
        };
        // One tensor read from a producer's window (or the boundary), one scalar.
        let source = match producers.first() {
            Some(&p) if b.nodes[p].total_output_size > 0 => RecordedTensorSource {
                kind: TensorSourceKind::Internal,
                index: p,
                packed_offset: 0,
            },
            _ => RecordedTensorSource {
                kind: TensorSourceKind::BoundaryExact,
                index: (order >> 8) as usize % 2,
                packed_offset: 0,
            },
        };
        b.tensors.push(bt);
        b.tensor_sources.push(source);
        node.tensor_count = 1;
        b.scalars.push(order);
        b.scalar_sources.push(if order & 2 == 0 {
            RecordedScalarSource::Static
        } else {
            RecordedScalarSource::Boundary(0)
        });
        node.scalar_count = 1;
        b.fanins.extend(producers);
        b.nodes.push(node);
    }
    b
}

fn dag() -> impl Strategy<Value = (Vec<u64>, Vec<u64>)> {
    (1usize..=160).prop_flat_map(|n| {
        (
            prop::collection::vec(any::<u64>(), n),
            prop::collection::vec(any::<u64>(), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn fanout_is_the_transpose_and_roots_are_the_sources((masks, orders) in dag()) {
        let b = body(&masks, &orders);
        let img = b.build();
        let view = DefinitionView::parse(&img).unwrap();
        view.verify_content_hash().unwrap();
        let n = masks.len();
        prop_assert_eq!(view.task_count(), n);

        let mut expected_fanout: Vec<Vec<u16>> = vec![Vec::new(); n];
        let mut expected_roots = Vec::new();
        let mut edges = 0;
        for (c, node) in b.nodes.iter().enumerate() {
            let fanin = &b.fanins[node.fanin_offset as usize..][..node.fanin_count as usize];
            let got: Vec<u16> = view.fanin(c).unwrap().collect();
            let want: Vec<u16> = fanin.iter().map(|&p| p as u16).collect();
            prop_assert_eq!(got, want, "fanin of {} in record order", c);
            for &p in fanin {
                expected_fanout[p].push(c as u16);
            }
            if fanin.is_empty() {
                expected_roots.push(c as u16);
            }
            edges += fanin.len();
        }
        for (p, want) in expected_fanout.iter().enumerate() {
            let got: Vec<u16> = view.fanout(p).unwrap().collect();
            prop_assert_eq!(&got, want, "fanout of {}", p);
        }
        prop_assert_eq!(view.roots().collect::<Vec<_>>(), expected_roots);
        prop_assert_eq!(view.header().edge_count as usize, edges);

        // Heap windows are the running sum of 64-byte-aligned output sizes.
        let mut heap = 0u64;
        for (i, node) in b.nodes.iter().enumerate() {
            prop_assert_eq!(view.node_offset(i), Some(heap));
            heap += node.total_output_size.div_ceil(64) * 64;
        }
        prop_assert_eq!(view.header().required_heap, heap);
    }

    #[test]
    fn leftovers_past_node_count_never_reach_the_image(
        (masks, orders) in dag(),
        extra in 1usize..40,
    ) {
        let n = masks.len();
        // A longer body recorded into the same storage first, then this one over its prefix.
        let mut longer_masks = masks.clone();
        let mut longer_orders = orders.clone();
        longer_masks.extend((0..extra as u64).map(|k| !k));
        longer_orders.extend((0..extra as u64).map(|k| k * 977));
        let mut reused = body(&longer_masks, &longer_orders);
        reused.node_count = n;
        // The short body's nodes reuse the long body's slots only up to n: the flat arrays of
        // both agree on the prefix because both were recorded node by node.
        prop_assert_eq!(reused.build(), body(&masks, &orders).build());
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(view) = DefinitionView::parse(&bytes) {
            let _ = view.verify_content_hash();
        }
    }

    #[test]
    fn parse_never_panics_on_corrupted_images(
        (masks, orders) in dag(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let mut img = body(&masks, &orders).build();
        for (at, v) in edits {
            let len = img.len();
            img[at % len] = v;
        }
        if let Ok(view) = DefinitionView::parse(&img) {
            // Every accessor stays inside the image.
            for i in 0..view.task_count() + 1 {
                let _ = view.node(i);
                let _ = view.node_offset(i);
                let _ = view.fanin(i).map(|r| r.count());
                let _ = view.fanout(i).map(|r| r.count());
                let _ = view.node_tensors(i).map(|r| r.count());
                let _ = view.node_tensor_sources(i).map(|r| r.count());
                let _ = view.node_scalars(i).map(|r| r.count());
                let _ = view.node_scalar_sources(i).map(|r| r.count());
                let _ = view.node_predicate(i);
            }
            let _ = view.roots().count();
            let _ = view.boundary_signatures().count();
            let _ = view.verify_content_hash();
        }
    }
}
