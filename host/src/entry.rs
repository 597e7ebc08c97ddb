//! What a run takes as entry tensors: host bytes ([`HostTensor`]) staged per run, or views of
//! persistent device memory ([`DeviceTensor`]), as [`ChipArg`]s.

use simpler_core::{ArgDirection, DataType};

/// A host tensor passed to a run: its bytes, shape and element type, and how the callable
/// uses it (IN: copied to the device; OUT: copied back; INOUT: both).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Row-major bytes.
    pub data: Vec<u8>,
    /// Shape.
    pub shapes: Vec<u32>,
    /// Element type.
    pub dtype: DataType,
    /// How the callable uses it.
    pub dir: ArgDirection,
}

impl HostTensor {
    /// An f32 tensor of `shapes` holding `values`.
    pub fn f32(values: &[f32], shapes: &[u32], dir: ArgDirection) -> Self {
        Self {
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            shapes: shapes.to_vec(),
            dtype: DataType::Float32,
            dir,
        }
    }

    /// The data read as f32 values.
    pub fn to_f32(&self) -> Vec<f32> {
        self.data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    /// Readies this tensor, which a run of `template`'s round wrote back into, for the next
    /// round, in place: the data of an OUT or INOUT tensor becomes `template`'s again (copied
    /// into the existing buffer, so it allocates nothing when the sizes match); an IN tensor
    /// is left as it is, since a run never writes it back. Shape, element type and direction
    /// are taken from `template`.
    ///
    /// A round loop clones its template tensors once and calls this between rounds, instead
    /// of cloning every round (which allocates and, for large tensors, faults in fresh pages
    /// that the OS clears first).
    pub fn reset_outputs_from(&mut self, template: &HostTensor) {
        self.shapes.clone_from(&template.shapes);
        self.dtype = template.dtype;
        self.dir = template.dir;
        if template.dir != ArgDirection::In || self.data.len() != template.data.len() {
            self.data.clone_from(&template.data);
        }
    }
}

/// An entry tensor that already lives in persistent device memory ([`ChipWorker::malloc`](crate::ChipWorker::malloc)):
/// the callable uses it in place, nothing is staged or copied back.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceTensor {
    /// Device address of the view's first element.
    pub addr: u64,
    /// Shape.
    pub shapes: Vec<u32>,
    /// Stride per dimension, in elements (as many as `shapes`).
    pub strides: Vec<u32>,
    /// Element type.
    pub dtype: DataType,
    /// How the callable uses it.
    pub dir: ArgDirection,
}

impl DeviceTensor {
    /// A dense row-major tensor of `shapes` at `addr`.
    pub fn contiguous(addr: u64, shapes: &[u32], dtype: DataType, dir: ArgDirection) -> Self {
        let mut strides = vec![0u32; shapes.len()];
        let mut next: u32 = 1;
        for (stride, &shape) in strides.iter_mut().zip(shapes).rev() {
            *stride = next;
            next = next.saturating_mul(shape);
        }
        Self {
            addr,
            shapes: shapes.to_vec(),
            strides,
            dtype,
            dir,
        }
    }
}

/// An entry tensor of [`ChipWorker::run`](crate::ChipWorker::run).
#[derive(Clone, Debug, PartialEq)]
pub enum ChipArg {
    /// Host bytes, staged into per-run GM (IN and INOUT copied in, OUT and INOUT copied back;
    /// an OUT's staging starts zeroed).
    Host(HostTensor),
    /// A view of persistent device memory, used in place.
    Device(DeviceTensor),
}

impl ChipArg {
    /// How the callable uses the tensor.
    pub fn dir(&self) -> ArgDirection {
        match self {
            Self::Host(t) => t.dir,
            Self::Device(t) => t.dir,
        }
    }
}

impl ChipArg {
    /// The host tensor, if it is one (after a run, with its outputs).
    pub fn host(&self) -> Option<&HostTensor> {
        match self {
            Self::Host(t) => Some(t),
            Self::Device(_) => None,
        }
    }

    /// The host tensor, if it is one.
    pub fn into_host(self) -> Option<HostTensor> {
        match self {
            Self::Host(t) => Some(t),
            Self::Device(_) => None,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::HostTensor {}
    impl Sealed for super::ChipArg {}
}

/// What [`ChipWorker::run`](crate::ChipWorker::run) takes as entry tensors: a slice of [`ChipArg`] (host or device
/// tensors), or of [`HostTensor`] when every tensor is staged host bytes.
pub trait EntryArg: sealed::Sealed + Sized {
    /// Runs `f` on `args` as [`ChipArg`]s; whatever `f` does to them is seen in `args` after.
    #[doc(hidden)]
    fn as_chip_args<R>(args: &mut [Self], f: impl FnOnce(&mut [ChipArg]) -> R) -> R;
}

impl EntryArg for ChipArg {
    fn as_chip_args<R>(args: &mut [Self], f: impl FnOnce(&mut [ChipArg]) -> R) -> R {
        f(args)
    }
}

impl EntryArg for HostTensor {
    fn as_chip_args<R>(args: &mut [Self], f: impl FnOnce(&mut [ChipArg]) -> R) -> R {
        // Move the tensors into host arguments and back again, whatever the result: a failed
        // run leaves them as they were, a good one with its outputs.
        let mut chip: Vec<ChipArg> = args
            .iter_mut()
            .map(|t| {
                let empty = HostTensor {
                    data: Vec::new(),
                    shapes: Vec::new(),
                    dtype: t.dtype,
                    dir: t.dir,
                };
                ChipArg::Host(std::mem::replace(t, empty))
            })
            .collect();
        let result = f(&mut chip);
        for (t, arg) in args.iter_mut().zip(chip) {
            if let ChipArg::Host(h) = arg {
                *t = h;
            }
        }
        result
    }
}

impl From<HostTensor> for ChipArg {
    fn from(t: HostTensor) -> Self {
        Self::Host(t)
    }
}

impl From<DeviceTensor> for ChipArg {
    fn from(t: DeviceTensor) -> Self {
        Self::Device(t)
    }
}
