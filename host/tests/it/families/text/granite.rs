//! The Granite plugin's families (granite, granitemoe) against mlx-lm, and
//! the configs each refuses.

use super::refused;
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

/// Experts of an activation granitemoe does not implement are refused naming it.
#[test]
fn granitemoe_refuses_an_unknown_activation() {
    refused("granitemoe-f32", |c| drop(c.insert("hidden_act".into(), "gelu".into())), &["hidden_act", "gelu"]);
}

/// Granite-MoE as Hugging Face stores it (`input_linear`: every expert's
/// gate and up rows; `output_linear`: down) gives the logits of mlx-lm's
/// `switch_mlp` layout.
#[test]
fn granitemoe_reads_hugging_face_expert_names() {
    let gate_up = std::cell::RefCell::new(std::collections::HashMap::new());
    super::olmo::same_logits_in_layout("granitemoe-f32", |name, a| {
        if let Some(moe) = name.strip_suffix(".switch_mlp.down_proj.weight") {
            return vec![(format!("{moe}.output_linear.weight"), a)];
        }
        let Some((moe, part)) = name.split_once(".switch_mlp.") else { return vec![(name, a)] };
        // gate then up along the rows of each expert, whichever comes first.
        let mut seen = gate_up.borrow_mut();
        let Some(other) = seen.remove(moe) else {
            seen.insert(moe.to_string(), (part.to_string(), a));
            return vec![];
        };
        let (gate, up) = if part.starts_with("gate") { (a, other.1) } else { (other.1, a) };
        vec![(format!("{moe}.input_linear.weight"), mlx::concatenate(&[&gate, &up], 1).unwrap())]
    });
}

/// Biases the config declares are required: a checkpoint without them is
/// refused naming them, never run without.
#[test]
fn granite_requires_the_biases_its_config_declares() {
    refused("granite-f32", |c| drop(c.insert("mlp_bias".into(), true.into())), &["missing", "mlp.down_proj.bias"]);
}
