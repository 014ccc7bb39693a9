//! The plain-Rust side of a family plugin: implement [`FamilySpec`] and
//! [`ModelForward`], then [`export_plugin!`](crate::export_plugin). The
//! adapters here turn them into the stable trait objects and make sure no
//! panic crosses the boundary.

use crate::media::MediaInput;
use crate::*;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, RSome};
use mlx::{Array, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A model family, written in plain Rust.
pub trait FamilySpec: Send + Sync + 'static {
    /// Family name.
    fn name(&self) -> &'static str;
    /// `model_type` values served.
    fn model_types(&self) -> &'static [&'static str];
    /// Config (config.json, or GGUF metadata as JSON) → plan.
    fn plan(&self, config: &serde_json::Value) -> Result<ModelPlan>;
    /// One checkpoint tensor → zero or more tensors in the family's naming.
    fn rewrite(&self, _plan: &ModelPlan, name: &str, tensor: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(name.to_string(), tensor)])
    }
    /// Converter quantization class; by default matrices are body, the rest skipped.
    fn quant_class(&self, _plan: &ModelPlan, name: &str) -> QuantClass {
        if name.ends_with(".weight") && !name.contains("norm") {
            QuantClass::Body
        } else {
            QuantClass::Skip
        }
    }
    /// Tensors the host should concatenate at load (e.g. q/k/v into one
    /// matmul); none by default.
    fn fusions(&self, _plan: &ModelPlan) -> Vec<Fusion> {
        Vec::new()
    }
    /// Builds the model.
    fn build(&self, plan: &ModelPlan, weights: &dyn mlx::nn::Weights) -> Result<Box<dyn ModelForward>>;
    /// The media processor: one decoded image → the vision tower's inputs
    /// and its placeholder count. Families that take images set
    /// [`ModelPlan::with_media`] in `plan` and implement this.
    fn process_image(&self, _plan: &ModelPlan, _image: &RawImage) -> Result<MediaInput> {
        Err(mlx::Error::msg("this model takes no images"))
    }
    /// The audio processor: one decoded clip (mono, 16 kHz) → the audio
    /// tower's inputs and its placeholder count. Families that take audio
    /// set an audio [`crate::Placeholders`] in their plan's media and
    /// implement this.
    fn process_audio(&self, _plan: &ModelPlan, _audio: &RawAudio) -> Result<MediaInput> {
        Err(mlx::Error::msg("this model takes no audio"))
    }
    /// Builds a drafter from `weights` (see [`crate::Family::build_drafter`]
    /// for the two pairs) when the family and weights have one.
    fn build_drafter(
        &self,
        _plan: &ModelPlan,
        _weights: &dyn mlx::nn::Weights,
        _target_plan: &ModelPlan,
        _target_weights: &dyn mlx::nn::Weights,
    ) -> Result<Option<Box<dyn DraftForward>>> {
        Ok(None)
    }
}

/// A model's forward pass, in plain Rust.
pub trait ModelForward: Send {
    /// Runs the model. `tokens` is `[B, L]` int32.
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output>;
    /// The rows replacing each image's placeholder tokens, `[tokens,
    /// hidden]` per image (see [`crate::Model::embed_images`]).
    fn embed_images(&mut self, _images: &[MediaInput]) -> Result<Vec<Array>> {
        Err(mlx::Error::msg("this model takes no images"))
    }
    /// The rows replacing each audio clip's placeholder tokens, `[tokens,
    /// hidden]` per clip (see [`crate::Model::embed_audio`]).
    fn embed_audio(&mut self, _clips: &[MediaInput]) -> Result<Vec<Array>> {
        Err(mlx::Error::msg("this model takes no audio"))
    }
    /// Rotary positions of a whole sequence with images, and the delta of
    /// later positions (see [`crate::Model::positions`]); `None` by default.
    fn positions(&self, _tokens: &[u32], _images: &[MediaInput]) -> Result<Option<(Array, i64)>> {
        Ok(None)
    }
}

