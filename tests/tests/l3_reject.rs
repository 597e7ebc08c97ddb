//! Level-3 refusals: the bad-input catalogue of `wire_abi_l3.md` §7, groups S (submit),
//! M (materialization / endpoint), C (control copy) and L (lifecycle), one test per rejection,
//! each asserting the specific error (variant and key fields, or the child's message). Every
//! refusal has a positive control next to it (the same path accepting a legal input), so no
//! assertion holds vacuously.
//!
//! Workers fork their children in `init()`, so this suite runs on the sequential runner of
//! `simpler_tests::forked` (`harness = false`): every test runs on the main thread and closes its
//! Worker (joining the scheduler thread) before the next one forks. The M tests drive an
//! [`ImportRegistry`] directly in this process; they need no fork.
//!
//! Not applicable here (each noted again at its group):
//! - S5 negative worker ids (chip indices are `usize`) and remote workers (there is no remote
//!   level); S6 everything but a REMOTE_SIDECAR tensor reaching a local worker (sidecar counts,
//!   placeholders with local backings, remote OUTPUT/DEVICE tensors, REMOTE_DEVICE owners all
//!   concern remote sidecars, which this runtime does not have).
//! - M9 (unknown digest) and M10 (bad lease): the parent always writes a registered digest and a
//!   valid lease, so no public path reaches them; the child-side checks exist (`child.rs`
//!   `lookup`, `lease.validate(1)`) and `PipelineSlotLease::validate` is covered by core's tests.
//! - C3 host side given as raw memory: `copy_to` / `copy_from` take `&Buffer`, so raw memory
//!   cannot be passed at all.
//!
//! Three tests at the end (`bug_*`) are regressions for bugs this suite found, now fixed.
#![forbid(unsafe_code)]

use simpler_core::mailbox::{CallConfig, ConfigError, ControlCopyRequest};
use simpler_core::{
    read_blob, AccessMode, AddressSpace, BackendKind, BufferDescriptor, CanonicalIdentity,
    DataType, Tensor, TensorArgType, TensorError, ValidTensor,
};
use simpler_host::l3::{
    Buffer, ChipCallableId, ForkRanges, ImportContext, ImportError, ImportRegistry, L3Error,
    L3Orch, Lifecycle, MappedArgs, SubCallableId, Worker, WorkerConfig,
};
use simpler_host::scenes::vector::VectorExample;
use simpler_host::scenes::Scene;
use simpler_host::{TaskArgs, TaskArgsError};
use simpler_tests::l3::{
    buffer, call_config, close, register_sub, targs, vector_f64, CLOSE, VECTOR_N as N,
    VECTOR_SHAPE as SHAPE,
};
use std::sync::Arc;
use std::time::Duration;

use AccessMode::{Read, ReadWrite, Write};
use BackendKind::{DeviceMalloc, ForkCow, ForkShm, PosixShm, RemoteSidecar, VmmWindow};
use TensorArgType::{InOut, Input, NoDep, Output, OutputExisting};

const VBYTES: u64 = (N * 4) as u64;
/// Buffer ids no Worker in this suite reaches (its counter starts at 1), for forged identities.
const FRESH: u64 = 1 << 40;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A small Worker: a 4 MiB FORK_SHM arena, the default device per chip.
fn config(chips: usize, subs: usize) -> WorkerConfig {
    let mut c = WorkerConfig::new(chips, subs);
    c.fork_arena_bytes = 4 << 20;
    c
}

/// SUB callable: writes every argument selected by the bit mask in scalar 0 (all without a
/// scalar) with `1000 * (i + 1) + k` at the view's row-major element `k`.
fn fill(args: &mut MappedArgs) -> Result<(), String> {
    let mask = args.scalars.first().copied().unwrap_or(u64::MAX);
    for (i, a) in args.args.iter_mut().enumerate() {
        if i >= 64 || mask & (1 << i) == 0 {
            continue;
        }
        let n: u32 = a.shapes.iter().product();
        let base = 1000.0 * (i + 1) as f32;
        let values: Vec<f32> = (0..n).map(|k| base + k as f32).collect();
        a.write_f32s(&values)
            .map_err(|e| format!("tensor {i}: {e}"))?;
    }
    Ok(())
}

/// What [`fill`] writes into argument `i` at element `k`.
fn filled(i: usize, k: usize) -> f32 {
    1000.0 * (i + 1) as f32 + k as f32
}

/// SUB callable: holds its arguments for 400 ms.
fn sleep(_: &mut MappedArgs) -> Result<(), String> {
    std::thread::sleep(Duration::from_millis(400));
    Ok(())
}

/// SUB callable: copies argument 0's bytes into argument 1.
fn copy(args: &mut MappedArgs) -> Result<(), String> {
    let src = args.args[0].bytes().to_vec();
    let dst = args.args[1].bytes_mut().map_err(|e| e.to_string())?;
    if dst.len() != src.len() {
        return Err(format!("copy: {} bytes into {}", src.len(), dst.len()));
    }
    dst.copy_from_slice(&src);
    Ok(())
}

/// A Worker with vector_example as its chip callable and three SUB callables.
struct Rig {
    w: Worker,
    vector: ChipCallableId,
    fill: SubCallableId,
    sleep: SubCallableId,
    copy: SubCallableId,
}

/// A registered but not yet initialized rig.
fn new_rig(chips: usize, subs: usize) -> Rig {
    let mut w = Worker::new(config(chips, subs)).expect("Worker::new");
    let p = VectorExample
        .prepare("default")
        .expect("vector_example has a default case");
    let vector = w
        .register_chip("vector_example", p.callable)
        .expect("register vector_example");
    let fill = register_sub(&mut w, "fill", fill);
    let sleep = register_sub(&mut w, "sleep", sleep);
    let copy = register_sub(&mut w, "copy", copy);
    Rig {
        w,
        vector,
        fill,
        sleep,
        copy,
    }
}

/// An initialized rig.
fn rig(chips: usize, subs: usize) -> Rig {
    let mut r = new_rig(chips, subs);
    r.w.init().expect("init");
    r
}

/// The whole of a vector-sized buffer as a 128 x 128 f32 tensor.
fn vt(b: &Buffer) -> ValidTensor {
    b.tensor(&SHAPE, DataType::Float32, 0)
        .expect("a 128x128 view")
}

/// A dense 1-D f32 tensor of `n` elements at `byte_offset`.
fn t1(b: &Buffer, n: u32, byte_offset: u64) -> ValidTensor {
    b.tensor(&[n], DataType::Float32, byte_offset)
        .expect("a 1-D view")
}

/// A well-formed descriptor with the given fields (generation 1).
fn forged(
    owner: [u8; 8],
    buffer_id: u64,
    space: AddressSpace,
    access: AccessMode,
    backend: BackendKind,
    nbytes: u64,
    body: &[u8],
) -> BufferDescriptor {
    BufferDescriptor::new(
        CanonicalIdentity::new(owner, buffer_id, 1),
        space,
        access,
        backend,
        nbytes,
        body,
    )
    .expect("the forged descriptor is itself well formed")
}

/// A DEVICE_MALLOC descriptor at `addr`.
fn device_desc(
    owner: [u8; 8],
    buffer_id: u64,
    access: AccessMode,
    nbytes: u64,
    addr: u64,
) -> BufferDescriptor {
    forged(
        owner,
        buffer_id,
        AddressSpace::Device,
        access,
        DeviceMalloc,
        nbytes,
        &addr.to_le_bytes(),
    )
}

fn addr_of(b: &Buffer) -> u64 {
    b.descriptor()
        .expect("live")
        .body_address()
        .expect("an address backend")
}

