//! A drafter as the host holds it, for speculative decoding: the plugin's
//! draft head (the target's own MTP head, or a separate draft checkpoint's
//! model). Its caches for a sequence are the sequence's
//! ([`crate::model::DraftCaches`]), passed into each step.

use crate::cache::{make_caches, CacheOptions};
use crate::memory::with_kind_of;
use crate::model::{plan_and_rewrite, plugin_err, DraftCaches, HostWeights, LoadedModel, Source};
use crate::plugins::Registry;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::RVec;
use anyhow::{anyhow, bail, Context, Result};
use mlx::Array;
use plugin_api::abi::{ArrayHandle, CacheBox, DrafterBox, WeightStore_TO};
use plugin_api::DraftRole;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Speculative decoding settings.
#[derive(Debug, Clone)]
pub struct SpecParams {
    /// Tokens drafted per round (1..=8).
    pub depth: usize,
    /// Stop drafting a round early once the drafter's top probability falls
    /// below this (0: always draft `depth` tokens). Each check reads a value
    /// back from the device, so it costs a synchronisation per draft step.
    pub min_confidence: f32,
}

impl Default for SpecParams {
    fn default() -> Self {
        SpecParams { depth: 2, min_confidence: 0.0 }
    }
}

/// Longest draft a round may ask for.
pub const MAX_DEPTH: usize = 8;

impl SpecParams {
    /// Checks the settings, naming the flag at fault.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_DEPTH).contains(&self.depth) {
            bail!("--mtp-depth (--draft-depth) must be between 1 and {MAX_DEPTH}, got {}", self.depth);
        }
        if !(0.0..1.0).contains(&self.min_confidence) {
            bail!("--draft-min-confidence must be in [0, 1), got {}", self.min_confidence);
        }
        Ok(())
    }
}

/// Where a drafter came from.
#[derive(Debug, Clone, PartialEq)]
pub enum DraftSource {
    /// The target checkpoint's own draft head (an MTP head); rebuilt with the
    /// target on a hot reload. Shown as `mtp`.
    OwnHead,
    /// A separate draft checkpoint (`--draft-model`), shown as its path.
    Checkpoint(std::path::PathBuf),
}

