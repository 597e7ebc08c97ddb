//! The level-3 Worker end to end: the `l3_vector` scene's goldens over several rounds, exact
//! tensor views at non-zero byte offsets (both directions, POSIX_SHM and FORK_SHM, dense and
//! strided, SUB and chip), dependencies across workers (RAW through a chain, WAR with a slow
//! reader), group submits, many tasks and a tiny slot ring, the `RunHandle`, and two Workers
//! alive in one process.
//!
//! Workers fork, so these tests run sequentially on the main thread
//! (`simpler_tests::forked::run`), and each closes its Worker before returning. Every golden is
//! computed here with plain arithmetic, from the bytes the test wrote.

use simpler_core::{AccessMode, BackendKind, DataType, TensorArgType, ValidTensor};
use simpler_host::l3::{
    shm_prefix, Buffer, ChipCallableId, L3Error, Lifecycle, MappedArgs, SubCallableId, Worker,
    WorkerConfig,
};
use simpler_host::scenes::l3::L3Vector;
use simpler_host::scenes::vector::VectorExample;
use simpler_host::scenes::Scene;
use simpler_host::TaskArgs;
use simpler_tests::assert_fails;
use simpler_tests::fixtures::{f32_bytes, pattern};
use simpler_tests::l3::{
    assert_close, boom, buffer, call_config, close, dense, f32_buffer, read_bytes, register_sub,
    sleep_ms, sleepy, submit_sleep, targs, vector_f64, whoami, whoami_args, CLOSE, VECTOR_N as N,
    VECTOR_SHAPE as SHAPE,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    simpler_tests::forked::run(&[
        (
            "scene_goldens_hold_for_several_rounds",
            scene_goldens_hold_for_several_rounds,
        ),
        ("three_chips", three_chips),
        (
            "fewer_chips_than_the_scene_needs_are_refused",
            fewer_chips_than_the_scene_needs_are_refused,
        ),
        (
            "sub_reads_exactly_the_view_at_an_offset",
            sub_reads_exactly_the_view_at_an_offset,
        ),
        (
            "sub_writes_exactly_the_view_at_an_offset",
            sub_writes_exactly_the_view_at_an_offset,
        ),
        (
            "chip_reads_and_writes_views_at_offsets",
            chip_reads_and_writes_views_at_offsets,
        ),
        (
            "chain_sub_chip_sub_is_ordered_by_tags",
            chain_sub_chip_sub_is_ordered_by_tags,
        ),
        (
            "war_slow_reader_sees_the_old_data",
            war_slow_reader_sees_the_old_data,
        ),
        (
            "raw_across_dtypes_and_strides_is_ordered",
            raw_across_dtypes_and_strides_is_ordered,
        ),
        (
            "group_next_level_on_two_chips",
            group_next_level_on_two_chips,
        ),
        ("group_sub_on_two_sub_workers", group_sub_on_two_sub_workers),
        ("two_hundred_sub_tasks", two_hundred_sub_tasks),
        (
            "four_slot_ring_runs_fifty_dependent_tasks",
            four_slot_ring_runs_fifty_dependent_tasks,
        ),
        (
            "run_handle_timeout_and_replay",
            run_handle_timeout_and_replay,
        ),
        ("two_workers_at_once", two_workers_at_once),
    ])
}

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

/// A strided tensor (element strides).
fn strided(
    b: &Buffer,
    shapes: &[u32],
    strides: &[u32],
    dtype: DataType,
    offset: u64,
) -> ValidTensor {
    b.tensor_strided(shapes, strides, dtype, offset)
        .expect("a valid view")
}

/// Element offsets (in elements, from the view's first element) of a strided view, in
/// row-major order of its shape. The test's own enumeration, independent of the runtime's.
fn elem_offsets(shapes: &[u32], strides: &[u32]) -> Vec<usize> {
    let mut out = vec![0usize];
    for (&s, &st) in shapes.iter().zip(strides) {
        out = out
            .iter()
            .flat_map(|&o| (0..s as usize).map(move |i| o + i * st as usize))
            .collect();
    }
    out
}

/// SUB: `[src (INPUT, any dtype, strided), dst (OUTPUT_EXISTING, dense)]`, optional scalar 0 =
/// milliseconds to sleep first. Copies src's elements, in row-major order, densely into dst.
fn copy_view(args: &mut MappedArgs) -> Result<(), String> {
    sleep_ms(args, 0);
    let [src, dst] = &mut args.args[..] else {
        return Err(format!("copy takes 2 tensors, got {}", args.args.len()));
    };
    let elem = src.dtype.elem_size() as usize;
    let bytes = src.bytes();
    let mut data = Vec::new();
    for o in elem_offsets(&src.shapes, &src.strides) {
        let at = o * elem;
        data.extend_from_slice(
            bytes
                .get(at..at + elem)
                .ok_or_else(|| format!("element at {at} outside the {}-byte view", bytes.len()))?,
        );
    }
    let out = dst.bytes_mut().map_err(|e| e.to_string())?;
    if out.len() < data.len() {
        return Err(format!("dst has {} bytes, need {}", out.len(), data.len()));
    }
    out[..data.len()].copy_from_slice(&data);
    Ok(())
}

