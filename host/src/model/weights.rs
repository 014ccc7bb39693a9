//! The host's copy of a checkpoint's tensors: read from disk, through the
//! family's rewriter and fusions, lent to a plugin's `build` (recording what
//! it reads). Held by the host so a plugin can be swapped without reading
//! the checkpoint again.

use crate::checkpoint::{Checkpoint, OnDisk, QuantConfig};
use crate::plugins::FamilyEntry;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr, RString, RVec};
use anyhow::{anyhow, Result};
use mlx::Array;
use plugin_api::abi::{ArrayHandle, ErrorKind, ModelBox, PluginError, WeightStore, WeightStore_TO};
use plugin_api::{Fusion, ModelPlan, ParallelSpec, QuantSpec};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;

/// Weights after the family's rewriter, as the host holds them.
pub struct HostWeights {
    /// Tensors by (rewritten) name.
    pub tensors: HashMap<String, Array>,
    /// Declared quantization.
    pub quant: QuantConfig,
    /// Names a plugin has read (to find the tensors no part of the model uses).
    read: RefCell<HashSet<String>>,
    /// Where tensors that reach the family as stored lie on disk (by their
    /// rewritten names), so a share of one is read alone.
    on_disk: HashMap<String, OnDisk>,
    /// How the model is split over a group of processes (`None`: whole).
    pub parallel: Option<ParallelSpec>,
}

impl WeightStore for HostWeights {
    fn get(&self, name: RStr<'_>) -> ROption<ArrayHandle> {
        let t = self.tensors.get(name.as_str());
        if t.is_some() {
            self.read.borrow_mut().insert(name.as_str().to_string());
        }
        t.map(|a| ArrayHandle::from(a.clone())).into()
    }
    fn quant(&self, prefix: RStr<'_>) -> ROption<QuantSpec> {
        let p = prefix.as_str();
        let (Some(w), Some(s)) = (self.tensors.get(&format!("{p}.weight")), self.tensors.get(&format!("{p}.scales")))
        else {
            return ROption::RNone;
        };
        self.quant.spec_for(p, w.shape(), s.shape()).map(|q| QuantSpec::from(&q)).into()
    }
    fn names(&self) -> RVec<RString> {
        self.tensors.keys().map(|k| RString::from(k.as_str())).collect()
    }
    fn parallel(&self) -> ROption<ParallelSpec> {
        self.parallel.into()
    }
    fn slice(&self, name: RStr<'_>, axis: i32, start: i32, stop: i32) -> RResult<ROption<ArrayHandle>, PluginError> {
        let n = name.as_str();
        let Some(t) = self.tensors.get(n) else { return ROk(ROption::RNone) };
        self.read.borrow_mut().insert(n.to_string());
        let got = match self.on_disk.get(n) {
            Some(d) => d.read_slice(axis, start, stop).map_err(|e| PluginError::from(format!("{e:#}"))),
            None => {
                t.slice_axis(axis, start, stop).map_err(|e| PluginError::new(e.kind.into(), format!("{n}: {}", e.msg)))
            }
        };
        match got {
            Ok(a) => ROk(ROption::RSome(a.into())),
            Err(e) => RErr(e),
        }
    }
}

/// A checkpoint as read from disk, before any family's rewriter.
pub(crate) struct Source {
    /// The checkpoint's `model_type`.
    pub(crate) model_type: String,
    /// The config as JSON text.
    pub(crate) config_text: String,
    pub(crate) config_path: String,
    /// The checkpoint folder or file, for errors about its tensors.
    pub(crate) location: String,
    pub(crate) tensors: HashMap<String, Array>,
    /// Where the safetensors tensors lie on disk.
    pub(crate) on_disk: HashMap<String, OnDisk>,
    pub(crate) quant: QuantConfig,
}

impl Source {
    /// Reads the checkpoint at `path` (its tokenizer comes back beside it).
    pub(crate) fn open(path: &Path) -> Result<(Source, Checkpoint)> {
        let mut ck = Checkpoint::open(path)?;
        let src = Source {
            model_type: ck.model_type.clone(),
            config_text: serde_json::to_string(&ck.config)?,
            config_path: config_source(path),
            location: path.display().to_string(),
            tensors: std::mem::take(&mut ck.tensors),
            on_disk: std::mem::take(&mut ck.on_disk),
            quant: ck.quant.clone(),
        };
        Ok((src, ck))
    }
}

