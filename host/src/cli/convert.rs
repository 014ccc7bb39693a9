//! `famlx convert`: `mlx_lm.convert`'s flags over [`crate::convert`].

use crate::convert::{self, policy, ConvertOptions};
use anyhow::{bail, Result};
use clap::Args;
use mlx::Dtype;
use std::path::PathBuf;

/// `famlx convert` flags (mlx_lm.convert's, plus famlx's own).
#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// The source: a Hugging Face or mlx-community folder, a .gguf file, or a hub repo id.
    #[arg(long = "hf-path", alias = "model")]
    pub hf_path: String,
    /// The output folder (must not exist or be empty, unless --force).
    #[arg(long = "mlx-path", default_value = "mlx_model")]
    pub mlx_path: PathBuf,
    /// Quantize.
    #[arg(short = 'q', long)]
    pub quantize: bool,
    /// Elements per quantization group (default per mode: affine 64, mxfp4 32, nvfp4 16, mxfp8 32).
    #[arg(long = "q-group-size")]
    pub q_group_size: Option<i32>,
    /// Bits per weight (default per mode: affine 4, mxfp4 4, nvfp4 4, mxfp8 8).
    #[arg(long = "q-bits")]
    pub q_bits: Option<i32>,
    /// Quantization mode.
    #[arg(long = "q-mode", default_value = "affine", value_parser = policy::MODES)]
    pub q_mode: String,
    /// Mixed-precision recipe (affine only).
    #[arg(long = "quant-predicate", value_parser = policy::RECIPES)]
    pub quant_predicate: Option<String>,
    /// Type of the unquantized tensors (default: the config's torch_dtype).
    #[arg(long, value_parser = ["float16", "bfloat16", "float32"])]
    pub dtype: Option<String>,
    /// Dequantize a quantized checkpoint.
    #[arg(short = 'd', long)]
    pub dequantize: bool,
    /// Largest shard file (bytes, or with K/M/G suffix, binary as mlx-lm's 5 GB).
    #[arg(long = "max-shard-size", default_value = "5GB")]
    pub max_shard_size: String,
    /// Replace a non-empty output folder.
    #[arg(long)]
    pub force: bool,
    /// Load the output and compare its logits with the source's.
    #[arg(long)]
    pub verify: bool,
    /// Hub revision (branch, tag or commit) when --hf-path is a repo id.
    #[arg(long)]
    pub revision: Option<String>,
    /// Extra plugin directory (searched first; repeatable).
    #[arg(long = "plugin-dir")]
    pub plugin_dirs: Vec<PathBuf>,
    /// Use this family even if another plugin claims the model_type first.
    #[arg(long)]
    pub family: Option<String>,
}

/// Parses `5GB`, `512MB`, `100K`, `123` (bytes); suffixes are binary.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => bail!("--max-shard-size {s:?}: unknown unit (bytes, or K, M, G, T)"),
    };
    let n: f64 = digits.trim().parse().map_err(|_| anyhow::anyhow!("--max-shard-size {s:?}: not a size"))?;
    if !(n > 0.0 && n.is_finite()) {
        bail!("--max-shard-size {s:?}: must be positive");
    }
    Ok((n * (1u64 << shift) as f64) as u64)
}

/// Runs `famlx convert`.
pub fn run(a: ConvertArgs) -> Result<()> {
    let quantize = if a.quantize {
        Some(policy::QuantRun::new(&a.q_mode, a.q_bits, a.q_group_size, a.quant_predicate.as_deref())?)
    } else {
        if a.q_bits.is_some() || a.q_group_size.is_some() || a.quant_predicate.is_some() || a.q_mode != "affine" {
            bail!("--q-bits, --q-group-size, --q-mode and --quant-predicate need -q/--quantize");
        }
        None
    };
    let src = crate::hub::resolve_model(&a.hf_path, a.revision.as_deref())?;
    let o = ConvertOptions {
        src: src.clone(),
        out: a.mlx_path.clone(),
        quantize,
        dequantize: a.dequantize,
        dtype: a.dtype.as_deref().and_then(Dtype::parse),
        max_shard_bytes: parse_size(&a.max_shard_size)?,
        force: a.force,
        family: a.family.clone(),
    };
    let reg = super::setup::registry(&a.plugin_dirs, false)?;
    mlx::memory::reset_peak();
    let s = convert::convert(&reg, &o)?;
    eprintln!(
        "[INFO] wrote {} ({} tensors in {} shard{}): {:.1} MB in, {:.1} MB out, {:.3} bits per weight, {:.2} s, peak memory {:.1} MB",
        o.out.display(),
        s.tensors,
        s.shards,
        if s.shards == 1 { "" } else { "s" },
        s.bytes_in as f64 / 1e6,
        s.bytes_out as f64 / 1e6,
        s.bits_per_weight(),
        s.seconds,
        mlx::memory::peak() as f64 / 1e6,
    );
    if a.verify {
        let v = convert::verify(&reg, &src, &o.out, a.family.as_deref(), 64)?;
        println!(
            "verify: first-step logits max |diff| {:.4}; top-1 agreement {}/{} ({:.1}%)",
            v.first_logit_max_diff,
            v.top1_agree,
            v.steps,
            100.0 * v.top1_agree as f64 / v.steps.max(1) as f64
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("5GB").unwrap(), 5 << 30);
        assert_eq!(parse_size("100k").unwrap(), 100 << 10);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert!(parse_size("5XB").is_err());
        assert!(parse_size("-1").is_err());
    }
}