/// The byte `fill_view` writes at byte `j` of element `k` for `seed`.
fn fill_byte(seed: u64, k: usize, j: usize) -> u8 {
    (seed as u8)
        .wrapping_add((k as u8).wrapping_mul(3))
        .wrapping_add(j as u8)
        ^ 0x80
}

/// SUB: `[dst (OUTPUT_EXISTING, any dtype, strided)]`, scalars `[seed, sleep ms?]`: after the
/// optional sleep, writes `fill_byte` into every byte of every element of the view, nothing
/// else.
fn fill_view(args: &mut MappedArgs) -> Result<(), String> {
    sleep_ms(args, 1);
    let seed = *args.scalars.first().ok_or("fill needs a seed")?;
    let dst = args.args.first_mut().ok_or("fill takes 1 tensor")?;
    let elem = dst.dtype.elem_size() as usize;
    let offsets = elem_offsets(&dst.shapes, &dst.strides);
    let out = dst.bytes_mut().map_err(|e| e.to_string())?;
    for (k, o) in offsets.into_iter().enumerate() {
        for j in 0..elem {
            *out.get_mut(o * elem + j)
                .ok_or("element outside the view")? = fill_byte(seed, k, j);
        }
    }
    Ok(())
}

/// The value `fill_f32` writes at element `k`.
fn ramp(base: f32, step: f32, k: usize) -> f32 {
    base + step * (k % 101) as f32
}

/// SUB: `[dst (OUTPUT_EXISTING, f32, dense)]`, scalars `[base bits, step bits, sleep ms?]`:
/// dst[k] = ramp(base, step, k), after the optional sleep.
fn fill_f32(args: &mut MappedArgs) -> Result<(), String> {
    sleep_ms(args, 2);
    let base = f32::from_bits(*args.scalars.first().ok_or("no base")? as u32);
    let step = f32::from_bits(*args.scalars.get(1).ok_or("no step")? as u32);
    let dst = args.args.first_mut().ok_or("fill_f32 takes 1 tensor")?;
    let n: usize = dst.shapes.iter().map(|&s| s as usize).product();
    let values: Vec<f32> = (0..n).map(|k| ramp(base, step, k)).collect();
    dst.write_f32s(&values).map_err(|e| e.to_string())
}

/// SUB: `[src (INPUT f32), dst (OUTPUT_EXISTING f32)]`: dst = 2 src + 1.
fn affine(args: &mut MappedArgs) -> Result<(), String> {
    let [src, dst] = &mut args.args[..] else {
        return Err("affine takes 2 tensors".into());
    };
    let out: Vec<f32> = src.read_f32s().iter().map(|&x| 2.0 * x + 1.0).collect();
    dst.write_f32s(&out).map_err(|e| e.to_string())
}

/// SUB: `[x (INOUT f32)]`: every element += 1.
fn incr(args: &mut MappedArgs) -> Result<(), String> {
    let x = args.args.first_mut().ok_or("incr takes 1 tensor")?;
    let values: Vec<f32> = x.read_f32s().iter().map(|&v| v + 1.0).collect();
    x.write_f32s(&values).map_err(|e| e.to_string())
}

/// Every callable a test here may use.
struct Callables {
    vector: ChipCallableId,
    copy: SubCallableId,
    fill: SubCallableId,
    fill_f32: SubCallableId,
    affine: SubCallableId,
    incr: SubCallableId,
    whoami: SubCallableId,
    sleepy: SubCallableId,
    boom: SubCallableId,
}

/// A Worker with `chips` chips and `subs` SUB children, every callable registered, initialized.
fn worker_with(config: WorkerConfig) -> (Worker, Callables) {
    let mut w = Worker::new(config).expect("a Worker");
    let p = VectorExample
        .prepare("default")
        .expect("vector_example has a default case");
    let c = Callables {
        vector: w
            .register_chip("vector_example", p.callable)
            .expect("register"),
        copy: register_sub(&mut w, "copy", copy_view),
        fill: register_sub(&mut w, "fill", fill_view),
        fill_f32: register_sub(&mut w, "fill_f32", fill_f32),
        affine: register_sub(&mut w, "affine", affine),
        incr: register_sub(&mut w, "incr", incr),
        whoami: register_sub(&mut w, "whoami", whoami),
        sleepy: register_sub(&mut w, "sleepy", sleepy),
        boom: register_sub(&mut w, "boom", boom),
    };
    w.init().expect("init");
    assert_eq!(w.lifecycle(), Lifecycle::Ready);
    (w, c)
}

fn worker(chips: usize, subs: usize) -> (Worker, Callables) {
    worker_with(WorkerConfig::new(chips, subs))
}

