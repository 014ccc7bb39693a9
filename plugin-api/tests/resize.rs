//! `media::resize_bicubic` against Pillow: the vectors in
//! tests/data/resize_vectors.json come from `Image.resize(size, BICUBIC)`
//! (tests/data/make_resize_vectors.py); every byte must match.

use base64::Engine;
use plugin_api::media::resize_bicubic_rgb;

#[test]
fn matches_pillow_bicubic_bit_for_bit() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/resize_vectors.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let b64 = |v: &serde_json::Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
    let (w, h) = (doc["width"].as_u64().unwrap() as usize, doc["height"].as_u64().unwrap() as usize);
    let src = b64(&doc["rgb"]);
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 6);
    for c in cases {
        let (ow, oh) = (c["size"][0].as_u64().unwrap() as usize, c["size"][1].as_u64().unwrap() as usize);
        let want = b64(&c["rgb"]);
        let got = resize_bicubic_rgb(&src, w, h, ow, oh);
        let diffs = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(diffs, 0, "{w}x{h} -> {ow}x{oh}: {diffs} of {} bytes differ", want.len());
    }
}

#[test]
fn alpha_over_white_matches_pillow() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/resize_vectors.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let b64 = |v: &serde_json::Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
    let rgba = b64(&doc["over_white"]["rgba"]);
    let want = b64(&doc["over_white"]["rgb"]);
    let img = plugin_api::RawImage {
        width: 16,
        height: 16,
        rgb: rgba.chunks_exact(4).flat_map(|p| p[..3].to_vec()).collect::<Vec<u8>>().into(),
        alpha: rgba.chunks_exact(4).map(|p| p[3]).collect::<Vec<u8>>().into(),
    };
    assert_eq!(img.rgb_over_white(), want);
}
