//! Building: the diamond read back field for field, images independent of stale input and of
//! the output's alignment, and every refusal of the builder, typed.

use super::*;

#[test]
fn diamond_round_trips_field_for_field() {
    let body = diamond();
    let img = body.build().unwrap();
    let view = DefinitionView::parse(&img).unwrap();
    view.verify_content_hash().unwrap();
    let h = *view.header();
    assert_eq!(h.full_key, body.full_key);
    assert_eq!(h.content_hash, definition_content_hash(&img));
    assert_eq!(h.required_heap, 4096 + 128 + 64);
    assert_eq!(h.total_bytes as usize, img.len());
    assert_eq!(img.len() % 8, 0);
    assert_eq!(
        (h.task_count, h.edge_count, h.root_count),
        (4, 4, 1),
        "counts"
    );
    assert_eq!((h.boundary_count, h.boundary_scalar_count), (3, 2));
    assert_eq!(
        (h.tensor_arg_count, h.scalar_arg_count, h.predicate_count),
        (10, 3, 1)
    );
    assert_eq!(
        h.execution_storage_bytes,
        64 + 4 * 320 + 10 * 128 + 3 * 8 + 40,
        "header line, four 320-byte nodes, tensors, scalars, rounded to 64"
    );
    assert_eq!(h.reserved, 0);
    // Sections in order, aligned, non-overlapping, inside the image.
    let mut end = GRAPH_HEADER_BYTES as u32;
    for s in Section::ALL {
        let off = h.section_offset(s);
        assert!(off >= end, "{s} overlaps");
        assert_eq!(off as usize % s.elem_align(), 0, "{s} misaligned");
        end = off + h.section_len(s) as u32 * s.elem_size() as u32;
    }
    assert!(end <= h.total_bytes);

    // Topology.
    assert_eq!(collect(view.fanin(0)), Vec::<u16>::new());
    assert_eq!(collect(view.fanin(1)), vec![0]);
    assert_eq!(collect(view.fanin(2)), vec![0]);
    assert_eq!(collect(view.fanin(3)), vec![2, 1], "record order kept");
    assert_eq!(collect(view.fanout(0)), vec![1, 2]);
    assert_eq!(collect(view.fanout(1)), vec![3]);
    assert_eq!(collect(view.fanout(2)), vec![3]);
    assert_eq!(collect(view.fanout(3)), Vec::<u16>::new());
    assert!(view.fanin(4).is_none() && view.fanout(4).is_none());
    assert_eq!(view.roots().collect::<Vec<_>>(), vec![0]);
    let offsets: Vec<u64> = (0..4).map(|i| view.node_offset(i).unwrap()).collect();
    assert_eq!(offsets, vec![0, 4096, 4224, 4288]);
    assert_eq!(view.node_offset(4), None);

    // Nodes, field for field, and their arguments against the input.
    let mut t_next = 0u32;
    let mut s_next = 0u32;
    for (i, rec) in body.nodes.iter().enumerate() {
        let def = view.node(i).unwrap();
        assert_eq!(def.kernel_id, rec.kernel_ids);
        assert_eq!(def.active_mask, rec.active_mask);
        assert_eq!(def.task_attrs, rec.task_attrs);
        assert_eq!(def.logical_block_num, rec.logical_block_num);
        assert_eq!(def.total_required_subtasks, rec.total_required_subtasks);
        assert_eq!(def.total_output_size as u64, rec.total_output_size);
        assert_eq!(def.tensor_count as u32, rec.tensor_count);
        assert_eq!(def.scalar_count as u32, rec.scalar_count);
        assert_eq!((def.tensor_offset, def.scalar_offset), (t_next, s_next));
        t_next += rec.tensor_count;
        s_next += rec.scalar_count;
        assert_eq!(def.predicate_slot, if i == 3 { 1 } else { 0 });

        // Field for field, but a boundary tensor's address, which is rebound per
        // invocation and kept as 0.
        let first = rec.tensor_offset as usize;
        let n = rec.tensor_count as usize;
        let sources = &body.tensor_sources[rec.tensor_source_offset as usize..][..n];
        let expected: Vec<GraphTensor> = body.tensors[first..first + n]
            .iter()
            .zip(sources)
            .map(|(t, s)| {
                let mut g = GraphTensor::from_task_tensor(t).unwrap();
                if matches!(
                    s.kind,
                    TensorSourceKind::BoundaryExact | TensorSourceKind::BoundaryView
                ) {
                    g.buffer_addr = 0;
                }
                g
            })
            .collect();
        assert_eq!(collect(view.node_tensors(i)), expected, "node {i} tensors");
        let first = rec.tensor_source_offset as usize;
        let expected: Vec<GraphTensorSourceRef> = body.tensor_sources
            [first..first + rec.tensor_count as usize]
            .iter()
            .map(|s| GraphTensorSourceRef {
                source: s.kind as u8,
                reserved: 0,
                source_index: s.index as u16,
                reserved2: 0,
                packed_offset: s.packed_offset,
            })
            .collect();
        assert_eq!(
            collect(view.node_tensor_sources(i)),
            expected,
            "node {i} sources"
        );
    }
    assert_eq!(view.nodes().len(), 4);
    assert!(view.node(4).is_none());
    assert_eq!(
        collect(view.node_scalars(0)),
        vec![7, 0],
        "boundary scalar stored as 0"
    );
    assert_eq!(collect(view.node_scalars(1)), vec![0]);
    assert_eq!(collect(view.node_scalars(2)), Vec::<u64>::new());
    let ss = |index: u16, source: u8| GraphScalarSourceRef {
        source_index: index,
        source,
        reserved: 0,
    };
    assert_eq!(
        collect(view.node_scalar_sources(0)),
        vec![ss(0, 0), ss(0, 1)]
    );
    assert_eq!(collect(view.node_scalar_sources(1)), vec![ss(1, 1)]);
    assert_eq!(view.scalars().collect::<Vec<_>>(), vec![7, 0, 0]);
    assert_eq!(view.tensors().len(), 10);
    assert_eq!(view.tensor_sources().len(), 10);
    assert_eq!(view.scalar_sources().len(), 3);

    // One packed tensor spelled out, so `from_task_tensor` itself is checked; the
    // Definition keeps it but for its address (a boundary view, rebound per invocation).
    let xv = view.node_tensors(2).unwrap().next().unwrap();
    let want = GraphTensor {
        buffer_addr: 0x1000,
        buffer_size: 4096,
        owner_task_id: u64::MAX,
        start_offset: 512,
        extent_elem: 15 * 32 + 32,
        version: 0,
        shapes: [16, 32, 0, 0, 0],
        strides: [32, 1, 0, 0, 0],
        ndims: 2,
        dtype: DataType::Float32.raw(),
        manual_dep: 0,
        is_contiguous: 1,
        address_space: AddressSpace::Device as u8,
        reserved: [0; 7],
    };
    assert_eq!(
        GraphTensor::from_task_tensor(&body.tensors[7]).unwrap(),
        want
    );
    assert_eq!(
        xv,
        GraphTensor {
            buffer_addr: 0,
            ..want
        }
    );
    assert_eq!(view.node_tensors(0).unwrap().nth(1).unwrap().version, 2);

    // Predicate.
    let pred = view.node_predicate(3).unwrap();
    assert_eq!(
        pred.operand,
        GraphTensor::from_task_tensor(&body.tensors[0]).unwrap()
    );
    assert_eq!(pred.operand_source.kind(), Some(TensorSourceKind::Internal));
    assert_eq!(pred.operand_source.source_index, 1);
    assert_eq!(
        (pred.elem_offset, pred.target, pred.elem_size, pred.op),
        (3, -5, 4, 2)
    );
    assert!(view.node_predicate(0).is_none());
    assert_eq!(view.predicates().len(), 1);

    // Boundary signatures.
    let sigs: Vec<GraphBoundarySignature> = view.boundary_signatures().collect();
    assert_eq!(sigs.len(), 3);
    for (k, sig) in sigs.iter().enumerate() {
        let t = &body.boundary[k];
        assert_eq!(sig.buffer_size, t.buffer().size);
        assert_eq!(&sig.shapes[..2], t.shapes());
        assert_eq!(&sig.strides[..2], t.strides());
        assert_eq!(&sig.shapes[2..], &[0, 0, 0]);
        assert_eq!(sig.ndims, 2);
        assert_eq!(sig.dtype, DataType::Float32.raw());
        assert_eq!(sig.arg_type(), Some(body.tags[k]));
        assert_eq!(sig.manual_dep, t.manual_dep() as u8);
        assert_eq!(sig.is_contiguous, t.is_contiguous() as u8);
    }
    assert_eq!(
        sigs.iter().map(|s| s.alias_rep).collect::<Vec<_>>(),
        vec![0, 1, 0],
        "the view of x aliases x"
    );
}

