//! A model ready to run: the family's plan and built model over the host's
//! weights, and the tokenizer. A sequence's state (its caches, media and
//! drafter caches) is a [`Sequence`] passed into each forward; a
//! conversation's memory lives in [`crate::session`].

use super::sequence::Sequence;
use super::weights::{assemble, plugin_err, HostWeights, Source};
use crate::cache::{make_caches, BatchCaches, CacheOptions, SharedCache};
use crate::plugins::{FamilyEntry, Registry};
use abi_stable::std_types::{ROption, RVec};
use anyhow::{anyhow, bail, Context, Result};
use famlx_text::Tokenizer;
use mlx::Array;
use plugin_api::abi::{ArrayHandle, ForwardInput, ModelBox};
use plugin_api::{LogitsWanted, ModelPlan, ProcessedMedia, TokenSource};
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

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
    /// Cache settings, for every sequence's caches.
    pub cache_opts: CacheOptions,
}

/// What a forward runs on: one sequence, or a batch's rows stacked.
pub enum ForwardOn<'a> {
    /// One sequence, fed any number of tokens.
    One(&'a mut Sequence),
    /// A decode step of a batch: one generated token per row, row `r`
    /// continuing the batch's row `r`.
    Batch(&'a BatchCaches),
}

impl<'a> From<&'a mut Sequence> for ForwardOn<'a> {
    fn from(s: &'a mut Sequence) -> Self {
        ForwardOn::One(s)
    }
}

