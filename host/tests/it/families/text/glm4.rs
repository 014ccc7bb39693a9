//! The glm4 plugin's family against mlx-lm on its fixture, the configs it
//! refuses, and a checkpoint missing a bias its config implies.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

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
    super::refused_without("glm4-f32", "model.layers.1.self_attn.k_proj.bias");
}
