//! A loaded model: the checkpoint's rewritten weights (held by the host so a
//! plugin can be swapped without re-reading them), the family's plan and
//! built model, the tokenizer and the caches.

use crate::cache::{make_caches, CacheOptions, CacheSnapshot, SharedCache};
use crate::checkpoint::{Checkpoint, QuantConfig};
use crate::plugins::{FamilyEntry, Registry};
use crate::speculative::{Drafter, SpecParams};
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{ROption, RStr, RString, RVec};
use anyhow::{anyhow, Context, Result};
use famlx_text::Tokenizer;
use mlx::Array;
use plugin_api::{
    ArrayHandle, CacheBox, ForwardInput, Fusion, LogitsWanted, ModelBox, ModelPlan, QuantSpec, WeightStore,
    WeightStore_TO,
};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

/// Weights after the family's rewriter, as the host holds them.
pub struct HostWeights {
    /// Tensors by (rewritten) name.
    pub tensors: HashMap<String, Array>,
    /// Declared quantization.
    pub quant: QuantConfig,
    /// Names a plugin has read (to find the tensors no part of the model uses).
    read: RefCell<HashSet<String>>,
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
}

/// A checkpoint as read from disk, before any family's rewriter.
pub(crate) struct Source {
    /// The checkpoint's `model_type`.
    pub(crate) model_type: String,
    /// The config as JSON text.
    pub(crate) config_text: String,
    config_path: String,
    /// The checkpoint folder or file, for errors about its tensors.
    pub(crate) location: String,
    tensors: HashMap<String, Array>,
    quant: QuantConfig,
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
            quant: ck.quant.clone(),
        };
        Ok((src, ck))
    }
}

/// Plans, rewrites and builds a model with `fam` from `src`.
fn assemble(fam: &FamilyEntry, src: &Source) -> Result<(ModelPlan, Rc<HostWeights>, ModelBox)> {
    let (plan, weights) = plan_and_rewrite(fam, src)?;
    let model = build(fam, &plan, &weights).map_err(|e| anyhow!("{}: {e:#}", src.location))?;
    Ok((plan, weights, model))
}

