//! The gemma3 plugin's families (`gemma2`, `gemma3_text`, `gemma3`) against
//! mlx-lm on their fixtures, and the configs they refuse.

use super::{assert_names, refused_with};
use crate::common::parity::logit_steps;
use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use serde_json::{json, Value};

#[test]
fn gemma2_f32() {
    parity_in("gemma2-f32", "gemma2");
}
#[test]
fn gemma3_text_f32() {
    parity_in("gemma3_text-f32", "gemma3_text");
}
#[test]
fn gemma3_text_q4() {
    parity_in("gemma3_text-q4", "gemma3_text");
}
#[test]
fn gemma3_f32() {
    parity_in("gemma3-f32", "gemma3");
}

/// A multimodal checkpoint's vision tower and projector are dropped unread,
/// as mlx-lm's `sanitize` drops them: the text model loads, reads every
/// tensor left, and gives the logits it gives without them.
#[test]
fn gemma3_drops_the_vision_tower() {
    let dir = Scratch::new("gemma3-vision");
    copy_dir(&fixture("gemma3-f32"), dir.path());
    let file = dir.path().join("model.safetensors");
    let (mut tensors, _) = mlx::io::load_safetensors(&file).unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    let mut map: Value = serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    for name in ["vision_tower.vision_model.post_layernorm.weight", "multi_modal_projector.mm_soft_emb_norm.weight"] {
        tensors.insert(name.into(), mlx::ones(&[8], mlx::Dtype::F32).unwrap());
        map["weight_map"][name] = "model.safetensors".into();
    }
    let arrays: Vec<(&str, &mlx::Array)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&file, &arrays, &[("format", "mlx")]).unwrap();
    std::fs::write(&index, map.to_string()).unwrap();

    let _g = mlx_lock();
    let load = |p: &std::path::Path| LoadedModel::load(p, &registry(), None, CacheOptions::default()).unwrap();
    let mut with = load(dir.path());
    assert!(with.weights.unread().is_empty(), "unread: {:?}", with.weights.unread());
    assert_eq!(logit_steps(&mut with, 2), logit_steps(&mut load(&fixture("gemma3-f32")), 2));
}

#[test]
fn gemma2_refuses_an_unknown_activation() {
    let e = refused_with("gemma2-f32", |c| c["hidden_activation"] = "relu".into());
    assert_names(&e, "hidden_activation", "relu");
}

#[test]
fn gemma3_text_refuses_an_unknown_rope_type() {
    let e = refused_with("gemma3_text-f32", |c| c["rope_scaling"] = json!({"rope_type": "not_a_rope", "factor": 2.0}));
    assert_names(&e, "rope_scaling", "not_a_rope");
}

#[test]
fn gemma3_refuses_an_unknown_activation_in_its_text_config() {
    let e = refused_with("gemma3-f32", |c| c["text_config"]["hidden_activation"] = "gelu".into());
    assert_names(&e, "text_config.hidden_activation", "gelu");
}
