//! Fixed-capacity argument containers that are shipped as plain data.
//!
//! | container | element | cap (tensors / scalars) | size | built by |
//! |---|---|---|---|---|
//! | [`ChipStorageTaskArgs`] | [`ChipTensor`] | 256 / 128 | 19,464 B | [`ChipStorageTaskArgs::materialize`] from a blob view |
//! | [`OrchArgs`] | [`TaskTensor`] | 256 / 128 | 33,800 B | [`OrchArgs::adopt`] from a chip entry (the reference's `set_orch_args`) |
//! | [`CoreTaskArgs`] | [`TaskTensor`] | 32 / 16 | 4,232 B | the orchestrator, per task; what a kernel receives |
//!
//! Each is `tensors[cap] | scalars[cap] | u32 tensor_count | u32 scalar_count`. Every push past a
//! cap is an error, never a truncation, and all tensors come before any scalar. A container read
//! from shared memory may carry corrupt counts: accessors clamp them to the caps, and
//! [`ChipStorageTaskArgs::check_counts`] reports them.

use crate::blob::{BlobError, TaskArgsView};
use crate::buffer::CanonicalIdentity;
use crate::chip::{ChipTensor, MaterializeError, Resolved};
use crate::limits::{
    CHIP_MAX_SCALAR_ARGS, CHIP_MAX_TENSOR_ARGS, CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS,
};
use crate::task_tensor::{AdoptError, TaskTensor};
use bytemuck::{Pod, Zeroable};
use core::fmt;

/// A container refused an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgsError {
    /// The tensor cap is reached.
    TooManyTensors {
        /// The container's tensor capacity (its `MAX_TENSORS`).
        limit: usize,
    },
    /// The scalar cap is reached.
    TooManyScalars {
        /// The container's scalar capacity (its `MAX_SCALARS`).
        limit: usize,
    },
    /// A tensor was added after a scalar.
    TensorAfterScalar,
    /// A stored count exceeds its cap (corrupt shared memory).
    CorruptCount {
        /// The tensor or scalar count the container holds.
        value: u32,
        /// The capacity it exceeds (`MAX_TENSORS` or `MAX_SCALARS`).
        limit: usize,
    },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TooManyTensors { limit } => write!(f, "more than {limit} tensor arguments"),
            Self::TooManyScalars { limit } => write!(f, "more than {limit} scalar arguments"),
            Self::TensorAfterScalar => f.write_str("tensor added after a scalar"),
            Self::CorruptCount { value, limit } => {
                write!(f, "stored count {value} exceeds the cap {limit}")
            }
        }
    }
}

impl core::error::Error for ArgsError {}

/// Why a chip entry could not be built or adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// The blob's envelope or one of its tensors failed decoding.
    Decode(BlobError),
    /// Tensor `index` could not be resolved to a local address.
    Materialize {
        /// The tensor's position in the blob.
        index: usize,
        /// What resolving its buffer refused.
        error: MaterializeError,
    },
    /// Tensor `index` could not be adopted.
    Adopt {
        /// The tensor's position in the chip entry.
        index: usize,
        /// What adopting it refused.
        error: AdoptError,
    },
    /// A cap was exceeded.
    Args(ArgsError),
}

impl From<BlobError> for EntryError {
    fn from(e: BlobError) -> Self {
        Self::Decode(e)
    }
}

impl From<ArgsError> for EntryError {
    fn from(e: ArgsError) -> Self {
        Self::Args(e)
    }
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(e) => e.fmt(f),
            Self::Materialize { index, error } => write!(f, "tensor {index}: {error}"),
            Self::Adopt { index, error } => write!(f, "tensor {index}: {error}"),
            Self::Args(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for EntryError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Decode(e) => Some(e),
            Self::Materialize { error, .. } => Some(error),
            Self::Adopt { error, .. } => Some(error),
            Self::Args(e) => Some(e),
        }
    }
}

