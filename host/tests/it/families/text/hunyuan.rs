//! The hunyuan plugin's family (`hunyuan_v1_dense`) against mlx-lm on its
//! fixture (q/k norms after the rope, NTK-alpha rope), and the configs it
//! refuses.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

#[test]
fn hunyuan_v1_dense_f32() {
    parity_in("hunyuan_v1_dense-f32", "hunyuan_v1_dense");
}

#[test]
fn hunyuan_v1_dense_refuses_an_unknown_activation() {
    let e = refused_with("hunyuan_v1_dense-f32", |c| c["hidden_act"] = "gelu".into());
    assert_names(&e, "hidden_act", "gelu");
}

#[test]
fn hunyuan_v1_dense_refuses_a_rope_scaling_without_alpha() {
    let e = refused_with("hunyuan_v1_dense-f32", |c| {
        c["rope_scaling"] = serde_json::json!({"type": "dynamic", "factor": 2.0})
    });
    assert_names(&e, "rope_scaling.alpha", "positive number");
}
