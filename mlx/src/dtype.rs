//! Element types, with the shim's stable codes.

use std::fmt;

/// An MLX element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Dtype {
    /// bool
    Bool = 0,
    /// u8
    U8 = 1,
    /// u16
    U16 = 2,
    /// u32
    U32 = 3,
    /// u64
    U64 = 4,
    /// i8
    I8 = 5,
    /// i16
    I16 = 6,
    /// i32
    I32 = 7,
    /// i64
    I64 = 8,
    /// IEEE half
    F16 = 9,
    /// f32
    F32 = 10,
    /// f64 (CPU only in MLX)
    F64 = 11,
    /// bfloat16
    BF16 = 12,
    /// complex64
    C64 = 13,
}

impl Dtype {
    /// From the shim's code.
    pub fn from_code(c: i32) -> Option<Dtype> {
        use Dtype::*;
        Some(match c {
            0 => Bool,
            1 => U8,
            2 => U16,
            3 => U32,
            4 => U64,
            5 => I8,
            6 => I16,
            7 => I32,
            8 => I64,
            9 => F16,
            10 => F32,
            11 => F64,
            12 => BF16,
            13 => C64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use Dtype::*;
        match self {
            Bool | U8 | I8 => 1,
            U16 | I16 | F16 | BF16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | C64 => 8,
        }
    }

    /// True for floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::F32 | Dtype::F64 | Dtype::BF16)
    }

    /// The name used in checkpoints and configs (`bfloat16`, `float16`, ...).
    pub fn name(self) -> &'static str {
        use Dtype::*;
        match self {
            Bool => "bool",
            U8 => "uint8",
            U16 => "uint16",
            U32 => "uint32",
            U64 => "uint64",
            I8 => "int8",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            F16 => "float16",
            F32 => "float32",
            F64 => "float64",
            BF16 => "bfloat16",
            C64 => "complex64",
        }
    }

    /// Parses a config-style name (`bfloat16`, `bf16`, `float32`, ...).
    pub fn parse(s: &str) -> Option<Dtype> {
        use Dtype::*;
        Some(match s {
            "bool" => Bool,
            "uint8" | "u8" => U8,
            "uint16" | "u16" => U16,
            "uint32" | "u32" => U32,
            "uint64" | "u64" => U64,
            "int8" | "i8" => I8,
            "int16" | "i16" => I16,
            "int32" | "i32" => I32,
            "int64" | "i64" => I64,
            "float16" | "f16" | "half" => F16,
            "float32" | "f32" | "float" => F32,
            "float64" | "f64" => F64,
            "bfloat16" | "bf16" => BF16,
            "complex64" => C64,
            _ => return None,
        })
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rust element types that map to an MLX dtype (for host transfers).
pub trait Element: Copy + Default + 'static {
    /// The matching MLX dtype.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
        }
    };
}
element!(bool, Bool);
element!(u8, U8);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);
element!(i8, I8);
element!(i16, I16);
element!(i32, I32);
element!(i64, I64);
element!(f32, F32);
element!(f64, F64);
element!(half::f16, F16);
element!(half::bf16, BF16);
