//! The Granite plugin's families (granite, granitemoe) against mlx-lm, and
//! the configs each refuses.

use super::olmo::refused;
use crate::families::parity::parity_in;

#[test]
fn granite_f32() {
    parity_in("granite-f32", "granite");
}

#[test]
fn granitemoe_f32() {
    parity_in("granitemoe-f32", "granitemoe");
}

/// Router, o_proj and the experts' down_proj at 8 bits, as mlx-lm's predicate.
#[test]
fn granitemoe_q4() {
    parity_in("granitemoe-q4", "granitemoe");
}

/// An activation granite does not implement is refused naming it.
#[test]
fn granite_refuses_an_unknown_activation() {
    refused("granite-f32", |c| drop(c.insert("hidden_act".into(), "relu2".into())), &["hidden_act", "relu2"]);
}

/// A rope scaling granitemoe does not implement is refused naming it.
#[test]
fn granitemoe_refuses_an_unknown_rope_scaling() {
    refused(
        "granitemoe-f32",
        |c| drop(c.insert("rope_scaling".into(), serde_json::json!({"rope_type": "dynamic", "factor": 4.0}))),
        &["rope_scaling", "dynamic"],
    );
}
