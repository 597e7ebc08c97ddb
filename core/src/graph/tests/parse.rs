//! Parsing: every truncation, corrupted offset and single-byte corruption refused, and every
//! refusal of the reader, typed.

use super::*;
use core::mem::offset_of;

#[test]
fn parse_refuses_every_truncation() {
    let img = diamond().build().unwrap();
    for len in 0..img.len() {
        let e = DefinitionView::parse(&img[..len]).unwrap_err();
        let needed = if len < GRAPH_HEADER_BYTES {
            GRAPH_HEADER_BYTES
        } else {
            img.len()
        };
        assert_eq!(
            e,
            DefinitionError::Truncated {
                needed: needed as u64,
                provided: len
            }
        );
    }
    assert!(DefinitionView::parse(&img).is_ok());
}

fn set_u32(img: &mut [u8], at: usize, v: u32) {
    img[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn header_field_offset(s: Section) -> usize {
    offset_of!(GraphDefinitionHeader, off_fanout_offsets) + 4 * s as usize
}

#[test]
fn parse_refuses_corrupted_offsets() {
    let img = diamond().build().unwrap();
    let h = *DefinitionView::parse(&img).unwrap().header();
    for s in Section::ALL {
        let at = header_field_offset(s);
        let good = h.section_offset(s);
        assert_ne!(good, 0, "the diamond has every section");
        for v in [
            0,
            1,
            good.wrapping_add(1),
            good.wrapping_sub(1),
            good.wrapping_add(2),
            good.wrapping_add(8),
            good.wrapping_sub(8),
            h.total_bytes,
            u32::MAX,
        ] {
            if v == good {
                continue;
            }
            let mut bad = img.clone();
            set_u32(&mut bad, at, v);
            assert_eq!(
                DefinitionView::parse(&bad).unwrap_err(),
                DefinitionError::Section {
                    section: s,
                    offset: v
                }
            );
        }
    }
    // Absent sections must say so: a one-node body without edges, arguments or predicates.
    let mut one = diamond();
    one.node_count = 1;
    one.nodes[0].tensor_count = 0;
    one.nodes[0].scalar_count = 0;
    one.boundary.clear();
    one.tags.clear();
    let img = one.build().unwrap();
    let view = DefinitionView::parse(&img).unwrap();
    view.verify_content_hash().unwrap();
    let h = *view.header();
    let absent = [
        Section::FanoutIndices,
        Section::FaninIndices,
        Section::Tensors,
        Section::TensorSources,
        Section::Scalars,
        Section::ScalarSources,
        Section::BoundarySignatures,
        Section::Predicates,
    ];
    for s in absent {
        assert_eq!(h.section_offset(s), 0, "{s} absent");
        let mut bad = img.clone();
        set_u32(&mut bad, header_field_offset(s), 128);
        assert_eq!(
            DefinitionView::parse(&bad).unwrap_err(),
            DefinitionError::Section {
                section: s,
                offset: 128
            }
        );
    }
}

/// Writes `v` at `section[index]` (an element of `size` bytes at `field` within it).
fn poke(img: &mut [u8], s: Section, index: usize, field: usize, v: &[u8]) {
    let h: GraphDefinitionHeader = bytemuck::pod_read_unaligned(&img[..GRAPH_HEADER_BYTES]);
    let at = h.section_offset(s) as usize + index * s.elem_size() + field;
    img[at..at + v.len()].copy_from_slice(v);
}

#[test]
fn every_parse_refusal_is_typed() {
    use DefinitionError as E;
    let img = diamond().build().unwrap();
    let parse = |bytes: &[u8]| DefinitionView::parse(bytes).map(|_| ()).unwrap_err();
    let header_err = |field: &'static str, value: u32| {
        let at = match field {
            "task_count" => 28,
            "edge_count" => 32,
            "root_count" => 36,
            "boundary_count" => 40,
            "boundary_scalar_count" => 44,
            "tensor_arg_count" => 48,
            "scalar_arg_count" => 52,
            "predicate_count" => 56,
            "total_bytes" => 24,
            _ => unreachable!(),
        };
        let mut bad = img.clone();
        set_u32(&mut bad, at, value);
        assert_eq!(
            parse(&bad),
            E::Header {
                field,
                value: value as u64
            },
            "{field}"
        );
    };
    header_err("task_count", 0);
    header_err("task_count", 1025);
    header_err("edge_count", 7);
    header_err("root_count", 0);
    header_err("root_count", 5);
    header_err("boundary_count", 65536);
    header_err("boundary_scalar_count", 65536);
    header_err("tensor_arg_count", 129);
    header_err("scalar_arg_count", 65);
    header_err("predicate_count", 5);
    header_err("total_bytes", img.len() as u32 - 8);

    // Fanin CSR: bounds, order, producers, repeats.
    let mut bad = img.clone();
    poke(&mut bad, Section::FaninOffsets, 2, 0, &3u32.to_le_bytes());
    poke(&mut bad, Section::FaninOffsets, 3, 0, &2u32.to_le_bytes());
    assert_eq!(
        parse(&bad),
        E::Csr {
            section: Section::FaninOffsets,
            node: 3
        }
    );
    let mut bad = img.clone();
    poke(&mut bad, Section::FaninIndices, 0, 0, &1u16.to_le_bytes());
    assert_eq!(
        parse(&bad),
        E::Csr {
            section: Section::FaninIndices,
            node: 1
        }
    );
    let mut bad = img.clone();
    poke(&mut bad, Section::FaninIndices, 3, 0, &2u16.to_le_bytes());
    assert_eq!(
        parse(&bad),
        E::Csr {
            section: Section::FaninIndices,
            node: 3
        }
    );
    // Fanout not the transpose: swap two consumers, or move a bound.
    let mut bad = img.clone();
    poke(&mut bad, Section::FanoutIndices, 0, 0, &2u16.to_le_bytes());
    poke(&mut bad, Section::FanoutIndices, 1, 0, &1u16.to_le_bytes());
    assert_eq!(
        parse(&bad),
        E::Csr {
            section: Section::FanoutIndices,
            node: 0
        }
    );
    let mut bad = img.clone();
    poke(&mut bad, Section::FanoutOffsets, 1, 0, &1u32.to_le_bytes());
    assert_eq!(
        parse(&bad),
        E::Csr {
            section: Section::FanoutIndices,
            node: 0
        }
    );
    let mut bad = img.clone();
    poke(&mut bad, Section::FanoutOffsets, 4, 0, &3u32.to_le_bytes());
    assert_eq!(
        parse(&bad),
        E::Csr {
            section: Section::FanoutOffsets,
            node: 4
        }
    );
    // Roots.
    let mut bad = img.clone();
    poke(&mut bad, Section::RootIndices, 0, 0, &1u16.to_le_bytes());
    assert_eq!(parse(&bad), E::Roots { index: 0 });
    // Heap offsets.
    let mut bad = img.clone();
    poke(&mut bad, Section::NodeOffsets, 1, 0, &4160u64.to_le_bytes());
    assert_eq!(parse(&bad), E::NodeOffset { node: 1 });
    let mut bad = img.clone();
    bad[16..24].copy_from_slice(&4289u64.to_le_bytes());
    assert_eq!(parse(&bad), E::NodeOffset { node: 4 });
    // Records.
    let record = |s: Section, index: usize, field: usize, v: &[u8], name: &'static str| {
        let mut bad = img.clone();
        poke(&mut bad, s, index, field, v);
        let expected_section = if s == Section::Scalars {
            Section::Scalars
        } else {
            s
        };
        assert_eq!(
            parse(&bad),
            E::Record {
                section: expected_section,
                index,
                field: name
            },
            "{s}[{index}].{name}"
        );
    };
    record(
        Section::Nodes,
        1,
        28,
        &(-1i32).to_le_bytes(),
        "total_output_size",
    );
    record(Section::Nodes, 2, 20, &33i32.to_le_bytes(), "tensor_count");
    record(Section::Nodes, 2, 32, &5u32.to_le_bytes(), "tensor_offset");
    record(Section::Nodes, 2, 36, &1u32.to_le_bytes(), "scalar_offset");
    record(Section::Nodes, 0, 18, &2u16.to_le_bytes(), "predicate_slot");
    record(Section::Tensors, 4, 84, &[6], "ndims");
    record(Section::Tensors, 4, 85, &[200], "dtype");
    record(Section::Tensors, 4, 88, &[9], "address_space");
    record(Section::TensorSources, 4, 0, &[4], "source");
    record(
        Section::TensorSources,
        4,
        2,
        &9u16.to_le_bytes(),
        "source_index",
    );
    record(Section::ScalarSources, 1, 2, &[2], "source");
    record(
        Section::ScalarSources,
        1,
        0,
        &2u16.to_le_bytes(),
        "source_index",
    );
    record(Section::Scalars, 1, 0, &5u64.to_le_bytes(), "value");
    record(
        Section::BoundarySignatures,
        2,
        48,
        &3u16.to_le_bytes(),
        "alias_rep",
    );
    // The view of x aliases x: a different buffer size cannot.
    record(
        Section::BoundarySignatures,
        2,
        0,
        &8192u64.to_le_bytes(),
        "alias_rep",
    );
    record(Section::BoundarySignatures, 1, 50, &[0], "ndims");
    record(Section::BoundarySignatures, 1, 51, &[99], "dtype");
    record(Section::BoundarySignatures, 1, 52, &[5], "tag");
    record(Section::Predicates, 0, 84, &[7], "ndims");
    record(Section::Predicates, 0, 96, &[3], "operand_source");
    record(
        Section::Predicates,
        0,
        98,
        &3u16.to_le_bytes(),
        "source_index",
    );
    // A valid structure with changed content: only the hash notices.
    let mut bad = img.clone();
    poke(&mut bad, Section::Scalars, 0, 0, &8u64.to_le_bytes());
    let view = DefinitionView::parse(&bad).unwrap();
    assert!(matches!(
        view.verify_content_hash(),
        Err(E::ContentHash { stored, .. }) if stored == view.header().content_hash
    ));
}

#[test]
fn every_single_byte_corruption_is_refused() {
    let img = diamond().build().unwrap();
    let step = if cfg!(miri) { 211 } else { 1 };
    for at in (0..img.len()).step_by(step) {
        for flip in [0x01u8, 0x80] {
            let mut bad = img.clone();
            bad[at] ^= flip;
            let refused = match DefinitionView::parse(&bad) {
                Err(_) => true,
                Ok(v) => v.verify_content_hash().is_err(),
            };
            assert!(refused, "flip {flip:#x} at byte {at} went unnoticed");
        }
    }
}