/// A drafter, in plain Rust (see [`crate::Drafter`] for the protocol).
pub trait DraftForward: Send {
    /// The cache slots the drafter keeps of its own.
    fn cache_kinds(&self) -> Vec<CacheKind> {
        Vec::new()
    }
    /// The conversation's first token (see [`crate::Drafter::begin`]);
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

fn merr(e: RString) -> mlx::Error {
    mlx::Error(e.into_string())
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
        self.inner.get(i).ok_or_else(|| mlx::Error(format!("cache slot {i} missing ({} given)", self.inner.len())))
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
            .map_err(merr)
    }
    /// Attends `q` over slot `i` without appending.
    pub fn attend_cached(&self, i: usize, q: Array, opts: AttnOptions) -> Result<Array> {
        self.slot(i)?.attend_cached(q.into(), opts).into_result().map(ArrayHandle::into_array).map_err(merr)
    }
    /// Appends k/v to slot `i` and returns all cached k/v.
    pub fn update_and_fetch(&mut self, i: usize, k: Array, v: Array) -> Result<(Array, Array)> {
        self.slot(i)?;
        let t = self.inner[i].update_and_fetch(k.into(), v.into()).into_result().map_err(merr)?;
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
        self.inner[i].set_state(s, tokens).into_result().map_err(merr)
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
        let got = self.0.slice(name.into(), axis, start, stop).into_result().map_err(merr)?;
        Ok(got.into_option().map(ArrayHandle::into_array))
    }
}

fn panic_msg(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

thread_local! {
    /// Where the last panic on this thread happened (recorded by the hook below).
    static PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Replaces this plugin's panic hook (a plugin links its own copy of std,
/// so this leaves the host's alone) with one that records where a panic
/// happened instead of printing it: the panic reaches the host as one error
/// line through [`guard`], not as a report on stderr.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
            PANIC_AT.with(|p| *p.borrow_mut() = at);
        }))
    });
}

/// Runs `f`, turning errors and panics into the stable error type.
pub fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> RResult<T, RString> {
    quiet_panics();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => ROk(v),
        Ok(Err(e)) => RErr(e.0.into()),
        Err(p) => {
            let at = PANIC_AT.with(|a| a.borrow_mut().take()).map(|a| format!(" (at {a})")).unwrap_or_default();
            RErr(format!("panic in {what}: {}{at}", panic_msg(p)).into())
        }
    }
}

/// Wraps a [`FamilySpec`] as a stable [`FamilyBox`].
pub fn family_box<F: FamilySpec>(f: F) -> FamilyBox {
    Family_TO::from_value(FamilyAdapter(f), TD_Opaque)
}

/// The adapter behind [`family_box`].
pub struct FamilyAdapter<F>(pub F);

