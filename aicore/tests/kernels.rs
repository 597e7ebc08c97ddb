//! The reference kernels against naive f64 references written here (never the kernels
//! themselves), over a bounds-checked GM double, and their refusals of bad arguments.
//!
//! Tolerances are relative, with values below 1 held to the same bound absolutely:
//! `|got - want| <= rel * max(|want|, 1)`. f32 vector ops use 1e-5, matmul 1e-4 and the bf16
//! attention kernels 1e-3; a bf16 output is compared against the reference rounded to bf16 the
//! same way (round to nearest even) where the kernel's rounding is part of its contract.

use simpler_aicore::kernels::{self, FAIL_CODE, MAX_TILE};
use simpler_aicore::{CoreTaskArgs, Gm, GmFault, KernelCtx, KernelFailure, KernelFn};
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskTensor};
use std::ops::Range;
use std::sync::Mutex;

/// Where the test GM starts.
const BASE: u64 = 0x4000_0000;
/// The local buffer of a real core: 64 Ki f32 words.
const LOCAL_WORDS: usize = 64 * 1024;

const F32: DataType = DataType::Float32;
const BF16: DataType = DataType::Bfloat16;

/// GM over a byte vector at `base`; an access outside it is a [`GmFault`].
struct VecGm {
    base: u64,
    bytes: Mutex<Vec<u8>>,
    /// Every prefetch hint, as `(addr, len)`, in the order given.
    hints: Mutex<Vec<(u64, usize)>>,
}

impl VecGm {
    fn new(base: u64, len: usize) -> Self {
        Self {
            base,
            bytes: Mutex::new(vec![0; len]),
            hints: Mutex::new(Vec::new()),
        }
    }

    fn span(&self, addr: u64, len: usize, size: usize) -> Result<Range<usize>, GmFault> {
        let fault = GmFault {
            addr,
            len: len as u64,
            kind: simpler_core::gm::GmFaultKind::Outside,
        };
        let start = addr.checked_sub(self.base).ok_or(fault)?;
        let end = start.checked_add(len as u64).ok_or(fault)?;
        if end > size as u64 {
            return Err(fault);
        }
        Ok(start as usize..end as usize)
    }
}

impl Gm for VecGm {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let bytes = self.bytes.lock().unwrap();
        let range = self.span(addr, dst.len(), bytes.len())?;
        dst.copy_from_slice(&bytes[range]);
        Ok(())
    }

    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        let mut bytes = self.bytes.lock().unwrap();
        let range = self.span(addr, src.len(), bytes.len())?;
        bytes[range].copy_from_slice(src);
        Ok(())
    }

    fn prefetch(&self, addr: u64, len: usize) {
        self.hints.lock().unwrap().push((addr, len));
    }
}

/// Round to nearest even, f32 to bf16 bits (finite values).
fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16
}

/// `x` rounded to the nearest bf16.
fn round_bf16(x: f64) -> f64 {
    f32::from_bits((bf16_bits(x as f32) as u32) << 16) as f64
}

fn row_major(shapes: &[u32]) -> Vec<u32> {
    let mut strides = vec![1u32; shapes.len()];
    for d in (0..shapes.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shapes[d + 1];
    }
    strides
}

/// Element offsets (from the buffer's address) of a view, in row-major element order.
fn element_offsets(t: &TaskTensor) -> Vec<u64> {
    let (shapes, strides) = (t.shapes(), t.strides());
    let numel = t.numel() as usize;
    let mut out = Vec::with_capacity(numel);
    let mut index = vec![0u32; shapes.len()];
    for _ in 0..numel {
        let offset: u64 = index
            .iter()
            .zip(strides)
            .map(|(&i, &s)| i as u64 * s as u64)
            .sum();
        out.push(t.start_offset() + offset);
        for d in (0..shapes.len()).rev() {
            index[d] += 1;
            if index[d] < shapes[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// Tensors laid out one after another in a [`VecGm`], and the kernel runner.
struct Scene {
    gm: VecGm,
    top: u64,
    len: u64,
}

impl Scene {
    fn new(len: usize) -> Self {
        Self {
            gm: VecGm::new(BASE, len),
            top: BASE,
            len: len as u64,
        }
    }

    fn reserve(&mut self, bytes: u64) -> BufferHandle {
        let addr = self.top;
        self.top += bytes.div_ceil(64) * 64;
        assert!(self.top <= BASE + self.len, "scene GM exhausted");
        BufferHandle { addr, size: bytes }
    }

    /// A dense row-major tensor holding `values`.
    fn tensor(&mut self, shapes: &[u32], dtype: DataType, values: &[f32]) -> TaskTensor {
        let numel: u64 = shapes.iter().map(|&s| s as u64).product();
        assert_eq!(values.len() as u64, numel);
        let buffer = self.reserve(numel * dtype.elem_size() as u64);
        let t = TaskTensor::new(
            buffer,
            0,
            shapes,
            &row_major(shapes),
            dtype,
            AddressSpace::Device,
        )
        .unwrap();
        self.write(&t, values);
        t
    }

    /// A dense row-major tensor with every element `value`.
    fn filled(&mut self, shapes: &[u32], dtype: DataType, value: f32) -> TaskTensor {
        let numel: u32 = shapes.iter().product();
        self.tensor(shapes, dtype, &vec![value; numel as usize])
    }

    fn write(&self, t: &TaskTensor, values: &[f32]) {
        let elem = t.dtype().elem_size() as u64;
        for (offset, &v) in element_offsets(t).into_iter().zip(values) {
            let addr = t.buffer().addr + offset * elem;
            match t.dtype() {
                DataType::Float32 => self.gm.write(addr, &v.to_le_bytes()).unwrap(),
                DataType::Bfloat16 => self.gm.write(addr, &bf16_bits(v).to_le_bytes()).unwrap(),
                other => panic!("the scene does not write {other:?}"),
            }
        }
    }

    fn read(&self, t: &TaskTensor) -> Vec<f32> {
        let elem = t.dtype().elem_size() as u64;
        element_offsets(t)
            .into_iter()
            .map(|offset| {
                let addr = t.buffer().addr + offset * elem;
                match t.dtype() {
                    DataType::Float32 => {
                        let mut b = [0u8; 4];
                        self.gm.read(addr, &mut b).unwrap();
                        f32::from_le_bytes(b)
                    }
                    DataType::Bfloat16 => {
                        let mut b = [0u8; 2];
                        self.gm.read(addr, &mut b).unwrap();
                        f32::from_bits((u16::from_le_bytes(b) as u32) << 16)
                    }
                    other => panic!("the scene does not read {other:?}"),
                }
            })
            .collect()
    }

    fn run(
        &self,
        kernel: KernelFn,
        tensors: &[TaskTensor],
        scalars: &[u64],
    ) -> Result<(), KernelFailure> {
        self.run_with(kernel, tensors, scalars, LOCAL_WORDS)
    }

    fn run_with(
        &self,
        kernel: KernelFn,
        tensors: &[TaskTensor],
        scalars: &[u64],
        local_words: usize,
    ) -> Result<(), KernelFailure> {
        let mut args = CoreTaskArgs::new();
        for &t in tensors {
            args.push_tensor(t).unwrap();
        }
        for &s in scalars {
            args.push_scalar(s).unwrap();
        }
        let mut local = vec![0.0f32; local_words];
        let mut ctx = KernelCtx {
            gm: &self.gm,
            args: &args,
            local: &mut local,
            ops: &simpler_aicore::Portable,
            block_idx: 0,
            block_num: 1,
            sub_block: 0,
        };
        kernel(&mut ctx)
    }
}

/// xorshift64*: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }

    /// Uniform values exactly representable in bf16.
    fn bf16_values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| f32::from_bits(self.uniform().to_bits() & 0xFFFF_0000))
            .collect()
    }
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: element count");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = rel * w.abs().max(1.0);
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (tolerance {tol})"
        );
    }
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// `A (m x k) · B (k x n)` in f64, i-j-k.
fn reference_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
        }
    }
    c
}

