//! The gemma4 family's weight-name rules, one name at a time: Hugging Face
//! names to mlx-lm's, fused experts split, towers and unused tensors
//! dropped (the numerics of the same rules: tests/it/families/gemma4/parity.rs), and which
//! token ids count as media.

use crate::common;

use common::names::{config, fixture_plan, rewritten, zeros};
use famlx_gemma4::Gemma4Family;
use plugin_api::family::Family;

#[test]
fn gemma4_rewrite_renames_splits_experts_and_drops_towers() {
    let _g = crate::common::mlx_lock();
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
    for dropped in ["model.embed_audio.weight", "model.language_model.layers.0.self_attn.rotary_emb.inv_freq"] {
        assert!(rewritten(&f, &plan, dropped, zeros(&[2])).is_empty(), "{dropped} kept");
    }
}

/// With a vision tower in the config, its tensors move to mlx-vlm's names
/// (clip bounds kept where the tower clips); without one they are dropped.
#[test]
fn gemma4_vision_tensors_follow_mlx_vlm_names() {
    let _g = crate::common::mlx_lock();
    let f = Gemma4Family;
    let plan = fixture_plan(&f, "gemma4-vision-hf-f32");
    let q = "model.vision_tower.encoder.layers.0.self_attn.q_proj";
    assert_eq!(
        rewritten(&f, &plan, &format!("{q}.linear.weight"), zeros(&[48, 32])),
        [("vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight".to_string(), vec![48, 32])]
    );
    assert_eq!(
        rewritten(&f, &plan, &format!("{q}.input_max"), zeros(&[])),
        [("vision_tower.encoder.layers.0.self_attn.q_proj.input_max".to_string(), vec![])]
    );
    assert_eq!(
        rewritten(&f, &plan, "model.embed_vision.embedding_projection.weight", zeros(&[64, 32])),
        [("embed_vision.embedding_projection.weight".to_string(), vec![64, 32])]
    );
    assert!(rewritten(&f, &plan, "model.vision_tower.rotary_emb.inv_freq", zeros(&[2])).is_empty());
    assert_eq!(
        f.quant_class(&config(&f, &plan), &plan, "vision_tower.encoder.layers.0.mlp.up_proj.linear.weight"),
        plugin_api::QuantClass::Skip
    );
    let text_only = fixture_plan(&f, "gemma4-e2b-bf16");
    assert!(rewritten(&f, &text_only, "model.vision_tower.encoder.weight", zeros(&[2])).is_empty());
}

/// A `vision_config` that leaves fields out gets the reference's defaults
/// (mlx-vlm's Gemma4VisionConfig: the E2B/E4B tower), as mlx-vlm reads it;
/// a field present but of the wrong type is an error naming it.
#[test]
fn gemma4_vision_config_defaults_as_the_reference() {
    use famlx_gemma4::vision::VisionConfig;
    let c = VisionConfig::parse(&serde_json::json!({"vision_config": {"model_type": "gemma4_vision"}}))
        .expect("parse")
        .expect("a vision config");
    assert_eq!(
        (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads),
        (768, 3072, 16, 12, 12)
    );
    assert_eq!((c.head_dim, c.patch_size, c.pooling_kernel_size, c.position_embedding_size), (64, 16, 3, 10240));
    let e = VisionConfig::parse(&serde_json::json!({"vision_config": {"hidden_size": "wide"}})).unwrap_err();
    assert!(e.to_string().contains("hidden_size"), "{e}");
    assert!(VisionConfig::parse(&serde_json::json!({"vision_config": null})).expect("parse").is_none());
}

/// The token ids whose prompt tokens read the pad token's per-layer input:
/// the config's image, audio and video ids, an absent one at mlx-vlm's
/// default for the model type, a null one none; none for text checkpoints.
#[test]
fn media_ids_take_mlx_vlms_defaults_per_model_type() {
    use famlx_gemma4::media::media_ids;
    use serde_json::json;
    let ids = |c| media_ids(&c).unwrap();
    assert_eq!(
        ids(json!({"model_type": "gemma4", "image_token_id": 1, "video_token_id": 2, "audio_token_id": 3})),
        [1, 3, 2]
    );
    assert_eq!(ids(json!({"model_type": "gemma4"})), [258880, 258881]);
    assert_eq!(ids(json!({"model_type": "gemma4_unified"})), [258880, 258881, 258884]);
    assert_eq!(ids(json!({"model_type": "gemma4_unified", "video_token_id": null, "audio_token_id": null})), [258880]);
    assert!(ids(json!({"model_type": "gemma4_text", "image_token_id": 1})).is_empty());
    for bad in [json!(-1), json!("x"), json!(1.5), json!(1u64 << 40)] {
        let err = media_ids(&json!({"model_type": "gemma4", "video_token_id": bad})).unwrap_err().msg;
        assert!(err.contains("video_token_id") && !err.contains('\n'), "{err}");
    }
}
