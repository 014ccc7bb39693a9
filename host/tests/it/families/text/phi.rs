//! The Phi plugin's families (phi, phimoe) against mlx-lm, and the configs
//! each refuses.

use super::refused;
use crate::families::parity::parity_in;

#[test]
fn phi_f32() {
    parity_in("phi-f32", "phi");
}

#[test]
fn phimoe_f32() {
    parity_in("phimoe-f32", "phimoe");
}

#[test]
fn phimoe_q4() {
    parity_in("phimoe-q4", "phimoe");
}

/// An activation phi does not implement is refused naming it.
#[test]
fn phi_refuses_an_unknown_activation() {
    refused("phi-f32", |c| drop(c.insert("hidden_act".into(), "relu".into())), &["hidden_act", "relu"]);
}

/// A rope type phimoe does not implement is refused naming it.
#[test]
fn phimoe_refuses_an_unknown_rope_type() {
    refused(
        "phimoe-f32",
        |c| drop(c["rope_scaling"].as_object_mut().unwrap().insert("type".into(), "yarn".into())),
        &["rope_scaling.type", "yarn"],
    );
}

/// Phi's output head has a bias: a checkpoint without it is refused.
#[test]
fn phi_refuses_a_checkpoint_without_the_head_bias() {
    super::refused_without("phi-f32", "lm_head.bias");
}

/// Phi-3.5-MoE as Hugging Face stores it (each expert's `w1`/`w3`/`w2` on
/// its own) gives the logits of mlx-lm's stacked layout, bit for bit.
#[test]
fn phimoe_reads_per_expert_checkpoints() {
    use crate::common::{fixture, fixture_copy, mlx_lock, parity::logit_steps, registry};
    let _g = mlx_lock();
    let load = |dir: &std::path::Path| {
        famlx::model::LoadedModel::load(dir, &registry(), None, famlx::cache::CacheOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()))
    };
    let want = logit_steps(&mut load(&fixture("phimoe-f32")), 4);

    let ck = fixture_copy("phimoe-f32");
    let file = ck.path().join("model.safetensors");
    let (t, _) = mlx::io::load_safetensors(&file).unwrap();
    let mut out = std::collections::HashMap::new();
    for (name, a) in t {
        let Some((moe, rest)) = name.split_once(".switch_mlp.") else {
            out.insert(name, a);
            continue;
        };
        let hf = match rest {
            "gate_proj.weight" => "w1",
            "up_proj.weight" => "w3",
            "down_proj.weight" => "w2",
            other => panic!("unexpected {other}"),
        };
        for e in 0..a.dim(0) {
            out.insert(
                format!("{moe}.experts.{e}.{hf}.weight"),
                a.slice_axis(0, e, e + 1).unwrap().squeeze(&[0]).unwrap(),
            );
        }
    }
    let arrays: Vec<(&str, &mlx::Array)> = out.iter().map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&file, &arrays, &[("format", "pt")]).unwrap();
    std::fs::remove_file(ck.path().join("model.safetensors.index.json")).unwrap();
    let got = logit_steps(&mut load(ck.path()), 4);
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        assert!(a == b, "step {i}: per-expert and stacked logits differ");
    }
}

/// A LongRoPE factor list that does not fit the heads is refused naming it.
#[test]
fn phimoe_refuses_a_long_factor_of_the_wrong_length() {
    refused(
        "phimoe-f32",
        |c| {
            drop(c["rope_scaling"].as_object_mut().unwrap().insert("long_factor".into(), serde_json::json!([1.0, 2.0])))
        },
        &["rope_scaling.long_factor", "2 entries"],
    );
}
