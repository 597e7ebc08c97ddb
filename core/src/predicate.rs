//! Dispatch predicates: a task that runs only when one element of a tensor compares true with
//! a target, decided by the scheduler at the dispatch point.
//!
//! ```text
//!  Predicate { operand, indices, op, target }   -- what the orchestration states; checked at once
//!     | the submit: the operand's producers become the task's producers (WAIT, as an INPUT)
//!     | Predicate::resolve                      -- the element's device address
//!  DispatchPredicate (24 B, Pod)                -- in the task's payload record, or a
//!                                                  Definition's GraphPredicate at replay
//!     | DispatchPredicate::evaluate(gm)         -- read `elem_size` bytes, sign-extend, compare
//!  true: dispatched as usual.  false: retired without running, its consumers released.
//! ```
//!
//! The element is read when the task is ready, so the value is the one its producers left.
//! Unlike the reference, where the orchestration must make the operand's producer a dependency
//! itself, the submit does it: the operand takes part in dependency inference as an INPUT
//! would (creator edge and writer lookup), without becoming a kernel argument. A kernel-less
//! task (a dummy, an allocation) has nothing to skip, and its predicate is dropped.

use crate::gm::{Gm, GmFault};
use crate::limits::MAX_TENSOR_DIMS;
use crate::task_tensor::TaskTensor;
use bytemuck::{Pod, Zeroable};
use core::fmt;

/// The comparison `element op target`. The raw value 0 is "no predicate" in the wire forms.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PredicateOp {
    /// `==`
    Eq = 1,
    /// `!=`
    Ne = 2,
    /// `>`
    Gt = 3,
    /// `<`
    Lt = 4,
    /// `>=`
    Ge = 5,
    /// `<=`
    Le = 6,
}

impl PredicateOp {
    /// Every operator.
    pub const ALL: [Self; 6] = [Self::Eq, Self::Ne, Self::Gt, Self::Lt, Self::Ge, Self::Le];

    /// Decodes a raw operator (0 and unknown values are `None`).
    pub const fn from_raw(raw: u8) -> Option<Self> {
        Some(match raw {
            1 => Self::Eq,
            2 => Self::Ne,
            3 => Self::Gt,
            4 => Self::Lt,
            5 => Self::Ge,
            6 => Self::Le,
            _ => return None,
        })
    }

    /// Whether `value op target` holds (signed comparison).
    pub const fn holds(self, value: i64, target: i64) -> bool {
        match self {
            Self::Eq => value == target,
            Self::Ne => value != target,
            Self::Gt => value > target,
            Self::Lt => value < target,
            Self::Ge => value >= target,
            Self::Le => value <= target,
        }
    }
}

/// Why a predicate was refused (at submit) or could not be evaluated (at dispatch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredicateError {
    /// The operand has no buffer yet (an OUTPUT description, not an allocated tensor).
    NotAllocated,
    /// The indices do not name one element: their count must equal the operand's rank.
    IndexRank {
        /// Number of indices given.
        given: usize,
        /// The operand's rank.
        rank: usize,
    },
    /// An index past its dimension.
    Index {
        /// Index of the dimension, below the operand's rank.
        dim: usize,
        /// The index given.
        index: u32,
        /// The dimension's size.
        shape: u32,
    },
    /// An element width the comparison does not read (1, 2, 4 or 8 bytes).
    ElemSize {
        /// The width asked for, in bytes.
        bytes: u8,
    },
    /// An unknown raw operator (in a record or a Definition).
    Op {
        /// The operator byte the record holds.
        raw: u8,
    },
    /// Device memory refused the read of the element.
    Memory(GmFault),
}

impl fmt::Display for PredicateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NotAllocated => f.write_str("the predicate's operand has no buffer yet"),
            Self::IndexRank { given, rank } => write!(
                f,
                "the predicate gives {given} indices for an operand of rank {rank}"
            ),
            Self::Index { dim, index, shape } => write!(
                f,
                "the predicate's index {index} is past dimension {dim} of size {shape}"
            ),
            Self::ElemSize { bytes } => {
                write!(f, "a predicate cannot compare {bytes}-byte elements")
            }
            Self::Op { raw } => write!(f, "unknown predicate operator {raw}"),
            Self::Memory(_) => {
                f.write_str("device memory refused the read of the predicate's element")
            }
        }
    }
}

impl core::error::Error for PredicateError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Memory(fault) => Some(fault),
            _ => None,
        }
    }
}

/// A task's predicate as the orchestration states it: element `indices` of `operand`, compared
/// with `target`. Built only by [`Predicate::new`], so every one names an element inside its
/// operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Predicate {
    operand: TaskTensor,
    elem_offset: u64,
    op: PredicateOp,
    target: i64,
}

