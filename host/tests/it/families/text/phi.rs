//! The Phi plugin's families (phi, phimoe) against mlx-lm, and the configs
//! each refuses.

use super::olmo::refused;
use crate::families::parity::parity_in;

#[test]
fn phi_f32() {
    parity_in("phi-f32", "phi");
}

#[test]
fn phimoe_f32() {
    parity_in("phimoe-f32", "phimoe");
}

#[test]
fn phimoe_q4() {
    parity_in("phimoe-q4", "phimoe");
}

/// An activation phi does not implement is refused naming it.
#[test]
fn phi_refuses_an_unknown_activation() {
    refused("phi-f32", |c| drop(c.insert("hidden_act".into(), "relu".into())), &["hidden_act", "relu"]);
}

/// A rope type phimoe does not implement is refused naming it.
#[test]
fn phimoe_refuses_an_unknown_rope_type() {
    refused(
        "phimoe-f32",
        |c| drop(c["rope_scaling"].as_object_mut().unwrap().insert("type".into(), "yarn".into())),
        &["rope_scaling.type", "yarn"],
    );
}
