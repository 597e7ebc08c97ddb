//! Task payload records: what a write stores is what dispatch reads back, for every task a ring
//! can hold live at once, whatever the mix of record sizes and predicates; the live image
//! round-trips into a
//! fresh region; and an image whose records break the caps is refused with the field at fault.

use simpler_aicpu::payloads::{
    MixedKernels, PayloadsLayout, TaskPayloads, TENSOR_WORDS, WRITE_AHEAD_WORDS,
};
use simpler_core::image::{ImageError, Reader, Writer};
use simpler_core::layout::Line;
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::predicate::DispatchPredicate;
use simpler_core::sync::AtomicU64;
use simpler_core::{AddressSpace, BufferHandle, CoreTaskArgs, DataType, TaskId, TaskTensor};
use std::cell::RefCell;

const WINDOW: u32 = 8;

fn layout() -> PayloadsLayout {
    PayloadsLayout::new([WINDOW, WINDOW, 0, 0]).unwrap()
}

fn region(layout: &PayloadsLayout) -> Vec<Line> {
    vec![Line([0; 64]); layout.size().div_ceil(64)]
}

/// A distinct tensor per `(task, i)`: its buffer address and offset encode both.
fn tensor(task: u32, i: usize) -> TaskTensor {
    TaskTensor::new(
        BufferHandle {
            addr: 0x10_0000 * (task as u64 + 1) + 0x1000 * i as u64,
            size: 4096,
        },
        i as u64 * 4,
        &[8, 8],
        &[8, 1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap()
}

/// What task `local` of a run writes: `nt` tensors, `ns` scalars, its own kernels, and a
/// predicate on every third task.
struct Written {
    kernels: MixedKernels,
    block_num: u16,
    tensors: Vec<TaskTensor>,
    scalars: Vec<u64>,
    predicate: Option<DispatchPredicate>,
}

fn written(local: u32, nt: usize, ns: usize) -> Written {
    Written {
        kernels: MixedKernels {
            aic: local,
            aiv0: local + 1,
            aiv1: u32::MAX,
        },
        block_num: (local % 7 + 1) as u16,
        tensors: (0..nt).map(|i| tensor(local, i)).collect(),
        scalars: (0..ns).map(|i| (local as u64) << 16 | i as u64).collect(),
        predicate: (local % 3 == 0).then_some(DispatchPredicate {
            addr: 0x4000 + local as u64,
            target: -(local as i64),
            elem_size: 4,
            op: (local % 6 + 1) as u8,
            reserved: [0; 6],
        }),
    }
}

fn write(p: &TaskPayloads<'_>, id: TaskId, w: &Written) {
    p.write(
        id,
        w.kernels,
        w.block_num,
        w.tensors.iter().copied(),
        &w.scalars,
        w.predicate.as_ref(),
    );
}

fn assert_reads(p: &TaskPayloads<'_>, id: TaskId, w: &Written) {
    let mut args = CoreTaskArgs::new();
    p.read_args(id, &mut args);
    assert_eq!(args.tensors(), &w.tensors[..], "tensors of {id:?}");
    assert_eq!(args.scalars(), &w.scalars[..], "scalars of {id:?}");
    assert_eq!(p.kernels(id), (w.kernels, w.block_num), "kernels of {id:?}");
    assert_eq!(p.predicate(id), w.predicate, "predicate of {id:?}");
    let mut scalars = [0u64; CORE_MAX_SCALAR_ARGS];
    let n = p.scalars(id, &mut scalars);
    assert_eq!(&scalars[..n], &w.scalars[..]);
}

/// A deterministic size mix with every extreme: empty records, whole-cap records, and the
/// sizes between.
fn sizes(local: u32) -> (usize, usize) {
    let x = (local as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    match local % 5 {
        0 => (CORE_MAX_TENSOR_ARGS, CORE_MAX_SCALAR_ARGS),
        1 => (0, 0),
        _ => (
            (x % (CORE_MAX_TENSOR_ARGS as u64 + 1)) as usize,
            (x / 64 % (CORE_MAX_SCALAR_ARGS as u64 + 1)) as usize,
        ),
    }
}

#[test]
fn every_live_record_reads_back_as_written_while_the_arena_wraps() {
    let layout = layout();
    let mut mem = region(&layout);
    let p = TaskPayloads::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    // Many times round the arena (8 slots of at most one whole body each); after each write the
    // last WINDOW - 1 tasks, as many as the orchestrator keeps live, must all still read back.
    let tasks = 40 * WINDOW;
    let mut log: Vec<Written> = Vec::new();
    for local in 0..tasks {
        let (nt, ns) = sizes(local);
        let w = written(local, nt, ns);
        write(&p, TaskId::new(1, local), &w);
        log.push(w);
        let live = local.saturating_sub(WINDOW - 2)..=local;
        for l in live {
            assert_reads(&p, TaskId::new(1, l), &log[l as usize]);
        }
    }
    // The other ring's records are its own.
    let w = written(5, 3, 2);
    write(&p, TaskId::new(0, 5), &w);
    assert_reads(&p, TaskId::new(0, 5), &w);
    assert_reads(&p, TaskId::new(1, tasks - 1), &log[tasks as usize - 1]);
}

std::thread_local! {
    /// The word ranges the write hint was given, as (first word's address, words).
    static HINTED: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

fn note_hint(words: &[AtomicU64]) {
    HINTED.with(|h| h.borrow_mut().push((words.as_ptr() as usize, words.len())));
}

#[test]
fn each_write_hints_the_arena_one_window_past_its_record() {
    let layout = layout();
    let mut mem = region(&layout);
    let p = TaskPayloads::init(bytemuck::cast_slice_mut(&mut mem), &layout)
        .unwrap()
        .with_write_hint(note_hint);
    let (mut inside, mut clipped) = (0, 0);
    for local in 0..40 * WINDOW {
        let (nt, ns) = sizes(local);
        let id = TaskId::new(1, local);
        write(&p, id, &written(local, nt, ns));
        let hinted = HINTED.with(|h| h.borrow_mut().drain(..).collect::<Vec<_>>());
        assert_eq!(hinted.len(), 1, "one hint per write, task {local}");
        let (at, words) = hinted[0];
        let mut body = (0, 0);
        p.hint_record(id, |w| body = (w.as_ptr() as usize, w.len()));
        let past = body.0 + 8 * (body.1 + WRITE_AHEAD_WORDS);
        assert!(
            words <= WRITE_AHEAD_WORDS,
            "task {local}: {words} words hinted"
        );
        if words == WRITE_AHEAD_WORDS {
            assert_eq!(
                at, past,
                "task {local}: the window starts one window past the record"
            );
            inside += 1;
        } else {
            // Near the arena's end the window is cut short there (or empty past it).
            assert!(
                words == 0 || at == past,
                "task {local}: a cut window starts where a whole one would"
            );
            clipped += 1;
        }
    }
    assert!(
        inside > 0 && clipped > 0,
        "{inside} whole windows, {clipped} cut short"
    );
}

#[test]
fn patching_a_scalar_changes_that_scalar_only_and_refuses_one_past_the_count() {
    let layout = layout();
    let mut mem = region(&layout);
    let p = TaskPayloads::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    let id = TaskId::new(0, 3);
    let mut w = written(3, 2, 4);
    assert!(w.predicate.is_some(), "a predicate follows the scalars");
    write(&p, id, &w);
    assert!(p.patch_scalar(id, 1, 0xFEED));
    w.scalars[1] = 0xFEED;
    assert_reads(&p, id, &w);
    assert!(!p.patch_scalar(id, 4, 1));
    assert_reads(&p, id, &w);
}

#[test]
fn the_live_image_imports_into_a_fresh_region() {
    let layout = layout();
    let mut mem = region(&layout);
    let p = TaskPayloads::attach(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    let tasks = [WINDOW - 1, 3, 0, 0];
    let mut log = Vec::new();
    for (ring, &n) in tasks.iter().enumerate() {
        for local in 0..n {
            let (nt, ns) = sizes(local + ring as u32);
            let w = written(local, nt, ns);
            write(&p, TaskId::new(ring as u32, local), &w);
            log.push((TaskId::new(ring as u32, local), w));
        }
    }
    let mut image = vec![0u8; TaskPayloads::image_bound(&tasks)];
    let mut w = Writer::new(&mut image);
    p.export(&tasks, &mut w).unwrap();
    let len = w.len();
    // Only the used words travel: each record's task id, its head's three words and its body.
    let used: usize = log
        .iter()
        .map(|(_, w)| {
            4 + w.tensors.len() * TENSOR_WORDS
                + w.scalars.len()
                + 3 * w.predicate.is_some() as usize
        })
        .sum();
    assert_eq!(len, used * 8);

    let mut fresh = region(&layout);
    let q = TaskPayloads::init(bytemuck::cast_slice_mut(&mut fresh), &layout).unwrap();
    q.import(&tasks, &mut Reader::new(&image[..len])).unwrap();
    for (id, w) in &log {
        assert_reads(&q, *id, w);
    }
}

fn import_error(image_words: &[u64], tasks: [u32; 4]) -> ImageError {
    let layout = layout();
    let mut mem = region(&layout);
    let p = TaskPayloads::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    let bytes: Vec<u8> = image_words.iter().flat_map(|w| w.to_le_bytes()).collect();
    p.import(&tasks, &mut Reader::new(&bytes)).unwrap_err()
}

/// The first record of ring 0: its task id and head words.
fn head(nt: u64, ns: u64) -> [u64; 4] {
    [TaskId::new(0, 0).0, 0, 1 << 32, nt | ns << 32]
}

#[test]
fn an_image_over_the_caps_or_the_arena_is_refused_by_field() {
    let too_many_tensors = head(CORE_MAX_TENSOR_ARGS as u64 + 1, 0);
    assert_eq!(
        import_error(&too_many_tensors, [1, 0, 0, 0]),
        ImageError::Usage {
            field: "payload.tensors",
            value: CORE_MAX_TENSOR_ARGS as u64 + 1
        }
    );
    let too_many_scalars = head(0, CORE_MAX_SCALAR_ARGS as u64 + 1);
    assert_eq!(
        import_error(&too_many_scalars, [1, 0, 0, 0]),
        ImageError::Usage {
            field: "payload.scalars",
            value: CORE_MAX_SCALAR_ARGS as u64 + 1
        }
    );
    // More tasks than the ring has slots.
    assert_eq!(
        import_error(&[], [WINDOW + 1, 0, 0, 0]),
        ImageError::Usage {
            field: "payload.tasks",
            value: WINDOW as u64 + 1
        }
    );
    // Records out of task order within a ring, repeated, past a ring's count, or of a ring
    // that does not exist.
    let record = |ring: u32, local: u32| [TaskId::new(ring, local).0, 0, 1 << 32, 0];
    for (name, ids, tasks) in [
        ("skipped", vec![(0, 1)], [2, 0, 0, 0]),
        ("repeated", vec![(0, 0), (0, 0)], [2, 0, 0, 0]),
        ("past the count", vec![(1, 0)], [1, 0, 0, 0]),
        ("no such ring", vec![(7, 0)], [1, 0, 0, 0]),
    ] {
        let image: Vec<u64> = ids.iter().flat_map(|&(r, l)| record(r, l)).collect();
        assert!(
            matches!(
                import_error(&image, tasks),
                ImageError::Usage {
                    field: "payload.order",
                    ..
                }
            ),
            "{name}"
        );
    }
    // A truncated body is short, not garbage.
    let mut short = head(1, 0).to_vec();
    short.extend_from_slice(&[0u64; 4]);
    assert!(matches!(
        import_error(&short, [1, 0, 0, 0]),
        ImageError::Short { .. }
    ));
}

/// Whole-cap records with a predicate each: the largest a body gets.
#[test]
fn a_ring_of_whole_cap_records_fills_the_arena_exactly_and_imports() {
    let layout = layout();
    let mut mem = region(&layout);
    let p = TaskPayloads::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
    let tasks = [WINDOW, 0, 0, 0];
    let log: Vec<Written> = (0..WINDOW)
        .map(|l| Written {
            predicate: written(0, 0, 0).predicate,
            ..written(l, CORE_MAX_TENSOR_ARGS, CORE_MAX_SCALAR_ARGS)
        })
        .collect();
    for (l, w) in log.iter().enumerate() {
        write(&p, TaskId::new(0, l as u32), w);
    }
    let mut image = vec![0u8; TaskPayloads::image_bound(&tasks)];
    let mut w = Writer::new(&mut image);
    p.export(&tasks, &mut w).unwrap();
    let len = w.len();
    assert_eq!(len, TaskPayloads::image_bound(&tasks));
    let mut fresh = region(&layout);
    let q = TaskPayloads::init(bytemuck::cast_slice_mut(&mut fresh), &layout).unwrap();
    q.import(&tasks, &mut Reader::new(&image[..len])).unwrap();
    for (l, w) in log.iter().enumerate() {
        assert_reads(&q, TaskId::new(0, l as u32), w);
    }
}
