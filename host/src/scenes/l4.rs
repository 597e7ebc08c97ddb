//! `l4`: a data-parallel step over 2 worker ranks x 2 chips, gathered and reduced on rank 0,
//! under mpirun.
//!
//! ```text
//!  rank 0: stage a_r, b_r ──copy_to──► rank r (r = 1, 2)
//!  one L4 group node (ranks 1, 2), the rank orchestration STEP on each, as one L3 run:
//!      group (chips 0, 1): f_rc = v(a_rc, b_rc)     chip c takes rows [128c, 128c + 128)
//!      group (chips 0, 1): g_rc = v(f_rc, b_rc)
//!      SUB:                part_r = sum(g_r)        the local reduce
//!  rank 0: p_r ◄──copy_from── part_r;  SUB on rank 0: total = p_1 + p_2
//! ```
//!
//! with v(a, b) = (a + b + 1)(a + b + 2) + (a + b), vector_example's body. The tags order the
//! tasks at both levels. Each round stages new inputs; the goldens are computed here in f64
//! from the inputs (with the f32 rounding of each intermediate the chips store), not by the
//! code under test. Besides the rounds: the refusal checks (`checks`), the lost-rank check
//! (`kill`) and the benchmarks (`bench`).

use super::vector::VectorExample;
use super::Scene;
use crate::l3::{ChipCallableId, L3Error, L3Orch, MappedArgs, SubCallableId, Worker};
use crate::l4::{L4Buffer, L4Callable, L4Config, L4Error, L4Worker, RankError, RankSetup};
use crate::task_args::TaskArgs;
use simpler_core::mailbox::CallConfig;
use simpler_core::{AccessMode, DataType, Tensor, TensorArgType, ValidTensor};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Elements per chip's tile (vector_example's 128 x 128).
pub const N: usize = 128 * 128;
const SHAPE: [u32; 2] = [128, 128];
/// The worker ranks the data-parallel step runs on.
pub const RANKS: [usize; 2] = [1, 2];
/// Chips per worker rank: each takes one 128-row tile of its rank's tensors.
pub const CHIPS: usize = 2;
/// Elements of a rank's tensors: one tile per chip.
pub const RANK_N: usize = CHIPS * N;
const RANK_SHAPE: [u32; 2] = [CHIPS as u32 * 128, 128];

/// vector_example on chip 0 of a rank.
pub const VECTOR: L4Callable = L4Callable::Chip(0);
/// SUB: the last tensor's first f32 = the sum of every element of the others.
pub const SUM: L4Callable = L4Callable::Sub(0);
/// SUB: does nothing (the benchmarks' empty task).
pub const NOP: L4Callable = L4Callable::Sub(1);
/// SUB: always fails (the failure checks).
pub const FAIL: L4Callable = L4Callable::Sub(2);
/// The rank orchestration: the two vector steps over every chip of the rank, then the local
/// sum (arguments a, b, f, g, part; the step is written out in this module).
pub const STEP: L4Callable = L4Callable::Orch(0);

/// The golden body, in f64, written out here rather than taken from the kernel's scene.
fn v(a: f64, b: f64) -> f64 {
    let s = a + b;
    (s + 1.0) * (s + 2.0) + s
}

fn sum_task(args: &mut MappedArgs) -> Result<(), String> {
    let n = args.args.len();
    if n < 2 {
        return Err(format!("sum takes at least 2 tensors, got {n}"));
    }
    let total: f64 = args.args[..n - 1]
        .iter()
        .flat_map(|a| a.read_f32s())
        .map(|x| x as f64)
        .sum();
    args.args[n - 1]
        .write_f32s(&[total as f32])
        .map_err(|e| e.to_string())
}

