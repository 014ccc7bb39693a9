//! The ernie4_5_moe family (Baidu's ERNIE 4.5 MoE): ernie4_5's decoder
//! whose MLPs, every `moe_layer_interval`-th layer from
//! `moe_layer_start_index` to `moe_layer_end_index`, are a mixture of
//! experts: a router whose logits go through a softmax (or a sigmoid) in
//! float32, the top `moe_k` experts weighted by their gates renormalised to
//! sum to 1, plus `moe_num_shared_experts` shared experts run as one MLP.
//! As mlx-lm, the aux-free routing's `e_score_correction_bias` and the
//! multi-token-prediction tensors are dropped unused; experts stored one by
//! one (Hugging Face's layout) are stacked at load. Also reads GGUF files
//! of llama.cpp's `ernie4_5-moe` architecture (`gguf.rs`).

use crate::ernie4_5::Config as DenseConfig;
use mlx::nn::{GatedMlp, GluActivation, Weights};
use mlx::{Array, Dtype, Result};
use plugin_api::config::{config_error, in_range, limits, one_of};
use plugin_api::layers::{gate_up_fusion, qkv_fusion, FeedForward, LmDrafter, MoeShape, PerExpert, Routing, SparseMoe};
use plugin_api::{DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A layer index or a list of them (the config takes either).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Layers {
    /// one index
    One(i32),
    /// several (mlx-lm reads the first MoE layer as their least, the last as their greatest)
    Many(Vec<i32>),
}

/// The config: ernie4_5's and the MoE fields (defaults as mlx-lm's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    #[serde(flatten)]
    pub base: DenseConfig,
    pub moe_num_experts: i32,
    /// Default: 1.
    #[serde(default = "default_one", deserialize_with = "one_or_default")]
    pub moe_k: i32,
    /// Width of each expert (0: `intermediate_size`). Default: 0.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub moe_intermediate_size: i32,
    /// Shared experts, run as one MLP of their summed width. Default: 0.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub moe_num_shared_experts: i32,
    /// Default: 0.
    #[serde(default = "default_start")]
    pub moe_layer_start_index: Layers,
    /// Default (absent or `null`): the last layer.
    #[serde(default)]
    pub moe_layer_end_index: Option<Layers>,
    /// Default: 1.
    #[serde(default = "default_one", deserialize_with = "one_or_default")]
    pub moe_layer_interval: i32,
    /// `softmax` or `sigmoid`. Default: `softmax`.
    #[serde(default = "default_gate_act", deserialize_with = "gate_act_or_default")]
    pub moe_gate_act: String,
}

plugin_api::config_defaults! {
    default_one / one_or_default: i32 = 1;
    default_gate_act / gate_act_or_default: String = "softmax".into();
}

fn default_start() -> Layers {
    Layers::One(0)
}

impl Config {
    /// Width of each routed expert.
    fn expert_width(&self) -> i32 {
        if self.moe_intermediate_size > 0 {
            self.moe_intermediate_size
        } else {
            self.base.intermediate_size
        }
    }

    /// Whether layer `i`'s MLP is the mixture of experts.
    fn sparse(&self, i: i32) -> bool {
        let start = match &self.moe_layer_start_index {
            Layers::One(s) => *s,
            Layers::Many(v) => v.iter().copied().min().unwrap_or(0),
        };
        let end = match &self.moe_layer_end_index {
            None => self.base.num_hidden_layers - 1,
            Some(Layers::One(e)) => *e,
            Some(Layers::Many(v)) => v.iter().copied().max().unwrap_or(self.base.num_hidden_layers - 1),
        };
        (i + 1) % self.moe_layer_interval == 0 && i >= start && i <= end
    }
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        self.base.check()?;
        in_range("moe_num_experts", self.moe_num_experts, limits::EXPERTS)?;
        in_range("moe_k", self.moe_k, self.moe_num_experts)?;
        in_range("moe_layer_interval", self.moe_layer_interval, limits::LAYERS)?;
        in_range("moe_intermediate_size", self.expert_width(), limits::INTERMEDIATE)?;
        if self.moe_num_shared_experts > 0 {
            in_range(
                "moe_num_shared_experts",
                self.expert_width() * self.moe_num_shared_experts,
                limits::INTERMEDIATE,
            )?;
        }
        one_of("moe_gate_act", Some(&self.moe_gate_act), &["softmax", "sigmoid"])?;
        if self.base.use_bias {
            return Err(config_error(
                "config: field `use_bias` is true, which ernie4_5_moe's experts do not implement",
            ));
        }
        Ok(())
    }
}

