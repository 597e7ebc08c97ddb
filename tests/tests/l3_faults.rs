//! Faults at level 3: children killed mid-run, shared-memory names left behind, writes through
//! READ buffers, failing and panicking tasks and how their failure propagates, a close that
//! runs out of budget, and a kernel that fails on a chip. After each fault the surviving
//! children must go on serving.
//!
//! Workers fork, so these tests run sequentially on the main thread
//! (`simpler_tests::forked::run`), and each closes its Worker before returning (one test drops
//! a Worker on purpose and checks what Drop leaves).

use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{AccessMode, ArgDirection, BackendKind, DataType, TensorArgType, ValidTensor};
use simpler_host::l3::{
    shm_prefix, Buffer, ChipCallableId, L3Error, Lifecycle, MappedArgs, SubCallableId, Worker,
    WorkerConfig,
};
use simpler_host::scenes::vector::VectorExample;
use simpler_host::scenes::Scene;
use simpler_host::{OrchFn, TaskArgs, TaskArgsError};
use simpler_tests::assert_fails;
use simpler_tests::fixtures::{f32_bytes, pattern};
use simpler_tests::l3::{
    assert_close, boom, buffer, call_config, close, dense, f32_buffer, read_bytes, register_sub,
    sleepy, submit_sleep, targs, vector_f64, whoami, whoami_args, CLOSE, VECTOR_N as N,
    VECTOR_SHAPE as SHAPE,
};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    simpler_tests::forked::run(&[
        ("sigkill_chip_mid_run", sigkill_chip_mid_run),
        ("sigkill_sub_worker", sigkill_sub_worker),
        ("no_shm_survives_close", no_shm_survives_close),
        ("read_buffer_write_refused", read_buffer_write_refused),
        (
            "failed_task_poisons_its_consumers_only",
            failed_task_poisons_its_consumers_only,
        ),
        (
            "panicking_callable_fails_its_task_only",
            panicking_callable_fails_its_task_only,
        ),
        (
            "orchestration_error_or_panic_ends_its_run",
            orchestration_error_or_panic_ends_its_run,
        ),
        ("close_budget", close_budget),
        (
            "failing_kernel_fails_the_task_and_the_chip_serves_on",
            failing_kernel_fails_the_task_and_the_chip_serves_on,
        ),
    ])
}

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

fn mat(b: &Buffer) -> ValidTensor {
    dense(b, &SHAPE, DataType::Float32, 0)
}

/// Sends SIGKILL with the `kill` command.
fn kill9(pid: i32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid}: {status}");
}

