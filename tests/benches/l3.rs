//! `l3`: the level-3 round trip, and argument bytes per tensor on the wire.
//!
//! Workload: a Worker with one SUB child and one chip child (a2a3sim), set up once. Each sample
//! is one `Worker::run` whose orchestration submits K independent empty tasks to the same
//! child; arms K = 1 and K = 32 alternate (1, 32, 1, 32, ...) in one process. A run's wall
//! time is fixed + K x per-task, so per-task = (t32 - t1) / 31 and fixed = t1 - per-task,
//! each from the medians (and from the minimums).
//!
//! - `sub_*`: the empty SUB callable (a host function in the child): the engine's submit, the
//!   scheduler's dispatch into the mailbox, the child's wake-up, decode of the (empty) blob, the
//!   reply and the completion — the whole L3 machinery, no device.
//! - `sub_tensor_*`: the same with one 4 KiB POSIX_SHM tensor per task (mapped once; decode,
//!   validation and the registry lookup per task).
//! - `chip_*`: an empty chip callable (an orchestration function that submits nothing), which
//!   adds the simulated device's run.
//!
//! `spin_*`: the same empty SUB round trip under five waiting policies on one Worker, switched
//! through `Worker::set_spin` and interleaved sample by sample: doorbell spin 50 us, 0 (block
//! at once), 200 us, each with no spinning in `RunHandle::wait`; and doorbell 50 us with 20 us
//! (the defaults) or 100 us of spinning in `RunHandle::wait`. Spinning yields the CPU after its
//! first 2 us.
//!
//! `bytes_per_tensor` is the blob size per tensor for T tensors and no scalars:
//! (8 + 144 T) / T.
//!
//! Not shown: more than one task in flight per child (the single-frame protocol runs one task
//! per child at a time), and machines with more than 2 CPUs.
//!
//! Run: `cargo bench -p simpler-tests --bench l3` (`SIMPLER_BENCH_SMOKE=1`: one sample per
//! arm).

use simpler_core::mailbox::CallConfig;
use simpler_core::{AccessMode, BackendKind, DataType, TensorArgType};
use simpler_host::l3::{L3Error, Worker, WorkerConfig};
use simpler_host::TaskArgs;
use simpler_tests::measure::{report, sized, summarize};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLES: usize = 41;
const K: usize = 32;

fn fit(name: &str, one: &mut [f64], many: &mut [f64]) {
    let s1 = summarize(one).expect("samples");
    let sk = summarize(many).expect("samples");
    let per_task = (sk.median - s1.median) / (K - 1) as f64;
    let per_task_min = (sk.min - s1.min) / (K - 1) as f64;
    report("l3", &format!("{name}_run_1_task_median"), s1.median, "us");
    report(
        "l3",
        &format!("{name}_run_{K}_tasks_median"),
        sk.median,
        "us",
    );
    report("l3", &format!("{name}_per_task_median"), per_task, "us");
    report("l3", &format!("{name}_per_task_min"), per_task_min, "us");
    report(
        "l3",
        &format!("{name}_fixed_median"),
        s1.median - per_task,
        "us",
    );
    report(
        "l3",
        &format!("{name}_fixed_min"),
        s1.min - per_task_min,
        "us",
    );
}