impl<'a> From<&'a BatchCaches> for ForwardOn<'a> {
    fn from(b: &'a BatchCaches) -> Self {
        ForwardOn::Batch(b)
    }
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
        // Bad cache settings fail here, at load, not at the first sequence.
        cache_opts.check_for(&plan)?;
        make_caches(&plan.caches, &cache_opts)?;
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
            cache_opts,
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
            on_disk: HashMap::new(),
            quant: s.quant.clone(),
        });
    }

    /// Swaps in another build of the serving family (hot reload), rebuilding
    /// the model from the tensors already in memory. Returns whether the new
    /// plan asks for the same cache layout (a sequence's caches stay good
    /// only then: the caller starts them over otherwise). On error the
    /// current family keeps serving.
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
        if let Some(t) = self.tokenizer.as_mut() {
            apply_bos_convention(t, &self.plan);
        }
        Ok(same)
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

    /// An empty sequence for this model: one cache per plan slot, made
    /// with its cache settings.
    pub fn sequence(&self) -> Result<Sequence> {
        Sequence::new(&self.plan.caches, &self.cache_opts)
    }

    /// A sequence over `caches` already filled (one per plan slot).
    pub fn sequence_with(&self, caches: Vec<SharedCache>) -> Sequence {
        Sequence::with_caches(&self.plan.caches, &self.cache_opts, caches)
    }

    /// Switches image (audio) input off when the plan takes it but the
    /// model cannot embed any (a checkpoint without its vision (audio)
    /// weights: the family's `embed_images` (`embed_audio`) of no items
    /// fails); returns the kinds switched off and why, for the one warning
    /// line each the model then serves the rest with.
    pub fn disable_media_without_tower(&mut self) -> Vec<(&'static str, String)> {
        let mut off = Vec::new();
        let Some(mut spec) = self.plan.media.as_ref().into_option().cloned() else { return off };
        if spec.image.is_some() {
            if let Some(err) = self.model.embed_images(RVec::new()).into_result().err() {
                spec.image = ROption::RNone;
                off.push(("image", err.to_string()));
            }
        }
        if spec.audio.is_some() {
            if let Some(err) = self.model.embed_audio(RVec::new()).into_result().err() {
                spec.audio = ROption::RNone;
                off.push(("audio", err.to_string()));
            }
        }
        for (kind, _) in &off {
            self.plan.modalities.retain(|m| m.as_str() != *kind);
        }
        self.plan.media =
            if spec.image.is_none() && spec.audio.is_none() { ROption::RNone } else { ROption::RSome(spec) };
        off
    }

    /// Caps the placeholder tokens per image at `n` (the families read
    /// `famlx_image_tokens` from their config), checked at once by
    /// processing a small image.
    pub fn set_image_tokens(&mut self, n: u32) -> Result<()> {
        if self.plan.media.as_ref().into_option().and_then(|s| s.image_spec()).is_none() {
            bail!("--image-tokens: the {} model at hand takes no images", self.plan.model_type);
        }
        let mut cfg: serde_json::Value =
            serde_json::from_str(self.plan.config.as_str()).context("the plan's config is not JSON")?;
        if let Some(o) = cfg.as_object_mut() {
            o.insert("famlx_image_tokens".into(), n.into());
        }
        self.plan.config = cfg.to_string().into();
        let probe = plugin_api::RawImage {
            width: 64,
            height: 64,
            rgb: vec![128u8; 64 * 64 * 3].into(),
            alpha: Vec::new().into(),
        };
        self.family
            .family
            .process_image(&self.plan, &probe)
            .into_result()
            .map(|_| ())
            .map_err(|e| anyhow!("--image-tokens {n}: {e}"))
    }

    /// The rows replacing each image's placeholder tokens (the family's
    /// vision tower), checked against the placeholder counts.
    pub fn embed_images(&mut self, images: Vec<ProcessedMedia>) -> Result<Vec<Array>> {
        let want: Vec<u32> = images.iter().map(|i| i.tokens).collect();
        let rows = self
            .model
            .embed_images(images.into())
            .into_result()
            .map_err(|e| plugin_err(&self.family.name, "embed_images", e))?;
        self.check_rows("embed_images", "image", rows, want)
    }

    /// A tower's rows, one `[n, hidden]` array per item of `n` placeholders.
    fn check_rows(&self, what: &str, item: &str, rows: RVec<ArrayHandle>, want: Vec<u32>) -> Result<Vec<Array>> {
        let hidden = self.plan.hidden_size as i32;
        rows.into_iter()
            .zip(want)
            .map(|(r, n)| {
                let r = r.into_array();
                if r.shape() != [n as i32, hidden] {
                    bail!(
                        "{} plugin: {what} returned rows of shape {:?} for an {item} of {n} tokens, expected [{n}, {hidden}]",
                        self.family.name,
                        r.shape()
                    );
                }
                Ok(r)
            })
            .collect()
    }

    /// The rows replacing each audio clip's placeholder tokens (the
    /// family's audio tower), checked against the placeholder counts.
    pub fn embed_audio(&mut self, clips: Vec<ProcessedMedia>) -> Result<Vec<Array>> {
        let want: Vec<u32> = clips.iter().map(|i| i.tokens).collect();
        let rows = self
            .model
            .embed_audio(clips.into())
            .into_result()
            .map_err(|e| plugin_err(&self.family.name, "embed_audio", e))?;
        self.check_rows("embed_audio", "clip", rows, want)
    }

    /// The rotary positions of the whole sequence `ids` with `images` and
    /// the delta of later positions, for families that place images in 2-D.
    pub fn positions(&self, ids: &[u32], images: &[ProcessedMedia]) -> Result<Option<(Array, i64)>> {
        let processed: RVec<ProcessedMedia> = images.iter().cloned().collect();
        let p = self
            .model
            .positions(ids.to_vec().into(), processed)
            .into_result()
            .map_err(|e| plugin_err(&self.family.name, "positions", e))?;
        Ok(p.into_option().map(|p| (p.ids.into_array(), p.delta)))
    }

    /// Runs the model over `tokens` (`[B, L]` int32) from `source` (the
    /// prompt, or tokens the model generated) on `caches` (a sequence, or a
    /// batch's rows), updating them.
    pub fn forward<'a>(
        &mut self,
        caches: impl Into<ForwardOn<'a>>,
        tokens: &Array,
        source: TokenSource,
        logits_wanted: LogitsWanted,
    ) -> Result<Option<Array>> {
        Ok(self.forward_io(caches, tokens, source, logits_wanted, false)?.0)
    }

    /// [`LoadedModel::forward`] that also returns the final hidden state
    /// (`[1, L, hidden]`) when `want_hidden`. The one forward path: a lone
    /// sequence (its media spliced in where the tokens cover it) and a
    /// batch's decode step (`[B, 1]` generated tokens, no media) alike.
    pub fn forward_io<'a>(
        &mut self,
        caches: impl Into<ForwardOn<'a>>,
        tokens: &Array,
        source: TokenSource,
        logits_wanted: LogitsWanted,
        want_hidden: bool,
    ) -> Result<(Option<Array>, Option<Array>)> {
        let mut batch_boxes;
        let (media, boxes, what) = match caches.into() {
            ForwardOn::One(seq) => {
                let media = match &seq.media {
                    Some(m) => Some(m.chunk(seq.cache_offset().max(0) as usize, tokens.dim(1) as usize)?),
                    None => None,
                };
                (media, seq.boxes_mut(), "")
            }
            ForwardOn::Batch(batch) => {
                let rows = batch.ids().len();
                if tokens.dim(0) as usize != rows || tokens.dim(1) != 1 {
                    bail!("forward: a batch of {rows} rows for tokens of shape {:?}", tokens.shape());
                }
                batch_boxes = batch.boxes();
                (None, &mut batch_boxes, " for a batch")
            }
        };
        let input = ForwardInput {
            tokens: tokens.clone().into(),
            embeddings: ROption::RNone,
            logits: logits_wanted,
            want_hidden,
            media: media.as_ref().and_then(|m| m.rows.clone()).map(ArrayHandle::from).into(),
            positions: media.as_ref().and_then(|m| m.positions.clone()).map(ArrayHandle::from).into(),
            position_delta: media.as_ref().map_or(0, |m| m.delta),
            source,
        };
        let out =
            self.model.forward(input, boxes).into_result().map_err(|e| plugin_err(&self.family.name, "forward", e))?;
        let logits = out.logits.into_option().map(ArrayHandle::into_array);
        if let Some(l) = &logits {
            let (b, n) = (tokens.dim(0), tokens.dim(1));
            let rows = if logits_wanted == LogitsWanted::All { n } else { 1 };
            let want = [b, rows, self.plan.vocab_size as i32];
            if l.shape() != want {
                return Err(anyhow!(
                    "{} plugin: forward returned logits of shape {:?}{what}, expected {:?}",
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
}
