//! The seed_oss plugin's family against mlx-lm on its fixture, the configs
//! it refuses, and a checkpoint missing a bias its config implies. The
//! helpers here serve the other single-family plugins' tests too.

use super::{assert_names, refused_with};
use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

#[test]
fn seed_oss_f32() {
    parity_in("seed_oss-f32", "seed_oss");
}

#[test]
fn seed_oss_refuses_an_unknown_activation() {
    let e = refused_with("seed_oss-f32", |c| c["hidden_act"] = "gelu".into());
    assert_names(&e, "hidden_act", "gelu");
}

#[test]
fn seed_oss_refuses_an_unknown_rope_type() {
    let e =
        refused_with("seed_oss-f32", |c| c["rope_scaling"] = serde_json::json!({"rope_type": "wobbly", "factor": 2.0}));
    assert_names(&e, "rope_scaling", "wobbly");
}

/// A seed_oss checkpoint missing a q/k/v bias (`attention_bias`) is
/// refused, the tensor named, rather than loaded without it.
#[test]
fn seed_oss_checkpoint_without_a_bias_is_refused() {
    const GONE: &str = "model.layers.1.self_attn.k_proj.bias";
    let dir = Scratch::new("seed_oss-nobias");
    copy_dir(&fixture("seed_oss-f32"), dir.path());
    let _g = mlx_lock();
    let file = dir.path().join("model.safetensors");
    let (all, _) = mlx::io::load_safetensors(&file).unwrap();
    assert!(all.contains_key(GONE), "the fixture has {GONE}");
    let kept: Vec<(&str, &mlx::Array)> =
        all.iter().filter(|(k, _)| k.as_str() != GONE).map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&file, &kept, &[("format", "mlx")]).unwrap();
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    let err = match LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()) {
        Ok(_) => panic!("a seed_oss checkpoint without {GONE} loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains(GONE), "the error does not name {GONE}: {err}");
}
