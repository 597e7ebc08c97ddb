//! `l3_vector`: vector_example on two chips in child processes, chained through a shared
//! buffer, then a SUB worker that sums the result.
//!
//! ```text
//!  a0, b0 (POSIX_SHM, READ) ──► chip 0: f0 = v(a0, b0)  ──► f0 (FORK_SHM) ─┐
//!                                                                           ├─► chip 1: f1 = v(f0, b1) ──► f1 (POSIX_SHM)
//!  b1 (POSIX_SHM, READ) ────────────────────────────────────────────────────┘                 │
//!                                                            SUB: sum(f1) ──► total (FORK_SHM) ◄┘
//! ```
//!
//! with v(a, b) = (a + b + 1)(a + b + 2) + (a + b), the vector_example body. The tags alone
//! order the three tasks: chip 1 reads what chip 0 writes; the SUB task reads what chip 1
//! writes. Each round writes new inputs; the goldens are computed here in f64.

use super::vector::VectorExample;
use super::{compare, Check, Scene};
use crate::l3::{Buffer, L3Error, MappedArgs, RunSummary, Worker, WorkerConfig};
use crate::task_args::TaskArgs;
use simpler_core::mailbox::CallConfig;
use simpler_core::{AccessMode, BackendKind, DataType, TensorArgType, ValidTensor};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Elements per tensor (vector_example's 128 x 128).
pub const N: usize = 128 * 128;
const SHAPE: [u32; 2] = [128, 128];

/// The body both chips run, in f64.
pub fn v(a: f64, b: f64) -> f64 {
    super::vector::golden(a, b)
}

/// The scene's Worker and buffers, set up once and run for many rounds.
pub struct L3Vector {
    worker: Worker,
    a0: Buffer,
    b0: Buffer,
    b1: Buffer,
    f0: Buffer,
    f1: Buffer,
    total: Buffer,
    chip: crate::l3::ChipCallableId,
    sum: crate::l3::SubCallableId,
}

/// One round's result.
#[derive(Clone, Copy, Debug)]
pub struct RoundReport {
    /// Chip 0's output against its golden.
    pub chip0: Check,
    /// Chip 1's output against its golden.
    pub chip1: Check,
    /// The SUB worker's sum against the f64 sum of the golden.
    pub sum_ok: bool,
    /// What the engine reports of the run (its id, tasks submitted, time from the first
    /// submit to the last completion).
    pub summary: RunSummary,
    /// Wall time of the run, from the call into the Worker to its return.
    pub wall: Duration,
}

impl RoundReport {
    /// Whether every golden passed.
    pub fn pass(&self) -> bool {
        self.chip0.pass && self.chip1.pass && self.sum_ok
    }
}

/// One task's arguments: `tensors` with their tags, in order.
fn task_args<const N: usize>(
    tensors: [(ValidTensor, TensorArgType); N],
) -> Result<TaskArgs, L3Error> {
    let mut args = TaskArgs::new();
    for (tensor, tag) in tensors {
        args.add_tensor(tensor, tag).map_err(L3Error::Args)?;
    }
    Ok(args)
}

/// The SUB callable: total[0] = sum of the input's elements (f64 accumulation, stored as f32).
fn sum_task(args: &mut MappedArgs) -> Result<(), String> {
    if args.args.len() != 2 {
        return Err(format!("sum takes 2 tensors, got {}", args.args.len()));
    }
    let total: f64 = args.args[0].read_f32s().iter().map(|&x| x as f64).sum();
    args.args[1]
        .write_f32s(&[total as f32])
        .map_err(|e| e.to_string())
}

impl L3Vector {
    /// The chips the scene runs on: chip 0 feeds chip 1.
    pub const CHIPS: usize = 2;

    /// Builds the Worker (`chips` chip children, one SUB child), forks it, and creates the
    /// buffers. Chip 0 feeds chip 1, so fewer than [`Self::CHIPS`] is refused
    /// ([`L3Error::TooFewChips`]); more leaves the others idle.
    pub fn new(chips: usize) -> Result<Self, L3Error> {
        if chips < Self::CHIPS {
            return Err(L3Error::TooFewChips {
                needed: Self::CHIPS,
                have: chips,
            });
        }
        let mut worker = Worker::new(WorkerConfig::new(chips, 1))?;
        let p = VectorExample
            .prepare("default")
            .expect("vector_example has a default case");
        let chip = worker.register_chip("vector_example", p.callable)?;
        let sum = worker.register_sub("sum", Arc::new(sum_task))?;
        worker.init()?;
        let bytes = (N * 4) as u64;
        let shm = |access| worker.create_buffer(bytes, access, BackendKind::PosixShm);
        let a0 = shm(AccessMode::Read)?;
        let b0 = shm(AccessMode::Read)?;
        let b1 = shm(AccessMode::Read)?;
        let f1 = shm(AccessMode::ReadWrite)?;
        let f0 = worker.create_buffer(bytes, AccessMode::ReadWrite, BackendKind::ForkShm)?;
        let total = worker.create_buffer(4, AccessMode::ReadWrite, BackendKind::ForkShm)?;
        Ok(Self {
            worker,
            a0,
            b0,
            b1,
            f0,
            f1,
            total,
            chip,
            sum,
        })
    }

    /// The Worker the scene runs on (two or more chip children and one SUB child), to read
    /// its state between rounds.
    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// The Worker, mutably (to close it).
    pub fn worker_mut(&mut self) -> &mut Worker {
        &mut self.worker
    }

    /// Runs round `round`: fresh inputs, the three tasks, the goldens.
    pub fn round(&self, round: usize) -> Result<RoundReport, L3Error> {
        let r = round as f32;
        let a0: Vec<f32> = (0..N)
            .map(|i| ((i % 97) as f32 / 97.0) - 0.5 + 0.01 * r)
            .collect();
        let b0: Vec<f32> = (0..N).map(|i| ((i % 31) as f32 / 62.0) - 0.25).collect();
        let b1: Vec<f32> = (0..N)
            .map(|i| 0.5 - ((i % 13) as f32 / 26.0) - 0.02 * r)
            .collect();
        self.a0.write_f32s(0, &a0)?;
        self.b0.write_f32s(0, &b0)?;
        self.b1.write_f32s(0, &b1)?;
        self.f0.write_f32s(0, &vec![0.0; N])?;
        self.f1.write_f32s(0, &vec![0.0; N])?;
        self.total.write_f32s(0, &[0.0])?;
        let t = |b: &Buffer| b.tensor(&SHAPE, DataType::Float32, 0);
        let cfg: CallConfig = bytemuck::Zeroable::zeroed();
        let start = Instant::now();
        let summary = self.worker.run(|o| {
            let first = task_args([
                (t(&self.a0)?, TensorArgType::Input),
                (t(&self.b0)?, TensorArgType::Input),
                (t(&self.f0)?, TensorArgType::OutputExisting),
            ])?;
            o.submit_next_level(0, self.chip, &first, &cfg)?;
            let second = task_args([
                (t(&self.f0)?, TensorArgType::Input),
                (t(&self.b1)?, TensorArgType::Input),
                (t(&self.f1)?, TensorArgType::OutputExisting),
            ])?;
            o.submit_next_level(1, self.chip, &second, &cfg)?;
            let sum = task_args([
                (t(&self.f1)?, TensorArgType::Input),
                (
                    self.total.tensor(&[1], DataType::Float32, 0)?,
                    TensorArgType::OutputExisting,
                ),
            ])?;
            o.submit_sub(self.sum, &sum)?;
            Ok(())
        })?;
        let wall = start.elapsed();
        let g0: Vec<f64> = a0
            .iter()
            .zip(&b0)
            .map(|(&a, &b)| v(a as f64, b as f64))
            .collect();
        // Chip 1 reads chip 0's f32 output, so its golden starts from the f32-rounded f0.
        let g1: Vec<f64> = g0
            .iter()
            .zip(&b1)
            .map(|(&f, &b)| v(f as f32 as f64, b as f64))
            .collect();
        let f0 = self.f0.read_f32s(0, N)?;
        let f1 = self.f1.read_f32s(0, N)?;
        let total = self.total.read_f32s(0, 1)?[0] as f64;
        let want: f64 = f1.iter().map(|&x| x as f64).sum();
        let golden_total: f64 = g1.iter().sum();
        let sum_ok = (total - want).abs() <= 1e-3 * want.abs().max(1.0)
            && (total - golden_total).abs() <= 1e-3 * golden_total.abs().max(1.0);
        Ok(RoundReport {
            chip0: compare(&f0, &g0, 1e-4, 1e-5),
            chip1: compare(&f1, &g1, 1e-3, 1e-5),
            sum_ok,
            summary,
            wall,
        })
    }
}
