//! Every GGUF block type famlx reads decodes to the values llama.cpp's own
//! `gguf` Python package gives (fixtures/gguf-quants, made by
//! fixtures/make_gguf_fixtures.py).

use famlx_formats::gguf::{Decoded, Gguf, PlainDtype};
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
        Decoded::Affine { bits, weight, scales, biases } => {
            let per = 32 / *bits as usize;
            (0..weight.len() * per)
                .map(|i| {
                    let q = (weight[i / per] >> (*bits as usize * (i % per))) & ((1 << bits) - 1);
                    let (s, b) = (f16::from_bits(scales[i / 32]).to_f32(), f16::from_bits(biases[i / 32]).to_f32());
                    q as f32 * s + b
                })
                .collect()
        }
    }
}

#[test]
fn every_block_type_matches_gguf_py() {
    let (q, e) = (fixture("quants.gguf"), fixture("expected.gguf"));
    assert!(q.tensors.len() >= 15, "{} tensors", q.tensors.len());
    for t in &q.tensors {
        let want_t = e.tensors.iter().find(|x| x.name == t.name).unwrap();
        assert_eq!(t.shape(), want_t.shape(), "{}", t.name);
        let got = values(&q.decode(t).unwrap());
        let want = values(&e.decode(want_t).unwrap());
        assert_eq!(got.len(), want.len(), "{}", t.name);
        let affine = t.name.ends_with(".weight");
        assert_eq!(matches!(q.decode(t).unwrap(), Decoded::Affine { .. }), affine, "{}", t.name);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // One float16 rounding step (the k-quants and the affine biases
            // are stored in float16; gguf-py computes in float32).
            let tol = w.abs() * 2.0f32.powi(-10) + 1e-7;
            assert!((g - w).abs() <= tol, "{} value {i}: {g} vs gguf-py {w}", t.name);
        }
    }
}
