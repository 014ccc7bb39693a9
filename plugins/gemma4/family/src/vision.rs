//! Gemma 4's vision tower and its projector into the text model: patches
//! embedded with a learned (column, row) table, encoder layers with 2-D
//! rope and clipped linears, 3x3 average pooling times √hidden, the
//! optional standardization, and a scale-free RMS norm before the
//! projection. Each image runs alone (no attention across images).

use crate::clipped::ClippedLinear;
use mlx::fast::{rms_norm, scaled_dot_product_attention, Mask};
use mlx::nn::{gelu_approx, Kind, Linear, Weights};
use mlx::{Array, Dtype, Error, Result};
use plugin_api::config::{nullable, parse};
use serde::Deserialize;
use serde_json::Value;

plugin_api::config_defaults! {
    d768 / d768_or_null: i32 = 768;
    d3072 / d3072_or_null: i32 = 3072;
    twelve / twelve_or_null: i32 = 12;
    sixteen / sixteen_or_null: i32 = 16;
    d64 / d64_or_null: i32 = 64;
    three / three_or_null: i32 = 3;
    positions / positions_or_null: i32 = 10240;
    eps / eps_or_null: f32 = 1e-6;
}

/// `vision_config` as written; absent (or null) fields take the
/// reference's defaults (mlx-vlm's and transformers' Gemma4VisionConfig:
/// the E2B/E4B tower).
#[derive(Debug, Clone, Deserialize)]
struct Written {
    #[serde(default = "d768", deserialize_with = "d768_or_null")]
    hidden_size: i32,
    #[serde(default = "d3072", deserialize_with = "d3072_or_null")]
    intermediate_size: i32,
    #[serde(default = "sixteen", deserialize_with = "sixteen_or_null")]
    num_hidden_layers: i32,
    #[serde(default = "twelve", deserialize_with = "twelve_or_null")]
    num_attention_heads: i32,
    /// `num_attention_heads` when absent.
    num_key_value_heads: Option<i32>,
    #[serde(default = "d64", deserialize_with = "d64_or_null")]
    head_dim: i32,
    #[serde(default = "eps", deserialize_with = "eps_or_null")]
    rms_norm_eps: f32,
    #[serde(default = "sixteen", deserialize_with = "sixteen_or_null")]
    patch_size: i32,
    #[serde(default = "three", deserialize_with = "three_or_null")]
    pooling_kernel_size: i32,
    #[serde(default = "positions", deserialize_with = "positions_or_null")]
    position_embedding_size: i32,
    /// Its `rope_theta` is read when a number (else 100).
    rope_parameters: Option<Value>,
    #[serde(default, deserialize_with = "nullable")]
    standardize: bool,
    #[serde(default, deserialize_with = "nullable")]
    use_clipped_linears: bool,
}

/// `vision_config`, the fields the tower reads.
#[derive(Debug, Clone)]
pub struct VisionConfig {
    /// Width of the tower.
    pub hidden_size: i32,
    /// MLP width.
    pub intermediate_size: i32,
    /// Encoder layers.
    pub num_hidden_layers: i32,
    /// Query heads.
    pub num_attention_heads: i32,
    /// Key/value heads.
    pub num_key_value_heads: i32,
    /// Features per head.
    pub head_dim: i32,
    /// RMS norm epsilon of the block norms and the projector.
    pub rms_norm_eps: f32,
    /// Pixels per patch side.
    pub patch_size: i32,
    /// Patches per pooled token side.
    pub pooling_kernel_size: i32,
    /// Rows of each position table.
    pub position_embedding_size: i32,
    /// Rope base of the 2-D rope.
    pub rope_theta: f32,
    /// Learned per-feature shift and scale after pooling.
    pub standardize: bool,
    /// Linears clip their inputs and outputs to stored bounds.
    pub use_clipped_linears: bool,
}