/// Runs one orchestration whose submit must be refused; returns the refusal. The run itself
/// must end cleanly with no task admitted.
fn refused(w: &Worker, f: impl FnOnce(&mut L3Orch<'_>) -> Result<u64, L3Error>) -> L3Error {
    let mut out = None;
    let summary = w
        .run(|o| {
            out = Some(f(o));
            Ok(())
        })
        .expect("a run whose only submit was refused still ends cleanly");
    assert_eq!(summary.tasks, 0, "a refused submit must not admit a task");
    match out.expect("the orchestration ran") {
        Ok(id) => panic!("submit was accepted (task {id}); expected a refusal"),
        Err(e) => e,
    }
}

/// The message of a chip child's refusal of a control request.
fn control_message(e: L3Error) -> String {
    match e {
        L3Error::Control { endpoint, message } => {
            assert_eq!(endpoint, "chip 0");
            message
        }
        other => panic!("expected a child's Control refusal, got {other:?}"),
    }
}

fn bytes_pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// vector_example's arguments: `a` and `b` whole as INPUT, then `f` tagged `tag`.
fn vector_args(a: &Buffer, b: &Buffer, f: ValidTensor, tag: TensorArgType) -> TaskArgs {
    targs(&[(vt(a), Input), (vt(b), Input), (f, tag)], &[])
}

/// Inputs a, b for vector_example (READ POSIX_SHM), with varied values.
fn vector_inputs(w: &Worker) -> (Buffer, Buffer, Vec<f32>, Vec<f32>) {
    let av: Vec<f32> = (0..N).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
    let bv: Vec<f32> = (0..N).map(|i| 1.0 - (i % 5) as f32 * 0.125).collect();
    let a = buffer(w, VBYTES, Read, PosixShm);
    let b = buffer(w, VBYTES, Read, PosixShm);
    a.write_f32s(0, &av).expect("write a");
    b.write_f32s(0, &bv).expect("write b");
    (a, b, av, bv)
}

fn assert_vector_output(out: &[f32], av: &[f32], bv: &[f32]) {
    assert_eq!(out.len(), N);
    for i in 0..N {
        let g = vector_f64(av[i] as f64, bv[i] as f64);
        let d = (out[i] as f64 - g).abs();
        assert!(
            d <= 1e-4 * g.abs().max(1.0),
            "element {i}: {} vs golden {g}",
            out[i]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// S: submit
// ---------------------------------------------------------------------------------------------

/// S1 (builder): INPUT over WRITE, OUTPUT_EXISTING over READ, INOUT over READ or WRITE are
/// refused when added, and by `set_tag` after a legal add. The builder is the first gate: a
/// `TaskArgs` holding such a tag cannot be built, so the "set_tag, then submit" path of the
/// reference is closed before submit; submit's own check is exercised by the next two tests.
fn s1_builder_refuses_tags_the_backing_does_not_grant() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let ro = buffer(&w, 64, Read, PosixShm);
    let wo = buffer(&w, 64, Write, PosixShm);
    let rw = buffer(&w, 64, ReadWrite, PosixShm);
    let cases = [
        (&wo, Input, Write),
        (&ro, OutputExisting, Read),
        (&ro, InOut, Read),
        (&wo, InOut, Write),
    ];
    for (b, tag, granted) in cases {
        let mut a = targs(&[(t1(&rw, 16, 0), Input)], &[]);
        assert_eq!(
            a.add_tensor(t1(b, 16, 0), tag),
            Err(TaskArgsError::AccessDenied {
                index: 1,
                tag,
                granted
            }),
            "{tag:?} over {granted:?}"
        );
        assert_eq!(a.tensor_count(), 1, "a refused add leaves nothing behind");
    }
    // set_tag after a legal add: refused, and the old tag stays.
    let mut a = targs(
        &[(t1(&ro, 16, 0), Input), (t1(&wo, 16, 0), OutputExisting)],
        &[],
    );
    for (index, tag, granted) in [
        (0, OutputExisting, Read),
        (0, InOut, Read),
        (1, Input, Write),
        (1, InOut, Write),
    ] {
        assert_eq!(
            a.set_tag(index, tag),
            Err(TaskArgsError::AccessDenied {
                index,
                tag,
                granted
            })
        );
    }
    assert_eq!(a.tags(), &[Input, OutputExisting]);
    // Positive control: what the backing grants is admitted.
    for tag in [Input, Output, InOut, OutputExisting, NoDep] {
        assert_eq!(a.clone().add_tensor(t1(&rw, 16, 0), tag), Ok(()));
    }
    assert_eq!(a.set_tag(0, NoDep), Ok(()));
    close(&mut w);
}

/// S1 (submit): at level 3 an OUTPUT writes into the caller's buffer, so it needs WRITE; the
/// builder admits OUTPUT over READ (the reference's matrix), submit refuses it.
fn s1_submit_refuses_output_over_read_backing() {
    let mut r = rig(1, 1);
    let ro = buffer(&r.w, VBYTES, Read, PosixShm);
    let wo = buffer(&r.w, VBYTES, Write, PosixShm);
    let side = buffer(&r.w, 64, ReadWrite, PosixShm);
    let (a, b, av, bv) = vector_inputs(&r.w);
    let cfg = call_config();

    // SUB: the builder admits it...
    let mut sub = TaskArgs::new();
    sub.add_tensor(t1(&side, 16, 0), Input)
        .expect("INPUT over READWRITE");
    sub.add_tensor(vt(&ro), Output)
        .expect("the builder admits OUTPUT over READ");
    sub.add_scalar(0b10);
    // ...submit does not, alone or in a group.
    let e = refused(&r.w, |o| o.submit_sub(r.fill, &sub));
    assert_eq!(
        e,
        L3Error::Access {
            index: 1,
            tag: Output,
            granted: Read
        }
    );
    let e = refused(&r.w, |o| o.submit_sub_group(r.fill, &[sub.clone()]));
    assert!(
        matches!(
            e,
            L3Error::Access {
                index: 1,
                tag: Output,
                granted: Read
            }
        ),
        "{e:?}"
    );

    // Chip.
    let chip = vector_args(&a, &b, vt(&ro), Output);
    let e = refused(&r.w, |o| o.submit_next_level(0, r.vector, &chip, &cfg));
    assert_eq!(
        e,
        L3Error::Access {
            index: 2,
            tag: Output,
            granted: Read
        }
    );

    // Positive control: OUTPUT over a WRITE buffer runs, on the chip and on the SUB worker.
    let chip = vector_args(&a, &b, vt(&wo), Output);
    r.w.run(|o| o.submit_next_level(0, r.vector, &chip, &cfg).map(drop))
        .expect("OUTPUT over WRITE runs on the chip");
    assert_vector_output(&wo.read_f32s(0, N).expect("read"), &av, &bv);
    let mut sub = targs(&[(t1(&side, 16, 0), Input), (t1(&wo, 16, 0), Output)], &[]);
    sub.add_scalar(0b10);
    r.w.run(|o| o.submit_sub(r.fill, &sub).map(drop))
        .expect("OUTPUT over WRITE runs on the SUB worker");
    let got = wo.read_f32s(0, 16).expect("read");
    assert_eq!(got, (0..16).map(|k| filled(1, k)).collect::<Vec<_>>());
    close(&mut r.w);
}

/// S1 (signature): a chip callable whose signature writes a tensor needs WRITE on its buffer
/// whatever the tag, even NO_DEP (which the builder and the tag rule admit over READ).
fn s1_signature_writes_need_write_even_when_no_dep() {
    let mut r = rig(1, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let ro = buffer(&r.w, VBYTES, Read, PosixShm);
    let rw = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let cfg = call_config();
    let args = vector_args(&a, &b, vt(&ro), NoDep);
    let e = refused(&r.w, |o| o.submit_next_level(0, r.vector, &args, &cfg));
    assert_eq!(
        e,
        L3Error::Access {
            index: 2,
            tag: NoDep,
            granted: Read
        }
    );
    // A tag against the signature's direction, and a wrong tensor count.
    let args = vector_args(&a, &b, vt(&rw), Input);
    let e = refused(&r.w, |o| o.submit_next_level(0, r.vector, &args, &cfg));
    assert_eq!(
        e,
        L3Error::DirectionTag {
            index: 2,
            tag: Input
        }
    );
    let args = targs(&[(vt(&a), Input), (vt(&b), Input)], &[]);
    let e = refused(&r.w, |o| o.submit_next_level(0, r.vector, &args, &cfg));
    assert_eq!(
        e,
        L3Error::Signature {
            expected: 3,
            got: 2
        }
    );
    // Positive control: NO_DEP over READWRITE is admitted and runs.
    let args = vector_args(&a, &b, vt(&rw), NoDep);
    let s =
        r.w.run(|o| o.submit_next_level(0, r.vector, &args, &cfg).map(drop))
            .expect("NO_DEP over READWRITE runs");
    assert_eq!(s.tasks, 1);
    close(&mut r.w);
}

/// S2: two writing arguments of one task over intersecting bytes of one identity: full
/// overlap, one shared element, column blocks that truly intersect.
fn s2_overlapping_writes_refused() {
    let mut r = rig(0, 2);
    // A 16 x 16 f32 matrix.
    let m = buffer(&r.w, 16 * 16 * 4, ReadWrite, ForkShm);
    let other = buffer(&r.w, 64, Read, PosixShm);
    let full = || {
        m.tensor(&[16, 16], DataType::Float32, 0)
            .expect("the whole matrix")
    };
    let cols = |first: u64| {
        m.tensor_strided(&[16, 4], &[16, 1], DataType::Float32, first * 4)
            .expect("a column block")
    };

    // Full overlap.
    let args = targs(&[(full(), OutputExisting), (full(), OutputExisting)], &[]);
    let e = refused(&r.w, |o| o.submit_sub(r.fill, &args));
    assert_eq!(
        e,
        L3Error::OverlappingWrites {
            first: 0,
            second: 1
        }
    );
    // One shared element: elements [0, 9) and [8, 16) of row 0, after an unrelated INPUT.
    let args = targs(
        &[
            (t1(&other, 16, 0), Input),
            (t1(&m, 9, 0), OutputExisting),
            (t1(&m, 8, 32), InOut),
        ],
        &[],
    );
    let e = refused(&r.w, |o| o.submit_sub(r.fill, &args));
    assert_eq!(
        e,
        L3Error::OverlappingWrites {
            first: 1,
            second: 2
        }
    );
    // Column blocks [:, 0:4] and [:, 3:7] share column 3.
    let args = targs(&[(cols(0), Output), (cols(3), OutputExisting)], &[]);
    let e = refused(&r.w, |o| o.submit_sub(r.fill, &args));
    assert_eq!(
        e,
        L3Error::OverlappingWrites {
            first: 0,
            second: 1
        }
    );
    // In a group member too.
    let good = targs(&[(cols(0), Output), (cols(8), Output)], &[]);
    let e = refused(&r.w, |o| {
        o.submit_sub_group(r.fill, &[good.clone(), args.clone()])
    });
    assert!(
        matches!(
            e,
            L3Error::OverlappingWrites {
                first: 0,
                second: 1
            }
        ),
        "{e:?}"
    );
    close(&mut r.w);
}

/// S2 accept: disjoint slices x[0] / x[1], interleaved but disjoint column blocks [:, 0:4] /
/// [:, 8:12] of a 16 x 16 matrix, and group members sharing one OUTPUT are admitted, run, and
/// write exactly their own elements.
fn s2_disjoint_writes_accepted_and_written() {
    let mut r = rig(0, 2);
    let x = buffer(&r.w, 2 * 8 * 4, ReadWrite, PosixShm);
    let m = buffer(&r.w, 16 * 16 * 4, ReadWrite, ForkShm);
    let g = buffer(&r.w, 8 * 4, ReadWrite, ForkShm);
    x.write_f32s(0, &[-1.0; 16]).expect("sentinel");
    m.write_f32s(0, &[-1.0; 256]).expect("sentinel");
    g.write_f32s(0, &[-1.0; 8]).expect("sentinel");
    let cols = |first: u64| {
        m.tensor_strided(&[16, 4], &[16, 1], DataType::Float32, first * 4)
            .expect("a column block")
    };
    let rows = targs(
        &[
            (t1(&x, 8, 0), OutputExisting),
            (t1(&x, 8, 32), OutputExisting),
        ],
        &[],
    );
    let blocks = targs(&[(cols(0), Output), (cols(8), InOut)], &[]);
    let member = targs(&[(t1(&g, 8, 0), OutputExisting)], &[]);
    let s =
        r.w.run(|o| {
            o.submit_sub(r.fill, &rows)?;
            o.submit_sub(r.fill, &blocks)?;
            o.submit_sub_group(r.fill, &[member.clone(), member.clone()])?;
            Ok(())
        })
        .expect("disjoint writes run");
    assert_eq!(s.tasks, 3);
    let xv = x.read_f32s(0, 16).expect("read x");
    for k in 0..8 {
        assert_eq!(xv[k], filled(0, k), "x[0][{k}]");
        assert_eq!(xv[8 + k], filled(1, k), "x[1][{k}]");
    }
    let mv = m.read_f32s(0, 256).expect("read m");
    for row in 0..16 {
        for col in 0..16 {
            let want = match col {
                0..=3 => filled(0, row * 4 + col),
                8..=11 => filled(1, row * 4 + col - 8),
                _ => -1.0,
            };
            assert_eq!(mv[row * 16 + col], want, "m[{row}][{col}]");
        }
    }
    let gv = g.read_f32s(0, 8).expect("read g");
    assert_eq!(gv, (0..8).map(|k| filled(0, k)).collect::<Vec<_>>());
    close(&mut r.w);
}

/// S3: a DEVICE tensor given to `submit_sub` / `submit_sub_group`.
fn s3_device_tensor_to_sub() {
    let mut r = rig(1, 1);
    let dev = r.w.alloc_child_tensor(0, 64).expect("alloc");
    let h = buffer(&r.w, 64, ReadWrite, PosixShm);
    let args = targs(&[(t1(&h, 16, 0), Input), (t1(&dev, 16, 0), Input)], &[]);
    let e = refused(&r.w, |o| o.submit_sub(r.fill, &args));
    assert_eq!(e, L3Error::DeviceToSub { index: 1 });
    let e = refused(&r.w, |o| {
        o.submit_sub_group(r.fill, std::slice::from_ref(&args))
    });
    assert_eq!(e, L3Error::DeviceToSub { index: 1 });
    // Positive control: the host half alone runs.
    let args = targs(&[(t1(&h, 16, 0), OutputExisting)], &[]);
    r.w.run(|o| o.submit_sub(r.fill, &args).map(drop))
        .expect("a host tensor runs on the SUB worker");
    close(&mut r.w);
}

/// S4: a DEVICE tensor given to a chip that does not own the allocation; it runs on its own
/// chip (the positive control, checked against the golden through `copy_from`).
fn s4_device_tensor_on_a_chip_that_does_not_own_it() {
    let mut r = rig(2, 0);
    let (a, b, av, bv) = vector_inputs(&r.w);
    let dev = r.w.alloc_child_tensor(1, VBYTES).expect("alloc on chip 1");
    assert_eq!(dev.chip(), Some(1));
    let args = vector_args(&a, &b, vt(&dev), OutputExisting);
    let cfg = call_config();
    let e = refused(&r.w, |o| o.submit_next_level(0, r.vector, &args, &cfg));
    match &e {
        L3Error::DeviceProvenance { index: 2, reason } => {
            assert!(reason.contains("lives on chip 1, not chip 0"), "{reason}")
        }
        other => panic!("expected DeviceProvenance for tensor 2, got {other:?}"),
    }
    // In a group, the member aimed at the wrong chip is refused.
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(r.vector, &[1, 0], &[args.clone(), args.clone()], &cfg)
    });
    assert!(
        matches!(e, L3Error::DeviceProvenance { index: 2, .. }),
        "{e:?}"
    );
    // Positive control: on chip 1 it runs in place.
    r.w.run(|o| o.submit_next_level(1, r.vector, &args, &cfg).map(drop))
        .expect("the owning chip runs it");
    let out = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    r.w.copy_from(&out, &dev, VBYTES).expect("copy_from");
    assert_vector_output(&out.read_f32s(0, N).expect("read"), &av, &bv);
    close(&mut r.w);
}

/// S4: a freed device buffer: `tensor()` refuses it (L1), and a tensor built before the release
/// names an address that is no longer a live allocation.
fn s4_freed_device_buffer() {
    let mut r = rig(1, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let dev = r.w.alloc_child_tensor(0, VBYTES).expect("alloc");
    let id = dev.identity().buffer_id;
    let before = vt(&dev);
    r.w.release_buffer(&dev).expect("release");
    assert_eq!(
        dev.tensor(&SHAPE, DataType::Float32, 0),
        Err(L3Error::BufferClosed { buffer_id: id })
    );
    let args = vector_args(&a, &b, before, OutputExisting);
    let e = refused(&r.w, |o| {
        o.submit_next_level(0, r.vector, &args, &call_config())
    });
    match &e {
        L3Error::DeviceProvenance { index: 2, reason } => assert!(
            reason.contains("not the start of a live allocation on chip 0"),
            "{reason}"
        ),
        other => panic!("expected DeviceProvenance for tensor 2, got {other:?}"),
    }
    close(&mut r.w);
}

/// S4: forged DEVICE descriptors under this Worker's nonce: an interior address, and the
/// allocation's address with a different size.
fn s4_forged_interior_device_pointer() {
    let mut r = rig(1, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let dev = r.w.alloc_child_tensor(0, VBYTES).expect("alloc");
    let addr = addr_of(&dev);
    let nonce = r.w.owner_instance_id();
    let cfg = call_config();
    let submit = |d: BufferDescriptor| {
        let f = Tensor::row_major(d, 0, &SHAPE, DataType::Float32).expect("a valid view");
        let args = vector_args(&a, &b, f, OutputExisting);
        refused(&r.w, |o| o.submit_next_level(0, r.vector, &args, &cfg))
    };
    let e = submit(device_desc(nonce, FRESH, ReadWrite, VBYTES, addr + 256));
    match &e {
        L3Error::DeviceProvenance { index: 2, reason } => {
            assert!(
                reason.contains("not the start of a live allocation"),
                "{reason}"
            )
        }
        other => panic!("expected DeviceProvenance, got {other:?}"),
    }
    let e = submit(device_desc(nonce, FRESH + 1, ReadWrite, 2 * VBYTES, addr));
    match &e {
        L3Error::DeviceProvenance { index: 2, reason } => {
            assert!(reason.contains("different size"), "{reason}")
        }
        other => panic!("expected DeviceProvenance, got {other:?}"),
    }
    close(&mut r.w);
}

/// S4: a DEVICE descriptor minted under another Worker's nonce, at a live address of this one.
fn s4_device_descriptor_of_another_worker() {
    let mut r = rig(1, 0);
    let mut other = Worker::new(config(1, 0)).expect("another Worker");
    assert_ne!(other.owner_instance_id(), r.w.owner_instance_id());
    let (a, b, _, _) = vector_inputs(&r.w);
    let dev = r.w.alloc_child_tensor(0, VBYTES).expect("alloc");
    let d = device_desc(
        other.owner_instance_id(),
        dev.identity().buffer_id,
        ReadWrite,
        VBYTES,
        addr_of(&dev),
    );
    let f = Tensor::row_major(d, 0, &SHAPE, DataType::Float32).expect("a valid view");
    let args = vector_args(&a, &b, f, OutputExisting);
    let e = refused(&r.w, |o| {
        o.submit_next_level(0, r.vector, &args, &call_config())
    });
    match &e {
        L3Error::DeviceProvenance { index: 2, reason } => {
            assert!(reason.contains("another Worker"), "{reason}")
        }
        other => panic!("expected DeviceProvenance, got {other:?}"),
    }
    close(&mut other);
    close(&mut r.w);
}

/// S5: a chip index past the Worker's chips. (Negative ids do not apply: indices are `usize`;
/// remote workers do not exist at this level.)
fn s5_unknown_chip() {
    let mut r = rig(1, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let f = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let args = vector_args(&a, &b, vt(&f), OutputExisting);
    let cfg = call_config();
    for chip in [1, 7, usize::MAX] {
        let e = refused(&r.w, |o| o.submit_next_level(chip, r.vector, &args, &cfg));
        assert_eq!(e, L3Error::UnknownChip { chip, chips: 1 });
    }
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(r.vector, &[0, 3], &[args.clone(), args.clone()], &cfg)
    });
    assert_eq!(e, L3Error::UnknownChip { chip: 3, chips: 1 });
    assert_eq!(
        r.w.alloc_child_tensor(1, 64).err(),
        Some(L3Error::UnknownChip { chip: 1, chips: 1 })
    );
    assert_eq!(
        r.w.send_raw_copy_request(1, true, &[0; 184]),
        Err(L3Error::UnknownChip { chip: 1, chips: 1 })
    );
    close(&mut r.w);
}

/// S5: one chip twice in a group.
fn s5_duplicate_chip_in_group() {
    let mut r = rig(2, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let f0 = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let f1 = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let args = |f: &Buffer| vector_args(&a, &b, vt(f), OutputExisting);
    let cfg = call_config();
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(r.vector, &[0, 0], &[args(&f0), args(&f1)], &cfg)
    });
    assert_eq!(e, L3Error::DuplicateChip { chip: 0 });
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(
            r.vector,
            &[1, 0, 1],
            &[args(&f0), args(&f1), args(&f0)],
            &cfg,
        )
    });
    assert_eq!(e, L3Error::DuplicateChip { chip: 1 });
    // Positive control: distinct chips form a group.
    let s =
        r.w.run(|o| {
            o.submit_next_level_group(r.vector, &[0, 1], &[args(&f0), args(&f1)], &cfg)
                .map(drop)
        })
        .expect("a group on distinct chips runs");
    assert_eq!(s.tasks, 1);
    close(&mut r.w);
}

