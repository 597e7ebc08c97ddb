//! The TensorMap: which earlier tasks wrote a region a new task touches.
//!
//! Writers are recorded (INOUT and OUTPUT_EXISTING arguments; see [`crate::deps`] for the
//! rules), and readers too when write-after-read tracking is on. A lookup walks the bucket of
//! the probe's buffer address and reports every live entry whose region may overlap the probe
//! ([`crate::overlap`]).
//!
//! Structure, all in caller-provided memory ([`TensorMapLayout`]):
//!
//! - `buckets`: heads of doubly linked entry chains, hashed by buffer address (Fibonacci
//!   hashing of the address, top bits), so every view of one allocation shares a bucket.
//! - `fine`: heads of a second chain every entry is also on, hashed by buffer address, size
//!   class and position: an entry of `n` bytes has level `L = ceil(log2 n)` and sits in the
//!   chain of block `start_byte >> L` at that level, so it lies within two blocks of its level.
//!   Each bucket's head also holds the levels present, the levels with an entry that reaches
//!   into its next block, and the lowest version recorded. A lookup
//!   probes, at each present level, only the blocks its range can share with an entry there;
//!   when that is more than [`FINE_PROBES`] chains (a wide probe over narrow entries), or the
//!   probe's version is newer than a recorded one (which depends whatever the range), it walks
//!   the bucket chain instead. Many disjoint views of one buffer, which no retirement thins out
//!   while a host builds a whole graph, then cost a lookup O(its neighbours), not O(all views).
//! - `entries`: the pool; a free stack recycles entries, a bump index hands out fresh ones.
//! - `task_heads` per ring: each task slot's chain of the entries that task produced, so a
//!   retired task's entries are freed in O(its entries) ([`TensorMap::sync_watermark`]).
//! - `epoch`: [`TensorMap::reset`] advances it; a bucket or task head stamped with an older epoch
//!   reads as empty and is re-stamped lazily on the next insert. Reset is O(1), and O(buckets +
//!   task window) once every 2^32 resets when the stamps are cleared.
//!
//! Entries of retired tasks (local id below their ring's `last_task_alive`) are skipped by
//! lookups and freed in batches; chains of one slot may hold entries of an older task and of
//! the newer one that reused the slot, so freeing matches the exact task id.
//!
//! A writer that supersedes an entry of exactly its own region (the accumulator pattern: each
//! task updates the region the previous one wrote) takes the entry over instead of removing it
//! and inserting its own ([`Visit::Replace`]): only the entry's task chain changes.

use crate::deps::NIL;
use crate::layout::{Carver, Layout, LayoutError, Span};
use crate::limits::MAX_TENSOR_DIMS;
use crate::overlap::{self, Footprint, Overlap};
use crate::ring::MAX_RINGS;
use crate::task_tensor::{TaskId, TaskTensor};
use bytemuck::{Pod, Zeroable};

/// Freed entries are reclaimed once a ring's watermark moved this many tasks.
pub const CLEANUP_INTERVAL: u32 = 64;

/// The most fine chains a lookup probes before it walks the bucket chain instead.
pub const FINE_PROBES: u64 = 16;

/// Sizes of a TensorMap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapConfig {
    /// Buckets; a power of two.
    pub buckets: u32,
    /// Entries in the pool.
    pub entries: u32,
    /// Task window of each ring (a power of two), or 0 for a ring that is not used.
    pub windows: [u32; MAX_RINGS],
}

impl TensorMapConfig {
    /// The runtime's default: 4096 buckets, 65,536 entries, four rings of 16,384 tasks.
    pub const DEFAULT: Self = Self {
        buckets: 4096,
        entries: 65_536,
        windows: [16_384; MAX_RINGS],
    };

    /// The Graph recorder's hazard map: 4096 buckets, 16,384 entries, one ring of 1024 nodes.
    pub const RECORDER: Self = Self {
        buckets: 4096,
        entries: 16_384,
        windows: [1024, 0, 0, 0],
    };
}

/// A recorded writer. Two cache lines: the first holds what a lookup reads for every entry in
/// a chain, the second what only the exact box test and unlinking need.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MapEntry {
    buffer_addr: u64,
    producer: TaskId,
    start: u64,
    extent: u64,
    next_in_bucket: u32,
    next_in_fine: u32,
    version: i32,
    ndims: u8,
    dtype: u8,
    elem_size: u8,
    kind: u8,
    /// Bucket index, or `NIL` while the entry is free.
    bucket: u32,
    /// Fine chain index.
    fine: u32,
    /// Size class: the entry's byte range lies in blocks `block` and `block + 1` of
    /// `2^level` bytes, `block = start_byte >> level`.
    level: u8,
    _pad1: [u8; 7],
    shapes: [u32; MAX_TENSOR_DIMS],
    strides: [u32; MAX_TENSOR_DIMS],
    prev_in_bucket: u32,
    prev_in_fine: u32,
    next_in_task: u32,
    prev_in_task: u32,
    _pad2: [u8; 8],
}

