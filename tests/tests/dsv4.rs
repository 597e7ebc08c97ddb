//! The dsv4-shaped scene: eight Graph Definitions of 1679 nodes and 129 host submissions per
//! bind; on hbg every Definition is recorded once per bind and every other submission
//! replays one (none runs inline), on tmr every body runs inline; both against the golden.
//!
//! The expected counts come from a model written here from the scene's documented structure
//! (its size constants only), not from a run: per Definition its nodes, the edges among them,
//! the edges its invocation has to tasks outside it, its boundary and its invocations.

use simpler_host::scenes::dsv4::{
    csa_moe_key, CHUNKS_PER_GROUP, EMB_CHUNKS, HASH_LAYERS, HEADS, LAYERS, MTP_ALLOC, MTP_EXPERTS,
    MTP_GROUPS, ROUTED, VOCAB_GROUPS,
};
use simpler_host::scenes::{self, Prepared};
use simpler_host::ChipWorker;
use simpler_host::{RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::fixtures::{host_args, host_tensors, register_prepared};
use std::time::Instant;

/// One Definition of the model.
#[derive(Debug)]
struct Def {
    name: &'static str,
    /// Nodes (allocation tasks included).
    nodes: u64,
    /// Edges between its nodes.
    internal: u64,
    /// Edges per invocation from its nodes to tasks outside it (tmr, bodies inline).
    external: u64,
    /// Boundary tensors, of them writers, and scalars.
    tensors: u64,
    writers: u64,
    scalars: u64,
    /// Submissions per bind.
    invocations: u64,
}

/// A pairwise sum tree over `n` leaves: `n - 1` adds.
fn tree_nodes(n: u64) -> u64 {
    n - 1
}

/// Its edges when every leaf has exactly one producer of its own: two per add.
fn tree_edges(n: u64) -> u64 {
    2 * (n - 1)
}

fn model() -> Vec<Def> {
    let (l, h, r) = (LAYERS as u64, HEADS as u64, ROUTED as u64);
    let c = EMB_CHUNKS as u64;
    let n = (VOCAB_GROUPS * CHUNKS_PER_GROUP) as u64;
    let (g, p) = (MTP_GROUPS as u64, MTP_EXPERTS as u64);
    let experts = g * p;
    // An expert: up, gate, their product, [the route,] down: one edge from `xn` each to up
    // and gate, two into the product, [two into the routed product,] one into down.
    let expert_nodes = |routed: bool| 4 + routed as u64;
    let expert_edges = |routed: bool| 5 + routed as u64;
    vec![
        Def {
            name: "embed",
            // c chunk products, their first add, c - 2 accumulates, + positions, + bias.
            nodes: c + 1 + (c - 2) + 1 + 1,
            // first add: 2; first accumulate: its product + the add (creator); the others
            // also the previous accumulate (the writer they evict); + positions: the add
            // (creator) and the last accumulate; the biased store: 1.
            internal: 2 + 2 + 3 * (c - 3) + 2 + 1,
            external: 0,
            tensors: 2 * c + 2,
            writers: 1,
            scalars: 1,
            invocations: 1,
        },
        Def {
            name: "attn_csa",
            // gain; per head q, new key, scores, + bias, ⊙ mask, · V, · Wo; sum of heads.
            nodes: 1 + 7 * h + tree_nodes(h),
            internal: 7 * h + tree_edges(h),
            // the gain reads HS[l]
            external: 1,
            tensors: 3 + 7 * h,
            writers: h + 1,
            scalars: h,
            invocations: l.div_ceil(2),
        },
        Def {
            name: "attn_hca",
            // gain, shared new key; per head q, two scores, + bias, two · V, add, gate, · Wo.
            nodes: 2 + 9 * h + tree_nodes(h),
            internal: 1 + 10 * h + tree_edges(h),
            external: 1,
            tensors: 7 + 5 * h,
            writers: 2,
            scalars: 1,
            invocations: l / 2,
        },
        Def {
            name: "csa_moe (hashed)",
            // gain, gate, + bias; gated shared expert; routed experts; sum of r + 1 buffers.
            nodes: 3 + expert_nodes(true) * (1 + r) + tree_nodes(r + 1),
            // gate ← gain, bias ← gate; the shared expert's route is the gate (its two
            // inputs are the product and the gate), a routed one's an entry tensor (one).
            internal: 2 + (expert_edges(true) + 1) + expert_edges(true) * r + tree_edges(r + 1),
            external: 1,
            tensors: 4 + 4 * (r + 1) + r,
            writers: r + 2,
            scalars: 1,
            invocations: HASH_LAYERS as u64,
        },
        Def {
            name: "csa_moe (learned)",
            // gain, gate, + bias; plain shared expert; per routed expert its gate ⊙ weights
            // and the routed expert; sum of r + 1 buffers.
            nodes: 3 + expert_nodes(false) + (1 + expert_nodes(true)) * r + tree_nodes(r + 1),
            internal: 2
                + expert_edges(false)
                + (1 + expert_edges(true) + 1) * r
                + tree_edges(r + 1),
            external: 1,
            tensors: 4 + 4 * (r + 1) + r,
            writers: r + 2,
            scalars: 1,
            invocations: l - HASH_LAYERS as u64,
        },
        Def {
            name: "mtp",
            // next-token embedding, + H_FIN, gain; the allocations; the experts (their
            // down projections write allocated tensors); per group a tree; the group tree.
            nodes: 3
                + experts.div_ceil(MTP_ALLOC as u64)
                + expert_nodes(true) * experts
                + g * tree_nodes(p)
                + tree_nodes(g),
            // + H_FIN ← embedding, gain ← sum; per expert its routed edges plus the down
            // projection's creator edge to its allocation; a group tree's first level reads
            // two tensors of one allocation (that allocation and the two writers: 3 edges),
            // its other levels 2; the group tree reads the group outputs (one writer each).
            internal: 2
                + (expert_edges(true) + 1) * experts
                + g * (3 * (p / 2) + 2 * (p / 2 - 1))
                + tree_edges(g),
            // + H_FIN reads the final norm's output
            external: 1,
            tensors: 5 + 5 * g,
            writers: g + 1,
            scalars: 0,
            invocations: 1,
        },
        Def {
            name: "lm_head",
            // per chunk z, biased store; the tree of the z.
            nodes: 2 * n + tree_nodes(n),
            internal: n + tree_edges(n),
            // every chunk product reads H_FIN
            external: n,
            tensors: 2 + 2 * VOCAB_GROUPS as u64,
            writers: VOCAB_GROUPS as u64 + 1,
            scalars: 12,
            invocations: 1,
        },
        Def {
            name: "draft_agree",
            // per chunk the draft product and its product with the main logits; the tree.
            nodes: 2 * n + tree_nodes(n),
            internal: n + tree_edges(n),
            // per chunk: MTP_OUT (mtp's last node) and the logits chunk (lm_head's store)
            external: 2 * n,
            tensors: 2 + 2 * VOCAB_GROUPS as u64,
            writers: 1,
            scalars: 0,
            invocations: 1,
        },
    ]
}

/// Ordinary submits at the outer level: two residual adds per layer and the final norm; and
/// their edges (each add: the writers of its two inputs; the norm: the last layer's add).
fn ordinary() -> (u64, u64) {
    let l = LAYERS as u64;
    (2 * l + 1, 4 * l + 1)
}

/// Tensors an outer task carries; a wider boundary's other readers ride on one prelude task
/// (up to 32 more, every boundary here).
const TASK_ROOM: u64 = 32;

struct Totals {
    definitions: u64,
    nodes: u64,
    graph_submissions: u64,
    ordinary: u64,
    tmr_tasks: u64,
    tmr_edges: u64,
    preludes: u64,
}

fn totals() -> Totals {
    let defs = model();
    let (ordinary, ordinary_edges) = ordinary();
    let sum = |f: &dyn Fn(&Def) -> u64| defs.iter().map(f).sum::<u64>();
    Totals {
        definitions: defs.len() as u64,
        nodes: sum(&|d| d.nodes),
        graph_submissions: sum(&|d| d.invocations),
        ordinary,
        tmr_tasks: sum(&|d| d.nodes * d.invocations) + ordinary,
        tmr_edges: sum(&|d| (d.internal + d.external) * d.invocations) + ordinary_edges,
        preludes: sum(&|d| (d.tensors > TASK_ROOM) as u64 * d.invocations),
    }
}

#[test]
fn the_model_has_the_reference_shape() {
    let defs = model();
    let t = totals();
    assert_eq!(t.definitions, 8);
    assert_eq!(t.nodes, 1679, "{defs:#?}");
    assert_eq!(t.graph_submissions + t.ordinary, 129);
    for d in &defs {
        assert!(
            (27..=48).contains(&d.tensors),
            "{} boundary {}",
            d.name,
            d.tensors
        );
        assert!(d.writers <= 31, "{} writers {}", d.name, d.writers);
        assert!(d.scalars <= 12, "{} scalars {}", d.name, d.scalars);
        assert!(d.nodes <= 1024, "{} nodes {}", d.name, d.nodes);
    }
    assert!(defs.iter().any(|d| d.tensors == 48));
    assert_ne!(csa_moe_key(true), csa_moe_key(false));
    let p = scenes::find("dsv4_shaped")
        .unwrap()
        .prepare("default")
        .unwrap();
    assert_eq!(p.tasks, Some(t.tmr_tasks), "tasks: Prepared vs the model");
    assert_eq!(p.edges, Some(t.tmr_edges), "edges: Prepared vs the model");
}

fn prepared() -> Prepared {
    let start = Instant::now();
    let p = scenes::find("dsv4_shaped")
        .expect("registered")
        .prepare("default")
        .expect("case");
    eprintln!("prepare (inputs and f64 golden): {:?}", start.elapsed());
    p
}

fn big_heap() -> DeviceConfig {
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.ring.heap_bytes = 256 << 20;
    config.gm_bytes = 512 << 20;
    config
}

#[test]
fn dsv4_shaped_on_hbg() {
    let t = totals();
    let p = prepared();
    let mut w = ChipWorker::init(big_heap()).expect("device");
    let h = register_prepared(&mut w, &p);
    for round in 0..3 {
        let start = Instant::now();
        let mut args = host_args(&p);
        let run = w
            .run(h, &mut args, &p.scalars, RunOptions::on(Runtime::Hbg))
            .expect("hbg run");
        let bind = run.bind.expect("an hbg run reports its bind");
        let tensors = host_tensors(args);
        let check = (p.check)(&tensors);
        eprintln!(
            "hbg round {round}: {:?}, graphs {:?}, {} tasks, max diff {:e}",
            start.elapsed(),
            bind.graphs,
            bind.tasks,
            check.max_diff
        );
        assert!(check.pass, "round {round}: max diff {}", check.max_diff);
        // Every Definition recorded once per bind, every other Graph submission replayed,
        // none inline.
        let replayed = t.graph_submissions - t.definitions;
        assert_eq!(bind.graphs, [t.definitions, replayed, 0], "round {round}");
        // Ring tasks: one outer task per Graph submission, the preludes of the wide
        // boundaries, the ordinary submits; so the host submissions are 129.
        assert_eq!(bind.tasks, t.graph_submissions + t.preludes + t.ordinary);
        let graphs: u64 = bind.graphs.iter().sum();
        let ordinary = bind.tasks - graphs - t.preludes;
        assert_eq!(ordinary, t.ordinary);
        assert_eq!(graphs + ordinary, 129, "host submissions");
        assert_eq!(run.outcome.tasks, bind.tasks);
    }
}

#[test]
fn dsv4_shaped_on_tmr() {
    let t = totals();
    let p = prepared();
    // The default device: the whole inline graph fits one ring's window and heap.
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    let h = register_prepared(&mut w, &p);
    let start = Instant::now();
    let mut tensors = p.tensors.clone();
    let report = w
        .run(h, &mut tensors, &p.scalars, RunOptions::default())
        .expect("tmr run");
    let check = (p.check)(&tensors);
    eprintln!(
        "tmr: {:?}, {} tasks, {} edges, max diff {:e}",
        start.elapsed(),
        report.outcome.tasks,
        report.outcome.edges,
        check.max_diff
    );
    assert!(check.pass, "max diff {}", check.max_diff);
    assert_eq!(report.outcome.tasks, t.tmr_tasks);
    assert_eq!(report.outcome.edges, t.tmr_edges);
    assert_eq!(Some(report.outcome.tasks), p.tasks);
    assert_eq!(Some(report.outcome.edges), p.edges);
}

/// Ten binds, each with entry data of its own (another seed, its own f64 golden): every bind
/// gives its golden, and the eight Definitions are recorded once in all, at the first bind;
/// every later bind replays the retained ones (nothing recorded, built, uploaded or woken).
/// (The scene forwards no entry scalar; `retain.rs` varies forwarded scalars per bind.)
#[test]
fn ten_dsv4_binds_with_new_entries_record_each_definition_once_in_all() {
    use simpler_host::hbg::GraphRetention;
    use simpler_host::scenes::dsv4::{Dsv4Shaped, DEFAULT_SEED};
    let t = totals();
    let first = Dsv4Shaped::prepare_seeded(DEFAULT_SEED);
    let mut w = ChipWorker::init(big_heap()).expect("device");
    w.set_graph_retention(GraphRetention {
        verify: false,
        ..GraphRetention::default()
    })
    .unwrap();
    let h = register_prepared(&mut w, &first);
    let (mut built, mut nodes) = (0, 0);
    for round in 0..10u64 {
        let fresh =
            (round > 0).then(|| Dsv4Shaped::prepare_seeded(DEFAULT_SEED ^ (round * 0x9E37_79B9)));
        let p = fresh.as_ref().unwrap_or(&first);
        let mut args = host_args(p);
        let run = w
            .run(h, &mut args, &p.scalars, RunOptions::on(Runtime::Hbg))
            .expect("hbg run");
        let bind = run.bind.expect("an hbg run reports its bind");
        let check = (p.check)(&host_tensors(args));
        assert!(check.pass, "round {round}: max diff {}", check.max_diff);
        let g = bind.graph_phases;
        built += g.definitions_built;
        nodes += g.recorded_nodes;
        if round > 0 {
            assert_eq!(bind.graphs, [0, t.graph_submissions, 0], "round {round}");
            assert_eq!(
                [
                    g.recorded_nodes,
                    g.definitions_built,
                    g.definition_bytes_uploaded,
                    g.recorder_wakes
                ],
                [0; 4],
                "round {round}: nodes recorded, Definitions built, bytes uploaded, recorder wakes"
            );
        }
    }
    assert_eq!(
        built, t.definitions,
        "one recording per Definition in ten binds"
    );
    assert_eq!(nodes, t.nodes);
    assert_eq!(w.retained_graphs().0, t.definitions as usize);
}
