//! `vector_example`: f = (a + b + 1)(a + b + 2) + (a + b) over 16,384 fp32 elements.
//!
//! t0 c = a + b → {t1 d = c + 1, t2 e = c + 2} → t3 g = d · e → t4 f = g + c, with t1..t4 in an
//! inner scope: 5 tasks, 6 edges (t4 also depends on t0 directly).
//!
//! Inputs vary by element: `a[i] = 2 + i/1024` and `b[i] = 3 - i/2048`, exact in f32, so
//! element 0 is the reference's a = 2, b = 3, f = 47, and `s = a + b = 5 + i/2048` grows with
//! `i` (f over [47, 223)). The golden is the formula in f64; the tolerance, 1e-6 absolute plus
//! 1e-6 relative, is at most 2.3e-4 and f32 rounds f by less than 3e-5. One step of `i` moves
//! s by 1/2048 = 4.9e-4 and f by at least 14/2048, so an element read from another position
//! (of an input or an intermediate) or written to another position fails the check.

use super::{golden_check, Prepared, Scene, Tolerance};
use crate::callable::Callable;
use crate::chip_worker::HostTensor;
use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{ArgDirection, DataType, TaskTensor, TensorArgType};
use std::sync::Arc;

/// The `vector_example` scene, the README's main command: one case, `default`, its golden
/// the formula in f64 over the one output.
pub struct VectorExample;

const ADD: u32 = 0;
const ADD_SCALAR: u32 = 1;
const MUL: u32 = 2;
const SHAPE: [u32; 2] = [128, 128];

/// f(a, b) = (a + b + 1)(a + b + 2) + (a + b) in f64: the golden of one element, which the
/// graph and l3 scenes check their outputs against too.
pub(crate) fn golden(a: f64, b: f64) -> f64 {
    let s = a + b;
    (s + 1.0) * (s + 2.0) + s
}

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
        let a: Vec<f32> = (0..n).map(|i| 2.0 + i as f32 / 1024.0).collect();
        let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32 / 2048.0).collect();
        let golden: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| golden(x as f64, y as f64))
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
                    HostTensor::f32(&b, &SHAPE, ArgDirection::In),
                    HostTensor::f32(&vec![0.0; n], &SHAPE, ArgDirection::Out),
                ],
                golden_check(
                    2,
                    golden,
                    Tolerance {
                        atol: 1e-6,
                        rtol: 1e-6,
                    },
                ),
            )
            .with_counts(5, 6),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check passes f computed in f32 from the inputs, and fails it with one element taken
    /// from its neighbour: swapped in the output, or t4 reading c one element on, at the bottom,
    /// the middle and the top of the range (where the tolerance is widest).
    #[test]
    fn the_check_fails_an_element_from_the_next_position() {
        let p = VectorExample.prepare("default").expect("the default case");
        let (a, b) = (p.tensors[0].to_f32(), p.tensors[1].to_f32());
        let c: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let g: Vec<f32> = c.iter().map(|s| (s + 1.0) * (s + 2.0)).collect();
        let f: Vec<f32> = g.iter().zip(&c).map(|(g, c)| g + c).collect();
        let passes = |f: &[f32]| {
            let mut t = p.tensors.clone();
            t[2] = HostTensor::f32(f, &SHAPE, ArgDirection::Out);
            (p.check)(&t).pass
        };
        assert!(passes(&f));
        assert_eq!(f[0], 47.0, "element 0 is the reference's");
        for i in [0, f.len() / 2, f.len() - 2] {
            let mut swapped = f.clone();
            swapped.swap(i, i + 1);
            assert!(!passes(&swapped), "f[{i}] and f[{}] swapped", i + 1);
            let mut misread = f.clone();
            misread[i] = g[i] + c[i + 1];
            assert!(!passes(&misread), "t4 read c[{}] for element {i}", i + 1);
        }
    }
}
