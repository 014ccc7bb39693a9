//! gemma4 image input against mlx-vlm 0.7.10 (fixtures/make_gemma4_vision_fixtures.py):
//! the image processor on three images (an RGB PNG, an RGBA PNG upscaled
//! 24x, an EXIF-rotated JPEG over the pixel budget), the vision tower's rows,
//! the expanded prompt ids, first-step logits and 24 greedy tokens with one
//! and two images, on the Hugging Face layout, mlx-vlm's f32 conversion and
//! its 4-bit conversion (tower kept in bf16).

use crate::common;

use common::parity::{check_greedy, check_logits, floats};
use common::vision::{generate, max_abs_diff};
use common::{expected, fixture, ids, Scratch};
use common::{mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use famlx::prompt::load_images;
use std::path::PathBuf;

const IMAGES: [&str; 3] = ["portrait", "tiny", "large"];

fn load(variant: &str) -> LoadedModel {
    LoadedModel::load(&fixture(variant), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{variant}: load: {e:#}"))
}

fn image_path(stem: &str) -> PathBuf {
    let file = if stem == "large" { "large.jpg".to_string() } else { format!("{stem}.png") };
    fixture("images").join(file)
}

#[test]
fn processor_matches_mlx_vlm() {
    let _g = mlx_lock();
    let m = load("gemma4-vision-f32");
    let (want, _) = mlx::io::load_safetensors(&fixture("gemma4-vision-hf-f32").join("processor_outputs.safetensors"))
        .expect("processor_outputs.safetensors");
    for stem in IMAGES {
        let img = load_images(&m, &[image_path(stem)]).unwrap_or_else(|e| panic!("{stem}: {e:#}"));
        let got = img[0].processed.pixels.to_array();
        let w = &want[&format!("{stem}.pixel_values")];
        assert_eq!(got.shape(), w.shape(), "{stem}: pixel_values shape");
        let d = max_abs_diff(&got.to_vec::<f32>().unwrap(), &w.to_vec::<f32>().unwrap());
        assert!(d <= 1e-5, "{stem}: pixel values differ from mlx-vlm's by up to {d}");
        let n = want[&format!("{stem}.num_soft_tokens")].to_vec::<i32>().unwrap()[0];
        assert_eq!(img[0].tokens() as i32, n, "{stem}: soft tokens");
    }
}

/// The rows the tower and projector give each image, against mlx-vlm's
/// `embed_vision` output (f32 checkpoints: 1e-5 relative to the largest
/// row value; the bf16 tower of the q4 checkpoint: a bf16 step).
#[test]
fn tower_rows_match_mlx_vlm() {
    let _g = mlx_lock();
    for (variant, tol) in [("gemma4-vision-hf-f32", 1e-5), ("gemma4-vision-f32", 1e-5), ("gemma4-vision-q4", 1e-2)] {
        let mut m = load(variant);
        let (want, _) =
            mlx::io::load_safetensors(&fixture(variant).join("vision_features.safetensors")).expect("vision_features");
        let imgs = load_images(&m, &IMAGES.map(image_path)).unwrap();
        let rows = m.embed_images(imgs.iter().map(|i| i.processed.clone()).collect()).unwrap();
        for (stem, r) in IMAGES.iter().zip(rows) {
            let w = want[&format!("{stem}.embed_vision")].to_vec::<f32>().unwrap();
            let got = r.astype(mlx::Dtype::F32).unwrap().to_vec::<f32>().unwrap();
            let scale = w.iter().fold(0f32, |a, x| a.max(x.abs()));
            let d = max_abs_diff(&got, &w);
            println!("{variant} {stem}: max |diff| {d:.3e} of max |row| {scale:.3}");
            assert!(d <= tol * scale, "{variant} {stem}: rows differ from mlx-vlm's by {d} (max |row| {scale})");
        }
    }
}

/// Every recorded prompt (text, one image, two images) on the three
/// checkpoints: expanded ids, first-step logits, 24 greedy tokens.
#[test]
fn prompts_match_mlx_vlm() {
    let tmp = Scratch::new("g4v");
    let mut failures = Vec::new();
    for variant in ["gemma4-vision-hf-f32", "gemma4-vision-f32", "gemma4-vision-q4"] {
        let exp = expected(variant);
        let f32_model = exp["activation_dtype"] == "float32";
        for p in exp["prompts"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            let (got_ids, logits, j) = generate(&fixture(variant), p, &tmp.path().join("l.json"), &[]);
            assert_eq!(got_ids, ids(&p["ids"]), "{variant}/{name}: prompt ids");
            let n_img: u64 = p["num_soft_tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum();
            assert_eq!(j["image_tokens"].as_u64(), Some(n_img), "{variant}/{name}: image_tokens");
            let tokens = ids(&j["tokens"]);
            let margins = floats(&p["greedy_margins"]);
            for r in [
                check_logits(variant, name, f32_model, &logits, &floats(&p["logits"])),
                check_greedy(variant, name, &tokens, &ids(&p["greedy"]), &margins),
            ] {
                if let Err(e) = r {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Without `use_bidirectional_attention` (as the E2B/E4B checkpoints) image
/// tokens attend causally: mlx-vlm's `*_causal` records.
#[test]
fn causal_image_attention_without_the_flag() {
    let tmp = Scratch::new("g4v-causal");
    let dir = tmp.path().join("model");
    common::copy_dir(&fixture("gemma4-vision-f32"), &dir);
    let cfg_path = dir.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["text_config"].as_object_mut().unwrap().remove("use_bidirectional_attention");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let exp = expected("gemma4-vision-f32");
    for p in exp["prompts"].as_array().unwrap().iter().filter(|p| p["name"] != "text") {
        let name = p["name"].as_str().unwrap();
        let (_, logits, j) = generate(&dir, p, &tmp.path().join("l.json"), &[]);
        check_logits("causal", name, true, &logits, &floats(&p["logits_causal"])).unwrap();
        check_greedy(
            "causal",
            name,
            &ids(&j["tokens"]),
            &ids(&p["greedy_causal"]),
            &floats(&p["greedy_causal_margins"]),
        )
        .unwrap();
    }
}