/// The rank's step, one L3 run: tile `c` of every tensor (rows [128c, 128c + 128) of
/// `[chips * 128, 128]`) goes to chip `c`, `f = v(a, b)` then `g = v(f, b)` as two group tasks
/// over the chips, then one SUB sums all of `g` into `part`. The tags order the three tasks.
fn step(
    o: &mut L3Orch<'_>,
    args: &TaskArgs,
    vector: ChipCallableId,
    sum: SubCallableId,
) -> Result<(), L3Error> {
    let chips = o.worker().chips();
    let t = args.tensors();
    if t.len() != 5
        || t[..4]
            .iter()
            .any(|x| x.extent_bytes() != (chips * N * 4) as u64)
    {
        return Err(L3Error::Orchestration(format!(
            "step takes a, b, f, g of {} f32 each and part; got {} tensors",
            chips * N,
            t.len()
        )));
    }
    let tile = |x: &ValidTensor, c: usize| {
        Tensor::row_major(
            x.buffer,
            x.byte_offset + (c * N * 4) as u64,
            &SHAPE,
            DataType::Float32,
        )
        .map_err(L3Error::Tensor)
    };
    let (a, b, f, g, part) = (&t[0], &t[1], &t[2], &t[3], t[4]);
    let cfg: CallConfig = bytemuck::Zeroable::zeroed();
    let all: Vec<usize> = (0..chips).collect();
    for (x, out) in [(a, f), (f, g)] {
        let members = all
            .iter()
            .map(|&c| {
                let mut m = TaskArgs::new();
                m.add_tensor(tile(x, c)?, TensorArgType::Input)
                    .map_err(L3Error::Args)?;
                m.add_tensor(tile(b, c)?, TensorArgType::Input)
                    .map_err(L3Error::Args)?;
                m.add_tensor(tile(out, c)?, TensorArgType::OutputExisting)
                    .map_err(L3Error::Args)?;
                Ok(m)
            })
            .collect::<Result<Vec<_>, L3Error>>()?;
        o.submit_next_level_group(vector, &all, &members, &cfg)?;
    }
    let mut local = TaskArgs::new();
    local
        .add_tensor(*g, TensorArgType::Input)
        .map_err(L3Error::Args)?;
    local
        .add_tensor(part, TensorArgType::OutputExisting)
        .map_err(L3Error::Args)?;
    o.submit_sub(sum, &local)?;
    Ok(())
}

/// Registers the scene's callables on one rank (every rank, the same order).
fn setup(worker: &mut Worker) -> Result<crate::l4::Callables, L3Error> {
    let p = VectorExample
        .prepare("default")
        .expect("vector_example has a default case");
    let chip = worker.register_chip("vector_example", p.callable)?;
    let sum = worker.register_sub("sum", Arc::new(sum_task))?;
    let nop = worker.register_sub("nop", Arc::new(|_: &mut MappedArgs| Ok(())))?;
    let fail = worker.register_sub(
        "fail",
        Arc::new(|_: &mut MappedArgs| Err("fail: failing on purpose".to_string())),
    )?;
    Ok(crate::l4::Callables {
        chip: vec![chip],
        sub: vec![sum, nop, fail],
        orch: vec![Arc::new(move |o: &mut L3Orch<'_>, a: &TaskArgs| {
            step(o, a, chip, sum)
        })],
    })
}

/// The setup every rank runs.
pub const SETUP: RankSetup = setup;

fn args<const K: usize>(tensors: [(ValidTensor, TensorArgType); K]) -> Result<TaskArgs, L4Error> {
    let mut a = TaskArgs::new();
    for (t, tag) in tensors {
        a.add_tensor(t, tag)
            .map_err(|e| L4Error::L3(L3Error::Args(e)))?;
    }
    Ok(a)
}

/// One refused-copy check: what it is, what the copy returned, which error it must be.
type CopyCase<'a> = (&'a str, Result<(), L4Error>, fn(&L4Error) -> bool);

/// Per worker rank: inputs, intermediates, the local partial; and its gather slot on rank 0.
struct RankBufs {
    rank: usize,
    a: L4Buffer,
    b: L4Buffer,
    f: L4Buffer,
    g: L4Buffer,
    part: L4Buffer,
    gathered: L4Buffer,
}

