//! `famlx generate` builds prompts as documented: the chat template by
//! default, plain text with `--raw`, ids untouched with `--prompt-ids`, and
//! never a second BOS when the template already starts with one.

use crate::common;

use common::{expected, fixture, ids, json_of, mlx_lock, registry, run};
use famlx::cache::CacheOptions;
use famlx::decode::{generate, GenParams};
use famlx::model::LoadedModel;
use famlx::prompt::{chat_ids, Message};

const MAX: usize = 6;

/// `famlx generate --model <variant> --json --max-tokens MAX` plus `extra`.
fn cli_json(variant: &str, extra: &[&str]) -> serde_json::Value {
    let m = fixture(variant).display().to_string();
    let max = MAX.to_string();
    let mut a = vec!["generate", "--model", &m, "--json", "--max-tokens", &max];
    a.extend_from_slice(extra);
    json_of(&run(&a))
}

/// The prompt ids the library builds (template or raw) and the greedy tokens
/// it generates from them with the CLI's stop ids.
fn library(variant: &str, text: &str, raw: bool) -> (Vec<u32>, Vec<u32>) {
    let _g = mlx_lock();
    let reg = registry();
    let mut m = LoadedModel::load(&fixture(variant), &reg, None, CacheOptions::default()).unwrap();
    let tok = m.tokenizer().unwrap().clone();
    let prompt = if raw {
        tok.encode(text, true).unwrap()
    } else {
        chat_ids(&tok, &[Message::new("user", text)], &Default::default()).unwrap()
    };
    let mut stop: Vec<u32> = m.plan.eos_ids.iter().copied().collect();
    stop.extend(tok.eos_ids());
    let p = GenParams { max_tokens: MAX, stop_ids: stop, ..Default::default() };
    let mut seq = m.sequence().unwrap();
    let out = generate(&mut m, &mut seq, &prompt, &p, |_| true).unwrap().tokens;
    (prompt, out)
}

#[test]
fn qwen3_prompt_uses_the_chat_template_and_raw_does_not() {
    let v = "qwen3-bf16";
    let (templ, templ_out) = library(v, "hi", false);
    let (raw, raw_out) = library(v, "hi", true);
    // The template wraps the message: <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
    assert_eq!(templ[0], 510, "starts with <|im_start|>: {templ:?}");
    assert!(templ.len() > raw.len() + 5, "{templ:?} vs {raw:?}");

    let j = cli_json(v, &["--prompt", "hi"]);
    assert_eq!(j["prompt_tokens"].as_u64(), Some(templ.len() as u64), "{j}");
    assert_eq!(ids(&j["tokens"]), templ_out, "same prompt ids ⇒ same greedy tokens: {j}");

    let j = cli_json(v, &["--prompt", "hi", "--raw"]);
    assert_eq!(j["prompt_tokens"].as_u64(), Some(raw.len() as u64), "{j}");
    assert_eq!(ids(&j["tokens"]), raw_out, "{j}");
}

#[test]
fn templated_prompt_matches_transformers() {
    // expected.json's chat ids are transformers' apply_chat_template (BOS
    // once, from the template): the CLI's prompt has exactly that length.
    for v in ["qwen3-bf16", "llama-bf16", "llama-hf-bf16"] {
        let chat = &expected(v)["tokenizer"]["chat"];
        let text = chat["messages"][0]["content"].as_str().unwrap();
        let want = ids(&chat["ids"]);
        let (prompt, out) = library(v, text, false);
        assert_eq!(prompt, want, "{v}");
        let j = cli_json(v, &["--prompt", text]);
        assert_eq!(j["prompt_tokens"].as_u64(), Some(want.len() as u64), "{v}: {j}");
        assert_eq!(ids(&j["tokens"]), out, "{v}: {j}");
    }
}

#[test]
fn no_double_bos_for_llama() {
    for v in ["llama-bf16", "llama-hf-bf16", "llama-q4", "llama-tied-f32"] {
        let bos = 508; // <|endoftext|>, bos = eos (fixtures/README.md)
        for raw in [false, true] {
            let (prompt, out) = library(v, "hi", raw);
            assert_eq!(prompt[0], bos, "{v} raw={raw}: BOS first: {prompt:?}");
            assert_ne!(prompt[1], bos, "{v} raw={raw}: double BOS: {prompt:?}");
            assert_eq!(prompt.iter().filter(|&&t| t == bos).count(), 1, "{v} raw={raw}: {prompt:?}");
            let mut extra = vec!["--prompt", "hi"];
            if raw {
                extra.push("--raw");
            }
            let j = cli_json(v, &extra);
            assert_eq!(j["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "{v} raw={raw}: {j}");
            assert_eq!(ids(&j["tokens"]), out, "{v} raw={raw}: {j}");
        }
    }
}

#[test]
fn prompt_ids_are_used_as_given() {
    // No template, no BOS: three ids in, three prompt tokens.
    let j = cli_json("llama-bf16", &["--prompt-ids", "1,2,3"]);
    assert_eq!(j["prompt_tokens"], 3, "{j}");
    let j = cli_json("llama-bf16", &["--prompt-ids", "508,1,2,3"]);
    assert_eq!(j["prompt_tokens"], 4, "{j}");
}

/// `--dump-logits` writes every prompt position's logits; the last row is
/// the reference's logits for the prompt (what scripts/compare_logits.py
/// compares for every row).
#[test]
fn dump_logits_writes_every_position() {
    let exp = expected("llama-tied-f32");
    let prompt = &exp["prompts"][1];
    let want = common::parity::floats(&prompt["logits"]);
    let ids: Vec<String> = prompt["ids"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    let dir = common::Scratch::new("dump-logits");
    let file = dir.path().join("logits.json");
    let m = fixture("llama-tied-f32").display().to_string();
    let f = file.display().to_string();
    let joined = ids.join(",");
    let out = run(&["generate", "--model", &m, "--max-tokens", "1", "--prompt-ids", &joined, "--dump-logits", &f]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(dump["ids"].as_array().unwrap().len(), ids.len());
    let rows = dump["logits"].as_array().unwrap();
    assert_eq!(rows.len(), ids.len(), "one row per prompt position");
    let last = common::parity::floats(rows.last().unwrap());
    common::parity::check_logits("llama-tied-f32", "dump", true, &last, &want).unwrap();
}