fn bad(index: u32) -> Result<(), KernelFailure> {
    Err(KernelFailure::BadArguments { index })
}

// ---------------------------------------------------------------------------------------------
// Vector kernels

#[test]
fn add_mul_add_scalar_match_the_reference() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut scene = Scene::new(1 << 20);
    let (av, bv) = (rng.values(128 * 128), rng.values(128 * 128));
    let a = scene.tensor(&[128, 128], F32, &av);
    let b = scene.tensor(&[128, 128], F32, &bv);
    let c = scene.filled(&[128, 128], F32, 0.0);

    scene.run(kernels::add, &[a, b, c], &[]).unwrap();
    let sum: Vec<f64> = av
        .iter()
        .zip(&bv)
        .map(|(&x, &y)| x as f64 + y as f64)
        .collect();
    assert_close(&scene.read(&c), &sum, 1e-5, "add");

    scene.run(kernels::mul, &[a, b, c], &[]).unwrap();
    let prod: Vec<f64> = av
        .iter()
        .zip(&bv)
        .map(|(&x, &y)| x as f64 * y as f64)
        .collect();
    assert_close(&scene.read(&c), &prod, 1e-5, "mul");

    // The vector example's 16,384-element vectors, with the scalar in the low 32 bits.
    let xv = rng.values(16_384);
    let x = scene.tensor(&[16_384], F32, &xv);
    let y = scene.filled(&[16_384], F32, 0.0);
    let s = 0.375f32;
    let scalar = 0xDEAD_BEEF_0000_0000 | s.to_bits() as u64;
    scene.run(kernels::add_scalar, &[x, y], &[scalar]).unwrap();
    let shifted: Vec<f64> = xv.iter().map(|&v| v as f64 + s as f64).collect();
    assert_close(&scene.read(&y), &shifted, 1e-5, "add_scalar");

    // In place: the output is the first input.
    scene.run(kernels::add, &[a, b, a], &[]).unwrap();
    assert_close(&scene.read(&a), &sum, 1e-5, "add in place");
}

#[test]
fn vector_kernels_stream_through_a_small_local_buffer() {
    let mut rng = Rng(7);
    let mut scene = Scene::new(1 << 20);
    // Equal element counts, different shapes and dtypes; 500-element chunks cut rows.
    let (av, bv) = (rng.values(3700), rng.bf16_values(3700));
    let a = scene.tensor(&[37, 100], F32, &av);
    let b = scene.tensor(&[3700], BF16, &bv);
    let c = scene.filled(&[100, 37], F32, 0.0);
    scene.run_with(kernels::add, &[a, b, c], &[], 1000).unwrap();
    let sum: Vec<f64> = av
        .iter()
        .zip(&bv)
        .map(|(&x, &y)| x as f64 + y as f64)
        .collect();
    assert_close(&scene.read(&c), &sum, 1e-5, "chunked add");

    scene.run_with(kernels::mul, &[a, b, c], &[], 1001).unwrap();
    let prod: Vec<f64> = av
        .iter()
        .zip(&bv)
        .map(|(&x, &y)| x as f64 * y as f64)
        .collect();
    assert_close(&scene.read(&c), &prod, 1e-5, "chunked mul");

    // A bf16 output in 7-element chunks: the kernel rounds each f32 result to bf16.
    let d = scene.filled(&[5, 4, 185], BF16, 0.0);
    let s = -1.25f32;
    scene
        .run_with(kernels::add_scalar, &[a, d], &[s.to_bits() as u64], 7)
        .unwrap();
    let shifted: Vec<f64> = av.iter().map(|&v| round_bf16((v + s) as f64)).collect();
    assert_close(
        &scene.read(&d),
        &shifted,
        1e-6,
        "chunked add_scalar to bf16",
    );
}

#[test]
fn vector_kernels_read_and_write_strided_views() {
    let mut rng = Rng(11);
    let mut scene = Scene::new(1 << 20);
    let (rows, cols) = (64u32, 96u32);
    let big_a = rng.values((rows * cols) as usize);
    let big_b = rng.values((rows * cols) as usize);
    let a_full = scene.tensor(&[rows, cols], F32, &big_a);
    let b_full = scene.tensor(&[rows, cols], F32, &big_b);
    let c_full = scene.filled(&[rows, cols], F32, 7.0);
    // Column blocks [64, 32]: A's middle, B's left and C's right third.
    let a = a_full.view(&[rows, 32], &[0, 32]).unwrap();
    let b = b_full.view(&[rows, 32], &[0, 0]).unwrap();
    let c = c_full.view(&[rows, 32], &[0, 64]).unwrap();
    assert!(!a.is_contiguous());

    let mut want_full: Vec<f64> = vec![7.0; (rows * cols) as usize];
    for r in 0..rows as usize {
        for j in 0..32 {
            let at = |col: usize| r * cols as usize + col;
            want_full[at(64 + j)] = big_a[at(32 + j)] as f64 + big_b[at(j)] as f64;
        }
    }
    // One chunk, and 50-element chunks that start and end inside rows.
    for local in [LOCAL_WORDS, 100] {
        scene.write(&c, &vec![0.0; 64 * 32]);
        scene
            .run_with(kernels::add, &[a, b, c], &[], local)
            .unwrap();
        assert_close(&scene.read(&c_full), &want_full, 1e-5, "strided add");
    }
}

