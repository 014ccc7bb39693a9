//! The cohere plugin's families (`cohere`, `cohere2`) against mlx-lm on
//! their fixtures, the configs they refuse, and Command R+'s q/k norms
//! under a tensor split.

use crate::common::{copy_dir, distributed_lock, famlx, fixture, json_of, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use serde_json::Value;

#[test]
fn cohere_f32() {
    parity_in("cohere-f32", "cohere");
}
#[test]
fn cohere2_f32() {
    parity_in("cohere2-f32", "cohere2");
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
fn cohere_refuses_an_unknown_activation() {
    let e = refused_with("cohere-f32", |c| c["hidden_act"] = "gelu".into());
    assert_names(&e, "hidden_act", "gelu");
}

#[test]
fn cohere2_refuses_a_zero_sliding_window_pattern() {
    let e = refused_with("cohere2-f32", |c| c["sliding_window_pattern"] = 0.into());
    assert_names(&e, "sliding_window_pattern", "0");
}

/// Command R+'s per-head q/k norms split with the heads: two ranks of a
/// tensor split give the greedy tokens of one process.
#[test]
fn cohere_qk_norms_split_with_the_heads() {
    let _one = distributed_lock();
    let model = fixture("cohere-f32");
    let m = model.to_str().unwrap();
    let generate = ["generate", "--model", m, "--prompt", "The river ran past the mill", "-m", "12", "--json"];
    let alone = json_of(&famlx().args(generate).output().unwrap());
    let split = json_of(
        &famlx().args(["launch", "-n", "2", "--"]).args(generate).args(["--parallel", "tensor"]).output().unwrap(),
    );
    assert!(alone["tokens"].as_array().is_some_and(|t| t.len() == 12), "{alone}");
    assert_eq!(split["tokens"], alone["tokens"]);
}
