//! The qwen3_5 family's weight-name rules, one name at a time: Hugging
//! Face and converted names, experts split, convs moved, norms shifted,
//! vision tensors dropped (the numerics of the same rules: tests/it/families/qwen3_5/parity.rs).

use crate::common;

use common::names::{config, fixture_plan, rewritten, zeros};
use famlx_plugin_qwen3_5::names::canonical_name;
use famlx_plugin_qwen3_5::Qwen3_5Family;
use plugin_api::family::Family;

#[test]
fn qwen3_5_hugging_face_names_map_to_mlx_lm_names() {
    let c = canonical_name;
    assert_eq!(
        c("model.language_model.layers.3.self_attn.q_proj.weight"),
        Some(("language_model.model.layers.3.self_attn.q_proj.weight".into(), true))
    );
    assert_eq!(c("model.norm.weight"), Some(("language_model.model.norm.weight".into(), true)));
    assert_eq!(c("lm_head.weight"), Some(("language_model.lm_head.weight".into(), true)));
    assert_eq!(c("mtp.fc.weight"), Some(("language_model.mtp.fc.weight".into(), true)));
    assert_eq!(
        c("language_model.model.embed_tokens.weight"),
        Some(("language_model.model.embed_tokens.weight".into(), false))
    );
    assert_eq!(
        c("model.visual.blocks.0.attn.qkv.weight"),
        Some(("vision_tower.blocks.0.attn.qkv.weight".into(), true))
    );
    assert_eq!(c("vision_tower.patch_embed.proj.weight"), Some(("vision_tower.patch_embed.proj.weight".into(), false)));
    assert_eq!(c("model.visual.rotary_pos_emb.position_ids"), None);
    assert_eq!(c("something_else"), None);
}

#[test]
fn qwen3_5_rewrite_splits_experts_moves_convs_and_shifts_norms() {
    let _g = crate::common::mlx_lock();
    let f = Qwen3_5Family;
    let plan = fixture_plan(&f, "qwen3_5_moe-f32");
    let p = "model.language_model.layers.0";
    assert_eq!(
        rewritten(&f, &plan, &format!("{p}.mlp.experts.gate_up_proj"), zeros(&[4, 2 * 8, 16])),
        [
            ("language_model.model.layers.0.mlp.switch_mlp.gate_proj.weight".to_string(), vec![4, 8, 16]),
            ("language_model.model.layers.0.mlp.switch_mlp.up_proj.weight".to_string(), vec![4, 8, 16]),
        ]
    );
    assert_eq!(
        rewritten(&f, &plan, &format!("{p}.linear_attn.conv1d.weight"), zeros(&[32, 1, 4])),
        [("language_model.model.layers.0.linear_attn.conv1d.weight".to_string(), vec![32, 4, 1])]
    );
    // Zero-centred HF norms come out as 1 + w; converted ones are kept.
    let w = f.rewrite(&config(&f, &plan), &plan, &format!("{p}.input_layernorm.weight"), zeros(&[4])).unwrap();
    assert_eq!(w[0].1.to_vec::<f32>().unwrap(), [1.0; 4]);
    let cfg = config(&f, &plan);
    let w = f.rewrite(&cfg, &plan, "language_model.model.layers.0.input_layernorm.weight", zeros(&[4])).unwrap();
    assert_eq!(w[0].1.to_vec::<f32>().unwrap(), [0.0; 4]);
    // The vision tower: mlx-vlm's names, Conv3d weights moved to channels-last.
    let vl = fixture_plan(&f, "qwen3_5-vl-hf-f32");
    assert_eq!(
        rewritten(&f, &vl, "model.visual.patch_embed.proj.weight", zeros(&[32, 3, 2, 16, 16])),
        [("vision_tower.patch_embed.proj.weight".to_string(), vec![32, 2, 16, 16, 3])]
    );
    assert_eq!(
        rewritten(&f, &vl, "vision_tower.patch_embed.proj.weight", zeros(&[32, 2, 16, 16, 3])),
        [("vision_tower.patch_embed.proj.weight".to_string(), vec![32, 2, 16, 16, 3])]
    );
    assert_eq!(
        f.quant_class(&config(&f, &vl), &vl, "vision_tower.blocks.0.attn.qkv.weight"),
        plugin_api::QuantClass::Skip
    );
}
