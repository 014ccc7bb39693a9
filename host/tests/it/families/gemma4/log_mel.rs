//! gemma4's log-mel front end against mlx-vlm 0.7.10's feature extractor
//! (fixtures/make_gemma4_audio_features.py): a 1 s 440 Hz sine and a 3 s
//! chirp, read from their WAV files, within 1e-6, the same frame mask.

use crate::common;

use common::fixture;
use famlx::audio::load_audio;
use famlx_gemma4::audio_features::{log_mel, MEL_BINS};

#[test]
fn log_mel_matches_the_reference_extractor() {
    let _g = crate::common::mlx_lock();
    let (want, _) = mlx::io::load_safetensors(&fixture("audio").join("gemma4_log_mel.safetensors")).expect("fixture");
    for clip in ["sine440", "chirp"] {
        let a = load_audio(&fixture("audio").join(format!("{clip}.wav"))).unwrap_or_else(|e| panic!("{e:#}"));
        let got = log_mel(&a.samples);
        let diff = |key: &str| {
            let w = &want[&format!("{clip}.{key}")];
            assert_eq!(w.shape(), vec![got.frames() as i32, MEL_BINS as i32], "{clip}");
            let w = w.to_vec::<f32>().unwrap();
            got.features.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max)
        };
        // The reference's Hann window is NumPy's float32 cos, which famlx
        // computes as NumPy does (with the correctly rounded cosine instead,
        // quiet bins at the 1e-3 floor moved by up to 2.4e-4).
        let as_is = diff("features");
        println!("{clip}: max |diff| {as_is:.3e}");
        assert!(as_is <= 1e-6, "{clip}: max |diff| {as_is}");
        let m: Vec<bool> = want[&format!("{clip}.mask")].to_vec::<i32>().unwrap().iter().map(|&v| v != 0).collect();
        assert_eq!(got.mask, m, "{clip}");
    }
}

/// A clip whose last frame reaches into the padding (16,129 samples: 101
/// frames, the last masked and zero, as the reference gives); clips over
/// 30 s are cut there.
#[test]
fn padding_frames_are_masked_and_long_clips_cut() {
    let x: Vec<f32> = (0..16_129).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
    let m = log_mel(&x);
    assert_eq!(m.frames(), 101);
    assert!(m.mask[..100].iter().all(|&b| b) && !m.mask[100]);
    assert!(m.features[100 * MEL_BINS..].iter().all(|&v| v == 0.0));
    assert!(m.features[99 * MEL_BINS..100 * MEL_BINS].iter().any(|&v| v != 0.0));
    let long = vec![0.1f32; 40 * 16_000];
    assert_eq!(log_mel(&long).frames(), log_mel(&long[..480_000]).frames());
}
