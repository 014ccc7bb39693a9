//! The internlm3 plugin's family against mlx-lm on its fixture (dynamic NTK
//! rope past `max_position_embeddings`), that rope over a batch whose rows
//! sit at different positions, and the configs it refuses.

use super::{assert_names, refused_with};
use crate::common::mlx_lock;
use crate::families::parity::parity_in;
use mlx::fast::RopeOffset;
use mlx::nn::{Rope, RopeScaling};
use mlx::{Array, Dtype};

#[test]
fn internlm3_f32() {
    parity_in("internlm3-f32", "internlm3");
}

/// Rows of a batch at their own positions rope each with the base its own
/// sequence implies: as the same rows roped one at a time.
#[test]
fn dynamic_ntk_rope_per_row_equals_one_row_at_a_time() {
    let _g = mlx_lock();
    let scaling = RopeScaling::Dynamic { factor: 6.0, max_position_embeddings: 32 };
    let rope = Rope::new(32, 5e7, false, &scaling).unwrap();
    let x = mlx::random::normal(&[3, 2, 4, 32], Dtype::F32, 0.0, 1.0, None).unwrap();
    // Row 0 stays within the context (plain base), rows 1 and 2 end past it.
    let offsets = [10, 30, 57];
    let batched = rope.forward(&x, RopeOffset::Array(&Array::from_slice(&offsets, &[3]).unwrap())).unwrap();
    for (b, &off) in offsets.iter().enumerate() {
        let row = x.slice_axis(0, b as i32, b as i32 + 1).unwrap();
        let want = rope.forward(&row, RopeOffset::Int(off)).unwrap().to_vec::<f32>().unwrap();
        let got = batched.slice_axis(0, b as i32, b as i32 + 1).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(got, want, "row {b} at offset {off}");
    }
    // Past the context the base has grown: not the plain rope's rotation.
    let plain = Rope::new(32, 5e7, false, &RopeScaling::None).unwrap();
    let row = x.slice_axis(0, 2, 3).unwrap();
    let grown = rope.forward(&row, RopeOffset::Int(57)).unwrap().to_vec::<f32>().unwrap();
    assert_ne!(grown, plain.forward(&row, RopeOffset::Int(57)).unwrap().to_vec::<f32>().unwrap());
}

#[test]
fn internlm3_refuses_a_rope_type_it_does_not_implement() {
    let e =
        refused_with("internlm3-f32", |c| c["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 2.0}));
    assert_names(&e, "rope_scaling", "yarn");
}

#[test]
fn internlm3_refuses_an_unknown_activation() {
    let e = refused_with("internlm3-f32", |c| c["hidden_act"] = "gelu".into());
    assert_names(&e, "hidden_act", "gelu");
}
