//! `smollm3`, served by the llama plugin's family (Llama's decoder with
//! NoPE layers), against mlx-lm on its fixture, and a config it refuses.

use super::refused_with;
use crate::families::parity::parity_in;
use serde_json::json;

#[test]
fn smollm3_f32() {
    parity_in("smollm3-f32", "llama");
}

#[test]
fn smollm3_refuses_no_rope_layers_of_the_wrong_length() {
    let e = refused_with("smollm3-f32", |c| c["no_rope_layers"] = json!([1, 0, 1]));
    assert_eq!(e.lines().count(), 1, "not one line: {e}");
    assert!(e.contains("no_rope_layers") && e.contains("3 entries"), "does not name no_rope_layers: {e}");
}