impl VisionConfig {
    /// From `vision_config` (`None` when the checkpoint has no vision tower).
    pub fn parse(c: &Value) -> Result<Option<VisionConfig>> {
        let Some(v) = c.get("vision_config").filter(|v| v.is_object()) else { return Ok(None) };
        let w: Written = parse(v)?;
        let theta =
            w.rope_parameters.as_ref().and_then(|r| r.get("rope_theta")).and_then(Value::as_f64).unwrap_or(100.0);
        let cfg = VisionConfig {
            hidden_size: w.hidden_size,
            intermediate_size: w.intermediate_size,
            num_hidden_layers: w.num_hidden_layers,
            num_attention_heads: w.num_attention_heads,
            num_key_value_heads: w.num_key_value_heads.unwrap_or(w.num_attention_heads),
            head_dim: w.head_dim,
            rms_norm_eps: w.rms_norm_eps,
            patch_size: w.patch_size,
            pooling_kernel_size: w.pooling_kernel_size,
            position_embedding_size: w.position_embedding_size,
            rope_theta: theta as f32,
            standardize: w.standardize,
            use_clipped_linears: w.use_clipped_linears,
        };
        let checks = [
            ("hidden_size", cfg.hidden_size),
            ("intermediate_size", cfg.intermediate_size),
            ("num_hidden_layers", cfg.num_hidden_layers),
            ("num_attention_heads", cfg.num_attention_heads),
            ("num_key_value_heads", cfg.num_key_value_heads),
            ("head_dim", cfg.head_dim),
            ("patch_size", cfg.patch_size),
            ("pooling_kernel_size", cfg.pooling_kernel_size),
            ("position_embedding_size", cfg.position_embedding_size),
        ];
        for (name, v) in checks {
            if !(1..=1 << 20).contains(&v) {
                return Err(Error::msg(format!("config: vision_config.{name} must be a positive size, got {v}")));
            }
        }
        if cfg.num_attention_heads % cfg.num_key_value_heads != 0 || cfg.head_dim % 4 != 0 {
            return Err(Error::msg(
                "config: vision_config: heads must be a multiple of key/value heads and head_dim of 4",
            ));
        }
        Ok(Some(cfg))
    }
}

/// Bidirectional attention over one image, scale 1 (the q/k norms carry
/// it), as the reference runs it: heads zero-padded to a fused-kernel size,
/// an additive zero mask, the whole call compiled (its fused softmax and
/// scaling give the reference's float32 results to the bit).
fn attend(q: &Array, k: &Array, v: &Array) -> Result<Array> {
    thread_local! {
        // Leaked on purpose, as mlx::nn's compiled activations: dropping it
        // at exit can run after MLX's compile cache is gone.
        static ATTEND: &'static Option<mlx::compile::Compiled> = Box::leak(Box::new(
            mlx::compile::Compiled::new(|a: &[Array]| {
                let d = a[0].dim(-1);
                let target = [64, 80, 128].into_iter().find(|&t| d <= t).unwrap_or(d);
                let zero = Array::scalar_f(0.0, a[0].dtype())?;
                let pad = |x: &Array| x.pad(&[3], &[0], &[target - d], &zero, "constant");
                let o = scaled_dot_product_attention(&pad(&a[0])?, &pad(&a[1])?, &pad(&a[2])?, 1.0, Mask::Array(&a[3]), None)?;
                Ok(vec![o.slice_axis(3, 0, d)?])
            }, false)
            .ok(),
        ));
    }
    let l = q.dim(2);
    let mask = mlx::zeros(&[1, 1, l, l], q.dtype())?;
    let out = ATTEND.with(|c| c.as_ref().map(|c| c.call(&[q, k, v, &mask])));
    match out {
        Some(Ok(mut v)) if v.len() == 1 => Ok(v.remove(0)),
        _ => scaled_dot_product_attention(q, k, v, 1.0, Mask::Array(&mask), None),
    }
}