/// The scene on rank 0, set up once and run for many rounds.
pub struct L4Scene {
    w: L4Worker,
    stage: L4Buffer,
    ranks: Vec<RankBufs>,
    total: L4Buffer,
}

/// One round's result.
#[derive(Clone, Debug)]
pub struct RoundReport {
    /// Each worker rank's partial, and its golden.
    pub partials: Vec<(usize, f64, f64)>,
    /// The gathered total and its golden.
    pub total: (f64, f64),
    /// Wall time of the round (copies and both runs).
    pub wall: Duration,
}

fn close_enough(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-4 * want.abs().max(1.0)
}

impl RoundReport {
    /// Whether every partial and the total match their goldens.
    pub fn pass(&self) -> bool {
        self.partials.iter().all(|&(_, g, w)| close_enough(g, w))
            && close_enough(self.total.0, self.total.1)
    }
}

fn inputs(rank: usize, round: usize) -> (Vec<f32>, Vec<f32>) {
    let (r, k) = (round as f32, rank as f32);
    let a = (0..RANK_N)
        .map(|i| ((i % 97) as f32 / 97.0) - 0.5 + 0.01 * r - 0.03 * k)
        .collect();
    let b = (0..RANK_N)
        .map(|i| 0.25 - ((i % 31) as f32 / 62.0) + 0.02 * k)
        .collect();
    (a, b)
}

impl L4Scene {
    /// Starts this rank. Rank 0 gets the scene; a worker rank serves until rank 0 closes the
    /// job and gets `None`.
    pub fn start(config: L4Config) -> Result<Option<Self>, L4Error> {
        let config = L4Config {
            chips_per_rank: CHIPS,
            ..config
        };
        let mut w = match crate::l4::start(SETUP, config)? {
            crate::l4::Role::Orchestrator(w) => w,
            crate::l4::Role::Served { .. } => return Ok(None),
        };
        if w.size() < 3 {
            return Err(L4Error::Mpi(format!(
                "the l4 scene needs 3 ranks (rank 0 and 2 worker ranks), the job has {}",
                w.size()
            )));
        }
        let bytes = (RANK_N * 4) as u64;
        let stage = w.create_buffer(0, bytes, AccessMode::ReadWrite)?;
        let total = w.create_buffer(0, 4, AccessMode::ReadWrite)?;
        let mut ranks = Vec::new();
        for rank in RANKS {
            ranks.push(RankBufs {
                rank,
                a: w.create_buffer(rank, bytes, AccessMode::Read)?,
                b: w.create_buffer(rank, bytes, AccessMode::Read)?,
                f: w.create_buffer(rank, bytes, AccessMode::ReadWrite)?,
                g: w.create_buffer(rank, bytes, AccessMode::ReadWrite)?,
                part: w.create_buffer(rank, 4, AccessMode::ReadWrite)?,
                gathered: w.create_buffer(0, 4, AccessMode::ReadWrite)?,
            });
        }
        Ok(Some(Self {
            w,
            stage,
            ranks,
            total,
        }))
    }

    /// Rank 0's L4Worker.
    pub fn worker(&mut self) -> &mut L4Worker {
        &mut self.w
    }