/// S5: a group whose worker list and argument list differ in length (or are empty); a SUB
/// group larger than the SUB children.
fn s5_group_shape() {
    let mut r = rig(1, 1);
    let (a, b, _, _) = vector_inputs(&r.w);
    let f = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let args = vector_args(&a, &b, vt(&f), OutputExisting);
    let cfg = call_config();
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(r.vector, &[0], &[args.clone(), args.clone()], &cfg)
    });
    assert_eq!(
        e,
        L3Error::GroupShape {
            workers: 1,
            args: 2
        }
    );
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(r.vector, &[0, 0], std::slice::from_ref(&args), &cfg)
    });
    assert_eq!(
        e,
        L3Error::GroupShape {
            workers: 2,
            args: 1
        }
    );
    let e = refused(&r.w, |o| {
        o.submit_next_level_group(r.vector, &[], &[], &cfg)
    });
    assert_eq!(
        e,
        L3Error::GroupShape {
            workers: 0,
            args: 0
        }
    );
    let e = refused(&r.w, |o| o.submit_sub_group(r.fill, &[]));
    assert_eq!(
        e,
        L3Error::GroupShape {
            workers: 0,
            args: 0
        }
    );
    let h = buffer(&r.w, 64, ReadWrite, PosixShm);
    let sub = targs(&[(t1(&h, 16, 0), Input)], &[]);
    let e = refused(&r.w, |o| {
        o.submit_sub_group(r.fill, &[sub.clone(), sub.clone()])
    });
    assert_eq!(e, L3Error::NoSubWorkers { needed: 2, have: 1 });
    close(&mut r.w);
}

/// S5: a callable id this Worker never registered (one minted by a Worker with more
/// callables).
fn s5_unregistered_callable() {
    let mut r = rig(1, 1);
    let mut big = new_rig(0, 1);
    let p = VectorExample.prepare("default").expect("default case");
    let chip2 = big.w.register_chip("second", p.callable).expect("register");
    let sub4 = register_sub(&mut big.w, "fourth", fill);
    let (a, b, _, _) = vector_inputs(&r.w);
    let f = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let args = vector_args(&a, &b, vt(&f), OutputExisting);
    let e = refused(&r.w, |o| {
        o.submit_next_level(0, chip2, &args, &call_config())
    });
    assert_eq!(e, L3Error::UnknownCallable);
    let h = buffer(&r.w, 64, ReadWrite, PosixShm);
    let sub = targs(&[(t1(&h, 16, 0), Input)], &[]);
    let e = refused(&r.w, |o| o.submit_sub(sub4, &sub));
    assert_eq!(e, L3Error::UnknownCallable);
    close(&mut big.w);
    close(&mut r.w);
}

