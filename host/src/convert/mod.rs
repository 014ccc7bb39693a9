//! `famlx convert`: a checkpoint (Hugging Face folder, mlx-community folder
//! or GGUF file) to an mlx-community folder, quantized, dequantized, cast or
//! re-sharded, as `mlx_lm.convert` writes it. Per tensor, the family's
//! rewriter (the same one the loader runs) names it and its quantization
//! class says whether and how it may be quantized ([`policy`]); the host
//! does the rest once for every family: shards ([`shards`]), config and
//! the all-or-nothing output folder (`output`), side files checked before
//! they are copied (`side_files`).

mod output;
pub mod policy;
pub mod shards;
mod side_files;
mod verify;

pub use verify::verify;

use crate::checkpoint::QuantConfig;
use crate::model::{HostWeights, Source};
use crate::plugins::Registry;
use anyhow::{anyhow, bail, Context, Result};
use mlx::quant::QuantSpec;
use mlx::{Array, Dtype};
use policy::{Action, QuantRun};
use serde_json::{Map, Value};
use shards::OutTensor;
use std::path::PathBuf;
use std::time::Instant;

/// What to convert and how.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The source checkpoint (folder or `.gguf`).
    pub src: PathBuf,
    /// The output folder.
    pub out: PathBuf,
    /// Quantize with these settings.
    pub quantize: Option<QuantRun>,
    /// Dequantize a quantized checkpoint.
    pub dequantize: bool,
    /// Store float tensors in this type (default: the config's `torch_dtype`).
    pub dtype: Option<Dtype>,
    /// Largest shard, in bytes.
    pub max_shard_bytes: u64,
    /// Replace a non-empty output folder.
    pub force: bool,
    /// Use this family whatever plugin claims the `model_type` first.
    pub family: Option<String>,
}

/// What a conversion did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Tensors written.
    pub tensors: usize,
    /// Shard files written.
    pub shards: usize,
    /// Bytes of tensor data read (the source's tensors, as stored).
    pub bytes_in: u64,
    /// Bytes of tensor data written.
    pub bytes_out: u64,
    /// Parameters (unpacked).
    pub params: u64,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl Summary {
    /// Bits per parameter of the output.
    pub fn bits_per_weight(&self) -> f64 {
        self.bytes_out as f64 * 8.0 / self.params.max(1) as f64
    }
}

