//! The gemma4_unified family: Gemma 4's text model and drafter (from the
//! gemma4 family's library, not a copy) with encoder-free media inputs
//! ([`embedders`]): images as 48-pixel patches (up to the processor's
//! budget, 280 by default), audio as 640 samples per token.
//!
//! As in mlx-vlm 0.7.10, image tokens attend within their image both ways
//! (`use_bidirectional_attention: "vision"`) in prompts without audio, and
//! causally in prompts with audio (whose prefill there is chunked, without
//! the image overlay).

pub mod embedders;

use embedders::{AudioEmbedder, UnifiedAudio, UnifiedVision, VisionEmbedder};
use famlx_gemma4::checkpoint::CheckpointConfig;
use famlx_gemma4::media::{media_spec, MediaTokens, Tower};
use famlx_gemma4::model::Gemma4Text;
use famlx_gemma4::Gemma4Family;
use mlx::nn::Weights;
use mlx::{Array, Error, Result};
use plugin_api::media::MediaInput;
use plugin_api::{DraftRole, Drafter, Family, FamilyConfig, Model};
use plugin_api::{Fusion, ModelInfo, ModelPlan, QuantClass, RawAudio, RawImage};
use serde_json::Value;

/// The checkpoint `model_type`.
pub const MODEL_TYPE: &str = "gemma4_unified";

/// Module prefixes of the embedders and projectors.
const MEDIA_PREFIXES: [&str; 3] = ["vision_embedder.", "embed_vision.", "embed_audio."];

/// The family registration.
pub struct Gemma4UnifiedFamily;

/// A unified checkpoint's config, parsed once per plan: gemma4's (the text
/// model) and the embedders' settings, kept as they parsed (the calls that
/// need them say why they do not).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(try_from = "Value")]
pub struct UnifiedConfig {
    /// The text model's config as gemma4 reads it.
    pub gemma4: CheckpointConfig,
    /// The image embedder's settings (`None`: no `vision_config`).
    pub vision: Result<Option<UnifiedVision>>,
    /// The audio embedder's settings (`None`: no `audio_config`).
    pub audio: Result<Option<UnifiedAudio>>,
    /// Whether the config has a `vision_config` object.
    pub has_vision_config: bool,
    /// Whether the config has an `audio_config` object.
    pub has_audio_config: bool,
}

impl UnifiedConfig {
    /// From config.json (with the processor's settings beside it).
    pub fn parse(c: &Value) -> Result<UnifiedConfig> {
        let section = |s: &str| c.get(s).is_some_and(Value::is_object);
        Ok(UnifiedConfig {
            gemma4: CheckpointConfig::parse(c)?,
            vision: UnifiedVision::parse(c),
            audio: UnifiedAudio::parse(c),
            has_vision_config: section("vision_config"),
            has_audio_config: section("audio_config"),
        })
    }

    fn vision(&self) -> Result<Option<&UnifiedVision>> {
        self.vision.as_ref().map(Option::as_ref).map_err(Clone::clone)
    }

    fn audio(&self) -> Result<Option<&UnifiedAudio>> {
        self.audio.as_ref().map(Option::as_ref).map_err(Clone::clone)
    }
}

impl TryFrom<Value> for UnifiedConfig {
    type Error = Error;
    fn try_from(v: Value) -> Result<UnifiedConfig> {
        UnifiedConfig::parse(&v)
    }
}

impl FamilyConfig for UnifiedConfig {
    fn check(&self) -> Result<()> {
        self.gemma4.check()
    }
}

impl Family for Gemma4UnifiedFamily {
    type Config = UnifiedConfig;