impl<F: FamilySpec> Family for FamilyAdapter<F> {
    fn name(&self) -> RString {
        self.0.name().into()
    }
    fn model_types(&self) -> RVec<RString> {
        self.0.model_types().iter().map(|s| RString::from(*s)).collect()
    }
    fn plan(&self, config_json: RStr<'_>) -> RResult<ModelPlan, RString> {
        guard(self.0.name(), || {
            let v: serde_json::Value = serde_json::from_str(config_json.as_str())
                .map_err(|e| mlx::Error(format!("config is not JSON: {e}")))?;
            self.0.plan(&v)
        })
    }
    fn rewrite(
        &self,
        plan: &ModelPlan,
        name: RStr<'_>,
        tensor: ArrayHandle,
    ) -> RResult<RVec<Tuple2<RString, ArrayHandle>>, RString> {
        guard(self.0.name(), || {
            let out = self.0.rewrite(plan, name.as_str(), tensor.into_array())?;
            Ok(out.into_iter().map(|(n, a)| Tuple2(RString::from(n), ArrayHandle::from(a))).collect())
        })
    }
    fn quant_class(&self, plan: &ModelPlan, name: RStr<'_>) -> QuantClass {
        catch_unwind(AssertUnwindSafe(|| self.0.quant_class(plan, name.as_str()))).unwrap_or(QuantClass::Skip)
    }
    fn fusions(&self, plan: &ModelPlan) -> RVec<Fusion> {
        catch_unwind(AssertUnwindSafe(|| self.0.fusions(plan).into_iter().collect())).unwrap_or_default()
    }
    fn process_image(&self, plan: &ModelPlan, image: &RawImage) -> RResult<ProcessedMedia, RString> {
        guard(self.0.name(), || self.0.process_image(plan, image).map(ProcessedMedia::from))
    }
    fn process_audio(&self, plan: &ModelPlan, audio: &RawAudio) -> RResult<ProcessedMedia, RString> {
        guard(self.0.name(), || self.0.process_audio(plan, audio).map(ProcessedMedia::from))
    }
    fn build(&self, plan: &ModelPlan, weights: WeightStoreRef<'_>) -> RResult<ModelBox, RString> {
        guard(self.0.name(), || {
            // Every missing or mis-shaped tensor is collected and reported at once.
            let store = StoreWeights(&weights);
            let checked = mlx::nn::Checked::new(&store);
            let m = checked.finish(self.0.build(plan, &checked))?;
            Ok(Model_TO::from_value(ModelAdapter { inner: m, family: self.0.name() }, TD_Opaque))
        })
    }
    fn build_drafter(
        &self,
        plan: &ModelPlan,
        weights: WeightStoreRef<'_>,
        target_plan: &ModelPlan,
        target_weights: WeightStoreRef<'_>,
    ) -> RResult<ROption<DrafterBox>, RString> {
        guard(self.0.name(), || {
            let (store, target) = (StoreWeights(&weights), StoreWeights(&target_weights));
            let (checked, target_checked) = (mlx::nn::Checked::new(&store), mlx::nn::Checked::new(&target));
            let d = self.0.build_drafter(plan, &checked, target_plan, &target_checked);
            let d = target_checked.finish(checked.finish(d))?;
            Ok(match d {
                Some(d) => RSome(Drafter_TO::from_value(DrafterAdapter { inner: d, family: self.0.name() }, TD_Opaque)),
                None => ROption::RNone,
            })
        })
    }
}

struct ModelAdapter {
    inner: Box<dyn ModelForward>,
    family: &'static str,
}

impl Model for ModelAdapter {
    fn forward(&mut self, input: ForwardInput, caches: &mut RVec<CacheBox>) -> RResult<ForwardOutput, RString> {
        let family = self.family;
        guard(family, || {
            let inp = Input {
                tokens: input.tokens.into_array(),
                embeddings: input.embeddings.into_option().map(ArrayHandle::into_array),
                logits: input.logits,
                want_hidden: input.want_hidden,
                media: input.media.into_option().map(ArrayHandle::into_array),
                positions: input.positions.into_option().map(ArrayHandle::into_array),
                position_delta: input.position_delta,
                source: input.source,
            };
            let out = self.inner.forward(&inp, &mut Caches::new(caches))?;
            Ok(ForwardOutput {
                logits: out.logits.map(ArrayHandle::from).into(),
                hidden: out.hidden.map(ArrayHandle::from).into(),
            })
        })
    }
    fn embed_images(&mut self, images: RVec<ProcessedMedia>) -> RResult<RVec<ArrayHandle>, RString> {
        guard(self.family, || {
            let rows = self.inner.embed_images(&Self::media(&images))?;
            Self::one_per_item("embed_images", rows, images.len())
        })
    }
    fn embed_audio(&mut self, clips: RVec<ProcessedMedia>) -> RResult<RVec<ArrayHandle>, RString> {
        guard(self.family, || {
            let rows = self.inner.embed_audio(&Self::media(&clips))?;
            Self::one_per_item("embed_audio", rows, clips.len())
        })
    }
    fn positions(&self, tokens: RVec<u32>, images: RVec<ProcessedMedia>) -> RResult<ROption<Positions>, RString> {
        guard(self.family, || {
            let p = self.inner.positions(&tokens, &Self::media(&images))?;
            Ok(p.map(|(ids, delta)| Positions { ids: ids.into(), delta }).into())
        })
    }
}

