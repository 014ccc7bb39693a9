//! gemma4_unified (its own plugin, on the gemma4 family's library) against
//! mlx-vlm 0.7.10 (fixtures/make_gemma4_audio_fixtures.py): the image
//! processor's 48-pixel patches and positions, the embedders' rows for an
//! image and two clips, and the expanded ids, first-step logits and 24
//! greedy tokens of a text, an image, an audio and an image + audio prompt.

use crate::common;

use common::parity::{check_greedy, floats};
use common::vision::{generate, max_abs_diff};
use common::{expected, fixture, ids, mlx_lock, registry, Scratch};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use famlx::prompt::{load_audio_clips, load_images};

const VARIANT: &str = "gemma4_unified-f32";

fn load() -> LoadedModel {
    LoadedModel::load(&fixture(VARIANT), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{VARIANT}: load: {e:#}"))
}

#[test]
fn served_by_its_own_plugin() {
    let _g = mlx_lock();
    let m = load();
    assert_eq!(m.family.name, "gemma4_unified");
    let mods: Vec<&str> = m.plan.modalities.iter().map(|s| s.as_str()).collect();
    assert_eq!(mods, ["text", "image", "audio"]);
}

#[test]
fn image_patches_match_mlx_vlm() {
    let _g = mlx_lock();
    let m = load();
    let (want, _) = mlx::io::load_safetensors(&fixture(VARIANT).join("processor_outputs.safetensors")).unwrap();
    let img = load_images(&m, &[fixture("images").join("portrait.png")]).unwrap();
    let p = &img[0].processed;
    let got = p.pixels.to_array();
    let w = &want["portrait.pixel_values"];
    assert_eq!(got.shape(), w.shape(), "pixel_values shape");
    let d = max_abs_diff(&got.to_vec::<f32>().unwrap(), &w.to_vec::<f32>().unwrap());
    assert!(d <= 1e-6, "patches differ from mlx-vlm's by {d}");
    let pos = p.extra[0].to_array();
    assert_eq!(pos.to_vec::<i32>().unwrap(), want["portrait.image_position_ids"].to_vec::<i32>().unwrap());
    assert_eq!(p.tokens as i32, want["portrait.num_soft_tokens"].to_vec::<i32>().unwrap()[0]);
}

/// The embedders' rows against mlx-vlm's (`embed_vision` / `embed_audio`
/// outputs), 1e-5 of the largest row value.
#[test]
fn embedder_rows_match_mlx_vlm() {
    let _g = mlx_lock();
    let mut m = load();
    let (want, _) = mlx::io::load_safetensors(&fixture(VARIANT).join("audio_features.safetensors")).unwrap();
    let img = load_images(&m, &[fixture("images").join("portrait.png")]).unwrap();
    let clips = load_audio_clips(&m, &["sine440", "chirp"].map(|s| fixture("audio").join(format!("{s}.wav")))).unwrap();
    let mut rows = m.embed_images(vec![img[0].processed.clone()]).unwrap();
    rows.extend(m.embed_audio(clips.iter().map(|c| c.processed.clone()).collect()).unwrap());
    for (key, r) in ["portrait.embed_vision", "sine440.embed_audio", "chirp.embed_audio"].iter().zip(rows) {
        let w = want[*key].to_vec::<f32>().unwrap();
        let s = w.iter().fold(0f32, |a, x| a.max(x.abs()));
        let d = max_abs_diff(&r.to_vec::<f32>().unwrap(), &w);
        println!("{key}: max |diff| {d:.3e} of max |row| {s:.3}");
        assert!(d <= 1e-5 * s, "{key}: rows differ from mlx-vlm's by {d}");
    }
}

/// Every recorded prompt: expanded ids, placeholder counts, first-step
/// logits within 1e-4, 24 greedy tokens (images attend both ways without
/// audio, causally with it, as mlx-vlm's generate runs them).
#[test]
fn prompts_match_mlx_vlm() {
    let tmp = Scratch::new("g4u");
    let exp = expected(VARIANT);
    let mut failures = Vec::new();
    for p in exp["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let (got_ids, logits, j) = generate(&fixture(VARIANT), p, &tmp.path().join("l.json"), &[]);
        assert_eq!(got_ids, ids(&p["ids"]), "{name}: prompt ids");
        let sum = |k: &str| p[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum::<u64>();
        assert_eq!(j["audio_tokens"].as_u64(), Some(sum("num_audio_tokens")), "{name}: audio_tokens");
        assert_eq!(j["image_tokens"].as_u64(), Some(sum("num_soft_tokens")), "{name}: image_tokens");
        let d = max_abs_diff(&logits, &floats(&p["logits"]));
        println!("{name}: first-step logits max |diff| {d:.3e}");
        if d > 1e-4 {
            failures.push(format!("{name}: logits differ by {d}"));
        }
        // famlx stops at EOS; the reference's record runs on past it.
        let eos = ids(&exp["eos_token_id"]);
        let (ours, want) = (ids(&j["tokens"]), ids(&p["greedy"]));
        let n = if ours.last().is_some_and(|t| eos.contains(t)) { ours.len().min(want.len()) } else { want.len() };
        if let Err(e) = check_greedy(VARIANT, name, &ours, &want[..n], &floats(&p["greedy_margins"])[..n]) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