#[test]
fn accumulate_adds_a_product_into_a_batch_view() {
    let mut rng = Rng(13);
    let mut scene = Scene::new(1 << 20);
    let (m, n) = (16u32, 24u32);
    let cv = rng.values((3 * m * n) as usize);
    let pv = rng.values((m * n) as usize);
    let c_full = scene.tensor(&[3, m, n], F32, &cv);
    let p = scene.tensor(&[m, n], F32, &pv);
    let c = c_full.view(&[1, m, n], &[1, 0, 0]).unwrap();

    let mut want = widen(&cv);
    let slice = (m * n) as usize;
    for (w, &x) in want[slice..2 * slice].iter_mut().zip(&pv) {
        *w += x as f64;
    }
    scene.run(kernels::accumulate, &[p, c], &[]).unwrap();
    assert_close(&scene.read(&c_full), &want, 1e-5, "accumulate");

    // Again in 30-element chunks.
    for (w, &x) in want[slice..2 * slice].iter_mut().zip(&pv) {
        *w += x as f64;
    }
    scene
        .run_with(kernels::accumulate, &[p, c], &[], 60)
        .unwrap();
    assert_close(&scene.read(&c_full), &want, 1e-5, "chunked accumulate");

    // A transposed shape with the same element count is refused.
    let wrong = scene.filled(&[n, m], F32, 0.0);
    assert_eq!(scene.run(kernels::accumulate, &[wrong, c], &[]), bad(1));
}

// ---------------------------------------------------------------------------------------------
// Matmul

#[test]
fn bf16_tiles_load_every_length_and_leave_the_rest_of_the_buffer() {
    // Dense runs of every length around the widening's groups of sixteen (odd ones take the
    // staged path), longer than one staging chunk, and a column view (strided).
    let mut rng = Rng(41);
    for len in (1..=40).chain([255, 256, 258, 600]) {
        let mut scene = Scene::new(1 << 16);
        let values = rng.bf16_values(len);
        let t = scene.tensor(&[len as u32], BF16, &values);
        let mut dst = vec![f32::NAN; len + 8];
        let n = simpler_aicore::tile::load(&scene.gm, &t, &mut dst).unwrap();
        assert_eq!(n, len);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&dst[..len]), bits(&values), "{len} values");
        assert!(
            dst[len..].iter().all(|v| v.is_nan()),
            "{len}: past the tile"
        );
    }
    let mut scene = Scene::new(1 << 16);
    let values = rng.bf16_values(24 * 6);
    let whole = scene.tensor(&[24, 6], BF16, &values);
    let column =
        TaskTensor::new(whole.buffer(), 4, &[24], &[6], BF16, AddressSpace::Device).unwrap();
    let mut dst = vec![0.0; 24];
    simpler_aicore::tile::load(&scene.gm, &column, &mut dst).unwrap();
    let want: Vec<f32> = (0..24).map(|r| values[r * 6 + 4]).collect();
    assert_eq!(dst, want, "column 4");
}

#[test]
fn matmul_matches_the_reference() {
    let mut rng = Rng(17);
    let mut scene = Scene::new(1 << 20);

    // Small f32.
    let (m, k, n) = (5, 7, 3);
    let (av, bv) = (rng.values(m * k), rng.values(k * n));
    let a = scene.tensor(&[m as u32, k as u32], F32, &av);
    let b = scene.tensor(&[k as u32, n as u32], F32, &bv);
    let c = scene.filled(&[m as u32, n as u32], F32, 0.0);
    scene.run(kernels::matmul, &[a, b, c], &[]).unwrap();
    let want = reference_matmul(&av, &bv, m, k, n);
    assert_close(&scene.read(&c), &want, 1e-4, "f32 5x7x3");

    // bf16 inputs, f32 output.
    let (m, k, n) = (16, 32, 8);
    let (av, bv) = (rng.bf16_values(m * k), rng.bf16_values(k * n));
    let a = scene.tensor(&[m as u32, k as u32], BF16, &av);
    let b = scene.tensor(&[k as u32, n as u32], BF16, &bv);
    let c = scene.filled(&[m as u32, n as u32], F32, 0.0);
    scene.run(kernels::matmul, &[a, b, c], &[]).unwrap();
    let want = reference_matmul(&av, &bv, m, k, n);
    assert_close(&scene.read(&c), &want, 1e-4, "bf16 in, f32 out");

    // bf16 output: the f32 result rounded once, so within one bf16 rounding of the reference.
    let c16 = scene.filled(&[m as u32, n as u32], BF16, 0.0);
    scene.run(kernels::matmul, &[a, b, c16], &[]).unwrap();
    assert_close(&scene.read(&c16), &want, 1.0 / 256.0, "bf16 out");
}

#[test]
fn matmul_reads_and_writes_strided_views() {
    let mut rng = Rng(19);
    let mut scene = Scene::new(1 << 20);
    let (m, k, n) = (24usize, 40usize, 20usize);
    // A is the middle column block of [m, 3k]; B the lower row block of [2k, n]; C the right
    // column block of [m, 2n].
    let a_big = rng.values(m * 3 * k);
    let b_big = rng.values(2 * k * n);
    let a_full = scene.tensor(&[m as u32, 3 * k as u32], F32, &a_big);
    let b_full = scene.tensor(&[2 * k as u32, n as u32], F32, &b_big);
    let c_full = scene.filled(&[m as u32, 2 * n as u32], F32, -3.0);
    let a = a_full.view(&[m as u32, k as u32], &[0, k as u32]).unwrap();
    let b = b_full.view(&[k as u32, n as u32], &[k as u32, 0]).unwrap();
    let c = c_full.view(&[m as u32, n as u32], &[0, n as u32]).unwrap();
    scene.run(kernels::matmul, &[a, b, c], &[]).unwrap();

    let av: Vec<f32> = (0..m)
        .flat_map(|i| a_big[i * 3 * k + k..i * 3 * k + 2 * k].to_vec())
        .collect();
    let bv = b_big[k * n..].to_vec();
    let product = reference_matmul(&av, &bv, m, k, n);
    let mut want = vec![-3.0; m * 2 * n];
    for i in 0..m {
        for j in 0..n {
            want[i * 2 * n + n + j] = product[i * n + j];
        }
    }
    assert_close(&scene.read(&c_full), &want, 1e-4, "strided matmul");
}