#[test]
fn leftovers_past_node_count_do_not_change_the_image() {
    let body = diamond();
    let clean = body.build().unwrap();
    let stale = with_leftovers(&body);
    assert_eq!(stale.build().unwrap(), clean);

    // A longer body recorded first, then the diamond over the same storage.
    let mut reused = with_leftovers(&body);
    reused.node_count = 9;
    assert!(
        reused.build().is_err(),
        "the long body's stale slots are invalid"
    );
    reused.node_count = 4;
    assert_eq!(reused.build().unwrap(), clean);
}

#[test]
fn trailing_strides_never_leak_into_the_image() {
    // A rank-2 tensor whose unused dimensions hold a wider tensor's strides.
    let mut body = diamond();
    let t = body.tensors[3];
    let mut bytes = bytemuck::bytes_of(&t).to_vec();
    bytes[72 + 8..72 + 20].copy_from_slice(&[7u8; 12]);
    bytes[44 + 8..44 + 20].copy_from_slice(&[7u8; 12]);
    body.tensors[3] = bytemuck::pod_read_unaligned(&bytes);
    assert_eq!(body.build().unwrap(), diamond().build().unwrap());
}

#[test]
fn the_image_does_not_depend_on_the_output_alignment() {
    let body = diamond();
    let clean = body.build().unwrap();
    let mut out = vec![0u8; clean.len() + 3];
    let len = build_definition(&body.input(), &mut out[3..]).unwrap();
    assert_eq!(&out[3..3 + len], &clean[..]);
    let view = DefinitionView::parse(&out[3..]).unwrap();
    assert_eq!(view.bytes(), &clean[..]);
    // A longer buffer (a retained staging block) is read up to total_bytes.
    let mut longer = clean.clone();
    longer.extend([0xEE; 40]);
    assert_eq!(DefinitionView::parse(&longer).unwrap().bytes(), &clean[..]);
}

