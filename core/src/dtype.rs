//! Element types. On the wire a dtype is a raw `u8`; [`DataType::from_raw`] is the only way a
//! wire byte becomes a `DataType`, and unknown values are rejected, never mapped.

use core::fmt;

/// The element type of a tensor. Discriminants are the wire values.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// IEEE 754 binary32.
    Float32 = 0,
    /// IEEE 754 binary16.
    Float16 = 1,
    /// Signed 32-bit integer.
    Int32 = 2,
    /// Signed 16-bit integer.
    Int16 = 3,
    /// Signed 8-bit integer.
    Int8 = 4,
    /// Unsigned 8-bit integer.
    Uint8 = 5,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    Bfloat16 = 6,
    /// Signed 64-bit integer.
    Int64 = 7,
    /// Unsigned 64-bit integer.
    Uint64 = 8,
    /// Unsigned 16-bit integer.
    Uint16 = 9,
    /// Unsigned 32-bit integer.
    Uint32 = 10,
    /// Boolean, one byte per element.
    Bool = 11,
    /// 8-bit float, 4-bit exponent, 3-bit mantissa, finite-only (a5).
    Fp8E4M3Fn = 12,
    /// 8-bit exponent-only scale format (a5).
    Fp8E8M0 = 13,
    /// 4-bit float packed two per byte (a5). Counted as one byte per element, as the reference
    /// does: extents and containment checks are conservative (twice the real footprint).
    Fp4E2M1 = 14,
}

impl DataType {
    /// Number of defined data types; wire values at or above this are rejected.
    pub const COUNT: u8 = 15;

    /// Every data type, in wire order.
    pub const ALL: [DataType; Self::COUNT as usize] = [
        Self::Float32,
        Self::Float16,
        Self::Int32,
        Self::Int16,
        Self::Int8,
        Self::Uint8,
        Self::Bfloat16,
        Self::Int64,
        Self::Uint64,
        Self::Uint16,
        Self::Uint32,
        Self::Bool,
        Self::Fp8E4M3Fn,
        Self::Fp8E8M0,
        Self::Fp4E2M1,
    ];

    /// Decodes a wire byte; `None` for any value outside the defined set.
    #[inline]
    pub const fn from_raw(raw: u8) -> Option<Self> {
        if raw < Self::COUNT {
            Some(Self::ALL[raw as usize])
        } else {
            None
        }
    }

    /// The wire byte.
    #[inline]
    pub const fn raw(self) -> u8 {
        self as u8
    }

    /// Bytes per element (1 for the packed `Fp4E2M1`, see its note).
    #[inline]
    pub const fn elem_size(self) -> u32 {
        match self {
            Self::Float32 | Self::Int32 | Self::Uint32 => 4,
            Self::Float16 | Self::Bfloat16 | Self::Int16 | Self::Uint16 => 2,
            Self::Int64 | Self::Uint64 => 8,
            Self::Int8
            | Self::Uint8
            | Self::Bool
            | Self::Fp8E4M3Fn
            | Self::Fp8E8M0
            | Self::Fp4E2M1 => 1,
        }
    }

    /// The reference's spelling of the type, for messages and dumps.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Float32 => "FLOAT32",
            Self::Float16 => "FLOAT16",
            Self::Int32 => "INT32",
            Self::Int16 => "INT16",
            Self::Int8 => "INT8",
            Self::Uint8 => "UINT8",
            Self::Bfloat16 => "BFLOAT16",
            Self::Int64 => "INT64",
            Self::Uint64 => "UINT64",
            Self::Uint16 => "UINT16",
            Self::Uint32 => "UINT32",
            Self::Bool => "BOOL",
            Self::Fp8E4M3Fn => "FP8E4M3FN",
            Self::Fp8E8M0 => "FP8E8M0",
            Self::Fp4E2M1 => "FP4E2M1",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trips_and_rejects_unknown() {
        for (i, dt) in DataType::ALL.iter().enumerate() {
            assert_eq!(dt.raw() as usize, i);
            assert_eq!(DataType::from_raw(i as u8), Some(*dt));
        }
        for raw in DataType::COUNT..=u8::MAX {
            assert_eq!(DataType::from_raw(raw), None);
        }
    }

    #[test]
    fn element_sizes_match_the_reference_table() {
        let expected = [4, 2, 4, 2, 1, 1, 2, 8, 8, 2, 4, 1, 1, 1, 1];
        for (dt, size) in DataType::ALL.iter().zip(expected) {
            assert_eq!(dt.elem_size(), size, "{dt}");
        }
    }
}