#[test]
fn matmul_runs_every_batch_slice() {
    let mut rng = Rng(23);
    let mut scene = Scene::new(4 << 20);
    let t = 128usize;
    let (batch, slice) = (4usize, t * t);
    let (av, bv) = (rng.values(batch * slice), rng.values(batch * slice));
    let shape = [batch as u32, t as u32, t as u32];
    let a = scene.tensor(&shape, F32, &av);
    let b = scene.tensor(&shape, F32, &bv);
    let c = scene.filled(&shape, F32, 0.0);
    scene.run(kernels::matmul, &[a, b, c], &[]).unwrap();
    let got = scene.read(&c);
    for s in 0..batch {
        let range = s * slice..(s + 1) * slice;
        let want = reference_matmul(&av[range.clone()], &bv[range.clone()], t, t, t);
        assert_close(&got[range], &want, 1e-4, &format!("batch slice {s}"));
    }
}

#[test]
fn matmul_hints_each_next_slice_of_its_operands() {
    let mut rng = Rng(29);
    let mut scene = Scene::new(1 << 20);
    let (batch, m, k, n) = (3usize, 8usize, 16usize, 4usize);
    let a = scene.tensor(
        &[batch as u32, m as u32, k as u32],
        F32,
        &rng.values(batch * m * k),
    );
    let b = scene.tensor(
        &[batch as u32, k as u32, n as u32],
        F32,
        &rng.values(batch * k * n),
    );
    let c = scene.filled(&[batch as u32, m as u32, n as u32], F32, 0.0);
    scene.run(kernels::matmul, &[a, b, c], &[]).unwrap();
    // Slices 1 and 2 of `a` and `b`, each hinted whole; slice 0 and `c` never.
    let (a_slice, b_slice) = ((m * k * 4) as u64, (k * n * 4) as u64);
    let (a0, b0) = (a.buffer().addr, b.buffer().addr);
    let want: Vec<(u64, usize)> = (1..batch as u64)
        .flat_map(|s| {
            [
                (a0 + s * a_slice, a_slice as usize),
                (b0 + s * b_slice, b_slice as usize),
            ]
        })
        .collect();
    assert_eq!(*scene.gm.hints.lock().unwrap(), want);
    // A single matrix has no next slice.
    let mut scene = Scene::new(1 << 16);
    let a = scene.filled(&[4, 4], F32, 1.0);
    let c = scene.filled(&[4, 4], F32, 0.0);
    scene.run(kernels::matmul, &[a, a, c], &[]).unwrap();
    assert!(scene.gm.hints.lock().unwrap().is_empty());
}

#[test]
fn matmul_batches_follow_row_major_order_across_different_leading_shapes() {
    let mut rng = Rng(29);
    let mut scene = Scene::new(1 << 20);
    let (m, k, n) = (3usize, 5usize, 4usize);
    let (av, bv) = (rng.values(4 * m * k), rng.values(4 * k * n));
    let a = scene.tensor(&[2, 2, m as u32, k as u32], F32, &av);
    let b = scene.tensor(&[4, k as u32, n as u32], F32, &bv);
    let c = scene.filled(&[4, m as u32, n as u32], F32, 0.0);
    scene.run(kernels::matmul, &[a, b, c], &[]).unwrap();
    let got = scene.read(&c);
    for s in 0..4 {
        let want = reference_matmul(
            &av[s * m * k..(s + 1) * m * k],
            &bv[s * k * n..(s + 1) * k * n],
            m,
            k,
            n,
        );
        assert_close(&got[s * m * n..(s + 1) * m * n], &want, 1e-4, "slice");
    }

    // bgemm's step: [1, 1, t, t] views of the grids into a [t, t] product, then accumulate
    // into a [1, t, t] view of C.
    let t = 32u32;
    let ts = (t * t) as usize;
    let (ga, gb) = (rng.values(4 * ts), rng.values(4 * ts));
    let grid_a = scene.tensor(&[2, 2, t, t], F32, &ga);
    let grid_b = scene.tensor(&[2, 2, t, t], F32, &gb);
    let c_full = scene.filled(&[2, t, t], F32, 0.5);
    let p = scene.filled(&[t, t], F32, 0.0);
    let a = grid_a.view(&[1, 1, t, t], &[1, 0, 0, 0]).unwrap();
    let b = grid_b.view(&[1, 1, t, t], &[1, 1, 0, 0]).unwrap();
    scene.run(kernels::matmul, &[a, b, p], &[]).unwrap();
    let c = c_full.view(&[1, t, t], &[1, 0, 0]).unwrap();
    scene.run(kernels::accumulate, &[p, c], &[]).unwrap();
    let product = reference_matmul(&ga[2 * ts..3 * ts], &gb[3 * ts..4 * ts], 32, 32, 32);
    let mut want = vec![0.5; 2 * ts];
    for (w, x) in want[ts..].iter_mut().zip(&product) {
        *w += x;
    }
    assert_close(&scene.read(&c_full), &want, 1e-4, "bgemm step");
}

// ---------------------------------------------------------------------------------------------
// Paged attention

const H: usize = 16;
const D: usize = 16;
const BS: usize = 16;

#[test]
fn pa_qk_matches_the_reference() {
    let mut rng = Rng(31);
    let mut scene = Scene::new(1 << 20);
    let qv = rng.bf16_values(2 * H * D);
    let kv = rng.bf16_values(BS * D);
    let q_all = scene.tensor(&[2, H as u32, D as u32], BF16, &qv);
    let q = q_all.view(&[1, H as u32, D as u32], &[1, 0, 0]).unwrap();
    let k = scene.tensor(&[1, BS as u32, D as u32], BF16, &kv);
    let s = scene.filled(&[H as u32, BS as u32], F32, 0.0);
    let scale = 0.3f32;
    scene
        .run(kernels::pa_qk, &[q, k, s], &[scale.to_bits() as u64])
        .unwrap();
    let mut want = vec![0.0; H * BS];
    for i in 0..H {
        for j in 0..BS {
            let dot: f64 = (0..D)
                .map(|d| qv[H * D + i * D + d] as f64 * kv[j * D + d] as f64)
                .sum();
            want[i * BS + j] = scale as f64 * dot;
        }
    }
    assert_close(&scene.read(&s), &want, 1e-3, "pa_qk");
}

