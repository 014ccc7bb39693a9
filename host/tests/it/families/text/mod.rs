//! The text families added in tree for issue 36, each against mlx-lm's own
//! model class on its committed fixture (`fixtures/make_text_families.py`):
//! first-step logits and 24 greedy tokens for three prompts (see
//! `super::parity`). One file per family plugin.

use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use serde_json::Value;

/// The error loading a scratch copy of `variant` whose config `edit`
/// changed (the test fails if it loads).
pub(crate) fn refused_with(variant: &str, edit: impl FnOnce(&mut Value)) -> String {
    let dir = Scratch::new(variant);
    copy_dir(&fixture(variant), dir.path());
    let path = dir.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    let _g = mlx_lock();
    match LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()) {
        Ok(_) => panic!("{variant} with its config changed: loaded"),
        Err(e) => format!("{e:#}"),
    }
}

/// `err` is one line naming `field` and the `value` refused.
pub(crate) fn assert_names(err: &str, field: &str, value: &str) {
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains(field) && err.contains(value), "does not name {field} = {value}: {err}");
}

/// A copy of `variant` without tensor `name` is refused, the error naming
/// it (a layer the config gives a bias never loads without it).
pub(crate) fn refused_without(variant: &str, name: &str) {
    let _g = mlx_lock();
    let ck = crate::common::fixture_copy(variant);
    let file = ck.path().join("model.safetensors");
    let (mut t, meta) = mlx::io::load_safetensors(&file).unwrap();
    assert!(t.remove(name).is_some(), "{variant}: no {name}");
    let arrays: Vec<(&str, &mlx::Array)> = t.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    mlx::io::save_safetensors(&file, &arrays, &meta).unwrap();
    std::fs::remove_file(ck.path().join("model.safetensors.index.json")).unwrap();
    let e = match LoadedModel::load(ck.path(), &registry(), None, CacheOptions::default()) {
        Ok(_) => panic!("{variant}: loaded without {name}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains(name), "{variant}: {name} not named in: {e}");
}

/// [`refused_with`] on the config's top-level object, the error one line
/// holding each of `needles`.
pub(crate) fn refused(variant: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>), needles: &[&str]) {
    let e = refused_with(variant, |v| edit(v.as_object_mut().unwrap()));
    assert!(!e.contains('\n'), "{variant}: not one line: {e}");
    for n in needles {
        assert!(e.contains(n), "{variant}: {n:?} not in: {e}");
    }
}

/// Every fixture folder of these families (checked by
/// `families::parity::every_fixture_is_tested`).
pub const FIXTURES: &[&str] = &[
    // one line per fixture folder, grouped by plugin
    "cohere-f32",
    "cohere2-f32",
    "exaone4-f32",
    "glm4-f32",
    "smollm3-f32",
    "phi-f32",
    "phimoe-f32",
    "phimoe-q4",
    "starcoder2-f32",
    "stablelm-f32",
    "gemma2-f32",
    "gemma3_text-f32",
    "gemma3_text-q4",
    "gemma3-f32",
    "qwen2-f32",
    "qwen2-q4",
    "qwen2_moe-f32",
    "qwen2_moe-q4",
    "qwen3_moe-f32",
    "qwen3_moe-q4",
    "olmo2-f32",
    "olmo2-q4",
    "olmo3-f32",
    "olmoe-f32",
    "olmoe-q4",
    "granite-f32",
    "granitemoe-f32",
    "granitemoe-q4",
    "mistral3-f32",
    "mistral3-small-f32",
    "ministral3-f32",
    "mixtral-f32",
    "mixtral-q4",
    "seed_oss-f32",
    "helium-f32",
    "ernie4_5-f32",
    "ernie4_5_moe-f32",
    "ernie4_5_moe-q4",
    "apertus-f32",
    "internlm3-f32",
    "hunyuan_v1_dense-f32",
];

/// apertus (plugin famlx-plugin-apertus).
mod apertus;
/// cohere and cohere2 (plugin famlx-plugin-cohere).
mod cohere;
/// `famlx convert -q` of each family against mlx-lm's q4 fixtures.
mod convert;
/// ernie4_5 and ernie4_5_moe (plugin famlx-plugin-ernie4_5).
mod ernie4_5;
/// exaone4 (plugin famlx-plugin-exaone4).
mod exaone4;
/// gemma2, gemma3_text and gemma3 (plugin famlx-plugin-gemma3).
mod gemma3;
/// GGUF files of qwen2, gemma3_text, qwen3_moe, olmo2 and starcoder2, written by llama.cpp's converter.
mod gguf;
/// GGUF files of phi, phimoe, stablelm, cohere and cohere2, written by llama.cpp's converter.
mod gguf_gpt;
/// GGUF files of gemma2, qwen2_moe, smollm3, ministral3 and mixtral, written by llama.cpp's converter.
mod gguf_llamalike;
/// GGUF files of olmoe, granite, granitemoe, exaone4 and glm4, written by llama.cpp's converter.
mod gguf_olmo_granite;
/// GGUF files of seed_oss, hunyuan_v1_dense, ernie4_5 and ernie4_5_moe.
mod gguf_others;
/// GGUF files of qwen3, phi3 and Llama 3 (the llama family), written by llama.cpp's converter.
mod gguf_qwen3_phi3;
/// glm4 (plugin famlx-plugin-glm4).
mod glm4;
/// granite and granitemoe (plugin famlx-plugin-granite).
mod granite;
/// helium (plugin famlx-plugin-helium).
mod helium;
/// Caches, windows, self-drafting and splits for every family.
mod host_features;
/// hunyuan_v1_dense (plugin famlx-plugin-hunyuan).
mod hunyuan;
/// internlm3 (plugin famlx-plugin-internlm3).
mod internlm3;
/// mistral3, ministral3 and mixtral (plugin famlx-plugin-mistral3).
mod mistral3;
/// olmo2, olmo3 and olmoe (plugin famlx-plugin-olmo).
mod olmo;
/// phi and phimoe (plugin famlx-plugin-phi).
mod phi;
/// qwen2, qwen2_moe and qwen3_moe (plugin famlx-plugin-qwen2).
mod qwen2;
/// seed_oss (plugin famlx-plugin-seed_oss).
mod seed_oss;
/// smollm3 (the llama plugin's family).
mod smollm3;
/// stablelm (plugin famlx-plugin-stablelm).
mod stablelm;
/// starcoder2 (plugin famlx-plugin-starcoder2).
mod starcoder2;
