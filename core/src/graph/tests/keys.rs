//! Key and image hashes, each checked against an independent loop with its own constants and
//! against literals computed outside Rust.

use super::*;

/// FNV-1a over concatenated parts, written as a plain loop with its own constants.
fn ref_fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 1469598103934665603;
    for part in parts {
        for &b in part.iter() {
            h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
        }
    }
    h
}

/// The word-wise variant, assembling each word by shifts rather than `from_le_bytes`.
fn ref_word_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 1469598103934665603;
    let words = bytes.len() / 8;
    for w in 0..words {
        let mut word = 0u64;
        for k in 0..8 {
            word |= u64::from(bytes[w * 8 + k]) << (8 * k);
        }
        h = (h ^ word).wrapping_mul(1099511628211);
    }
    for &b in &bytes[words * 8..] {
        h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
    }
    h
}

#[test]
fn graph_key_is_bytewise_fnv1a() {
    assert_eq!(graph_key(b""), 1469598103934665603);
    // Values computed outside Rust with the same basis and prime.
    assert_eq!(graph_key(b"a"), 0x44bd_8ad4_73cd_9906);
    assert_eq!(graph_key(b"attention"), 0x09ba_f4a4_e4d2_da87);
    for name in [&b"csa_moe_block"[..], b"x", b"\x00\xff"] {
        assert_eq!(graph_key(name), ref_fnv(&[name]));
    }
    const K: u64 = graph_key(b"const");
    assert_eq!(K, ref_fnv(&[b"const"]));
}

#[test]
fn full_key_hashes_callable_then_key() {
    assert_eq!(full_key(1, 2), 0x162a_8345_ecfd_7fc0);
    let (c, k) = (0xdead_beef_u64, graph_key(b"body"));
    assert_eq!(
        full_key(c, k),
        ref_fnv(&[&c.to_le_bytes(), &k.to_le_bytes()])
    );
    assert_ne!(full_key(c, k), full_key(k, c));
}

#[test]
fn make_key_hashes_count_category_width_and_value() {
    let cfg = [
        ConfigValue::I32(-1),
        ConfigValue::Bool(true),
        ConfigValue::F32(1.5),
    ];
    assert_eq!(make_key(7, &cfg), 0xa6e7_d161_c0f8_4743);
    let expected = ref_fnv(&[
        &7u64.to_le_bytes(),
        &3u32.to_le_bytes(),
        &[2, 4],
        &(-1i32).to_le_bytes(),
        &[1, 1, 1],
        &[4, 4],
        &1.5f32.to_bits().to_le_bytes(),
    ]);
    assert_eq!(make_key(7, &cfg), expected);
    assert_eq!(
        make_key(9, &[]),
        ref_fnv(&[&9u64.to_le_bytes(), &0u32.to_le_bytes()])
    );
    let wide = [ConfigValue::U64(u64::MAX - 1), ConfigValue::F64(-0.25)];
    assert_eq!(
        make_key(1, &wide),
        ref_fnv(&[
            &1u64.to_le_bytes(),
            &2u32.to_le_bytes(),
            &[3, 8],
            &(u64::MAX - 1).to_le_bytes(),
            &[4, 8],
            &(-0.25f64).to_bits().to_le_bytes(),
        ])
    );
    assert_eq!(ConfigValue::from(3u16), ConfigValue::U16(3));
}

#[test]
fn config_values_of_different_category_or_width_give_different_keys() {
    let ones = [
        ConfigValue::Bool(true),
        ConfigValue::I8(1),
        ConfigValue::I16(1),
        ConfigValue::I32(1),
        ConfigValue::I64(1),
        ConfigValue::U8(1),
        ConfigValue::U16(1),
        ConfigValue::U32(1),
        ConfigValue::U64(1),
        ConfigValue::F32(1.0),
        ConfigValue::F64(1.0),
    ];
    let zeros = [
        ConfigValue::Bool(false),
        ConfigValue::I8(0),
        ConfigValue::I16(0),
        ConfigValue::I32(0),
        ConfigValue::I64(0),
        ConfigValue::U8(0),
        ConfigValue::U16(0),
        ConfigValue::U32(0),
        ConfigValue::U64(0),
        ConfigValue::F32(0.0),
        ConfigValue::F64(0.0),
    ];
    let mut keys: Vec<u64> = ones
        .iter()
        .chain(zeros.iter())
        .map(|v| make_key(5, &[*v]))
        .collect();
    keys.push(make_key(5, &[]));
    keys.push(make_key(5, &[ConfigValue::U8(0), ConfigValue::U8(0)]));
    keys.push(make_key(5, &[ConfigValue::F32(-0.0)]));
    keys.push(make_key(6, &[ConfigValue::U8(0)]));
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), keys.len(), "every key is distinct");
    // Order matters.
    assert_ne!(
        make_key(5, &[ConfigValue::U8(1), ConfigValue::U8(2)]),
        make_key(5, &[ConfigValue::U8(2), ConfigValue::U8(1)])
    );
}

#[test]
fn word_hash_matches_the_reference_and_literal() {
    let data: Vec<u8> = (0u8..20).collect();
    assert_eq!(graph_hash_bytes(&data), 0xf155_1d4c_edf3_d087);
    let mut x = 0x1234_5678_9abc_def1u64;
    let data: Vec<u8> = (0..70)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for len in 0..=data.len() {
        assert_eq!(graph_hash_bytes(&data[..len]), ref_word_hash(&data[..len]));
    }
    assert_eq!(graph_hash_bytes(&[]), 1469598103934665603);
}

#[test]
fn chunked_updates_equal_one_update_at_multiples_of_eight() {
    let data: Vec<u8> = (0..61u32).map(|i| (i * 37 + 11) as u8).collect();
    let whole = graph_hash_bytes(&data);
    // Every split into pieces whose boundaries are multiples of 8.
    for a in (0..=data.len()).step_by(8) {
        for b in (a..=data.len()).step_by(8) {
            let mut h = GraphHasher::new();
            h.update(&data[..a]);
            h.update(&data[a..b]);
            h.update(&data[b..]);
            assert_eq!(h.finish(), whole, "split at {a} and {b}");
        }
    }
    // A split off an 8-byte boundary hashes a tail byte-wise mid-stream: not the same.
    let mut h = GraphHasher::new();
    h.update(&data[..3]);
    h.update(&data[3..]);
    assert_ne!(h.finish(), whole);
    // The content hash streams around the hash field without copying.
    let mut copy = data.clone();
    copy[8..16].fill(0);
    assert_eq!(definition_content_hash(&data), graph_hash_bytes(&copy));
    for len in 0..20 {
        let mut copy = data[..len].to_vec();
        let end = len.min(16);
        if len > 8 {
            copy[8..end].fill(0);
        }
        assert_eq!(
            definition_content_hash(&data[..len]),
            graph_hash_bytes(&copy)
        );
    }
}
