//! The qwen3_5 family (Qwen3.5 / 3.6 text models, dense and MoE): a hybrid of
//! gated-delta-net linear attention (recurrent cache slots) and gated
//! full attention with partial rope (KV cache slots); config ([`config`]),
//! layers ([`layer`], [`gdn`], [`moe`]), the model ([`model`]), weight-name
//! rules ([`names`] and [`Qwen3_5Family::rewrite`]) and registration.
//!
//! Hugging Face checkpoints are renamed, their conv weights moved to MLX's
//! layout and their zero-centred RMSNorm weights shifted by one. The
//! multi-token-prediction head becomes the family's speculative-decoding
//! drafter ([`mtp`]).

pub mod chunked;
pub mod config;
pub mod gdn;
pub mod image;
pub mod layer;
pub mod model;
pub mod moe;
pub mod mtp;
pub mod names;
pub mod scan_kernel;
pub mod vision;

use config::CheckpointConfig;
use mlx::nn::Weights;
use mlx::{Array, Error, Result};
use model::Qwen3_5;
use names::{canonical_name, MTP_PREFIX, OFFSET_NORMS, PREFIX};
use plugin_api::config::{eos_ids, field_or, text_config};
use plugin_api::layers::gate_up_fusion;
use plugin_api::media::MediaInput;
use plugin_api::{CacheKind, Fusion, ModelInfo, ModelPlan, QuantClass, QuantSpec, RawImage};
use plugin_api::{DraftRole, Drafter, Family, FamilyConfig, Model};
use serde_json::Value;

/// The family registration.
pub struct Qwen3_5Family;

impl Family for Qwen3_5Family {
    type Config = CheckpointConfig;

