//! The exaone4 plugin's family against mlx-lm on its fixture, and a config
//! it refuses.

use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use serde_json::Value;

#[test]
fn exaone4_f32() {
    parity_in("exaone4-f32", "exaone4");
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

/// One line naming the field and the value it refuses.
fn assert_names(err: &str, field: &str, value: &str) {
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains(field) && err.contains(value), "does not name {field} = {value}: {err}");
}

#[test]
fn exaone4_refuses_an_unknown_layer_letter() {
    let e = refused_with("exaone4-f32", |c| c["sliding_window_pattern"] = "LX".into());
    assert_names(&e, "sliding_window_pattern", "LX");
}

#[test]
fn exaone4_refuses_an_unknown_rope_type() {
    let e = refused_with("exaone4-f32", |c| c["rope_scaling"]["rope_type"] = "dynamic".into());
    assert_names(&e, "rope_scaling", "dynamic");
}