/// A view to read: (shapes, strides, dtype, byte offset).
type ReadView = (&'static [u32], &'static [u32], DataType, u64);
/// A view to write: (shapes, strides, dtype, byte offset, fill seed).
type WriteView = (&'static [u32], &'static [u32], DataType, u64, u64);

/// Deterministic f32 values in about [-0.3, 0.7).
fn val(i: usize, salt: usize) -> f32 {
    ((i * 7 + salt * 13) % 89) as f32 / 89.0 - 0.3
}

// ------------------------------------------------------------------------------------------------
// The scene
// ------------------------------------------------------------------------------------------------

fn scene_goldens_hold_for_several_rounds() {
    let mut scene = L3Vector::new(2).expect("the scene starts");
    assert_eq!(scene.worker().chips(), 2);
    assert_eq!(scene.worker().sub_workers(), 1);
    let mut last_run = 0;
    for round in 0..5 {
        let r = scene.round(round).expect("the round runs");
        assert!(r.chip0.pass, "round {round}: chip 0 {:?}", r.chip0);
        assert!(r.chip1.pass, "round {round}: chip 1 {:?}", r.chip1);
        assert!(r.sum_ok, "round {round}: the SUB sum");
        assert!(r.pass(), "round {round}");
        assert_eq!(r.summary.tasks, 3, "round {round}");
        assert!(r.summary.run_id > last_run, "run ids increase");
        last_run = r.summary.run_id;
    }
    scene.worker_mut().close(CLOSE).expect("close");
    assert_eq!(scene.worker().lifecycle(), Lifecycle::Closed);
}

fn three_chips() {
    let mut scene = L3Vector::new(3).expect("the scene starts");
    assert_eq!(scene.worker().chips(), 3);
    for round in 0..2 {
        let r = scene.round(round).expect("the round runs");
        assert!(
            r.pass(),
            "round {round}: {:?} {:?} {}",
            r.chip0,
            r.chip1,
            r.sum_ok
        );
        assert_eq!(r.summary.tasks, 3);
    }
    scene.worker_mut().close(CLOSE).expect("close");
    assert_eq!(scene.worker().lifecycle(), Lifecycle::Closed);
}

/// Chip 0 feeds chip 1: with fewer chips the scene cannot run as asked, and says so before it
/// forks anything (it used to run on two anyway).
fn fewer_chips_than_the_scene_needs_are_refused() {
    for chips in [0, 1] {
        let e = L3Vector::new(chips)
            .err()
            .expect("too few chips are refused");
        assert_eq!(
            e,
            L3Error::TooFewChips {
                needed: 2,
                have: chips
            }
        );
        assert_eq!(e.to_string(), format!("needs 2 chips, {chips} given"));
    }
}

// ------------------------------------------------------------------------------------------------
// Exact views at non-zero offsets
// ------------------------------------------------------------------------------------------------

/// A tensor at byte offset N resolves to exactly `[N, N + extent)`: for each backend, three SUB
/// tasks copy a u8 view at offset 13, a strided u8 2-D view at offset 301, and a strided f32
/// 2-D view at offset 1000 into fresh outputs; each output equals the bytes picked here from
/// the pattern.
fn sub_reads_exactly_the_view_at_an_offset() {
    let (mut w, c) = worker(0, 2);
    for backend in [BackendKind::PosixShm, BackendKind::ForkShm] {
        let src = buffer(&w, 4096, AccessMode::Read, backend);
        let p = pattern(4096, 1);
        src.write(0, &p).expect("fill the source");
        let views: [ReadView; 3] = [
            (&[100], &[1], DataType::Uint8, 13),
            (&[5, 7], &[32, 2], DataType::Uint8, 301),
            (&[3, 4], &[10, 1], DataType::Float32, 1000),
        ];
        let mut expected = Vec::new();
        let mut outs = Vec::new();
        let mut tasks = Vec::new();
        for &(shapes, strides, dtype, offset) in &views {
            let elem = dtype.elem_size() as usize;
            let want: Vec<u8> = elem_offsets(shapes, strides)
                .into_iter()
                .flat_map(|o| {
                    let at = offset as usize + o * elem;
                    p[at..at + elem].to_vec()
                })
                .collect();
            let out = buffer(
                &w,
                want.len() as u64,
                AccessMode::ReadWrite,
                BackendKind::PosixShm,
            );
            out.write(0, &vec![0xEE; want.len()]).expect("clear");
            tasks.push(targs(
                &[
                    (
                        strided(&src, shapes, strides, dtype, offset),
                        TensorArgType::Input,
                    ),
                    (
                        dense(&out, &[want.len() as u32], DataType::Uint8, 0),
                        TensorArgType::OutputExisting,
                    ),
                ],
                &[],
            ));
            expected.push(want);
            outs.push(out);
        }
        let summary = w
            .run(|o| {
                for t in &tasks {
                    o.submit_sub(c.copy, t)?;
                }
                Ok(())
            })
            .expect("the copies run");
        assert_eq!(summary.tasks, 3);
        for (i, (out, want)) in outs.iter().zip(&expected).enumerate() {
            assert_eq!(&read_bytes(out), want, "{backend:?} view {i}");
        }
        // The readers changed nothing.
        assert_eq!(read_bytes(&src), p, "{backend:?}: the source is intact");
    }
    close(&mut w);
}

