//! Decoding GGUF tensor data into what MLX holds.
//!
//! Weight matrices of the block types MLX's affine quantization can hold
//! stay quantized (see [`super::affine`] for which are exact and which are
//! requantized); other block tensors are dequantized to float16. The block
//! layouts are in [`super::blocks`].

use super::affine::{self, Triple};
use super::blocks::{iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0};
use super::types::{GgmlType, PlainDtype, TensorInfo};
use crate::{Error, Result};
use half::f16;
use std::borrow::Cow;

/// One tensor, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded<'a> {
    /// Elements as MLX holds them (little-endian bytes of `dtype`).
    Plain {
        /// Element type.
        dtype: PlainDtype,
        /// The elements' bytes.
        bytes: Cow<'a, [u8]>,
    },
    /// MLX affine quantization with groups of 32 (see [`Triple`]).
    Affine(Triple),
    /// Dequantized values (float16 bits).
    F16(Vec<u16>),
}

pub(super) fn decode<'a>(t: &TensorInfo, data: &'a [u8]) -> Result<Decoded<'a>> {
    let ty = t.ggml_type;
    if let Some(dtype) = ty.plain() {
        if ty == GgmlType::F64 {
            let v: Vec<u8> = data
                .chunks_exact(8)
                .flat_map(|c| (f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).to_le_bytes())
                .collect();
            return Ok(Decoded::Plain { dtype, bytes: Cow::Owned(v) });
        }
        return Ok(Decoded::Plain { dtype, bytes: Cow::Borrowed(data) });
    }
    let (block_elems, block_bytes) =
        ty.block().ok_or_else(|| Error::new(format!("type {} is not readable", ty.name())))?;
    let (be, bb) = (block_elems as usize, block_bytes as usize);
    // Only weight matrices become MLX quantized triples (their scales and
    // biases are named after the weight); anything else is dequantized.
    if t.name.ends_with(".weight") {
        if let Some(t) = affine::convert(ty, data, bb, be) {
            return Ok(Decoded::Affine(t));
        }
    }
    let dequant: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q4_1 => q4_1,
        GgmlType::Q5_0 => q5_0,
        GgmlType::Q5_1 => q5_1,
        GgmlType::Q8_0 => q8_0,
        GgmlType::Q2_K => q2_k,
        GgmlType::Q3_K => q3_k,
        GgmlType::Q4_K => q4_k,
        GgmlType::Q5_K => q5_k,
        GgmlType::Q6_K => q6_k,
        GgmlType::IQ4_NL => iq4_nl,
        GgmlType::IQ4_XS => iq4_xs,
        other => return Err(Error::new(format!("type {} is not readable", other.name()))),
    };
    let mut out = Vec::with_capacity(data.len() / bb * be);
    let mut buf = vec![0f32; be];
    for block in data.chunks_exact(bb) {
        dequant(block, &mut buf);
        out.extend(buf.iter().map(|&x| f16::from_f32(x).to_bits()));
    }
    Ok(Decoded::F16(out))
}