crate::assert_layout!(MapEntry, size = 128, { shapes: 64 });

impl MapEntry {
    /// The byte range `[start, end)` (saturating, as `overlap::check` computes it).
    #[inline]
    fn bytes(&self) -> (u64, u64) {
        let e = self.elem_size.max(1) as u64;
        (
            self.start.saturating_mul(e),
            self.start.saturating_add(self.extent).saturating_mul(e),
        )
    }

    fn footprint(&self) -> Footprint {
        Footprint {
            start: self.start,
            extent: self.extent,
            version: self.version,
            ndims: self.ndims as u32,
            dtype: self.dtype,
            elem_size: self.elem_size as u32,
            contiguous: false,
            shapes: self.shapes,
            strides: self.strides,
        }
    }
}

/// A list head stamped with the epoch it was last written in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Head {
    first: u32,
    epoch: u32,
}

crate::assert_layout!(Head, size = 8);

/// A bucket: its chain's head and what the entries it received in the current epoch have in
/// common (a superset: never narrowed when entries leave), stamped together. 32 bytes, so a
/// lookup or an insert reads one cache line for both.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Bucket {
    first: u32,
    epoch: u32,
    /// The lowest version inserted.
    min_version: i32,
    _pad: u32,
    /// Bit `L` set: an entry of level `L` was inserted.
    levels: u64,
    /// Bit `L` set: an entry of level `L` that reaches past its first block was inserted.
    /// While it is clear, a probe need not walk the block before its own at that level.
    spills: u64,
}

crate::assert_layout!(Bucket, size = 32);

/// The size class of a byte range `[start, end)`: the least `L` with `end - start <= 2^L`
/// (an empty range counts as one byte), at most 63.
#[inline]
fn level_of(start: u64, end: u64) -> u8 {
    let len = end.saturating_sub(start).max(1);
    ((u64::BITS - (len - 1).leading_zeros()) as u8).min(63)
}

/// Counters of the map, kept in its memory so a map can be re-attached to a region.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct Header {
    epoch: u32,
    bump: u32,
    free_top: u32,
    live: u32,
    bucket_shift: u32,
    _pad: u32,
    last_alive: [u32; MAX_RINGS],
    last_cleanup: [u32; MAX_RINGS],
}

crate::assert_layout!(Header, size = 24 + 8 * MAX_RINGS);

/// Where each array of a TensorMap lives in its region.
#[derive(Clone, Copy, Debug)]
pub struct TensorMapLayout {
    config: TensorMapConfig,
    layout: Layout,
    header: Span<Header>,
    buckets: Span<Bucket>,
    occupied: Span<u64>,
    fine: Span<Head>,
    entries: Span<MapEntry>,
    free: Span<u32>,
    task_heads: [Span<Head>; MAX_RINGS],
}

impl TensorMapLayout {
    /// Lays out a map of `config`; checks every size.
    pub fn new(config: TensorMapConfig) -> Result<Self, LayoutError> {
        if !config.buckets.is_power_of_two() {
            return Err(LayoutError::Config {
                field: "tensor_map.buckets",
                value: config.buckets as u64,
            });
        }
        if config.entries == 0 || config.entries == NIL {
            return Err(LayoutError::Config {
                field: "tensor_map.entries",
                value: config.entries as u64,
            });
        }
        for w in config.windows {
            if w != 0 && !w.is_power_of_two() {
                return Err(LayoutError::Config {
                    field: "tensor_map.windows",
                    value: w as u64,
                });
            }
        }
        let mut layout = Layout::new();
        let header = layout.array::<Header>(1)?;
        let buckets = layout.array::<Bucket>(config.buckets as usize)?;
        let occupied = layout.array::<u64>((config.buckets as usize).div_ceil(64))?;
        let fine = layout.array::<Head>(config.buckets as usize)?;
        let entries = layout.array::<MapEntry>(config.entries as usize)?;
        let free = layout.array::<u32>(config.entries as usize)?;
        let mut task_heads = [Span::empty(); MAX_RINGS];
        for (ring, heads) in task_heads.iter_mut().enumerate() {
            *heads = layout.array::<Head>(config.windows[ring] as usize)?;
        }
        Ok(Self {
            config,
            layout,
            header,
            buckets,
            occupied,
            fine,
            entries,
            free,
            task_heads,
        })
    }

