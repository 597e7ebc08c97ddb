//! The golden: the op vocabulary evaluated in f64 on the host (`Gold`, over windows `Gv` of
//! its buffers), and the evaluation of the whole step over the filled inputs (`evaluate`).
//!
//! Its own file because it is the scene's independent reference: no kernel and no runtime run
//! here, only plain loops over the same op sequence the device runs.

use super::inputs::ENTRIES;
use super::ops::{Math, Ops, R};
use super::shapes::*;
use super::step::step;
use simpler_aicpu::{GraphBody, RtError};
use simpler_core::{ArgDirection, TensorArgType};

/// A golden tensor: a dense `[n1, rows, cols]` window of one buffer (`n1` = 1 except for row
/// views).
#[derive(Clone, Copy, Debug)]
pub(super) struct Gv {
    buf: usize,
    off: usize,
    n0: usize,
    n1: usize,
    rows: usize,
    cols: usize,
}

impl Gv {
    fn len(&self) -> usize {
        self.rows * self.cols
    }
}

/// The golden: every op evaluated in f64 on the host. Buffers `0..keep` are the entry
/// tensors; a body's intermediates are dropped when it ends.
pub(super) struct Gold {
    bufs: Vec<Vec<f64>>,
    keep: usize,
}

impl Gold {
    fn matrix(&mut self, t: Gv) -> R<&[f64]> {
        if t.n0 != 1 || t.n1 != 1 {
            return Err(self.fatal(BAD_SHAPE));
        }
        Ok(&self.bufs[t.buf][t.off..t.off + t.len()])
    }

    fn fresh(&mut self, rows: usize, cols: usize, data: Vec<f64>) -> Gv {
        self.bufs.push(data);
        Gv {
            buf: self.bufs.len() - 1,
            off: 0,
            n0: 1,
            n1: 1,
            rows,
            cols,
        }
    }

    fn store(&mut self, c: Gv, data: &[f64]) -> R<()> {
        if c.n0 != 1 || c.n1 != 1 || c.len() != data.len() {
            return Err(self.fatal(BAD_SHAPE));
        }
        self.bufs[c.buf][c.off..c.off + c.len()].copy_from_slice(data);
        Ok(())
    }

    fn product(&mut self, a: Gv, b: Gv) -> R<Vec<f64>> {
        if a.cols != b.rows {
            return Err(self.fatal(BAD_SHAPE));
        }
        let (m, k, n) = (a.rows, a.cols, b.cols);
        let x = self.matrix(a)?.to_vec();
        let y = self.matrix(b)?;
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for p in 0..k {
                let v = x[i * k + p];
                for j in 0..n {
                    c[i * n + j] += v * y[p * n + j];
                }
            }
        }
        Ok(c)
    }

    fn zip(&mut self, a: Gv, b: Gv, f: impl Fn(f64, f64) -> f64) -> R<Vec<f64>> {
        if a.len() != b.len() {
            return Err(self.fatal(BAD_SHAPE));
        }
        let x = self.matrix(a)?.to_vec();
        let y = self.matrix(b)?;
        Ok(x.iter().zip(y).map(|(&u, &v)| f(u, v)).collect())
    }

    fn shift(&mut self, a: Gv, s: f32) -> R<Vec<f64>> {
        Ok(self.matrix(a)?.iter().map(|&u| u + s as f64).collect())
    }
}

impl Ops for Gold {
    type T = Gv;
    type Arg = (Gv, TensorArgType);

    fn arg(t: Gv, tag: TensorArgType) -> (Gv, TensorArgType) {
        (t, tag)
    }

    fn fatal(&mut self, code: u32) -> RtError {
        RtError::Fatal(code)
    }

    fn view(&mut self, t: Gv, i: u32, j: Option<u32>) -> R<Gv> {
        let (i, n1) = (i as usize, t.n1);
        if i >= t.n0 || j.is_some_and(|j| j as usize >= n1) {
            return Err(self.fatal(BAD_VIEW));
        }
        let row = t.off + i * n1 * t.len();
        Ok(match j {
            Some(j) => Gv {
                off: row + j as usize * t.len(),
                n0: 1,
                n1: 1,
                ..t
            },
            None => Gv {
                off: row,
                n0: 1,
                ..t
            },
        })
    }