/// Plans, rewrites and builds a model with `fam` from `src`: this rank's
/// part of it when the process is one rank of a split model.
pub(crate) fn assemble(fam: &FamilyEntry, src: &Source) -> Result<(ModelPlan, Rc<HostWeights>, ModelBox)> {
    let (plan, weights) = plan_and_rewrite(fam, src)?;
    let model =
        build(fam, &plan, &weights).map_err(|e| crate::memory::with_kind_of(&e, format!("{}: {e:#}", src.location)))?;
    Ok((plan, weights, model))
}

/// The family's plan for `src` and the checkpoint's tensors after its rewriter.
pub(crate) fn plan_and_rewrite(fam: &FamilyEntry, src: &Source) -> Result<(ModelPlan, Rc<HostWeights>)> {
    let plan = fam
        .family
        .plan(RStr::from(src.config_text.as_str()))
        .into_result()
        .map_err(|e| anyhow::Error::new(PluginError::new(e.kind, format!("{}: {e}", src.config_path))))?;
    let mut weights = HostWeights::rewritten(fam, &plan, &src.tensors, &src.on_disk, &src.quant)
        .map_err(|e| crate::memory::with_kind_of(&e, format!("{}: {e:#}", src.location)))?;
    weights.parallel = crate::distributed::parallel().map(ParallelSpec::from);
    // A split model's shared layers fuse their own shares (a fused tensor
    // would be read whole to take each part's share of it).
    if mlx::nn::Parallel::tensor(crate::distributed::parallel()).is_none() {
        for f in fam.family.fusions(&plan) {
            weights.fuse(&f)?;
        }
    }
    Ok((plan, Rc::new(weights)))
}

/// Tensor suffixes a fused module concatenates.
const FUSED_SUFFIXES: [&str; 4] = ["weight", "scales", "biases", "bias"];

impl HostWeights {
    /// A checkpoint's `tensors` through `fam`'s rewriter for `plan`, before
    /// any [`Fusion`].
    pub fn rewritten(
        fam: &FamilyEntry,
        plan: &ModelPlan,
        tensors: &HashMap<String, Array>,
        on_disk: &HashMap<String, OnDisk>,
        quant: &QuantConfig,
    ) -> Result<HostWeights> {
        let mut placed = HashMap::new();
        let mut out = HashMap::with_capacity(tensors.len());
        // Quantization follows the rewrite: a module renamed or split (a
        // fused `qkv_proj` into q/k/v) keeps its source's per-module entry,
        // or a mixed-precision checkpoint would read it at the default width.
        let mut inherited: HashMap<String, Option<mlx::quant::QuantSpec>> = HashMap::new();
        for (name, t) in tensors {
            let parts = fam
                .family
                .rewrite(plan, RStr::from(name.as_str()), t.clone().into())
                .into_result()
                .map_err(|e| plugin_err(&fam.name, &format!("rewriting {name}"), e))?;
            let source = module_of(name).and_then(|m| Some((m, quant.overrides.get(m)?)));
            for p in parts {
                let to = p.0.into_string();
                // Passed through untouched (the same graph node): still read from its file.
                if let Some(d) = on_disk.get(name).filter(|_| p.1.to_array().id() == t.id()) {
                    placed.insert(to.clone(), d.clone());
                }
                if let (Some((from, spec)), Some(module)) = (source, module_of(&to)) {
                    if module != from {
                        inherited.insert(module.to_string(), spec.clone());
                    }
                }
                out.insert(to, p.1.into_array());
            }
        }
        let mut quant = quant.clone();
        for (module, spec) in inherited {
            quant.overrides.entry(module).or_insert(spec);
        }
        let mut w = HostWeights::new(out, quant);
        w.on_disk = placed;
        Ok(w)
    }

    /// Weights held under these names.
    pub fn new(tensors: HashMap<String, Array>, quant: QuantConfig) -> HostWeights {
        HostWeights { tensors, quant, read: RefCell::default(), on_disk: HashMap::new(), parallel: None }
    }

