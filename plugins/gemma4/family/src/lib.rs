//! The gemma4 family (Gemma 4 text models): config ([`config`]), layers
//! ([`layer`], [`moe`]), the model ([`model`]), weight-name rules and
//! registration.
//!
//! Serves `gemma4` (multimodal checkpoints: the text model under
//! `text_config`, vision/audio towers dropped) and `gemma4_text`. The text
//! model has sliding-window and global attention layers with their own head
//! dims, q/k norms and a scale-free v norm (attention scale 1), proportional
//! partial rope on global layers, K=V global attention where the config asks,
//! a GeGLU MLP between four norms per layer, a per-layer output scalar,
//! embedding scaling, final-logit soft-capping and tied embeddings. The
//! E2B/E4B variants add per-layer input embeddings and KV sharing: the last
//! `num_kv_shared_layers` layers own no K/V (and no cache slot) and attend
//! over the K/V of the last earlier layer of the same type. The 26B-A4B
//! style MoE block (`enable_moe_block`) runs routed experts beside the dense
//! MLP in every layer and sums the two branches. `gemma4_assistant`
//! checkpoints are drafters for speculative decoding ([`assistant`]).
//! Multimodal checkpoints take images ([`image`], [`vision`]) and, with an
//! `audio_config`, audio ([`audio`], [`audio_tower`]).

pub mod assistant;
pub mod audio;
pub mod audio_features;
pub mod audio_tower;
pub mod checkpoint;
mod clipped;
pub mod config;
pub mod image;
pub mod layer;
pub mod media;
pub mod model;
pub mod moe;
pub mod vision;

use audio_tower::AudioTower;
use checkpoint::{CheckpointConfig, Kind};
use media::{MediaTokens, Tower};
use mlx::nn::Weights;
use mlx::{Array, Error, Result};
use model::Gemma4Text;
use plugin_api::config::{eos_ids, field_or, text_config};
use plugin_api::layers::{gate_up_fusion, qkv_fusion};
use plugin_api::media::MediaInput;
use plugin_api::{CacheKind, Fusion, ModelInfo, ModelPlan, QuantClass, QuantSpec, RawAudio, RawImage};
use plugin_api::{DraftRole, Drafter, Family, FamilyConfig, Model};
use serde_json::Value;
use vision::VisionTower;

/// Module prefixes of towers gemma4 checkpoints may carry that famlx does
/// not run (gemma4_unified's embedder has its own family).
const UNUSED_PREFIXES: [&str; 2] = ["multi_modal_projector", "vision_embedder"];

/// Module prefixes of the vision tower and its projector.
const VISION_PREFIXES: [&str; 2] = ["vision_tower.", "embed_vision."];

/// Module prefixes of the audio tower and its projector.
const AUDIO_PREFIXES: [&str; 2] = ["audio_tower.", "embed_audio."];

/// Tensor name fragments that carry no weights a runtime needs.
const DROPPED: [&str; 5] = ["self_attn.rotary_emb", "input_max", "input_min", "output_max", "output_min"];

/// The family registration.
pub struct Gemma4Family;

