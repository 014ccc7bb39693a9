//! The OLMo plugin's families (olmo2, olmo3, olmoe) against mlx-lm, and the
//! configs each refuses.

use super::refused;
use crate::common;
use crate::families::parity::parity_in;

use common::{fixture_copy, mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

#[test]
fn olmo2_f32() {
    parity_in("olmo2-f32", "olmo2");
}

#[test]
fn olmo2_q4() {
    parity_in("olmo2-q4", "olmo2");
}

/// A sliding layer (window 8) and a full one; the long prompt passes the window.
#[test]
fn olmo3_f32() {
    parity_in("olmo3-f32", "olmo3");
}

#[test]
fn olmoe_f32() {
    parity_in("olmoe-f32", "olmoe");
}

#[test]
fn olmoe_q4() {
    parity_in("olmoe-q4", "olmoe");
}

/// An activation olmo2 does not implement is refused naming it.
#[test]
fn olmo2_refuses_an_unknown_activation() {
    refused("olmo2-f32", |c| drop(c.insert("hidden_act".into(), "gelu".into())), &["hidden_act", "gelu"]);
}

/// A layer kind olmo3 does not implement is refused naming the entry.
#[test]
fn olmo3_refuses_an_unknown_layer_type() {
    refused(
        "olmo3-f32",
        |c| drop(c.insert("layer_types".into(), serde_json::json!(["sliding_attention", "chunked_attention"]))),
        &["layer_types[1]", "chunked_attention"],
    );
}

/// q/k/v clamping (mlx-lm ignores it) is refused rather than run unclamped.
#[test]
fn olmoe_refuses_clip_qkv() {
    refused("olmoe-f32", |c| drop(c.insert("clip_qkv".into(), 8.0.into())), &["clip_qkv", "8"]);
}

/// Fixture `variant` rewritten tensor by tensor (`layout`: a stored name
/// and tensor to the names and tensors written instead) as another layout
/// of the same model gives its logits, bit for bit.
pub(crate) fn same_logits_in_layout(variant: &str, layout: impl Fn(String, mlx::Array) -> Vec<(String, mlx::Array)>) {
    use crate::common::{fixture, parity::logit_steps};
    let _g = mlx_lock();
    let load = |dir: &std::path::Path| {
        LoadedModel::load(dir, &registry(), None, CacheOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()))
    };
    let want = logit_steps(&mut load(&fixture(variant)), 4);
    let ck = fixture_copy(variant);
    let file = ck.path().join("model.safetensors");
    let (t, _) = mlx::io::load_safetensors(&file).unwrap();
    let out: Vec<(String, mlx::Array)> = t.into_iter().flat_map(|(n, a)| layout(n, a)).collect();
    let arrays: Vec<(&str, &mlx::Array)> = out.iter().map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&file, &arrays, &[("format", "pt")]).unwrap();
    std::fs::remove_file(ck.path().join("model.safetensors.index.json")).unwrap();
    let got = logit_steps(&mut load(ck.path()), 4);
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        assert!(a == b, "{variant}: step {i}: logits differ from the fixture's layout");
    }
}

/// OLMoE as Hugging Face stores it (each expert's projections on their
/// own) gives the logits of mlx-lm's stacked layout.
#[test]
fn olmoe_reads_per_expert_checkpoints() {
    same_logits_in_layout("olmoe-f32", |name, a| {
        let Some((mlp, proj)) = name.split_once(".switch_mlp.") else { return vec![(name, a)] };
        (0..a.dim(0))
            .map(|e| (format!("{mlp}.experts.{e}.{proj}"), a.slice_axis(0, e, e + 1).unwrap().squeeze(&[0]).unwrap()))
            .collect()
    });
}

/// Biases the config declares are required: a checkpoint without them is
/// refused naming them, never run without.
#[test]
fn olmo2_requires_the_biases_its_config_declares() {
    refused(
        "olmo2-f32",
        |c| drop(c.insert("attention_bias".into(), true.into())),
        &["missing", "model.layers.{0-1}.self_attn.o_proj.bias"],
    );
}
