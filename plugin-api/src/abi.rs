//! The stable ABI: the `#[sabi_trait]` traits the host calls ([`Family`],
//! [`Model`], [`Drafter`], [`WeightStore`], [`LayerCache`]), their boxed
//! trait objects, the plugin's root module ([`PluginRef`]) and the types
//! that carry a forward across the boundary ([`ForwardInput`],
//! [`ForwardOutput`], [`DraftOutput`], [`ArrayHandle`]). Every method
//! that can fail returns a [`PluginError`]: a message and its
//! [`ErrorKind`].
//!
//! Family authors do not implement these: they implement the plain-Rust
//! traits of the same names at the crate root ([`crate::Family`],
//! [`crate::Model`], [`crate::Drafter`]), which [`crate::adapter`] wraps in
//! these and [`crate::export_plugin!`] exports.

pub use crate::error::{ErrorKind, PluginError};
pub use crate::handle::ArrayHandle;
pub use crate::types::{DraftOutput, ForwardInput, ForwardOutput};
use crate::{
    AttnOptions, CacheKind, Fusion, ModelPlan, ParallelSpec, Positions, ProcessedMedia, QuantClass, QuantSpec,
};
use crate::{DraftRole, ModelInfo, RawAudio, RawImage};
use abi_stable::library::RootModule;
use abi_stable::sabi_trait;
use abi_stable::std_types::{RBox, ROption, RResult, RStr, RString, RVec, Tuple2};
use abi_stable::{declare_root_module_statics, package_version_strings, StableAbi};

/// The root module of a plugin library.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginRef)))]
#[sabi(missing_field(panic))]
pub struct Plugin {
    /// Human-readable plugin name (usually the crate name).
    pub name: extern "C" fn() -> RString,
    /// The families this plugin provides.
    #[sabi(last_prefix_field)]
    pub families: extern "C" fn() -> RVec<FamilyBox>,
}

impl RootModule for PluginRef {
    declare_root_module_statics! {PluginRef}
    const BASE_NAME: &'static str = "famlx_plugin";
    const NAME: &'static str = "famlx_plugin";
    const VERSION_STRINGS: abi_stable::sabi_types::VersionStrings = package_version_strings!();
}

