//! What the level-3 suites (`l3_scene`, `l3_faults`, `l3_reject`, `l3_scopes`) share: closing a
//! Worker, task arguments, tensor views of a `Buffer`, `vector_example`'s shape and golden,
//! and the SUB callables more than one suite registers.
//!
//! Every Worker forks its children, so these suites run on [`crate::forked::run`], and a SUB
//! callable here runs in a forked child: it reports failure as an `Err` message (the parent
//! sees it in an `L3Error::Endpoint`).

use simpler_core::mailbox::CallConfig;
use simpler_core::{AccessMode, BackendKind, DataType, TensorArgType, ValidTensor};
use simpler_host::l3::{Buffer, Lifecycle, MappedArgs, RunHandle, SubCallableId, Worker};
use simpler_host::TaskArgs;
use std::sync::Arc;
use std::time::Duration;

/// How long every `Worker::close` in the L3 suites may take: long enough for a loaded 2-CPU
/// machine to join the scheduler thread and reap every child.
pub const CLOSE: Duration = Duration::from_secs(20);

/// `vector_example`'s tensors: 128 x 128 f32.
pub const VECTOR_SHAPE: [u32; 2] = [128, 128];
/// Elements of a [`VECTOR_SHAPE`] tensor.
pub const VECTOR_N: usize = 128 * 128;

/// Closes `w` within [`CLOSE`] and asserts it is `Closed`.
#[track_caller]
pub fn close(w: &mut Worker) {
    w.close(CLOSE).expect("close");
    assert_eq!(w.lifecycle(), Lifecycle::Closed);
}

/// A SUB callable as these suites write one: a plain function of the task's mapped arguments.
pub type SubFnPtr = fn(&mut MappedArgs) -> Result<(), String>;

/// Registers `f` as SUB callable `name` on `w` (which must not be initialized yet); panics
/// naming the callable if the Worker refuses it.
pub fn register_sub(w: &mut Worker, name: &str, f: SubFnPtr) -> SubCallableId {
    w.register_sub(name, Arc::new(f))
        .unwrap_or_else(|e| panic!("register {name}: {e}"))
}

/// The all-zero `CallConfig` every chip task in these suites is submitted with: the
/// platform's default AICPU threads and ring sizes, no swimlane, dumps, PMU or dependency graph.
pub fn call_config() -> CallConfig {
    bytemuck::Zeroable::zeroed()
}

/// A task's arguments: the `(tensor, tag)` pairs in order, then `scalars`. Panics if the
/// builder refuses a tag (one the tensor's backing does not grant).
pub fn targs(tensors: &[(ValidTensor, TensorArgType)], scalars: &[u64]) -> TaskArgs {
    let mut a = TaskArgs::new();
    for &(t, tag) in tensors {
        a.add_tensor(t, tag).expect("the tag fits the buffer");
    }
    for &s in scalars {
        a.add_scalar(s);
    }
    a
}

/// A new buffer of `nbytes` on `w`; panics naming the request if the Worker refuses it.
pub fn buffer(w: &Worker, nbytes: u64, access: AccessMode, backend: BackendKind) -> Buffer {
    w.create_buffer(nbytes, access, backend)
        .unwrap_or_else(|e| panic!("create_buffer({nbytes}, {access:?}, {backend:?}): {e}"))
}

/// A READWRITE buffer of `n` f32 elements on `w`, of `backend`.
pub fn f32_buffer(w: &Worker, n: usize, backend: BackendKind) -> Buffer {
    buffer(w, (n * 4) as u64, AccessMode::ReadWrite, backend)
}

/// A dense row-major view of `b`: `shapes` of `dtype` from byte `offset`.
pub fn dense(b: &Buffer, shapes: &[u32], dtype: DataType, offset: u64) -> ValidTensor {
    b.tensor(shapes, dtype, offset).expect("a valid view")
}

/// The whole of `b`'s bytes, read from the host side.
pub fn read_bytes(b: &Buffer) -> Vec<u8> {
    let mut out = vec![0u8; b.nbytes() as usize];
    b.read(0, &mut out).expect("a host buffer");
    out
}

/// `vector_example`'s function of one element pair, in f64: `(s + 1)(s + 2) + s` with
/// `s = a + b`.
pub fn vector_f64(a: f64, b: f64) -> f64 {
    let s = a + b;
    (s + 1.0) * (s + 2.0) + s
}

/// Asserts `|got - want| <= 1e-4 + 1e-5 |want|` for every element (the tolerance of
/// `vector_example`'s f32 kernels against an f64 golden), naming `what` and the first element
/// that is off.
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-4 + 1e-5 * w.abs();
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}: element {i} is {g}, golden {w}"
        );
    }
}

/// Sleeps for scalar `index` of `args` in milliseconds, if the task has that scalar.
pub fn sleep_ms(args: &MappedArgs, index: usize) {
    if let Some(&ms) = args.scalars.get(index) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// SUB callable `[dst (OUTPUT_EXISTING, 4 bytes)]`, scalar 0 = milliseconds to sleep: writes the
/// running child's pid into dst, then sleeps (so a test can find, and kill, a busy child).
pub fn whoami(args: &mut MappedArgs) -> Result<(), String> {
    let dst = args.args.first_mut().ok_or("whoami takes 1 tensor")?;
    let out = dst.bytes_mut().map_err(|e| e.to_string())?;
    out[..4].copy_from_slice(&std::process::id().to_le_bytes());
    sleep_ms(args, 0);
    Ok(())
}

/// SUB callable, no tensors, scalar 0 = milliseconds to sleep: holds a SUB child that long.
pub fn sleepy(args: &mut MappedArgs) -> Result<(), String> {
    sleep_ms(args, 0);
    Ok(())
}

/// Submits a run of one [`sleepy`] task (registered on `w` as `sleepy`) holding a SUB child
/// for `ms` milliseconds; returns its handle without waiting.
pub fn submit_sleep(w: &Worker, sleepy: SubCallableId, ms: u64) -> RunHandle {
    let args = targs(&[], &[ms]);
    w.submit(|o| o.submit_sub(sleepy, &args).map(|_| ()))
        .expect("submit a sleepy task")
}

/// SUB callable, any arguments, optional scalar 0 = milliseconds to sleep first: then fails
/// with the message "boom".
pub fn boom(args: &mut MappedArgs) -> Result<(), String> {
    sleep_ms(args, 0);
    Err("boom".into())
}

/// [`whoami`]'s arguments: the first 4 bytes of `slot` (a byte view) for the pid, and `ms`.
pub fn whoami_args(slot: &Buffer, ms: u64) -> TaskArgs {
    let pid = dense(slot, &[4], DataType::Uint8, 0);
    targs(&[(pid, TensorArgType::OutputExisting)], &[ms])
}