fn spin_policies() {
    let policies = [
        ("spin_50us", Duration::from_micros(50), Duration::ZERO),
        ("spin_0", Duration::ZERO, Duration::ZERO),
        ("spin_200us", Duration::from_micros(200), Duration::ZERO),
        (
            "spin_50us_wait_20us",
            Duration::from_micros(50),
            Duration::from_micros(20),
        ),
        (
            "spin_50us_wait_100us",
            Duration::from_micros(50),
            Duration::from_micros(100),
        ),
    ];
    let mut config = WorkerConfig::new(0, 1);
    config.fork_arena_bytes = 1 << 20;
    let mut w = Worker::new(config).expect("worker");
    let id = w
        .register_sub("empty", Arc::new(|_args| Ok(())))
        .expect("register");
    w.init().expect("init");
    let empty = TaskArgs::new();
    let run = |k: usize| -> f64 {
        let start = Instant::now();
        w.run(|o| {
            for _ in 0..k {
                o.submit_sub(id, &empty)?;
            }
            Ok::<(), L3Error>(())
        })
        .expect("run");
        start.elapsed().as_secs_f64() * 1e6
    };
    let samples = sized(SAMPLES, 1);
    let mut one = vec![Vec::with_capacity(samples); policies.len()];
    let mut many = vec![Vec::with_capacity(samples); policies.len()];
    for _ in 0..samples {
        for (p, &(_, spin, wait)) in policies.iter().enumerate() {
            // One Worker, the policy switched in shared memory; one untimed run settles it.
            w.set_spin(spin, wait).expect("set spin");
            run(K);
            one[p].push(run(1));
            many[p].push(run(K));
        }
    }
    for (p, (name, _, _)) in policies.iter().enumerate() {
        fit(name, &mut one[p], &mut many[p]);
    }
    w.close(Duration::from_secs(20)).expect("close");
}

fn main() {
    let mut worker = Worker::new(WorkerConfig::new(1, 1)).expect("worker");
    let sub = worker
        .register_sub("empty", Arc::new(|_args| Ok(())))
        .expect("register");
    let chip = worker
        .register_chip(
            "empty",
            simpler_host::callable::Callable::raw(Arc::new(|_rt| Ok(())), Vec::new(), Vec::new()),
        )
        .expect("register");
    worker.init().expect("init");
    let buf = worker
        .create_buffer(4096, AccessMode::ReadWrite, BackendKind::PosixShm)
        .expect("buffer");
    let tensor = buf.tensor(&[1024], DataType::Float32, 0).expect("tensor");
    let cfg: CallConfig = bytemuck::Zeroable::zeroed();
    let empty = TaskArgs::new();
    let mut with_tensor = TaskArgs::new();
    with_tensor
        .add_tensor(tensor, TensorArgType::NoDep)
        .expect("tensor arg");

    #[derive(Clone, Copy)]
    enum Arm {
        Sub,
        SubTensor,
        Chip,
    }
    let run = |arm: Arm, k: usize| -> f64 {
        let start = Instant::now();
        worker
            .run(|o| {
                for _ in 0..k {
                    match arm {
                        Arm::Sub => o.submit_sub(sub, &empty)?,
                        Arm::SubTensor => o.submit_sub(sub, &with_tensor)?,
                        Arm::Chip => o.submit_next_level(0, chip, &empty, &cfg)?,
                    };
                }
                Ok::<(), L3Error>(())
            })
            .expect("run");
        start.elapsed().as_secs_f64() * 1e6
    };
    let samples = sized(SAMPLES, 1);
    for arm in [Arm::Sub, Arm::SubTensor, Arm::Chip] {
        let name = match arm {
            Arm::Sub => "sub",
            Arm::SubTensor => "sub_tensor",
            Arm::Chip => "chip",
        };
        // Warm-up: first mappings, first device run.
        run(arm, K);
        let mut zero = Vec::with_capacity(samples);
        let mut one = Vec::with_capacity(samples);
        let mut many = Vec::with_capacity(samples);
        for _ in 0..samples {
            zero.push(run(arm, 0));
            one.push(run(arm, 1));
            many.push(run(arm, K));
        }
        if let Some(z) = summarize(&mut zero) {
            report("l3", &format!("{name}_run_0_tasks_median"), z.median, "us");
        }
        fit(name, &mut one, &mut many);
    }
    spin_policies();
    for t in [1usize, 16, 256] {
        let mut args = TaskArgs::new();
        for _ in 0..t {
            args.add_tensor(tensor, TensorArgType::NoDep)
                .expect("tensor");
        }
        let bytes = args.to_mailbox_blob().expect("blob").len();
        assert_eq!(bytes, 8 + 144 * t, "two counts, then 144 bytes per tensor");
        report(
            "l3",
            &format!("bytes_per_tensor_{t}"),
            bytes as f64 / t as f64,
            "B",
        );
    }
    worker.close(Duration::from_secs(20)).expect("close");
}
