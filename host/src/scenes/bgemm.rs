//! `bgemm`: a tiled batched matmul, `C[g·loop + i] = Σ_k A[g, k, i] · B[g, k, i]` over
//! `tile × tile` f32 matrices (the reference's `benchmark_bgemm`).
//!
//! Entry tensors: `A` and `B` `[groups, grid_k, loop, tile, tile]` IN, and `C`
//! `[groups · loop, tile, tile]` INOUT, zero on entry. The orchestration reads the case's
//! parameters off these shapes (the reference passes them in a `config` tensor as well). It
//! is written once, as [`stream`], generic over [`TaskStream`]: the device runs it on `Rt`,
//! the `submit` benchmark on a bare orchestrator.
//!
//! Per group `g`, in its own AUTO scope, per K step `k`:
//! - `GEMM` (AIC, `matmul`): INPUT the `[1, 1, loop, tile, tile]` views `A[g, k]` and
//!   `B[g, k]`, OUTPUT `P` `[loop, tile, tile]` (one product per batch slice `i`);
//! - `ADD` (AIV, `accumulate`): INPUT `P`, INOUT `C[g]`, the `[loop, tile, tile]` view at row
//!   `g · loop`.
//!
//! Edges per group: `grid_k` GEMM→ADD plus `grid_k - 1` ADD→ADD through `C[g]`, so
//! `groups · (2 · grid_k - 1)`; groups share nothing.
//!
//! | case | groups | tile | loop | grid_k | tasks | edges | entry bytes |
//! |---|---|---|---|---|---|---|---|
//! | Case0 | 250 | 128 | 4 | 2 | 1000 | 750 | 327,680,000 (312.5 MiB) |
//! | Case1 | 32 | 128 | 4 | 2 | 128 | 96 | 41,943,040 |
//! | Case2 | 128 | 128 | 4 | 2 | 512 | 384 | 167,772,160 |
//! | Case3 | 32 | 128 | 16 | 2 | 128 | 96 | 167,772,160 |
//! | Case4 | 16 | 128 | 4 | 4 | 128 | 112 | 37,748,736 |
//! | Bgemm64 | 8 | 64 | 1 | 4 | 64 | 56 | 1,179,648 |
//!
//! Case0's entry tensors need more GM than `DeviceConfig::new`'s 256 MiB.
//!
//! Inputs are seeded pseudo-random values in `[0, 0.01)`: every term of a sum is positive, so
//! a missing or doubled K step moves every element of `C` by far more than the tolerance. The
//! golden sums the products in f64; tolerance 1e-3 absolute plus 1e-3 relative. The check sums
//! it afresh from each round's own inputs, one output matrix at a time, rather than holding
//! it: Case0's golden would be 131 MB beside 328 MB of entry tensors.

use super::stream::{StreamEntry, StreamTensor, TaskStream};
use super::{compare_bytes, Check, CheckFn, Prepared, Scene, XorShift};
use crate::callable::Callable;
use crate::chip_worker::HostTensor;
use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{ArgDirection, DataType, TaskTensor, TensorArgType};
use std::sync::Arc;

/// The scene.
pub struct Bgemm;

const MATMUL: u32 = 0;
const ACCUMULATE: u32 = 1;

/// The fatal code of an entry whose tensors do not have the scene's shapes.
const BAD_ENTRY: u32 = 1;

const CASE_NAMES: &[&str] = &["Case0", "Case1", "Case2", "Case3", "Case4", "Bgemm64"];

/// One case's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    groups: u32,
    grid_k: u32,
    incore_loop: u32,
    tile: u32,
}

impl Shape {
    fn of_case(case: &str) -> Option<Self> {
        let (groups, tile, incore_loop, grid_k) = match case {
            "Case0" => (250, 128, 4, 2),
            "Case1" => (32, 128, 4, 2),
            "Case2" => (128, 128, 4, 2),
            "Case3" => (32, 128, 16, 2),
            "Case4" => (16, 128, 4, 4),
            "Bgemm64" => (8, 64, 1, 4),
            _ => return None,
        };
        Some(Self {
            groups,
            grid_k,
            incore_loop,
            tile,
        })
    }

