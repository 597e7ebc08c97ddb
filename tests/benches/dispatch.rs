//! `dispatch`: simulated end-to-end throughput of an empty-kernel task graph of 100,000 tasks,
//! and the per-task latency of a dependency chain.
//!
//! Workload (a2a3sim, 8 clusters, 3 scheduler threads, on this 2-vCPU machine):
//! - **fan**: 12,500 groups of 8 tasks: a root AIV task writes a 256-byte tensor, 6 AIV and
//!   AIC readers consume it, a join task reads all six outputs; each group in its own scope.
//!   100,000 tasks, every kernel the empty kernel, so the figure is the runtime's own cost:
//!   submit, dependency resolution, dispatch, the core handshake, completion and retirement.
//! - **chain**: 10,000 tasks each updating one entry tensor in place (INOUT), each in its own
//!   scope: nothing overlaps, so device time / tasks is the completion-to-next-start latency of
//!   one task. Two more arms: **chain_raw**, the same chain written on the low-level `Rt` with
//!   raw argument arrays (the typed front's cost per task is the difference), and
//!   **chain_alloc**, which updates a tensor the outer scope allocates instead, so every link
//!   also has a creator edge from the allocation task.
//!
//! Each sample is one run on a warm device (set up once); the arms alternate. Printed: median
//! and minimum over the samples of tasks per second and microseconds per task.
//!
//! Not shown: kernel time (the kernels are empty) and behaviour with more CPUs than 2.
//!
//! Run: `cargo bench -p simpler-tests --bench dispatch` (`SIMPLER_BENCH_SMOKE=1`: one sample
//! of 100 fan groups and a 100-task chain).

use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{DataType, TaskTensor, TensorArgType};
use simpler_host::prelude::{
    ArgDirection, Callable, HostTensor, KernelTable, Signature, TensorInfo,
};
use simpler_host::ChipWorker;
use simpler_host::{ChipArg, RunOptions};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::harness::input;
use simpler_tests::measure::{report_summary, sized};
use std::sync::Arc;

const SAMPLES: usize = 11;
const GROUPS: u32 = 12_500;
const CHAIN: u32 = 10_000;
const EMPTY: u32 = 0;
/// Tasks per fan group: the root, six readers, the join.
const FAN_TASKS: u32 = 8;

fn out() -> TaskArg {
    TaskArg {
        tensor: TaskTensor::create_info(&[64], DataType::Float32).expect("a valid shape"),
        tag: TensorArgType::Output,
    }
}

fn fan(rt: &mut Rt<'_, '_>, groups: u32) -> Result<(), RtError> {
    for _ in 0..groups {
        rt.scope(ScopeMode::Auto, |rt| {
            let mut root = [out()];
            rt.submit_aiv(EMPTY, &mut root, &[])?;
            let mut leaves = Vec::with_capacity(6);
            for i in 0..6 {
                let mut t = [input(root[0].tensor), out()];
                if i % 3 == 0 {
                    rt.submit_aic(EMPTY, &mut t, &[])?;
                } else {
                    rt.submit_aiv(EMPTY, &mut t, &[])?;
                }
                leaves.push(input(t[1].tensor));
            }
            rt.submit_aiv(EMPTY, &mut leaves, &[])?;
            Ok(())
        })?;
    }
    Ok(())
}

/// The chain: one tensor updated in place (INOUT) by `length` tasks, each submitted in its
/// own scope; each task waits for the one before it through the TensorMap. The tensor is the
/// entry's, or with `allocated` one the outer scope allocates, which also gives every link a
/// creator edge from the allocation (its fanout grows by one per link).
fn chain(length: u32, allocated: bool) -> Callable {
    let mut table = KernelTable::new();
    let link = table.aiv(kernels::empty);
    let signature = Signature::new([ArgDirection::InOut]);
    Callable::new(table, signature, move |s, entry| {
        let [mut t] = entry.tensors;
        if allocated {
            let info = TensorInfo::new(&[64], DataType::Float32).expect("a valid shape");
            [t] = s.alloc([info])?;
        }
        for _ in 0..length {
            s.scope(ScopeMode::Auto, |s| {
                s.task(link).inout(t).submit().map(drop)
            })?;
        }
        Ok(())
    })
}