/// A SUB task writing through an OUTPUT_EXISTING view at offset N changes exactly the view's
/// bytes: a dense u8 view at offset 77, a strided f32 view at offset 2048 (its gaps stay), a
/// one-element view at offset 4095. Every other byte keeps the pattern.
fn sub_writes_exactly_the_view_at_an_offset() {
    let (mut w, c) = worker(0, 2);
    for backend in [BackendKind::PosixShm, BackendKind::ForkShm] {
        let dst = buffer(&w, 4096, AccessMode::ReadWrite, backend);
        let p = pattern(4096, 2);
        dst.write(0, &p).expect("fill");
        let views: [WriteView; 3] = [
            (&[50], &[1], DataType::Uint8, 77, 5),
            (&[4, 3], &[8, 2], DataType::Float32, 2048, 9),
            (&[1], &[1], DataType::Uint8, 4095, 200),
        ];
        let mut expected = p.clone();
        let mut tasks = Vec::new();
        for &(shapes, strides, dtype, offset, seed) in &views {
            let elem = dtype.elem_size() as usize;
            for (k, o) in elem_offsets(shapes, strides).into_iter().enumerate() {
                for j in 0..elem {
                    expected[offset as usize + o * elem + j] = fill_byte(seed, k, j);
                }
            }
            tasks.push(targs(
                &[(
                    strided(&dst, shapes, strides, dtype, offset),
                    TensorArgType::OutputExisting,
                )],
                &[seed],
            ));
        }
        w.run(|o| {
            for t in &tasks {
                o.submit_sub(c.fill, t)?;
            }
            Ok(())
        })
        .expect("the fills run");
        let got = read_bytes(&dst);
        // The bytes just around the dense view, named explicitly.
        assert_eq!(got[76], p[76], "{backend:?}: the byte before offset 77");
        assert_eq!(
            got[127], p[127],
            "{backend:?}: the byte after the 50-byte view"
        );
        assert_ne!(got[77], p[77], "{backend:?}: the view's first byte changed");
        assert_eq!(got[2047], p[2047], "{backend:?}: before the strided view");
        assert_eq!(got[2052..2056], p[2052..2056], "{backend:?}: a stride gap");
        assert_eq!(got[4094], p[4094], "{backend:?}: before the last byte");
        for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "{backend:?}: byte {i} (pattern {})", p[i]);
        }
    }
    close(&mut w);
}

