//! GGUF weight blocks as MLX affine triples (groups of 32: a value is
//! `q * scale + bias`, `q` packed little-endian `bits` at a time).
//!
//! Which types map how (docs/gguf.md has the table):
//! - **exact**: every value MLX computes equals the one `gguf-py` gives.
//!   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (one float16 scale per 32, so float16
//!   scales and biases), Q4_K and Q5_K (each 32-value sub-block's scale and
//!   minimum are a float16 times a 6-bit integer; their products need more
//!   than float16's 11 bits, so the scales and biases are float32).
//!   IQ4_NL (a fixed 16-value grid of integers in -127..113, times a
//!   float16 scale) as 8-bit integers `v + 127`, float32 scales.
//! - **near-exact**: Q2_K, Q3_K and Q6_K have sub-blocks of 16, finer than
//!   any group MLX has (32, 64, 128); each group of 32 is requantized to 8
//!   bits between its own minimum and maximum (float32 scale and bias), so
//!   a value moves by at most (max - min) / 510 of its group. IQ4_XS as
//!   IQ4_NL, within one float32 rounding (its scales are wider).

use super::blocks::{half_at, iq4_xs_scale, q2_k, q3_k, q5_high, q6_k, scale_min_k4, IQ4_VALUES};
use super::types::GgmlType;

/// Values per quantization group.
pub const GROUP: usize = 32;

/// The float type MLX holds a triple's scales and biases in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleType {
    /// float16 (every scale and bias is a float16 value).
    F16,
    /// float32.
    F32,
}

/// How a block type becomes an affine triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffineForm {
    /// Bits per value.
    pub bits: u32,
    /// What the scales and biases are held in.
    pub scales: ScaleType,
    /// True when MLX's values equal gguf-py's exactly; false when requantized.
    pub exact: bool,
}

/// The affine form of weights of type `ty`, `None` for types that are
/// dequantized instead.
pub fn form(ty: GgmlType) -> Option<AffineForm> {
    let (bits, scales, exact) = match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 => (4, ScaleType::F16, true),
        GgmlType::Q5_0 | GgmlType::Q5_1 => (5, ScaleType::F16, true),
        GgmlType::Q8_0 => (8, ScaleType::F16, true),
        GgmlType::Q4_K => (4, ScaleType::F32, true),
        GgmlType::Q5_K => (5, ScaleType::F32, true),
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q6_K => (8, ScaleType::F32, false),
        // The table's values plus 127 as 8-bit integers: exact for IQ4_NL;
        // IQ4_XS's scale has 17 significant bits, so `(v + 127) * scale`
        // may round by one float32 step before the bias takes 127 back.
        GgmlType::IQ4_NL => (8, ScaleType::F32, true),
        GgmlType::IQ4_XS => (8, ScaleType::F32, false),
        _ => return None,
    };
    Some(AffineForm { bits, scales, exact })
}

/// One group of 32 values: its integers and the scale and bias that map them.
#[derive(Clone, Copy)]
struct Group {
    q: [u8; GROUP],
    scale: f32,
    bias: f32,
}

impl Default for Group {
    fn default() -> Self {
        Group { q: [0; GROUP], scale: 0.0, bias: 0.0 }
    }
}

/// A tensor's packed values, scales and biases (scales and biases as f32;
/// for [`ScaleType::F16`] every one of them is a float16 value).
#[derive(Debug, Clone, PartialEq)]
pub struct Triple {
    /// The form the tensor was put in.
    pub form: AffineForm,
    /// Packed values, `bits` u32s per group, row-major.
    pub weight: Vec<u32>,
    /// One scale per group.
    pub scales: Vec<f32>,
    /// One bias per group.
    pub biases: Vec<f32>,
}

/// Converts a tensor's blocks (`data`, whole blocks of `block_bytes`).
pub fn convert(ty: GgmlType, data: &[u8], block_bytes: usize, block_elems: usize) -> Option<Triple> {
    let form = form(ty)?;
    let per_block = block_elems / GROUP;
    let blocks = data.len() / block_bytes;
    let groups = blocks * per_block;
    let mut t = Triple {
        form,
        weight: Vec::with_capacity(groups * form.bits as usize),
        scales: Vec::with_capacity(groups),
        biases: Vec::with_capacity(groups),
    };
    let mut buf = vec![Group::default(); per_block];
    let mut values = vec![0f32; block_elems];
    for block in data.chunks_exact(block_bytes) {
        match ty {
            GgmlType::Q4_0 => q4_0(block, &mut buf[0]),
            GgmlType::Q4_1 => q4_1(block, &mut buf[0]),
            GgmlType::Q5_0 => q5_0(block, &mut buf[0]),
            GgmlType::Q5_1 => q5_1(block, &mut buf[0]),
            GgmlType::Q8_0 => q8_0(block, &mut buf[0]),
            GgmlType::Q4_K => q4_k(block, &mut buf),
            GgmlType::Q5_K => q5_k(block, &mut buf),
            GgmlType::IQ4_NL => iq4_nl(block, &mut buf[0]),
            GgmlType::IQ4_XS => iq4_xs(block, &mut buf),
            _ => {
                let dequant = match ty {
                    GgmlType::Q2_K => q2_k,
                    GgmlType::Q3_K => q3_k,
                    _ => q6_k,
                };
                dequant(block, &mut values);
                for (g, v) in buf.iter_mut().zip(values.chunks_exact(GROUP)) {
                    requantize8(v, g);
                }
            }
        }
        for g in &buf {
            pack(&g.q, form.bits, &mut t.weight);
            t.scales.push(g.scale);
            t.biases.push(g.bias);
        }
    }
    Some(t)
}

