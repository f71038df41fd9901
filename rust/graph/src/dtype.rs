//! Element types.

use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16.
    F16,
    /// bfloat16 (the top half of an f32).
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Boolean, one byte per element (0 or 1), `i1` in MLIR.
    Bool,
    /// Signed 4-bit integer, two per byte (low nibble first): only the codes of a packed weight kept planar
    /// (not in [`DType::ALL`]; a graph file cannot declare it).
    I4,
    /// Signed 2-bit integer, four per byte (lowest bits first): only the high bits of 5- and 6-bit codes of a
    /// packed weight kept planar (not in [`DType::ALL`]).
    I2,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// Bytes per element in a dense little-endian buffer (1 for [`DType::I4`] and [`DType::I2`], whose elements
    /// share bytes: their buffers' sizes are [`DType::bytes_for`]).
    #[must_use]
    pub const fn byte_width(self) -> u64 {
        match self {
            DType::I8 | DType::U8 | DType::Bool | DType::I4 | DType::I2 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Bytes that `count` elements take (`count.div_ceil(2)` for [`DType::I4`], `div_ceil(4)` for [`DType::I2`]),
    /// or `None` on overflow.
    #[must_use]
    pub const fn bytes_for(self, count: u64) -> Option<u64> {
        match self {
            DType::I4 => Some(count.div_ceil(2)),
            DType::I2 => Some(count.div_ceil(4)),
            other => count.checked_mul(other.byte_width()),
        }
    }

    /// True for the sub-byte types ([`DType::I4`], [`DType::I2`]): packed several per byte, so never inline text.
    #[must_use]
    pub const fn is_sub_byte(self) -> bool {
        matches!(self, DType::I4 | DType::I2)
    }

    /// Bits per element of a sub-byte type (4 for [`DType::I4`], 2 for [`DType::I2`]); `None` for the others.
    #[must_use]
    pub const fn sub_byte_bits(self) -> Option<u32> {
        match self {
            DType::I4 => Some(4),
            DType::I2 => Some(2),
            _ => None,
        }
    }

    /// True for the floating-point types.
    #[must_use]
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// The MLIR element type (`f32`, `bf16`, `i1`, `ui8`, …).
    #[must_use]
    pub const fn mlir_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "ui8",
            DType::U16 => "ui16",
            DType::U32 => "ui32",
            DType::U64 => "ui64",
            DType::Bool => "i1",
            DType::I4 => "i4",
            DType::I2 => "i2",
        }
    }

    /// The short name used in tapeout's files and messages (`f32`, `bf16`, `u8`, `bool`, …).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            other => other.mlir_name(),
        }
    }

    /// Parses [`DType::name`] (also accepts `i1` for bool and `uiN` for unsigned types).
    #[must_use]
    pub fn parse(s: &str) -> Option<DType> {
        let s = match s {
            "i1" => "bool",
            "ui8" => "u8",
            "ui16" => "u16",
            "ui32" => "u32",
            "ui64" => "u64",
            other => other,
        };
        DType::ALL.into_iter().find(|d| d.name() == s)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::DType;

    #[test]
    fn names_round_trip_and_widths_match_mlir() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
            assert_eq!(DType::parse(d.mlir_name()), Some(d));
        }
        assert_eq!(DType::Bool.mlir_name(), "i1");
        assert_eq!(DType::BF16.byte_width(), 2);
        assert_eq!(DType::parse("q4_k"), None);
    }
}
