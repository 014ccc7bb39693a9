//! famlx's RoPE and attention primitives on CPU streams are bit-equal to
//! MLX's own CPU path (its fallback graphs, which mlx-lm runs on CPU): each
//! case, in float32, bfloat16 and float16, is evaluated with the primitive and again with it switched off
//! (FAMLX_CPU_ROPE / FAMLX_CPU_SDPA = mlx, read per call), and every output
//! bit compared. Covers decode and prefill shapes, grouped-query heads,
//! non-contiguous views, causal / boolean / additive masks, sinks, partial
//! and traditional RoPE, custom frequencies and per-batch offsets.

mod common;

use mlx::fast::{self, Mask, RopeOffset};
use mlx::{random, Array, Dtype};

thread_local! {
    /// The dtype the cases run in.
    static DTYPE: std::cell::Cell<Dtype> = const { std::cell::Cell::new(Dtype::F32) };
}

fn normal(shape: &[i32]) -> Array {
    let a = random::normal(shape, Dtype::F32, 0.0, 1.0, None).unwrap().astype(DTYPE.get()).unwrap();
    mlx::eval(&[&a]).unwrap();
    a
}

/// `f` with the primitive on and off: the same bits (see common).
fn same_bits(var: &str, primitive: &str, what: &str, f: impl Fn() -> Array) {
    common::same_bits_as_mlx(var, primitive, common::on_cpu(), what, f);
}

fn rope_cases() {
    let rope = |x: &Array, dims: i32, trad: bool, base: Option<f32>, scale: f32, off: i32, freqs: Option<&Array>| {
        let what = format!(
            "rope {:?} {:?} dims {dims} traditional {trad} base {base:?} scale {scale} offset {off}",
            x.dtype(),
            x.shape()
        );
        same_bits("FAMLX_CPU_ROPE", "FamlxCpuRope", &what, || {
            fast::rope(x, dims, trad, base, scale, RopeOffset::Int(off), freqs).unwrap()
        });
    };
    let decode = normal(&[1, 9, 1, 64]);
    rope(&decode, 64, false, Some(100000.0), 1.0, 37, None);
    let prefill = normal(&[1, 9, 128, 64]);
    rope(&prefill, 64, false, Some(10000.0), 1.0, 0, None);
    rope(&prefill, 64, true, Some(10000.0), 1.0, 5, None);
    rope(&prefill, 32, false, Some(10000.0), 0.5, 3, None);
    rope(&prefill, 32, true, Some(1e6), 1.0, 1000, None);
    // A transposed view, as attention layers pass it.
    let view = normal(&[1, 17, 4, 80]).transpose(&[0, 2, 1, 3]).unwrap();
    rope(&view, 80, false, Some(500000.0), 1.0, 9, None);
    // Custom frequencies (llama3-style scaling).
    let freqs = Array::from_slice(&(0..16).map(|i| 1.5f32.powi(i)).collect::<Vec<_>>(), &[16]).unwrap();
    rope(&normal(&[2, 3, 7, 32]), 32, false, None, 1.0, 4, Some(&freqs));
    // Three dimensions, and one offset per batch row.
    rope(&normal(&[2, 6, 16]), 16, false, Some(10000.0), 1.0, 2, None);
    let x = normal(&[2, 3, 5, 32]);
    let offs = Array::from_slice(&[3i32, 11], &[2]).unwrap();
    same_bits("FAMLX_CPU_ROPE", "FamlxCpuRope", "rope per-batch offsets", || {
        fast::rope(&x, 32, false, Some(10000.0), 1.0, RopeOffset::Array(&offs), None).unwrap()
    });
}

fn attention_cases() {
    let attn = |what: &str, q: &Array, k: &Array, v: &Array, mask: Mask<'_>, sinks: Option<&Array>| {
        let what = format!("{what} {:?}", q.dtype());
        same_bits("FAMLX_CPU_SDPA", "FamlxCpuAttention", &what, || {
            fast::scaled_dot_product_attention(q, k, v, 0.125, mask, sinks).unwrap()
        });
    };
    // Decode: one query, grouped-query heads, keys not a multiple of 16.
    let (q, k, v) = (normal(&[1, 9, 1, 64]), normal(&[1, 3, 37, 64]), normal(&[1, 3, 37, 64]));
    attn("decode", &q, &k, &v, Mask::None, None);
    attn("decode causal", &q, &k, &v, Mask::Causal, None);
    // Keys and values as views into a larger cache buffer.
    let (kb, vb) = (normal(&[1, 3, 64, 64]), normal(&[1, 3, 64, 64]));
    let (kv, vv) = (
        kb.slice(&[0, 0, 0, 0], &[1, 3, 40, 64], &[1, 1, 1, 1]).unwrap(),
        vb.slice(&[0, 0, 0, 0], &[1, 3, 40, 64], &[1, 1, 1, 1]).unwrap(),
    );
    attn("decode over cache views", &q, &kv, &vv, Mask::None, None);
    // Prefill, causal, and a chunk after earlier keys.
    let (q, k, v) = (normal(&[2, 4, 20, 32]), normal(&[2, 2, 20, 32]), normal(&[2, 2, 20, 32]));
    attn("prefill causal", &q, &k, &v, Mask::Causal, None);
    let (q, k, v) = (normal(&[1, 4, 5, 48]), normal(&[1, 4, 40, 48]), normal(&[1, 4, 40, 24]));
    attn("chunk causal, Dv != D", &q, &k, &v, Mask::Causal, None);
    // Boolean and additive masks, broadcast over heads.
    let keep = random::bernoulli(&Array::f32(0.7), &[1, 1, 5, 40], None).unwrap();
    attn("bool mask", &q, &k, &v, Mask::Array(&keep), None);
    let add = normal(&[1, 4, 5, 40]);
    attn("additive mask", &q, &k, &v, Mask::Array(&add), None);
    // Sinks.
    let sinks = normal(&[4]);
    attn("sinks", &q, &k, &v, Mask::Causal, Some(&sinks));
    // A non-contiguous query (the usual transpose) and head dim 80.
    let q = normal(&[1, 7, 6, 80]).transpose(&[0, 2, 1, 3]).unwrap();
    let (k, v) = (normal(&[1, 2, 7, 80]), normal(&[1, 2, 7, 80]));
    attn("transposed query", &q, &k, &v, Mask::Causal, None);
    // A head dim that is not a multiple of 16.
    let (q, k, v) = (normal(&[1, 2, 3, 40]), normal(&[1, 1, 21, 40]), normal(&[1, 1, 21, 40]));
    attn("head dim 40", &q, &k, &v, Mask::Causal, None);
}

#[test]
fn rope_and_attention_are_bit_equal_to_mlx() {
    // One test: the switches are environment variables of this process.
    for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
        DTYPE.set(dtype);
        rope_cases();
        attention_cases();
    }
}
