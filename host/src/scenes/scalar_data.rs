//! `scalar_data`: an orchestration that reads and writes single tensor elements between its
//! tasks (the reference's `scalar_data` example, case `default`; its `get_tensor_data` and
//! `set_tensor_data` are [`Scope::read_element`] and [`Scope::write_element`] here).
//!
//! Entry: `a` (16,384 f32, all 2), `b` (16,384 f32, `b[i] = i`), outputs `result` (16,384) and
//! `check` (9). Kernels: `ADD` (0, AIV, `t2 = t0 + t1`) and `NOOP` (1, AIV, touches nothing).
//! The steps, each landing a value in `check`:
//!
//! | step | what the orchestration does | lands |
//! |---|---|---|
//! | 1-3 | T0 `c = a + b` (runtime output); reads `c[0]`, `c[100]` | `check[0] = 2`, `check[1] = 102` |
//! | 4-5 | T1 allocates a 1-element tensor `s`, which starts at 77; reads it | `check[2] = 77` |
//! | 6-7 | T2 NOOP with `s` INOUT; reads `s` again | `check[3] = 77` |
//! | 8 | adds the values read in steps 2 and 5 | `check[4] = 79` |
//! | 9 | writes 42 to `s`, reads it back | `check[5] = 42` |
//! | 10 | T3 allocates `d`; writes `d[0] = 10`; T4 `e = d + a`; reads `e[0]` | `check[6] = 12` |
//! | 11 | T5 `c + b` (a reader of `c`); writes `c[0] = 88`, reads it back | `check[7] = 88` |
//! | 12 | T6 NOOP with `b` OUTPUT_EXISTING; writes `b[0] = 55`, reads it back; writes `b[0] = 0` | `check[8] = 55` |
//! | 13 | T7 `result = a + b` (OUTPUT_EXISTING) | `result` |
//!
//! The graph, as the reference's: 8 tasks (two of them allocations) and 4 edges: the creator
//! edges T1 → T2 (`s`), T3 → T4 (`d`) and T0 → T5 (`c`), and T6 → T7, which T7's INPUT of `b`
//! finds through the TensorMap, where T6's OUTPUT_EXISTING registered it. Every task is in
//! the orchestration's scope, so none retires before a later one names it.
//!
//! Where this runtime differs: the reference allocates `s` with an initial value
//! (`set_initial_value(77)`); this runtime's allocation has none, so the orchestration writes
//! 77 into `s` right after the allocation task, which completes at submit. No task, no edge.
//!
//! Otherwise the orchestration is the reference's, step for step: [`Scope::read_element`] and
//! [`Scope::write_element`] wait as `get_tensor_data` and `set_tensor_data` do (a read for the
//! tensor's creator and every TensorMap writer of it, a write also until the consumers of
//! those are done). So the step-7 read and the step-9 write on `s` wait for T2 (a writer of
//! `s`), the step-11 write on `c` waits for T5, the reader of `c` (its INPUT of `c` holds a
//! retaining edge on T0, the creator), which so reads the `c` of step 1, and the step-12 write
//! on `b` waits for T6 (a writer of `b`).
//!
//! The golden: `result = a + b` and the nine values, computed from the inputs in f64 (`c[i] =
//! a[i] + b[i]`, `e[0] = 10 + a[0]`); checked exactly, as the whole computation is exact in f32.

use super::{compare_each, Prepared, Scene};
use crate::callable::{Callable, Signature};
use crate::chip_worker::HostTensor;
use crate::scope::{Scope, Tensor, TensorInfo};
use crate::task::{KernelTable, TaskScalar};
use simpler_aicore::kernels;
use simpler_aicpu::RtError;
use simpler_core::ArgDirection::{In, Out};
use simpler_core::DataType;

/// The scene.
pub struct ScalarData;

/// Elements of `a`, `b`, `result`.
const SIZE: u32 = 128 * 128;
/// Slots of `check`.
const CHECKS: u32 = 9;
/// The fatal code of an entry tensor of another shape.
pub const BAD_ENTRY: u32 = 0x5d_0001;

/// Element `index` of `t`, an f32 tensor.
fn get(s: &mut Scope<'_>, t: &Tensor<'_>, index: u64) -> Result<f32, RtError> {
    s.read_element(t, index).map(f32::from_word)
}

/// Writes `value` to element `index` of `t`, an f32 tensor.
fn set(s: &mut Scope<'_>, t: &Tensor<'_>, index: u64, value: f32) -> Result<(), RtError> {
    s.write_element(t, index, value.to_word())
}

