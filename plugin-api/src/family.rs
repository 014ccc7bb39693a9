//! The plain-Rust side of a family plugin: implement [`Family`] (with
//! its [`FamilyConfig`]) and [`Model`], then
//! [`export_plugin!`](crate::export_plugin); [`crate::adapter`] turns them
//! into the stable trait objects.

use crate::abi::{ArrayHandle, CacheBox, WeightStoreRef};
use crate::media::MediaInput;
use crate::*;
use mlx::{Array, Result};

/// A family's typed config: what [`Family::config`] makes of a
/// checkpoint's config once per plan and hands to every later call.
///
/// Derive [`serde::Deserialize`] with `#[serde(default = ...)]` where the
/// checkpoint may leave a field out, so the struct holds final values and a
/// default is written once, here; [`FamilyConfig::check`] then refuses
/// values no real model has.
pub trait FamilyConfig: serde::de::DeserializeOwned + Send + Sync + 'static {
    /// Checks the values (layers, heads, dims in range, ...), naming the
    /// field at fault; the config is refused before anything is built.
    /// Accepts everything by default.
    fn check(&self) -> Result<()> {
        Ok(())
    }
}

/// Any JSON: the config of a family that reads fields itself (or none).
impl FamilyConfig for serde_json::Value {}

/// A model family, written in plain Rust.
///
/// The checkpoint's config is parsed once, by [`Family::config`], when
/// the host asks for a plan; every later call gets the parsed
/// [`Family::Config`] beside the plan. A plan's `config` string must
/// parse back to the same config through [`Family::config`] (store the
/// checkpoint's config, or the typed config serialized): the adapter keeps
/// the parsed config per plan and re-parses only a plan it has not seen
/// (e.g. one whose config the host changed).
pub trait Family: Send + Sync + 'static {
    /// The family's typed config.
    type Config: FamilyConfig;
    /// Family name.
    fn name(&self) -> &'static str;
    /// `model_type` values served.
    fn model_types(&self) -> &'static [&'static str];
    /// The checkpoint's config (config.json, or GGUF metadata as JSON) →
    /// the typed config: parsed with serde (an error naming the field at
    /// fault), then [`FamilyConfig::check`]ed. Override to reshape a config
    /// first (e.g. GGUF metadata into config.json's terms).
    fn config(&self, raw: &serde_json::Value) -> Result<Self::Config> {
        let cfg: Self::Config = crate::config::parse(raw)?;
        cfg.check()?;
        Ok(cfg)
    }
    /// Config → plan. `raw` is the checkpoint's config `config` was parsed
    /// from (for what the plan stores of it).
    fn plan(&self, config: &Self::Config, raw: &serde_json::Value) -> Result<ModelPlan>;
    /// One checkpoint tensor → zero or more tensors in the family's naming.
    fn rewrite(
        &self,
        _config: &Self::Config,
        _plan: &ModelPlan,
        name: &str,
        tensor: Array,
    ) -> Result<Vec<(String, Array)>> {
        Ok(vec![(name.to_string(), tensor)])
    }
    /// Converter quantization class; by default matrices are body, the rest skipped.
    fn quant_class(&self, _config: &Self::Config, _plan: &ModelPlan, name: &str) -> QuantClass {
        if name.ends_with(".weight") && !name.contains("norm") {
            QuantClass::Body
        } else {
            QuantClass::Skip
        }
    }
    /// Tensors the host should concatenate at load (e.g. q/k/v into one
    /// matmul); none by default.
    fn fusions(&self, _config: &Self::Config, _plan: &ModelPlan) -> Vec<Fusion> {
        Vec::new()
    }
    /// Builds the model.
    fn build(&self, config: &Self::Config, plan: &ModelPlan, weights: &dyn mlx::nn::Weights) -> Result<Box<dyn Model>>;
    /// The media processor: one decoded image → the vision tower's inputs
    /// and its placeholder count. Families that take images set
    /// [`ModelPlan::with_media`] in `plan` and implement this.
    fn process_image(&self, _config: &Self::Config, _plan: &ModelPlan, _image: &RawImage) -> Result<MediaInput> {
        Err(mlx::Error::msg("this model takes no images"))
    }
    /// The audio processor: one decoded clip (mono, 16 kHz) → the audio
    /// tower's inputs and its placeholder count. Families that take audio
    /// set an audio [`crate::Placeholders`] in their plan's media and
    /// implement this.
    fn process_audio(&self, _config: &Self::Config, _plan: &ModelPlan, _audio: &RawAudio) -> Result<MediaInput> {
        Err(mlx::Error::msg("this model takes no audio"))
    }
    /// Builds a drafter from `weights` (see [`crate::abi::Family::build_drafter`]
    /// for the role and the two pairs) when the family and weights have
    /// one. `config` is `plan`'s.
    fn build_drafter(
        &self,
        _role: DraftRole,
        _config: &Self::Config,
        _plan: &ModelPlan,
        _weights: &dyn mlx::nn::Weights,
        _target_plan: &ModelPlan,
        _target_weights: &dyn mlx::nn::Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        Ok(None)
    }

    /// What the family says of each model type it serves: example
    /// checkpoints and features, shown by `famlx plugins` and in the
    /// README's table of supported models. Default: each of
    /// [`Family::model_types`] as a text model with nothing more said.
    fn catalog(&self) -> Vec<crate::ModelInfo> {
        self.model_types().iter().map(|t| crate::ModelInfo::text(t)).collect()
    }
}