    /// One round: stage inputs, the data-parallel step, the gather and the final reduce.
    pub fn round(&mut self, round: usize) -> Result<RoundReport, L4Error> {
        let start = Instant::now();
        let mut goldens = Vec::new();
        for rb in &self.ranks {
            let (a, b) = inputs(rb.rank, round);
            let bytes = (RANK_N * 4) as u64;
            self.w.write_f32s(&self.stage, 0, &a)?;
            self.w.copy_to(&rb.a, &self.stage, bytes)?;
            self.w.write_f32s(&self.stage, 0, &b)?;
            self.w.copy_to(&rb.b, &self.stage, bytes)?;
            let golden: f64 = a
                .iter()
                .zip(&b)
                .map(|(&a, &b)| {
                    let f = v(a as f64, b as f64) as f32;
                    v(f as f64, b as f64) as f32 as f64
                })
                .sum();
            goldens.push(golden);
        }
        let ranks = &self.ranks;
        self.w.run(|o| {
            let whole = |b: &L4Buffer| b.tensor(&RANK_SHAPE, DataType::Float32);
            let members: Vec<TaskArgs> = ranks
                .iter()
                .map(|rb| {
                    args([
                        (whole(&rb.a)?, TensorArgType::Input),
                        (whole(&rb.b)?, TensorArgType::Input),
                        (whole(&rb.f)?, TensorArgType::OutputExisting),
                        (whole(&rb.g)?, TensorArgType::OutputExisting),
                        (
                            rb.part.tensor(&[1], DataType::Float32)?,
                            TensorArgType::OutputExisting,
                        ),
                    ])
                })
                .collect::<Result<_, _>>()?;
            o.submit_next_level_group(STEP, &RANKS, &members)?;
            Ok(())
        })?;
        let mut partials = Vec::new();
        for (rb, &golden) in self.ranks.iter().zip(&goldens) {
            self.w.copy_from(&rb.gathered, &rb.part, 4)?;
            partials.push((
                rb.rank,
                self.w.read_f32s(&rb.gathered, 0, 1)?[0] as f64,
                golden,
            ));
        }
        self.w.write_f32s(&self.total, 0, &[0.0])?;
        let (g1, g2, total) = (self.ranks[0].gathered, self.ranks[1].gathered, self.total);
        self.w.run(|o| {
            let reduce = args([
                (g1.tensor(&[1], DataType::Float32)?, TensorArgType::Input),
                (g2.tensor(&[1], DataType::Float32)?, TensorArgType::Input),
                (
                    total.tensor(&[1], DataType::Float32)?,
                    TensorArgType::OutputExisting,
                ),
            ])?;
            o.submit_sub(0, SUM, &reduce)?;
            Ok(())
        })?;
        let got = self.w.read_f32s(&self.total, 0, 1)?[0] as f64;
        // The golden total: the f32 partials (what rank 0 gathers) summed in f64.
        let want: f64 = goldens.iter().map(|&g| g as f32 as f64).sum();
        Ok(RoundReport {
            partials,
            total: (got, want),
            wall: start.elapsed(),
        })
    }

    /// The refusal and failure checks; each line is one check's verdict. `Err` names the first
    /// check that did not see its specific error.
    pub fn checks(&mut self) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        let e = |e: L4Error| crate::ErrorChain(&e).to_string();
        let (r1, r2) = (&self.ranks[0], &self.ranks[1]);
        let t = |b: &L4Buffer| b.tensor(&SHAPE, DataType::Float32);
        // 1. A task on rank 1 naming rank 2's buffer: rank 1 refuses it, naming rank 2.
        let foreign = args([
            (t(&r2.a).map_err(e)?, TensorArgType::Input),
            (t(&r1.b).map_err(e)?, TensorArgType::Input),
            (t(&r1.f).map_err(e)?, TensorArgType::OutputExisting),
        ])
        .map_err(e)?;
        let r = self
            .w
            .run(|o| o.submit_next_level(1, VECTOR, &foreign).map(drop));
        let want = L4Error::Rank {
            rank: 1,
            error: RankError::ForeignRank {
                owner: Some(2),
                here: 1,
            },
        };
        if r != Err(want.clone()) {
            return Err(format!("foreign descriptor: expected {want:?}, got {r:?}"));
        }
        out.push(format!("ok foreign descriptor refused: {}", e(want)));

