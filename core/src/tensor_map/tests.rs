//! TensorMap tests: a reset map answers like a fresh one, retired and reused-slot entries are
//! freed by exact id, and lookups (fine chains or the bucket walk) report exactly what a full
//! scan with the same overlap test, and what the elements themselves, say. A file of its own
//! so `tensor_map.rs` holds only the map.

use super::*;
use crate::buffer::AddressSpace;
use crate::chip::BufferHandle;
use crate::dtype::DataType;
use crate::layout::Line;
use std::vec;
use std::vec::Vec;

const CONFIG: TensorMapConfig = TensorMapConfig {
    buckets: 16,
    entries: 48,
    windows: [16, 16, 0, 0],
};

fn memory() -> (TensorMapLayout, Vec<Line>) {
    let layout = TensorMapLayout::new(CONFIG).unwrap();
    let mem = vec![Line([0; 64]); layout.size() / 64];
    (layout, mem)
}

/// A 1-D FLOAT32 view of `len` elements at `start` of buffer `b` (of 256 elements).
fn view(b: u64, start: u32, len: u32) -> TaskTensor {
    let base = TaskTensor::new(
        BufferHandle {
            addr: 0x1000 * (b + 1),
            size: 1024,
        },
        0,
        &[256],
        &[1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap();
    base.view(&[len], &[start]).unwrap()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn view(&mut self) -> TaskTensor {
        let start = self.next(200) as u32;
        view(self.next(3), start, 1 + self.next(56) as u32)
    }
}

/// Every answer a map gives to a fixed set of probes.
fn answers(map: &mut TensorMap<'_>) -> Vec<Vec<(TaskId, Overlap)>> {
    let mut out = Vec::new();
    for b in 0..3 {
        for start in (0..256).step_by(16) {
            let mut seen = Vec::new();
            map.lookup(&view(b, start, 16), EntryKind::Writer, |t, o| {
                seen.push((t, o));
                Visit::Keep
            });
            out.push(seen);
        }
    }
    out
}

/// Random inserts, evicting lookups and watermark moves.
fn churn(map: &mut TensorMap<'_>, rng: &mut Rng, ops: usize) {
    let mut next = [0u32; 2];
    for _ in 0..ops {
        let ring = rng.next(2) as usize;
        match rng.next(4) {
            0 | 1 => {
                if map.ensure_capacity(1).is_ok() && next[ring] < map.header.last_alive[ring] + 15 {
                    let id = TaskId::new(ring as u32, next[ring]);
                    next[ring] += 1;
                    map.insert(&rng.view(), id, EntryKind::Writer).unwrap();
                }
            }
            2 => {
                map.lookup(&rng.view(), EntryKind::Writer, |_, o| {
                    if o == Overlap::Covered {
                        Visit::Remove
                    } else {
                        Visit::Keep
                    }
                });
            }
            _ => {
                let alive = map.header.last_alive[ring];
                let to = alive + rng.next((next[ring] - alive + 1) as u64) as u32;
                map.sync_watermark(ring, to);
            }
        }
    }
}

#[test]
fn a_reset_map_answers_like_a_fresh_one() {
    // Under Miri (every access checked, orders of magnitude slower) a few seeds suffice.
    let seeds = if cfg!(miri) { 6 } else { 40u64 };
    for seed in 1..seeds {
        let (layout, mut fresh_mem) = memory();
        let (_, mut used_mem) = memory();
        let mut fresh = TensorMap::init(bytemuck::cast_slice_mut(&mut fresh_mem), &layout).unwrap();
        let mut used = TensorMap::init(bytemuck::cast_slice_mut(&mut used_mem), &layout).unwrap();
        let mut rng = Rng(seed * 0x9E37_79B9);
        churn(&mut used, &mut rng, 300);
        used.reset();
        if seed % 2 == 0 {
            used.reset(); // twice is the same as once
        }
        assert_eq!(used.live_entries(), 0);
        assert_eq!(used.free_entries(), used.capacity());
        assert_eq!(used.capacity(), fresh.capacity());
        assert_eq!(answers(&mut used), answers(&mut fresh));
        // The same operations from here give the same answers.
        let mut a = Rng(seed);
        let mut b = Rng(seed);
        churn(&mut fresh, &mut a, 200);
        churn(&mut used, &mut b, 200);
        assert_eq!(answers(&mut used), answers(&mut fresh), "seed {seed}");
        assert_eq!(used.live_entries(), fresh.live_entries());
    }
}

#[test]
fn the_whole_pool_is_usable_after_reset() {
    let (layout, mut mem) = memory();
    let mut map = TensorMap::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    for round in 0..3 {
        for i in 0..CONFIG.entries {
            map.insert(
                &view(0, i % 200, 4),
                TaskId::new(0, i % 16),
                EntryKind::Writer,
            )
            .unwrap();
        }
        assert_eq!(
            map.insert(&view(0, 0, 4), TaskId::new(0, 0), EntryKind::Writer),
            Err(MapFull { needed: 1, free: 0 }),
            "round {round}"
        );
        map.reset();
    }
}

#[test]
fn retired_writers_are_skipped_then_freed() {
    let (layout, mut mem) = memory();
    let mut map = TensorMap::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    for i in 0..10 {
        map.insert(&view(0, i * 10, 10), TaskId::new(0, i), EntryKind::Writer)
            .unwrap();
    }
    map.sync_watermark(0, 4);
    let mut seen = Vec::new();
    map.lookup(&view(0, 0, 100), EntryKind::Writer, |t, _| {
        seen.push(t.local());
        Visit::Keep
    });
    seen.sort();
    assert_eq!(seen, vec![4, 5, 6, 7, 8, 9]);
    // Below the cleanup interval the entries are still held; pressure frees them.
    assert_eq!(map.live_entries(), 10);
    map.ensure_capacity(CONFIG.entries - 6).unwrap();
    assert_eq!(map.live_entries(), 6);
    assert_eq!(
        map.ensure_capacity(CONFIG.entries),
        Err(MapFull {
            needed: CONFIG.entries,
            free: CONFIG.entries - 6
        })
    );
}

#[test]
fn readers_and_writers_are_found_only_by_their_kind() {
    let (layout, mut mem) = memory();
    let mut map = TensorMap::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    map.insert(&view(0, 0, 8), TaskId::new(0, 1), EntryKind::Writer)
        .unwrap();
    map.insert(&view(0, 0, 8), TaskId::new(0, 2), EntryKind::Reader)
        .unwrap();
    for (kind, expected) in [(EntryKind::Writer, 1), (EntryKind::Reader, 2)] {
        let mut seen = Vec::new();
        map.lookup(&view(0, 4, 8), kind, |t, _| {
            seen.push(t.local());
            Visit::Keep
        });
        assert_eq!(seen, vec![expected], "{kind:?}");
    }
}

#[test]
fn entries_of_a_reused_slot_are_freed_by_exact_id() {
    let (layout, mut mem) = memory();
    let mut map = TensorMap::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    // Task 3 and task 19 share slot 3 of a 16-slot window.
    map.insert(&view(0, 0, 8), TaskId::new(0, 3), EntryKind::Writer)
        .unwrap();
    map.insert(&view(0, 8, 8), TaskId::new(0, 19), EntryKind::Writer)
        .unwrap();
    map.sync_watermark(0, 4);
    map.ensure_capacity(CONFIG.entries).ok();
    let mut seen = Vec::new();
    map.lookup(&view(0, 0, 16), EntryKind::Writer, |t, _| {
        seen.push(t.local());
        Visit::Keep
    });
    assert_eq!(seen, vec![19]);
    assert_eq!(map.live_entries(), 1);
}

/// The footprint `overlap::check` sees for a tensor: as a probe, or as a recorded entry
/// (whose contiguity the map does not keep).
fn fp(t: &TaskTensor, as_probe: bool) -> Footprint {
    Footprint {
        start: t.start_offset(),
        extent: t.extent_elems(),
        version: t.version(),
        ndims: t.ndims(),
        dtype: t.dtype().raw(),
        elem_size: t.dtype().elem_size(),
        contiguous: as_probe && t.is_contiguous(),
        shapes: *t.shapes_all(),
        strides: *t.strides_all(),
    }
}

/// A view of one of three 4 KiB buffers, of any size from one element to the whole buffer
/// (so of many size classes), dense or strided, sometimes of a newer version.
fn any_view(rng: &mut Rng) -> TaskTensor {
    let b = rng.next(3);
    let base = TaskTensor::new(
        BufferHandle {
            addr: 0x10_0000 * (b + 1),
            size: 4096,
        },
        0,
        &[32, 32],
        &[32, 1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap();
    let t = match rng.next(3) {
        // A run of rows (dense).
        0 => {
            let rows = 1 + rng.next(32) as u32;
            let row = rng.next((33 - rows) as u64) as u32;
            base.view(&[rows, 32], &[row, 0]).unwrap()
        }
        // A box (strided unless full width).
        1 => {
            let (rows, cols) = (1 + rng.next(8) as u32, 1 + rng.next(32) as u32);
            let row = rng.next((33 - rows) as u64) as u32;
            let col = rng.next((33 - cols) as u64) as u32;
            base.view(&[rows, cols], &[row, col]).unwrap()
        }
        // A few elements of one row.
        _ => {
            let n = 1 + rng.next(4) as u32;
            let row = rng.next(32) as u32;
            let col = rng.next((33 - n) as u64) as u32;
            base.view(&[1, n], &[row, col]).unwrap()
        }
    };
    if rng.next(16) == 0 {
        t.with_version(1)
    } else {
        t
    }
}

/// Whether a lookup of `probe` walks fine chains (else the bucket chain).
fn takes_fine_chains(map: &TensorMap<'_>, probe: &TaskTensor, kind: EntryKind) -> bool {
    let meta = map.buckets[map.bucket_of(probe.buffer().addr, kind)];
    let elem = probe.dtype().elem_size() as u64;
    let range = (
        probe.start_offset() * elem,
        (probe.start_offset() + probe.extent_elems()) * elem,
    );
    probe.version() <= meta.min_version && fine_blocks(meta.levels, meta.spills, range).is_some()
}

/// The index against a plain list of live entries tested one by one with the same
/// predicate, `overlap::check`: every lookup (fine chains or bucket walk, whichever it
/// takes) reports exactly the live entries the predicate does not rule out, with its
/// classes, once each, and supersedes exactly what it is told to; a superseding writer
/// takes over an entry exactly when one records its region, and later lookups see that
/// entry as the writer's. Whether the predicate is right is for the next test and
/// `overlap`'s own.
#[test]
fn lookups_report_exactly_what_a_full_scan_with_the_same_test_finds() {
    let config = TensorMapConfig {
        buckets: 16,
        entries: 512,
        windows: [1024, 0, 0, 0],
    };
    let layout = TensorMapLayout::new(config).unwrap();
    let mut mem = vec![Line([0; 64]); layout.size() / 64];
    // Under Miri (every access checked, orders of magnitude slower) a few seeds suffice.
    let (seeds, ops) = if cfg!(miri) { (3u64, 200) } else { (30, 600) };
    let (mut fine_lookups, mut bucket_lookups, mut handovers) = (0, 0, 0);
    for seed in 1..seeds {
        let mut map = TensorMap::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
        let mut rng = Rng(seed * 0x2545_F491);
        let mut live: Vec<(TaskId, TaskTensor, EntryKind)> = Vec::new();
        let (mut next, mut alive) = (0u32, 0u32);
        for _ in 0..ops {
            let kind = if rng.next(4) == 0 {
                EntryKind::Reader
            } else {
                EntryKind::Writer
            };
            match rng.next(8) {
                0..=3 if next < alive + 1000 && map.ensure_capacity(1).is_ok() => {
                    let t = any_view(&mut rng);
                    let id = TaskId::new(0, next);
                    next += 1;
                    map.insert(&t, id, kind).unwrap();
                    live.push((id, t, kind));
                }
                7 => {
                    alive += rng.next((next - alive) as u64 / 4 + 1) as u32;
                    map.sync_watermark(0, alive);
                    live.retain(|(id, _, _)| id.local() >= alive);
                }
                _ => {
                    let evict = rng.next(2) == 0;
                    // A superseding writer that may take an exact entry over, often of
                    // the region of a live entry.
                    let writer = (evict && rng.next(2) == 0).then(|| {
                        next += 1;
                        TaskId::new(0, next - 1)
                    });
                    let probe = match writer {
                        Some(_) if !live.is_empty() && rng.next(2) == 0 => {
                            let t = live[rng.next(live.len() as u64) as usize].1;
                            // Sometimes the same region at another version: not the same
                            // entry.
                            match rng.next(4) {
                                0 => t.with_version(1 - t.version()),
                                _ => t,
                            }
                        }
                        _ => any_view(&mut rng),
                    };
                    let elems = probe.buffer().size / 4;
                    let mut expected: Vec<(TaskId, Overlap)> = live
                        .iter()
                        .filter(|(_, t, k)| *k == kind && t.buffer().addr == probe.buffer().addr)
                        .map(|(id, t, _)| {
                            let o = overlap::check(&fp(&probe, true), &fp(t, false), elems);
                            (*id, o)
                        })
                        .filter(|(_, o)| *o != Overlap::None)
                        .collect();
                    let mut seen = Vec::new();
                    let handed_over = map.lookup(&probe, kind, |t, o| {
                        seen.push((t, o));
                        match (evict && o == Overlap::Covered, writer) {
                            (false, _) => Visit::Keep,
                            (true, None) => Visit::Remove,
                            (true, Some(w)) => Visit::Replace(w),
                        }
                    });
                    expected.sort_by_key(|(id, _)| id.local());
                    seen.sort_by_key(|(id, _)| id.local());
                    assert_eq!(seen, expected, "seed {seed}");
                    let exact = live.iter().any(|(id, t, k)| {
                        *k == kind
                            && seen.contains(&(*id, Overlap::Covered))
                            && same_region(t, &probe)
                    });
                    assert_eq!(handed_over, writer.is_some() && exact, "seed {seed}");
                    if evict {
                        live.retain(|(id, t, k)| {
                            *k != kind
                                || t.buffer().addr != probe.buffer().addr
                                || !seen.contains(&(*id, Overlap::Covered))
                        });
                    }
                    if handed_over {
                        live.push((writer.unwrap(), probe, kind));
                        handovers += 1;
                    }
                    if takes_fine_chains(&map, &probe, kind) {
                        fine_lookups += 1;
                    } else {
                        bucket_lookups += 1;
                    }
                }
            }
        }
    }
    // Both ways of answering were exercised, and entries were taken over.
    let lookups = fine_lookups + bucket_lookups;
    assert!(
        fine_lookups * 10 > lookups && bucket_lookups * 10 > lookups,
        "{fine_lookups} fine and {bucket_lookups} bucket lookups"
    );
    assert!(handovers > seeds, "{handovers} handovers");
}

/// Whether two views of one buffer address exactly the same elements the same way.
fn same_region(a: &TaskTensor, b: &TaskTensor) -> bool {
    a.same_layout(b)
        && a.start_offset() == b.start_offset()
        && a.extent_elems() == b.extent_elems()
        && a.version() == b.version()
}

/// The bytes of a 1 KiB buffer a FLOAT32 view addresses, enumerated element by element.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Bytes([u64; 16]);

impl Bytes {
    fn of(start: u64, shapes: &[u32], strides: &[u32]) -> Self {
        let mut words = [0u64; 16];
        let mut idx = [0u32; MAX_TENSOR_DIMS];
        let n = shapes.len();
        loop {
            let elem = start
                + (0..n)
                    .map(|d| idx[d] as u64 * strides[d] as u64)
                    .sum::<u64>();
            // A FLOAT32 element's 4 bytes never straddle a 64-bit word.
            words[(elem / 16) as usize] |= 0xF << (elem % 16 * 4);
            let mut d = n;
            loop {
                if d == 0 {
                    return Self(words);
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < shapes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    fn meets(&self, o: &Self) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }
    fn holds(&self, o: &Self) -> bool {
        self.0.iter().zip(&o.0).all(|(a, b)| b & !a == 0)
    }
    /// First and one past the last byte.
    fn range(&self) -> (u64, u64) {
        let first = self.0.iter().position(|&w| w != 0).unwrap();
        let last = self.0.iter().rposition(|&w| w != 0).unwrap();
        (
            first as u64 * 64 + self.0[first].trailing_zeros() as u64,
            last as u64 * 64 + 64 - self.0[last].leading_zeros() as u64,
        )
    }
}

/// A view for the element test, with the bytes it addresses and whether it is a box of
/// its buffer's own layout.
#[derive(Clone, Copy)]
struct Region {
    tensor: TaskTensor,
    bytes: Bytes,
    /// A box of the buffer's layout (`LAYOUTS`): the exact test applies to two of these.
    boxed: bool,
}

/// The layout each of three 1 KiB FLOAT32 buffers is viewed through: rows of 16, a 4x4
/// grid of rows of 16, and one row.
const LAYOUTS: [(&[u32], &[u32]); 3] = [
    (&[16, 16], &[16, 1]),
    (&[4, 4, 16], &[64, 16, 1]),
    (&[256], &[1]),
];

/// A box of one of the three buffers (often small, sometimes whole), sometimes of a
/// newer version; one in six instead reads buffer 0 through other strides (its columns as
/// rows, or every other row), which the exact test does not compare with the boxes.
fn any_region(rng: &mut Rng) -> Region {
    let b = rng.next(3) as usize;
    let handle = BufferHandle {
        addr: 0x20_0000 * (b as u64 + 1),
        size: 1024,
    };
    let (mut shapes, mut strides) = (LAYOUTS[b].0.to_vec(), LAYOUTS[b].1.to_vec());
    let boxed = b != 0 || rng.next(6) != 0;
    if !boxed {
        if rng.next(2) == 0 {
            strides = std::vec![1, 16];
        } else {
            shapes = std::vec![8, 16];
            strides = std::vec![32, 1];
        }
    }
    let base = TaskTensor::new(
        handle,
        0,
        &shapes,
        &strides,
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap();
    let mut offsets = std::vec![0u32; shapes.len()];
    if rng.next(8) != 0 {
        for d in 0..shapes.len() {
            let n = shapes[d];
            let size = if rng.next(2) == 0 {
                1 + rng.next(n.min(4) as u64) as u32
            } else {
                1 + rng.next(n as u64) as u32
            };
            offsets[d] = rng.next((n - size + 1) as u64) as u32;
            shapes[d] = size;
        }
    }
    let mut tensor = base.view(&shapes, &offsets).unwrap();
    if rng.next(16) == 0 {
        tensor = tensor.with_version(1);
    }
    let start = offsets
        .iter()
        .zip(&strides)
        .map(|(&o, &s)| o as u64 * s as u64)
        .sum();
    Region {
        tensor,
        bytes: Bytes::of(start, &shapes, &strides),
        boxed,
    }
}

/// Against the bytes each view addresses, enumerated: every lookup reports each live
/// entry of its buffer and kind at most once, and
/// - every entry sharing a byte with the probe, and every entry of an older version;
/// - `Covered` only for an entry whose bytes the probe holds;
/// - no entry whose byte range misses the probe's (of the probe's version or newer);
/// - and between two boxes of the buffer's layout, of the probe's version or newer,
///   exactly the entries sharing an element, `Covered` exactly for the ones it holds.
///
/// A lookup that evicts removes exactly the entries it was shown as covered.
#[test]
fn lookups_report_what_the_elements_say() {
    let config = TensorMapConfig {
        buckets: 16,
        entries: 256,
        windows: [1024, 0, 0, 0],
    };
    let layout = TensorMapLayout::new(config).unwrap();
    let mut mem = vec![Line([0; 64]); layout.size() / 64];
    let (seeds, ops) = if cfg!(miri) { (3u64, 120) } else { (24, 500) };
    let (mut fine_lookups, mut bucket_lookups) = (0, 0);
    let (mut exact_pairs, mut disjoint_boxes, mut covered_boxes) = (0, 0, 0);
    for seed in 1..seeds {
        let mut map = TensorMap::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
        let mut rng = Rng(seed * 0x9E37_79B9_7F4A);
        let mut live: Vec<(TaskId, Region, EntryKind)> = Vec::new();
        let (mut next, mut alive) = (0u32, 0u32);
        for _ in 0..ops {
            let kind = if rng.next(4) == 0 {
                EntryKind::Reader
            } else {
                EntryKind::Writer
            };
            match rng.next(8) {
                0..=3 if next < alive + 1000 && map.ensure_capacity(1).is_ok() => {
                    let r = any_region(&mut rng);
                    let id = TaskId::new(0, next);
                    next += 1;
                    map.insert(&r.tensor, id, kind).unwrap();
                    live.push((id, r, kind));
                }
                7 => {
                    alive += rng.next((next - alive) as u64 / 4 + 1) as u32;
                    map.sync_watermark(0, alive);
                    live.retain(|(id, _, _)| id.local() >= alive);
                }
                _ => {
                    let p = any_region(&mut rng);
                    let evict = rng.next(2) == 0;
                    let mut seen: Vec<(TaskId, Overlap)> = Vec::new();
                    map.lookup(&p.tensor, kind, |t, o| {
                        seen.push((t, o));
                        if evict && o == Overlap::Covered {
                            Visit::Remove
                        } else {
                            Visit::Keep
                        }
                    });
                    let (p_lo, p_hi) = p.bytes.range();
                    let pv = p.tensor.version();
                    for &(id, _) in &seen {
                        assert_eq!(
                            seen.iter().filter(|(t, _)| *t == id).count(),
                            1,
                            "seed {seed}: {id:?} reported twice"
                        );
                        assert!(
                            live.iter().any(|(t, e, k)| *t == id
                                && *k == kind
                                && e.tensor.buffer().addr == p.tensor.buffer().addr),
                            "seed {seed}: {id:?} is no live entry of the probe's buffer"
                        );
                    }
                    for (id, e, k) in &live {
                        if *k != kind || e.tensor.buffer().addr != p.tensor.buffer().addr {
                            continue;
                        }
                        let got = seen.iter().find(|(t, _)| t == id).map(|&(_, o)| o);
                        let ev = e.tensor.version();
                        let (e_lo, e_hi) = e.bytes.range();
                        let meets = p.bytes.meets(&e.bytes);
                        let what = |got| {
                            std::format!(
                                "seed {seed}: probe {:?} v{pv} against entry {id:?} {:?} \
                                 v{ev}: {got:?}",
                                p.tensor.shapes_all(),
                                e.tensor.shapes_all()
                            )
                        };
                        if meets || pv > ev {
                            assert!(got.is_some(), "{}", what(got));
                        }
                        if got == Some(Overlap::Covered) {
                            assert!(p.bytes.holds(&e.bytes), "{}", what(got));
                        }
                        if pv <= ev && (p_hi <= e_lo || e_hi <= p_lo) {
                            assert_eq!(got, None, "{}", what(got));
                        }
                        if p.boxed && e.boxed && pv <= ev {
                            exact_pairs += 1;
                            let expect = if !meets {
                                disjoint_boxes += (p_lo < e_hi && e_lo < p_hi) as u32;
                                None
                            } else if p.bytes.holds(&e.bytes) {
                                covered_boxes += 1;
                                Some(Overlap::Covered)
                            } else {
                                Some(Overlap::Partial)
                            };
                            assert_eq!(got, expect, "{}", what(got));
                        }
                    }
                    if evict {
                        live.retain(|(id, _, k)| {
                            *k != kind || !seen.contains(&(*id, Overlap::Covered))
                        });
                    }
                    if takes_fine_chains(&map, &p.tensor, kind) {
                        fine_lookups += 1;
                    } else {
                        bucket_lookups += 1;
                    }
                }
            }
        }
    }
    // Both ways of answering were exercised, and boxes whose byte ranges interleave were
    // told apart as well as found covered.
    let lookups = fine_lookups + bucket_lookups;
    assert!(
        fine_lookups * 10 > lookups && bucket_lookups * 10 > lookups,
        "{fine_lookups} fine and {bucket_lookups} bucket lookups"
    );
    assert!(
        disjoint_boxes * 20 > exact_pairs && covered_boxes * 20 > exact_pairs,
        "{exact_pairs} exact pairs: {disjoint_boxes} disjoint with meeting ranges, \
         {covered_boxes} covered"
    );
}