/// A model's forward pass, in plain Rust.
pub trait Model: Send {
    /// Runs the model. `tokens` is `[B, L]` int32.
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output>;
    /// The rows replacing each image's placeholder tokens, `[tokens,
    /// hidden]` per image (see [`crate::abi::Model::embed_images`]).
    fn embed_images(&mut self, _images: &[MediaInput]) -> Result<Vec<Array>> {
        Err(mlx::Error::msg("this model takes no images"))
    }
    /// The rows replacing each audio clip's placeholder tokens, `[tokens,
    /// hidden]` per clip (see [`crate::abi::Model::embed_audio`]).
    fn embed_audio(&mut self, _clips: &[MediaInput]) -> Result<Vec<Array>> {
        Err(mlx::Error::msg("this model takes no audio"))
    }
    /// Rotary positions of a whole sequence with images, and the delta of
    /// later positions (see [`crate::abi::Model::positions`]); `None` by default.
    fn positions(&self, _tokens: &[u32], _images: &[MediaInput]) -> Result<Option<(Array, i64)>> {
        Ok(None)
    }
}

/// A drafter, in plain Rust (see [`crate::abi::Drafter`] for the protocol).
pub trait Drafter: Send {
    /// The cache slots the drafter keeps of its own.
    fn cache_kinds(&self) -> Vec<CacheKind> {
        Vec::new()
    }
    /// The conversation's first token (see [`crate::abi::Drafter::begin`]);
    /// returns how many tokens went into `own`. Nothing by default.
    fn begin(&mut self, _first_token: u32, _own: &mut Caches<'_>) -> Result<u32> {
        Ok(0)
    }
    /// One draft step: `hidden` `[B, L, H]`, `tokens` `[B, L]` (the token
    /// after each position) → (logits `[B, 1, V]`, hidden `[B, 1, H]`).
    fn step(
        &mut self,
        hidden: &Array,
        tokens: &Array,
        target: &mut Caches<'_>,
        own: &mut Caches<'_>,
    ) -> Result<(Array, Array)>;
}

/// Forward input on the plugin side.
pub struct Input {
    /// Token ids `[B, L]`.
    pub tokens: Array,
    /// Replacement input embeddings.
    pub embeddings: Option<Array>,
    /// Which logits to compute.
    pub logits: LogitsWanted,
    /// Return the hidden state too.
    pub want_hidden: bool,
    /// Rows for this call's image placeholder tokens, in order (`[M, H]`).
    pub media: Option<Array>,
    /// Rotary positions of this call's tokens, when the family places
    /// images in 2-D.
    pub positions: Option<Array>,
    /// What positions without explicit ids add to the cache offset.
    pub position_delta: i64,
    /// Whether the tokens are the prompt's or the model's own output.
    pub source: TokenSource,
}

impl Input {
    /// A text-only input of prompt `tokens` (`[B, L]` int32): no
    /// embeddings, media or explicit positions, no hidden state.
    pub fn tokens(tokens: Array, logits: LogitsWanted) -> Input {
        Input {
            tokens,
            embeddings: None,
            logits,
            want_hidden: false,
            media: None,
            positions: None,
            position_delta: 0,
            source: TokenSource::Prompt,
        }
    }

    /// The same input, its tokens from `source`.
    pub fn from_source(self, source: TokenSource) -> Input {
        Input { source, ..self }
    }

    /// The input embeddings: the ones given, or the tokens looked up in `table`.
    pub fn embed(&self, table: &mlx::nn::Embedding) -> Result<Array> {
        match &self.embeddings {
            Some(e) => Ok(e.clone()),
            None => table.forward(&self.tokens),
        }
    }
}

/// The position of a forward's first new token: one for all rows, or one
/// per row (a batch of sequences at different lengths).
#[derive(Debug, Clone)]
pub enum Position {
    /// Every row's offset.
    Int(i32),
    /// Each row's offset, `[B]` int32.
    Rows(Array),
}

impl Position {
    /// As a rope offset.
    pub fn rope(&self) -> mlx::fast::RopeOffset<'_> {
        match self {
            Position::Int(i) => mlx::fast::RopeOffset::Int(*i),
            Position::Rows(a) => mlx::fast::RopeOffset::Array(a),
        }
    }
}

