//! `famlx serve` with a drafter: a request decoding alone speculates (the
//! checkpoint's MTP head or a draft model), under a grammar, with logprobs
//! and penalties, and after a prompt-cache hit; real server processes on
//! 127.0.0.1 and the official `openai` client.

use crate::common;

use common::server::Server;
use common::{fixture, json_of, run};
use serde_json::{json, Value};
use std::path::Path;

/// `famlx generate`'s greedy text for the raw text `prompt`, no drafter.
fn generated_raw(model: &Path, prompt: &str, n: usize) -> String {
    let m = model.to_str().unwrap();
    let args = ["generate", "--model", m, "--raw", "--no-mtp", "-p", prompt, "-m", &n.to_string(), "--json"];
    json_of(&run(&args))["text"].as_str().unwrap().to_string()
}

#[test]
fn a_lone_request_speculates() {
    // With a drafter, a request decoding alone drafts and verifies; one
    // joined by others decodes in the batch. Greedy replies are the
    // model's own either way: a draft model that agrees (itself), one that
    // does not, and Qwen3.5's MTP head over recurrent layers. The requests
    // start 15 ms apart, so lone requests are joined mid-reply; the prompts
    // repeat, so later ones reuse cached prefixes.
    let prompts: Vec<String> = (0..6).map(|i| format!("{} {}", "word ".repeat(i * 4 + 1), i)).collect();
    // The first reply is long enough for the others to join it.
    let n: Vec<usize> = (0..6).map(|i| if i == 0 { 96 } else { 5 + (i * 7) % 17 }).collect();
    let same = fixture("llama-tied-f32").display().to_string();
    let other = fixture("llama-bf16").display().to_string();
    let cases: [(&str, Vec<&str>, bool); 3] = [
        // No prompt cache: the prefixes cached here come mostly from rows
        // that decoded in a batch, without their drafter, so a request
        // reusing one drafts from its first fed token on, with less context
        // (a_prompt_cache_hit_resumes_the_drafter covers the hits that
        // bring the drafter's state).
        ("llama-tied-f32", vec!["--draft-model", &same, "--mtp-depth", "3", "--prompt-cache-bytes", "0"], true),
        ("llama-tied-f32", vec!["--draft-model", &other], false),
        ("qwen3_5_moe-mtp-hf-f32", vec![], false),
    ];
    for (name, extra, agrees) in cases {
        let model = fixture(name);
        let m = model.to_str().unwrap();
        let mut args = vec!["--model", m];
        args.extend_from_slice(&extra);
        let s = Server::start(&args);
        let r = s.scenario("staggered", json!({"model": m, "prompts": prompts, "n": n, "gap": 0.015}));
        let want: Vec<String> = prompts.iter().zip(&n).map(|(p, &k)| generated_raw(&model, p, k)).collect();
        assert_eq!(r["alone"], json!(want), "{name} {extra:?}: speculated alone = the model's greedy text");
        assert_eq!(r["together"], json!(want), "{name} {extra:?}: joined or batched = the model's greedy text");
        assert!(r["sampled"].as_u64().unwrap() > 0, "{name}: a sampled request speculates too");
        assert!(
            !s.log().contains("not kept for reuse"),
            "{name}: a round that ended a reply gave back its extra tokens"
        );
        let (proposed, accepted) =
            (s.metric("famlx_draft_tokens_total"), s.metric("famlx_draft_accepted_tokens_total"));
        assert!(proposed > 0, "{name} {extra:?}: nothing was drafted");
        if agrees {
            assert!(
                accepted * 10 >= proposed * 9,
                "{name}: a drafter that is the model is accepted ({accepted} of {proposed})"
            );
        }
    }
}