/// S6: a REMOTE_SIDECAR placeholder reaching a local worker (HOST or DEVICE space; both are
/// legal descriptors). The other S6 cases (sidecar counts, placeholders with a local backing,
/// remote OUTPUT / DEVICE without a sidecar, REMOTE_DEVICE owners) need remote sidecars, which
/// this runtime does not have.
fn s6_remote_sidecar_to_local_worker() {
    let mut r = rig(1, 1);
    let nonce = r.w.owner_instance_id();
    let (a, _, _, _) = vector_inputs(&r.w);
    let f = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let h = buffer(&r.w, 64, ReadWrite, PosixShm);
    for (i, space) in [AddressSpace::Host, AddressSpace::Device]
        .into_iter()
        .enumerate()
    {
        let d = forged(
            nonce,
            FRESH + i as u64,
            space,
            ReadWrite,
            RemoteSidecar,
            VBYTES,
            &[],
        );
        let side = Tensor::row_major(d, 0, &SHAPE, DataType::Float32).expect("a valid view");
        let chip = targs(
            &[(vt(&a), Input), (side, Input), (vt(&f), OutputExisting)],
            &[],
        );
        let e = refused(&r.w, |o| {
            o.submit_next_level(0, r.vector, &chip, &call_config())
        });
        assert_eq!(e, L3Error::RemoteSidecar { index: 1 }, "{space:?}");
        let sub = targs(&[(t1(&h, 16, 0), Input), (side, Input)], &[]);
        let e = refused(&r.w, |o| o.submit_sub(r.fill, &sub));
        assert_eq!(e, L3Error::RemoteSidecar { index: 1 }, "{space:?}");
    }
    close(&mut r.w);
}

/// S7: a diagnostic flag without an output prefix; bad RuntimeEnv values. Positive control: a
/// diagnostic flag with a prefix is admitted and runs.
fn s7_call_config_refused() {
    let mut r = rig(1, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let f = buffer(&r.w, VBYTES, ReadWrite, PosixShm);
    let args = vector_args(&a, &b, vt(&f), OutputExisting);
    let submit = |cfg: CallConfig| refused(&r.w, |o| o.submit_next_level(0, r.vector, &args, &cfg));
    type Flag = fn(&mut CallConfig);
    let flags: [Flag; 5] = [
        |c| c.enable_chip_swimlane = 1,
        |c| c.enable_dump_args = 1,
        |c| c.enable_pmu = 1,
        |c| c.enable_dep_gen = 1,
        |c| c.enable_scope_stats = 1,
    ];
    for set in flags {
        let mut cfg = call_config();
        set(&mut cfg);
        assert_eq!(
            submit(cfg),
            L3Error::Config(ConfigError::DiagnosticsWithoutPrefix)
        );
    }
    let with_env = |edit: fn(&mut simpler_core::mailbox::RuntimeEnv)| {
        let mut cfg = call_config();
        let mut env = cfg.runtime_env;
        edit(&mut env);
        cfg.runtime_env = env;
        cfg
    };
    assert_eq!(
        submit(with_env(|e| e.ring_task_window[0] = 6)),
        L3Error::Config(ConfigError::TaskWindow { ring: 0, value: 6 })
    );
    assert_eq!(
        submit(with_env(|e| e.ring_task_window[1] = 2)),
        L3Error::Config(ConfigError::TaskWindow { ring: 1, value: 2 })
    );
    assert_eq!(
        submit(with_env(|e| e.ring_heap[2] = 1023)),
        L3Error::Config(ConfigError::Heap {
            ring: 2,
            value: 1023
        })
    );
    assert_eq!(
        submit(with_env(|e| e.ring_dep_pool[3] = 3)),
        L3Error::Config(ConfigError::DepPool { ring: 3, value: 3 })
    );
    // Positive control.
    let mut cfg = with_env(|e| {
        e.ring_task_window[0] = 64;
        e.ring_heap[2] = 1024;
        e.ring_dep_pool[3] = 4;
    });
    cfg.enable_pmu = 1;
    cfg.output_prefix[..6].copy_from_slice(b"/tmp/x");
    let s =
        r.w.run(|o| o.submit_next_level(0, r.vector, &args, &cfg).map(drop))
            .expect("a valid config runs");
    assert_eq!(s.tasks, 1);
    close(&mut r.w);
}

// ---------------------------------------------------------------------------------------------
// M: materialization / endpoint (the registry driven in this process)
// ---------------------------------------------------------------------------------------------

/// M1: a host endpoint refuses every DEVICE backing, with the reason code.
fn m1_host_endpoint_refuses_device_backing() {
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    let owner = [7; 8];
    for (i, backend) in [DeviceMalloc, VmmWindow].into_iter().enumerate() {
        let d = forged(
            owner,
            FRESH + i as u64,
            AddressSpace::Device,
            ReadWrite,
            backend,
            256,
            &0x1000u64.to_le_bytes(),
        );
        let e = reg.materialize(&d).unwrap_err();
        assert!(matches!(e, ImportError::EndpointRelation { .. }), "{e:?}");
        assert!(
            e.to_string().contains("[UNSUPPORTED_ENDPOINT_RELATION]"),
            "{e}"
        );
        assert!(matches!(
            ImportContext::host().check(&d),
            Err(ImportError::EndpointRelation { .. })
        ));
    }
    assert!(reg.is_empty(), "a refused import leaves nothing behind");
}

/// M2: a device endpoint imports a DEVICE backing of its own Worker's nonce only (descriptor of
/// a real allocation).
fn m2_device_endpoint_checks_owner_nonce() {
    let mut r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let d = dev.descriptor().expect("live");
    let own = r.w.owner_instance_id();
    let mut foreign = own;
    foreign[0] ^= 0xff;
    let mut reg = ImportRegistry::new(ImportContext::device(foreign), ForkRanges::default());
    let e = reg.materialize(&d).unwrap_err();
    assert!(matches!(e, ImportError::EndpointRelation { .. }), "{e:?}");
    assert!(
        e.to_string().contains("[UNSUPPORTED_ENDPOINT_RELATION]"),
        "{e}"
    );
    assert!(reg.is_empty());
    // Same nonce: imported at the allocation's address, as device memory.
    let mut reg = ImportRegistry::new(ImportContext::device(own), ForkRanges::default());
    let imp = reg
        .materialize(&d)
        .expect("the owning Worker's device endpoint imports it");
    assert_eq!(imp.base(), addr_of(&dev));
    assert!(imp.is_device());
    assert!(imp.region().is_none());
    close(&mut r.w);
}

/// M3: REMOTE_SIDECAR never materializes in a local registry (host or device, either space).
fn m3_remote_sidecar_not_materialized() {
    let owner = [3; 8];
    for context in [ImportContext::host(), ImportContext::device(owner)] {
        let mut reg = ImportRegistry::new(context, ForkRanges::default());
        for (i, space) in [AddressSpace::Host, AddressSpace::Device]
            .into_iter()
            .enumerate()
        {
            let d = forged(owner, FRESH + i as u64, space, Read, RemoteSidecar, 64, &[]);
            let e = reg.materialize(&d).unwrap_err();
            // A DEVICE-space sidecar on a host endpoint meets the endpoint rule first.
            if space == AddressSpace::Device && context == ImportContext::host() {
                assert!(matches!(e, ImportError::EndpointRelation { .. }), "{e:?}");
            } else {
                assert_eq!(e, ImportError::RemoteSidecar, "{context:?} {space:?}");
            }
        }
        assert!(reg.is_empty());
    }
}

/// M4: the same identity under a different descriptor is refused with exactly the differing
/// fields named; the first mapping stays in use.
fn m4_conflict_names_only_differing_fields() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let b = buffer(&w, 4096, ReadWrite, PosixShm);
    let data = bytes_pattern(4096, 5);
    b.write(0, &data).expect("write");
    let d = b.descriptor().expect("live");
    let name = b.shm_name().expect("a POSIX_SHM buffer").to_string();
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    let base = reg.materialize(&d).expect("first import").base();

    let with = |space: AddressSpace,
                access: AccessMode,
                backend: BackendKind,
                nbytes: u64,
                body: &[u8]| {
        let mut v = BufferDescriptor::new(d.identity, space, access, backend, nbytes, body)
            .expect("a well-formed variant");
        v.owner_worker_path_id = d.owner_worker_path_id;
        v
    };
    let host = AddressSpace::Host;
    let mut path = d;
    path.owner_worker_path_id = 7;
    let cases: Vec<(BufferDescriptor, Vec<&str>)> = vec![
        (
            with(host, ReadWrite, PosixShm, 2048, name.as_bytes()),
            vec!["nbytes"],
        ),
        (
            with(host, ReadWrite, PosixShm, 4096, b"spl_someone_else"),
            vec!["body"],
        ),
        (
            with(host, Read, PosixShm, 4096, name.as_bytes()),
            vec!["access"],
        ),
        (
            with(host, ReadWrite, ForkShm, 4096, &0x4000u64.to_le_bytes()),
            vec!["backend_kind", "body"],
        ),
        (
            with(
                AddressSpace::Device,
                ReadWrite,
                DeviceMalloc,
                4096,
                &0x4000u64.to_le_bytes(),
            ),
            vec!["address_space", "backend_kind", "body"],
        ),
        (path, vec!["owner_worker_path_id"]),
        (
            with(host, Write, PosixShm, 8192, name.as_bytes()),
            vec!["access", "nbytes"],
        ),
    ];
    for (v, want) in cases {
        let e = reg.materialize(&v).unwrap_err();
        let ImportError::Conflict { identity, fields } = &e else {
            panic!("expected a Conflict for {want:?}, got {e:?}");
        };
        assert_eq!(*identity, d.identity);
        let mut names: Vec<&str> = fields
            .iter()
            .map(|f| f.split(':').next().unwrap_or(""))
            .collect();
        names.sort_unstable();
        let mut want_sorted = want.clone();
        want_sorted.sort_unstable();
        assert_eq!(names, want_sorted, "fields {fields:?}");
        for f in fields {
            assert!(f.contains(" -> "), "{f:?} is not `name: old -> new`");
        }
        if want == ["nbytes"] {
            assert_eq!(fields, &["nbytes: 4096 -> 2048".to_string()]);
        }
    }
    // The first mapping stays, at the same base, and still shows the owner's bytes.
    assert_eq!(reg.len(), 1);
    let again = reg.materialize(&d).expect("the original still imports");
    assert_eq!(again.base(), base);
    let resolved = reg.resolve(&d.identity).expect("resolves");
    assert_eq!(resolved.base(), base);
    assert_eq!(resolved.region().expect("host memory").bytes(), &data[..]);
    // Accept: padding does not make a conflict.
    let mut dirty = d;
    dirty._pad0 = [1, 2, 3];
    dirty._pad1 = 9;
    dirty.identity._pad = [0xAA; 12];
    assert_eq!(
        reg.materialize(&dirty).expect("padding is ignored").base(),
        base
    );
    drop(reg);
    close(&mut w);
}