    fn name(&self) -> &'static str {
        "qwen3_5"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![
            ModelInfo::text("qwen3_5").examples(&["Qwen/Qwen3.5-9B", "mlx-community/Qwen3.5-4B-OptiQ-4bit"]).images(),
            ModelInfo::text("qwen3_5_text"),
            ModelInfo::text("qwen3_5_moe").examples(&["Qwen/Qwen3.5-35B-A3B"]).moe().images(),
            ModelInfo::text("qwen3_5_moe_text").examples(&["mlx-community/Qwen3.5-397B-A17B-4bit"]).moe(),
        ]
    }

    /// Parsed by hand: the text part may sit under `text_config`, and rope
    /// settings under `rope_parameters` or at the top.
    fn config(&self, raw: &Value) -> Result<CheckpointConfig> {
        let cfg = CheckpointConfig::parse(raw)?;
        cfg.check()?;
        Ok(cfg)
    }

    fn plan(&self, checkpoint: &CheckpointConfig, config: &Value) -> Result<ModelPlan> {
        let cfg = &checkpoint.text;
        let mut stored = config.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization"));
        }
        let text = text_config(config);
        let mut eos = eos_ids(config);
        if eos.is_empty() {
            eos = eos_ids(text);
        }
        let dtype = field_or::<Option<String>>(config, "torch_dtype", None)?
            .or(field_or::<Option<String>>(text, "dtype", None)?)
            .unwrap_or_else(|| "bfloat16".into());
        let caches = cfg
            .linear
            .iter()
            .map(|&lin| if lin { CacheKind::Recurrent { arrays: 2 } } else { CacheKind::Full })
            .collect();
        let model_type = field_or::<String>(config, "model_type", "qwen3_5".into())?;
        let context = plugin_api::config::context_length(cfg.max_position_embeddings, &cfg.rope_scaling);
        let plan = ModelPlan::text("qwen3_5", &model_type, &stored, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos)
            .with_context(context)
            .with_dtype(&dtype)
            .with_head_dims(&[cfg.head_dim]);
        // A vision_config that does not describe a usable tower (e.g. a
        // stub beside text weights) leaves the model serving text.
        Ok(match checkpoint.image() {
            Ok(Some(img)) if img.vision.out_hidden_size == cfg.hidden_size => plan.with_media(img.spec()),
            _ => plan,
        })
    }

    fn process_image(&self, cfg: &CheckpointConfig, _plan: &ModelPlan, image: &RawImage) -> Result<MediaInput> {
        let img = cfg.image()?.ok_or_else(|| Error::msg("this qwen3_5 checkpoint has no vision_config"))?;
        img.process(image)
    }

    fn rewrite(&self, cfg: &CheckpointConfig, plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let Some((name, hf)) = canonical_name(name) else {
            return Ok(vec![]);
        };
        if name.starts_with(vision::PREFIX) {
            if plan.media.is_none() {
                // A text model (no usable vision_config): the tower is not run.
                return Ok(vec![]);
            }
            // Hugging Face's Conv3d [D, C, T, P, P] → mlx-vlm's [D, T, P, P, C].
            if name.ends_with("patch_embed.proj.weight") && t.ndim() == 5 && t.dim(1) == 3 && t.dim(-1) != 3 {
                return Ok(vec![(name, t.transpose(&[0, 2, 3, 4, 1])?)]);
            }
            return Ok(vec![(name, t)]);
        }
        // Fused expert tensors of HF MoE checkpoints: [E, 2I, H] → gate and up.
        if let Some(p) = name.strip_suffix(".mlp.experts.gate_up_proj") {
            let mid = t.dim(-2) / 2;
            let parts = t.split_at(&[mid], -2)?;
            return Ok(vec![
                (format!("{p}.mlp.switch_mlp.gate_proj.weight"), parts[0].clone()),
                (format!("{p}.mlp.switch_mlp.up_proj.weight"), parts[1].clone()),
            ]);
        }
        if let Some(p) = name.strip_suffix(".mlp.experts.down_proj") {
            return Ok(vec![(format!("{p}.mlp.switch_mlp.down_proj.weight"), t)]);
        }
        if name == "language_model.lm_head.weight" && cfg.text.tie_word_embeddings {
            return Ok(vec![]);
        }
        // PyTorch conv layout [C, 1, K] → MLX's [C, K, 1].
        if name.ends_with("conv1d.weight") && t.ndim() == 3 && t.dim(-1) != 1 {
            return Ok(vec![(name, t.swapaxes(1, 2)?)]);
        }
        if hf && t.ndim() == 1 && OFFSET_NORMS.iter().any(|s| name.ends_with(s)) {
            let shifted = t.add_s(1.0)?;
            return Ok(vec![(name, shifted)]);
        }
        Ok(vec![(name, t)])
    }

    fn quant_class(&self, _cfg: &CheckpointConfig, _plan: &ModelPlan, name: &str) -> QuantClass {
        if name.starts_with(vision::PREFIX) || name.starts_with(MTP_PREFIX) {
            // The tower stays in float, as mlx-vlm's converter keeps it; so
            // does the MTP head, whose drafts must track the target closely.
            return QuantClass::Skip;
        }
        if name.ends_with("mlp.gate.weight") || name.ends_with("shared_expert_gate.weight") {
            // Routers stay at 8 bits, as mlx-lm's converter keeps them.
            return QuantClass::Pinned(QuantSpec { group_size: 64, bits: 8, mode: "affine".into() });
        }
        if name.ends_with("A_log") {
            // Kept in float32 whatever the run's dtype, as mlx-lm's cast predicate does.
            return QuantClass::Keep;
        }
        let skip = name.contains("norm") || name.contains("conv1d") || name.ends_with("dt_bias");
        if name.ends_with(".weight") && !skip {
            QuantClass::Body
        } else {
            QuantClass::Skip
        }
    }

    /// One matmul for gate/up in the dense MLPs, the shared experts and the
    /// MTP layers (the host skips the names a checkpoint lacks).
    fn fusions(&self, checkpoint: &CheckpointConfig, _plan: &ModelPlan) -> Vec<Fusion> {
        let cfg = &checkpoint.text;
        let layers = (0..cfg.num_hidden_layers).map(|i| format!("{PREFIX}layers.{i}"));
        let mtp = (0..cfg.mtp_layers).map(|i| format!("{MTP_PREFIX}layers.{i}"));
        layers
            .chain(mtp)
            .flat_map(|l| [format!("{l}.mlp"), format!("{l}.mlp.shared_expert")])
            .map(|m| gate_up_fusion(&m))
            .collect()
    }

    fn build(&self, cfg: &CheckpointConfig, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        let image = if plan.media.is_some() { cfg.image()?.cloned() } else { None };
        Ok(Box::new(Qwen3_5::load(&cfg.text, w)?.with_vision(image, w)?))
    }

    /// The MTP head of the target's own checkpoint, when it carries one.
    fn build_drafter(
        &self,
        role: DraftRole,
        cfg: &CheckpointConfig,
        _plan: &ModelPlan,
        w: &dyn Weights,
        _target_plan: &ModelPlan,
        target: &dyn Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        if role == DraftRole::Checkpoint {
            // A separate Qwen3.5 checkpoint cannot be a small-LM drafter: its
            // linear-attention state cannot be trimmed back after a rejected draft.
            return Err(Error::msg(
                "a qwen3_5 checkpoint cannot draft for another model (its recurrent state cannot roll back); \
                 Qwen3.5 drafts with its own MTP head (drop --draft-model)",
            ));
        }
        if !mtp::has_mtp(w) {
            return Ok(None);
        }
        // The target's own head: its config is the target's.
        Ok(Some(Box::new(mtp::MtpDrafter::load(&cfg.text, w, &cfg.text, target)?)))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-qwen3_5", [Qwen3_5Family]);