/// vector_example on a chip over views at non-zero offsets: a and b inside one large READ
/// POSIX_SHM buffer, f inside a larger FORK_SHM buffer whose other elements hold a sentinel.
/// First dense views, then strided ones (a and b the two halves of each row of a 128 x 256
/// matrix; f the second half of each row of another).
fn chip_reads_and_writes_views_at_offsets() {
    let (mut w, c) = worker(1, 0);
    const SENTINEL: f32 = -7.25;
    // Dense: a at element 16, b at element 16 + N + 8; f at element 24 of N + 40.
    let inp = buffer(
        &w,
        ((2 * N + 64) * 4) as u64,
        AccessMode::Read,
        BackendKind::PosixShm,
    );
    let inp_vals: Vec<f32> = (0..2 * N + 64).map(|i| val(i, 3)).collect();
    inp.write(0, &f32_bytes(&inp_vals)).expect("fill inputs");
    let out = buffer(
        &w,
        ((N + 40) * 4) as u64,
        AccessMode::ReadWrite,
        BackendKind::ForkShm,
    );
    out.write(0, &f32_bytes(&vec![SENTINEL; N + 40]))
        .expect("fill output");
    let (a_at, b_at, f_at) = (16usize, 16 + N + 8, 24usize);
    let task = targs(
        &[
            (
                dense(&inp, &SHAPE, DataType::Float32, (a_at * 4) as u64),
                TensorArgType::Input,
            ),
            (
                dense(&inp, &SHAPE, DataType::Float32, (b_at * 4) as u64),
                TensorArgType::Input,
            ),
            (
                dense(&out, &SHAPE, DataType::Float32, (f_at * 4) as u64),
                TensorArgType::OutputExisting,
            ),
        ],
        &[],
    );
    w.run(|o| {
        o.submit_next_level(0, c.vector, &task, &call_config())
            .map(|_| ())
    })
    .expect("the dense run");
    let got = out.read_f32s(0, N + 40).expect("read");
    let golden: Vec<f64> = (0..N)
        .map(|k| vector_f64(inp_vals[a_at + k] as f64, inp_vals[b_at + k] as f64))
        .collect();
    assert_close(&got[f_at..f_at + N], &golden, "dense f");
    for (i, &g) in got.iter().enumerate() {
        if !(f_at..f_at + N).contains(&i) {
            assert_eq!(
                g.to_bits(),
                SENTINEL.to_bits(),
                "dense: element {i} outside f"
            );
        }
    }

    // Strided: rows of 256 elements; a = columns 0..128, b = columns 128..256, both from
    // element 8 of the input; f = columns 128..256 from element 8 of the output.
    let m = 128 * 256 + 8;
    let inp2 = buffer(&w, (m * 4) as u64, AccessMode::Read, BackendKind::ForkShm);
    let inp2_vals: Vec<f32> = (0..m).map(|i| val(i, 5)).collect();
    inp2.write(0, &f32_bytes(&inp2_vals)).expect("fill");
    let out2 = buffer(
        &w,
        (m * 4 + 16) as u64,
        AccessMode::ReadWrite,
        BackendKind::PosixShm,
    );
    out2.write(0, &f32_bytes(&vec![SENTINEL; m + 4]))
        .expect("fill");
    let st = [256u32, 1];
    let task = targs(
        &[
            (
                strided(&inp2, &SHAPE, &st, DataType::Float32, 8 * 4),
                TensorArgType::Input,
            ),
            (
                strided(&inp2, &SHAPE, &st, DataType::Float32, (8 + 128) * 4),
                TensorArgType::Input,
            ),
            (
                strided(&out2, &SHAPE, &st, DataType::Float32, (8 + 128) * 4),
                TensorArgType::OutputExisting,
            ),
        ],
        &[],
    );
    w.run(|o| {
        o.submit_next_level(0, c.vector, &task, &call_config())
            .map(|_| ())
    })
    .expect("the strided run");
    let got = out2.read_f32s(0, m + 4).expect("read");
    let mut want_f = Vec::with_capacity(N);
    let mut got_f = Vec::with_capacity(N);
    for (i, &g) in got.iter().enumerate() {
        let in_f = (8..8 + 128 * 256).contains(&i) && (i - 8) % 256 >= 128;
        if in_f {
            let (r, col) = ((i - 8) / 256, (i - 8) % 256 - 128);
            let a = inp2_vals[8 + r * 256 + col] as f64;
            let b = inp2_vals[8 + r * 256 + 128 + col] as f64;
            want_f.push(vector_f64(a, b));
            got_f.push(g);
        } else {
            assert_eq!(
                g.to_bits(),
                SENTINEL.to_bits(),
                "strided: element {i} outside f"
            );
        }
    }
    assert_eq!(got_f.len(), N);
    assert_close(&got_f, &want_f, "strided f");
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// Dependencies across workers
// ------------------------------------------------------------------------------------------------

/// sub (slow) writes a → chip 0 computes f = vector_f64(a, b) → sub writes g = 2 f + 1.
/// Nothing but the tags orders them.
fn chain_sub_chip_sub_is_ordered_by_tags() {
    let (mut w, c) = worker(1, 2);
    let bytes = (N * 4) as u64;
    let a = buffer(&w, bytes, AccessMode::ReadWrite, BackendKind::ForkShm);
    let b = buffer(&w, bytes, AccessMode::Read, BackendKind::PosixShm);
    let f = buffer(&w, bytes, AccessMode::ReadWrite, BackendKind::PosixShm);
    let g = buffer(&w, bytes, AccessMode::ReadWrite, BackendKind::ForkShm);
    let b_vals: Vec<f32> = (0..N).map(|i| val(i, 7)).collect();
    b.write(0, &f32_bytes(&b_vals)).expect("b");
    let (base, step) = (-0.5f32, 0.01f32);
    for round in 0..2 {
        // a holds stale values a correct chain never reads.
        a.write(0, &f32_bytes(&vec![100.0; N])).expect("a");
        f.write(0, &f32_bytes(&vec![0.0; N])).expect("f");
        g.write(0, &f32_bytes(&vec![0.0; N])).expect("g");
        let t = |buf: &Buffer| dense(buf, &SHAPE, DataType::Float32, 0);
        let first = targs(
            &[(t(&a), TensorArgType::OutputExisting)],
            &[base.to_bits() as u64, step.to_bits() as u64, 150],
        );
        let chip = targs(
            &[
                (t(&a), TensorArgType::Input),
                (t(&b), TensorArgType::Input),
                (t(&f), TensorArgType::OutputExisting),
            ],
            &[],
        );
        let last = targs(
            &[
                (t(&f), TensorArgType::Input),
                (t(&g), TensorArgType::OutputExisting),
            ],
            &[],
        );
        let summary = w
            .run(|o| {
                o.submit_sub(c.fill_f32, &first)?;
                o.submit_next_level(0, c.vector, &chip, &call_config())?;
                o.submit_sub(c.affine, &last)?;
                Ok(())
            })
            .expect("the chain runs");
        assert_eq!(summary.tasks, 3);
        let a_want: Vec<f32> = (0..N).map(|k| ramp(base, step, k)).collect();
        assert_eq!(a.read_f32s(0, N).expect("a"), a_want, "round {round}: a");
        let f_want: Vec<f64> = (0..N)
            .map(|k| vector_f64(a_want[k] as f64, b_vals[k] as f64))
            .collect();
        assert_close(&f.read_f32s(0, N).expect("f"), &f_want, "f");
        let g_want: Vec<f64> = f_want.iter().map(|&x| 2.0 * x + 1.0).collect();
        assert_close(&g.read_f32s(0, N).expect("g"), &g_want, "g");
    }
    close(&mut w);
}

/// A reader (sleeping 100 ms, then copying x) and a later writer of x, with two SUB workers
/// free: the writer waits for the reader, which sees the old data.
fn war_slow_reader_sees_the_old_data() {
    let (mut w, c) = worker(0, 2);
    let n = 1024usize;
    let x = f32_buffer(&w, n, BackendKind::PosixShm);
    let r = f32_buffer(&w, n, BackendKind::ForkShm);
    let old: Vec<f32> = (0..n).map(|i| i as f32).collect();
    x.write(0, &f32_bytes(&old)).expect("x");
    let xt = dense(&x, &[n as u32], DataType::Float32, 0);
    let reader = targs(
        &[
            (xt, TensorArgType::Input),
            (
                dense(&r, &[n as u32], DataType::Float32, 0),
                TensorArgType::OutputExisting,
            ),
        ],
        &[100],
    );
    let (base, step) = (1000.0f32, 1.0f32);
    let writer = targs(
        &[(xt, TensorArgType::OutputExisting)],
        &[base.to_bits() as u64, step.to_bits() as u64],
    );
    let summary = w
        .run(|o| {
            o.submit_sub(c.copy, &reader)?;
            o.submit_sub(c.fill_f32, &writer)?;
            Ok(())
        })
        .expect("the run");
    assert_eq!(summary.tasks, 2);
    assert_eq!(
        r.read_f32s(0, n).expect("r"),
        old,
        "the reader saw the writer's data"
    );
    let new: Vec<f32> = (0..n).map(|k| ramp(base, step, k)).collect();
    assert_eq!(x.read_f32s(0, n).expect("x"), new, "the writer ran");
    close(&mut w);
}

/// A slow writer through a strided u8 view (bytes 101, 104, 107, 110), then two readers
/// through strided f32 views of the same buffer whose bytes interleave with the writer's: a
/// [2, 2] view with row stride 4 at byte 96 (bytes 96..104 and 112..120) and a [2] view with
/// stride 2 at byte 100 (bytes 100..104 and 108..112); both share bytes with the writer. Two SUB
/// workers are free, so only the engine's byte-range test orders them after the writer.
fn raw_across_dtypes_and_strides_is_ordered() {
    let (mut w, c) = worker(0, 2);
    let x = buffer(&w, 1024, AccessMode::ReadWrite, BackendKind::PosixShm);
    let p = pattern(1024, 4);
    x.write(0, &p).expect("fill");
    let seed = 42u64;
    let mut after = p.clone();
    for k in 0..4 {
        after[101 + 3 * k] = fill_byte(seed, k, 0);
    }
    let writer = targs(
        &[(
            strided(&x, &[4], &[3], DataType::Uint8, 101),
            TensorArgType::OutputExisting,
        )],
        &[seed, 150],
    );
    // (shapes, strides, byte offset) of f32 readers.
    let readers: [(&[u32], &[u32], u64); 2] = [(&[2, 2], &[4, 1], 96), (&[2], &[2], 100)];
    let mut outs = Vec::new();
    let mut tasks = Vec::new();
    let mut expected = Vec::new();
    for &(shapes, strides, offset) in &readers {
        let want: Vec<u8> = elem_offsets(shapes, strides)
            .into_iter()
            .flat_map(|o| {
                let at = offset as usize + 4 * o;
                after[at..at + 4].to_vec()
            })
            .collect();
        let out = buffer(
            &w,
            want.len() as u64,
            AccessMode::ReadWrite,
            BackendKind::ForkShm,
        );
        tasks.push(targs(
            &[
                (
                    strided(&x, shapes, strides, DataType::Float32, offset),
                    TensorArgType::Input,
                ),
                (
                    dense(&out, &[want.len() as u32], DataType::Uint8, 0),
                    TensorArgType::OutputExisting,
                ),
            ],
            &[],
        ));
        outs.push(out);
        expected.push(want);
    }
    w.run(|o| {
        o.submit_sub(c.fill, &writer)?;
        for t in &tasks {
            o.submit_sub(c.copy, t)?;
        }
        Ok(())
    })
    .expect("the run");
    assert_eq!(
        read_bytes(&x),
        after,
        "the writer wrote exactly its four bytes"
    );
    for (i, (out, want)) in outs.iter().zip(&expected).enumerate() {
        assert_eq!(
            &read_bytes(out),
            want,
            "reader {i} ran before the writer finished"
        );
    }
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// Groups
// ------------------------------------------------------------------------------------------------

fn group_next_level_on_two_chips() {
    let (mut w, c) = worker(2, 0);
    let bytes = (N * 4) as u64;
    let mk = |access, backend| buffer(&w, bytes, access, backend);
    let ins: Vec<(Buffer, Buffer, Vec<f32>, Vec<f32>)> = (0..2)
        .map(|chip| {
            let a = mk(AccessMode::Read, BackendKind::PosixShm);
            let b = mk(AccessMode::Read, BackendKind::ForkShm);
            let av: Vec<f32> = (0..N).map(|i| val(i, 10 + chip)).collect();
            let bv: Vec<f32> = (0..N).map(|i| val(i, 20 + 3 * chip) * 0.5).collect();
            a.write(0, &f32_bytes(&av)).expect("a");
            b.write(0, &f32_bytes(&bv)).expect("b");
            (a, b, av, bv)
        })
        .collect();
    let outs: Vec<Buffer> = (0..2)
        .map(|_| mk(AccessMode::ReadWrite, BackendKind::PosixShm))
        .collect();
    let t = |buf: &Buffer| dense(buf, &SHAPE, DataType::Float32, 0);
    let args: Vec<TaskArgs> = (0..2)
        .map(|i| {
            targs(
                &[
                    (t(&ins[i].0), TensorArgType::Input),
                    (t(&ins[i].1), TensorArgType::Input),
                    (t(&outs[i]), TensorArgType::OutputExisting),
                ],
                &[],
            )
        })
        .collect();
    let summary = w
        .run(|o| {
            o.submit_next_level_group(c.vector, &[0, 1], &args, &call_config())?;
            Ok(())
        })
        .expect("the group runs");
    assert_eq!(summary.tasks, 1, "a group is one task");
    for i in 0..2 {
        let (_, _, av, bv) = &ins[i];
        let want: Vec<f64> = (0..N)
            .map(|k| vector_f64(av[k] as f64, bv[k] as f64))
            .collect();
        assert_close(
            &outs[i].read_f32s(0, N).expect("out"),
            &want,
            "group member",
        );
    }
    close(&mut w);
}

fn group_sub_on_two_sub_workers() {
    let (mut w, c) = worker(0, 2);
    let pids: Vec<u32> = (0..2)
        .map(|i| w.sub_pid(i).expect("a SUB pid") as u32)
        .collect();
    assert_ne!(pids[0], pids[1]);
    let outs: Vec<Buffer> = (0..2)
        .map(|_| buffer(&w, 4, AccessMode::ReadWrite, BackendKind::ForkShm))
        .collect();
    let sleep = 400u64;
    let args: Vec<TaskArgs> = outs.iter().map(|b| whoami_args(b, sleep)).collect();
    let start = Instant::now();
    let summary = w
        .run(|o| {
            o.submit_sub_group(c.whoami, &args)?;
            Ok(())
        })
        .expect("the group runs");
    let wall = start.elapsed();
    assert_eq!(summary.tasks, 1);
    let ran: Vec<u32> = outs
        .iter()
        .map(|b| {
            let mut p = [0u8; 4];
            b.read(0, &mut p).expect("read");
            u32::from_le_bytes(p)
        })
        .collect();
    assert_ne!(ran[0], ran[1], "members ran on distinct SUB workers");
    for p in &ran {
        assert!(
            pids.contains(p),
            "member ran in {p}, not a SUB child {pids:?}"
        );
    }
    // Both members run at once: well under two sleeps.
    assert!(
        wall < Duration::from_millis(2 * sleep - 50),
        "the members ran one after the other ({wall:?})"
    );
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// Many tasks, a small ring
// ------------------------------------------------------------------------------------------------

fn two_hundred_sub_tasks() {
    let (mut w, c) = worker(0, 2);
    let n = 200usize;
    let x = f32_buffer(&w, n, BackendKind::PosixShm);
    let init: Vec<f32> = (0..n).map(|i| (i * 10) as f32).collect();
    x.write(0, &f32_bytes(&init)).expect("x");
    let tasks: Vec<TaskArgs> = (0..n)
        .map(|i| {
            targs(
                &[(
                    dense(&x, &[1], DataType::Float32, (i * 4) as u64),
                    TensorArgType::InOut,
                )],
                &[],
            )
        })
        .collect();
    let summary = w
        .run(|o| {
            for t in &tasks {
                o.submit_sub(c.incr, t)?;
            }
            Ok(())
        })
        .expect("the run");
    assert_eq!(summary.tasks, n);
    let want: Vec<f32> = (0..n).map(|i| (i * 10 + 1) as f32).collect();
    assert_eq!(x.read_f32s(0, n).expect("x"), want);
    close(&mut w);
}

fn four_slot_ring_runs_fifty_dependent_tasks() {
    let mut config = WorkerConfig::new(0, 2);
    config.ring_slots = 4;
    let (mut w, c) = worker_with(config);
    let x = buffer(&w, 8, AccessMode::ReadWrite, BackendKind::ForkShm);
    x.write_f32s(0, &[3.0, 5.0]).expect("x");
    // 50 increments of x[0], each depending on the previous; x[1] is never touched.
    let t = targs(
        &[(dense(&x, &[1], DataType::Float32, 0), TensorArgType::InOut)],
        &[],
    );
    let summary = w
        .run(|o| {
            for _ in 0..50 {
                o.submit_sub(c.incr, &t)?;
            }
            Ok(())
        })
        .expect("back-pressure resolves");
    assert_eq!(summary.tasks, 50);
    assert_eq!(x.read_f32s(0, 2).expect("x"), vec![53.0, 5.0]);
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// RunHandle
// ------------------------------------------------------------------------------------------------

fn run_handle_timeout_and_replay() {
    let (mut w, c) = worker(0, 1);
    let h = submit_sleep(&w, c.sleepy, 300);
    let t = Instant::now();
    assert_fails!(h.wait(Some(Duration::from_millis(1))), L3Error::WaitTimeout);
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "the timed wait returned promptly"
    );
    assert!(!h.done(), "the run goes on");
    let first = h.wait(None).expect("the run completes");
    assert!(h.done());
    assert_eq!(first.run_id, h.run_id());
    assert_eq!(first.tasks, 1);
    assert!(first.elapsed >= Duration::from_millis(300), "{first:?}");
    let second = h.wait(None).expect("replayed");
    assert_eq!(first, second, "the same summary twice");
    assert_eq!(h.wait(Some(Duration::from_millis(1))), Ok(first));

    // A failing run's error is replayed identically.
    let h = w
        .submit(|o| o.submit_sub(c.boom, &TaskArgs::new()).map(|_| ()))
        .expect("submit");
    let e1 = h.wait(None);
    assert_fails!(
        &e1,
        L3Error::TaskFailed { message, endpoint, .. }
            if message == "boom" && endpoint.contains("sub-worker")
    );
    assert_eq!(h.wait(None), e1, "the same error twice");
    // And the Worker goes on.
    w.run(|o| o.submit_sub(c.sleepy, &targs(&[], &[1])).map(|_| ()))
        .expect("a run after the failure");
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// Two Workers
// ------------------------------------------------------------------------------------------------

fn two_workers_at_once() {
    let (mut w1, c1) = worker(0, 1);
    let (mut w2, c2) = worker(0, 1);
    let (n1, n2) = (w1.owner_instance_id(), w2.owner_instance_id());
    assert_ne!(n1, n2, "nonces differ");
    assert_ne!(w1.sub_pid(0), w2.sub_pid(0));
    let n = 64usize;
    let mk = |w: &Worker| {
        let b = f32_buffer(w, n, BackendKind::PosixShm);
        b.write(0, &f32_bytes(&vec![0.0; n])).expect("zero");
        b
    };
    let (b1, b2) = (mk(&w1), mk(&w2));
    // Same buffer id in both Workers, different names.
    assert_eq!(b1.identity().buffer_id, b2.identity().buffer_id);
    let (s1, s2) = (b1.shm_name().expect("shm"), b2.shm_name().expect("shm"));
    assert_ne!(s1, s2, "shm names collide");
    assert!(s1.starts_with(&shm_prefix(&n1)), "{s1}");
    assert!(s2.starts_with(&shm_prefix(&n2)), "{s2}");
    let fill = |b: &Buffer, base: f32| {
        targs(
            &[(
                dense(b, &[n as u32], DataType::Float32, 0),
                TensorArgType::OutputExisting,
            )],
            &[base.to_bits() as u64, 1.0f32.to_bits() as u64, 100],
        )
    };
    let (t1, t2) = (fill(&b1, 10.0), fill(&b2, 20.0));
    // Both in flight at once.
    let h1 = w1
        .submit(|o| o.submit_sub(c1.fill_f32, &t1).map(|_| ()))
        .expect("submit 1");
    let h2 = w2
        .submit(|o| o.submit_sub(c2.fill_f32, &t2).map(|_| ()))
        .expect("submit 2");
    h1.wait(None).expect("run 1");
    h2.wait(None).expect("run 2");
    let want = |base: f32| (0..n).map(|k| ramp(base, 1.0, k)).collect::<Vec<f32>>();
    assert_eq!(b1.read_f32s(0, n).expect("b1"), want(10.0));
    assert_eq!(b2.read_f32s(0, n).expect("b2"), want(20.0));
    close(&mut w2);
    // The first Worker still serves after the second closed.
    w1.run(|o| o.submit_sub(c1.fill_f32, &fill(&b1, 30.0)).map(|_| ()))
        .expect("run 1 again");
    assert_eq!(b1.read_f32s(0, n).expect("b1"), want(30.0));
    close(&mut w1);
}
