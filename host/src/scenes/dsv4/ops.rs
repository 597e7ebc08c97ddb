//! The op vocabulary the orchestration and the bodies are written in (`Ops`), and its device
//! side (`Dev`): every op a task of the runtime, every Graph a `submit_graph`.
//!
//! Its own file because the vocabulary is what lets one orchestration serve both the device
//! and the golden (`golden` implements it again in f64 on the host); this file is the half that
//! runs on the device, and it must not allocate on the host heap.

use super::shapes::*;
use simpler_aicpu::{GraphBody, Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{DataType, TaskTensor, TensorArgType};

/// What every op returns: a run-ending `RtError` on failure.
pub(super) type R<V> = Result<V, RtError>;

/// A body's arithmetic over its boundary tensors and scalars.
pub(super) type Math<O> = fn(&mut O, &[<O as Ops>::T], &[f32]) -> R<()>;

/// What the orchestration and the bodies are written in: tasks on the device, f64 for the
/// golden. Tensors are matrices (`[.., rows, cols]` with every leading extent 1) except the
/// row views of [`Ops::view`] with `j = None`, which only [`Ops::slice`] reads.
pub(super) trait Ops: Sized {
    /// A tensor handle: a runtime `TaskTensor` on the device, a window of a host buffer for
    /// the golden.
    type T: Copy;
    /// A tensor with its tag, as a Graph boundary holds it.
    type Arg: Copy;
    /// `t` tagged `tag`.
    fn arg(t: Self::T, tag: TensorArgType) -> Self::Arg;
    /// Ends the run with `code`.
    fn fatal(&mut self, code: u32) -> RtError;
    /// The `[1, 1, rows, cols]` view `(i, j)` of a rank-4 entry, or with `j = None` its
    /// `[1, n1, rows, cols]` row `i`.
    fn view(&mut self, t: Self::T, i: u32, j: Option<u32>) -> R<Self::T>;
    /// Slice `k` (`[1, 1, rows, cols]`) of a row view.
    fn slice(&mut self, t: Self::T, k: u32) -> R<Self::T>;
    /// `a · b` into a new tensor.
    fn mm(&mut self, a: Self::T, b: Self::T) -> R<Self::T>;
    /// `c = a · b` into an existing tensor.
    fn mm_to(&mut self, a: Self::T, b: Self::T, c: Self::T) -> R<()>;
    /// `a + b` (elementwise) into a new tensor.
    fn add(&mut self, a: Self::T, b: Self::T) -> R<Self::T>;
    /// `c = a + b` into an existing tensor.
    fn add_to(&mut self, a: Self::T, b: Self::T, c: Self::T) -> R<()>;
    /// `a * b` (elementwise) into a new tensor.
    fn mul(&mut self, a: Self::T, b: Self::T) -> R<Self::T>;
    /// `c = a * b` into an existing tensor.
    fn mul_to(&mut self, a: Self::T, b: Self::T, c: Self::T) -> R<()>;
    /// `a + s` into a new tensor.
    fn adds(&mut self, a: Self::T, s: f32) -> R<Self::T>;
    /// `c = a + s` into an existing tensor.
    fn adds_to(&mut self, a: Self::T, s: f32, c: Self::T) -> R<()>;
    /// `c += p` (`c` INOUT).
    fn acc(&mut self, p: Self::T, c: Self::T) -> R<()>;
    /// `out.len()` new `[rows, cols]` tensors from one allocation task, into `out` (a
    /// caller's array: the device side must not allocate on the host heap).
    fn alloc(&mut self, rows: u32, cols: u32, out: &mut [Self::T]) -> R<()>;
    /// A Graph: `body` (whose arithmetic is `math`) over `boundary` and `scalars`.
    fn graph(
        &mut self,
        key: u64,
        body: GraphBody,
        math: Math<Self>,
        boundary: &mut [Self::Arg],
        scalars: &[f32],
    ) -> R<()>;
}

/// The device: every op is a task of the runtime `rt`.
pub(super) struct Dev<'x, 'r, 'a> {
    /// The run's runtime (of the step, or of a body's run).
    pub(super) rt: &'x mut Rt<'r, 'a>,
}

fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

/// The last two extents.
fn matrix(t: &TaskTensor) -> (u32, u32) {
    match *t.shapes() {
        [.., r, c] => (r, c),
        [c] => (1, c),
        [] => (0, 0),
    }
}