/// Forward output on the plugin side.
pub struct Output {
    /// Logits, if asked.
    pub logits: Option<Array>,
    /// Hidden state, if asked.
    pub hidden: Option<Array>,
}

/// The host's caches as the plugin sees them, one per plan slot.
pub struct Caches<'a> {
    inner: &'a mut RVec<CacheBox>,
}

impl<'a> Caches<'a> {
    /// Wraps the host's cache list.
    pub fn new(inner: &'a mut RVec<CacheBox>) -> Self {
        Caches { inner }
    }
    /// Number of slots.
    pub fn len(&self) -> usize {
        self.inner.len()
    }
    /// True when the model was given no caches.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
    fn slot(&self, i: usize) -> Result<&CacheBox> {
        self.inner.get(i).ok_or_else(|| mlx::Error::msg(format!("cache slot {i} missing ({} given)", self.inner.len())))
    }
    /// Tokens already cached in slot `i`.
    pub fn offset(&self, i: usize) -> Result<i64> {
        Ok(self.slot(i)?.offset())
    }
    /// Where slot `i`'s new tokens sit: one offset, or one per row when
    /// the host runs a batch of sequences (rope them with
    /// [`Position::rope`]).
    pub fn position(&self, i: usize) -> Result<Position> {
        let s = self.slot(i)?;
        Ok(match s.row_offsets().into_option() {
            Some(a) => Position::Rows(a.into_array()),
            None => Position::Int(s.offset() as i32),
        })
    }
    /// For a batch, which keys the last [`Caches::update_and_fetch`] of slot
    /// `i` returned are real per row (`[B, 1, 1, S]` bool); `None` when all are.
    pub fn row_mask(&self, i: usize) -> Result<Option<Array>> {
        Ok(self.slot(i)?.row_mask().into_option().map(ArrayHandle::into_array))
    }
    /// Appends k/v to slot `i` and attends `q` over the slot.
    pub fn attend(&mut self, i: usize, q: Array, k: Array, v: Array, opts: AttnOptions) -> Result<Array> {
        self.slot(i)?;
        self.inner[i]
            .attend(q.into(), k.into(), v.into(), opts)
            .into_result()
            .map(ArrayHandle::into_array)
            .map_err(mlx::Error::from)
    }
    /// Attends `q` over slot `i` without appending.
    pub fn attend_cached(&self, i: usize, q: Array, opts: AttnOptions) -> Result<Array> {
        self.slot(i)?.attend_cached(q.into(), opts).into_result().map(ArrayHandle::into_array).map_err(mlx::Error::from)
    }
    /// Appends k/v to slot `i` and returns all cached k/v.
    pub fn update_and_fetch(&mut self, i: usize, k: Array, v: Array) -> Result<(Array, Array)> {
        self.slot(i)?;
        let t = self.inner[i].update_and_fetch(k.into(), v.into()).into_result().map_err(mlx::Error::from)?;
        Ok((t.0.into_array(), t.1.into_array()))
    }
    /// Recurrent state of slot `i`.
    pub fn state(&self, i: usize) -> Result<Vec<Array>> {
        Ok(self.slot(i)?.state().into_iter().map(ArrayHandle::into_array).collect())
    }
    /// Sets the recurrent state of slot `i`, advancing it by `tokens`.
    pub fn set_state(&mut self, i: usize, state: Vec<Array>, tokens: i64) -> Result<()> {
        self.slot(i)?;
        let s: RVec<ArrayHandle> = state.into_iter().map(ArrayHandle::from).collect();
        self.inner[i].set_state(s, tokens).into_result().map_err(mlx::Error::from)
    }
}

/// Adapts the host's [`WeightStoreRef`] to [`mlx::nn::Weights`].
pub struct StoreWeights<'a, 'b>(pub &'a WeightStoreRef<'b>);

impl mlx::nn::Weights for StoreWeights<'_, '_> {
    fn get(&self, name: &str) -> Option<Array> {
        self.0.get(name.into()).into_option().map(ArrayHandle::into_array)
    }
    fn quant(&self, prefix: &str) -> Option<mlx::quant::QuantSpec> {
        self.0.quant(prefix.into()).into_option().map(|q| (&q).into())
    }
    fn parallel(&self) -> Option<mlx::nn::Parallel> {
        self.0.parallel().into_option().map(Into::into)
    }
    fn slice(&self, name: &str, axis: i32, start: i32, stop: i32) -> Result<Option<Array>> {
        let got = self.0.slice(name.into(), axis, start, stop).into_result().map_err(mlx::Error::from)?;
        Ok(got.into_option().map(ArrayHandle::into_array))
    }
}