    fn slice(&mut self, t: Gv, k: u32) -> R<Gv> {
        if t.n0 != 1 || k as usize >= t.n1 {
            return Err(self.fatal(BAD_VIEW));
        }
        Ok(Gv {
            off: t.off + k as usize * t.len(),
            n1: 1,
            ..t
        })
    }

    fn mm(&mut self, a: Gv, b: Gv) -> R<Gv> {
        let c = self.product(a, b)?;
        Ok(self.fresh(a.rows, b.cols, c))
    }

    fn mm_to(&mut self, a: Gv, b: Gv, c: Gv) -> R<()> {
        let v = self.product(a, b)?;
        self.store(c, &v)
    }

    fn add(&mut self, a: Gv, b: Gv) -> R<Gv> {
        let v = self.zip(a, b, |x, y| x + y)?;
        Ok(self.fresh(a.rows, a.cols, v))
    }

    fn add_to(&mut self, a: Gv, b: Gv, c: Gv) -> R<()> {
        let v = self.zip(a, b, |x, y| x + y)?;
        self.store(c, &v)
    }

    fn mul(&mut self, a: Gv, b: Gv) -> R<Gv> {
        let v = self.zip(a, b, |x, y| x * y)?;
        Ok(self.fresh(a.rows, a.cols, v))
    }

    fn mul_to(&mut self, a: Gv, b: Gv, c: Gv) -> R<()> {
        let v = self.zip(a, b, |x, y| x * y)?;
        self.store(c, &v)
    }

    fn adds(&mut self, a: Gv, s: f32) -> R<Gv> {
        let v = self.shift(a, s)?;
        Ok(self.fresh(a.rows, a.cols, v))
    }

    fn adds_to(&mut self, a: Gv, s: f32, c: Gv) -> R<()> {
        let v = self.shift(a, s)?;
        self.store(c, &v)
    }

    fn acc(&mut self, p: Gv, c: Gv) -> R<()> {
        let v = self.zip(p, c, |x, y| x + y)?;
        self.store(c, &v)
    }

    fn alloc(&mut self, rows: u32, cols: u32, out: &mut [Gv]) -> R<()> {
        let (r, c) = (rows as usize, cols as usize);
        for t in out {
            *t = self.fresh(r, c, vec![0.0; r * c]);
        }
        Ok(())
    }

    fn graph(
        &mut self,
        _key: u64,
        _body: GraphBody,
        math: Math<Self>,
        boundary: &mut [(Gv, TensorArgType)],
        scalars: &[f32],
    ) -> R<()> {
        let b: Vec<Gv> = boundary.iter().map(|&(t, _)| t).collect();
        let r = math(self, &b, scalars);
        self.bufs.truncate(self.keep);
        r
    }
}

/// The golden of every OUT entry tensor, by its entry index, for the entry data `data` (in
/// the order of [`ENTRIES`]).
pub(super) fn evaluate(data: &[Vec<f32>]) -> Vec<(usize, Vec<f64>)> {
    let mut gold = Gold {
        bufs: data
            .iter()
            .map(|d| d.iter().map(|&x| x as f64).collect())
            .collect(),
        keep: ENTRIES.len(),
    };
    let views: Vec<Gv> = ENTRIES
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let [n0, n1, rows, cols] = spec.shape.map(|x| x as usize);
            Gv {
                buf: i,
                off: 0,
                n0,
                n1,
                rows,
                cols,
            }
        })
        .collect();
    step(&mut gold, &views).expect("the golden evaluates");
    let outputs: Vec<usize> = (0..ENTRIES.len())
        .filter(|&i| ENTRIES[i].dir == ArgDirection::Out)
        .collect();
    outputs
        .iter()
        .map(|&i| (i, std::mem::take(&mut gold.bufs[i])))
        .collect()
}