/// M5: a POSIX_SHM name that no longer exists (the owner released the buffer).
fn m5_released_shm_not_found() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let b = buffer(&w, 4096, ReadWrite, PosixShm);
    let d = b.descriptor().expect("live");
    let name = b.shm_name().expect("POSIX_SHM").to_string();
    // Positive control: importable while it lives.
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    reg.materialize(&d).expect("imports while it lives");
    w.release_buffer(&b).expect("release");
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    assert_eq!(
        reg.materialize(&d).unwrap_err(),
        ImportError::NotFound { name }
    );
    assert!(reg.is_empty());
    close(&mut w);
}

/// M5 end to end: after the owner releases a POSIX_SHM buffer, `tensor()` refuses it (so a
/// submit cannot name it through the buffer), and a tensor built before the release never
/// reaches the bytes: today the SUB child refuses the unlinked name as not found (a submit-time
/// check against the Worker's live buffers would refuse it earlier; both are accepted here).
fn m5_released_shm_refused_end_to_end() {
    let mut r = rig(0, 1);
    let b = buffer(&r.w, 64, ReadWrite, PosixShm);
    let id = b.identity().buffer_id;
    let before = t1(&b, 16, 0);
    r.w.release_buffer(&b).expect("release");
    let e = refused(&r.w, |o| {
        let t = b.tensor(&[16], DataType::Float32, 0)?;
        o.submit_sub(r.fill, &targs(&[(t, OutputExisting)], &[]))
    });
    assert_eq!(e, L3Error::BufferClosed { buffer_id: id });
    let args = targs(&[(before, OutputExisting)], &[]);
    let mut submitted = None;
    let result = r.w.run(|o| {
        submitted = Some(o.submit_sub(r.fill, &args));
        Ok(())
    });
    match submitted.expect("the orchestration ran") {
        Err(e) => {
            assert!(
                matches!(e, L3Error::DeadBuffer { index: 0, buffer_id } if buffer_id == id),
                "{e:?}"
            );
            assert!(result.is_ok(), "{result:?}");
        }
        Ok(_) => match &result {
            Err(L3Error::TaskFailed {
                endpoint, message, ..
            }) => {
                assert_eq!(endpoint, "sub-worker 0");
                assert!(message.contains("does not exist"), "{message}");
            }
            other => panic!("expected the child to refuse the released name, got {other:?}"),
        },
    }
    close(&mut r.w);
}

/// M6: a POSIX_SHM object smaller than its descriptor claims (a fresh identity over the same
/// name).
fn m6_shm_smaller_than_descriptor() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let b = buffer(&w, 4096, ReadWrite, PosixShm);
    let name = b.shm_name().expect("POSIX_SHM").to_string();
    let nonce = w.owner_instance_id();
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    let big = forged(
        nonce,
        FRESH,
        AddressSpace::Host,
        ReadWrite,
        PosixShm,
        8192,
        name.as_bytes(),
    );
    assert_eq!(
        reg.materialize(&big).unwrap_err(),
        ImportError::TooSmall {
            name: name.clone(),
            size: 4096,
            nbytes: 8192
        }
    );
    assert!(reg.is_empty());
    // Positive control: a fresh identity claiming no more than the object imports.
    let fits = forged(
        nonce,
        FRESH + 1,
        AddressSpace::Host,
        ReadWrite,
        PosixShm,
        4096,
        name.as_bytes(),
    );
    reg.materialize(&fits).expect("fits");
    close(&mut w);
}

/// M7: resolving an identity never imported; a misaligned byte_offset is caught by the wire
/// gate before any registry sees it.
fn m7_not_imported_and_misaligned_offset() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let b = buffer(&w, 4096, ReadWrite, PosixShm);
    let d = b.descriptor().expect("live");
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    let e = reg.resolve(&d.identity).unwrap_err();
    assert_eq!(
        e,
        ImportError::NotImported {
            identity: d.identity
        }
    );
    reg.materialize(&d).expect("import");
    assert!(reg.resolve(&d.identity).is_ok(), "resolves once imported");
    let unknown = CanonicalIdentity::new(d.identity.owner_instance_id, FRESH, 1);
    assert_eq!(
        reg.resolve(&unknown).unwrap_err(),
        ImportError::NotImported { identity: unknown }
    );
    // Misaligned offsets.
    assert_eq!(
        Tensor::new(d, 2, &[4], &[1], DataType::Float32).err(),
        Some(TensorError::MisalignedOffset {
            byte_offset: 2,
            elem_size: 4
        })
    );
    assert_eq!(
        Tensor::new(d, 3, &[4], &[1], DataType::Float16).err(),
        Some(TensorError::MisalignedOffset {
            byte_offset: 3,
            elem_size: 2
        })
    );
    assert_eq!(
        b.tensor(&[4], DataType::Float32, 6),
        Err(L3Error::Tensor(TensorError::MisalignedOffset {
            byte_offset: 6,
            elem_size: 4
        }))
    );
    close(&mut w);
}

/// M8: a SUB task's blob holding a DEVICE tensor is refused by `mapped_args` (in a host and in
/// a device context alike).
fn m8_mapped_args_refuses_device_tensor() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let b = buffer(&w, 64, Read, PosixShm);
    let data: Vec<f32> = (0..16).map(|i| i as f32 * 1.5).collect();
    b.write_f32s(0, &data).expect("write");
    let nonce = w.owner_instance_id();
    let dev = device_desc(nonce, FRESH, ReadWrite, 64, 0x10_0000);
    let dev_t = Tensor::row_major(dev, 0, &[16], DataType::Float32).expect("a valid view");
    let args = targs(&[(t1(&b, 16, 0), Input), (dev_t, Input)], &[]);
    let blob = args.to_mailbox_blob().expect("encode");
    let view = read_blob(&blob).expect("decode");
    for context in [ImportContext::host(), ImportContext::device(nonce)] {
        let mut reg = ImportRegistry::new(context, ForkRanges::default());
        let e = reg.mapped_args(&view).unwrap_err();
        assert_eq!(e, ImportError::DeviceArgument { index: 1 }, "{context:?}");
    }
    // Positive control: the host tensor alone maps, with the owner's values.
    let blob = targs(&[(t1(&b, 16, 0), Input)], &[])
        .to_mailbox_blob()
        .expect("encode");
    let view = read_blob(&blob).expect("decode");
    let mut reg = ImportRegistry::new(ImportContext::host(), ForkRanges::default());
    let mapped = reg.mapped_args(&view).expect("maps");
    assert_eq!(mapped.args.len(), 1);
    assert_eq!(mapped.args[0].read_f32s(), data);
    assert!(!mapped.args[0].writable(), "a READ buffer maps read-only");
    drop(mapped);
    close(&mut w);
}

/// M (FORK_*): an address outside every range the process inherited is refused, even one that
/// is real memory of this process; the arena's own buffers resolve.
fn m_fork_address_outside_inherited_ranges() {
    let mut w = Worker::new(config(0, 1)).expect("Worker::new");
    let f = buffer(&w, 256, ReadWrite, ForkShm);
    let cow = buffer(&w, 256, Read, ForkCow);
    let data = bytes_pattern(256, 9);
    f.write(0, &data).expect("write");
    let mut reg = ImportRegistry::new(ImportContext::host(), w.fork_inherited());
    // Positive control: the arena buffer and the FORK_COW buffer resolve to themselves.
    let fd = f.descriptor().expect("live");
    let imp = reg.materialize(&fd).expect("inside the arena");
    assert_eq!(imp.base(), addr_of(&f));
    assert_eq!(imp.region().expect("host memory").bytes(), &data[..]);
    reg.materialize(&cow.descriptor().expect("live"))
        .expect("inside the FORK_COW mapping");
    let nonce = w.owner_instance_id();
    let local = vec![0u8; 256];
    let outside = local.as_ptr() as u64;
    for (i, backend, addr, nbytes) in [
        (0, ForkShm, outside, 256),
        (1, ForkCow, outside, 256),
        (2, ForkShm, 0x1000, 64),
        // Starts inside the arena, runs far past it.
        (3, ForkShm, addr_of(&f), 1 << 40),
    ] {
        let access = if backend == ForkCow { Read } else { ReadWrite };
        let d = forged(
            nonce,
            FRESH + i,
            AddressSpace::Host,
            access,
            backend,
            nbytes,
            &addr.to_le_bytes(),
        );
        assert_eq!(
            reg.materialize(&d).unwrap_err(),
            ImportError::NotInherited { addr, nbytes },
            "case {i}"
        );
    }
    assert_eq!(reg.len(), 2);
    drop(reg);
    close(&mut w);
}

// M9 (unknown or unprepared digest) and M10 (lease with reserved != 0 or slot >= frames) are
// not reachable through the public API: the parent always writes the digest of a registered
// callable and a valid lease. The child still checks both (`child.rs`: `lookup` refuses a
// digest that does not match its inherited table; `lease.validate(1)`), and core's mailbox
// tests cover `PipelineSlotLease::validate`.

// ---------------------------------------------------------------------------------------------
// C: control copies
// ---------------------------------------------------------------------------------------------

/// A one-chip rig for the raw control-copy cases: a 256-byte device buffer `dev`, a READ
/// POSIX_SHM `host` buffer holding `data` (`bytes_pattern(256, 1)`), and `good`, the valid
/// COPY_TO request of `host` into `dev`.
struct CopyCase {
    r: Rig,
    dev: Buffer,
    host: Buffer,
    data: Vec<u8>,
    good: ControlCopyRequest,
}

fn copy_case() -> CopyCase {
    let r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let host = buffer(&r.w, 256, Read, PosixShm);
    let data = bytes_pattern(256, 1);
    host.write(0, &data).expect("write");
    let good = ControlCopyRequest {
        dst: dev.descriptor().expect("live"),
        src: host.descriptor().expect("live"),
        nbytes: 256,
    };
    CopyCase {
        r,
        dev,
        host,
        data,
        good,
    }
}

/// The 256 bytes of device buffer `dev`, copied back through a fresh host buffer.
fn read_back(w: &Worker, dev: &Buffer) -> Vec<u8> {
    let back = buffer(w, 256, ReadWrite, PosixShm);
    w.copy_from(&back, dev, 256).expect("copy_from");
    let mut got = vec![0u8; 256];
    back.read(0, &mut got).expect("read");
    got
}

