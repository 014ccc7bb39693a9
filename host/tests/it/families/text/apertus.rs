//! The apertus plugin's family against mlx-lm on its fixture, and the
//! configs it refuses.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

#[test]
fn apertus_f32() {
    parity_in("apertus-f32", "apertus");
}

#[test]
fn apertus_refuses_an_unknown_activation() {
    let e = refused_with("apertus-f32", |c| c["hidden_act"] = "silu".into());
    assert_names(&e, "hidden_act", "silu");
}

#[test]
fn apertus_refuses_post_norm() {
    let e = refused_with("apertus-f32", |c| c["post_norm"] = true.into());
    assert_names(&e, "post_norm", "true");
}