    /// Bytes the map's region needs.
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// The configuration this layout was made from.
    pub fn config(&self) -> TensorMapConfig {
        self.config
    }
}

/// What an entry records.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A task wrote the region (INOUT, OUTPUT_EXISTING).
    Writer = 0,
    /// A task read the region (INPUT); recorded only when write-after-read tracking is on.
    Reader = 1,
}

/// What a lookup's visitor wants done with the entry it was shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// Keep the entry.
    Keep,
    /// Remove the entry: the probe's writer supersedes it.
    Remove,
    /// The probe's writer, `task`, supersedes the entry: hand the entry over to `task` if it
    /// records exactly the probe's region (the entry `task` would insert; see
    /// [`TensorMap::lookup`]), remove it otherwise.
    Replace(TaskId),
}

/// The map could not take more entries even after freeing every retired task's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapFull {
    /// Free entries the caller asked for.
    pub needed: u32,
    /// Entries free after the retired tasks' were freed.
    pub free: u32,
}

impl core::fmt::Display for MapFull {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "the TensorMap needs {} free entries; {} are free after freeing every retired task's",
            self.needed, self.free
        )
    }
}

impl core::error::Error for MapFull {}

/// A TensorMap over a caller-provided region. Written by one thread (the orchestrator).
pub struct TensorMap<'a> {
    header: &'a mut Header,
    buckets: &'a mut [Bucket],
    /// One bit per bucket, set by an insert since the last reset: a lookup of a bucket whose
    /// bit is clear (a buffer nothing was registered on, such as a fresh output) answers
    /// without reading the bucket. The bits fit a few cache lines where the buckets take
    /// thousands, so such a lookup stays cheap when the map is cold.
    occupied: &'a mut [u64],
    fine: &'a mut [Head],
    entries: &'a mut [MapEntry],
    free: &'a mut [u32],
    task_heads: [&'a mut [Head]; MAX_RINGS],
    /// What an index outside its array reads and writes instead of panicking. Every index the
    /// map stores or derives is in range (masked hashes, pool indices below the pool's size),
    /// so the spare is never touched; it makes each access provably in bounds.
    spare: Spare,
}

/// The stand-ins of [`TensorMap::spare`].
#[derive(Clone, Copy)]
struct Spare {
    entry: MapEntry,
    bucket: Bucket,
    head: Head,
    word: u64,
}

const FIB: u64 = 0x9E37_79B9_7F4A_7C15;
const READER_SALT: u64 = 0x5EAD_E125_0000_0000;
/// Spreads block numbers before they are mixed with the address.
const BLOCK_MIX: u64 = 0xD6E8_FEB8_6659_FD93;

/// A lookup's probe, computed once for every chain it walks.
struct Probe {
    addr: u64,
    kind: u8,
    footprint: Footprint,
    range: (u64, u64),
    buffer_elems: u64,
    /// An entry was handed over to the probe's writer ([`Visit::Replace`]).
    handed_over: bool,
}

/// Whether `entry` (of the probe's buffer and kind) records exactly the region `probe`
/// describes: what an insert of the probe would record. The dimension test is
/// `TaskTensor::same_layout`'s, written out over the entry's fields: it runs on every probe of
/// a hot bucket, and a helper shared with `same_layout` compiles to more instructions there.
#[inline]
fn records_exactly(entry: &MapEntry, probe: &Footprint) -> bool {
    let rank = (entry.ndims as usize).min(MAX_TENSOR_DIMS);
    entry.start == probe.start
        && entry.extent == probe.extent
        && entry.version == probe.version
        && entry.ndims as u32 == probe.ndims
        && entry.dtype == probe.dtype
        && (0..rank)
            .all(|d| entry.shapes[d] == probe.shapes[d] && entry.strides[d] == probe.strides[d])
}

/// A chain to walk: a bucket's (from its first entry), or the fine chain of one block.
#[derive(Clone, Copy)]
enum Chain {
    Bucket(u32),
    Fine { chain: usize, level: u8, block: u64 },
}

/// The fine chains a probe of byte range `range` must walk, as `(level, first block, last
/// block)` per level present in `levels`, or `None` when that is more than [`FINE_PROBES`]
/// chains. An entry of level `L` starting in block `b` lies within `[b·2^L, (b+2)·2^L)`, so
/// one that meets `[start, end)` starts in a block from `(start >> L) - 1` to
/// `(end - 1) >> L`; from `start >> L` when no entry of that level reaches past its first
/// block (its bit in `spills` is clear), as aligned views of one size never do.
fn fine_blocks(
    levels: u64,
    spills: u64,
    (start, end): (u64, u64),
) -> Option<impl Iterator<Item = (u8, u64, u64)>> {
    let span = move |level: u8| {
        let own = start >> level;
        let first = if spills & 1 << level != 0 {
            own.saturating_sub(1)
        } else {
            own
        };
        let last = (end.saturating_sub(1) >> level).max(first);
        (level, first, last)
    };
    let levels_iter = move || {
        let mut rest = levels;
        core::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let level = rest.trailing_zeros() as u8;
            rest &= rest - 1;
            Some(span(level))
        })
    };
    let mut probes = 0u64;
    for (_, first, last) in levels_iter() {
        probes = probes.saturating_add(last - first + 1);
        if probes > FINE_PROBES {
            return None;
        }
    }
    Some(levels_iter())
}