impl std::fmt::Display for DraftSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DraftSource::OwnHead => f.write_str("mtp"),
            DraftSource::Checkpoint(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Compares with the shown form (`mtp`, or the checkpoint's path).
impl PartialEq<&str> for DraftSource {
    fn eq(&self, other: &&str) -> bool {
        match self {
            DraftSource::OwnHead => *other == "mtp",
            DraftSource::Checkpoint(p) => p.as_os_str() == *other,
        }
    }
}

/// A drafter as the host holds it: the plugin's object and (for a separate
/// draft checkpoint) the weights it was built from.
pub struct Drafter {
    /// The family that built it.
    pub family: String,
    /// Where it came from.
    pub source: DraftSource,
    drafter: DrafterBox,
    /// Marks the caches it makes ([`DraftCaches`] of another drafter are
    /// not its own).
    id: u64,
    _weights: Option<Rc<HostWeights>>,
}

impl Drafter {
    fn new(family: &str, source: DraftSource, drafter: DrafterBox, weights: Option<Rc<HostWeights>>) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        Ok(Drafter { family: family.to_string(), source, drafter, id, _weights: weights })
    }

    /// The target's own draft head (e.g. Qwen3.5's MTP layer), if its
    /// family builds one from the checkpoint.
    pub fn from_target(m: &LoadedModel) -> Result<Option<Drafter>> {
        let store = WeightStore_TO::from_ptr(&*m.weights, TD_Opaque);
        let store2 = WeightStore_TO::from_ptr(&*m.weights, TD_Opaque);
        let d = m
            .family
            .family
            .build_drafter(DraftRole::OwnHead, &m.plan, store, &m.plan, store2)
            .into_result()
            .map_err(|e| plugin_err(&m.family.name, "building the drafter", e))
            .map_err(|e| with_kind_of(&e, format!("{}: {e}", m.source.location)))?;
        d.into_option().map(|d| Drafter::new(&m.family.name, DraftSource::OwnHead, d, None)).transpose()
    }

    /// A separate draft checkpoint (`--draft-model DIR`) for target `m`.
    pub fn load(path: &Path, registry: &Registry, family: Option<&str>, m: &LoadedModel) -> Result<Drafter> {
        let (src, ck) = Source::open(path).with_context(|| format!("draft model {}", path.display()))?;
        let fam = registry.resolve(&ck.model_type, family).with_context(|| format!("{}", path.display()))?;
        let (plan, weights) = plan_and_rewrite(&fam, &src)?;
        // Embedding tables are often padded past the tokenizer (Qwen2.5
        // 0.5B vs 7B): sizes may differ when both tokenizers are the same.
        if plan.vocab_size != m.plan.vocab_size {
            let same = match (&ck.tokenizer, &m.tokenizer) {
                (Some(a), Some(b)) => {
                    let n = a.vocab_size();
                    n == b.vocab_size()
                        && n <= plan.vocab_size.min(m.plan.vocab_size) as usize
                        && (0..n as u32).all(|i| a.id_to_token(i) == b.id_to_token(i))
                }
                _ => false,
            };
            if !same {
                bail!(
                    "{}: the draft model's vocabulary ({} tokens) differs from the target's ({}) and their tokenizers are not the same",
                    path.display(),
                    plan.vocab_size,
                    m.plan.vocab_size
                );
            }
        }
        let store = WeightStore_TO::from_ptr(&*weights, TD_Opaque);
        let target = WeightStore_TO::from_ptr(&*m.weights, TD_Opaque);
        let d = fam
            .family
            .build_drafter(DraftRole::Checkpoint, &plan, store, &m.plan, target)
            .into_result()
            .map_err(|e| plugin_err(&fam.name, "building the drafter", e))
            .map_err(|e| with_kind_of(&e, format!("{}: {e}", path.display())))?;
        let Some(d) = d.into_option() else {
            bail!(
                "{}: the {} plugin builds no drafter from this checkpoint (model_type {:?})",
                path.display(),
                fam.name,
                ck.model_type
            );
        };
        Drafter::new(&fam.name, DraftSource::Checkpoint(path.to_path_buf()), d, Some(weights))
    }

    /// Empty caches for a new sequence.
    pub(crate) fn fresh_caches(&self) -> Result<DraftCaches> {
        let kinds: Vec<_> = self.drafter.cache_kinds().into_iter().collect();
        Ok(DraftCaches::from_parts(make_caches(&kinds, &CacheOptions::default())?, 0, self.id))
    }

    /// Its id, which the caches it makes carry.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether `c` are caches this drafter made.
    pub(crate) fn owns(&self, c: &DraftCaches) -> bool {
        c.owner() == self.id
    }

    /// Starts `c` over for a conversation whose first token is `first`.
    pub(crate) fn begin(&mut self, c: &mut DraftCaches, first: u32) -> Result<()> {
        *c = self.fresh_caches()?;
        let n = self
            .drafter
            .begin(first, c.boxes_mut())
            .into_result()
            .map_err(|e| anyhow!("{} drafter: {e}", self.family))?;
        c.set_lead(n as i64);
        c.eval_caches()
    }

    /// One step reading the target's caches `target` (the plugin's view)
    /// and writing its own `own`: (logits `[1, V]`, hidden `[1, 1, H]`),
    /// the logits over the target's `vocab` ids.
    pub(crate) fn step(
        &mut self,
        vocab: u32,
        target: &mut RVec<CacheBox>,
        own: &mut DraftCaches,
        hidden: &Array,
        tokens: &Array,
    ) -> Result<(Array, Array)> {
        let out = self
            .drafter
            .step(hidden.clone().into(), tokens.clone().into(), target, own.boxes_mut())
            .into_result()
            .map_err(|e| anyhow!("{} drafter: {e}", self.family))?;
        let logits = out.logits.into_array();
        let (v, want) = (logits.dim(-1), vocab as i32);
        if logits.size() != v as usize {
            return Err(anyhow!(
                "{} drafter: step returned logits of shape {:?}, expected [1, 1, {want}]",
                self.family,
                logits.shape(),
            ));
        }
        let logits = logits.reshape(&[1, v])?;
        // A padded table on either side (checked at load): cut the draft's
        // extra rows, or give the target's extra ids no probability.
        let logits = match v.cmp(&want) {
            std::cmp::Ordering::Equal => logits,
            std::cmp::Ordering::Greater => logits.slice_axis(1, 0, want)?,
            std::cmp::Ordering::Less => {
                let pad = mlx::full(&[1, want - v], &Array::f32(f32::NEG_INFINITY), logits.dtype())?;
                mlx::concatenate(&[&logits, &pad], 1)?
            }
        };
        Ok((logits, ArrayHandle::into_array(out.hidden)))
    }
}
