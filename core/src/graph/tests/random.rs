//! Random DAGs round trip through build and parse, and the largest DAG the caps allow builds.

use super::*;
use crate::graph::records::MAX_IMAGE_BYTES;
use crate::graph::rules::output_window;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random body of `n` nodes: random producers (in random order), tensors from the
/// boundary, earlier nodes and the node itself, static and boundary scalars, predicates.
fn random_body(rng: &mut XorShift, n: usize) -> Body {
    let bt = tensor(0x10_0000, 1 << 16, 0, &[64, 64], &[64, 1]);
    let mut body = Body {
        nodes: Vec::new(),
        node_count: n,
        tensors: Vec::new(),
        tensor_sources: Vec::new(),
        scalars: Vec::new(),
        scalar_sources: Vec::new(),
        fanins: Vec::new(),
        predicates: Vec::new(),
        boundary: vec![bt; 1 + rng.below(4)],
        tags: Vec::new(),
        boundary_scalars: rng.below(5),
        storage: ExecutionStorageShape::default(),
        full_key: rng.next(),
    };
    body.tags = vec![TensorArgType::InOut; body.boundary.len()];
    let density = 1 + rng.below(6);
    for i in 0..n {
        let mut node = RecordedNode {
            kernel_ids: [rng.next() as i32, -1, 3],
            active_mask: 1,
            total_output_size: 64 * rng.below(4) as u64 + rng.below(64) as u64,
            fanin_offset: body.fanins.len() as u32,
            tensor_offset: body.tensors.len() as u32,
            tensor_source_offset: body.tensor_sources.len() as u32,
            scalar_offset: body.scalars.len() as u32,
            ..RecordedNode::default()
        };
        let mut producers: Vec<usize> = (0..i).filter(|_| rng.below(density) == 0).collect();
        for k in (1..producers.len()).rev() {
            producers.swap(k, rng.below(k + 1));
        }
        node.fanin_count = producers.len() as u32;
        body.fanins.extend(producers);
        for _ in 0..rng.below(4) {
            let choice = rng.below(3);
            let source = if choice == 1 && i > 0 {
                let j = rng.below(i);
                match output_window(body.nodes[j].total_output_size) {
                    Some(w) if w > 0 => {
                        src(TensorSourceKind::Internal, j, rng.below(w as usize) as u64)
                    }
                    _ => src(TensorSourceKind::BoundaryView, 0, 7),
                }
            } else if choice == 2 && node.total_output_size > 0 {
                src(TensorSourceKind::OwnOutput, i, 0)
            } else {
                src(
                    TensorSourceKind::BoundaryExact,
                    rng.below(body.boundary.len()),
                    0,
                )
            };
            body.tensors.push(bt.with_version(rng.below(9) as i32));
            body.tensor_sources.push(source);
            node.tensor_count += 1;
        }
        for _ in 0..rng.below(3) {
            let value = rng.next();
            body.scalars.push(value);
            body.scalar_sources
                .push(if body.boundary_scalars > 0 && value % 2 == 0 {
                    RecordedScalarSource::Boundary(rng.below(body.boundary_scalars))
                } else {
                    RecordedScalarSource::Static
                });
            node.scalar_count += 1;
        }
        if rng.below(4) == 0 {
            node.predicate_index = Some(body.predicates.len() as u32);
            body.predicates.push(RecordedPredicate {
                operand: bt,
                source: src(TensorSourceKind::BoundaryExact, 0, 0),
                elem_offset: rng.below(100) as u64,
                target: rng.next() as i64,
                elem_size: 4,
                op: 1,
            });
        }
        body.nodes.push(node);
    }
    body
}

/// Checks a parsed image against the body's topology, computed here with plain vectors.
fn check_topology(body: &Body, view: &DefinitionView<'_>) {
    let n = body.node_count;
    let fanins: Vec<Vec<u16>> = body.nodes[..n]
        .iter()
        .map(|nd| {
            body.fanins[nd.fanin_offset as usize..][..nd.fanin_count as usize]
                .iter()
                .map(|&p| p as u16)
                .collect()
        })
        .collect();
    let mut transpose: Vec<Vec<u16>> = vec![Vec::new(); n];
    for (c, ps) in fanins.iter().enumerate() {
        for &p in ps {
            transpose[p as usize].push(c as u16);
        }
    }
    let roots: Vec<u16> = (0..n as u16)
        .filter(|&c| fanins[c as usize].is_empty())
        .collect();
    for i in 0..n {
        assert_eq!(collect(view.fanin(i)), fanins[i]);
        assert_eq!(collect(view.fanout(i)), transpose[i]);
    }
    assert_eq!(view.roots().collect::<Vec<_>>(), roots);
    let edges: usize = fanins.iter().map(Vec::len).sum();
    assert_eq!(view.header().edge_count as usize, edges);
}

#[test]
fn random_dags_round_trip() {
    let (rounds, max_nodes) = if cfg!(miri) { (4, 10) } else { (300, 200) };
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..rounds {
        let n = 1 + rng.below(max_nodes);
        let body = random_body(&mut rng, n);
        let img = body.build().unwrap();
        let view = DefinitionView::parse(&img).unwrap();
        view.verify_content_hash().unwrap();
        check_topology(&body, &view);
        // Leftovers never change the image.
        assert_eq!(with_leftovers(&body).build().unwrap(), img);
    }
}

#[test]
fn caps_fit_and_the_largest_dag_builds() {
    // A complete DAG at the node cap: every node consumes every earlier node.
    let n = if cfg!(miri) { 24 } else { GRAPH_MAX_NODES };
    let mut body = diamond();
    body.nodes.clear();
    body.fanins.clear();
    for i in 0..n {
        body.nodes.push(RecordedNode {
            fanin_offset: body.fanins.len() as u32,
            fanin_count: i as u32,
            ..RecordedNode::default()
        });
        body.fanins.extend(0..i);
    }
    body.node_count = n;
    let img = body.build().unwrap();
    let view = DefinitionView::parse(&img).unwrap();
    assert_eq!(view.header().edge_count as usize, n * (n - 1) / 2);
    assert_eq!(view.roots().collect::<Vec<_>>(), vec![0]);
    assert_eq!(collect(view.fanout(0)).len(), n - 1);
    assert!(MAX_IMAGE_BYTES <= u32::MAX as u64);
}