impl<'a> TensorMap<'a> {
    /// Formats `region` as an empty map.
    pub fn init(region: &'a mut [u8], layout: &TensorMapLayout) -> Result<Self, LayoutError> {
        let mut map = Self::carve(region, layout)?;
        *map.header = Header {
            epoch: 1,
            bucket_shift: 64 - layout.config.buckets.trailing_zeros(),
            ..Header::zeroed()
        };
        map.clear_stamps();
        map.occupied.fill(0);
        Ok(map)
    }

    /// Empties a map [`Self::init`] formatted in `region` with the same layout, in O(1)
    /// ([`Self::reset`]) instead of rewriting its stamps; refuses a header that layout could
    /// not have produced.
    pub fn attach(region: &'a mut [u8], layout: &TensorMapLayout) -> Result<Self, LayoutError> {
        let mut map = Self::carve(region, layout)?;
        let h = &*map.header;
        let entries = map.entries.len() as u32;
        if h.epoch == 0
            || h.bucket_shift != 64 - layout.config.buckets.trailing_zeros()
            || h.bump > entries
            || h.free_top > entries
        {
            return Err(LayoutError::Config {
                field: "tensor_map.header",
                value: h.epoch as u64,
            });
        }
        map.reset();
        Ok(map)
    }

    /// The map's arrays in `region`, as they are.
    fn carve(region: &'a mut [u8], layout: &TensorMapLayout) -> Result<Self, LayoutError> {
        let mut carver = Carver::new(region, &layout.layout)?;
        let header = &mut carver.pod(layout.header)?[0];
        let buckets = carver.pod(layout.buckets)?;
        let occupied = carver.pod(layout.occupied)?;
        let fine = carver.pod(layout.fine)?;
        let entries = carver.pod(layout.entries)?;
        let free = carver.pod(layout.free)?;
        let [h0, h1, h2, h3] = layout.task_heads;
        let task_heads = [
            carver.pod(h0)?,
            carver.pod(h1)?,
            carver.pod(h2)?,
            carver.pod(h3)?,
        ];
        Ok(Self {
            header,
            buckets,
            occupied,
            fine,
            entries,
            free,
            task_heads,
            spare: Spare {
                entry: MapEntry::zeroed(),
                bucket: Bucket::zeroed(),
                head: Head::zeroed(),
                word: 0,
            },
        })
    }

    #[inline(always)]
    fn entry(&self, i: u32) -> &MapEntry {
        self.entries.get(i as usize).unwrap_or(&self.spare.entry)
    }

    #[inline(always)]
    fn entry_mut(&mut self, i: u32) -> &mut MapEntry {
        self.entries
            .get_mut(i as usize)
            .unwrap_or(&mut self.spare.entry)
    }

    #[inline(always)]
    fn bucket(&self, i: usize) -> &Bucket {
        self.buckets.get(i).unwrap_or(&self.spare.bucket)
    }

    #[inline(always)]
    fn bucket_mut(&mut self, i: usize) -> &mut Bucket {
        self.buckets.get_mut(i).unwrap_or(&mut self.spare.bucket)
    }

    #[inline(always)]
    fn fine_head(&self, i: usize) -> &Head {
        self.fine.get(i).unwrap_or(&self.spare.head)
    }

    #[inline(always)]
    fn fine_mut(&mut self, i: usize) -> &mut Head {
        self.fine.get_mut(i).unwrap_or(&mut self.spare.head)
    }

    #[inline(always)]
    fn task_head(&self, ring: usize, slot: usize) -> &Head {
        self.task_heads
            .get(ring)
            .and_then(|h| h.get(slot))
            .unwrap_or(&self.spare.head)
    }

    #[inline(always)]
    fn task_head_mut(&mut self, ring: usize, slot: usize) -> &mut Head {
        self.task_heads
            .get_mut(ring)
            .and_then(|h| h.get_mut(slot))
            .unwrap_or(&mut self.spare.head)
    }

    /// Ring `ring`'s task-head count (0 for a ring the map has no window for).
    #[inline(always)]
    fn task_window(&self, ring: usize) -> usize {
        self.task_heads.get(ring).map_or(0, |h| h.len())
    }

