//! Every text family of issue 36 through `famlx serve`: four greedy
//! requests sent at once are decoded in one batch, and each answer is what
//! the request gets alone and what `famlx generate` prints for the prompt.

use crate::common;

use common::server::Server;
use common::{fixture, run};
use serde_json::{json, Value};

#[test]
fn every_text_family_serves_a_batch_as_generate_answers() {
    let prompts: Vec<String> =
        (0..4).map(|i| format!("{}{i}", "The river ran past the mill. ".repeat(i + 1))).collect();
    let n = [6usize, 9, 12, 7];
    // The float32 fixture of each family (the q4 ones share its code path).
    let names: Vec<&str> = crate::families::text::FIXTURES.iter().copied().filter(|f| f.ends_with("-f32")).collect();
    assert!(!names.is_empty());
    for name in names {
        let model = fixture(name);
        let m = model.to_str().unwrap();
        let s = Server::start(&["--model", m]);
        let r = s.scenario("together", json!({"model": m, "prompts": prompts, "n": n}));
        assert_eq!(r["together"], r["alone"], "{name}: answers in a batch differ from alone");
        let most = s.metric("famlx_batch_size_max");
        assert!(most > 1, "{name}: the requests were never decoded together (most {most})");
        for (i, p) in prompts.iter().enumerate() {
            let o =
                run(&["generate", "--model", m, "--prompt", p, "--raw", "--max-tokens", &n[i].to_string(), "--json"]);
            assert!(o.status.success(), "{name}: generate: {}", String::from_utf8_lossy(&o.stderr));
            let g: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(g["text"], r["alone"][i], "{name}: prompt {i}: served answer differs from generate's");
        }
    }
}
