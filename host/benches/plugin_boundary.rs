//! Cost of the plugin boundary on decode: the llama family loaded as a
//! plugin (dlopen, abi_stable root module) vs the same family linked into
//! this binary, same weights, same host. Prints decode tok/s of both,
//! alternating trials, and the ratio.
//!
//!     cargo bench -p famlx --bench plugin_boundary [-- MODEL_DIR_OR_GGUF [TOKENS]]

use famlx::cache::CacheOptions;
use famlx::decode::{generate, GenParams};
use famlx::model::LoadedModel;
use famlx::plugins::{search_dirs, FamilyEntry, LoadedPlugin, Registry};
use std::path::PathBuf;
use std::sync::Arc;

fn static_registry() -> Registry {
    let fam = plugin_api::adapter::family_box(famlx_plugin_llama::LlamaFamily);
    let entry = FamilyEntry {
        name: "llama".into(),
        model_types: vec!["llama".into()],
        catalog: vec![plugin_api::ModelInfo::text("llama")],
        plugin_path: PathBuf::from("<linked in>"),
        family: Arc::new(fam),
    };
    Registry {
        plugins: vec![LoadedPlugin {
            path: PathBuf::from("<linked in>"),
            name: "static".into(),
            families: vec![Arc::new(entry)],
        }],
        ..Default::default()
    }
}

fn decode_tps(m: &mut LoadedModel, tokens: usize) -> f64 {
    let mut seq = m.sequence().unwrap();
    let p = GenParams { max_tokens: tokens, prefill_step: 512, ..Default::default() };
    generate(m, &mut seq, &[1, 2, 3, 4, 5, 6, 7, 8], &p, |_| true).unwrap().generation_tps
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let model = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/llama-bf16"));
    let tokens: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let plugin_reg = Registry::discover(&search_dirs(&[]));
    let mut plugged = LoadedModel::load(&model, &plugin_reg, Some("llama"), CacheOptions::default()).unwrap();
    let mut linked = LoadedModel::load(&model, &static_registry(), Some("llama"), CacheOptions::default()).unwrap();
    println!("model {} ({}), {} tokens per trial", model.display(), plugged.family.plugin_path.display(), tokens);
    decode_tps(&mut plugged, tokens);
    decode_tps(&mut linked, tokens);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        a.push(decode_tps(&mut plugged, tokens));
        b.push(decode_tps(&mut linked, tokens));
    }
    let (pa, pb) = (median(a.clone()), median(b.clone()));
    println!("plugin  decode tok/s: median {pa:.1}  all {a:.1?}");
    println!("linked  decode tok/s: median {pb:.1}  all {b:.1?}");
    println!("plugin / linked: {:.3}", pa / pb);
}