#[test]
fn pa_softmax_masks_columns_and_sums_what_it_stores() {
    let mut rng = Rng(37);
    let mut scene = Scene::new(1 << 20);
    let mut sv = rng.values(H * BS);
    for x in &mut sv {
        *x *= 4.0;
    }
    let valid = 11;
    // Masked columns hold the largest scores, so a leak shows in m.
    for i in 0..H {
        for j in valid..BS {
            sv[i * BS + j] = 50.0;
        }
    }
    let s = scene.tensor(&[H as u32, BS as u32], F32, &sv);
    let p = scene.filled(&[H as u32, BS as u32], BF16, 9.0);
    let m = scene.filled(&[H as u32], F32, 0.0);
    let l = scene.filled(&[H as u32], F32, 0.0);
    scene
        .run(kernels::pa_softmax, &[s, p, m, l], &[valid as u64])
        .unwrap();

    let (mut want_p, mut want_m, mut want_l) = (vec![0.0; H * BS], vec![0.0; H], vec![0.0; H]);
    for i in 0..H {
        let row = &sv[i * BS..i * BS + valid];
        let max = row
            .iter()
            .map(|&x| x as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        want_m[i] = max;
        for j in 0..valid {
            want_p[i * BS + j] = round_bf16((sv[i * BS + j] as f64 - max).exp());
        }
        want_l[i] = want_p[i * BS..(i + 1) * BS].iter().sum();
    }
    let got_p = scene.read(&p);
    assert_close(&got_p, &want_p, 1e-3, "p");
    assert_close(&scene.read(&m), &want_m, 1e-5, "m");
    assert_close(&scene.read(&l), &want_l, 1e-3, "l");
    for i in 0..H {
        assert!(got_p[i * BS + valid..(i + 1) * BS]
            .iter()
            .all(|&x| x == 0.0));
    }
    // l is the sum of the stored p, term for term.
    let stored: Vec<f64> = (0..H)
        .map(|i| got_p[i * BS..(i + 1) * BS].iter().map(|&x| x as f64).sum())
        .collect();
    assert_close(&scene.read(&l), &stored, 1e-6, "l against stored p");
}

#[test]
fn pa_pv_matches_the_reference() {
    let mut rng = Rng(41);
    let mut scene = Scene::new(1 << 20);
    let pv: Vec<f32> = rng.bf16_values(H * BS).iter().map(|x| x.abs()).collect();
    let vv = rng.bf16_values(BS * D);
    let p = scene.tensor(&[H as u32, BS as u32], BF16, &pv);
    let v = scene.tensor(&[1, BS as u32, D as u32], BF16, &vv);
    let o = scene.filled(&[H as u32, D as u32], F32, 0.0);
    scene.run(kernels::pa_pv, &[p, v, o], &[]).unwrap();
    assert_close(
        &scene.read(&o),
        &reference_matmul(&pv, &vv, H, BS, D),
        1e-3,
        "pa_pv",
    );
}

#[test]
fn pa_update_follows_the_online_softmax_recurrence() {
    let mut rng = Rng(43);
    let mut scene = Scene::new(1 << 20);
    let (h, d) = (4usize, 3usize);
    let (hu, du) = (h as u32, d as u32);
    let mij_v = rng.values(h);
    let lij_v: Vec<f32> = rng.values(h).iter().map(|x| 1.0 + x.abs()).collect();
    let otmp_v = rng.values(h * d);
    let mi_v = rng.values(h);
    let li_v: Vec<f32> = rng.values(h).iter().map(|x| 2.0 + x.abs()).collect();
    let oi_v = rng.values(h * d);
    let mij = scene.tensor(&[hu], F32, &mij_v);
    let lij = scene.tensor(&[hu], F32, &lij_v);
    let otmp = scene.tensor(&[hu, du], F32, &otmp_v);
    let mi = scene.filled(&[hu], F32, 0.0);
    let li = scene.filled(&[hu], F32, 0.0);
    let oi = scene.filled(&[hu, du], F32, 0.0);
    let out = scene.filled(&[1, hu, du], F32, 0.0);
    let block = [mij, lij, otmp, mi, li, oi];
    let with_out = [mij, lij, otmp, mi, li, oi, out];

    // First block: a copy.
    scene.run(kernels::pa_update, &block, &[1, 0]).unwrap();
    assert_close(&scene.read(&mi), &widen(&mij_v), 0.0, "first mi");
    assert_close(&scene.read(&li), &widen(&lij_v), 0.0, "first li");
    assert_close(&scene.read(&oi), &widen(&otmp_v), 0.0, "first oi");

    // First and last: out = otmp / lij.
    scene.run(kernels::pa_update, &with_out, &[1, 1]).unwrap();
    let want: Vec<f64> = (0..h * d)
        .map(|x| otmp_v[x] as f64 / lij_v[x / d] as f64)
        .collect();
    assert_close(&scene.read(&out), &want, 1e-5, "first and last out");

    // A later block rescales both sides to the larger max; then the last one normalises.
    scene.write(&mi, &mi_v);
    scene.write(&li, &li_v);
    scene.write(&oi, &oi_v);
    let (mut want_m, mut want_l, mut want_o) = (vec![0.0; h], vec![0.0; h], vec![0.0; h * d]);
    for i in 0..h {
        let (m_run, m_blk) = (mi_v[i] as f64, mij_v[i] as f64);
        let m_new = m_run.max(m_blk);
        let (alpha, beta) = ((m_run - m_new).exp(), (m_blk - m_new).exp());
        want_m[i] = m_new;
        want_l[i] = alpha * li_v[i] as f64 + beta * lij_v[i] as f64;
        for j in 0..d {
            want_o[i * d + j] = alpha * oi_v[i * d + j] as f64 + beta * otmp_v[i * d + j] as f64;
        }
    }
    scene.run(kernels::pa_update, &block, &[0, 0]).unwrap();
    assert_close(&scene.read(&mi), &want_m, 1e-5, "middle mi");
    assert_close(&scene.read(&li), &want_l, 1e-5, "middle li");
    assert_close(&scene.read(&oi), &want_o, 1e-5, "middle oi");

    scene.write(&mi, &mi_v);
    scene.write(&li, &li_v);
    scene.write(&oi, &oi_v);
    scene.write(&out, &vec![0.0; h * d]);
    scene.run(kernels::pa_update, &with_out, &[0, 1]).unwrap();
    let normalised: Vec<f64> = (0..h * d).map(|x| want_o[x] / want_l[x / d]).collect();
    assert_close(&scene.read(&out), &normalised, 1e-5, "last out");
    assert_close(&scene.read(&li), &want_l, 1e-5, "last li");
}

/// Softmax attention of one query tile over `tokens` (keys and values `[tokens, D]`), in f64.
fn reference_attention(q: &[f32], keys: &[f32], values: &[f32], scale: f64) -> Vec<f64> {
    let tokens = keys.len() / D;
    let mut out = vec![0.0; H * D];
    for i in 0..H {
        let scores: Vec<f64> = (0..tokens)
            .map(|t| {
                let dot: f64 = (0..D)
                    .map(|d| q[i * D + d] as f64 * keys[t * D + d] as f64)
                    .sum();
                scale * dot
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for d in 0..D {
            let acc: f64 = (0..tokens)
                .map(|t| weights[t] * values[t * D + d] as f64)
                .sum();
            out[i * D + d] = acc / total;
        }
    }
    out
}

#[test]
fn three_blocks_of_online_softmax_match_direct_attention() {
    let mut rng = Rng(47);
    let mut scene = Scene::new(1 << 20);
    let (hu, du, bsu) = (H as u32, D as u32, BS as u32);
    let blocks = 3usize;
    let last_valid = 9usize;
    // Physical blocks in the cache, and the logical-to-physical table.
    let table = [2u32, 0, 1];
    let mut k_cache = rng.bf16_values(blocks * BS * D);
    let mut v_cache = rng.bf16_values(blocks * BS * D);
    // The last block's masked tokens would dominate if they leaked.
    let last = table[blocks - 1] as usize;
    for t in last_valid..BS {
        for d in 0..D {
            k_cache[(last * BS + t) * D + d] = 4.0;
            v_cache[(last * BS + t) * D + d] = 100.0;
        }
    }
    let qv = rng.bf16_values(2 * H * D);
    let query = scene.tensor(&[2, hu, du], BF16, &qv);
    let key_cache = scene.tensor(&[blocks as u32, bsu, du], BF16, &k_cache);
    let value_cache = scene.tensor(&[blocks as u32, bsu, du], BF16, &v_cache);
    let out_all = scene.filled(&[2, hu, du], F32, -1.0);
    let qi = query.view(&[1, hu, du], &[1, 0, 0]).unwrap();
    let out = out_all.view(&[1, hu, du], &[1, 0, 0]).unwrap();

    let s = scene.filled(&[hu, bsu], F32, 0.0);
    let p = scene.filled(&[hu, bsu], BF16, 0.0);
    let (mij, lij) = (scene.filled(&[hu], F32, 0.0), scene.filled(&[hu], F32, 0.0));
    let otmp = scene.filled(&[hu, du], F32, 0.0);
    let (mi, li) = (scene.filled(&[hu], F32, 0.0), scene.filled(&[hu], F32, 0.0));
    let oi = scene.filled(&[hu, du], F32, 0.0);
    let scale = 1.0 / (D as f32).sqrt();

    for (j, &block) in table.iter().enumerate() {
        let kj = key_cache.view(&[1, bsu, du], &[block, 0, 0]).unwrap();
        let vj = value_cache.view(&[1, bsu, du], &[block, 0, 0]).unwrap();
        let (first, is_last) = (j == 0, j + 1 == blocks);
        let valid = if is_last { last_valid } else { BS };
        scene
            .run(kernels::pa_qk, &[qi, kj, s], &[scale.to_bits() as u64])
            .unwrap();
        scene
            .run(kernels::pa_softmax, &[s, p, mij, lij], &[valid as u64])
            .unwrap();
        scene.run(kernels::pa_pv, &[p, vj, otmp], &[]).unwrap();
        let mut update = vec![mij, lij, otmp, mi, li, oi];
        if is_last {
            update.push(out);
        }
        scene
            .run(kernels::pa_update, &update, &[first as u64, is_last as u64])
            .unwrap();
    }

    // The logical token sequence: blocks in table order, the last one cut at `last_valid`.
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for (j, &block) in table.iter().enumerate() {
        let valid = if j + 1 == blocks { last_valid } else { BS };
        let rows = block as usize * BS * D..(block as usize * BS + valid) * D;
        keys.extend_from_slice(&k_cache[rows.clone()]);
        values.extend_from_slice(&v_cache[rows]);
    }
    let want = reference_attention(&qv[H * D..], &keys, &values, scale as f64);
    assert_close(&scene.read(&out), &want, 1e-3, "attention");
    // Batch element 0's output is untouched.
    let untouched = out_all.view(&[1, hu, du], &[0, 0, 0]).unwrap();
    assert!(scene.read(&untouched).iter().all(|&x| x == -1.0));
}

/// A dense row-major int32 tensor holding `values`.
fn i32_tensor(scene: &mut Scene, shapes: &[u32], values: &[i32]) -> TaskTensor {
    let buffer = scene.reserve(values.len() as u64 * 4);
    for (i, v) in values.iter().enumerate() {
        scene
            .gm
            .write(buffer.addr + i as u64 * 4, &v.to_le_bytes())
            .unwrap();
    }
    TaskTensor::new(
        buffer,
        0,
        shapes,
        &row_major(shapes),
        DataType::Int32,
        AddressSpace::Device,
    )
    .unwrap()
}

#[test]
fn the_batched_kernels_match_direct_attention_per_sequence() {
    // Sequences 1 and 2 of a batch of 3 (chunk start 1, count 2), contexts 20 and 9: two block
    // indices, the second past sequence 2's context, so its block is masked out entirely.
    let mut rng = Rng(48);
    let mut scene = Scene::new(1 << 20);
    let (hu, du, bsu) = (H as u32, D as u32, BS as u32);
    let (batch, block_num, blocks) = (3usize, 4usize, 6usize);
    let lens = [5i32, 20, 9];
    let table: Vec<i32> = vec![0, 0, 0, 0, 4, 1, 0, 0, 3, 5, 0, 0];
    let k_cache = rng.bf16_values(blocks * BS * D);
    let v_cache = rng.bf16_values(blocks * BS * D);
    let qv = rng.bf16_values(batch * H * D);
    let query = scene.tensor(&[batch as u32, hu, du], BF16, &qv);
    let key_cache = scene.tensor(&[blocks as u32, bsu, 1, du], BF16, &k_cache);
    let value_cache = scene.tensor(&[blocks as u32, bsu, 1, du], BF16, &v_cache);
    let bt = i32_tensor(&mut scene, &[batch as u32, block_num as u32], &table);
    let cl = i32_tensor(&mut scene, &[batch as u32], &lens);
    let out = scene.filled(&[batch as u32, hu, du], F32, -1.0);
    let rows = 2 * hu;
    let sij = scene.filled(&[rows, bsu], F32, 0.0);
    let pij = scene.filled(&[rows, bsu], BF16, 0.0);
    let (mij, lij) = (
        scene.filled(&[rows], F32, 0.0),
        scene.filled(&[rows], F32, 0.0),
    );
    let oi_new = scene.filled(&[rows, du], F32, 0.0);
    let (mi, li) = (
        scene.filled(&[rows], F32, 0.0),
        scene.filled(&[rows], F32, 0.0),
    );
    let oi = scene.filled(&[rows, du], F32, 0.0);
    let scale = 1.0 / (D as f32).sqrt();
    let (count, start, heads) = (2u64, 1u64, H as u64);
    for bn in 0..2u64 {
        let qk = [count, bn, 0, block_num as u64, heads, start];
        scene
            .run(kernels::pa_qk_batch, &[query, key_cache, bt, sij], &qk)
            .unwrap();
        let sf = [scale.to_bits() as u64, count, bn, start];
        scene
            .run(kernels::pa_softmax_batch, &[sij, cl, pij, mij, lij], &sf)
            .unwrap();
        let pv = [count, bn, block_num as u64, start];
        scene
            .run(kernels::pa_pv_batch, &[pij, value_cache, bt, oi_new], &pv)
            .unwrap();
        let up = [(bn == 0) as u64, (bn == 1) as u64, count, 0, heads, start];
        let args = [mij, lij, oi_new, mi, li, oi, out];
        scene.run(kernels::pa_update_batch, &args, &up).unwrap();
    }
    // Sequence 2's masked block: m = -1e30, l = 0, p = 0.
    let m_last = scene.read(&mij);
    assert!(m_last[H..].iter().all(|&m| m == -1e30), "{m_last:?}");
    assert!(scene.read(&lij)[H..].iter().all(|&l| l == 0.0));
    assert!(scene.read(&pij)[H * BS..].iter().all(|&p| p == 0.0));
    let got = scene.read(&out);
    for seq in 1..batch {
        let ctx = lens[seq] as usize;
        let mut keys = Vec::new();
        let mut values = Vec::new();
        for t in 0..ctx {
            let block = table[seq * block_num + t / BS] as usize;
            let row = (block * BS + t % BS) * D..(block * BS + t % BS + 1) * D;
            keys.extend_from_slice(&k_cache[row.clone()]);
            values.extend_from_slice(&v_cache[row]);
        }
        let want = reference_attention(
            &qv[seq * H * D..(seq + 1) * H * D],
            &keys,
            &values,
            scale as f64,
        );
        let rows = &got[seq * H * D..(seq + 1) * H * D];
        assert_close(rows, &want, 1e-3, &format!("sequence {seq}"));
    }
    // Sequence 0 is outside the chunk: untouched.
    assert!(got[..H * D].iter().all(|&x| x == -1.0));
}

// ---------------------------------------------------------------------------------------------
// Refusals

#[test]
fn wrong_tensor_counts_are_refused() {
    let mut scene = Scene::new(1 << 16);
    let t = scene.filled(&[4, 4], F32, 1.0);
    let s = 1.0f32.to_bits() as u64;
    assert_eq!(scene.run(kernels::add, &[t, t], &[]), bad(2));
    assert_eq!(scene.run(kernels::add, &[t, t, t, t], &[]), bad(3));
    assert_eq!(scene.run(kernels::add_scalar, &[t], &[s]), bad(1));
    assert_eq!(scene.run(kernels::matmul, &[], &[]), bad(0));
    assert_eq!(scene.run(kernels::accumulate, &[t, t, t], &[]), bad(2));
    assert_eq!(scene.run(kernels::pa_qk, &[t, t], &[s]), bad(2));
    assert_eq!(scene.run(kernels::pa_softmax, &[t, t, t], &[1]), bad(3));
    assert_eq!(scene.run(kernels::pa_pv, &[t, t, t, t], &[]), bad(3));
    assert_eq!(scene.run(kernels::pa_update, &[t; 5], &[0, 0]), bad(5));
}

#[test]
fn mismatched_sizes_and_dtypes_are_refused() {
    let mut scene = Scene::new(1 << 20);
    let a = scene.filled(&[4, 8], F32, 1.0);
    let short = scene.filled(&[4, 7], F32, 1.0);
    let int = {
        let buffer = scene.reserve(4 * 8 * 4);
        TaskTensor::new(
            buffer,
            0,
            &[4, 8],
            &[8, 1],
            DataType::Int32,
            AddressSpace::Device,
        )
        .unwrap()
    };
    assert_eq!(scene.run(kernels::add, &[a, short, a], &[]), bad(1));
    assert_eq!(scene.run(kernels::mul, &[a, a, short], &[]), bad(2));
    assert_eq!(scene.run(kernels::add, &[a, int, a], &[]), bad(1));
    assert_eq!(scene.run(kernels::add_scalar, &[int, a], &[0]), bad(0));
    // A tensor whose bytes were never a valid geometry (rank 0).
    let zeroed: TaskTensor = bytemuck::Zeroable::zeroed();
    assert_eq!(scene.run(kernels::add, &[a, a, zeroed], &[]), bad(2));
    assert_eq!(scene.run(kernels::pa_pv, &[zeroed, a, a], &[]), bad(0));

    // matmul: inner extents, output shape, batch counts, rank.
    let m = |scene: &mut Scene, shapes: &[u32]| scene.filled(shapes, F32, 0.5);
    let (a45, b56, c46) = (
        m(&mut scene, &[4, 5]),
        m(&mut scene, &[5, 6]),
        m(&mut scene, &[4, 6]),
    );
    let b66 = m(&mut scene, &[6, 6]);
    let c47 = m(&mut scene, &[4, 7]);
    let b256 = m(&mut scene, &[2, 5, 6]);
    let vec5 = m(&mut scene, &[5]);
    assert_eq!(scene.run(kernels::matmul, &[a45, b56, c46], &[]), Ok(()));
    assert_eq!(scene.run(kernels::matmul, &[a45, b66, c46], &[]), bad(1));
    assert_eq!(scene.run(kernels::matmul, &[a45, b56, c47], &[]), bad(2));
    assert_eq!(scene.run(kernels::matmul, &[a45, b256, c46], &[]), bad(1));
    assert_eq!(scene.run(kernels::matmul, &[vec5, b56, c46], &[]), bad(0));

    // Attention: inner extents and row counts.
    let q = m(&mut scene, &[H as u32, D as u32]);
    let k_bad = m(&mut scene, &[BS as u32, D as u32 + 1]);
    let s = m(&mut scene, &[H as u32, BS as u32]);
    let rows = m(&mut scene, &[H as u32]);
    let rows_short = m(&mut scene, &[H as u32 - 1]);
    assert_eq!(scene.run(kernels::pa_qk, &[q, k_bad, s], &[0]), bad(1));
    assert_eq!(
        scene.run(kernels::pa_softmax, &[s, s, rows_short, rows], &[1]),
        bad(2)
    );
    assert_eq!(scene.run(kernels::pa_pv, &[s, k_bad, s], &[]), bad(2));
    let update = [rows, rows, q, rows, rows_short, q];
    assert_eq!(scene.run(kernels::pa_update, &update, &[0, 0]), bad(4));
}

#[test]
fn bad_scalars_are_refused_by_position() {
    let mut scene = Scene::new(1 << 16);
    let s = scene.filled(&[H as u32, BS as u32], F32, 0.0);
    let p = scene.filled(&[H as u32, BS as u32], BF16, 0.0);
    let row = scene.filled(&[H as u32], F32, 0.0);
    let o = scene.filled(&[H as u32, D as u32], F32, 0.0);
    // Scalars are numbered after the tensors.
    assert_eq!(scene.run(kernels::add_scalar, &[s, s], &[]), bad(2));
    assert_eq!(scene.run(kernels::pa_qk, &[s, s, s], &[]), bad(3));
    let softmax = [s, p, row, row];
    assert_eq!(scene.run(kernels::pa_softmax, &softmax, &[]), bad(4));
    assert_eq!(scene.run(kernels::pa_softmax, &softmax, &[0]), bad(4));
    assert_eq!(
        scene.run(kernels::pa_softmax, &softmax, &[BS as u64 + 1]),
        bad(4)
    );
    assert_eq!(
        scene.run(kernels::pa_softmax, &softmax, &[BS as u64]),
        Ok(())
    );

    let update = [row, row, o, row, row, o];
    let with_out = [row, row, o, row, row, o, o];
    assert_eq!(scene.run(kernels::pa_update, &update, &[1]), bad(7));
    assert_eq!(scene.run(kernels::pa_update, &update, &[2, 0]), bad(6));
    assert_eq!(scene.run(kernels::pa_update, &update, &[0, 2]), bad(7));
    // The output tensor is required exactly when the block is the last.
    assert_eq!(scene.run(kernels::pa_update, &update, &[0, 1]), bad(6));
    assert_eq!(scene.run(kernels::pa_update, &with_out, &[0, 0]), bad(6));
    assert_eq!(scene.run(kernels::pa_update, &with_out, &[0, 1]), Ok(()));
}

#[test]
fn tiles_past_the_limits_are_too_large() {
    let mut scene = Scene::new(1 << 20);
    let big = MAX_TILE as u32 * 2;
    let a = scene.filled(&[big, 8], F32, 0.0);
    let b = scene.filled(&[8, 8], F32, 0.0);
    let c = scene.filled(&[big, 8], F32, 0.0);
    assert_eq!(
        scene.run(kernels::matmul, &[a, b, c], &[]),
        Err(KernelFailure::TooLarge {
            elems: big as u64,
            limit: MAX_TILE as u64
        })
    );
    // Operands that fit the tile limit but not the local buffer.
    let sq = scene.filled(&[8, 8], F32, 0.0);
    assert_eq!(
        scene.run_with(kernels::matmul, &[sq, sq, sq], &[], 100),
        Err(KernelFailure::TooLarge {
            elems: 192,
            limit: 100
        })
    );
    let s = scene.filled(&[H as u32, BS as u32], F32, 0.0);
    let row = scene.filled(&[H as u32], F32, 0.0);
    assert_eq!(
        scene.run_with(kernels::pa_softmax, &[s, s, row, row], &[1], 256),
        Err(KernelFailure::TooLarge {
            elems: 288,
            limit: 256
        })
    );
    // A vector kernel with no room for one element of each input.
    assert_eq!(
        scene.run_with(kernels::add, &[b, b, b], &[], 1),
        Err(KernelFailure::TooLarge {
            elems: 64,
            limit: 1
        })
    );
}

#[test]
fn tensors_outside_gm_report_the_fault() {
    let mut scene = Scene::new(1 << 16);
    let a = scene.filled(&[4, 8], F32, 1.0);
    let b = scene.filled(&[8, 8], F32, 1.0);
    let outside = |addr: u64| {
        TaskTensor::new(
            BufferHandle {
                addr,
                size: 4 * 8 * 4,
            },
            0,
            &[4, 8],
            &[8, 1],
            F32,
            AddressSpace::Device,
        )
        .unwrap()
    };
    let past = BASE + (1 << 16) + 4096;
    let before = BASE - 1024;
    // A dense tensor moves in one access, so the fault names all of it: 32 f32.
    assert_eq!(
        scene.run(kernels::add, &[a, a, outside(past)], &[]),
        Err(KernelFailure::Memory(GmFault {
            addr: past,
            len: 128,
            kind: simpler_core::gm::GmFaultKind::Outside
        }))
    );
    assert_eq!(
        scene.run(kernels::matmul, &[outside(before), b, a], &[]),
        Err(KernelFailure::Memory(GmFault {
            addr: before,
            len: 128,
            kind: simpler_core::gm::GmFaultKind::Outside
        }))
    );
    // A tensor straddling the end of GM faults as a whole, before any of its bytes move.
    let straddle = outside(BASE + (1 << 16) - 64);
    assert_eq!(
        scene.run(kernels::accumulate, &[a, straddle], &[]),
        Err(KernelFailure::Memory(GmFault {
            addr: BASE + (1 << 16) - 64,
            len: 128,
            kind: simpler_core::gm::GmFaultKind::Outside
        }))
    );
}

// ---------------------------------------------------------------------------------------------
// The table and the trivial kernels

#[test]
fn the_table_names_every_kernel_once() {
    let names: Vec<&str> = kernels::ALL.iter().map(|&(name, _)| name).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate names in {names:?}");
    for want in [
        "add",
        "mul",
        "add_scalar",
        "matmul",
        "accumulate",
        "pa_qk",
        "pa_softmax",
        "pa_pv",
        "pa_update",
        "fail",
        "empty",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let scene = Scene::new(64);
    let find = |name: &str| kernels::ALL.iter().find(|e| e.0 == name).unwrap().1;
    assert_eq!(
        scene.run(find("fail"), &[], &[]),
        Err(KernelFailure::Code(FAIL_CODE))
    );
    assert_eq!(scene.run(find("empty"), &[], &[]), Ok(()));
}
