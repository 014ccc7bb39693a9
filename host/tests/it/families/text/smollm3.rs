//! `smollm3`, served by the llama plugin's family (Llama's decoder with
//! NoPE layers), against mlx-lm on its fixture, and a config it refuses.

use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use serde_json::{json, Value};

#[test]
fn smollm3_f32() {
    parity_in("smollm3-f32", "llama");
}

/// The error loading a scratch copy of `variant` whose config `edit` changed.
fn refused_with(variant: &str, edit: impl FnOnce(&mut Value)) -> String {
    let dir = Scratch::new(variant);
    copy_dir(&fixture(variant), dir.path());
    let path = dir.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    let _g = mlx_lock();
    match LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()) {
        Ok(_) => panic!("{variant} with its config changed: loaded"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn smollm3_refuses_no_rope_layers_of_the_wrong_length() {
    let e = refused_with("smollm3-f32", |c| c["no_rope_layers"] = json!([1, 0, 1]));
    assert_eq!(e.lines().count(), 1, "not one line: {e}");
    assert!(e.contains("no_rope_layers") && e.contains("3 entries"), "does not name no_rope_layers: {e}");
}
