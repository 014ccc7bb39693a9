//! qwen3_5 (Qwen3.5 VL) image input against mlx-vlm 0.7.10
//! (fixtures/make_qwen3_5_vision_fixtures.py): the processor on three
//! images, the vision tower's pieces and rows, the M-RoPE positions, the
//! expanded ids, first-step logits and 24 greedy tokens (also with a
//! 16-token prefill that cuts images in two), on the Hugging Face layout,
//! mlx-vlm's f32 conversion and its 4-bit conversion (tower in bf16).

use crate::common;

use common::parity::{check_greedy, check_logits, floats};
use common::vision::{generate, max_abs_diff};
use common::{expected, fixture, ids, mlx_lock, registry, Scratch};
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

fn pixels(stem: &str) -> std::collections::HashMap<String, mlx::Array> {
    let p = fixture("qwen3_5-vl-hf-f32").join("pixels").join(format!("{stem}.safetensors"));
    mlx::io::load_safetensors(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).0
}

fn f32s(a: &mlx::Array) -> Vec<f32> {
    a.astype(mlx::Dtype::F32).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn processor_matches_mlx_vlm() {
    let _g = mlx_lock();
    let m = load("qwen3_5-vl-f32");
    for stem in IMAGES {
        let want = pixels(stem);
        let img = load_images(&m, &[image_path(stem)]).unwrap_or_else(|e| panic!("{stem}: {e:#}"));
        let got = img[0].processed.pixels.to_array();
        let w = &want["pixel_values"];
        assert_eq!(got.shape(), w.shape(), "{stem}: pixel_values shape");
        let d = max_abs_diff(&f32s(&got), &f32s(w));
        assert!(d <= 1e-5, "{stem}: pixel values differ from mlx-vlm's by up to {d}");
        let grid: Vec<i64> = want["image_grid_thw"].to_vec::<i64>().unwrap();
        assert_eq!(img[0].processed.grid.to_vec(), grid, "{stem}: grid");
    }
}

/// The tower's rows: f32 checkpoints against mlx-vlm's `image_features`.
#[test]
fn tower_rows_match_mlx_vlm() {
    let _g = mlx_lock();
    for variant in ["qwen3_5-vl-hf-f32", "qwen3_5-vl-f32"] {
        let mut m = load(variant);
        let imgs = load_images(&m, &IMAGES.map(image_path)).unwrap();
        let rows = m.embed_images(imgs.iter().map(|i| i.processed.clone()).collect()).unwrap();
        for (stem, r) in IMAGES.iter().zip(rows) {
            let w = f32s(&pixels(stem)["image_features"]);
            let scale = w.iter().fold(0f32, |a, x| a.max(x.abs()));
            let d = max_abs_diff(&f32s(&r), &w);
            println!("{variant} {stem}: max |diff| {d:.3e} of max |row| {scale:.3}");
            assert!(d <= 1e-5 * scale.max(1.0), "{variant} {stem}: rows differ from mlx-vlm's by {d}");
        }
    }
}

/// The M-RoPE positions of each recorded prompt and their delta.
#[test]
fn positions_match_mlx_vlm() {
    let _g = mlx_lock();
    let m = load("qwen3_5-vl-f32");
    for p in expected("qwen3_5-vl-f32")["prompts"].as_array().unwrap().iter().filter(|p| p["name"] != "text") {
        let paths: Vec<PathBuf> =
            p["images"].as_array().unwrap().iter().map(|i| fixture("images").join(i.as_str().unwrap())).collect();
        let imgs = load_images(&m, &paths).unwrap();
        let processed: Vec<_> = imgs.iter().map(|i| i.processed.clone()).collect();
        let (pos, delta) = m.positions(&ids(&p["ids"]), &processed).unwrap().expect("positions");
        let want: Vec<i32> = p["position_ids"].as_array().unwrap().iter().flat_map(ids).map(|v| v as i32).collect();
        assert_eq!(pos.to_vec::<i32>().unwrap(), want, "{}: positions", p["name"]);
        assert_eq!(delta, p["rope_delta"].as_i64().unwrap(), "{}: rope delta", p["name"]);
    }
}

/// Every recorded prompt on the three checkpoints: expanded ids, logits,
/// greedy tokens (text prompts stay on mlx-lm's numerics, within the f32
/// tolerance of mlx-vlm's), and greedy tokens with 16-token prefill chunks
/// that cut the images.
#[test]
fn prompts_match_mlx_vlm() {
    let tmp = Scratch::new("q35v");
    let mut failures = Vec::new();
    for variant in ["qwen3_5-vl-hf-f32", "qwen3_5-vl-f32", "qwen3_5-vl-q4"] {
        let exp = expected(variant);
        let f32_model = exp["activation_dtype"] == "float32";
        for p in exp["prompts"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            let (got_ids, logits, j) = generate(&fixture(variant), p, &tmp.path().join("l.json"), &[]);
            assert_eq!(got_ids, ids(&p["ids"]), "{variant}/{name}: prompt ids");
            assert_eq!(
                j["image_tokens"].as_u64(),
                p["image_tokens"].as_array().map(|a| a.iter().map(|v| v.as_u64().unwrap()).sum()).or(Some(0)),
                "{variant}/{name}: image_tokens"
            );
            let (_, _, j16) =
                generate(&fixture(variant), p, &tmp.path().join("l.json"), &["--prefill-step-size", "16"]);
            // Text stays on mlx-lm's numerics (as before images existed);
            // mlx-vlm's text path rounds its scan and rope differently, within
            // 1e-4 of ours in f32 (the mean bound of check_logits is for
            // identical kernels, so only the largest difference is checked).
            let logit_check = if name == "text" && f32_model {
                let d = max_abs_diff(&logits, &floats(&p["logits"]));
                if d <= 1e-4 {
                    Ok(())
                } else {
                    Err(format!("{variant}/text: logits differ by {d}"))
                }
            } else {
                check_logits(variant, name, f32_model, &logits, &floats(&p["logits"]))
            };
            for r in [
                logit_check,
                check_greedy(variant, name, &ids(&j["tokens"]), &ids(&p["greedy"]), &floats(&p["greedy_margins"])),
                check_greedy(
                    variant,
                    &format!("{name}/prefill16"),
                    &ids(&j16["tokens"]),
                    &ids(&p["greedy_prefill16"]),
                    &floats(&p["greedy_prefill16_margins"]),
                ),
            ] {
                if let Err(e) = r {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
