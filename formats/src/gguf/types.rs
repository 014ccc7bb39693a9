//! GGML tensor types: their ids, names and block layouts.

use crate::{Error, Result};

/// A GGML storage type. Block-quantized types store `block_elems` values in
/// `block_bytes` bytes; plain types are blocks of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(u32);

/// An element type MLX holds as it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainDtype {
    /// float32
    F32,
    /// float16
    F16,
    /// bfloat16
    BF16,
    /// int8
    I8,
    /// int16
    I16,
    /// int32
    I32,
    /// int64
    I64,
}

impl PlainDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            PlainDtype::I8 => 1,
            PlainDtype::F16 | PlainDtype::BF16 | PlainDtype::I16 => 2,
            PlainDtype::F32 | PlainDtype::I32 => 4,
            PlainDtype::I64 => 8,
        }
    }
}

/// (values, bytes) of one block.
type Block = Option<(u64, u64)>;

/// (id, name, block elements, block bytes); sizes only for types famlx reads.
const TABLE: &[(u32, &str, Block)] = &[
    (0, "F32", Some((1, 4))),
    (1, "F16", Some((1, 2))),
    (2, "Q4_0", Some((32, 18))),
    (3, "Q4_1", Some((32, 20))),
    (6, "Q5_0", Some((32, 22))),
    (7, "Q5_1", Some((32, 24))),
    (8, "Q8_0", Some((32, 34))),
    (9, "Q8_1", None),
    (10, "Q2_K", Some((256, 84))),
    (11, "Q3_K", Some((256, 110))),
    (12, "Q4_K", Some((256, 144))),
    (13, "Q5_K", Some((256, 176))),
    (14, "Q6_K", Some((256, 210))),
    (15, "Q8_K", None),
    (16, "IQ2_XXS", None),
    (17, "IQ2_XS", None),
    (18, "IQ3_XXS", None),
    (19, "IQ1_S", None),
    (20, "IQ4_NL", Some((32, 18))),
    (21, "IQ3_S", None),
    (22, "IQ2_S", None),
    (23, "IQ4_XS", Some((256, 136))),
    (24, "I8", Some((1, 1))),
    (25, "I16", Some((1, 2))),
    (26, "I32", Some((1, 4))),
    (27, "I64", Some((1, 8))),
    (28, "F64", Some((1, 8))),
    (29, "IQ1_M", None),
    (30, "BF16", Some((1, 2))),
    (34, "TQ1_0", None),
    (35, "TQ2_0", None),
    (39, "MXFP4", None),
    (40, "NVFP4", None),
    (41, "Q1_0", None),
];

impl GgmlType {
    /// float32
    pub const F32: GgmlType = GgmlType(0);
    /// float16
    pub const F16: GgmlType = GgmlType(1);
    /// 4-bit, one f16 scale per 32 (offset 8)
    pub const Q4_0: GgmlType = GgmlType(2);
    /// 4-bit, f16 scale and minimum per 32
    pub const Q4_1: GgmlType = GgmlType(3);
    /// 5-bit, one f16 scale per 32 (offset 16)
    pub const Q5_0: GgmlType = GgmlType(6);
    /// 5-bit, f16 scale and minimum per 32
    pub const Q5_1: GgmlType = GgmlType(7);
    /// 8-bit, one f16 scale per 32
    pub const Q8_0: GgmlType = GgmlType(8);
    /// 2-bit k-quant (super-blocks of 256)
    pub const Q2_K: GgmlType = GgmlType(10);
    /// 3-bit k-quant
    pub const Q3_K: GgmlType = GgmlType(11);
    /// 4-bit k-quant
    pub const Q4_K: GgmlType = GgmlType(12);
    /// 5-bit k-quant
    pub const Q5_K: GgmlType = GgmlType(13);
    /// 6-bit k-quant
    pub const Q6_K: GgmlType = GgmlType(14);
    /// 4-bit indices into a fixed 16-value table, one f16 scale per 32
    pub const IQ4_NL: GgmlType = GgmlType(20);
    /// IQ4_NL's table with super-blocks of 256 (a 6-bit scale per 32)
    pub const IQ4_XS: GgmlType = GgmlType(23);
    /// int8
    pub const I8: GgmlType = GgmlType(24);
    /// int16
    pub const I16: GgmlType = GgmlType(25);
    /// int32
    pub const I32: GgmlType = GgmlType(26);
    /// int64
    pub const I64: GgmlType = GgmlType(27);
    /// float64
    pub const F64: GgmlType = GgmlType(28);
    /// bfloat16
    pub const BF16: GgmlType = GgmlType(30);

    /// The type with GGUF id `id`, if it is one GGML defines.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().any(|t| t.0 == id).then_some(GgmlType(id))
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self.0
    }

    fn entry(self) -> &'static (u32, &'static str, Block) {
        TABLE.iter().find(|t| t.0 == self.0).expect("constructed from the table")
    }

    /// llama.cpp's name of the type (`Q4_K`, `F16`, ...).
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// (values per block, bytes per block), for the types famlx reads.
    pub fn block(self) -> Option<(u64, u64)> {
        self.entry().2
    }

    /// The types famlx reads, by name, for error messages.
    pub fn supported_names() -> String {
        TABLE.iter().filter(|t| t.2.is_some()).map(|t| t.1).collect::<Vec<_>>().join(", ")
    }

    /// The element type MLX holds this type in as stored, for plain types
    /// (float64 is narrowed to float32, which MLX computes in).
    pub fn plain(self) -> Option<PlainDtype> {
        Some(match self {
            GgmlType::F32 | GgmlType::F64 => PlainDtype::F32,
            GgmlType::F16 => PlainDtype::F16,
            GgmlType::BF16 => PlainDtype::BF16,
            GgmlType::I8 => PlainDtype::I8,
            GgmlType::I16 => PlainDtype::I16,
            GgmlType::I32 => PlainDtype::I32,
            GgmlType::I64 => PlainDtype::I64,
            _ => return None,
        })
    }

    /// Bytes a tensor of `dims` (GGML order) takes, `None` for types famlx
    /// cannot size. Fails when the first dimension does not fill whole
    /// blocks or the size overflows.
    pub fn nbytes(self, dims: &[u64]) -> Result<Option<u64>> {
        let Some((be, bb)) = self.block() else { return Ok(None) };
        let first = dims.first().copied().unwrap_or(1);
        if first % be != 0 {
            return Err(Error(format!(
                "type {} stores blocks of {be} values, but the tensor's first dimension is {first}",
                self.name()
            )));
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error(format!("shape {dims:?} overflows")))?;
        (elements / be)
            .checked_mul(bb)
            .map(Some)
            .ok_or_else(|| Error(format!("shape {dims:?} of type {} overflows", self.name())))
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Dimensions in GGML order (fastest-varying first; MLX's shape is the reverse).
    pub dims: Vec<u64>,
    /// The storage type.
    pub ggml_type: GgmlType,
    /// Where its data starts, from the start of the file.
    pub start: u64,
    /// Bytes of data (`None` for types famlx cannot size, which it cannot read either).
    pub nbytes: Option<u64>,
}

impl TensorInfo {
    /// The shape as MLX orders it (slowest-varying first).
    pub fn shape(&self) -> Vec<i32> {
        // Each dimension was checked to fit an i32 when parsed.
        self.dims.iter().rev().map(|&d| d as i32).collect()
    }

    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}