/// Appends 32 values of `bits` bits as a little-endian bit stream of u32s
/// (value i at bit `bits * i`), the layout MLX's quantized kernels read.
fn pack(q: &[u8; GROUP], bits: u32, out: &mut Vec<u32>) {
    let mut acc = 0u64;
    let mut have = 0;
    for &v in q {
        acc |= (v as u64) << have;
        have += bits;
        if have >= 32 {
            out.push(acc as u32);
            acc >>= 32;
            have -= 32;
        }
    }
}

/// A float16 rounding of `x` (biases like -8d are float16 in the exact
/// float16 forms; `x` is exact there unless it overflows).
fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Q4_0 / Q4_1 nibbles: values 0..16 are the low nibbles, 16..32 the high.
fn nibbles(qs: &[u8], q: &mut [u8; GROUP]) {
    for j in 0..16 {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
}

fn q4_0(b: &[u8], g: &mut Group) {
    // value = (q - 8) d
    let d = half_at(b, 0);
    nibbles(&b[2..18], &mut g.q);
    (g.scale, g.bias) = (d, f16_round(-8.0 * d));
}

fn q4_1(b: &[u8], g: &mut Group) {
    nibbles(&b[4..20], &mut g.q);
    (g.scale, g.bias) = (half_at(b, 0), half_at(b, 2));
}

/// Q5_0 / Q5_1: nibbles as Q4, fifth bits from a 32-bit mask.
fn fives(qh: &[u8], qs: &[u8], q: &mut [u8; GROUP]) {
    let h = q5_high(qh);
    nibbles(qs, q);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((h >> j) & 1) << 4) as u8;
    }
}

fn q5_0(b: &[u8], g: &mut Group) {
    // value = (q - 16) d
    let d = half_at(b, 0);
    fives(&b[2..6], &b[6..22], &mut g.q);
    (g.scale, g.bias) = (d, f16_round(-16.0 * d));
}

fn q5_1(b: &[u8], g: &mut Group) {
    fives(&b[4..8], &b[8..24], &mut g.q);
    (g.scale, g.bias) = (half_at(b, 0), half_at(b, 2));
}

fn q8_0(b: &[u8], g: &mut Group) {
    // value = q d for signed q: stored unsigned (q + 128), bias -128d.
    let d = half_at(b, 0);
    for (v, &s) in g.q.iter_mut().zip(&b[2..34]) {
        *v = s ^ 0x80;
    }
    (g.scale, g.bias) = (d, f16_round(-128.0 * d));
}

/// Scale and bias of K-quant sub-block `j`, computed as gguf-py does
/// (`d * sc` and `-(dmin * m)` in float32, both exact there).
fn k_group(b: &[u8], j: usize, g: &mut Group) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let (sc, m) = scale_min_k4(j, &b[4..16]);
    (g.scale, g.bias) = (d * sc, -(dmin * m));
}

fn q4_k(b: &[u8], gs: &mut [Group]) {
    // d | dmin | scales[12] | qs[128]: 64 values per 32 bytes, the low
    // nibbles first.
    let qs = &b[16..144];
    for j in 0..4 {
        let q = &qs[32 * j..32 * j + 32];
        for (l, &v) in q.iter().enumerate() {
            gs[2 * j].q[l] = v & 0x0F;
            gs[2 * j + 1].q[l] = v >> 4;
        }
        k_group(b, 2 * j, &mut gs[2 * j]);
        k_group(b, 2 * j + 1, &mut gs[2 * j + 1]);
    }
}

fn q5_k(b: &[u8], gs: &mut [Group]) {
    // d | dmin | scales[12] | qh[32] | qs[128]: as Q4_K, the fifth bit of
    // sub-block i's value l is bit i of qh[l].
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for j in 0..4 {
        let q = &qs[32 * j..32 * j + 32];
        for (l, (&v, &h)) in q.iter().zip(qh).enumerate() {
            gs[2 * j].q[l] = (v & 0x0F) | (((h >> (2 * j)) & 1) << 4);
            gs[2 * j + 1].q[l] = (v >> 4) | (((h >> (2 * j + 1)) & 1) << 4);
        }
        k_group(b, 2 * j, &mut gs[2 * j]);
        k_group(b, 2 * j + 1, &mut gs[2 * j + 1]);
    }
}

/// IQ4 indices as 8-bit integers `table value + 127`, bias `-127 scale`.
fn iq4_group(qs: &[u8], scale: f32, g: &mut Group) {
    for j in 0..16 {
        g.q[j] = (IQ4_VALUES[(qs[j] & 0x0F) as usize] as i16 + 127) as u8;
        g.q[j + 16] = (IQ4_VALUES[(qs[j] >> 4) as usize] as i16 + 127) as u8;
    }
    (g.scale, g.bias) = (scale, -127.0 * scale);
}

fn iq4_nl(b: &[u8], g: &mut Group) {
    iq4_group(&b[2..18], half_at(b, 0), g);
}

fn iq4_xs(b: &[u8], gs: &mut [Group]) {
    for (ib, g) in gs.iter_mut().enumerate() {
        iq4_group(&b[8 + 16 * ib..8 + 16 * ib + 16], iq4_xs_scale(b, ib), g);
    }
}

/// 32 values on an 8-bit grid from their minimum to their maximum.
fn requantize8(v: &[f32], g: &mut Group) {
    let lo = v.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let scale = (hi - lo) / 255.0;
    g.bias = lo;
    if scale.is_nan() || scale <= 0.0 || !scale.is_finite() {
        // All equal (or not finite, which GGML blocks never hold): the bias
        // alone gives the value.
        g.scale = 0.0;
        g.q = [0; GROUP];
        return;
    }
    g.scale = scale;
    for (q, &x) in g.q.iter_mut().zip(v) {
        *q = ((x - lo) / scale).round().clamp(0.0, 255.0) as u8;
    }
}
