//! The StableLM plugin's family against mlx-lm, and a config it refuses.

use super::refused;
use crate::families::parity::parity_in;

#[test]
fn stablelm_f32() {
    parity_in("stablelm-f32", "stablelm");
}

/// An activation stablelm does not implement is refused naming it.
#[test]
fn stablelm_refuses_an_unknown_activation() {
    refused("stablelm-f32", |c| drop(c.insert("hidden_act".into(), "gelu".into())), &["hidden_act", "gelu"]);
}