    /// The occupancy word of bucket `bucket`; all set (walk the bucket) for a word outside
    /// the array, which no bucket index reaches.
    #[inline(always)]
    fn occupied_word(&self, bucket: usize) -> u64 {
        self.occupied.get(bucket / 64).copied().unwrap_or(u64::MAX)
    }

    #[inline(always)]
    fn occupied_mut(&mut self, bucket: usize) -> &mut u64 {
        self.occupied
            .get_mut(bucket / 64)
            .unwrap_or(&mut self.spare.word)
    }

    /// Zeroes every epoch stamp (epoch 0 is never current).
    fn clear_stamps(&mut self) {
        self.buckets.fill(Bucket::zeroed());
        self.fine.fill(Head::zeroed());
        for heads in self.task_heads.iter_mut() {
            heads.fill(Head::zeroed());
        }
    }

    /// Empties the map against the memory in place: afterwards it answers every lookup as a
    /// freshly initialised map does, and the whole pool is free.
    pub fn reset(&mut self) {
        let h = &mut *self.header;
        h.epoch = h.epoch.wrapping_add(1);
        h.bump = 0;
        h.free_top = 0;
        h.live = 0;
        h.last_alive = [0; MAX_RINGS];
        h.last_cleanup = [0; MAX_RINGS];
        self.occupied.fill(0);
        if h.epoch == 0 {
            h.epoch = 1;
            self.clear_stamps();
        }
    }

    /// Entries in use (including not yet freed entries of retired tasks).
    pub fn live_entries(&self) -> u32 {
        self.header.live
    }

    /// Entries that can be inserted without freeing anything.
    pub fn free_entries(&self) -> u32 {
        self.entries.len() as u32 - self.header.live
    }

    /// The pool's size.
    pub fn capacity(&self) -> u32 {
        self.entries.len() as u32
    }

    #[inline]
    fn bucket_of(&self, addr: u64, kind: EntryKind) -> usize {
        // Readers hash apart from writers of the same buffer, so a reader's lookup (which wants
        // writers only) never walks the readers that pile up on a widely read buffer.
        let key = match kind {
            EntryKind::Writer => addr,
            EntryKind::Reader => addr ^ READER_SALT,
        };
        // Fibonacci hashing: the top bits of the product spread nearby addresses.
        (key.wrapping_mul(FIB) >> self.header.bucket_shift.min(63)) as usize
            & (self.buckets.len() - 1)
    }

    /// The fine chain of block `block` at `level` of the buffer at `addr`, for `kind`.
    #[inline]
    fn fine_of(&self, addr: u64, kind: EntryKind, level: u8, block: u64) -> usize {
        let key = match kind {
            EntryKind::Writer => addr,
            EntryKind::Reader => addr ^ READER_SALT,
        } ^ block.wrapping_mul(BLOCK_MIX)
            ^ ((level as u64) << 57);
        (key.wrapping_mul(FIB) >> self.header.bucket_shift.min(63)) as usize & (self.fine.len() - 1)
    }

    #[inline]
    fn is_retired(&self, task: TaskId) -> bool {
        let ring = (task.ring() as usize).min(MAX_RINGS - 1);
        task.local() < self.header.last_alive[ring]
    }

    fn task_head_index(&self, task: TaskId) -> Option<(usize, usize)> {
        let ring = task.ring() as usize;
        let heads = self.task_heads.get(ring)?;
        if heads.is_empty() {
            return None;
        }
        Some((ring, task.local() as usize & (heads.len() - 1)))
    }