#[test]
fn a_prompt_cache_hit_resumes_the_drafter() {
    // The prompt cache keeps a speculating request's drafter state beside
    // its caches, so a later request that reuses the prefix drafts with the
    // whole context, as a server without a prompt cache (which feeds its
    // drafter the whole prompt) does: the same drafts, so the same counts
    // proposed and accepted. With llama drafting with itself, the second
    // request reuses the first's caches short of their end after a
    // 16-token reply (one token is fed again, for its hidden state), and to
    // their end after a 1-token reply (the kept last hidden state is read
    // with the first token fed). Qwen3.5's MTP head over recurrent layers
    // (which this random fixture's drafts never pass) reuses a prompt's end.
    let base = "The quick brown fox jumps over the lazy dog and runs into the forest";
    let prompts = [base.to_string(), format!("{base} where the trees grow tall and old")];
    let same = fixture("llama-tied-f32").display().to_string();
    let self_draft = vec!["--draft-model", same.as_str(), "--mtp-depth", "3"];
    let cases: [(&str, Vec<&str>, u32); 3] = [
        ("llama-tied-f32", self_draft.clone(), 16),
        ("llama-tied-f32", self_draft, 1),
        ("qwen3_5_moe-mtp-hf-f32", vec![], 16),
    ];
    for (name, extra, first_len) in cases {
        let model = fixture(name);
        let m = model.to_str().unwrap();
        // (proposed, accepted, text, cached prompt tokens) of the second request.
        let second = |cache: &str| -> (u64, u64, String, u64) {
            let mut args = vec!["--model", m, "--prompt-cache-bytes", cache];
            args.extend_from_slice(&extra);
            let s = Server::start(&args);
            let ask =
                |p: &str, n: u32| s.completion(&json!({"model": m, "prompt": p, "max_tokens": n, "temperature": 0}));
            ask(&prompts[0], first_len);
            let before = (s.metric("famlx_draft_tokens_total"), s.metric("famlx_draft_accepted_tokens_total"));
            let r = ask(&prompts[1], 24);
            let after = (s.metric("famlx_draft_tokens_total"), s.metric("famlx_draft_accepted_tokens_total"));
            let text = r["choices"][0]["text"].as_str().unwrap().to_string();
            let cached = r["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
            (after.0 - before.0, after.1 - before.1, text, cached)
        };
        let (with, without) = (second("64M"), second("0"));
        let case = format!("{name} after a {first_len}-token reply");
        assert!(with.3 > 0, "{case}: the second request reuses the first's caches");
        assert_eq!(with.2, without.2, "{case}: the same greedy text");
        assert!(with.0 > 0, "{case}: the second request drafts");
        assert_eq!(
            (with.0, with.1),
            (without.0, without.1),
            "{case}: drafts after a hit = drafts with the whole prompt"
        );
    }
}

#[test]
fn logprobs_and_penalties_while_speculating() {
    // Requests asking for logprobs, penalties or a logit bias speculate too:
    // each draft and each verified position is penalised for the tokens
    // before it, drafts included, and each kept token's logprobs come from
    // the verify forward's logits at its position. Greedy replies and their
    // logprobs equal a server's without a drafter.
    let model = fixture("llama-tied-f32");
    let m = model.to_str().unwrap();
    let prompt = "The quick brown fox jumps over the lazy dog";
    let plain = json!({"model": m, "prompt": prompt, "max_tokens": 20, "temperature": 0, "logprobs": 3});
    let mut penalised = plain.clone();
    penalised["presence_penalty"] = json!(0.5);
    penalised["frequency_penalty"] = json!(0.3);
    penalised["repetition_penalty"] = json!(1.5);
    penalised["logit_bias"] = json!({"7": 2.0});
    let ask = |s: &Server, body: &Value| s.completion(body)["choices"][0].clone();
    let reference = Server::start(&["--model", m, "--prompt-cache-bytes", "0"]);
    let s = Server::start(&["--model", m, "--draft-model", m, "--mtp-depth", "3", "--prompt-cache-bytes", "0"]);
    let mut texts = Vec::new();
    for (case, body) in [("logprobs", &plain), ("penalties", &penalised)] {
        let before = s.metric("famlx_draft_accepted_tokens_total");
        let (got, want) = (ask(&s, body), ask(&reference, body));
        assert!(s.metric("famlx_draft_accepted_tokens_total") > before, "{case}: the request speculated");
        assert_eq!(got["text"], want["text"], "{case}");
        let (g, w) = (&got["logprobs"], &want["logprobs"]);
        assert_eq!(g["tokens"], w["tokens"], "{case}");
        let (gl, wl) = (g["token_logprobs"].as_array().unwrap(), w["token_logprobs"].as_array().unwrap());
        assert_eq!(gl.len(), 20, "{case}");
        for (i, (a, b)) in gl.iter().zip(wl).enumerate() {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!((a - b).abs() < 1e-3, "{case}, token {i}: logprob {a} speculating, {b} without");
        }
        let tops = g["top_logprobs"].as_array().unwrap().iter().zip(w["top_logprobs"].as_array().unwrap());
        for (i, (a, b)) in tops.enumerate() {
            let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{case}, token {i}: the same top 3");
            for (k, v) in a {
                assert!((v.as_f64().unwrap() - b[k].as_f64().unwrap()).abs() < 1e-3, "{case}, token {i}: top {k}");
            }
        }
        texts.push(got["text"].clone());
    }
    assert_ne!(texts[0], texts[1], "the penalties change the reply");
}

#[test]
fn speculation_under_a_json_schema() {
    // A grammar masks each draft and each verified position; the drafts the
    // model refuses are taken back from the matcher. Greedy replies equal a
    // server's without a drafter, and sampled ones always validate.
    let model = fixture("llama-tied-f32");
    let m = model.to_str().unwrap();
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"enum": ["cat", "dog", "bird"]}
    }, "required": ["name", "age", "kind"], "additionalProperties": false});
    let args = json!({"model": m, "schema": schema, "count": 12, "max_tokens": 80});
    let plain = Server::start(&["--model", m]);
    let want = plain.scenario("guided", args.clone());
    for draft in ["llama-tied-f32", "llama-bf16"] {
        let d = fixture(draft).display().to_string();
        let s = Server::start(&["--model", m, "--draft-model", &d, "--mtp-depth", "3", "--prompt-cache-bytes", "0"]);
        let r = s.scenario("guided", args.clone());
        assert_eq!(r["greedy"], want["greedy"], "{draft}: greedy replies under the schema = without a drafter");
        assert_eq!(r["failures"], json!([]), "{draft}: every sampled reply validates");
        assert!(s.metric("famlx_draft_tokens_total") > 0, "{draft}: nothing was drafted");
        assert!(!s.log().contains("not kept for reuse"), "{draft}: a round gave back its extra tokens");
    }
    assert_eq!(want["failures"], json!([]));
}
