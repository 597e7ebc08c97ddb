//! The orchestration API's task kinds on the simulator: MIX tasks on one cluster, SPMD
//! blocks, dummy tasks with explicit dependencies, and element reads and writes (of a tensor
//! whose producer is still live, and of one whose producer has retired).

use simpler_aicore::kernels;
use simpler_aicpu::{MixedKernels, NO_KERNEL};
use simpler_core::deps::ExplicitDep;
use simpler_core::scope::ScopeMode;
use simpler_core::{ArgDirection, TensorArgType};
use simpler_host::RunOptions;
use simpler_host::{ChipWorker, HostTensor, OrchFn};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::harness::arg;
use std::sync::Arc;

const ADD: u32 = 0;
const EMPTY: u32 = 1;
const ADD_SCALAR: u32 = 2;

#[test]
fn mix_spmd_dummy_and_element_access() {
    for topology in [Topology::A2a3, Topology::A5] {
        let mut worker = ChipWorker::init(DeviceConfig::new(topology)).unwrap();
        let orch: OrchFn = Arc::new(|rt| {
            let (a, b, c, d) = match rt.args().tensors() {
                [a, b, c, d] => (*a, *b, *c, *d),
                _ => return Err(rt.report_fatal(1)),
            };
            // A MIX task: the cube core adds, both vector cores run the empty kernel, all on
            // one cluster with the same arguments.
            let mut mix_args = [
                arg(a, TensorArgType::Input),
                arg(b, TensorArgType::Input),
                arg(c, TensorArgType::OutputExisting),
            ];
            let mix = MixedKernels {
                aic: ADD,
                aiv0: EMPTY,
                aiv1: EMPTY,
            };
            let t_mix = rt.submit(mix, 1, &mut mix_args, &[], &[])?;
            // Four SPMD blocks of the empty kernel reading c.
            let spmd = MixedKernels {
                aic: NO_KERNEL,
                aiv0: EMPTY,
                aiv1: NO_KERNEL,
            };
            let t_spmd = rt.submit(spmd, 4, &mut [arg(c, TensorArgType::Input)], &[], &[])?;
            // A dummy task joining both.
            let t_join =
                rt.submit_dummy(&mut [], &[ExplicitDep::on(t_mix), ExplicitDep::on(t_spmd)])?;
            // d = c + 10, after the join.
            let mut last = [
                arg(c, TensorArgType::Input),
                arg(d, TensorArgType::OutputExisting),
            ];
            rt.submit(
                MixedKernels {
                    aic: NO_KERNEL,
                    aiv0: ADD_SCALAR,
                    aiv1: NO_KERNEL,
                },
                1,
                &mut last,
                &[10.0f32.to_bits() as u64],
                &[ExplicitDep::on(t_join)],
            )?;
            // Element access waits for the producer: c[5] = a[5] + b[5] = 5 + 50.
            let c5 = rt.read_element(&c.with_owner(t_mix), 5)?;
            if f32::from_bits(c5 as u32) != 55.0 {
                return Err(rt.report_fatal(2));
            }
            rt.write_element(&a, 0, 100.0f32.to_bits() as u64)?;
            Ok(())
        });
        let handle = worker.register_callable(
            orch,
            vec![kernels::add, kernels::empty, kernels::add_scalar],
            vec![
                ArgDirection::InOut,
                ArgDirection::In,
                ArgDirection::Out,
                ArgDirection::Out,
            ],
        );
        let n = 64usize;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| 10.0 * i as f32).collect();
        let mut tensors = vec![
            HostTensor::f32(&a, &[n as u32], ArgDirection::InOut),
            HostTensor::f32(&b, &[n as u32], ArgDirection::In),
            HostTensor::f32(&vec![0.0; n], &[n as u32], ArgDirection::Out),
            HostTensor::f32(&vec![0.0; n], &[n as u32], ArgDirection::Out),
        ];
        let report = worker
            .run(handle, &mut tensors, &[], RunOptions::default())
            .unwrap();
        // 3 MIX subtasks + 4 SPMD blocks + 1 (the dummy runs on no core) + 1.
        assert_eq!(report.outcome.dispatched, 3 + 4 + 1, "{topology:?}");
        assert_eq!(report.outcome.tasks, 4);
        let c = tensors[2].to_f32();
        let d = tensors[3].to_f32();
        for i in 0..n {
            assert_eq!(c[i], 11.0 * i as f32, "c[{i}]");
            assert_eq!(d[i], 11.0 * i as f32 + 10.0, "d[{i}]");
        }
        assert_eq!(tensors[0].to_f32()[0], 100.0, "the element write reached a");
    }
}