fn callable() -> Callable {
    let mut table = KernelTable::new();
    let add = table.aiv(kernels::add);
    let noop = table.aiv(kernels::empty);
    let signature = Signature::new([In, In, Out, Out]);
    Callable::new(table, signature, move |s, entry| {
        let [a, b, result, check] = entry.tensors;
        let size = a.numel();
        let (Ok(inter), Ok(one)) = (
            TensorInfo::new(&[size as u32], DataType::Float32),
            TensorInfo::new(&[1], DataType::Float32),
        ) else {
            return Err(s.fail(BAD_ENTRY));
        };
        if check.numel() != u64::from(CHECKS) || size <= 100 {
            return Err(s.fail(BAD_ENTRY));
        }
        // Steps 1-3.
        let c = s
            .task(add)
            .input(a)
            .input(b)
            .output(inter)
            .submit()?
            .output(0);
        let c0 = get(s, &c, 0)?;
        set(s, &check, 0, c0)?;
        let c100 = get(s, &c, 100)?;
        set(s, &check, 1, c100)?;
        // Steps 4-5: the allocation, then its initial value.
        let [scalar] = s.alloc([one])?;
        set(s, &scalar, 0, 77.0)?;
        let s0 = get(s, &scalar, 0)?;
        set(s, &check, 2, s0)?;
        // Steps 6-7.
        s.task(noop).inout(scalar).submit()?;
        let s1 = get(s, &scalar, 0)?;
        set(s, &check, 3, s1)?;
        // Step 8.
        set(s, &check, 4, c0 + s0)?;
        // Step 9.
        set(s, &scalar, 0, 42.0)?;
        let round_trip = get(s, &scalar, 0)?;
        set(s, &check, 5, round_trip)?;
        // Step 10.
        let [d] = s.alloc([inter])?;
        set(s, &d, 0, 10.0)?;
        let e = s
            .task(add)
            .input(d)
            .input(a)
            .output(inter)
            .submit()?
            .output(0);
        let e0 = get(s, &e, 0)?;
        set(s, &check, 6, e0)?;
        // Step 11: the write waits for the reader of c (T0's consumer).
        s.task(add).input(c).input(b).output(inter).submit()?;
        set(s, &c, 0, 88.0)?;
        let waw = get(s, &c, 0)?;
        set(s, &check, 7, waw)?;
        // Step 12.
        s.task(noop).output_existing(b).submit()?;
        set(s, &b, 0, 55.0)?;
        let war = get(s, &b, 0)?;
        set(s, &check, 8, war)?;
        set(s, &b, 0, 0.0)?;
        // Step 13.
        s.task(add)
            .input(a)
            .input(b)
            .output_existing(result)
            .submit()?;
        Ok(())
    })
}

impl Scene for ScalarData {
    fn name(&self) -> &'static str {
        "scalar_data"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["default"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if case != "default" {
            return None;
        }
        let a = vec![2.0f32; SIZE as usize];
        let b: Vec<f32> = (0..SIZE).map(|i| i as f32).collect();
        let sum = |i: usize| f64::from(a[i]) + f64::from(b[i]);
        let result: Vec<f64> = (0..SIZE as usize).map(sum).collect();
        let check = vec![
            sum(0),
            sum(100),
            77.0,
            77.0,
            sum(0) + 77.0,
            42.0,
            10.0 + f64::from(a[0]),
            88.0,
            55.0,
        ];
        let golden = vec![(2, result), (3, check)];
        Some(
            Prepared::new(
                callable(),
                vec![
                    HostTensor::f32(&a, &[SIZE], In),
                    HostTensor::f32(&b, &[SIZE], In),
                    HostTensor::f32(&vec![0.0; SIZE as usize], &[SIZE], Out),
                    HostTensor::f32(&[0.0; CHECKS as usize], &[CHECKS], Out),
                ],
                Box::new(move |t| compare_each(t, &golden, 0.0, 0.0)),
            )
            .with_counts(8, 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden holds the reference's documented values, and the check fails a `result`
    /// that kept step 12's 55 in `b[0]`, or a `check` slot out of place.
    #[test]
    fn the_golden_is_the_references_and_the_check_is_exact() {
        let p = ScalarData.prepare("default").unwrap();
        let good: Vec<f32> = vec![2.0, 102.0, 77.0, 77.0, 79.0, 42.0, 12.0, 88.0, 55.0];
        let result: Vec<f32> = (0..SIZE).map(|i| 2.0 + i as f32).collect();
        let with = |result: &[f32], check: &[f32]| {
            let mut t = p.tensors.clone();
            t[2] = HostTensor::f32(result, &[SIZE], Out);
            t[3] = HostTensor::f32(check, &[CHECKS], Out);
            (p.check)(&t).pass
        };
        assert!(with(&result, &good));
        let mut kept = result.clone();
        kept[0] = 57.0;
        assert!(!with(&kept, &good));
        let mut swapped = good.clone();
        swapped.swap(2, 4);
        assert!(!with(&result, &swapped));
    }
}
