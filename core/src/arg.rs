//! How a task uses a tensor argument (its tag), what a buffer grants (its access), and the
//! matrix that says which tags a grant admits.

use bitflags::bitflags;
use core::fmt;

/// The tag of a tensor argument; it decides the dependency rules the runtime applies.
/// Discriminants are the reference's `i32` values. Tags never travel on the wire.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TensorArgType {
    /// Read: depends on earlier writers of overlapping regions.
    #[default]
    Input = 0,
    /// Written into a tensor the runtime allocates; found by consumers through its creator.
    Output = 1,
    /// Read-modify-write: depends on earlier writers and registers itself as a writer.
    InOut = 2,
    /// Write into an existing tensor: registers as a writer, looks up nothing.
    OutputExisting = 3,
    /// Passed through without taking part in dependency inference.
    NoDep = 4,
}

impl TensorArgType {
    /// Every tag, in value order.
    pub const ALL: [TensorArgType; 5] = [
        Self::Input,
        Self::Output,
        Self::InOut,
        Self::OutputExisting,
        Self::NoDep,
    ];

    /// Decodes the reference's integer value.
    pub const fn from_raw(raw: i32) -> Option<Self> {
        match raw {
            0 => Some(Self::Input),
            1 => Some(Self::Output),
            2 => Some(Self::InOut),
            3 => Some(Self::OutputExisting),
            4 => Some(Self::NoDep),
            _ => None,
        }
    }

    /// Whether the task writes the tensor (OUTPUT, INOUT, OUTPUT_EXISTING).
    pub const fn writes(self) -> bool {
        matches!(self, Self::Output | Self::InOut | Self::OutputExisting)
    }

    /// The reference's spelling, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Input => "INPUT",
            Self::Output => "OUTPUT",
            Self::InOut => "INOUT",
            Self::OutputExisting => "OUTPUT_EXISTING",
            Self::NoDep => "NO_DEP",
        }
    }
}

impl fmt::Display for TensorArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Direction of a parameter in a callable's signature.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgDirection {
    /// A scalar parameter.
    Scalar = 0,
    /// A tensor the callable reads.
    In = 1,
    /// A tensor the callable writes.
    Out = 2,
    /// A tensor the callable reads and writes.
    InOut = 3,
}

bitflags! {
    /// A set of permissions. `WRITE` does not imply `READ`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u8 {
        /// The holder may read.
        const READ = 0b01;
        /// The holder may write.
        const WRITE = 0b10;
    }
}

/// The permission a buffer descriptor grants, as its wire byte encodes it.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessMode {
    /// Read only.
    Read = 0,
    /// Write only.
    Write = 1,
    /// Read and write.
    ReadWrite = 2,
}

impl AccessMode {
    /// Decodes the wire byte; `None` for 3..=255.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Read),
            1 => Some(Self::Write),
            2 => Some(Self::ReadWrite),
            _ => None,
        }
    }

    /// The permission set this mode grants.
    pub const fn permissions(self) -> Access {
        match self {
            Self::Read => Access::READ,
            Self::Write => Access::WRITE,
            Self::ReadWrite => Access::READ.union(Access::WRITE),
        }
    }

    /// The reference's spelling, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Read => "READ",
            Self::Write => "WRITE",
            Self::ReadWrite => "READWRITE",
        }
    }
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a buffer granted `granted` may be passed with `tag`.
///
/// INPUT needs READ; OUTPUT_EXISTING needs WRITE; INOUT needs both. OUTPUT and NO_DEP are not
/// constrained, as in the reference: OUTPUT names a runtime allocation at L2, and NO_DEP passes
/// a tensor through without claiming a use.
pub const fn access_permits(granted: AccessMode, tag: TensorArgType) -> bool {
    let have = granted.permissions();
    let need = match tag {
        TensorArgType::Input => Access::READ,
        TensorArgType::OutputExisting => Access::WRITE,
        TensorArgType::InOut => Access::READ.union(Access::WRITE),
        TensorArgType::Output | TensorArgType::NoDep => Access::empty(),
    };
    have.contains(need)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_matrix_matches_the_reference() {
        use TensorArgType::*;
        let admitted = |mode| {
            TensorArgType::ALL
                .iter()
                .filter(|t| access_permits(mode, **t))
                .count()
        };
        assert!(access_permits(AccessMode::Read, Input));
        assert!(!access_permits(AccessMode::Read, InOut));
        assert!(!access_permits(AccessMode::Read, OutputExisting));
        assert!(access_permits(AccessMode::Read, Output));
        assert!(access_permits(AccessMode::Read, NoDep));
        assert!(!access_permits(AccessMode::Write, Input));
        assert!(!access_permits(AccessMode::Write, InOut));
        assert!(access_permits(AccessMode::Write, OutputExisting));
        assert_eq!(admitted(AccessMode::Read), 3);
        assert_eq!(admitted(AccessMode::Write), 3);
        assert_eq!(admitted(AccessMode::ReadWrite), 5);
    }

    #[test]
    fn raw_values_round_trip() {
        for t in TensorArgType::ALL {
            assert_eq!(TensorArgType::from_raw(t as i32), Some(t));
        }
        assert_eq!(TensorArgType::from_raw(5), None);
        assert_eq!(TensorArgType::from_raw(-1), None);
        assert_eq!(AccessMode::from_raw(2), Some(AccessMode::ReadWrite));
        assert_eq!(AccessMode::from_raw(3), None);
    }
}