    fn name(&self) -> &'static str {
        "gemma4_unified"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &[MODEL_TYPE]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text(MODEL_TYPE).sliding().images().audio()]
    }

    /// Parsed by hand, as gemma4's.
    fn config(&self, raw: &Value) -> Result<UnifiedConfig> {
        let cfg = UnifiedConfig::parse(raw)?;
        cfg.check()?;
        Ok(cfg)
    }

    /// The text model's plan as gemma4 makes it, with the unified media.
    fn plan(&self, cfg: &UnifiedConfig, c: &Value) -> Result<ModelPlan> {
        let mut text = c.clone();
        if let Some(o) = text.as_object_mut() {
            o.remove("vision_config");
            o.remove("audio_config");
        }
        // gemma4's media settings stay out of the text model's plan.
        let text_cfg = CheckpointConfig { image: Ok(None), audio: Ok(None), ..cfg.gemma4.clone() };
        let mut plan = Gemma4Family.plan(&text_cfg, &text)?;
        plan.family = "gemma4_unified".into();
        let mut stored = c.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization"));
        }
        plan.config = serde_json::to_string(&stored).map_err(|e| Error::msg(format!("config: {e}")))?.into();
        let vision = cfg.vision()?;
        let audio = cfg.audio()?;
        let both_ways = vision.as_ref().is_some_and(|v| v.image.bidirectional);
        Ok(match media_spec(vision.map(|v| v.placeholders()), audio.map(|a| a.placeholders()), both_ways) {
            Some(spec) => plan.with_media(spec),
            None => plan,
        })
    }

    fn process_image(&self, cfg: &UnifiedConfig, _plan: &ModelPlan, image: &RawImage) -> Result<MediaInput> {
        cfg.vision()?.ok_or_else(|| Error::msg("this gemma4_unified checkpoint has no vision_config"))?.process(image)
    }

    fn process_audio(&self, cfg: &UnifiedConfig, _plan: &ModelPlan, audio: &RawAudio) -> Result<MediaInput> {
        cfg.audio()?.ok_or_else(|| Error::msg("this gemma4_unified checkpoint has no audio_config"))?.process(audio)
    }

    /// mlx-vlm's names: the embedders as they are (dropped when the config
    /// has no such input), `lm_head` dropped (tied), the text model's
    /// tensors as gemma4 renames them.
    fn rewrite(&self, cfg: &UnifiedConfig, plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let bare = name.strip_prefix("model.").unwrap_or(name);
        if bare == "lm_head.weight" || name.contains("rotary_emb") {
            return Ok(vec![]);
        }
        if MEDIA_PREFIXES.iter().any(|p| bare.starts_with(p)) {
            let keep = if bare.starts_with("embed_audio.") { cfg.has_audio_config } else { cfg.has_vision_config };
            return Ok(if keep { vec![(bare.to_string(), t)] } else { vec![] });
        }
        Gemma4Family.rewrite(&cfg.gemma4, plan, name, t)
    }

    fn quant_class(&self, cfg: &UnifiedConfig, plan: &ModelPlan, name: &str) -> QuantClass {
        if MEDIA_PREFIXES.iter().any(|p| name.starts_with(p)) {
            return QuantClass::Skip;
        }
        Gemma4Family.quant_class(&cfg.gemma4, plan, name)
    }

    fn fusions(&self, cfg: &UnifiedConfig, plan: &ModelPlan) -> Vec<Fusion> {
        Gemma4Family.fusions(&cfg.gemma4, plan)
    }

    fn build(&self, unified: &UnifiedConfig, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        let cfg = unified.gemma4.text();
        let model = Gemma4Text::load(cfg, w)?;
        // The prompt reads media ids as such even where the checkpoint takes
        // no media (as mlx-vlm, which always builds the embedders).
        let media_ids = unified.gemma4.media_ids()?;
        let Some(spec) = plan.media.as_ref().into_option() else {
            return Ok(Box::new(model.with_media(MediaTokens { media_ids, ..Default::default() }, None, None)));
        };
        let vision = if spec.image.is_some() { unified.vision()? } else { None };
        let audio = if spec.audio.is_some() { unified.audio()? } else { None };
        let tokens = MediaTokens {
            image_token_id: vision.as_ref().map(|v| v.image.image_token_id),
            audio_token_id: audio.as_ref().map(|a| a.audio_token_id),
            media_ids,
            bidirectional_images: vision.as_ref().is_some_and(|v| v.image.bidirectional),
        };
        let h = cfg.hidden_size;
        // Embedders whose weights are absent stay unloaded: the host then
        // serves the other inputs with one warning line.
        let vision_tower = match &vision {
            Some(v) if VisionEmbedder::present(w) => Some(Box::new(VisionEmbedder::load(v, w, h)?) as Box<dyn Tower>),
            _ => None,
        };
        let audio_tower = match &audio {
            Some(a) if AudioEmbedder::present(w) => Some(Box::new(AudioEmbedder::load(a, w, h)?) as Box<dyn Tower>),
            _ => None,
        };
        Ok(Box::new(model.with_media(tokens, vision_tower, audio_tower)))
    }

    /// gemma4's drafters (`gemma4_assistant` checkpoints) serve this
    /// family's text model as they serve gemma4's.
    fn build_drafter(
        &self,
        role: DraftRole,
        cfg: &UnifiedConfig,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        target_w: &dyn Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        Gemma4Family.build_drafter(role, &cfg.gemma4, plan, w, target_plan, target_w)
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-gemma4_unified", [Gemma4UnifiedFamily]);