    /// The shape behind entry tensors `[A, B, C]`, if they have the scene's layout.
    fn of_entry(a: &TaskTensor, b: &TaskTensor, c: &TaskTensor) -> Option<Self> {
        let &[groups, grid_k, incore_loop, tile, cols] = a.shapes() else {
            return None;
        };
        let shape = Self {
            groups,
            grid_k,
            incore_loop,
            tile,
        };
        let f32 = DataType::Float32;
        // `C` has `groups · loop` rows, so that product (and every view's row offset) fits u32.
        let ok = cols == tile
            && b.shapes() == a.shapes()
            && c.shapes() == [groups.checked_mul(incore_loop)?, tile, tile]
            && [a, b, c].iter().all(|t| t.dtype() == f32);
        ok.then_some(shape)
    }

    fn ab_shape(&self) -> [u32; 5] {
        [
            self.groups,
            self.grid_k,
            self.incore_loop,
            self.tile,
            self.tile,
        ]
    }

    fn c_shape(&self) -> [u32; 3] {
        [self.groups * self.incore_loop, self.tile, self.tile]
    }

    /// Elements of `A` (and of `B`).
    fn ab_elems(&self) -> usize {
        self.ab_shape().iter().map(|&d| d as usize).product()
    }

    /// Elements of `C`.
    fn c_elems(&self) -> usize {
        self.c_shape().iter().map(|&d| d as usize).product()
    }

    fn tasks(&self) -> u64 {
        2 * self.groups as u64 * self.grid_k as u64
    }

    fn edges(&self) -> u64 {
        self.groups as u64 * (2 * self.grid_k as u64 - 1)
    }
}

fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

/// The scene's orchestration on the device (also its Graph body, `scenes::body("bgemm")`).
pub(crate) fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    stream(rt)
}