impl Family for Gemma4Family {
    type Config = CheckpointConfig;

    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["gemma4", "gemma4_text", assistant::MODEL_TYPE]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![
            ModelInfo::text("gemma4")
                .examples(&["google/gemma-4-E2B-it", "google/gemma-4-26b-a4b-it"])
                .sliding()
                .moe()
                .images()
                .audio(),
            ModelInfo::text("gemma4_text").sliding().moe(),
            ModelInfo::text(assistant::MODEL_TYPE).sliding(),
        ]
    }

    /// Parsed by hand: the text part may sit under `text_config`, and the
    /// media settings beside it.
    fn config(&self, raw: &Value) -> Result<CheckpointConfig> {
        let cfg = CheckpointConfig::parse(raw)?;
        cfg.check()?;
        Ok(cfg)
    }

    fn plan(&self, checkpoint: &CheckpointConfig, config: &Value) -> Result<ModelPlan> {
        let cfg = match &checkpoint.kind {
            Kind::Assistant(a) => return assistant::plan(a, config),
            Kind::Text(c) => c,
        };
        let mut stored = config.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization"));
        }
        let caches =
            (0..cfg.first_kv_shared() as usize)
                .map(|i| {
                    if cfg.full[i] {
                        CacheKind::Full
                    } else {
                        CacheKind::Sliding { window: cfg.sliding_window as u32 }
                    }
                })
                .collect();
        let mut eos = eos_ids(config);
        if eos.is_empty() {
            eos = eos_ids(text_config(config));
        }
        let dtype = field_or::<Option<String>>(config, "torch_dtype", None)?
            .or(field_or::<Option<String>>(text_config(config), "torch_dtype", None)?)
            .unwrap_or_else(|| "bfloat16".into());
        let plan = ModelPlan::text("gemma4", &cfg.model_type, &stored, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos)
            .with_context(cfg.max_position_embeddings.max(0) as u32)
            .with_dtype(&dtype)
            // Only the global layers' caches are quantized (sliding ones stay dense).
            .with_head_dims(&[cfg.head_dim_of(true)])
            // Gemma is trained with BOS first; the tokenizer adds it once.
            .with_bos(true);
        // A vision_config that does not describe a usable tower (e.g. a
        // stub beside text weights) leaves the model without images; an
        // audio_config that does not parse is an error.
        let image = checkpoint.image().ok().flatten();
        let audio = checkpoint.audio()?;
        let both_ways = image.as_ref().is_some_and(|i| i.bidirectional);
        Ok(match media::media_spec(image.map(|i| i.placeholders()), audio.map(|a| a.spec()), both_ways) {
            Some(spec) => plan.with_media(spec),
            None => plan,
        })
    }

    fn process_image(&self, cfg: &CheckpointConfig, _plan: &ModelPlan, image: &RawImage) -> Result<MediaInput> {
        let img = cfg.image()?.ok_or_else(|| Error::msg("this gemma4 checkpoint has no vision_config"))?;
        img.process(image)
    }

    fn process_audio(&self, cfg: &CheckpointConfig, _plan: &ModelPlan, audio: &RawAudio) -> Result<MediaInput> {
        let cfg = cfg.audio()?.ok_or_else(|| Error::msg("this gemma4 checkpoint has no audio_config"))?;
        cfg.process(audio)
    }

    fn rewrite(
        &self,
        checkpoint: &CheckpointConfig,
        plan: &ModelPlan,
        name: &str,
        t: Array,
    ) -> Result<Vec<(String, Array)>> {
        if plan.model_type.as_str() == assistant::MODEL_TYPE {
            if let Kind::Assistant(a) = &checkpoint.kind {
                return assistant::rewrite(a, name, t);
            }
        }
        let bare = name.strip_prefix("model.").unwrap_or(name);
        if VISION_PREFIXES.iter().any(|p| bare.starts_with(p)) {
            // Hugging Face's `model.vision_tower.X` is mlx-vlm's `vision_tower.X`;
            // clip bounds are kept only where the tower clips.
            let img = checkpoint.image().ok().flatten();
            let keep = match &img {
                None => false,
                Some(_) if name.contains("rotary_emb") => false,
                Some(i) if DROPPED[1..].iter().any(|d| name.contains(d)) => i.vision.use_clipped_linears,
                Some(_) => true,
            };
            return Ok(if keep { vec![(bare.to_string(), t)] } else { vec![] });
        }
        if AUDIO_PREFIXES.iter().any(|p| bare.starts_with(p)) {
            return rewrite_audio(checkpoint, bare, t);
        }
        let cfg = checkpoint.text();
        if UNUSED_PREFIXES.iter().any(|p| bare.starts_with(p)) || DROPPED.iter().any(|d| name.contains(d)) {
            return Ok(vec![]);
        }
        // Hugging Face naming (`model.language_model.X`) to mlx-lm's
        // (`language_model.model.X`); gemma4_text names stay as they are.
        let name = match name.strip_prefix("model.language_model.") {
            Some(rest) => format!("language_model.model.{rest}"),
            None => name.to_string(),
        };
        // Hugging Face keeps each layer's experts fused ([E, 2I, H] gate and
        // up stacked, [E, H, I] down); mlx-lm's naming splits them.
        if let Some(p) = name.strip_suffix(".experts.gate_up_proj") {
            let parts = t.split_at(&[t.dim(-2) / 2], -2)?;
            return Ok(vec![
                (format!("{p}.experts.switch_glu.gate_proj.weight"), parts[0].clone()),
                (format!("{p}.experts.switch_glu.up_proj.weight"), parts[1].clone()),
            ]);
        }
        if let Some(p) = name.strip_suffix(".experts.down_proj") {
            return Ok(vec![(format!("{p}.experts.switch_glu.down_proj.weight"), t)]);
        }
        // KV-shared layers own no K/V: drop projections a checkpoint may carry.
        if [".self_attn.k_proj", ".self_attn.v_proj", ".self_attn.k_norm"].iter().any(|s| name.contains(s)) {
            if let Some(i) =
                name.split("layers.").nth(1).and_then(|r| r.split('.').next()).and_then(|s| s.parse::<i32>().ok())
            {
                if i >= cfg.first_kv_shared() {
                    return Ok(vec![]);
                }
            }
        }
        Ok(vec![(name, t)])
    }

    fn quant_class(&self, _cfg: &CheckpointConfig, _plan: &ModelPlan, name: &str) -> QuantClass {
        if VISION_PREFIXES.iter().chain(&AUDIO_PREFIXES).any(|p| name.starts_with(p)) {
            // The towers stay in float, as mlx-vlm's converter keeps them.
            return QuantClass::Skip;
        }
        if name.ends_with("router.proj.weight") {
            // Routers stay at 8 bits, as mlx-lm's gemma4 quant_predicate keeps them.
            return QuantClass::Pinned(QuantSpec { group_size: 64, bits: 8, mode: "affine".into() });
        }
        if name.ends_with(".weight") && !name.contains("norm") {
            QuantClass::Body
        } else {
            QuantClass::Skip
        }
    }

    /// One matmul for gate/up in every layer's dense MLP.
    fn fusions(&self, checkpoint: &CheckpointConfig, _plan: &ModelPlan) -> Vec<Fusion> {
        let cfg = checkpoint.text();
        let p = format!("{}model", cfg.prefix());
        // q/k/v fuse where a layer has all three (not in K=V or KV-shared
        // layers: the host leaves a fusion with a missing part alone).
        (0..cfg.num_hidden_layers)
            .flat_map(|i| {
                let l = format!("{p}.layers.{i}");
                [qkv_fusion(&format!("{l}.self_attn")), gate_up_fusion(&format!("{l}.mlp"))]
            })
            .collect()
    }

    fn build(&self, checkpoint: &CheckpointConfig, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        let cfg = match &checkpoint.kind {
            Kind::Text(c) if plan.model_type.as_str() != assistant::MODEL_TYPE => c,
            _ => return Err(Error::msg("gemma4_assistant is a draft model: pass it with --draft-model")),
        };
        let model = Gemma4Text::load(cfg, w)?;
        // A multimodal checkpoint's prompt reads media ids as such even
        // where it takes no media (as mlx-vlm, which always builds the towers).
        let media_ids = checkpoint.media_ids()?;
        let Some(spec) = plan.media.as_ref().into_option() else {
            return Ok(Box::new(model.with_media(MediaTokens { media_ids, ..Default::default() }, None, None)));
        };
        let image = if spec.image.is_some() { checkpoint.image()? } else { None };
        let audio = if spec.audio.is_some() { checkpoint.audio()? } else { None };
        let tokens = MediaTokens {
            image_token_id: image.as_ref().map(|i| i.image_token_id),
            audio_token_id: audio.as_ref().map(|a| a.audio_token_id),
            media_ids,
            bidirectional_images: image.as_ref().is_some_and(|i| i.bidirectional),
        };
        let h = cfg.hidden_size;
        // Towers whose weights are absent stay unloaded: the host then
        // serves the other inputs with one warning line.
        let vision = match &image {
            Some(i) if VisionTower::present(&i.vision, w) => {
                Some(Box::new(VisionTower::load(&i.vision, w, h)?) as Box<dyn Tower>)
            }
            _ => None,
        };
        let audio_tower = match &audio {
            Some(a) if AudioTower::present(w) => Some(Box::new(AudioTower::load(&a.tower, w, h)?) as Box<dyn Tower>),
            _ => None,
        };
        Ok(Box::new(model.with_media(tokens, vision, audio_tower)))
    }

    fn build_drafter(
        &self,
        _role: DraftRole,
        checkpoint: &CheckpointConfig,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        target_w: &dyn Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        let Kind::Assistant(cfg) = &checkpoint.kind else { return Ok(None) };
        if plan.model_type.as_str() != assistant::MODEL_TYPE {
            return Ok(None);
        }
        Ok(Some(Box::new(assistant::Gemma4Assistant::load(cfg, w, target_plan, target_w)?)))
    }
}

/// An audio tower or projector tensor: Hugging Face's `model.` prefix gone
/// (already stripped into `name`), PyTorch conv layouts made MLX's
/// (`[out, in, kh, kw]` → `[out, kh, kw, in]`, `[out, in, k]` → `[out, k,
/// in]`) unless stored so already, as mlx-vlm's `sanitize` decides;
/// dropped when the checkpoint has no `audio_config`.
fn rewrite_audio(checkpoint: &CheckpointConfig, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
    let Some(audio) = checkpoint.audio()? else { return Ok(vec![]) };
    if name.contains("rotary_emb") {
        return Ok(vec![]);
    }
    let mut t = t;
    if name.contains("subsample_conv_projection") && name.ends_with("conv.weight") && t.ndim() == 4 {
        let expected_in = if name.contains(".layer0.") { 1 } else { audio.tower.conv_channels[0] };
        if t.dim(-1) != expected_in {
            t = t.transpose(&[0, 2, 3, 1])?;
        }
    }
    if name.ends_with("depthwise_conv1d.weight") && t.ndim() == 3 && t.dim(-1) != 1 {
        t = t.transpose(&[0, 2, 1])?;
    }
    Ok(vec![(name.to_string(), t)])
}
