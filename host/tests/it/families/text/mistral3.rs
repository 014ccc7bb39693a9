//! The mistral3 plugin's families (`mistral3`, `ministral3`, `mixtral`)
//! against mlx-lm on their fixtures, and the configs they refuse.

use super::{assert_names, refused_with};
use crate::common::parity::logit_steps;
use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use mlx::Array;
use serde_json::{json, Value};
use std::path::Path;

#[test]
fn mistral3_f32() {
    parity_in("mistral3-f32", "mistral3");
}
#[test]
fn mistral3_small_f32() {
    parity_in("mistral3-small-f32", "mistral3");
}
#[test]
fn ministral3_f32() {
    parity_in("ministral3-f32", "ministral3");
}
#[test]
fn mixtral_f32() {
    parity_in("mixtral-f32", "mixtral");
}
#[test]
fn mixtral_q4() {
    parity_in("mixtral-q4", "mixtral");
}

fn load(dir: &Path) -> LoadedModel {
    LoadedModel::load(dir, &registry(), None, CacheOptions::default()).unwrap_or_else(|e| panic!("load: {e:#}"))
}

fn read_config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

#[test]
fn mistral3_reads_newer_transformers_names() {
    // Newer transformers store a mistral3 text model as
    // `model.language_model.*` (and the head as `lm_head`); mlx-lm reads
    // them as `language_model.model.*`. The llama fixture's weights stored
    // so under a Mistral text config give the llama family's logits bit for
    // bit (mlx-lm runs a `mistral` text model as its llama model).
    let dir = Scratch::new("mistral3-llama");
    copy_dir(&fixture("llama-tied-f32"), dir.path());
    let (tensors, _) = mlx::io::load_safetensors(&dir.path().join("model.safetensors")).unwrap();
    let renamed: Vec<(String, Array)> =
        tensors.into_iter().map(|(n, t)| (n.replacen("model.", "model.language_model.", 1), t)).collect();
    let arrays: Vec<(&str, &Array)> = renamed.iter().map(|(k, v)| (k.as_str(), v)).collect();
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    mlx::io::save_safetensors(&dir.path().join("model.safetensors"), &arrays, &[("format", "pt")]).unwrap();
    let mut text = read_config(dir.path());
    text["model_type"] = "mistral".into();
    let config = json!({
        "model_type": "mistral3",
        "eos_token_id": text["eos_token_id"],
        "torch_dtype": "float32",
        "text_config": text,
    });
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let _g = mlx_lock();
    let mut wrapped = load(dir.path());
    assert_eq!(wrapped.family.name, "mistral3");
    let mut plain = load(&fixture("llama-tied-f32"));
    assert_eq!(logit_steps(&mut wrapped, 4), logit_steps(&mut plain, 4));
}

#[test]
fn mixtral_reads_experts_stored_one_by_one() {
    // Hugging Face's Mixtral checkpoints store each expert's w1 (gate), w3
    // (up) and w2 (down) apart; mlx-lm stacks them. The fixture unstacked
    // so gives the same logits bit for bit.
    let dir = Scratch::new("mixtral-hf");
    copy_dir(&fixture("mixtral-f32"), dir.path());
    let (tensors, _) = mlx::io::load_safetensors(&dir.path().join("model.safetensors")).unwrap();
    let mut out: Vec<(String, Array)> = Vec::new();
    for (name, t) in tensors {
        let Some((layer, proj)) = name.split_once(".block_sparse_moe.switch_mlp.") else {
            out.push((name, t));
            continue;
        };
        let hf = match proj {
            "gate_proj.weight" => "w1",
            "up_proj.weight" => "w3",
            "down_proj.weight" => "w2",
            other => panic!("unexpected expert tensor {other}"),
        };
        for e in 0..t.dim(0) {
            let one = t.slice_axis(0, e, e + 1).unwrap().reshape(&t.shape()[1..]).unwrap();
            out.push((format!("{layer}.block_sparse_moe.experts.{e}.{hf}.weight"), one));
        }
    }
    let arrays: Vec<(&str, &Array)> = out.iter().map(|(k, v)| (k.as_str(), v)).collect();
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    mlx::io::save_safetensors(&dir.path().join("model.safetensors"), &arrays, &[("format", "pt")]).unwrap();
    let _g = mlx_lock();
    let mut per_expert = load(dir.path());
    let mut stacked = load(&fixture("mixtral-f32"));
    assert_eq!(logit_steps(&mut per_expert, 4), logit_steps(&mut stacked, 4));
}

#[test]
fn mistral3_refuses_a_text_model_it_does_not_implement() {
    let e = refused_with("mistral3-f32", |c| c["text_config"]["model_type"] = "mistral4".into());
    assert_names(&e, "text_config.model_type", "mistral4");
}

#[test]
fn ministral3_refuses_an_unknown_rope_type() {
    let e = refused_with("ministral3-f32", |c| {
        c["rope_parameters"]["rope_type"] = "linear_v2".into();
        c["rope_parameters"]["type"] = "linear_v2".into();
    });
    assert_names(&e, "rope_parameters", "linear_v2");
}

#[test]
fn mixtral_refuses_an_unknown_activation() {
    let e = refused_with("mixtral-f32", |c| c["hidden_act"] = "gelu".into());
    assert_names(&e, "hidden_act", "gelu");
}

#[test]
fn ministral3_refuses_fp8_weights() {
    // Ministral 3's FP8 releases scale each weight by a `weight_scale_inv`
    // tensor; famlx reads no FP8, and says so rather than load raw bytes.
    let dir = Scratch::new("ministral3-fp8");
    copy_dir(&fixture("ministral3-f32"), dir.path());
    let file = dir.path().join("model.safetensors");
    let (mut tensors, _) = mlx::io::load_safetensors(&file).unwrap();
    let name = "model.layers.0.mlp.down_proj.weight_scale_inv";
    tensors.insert(name.into(), Array::f32(0.5));
    let arrays: Vec<(&str, &Array)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    mlx::io::save_safetensors(&file, &arrays, &[("format", "pt")]).unwrap();
    let _g = mlx_lock();
    let e = match LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()) {
        Ok(_) => panic!("an FP8 checkpoint loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert_names(&e, name, "FP8");
}