macro_rules! arg_storage {
    ($(#[$doc:meta])* $name:ident, $tensor:ty, $max_t:expr, $max_s:expr) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Pod, Zeroable)]
        pub struct $name {
            tensors: [$tensor; $max_t],
            scalars: [u64; $max_s],
            tensor_count: u32,
            scalar_count: u32,
        }

        impl $name {
            /// Tensor arguments the container holds at most.
            pub const MAX_TENSORS: usize = $max_t;
            /// Scalar arguments the container holds at most.
            pub const MAX_SCALARS: usize = $max_s;

            /// An empty container.
            pub fn new() -> Self {
                Self::zeroed()
            }

            /// Empties the container (stale elements are left; counts bound every read).
            pub fn clear(&mut self) {
                self.tensor_count = 0;
                self.scalar_count = 0;
            }

            /// Appends a tensor; refused past the cap or after any scalar.
            pub fn push_tensor(&mut self, t: $tensor) -> Result<(), ArgsError> {
                if self.scalar_count != 0 {
                    return Err(ArgsError::TensorAfterScalar);
                }
                let n = self.tensor_count as usize;
                let slot = self
                    .tensors
                    .get_mut(n)
                    .ok_or(ArgsError::TooManyTensors { limit: $max_t })?;
                *slot = t;
                self.tensor_count += 1;
                Ok(())
            }

            /// Appends a scalar; refused past the cap.
            pub fn push_scalar(&mut self, v: u64) -> Result<(), ArgsError> {
                let n = self.scalar_count as usize;
                let slot = self
                    .scalars
                    .get_mut(n)
                    .ok_or(ArgsError::TooManyScalars { limit: $max_s })?;
                *slot = v;
                self.scalar_count += 1;
                Ok(())
            }

            /// The stored tensors (count clamped to the cap).
            pub fn tensors(&self) -> &[$tensor] {
                &self.tensors[..(self.tensor_count as usize).min($max_t)]
            }

            /// The stored scalars (count clamped to the cap).
            pub fn scalars(&self) -> &[u64] {
                &self.scalars[..(self.scalar_count as usize).min($max_s)]
            }

            /// Reports counts past the caps, as corrupt shared memory would carry.
            pub fn check_counts(&self) -> Result<(), ArgsError> {
                if self.tensor_count as usize > $max_t {
                    return Err(ArgsError::CorruptCount {
                        value: self.tensor_count,
                        limit: $max_t,
                    });
                }
                if self.scalar_count as usize > $max_s {
                    return Err(ArgsError::CorruptCount {
                        value: self.scalar_count,
                        limit: $max_s,
                    });
                }
                Ok(())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("tensors", &self.tensors())
                    .field("scalars", &self.scalars())
                    .finish()
            }
        }
    };
}

arg_storage! {
    /// The chip entry: what a chip receives for one run, at 256 tensors / 128 scalars.
    ChipStorageTaskArgs, ChipTensor, CHIP_MAX_TENSOR_ARGS, CHIP_MAX_SCALAR_ARGS
}
crate::assert_layout!(ChipStorageTaskArgs, size = 19_464, {
    tensors: 0, scalars: 18_432, tensor_count: 19_456, scalar_count: 19_460,
});

arg_storage! {
    /// The adopted chip entry the orchestration function reads (`orch_args`).
    OrchArgs, TaskTensor, CHIP_MAX_TENSOR_ARGS, CHIP_MAX_SCALAR_ARGS
}
crate::assert_layout!(OrchArgs, size = 33_800, {
    tensors: 0, scalars: 32_768, tensor_count: 33_792, scalar_count: 33_796,
});

arg_storage! {
    /// One task's arguments as its kernel receives them: 32 tensors / 16 scalars.
    CoreTaskArgs, TaskTensor, CORE_MAX_TENSOR_ARGS, CORE_MAX_SCALAR_ARGS
}
crate::assert_layout!(CoreTaskArgs, size = 4_232, {
    tensors: 0, scalars: 4_096, tensor_count: 4_224, scalar_count: 4_228,
});

impl ChipStorageTaskArgs {
    /// Replaces the contents with a decoded blob: every tensor is validated by the view, then
    /// resolved through `resolve` (identity → local base and space); scalars follow. More than
    /// 256 tensors or 128 scalars is an error. On error the container is left cleared.
    pub fn materialize(
        &mut self,
        view: &TaskArgsView<'_>,
        mut resolve: impl FnMut(&CanonicalIdentity) -> Option<Resolved>,
    ) -> Result<(), EntryError> {
        self.clear();
        let result = (|| {
            for (index, tensor) in view.tensors().enumerate() {
                let tensor = tensor?;
                let identity = tensor.buffer.identity;
                let resolved = resolve(&identity).ok_or(EntryError::Materialize {
                    index,
                    error: MaterializeError::Unresolved { identity },
                })?;
                let chip = ChipTensor::materialize(&tensor, resolved)
                    .map_err(|error| EntryError::Materialize { index, error })?;
                self.push_tensor(chip)?;
            }
            view.scalars().try_for_each(|s| self.push_scalar(s))?;
            Ok(())
        })();
        if result.is_err() {
            self.clear();
        }
        result
    }
}

impl OrchArgs {
    /// Replaces the contents with the adopted form of a chip entry: the runtime's one adoption
    /// point (`set_orch_args`). Every tensor becomes an external `TaskTensor`. On error the
    /// container is left cleared.
    pub fn adopt(&mut self, chip: &ChipStorageTaskArgs) -> Result<(), EntryError> {
        self.clear();
        let result = (|| {
            chip.check_counts()?;
            for (index, c) in chip.tensors().iter().enumerate() {
                let t = TaskTensor::adopt(c).map_err(|error| EntryError::Adopt { index, error })?;
                self.push_tensor(t)?;
            }
            chip.scalars()
                .iter()
                .try_for_each(|&s| self.push_scalar(s))?;
            Ok(())
        })();
        if result.is_err() {
            self.clear();
        }
        result
    }
}