    /// Records that `producer` accesses `tensor` as `kind`. Fails only when the pool is
    /// exhausted (callers reserve with [`Self::ensure_capacity`] first) or the producer's ring
    /// has no task window in this map.
    pub fn insert(
        &mut self,
        tensor: &TaskTensor,
        producer: TaskId,
        kind: EntryKind,
    ) -> Result<(), MapFull> {
        let full = MapFull {
            needed: 1,
            free: self.free_entries(),
        };
        let (ring, slot) = self.task_head_index(producer).ok_or(full)?;
        let index = if self.header.free_top > 0 {
            let Some(&i) = self.free.get(self.header.free_top as usize - 1) else {
                return Err(full);
            };
            self.header.free_top -= 1;
            i
        } else if (self.header.bump as usize) < self.entries.len() {
            self.header.bump += 1;
            self.header.bump - 1
        } else {
            return Err(full);
        };
        let epoch = self.header.epoch;
        let addr = tensor.buffer().addr;
        let bucket = self.bucket_of(addr, kind);
        let elem = tensor.dtype().elem_size().max(1) as u64;
        let (start, extent) = (tensor.start_offset(), tensor.extent_elems());
        let start_byte = start.saturating_mul(elem);
        let end_byte = start.saturating_add(extent).saturating_mul(elem);
        let level = level_of(start_byte, end_byte);
        let spills = end_byte.saturating_sub(1).max(start_byte) >> level != start_byte >> level;
        let fine = self.fine_of(addr, kind, level, start_byte >> level);

        *self.occupied_mut(bucket) |= 1 << (bucket % 64);
        let b = self.bucket_mut(bucket);
        if b.epoch != epoch {
            *b = Bucket {
                first: NIL,
                epoch,
                min_version: i32::MAX,
                ..Bucket::zeroed()
            };
        }
        let old_bucket_first = b.first;
        b.first = index;
        b.levels |= 1 << level;
        b.spills |= (spills as u64) << level;
        b.min_version = b.min_version.min(tensor.version());
        let fine_head = self.fine_mut(fine);
        if fine_head.epoch != epoch {
            *fine_head = Head { first: NIL, epoch };
        }
        let old_fine_first = fine_head.first;
        fine_head.first = index;
        let old_task_first = self.link_to_task(index, ring, slot);

        let (shapes, strides) = (*tensor.shapes_all(), *tensor.strides_all());
        *self.entry_mut(index) = MapEntry {
            buffer_addr: addr,
            producer,
            start,
            extent,
            next_in_bucket: old_bucket_first,
            next_in_fine: old_fine_first,
            version: tensor.version(),
            ndims: tensor.ndims() as u8,
            dtype: tensor.dtype().raw(),
            elem_size: tensor.dtype().elem_size() as u8,
            kind: kind as u8,
            bucket: bucket as u32,
            fine: fine as u32,
            level,
            _pad1: [0; 7],
            shapes,
            strides,
            prev_in_bucket: NIL,
            prev_in_fine: NIL,
            next_in_task: old_task_first,
            prev_in_task: NIL,
            _pad2: [0; 8],
        };
        if old_bucket_first != NIL {
            self.entry_mut(old_bucket_first).prev_in_bucket = index;
        }
        if old_fine_first != NIL {
            self.entry_mut(old_fine_first).prev_in_fine = index;
        }
        self.header.live += 1;
        Ok(())
    }

    /// Shows `visit` every live entry of `kind` whose region may overlap `probe`, with the
    /// overlap class; within each chain walked, newest registration first, except that an
    /// entry handed over keeps its place (the order across chains is unspecified). Entries of
    /// retired tasks are skipped. The visitor may remove the entry it is shown, or hand it
    /// over ([`Visit::Replace`]).
    ///
    /// Returns whether an entry was handed over: the first one shown for `Replace(task)` that
    /// records exactly `probe`'s region (buffer, start, extent, version, rank, type, shapes
    /// and strides) now records it for `task`, which must then not insert it again. This is
    /// an insert and a removal in one, without relinking the entry's chains: the accumulator
    /// pattern (a task reads and writes the region its predecessor wrote) costs a lookup and
    /// no insert. Later exact entries in the same lookup are removed.
    #[inline(always)]
    pub fn lookup(
        &mut self,
        probe: &TaskTensor,
        kind: EntryKind,
        visit: impl FnMut(TaskId, Overlap) -> Visit,
    ) -> bool {
        let addr = probe.buffer().addr;
        let bucket = self.bucket_of(addr, kind);
        if self.occupied_word(bucket) & 1 << (bucket % 64) == 0 {
            return false;
        }
        let head = *self.bucket(bucket);
        if head.epoch != self.header.epoch {
            return false;
        }
        self.lookup_in(probe, kind, head, visit)
    }