/// An element read of a tensor whose producer has retired answers at once with the producer's
/// value, whether the producer's slot is still FREE (naming the producer) or was reused.
///
/// The rings have 4 slots, so a ring holds at most 3 live tasks: the claim of its fourth task
/// (local id 3) waits until the first (local id 0) has retired, and takes slot 3, which leaves
/// slot 0 FREE with the producer's id still in it. The fifth task (local id 4) reuses slot 0.
#[test]
fn element_read_after_the_producer_retired() {
    for topology in [Topology::A2a3, Topology::A5] {
        let mut config = DeviceConfig::new(topology);
        config.ring.window = 4;
        let mut worker = ChipWorker::init(config).unwrap();
        let orch: OrchFn = Arc::new(|rt| {
            let (a, c) = match rt.args().tensors() {
                [a, c] => (*a, *c),
                _ => return Err(rt.report_fatal(1)),
            };
            // c = a + 10, alone in its scope: once it completes, nothing holds it.
            let producer = rt.scope(ScopeMode::Auto, |rt| {
                let mut args = [
                    arg(a, TensorArgType::Input),
                    arg(c, TensorArgType::OutputExisting),
                ];
                rt.submit_aiv(ADD_SCALAR, &mut args, &[10.0f32.to_bits() as u64])
            })?;
            let c = c.with_owner(producer);
            // Same depth, so the same ring: the third of these is claimed only after the
            // producer retired.
            rt.scope(ScopeMode::Auto, |rt| {
                for _ in 0..3 {
                    rt.submit_dummy(&mut [], &[])?;
                }
                let c5 = rt.read_element(&c, 5)?;
                if f32::from_bits(c5 as u32) != 15.0 {
                    return Err(rt.report_fatal(2));
                }
                Ok(())
            })?;
            // The producer's slot now holds a newer task, which may not have run yet.
            rt.scope(ScopeMode::Auto, |rt| {
                rt.submit_dummy(&mut [], &[])?;
                let c7 = rt.read_element(&c, 7)?;
                if f32::from_bits(c7 as u32) != 17.0 {
                    return Err(rt.report_fatal(3));
                }
                Ok(())
            })
        });
        let handle = worker.register_callable(
            orch,
            vec![kernels::add, kernels::empty, kernels::add_scalar],
            vec![ArgDirection::In, ArgDirection::Out],
        );
        let n = 16usize;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut tensors = vec![
            HostTensor::f32(&a, &[n as u32], ArgDirection::In),
            HostTensor::f32(&vec![0.0; n], &[n as u32], ArgDirection::Out),
        ];
        // The read must find the producer done rather than wait for it to complete again
        // (which ends the run with the watchdog's timeout).
        let report = match worker.run(handle, &mut tensors, &[], RunOptions::default()) {
            Ok(report) => report,
            Err(e) => panic!("{topology:?}: {e:?}"),
        };
        assert_eq!(report.outcome.tasks, 5, "{topology:?}");
        let c = tensors[1].to_f32();
        for (i, &v) in c.iter().enumerate() {
            assert_eq!(v, i as f32 + 10.0, "{topology:?} c[{i}]");
        }
    }
}
