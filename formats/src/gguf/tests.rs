use super::write::Writer;
use super::*;

fn small() -> Writer {
    let mut w = Writer::new();
    w.meta("general.architecture", MetaValue::Str("llama".into()))
        .meta("llama.block_count", MetaValue::Ints(vec![2]))
        .meta("tokenizer.ggml.tokens", MetaValue::Strs(vec!["a".into(), "b".into()]))
        .tensor(
            "token_embd.weight",
            &[4, 2],
            GgmlType::F32,
            (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect(),
        );
    w
}

fn err(bytes: &[u8]) -> String {
    match parse(bytes) {
        Ok(l) => panic!("parsed: {l:?}"),
        Err(e) => e.0,
    }
}

/// Overwrites the little-endian u64 at `at`.
fn patch_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn reads_what_the_writer_wrote() {
    let g = Gguf::from_vec(small().to_bytes()).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.metadata["llama.block_count"], MetaValue::Ints(vec![2]));
    assert_eq!(g.tensors.len(), 1);
    let t = &g.tensors[0];
    assert_eq!(t.shape(), [2, 4]);
    match g.decode(t).unwrap() {
        Decoded::Plain { dtype: PlainDtype::F32, bytes } => assert_eq!(&bytes[4..8], &1f32.to_le_bytes()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn huge_counts_are_refused_before_any_allocation() {
    let good = small().to_bytes();
    for (at, what) in [(8, "tensors"), (16, "metadata entries")] {
        for v in [1u64 << 62, u64::MAX, 1 << 40] {
            let mut b = good.clone();
            patch_u64(&mut b, at, v);
            let e = err(&b);
            assert!(e.contains(&v.to_string()) && e.contains(what), "{e}");
        }
    }
    // The first 64 bytes of a real file with a patched count, padded with zeros.
    let mut b = good[..64.min(good.len())].to_vec();
    b.resize(4096, 0);
    patch_u64(&mut b, 8, 1 << 62);
    assert!(err(&b).contains("tensors"));
}

#[test]
fn huge_string_and_array_lengths_are_refused() {
    let good = small().to_bytes();
    // The first key's length.
    let mut b = good.clone();
    patch_u64(&mut b, 24, 1 << 60);
    let e = err(&b);
    assert!(e.contains("metadata key 0") && e.contains("does not fit"), "{e}");
    // The vocabulary array's element count.
    let key = b"tokenizer.ggml.tokens";
    let at = good.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4 + 4;
    let mut b = good.clone();
    patch_u64(&mut b, at, 1 << 61);
    let e = err(&b);
    assert!(e.contains("tokenizer.ggml.tokens") && e.contains("array"), "{e}");
}

#[test]
fn tensor_table_is_checked() {
    let good = small().to_bytes();
    let name = b"token_embd.weight";
    let at = good.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    // Dimension count (u32) of a million.
    let mut b = good.clone();
    b[at..at + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
    let e = err(&b);
    assert!(e.contains("token_embd.weight") && e.contains("1000000 dimensions"), "{e}");
    // A dimension MLX cannot index.
    let mut b = good.clone();
    patch_u64(&mut b, at + 4, (1 << 32) + 256);
    let e = err(&b);
    assert!(e.contains("dimension 4294967552"), "{e}");
    // An unknown type.
    let mut b = good.clone();
    b[at + 20..at + 24].copy_from_slice(&77u32.to_le_bytes());
    assert!(err(&b).contains("unknown GGUF tensor type 77"));
    // Data offset past the end, and unaligned.
    let mut b = good.clone();
    patch_u64(&mut b, at + 24, 1 << 20);
    let e = err(&b);
    assert!(e.contains("token_embd.weight") && e.contains("past the end"), "{e}");
    let mut b = good.clone();
    patch_u64(&mut b, at + 24, 3);
    assert!(err(&b).contains("not a multiple of the alignment"));
}

#[test]
fn truncation_anywhere_is_an_error() {
    let good = small().to_bytes();
    for n in 0..good.len() {
        assert!(parse(&good[..n]).is_err(), "{n} bytes parsed");
    }
}

#[test]
fn empty_bad_magic_and_versions() {
    assert!(err(b"").contains("empty"));
    assert!(err(b"GGML\x03\x00\x00\x00").contains("not a GGUF"));
    let mut b = small().to_bytes();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(err(&b).contains("big-endian"));
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(err(&b).contains("version 1"));
}

#[test]
fn alignment_must_be_a_power_of_two() {
    let mut w = small();
    w.meta("general.alignment", MetaValue::Ints(vec![0]));
    assert!(err(&w.to_bytes()).contains("general.alignment"));
}

#[test]
fn duplicate_names_are_refused() {
    let mut w = small();
    w.tensor("token_embd.weight", &[2], GgmlType::F32, vec![0; 8]);
    assert!(err(&w.to_bytes()).contains("appears twice"));
    let mut w = small();
    w.meta("llama.block_count", MetaValue::Ints(vec![3]));
    assert!(err(&w.to_bytes()).contains("appears twice"));
}

#[test]
fn blocks_must_fill_the_first_dimension() {
    let mut w = Writer::new();
    w.tensor("x.weight", &[16, 2], GgmlType::Q4_0, vec![0; 36]);
    assert!(err(&w.to_bytes()).contains("blocks of 32"));
}

/// Random Q4_0 / Q4_1 / Q8_0 blocks: the affine triple MLX gets decodes to
/// the same values as GGML's formula.
#[test]
fn affine_triples_match_the_block_formulas() {
    let mut seed = 7u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u8
    };
    for (ty, bb) in [(GgmlType::Q4_0, 18), (GgmlType::Q4_1, 20), (GgmlType::Q8_0, 34)] {
        let blocks = 6;
        let mut data: Vec<u8> = (0..blocks * bb).map(|_| next()).collect();
        for blk in data.chunks_exact_mut(bb) {
            // Small finite f16 scales (and minimums).
            blk[0] = next();
            blk[1] = 0x2c;
            if ty == GgmlType::Q4_1 {
                blk[2] = next();
                blk[3] = 0xac;
            }
        }
        let t = TensorInfo {
            name: "m.weight".into(),
            dims: vec![64, 3],
            ggml_type: ty,
            start: 0,
            nbytes: Some(data.len() as u64),
        };
        let float = {
            let t2 = TensorInfo { name: "m.other".into(), ..t.clone() };
            match decode::decode(&t2, &data).unwrap() {
                Decoded::F16(v) => v,
                other => panic!("{other:?}"),
            }
        };
        let Decoded::Affine(affine::Triple { form, weight, scales, biases }) = decode::decode(&t, &data).unwrap()
        else {
            panic!("not affine")
        };
        let bits = form.bits;
        let per = 32 / bits as usize;
        for (i, &want) in float.iter().enumerate() {
            let q = (weight[i / per] >> (bits as usize * (i % per))) & ((1 << bits) - 1);
            let g = i / 32;
            let (s, b) = (scales[g], biases[g]);
            let got = half::f16::from_f32(q as f32 * s + b).to_f32();
            let want = half::f16::from_bits(want).to_f32();
            assert!((got - want).abs() <= want.abs() * 2e-3 + 1e-6, "{ty:?} value {i}: {got} vs {want}");
        }
    }
}