    /// [`Self::lookup`] in bucket `head`, which holds entries: out of line, so that the common
    /// answer (nothing was registered on the probe's buffer) stays a few inlined instructions.
    #[inline(never)]
    fn lookup_in(
        &mut self,
        probe: &TaskTensor,
        kind: EntryKind,
        head: Bucket,
        mut visit: impl FnMut(TaskId, Overlap) -> Visit,
    ) -> bool {
        let addr = probe.buffer().addr;
        let elem = probe.dtype().elem_size();
        let footprint = Footprint {
            start: probe.start_offset(),
            extent: probe.extent_elems(),
            version: probe.version(),
            ndims: probe.ndims(),
            dtype: probe.dtype().raw(),
            elem_size: elem,
            contiguous: probe.is_contiguous(),
            shapes: *probe.shapes_all(),
            strides: *probe.strides_all(),
        };
        // Element sizes are powers of two: a shift, not a division, on this hot path.
        let buffer_elems = probe.buffer().size >> elem.trailing_zeros();
        // The probe's byte range (the bounds `overlap::check` starts with).
        let range = (
            footprint.start.saturating_mul(elem.max(1) as u64),
            footprint
                .start
                .saturating_add(footprint.extent)
                .saturating_mul(elem.max(1) as u64),
        );
        let mut probe = Probe {
            addr,
            kind: kind as u8,
            footprint,
            range,
            buffer_elems,
            handed_over: false,
        };
        if footprint.version <= head.min_version {
            if let Some(blocks) = fine_blocks(head.levels, head.spills, range) {
                for (level, first, last) in blocks {
                    for block in first..=last {
                        let chain = self.fine_of(addr, kind, level, block);
                        self.walk(
                            &mut probe,
                            Chain::Fine {
                                chain,
                                level,
                                block,
                            },
                            &mut visit,
                        );
                    }
                }
                return probe.handed_over;
            }
        }
        self.walk(&mut probe, Chain::Bucket(head.first), &mut visit);
        probe.handed_over
    }

    /// Walks one chain for [`Self::lookup`].
    #[inline]
    fn walk(
        &mut self,
        probe: &mut Probe,
        chain: Chain,
        visit: &mut impl FnMut(TaskId, Overlap) -> Visit,
    ) {
        let epoch = self.header.epoch;
        let (mut cursor, fine) = match chain {
            Chain::Bucket(first) => (first, None),
            Chain::Fine {
                chain,
                level,
                block,
            } => {
                let head = *self.fine_head(chain);
                if head.epoch != epoch {
                    return;
                }
                (head.first, Some((level, block)))
            }
        };
        let (p_start, p_end) = probe.range;
        while cursor != NIL {
            let this = cursor;
            let entry = self.entry(this);
            cursor = match fine {
                Some(_) => entry.next_in_fine,
                None => entry.next_in_bucket,
            };
            if entry.buffer_addr != probe.addr
                || entry.kind != probe.kind
                || self.is_retired(entry.producer)
            {
                continue;
            }
            let (e_start, e_end) = entry.bytes();
            // A fine chain is shared by every (level, block) that hashes to it: report only
            // the entries of the one probed, so none is shown twice.
            if let Some((level, block)) = fine {
                if entry.level != level || e_start >> level != block {
                    continue;
                }
            }
            // Disjoint byte ranges of one version never overlap: decided on the entry's first
            // cache line, without building its footprint.
            if probe.footprint.version <= entry.version && (p_end <= e_start || e_end <= p_start) {
                continue;
            }
            // The entry of exactly the probe's region (an accumulator's predecessor) is
            // covered without the general test.
            let exact = records_exactly(entry, &probe.footprint);
            let overlap = if exact {
                Overlap::Covered
            } else {
                overlap::check(&probe.footprint, &entry.footprint(), probe.buffer_elems)
            };
            if overlap == Overlap::None {
                continue;
            }
            match visit(entry.producer, overlap) {
                Visit::Keep => {}
                Visit::Remove => self.remove(this),
                Visit::Replace(task) => {
                    if probe.handed_over || !exact || !self.hand_over(this, task) {
                        self.remove(this);
                    } else {
                        probe.handed_over = true;
                    }
                }
            }
        }
    }

    /// Moves entry `index` from its producer's task chain to `task`'s, which becomes its
    /// producer; its bucket and fine chains stay as they are. False (nothing changed) if
    /// `task`'s ring has no task window in this map.
    fn hand_over(&mut self, index: u32, task: TaskId) -> bool {
        let Some((ring, slot)) = self.task_head_index(task) else {
            return false;
        };
        let e = *self.entry(index);
        self.unlink_from_task(&e);
        let old_first = self.link_to_task(index, ring, slot);
        let entry = self.entry_mut(index);
        entry.producer = task;
        entry.next_in_task = old_first;
        entry.prev_in_task = NIL;
        true
    }

    /// Unlinks `e` (an entry's current links) from its producer's task chain.
    #[inline]
    fn unlink_from_task(&mut self, e: &MapEntry) {
        if e.prev_in_task != NIL {
            self.entry_mut(e.prev_in_task).next_in_task = e.next_in_task;
        } else if let Some((ring, slot)) = self.task_head_index(e.producer) {
            self.task_head_mut(ring, slot).first = e.next_in_task;
        }
        if e.next_in_task != NIL {
            self.entry_mut(e.next_in_task).prev_in_task = e.prev_in_task;
        }
    }