    /// The names no plugin has read so far, sorted.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.borrow();
        let mut v: Vec<String> = self.tensors.keys().filter(|k| !read.contains(*k)).cloned().collect();
        v.sort();
        v
    }

    /// Applies one [`Fusion`]: concatenates the parts' tensors along axis 0
    /// under the fused name and drops the parts (so the host holds the
    /// weights once). Leaves everything as it is when the parts are stored
    /// differently or any is missing.
    fn fuse(&mut self, f: &Fusion) -> Result<()> {
        let parts: Vec<&str> = f.parts.iter().map(|p| p.as_str()).collect();
        if parts.len() < 2 || self.tensors.contains_key(&format!("{}.weight", f.into)) {
            return Ok(());
        }
        let mut spec = None;
        for (i, p) in parts.iter().enumerate() {
            let Some(w) = self.tensors.get(&format!("{p}.weight")) else { return Ok(()) };
            let s = self.tensors.get(&format!("{p}.scales")).and_then(|s| self.quant.spec_for(p, w.shape(), s.shape()));
            if i > 0 && s != spec {
                return Ok(());
            }
            spec = s;
        }
        let mut fused = Vec::new();
        for suffix in FUSED_SUFFIXES {
            let names: Vec<String> = parts.iter().map(|p| format!("{p}.{suffix}")).collect();
            let found: Vec<&Array> = names.iter().filter_map(|n| self.tensors.get(n)).collect();
            if found.is_empty() {
                continue;
            }
            // Stacking needs one dtype and equal trailing dims.
            let (dt, tail) = (found[0].dtype(), &found[0].shape()[1..]);
            if found.len() != parts.len()
                || found.iter().any(|a| a.dtype() != dt || a.ndim() == 0 || &a.shape()[1..] != tail)
            {
                return Ok(());
            }
            let cat = mlx::concatenate(&found, 0).map_err(|e| anyhow!("fusing {}.{suffix}: {}", f.into, e.msg))?;
            fused.push((format!("{}.{suffix}", f.into), names, cat));
        }
        for (name, parts, cat) in fused {
            for p in parts {
                self.tensors.remove(&p);
            }
            self.tensors.insert(name, cat);
        }
        if let Some(s) = spec {
            self.quant.overrides.insert(f.into.to_string(), Some(s));
        }
        Ok(())
    }
}

/// The module a (possibly quantized) tensor belongs to: `{module}.weight`,
/// `.scales` or `.biases`.
fn module_of(name: &str) -> Option<&str> {
    let (module, part) = name.rsplit_once('.')?;
    matches!(part, "weight" | "scales" | "biases").then_some(module)
}

/// A plugin's error as the host reports it, naming the family and the call;
/// it stays a [`PluginError`] of the same kind, so the host can branch on
/// the kind (see [`crate::memory::explain`]).
pub(crate) fn plugin_err(family: &str, what: &str, e: PluginError) -> anyhow::Error {
    anyhow::Error::new(PluginError::new(e.kind, format!("{family} plugin: {what}: {e}")))
}

fn config_source(path: &Path) -> String {
    if path.is_dir() {
        path.join("config.json").display().to_string()
    } else {
        path.display().to_string()
    }
}

/// Builds the family's model from host weights. When that fails, the error
/// also lists the checkpoint's tensors the build never read (a renamed or
/// misplaced tensor shows up as missing under one name, unused under another).
pub fn build(fam: &FamilyEntry, plan: &ModelPlan, weights: &HostWeights) -> Result<ModelBox> {
    let store = WeightStore_TO::from_ptr(weights, TD_Opaque);
    fam.family.build(plan, store).into_result().map_err(|e| {
        // Only for a build that failed on its tensors (the rest is noise).
        let unread = if e.kind == ErrorKind::MissingWeight { weights.unread() } else { Vec::new() };
        let e = if unread.is_empty() {
            e
        } else {
            let text = format!("{e}; {} unexpected: {}", count(unread.len(), "tensor"), mlx::nn::fold_names(&unread));
            PluginError::new(e.kind, text)
        };
        plugin_err(&fam.name, "build", e)
    })
}

/// `1 tensor`, `3 tensors`.
pub fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
