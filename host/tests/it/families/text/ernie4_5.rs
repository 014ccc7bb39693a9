//! The ernie4_5 plugin's families (`ernie4_5`, `ernie4_5_moe`) against
//! mlx-lm on their fixtures, and the configs they refuse.

use super::seed_oss::{assert_names, refused_with};
use crate::families::parity::parity_in;

#[test]
fn ernie4_5_f32() {
    parity_in("ernie4_5-f32", "ernie4_5");
}
#[test]
fn ernie4_5_moe_f32() {
    parity_in("ernie4_5_moe-f32", "ernie4_5_moe");
}
#[test]
fn ernie4_5_moe_q4() {
    parity_in("ernie4_5_moe-q4", "ernie4_5_moe");
}

#[test]
fn ernie4_5_refuses_rope_scaling() {
    let e = refused_with("ernie4_5-f32", |c| c["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 2.0}));
    assert_names(&e, "rope_scaling", "set");
}

#[test]
fn ernie4_5_moe_refuses_an_unknown_gate_activation() {
    let e = refused_with("ernie4_5_moe-f32", |c| c["moe_gate_act"] = "tanh".into());
    assert_names(&e, "moe_gate_act", "tanh");
}

#[test]
fn ernie4_5_moe_refuses_more_experts_per_token_than_experts() {
    let e = refused_with("ernie4_5_moe-f32", |c| c["moe_k"] = 5.into());
    assert_names(&e, "moe_k", "5");
}
