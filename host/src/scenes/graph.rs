//! `graph_vector`: one body, submitted as a Graph eight times.
//!
//! The body is vector_example's: f = (a + b + 1)(a + b + 2) + (a + b), 5 tasks and 6 edges.
//! The orchestration submits it once per k over a_k (row k of a [8, 128, 128] input), the
//! shared b, and f_k (row k of the output). On the hbg runtime the first submission records
//! the body into a Definition and every submission is one outer task that the device expands
//! into the body's 5 nodes (8 outer tasks and no edges: the invocations share only b, which
//! they read); on tmr (no Graph sink) each body runs inline, 40 tasks in all.

use super::{golden_check, Prepared, Scene, Tolerance};
use crate::callable::Callable;
use crate::chip_worker::HostTensor;
use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, TensorArgType};
use std::sync::Arc;

/// The `graph_vector` scene: one case, `default`, its golden the vector_example formula in f64
/// over each of the eight output rows.
pub struct GraphVector;

/// Graph submissions of the body per run: the rows of the `a` input and the `f` output.
pub const INVOCATIONS: u32 = 8;
const SHAPE: [u32; 3] = [INVOCATIONS, 128, 128];

fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [a, b, f] = match rt.args().tensors() {
        [a, b, f] => [*a, *b, *f],
        _ => return Err(rt.report_fatal(1)),
    };
    let Ok(b) = b.view(&[128, 128], &[0, 0]) else {
        return Err(rt.report_fatal(2));
    };
    for k in 0..INVOCATIONS {
        let (Ok(a_k), Ok(f_k)) = (
            a.view(&[1, 128, 128], &[k, 0, 0]),
            f.view(&[1, 128, 128], &[k, 0, 0]),
        ) else {
            return Err(rt.report_fatal(3));
        };
        let mut boundary = [
            TaskArg {
                tensor: a_k,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: b,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: f_k,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_graph(0, super::vector::orchestrate, &mut boundary, &[])?;
    }
    Ok(())
}

impl Scene for GraphVector {
    fn name(&self) -> &'static str {
        "graph_vector"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["default"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if case != "default" {
            return None;
        }
        let row = 128 * 128;
        let n = row * INVOCATIONS as usize;
        let a: Vec<f32> = (0..n)
            .map(|i| ((i % 61) as f32) / 30.0 - 1.0 + (i / row) as f32 * 0.25)
            .collect();
        let b: Vec<f32> = (0..row).map(|i| ((i % 17) as f32) / 8.0 - 1.0).collect();
        let golden: Vec<f64> = (0..n)
            .map(|i| super::vector::golden(a[i] as f64, b[i % row] as f64))
            .collect();
        Some(
            Prepared::new(
                Callable::raw(
                    Arc::new(orchestrate),
                    vec![kernels::add, kernels::add_scalar, kernels::mul],
                    vec![ArgDirection::In, ArgDirection::In, ArgDirection::Out],
                ),
                vec![
                    HostTensor::f32(&a, &SHAPE, ArgDirection::In),
                    HostTensor::f32(&b, &[128, 128], ArgDirection::In),
                    HostTensor::f32(&vec![0.0; n], &SHAPE, ArgDirection::Out),
                ],
                golden_check(
                    2,
                    golden,
                    Tolerance {
                        atol: 1e-4,
                        rtol: 1e-5,
                    },
                ),
            )
            .with_counts(5 * INVOCATIONS as u64, 6 * INVOCATIONS as u64)
            .with_hbg_counts(INVOCATIONS as u64, 0),
        )
    }
}
