//! The Qwen3.5 vision tower: patches embedded by a linear over their
//! (time, row, column, channel) pixels, learned position embeddings
//! interpolated bilinearly to the image's grid, pre-norm ViT blocks with a
//! 2-D rotary embedding and attention within the image, and the patch
//! merger (2x2 windows into one text-model row). One image per call.

use mlx::fast::{layer_norm, scaled_dot_product_attention, Mask};
use mlx::nn::{gelu_approx, Kind, Linear, Weights};
use mlx::{Array, Dtype, Error, Result};
use plugin_api::config::parse;
use plugin_api::media::MediaInput;
use serde::Deserialize;
use serde_json::Value;

plugin_api::config_defaults! {
    d3420 / d3420_or_null: i32 = 3420;
    d1536 / d1536_or_null: i32 = 1536;
    d16 / d16_or_null: i32 = 16;
    two / two_or_null: i32 = 2;
    d2304 / d2304_or_null: i32 = 2304;
}

/// `vision_config`, the fields the tower reads (mlx-vlm's defaults where a
/// field is absent).
#[derive(Debug, Clone, Deserialize)]
pub struct VisionConfig {
    /// Blocks.
    pub depth: i32,
    /// Width of the tower.
    pub hidden_size: i32,
    /// MLP width.
    #[serde(default = "d3420", deserialize_with = "d3420_or_null")]
    pub intermediate_size: i32,
    /// Output width (the text model's hidden size).
    #[serde(default = "d1536", deserialize_with = "d1536_or_null")]
    pub out_hidden_size: i32,
    /// Attention heads.
    #[serde(default = "d16", deserialize_with = "d16_or_null")]
    pub num_heads: i32,
    /// Pixels per patch side.
    #[serde(default = "d16", deserialize_with = "d16_or_null")]
    pub patch_size: i32,
    /// Frames per patch.
    #[serde(default = "two", deserialize_with = "two_or_null")]
    pub temporal_patch_size: i32,
    /// Patches per merged token side.
    #[serde(default = "two", deserialize_with = "two_or_null")]
    pub spatial_merge_size: i32,
    /// Rows of the learned position table (a square grid).
    #[serde(default = "d2304", deserialize_with = "d2304_or_null")]
    pub num_position_embeddings: i32,
}

impl VisionConfig {
    /// From `vision_config` (`None` when the checkpoint has none).
    pub fn parse(c: &Value) -> Result<Option<VisionConfig>> {
        let Some(v) = c.get("vision_config").filter(|v| v.is_object()) else { return Ok(None) };
        if v.get("deepstack_visual_indexes").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return Err(Error::msg("config: vision_config.deepstack_visual_indexes: qwen3_5 has no deepstack layers"));
        }
        let cfg: VisionConfig = parse(v)?;
        let sizes = [
            ("depth", cfg.depth),
            ("hidden_size", cfg.hidden_size),
            ("intermediate_size", cfg.intermediate_size),
            ("out_hidden_size", cfg.out_hidden_size),
            ("num_heads", cfg.num_heads),
            ("patch_size", cfg.patch_size),
            ("temporal_patch_size", cfg.temporal_patch_size),
            ("spatial_merge_size", cfg.spatial_merge_size),
            ("num_position_embeddings", cfg.num_position_embeddings),
        ];
        for (name, v) in sizes {
            if !(1..=1 << 20).contains(&v) {
                return Err(Error::msg(format!("config: vision_config.{name} must be a positive size, got {v}")));
            }
        }
        let g = (cfg.num_position_embeddings as f64).sqrt() as i32;
        if cfg.hidden_size % cfg.num_heads != 0
            || (cfg.hidden_size / cfg.num_heads) % 4 != 0
            || g * g != cfg.num_position_embeddings
        {
            return Err(Error::msg(
                "config: vision_config: hidden_size / num_heads must be a multiple of 4 and num_position_embeddings a square",
            ));
        }
        Ok(Some(cfg))
    }
}

#[derive(Debug, Clone)]
struct Block {
    norm1: (Array, Array),
    qkv: Linear,
    proj: Linear,
    norm2: (Array, Array),
    fc1: Linear,
    fc2: Linear,
}

/// The vision tower and merger.
#[derive(Debug, Clone)]
pub struct VisionTower {
    cfg: VisionConfig,
    patch_w: Array,
    patch_b: Array,
    pos_embed: Array,
    blocks: Vec<Block>,
    merger_norm: (Array, Array),
    merger_fc1: Linear,
    merger_fc2: Linear,
    dtype: Dtype,
}

/// Where the tower's tensors live (mlx-vlm's naming).
pub const PREFIX: &str = "vision_tower.";

