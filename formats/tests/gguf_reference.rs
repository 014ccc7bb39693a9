//! Every GGUF block type famlx reads decodes to the values llama.cpp's own
//! `gguf` Python package gives (fixtures/gguf-quants, made by
//! fixtures/make_gguf_fixtures.py).

use famlx_formats::gguf::{affine, Decoded, GgmlType, Gguf, PlainDtype, ScaleType, GROUP};
use half::{bf16, f16};
use std::path::Path;

fn fixture(name: &str) -> Gguf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gguf-quants").join(name);
    Gguf::open(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// The decoded tensor's values as f32.
fn values(d: &Decoded) -> Vec<f32> {
    match d {
        Decoded::Plain { dtype, bytes } => match dtype {
            PlainDtype::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
            PlainDtype::BF16 => {
                bytes.chunks_exact(2).map(|c| bf16::from_le_bytes(c.try_into().unwrap()).to_f32()).collect()
            }
            other => panic!("unexpected {other:?}"),
        },
        Decoded::F16(v) => v.iter().map(|&b| f16::from_bits(b).to_f32()).collect(),
        Decoded::Affine(t) => {
            let bits = t.form.bits as usize;
            let mask = (1u64 << bits) - 1;
            (0..t.scales.len() * GROUP)
                .map(|i| {
                    // Value i of the little-endian bit stream of its group's u32s.
                    let (g, k) = (i / GROUP, (i % GROUP) * bits);
                    let words = &t.weight[g * bits..];
                    let pair = words[k / 32] as u64 | words.get(k / 32 + 1).map_or(0, |&w| (w as u64) << 32);
                    let q = (pair >> (k % 32)) & mask;
                    q as f32 * t.scales[g] + t.biases[g]
                })
                .collect()
        }
    }
}

#[test]
fn every_block_type_matches_gguf_py() {
    let (q, e) = (fixture("quants.gguf"), fixture("expected.gguf"));
    assert!(q.tensors.len() >= 26, "{} tensors", q.tensors.len());
    for t in &q.tensors {
        let want_t = e.tensors.iter().find(|x| x.name == t.name).unwrap();
        assert_eq!(t.shape(), want_t.shape(), "{}", t.name);
        let decoded = q.decode(t).unwrap();
        let got = values(&decoded);
        let want = values(&e.decode(want_t).unwrap());
        assert_eq!(got.len(), want.len(), "{}", t.name);
        // Every block type's weights become affine triples; other tensors
        // are dequantized to float16.
        let block = t.ggml_type.plain().is_none();
        let form = match &decoded {
            Decoded::Affine(a) => Some(a.form),
            _ => None,
        };
        assert_eq!(form.is_some(), block && t.name.ends_with(".weight"), "{}", t.name);
        assert_eq!(form, affine::form(t.ggml_type).filter(|_| t.name.ends_with(".weight")), "{}", t.name);
        for (g, (got, want)) in got.chunks(GROUP).zip(want.chunks(GROUP)).enumerate() {
            let lo = want.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = want.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (i, (g_, w)) in got.iter().zip(want).enumerate() {
                let tol = match form {
                    // Exact: the very float32 gguf-py computes.
                    Some(f) if f.exact => 0.0,
                    // IQ4_XS: one float32 rounding of `(v + 127) * scale`.
                    Some(_) if t.ggml_type == GgmlType::IQ4_XS => {
                        (w.abs() + 127.0 * (hi - lo) / 240.0) * 2.0f32.powi(-23)
                    }
                    // Requantized to 8 bits over the group's range: half a
                    // step (and float32's rounding of it).
                    Some(_) => (hi - lo) / 510.0 + w.abs() * 2.0f32.powi(-20) + 1e-6,
                    // Dequantized to float16: one float16 rounding.
                    None => w.abs() * 2.0f32.powi(-11) + 1e-7,
                };
                assert!((g_ - w).abs() <= tol, "{} group {g} value {i}: {g_} vs gguf-py {w}", t.name);
            }
        }
    }
}

#[test]
fn kquant_forms_are_the_documented_ones() {
    use famlx_formats::gguf::GgmlType as T;
    let exact = [T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::Q8_0, T::Q4_K, T::Q5_K, T::IQ4_NL];
    for t in exact {
        assert!(affine::form(t).unwrap().exact, "{}", t.name());
    }
    for t in [T::Q2_K, T::Q3_K, T::Q6_K] {
        let f = affine::form(t).unwrap();
        assert!(!f.exact && f.bits == 8, "{}", t.name());
    }
    // Exact K-quant scales need float32 (a float16 times a 6-bit integer).
    assert_eq!(affine::form(T::Q4_K).unwrap().scales, ScaleType::F32);
    assert_eq!(affine::form(T::Q4_0).unwrap().scales, ScaleType::F16);
}