/// A model family: config parsing, weight rewriting, model building.
#[sabi_trait]
pub trait Family: Send + Sync {
    /// The family's name (e.g. `llama`).
    fn name(&self) -> RString;
    /// The `model_type` values this family serves.
    fn model_types(&self) -> RVec<RString>;
    /// Parses a config (config.json, or GGUF metadata as a JSON object) into a plan.
    fn plan(&self, config_json: RStr<'_>) -> RResult<ModelPlan, PluginError>;
    /// Rewrites one checkpoint tensor: zero outputs drop it, one renames or
    /// transforms it, several split it.
    fn rewrite(
        &self,
        plan: &ModelPlan,
        name: RStr<'_>,
        tensor: ArrayHandle,
    ) -> RResult<RVec<Tuple2<RString, ArrayHandle>>, PluginError>;
    /// How the converter should quantize a (rewritten) tensor.
    fn quant_class(&self, plan: &ModelPlan, name: RStr<'_>) -> QuantClass;
    /// Tensors to concatenate at load (see [`Fusion`]).
    fn fusions(&self, plan: &ModelPlan) -> RVec<Fusion>;
    /// Builds the model from host-held weights.
    fn build(&self, plan: &ModelPlan, weights: WeightStoreRef<'_>) -> RResult<ModelBox, PluginError>;
    /// The media processor: one decoded image → the vision tower's inputs
    /// and its placeholder count (an error for families without images).
    fn process_image(&self, plan: &ModelPlan, image: &RawImage) -> RResult<ProcessedMedia, PluginError>;
    /// The audio processor: one decoded clip → the audio tower's inputs and
    /// its placeholder count (an error for families without audio).
    fn process_audio(&self, plan: &ModelPlan, audio: &RawAudio) -> RResult<ProcessedMedia, PluginError>;
    /// Builds a drafter for speculative decoding from `plan`/`weights`, to
    /// run beside the target model described by `target_plan` /
    /// `target_weights`. `role` says which: the target's own draft head
    /// ([`DraftRole::OwnHead`], both pairs the target's) or a separate draft
    /// checkpoint ([`DraftRole::Checkpoint`], `--draft-model`, the first pair
    /// the draft's). `None` when the family has no drafter or the weights
    /// carry none.
    fn build_drafter(
        &self,
        role: DraftRole,
        plan: &ModelPlan,
        weights: WeightStoreRef<'_>,
        target_plan: &ModelPlan,
        target_weights: WeightStoreRef<'_>,
    ) -> RResult<ROption<DrafterBox>, PluginError>;
    /// What the family says of each model type it serves (examples,
    /// features), for `famlx plugins` and the README's table.
    #[sabi(last_prefix_field)]
    fn catalog(&self) -> RVec<ModelInfo>;
}

/// A boxed [`Family`] trait object.
pub type FamilyBox = Family_TO<'static, RBox<()>>;

/// Host-held weights, lent to a plugin during `build`.
#[sabi_trait]
pub trait WeightStore {
    /// The tensor `name` (a new reference), if present.
    fn get(&self, name: RStr<'_>) -> ROption<ArrayHandle>;
    /// How the matrix under `prefix` is quantized (`None`: dense).
    fn quant(&self, prefix: RStr<'_>) -> ROption<QuantSpec>;
    /// All tensor names.
    fn names(&self) -> RVec<RString>;
    /// How the model is split over a group of processes (`None`: whole).
    fn parallel(&self) -> ROption<ParallelSpec>;
    /// Elements `[start, stop)` along `axis` of tensor `name`, read alone
    /// from disk where the store can (`None` when absent).
    #[sabi(last_prefix_field)]
    fn slice(&self, name: RStr<'_>, axis: i32, start: i32, stop: i32) -> RResult<ROption<ArrayHandle>, PluginError>;
}

/// A borrowed [`WeightStore`] trait object.
pub type WeightStoreRef<'a> = WeightStore_TO<'a, abi_stable::sabi_types::RRef<'a, ()>>;

/// A built model.
#[sabi_trait]
pub trait Model {
    /// Runs the model over `input`, reading and updating `caches` (one per
    /// entry of the plan's `caches`).
    fn forward(&mut self, input: ForwardInput, caches: &mut RVec<CacheBox>) -> RResult<ForwardOutput, PluginError>;
    /// The rows that replace each image's placeholder tokens (the vision
    /// tower and projector): `[tokens, hidden]` per image, in order.
    fn embed_images(&mut self, images: RVec<ProcessedMedia>) -> RResult<RVec<ArrayHandle>, PluginError>;
    /// The rows that replace each audio clip's placeholder tokens (the
    /// audio tower and projector): `[tokens, hidden]` per clip, in order.
    fn embed_audio(&mut self, clips: RVec<ProcessedMedia>) -> RResult<RVec<ArrayHandle>, PluginError>;
    /// The rotary positions of the whole sequence `tokens` with `images` in
    /// it, when the family places images in 2-D (Qwen's M-RoPE); `None`
    /// when positions are the cache offsets.
    #[sabi(last_prefix_field)]
    fn positions(&self, tokens: RVec<u32>, images: RVec<ProcessedMedia>) -> RResult<ROption<Positions>, PluginError>;
}

/// A boxed [`Model`].
pub type ModelBox = Model_TO<'static, RBox<()>>;

/// A draft head for speculative decoding, driven one step at a time by the
/// host's speculative loop (which samples the drafted tokens, verifies them
/// with one target forward and rolls every cache back).
///
/// A round: the host calls [`Drafter::step`] first with the target's hidden
/// states of the positions accepted since the previous round (`[B, L, H]`,
/// from a forward with `want_hidden`) and, for each, the token that follows
/// it (`[B, L]`); then `depth - 1` more times with the hidden state the
/// previous step returned and the token drafted from its logits (`L = 1`).
/// After verification the host trims the drafter's own caches back to what
/// they held after the round's first step, so only positions fed with the
/// target's own hidden states stay cached.
#[sabi_trait]
pub trait Drafter {
    /// The cache slots the drafter keeps of its own (empty for drafters that
    /// only read the target's caches).
    fn cache_kinds(&self) -> RVec<CacheKind>;
    /// Called once at the start of a conversation, before the prompt's
    /// first step, with the prompt's first token (which no step ever
    /// carries: step tokens are the ones *after* each position). Returns how
    /// many tokens it appended to `own_caches` (0 for drafters fed by
    /// hidden states; 1 for a small LM that reads the whole sequence).
    fn begin(&mut self, first_token: u32, own_caches: &mut RVec<CacheBox>) -> RResult<u32, PluginError>;
    /// One draft step: logits of the last position (`[B, 1, V]`) and the
    /// hidden state to chain into the next step (`[B, 1, H]`). Appends the
    /// `L` positions to `own_caches`; reads `target_caches` without changing
    /// them.
    #[sabi(last_prefix_field)]
    fn step(
        &mut self,
        hidden: ArrayHandle,
        tokens: ArrayHandle,
        target_caches: &mut RVec<CacheBox>,
        own_caches: &mut RVec<CacheBox>,
    ) -> RResult<DraftOutput, PluginError>;
}

/// A boxed [`Drafter`].
pub type DrafterBox = Drafter_TO<'static, RBox<()>>;

/// A host-owned cache for one layer. Dense, quantized and rotating kinds all
/// sit behind this one interface.
#[sabi_trait]
pub trait LayerCache {
    /// Tokens seen so far (positions already cached).
    fn offset(&self) -> i64;
    /// Appends `k`, `v` (`[B, Hkv, L, D]`) and returns the attention of `q`
    /// (`[B, Hq, L, D]`) over everything cached, masked causally (and by the
    /// window for a rotating cache) unless `opts.mask` says otherwise.
    fn attend(
        &mut self,
        q: ArrayHandle,
        k: ArrayHandle,
        v: ArrayHandle,
        opts: AttnOptions,
    ) -> RResult<ArrayHandle, PluginError>;
    /// Attends `q` over what is cached without appending (KV-sharing layers,
    /// drafters reading the target's cache).
    fn attend_cached(&self, q: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, PluginError>;
    /// Appends `k`, `v` and returns all cached keys and values dense, for
    /// families that need their own attention.
    fn update_and_fetch(
        &mut self,
        k: ArrayHandle,
        v: ArrayHandle,
    ) -> RResult<Tuple2<ArrayHandle, ArrayHandle>, PluginError>;
    /// Recurrent state (empty for KV caches).
    fn state(&self) -> RVec<ArrayHandle>;
    /// Replaces the recurrent state and advances the offset by `tokens`.
    fn set_state(&mut self, state: RVec<ArrayHandle>, tokens: i64) -> RResult<(), PluginError>;
    /// For a cache serving a batch of sequences (continuous batching): each
    /// row's offset, `[B]` int32; `None` when all rows share
    /// [`LayerCache::offset`].
    fn row_offsets(&self) -> ROption<ArrayHandle>;
    /// For a batch: which of the keys the last
    /// [`LayerCache::update_and_fetch`] returned are real for each row,
    /// `[B, 1, 1, S]` bool (shorter rows are padded on the left); `None`
    /// when all are.
    #[sabi(last_prefix_field)]
    fn row_mask(&self) -> ROption<ArrayHandle>;
}

/// A boxed [`LayerCache`].
pub type CacheBox = LayerCache_TO<'static, RBox<()>>;
