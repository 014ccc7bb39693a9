//! `famlx convert -q` of each text family's float32 fixture gives what
//! mlx-lm's converter gives: the same tensors byte for byte and the same
//! quantization block (the family's own rules, e.g. MoE routers pinned to 8
//! bits, as mlx-lm's quant predicates). Against the committed q4 fixture
//! where there is one, else against `mlx_lm.convert` run now.

use crate::common;

use common::{fixture, reference, run, texts, Scratch};
use serde_json::{json, Value};

#[test]
fn quantizing_each_family_matches_mlx_lm() {
    let s = Scratch::new("convert-text-families");
    let q4: Vec<String> =
        super::FIXTURES.iter().filter(|f| f.ends_with("-f32")).map(|f| f.replace("-f32", "-q4")).collect();
    let mut jobs = Vec::new();
    for name in &q4 {
        let src = fixture(&name.replace("-q4", "-f32"));
        let ours = s.path().join(name);
        let theirs = if super::FIXTURES.contains(&name.as_str()) {
            fixture(name)
        } else {
            let t = s.path().join(format!("{name}-mlx-lm"));
            let args = ["--hf-path", src.to_str().unwrap(), "-q", "--q-bits", "4", "--q-group-size", "32"];
            reference::mlx_lm_convert(&[&args[..], &["--mlx-path", t.to_str().unwrap()]].concat());
            t
        };
        let o = run(&[
            "convert",
            "--hf-path",
            src.to_str().unwrap(),
            "--mlx-path",
            ours.to_str().unwrap(),
            "-q",
            "--q-bits",
            "4",
            "--q-group-size",
            "32",
        ]);
        let (out, err) = texts(&o);
        assert!(o.status.success(), "{name}: famlx convert failed:\n{out}\n{err}");
        jobs.push(json!({"compare": [ours, theirs]}));
    }
    let results = reference::check(&Value::Array(jobs), s.path());
    let mut bad = Vec::new();
    for (name, c) in q4.iter().zip(&results) {
        if c["differ"] != json!([]) || c["only_a"] != json!([]) || c["only_b"] != json!([]) {
            bad.push(format!(
                "{name}: tensors differ {} / only famlx {} / only mlx-lm {}",
                c["differ"], c["only_a"], c["only_b"]
            ));
        }
        if c["quant_a"] != c["quant_b"] {
            bad.push(format!("{name}: quantization {} vs mlx-lm's {}", c["quant_a"], c["quant_b"]));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