        // 2. Copies with a bad descriptor on either end move no byte.
        let marker: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let bytes = (N * 4) as u64;
        self.w.write_f32s(&self.stage, 0, &marker).map_err(e)?;
        self.w.copy_to(&r1.a, &self.stage, bytes).map_err(e)?;
        self.w
            .write_f32s(&self.stage, 0, &vec![-1.0; N])
            .map_err(e)?;
        let mut tampered = r1.a;
        tampered.desc.nbytes *= 2;
        let cases: Vec<CopyCase> = vec![
            (
                "remote end with a tampered descriptor",
                self.w.copy_to(&tampered, &self.stage, bytes),
                |e| {
                    matches!(
                        e,
                        L4Error::Rank {
                            rank: 1,
                            error: RankError::DescriptorMismatch { .. }
                        }
                    )
                },
            ),
            (
                "remote end naming another rank's buffer",
                self.w.copy_to(
                    &L4Buffer {
                        rank: 1,
                        desc: r2.a.desc,
                    },
                    &self.stage,
                    bytes,
                ),
                |e| {
                    matches!(
                        e,
                        L4Error::Rank {
                            rank: 1,
                            error: RankError::ForeignRank {
                                owner: Some(2),
                                here: 1
                            }
                        }
                    )
                },
            ),
            (
                "remote end too short",
                self.w.copy_to(&r1.part, &self.stage, 8),
                |e| {
                    matches!(
                        e,
                        L4Error::Rank {
                            rank: 1,
                            error: RankError::Range {
                                len: 8,
                                nbytes: 4,
                                ..
                            }
                        }
                    )
                },
            ),
            (
                "local end on another rank (copy_to)",
                self.w.copy_to(&r1.a, &r2.a, bytes),
                |e| matches!(e, L4Error::LocalEnd { .. }),
            ),
            (
                "local end on another rank (copy_from)",
                self.w.copy_from(&r2.a, &r1.a, bytes),
                |e| matches!(e, L4Error::LocalEnd { .. }),
            ),
        ];
        for (what, r, ok) in cases {
            match r {
                Err(err) if ok(&err) => out.push(format!("ok copy refused, {what}: {}", e(err))),
                other => return Err(format!("copy, {what}: wrong outcome {other:?}")),
            }
        }
        self.w.copy_from(&self.stage, &r1.a, bytes).map_err(e)?;
        if self.w.read_f32s(&self.stage, 0, N).map_err(e)? != marker {
            return Err("a refused copy changed the destination's bytes".into());
        }
        out.push("ok no byte moved by a refused copy".into());

        // 3. A failing task on rank 1: its consumer fails, the independent task on rank 2 runs.
        let part = |b: &L4Buffer| b.tensor(&[1], DataType::Float32);
        self.w
            .write_f32s(&self.stage, 0, &vec![0.5; N])
            .map_err(e)?;
        self.w.copy_to(&r2.a, &self.stage, bytes).map_err(e)?;
        let ids = std::cell::Cell::new((0, 0));
        let (summary, errors) = self
            .w
            .run_collect(|o| {
                let fail = o.submit_sub(
                    1,
                    FAIL,
                    &args([(t(&r1.g)?, TensorArgType::OutputExisting)])?,
                )?;
                let consumer = o.submit_sub(
                    1,
                    SUM,
                    &args([
                        (t(&r1.g)?, TensorArgType::Input),
                        (part(&r1.part)?, TensorArgType::OutputExisting),
                    ])?,
                )?;
                ids.set((fail, consumer));
                o.submit_sub(
                    2,
                    SUM,
                    &args([
                        (t(&r2.a)?, TensorArgType::Input),
                        (part(&r2.part)?, TensorArgType::OutputExisting),
                    ])?,
                )?;
                Ok(())
            })
            .map_err(e)?;
        let (fail, consumer) = ids.get();
        let failed_ok = errors
            .iter()
            .any(|x| matches!(x, L4Error::TaskFailed { task, rank: 1, .. } if *task == fail));
        let upstream_ok = errors.contains(&L4Error::Upstream {
            task: consumer,
            producer: fail,
        });
        if !(failed_ok && upstream_ok && errors.len() == 2 && summary.tasks == 3) {
            return Err(format!("failure propagation: errors {errors:?}"));
        }
        self.w.copy_from(&r2.gathered, &r2.part, 4).map_err(e)?;
        let got = self.w.read_f32s(&r2.gathered, 0, 1).map_err(e)?[0] as f64;
        if got != 0.5 * N as f64 {
            return Err(format!(
                "the independent task summed {got}, not {}",
                0.5 * N as f64
            ));
        }
        out.push(format!(
            "ok failed task reported ({}), its consumer skipped ({}), independent task ran (sum {got})",
            e(errors[0].clone()),
            e(errors[1].clone())
        ));