impl VisionTower {
    /// Whether the checkpoint holds every tensor of the tower (a checkpoint
    /// with none, or only some, serves text).
    pub fn present(cfg: &VisionConfig, w: &dyn Weights) -> bool {
        let wb = |p: &str| [format!("{PREFIX}{p}.weight"), format!("{PREFIX}{p}.bias")];
        let mut names: Vec<String> = ["patch_embed.proj", "merger.norm", "merger.linear_fc1", "merger.linear_fc2"]
            .iter()
            .flat_map(|p| wb(p))
            .collect();
        names.push(format!("{PREFIX}pos_embed.weight"));
        for i in 0..cfg.depth {
            for p in ["norm1", "norm2", "attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"] {
                names.extend(wb(&format!("blocks.{i}.{p}")));
            }
        }
        names.iter().all(|n| w.get(n).is_some())
    }

    /// Loads `vision_tower.*`.
    pub fn load(cfg: &VisionConfig, w: &dyn Weights) -> Result<VisionTower> {
        let (d, p, t) = (cfg.hidden_size, cfg.patch_size, cfg.temporal_patch_size);
        let norm = |n: &str| -> Result<(Array, Array)> {
            Ok((
                w.tensor(&format!("{PREFIX}{n}.weight"), &[d], Kind::Float)?,
                w.tensor(&format!("{PREFIX}{n}.bias"), &[d], Kind::Float)?,
            ))
        };
        let lin = |n: &str, i: i32, o: i32| Linear::load_with_bias(w, &format!("{PREFIX}{n}"), i, o, true);
        let patch_w = w.tensor(&format!("{PREFIX}patch_embed.proj.weight"), &[d, t, p, p, 3], Kind::Float)?;
        let blocks = (0..cfg.depth)
            .map(|i| {
                let b = format!("blocks.{i}");
                Ok(Block {
                    norm1: norm(&format!("{b}.norm1"))?,
                    qkv: lin(&format!("{b}.attn.qkv"), d, 3 * d)?,
                    proj: lin(&format!("{b}.attn.proj"), d, d)?,
                    norm2: norm(&format!("{b}.norm2"))?,
                    fc1: lin(&format!("{b}.mlp.linear_fc1"), d, cfg.intermediate_size)?,
                    fc2: lin(&format!("{b}.mlp.linear_fc2"), cfg.intermediate_size, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let merged = d * cfg.spatial_merge_size * cfg.spatial_merge_size;
        Ok(VisionTower {
            cfg: cfg.clone(),
            dtype: patch_w.dtype(),
            patch_w: patch_w.reshape(&[d, t * p * p * 3])?.transpose(&[1, 0])?,
            patch_b: w.tensor(&format!("{PREFIX}patch_embed.proj.bias"), &[d], Kind::Float)?,
            pos_embed: w.tensor(
                &format!("{PREFIX}pos_embed.weight"),
                &[cfg.num_position_embeddings, d],
                Kind::Float,
            )?,
            blocks,
            merger_norm: norm("merger.norm")?,
            merger_fc1: lin("merger.linear_fc1", merged, merged)?,
            merger_fc2: lin("merger.linear_fc2", merged, cfg.out_hidden_size)?,
        })
    }

    /// The text-model rows of one processed image, `[N / 4, out_hidden]`.
    pub fn embed(&self, img: &MediaInput) -> Result<Array> {
        let c = &self.cfg;
        let (p, t) = (c.patch_size, c.temporal_patch_size);
        let (gh, gw) = (img.grid[1] as i32, img.grid[2] as i32);
        let n = img.pixels.dim(0);
        if img.grid.len() != 3 || img.grid[0] != 1 || n != gh * gw {
            return Err(Error::msg(format!("qwen3_5 vision: patches {n} do not fit the grid {:?}", img.grid)));
        }
        // Pixels in (time, row, column, channel) order, as the weight's layout.
        let x = img
            .pixels
            .astype(self.dtype)?
            .reshape(&[n, 3, t, p, p])?
            .transpose(&[0, 2, 3, 4, 1])?
            .reshape(&[n, t * p * p * 3])?;
        let mut h = x.matmul(&self.patch_w)?.add(&self.patch_b)?;
        h = h.add(&self.position_embeddings(gh, gw)?)?;
        let (cos, sin) = self.rotary(gh, gw)?;
        for b in &self.blocks {
            h = self.block(b, &h, &cos, &sin)?;
        }
        let (nw, nb) = &self.merger_norm;
        let m = c.spatial_merge_size * c.spatial_merge_size;
        let x = layer_norm(&h, Some(nw), Some(nb), 1e-6)?.reshape(&[n / m, m * c.hidden_size])?;
        let x = self.merger_fc1.forward(&x)?;
        // Exact (erf) GELU in the merger, written as the reference writes it.
        let x = x
            .mul(
                &x.div(&Array::scalar_f(std::f64::consts::SQRT_2, x.dtype())?)?
                    .erf()?
                    .add(&Array::scalar_f(1.0, x.dtype())?)?,
            )?
            .div(&Array::scalar_f(2.0, x.dtype())?)?;
        self.merger_fc2.forward(&x)
    }

    /// The learned position table interpolated bilinearly to a `gh x gw`
    /// grid, rows in merge-window order.
    fn position_embeddings(&self, gh: i32, gw: i32) -> Result<Array> {
        let g = (self.cfg.num_position_embeddings as f64).sqrt() as i32;
        let axis = |n: i32| -> Result<(Array, Array, Array)> {
            let at = mlx::linspace(0.0, (g - 1) as f64, n, Dtype::F32)?;
            let lo = at.astype(Dtype::I32)?;
            let hi = lo.add(&Array::i32(1))?.minimum(&Array::i32(g - 1))?;
            let frac = at.sub(&lo.astype(Dtype::F32)?)?;
            Ok((lo, hi, frac))
        };
        let (hf, hc, dh) = axis(gh)?;
        let (wf, wc, dw) = axis(gw)?;
        let col = |a: &Array| a.expand_dims(&[1]);
        let row = |a: &Array| a.expand_dims(&[0]);
        let idx =
            |r: &Array, c: &Array| -> Result<Array> { col(r)?.mul(&Array::i32(g))?.add(&row(c)?)?.reshape(&[gh * gw]) };
        let one = Array::f32(1.0);
        let (ih, iw) = (one.sub(&dh)?, one.sub(&dw)?);
        let weight = |a: &Array, b: &Array| -> Result<Array> {
            col(a)?.mul(&row(b)?)?.reshape(&[gh * gw, 1])?.astype(self.dtype)
        };
        let term = |r: &Array, c: &Array, a: &Array, b: &Array| -> Result<Array> {
            self.pos_embed.take(&idx(r, c)?, 0)?.mul(&weight(a, b)?)
        };
        let e = term(&hf, &wf, &ih, &iw)?
            .add(&term(&hf, &wc, &ih, &dw)?)?
            .add(&term(&hc, &wf, &dh, &iw)?)?
            .add(&term(&hc, &wc, &dh, &dw)?)?;
        let m = self.cfg.spatial_merge_size;
        let d = self.cfg.hidden_size;
        e.reshape(&[gh / m, m, gw / m, m, d])?.transpose(&[0, 2, 1, 3, 4])?.reshape(&[gh * gw, d])
    }

    /// cos/sin `[N, 1, head_dim]` (f32) of the 2-D rotary embedding: per
    /// patch in merge-window order, its row then its column.
    fn rotary(&self, gh: i32, gw: i32) -> Result<(Array, Array)> {
        let m = self.cfg.spatial_merge_size;
        let hd = self.cfg.hidden_size / self.cfg.num_heads;
        let rd = hd / 2;
        let exps = mlx::arange(0.0, rd as f64, 2.0, Dtype::F32)?.div(&Array::f32(rd as f32))?;
        let inv = Array::f32(10000.0).power(&exps)?.reciprocal()?;
        let (mut rows, mut cols) = (Vec::new(), Vec::new());
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for r in 0..m {
                    for c in 0..m {
                        rows.push((bh * m + r) as f32);
                        cols.push((bw * m + c) as f32);
                    }
                }
            }
        }
        let n = gh * gw;
        let f = |v: &[f32]| -> Result<Array> { Array::from_slice(v, &[n, 1])?.mul(&inv) };
        let freqs = mlx::concatenate(&[&f(&rows)?, &f(&cols)?], -1)?;
        let emb = mlx::concatenate(&[&freqs, &freqs], -1)?.expand_dims(&[1])?;
        Ok((emb.cos()?, emb.sin()?))
    }

    fn block(&self, b: &Block, x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
        let c = &self.cfg;
        let n = x.dim(0);
        let (h, hd) = (c.num_heads, c.hidden_size / c.num_heads);
        let y = layer_norm(x, Some(&b.norm1.0), Some(&b.norm1.1), 1e-6)?;
        let qkv = b.qkv.forward(&y)?.reshape(&[n, 3, h, hd])?;
        let part = |i: i32| -> Result<Array> { qkv.slice_axis(1, i, i + 1)?.squeeze(&[1]) };
        let rotate = |x: &Array| -> Result<Array> {
            let half = mlx::concatenate(&[&x.slice_axis(-1, hd / 2, hd)?.neg()?, &x.slice_axis(-1, 0, hd / 2)?], -1)?;
            x.mul(cos)?.add(&half.mul(sin)?)?.astype(x.dtype())
        };
        let heads = |x: &Array| -> Result<Array> { x.transpose(&[1, 0, 2])?.expand_dims(&[0]) };
        let q = heads(&rotate(&part(0)?)?)?;
        let k = heads(&rotate(&part(1)?)?)?;
        let v = heads(&part(2)?)?;
        let o = scaled_dot_product_attention(&q, &k, &v, (hd as f32).powf(-0.5), Mask::None, None)?;
        let o = o.squeeze(&[0])?.transpose(&[1, 0, 2])?.reshape(&[n, c.hidden_size])?;
        let x = x.add(&b.proj.forward(&o)?)?;
        let y = layer_norm(&x, Some(&b.norm2.0), Some(&b.norm2.1), 1e-6)?;
        x.add(&b.fc2.forward(&gelu_approx(&b.fc1.forward(&y)?)?)?)
    }
}
