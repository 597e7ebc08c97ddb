//! The orchestration API's task kinds on the simulator: MIX tasks on one cluster, SPMD
//! blocks, dummy tasks with explicit dependencies, and element reads and writes.

use simpler_aicore::kernels;
use simpler_aicpu::{MixedKernels, NO_KERNEL};
use simpler_core::deps::ExplicitDep;
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, TensorArgType};
use simpler_host::{ChipWorker, HostTensor, OrchFn};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::Arc;

const ADD: u32 = 0;
const EMPTY: u32 = 1;
const ADD_SCALAR: u32 = 2;

fn arg(t: simpler_core::TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor: t, tag }
}

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
        let report = worker.run(handle, &mut tensors, &[]).unwrap();
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