/// The chain on the entry tensor again, written on the low-level `Rt` with raw argument
/// arrays: the typed front's cost per task is the difference from `chain`.
fn raw_chain(rt: &mut Rt<'_, '_>, length: u32) -> Result<(), RtError> {
    let t = rt.args().tensors()[0];
    for _ in 0..length {
        rt.scope(ScopeMode::Auto, |rt| {
            let mut args = [TaskArg {
                tensor: t,
                tag: TensorArgType::InOut,
            }];
            rt.submit_aiv(EMPTY, &mut args, &[])?;
            Ok(())
        })?;
    }
    Ok(())
}

fn main() {
    let (groups, length) = (sized(GROUPS, 100), sized(CHAIN, 100));
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
    let fan_h = worker.register_callable(
        Arc::new(move |rt: &mut Rt<'_, '_>| fan(rt, groups)),
        vec![kernels::empty],
        vec![],
    );
    let chains = [false, true].map(|allocated| worker.register(chain(length, allocated)));
    let (mut fan_rate, mut fan_us) = (Vec::new(), Vec::new());
    let mut chain_us = [Vec::new(), Vec::new()];
    let raw = worker.register_callable(
        Arc::new(move |rt: &mut Rt<'_, '_>| raw_chain(rt, length)),
        vec![kernels::empty],
        vec![ArgDirection::InOut],
    );
    let mut raw_us = Vec::new();
    let mut entry = [HostTensor::f32(&[0.0; 64], &[64], ArgDirection::InOut)];
    for _ in 0..sized(SAMPLES, 1) {
        let r = worker
            .run(fan_h, &mut [] as &mut [ChipArg], &[], RunOptions::default())
            .expect("the fan graph runs");
        // Every task ran on a core, each after its producers: per group the root feeds six
        // readers and they feed the join.
        let o = &r.outcome;
        let fan_tasks = u64::from(groups * FAN_TASKS);
        assert_eq!(
            (o.tasks, o.dispatched, o.edges),
            (fan_tasks, fan_tasks, u64::from(groups) * 12)
        );
        let s = r.outcome.device.as_secs_f64();
        fan_rate.push(r.outcome.dispatched as f64 / s);
        fan_us.push(s * 1e6 / r.outcome.dispatched as f64);
        for (allocated, (&h, us)) in chains.iter().zip(&mut chain_us).enumerate() {
            let r = worker
                .run(h, &mut entry, &[], RunOptions::default())
                .expect("the chain runs");
            let o = &r.outcome;
            let links = u64::from(length);
            // The links (and the allocation); only the links run on a core.
            let tasks = links + allocated as u64;
            assert_eq!((o.tasks, o.dispatched), (tasks, links));
            // One edge from the link before unless that one had already run and retired when
            // this one was submitted, and on the allocated tensor a creator edge per link.
            let most = links * (1 + allocated as u64);
            assert!(o.edges <= most, "{} edges for {links} links", o.edges);
            us.push(o.device.as_secs_f64() * 1e6 / o.dispatched as f64);
        }
        let r = worker
            .run(raw, &mut entry, &[], RunOptions::default())
            .expect("the raw chain runs");
        assert_eq!(r.outcome.dispatched, u64::from(length));
        raw_us.push(r.outcome.device.as_secs_f64() * 1e6 / r.outcome.dispatched as f64);
    }
    report_summary("dispatch", "fan_100k_tasks_per_s", &mut fan_rate, "tasks/s");
    report_summary("dispatch", "fan_100k_us_per_task", &mut fan_us, "us/task");
    let [on_entry, on_alloc] = &mut chain_us;
    report_summary("dispatch", "chain_10k_us_per_task", on_entry, "us/task");
    report_summary(
        "dispatch",
        "chain_10k_alloc_us_per_task",
        on_alloc,
        "us/task",
    );
    report_summary(
        "dispatch",
        "chain_10k_raw_us_per_task",
        &mut raw_us,
        "us/task",
    );
}
