//! The gemma4 family's weight-name rules, one name at a time: Hugging Face
//! names to mlx-lm's, fused experts split, towers and unused tensors
//! dropped (the numerics of the same rules: tests/gemma4.rs).

mod common;

use common::names::{fixture_plan, rewritten, zeros};
use famlx_plugin_gemma4::Gemma4Family;

#[test]
fn gemma4_rewrite_renames_splits_experts_and_drops_towers() {
    let f = Gemma4Family;
    let plan = fixture_plan(&f, "gemma4-moe-hf-f32");
    let p = "model.language_model.layers.1";
    assert_eq!(
        rewritten(&f, &plan, &format!("{p}.self_attn.q_proj.weight"), zeros(&[8, 4])),
        [("language_model.model.layers.1.self_attn.q_proj.weight".to_string(), vec![8, 4])]
    );
    assert_eq!(
        rewritten(&f, &plan, &format!("{p}.experts.gate_up_proj"), zeros(&[4, 2 * 6, 8])),
        [
            ("language_model.model.layers.1.experts.switch_glu.gate_proj.weight".to_string(), vec![4, 6, 8]),
            ("language_model.model.layers.1.experts.switch_glu.up_proj.weight".to_string(), vec![4, 6, 8]),
        ]
    );
    assert_eq!(
        rewritten(&f, &plan, &format!("{p}.experts.down_proj"), zeros(&[4, 8, 6])),
        [("language_model.model.layers.1.experts.switch_glu.down_proj.weight".to_string(), vec![4, 8, 6])]
    );
    for dropped in [
        "model.vision_tower.encoder.weight",
        "model.embed_audio.weight",
        "model.language_model.layers.0.self_attn.rotary_emb.inv_freq",
    ] {
        assert!(rewritten(&f, &plan, dropped, zeros(&[2])).is_empty(), "{dropped} kept");
    }
}