impl Predicate {
    /// `operand[indices] op target`, one index per dimension of the operand.
    pub fn new(
        operand: &TaskTensor,
        indices: &[u32],
        op: PredicateOp,
        target: i64,
    ) -> Result<Self, PredicateError> {
        if operand.buffer().addr == 0 {
            return Err(PredicateError::NotAllocated);
        }
        let rank = operand.ndims() as usize;
        if indices.len() != rank || rank > MAX_TENSOR_DIMS {
            return Err(PredicateError::IndexRank {
                given: indices.len(),
                rank,
            });
        }
        let bytes = operand.dtype().elem_size() as u8;
        if !matches!(bytes, 1 | 2 | 4 | 8) {
            return Err(PredicateError::ElemSize { bytes });
        }
        let mut elem_offset = 0u64;
        for (dim, ((&index, &shape), &stride)) in indices
            .iter()
            .zip(operand.shapes())
            .zip(operand.strides())
            .enumerate()
        {
            if index >= shape {
                return Err(PredicateError::Index { dim, index, shape });
            }
            elem_offset += index as u64 * stride as u64;
        }
        Ok(Self {
            operand: *operand,
            elem_offset,
            op,
            target,
        })
    }

    /// The tensor the element is read from (its producers become the task's producers).
    pub fn operand(&self) -> &TaskTensor {
        &self.operand
    }

    /// The element read, in elements from the operand's first element (below its extent).
    pub fn elem_offset(&self) -> u64 {
        self.elem_offset
    }

    /// The comparison: the task runs when `element op target` holds.
    pub fn op(&self) -> PredicateOp {
        self.op
    }

    /// The value compared with.
    pub fn target(&self) -> i64 {
        self.target
    }

    /// The element's width in bytes.
    pub fn elem_size(&self) -> u8 {
        self.operand.dtype().elem_size() as u8
    }

    /// The predicate with its element's device address, as a payload record carries it.
    pub fn resolve(&self) -> DispatchPredicate {
        DispatchPredicate::at(
            self.operand.data_addr(),
            self.elem_offset,
            self.elem_size(),
            self.op as u8,
            self.target,
        )
    }
}

/// A resolved predicate: the element's device address and the comparison. The form a payload
/// record carries and a Definition's predicate becomes at replay.
///
/// | off | field |
/// |---|---|
/// | 0 | `addr` |
/// | 8 | `target` |
/// | 16 | `elem_size`, `op` |
/// | 18 | `reserved[6]` |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DispatchPredicate {
    /// Device address of the element.
    pub addr: u64,
    /// The value compared with.
    pub target: i64,
    /// Bytes of the element (1, 2, 4 or 8).
    pub elem_size: u8,
    /// The raw [`PredicateOp`].
    pub op: u8,
    /// Zero; pads the record to 24 bytes.
    pub reserved: [u8; 6],
}

crate::assert_layout!(DispatchPredicate, size = 24, { target: 8, elem_size: 16, op: 17 });

impl DispatchPredicate {
    /// Words of one in a payload record.
    pub const WORDS: usize = 3;

    /// The element `elem_offset` elements past `base` (the operand's first element), compared
    /// by the raw operator `op` (checked when evaluated: a Definition's predicate comes from an
    /// image).
    pub const fn at(base: u64, elem_offset: u64, elem_size: u8, op: u8, target: i64) -> Self {
        Self {
            // Wrapping: an address is opaque until the device reads it, which checks it.
            addr: base.wrapping_add(elem_offset.wrapping_mul(elem_size as u64)),
            target,
            elem_size,
            op,
            reserved: [0; 6],
        }
    }

    /// Whether the element's raw little-endian bytes (`raw`, the low `elem_size` bytes used),
    /// sign-extended, compare true with the target.
    pub fn holds(&self, raw: u64) -> Result<bool, PredicateError> {
        let op = PredicateOp::from_raw(self.op).ok_or(PredicateError::Op { raw: self.op })?;
        let bits = match self.elem_size {
            1 | 2 | 4 | 8 => self.elem_size as u32 * 8,
            bytes => return Err(PredicateError::ElemSize { bytes }),
        };
        let shift = 64 - bits;
        let value = ((raw << shift) as i64) >> shift;
        Ok(op.holds(value, self.target))
    }

    /// Reads the element from `gm` and compares it: whether the task runs.
    pub fn evaluate(&self, gm: &dyn Gm) -> Result<bool, PredicateError> {
        let mut bytes = [0u8; 8];
        let n = (self.elem_size as usize).min(8);
        gm.read(self.addr, &mut bytes[..n])
            .map_err(PredicateError::Memory)?;
        self.holds(u64::from_le_bytes(bytes))
    }

