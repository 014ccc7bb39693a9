//! The glm4 plugin's family against mlx-lm on its fixture, the configs it
//! refuses, and a checkpoint missing a bias its config implies.

use super::{assert_names, refused_with};
use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

#[test]
fn glm4_f32() {
    parity_in("glm4-f32", "glm4");
}

#[test]
fn glm4_refuses_an_unknown_activation() {
    let e = refused_with("glm4-f32", |c| c["hidden_act"] = "gelu".into());
    assert_names(&e, "hidden_act", "gelu");
}

#[test]
fn glm4_refuses_a_partial_rotary_factor_over_one() {
    let e = refused_with("glm4-f32", |c| c["partial_rotary_factor"] = 1.5.into());
    assert_names(&e, "partial_rotary_factor", "1.5");
}

/// A glm4 checkpoint missing a k bias its config implies is refused, the
/// tensor named, rather than loaded without it.
#[test]
fn glm4_checkpoint_without_a_bias_is_refused() {
    const GONE: &str = "model.layers.1.self_attn.k_proj.bias";
    let dir = Scratch::new("glm4-nobias");
    copy_dir(&fixture("glm4-f32"), dir.path());
    let _g = mlx_lock();
    let file = dir.path().join("model.safetensors");
    let (all, _) = mlx::io::load_safetensors(&file).unwrap();
    assert!(all.contains_key(GONE), "the fixture has {GONE}");
    let kept: Vec<(&str, &mlx::Array)> =
        all.iter().filter(|(k, _)| k.as_str() != GONE).map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&file, &kept, &[("format", "mlx")]).unwrap();
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    let err = match LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()) {
        Ok(_) => panic!("a glm4 checkpoint without {GONE} loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains(GONE), "the error does not name {GONE}: {err}");
}
