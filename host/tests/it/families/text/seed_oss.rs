//! The seed_oss plugin's family against mlx-lm on its fixture, the configs
//! it refuses, and a checkpoint missing a bias its config implies. The
//! helpers here serve the other single-family plugins' tests too.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

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
    super::refused_without("seed_oss-f32", "model.layers.1.self_attn.k_proj.bias");
}