/// Converts `o.src` into `o.out` with the families of `reg`.
///
/// Everything is written into a temporary folder beside `o.out` and renamed
/// at the end, so an interrupted or failed run never leaves a folder that
/// loads half a model.
pub fn convert(reg: &Registry, o: &ConvertOptions) -> Result<Summary> {
    let start = Instant::now();
    if o.quantize.is_some() && o.dequantize {
        bail!("choose either --quantize or --dequantize, not both");
    }
    let out_dir = output::check_target(&o.src, &o.out, o.force)?;
    // Read and checked now, so a bad one fails the run before any work.
    let side = if o.src.is_dir() { Some(side_files::SideFiles::read(&o.src)?) } else { None };
    let (mut src, ck) = Source::open(&o.src)?;
    let fam = reg.resolve(&src.model_type, o.family.as_deref()).with_context(|| format!("{}", o.src.display()))?;
    let plan = fam
        .family
        .plan(abi_stable::std_types::RStr::from(src.config_text.as_str()))
        .into_result()
        .map_err(|e| anyhow!("{}: {e}", src.config_path))?;
    let bytes_in: u64 = src.tensors.values().map(|a| a.nbytes() as u64).sum();
    let weights = HostWeights::rewritten(&fam, &plan, &src.tensors, &std::collections::HashMap::new(), &src.quant)
        .map_err(|e| anyhow!("{}: {e:#}", src.location))?;
    // The rewritten tensors hold what they need of the source from here on.
    src.tensors.clear();
    let quantized_src = weights.tensors.keys().any(|k| k.ends_with(".scales"));
    if o.quantize.is_some() && quantized_src {
        bail!(
            "{}: already quantized; convert from the unquantized checkpoint, or dequantize it first (-d)",
            o.src.display()
        );
    }
    let is_gguf = ck.config.get("format").and_then(Value::as_str) == Some("gguf");
    let target = o.dtype.or_else(|| if is_gguf { None } else { config_dtype(&ck.config) });
    let mut quant = o.quantize.clone();
    if let Some(r) = quant.as_mut().and_then(|q| q.recipe.as_mut()) {
        let modules: Vec<&str> = weights.tensors.keys().filter_map(|k| k.strip_suffix(".weight")).collect();
        r.learn_layers(modules.iter().copied())?;
    }

    let mut names: Vec<&String> = weights.tensors.keys().collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    let mut entries = Map::new();
    for name in names {
        let t = &weights.tensors[name];
        let module = name.strip_suffix(".weight");
        let scales = module.and_then(|m| weights.tensors.get(&format!("{m}.scales")));
        if o.dequantize {
            if let (Some(m), Some(s)) = (module, scales) {
                out.push(dequantized(m, t, s, weights.tensors.get(&format!("{m}.biases")), &weights.quant, target)?);
                continue;
            }
            if is_quant_part(name, &weights) {
                continue;
            }
        }
        let class = fam.family.quant_class(&plan, abi_stable::std_types::RStr::from(name.as_str()));
        let action = policy::decide(name, &class, t.shape(), t.dtype(), target, quant.as_ref());
        let err = |e: mlx::Error| anyhow!("converting {name}: {}", e.msg);
        match action {
            Action::Keep => out.push(dense(name, t.clone(), params_of(name, t, scales, &weights.quant))),
            Action::Cast(d) => out.push(dense(name, t.astype(d).map_err(err)?, t.size() as u64)),
            Action::Quantize { cast, spec, entry } => {
                let w = match cast {
                    Some(d) => t.astype(d).map_err(err)?,
                    None => t.clone(),
                };
                let q = mlx::quant::quantize(&w, &spec).map_err(err)?;
                let m = module.expect("quantized tensors are weights");
                out.push(OutTensor { name: name.clone(), array: q.w, params: t.size() as u64 });
                out.push(dense(&format!("{m}.scales"), q.scales, 0));
                if let Some(b) = q.biases {
                    out.push(dense(&format!("{m}.biases"), b, 0));
                }
                if let Some(e) = entry {
                    entries.insert(m.to_string(), e);
                }
            }
        }
    }
    // Written in name order (a quantized module's parts side by side).
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let tensors = out.len();
    // GGUF files omit the output head when it is tied to the embeddings.
    let has_head = out.iter().any(|t| t.name == "lm_head.weight");
    let params: u64 = out.iter().map(|t| t.params).sum();
    let written_quant = match (&quant, o.dequantize) {
        (Some(q), _) => Some(output::QuantBlock::New { spec: q.spec.clone(), entries }),
        (None, true) => Some(output::QuantBlock::Drop),
        (None, false) if is_gguf && quantized_src => Some(output::QuantBlock::Declared(gguf_block(&out, &weights))),
        _ => None,
    };
    drop(weights);

    let tmp = output::TempDir::beside(&out_dir)?;
    let written = shards::write(tmp.path(), out, o.max_shard_bytes)?;
    let config =
        if is_gguf { output::gguf_config(&plan, &ck, target, has_head)? } else { output::folder_config(&o.src)? };
    output::write_config(tmp.path(), config, written_quant.as_ref())?;
    if is_gguf {
        let tok = ck.tokenizer.as_ref().ok_or_else(|| {
            anyhow!("{}: {}", o.src.display(), ck.tokenizer_error.clone().unwrap_or_else(|| "no tokenizer".into()))
        })?;
        tok.save_hf(tmp.path()).map_err(|e| anyhow!("{e}"))?;
    } else if let Some(side) = &side {
        side.write(tmp.path())?;
    }
    tmp.commit(&out_dir, o.force)?;
    Ok(Summary {
        tensors,
        shards: written.shards,
        bytes_in,
        bytes_out: written.bytes,
        params,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn dense(name: &str, array: Array, params: u64) -> OutTensor {
    OutTensor { name: name.to_string(), array, params }
}

/// Parameters a tensor kept as it is stands for: a packed quantized weight
/// counts its unpacked elements, its scales and biases none.
fn params_of(name: &str, t: &Array, scales: Option<&Array>, quant: &QuantConfig) -> u64 {
    let module = name.strip_suffix(".weight");
    match (module, scales) {
        (Some(m), Some(s)) => match quant.spec_for(m, t.shape(), s.shape()) {
            Some(spec) => t.size() as u64 * 32 / spec.bits.max(1) as u64,
            None => t.size() as u64,
        },
        _ if name.ends_with(".scales") || name.ends_with(".biases") => 0,
        _ => t.size() as u64,
    }
}

/// A quantized module's `.scales` / `.biases` (with a `.weight` beside them).
fn is_quant_part(name: &str, w: &HostWeights) -> bool {
    let Some((m, part)) = name.rsplit_once('.') else { return false };
    matches!(part, "scales" | "biases") && w.tensors.contains_key(&format!("{m}.weight"))
}

/// One module dequantized, as `mlx_lm.convert -d` does it: the scales and
/// biases are cast to the run's type first, the weight unpacked in it.
fn dequantized(
    module: &str,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    quant: &QuantConfig,
    target: Option<Dtype>,
) -> Result<OutTensor> {
    let err = |e: mlx::Error| anyhow!("dequantizing {module}: {}", e.msg);
    let spec = quant
        .spec_for(module, w.shape(), scales.shape())
        .ok_or_else(|| anyhow!("{module}: stored quantized, but the config declares no quantization for it"))?;
    let cast = |a: &Array| match target.filter(|_| a.dtype().is_float()) {
        Some(d) => a.astype(d).map_err(err),
        None => Ok(a.clone()),
    };
    let q = mlx::quant::Quantized { w: w.clone(), scales: cast(scales)?, biases: biases.map(cast).transpose()? };
    let out_dtype = if spec.mode == "affine" { None } else { Some(target.unwrap_or(Dtype::BF16)) };
    let a = mlx::quant::dequantize(&q, &spec, out_dtype).map_err(err)?;
    let params = a.size() as u64;
    Ok(OutTensor { name: format!("{module}.weight"), array: a, params })
}

/// The float type `mlx_lm.convert` picks when `--dtype` is not given: the
/// config's `torch_dtype`, else its text config's `dtype`.
fn config_dtype(config: &Value) -> Option<Dtype> {
    let name = config
        .get("torch_dtype")
        .and_then(Value::as_str)
        .or_else(|| config.get("text_config").and_then(|t| t.get("dtype")).and_then(Value::as_str))?;
    matches!(name, "float16" | "bfloat16" | "float32").then(|| Dtype::parse(name)).flatten()
}

/// The quantization a GGUF's packed tensors carry, as a config block: the
/// most common spec as the default, the others per module.
fn gguf_block(out: &[OutTensor], w: &HostWeights) -> Value {
    let mut specs: Vec<(String, QuantSpec)> = Vec::new();
    for t in out {
        let Some(m) = t.name.strip_suffix(".scales") else { continue };
        let Some(wt) = w.tensors.get(&format!("{m}.weight")) else { continue };
        if let Some(s) = w.quant.spec_for(m, wt.shape(), t.array.shape()) {
            specs.push((m.to_string(), s));
        }
    }
    let mut counts: Vec<(QuantSpec, usize)> = Vec::new();
    for (_, s) in &specs {
        match counts.iter_mut().find(|(c, _)| c == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s.clone(), 1)),
        }
    }
    let default = counts.iter().max_by_key(|(_, n)| *n).map(|(s, _)| s.clone()).unwrap_or(QuantSpec::affine(32, 4));
    let spec_json = |s: &QuantSpec| serde_json::json!({"group_size": s.group_size, "bits": s.bits, "mode": s.mode});
    let mut block = spec_json(&default);
    for (m, s) in &specs {
        if *s != default {
            block[m.as_str()] = spec_json(s);
        }
    }
    block
}