/// C1: a copy request whose dst or src descriptor is invalid is refused by the child before
/// use (sent raw, past the parent's own checks).
fn c1_invalid_descriptor_in_copy_request() {
    // `_host` stays bound: the request copies from it.
    let CopyCase {
        mut r,
        dev,
        host: _host,
        data,
        good,
    } = copy_case();
    type Corrupt = fn(&mut ControlCopyRequest);
    let cases: [(&str, Corrupt); 6] = [
        ("Dst(Magic", |q| q.dst.magic = 0),
        ("Dst(ZeroGeneration", |q| q.dst.identity.generation = 0),
        ("Dst(BackendKind", |q| q.dst.backend_kind = 0x63),
        ("Src(BodyTail", |q| {
            let at = q.src.body_len as usize;
            q.src.body[at] = 0x55;
        }),
        ("Src(ShmNameByte", |q| q.src.body[0] = b'/'),
        ("Src(BodyLen", |q| q.src.body_len = 0xFFFF),
    ];
    for (want, corrupt) in cases {
        let mut bad = good;
        corrupt(&mut bad);
        let e =
            r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&bad))
                .unwrap_err();
        let m = control_message(e);
        assert!(m.contains("copy request refused"), "{m}");
        assert!(m.contains(want), "{want}: {m}");
    }
    // Positive control: the uncorrupted request copies, and the data comes back.
    r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&good))
        .expect("a valid raw request");
    assert_eq!(read_back(&r.w, &dev), data);
    close(&mut r.w);
}

/// C2: the device side is a HOST buffer (refused by the parent, and by the child when forged).
fn c2_device_side_not_device_memory() {
    let mut r = rig(1, 0);
    let h1 = buffer(&r.w, 256, ReadWrite, PosixShm);
    let h2 = buffer(&r.w, 256, ReadWrite, ForkShm);
    for e in [
        r.w.copy_to(&h1, &h2, 64).unwrap_err(),
        r.w.copy_from(&h2, &h1, 64).unwrap_err(),
    ] {
        match &e {
            L3Error::CopyDevice { reason } => {
                assert!(reason.contains("is not device memory"), "{reason}")
            }
            other => panic!("expected CopyDevice, got {other:?}"),
        }
    }
    let req = ControlCopyRequest {
        dst: h1.descriptor().expect("live"),
        src: h2.descriptor().expect("live"),
        nbytes: 64,
    };
    for to_device in [true, false] {
        let m = control_message(
            r.w.send_raw_copy_request(0, to_device, bytemuck::bytes_of(&req))
                .unwrap_err(),
        );
        assert!(m.contains("the device side is not device memory"), "{m}");
    }
    close(&mut r.w);
}

/// C2: a device descriptor whose access does not grant the direction (forged: the parent only
/// mints READWRITE device buffers), and one of another Worker's nonce.
fn c2_device_access_does_not_grant_direction() {
    let mut r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let addr = addr_of(&dev);
    let nonce = r.w.owner_instance_id();
    let hr = buffer(&r.w, 256, Read, PosixShm);
    let hw = buffer(&r.w, 256, ReadWrite, PosixShm);
    let ro = device_desc(nonce, FRESH, Read, 256, addr);
    let wo = device_desc(nonce, FRESH + 1, Write, 256, addr);
    let to = ControlCopyRequest {
        dst: ro,
        src: hr.descriptor().expect("live"),
        nbytes: 256,
    };
    let from = ControlCopyRequest {
        dst: hw.descriptor().expect("live"),
        src: wo,
        nbytes: 256,
    };
    for (to_device, req) in [(true, to), (false, from)] {
        let m = control_message(
            r.w.send_raw_copy_request(0, to_device, bytemuck::bytes_of(&req))
                .unwrap_err(),
        );
        assert!(
            m.contains("the device buffer's access does not grant this copy"),
            "{m}"
        );
    }
    // Another Worker's nonce at a live address of this one.
    let mut foreign = nonce;
    foreign[7] ^= 0x5a;
    let req = ControlCopyRequest {
        dst: device_desc(foreign, FRESH + 2, ReadWrite, 256, addr),
        src: hr.descriptor().expect("live"),
        nbytes: 256,
    };
    let m = control_message(
        r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&req))
            .unwrap_err(),
    );
    assert!(m.contains("[UNSUPPORTED_ENDPOINT_RELATION]"), "{m}");
    // Positive control: the same directions with the granting access go through.
    let rw = device_desc(nonce, FRESH + 3, ReadWrite, 256, addr);
    let ok = ControlCopyRequest { dst: rw, ..to };
    r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&ok))
        .expect("READWRITE grants COPY_TO");
    let wo_to = ControlCopyRequest { dst: wo, ..to };
    r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&wo_to))
        .expect("WRITE grants COPY_TO");
    let ro_from = ControlCopyRequest { src: ro, ..from };
    r.w.send_raw_copy_request(0, false, bytemuck::bytes_of(&ro_from))
        .expect("READ grants COPY_FROM");
    close(&mut r.w);
}

/// C2: more bytes than the device buffer holds (parent and child).
fn c2_nbytes_exceeds_device_buffer() {
    let mut r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let hr = buffer(&r.w, 1024, Read, PosixShm);
    let hw = buffer(&r.w, 1024, ReadWrite, PosixShm);
    for e in [
        r.w.copy_to(&dev, &hr, 257).unwrap_err(),
        r.w.copy_from(&hw, &dev, 512).unwrap_err(),
    ] {
        match &e {
            L3Error::CopyDevice { reason } => {
                assert!(
                    reason.contains("exceed the device buffer's 256"),
                    "{reason}"
                )
            }
            other => panic!("expected CopyDevice, got {other:?}"),
        }
    }
    let req = ControlCopyRequest {
        dst: dev.descriptor().expect("live"),
        src: hr.descriptor().expect("live"),
        nbytes: 257,
    };
    let m = control_message(
        r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&req))
            .unwrap_err(),
    );
    assert!(m.contains("257 bytes exceed a side"), "{m}");
    // Positive control: exactly the device buffer's size.
    r.w.copy_to(&dev, &hr, 256).expect("fits");
    close(&mut r.w);
}

/// C2: a released device buffer is refused before any request is sent.
fn c2_released_device_buffer() {
    let mut r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let id = dev.identity().buffer_id;
    let hr = buffer(&r.w, 256, Read, PosixShm);
    let hw = buffer(&r.w, 256, ReadWrite, PosixShm);
    r.w.copy_to(&dev, &hr, 256)
        .expect("positive control while live");
    r.w.release_buffer(&dev).expect("release");
    assert_eq!(
        r.w.copy_to(&dev, &hr, 256),
        Err(L3Error::BufferClosed { buffer_id: id })
    );
    assert_eq!(
        r.w.copy_from(&hw, &dev, 256),
        Err(L3Error::BufferClosed { buffer_id: id })
    );
    close(&mut r.w);
}

/// C2: a device range that is not live on the chip (forged, past the parent): a freed
/// allocation's address, and an interior address whose range runs past its allocation. The
/// child's ChipWorker refuses with its DeviceRange error.
fn c2_device_range_not_live() {
    let mut r = rig(1, 0);
    let nonce = r.w.owner_instance_id();
    let hr = buffer(&r.w, 256, Read, PosixShm);
    let live = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let live_addr = addr_of(&live);
    let gone = r.w.alloc_child_tensor(0, 256).expect("alloc");
    let gone_addr = addr_of(&gone);
    assert_ne!(gone_addr, live_addr);
    r.w.release_buffer(&gone).expect("release");
    for (i, addr) in [gone_addr, live_addr + 128].into_iter().enumerate() {
        let req = ControlCopyRequest {
            dst: device_desc(nonce, FRESH + i as u64, ReadWrite, 256, addr),
            src: hr.descriptor().expect("live"),
            nbytes: 256,
        };
        let m = control_message(
            r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&req))
                .unwrap_err(),
        );
        assert!(
            m.contains("not inside one live device allocation"),
            "{addr:#x}: {m}"
        );
    }
    // Positive control: the live allocation's own address.
    let req = ControlCopyRequest {
        dst: device_desc(nonce, FRESH + 9, ReadWrite, 256, live_addr),
        src: hr.descriptor().expect("live"),
        nbytes: 256,
    };
    r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&req))
        .expect("a live range copies");
    close(&mut r.w);
}

/// C3: the host side is DEVICE memory; a host buffer lacking READ (copy_to) or WRITE
/// (copy_from); a host buffer shorter than the copy. (Raw memory does not apply: the API takes
/// `&Buffer`.)
fn c3_host_side_refused() {
    let mut r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 1024).expect("alloc");
    let dev2 = r.w.alloc_child_tensor(0, 1024).expect("alloc");
    let host_wo = buffer(&r.w, 1024, Write, PosixShm);
    let host_ro = buffer(&r.w, 1024, Read, PosixShm);
    let small = buffer(&r.w, 256, ReadWrite, ForkShm);
    let host_side = |e: L3Error, want: &str| match &e {
        L3Error::CopyHost { reason } => assert!(reason.contains(want), "{want}: {reason}"),
        other => panic!("expected CopyHost ({want}), got {other:?}"),
    };
    host_side(r.w.copy_to(&dev, &dev2, 64).unwrap_err(), "DEVICE");
    host_side(r.w.copy_from(&dev2, &dev, 64).unwrap_err(), "DEVICE");
    host_side(r.w.copy_to(&dev, &host_wo, 64).unwrap_err(), "reading");
    host_side(r.w.copy_from(&host_ro, &dev, 64).unwrap_err(), "writing");
    host_side(
        r.w.copy_to(&dev, &small, 512).unwrap_err(),
        "exceed the host buffer's 256",
    );
    // The child refuses the same access faults on its own.
    for (to_device, host) in [(true, &host_wo), (false, &host_ro)] {
        let (dst, src) = if to_device {
            (
                dev.descriptor().expect("live"),
                host.descriptor().expect("live"),
            )
        } else {
            (
                host.descriptor().expect("live"),
                dev.descriptor().expect("live"),
            )
        };
        let req = ControlCopyRequest {
            dst,
            src,
            nbytes: 64,
        };
        let m = control_message(
            r.w.send_raw_copy_request(0, to_device, bytemuck::bytes_of(&req))
                .unwrap_err(),
        );
        assert!(
            m.contains("the host buffer's access does not grant this copy"),
            "{m}"
        );
    }
    // Positive controls: the opposite directions are what those buffers grant.
    r.w.copy_to(&dev, &host_ro, 64)
        .expect("READ host grants copy_to");
    r.w.copy_from(&host_wo, &dev, 64)
        .expect("WRITE host grants copy_from");
    close(&mut r.w);
}