/// RMS norm over the last axis computed in f32, the weight applied before
/// the cast back (the tower's per-head norms; eps fixed at 1e-6 as the
/// reference fixes it).
fn head_norm(x: &Array, w: Option<&Array>) -> Result<Array> {
    let x32 = x.astype(Dtype::F32)?;
    // `x ** 2` as the reference writes it: MLX's power, not a multiply
    // (they differ in the last bit).
    let ms = x32.power(&Array::f32(2.0))?.mean(&[-1], true)?;
    let mut y = x32.mul(&ms.add(&Array::f32(1e-6))?.rsqrt()?)?;
    if let Some(w) = w {
        y = y.mul(&w.astype(Dtype::F32)?)?;
    }
    y.astype(x.dtype())
}

#[derive(Debug, Clone)]
struct EncoderLayer {
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    o: ClippedLinear,
    q_norm: Array,
    k_norm: Array,
    gate: ClippedLinear,
    up: ClippedLinear,
    down: ClippedLinear,
    norms: [Array; 4],
}

/// The vision tower and projector.
#[derive(Debug, Clone)]
pub struct VisionTower {
    cfg: VisionConfig,
    input_proj: Linear,
    positions: Array,
    layers: Vec<EncoderLayer>,
    standardize: Option<(Array, Array)>,
    projection: Linear,
    dtype: Dtype,
}

impl crate::media::Tower for VisionTower {
    fn embed(&self, item: &plugin_api::media::MediaInput) -> Result<Array> {
        VisionTower::embed(self, &item.pixels)
    }
}

impl VisionTower {
    /// Whether the checkpoint holds every tensor of the tower and projector
    /// (a checkpoint with none, or only some, serves text).
    pub fn present(cfg: &VisionConfig, w: &dyn Weights) -> bool {
        let mut names = vec![
            "vision_tower.patch_embedder.input_proj.weight".to_string(),
            "vision_tower.patch_embedder.position_embedding_table".to_string(),
            "embed_vision.embedding_projection.weight".to_string(),
        ];
        if cfg.standardize {
            names.extend(["vision_tower.std_bias".to_string(), "vision_tower.std_scale".to_string()]);
        }
        let linears = [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ];
        let norms = [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
            "self_attn.q_norm",
            "self_attn.k_norm",
        ];
        for i in 0..cfg.num_hidden_layers {
            let lp = format!("vision_tower.encoder.layers.{i}");
            for l in linears {
                names.push(format!("{lp}.{l}.linear.weight"));
                if cfg.use_clipped_linears {
                    names.extend(
                        ["input_min", "input_max", "output_min", "output_max"].map(|b| format!("{lp}.{l}.{b}")),
                    );
                }
            }
            names.extend(norms.map(|n| format!("{lp}.{n}.weight")));
        }
        names.iter().all(|n| w.get(n).is_some())
    }

