//! The adapters that turn a plain-Rust family ([`Family`],
//! [`Model`], [`Drafter`]) into the stable trait objects the host
//! calls: each call gets the config parsed when its plan was made, and no
//! panic crosses the boundary.

use crate::abi::{self, ArrayHandle, CacheBox, DraftOutput, DrafterBox, Drafter_TO, FamilyBox, Family_TO};
use crate::abi::{ErrorKind, ForwardInput, ForwardOutput, ModelBox, Model_TO, PluginError, WeightStoreRef};
use crate::family::{Caches, Drafter, Family, Input, Model, StoreWeights};
use crate::media::MediaInput;
use crate::{CacheKind, DraftRole, Fusion, ModelPlan, Positions, ProcessedMedia, QuantClass, RawAudio, RawImage};
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RSome, RStr, RString, RVec, Tuple2};
use mlx::{Array, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

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

/// Runs `f`, turning errors and panics into the stable error type: an
/// error keeps its kind; a panic is [`ErrorKind::Other`].
pub fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> RResult<T, PluginError> {
    quiet_panics();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => ROk(v),
        Ok(Err(e)) => RErr(e.into()),
        Err(p) => {
            let at = PANIC_AT.with(|a| a.borrow_mut().take()).map(|a| format!(" (at {a})")).unwrap_or_default();
            RErr(PluginError::new(ErrorKind::Other, format!("panic in {what}: {}{at}", panic_msg(p))))
        }
    }
}

/// The family's [`Family::config`] of `raw`: its errors, unless they say
/// otherwise, are config errors.
fn parse_config<F: Family>(family: &F, raw: &serde_json::Value) -> Result<F::Config> {
    family.config(raw).map_err(|e| match e.kind {
        mlx::ErrorKind::Other => e.with_kind(mlx::ErrorKind::Config),
        _ => e,
    })
}

/// Wraps a [`Family`] as a stable [`FamilyBox`].
pub fn family_box<F: Family>(f: F) -> FamilyBox {
    Family_TO::from_value(FamilyAdapter::new(f), TD_Opaque)
}

/// Parsed configs the adapter keeps, one per plan config string: a host
/// holds a few models at most (a target, a drafter, a reload), so a short
/// list, oldest dropped first, is enough.
const KEPT_CONFIGS: usize = 8;

/// The adapter behind [`family_box`]: the stable [`abi::Family`] calls of one
/// [`Family`], each handed the config parsed when its plan was made.
pub struct FamilyAdapter<F: Family> {
    family: F,
    configs: Mutex<Vec<(String, Arc<F::Config>)>>,
}

impl<F: Family> FamilyAdapter<F> {
    /// Adapts `family`.
    pub fn new(family: F) -> Self {
        FamilyAdapter { family, configs: Mutex::new(Vec::new()) }
    }

    fn keep(&self, key: &str, cfg: Arc<F::Config>) {
        let mut kept = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|(k, _)| k != key);
        if kept.len() >= KEPT_CONFIGS {
            kept.remove(0);
        }
        kept.push((key.to_string(), cfg));
    }

    /// The parsed config of `plan`: the one kept when the plan was made,
    /// or its config string parsed again (a plan the host changed, or one
    /// made by another adapter).
    fn config_of(&self, plan: &ModelPlan) -> Result<Arc<F::Config>> {
        let key = plan.config.as_str();
        let kept = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = kept.iter().find(|(k, _)| k == key) {
            return Ok(c.clone());
        }
        drop(kept);
        let raw: serde_json::Value = serde_json::from_str(key)
            .map_err(|e| crate::config::config_error(format!("plan config is not JSON: {e}")))?;
        let cfg = Arc::new(parse_config(&self.family, &raw)?);
        self.keep(key, cfg.clone());
        Ok(cfg)
    }
}

