//! The helium plugin's family against mlx-lm on its fixture, and the
//! configs it refuses.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

#[test]
fn helium_f32() {
    parity_in("helium-f32", "helium");
}

#[test]
fn helium_refuses_an_unknown_activation() {
    let e = refused_with("helium-f32", |c| c["hidden_act"] = "relu".into());
    assert_names(&e, "hidden_act", "relu");
}

#[test]
fn helium_refuses_a_head_dim_it_does_not_run() {
    let e = refused_with("helium-f32", |c| c["head_dim"] = 16.into());
    assert_names(&e, "head_dim", "16");
}