#[test]
fn every_build_refusal_is_typed() {
    use DefinitionError as E;
    let base = diamond();
    let input = base.input();

    let mut i = input;
    i.unsupported = true;
    assert_eq!(build(&i), Err(E::Unsupported));
    let mut i = input;
    i.boundary = None;
    assert_eq!(build(&i), Err(E::NoBoundary));
    for count in [0, GRAPH_MAX_NODES + 1] {
        let mut i = input;
        i.node_count = count;
        assert_eq!(build(&i), Err(E::NodeCount { count }));
    }
    let mut i = input;
    i.node_count = 5;
    assert_eq!(
        build(&i),
        Err(E::MissingNodes {
            node_count: 5,
            provided: 4
        })
    );

    let mut b = base.clone();
    b.boundary_scalars = GRAPH_IMAGE_MAX_BOUNDARY + 1;
    assert_eq!(
        err(&b),
        E::TooManyBoundary {
            tensors: 3,
            scalars: 65536
        }
    );
    #[cfg(not(miri))]
    {
        let mut b = base.clone();
        b.boundary = vec![b.boundary[0]; GRAPH_IMAGE_MAX_BOUNDARY + 1];
        b.tags = vec![TensorArgType::Input; GRAPH_IMAGE_MAX_BOUNDARY + 1];
        assert_eq!(
            err(&b),
            E::TooManyBoundary {
                tensors: 65536,
                scalars: 2
            }
        );
    }
    let mut b = base.clone();
    b.tags.pop();
    assert_eq!(
        err(&b),
        E::BoundaryMismatch {
            tensors: 3,
            tags: 2
        }
    );

    // Ranks outside 1..=5, in each role.
    for ndims in [0, 6, 0x100] {
        let mut b = base.clone();
        b.boundary[1] = forged_rank(b.boundary[1], ndims);
        assert_eq!(
            err(&b),
            E::Rank {
                tensor: TensorRole::Boundary { index: 1 },
                ndims
            }
        );
        let mut b = base.clone();
        b.tensors[8] = forged_rank(b.tensors[8], ndims); // C's second tensor
        assert_eq!(
            err(&b),
            E::Rank {
                tensor: TensorRole::Node { node: 2, arg: 1 },
                ndims
            }
        );
        let mut b = base.clone();
        b.predicates[0].operand = forged_rank(b.predicates[0].operand, ndims);
        assert_eq!(
            err(&b),
            E::Rank {
                tensor: TensorRole::Predicate { node: 3 },
                ndims
            }
        );
    }

    let mut b = base.clone();
    b.tensors = vec![b.tensors[0]; 40];
    b.tensor_sources = vec![src(TensorSourceKind::BoundaryExact, 0, 0); 40];
    b.nodes[0].tensor_offset = 0;
    b.nodes[0].tensor_source_offset = 0;
    b.nodes[0].tensor_count = 33;
    assert_eq!(
        err(&b),
        E::NodeArgs {
            node: 0,
            tensors: 33,
            scalars: 2
        }
    );
    let mut b = base.clone();
    b.nodes[1].scalar_count = 17;
    assert_eq!(
        err(&b),
        E::NodeArgs {
            node: 1,
            tensors: 2,
            scalars: 17
        }
    );

    // Ranges past each flat array.
    let range_err = |b: &Body, array, offset, count, len| {
        assert_eq!(
            err(b),
            E::Range {
                node: 2,
                array,
                offset,
                count,
                len
            }
        );
    };
    let mut b = base.clone();
    b.nodes[2].tensor_offset = 8;
    range_err(&b, FlatArray::Tensors, 8, 3, 10);
    let mut b = base.clone();
    b.nodes[2].tensor_source_offset = u32::MAX;
    range_err(&b, FlatArray::TensorSources, u32::MAX, 3, 10);
    let mut b = base.clone();
    b.nodes[2].scalar_count = 1;
    b.nodes[2].scalar_offset = 4;
    range_err(&b, FlatArray::Scalars, 4, 1, 4);
    let mut b = base.clone();
    b.scalars.push(0);
    b.nodes[2].scalar_count = 1;
    b.nodes[2].scalar_offset = 4;
    range_err(&b, FlatArray::ScalarSources, 4, 1, 4);
    let mut b = base.clone();
    b.nodes[2].fanin_count = 4;
    range_err(&b, FlatArray::Fanins, 1, 4, 4);

    // Producers that do not precede their consumer, and repeats.
    for producer in [1, 2, 3, usize::MAX] {
        let mut b = base.clone();
        b.fanins[0] = producer; // B's only producer
        assert_eq!(err(&b), E::ForwardFanin { node: 1, producer });
    }
    let mut b = base.clone();
    b.fanins[3] = 2; // D: [2, 2]
    assert_eq!(
        err(&b),
        E::DuplicateFanin {
            node: 3,
            producer: 2
        }
    );

    for size in [i32::MAX as u64, 1 << 31, u64::MAX] {
        let mut b = base.clone();
        b.nodes[1].total_output_size = size;
        assert_eq!(err(&b), E::OutputSize { node: 1, size });
    }
    // The largest window that fits.
    let mut b = base.clone();
    b.nodes[3].total_output_size = i32::MAX as u64 - 63;
    assert!(b.build().is_ok());

    // Tensor sources that name nothing valid.
    use TensorSourceKind::*;
    let bad_sources = [
        (4, src(BoundaryExact, 3, 0)), // no boundary tensor 3
        (4, src(BoundaryExact, 2, 1)), // an exact match has no delta
        (4, src(BoundaryView, 3, 0)),  // no boundary tensor 3
        (5, src(Internal, 2, 0)),      // C itself is not earlier
        (5, src(Internal, 3, 0)),      // a later node
        (5, src(Internal, 0, 4096)),   // past A's 4096-byte window
        (6, src(OwnOutput, 1, 0)),     // not C
        (6, src(OwnOutput, 2, 64)),    // past C's 64-byte window
    ];
    for (slot, bad) in bad_sources {
        let mut b = base.clone();
        b.tensor_sources[slot] = bad;
        assert_eq!(
            err(&b),
            E::TensorSource {
                node: 2,
                arg: Some(slot - 4)
            },
            "{bad:?}"
        );
    }
    let mut b = base.clone();
    b.predicates[0].source = src(Internal, 3, 0);
    assert_eq!(err(&b), E::TensorSource { node: 3, arg: None });
    let mut b = base.clone();
    b.predicates[0].source = src(OwnOutput, 3, 0);
    assert_eq!(err(&b), E::PredicateOwnOutput { node: 3 });

    let mut b = base.clone();
    b.scalar_sources[3] = RecordedScalarSource::Boundary(2);
    assert_eq!(
        err(&b),
        E::ScalarSource {
            node: 1,
            arg: 0,
            index: 2
        }
    );
    let mut b = base.clone();
    b.scalar_sources[2] = RecordedScalarSource::InvalidatedBoundary(0);
    assert_eq!(err(&b), E::InvalidatedScalar { node: 0, arg: 1 });

    let mut b = base.clone();
    b.nodes[3].predicate_index = Some(1);
    assert_eq!(
        err(&b),
        E::PredicateIndex {
            node: 3,
            index: 1,
            len: 1
        }
    );

    let mut b = base.clone();
    b.storage.node_bytes = u32::MAX;
    assert_eq!(err(&b), E::StorageTooLarge);

    let size = definition_size(&input).unwrap();
    let mut out = vec![0u8; size - 1];
    assert_eq!(
        build_definition(&input, &mut out),
        Err(E::OutputTooSmall {
            needed: size,
            provided: size - 1
        })
    );
    assert!(out.iter().all(|&b| b == 0), "nothing written on a refusal");
}

/// A Definition does not depend on where its recorded invocation's boundary lived: the same
/// body recorded against boundary buffers at other addresses (every boundary-sourced tensor
/// and predicate operand moved with them) builds the same image, byte for byte.
#[test]
fn a_definition_is_the_same_wherever_its_boundary_lived() {
    let body = diamond();
    let mut moved = diamond();
    // The boundary's buffers are x's and y's (0x1000 and 0x2000); every tensor over them
    // moves with them.
    let shift = |t: &TaskTensor| {
        let mut w = t.packed();
        if matches!(w[0], 0x1000 | 0x2000) {
            w[0] += 0x7_0000;
        }
        TaskTensor::from_packed(w)
    };
    moved.tensors = moved.tensors.iter().map(shift).collect();
    moved.boundary = moved.boundary.iter().map(shift).collect();
    assert_ne!(moved.tensors, body.tensors, "the recording moved");
    assert_eq!(moved.build().unwrap(), body.build().unwrap());
}