impl<F: Family> abi::Family for FamilyAdapter<F> {
    fn name(&self) -> RString {
        self.family.name().into()
    }
    fn model_types(&self) -> RVec<RString> {
        self.family.model_types().iter().map(|s| RString::from(*s)).collect()
    }
    fn plan(&self, config_json: RStr<'_>) -> RResult<ModelPlan, PluginError> {
        guard(self.family.name(), || {
            let raw: serde_json::Value = serde_json::from_str(config_json.as_str())
                .map_err(|e| crate::config::config_error(format!("config is not JSON: {e}")))?;
            let cfg = Arc::new(parse_config(&self.family, &raw)?);
            let plan = self.family.plan(&cfg, &raw)?;
            self.keep(plan.config.as_str(), cfg);
            Ok(plan)
        })
    }
    fn rewrite(
        &self,
        plan: &ModelPlan,
        name: RStr<'_>,
        tensor: ArrayHandle,
    ) -> RResult<RVec<Tuple2<RString, ArrayHandle>>, PluginError> {
        guard(self.family.name(), || {
            let cfg = self.config_of(plan)?;
            let out = self.family.rewrite(&cfg, plan, name.as_str(), tensor.into_array())?;
            Ok(out.into_iter().map(|(n, a)| Tuple2(RString::from(n), ArrayHandle::from(a))).collect())
        })
    }
    fn quant_class(&self, plan: &ModelPlan, name: RStr<'_>) -> QuantClass {
        catch_unwind(AssertUnwindSafe(|| match self.config_of(plan) {
            Ok(cfg) => self.family.quant_class(&cfg, plan, name.as_str()),
            Err(_) => QuantClass::Skip,
        }))
        .unwrap_or(QuantClass::Skip)
    }
    fn fusions(&self, plan: &ModelPlan) -> RVec<Fusion> {
        catch_unwind(AssertUnwindSafe(|| match self.config_of(plan) {
            Ok(cfg) => self.family.fusions(&cfg, plan).into_iter().collect(),
            Err(_) => RVec::new(),
        }))
        .unwrap_or_default()
    }
    fn process_image(&self, plan: &ModelPlan, image: &RawImage) -> RResult<ProcessedMedia, PluginError> {
        guard(self.family.name(), || {
            let cfg = self.config_of(plan)?;
            self.family.process_image(&cfg, plan, image).map(ProcessedMedia::from)
        })
    }
    fn process_audio(&self, plan: &ModelPlan, audio: &RawAudio) -> RResult<ProcessedMedia, PluginError> {
        guard(self.family.name(), || {
            let cfg = self.config_of(plan)?;
            self.family.process_audio(&cfg, plan, audio).map(ProcessedMedia::from)
        })
    }
    fn build(&self, plan: &ModelPlan, weights: WeightStoreRef<'_>) -> RResult<ModelBox, PluginError> {
        guard(self.family.name(), || {
            let cfg = self.config_of(plan)?;
            // Every missing or mis-shaped tensor is collected and reported at once.
            let store = StoreWeights(&weights);
            let checked = mlx::nn::Checked::new(&store);
            let m = checked.finish(self.family.build(&cfg, plan, &checked))?;
            Ok(Model_TO::from_value(ModelAdapter { inner: m, family: self.family.name() }, TD_Opaque))
        })
    }
    fn build_drafter(
        &self,
        role: DraftRole,
        plan: &ModelPlan,
        weights: WeightStoreRef<'_>,
        target_plan: &ModelPlan,
        target_weights: WeightStoreRef<'_>,
    ) -> RResult<ROption<DrafterBox>, PluginError> {
        guard(self.family.name(), || {
            let cfg = self.config_of(plan)?;
            let (store, target) = (StoreWeights(&weights), StoreWeights(&target_weights));
            let (checked, target_checked) = (mlx::nn::Checked::new(&store), mlx::nn::Checked::new(&target));
            let d = self.family.build_drafter(role, &cfg, plan, &checked, target_plan, &target_checked);
            let d = target_checked.finish(checked.finish(d))?;
            Ok(match d {
                Some(d) => {
                    RSome(Drafter_TO::from_value(DrafterAdapter { inner: d, family: self.family.name() }, TD_Opaque))
                }
                None => ROption::RNone,
            })
        })
    }
    fn catalog(&self) -> RVec<crate::ModelInfo> {
        self.family.catalog().into()
    }
}

struct ModelAdapter {
    inner: Box<dyn Model>,
    family: &'static str,
}

impl abi::Model for ModelAdapter {
    fn forward(&mut self, input: ForwardInput, caches: &mut RVec<CacheBox>) -> RResult<ForwardOutput, PluginError> {
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
    fn embed_images(&mut self, images: RVec<ProcessedMedia>) -> RResult<RVec<ArrayHandle>, PluginError> {
        guard(self.family, || {
            let rows = self.inner.embed_images(&Self::media(&images))?;
            Self::one_per_item("embed_images", rows, images.len())
        })
    }
    fn embed_audio(&mut self, clips: RVec<ProcessedMedia>) -> RResult<RVec<ArrayHandle>, PluginError> {
        guard(self.family, || {
            let rows = self.inner.embed_audio(&Self::media(&clips))?;
            Self::one_per_item("embed_audio", rows, clips.len())
        })
    }
    fn positions(&self, tokens: RVec<u32>, images: RVec<ProcessedMedia>) -> RResult<ROption<Positions>, PluginError> {
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
            return Err(mlx::Error::msg(format!("{what} returned {} arrays for {items} items", rows.len())));
        }
        Ok(rows.into_iter().map(ArrayHandle::from).collect())
    }
}

struct DrafterAdapter {
    inner: Box<dyn Drafter>,
    family: &'static str,
}

impl abi::Drafter for DrafterAdapter {
    fn cache_kinds(&self) -> RVec<CacheKind> {
        catch_unwind(AssertUnwindSafe(|| self.inner.cache_kinds().into_iter().collect())).unwrap_or_default()
    }
    fn begin(&mut self, first_token: u32, own_caches: &mut RVec<CacheBox>) -> RResult<u32, PluginError> {
        guard(self.family, || self.inner.begin(first_token, &mut Caches::new(own_caches)))
    }
    fn step(
        &mut self,
        hidden: ArrayHandle,
        tokens: ArrayHandle,
        target_caches: &mut RVec<CacheBox>,
        own_caches: &mut RVec<CacheBox>,
    ) -> RResult<DraftOutput, PluginError> {
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

/// Exports a plugin: its name and the [`Family`] values it provides.
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
            $crate::adapter::mlx_version_cstr()
        }
        extern "C" fn __famlx_plugin_name() -> $crate::abi_stable::std_types::RString {
            $name.into()
        }
        extern "C" fn __famlx_plugin_families() -> $crate::abi_stable::std_types::RVec<$crate::abi::FamilyBox> {
            let mut v = $crate::abi_stable::std_types::RVec::new();
            $( v.push($crate::adapter::family_box($fam)); )*
            v
        }
        /// The plugin's root module.
        #[$crate::abi_stable::export_root_module]
        pub fn get_library() -> $crate::abi::PluginRef {
            use $crate::abi_stable::prefix_type::PrefixTypeTrait;
            $crate::abi::Plugin { name: __famlx_plugin_name, families: __famlx_plugin_families }.leak_into_prefix()
        }
    };
}