/// The family's plan for `src` and the checkpoint's tensors after its rewriter.
pub(crate) fn plan_and_rewrite(fam: &FamilyEntry, src: &Source) -> Result<(ModelPlan, Rc<HostWeights>)> {
    let plan = fam
        .family
        .plan(RStr::from(src.config_text.as_str()))
        .into_result()
        .map_err(|e| anyhow!("{}: {e}", src.config_path))?;
    let mut weights =
        HostWeights::rewritten(fam, &plan, &src.tensors, &src.quant).map_err(|e| anyhow!("{}: {e:#}", src.location))?;
    for f in fam.family.fusions(&plan) {
        weights.fuse(&f)?;
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
        quant: &QuantConfig,
    ) -> Result<HostWeights> {
        let mut out = HashMap::with_capacity(tensors.len());
        for (name, t) in tensors {
            let parts = fam
                .family
                .rewrite(plan, RStr::from(name.as_str()), t.clone().into())
                .into_result()
                .map_err(|e| plugin_err(&fam.name, &format!("rewriting {name}"), e))?;
            for p in parts {
                out.insert(p.0.into_string(), p.1.into_array());
            }
        }
        Ok(HostWeights::new(out, quant.clone()))
    }

    /// Weights held under these names.
    pub fn new(tensors: HashMap<String, Array>, quant: QuantConfig) -> HostWeights {
        HostWeights { tensors, quant, read: RefCell::default() }
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
            let cat = mlx::concatenate(&found, 0).map_err(|e| anyhow!("fusing {}.{suffix}: {}", f.into, e.0))?;
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

/// A model ready to run.
pub struct LoadedModel {
    /// The family serving it.
    pub family: Arc<FamilyEntry>,
    /// The family's plan.
    pub plan: ModelPlan,
    /// Rewritten weights.
    pub weights: Rc<HostWeights>,
    /// What was read from disk, kept for rebuilding after a plugin reload.
    pub(crate) source: Rc<Source>,
    /// The built model.
    pub model: ModelBox,
    /// The tokenizer, when the checkpoint has one.
    pub tokenizer: Option<Tokenizer>,
    /// Why the checkpoint has no usable tokenizer.
    pub tokenizer_error: Option<String>,
    /// Host handles to the caches.
    pub caches: Vec<SharedCache>,
    /// The plugin's view of the same caches.
    cache_boxes: RVec<CacheBox>,
    /// Cache settings.
    pub cache_opts: CacheOptions,
    /// The drafter speculative decoding uses, when one is loaded.
    pub drafter: Option<Drafter>,
    /// Speculative decoding settings.
    pub spec: SpecParams,
    /// The caches as they were after the last prompt's prefill, when
    /// [`crate::generate::GenParams::checkpoint_prompt`] asked for it.
    pub prompt_checkpoint: Option<crate::cache::Checkpoint>,
}

/// The model's BOS convention (`plan.add_bos`, from its family) where the
/// tokenizer is silent: a checkpoint whose tokenizer_config has no
/// `add_bos_token` and whose tokenizer.json inserts no BOS still gets BOS if
/// its family is trained with one (Gemma). A tokenizer that says either way
/// wins; [`Tokenizer::encode`]'s rule still prevents a second BOS.
pub fn apply_bos_convention(tok: &mut Tokenizer, plan: &ModelPlan) {
    if let (false, Some(on)) = (tok.add_bos_declared(), plan.add_bos.into_option()) {
        tok.set_add_bos(on);
    }
}

fn plugin_err(family: &str, what: &str, e: RString) -> anyhow::Error {
    anyhow!("{family} plugin: {what}: {e}")
}

impl LoadedModel {
    /// Opens the checkpoint at `path`, picks its family and builds it.
    pub fn load(
        path: &Path,
        registry: &Registry,
        family: Option<&str>,
        cache_opts: CacheOptions,
    ) -> Result<LoadedModel> {
        let (source, ck) = Source::open(path)?;
        let fam = registry.resolve(&ck.model_type, family).with_context(|| format!("{}", path.display()))?;
        let source = Rc::new(source);
        let (plan, weights, model) = assemble(&fam, &source)?;
        let caches = make_caches(&plan.caches, &cache_opts)?;
        let cache_boxes = caches.iter().map(SharedCache::boxed).collect();
        let mut tokenizer = ck.tokenizer;
        if let Some(t) = tokenizer.as_mut() {
            apply_bos_convention(t, &plan);
        }
        Ok(LoadedModel {
            family: fam,
            plan,
            weights,
            source,
            model,
            tokenizer,
            tokenizer_error: ck.tokenizer_error,
            caches,
            cache_boxes,
            cache_opts,
            drafter: None,
            spec: SpecParams::default(),
            prompt_checkpoint: None,
        })
    }

    /// Forgets the checkpoint's tensors as read from disk, which only a hot
    /// reload needs: tensors the family fused or transformed at load would
    /// otherwise stay in memory twice. A later [`LoadedModel::swap_family`]
    /// then fails with a message saying to start with `--watch`.
    pub fn release_source(&mut self) {
        if self.source.tensors.is_empty() {
            return;
        }
        let s = &self.source;
        self.source = Rc::new(Source {
            model_type: s.model_type.clone(),
            config_text: s.config_text.clone(),
            config_path: s.config_path.clone(),
            location: s.location.clone(),
            tensors: HashMap::new(),
            quant: s.quant.clone(),
        });
    }

    /// Swaps in another build of the serving family (hot reload), rebuilding
    /// the model from the tensors already in memory. Caches survive when the
    /// new plan asks for the same cache layout; returns whether they did.
    /// On error the current family keeps serving.
    pub fn swap_family(&mut self, fam: Arc<FamilyEntry>) -> Result<bool> {
        if self.source.tensors.is_empty() {
            return Err(anyhow!(
                "{}: the checkpoint's tensors were not kept in memory; start with --watch to hot-reload plugins",
                self.source.config_path
            ));
        }
        let (plan, weights, model) = assemble(&fam, &self.source)?;
        let same = plan.caches == self.plan.caches;
        self.family = fam;
        self.plan = plan;
        self.weights = weights;
        self.model = model;
        // The target's own draft head comes from the new build too.
        if self.drafter.as_ref().is_some_and(|d| d.source == "mtp") {
            self.drafter = match Drafter::from_target(self) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("famlx: warning: speculative decoding off after the reload: {e:#}");
                    None
                }
            };
        }
        if let Some(t) = self.tokenizer.as_mut() {
            apply_bos_convention(t, &self.plan);
        }
        if !same {
            self.reset_caches()?;
        }
        Ok(same)
    }

    /// The checkpoint's tensors that no part of the model reads: neither the
    /// model's build nor the family's own drafter (tried now if none was
    /// built, so an MTP head left off with `--no-mtp` does not count).
    pub fn unused_tensors(&self) -> Vec<String> {
        if self.drafter.is_none() {
            // Only its reads matter: a head that cannot be built was reported where it was asked for.
            let _ = Drafter::from_target(self);
        }
        self.weights.unread()
    }

    /// How many tokens may follow a prompt of `prompt_len` before the
    /// model's context is full (`None`: no bound, the context is unknown or
    /// a `--max-kv-size` window keeps only the newest tokens). A prompt that
    /// does not fit is an error naming both lengths, before any work.
    pub fn context_room(&self, prompt_len: usize) -> Result<Option<usize>> {
        let ctx = self.plan.max_position_embeddings as usize;
        if ctx == 0 || self.cache_opts.max_kv_size.is_some() {
            return Ok(None);
        }
        if prompt_len > ctx {
            anyhow::bail!(
                "the prompt is {prompt_len} tokens, longer than the model's context of {ctx} tokens; \
                 pass --max-kv-size N to keep only the newest N tokens in the cache"
            );
        }
        Ok(Some(ctx - prompt_len))
    }

    /// The tokenizer, or an error saying why there is none.
    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer
            .as_ref()
            .ok_or_else(|| anyhow!("{}", self.tokenizer_error.clone().unwrap_or_else(|| "no tokenizer".into())))
    }

    /// Replaces the caches with empty ones.
    pub fn reset_caches(&mut self) -> Result<()> {
        self.prompt_checkpoint = None;
        self.caches = make_caches(&self.plan.caches, &self.cache_opts)?;
        self.cache_boxes = self.caches.iter().map(SharedCache::boxed).collect();
        Ok(())
    }

    /// Replaces the caches (one per plan layer, e.g. read from a file).
    pub fn set_caches(&mut self, caches: Vec<SharedCache>) {
        self.cache_boxes = caches.iter().map(SharedCache::boxed).collect();
        self.caches = caches;
    }

    /// A cheap copy of every cache (arrays are shared, not copied), for
    /// [`LoadedModel::restore`].
    pub fn snapshot(&self) -> CacheSnapshot {
        CacheSnapshot::take(&self.caches)
    }

    /// Puts the caches back as `snap` recorded them; `snap` stays usable.
    pub fn restore(&mut self, snap: &CacheSnapshot) -> Result<()> {
        snap.restore_into(&self.caches).map_err(Into::into)
    }

    /// Drops the last `n` tokens from every cache. Returns false, changing
    /// nothing, when some cache cannot rewind exactly (a window that has
    /// slid, a recurrent state): restore a snapshot instead.
    pub fn trim(&mut self, n: usize) -> bool {
        let n = n as i64;
        if !self.caches.iter().all(|c| c.lock().can_trim(n)) {
            return false;
        }
        for c in &self.caches {
            c.lock().trim(n);
        }
        true
    }

    /// The plugin's view of the caches (for drafters reading them).
    pub(crate) fn cache_boxes_mut(&mut self) -> &mut RVec<CacheBox> {
        &mut self.cache_boxes
    }

    /// Tokens currently held by the caches.
    pub fn cache_offset(&self) -> i64 {
        self.caches.first().map_or(0, |c| c.lock().offset())
    }

    /// Runs the model over `tokens` (`[1, L]` int32), updating the caches.
    pub fn forward(&mut self, tokens: &Array, logits_wanted: LogitsWanted) -> Result<Option<Array>> {
        Ok(self.forward_io(tokens, logits_wanted, false)?.0)
    }

    /// [`LoadedModel::forward`] that also returns the final hidden state
    /// (`[1, L, hidden]`) when `want_hidden`.
    pub fn forward_io(
        &mut self,
        tokens: &Array,
        logits_wanted: LogitsWanted,
        want_hidden: bool,
    ) -> Result<(Option<Array>, Option<Array>)> {
        let input = ForwardInput {
            tokens: tokens.clone().into(),
            embeddings: ROption::RNone,
            logits: logits_wanted,
            want_hidden,
        };
        let out = self
            .model
            .forward(input, &mut self.cache_boxes)
            .into_result()
            .map_err(|e| plugin_err(&self.family.name, "forward", e))?;
        let logits = out.logits.into_option().map(ArrayHandle::into_array);
        if let Some(l) = &logits {
            let (b, n) = (tokens.dim(0), tokens.dim(1));
            let rows = if logits_wanted == LogitsWanted::All { n } else { 1 };
            let want = [b, rows, self.plan.vocab_size as i32];
            if l.shape() != want {
                return Err(anyhow!(
                    "{} plugin: forward returned logits of shape {:?}, expected {:?}",
                    self.family.name,
                    l.shape(),
                    want
                ));
            }
        } else if logits_wanted != LogitsWanted::None {
            return Err(anyhow!("{} plugin: forward returned no logits", self.family.name));
        }
        let hidden = out.hidden.into_option().map(ArrayHandle::into_array);
        if want_hidden {
            let ok = hidden.as_ref().is_some_and(|h| h.ndim() == 3 && h.dim(1) == tokens.dim(1));
            if !ok {
                return Err(anyhow!(
                    "{} plugin: forward was asked for the hidden state [1, {}, H] and returned {:?}",
                    self.family.name,
                    tokens.dim(1),
                    hidden.as_ref().map(|h| h.shape().to_vec())
                ));
            }
        }
        Ok((logits, hidden))
    }

    /// Evaluates the cache contents (after a prefill chunk).
    pub fn eval_caches(&self) -> Result<()> {
        let arrays: Vec<Array> = self.caches.iter().flat_map(|c| c.lock().arrays()).collect();
        let refs: Vec<&Array> = arrays.iter().collect();
        mlx::eval(&refs).map_err(Into::into)
    }
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
        let unread = if e.contains("missing weight") { weights.unread() } else { Vec::new() };
        let e = if unread.is_empty() {
            e.to_string()
        } else {
            format!("{e}; {} unexpected: {}", count(unread.len(), "tensor"), mlx::nn::fold_names(&unread))
        };
        plugin_err(&fam.name, "build", e.into())
    })
}

/// `1 tensor`, `3 tensors`.
pub fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
