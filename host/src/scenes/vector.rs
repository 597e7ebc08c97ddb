//! `vector_example`: f = (a + b + 1)(a + b + 2) + (a + b) over 16,384 fp32 elements.
//!
//! t0 c = a + b → {t1 d = c + 1, t2 e = c + 2} → t3 g = d · e → t4 f = g + c, with t1..t4 in an
//! inner scope: 5 tasks, 6 edges (t4 also depends on t0 directly). With a = 2 and b = 3 every
//! element of f is 47.

use super::{compare, Prepared, Scene};
use crate::chip_worker::HostTensor;
use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{ArgDirection, DataType, TaskTensor, TensorArgType};
use std::sync::Arc;

/// The scene.
pub struct VectorExample;

const ADD: u32 = 0;
const ADD_SCALAR: u32 = 1;
const MUL: u32 = 2;
const SHAPE: [u32; 2] = [128, 128];

fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

fn out() -> TaskArg {
    arg(
        TaskTensor::create_info(&SHAPE, DataType::Float32).expect("a valid shape"),
        TensorArgType::Output,
    )
}

pub(crate) fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [a, b, f] = match rt.args().tensors() {
        [a, b, f] => [*a, *b, *f],
        _ => return Err(rt.report_fatal(1)),
    };
    let mut t0 = [
        arg(a, TensorArgType::Input),
        arg(b, TensorArgType::Input),
        out(),
    ];
    rt.submit_aiv(ADD, &mut t0, &[])?;
    let c = t0[2].tensor;
    rt.scope(ScopeMode::Auto, |rt| {
        let mut t1 = [arg(c, TensorArgType::Input), out()];
        rt.submit_aiv(ADD_SCALAR, &mut t1, &[1.0f32.to_bits() as u64])?;
        let mut t2 = [arg(c, TensorArgType::Input), out()];
        rt.submit_aiv(ADD_SCALAR, &mut t2, &[2.0f32.to_bits() as u64])?;
        let mut t3 = [
            arg(t1[1].tensor, TensorArgType::Input),
            arg(t2[1].tensor, TensorArgType::Input),
            out(),
        ];
        rt.submit_aiv(MUL, &mut t3, &[])?;
        let mut t4 = [
            arg(t3[2].tensor, TensorArgType::Input),
            arg(c, TensorArgType::Input),
            arg(f, TensorArgType::OutputExisting),
        ];
        rt.submit_aiv(ADD, &mut t4, &[])?;
        Ok(())
    })
}

impl Scene for VectorExample {
    fn name(&self) -> &'static str {
        "vector_example"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["default"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if case != "default" {
            return None;
        }
        let n = (SHAPE[0] * SHAPE[1]) as usize;
        let a = vec![2.0f32; n];
        let b = vec![3.0f32; n];
        let golden: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let s = x as f64 + y as f64;
                (s + 1.0) * (s + 2.0) + s
            })
            .collect();
        Some(Prepared {
            orch: Arc::new(orchestrate),
            kernels: vec![kernels::add, kernels::add_scalar, kernels::mul],
            signature: vec![ArgDirection::In, ArgDirection::In, ArgDirection::Out],
            tensors: vec![
                HostTensor::f32(&a, &SHAPE, ArgDirection::In),
                HostTensor::f32(&b, &SHAPE, ArgDirection::In),
                HostTensor::f32(&vec![0.0; n], &SHAPE, ArgDirection::Out),
            ],
            scalars: Vec::new(),
            check: Box::new(move |t| compare(&t[2].to_f32(), &golden, 1e-5, 1e-5)),
            tasks: 5,
            edges: 6,
        })
    }
}
