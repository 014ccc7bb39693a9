//! The cache settings a user picks (`--kv-bits`, `--max-kv-size`, ...).

use super::store::{KvQuant, QBits};
use mlx::{Error, Result};

/// Bit widths MLX quantizes to.
pub const KV_BITS: [i32; 5] = [2, 3, 4, 6, 8];
/// Group sizes MLX quantizes with.
pub const KV_GROUP_SIZES: [i32; 3] = [32, 64, 128];

/// Cache settings chosen by the user.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Bound every KV cache to this many tokens (a rotating window).
    pub max_kv_size: Option<usize>,
    /// Pinned prefix of the windows `max_kv_size` makes (mlx-lm: 4).
    pub keep: usize,
    /// Key bits (None: dense keys).
    pub k_bits: Option<i32>,
    /// Value bits (None: dense values).
    pub v_bits: Option<i32>,
    /// Quantization group size along head_dim.
    pub kv_group_size: i32,
    /// Quantize once this many tokens are cached.
    pub quantized_kv_start: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            max_kv_size: None,
            keep: 4,
            k_bits: None,
            v_bits: None,
            kv_group_size: 64,
            quantized_kv_start: 0,
        }
    }
}

impl CacheOptions {
    /// Checks the settings, naming the flag at fault.
    pub fn validate(&self) -> Result<()> {
        for (flag, b) in [("--k-bits", self.k_bits), ("--v-bits", self.v_bits)] {
            if let Some(b) = b {
                if !KV_BITS.contains(&b) {
                    return Err(Error::msg(format!("{flag} (or --kv-bits) must be one of 2, 3, 4, 6, 8; got {b}")));
                }
            }
        }
        if !KV_GROUP_SIZES.contains(&self.kv_group_size) {
            return Err(Error::msg(format!("--kv-group-size must be 32, 64 or 128; got {}", self.kv_group_size)));
        }
        if self.max_kv_size == Some(0) {
            return Err(Error::msg("--max-kv-size must be at least 1"));
        }
        Ok(())
    }

    /// Checks the settings against the model: the KV cache is quantized
    /// along the head dimension, so `--kv-group-size` must divide every
    /// one the plan names (an error naming the sizes that would work).
    pub fn check_for(&self, plan: &plugin_api::ModelPlan) -> Result<()> {
        if self.kv_quant().is_none() {
            return Ok(());
        }
        let g = self.kv_group_size;
        let dims: Vec<i32> = plan.kv_head_dims.iter().map(|&d| d as i32).collect();
        if let Some(d) = dims.iter().find(|&&d| d % g != 0) {
            let fits: Vec<String> =
                KV_GROUP_SIZES.iter().filter(|&&s| dims.iter().all(|d| d % s == 0)).map(|s| s.to_string()).collect();
            let what = if fits.is_empty() {
                "no group size quantizes it (--kv-bits cannot be used with this model)".to_string()
            } else {
                format!("use --kv-group-size {}", fits.join(" or "))
            };
            return Err(Error::msg(format!(
                "--kv-group-size {g} does not divide this model's head dimension {d} (the KV cache is quantized along it): {what}"
            )));
        }
        Ok(())
    }

    /// What the settings do not do for this model, said once at load:
    /// `--kv-bits` leaves a model's own sliding windows dense.
    pub fn warnings_for(&self, plan: &plugin_api::ModelPlan) -> Vec<String> {
        let sliding = plan.caches.iter().filter(|k| matches!(k, plugin_api::CacheKind::Sliding { .. })).count();
        if self.kv_quant().is_none() || sliding == 0 {
            return Vec::new();
        }
        vec![format!(
            "--kv-bits quantizes the full-attention layers' caches only: this model's {sliding} sliding-window layers keep dense caches (as mlx-lm's do)"
        )]
    }

    /// Settings that work but may hurt quality (printed, never changed).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(k) = self.k_bits {
            if k < 8 {
                w.push(format!(
                    "keys quantized to {k} bits: keys are more sensitive to quantization than values; 8-bit keys are the safe choice"
                ));
            }
        }
        if let (Some(k), Some(v)) = (self.k_bits, self.v_bits) {
            if v > k {
                w.push(format!("values get more bits ({v}) than keys ({k}); keys usually need at least as many"));
            }
        }
        w
    }

    /// The quantization every KV cache applies, if any.
    pub fn kv_quant(&self) -> Option<KvQuant> {
        let q = |b: Option<i32>| b.map(|bits| QBits { bits, group_size: self.kv_group_size });
        let kq = KvQuant { k: q(self.k_bits), v: q(self.v_bits), start: self.quantized_kv_start as i64 };
        (kq.k.is_some() || kq.v.is_some()).then_some(kq)
    }
}