/// Positive control for group C: copy_to then copy_from returns the bytes exactly (POSIX_SHM
/// and FORK_SHM host sides), and a partial copy_from touches only its prefix.
fn c_round_trip_returns_the_data() {
    let mut r = rig(1, 0);
    let dev = r.w.alloc_child_tensor(0, 1024).expect("alloc");
    let src = buffer(&r.w, 1024, Read, PosixShm);
    let data = bytes_pattern(1024, 77);
    src.write(0, &data).expect("write");
    r.w.copy_to(&dev, &src, 1024).expect("copy_to");
    for backend in [PosixShm, ForkShm] {
        let out = buffer(&r.w, 1024, Write, backend);
        out.write(0, &[0xEE; 1024]).expect("sentinel");
        r.w.copy_from(&out, &dev, 1024).expect("copy_from");
        let mut got = vec![0u8; 1024];
        out.read(0, &mut got).expect("read");
        assert_eq!(got, data, "{backend:?}");
    }
    let part = buffer(&r.w, 1024, ReadWrite, ForkShm);
    part.write(0, &[0xEE; 1024]).expect("sentinel");
    r.w.copy_from(&part, &dev, 512).expect("copy_from prefix");
    let mut got = vec![0u8; 1024];
    part.read(0, &mut got).expect("read");
    assert_eq!(&got[..512], &data[..512]);
    assert!(
        got[512..].iter().all(|&b| b == 0xEE),
        "past the prefix is untouched"
    );
    close(&mut r.w);
}

// ---------------------------------------------------------------------------------------------
// L: lifecycle
// ---------------------------------------------------------------------------------------------

/// L1: `tensor()`, `tensor_strided()`, `descriptor()` (and host access) on a released buffer;
/// releasing twice; releasing another Worker's buffer.
fn l1_released_buffer_refuses_derivation() {
    let mut r = rig(0, 1);
    for backend in [PosixShm, ForkShm] {
        let b = buffer(&r.w, 64, ReadWrite, backend);
        let id = b.identity().buffer_id;
        assert!(
            b.tensor(&[16], DataType::Float32, 0).is_ok(),
            "positive control"
        );
        assert!(b.descriptor().is_ok(), "positive control");
        r.w.release_buffer(&b).expect("release");
        assert!(b.is_closed());
        let closed = L3Error::BufferClosed { buffer_id: id };
        assert_eq!(b.tensor(&[16], DataType::Float32, 0), Err(closed.clone()));
        assert_eq!(
            b.tensor_strided(&[4, 4], &[4, 1], DataType::Float32, 0),
            Err(closed.clone())
        );
        assert_eq!(
            r.w.make_tensor_arg(&b, &[16], DataType::Float32, 0),
            Err(closed.clone())
        );
        assert_eq!(b.descriptor(), Err(closed.clone()));
        assert_eq!(b.write(0, &[1]), Err(closed.clone()));
        assert_eq!(b.read_f32s(0, 1), Err(closed.clone()));
        assert_eq!(r.w.release_buffer(&b), Err(closed), "{backend:?}");
    }
    let mut other = Worker::new(config(0, 1)).expect("another Worker");
    let theirs = buffer(&other, 64, ReadWrite, PosixShm);
    assert_eq!(
        r.w.release_buffer(&theirs),
        Err(L3Error::UnknownBuffer {
            buffer_id: theirs.identity().buffer_id
        })
    );
    assert!(!theirs.is_closed());
    close(&mut other);
    close(&mut r.w);
}

/// L2: `release_buffer` while the run in flight names the buffer, including a run whose wait
/// timed out (abandoned by its caller for now); after the run ends the release succeeds.
fn l2_release_while_run_in_flight() {
    let mut r = rig(0, 1);
    let b = buffer(&r.w, 64, ReadWrite, PosixShm);
    let unrelated = buffer(&r.w, 64, ReadWrite, PosixShm);
    let id = b.identity().buffer_id;
    let args = targs(&[(t1(&b, 16, 0), Input)], &[]);
    let handle = match r.w.submit(|o| o.submit_sub(r.sleep, &args).map(drop)) {
        Ok(h) => h,
        Err(e) => panic!("submit: {e:?}"),
    };
    assert_eq!(
        r.w.release_buffer(&b),
        Err(L3Error::BufferInUse { buffer_id: id })
    );
    assert!(!b.is_closed(), "a refused release leaves the buffer live");
    assert!(b.tensor(&[16], DataType::Float32, 0).is_ok());
    assert_eq!(
        handle.wait(Some(Duration::from_millis(10))),
        Err(L3Error::WaitTimeout)
    );
    assert_eq!(
        r.w.release_buffer(&b),
        Err(L3Error::BufferInUse { buffer_id: id })
    );
    // A buffer the run does not name is released meanwhile.
    r.w.release_buffer(&unrelated)
        .expect("not named by the run");
    let s = handle
        .wait(Some(Duration::from_secs(20)))
        .expect("the run ends");
    assert_eq!(s.tasks, 1);
    r.w.release_buffer(&b).expect("released once the run ended");
    assert!(b.is_closed());
    close(&mut r.w);
}

/// L3: `create_buffer(0)` (every backend) and `alloc_child_tensor(_, 0)`; backends
/// `create_buffer` cannot make.
fn l3_zero_size_buffer() {
    let mut r = new_rig(1, 0);
    for (backend, access) in [(PosixShm, ReadWrite), (ForkShm, ReadWrite), (ForkCow, Read)] {
        assert_eq!(
            r.w.create_buffer(0, access, backend).err(),
            Some(L3Error::ZeroSizeBuffer),
            "{backend:?}"
        );
    }
    for (backend, raw) in [(VmmWindow, 2), (RemoteSidecar, 3), (DeviceMalloc, 4)] {
        assert_eq!(
            r.w.create_buffer(64, ReadWrite, backend).err(),
            Some(L3Error::UnsupportedBackend { backend: raw })
        );
    }
    r.w.init().expect("init");
    assert_eq!(
        r.w.alloc_child_tensor(0, 0).err(),
        Some(L3Error::ZeroSizeBuffer)
    );
    assert!(r.w.alloc_child_tensor(0, 1).is_ok(), "positive control");
    close(&mut r.w);
}

/// L3: at level 3 a Worker with no chip and no SUB child has no consumer for a buffer.
fn l3_no_buffer_consumer() {
    let mut w = Worker::new(config(0, 0)).expect("Worker::new");
    for (backend, access) in [(PosixShm, ReadWrite), (ForkShm, ReadWrite), (ForkCow, Read)] {
        assert_eq!(
            w.create_buffer(64, access, backend).err(),
            Some(L3Error::NoBufferConsumer),
            "{backend:?}"
        );
    }
    close(&mut w);
}

/// L3: FORK_COW after `init()` (children inherit it at fork), and FORK_COW granting a write.
/// Positive control: a READ FORK_COW buffer made before init is read by a SUB task.
fn l3_fork_cow_rules() {
    let mut r = new_rig(0, 1);
    for access in [ReadWrite, Write] {
        assert_eq!(
            r.w.create_buffer(64, access, ForkCow).err(),
            Some(L3Error::ForkCowAccess),
            "{access:?}"
        );
    }
    let cow = buffer(&r.w, 64, Read, ForkCow);
    let data = bytes_pattern(64, 3);
    cow.write(0, &data)
        .expect("the owner fills it before the fork");
    r.w.init().expect("init");
    assert_eq!(
        r.w.create_buffer(64, Read, ForkCow).err(),
        Some(L3Error::ForkCowAfterInit)
    );
    let out = buffer(&r.w, 64, ReadWrite, ForkShm);
    let args = targs(
        &[(t1(&cow, 16, 0), Input), (t1(&out, 16, 0), OutputExisting)],
        &[],
    );
    r.w.run(|o| o.submit_sub(r.copy, &args).map(drop))
        .expect("a SUB task reads the snapshot");
    let mut got = vec![0u8; 64];
    out.read(0, &mut got).expect("read");
    assert_eq!(got, data);
    close(&mut r.w);
}

/// Lifecycle: registering after `init()`.
fn l_register_after_init() {
    let mut r = rig(0, 1);
    assert_eq!(
        r.w.register_sub("late", Arc::new(fill)).err(),
        Some(L3Error::RegisterAfterInit)
    );
    let p = VectorExample.prepare("default").expect("default case");
    assert_eq!(
        r.w.register_chip("late", p.callable).err(),
        Some(L3Error::RegisterAfterInit)
    );
    close(&mut r.w);
}

/// Lifecycle: runs, device memory and copies before `init()`.
fn l_use_before_init() {
    let mut r = new_rig(1, 1);
    assert_eq!(r.w.lifecycle(), Lifecycle::New);
    let b = buffer(&r.w, 64, ReadWrite, PosixShm);
    assert_eq!(r.w.run(|_| Ok(())).err(), Some(L3Error::NotInitialized));
    assert!(matches!(
        r.w.submit(|_| Ok(())),
        Err(L3Error::NotInitialized)
    ));
    assert_eq!(
        r.w.alloc_child_tensor(0, 64).err(),
        Some(L3Error::NotInitialized)
    );
    assert_eq!(r.w.copy_to(&b, &b, 64), Err(L3Error::NotInitialized));
    assert_eq!(r.w.copy_from(&b, &b, 64), Err(L3Error::NotInitialized));
    assert_eq!(
        r.w.send_raw_copy_request(0, true, &[0; 184]),
        Err(L3Error::NotInitialized)
    );
    assert_eq!(r.w.chip_pid(0), None);
    close(&mut r.w);
}

/// Lifecycle: `init()` twice, and after close.
fn l_init_twice() {
    let mut r = rig(0, 1);
    assert_eq!(r.w.init(), Err(L3Error::AlreadyInitialized));
    assert_eq!(
        r.w.lifecycle(),
        Lifecycle::Ready,
        "a refused init changes nothing"
    );
    let b = buffer(&r.w, 64, ReadWrite, PosixShm);
    let args = targs(&[(t1(&b, 16, 0), OutputExisting)], &[]);
    r.w.run(|o| o.submit_sub(r.fill, &args).map(drop))
        .expect("still serves runs");
    close(&mut r.w);
    assert_eq!(r.w.init(), Err(L3Error::AlreadyInitialized));
}