impl ModelAdapter {
    fn media(images: &RVec<ProcessedMedia>) -> Vec<MediaInput> {
        images.iter().map(MediaInput::from).collect()
    }

    /// The rows of an `embed_*` call, checked to be one array per item.
    fn one_per_item(what: &str, rows: Vec<Array>, items: usize) -> mlx::Result<RVec<ArrayHandle>> {
        if rows.len() != items {
            return Err(mlx::Error(format!("{what} returned {} arrays for {items} items", rows.len())));
        }
        Ok(rows.into_iter().map(ArrayHandle::from).collect())
    }
}

struct DrafterAdapter {
    inner: Box<dyn DraftForward>,
    family: &'static str,
}

impl Drafter for DrafterAdapter {
    fn cache_kinds(&self) -> RVec<CacheKind> {
        catch_unwind(AssertUnwindSafe(|| self.inner.cache_kinds().into_iter().collect())).unwrap_or_default()
    }
    fn begin(&mut self, first_token: u32, own_caches: &mut RVec<CacheBox>) -> RResult<u32, RString> {
        guard(self.family, || self.inner.begin(first_token, &mut Caches::new(own_caches)))
    }
    fn step(
        &mut self,
        hidden: ArrayHandle,
        tokens: ArrayHandle,
        target_caches: &mut RVec<CacheBox>,
        own_caches: &mut RVec<CacheBox>,
    ) -> RResult<DraftOutput, RString> {
        guard(self.family, || {
            let (logits, hidden) = self.inner.step(
                &hidden.into_array(),
                &tokens.into_array(),
                &mut Caches::new(target_caches),
                &mut Caches::new(own_caches),
            )?;
            Ok(DraftOutput { logits: logits.into(), hidden: hidden.into() })
        })
    }
}

/// The MLX version this plugin was built against, NUL-terminated.
#[doc(hidden)]
pub fn mlx_version_cstr() -> *const std::ffi::c_char {
    static V: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    V.get_or_init(|| std::ffi::CString::new(mlx::build_version()).unwrap_or_default()).as_ptr()
}

/// Exports a plugin: its name and the [`FamilySpec`] values it provides.
///
/// ```ignore
/// plugin_api::export_plugin!("famlx-llama", [Llama]);
/// ```
/// The plugin crate must depend on `abi_stable` directly (its export macro
/// names it by path).
#[macro_export]
macro_rules! export_plugin {
    ($name:expr, [$($fam:expr),* $(,)?]) => {
        /// ABI version stamp, read by the host before anything else.
        #[no_mangle]
        pub extern "C" fn famlx_plugin_abi_version() -> u32 {
            $crate::ABI_VERSION
        }
        /// MLX version stamp.
        #[no_mangle]
        pub extern "C" fn famlx_plugin_mlx_version() -> *const ::std::ffi::c_char {
            $crate::family::mlx_version_cstr()
        }
        extern "C" fn __famlx_plugin_name() -> $crate::abi_stable::std_types::RString {
            $name.into()
        }
        extern "C" fn __famlx_plugin_families() -> $crate::abi_stable::std_types::RVec<$crate::FamilyBox> {
            let mut v = $crate::abi_stable::std_types::RVec::new();
            $( v.push($crate::family::family_box($fam)); )*
            v
        }
        /// The plugin's root module.
        #[$crate::abi_stable::export_root_module]
        pub fn get_library() -> $crate::PluginRef {
            use $crate::abi_stable::prefix_type::PrefixTypeTrait;
            $crate::Plugin { name: __famlx_plugin_name, families: __famlx_plugin_families }.leak_into_prefix()
        }
    };
}
