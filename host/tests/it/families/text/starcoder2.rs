//! The StarCoder2 plugin's family against mlx-lm, and a config it refuses.

use super::refused;
use crate::families::parity::parity_in;

#[test]
fn starcoder2_f32() {
    parity_in("starcoder2-f32", "starcoder2");
}

/// An activation starcoder2 does not implement is refused naming it.
#[test]
fn starcoder2_refuses_an_unknown_activation() {
    refused("starcoder2-f32", |c| drop(c.insert("hidden_act".into(), "relu".into())), &["hidden_act", "relu"]);
}

/// StarCoder2's MLP has biases: a checkpoint without one is refused.
#[test]
fn starcoder2_refuses_a_checkpoint_without_an_mlp_bias() {
    super::refused_without("starcoder2-f32", "model.layers.1.mlp.c_fc.bias");
}