/// Lifecycle: everything after `close()`; close again is a no-op; buffers were released.
fn l_use_after_close() {
    let mut r = rig(1, 1);
    let b = buffer(&r.w, 64, ReadWrite, PosixShm);
    let dev = r.w.alloc_child_tensor(0, 64).expect("alloc");
    let id = b.identity().buffer_id;
    close(&mut r.w);
    assert_eq!(r.w.run(|_| Ok(())).err(), Some(L3Error::Closed));
    assert!(matches!(r.w.submit(|_| Ok(())), Err(L3Error::Closed)));
    assert_eq!(
        r.w.create_buffer(64, ReadWrite, PosixShm).err(),
        Some(L3Error::Closed)
    );
    assert_eq!(r.w.alloc_child_tensor(0, 64).err(), Some(L3Error::Closed));
    assert_eq!(
        r.w.send_raw_copy_request(0, true, &[0; 184]),
        Err(L3Error::Closed)
    );
    // close() released every buffer.
    assert!(b.is_closed() && dev.is_closed());
    assert_eq!(r.w.copy_to(&dev, &b, 64), Err(L3Error::Closed));
    assert_eq!(
        b.tensor(&[16], DataType::Float32, 0),
        Err(L3Error::BufferClosed { buffer_id: id })
    );
    assert_eq!(
        r.w.register_sub("late", Arc::new(fill)).err(),
        Some(L3Error::RegisterAfterInit)
    );
    assert_eq!(r.w.close(CLOSE), Ok(()), "close is idempotent");
}

// ---------------------------------------------------------------------------------------------
// Regressions: three bugs this suite found in host/src/l3 (a stale tensor admitted after its
// buffer's release, twice; a short copy request completed from stale bytes), now fixed.
// ---------------------------------------------------------------------------------------------

/// Whether a refusal names the released buffer `id` at argument `index`.
fn names_released(e: &L3Error, id: u64, index: usize) -> bool {
    matches!(e, L3Error::DeadBuffer { index: i, buffer_id } if *i == index && *buffer_id == id)
}

/// Regression (S4 freed pointer / L1; was: `check_device_args` (`host/src/l3/orch.rs`, `L3Orch::check_device_args`)
/// checks only the nonce and that (chip, address, nbytes) is a live allocation, not that the
/// tensor's identity is a live buffer. After `release_buffer` frees a device buffer, the next
/// `alloc_child_tensor` of the same size gets the same address, and a tensor built before the
/// release is admitted and runs, writing the new buffer under the old identity (so the
/// TensorMap, keyed by identity, orders nothing between the two).
fn bug_stale_device_tensor_after_address_reuse() {
    let mut r = rig(1, 0);
    let (a, b, _, _) = vector_inputs(&r.w);
    let dev = r.w.alloc_child_tensor(0, VBYTES).expect("alloc");
    let id = dev.identity().buffer_id;
    let stale = vt(&dev);
    r.w.release_buffer(&dev).expect("release");
    let reused = r.w.alloc_child_tensor(0, VBYTES).expect("alloc");
    assert_eq!(
        addr_of(&reused),
        stale.buffer.body_address().expect("address"),
        "precondition: the allocator reuses the freed address"
    );
    let args = vector_args(&a, &b, stale, OutputExisting);
    let e = refused(&r.w, |o| {
        o.submit_next_level(0, r.vector, &args, &call_config())
    });
    assert!(names_released(&e, id, 2), "{e:?}");
    close(&mut r.w);
}

/// Regression (L1 / use after release; was: `submit_sub` (and `submit_next_level`) never check that a
/// host tensor's identity is a live buffer of the Worker. A tensor of a released FORK_SHM buffer
/// is admitted; the SUB child resolves its address inside the inherited arena and writes it.
/// Once the last handle drops, the arena slice is reused by the next FORK_SHM buffer, so the
/// stale task overwrites another live buffer (here `g`). POSIX_SHM is saved only because its
/// name is unlinked (the child refuses it, see m5_released_shm_refused_end_to_end).
fn bug_stale_fork_shm_tensor_after_release() {
    let mut r = rig(0, 1);
    let f = buffer(&r.w, 64, ReadWrite, ForkShm);
    let id = f.identity().buffer_id;
    let stale = t1(&f, 16, 0);
    r.w.release_buffer(&f).expect("release");
    drop(f);
    let g = buffer(&r.w, 64, ReadWrite, ForkShm);
    g.write_f32s(0, &[-1.0; 16]).expect("sentinel");
    let args = targs(&[(stale, OutputExisting)], &[]);
    let mut submitted = None;
    let result = r.w.run(|o| {
        submitted = Some(o.submit_sub(r.fill, &args));
        Ok(())
    });
    let g_now = g.read_f32s(0, 16).expect("read g");
    assert_eq!(
        g_now,
        vec![-1.0; 16],
        "a released buffer's task wrote another buffer"
    );
    match submitted.expect("the orchestration ran") {
        Err(e) => assert!(names_released(&e, id, 0), "{e:?}"),
        Ok(task) => panic!("task {task} over a released buffer was admitted ({result:?})"),
    }
    close(&mut r.w);
}

/// Regression (C1, truncated request; was: a control payload shorter than a `ControlCopyRequest` is not
/// refused. `Mailbox::post_control` (l3/mailbox.rs) writes only the payload's bytes and sends no
/// length; the child (`child.rs`, `control`) reads 184 bytes from the 64,048-byte slot, so
/// `CopyRequestError::Truncated` can never fire and the rest of the request is the previous
/// request's stale bytes. Here an empty payload re-executes the previous COPY_TO. Only the
/// test hook `send_raw_copy_request` can send a short payload (`copy_to` / `copy_from` always
/// send 184 bytes).
fn bug_truncated_copy_request_executes_stale_bytes() {
    let CopyCase {
        mut r,
        dev,
        host,
        data: first,
        good,
    } = copy_case();
    r.w.send_raw_copy_request(0, true, bytemuck::bytes_of(&good))
        .expect("a whole request");
    host.write(0, &bytes_pattern(256, 99)).expect("write");
    for len in [0, 100, 183] {
        let e =
            r.w.send_raw_copy_request(0, true, &bytemuck::bytes_of(&good)[..len])
                .expect_err("a truncated request must be refused");
        let refused_before_use = match &e {
            L3Error::CopyRequest(simpler_core::mailbox::CopyRequestError::Truncated { .. }) => true,
            L3Error::Control { message, .. } => message.contains("copy request refused"),
            _ => false,
        };
        assert!(refused_before_use, "{len} bytes: {e:?}");
    }
    assert_eq!(
        read_back(&r.w, &dev),
        first,
        "no truncated request copied anything"
    );
    close(&mut r.w);
}

fn main() -> std::process::ExitCode {
    let mut tests: Vec<simpler_tests::forked::Test> = vec![
        (
            "s1_builder_refuses_tags_the_backing_does_not_grant",
            s1_builder_refuses_tags_the_backing_does_not_grant,
        ),
        (
            "s1_submit_refuses_output_over_read_backing",
            s1_submit_refuses_output_over_read_backing,
        ),
        (
            "s1_signature_writes_need_write_even_when_no_dep",
            s1_signature_writes_need_write_even_when_no_dep,
        ),
        (
            "s2_overlapping_writes_refused",
            s2_overlapping_writes_refused,
        ),
        (
            "s2_disjoint_writes_accepted_and_written",
            s2_disjoint_writes_accepted_and_written,
        ),
        ("s3_device_tensor_to_sub", s3_device_tensor_to_sub),
        (
            "s4_device_tensor_on_a_chip_that_does_not_own_it",
            s4_device_tensor_on_a_chip_that_does_not_own_it,
        ),
        ("s4_freed_device_buffer", s4_freed_device_buffer),
        (
            "s4_forged_interior_device_pointer",
            s4_forged_interior_device_pointer,
        ),
        (
            "s4_device_descriptor_of_another_worker",
            s4_device_descriptor_of_another_worker,
        ),
        ("s5_unknown_chip", s5_unknown_chip),
        ("s5_duplicate_chip_in_group", s5_duplicate_chip_in_group),
        ("s5_group_shape", s5_group_shape),
        ("s5_unregistered_callable", s5_unregistered_callable),
        (
            "s6_remote_sidecar_to_local_worker",
            s6_remote_sidecar_to_local_worker,
        ),
        ("s7_call_config_refused", s7_call_config_refused),
        (
            "m1_host_endpoint_refuses_device_backing",
            m1_host_endpoint_refuses_device_backing,
        ),
        (
            "m2_device_endpoint_checks_owner_nonce",
            m2_device_endpoint_checks_owner_nonce,
        ),
        (
            "m3_remote_sidecar_not_materialized",
            m3_remote_sidecar_not_materialized,
        ),
        (
            "m4_conflict_names_only_differing_fields",
            m4_conflict_names_only_differing_fields,
        ),
        ("m5_released_shm_not_found", m5_released_shm_not_found),
        (
            "m5_released_shm_refused_end_to_end",
            m5_released_shm_refused_end_to_end,
        ),
        (
            "m6_shm_smaller_than_descriptor",
            m6_shm_smaller_than_descriptor,
        ),
        (
            "m7_not_imported_and_misaligned_offset",
            m7_not_imported_and_misaligned_offset,
        ),
        (
            "m8_mapped_args_refuses_device_tensor",
            m8_mapped_args_refuses_device_tensor,
        ),
        (
            "m_fork_address_outside_inherited_ranges",
            m_fork_address_outside_inherited_ranges,
        ),
        (
            "c1_invalid_descriptor_in_copy_request",
            c1_invalid_descriptor_in_copy_request,
        ),
        (
            "c2_device_side_not_device_memory",
            c2_device_side_not_device_memory,
        ),
        (
            "c2_device_access_does_not_grant_direction",
            c2_device_access_does_not_grant_direction,
        ),
        (
            "c2_nbytes_exceeds_device_buffer",
            c2_nbytes_exceeds_device_buffer,
        ),
        ("c2_released_device_buffer", c2_released_device_buffer),
        ("c2_device_range_not_live", c2_device_range_not_live),
        ("c3_host_side_refused", c3_host_side_refused),
        (
            "c_round_trip_returns_the_data",
            c_round_trip_returns_the_data,
        ),
        (
            "l1_released_buffer_refuses_derivation",
            l1_released_buffer_refuses_derivation,
        ),
        (
            "l2_release_while_run_in_flight",
            l2_release_while_run_in_flight,
        ),
        ("l3_zero_size_buffer", l3_zero_size_buffer),
        ("l3_no_buffer_consumer", l3_no_buffer_consumer),
        ("l3_fork_cow_rules", l3_fork_cow_rules),
        ("l_register_after_init", l_register_after_init),
        ("l_use_before_init", l_use_before_init),
        ("l_init_twice", l_init_twice),
        ("l_use_after_close", l_use_after_close),
    ];
    {
        tests.extend_from_slice(&[
            (
                "bug_stale_device_tensor_after_address_reuse",
                bug_stale_device_tensor_after_address_reuse as fn(),
            ),
            (
                "bug_stale_fork_shm_tensor_after_release",
                bug_stale_fork_shm_tensor_after_release,
            ),
            (
                "bug_truncated_copy_request_executes_stale_bytes",
                bug_truncated_copy_request_executes_stale_bytes,
            ),
        ]);
    }
    simpler_tests::forked::run(&tests)
}