        // 4. The rank orchestration at level 4: refused on rank 0 (which has no chips) before
        //    anything is sent, and an L3 run that refuses its arguments on rank 2 fails the
        //    level-4 task naming the rank and the reason.
        let r = self
            .w
            .run(|o| o.submit_next_level(0, STEP, &TaskArgs::new()).map(drop));
        if !matches!(r, Err(L4Error::UnknownRank { rank: 0, .. })) {
            return Err(format!("rank orchestration on rank 0: got {r:?}"));
        }
        out.push(format!(
            "ok rank orchestration on rank 0 refused: {}",
            e(r.unwrap_err())
        ));
        let short =
            args([(part(&r2.part).map_err(e)?, TensorArgType::OutputExisting)]).map_err(e)?;
        let (_, errors) = self
            .w
            .run_collect(|o| o.submit_next_level(2, STEP, &short).map(drop))
            .map_err(e)?;
        match errors.as_slice() {
            [L4Error::TaskFailed {
                rank: 2, message, ..
            }] if message.contains("step takes a, b, f, g") => out.push(format!(
                "ok rank orchestration failure reported: {}",
                e(errors[0].clone())
            )),
            other => return Err(format!("rank orchestration failure: errors {other:?}")),
        }
        Ok(out)
    }

    /// Benchmark lines: empty-task round trip, per-task cost, copy bandwidth.
    ///
    /// The task figures follow the level-3 benchmark: runs of 1 and of 32 independent empty
    /// SUB tasks on rank 1 alternate, 41 samples each after a warm-up; a run's wall time is
    /// fixed + K x per-task, so per-task = (t32 - t1) / 31 and fixed = t1 - per-task, from the
    /// medians.
    pub fn bench(&mut self) -> Result<Vec<String>, L4Error> {
        const K: usize = 32;
        const SAMPLES: usize = 41;
        let empty = TaskArgs::new();
        let mut lines = Vec::new();
        let run_k = |w: &mut L4Worker, k: usize| -> Result<f64, L4Error> {
            let t0 = Instant::now();
            w.run(|o| {
                for _ in 0..k {
                    o.submit_sub(1, NOP, &empty)?;
                }
                Ok(())
            })?;
            Ok(t0.elapsed().as_secs_f64() * 1e6)
        };
        for _ in 0..20 {
            run_k(&mut self.w, 1)?;
        }
        let (mut one, mut many) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            one.push(run_k(&mut self.w, 1)?);
            many.push(run_k(&mut self.w, K)?);
        }
        let (t1, tk) = (median(&mut one), median(&mut many));
        let per = (tk - t1) / (K - 1) as f64;
        lines.push(format!("bench l4 round_trip_empty_task_us {t1:.1} us"));
        lines.push(format!("bench l4 run_{K}_tasks_us {tk:.1} us"));
        lines.push(format!("bench l4 per_task_us {per:.1} us"));
        lines.push(format!("bench l4 fixed_us {:.1} us", t1 - per));
        let big = 64u64 << 20;
        let src = self.w.create_buffer(0, big, AccessMode::ReadWrite)?;
        let dst = self.w.create_buffer(1, big, AccessMode::ReadWrite)?;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t0 = Instant::now();
            self.w.copy_to(&dst, &src, big)?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        lines.push(format!(
            "bench l4 copy_gbps {:.2} GB/s",
            big as f64 / best / 1e9
        ));
        Ok(lines)
    }
}

/// The median of `xs` (which it sorts); NaN for none.
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}
