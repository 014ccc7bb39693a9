//! The cohere plugin's families (`cohere`, `cohere2`) against mlx-lm on
//! their fixtures, the configs they refuse, and Command R+'s q/k norms
//! under a tensor split.

use super::{assert_names, refused_with};
use crate::common::{distributed_lock, famlx, fixture, json_of};
use crate::families::parity::parity_in;

#[test]
fn cohere_f32() {
    parity_in("cohere-f32", "cohere");
}
#[test]
fn cohere2_f32() {
    parity_in("cohere2-f32", "cohere2");
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