/// ERNIE's mixture of experts (see the module documentation).
#[derive(Debug)]
struct ErnieMoe {
    /// router and routed experts
    moe: SparseMoe,
    /// the shared experts as one MLP
    shared: Option<GatedMlp>,
    /// gates by sigmoid instead of softmax
    sigmoid: bool,
}

impl FeedForward for ErnieMoe {
    fn forward(&self, x: &Array) -> Result<Array> {
        let k = self.moe.top_k;
        let logits = self.moe.router.forward(x)?.astype(Dtype::F32)?;
        let gates = if self.sigmoid { logits.sigmoid()? } else { logits.softmax(&[-1], false)? };
        let inds = gates.neg()?.argpartition(k - 1, -1)?.slice_axis(-1, 0, k)?;
        let scores = gates.take_along_axis(&inds, -1)?;
        let scores = scores.div(&scores.sum(&[-1], true)?.maximum(&Array::f32(1e-12))?)?;
        let y = self.moe.mix(x, &inds.astype(Dtype::U32)?, &scores)?.astype(x.dtype())?;
        match &self.shared {
            Some(s) => y.add(&s.forward(x)?),
            None => Ok(y),
        }
    }
}

/// The family registration.
pub struct Ernie45MoeFamily;

impl Family for Ernie45MoeFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "ernie4_5_moe"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["ernie4_5_moe", "ernie4_5-moe"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("ernie4_5_moe").examples(&["baidu/ERNIE-4.5-21B-A3B-PT"]).moe().gguf("ernie4_5-moe")]
    }

    /// config.json, or a GGUF file's metadata (architecture `ernie4_5-moe`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::ernie4_5_moe_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        cfg.base.plan("ernie4_5_moe", cfg, config)
    }

    /// The multi-token-prediction block and the aux-free routing's score
    /// corrections are dropped (mlx-lm runs without them).
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, crate::gguf::NAMES);
        const UNUSED: [&str; 5] =
            ["mtp_block.", "mtp_linear_proj.", "mtp_hidden_norm.", "mtp_emb_norm.", "e_score_correction_bias"];
        if UNUSED.iter().any(|u| name.contains(u)) {
            return Ok(vec![]);
        }
        Ok(vec![(name, t)])
    }

    /// One matmul for q/k/v per layer, and for gate/up of each dense MLP
    /// and of each layer's shared experts.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        (0..cfg.base.num_hidden_layers)
            .flat_map(|i| {
                let p = format!("model.layers.{i}");
                let mlp = match cfg.sparse(i) {
                    true if cfg.moe_num_shared_experts > 0 => Some(format!("{p}.mlp.shared_experts")),
                    true => None,
                    false => Some(format!("{p}.mlp")),
                };
                std::iter::once(qkv_fusion(&format!("{p}.self_attn"))).chain(mlp.map(|m| gate_up_fusion(&m)))
            })
            .collect()
    }

    /// A separate checkpoint of this family drafts as a small LM (`--draft-model`).
    fn build_drafter(
        &self,
        role: DraftRole,
        cfg: &Config,
        plan: &ModelPlan,
        w: &dyn Weights,
        _target_plan: &ModelPlan,
        _target: &dyn Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        LmDrafter::for_separate_checkpoint(role, plan, || self.build(cfg, plan, w))
    }

    fn build(&self, cfg: &Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        let base = &cfg.base;
        let shape = MoeShape {
            hidden: base.hidden_size,
            experts: cfg.moe_num_experts,
            top_k: cfg.moe_k,
            intermediate: cfg.expert_width(),
            // Unused: ErnieMoe routes its own way.
            routing: Routing::SoftmaxTopK { norm_topk: true },
            act: GluActivation::Silu,
            shared_intermediate: None,
            shared_gate: false,
        };
        Ok(Box::new(base.decoder(w, |i, p| -> Result<Box<dyn FeedForward>> {
            if !cfg.sparse(i) {
                return Ok(Box::new(base.mlp(w, p, base.intermediate_size)?));
            }
            let shared = (cfg.moe_num_shared_experts > 0)
                .then(|| base.mlp(w, &format!("{p}.shared_experts"), cfg.expert_width() * cfg.moe_num_shared_experts))
                .transpose()?;
            let sigmoid = cfg.moe_gate_act == "sigmoid";
            // Hugging Face's checkpoints keep each expert apart; mlx-lm's stacked.
            let stacked = PerExpert::stacked(w, p, cfg.moe_num_experts, &PerExpert::GATE_UP_DOWN)?;
            Ok(Box::new(ErnieMoe { moe: SparseMoe::load(&stacked, p, &shape)?, shared, sigmoid }))
        })?))
    }
}