    /// The record words: address, target, then width and operator.
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        bytemuck::cast(*self)
    }

    /// The predicate record words hold.
    pub fn from_words(words: [u64; Self::WORDS]) -> Self {
        bytemuck::cast(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AddressSpace, BufferHandle, DataType};

    fn tensor(shapes: &[u32], strides: &[u32], start: u64, dtype: DataType) -> TaskTensor {
        TaskTensor::new(
            BufferHandle {
                addr: 0x1000,
                size: 1 << 20,
            },
            start,
            shapes,
            strides,
            dtype,
            AddressSpace::Device,
        )
        .unwrap()
    }

    #[test]
    fn an_element_is_found_through_the_views_strides_and_start() {
        // A 3 x 4 view with a row pitch of 10 elements, starting 7 elements into its buffer.
        let t = tensor(&[3, 4], &[10, 1], 7, DataType::Int32);
        let p = Predicate::new(&t, &[2, 3], PredicateOp::Gt, 5).unwrap();
        assert_eq!(p.elem_offset(), 23);
        let d = p.resolve();
        assert_eq!(d.addr, 0x1000 + (7 + 23) * 4);
        assert_eq!((d.elem_size, d.op, d.target), (4, PredicateOp::Gt as u8, 5));
        assert_eq!(DispatchPredicate::from_words(d.to_words()), d);
    }

    #[test]
    fn indices_that_name_no_element_are_refused() {
        let t = tensor(&[3, 4], &[4, 1], 0, DataType::Int32);
        assert_eq!(
            Predicate::new(&t, &[1], PredicateOp::Eq, 0),
            Err(PredicateError::IndexRank { given: 1, rank: 2 })
        );
        assert_eq!(
            Predicate::new(&t, &[0, 4], PredicateOp::Eq, 0),
            Err(PredicateError::Index {
                dim: 1,
                index: 4,
                shape: 4
            })
        );
        let unallocated = TaskTensor::create_info(&[4], DataType::Int32).unwrap();
        assert_eq!(
            Predicate::new(&unallocated, &[0], PredicateOp::Eq, 0),
            Err(PredicateError::NotAllocated)
        );
    }

    #[test]
    fn narrow_elements_are_sign_extended_before_the_comparison() {
        let p = |size: u8, op: PredicateOp, target: i64| DispatchPredicate {
            addr: 0,
            target,
            elem_size: size,
            op: op as u8,
            reserved: [0; 6],
        };
        // 0xFF as a 1-byte element is -1: below 0, equal to -1, not 255.
        assert_eq!(p(1, PredicateOp::Lt, 0).holds(0xFF), Ok(true));
        assert_eq!(p(1, PredicateOp::Eq, -1).holds(0xFF), Ok(true));
        assert_eq!(p(1, PredicateOp::Eq, 255).holds(0xFF), Ok(false));
        // Bytes above the width are ignored.
        assert_eq!(p(2, PredicateOp::Eq, 0x1234).holds(0xAB_1234), Ok(true));
        assert_eq!(
            p(4, PredicateOp::Eq, i32::MIN as i64).holds(0x8000_0000),
            Ok(true)
        );
        assert_eq!(p(8, PredicateOp::Lt, 0).holds(u64::MAX), Ok(true));
        // Each operator against values below, at and above the target.
        let table = [
            (PredicateOp::Eq, [false, true, false]),
            (PredicateOp::Ne, [true, false, true]),
            (PredicateOp::Gt, [false, false, true]),
            (PredicateOp::Lt, [true, false, false]),
            (PredicateOp::Ge, [false, true, true]),
            (PredicateOp::Le, [true, true, false]),
        ];
        for (op, expect) in table {
            for (value, want) in [-3i64, 7, 9].into_iter().zip(expect) {
                assert_eq!(
                    p(8, op, 7).holds(value as u64),
                    Ok(want),
                    "{value} {op:?} 7"
                );
            }
        }
    }

    #[test]
    fn a_record_with_an_unknown_operator_or_width_is_an_error() {
        let mut d = DispatchPredicate {
            elem_size: 4,
            op: 0,
            ..Default::default()
        };
        assert_eq!(d.holds(0), Err(PredicateError::Op { raw: 0 }));
        d.op = 7;
        assert_eq!(d.holds(0), Err(PredicateError::Op { raw: 7 }));
        d.op = PredicateOp::Eq as u8;
        d.elem_size = 3;
        assert_eq!(d.holds(0), Err(PredicateError::ElemSize { bytes: 3 }));
    }
}
