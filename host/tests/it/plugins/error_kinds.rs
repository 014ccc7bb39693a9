//! A plugin's error reaches the host with its kind: a bad config value is
//! `Config`, a weight the build cannot find is `MissingWeight` (and the
//! host then lists the tensors nothing read), a panic is `Other`.

use crate::common;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};
use common::{cdylib, fixture, mlx_lock, registry, Scratch};
use famlx::plugins::{load_plugin, plugin_pattern, Registry};
use plugin_api::abi::{ArrayHandle, ErrorKind, PluginError, WeightStore, WeightStore_TO};
use plugin_api::{ParallelSpec, QuantSpec};

/// A store holding no tensors at all.
struct Empty;

impl WeightStore for Empty {
    fn get(&self, _name: RStr<'_>) -> ROption<ArrayHandle> {
        ROption::RNone
    }
    fn quant(&self, _prefix: RStr<'_>) -> ROption<QuantSpec> {
        ROption::RNone
    }
    fn names(&self) -> RVec<RString> {
        RVec::new()
    }
    fn parallel(&self) -> ROption<ParallelSpec> {
        ROption::RNone
    }
    fn slice(
        &self,
        _name: RStr<'_>,
        _axis: i32,
        _start: i32,
        _stop: i32,
    ) -> RResult<ROption<ArrayHandle>, PluginError> {
        RResult::ROk(ROption::RNone)
    }
}

fn llama_config() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("llama-tied-f32").join("config.json")).unwrap()).unwrap()
}

#[test]
fn config_errors_cross_as_config() {
    let reg = registry();
    let fam = reg.resolve("llama", None).unwrap();
    let mut cfg = llama_config();
    cfg["num_hidden_layers"] = 0.into();
    let e = fam.family.plan(RStr::from(cfg.to_string().as_str())).into_result().expect_err("no layers");
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(e.message.contains("num_hidden_layers"), "{e}");
    let e = fam.family.plan(RStr::from("{not json")).into_result().expect_err("not JSON");
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
}

#[test]
fn missing_weights_cross_as_missing_weight() {
    let _g = mlx_lock();
    let reg = registry();
    let fam = reg.resolve("llama", None).unwrap();
    let plan = fam.family.plan(RStr::from(llama_config().to_string().as_str())).into_result().unwrap();
    let e =
        fam.family.build(&plan, WeightStore_TO::from_ptr(&Empty, TD_Opaque)).into_result().err().expect("no weights");
    assert_eq!(e.kind, ErrorKind::MissingWeight, "{e}");
    assert!(e.message.contains("missing weight"), "{e}");
}

#[test]
fn a_panic_crosses_as_other() {
    let _g = mlx_lock();
    let dir = Scratch::new("panicky-kind");
    let (pre, suf) = plugin_pattern();
    let so = dir.path().join(format!("{pre}panicky{suf}"));
    std::fs::copy(cdylib("famlx_testplugin_panicky"), &so).unwrap();
    let reg = Registry { plugins: vec![load_plugin(&so, false).unwrap()], ..Default::default() };
    let fam = reg.resolve("panicky", None).unwrap();
    let mut cfg = llama_config();
    cfg["model_type"] = "panicky".into();
    let plan = fam.family.plan(RStr::from(cfg.to_string().as_str())).into_result().unwrap();
    let e = fam.family.build(&plan, WeightStore_TO::from_ptr(&Empty, TD_Opaque)).into_result().err().expect("panics");
    assert_eq!(e.kind, ErrorKind::Other, "{e}");
    // The panicky test plugin's message (its crate is a cdylib the host does not link).
    assert!(e.message.contains("panicky plugin: build always panics"), "{e}");
}