/// The scene's task stream (the module docs list it), on any [`TaskStream`]: [`Rt`] on the
/// device, a bare orchestrator in the `submit` benchmark.
pub fn stream<S: TaskStream>(s: &mut S) -> Result<(), S::Error> {
    let (a, b, c) = match s.tensors() {
        [a, b, c] => (*a, *b, *c),
        _ => return Err(s.fatal(BAD_ENTRY)),
    };
    let Some(shape) = Shape::of_entry(&a, &b, &c) else {
        return Err(s.fatal(BAD_ENTRY));
    };
    let (t, lp) = (shape.tile, shape.incore_loop);
    let Ok(product) = TaskTensor::create_info(&[lp, t, t], DataType::Float32) else {
        return Err(s.fatal(BAD_ENTRY));
    };
    for g in 0..shape.groups {
        // `of_entry` checked the extents, so every view below is in bounds; the error arms end
        // the run rather than panic should that not hold.
        let Ok(c_g) = c.view(&[lp, t, t], &[g * lp, 0, 0]) else {
            return Err(s.fatal(BAD_ENTRY));
        };
        s.scope(ScopeMode::Auto, |s| {
            for k in 0..shape.grid_k {
                let views = (
                    a.view(&[1, 1, lp, t, t], &[g, k, 0, 0, 0]),
                    b.view(&[1, 1, lp, t, t], &[g, k, 0, 0, 0]),
                );
                let (Ok(a_gk), Ok(b_gk)) = views else {
                    return Err(s.fatal(BAD_ENTRY));
                };
                let mut gemm = [
                    arg(a_gk, TensorArgType::Input),
                    arg(b_gk, TensorArgType::Input),
                    arg(product, TensorArgType::Output),
                ];
                s.submit_aic(MATMUL, &mut gemm, &[])?;
                let mut add = [
                    arg(gemm[2].tensor, TensorArgType::Input),
                    arg(c_g, TensorArgType::InOut),
                ];
                s.submit_aiv(ACCUMULATE, &mut add, &[])?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// `n` inputs in `[0, 0.01)`, as the little-endian f32 bytes of a host tensor (built in place:
/// the scene's largest case holds 164 MB of each input, so no second copy is made).
fn inputs(rng: &mut XorShift, n: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(n * 4);
    for _ in 0..n {
        bytes.extend_from_slice(&(0.01 * rng.unit()).to_le_bytes());
    }
    bytes
}

/// Fills `dst` from the little-endian f32 bytes of elements `first..first + dst.len()`.
fn read_f32(bytes: &[u8], first: usize, dst: &mut [f32]) {
    let src = &bytes[4 * first..4 * (first + dst.len())];
    for (v, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// `C[g·loop + i] = Σ_k A[g, k, i] · B[g, k, i]` in f64, from the host inputs' bytes, one
/// output matrix at a time: `each(first, sums)` gets the f64 sums of the matrix whose first
/// element is element `first` of `C`. Summing a matrix's K steps in order keeps one tile of
/// f64 sums, not the whole output in f64 (Case0's would be 131 MB).
fn for_each_golden(s: &Shape, a: &[u8], b: &[u8], mut each: impl FnMut(usize, &[f64])) {
    let t = s.tile as usize;
    let tt = t * t;
    let (groups, grid_k, lp) = (s.groups as usize, s.grid_k as usize, s.incore_loop as usize);
    let (mut sum, mut a_m, mut b_m) = (vec![0.0f64; tt], vec![0.0f32; tt], vec![0.0f32; tt]);
    for g in 0..groups {
        for i in 0..lp {
            sum.fill(0.0);
            for k in 0..grid_k {
                let src = ((g * grid_k + k) * lp + i) * tt;
                read_f32(a, src, &mut a_m);
                read_f32(b, src, &mut b_m);
                for (c_row, a_row) in sum.chunks_exact_mut(t).zip(a_m.chunks_exact(t)) {
                    for (&x, b_row) in a_row.iter().zip(b_m.chunks_exact(t)) {
                        let x = x as f64;
                        for (y, &z) in c_row.iter_mut().zip(b_row) {
                            *y += x * z as f64;
                        }
                    }
                }
            }
            each((g * lp + i) * tt, &sum);
        }
    }
}

/// The check of a round: `C` against the golden summed afresh from the round's own `A` and
/// `B` (IN tensors, which a run never writes back), one output matrix at a time, so no golden
/// is held between rounds. Tolerance 1e-3 absolute plus 1e-3 relative.
fn check(s: Shape) -> CheckFn {
    let (n_ab, n_c) = (s.ab_elems(), s.c_elems());
    Box::new(move |tensors: &[HostTensor]| {
        let failed = Check {
            max_diff: f64::INFINITY,
            pass: false,
        };
        let [a, b, c] = tensors else {
            return failed;
        };
        if a.data.len() != 4 * n_ab || b.data.len() != 4 * n_ab || c.data.len() != 4 * n_c {
            return failed;
        }
        let mut all = Check {
            max_diff: 0.0,
            pass: true,
        };
        for_each_golden(&s, &a.data, &b.data, |first, sums| {
            let got = &c.data[4 * first..4 * (first + sums.len())];
            let one = compare_bytes(got, sums, 1e-3, 1e-3);
            all.max_diff = all.max_diff.max(one.max_diff);
            all.pass &= one.pass;
        });
        all
    })
}

impl Scene for Bgemm {
    fn name(&self) -> &'static str {
        "bgemm"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        let s = Shape::of_case(case)?;
        let ab = s.ab_shape();
        let (n_ab, n_c) = (s.ab_elems(), s.c_elems());
        let mut rng = XorShift(0x5EED_B6E3_0000_0001);
        let a = inputs(&mut rng, n_ab);
        let b = inputs(&mut rng, n_ab);
        let c = vec![0u8; n_c * 4];
        let tensor = |data, shapes: &[u32], dir| HostTensor {
            data,
            shapes: shapes.to_vec(),
            dtype: DataType::Float32,
            dir,
        };
        Some(
            Prepared::new(
                Callable::raw(
                    Arc::new(orchestrate),
                    vec![kernels::matmul, kernels::accumulate],
                    vec![ArgDirection::In, ArgDirection::In, ArgDirection::InOut],
                ),
                vec![
                    tensor(a, &ab, ArgDirection::In),
                    tensor(b, &ab, ArgDirection::In),
                    tensor(c, &s.c_shape(), ArgDirection::InOut),
                ],
                check(s),
            )
            .with_counts(s.tasks(), s.edges()),
        )
    }
}

/// `case`'s entry as [`stream`] sees it: the shapes of `A`, `B` and `C` (it reads no element of
/// them); `None` for an unknown case.
pub fn stream_entry(case: &str) -> Option<StreamEntry> {
    let s = Shape::of_case(case)?;
    let f32 = DataType::Float32;
    Some(StreamEntry {
        tensors: vec![
            StreamTensor::opaque(&s.ab_shape(), f32),
            StreamTensor::opaque(&s.ab_shape(), f32),
            StreamTensor::opaque(&s.c_shape(), f32),
        ],
        scalars: Vec::new(),
        tasks: s.tasks(),
        edges: s.edges(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_a_shape_with_the_reference_counts() {
        let counts: Vec<(u64, u64)> = CASE_NAMES
            .iter()
            .map(|c| {
                let s = Shape::of_case(c).unwrap();
                (s.tasks(), s.edges())
            })
            .collect();
        assert_eq!(
            counts,
            [
                (1000, 750),
                (128, 96),
                (512, 384),
                (128, 96),
                (128, 112),
                (64, 56)
            ]
        );
    }

    #[test]
    fn the_golden_sums_every_k_step() {
        // One group, two K steps, two batch slices of 2x2: C[i] = A[0,i]·B[0,i] + A[1,i]·B[1,i].
        let s = Shape {
            groups: 1,
            grid_k: 2,
            incore_loop: 2,
            tile: 2,
        };
        let a: Vec<u8> = (0..16).flat_map(|x| (x as f32).to_le_bytes()).collect();
        let b: Vec<u8> = (0..16).flat_map(|_| 1.0f32.to_le_bytes()).collect();
        // Slice i of step k starts at a[(2k + i)·4]; with B all ones, both elements of row r of
        // a product are the sum of row r of that slice of A.
        let mut golden = vec![f64::NAN; 8];
        for_each_golden(&s, &a, &b, |first, sums| {
            golden[first..first + sums.len()].copy_from_slice(sums)
        });
        assert_eq!(golden, [18.0, 18.0, 26.0, 26.0, 34.0, 34.0, 42.0, 42.0]);
        // The check passes that output and fails one element off by more than the tolerance.
        let tensor = |values: &[f64]| HostTensor {
            data: values
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
            shapes: vec![2, 2, 2],
            dtype: DataType::Float32,
            dir: ArgDirection::InOut,
        };
        let input = |data: &[u8]| HostTensor {
            data: data.to_vec(),
            shapes: vec![1, 2, 2, 2, 2],
            dtype: DataType::Float32,
            dir: ArgDirection::In,
        };
        let mut tensors = vec![input(&a), input(&b), tensor(&golden)];
        assert!(check(s)(&tensors).pass);
        golden[5] += 0.1;
        tensors[2] = tensor(&golden);
        let off = check(s)(&tensors);
        assert!(
            !off.pass && (off.max_diff - 0.1).abs() < 1e-4,
            "{}",
            off.max_diff
        );
        // A round without its three tensors fails.
        assert!(!check(s)(&tensors[..2]).pass);
    }

    #[test]
    fn the_stream_entry_has_the_prepared_shapes() {
        let p = Bgemm.prepare("Bgemm64").unwrap();
        let e = stream_entry("Bgemm64").unwrap();
        assert_eq!(
            (Some(e.tasks), Some(e.edges), &e.scalars),
            (p.tasks, p.edges, &p.scalars)
        );
        let shapes = |t: &[StreamTensor]| -> Vec<(Vec<u32>, DataType)> {
            t.iter().map(|t| (t.shapes.clone(), t.dtype)).collect()
        };
        let prepared: Vec<(Vec<u32>, DataType)> = p
            .tensors
            .iter()
            .map(|t| (t.shapes.clone(), t.dtype))
            .collect();
        assert_eq!(shapes(&e.tensors), prepared);
        assert!(e.tensors.iter().all(|t| t.data.is_none()));
    }
}