    /// Makes entry `index` the head of task chain `slot` of `ring` (stamping a stale head
    /// empty first) and returns the former head, which the caller links after it.
    #[inline]
    fn link_to_task(&mut self, index: u32, ring: usize, slot: usize) -> u32 {
        let epoch = self.header.epoch;
        let task_head = self.task_head_mut(ring, slot);
        if task_head.epoch != epoch {
            *task_head = Head { first: NIL, epoch };
        }
        let old_first = task_head.first;
        task_head.first = index;
        if old_first != NIL {
            self.entry_mut(old_first).prev_in_task = index;
        }
        old_first
    }

    /// Unlinks entry `index` from its bucket and task chains and returns it to the pool.
    fn remove(&mut self, index: u32) {
        let e = *self.entry(index);
        if e.bucket == NIL {
            return;
        }
        if e.prev_in_bucket != NIL {
            self.entry_mut(e.prev_in_bucket).next_in_bucket = e.next_in_bucket;
        } else {
            self.bucket_mut(e.bucket as usize).first = e.next_in_bucket;
        }
        if e.next_in_bucket != NIL {
            self.entry_mut(e.next_in_bucket).prev_in_bucket = e.prev_in_bucket;
        }
        if e.prev_in_fine != NIL {
            self.entry_mut(e.prev_in_fine).next_in_fine = e.next_in_fine;
        } else {
            self.fine_mut(e.fine as usize).first = e.next_in_fine;
        }
        if e.next_in_fine != NIL {
            self.entry_mut(e.next_in_fine).prev_in_fine = e.prev_in_fine;
        }
        self.unlink_from_task(&e);
        self.entry_mut(index).bucket = NIL;
        if let Some(f) = self.free.get_mut(self.header.free_top as usize) {
            *f = index;
            self.header.free_top += 1;
        }
        self.header.live -= 1;
    }

    /// Frees every entry produced by exactly `task`.
    fn free_task(&mut self, task: TaskId) {
        let Some((ring, slot)) = self.task_head_index(task) else {
            return;
        };
        let head = *self.task_head(ring, slot);
        if head.epoch != self.header.epoch {
            return;
        }
        let mut cursor = head.first;
        while cursor != NIL {
            let e = *self.entry(cursor);
            let this = cursor;
            cursor = e.next_in_task;
            if e.producer == task {
                self.remove(this);
            }
        }
    }

    /// Tells the map that tasks of `ring` below `last_alive` have retired. Lookups skip their
    /// entries at once; the entries are freed every [`CLEANUP_INTERVAL`] retirements, or at the
    /// next [`Self::ensure_capacity`] that finds the pool short.
    pub fn sync_watermark(&mut self, ring: usize, last_alive: u32) {
        if ring >= MAX_RINGS || last_alive <= self.header.last_alive[ring] {
            return;
        }
        self.header.last_alive[ring] = last_alive;
        if last_alive - self.header.last_cleanup[ring] >= CLEANUP_INTERVAL {
            self.free_retired(ring);
        }
    }

    /// Frees the entries of every task of `ring` retired since the last cleanup.
    fn free_retired(&mut self, ring: usize) {
        let (from, to) = (self.header.last_cleanup[ring], self.header.last_alive[ring]);
        if to - from <= self.task_window(ring) as u32 {
            // O(entries of the retired tasks): each retired id's slot chain, exact id only.
            for local in from..to {
                self.free_task(TaskId::new(ring as u32, local));
            }
        } else {
            // More than a window retired: some slots were reused, so sweep every chain once.
            self.sweep_retired(ring);
        }
        self.header.last_cleanup[ring] = to;
    }

    /// Frees every entry of `ring` whose producer has retired, whatever its slot.
    fn sweep_retired(&mut self, ring: usize) {
        for slot in 0..self.task_window(ring) {
            let head = *self.task_head(ring, slot);
            if head.epoch != self.header.epoch {
                continue;
            }
            let mut cursor = head.first;
            while cursor != NIL {
                let e = *self.entry(cursor);
                let this = cursor;
                cursor = e.next_in_task;
                if self.is_retired(e.producer) {
                    self.remove(this);
                }
            }
        }
    }

    /// Makes room for `needed` inserts, freeing every retired task's entries if the pool is
    /// short. Fails if that is still not enough; the caller waits for tasks to retire (passing
    /// the new watermarks to [`Self::sync_watermark`]) and retries.
    pub fn ensure_capacity(&mut self, needed: u32) -> Result<(), MapFull> {
        if self.free_entries() < needed {
            for ring in 0..MAX_RINGS {
                if self.header.last_cleanup[ring] < self.header.last_alive[ring] {
                    self.free_retired(ring);
                }
            }
        }
        if self.free_entries() >= needed {
            Ok(())
        } else {
            Err(MapFull {
                needed,
                free: self.free_entries(),
            })
        }
    }
}

#[cfg(test)]
mod tests;