    /// Loads `vision_tower.*` and `embed_vision.*` (projecting to `text_hidden`).
    pub fn load(cfg: &VisionConfig, w: &dyn Weights, text_hidden: i32) -> Result<VisionTower> {
        let (d, p) = (cfg.hidden_size, cfg.patch_size);
        let (hq, hkv, hd) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let clip = cfg.use_clipped_linears;
        let input_proj = Linear::load(w, "vision_tower.patch_embedder.input_proj", 3 * p * p, d)?;
        let positions = w.tensor(
            "vision_tower.patch_embedder.position_embedding_table",
            &[2, cfg.position_embedding_size, d],
            Kind::Float,
        )?;
        let dtype = positions.dtype();
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let lp = format!("vision_tower.encoder.layers.{i}");
                let cl = |n: &str, i: i32, o: i32| ClippedLinear::load(w, &format!("{lp}.{n}"), i, o, clip);
                let norm = |n: &str, dim: i32| w.tensor(&format!("{lp}.{n}.weight"), &[dim], Kind::Float);
                Ok(EncoderLayer {
                    q: cl("self_attn.q_proj", d, hq * hd)?,
                    k: cl("self_attn.k_proj", d, hkv * hd)?,
                    v: cl("self_attn.v_proj", d, hkv * hd)?,
                    o: cl("self_attn.o_proj", hq * hd, d)?,
                    q_norm: norm("self_attn.q_norm", hd)?,
                    k_norm: norm("self_attn.k_norm", hd)?,
                    gate: cl("mlp.gate_proj", d, cfg.intermediate_size)?,
                    up: cl("mlp.up_proj", d, cfg.intermediate_size)?,
                    down: cl("mlp.down_proj", cfg.intermediate_size, d)?,
                    norms: [
                        norm("input_layernorm", d)?,
                        norm("post_attention_layernorm", d)?,
                        norm("pre_feedforward_layernorm", d)?,
                        norm("post_feedforward_layernorm", d)?,
                    ],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let standardize = cfg
            .standardize
            .then(|| -> Result<(Array, Array)> {
                Ok((
                    w.tensor("vision_tower.std_bias", &[d], Kind::Float)?,
                    w.tensor("vision_tower.std_scale", &[d], Kind::Float)?,
                ))
            })
            .transpose()?;
        Ok(VisionTower {
            cfg: cfg.clone(),
            input_proj,
            positions,
            layers,
            standardize,
            projection: Linear::load(w, "embed_vision.embedding_projection", d, text_hidden)?,
            dtype,
        })
    }

    /// The text-model rows of one image: `pixels` `[1, 3, H, W]` float32
    /// in 0..1 → `[H·W / (p·k)², text_hidden]`.
    pub fn embed(&self, pixels: &Array) -> Result<Array> {
        let pooled = self.features(pixels)?;
        let n = rms_norm(&pooled, None, self.cfg.rms_norm_eps)?;
        self.projection.forward(&n)
    }

    /// The tower's output before the projector (pooled, standardized),
    /// `[tokens, hidden]`.
    pub fn features(&self, pixels: &Array) -> Result<Array> {
        let c = &self.cfg;
        let p = c.patch_size;
        let (ph, pw) = (pixels.dim(2) / p, pixels.dim(3) / p);
        let l = ph * pw;
        // Patch rows ordered (row in patch, column in patch, channel).
        let x = pixels
            .reshape(&[3, ph, p, pw, p])?
            .transpose(&[1, 3, 2, 4, 0])?
            .reshape(&[l, 3 * p * p])?
            .sub(&Array::f32(0.5))?
            .mul(&Array::f32(2.0))?
            .astype(self.dtype)?;
        let cols = mlx::arange(0.0, l as f64, 1.0, Dtype::I32)?.remainder(&Array::i32(pw))?;
        let rows = mlx::arange(0.0, l as f64, 1.0, Dtype::I32)?.floor_divide(&Array::i32(pw))?;
        let table = |axis: i32, idx: &Array| -> Result<Array> {
            self.positions.slice_axis(0, axis, axis + 1)?.squeeze(&[0])?.take(idx, 0)
        };
        let pos = table(0, &cols)?.add(&table(1, &rows)?)?;
        let mut h = self.input_proj.forward(&x)?.add(&pos)?;
        let (cos, sin) = self.rope_tables(&cols, &rows)?;
        for layer in &self.layers {
            h = self.layer(layer, &h, &cos, &sin)?;
        }
        // k x k blocks of patches averaged in f32 (as a matmul with one-hot
        // weights, the reference's summation), times √hidden.
        let k = c.pooling_kernel_size;
        let n = (ph / k) * (pw / k);
        let slot =
            cols.floor_divide(&Array::i32(k))?.add(&rows.floor_divide(&Array::i32(k))?.mul(&Array::i32(pw / k))?)?;
        let weights = mlx::arange(0.0, n as f64, 1.0, Dtype::I32)?
            .expand_dims(&[1])?
            .eq(&slot.expand_dims(&[0])?)?
            .astype(Dtype::F32)?
            .div(&Array::f32((k * k) as f32))?;
        let pooled = weights
            .matmul(&h.astype(Dtype::F32)?)?
            .astype(self.dtype)?
            .mul(&Array::scalar_f((c.hidden_size as f64).sqrt(), self.dtype)?)?;
        match &self.standardize {
            Some((bias, scale)) => pooled.sub(bias)?.mul(scale),
            None => Ok(pooled),
        }
    }

    /// cos/sin `[L, 1, head_dim]` of the 2-D rope: the first half of each
    /// head's rotated features turns with the column, the second with the
    /// row, each half rotated on its own.
    fn rope_tables(&self, cols: &Array, rows: &Array) -> Result<(Array, Array)> {
        let hd = self.cfg.head_dim;
        let ch = 2 * (hd / 4);
        let half = ch / 2;
        let exps = mlx::arange(0.0, half as f64, 1.0, Dtype::F32)?.mul(&Array::f32(2.0 / ch as f32))?;
        let timescale = Array::f32(self.cfg.rope_theta).power(&exps)?;
        let mut cos = Vec::new();
        let mut sin = Vec::new();
        for pos in [cols, rows] {
            let ang = pos.astype(Dtype::F32)?.expand_dims(&[-1])?.div(&timescale)?;
            let (c, s) = (ang.cos()?, ang.sin()?);
            cos.push(mlx::concatenate(&[&c, &c], -1)?);
            sin.push(mlx::concatenate(&[&s, &s], -1)?);
        }
        let join = |v: &[Array]| -> Result<Array> {
            mlx::concatenate(&[&v[0], &v[1]], -1)?.astype(self.dtype)?.expand_dims(&[1])
        };
        Ok((join(&cos)?, join(&sin)?))
    }

    /// Rope on `x` `[L, heads, head_dim]`: per axis slice, rotate-half.
    fn rope(&self, x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let ch = 2 * (self.cfg.head_dim / 4);
        let half = ch / 2;
        let mut parts = Vec::new();
        for d in 0..2 {
            let xp = x.slice_axis(-1, d * ch, (d + 1) * ch)?;
            let (a, b) = (xp.slice_axis(-1, 0, half)?, xp.slice_axis(-1, half, ch)?);
            let rot = mlx::concatenate(&[&b.neg()?, &a], -1)?;
            let c = cos.slice_axis(-1, d * ch, (d + 1) * ch)?;
            let s = sin.slice_axis(-1, d * ch, (d + 1) * ch)?;
            parts.push(xp.mul(&c)?.add(&rot.mul(&s)?)?);
        }
        if 2 * ch < self.cfg.head_dim {
            parts.push(x.slice_axis(-1, 2 * ch, self.cfg.head_dim)?);
        }
        mlx::concatenate(&parts.iter().collect::<Vec<_>>(), -1)
    }

    fn layer(&self, ly: &EncoderLayer, h: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let c = &self.cfg;
        let eps = c.rms_norm_eps;
        let l = h.dim(0);
        let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let n = rms_norm(h, Some(&ly.norms[0]), eps)?;
        let q = head_norm(&ly.q.forward(&n)?.reshape(&[l, hq, hd])?, Some(&ly.q_norm))?;
        let k = head_norm(&ly.k.forward(&n)?.reshape(&[l, hkv, hd])?, Some(&ly.k_norm))?;
        let v = head_norm(&ly.v.forward(&n)?.reshape(&[l, hkv, hd])?, None)?;
        let q = self.rope(&q, cos, sin)?.transpose(&[1, 0, 2])?.expand_dims(&[0])?;
        let k = self.rope(&k, cos, sin)?.transpose(&[1, 0, 2])?.expand_dims(&[0])?;
        let v = v.transpose(&[1, 0, 2])?.expand_dims(&[0])?;
        let o = attend(&q, &k, &v)?;
        let o = o.squeeze(&[0])?.transpose(&[1, 0, 2])?.reshape(&[l, hq * hd])?;
        let a = ly.o.forward(&o)?;
        let h = h.add(&rms_norm(&a, Some(&ly.norms[1]), eps)?)?;
        let n = rms_norm(&h, Some(&ly.norms[2]), eps)?;
        let f = ly.down.forward(&gelu_approx(&ly.gate.forward(&n)?)?.mul(&ly.up.forward(&n)?)?)?;
        h.add(&rms_norm(&f, Some(&ly.norms[3]), eps)?)
    }
}
