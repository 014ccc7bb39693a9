//! The exaone4 plugin's family against mlx-lm on its fixture, and a config
//! it refuses.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

#[test]
fn exaone4_f32() {
    parity_in("exaone4-f32", "exaone4");
}

#[test]
fn exaone4_refuses_an_unknown_layer_letter() {
    let e = refused_with("exaone4-f32", |c| c["sliding_window_pattern"] = "LX".into());
    assert_names(&e, "sliding_window_pattern", "LX");
}

#[test]
fn exaone4_refuses_an_unknown_rope_type() {
    let e = refused_with("exaone4-f32", |c| c["rope_scaling"]["rope_type"] = "not_a_rope".into());
    assert_names(&e, "rope_scaling", "not_a_rope");
}
