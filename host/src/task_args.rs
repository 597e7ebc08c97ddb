//! `TaskArgs`: the host's builder for one task's arguments.
//!
//! It holds validated wire tensors (a [`ValidTensor`] can only come from validation), each with
//! its tag, then scalars. The builder has no cap of its own; the caps apply where the arguments
//! land: the mailbox args region when encoded ([`TaskArgs::to_mailbox_blob`]), 256 / 128 at the
//! chip entry, 32 / 16 per task. Tags stay on the host: the blob carries none, and
//! [`TaskArgs::from_blob`] gives every decoded tensor the default tag INPUT.

use simpler_core::blob::{blob_size, write_blob, BlobError, TaskArgsView};
use simpler_core::limits::MAILBOX_ARGS_CAPACITY;
use simpler_core::{access_permits, AccessMode, TensorArgType, ValidTensor};
use std::fmt;

/// Why the builder refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskArgsError {
    /// A tensor was added after a scalar.
    TensorAfterScalar,
    /// The tensor's buffer does not grant the access its tag needs.
    AccessDenied {
        /// The tensor's position.
        index: usize,
        /// The tag asked for.
        tag: TensorArgType,
        /// What the buffer grants.
        granted: AccessMode,
    },
    /// A tensor index past the count.
    TensorIndex {
        /// The index asked for.
        index: usize,
        /// Tensors held.
        count: usize,
    },
    /// Encoding or decoding the blob failed.
    Blob(BlobError),
}

impl From<BlobError> for TaskArgsError {
    fn from(e: BlobError) -> Self {
        Self::Blob(e)
    }
}

impl fmt::Display for TaskArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TensorAfterScalar => f.write_str("add_tensor after add_scalar"),
            Self::AccessDenied {
                index,
                tag,
                granted,
            } => write!(
                f,
                "tensor {index}: tag {tag} is not permitted by a {granted} buffer"
            ),
            Self::TensorIndex { index, count } => {
                write!(f, "tensor index {index} out of range (count {count})")
            }
            Self::Blob(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TaskArgsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Blob(e) => Some(e),
            _ => None,
        }
    }
}

/// Tagged tensors, then scalars, for one task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskArgs {
    tensors: Vec<ValidTensor>,
    tags: Vec<TensorArgType>,
    scalars: Vec<u64>,
}

impl TaskArgs {
    /// An empty argument list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a tensor with `tag`. Refused after any scalar, or when the tensor's buffer does
    /// not grant what the tag needs (INPUT: read; OUTPUT_EXISTING: write; INOUT: both).
    pub fn add_tensor(
        &mut self,
        tensor: ValidTensor,
        tag: TensorArgType,
    ) -> Result<(), TaskArgsError> {
        if !self.scalars.is_empty() {
            return Err(TaskArgsError::TensorAfterScalar);
        }
        check_access(self.tensors.len(), &tensor, tag)?;
        self.tensors.push(tensor);
        self.tags.push(tag);
        Ok(())
    }

    /// Appends a scalar (any value bit-cast to `u64` by the caller).
    pub fn add_scalar(&mut self, value: u64) {
        self.scalars.push(value);
    }

    /// Re-tags tensor `index`, with the same access check as [`Self::add_tensor`].
    pub fn set_tag(&mut self, index: usize, tag: TensorArgType) -> Result<(), TaskArgsError> {
        let count = self.tensors.len();
        let tensor = self
            .tensors
            .get(index)
            .ok_or(TaskArgsError::TensorIndex { index, count })?;
        check_access(index, tensor, tag)?;
        self.tags[index] = tag;
        Ok(())
    }

    /// Tensor `index`.
    pub fn tensor(&self, index: usize) -> Option<&ValidTensor> {
        self.tensors.get(index)
    }

    /// The tag of tensor `index`.
    pub fn tag(&self, index: usize) -> Option<TensorArgType> {
        self.tags.get(index).copied()
    }

    /// Scalar `index`.
    pub fn scalar(&self, index: usize) -> Option<u64> {
        self.scalars.get(index).copied()
    }

    /// All tensors, in order.
    pub fn tensors(&self) -> &[ValidTensor] {
        &self.tensors
    }

    /// All tags, parallel to [`Self::tensors`].
    pub fn tags(&self) -> &[TensorArgType] {
        &self.tags
    }

    /// All scalars, in order.
    pub fn scalars(&self) -> &[u64] {
        &self.scalars
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Number of scalars.
    pub fn scalar_count(&self) -> usize {
        self.scalars.len()
    }

    /// Tensors plus scalars.
    pub fn len(&self) -> usize {
        self.tensors.len() + self.scalars.len()
    }

    /// Whether there are no arguments.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every argument.
    pub fn clear(&mut self) {
        self.tensors.clear();
        self.tags.clear();
        self.scalars.clear();
    }

    /// Bytes of the encoded blob.
    pub fn blob_size(&self) -> usize {
        // Vec lengths are bounded by memory, far below the overflow point of this sum.
        blob_size(self.tensors.len(), self.scalars.len()).unwrap_or(usize::MAX)
    }

    /// Encodes into `dst`; refuses before writing if the blob does not fit.
    pub fn write_blob(&self, dst: &mut [u8]) -> Result<usize, TaskArgsError> {
        Ok(write_blob(dst, &self.tensors, &self.scalars)?)
    }

    /// Encodes for a mailbox task frame; refuses a blob larger than its 64,016-byte args region.
    pub fn to_mailbox_blob(&self) -> Result<Vec<u8>, TaskArgsError> {
        let size = self.blob_size();
        if size > MAILBOX_ARGS_CAPACITY {
            return Err(BlobError::Exceeds {
                tensors: self.tensors.len() as u64,
                scalars: self.scalars.len() as u64,
                needed: size as u64,
                capacity: MAILBOX_ARGS_CAPACITY,
            }
            .into());
        }
        let mut blob = vec![0u8; size];
        self.write_blob(&mut blob)?;
        Ok(blob)
    }

    /// Decodes a whole blob: every tensor is validated, and the first invalid one fails the
    /// call. Every tensor gets the tag INPUT, since tags do not travel.
    pub fn from_blob(view: &TaskArgsView<'_>) -> Result<Self, TaskArgsError> {
        let tensors = view.tensors().collect::<Result<Vec<_>, _>>()?;
        let tags = vec![TensorArgType::Input; tensors.len()];
        Ok(Self {
            tensors,
            tags,
            scalars: view.scalars().collect(),
        })
    }
}

fn check_access(
    index: usize,
    tensor: &ValidTensor,
    tag: TensorArgType,
) -> Result<(), TaskArgsError> {
    // A ValidTensor's access byte passed validation; the fallback is unreachable.
    let granted = tensor.buffer.access_mode().unwrap_or(AccessMode::Read);
    if access_permits(granted, tag) {
        Ok(())
    } else {
        Err(TaskArgsError::AccessDenied {
            index,
            tag,
            granted,
        })
    }
}