impl Dev<'_, '_, '_> {
    fn new_tensor(&mut self, rows: u32, cols: u32) -> R<TaskTensor> {
        TaskTensor::create_info(&[rows, cols], DataType::Float32)
            .map_err(|_| self.rt.report_fatal(BAD_SHAPE))
    }

    fn vector(&mut self, kernel: u32, args: &mut [TaskArg], scalars: &[u64]) -> R<()> {
        self.rt.submit_aiv(kernel, args, scalars).map(|_| ())
    }

    /// An elementwise op of `inputs` into a new tensor shaped like the first.
    fn fresh(&mut self, kernel: u32, inputs: &[TaskTensor], s: &[u64]) -> R<TaskTensor> {
        let (r, c) = matrix(&inputs[0]);
        let out = self.new_tensor(r, c)?;
        let mut args = [arg(out, TensorArgType::Output); 3];
        for (a, &t) in args.iter_mut().zip(inputs) {
            *a = arg(t, TensorArgType::Input);
        }
        let n = inputs.len() + 1;
        args[n - 1] = arg(out, TensorArgType::Output);
        self.vector(kernel, &mut args[..n], s)?;
        Ok(args[n - 1].tensor)
    }
}

fn bits(s: f32) -> u64 {
    s.to_bits() as u64
}

impl Ops for Dev<'_, '_, '_> {
    type T = TaskTensor;
    type Arg = TaskArg;

    fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
        TaskArg { tensor, tag }
    }

    fn fatal(&mut self, code: u32) -> RtError {
        self.rt.report_fatal(code)
    }

    // Inlined into the step, where a boundary takes thousands of views per bind: the call's
    // prologue and the move of its 128-byte result cost as much as the view.
    #[inline(always)]
    fn view(&mut self, t: TaskTensor, i: u32, j: Option<u32>) -> R<TaskTensor> {
        let &[_, n1, r, c] = t.shapes() else {
            return Err(self.fatal(BAD_VIEW));
        };
        let fatal = |_| self.fatal(BAD_VIEW);
        match j {
            Some(j) => t.view_or_else(&[1, 1, r, c], &[i, j, 0, 0], fatal),
            None => t.view_or_else(&[1, n1, r, c], &[i, 0, 0, 0], fatal),
        }
    }

    fn slice(&mut self, t: TaskTensor, k: u32) -> R<TaskTensor> {
        let &[1, _, r, c] = t.shapes() else {
            return Err(self.fatal(BAD_VIEW));
        };
        t.view_or_else(&[1, 1, r, c], &[0, k, 0, 0], |_| self.fatal(BAD_VIEW))
    }

    fn mm(&mut self, a: TaskTensor, b: TaskTensor) -> R<TaskTensor> {
        let (m, _) = matrix(&a);
        let (_, n) = matrix(&b);
        let out = self.new_tensor(m, n)?;
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(out, TensorArgType::Output),
        ];
        self.rt.submit_aic(MATMUL, &mut args, &[])?;
        Ok(args[2].tensor)
    }

    fn mm_to(&mut self, a: TaskTensor, b: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.rt.submit_aic(MATMUL, &mut args, &[]).map(|_| ())
    }

    fn add(&mut self, a: TaskTensor, b: TaskTensor) -> R<TaskTensor> {
        self.fresh(ADD, &[a, b], &[])
    }

    fn add_to(&mut self, a: TaskTensor, b: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.vector(ADD, &mut args, &[])
    }

    fn mul(&mut self, a: TaskTensor, b: TaskTensor) -> R<TaskTensor> {
        self.fresh(MUL, &[a, b], &[])
    }

    fn mul_to(&mut self, a: TaskTensor, b: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.vector(MUL, &mut args, &[])
    }

    fn adds(&mut self, a: TaskTensor, s: f32) -> R<TaskTensor> {
        self.fresh(ADD_SCALAR, &[a], &[bits(s)])
    }

    fn adds_to(&mut self, a: TaskTensor, s: f32, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.vector(ADD_SCALAR, &mut args, &[bits(s)])
    }

    fn acc(&mut self, p: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [arg(p, TensorArgType::Input), arg(c, TensorArgType::InOut)];
        self.vector(ACCUMULATE, &mut args, &[])
    }

    fn alloc(&mut self, rows: u32, cols: u32, out: &mut [TaskTensor]) -> R<()> {
        let t = self.new_tensor(rows, cols)?;
        let mut args = [arg(t, TensorArgType::Output); MAX_ALLOC];
        let Some(args) = args.get_mut(..out.len()) else {
            return Err(self.fatal(BAD_SHAPE));
        };
        self.rt.alloc_tensors(args)?;
        for (o, a) in out.iter_mut().zip(args.iter()) {
            *o = a.tensor;
        }
        Ok(())
    }

    fn graph(
        &mut self,
        key: u64,
        body: GraphBody,
        _math: Math<Self>,
        boundary: &mut [TaskArg],
        scalars: &[f32],
    ) -> R<()> {
        let (n, m) = (boundary.len(), scalars.len());
        if n > MAX_BOUNDARY || m > MAX_SCALARS {
            return Err(self.fatal(BAD_BOUNDARY));
        }
        let mut words = [0; MAX_SCALARS];
        for (w, &s) in words.iter_mut().zip(scalars) {
            *w = bits(s);
        }
        self.rt
            .submit_graph(key, body, boundary, &words[..m])
            .map(|_| ())
    }
}
