//! The MoE branch of the 26B-A4B style layers (`enable_moe_block`): a
//! router over the residual and routed GeGLU experts between their own
//! norms, run beside the dense MLP.

use crate::config::Config;
use mlx::fast::rms_norm;
use mlx::nn::{GluActivation, Kind, Linear, RmsNorm, SwitchGlu, Weights};
use mlx::{Array, Dtype, Result};

/// The expert router: a scale-carrying RMS norm of the residual, a linear
/// score per expert, the top k by score, softmax over those k, times a
/// learned per-expert scale.
#[derive(Debug, Clone)]
struct Router {
    proj: Linear,
    /// `scale * hidden^-0.5`, the norm's weight.
    norm_weight: Array,
    per_expert_scale: Array,
    eps: f32,
    top_k: i32,
}

impl Router {
    fn load(w: &dyn Weights, prefix: &str, cfg: &Config) -> Result<Router> {
        let (h, e) = (cfg.hidden_size, cfg.num_experts);
        let scale = w.tensor(&format!("{prefix}.scale"), &[h], Kind::Float)?;
        let per_expert_scale = w.tensor(&format!("{prefix}.per_expert_scale"), &[e], Kind::Float)?;
        Ok(Router {
            proj: Linear::load(w, &format!("{prefix}.proj"), h, e)?,
            // Rounded in the weight's dtype, as mlx-lm multiplies them.
            norm_weight: scale.mul_s((cfg.hidden_size as f64).powf(-0.5))?,
            per_expert_scale,
            eps: cfg.rms_norm_eps,
            top_k: cfg.top_k_experts,
        })
    }

    /// `x` `[B, L, H]` → (expert ids `[B, L, k]` uint32, weights `[B, L, k]`).
    fn forward(&self, x: &Array) -> Result<(Array, Array)> {
        let scores = self.proj.forward(&rms_norm(x, Some(&self.norm_weight), self.eps)?)?;
        let idx = scores.top_k_indices(self.top_k)?;
        let weights = scores.take_along_axis(&idx, -1)?.softmax(&[-1], false)?;
        let weights = weights.mul(&self.per_expert_scale.take(&idx, 0)?)?;
        Ok((idx.astype(Dtype::U32)?, weights))
    }
}

/// The MoE branch of a layer.
#[derive(Debug, Clone)]
pub struct MoeBlock {
    router: Router,
    experts: SwitchGlu,
    pre_norm: RmsNorm,
    /// Norm of the dense MLP's output before the sum.
    pub post_norm_dense: RmsNorm,
    /// Norm of the experts' output before the sum.
    post_norm_experts: RmsNorm,
}

impl MoeBlock {
    /// Loads the branch of the layer under `lp` (`{lp}.router`,
    /// `{lp}.experts.switch_glu` and the three norms).
    pub fn load(w: &dyn Weights, lp: &str, cfg: &Config) -> Result<MoeBlock> {
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let norm = |n: &str| RmsNorm::load(w, &format!("{lp}.{n}"), h, eps);
        Ok(MoeBlock {
            router: Router::load(w, &format!("{lp}.router"), cfg)?,
            experts: SwitchGlu::load(
                w,
                &format!("{lp}.experts.switch_glu"),
                cfg.num_experts,
                h,
                cfg.moe_intermediate_size,
                GluActivation::GeluApprox,
            )?,
            pre_norm: norm("pre_feedforward_layernorm_2")?,
            post_norm_dense: norm("post_feedforward_layernorm_1")?,
            post_norm_experts: norm("post_feedforward_layernorm_2")?,
        })
    }

    /// The experts' contribution for the residual `h` `[B, L, H]`.
    pub fn experts(&self, h: &Array) -> Result<Array> {
        let (idx, weights) = self.router.forward(h)?;
        let y = self.experts.forward(&self.pre_norm.forward(h)?, &idx)?; // [B, L, k, H]
        let y = y.mul(&weights.expand_dims(&[-1])?)?.sum(&[-2], false)?;
        self.post_norm_experts.forward(&y)
    }
}