fn proc_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The names in /dev/shm starting with `prefix`.
fn shm_entries(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .expect("list /dev/shm")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

// SUB callables ----------------------------------------------------------------------------------

/// `[src (INPUT), dst (OUTPUT_EXISTING)]`, both dense: dst[..len(src)] = src.
fn copy(args: &mut MappedArgs) -> Result<(), String> {
    let [src, dst] = &mut args.args[..] else {
        return Err("copy takes 2 tensors".into());
    };
    let data = src.bytes().to_vec();
    let out = dst.bytes_mut().map_err(|e| e.to_string())?;
    out[..data.len()].copy_from_slice(&data);
    Ok(())
}

/// `[dst (OUTPUT_EXISTING f32)]`, scalar 0 = value bits: fills dst with the value.
fn fill(args: &mut MappedArgs) -> Result<(), String> {
    let value = f32::from_bits(*args.scalars.first().ok_or("no value")? as u32);
    let dst = args.args.first_mut().ok_or("fill takes 1 tensor")?;
    let n: usize = dst.shapes.iter().map(|&s| s as usize).product();
    dst.write_f32s(&vec![value; n]).map_err(|e| e.to_string())
}

fn panicker(_args: &mut MappedArgs) -> Result<(), String> {
    panic!("kaboom 7");
}

/// `[x (INPUT)]`: tries to write x's first byte.
fn scribble(args: &mut MappedArgs) -> Result<(), String> {
    let x = args.args.first_mut().ok_or("scribble takes 1 tensor")?;
    match x.bytes_mut() {
        Err(e) => Err(format!("write refused: {e}")),
        Ok(bytes) => {
            bytes[0] ^= 0xFF;
            Ok(())
        }
    }
}

// Chip callables ---------------------------------------------------------------------------------

/// An orchestration that blocks for 5 s and submits nothing (no tensors).
fn blocker() -> OrchFn {
    Arc::new(|_rt: &mut Rt<'_, '_>| {
        std::thread::sleep(Duration::from_secs(5));
        Ok(())
    })
}

/// `[a (In), f (Out)]`: one task running the `fail` kernel (table `[fail]`) over a and f.
fn failing() -> OrchFn {
    Arc::new(|rt: &mut Rt<'_, '_>| -> Result<(), RtError> {
        let [a, f] = match rt.args().tensors() {
            [a, f] => [*a, *f],
            _ => return Err(rt.report_fatal(1)),
        };
        let mut t = [
            TaskArg {
                tensor: a,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: f,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_aiv(0, &mut t, &[])?;
        Ok(())
    })
}

struct Callables {
    vector: ChipCallableId,
    blocker: ChipCallableId,
    failing: ChipCallableId,
    copy: SubCallableId,
    fill: SubCallableId,
    whoami: SubCallableId,
    sleepy: SubCallableId,
    boom: SubCallableId,
    panicker: SubCallableId,
    scribble: SubCallableId,
}

/// A new (not yet initialized) Worker with every callable registered.
fn new_worker(chips: usize, subs: usize) -> (Worker, Callables) {
    let mut w = Worker::new(WorkerConfig::new(chips, subs)).expect("a Worker");
    let p = VectorExample
        .prepare("default")
        .expect("vector_example has a default case");
    let c = Callables {
        vector: w
            .register_chip("vector_example", p.callable)
            .expect("register"),
        blocker: w
            .register_chip(
                "blocker",
                simpler_host::callable::Callable::raw(blocker(), vec![], vec![]),
            )
            .expect("register"),
        failing: w
            .register_chip(
                "failing",
                simpler_host::callable::Callable::raw(
                    failing(),
                    vec![kernels::fail],
                    vec![ArgDirection::In, ArgDirection::Out],
                ),
            )
            .expect("register"),
        copy: register_sub(&mut w, "copy", copy),
        fill: register_sub(&mut w, "fill", fill),
        whoami: register_sub(&mut w, "whoami", whoami),
        sleepy: register_sub(&mut w, "sleepy", sleepy),
        boom: register_sub(&mut w, "boom", boom),
        panicker: register_sub(&mut w, "panicker", panicker),
        scribble: register_sub(&mut w, "scribble", scribble),
    };
    (w, c)
}

fn worker(chips: usize, subs: usize) -> (Worker, Callables) {
    let (mut w, c) = new_worker(chips, subs);
    w.init().expect("init");
    (w, c)
}

/// Inputs and a zeroed output for vector_example, with the golden of f.
struct VectorCase {
    a: Buffer,
    b: Buffer,
    f: Buffer,
    golden: Vec<f64>,
}

impl VectorCase {
    fn new(w: &Worker, salt: usize) -> Self {
        let bytes = (N * 4) as u64;
        let a = buffer(w, bytes, AccessMode::Read, BackendKind::PosixShm);
        let b = buffer(w, bytes, AccessMode::Read, BackendKind::ForkShm);
        let f = buffer(w, bytes, AccessMode::ReadWrite, BackendKind::PosixShm);
        let av: Vec<f32> = (0..N)
            .map(|i| ((i * 3 + salt) % 53) as f32 / 53.0 - 0.4)
            .collect();
        let bv: Vec<f32> = (0..N)
            .map(|i| ((i * 5 + 2 * salt) % 29) as f32 / 58.0)
            .collect();
        a.write(0, &f32_bytes(&av)).expect("a");
        b.write(0, &f32_bytes(&bv)).expect("b");
        let golden = av
            .iter()
            .zip(&bv)
            .map(|(&x, &y)| vector_f64(x as f64, y as f64))
            .collect();
        Self { a, b, f, golden }
    }

    fn args(&self) -> TaskArgs {
        targs(
            &[
                (mat(&self.a), TensorArgType::Input),
                (mat(&self.b), TensorArgType::Input),
                (mat(&self.f), TensorArgType::OutputExisting),
            ],
            &[],
        )
    }

    /// Runs it on `chip` and checks f against the golden.
    #[track_caller]
    fn run_and_check(&self, w: &Worker, c: &Callables, chip: usize) {
        self.f.write(0, &vec![0u8; N * 4]).expect("clear f");
        let args = self.args();
        w.run(|o| {
            o.submit_next_level(chip, c.vector, &args, &call_config())
                .map(|_| ())
        })
        .unwrap_or_else(|e| panic!("vector_example on chip {chip}: {e}"));
        let got = self.f.read_f32s(0, N).expect("f");
        assert_close(&got, &self.golden, &format!("chip {chip}: f"));
    }
}

/// Polls `b` (4 bytes) until a nonzero pid appears in it.
fn await_pid(b: &Buffer, within: Duration) -> i32 {
    let deadline = Instant::now() + within;
    loop {
        let mut p = [0u8; 4];
        b.read(0, &mut p).expect("read");
        let pid = u32::from_le_bytes(p);
        if pid != 0 {
            return pid as i32;
        }
        assert!(
            Instant::now() < deadline,
            "no task started within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

// ------------------------------------------------------------------------------------------------
// Children killed
// ------------------------------------------------------------------------------------------------

fn sigkill_chip_mid_run() {
    let (mut w, c) = worker(2, 1);
    let pid0 = w.chip_pid(0).expect("chip 0's pid");
    let pid1 = w.chip_pid(1).expect("chip 1's pid");
    assert!(pid0 > 0 && pid1 > 0 && pid0 != pid1);
    let case = VectorCase::new(&w, 1);
    let h = w
        .submit(|o| {
            o.submit_next_level(0, c.blocker, &TaskArgs::new(), &call_config())
                .map(|_| ())
        })
        .expect("submit the blocker");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!h.done(), "the blocker is still running");
    kill9(pid0);
    let killed = Instant::now();
    let r = h.wait(Some(Duration::from_secs(10)));
    let detected = killed.elapsed();
    assert_fails!(
        &r,
        L3Error::Endpoint { endpoint, message, .. }
            if endpoint.contains("chip 0") && message.contains("signal 9")
    );
    assert!(
        detected < Duration::from_secs(2),
        "the loss was reported {detected:?} after the kill"
    );
    assert!(!proc_alive(pid0), "the killed chip was reaped");
    // Chip 1 serves on.
    case.run_and_check(&w, &c, 1);
    assert_eq!(w.chip_pid(1), Some(pid1));
    // Chip 0 does not: its tasks fail with the endpoint error, at once.
    let t = Instant::now();
    let r = w.run(|o| {
        o.submit_next_level(0, c.vector, &case.args(), &call_config())
            .map(|_| ())
    });
    assert_fails!(
        &r,
        L3Error::Endpoint { endpoint, message, .. }
            if endpoint.contains("chip 0") && message.contains("signal 9")
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    // A group naming chip 0 fails the same way.
    let args = [case.args(), case.args()];
    let r = w.run(|o| {
        o.submit_next_level_group(c.vector, &[1, 0], &args, &call_config())
            .map(|_| ())
    });
    assert_fails!(&r, L3Error::Endpoint { endpoint, .. } if endpoint.contains("chip 0"));
    // Control requests to chip 0 are refused; chip 1's still work.
    assert_fails!(w.alloc_child_tensor(0, 1024), L3Error::Control { .. });
    let d = w.alloc_child_tensor(1, 1024).expect("chip 1 allocates");
    w.release_buffer(&d).expect("release");
    // And the SUB child.
    w.run(|o| o.submit_sub(c.sleepy, &targs(&[], &[1])).map(|_| ()))
        .expect("the SUB child serves");
    case.run_and_check(&w, &c, 1);
    close(&mut w);
}

fn sigkill_sub_worker() {
    let (mut w, c) = worker(0, 2);
    let subs = [w.sub_pid(0).expect("pid"), w.sub_pid(1).expect("pid")];
    let slot = buffer(&w, 4, AccessMode::ReadWrite, BackendKind::ForkShm);
    let block = whoami_args(&slot, 5000);
    let h = w
        .submit(|o| o.submit_sub(c.whoami, &block).map(|_| ()))
        .expect("submit");
    let victim = await_pid(&slot, Duration::from_secs(2));
    let index = subs
        .iter()
        .position(|&p| p == victim)
        .expect("the task runs in a SUB child");
    let survivor = subs[1 - index];
    kill9(victim);
    let killed = Instant::now();
    let r = h.wait(Some(Duration::from_secs(10)));
    let detected = killed.elapsed();
    let name = format!("sub-worker {index}");
    assert_fails!(
        &r,
        L3Error::Endpoint { endpoint, message, .. }
            if *endpoint == name && message.contains("signal 9")
    );
    assert!(
        detected < Duration::from_secs(2),
        "reported after {detected:?}"
    );
    // The other SUB child serves every later task.
    let outs: Vec<Buffer> = (0..4)
        .map(|_| buffer(&w, 4, AccessMode::ReadWrite, BackendKind::ForkShm))
        .collect();
    for round in 0..2 {
        let tasks: Vec<TaskArgs> = outs
            .iter()
            .map(|b| {
                b.write(0, &[0; 4]).expect("clear");
                whoami_args(b, 0)
            })
            .collect();
        w.run(|o| {
            for t in &tasks {
                o.submit_sub(c.whoami, t)?;
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        for b in &outs {
            assert_eq!(await_pid(b, Duration::ZERO), survivor, "round {round}");
        }
    }
    // A SUB group wider than the live SUB children cannot run; it must end with an error, not
    // wait forever.
    let pair = [whoami_args(&outs[0], 0), whoami_args(&outs[1], 0)];
    let h = w
        .submit(|o| o.submit_sub_group(c.whoami, &pair).map(|_| ()))
        .expect("submit the group");
    let r = h.wait(Some(Duration::from_secs(3)));
    // A group wider than the live SUB children fails instead of waiting (it used to wedge
    // the Worker, holding every SUB lane reserved).
    assert_fails!(&r, L3Error::Endpoint { .. } | L3Error::NoSubWorkers { .. });
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// Shared-memory names
// ------------------------------------------------------------------------------------------------

fn no_shm_survives_close() {
    // 1. A clean close. One POSIX_SHM buffer made before init (under the pre-init nonce).
    let (mut w, c) = new_worker(1, 1);
    let early = buffer(&w, 64, AccessMode::ReadWrite, BackendKind::PosixShm);
    let early_name = early.shm_name().expect("POSIX_SHM").to_string();
    w.init().expect("init");
    let nonce = w.owner_instance_id();
    let prefix = shm_prefix(&nonce);
    let case = VectorCase::new(&w, 2);
    let extra: Vec<Buffer> = (0..3)
        .map(|i| {
            buffer(
                &w,
                256 * (i + 1),
                AccessMode::ReadWrite,
                BackendKind::PosixShm,
            )
        })
        .collect();
    extra[0].write(0, &pattern(256, 3)).expect("fill");
    let t = targs(
        &[
            (
                dense(&extra[0], &[256], DataType::Uint8, 0),
                TensorArgType::Input,
            ),
            (
                dense(&extra[1], &[256], DataType::Uint8, 0),
                TensorArgType::OutputExisting,
            ),
        ],
        &[],
    );
    w.run(|o| o.submit_sub(c.copy, &t).map(|_| ()))
        .expect("a SUB copy");
    assert_eq!(read_bytes(&extra[1])[..256], pattern(256, 3)[..]);
    case.run_and_check(&w, &c, 0);
    // Before close the names exist: a (and f) of the case, and the three extra buffers.
    let mut names: Vec<String> = [&case.a, &case.f]
        .into_iter()
        .chain(&extra)
        .map(|b| b.shm_name().expect("POSIX_SHM").to_string())
        .collect();
    names.sort();
    let mut live = shm_entries(&prefix);
    live.sort();
    assert_eq!(live, names, "the Worker's names in /dev/shm");
    assert!(Path::new("/dev/shm").join(&early_name).exists());
    close(&mut w);
    assert_eq!(shm_entries(&prefix), Vec::<String>::new(), "after close");
    assert!(
        !Path::new("/dev/shm").join(&early_name).exists(),
        "{early_name}"
    );
    assert!(case.a.is_closed() && extra[2].is_closed());

    // 2. A chip child killed, then close.
    let (mut w, c) = worker(2, 1);
    let prefix = shm_prefix(&w.owner_instance_id());
    let case = VectorCase::new(&w, 3);
    case.run_and_check(&w, &c, 0);
    assert_eq!(shm_entries(&prefix).len(), 2, "a and f");
    let pid0 = w.chip_pid(0).expect("pid");
    kill9(pid0);
    // The loss shows on the next task for chip 0.
    let r = w.run(|o| {
        o.submit_next_level(0, c.vector, &case.args(), &call_config())
            .map(|_| ())
    });
    assert_fails!(&r, L3Error::Endpoint { .. });
    case.run_and_check(&w, &c, 1);
    close(&mut w);
    assert_eq!(
        shm_entries(&prefix),
        Vec::<String>::new(),
        "after a crash and close"
    );

    // 3. Dropped without close: no names, no children.
    let (w, c) = worker(1, 1);
    let prefix = shm_prefix(&w.owner_instance_id());
    let case = VectorCase::new(&w, 4);
    case.run_and_check(&w, &c, 0);
    let pids = [w.chip_pid(0).expect("pid"), w.sub_pid(0).expect("pid")];
    assert!(pids.iter().all(|&p| proc_alive(p)));
    assert_eq!(shm_entries(&prefix).len(), 2);
    drop(w);
    assert_eq!(shm_entries(&prefix), Vec::<String>::new(), "after drop");
    let deadline = Instant::now() + Duration::from_secs(1);
    while pids.iter().any(|&p| proc_alive(p)) {
        assert!(
            Instant::now() < deadline,
            "children outlived the dropped Worker: {:?}",
            pids.iter().filter(|&&p| proc_alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // 4. Dropped with a run in flight: Drop does not wait for the run, and the run ends with
    // the endpoint error of the child it killed.
    let (w, c) = worker(0, 1);
    let prefix = shm_prefix(&w.owner_instance_id());
    let slot = buffer(&w, 4, AccessMode::ReadWrite, BackendKind::PosixShm);
    let t = whoami_args(&slot, 5000);
    let h = w
        .submit(|o| o.submit_sub(c.whoami, &t).map(|_| ()))
        .expect("submit");
    let pid = await_pid(&slot, Duration::from_secs(2));
    let t0 = Instant::now();
    drop(w);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "Drop waited {:?}",
        t0.elapsed()
    );
    assert_fails!(
        h.wait(Some(Duration::from_secs(1))),
        L3Error::Endpoint { .. }
    );
    assert!(
        !proc_alive(pid),
        "the SUB child outlived the dropped Worker"
    );
    assert_eq!(
        shm_entries(&prefix),
        Vec::<String>::new(),
        "after drop mid-run"
    );
}

// ------------------------------------------------------------------------------------------------
// READ buffers
// ------------------------------------------------------------------------------------------------

fn read_buffer_write_refused() {
    let (mut w, c) = new_worker(1, 1);
    let cow = buffer(&w, 512, AccessMode::Read, BackendKind::ForkCow);
    let cow_data = pattern(512, 5);
    cow.write(0, &cow_data).expect("fill the snapshot");
    w.init().expect("init");
    let shm = buffer(&w, 512, AccessMode::Read, BackendKind::PosixShm);
    let shm_data = pattern(512, 6);
    shm.write(0, &shm_data).expect("fill");

    for (b, data) in [(&shm, &shm_data), (&cow, &cow_data)] {
        let what = format!("{:?}", b.backend());
        let t = targs(
            &[(dense(b, &[512], DataType::Uint8, 0), TensorArgType::Input)],
            &[],
        );
        let r = w.run(|o| o.submit_sub(c.scribble, &t).map(|_| ()));
        assert_fails!(
            &r,
            L3Error::TaskFailed { message, .. } if message.contains("READ"),
        );
        assert_eq!(&read_bytes(b), data, "{what}: the owner's data");
        // The SUB child is fine, and copying out of the buffer works.
        let out = buffer(&w, 512, AccessMode::ReadWrite, BackendKind::ForkShm);
        let t = targs(
            &[
                (dense(b, &[512], DataType::Uint8, 0), TensorArgType::Input),
                (
                    dense(&out, &[512], DataType::Uint8, 0),
                    TensorArgType::OutputExisting,
                ),
            ],
            &[],
        );
        w.run(|o| o.submit_sub(c.copy, &t).map(|_| ()))
            .unwrap_or_else(|e| panic!("{what}: copy: {e}"));
        assert_eq!(&read_bytes(&out), data, "{what}: what the child sees");
    }

    // A READ buffer where vector_example writes: refused at submit, whatever the tag.
    let case = VectorCase::new(&w, 5);
    let ro = buffer(&w, (N * 4) as u64, AccessMode::Read, BackendKind::PosixShm);
    let ro_data = pattern(N * 4, 7);
    ro.write(0, &ro_data).expect("fill");
    let mut refusals = Vec::new();
    for tag in [TensorArgType::NoDep, TensorArgType::Output] {
        let t = targs(
            &[
                (mat(&case.a), TensorArgType::Input),
                (mat(&case.b), TensorArgType::Input),
                (mat(&ro), tag),
            ],
            &[],
        );
        let mut refused = None;
        let summary = w
            .run(|o| {
                refused = Some(o.submit_next_level(0, c.vector, &t, &call_config()));
                Ok(())
            })
            .expect("an empty run");
        assert_eq!(summary.tasks, 0, "{tag:?}: nothing was submitted");
        refusals.push((tag, refused.expect("the orchestration ran")));
    }
    for (tag, r) in refusals {
        assert_fails!(
            r,
            L3Error::Access { index: 2, tag: t, granted: AccessMode::Read } if t == tag
        );
    }
    // OUTPUT_EXISTING on a READ buffer does not even make it into the arguments.
    let mut t = TaskArgs::new();
    assert_fails!(
        t.add_tensor(mat(&ro), TensorArgType::OutputExisting),
        TaskArgsError::AccessDenied { index: 0, .. }
    );
    assert_eq!(read_bytes(&ro), ro_data, "the READ buffer is unchanged");
    // The chip serves on.
    case.run_and_check(&w, &c, 0);
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// Failing tasks
// ------------------------------------------------------------------------------------------------

/// A fails ("boom") writing x; B reads x and writes y; D reads y and writes z; C writes u,
/// independent. B and D do not run (y and z keep their contents), C does, and the run's error is
/// A's TaskFailed. Once with A still running when B is submitted (B waits on it), once with A
/// already failed (B is poisoned at submit).
fn failed_task_poisons_its_consumers_only() {
    let (mut w, c) = worker(0, 2);
    let n = 256usize;
    let mk = || f32_buffer(&w, n, BackendKind::PosixShm);
    let (x, y, z, u) = (mk(), mk(), mk(), mk());
    let vec1 = |b: &Buffer| dense(b, &[n as u32], DataType::Float32, 0);
    for (round, a_sleep, orch_pause) in [(0, 150u64, 0u64), (1, 0, 150)] {
        for (b, val) in [(&x, 1.0f32), (&y, 2.0), (&z, 3.0), (&u, 4.0)] {
            b.write(0, &f32_bytes(&vec![val; n])).expect("fill");
        }
        let a = targs(&[(vec1(&x), TensorArgType::OutputExisting)], &[a_sleep]);
        let b = targs(
            &[
                (vec1(&x), TensorArgType::Input),
                (vec1(&y), TensorArgType::OutputExisting),
            ],
            &[],
        );
        let d = targs(
            &[
                (vec1(&y), TensorArgType::Input),
                (vec1(&z), TensorArgType::OutputExisting),
            ],
            &[],
        );
        let cc = targs(
            &[(vec1(&u), TensorArgType::OutputExisting)],
            &[9.0f32.to_bits() as u64],
        );
        let mut ids = Vec::new();
        let r = w.run(|o| {
            ids.push(o.submit_sub(c.boom, &a)?);
            std::thread::sleep(Duration::from_millis(orch_pause));
            ids.push(o.submit_sub(c.copy, &b)?);
            ids.push(o.submit_sub(c.copy, &d)?);
            ids.push(o.submit_sub(c.fill, &cc)?);
            Ok(())
        });
        assert_eq!(ids.len(), 4, "round {round}: every submit was accepted");
        assert_fails!(
            &r,
            L3Error::TaskFailed { task, message, .. } if *task == ids[0] && message == "boom",
        );
        for (buf, name, want, what) in [
            (&y, "y", 2.0, "B ran"),
            (&z, "z", 3.0, "D ran"),
            (&u, "u", 9.0, "C ran"),
            (&x, "x", 1.0, "x"),
        ] {
            assert_eq!(
                buf.read_f32s(0, n).expect(name),
                vec![want; n],
                "round {round}: {what}"
            );
        }
    }
    // The poison does not outlive the run: the next run reads x and writes y.
    let b = targs(
        &[
            (vec1(&x), TensorArgType::Input),
            (vec1(&y), TensorArgType::OutputExisting),
        ],
        &[],
    );
    w.run(|o| o.submit_sub(c.copy, &b).map(|_| ()))
        .expect("a clean run");
    assert_eq!(y.read_f32s(0, n).expect("y"), vec![1.0; n]);
    close(&mut w);
}

fn panicking_callable_fails_its_task_only() {
    let (mut w, c) = worker(0, 1);
    let pid = w.sub_pid(0).expect("pid");
    for round in 0..2 {
        let r = w.run(|o| o.submit_sub(c.panicker, &TaskArgs::new()).map(|_| ()));
        assert_fails!(
            &r,
            L3Error::TaskFailed { message, endpoint, .. }
                if message.contains("kaboom 7") && endpoint == "sub-worker 0",
        );
        assert!(proc_alive(pid), "round {round}: the SUB child survived");
        assert_eq!(w.sub_pid(0), Some(pid));
        let out = buffer(&w, 4, AccessMode::ReadWrite, BackendKind::ForkShm);
        let t = whoami_args(&out, 0);
        w.run(|o| o.submit_sub(c.whoami, &t).map(|_| ()))
            .expect("the next run works");
        assert_eq!(await_pid(&out, Duration::ZERO), pid, "in the same child");
    }
    close(&mut w);
}

/// An orchestration function that fails after submitting a task: the task still runs, and the
/// run's error is the orchestration's. One that panics: the panic reaches the caller, the run
/// is closed, and the Worker takes the next run and closes.
fn orchestration_error_or_panic_ends_its_run() {
    let (mut w, c) = worker(0, 1);
    let n = 64usize;
    let x = f32_buffer(&w, n, BackendKind::ForkShm);
    let fill_with = |value: f32| {
        targs(
            &[(
                dense(&x, &[n as u32], DataType::Float32, 0),
                TensorArgType::OutputExisting,
            )],
            &[value.to_bits() as u64],
        )
    };
    let t = fill_with(5.0);
    let r = w.run(|o| {
        o.submit_sub(c.fill, &t)?;
        Err(L3Error::Orchestration("user says no".into()))
    });
    assert_eq!(r, Err(L3Error::Orchestration("user says no".into())));
    assert_eq!(
        x.read_f32s(0, n).expect("x"),
        vec![5.0; n],
        "the submitted task ran"
    );
    // Another error kind from inside the orchestration comes back as an Orchestration error.
    let r = w.run(|o| {
        o.submit_next_level(0, c.vector, &t, &call_config())
            .map(|_| ())
    });
    assert_fails!(&r, L3Error::Orchestration(m) if m.contains("no chip 0"));

    let t = fill_with(6.0);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.submit(|o| {
            o.submit_sub(c.fill, &t)?;
            panic!("the orchestration gives up");
        })
    }));
    let payload = panicked.err().expect("the panic reaches the caller");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the orchestration gives up")
    );
    // The next run is admitted (the panicked one was closed) and works.
    let t = fill_with(7.0);
    let h = w
        .submit(|o| o.submit_sub(c.fill, &t).map(|_| ()))
        .expect("submit after the panic");
    h.wait(Some(Duration::from_secs(10)))
        .expect("the run after the panic");
    assert_eq!(x.read_f32s(0, n).expect("x"), vec![7.0; n]);
    close(&mut w);
}

// ------------------------------------------------------------------------------------------------
// close()
// ------------------------------------------------------------------------------------------------

fn close_budget() {
    let (mut w, c) = worker(0, 1);
    let h = submit_sleep(&w, c.sleepy, 1000);
    let t = Instant::now();
    assert_fails!(
        w.close(Duration::from_millis(50)),
        L3Error::CloseTimeout { .. }
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "close kept its budget"
    );
    assert_eq!(w.lifecycle(), Lifecycle::Closing);
    // A Closing Worker takes no new runs.
    assert!(
        matches!(w.submit(|_| Ok(())), Err(L3Error::Closed)),
        "a Closing Worker refuses runs"
    );
    w.close(CLOSE).expect("the second close");
    assert_eq!(w.lifecycle(), Lifecycle::Closed);
    // The run in flight was drained, not abandoned.
    let s = h.wait(Some(Duration::ZERO)).expect("the run completed");
    assert_eq!(s.tasks, 1);
    assert!(s.elapsed >= Duration::from_millis(1000));
    // Closing again is a no-op.
    w.close(CLOSE).expect("a third close");
}

// ------------------------------------------------------------------------------------------------
// A kernel failure on a chip
// ------------------------------------------------------------------------------------------------

fn failing_kernel_fails_the_task_and_the_chip_serves_on() {
    let (mut w, c) = worker(1, 0);
    let pid = w.chip_pid(0).expect("pid");
    let case = VectorCase::new(&w, 6);
    for round in 0..2 {
        let sentinel = pattern(N * 4, 8 + round);
        case.f.write(0, &sentinel).expect("fill f");
        let t = targs(
            &[
                (mat(&case.a), TensorArgType::Input),
                (mat(&case.f), TensorArgType::OutputExisting),
            ],
            &[],
        );
        let mut id = None;
        let r = w.run(|o| {
            id = Some(o.submit_next_level(0, c.failing, &t, &call_config())?);
            Ok(())
        });
        let id = id.expect("submitted");
        assert_fails!(
            &r,
            L3Error::TaskFailed { task, endpoint, message }
                if *task == id
                    && endpoint == "chip 0"
                    && message.contains("kernel-specific failure")
                    && message.contains(&format!("detail {}", kernels::FAIL_CODE)),
        );
        assert_eq!(
            read_bytes(&case.f),
            sentinel,
            "a failed task writes nothing back"
        );
        assert!(proc_alive(pid));
        assert_eq!(w.chip_pid(0), Some(pid));
        case.run_and_check(&w, &c, 0);
    }
    close(&mut w);
}
