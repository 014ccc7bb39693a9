//! gemma4 family: parity with mlx-lm on the gemma4 fixtures
//! (fixtures/make_gemma4_fixtures.py) and Gemma's one-BOS rule.
//!
//! Per fixture and prompt (1, 10 and 40 tokens; the sliding window is 8 and
//! the prefill chunk 16, so the 40-token prompt slides the window both in one
//! chunk and across chunks): first-step logits from one full forward on fresh
//! caches, and 24 greedy tokens with chunked prefill of 16, checked with the
//! tolerances and the tie rule of tests/it/families/parity.rs (common::parity).
//!
//! Fixtures: `gemma4-hf-bf16` (multimodal `gemma4` checkpoint in Hugging Face
//! naming, with vision tensors the plugin drops), `gemma4-bf16` and
//! `gemma4-q4` (the same weights converted by mlx-lm), `gemma4-e2b-bf16`
//! (`gemma4_text`, per-layer inputs, two KV-shared layers, double-wide MLP),
//! `gemma4-moe-hf-f32` (26B-A4B style MoE block, HF naming with fused
//! experts, f32: MLX's CPU gather_mm runs only in f32) and `gemma4-moe-q4`
//! (the same weights converted by mlx-lm to 4 bits, router at 8 bits, bf16
//! activations).
//!
//! `--kv-bits 8`: mlx-lm 0.32.2 raises NotImplementedError for gemma4 (it
//! calls `RotatingKVCache.to_quantized` on the sliding layers). famlx
//! quantizes the full-attention caches and keeps the sliding windows dense;
//! the reference is mlx-lm's own kv_bits loop with the sliding caches opted
//! out (fixtures/make_gemma4_fixtures.py, `DenseSlidingCache`).

use crate::common;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RStr, RVec};
use common::parity::{check_greedy, check_logits, check_prompts, check_tokenizer, first_tie, floats};
use common::{expected, fixture, ids, mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::checkpoint::Checkpoint;
use famlx::decode::{generate, prefill, GenParams};
use famlx::decode::{Drafter, SpecParams};
use famlx::model::HostWeights;
use famlx::model::LoadedModel;
use famlx::prompt::{chat_ids, Message};
use mlx::Array;
use plugin_api::abi::{CacheBox, DrafterBox, WeightStore_TO};
use plugin_api::CacheKind;
use plugin_api::{LogitsWanted, TokenSource};

fn load(variant: &str) -> LoadedModel {
    load_with(variant, CacheOptions::default())
}

fn load_with(variant: &str, opts: CacheOptions) -> LoadedModel {
    let reg = registry();
    LoadedModel::load(&fixture(variant), &reg, None, opts).unwrap_or_else(|e| panic!("{variant}: load: {e:#}"))
}

/// `--kv-bits 8 --kv-group-size 32`, quantized from the first token (as recorded).
fn kv8() -> CacheOptions {
    CacheOptions { k_bits: Some(8), v_bits: Some(8), kv_group_size: 32, quantized_kv_start: 0, ..Default::default() }
}

/// The plan's caches match what mlx-lm's `make_cache` gives (recorded in
/// expected.json): rotating caches of the window for sliding layers, full
/// caches for global ones, none for KV-shared layers.
fn check_plan(variant: &str, m: &LoadedModel, exp: &serde_json::Value) {
    let want: Vec<CacheKind> = exp["make_cache"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match c["kind"].as_str().unwrap() {
            "KVCache" => CacheKind::Full,
            "RotatingKVCache" => {
                assert_eq!(c["keep"].as_u64(), Some(0), "{variant}: keep");
                CacheKind::Sliding { window: c["max_size"].as_u64().unwrap() as u32 }
            }
            k => panic!("{variant}: cache kind {k}"),
        })
        .collect();
    assert_eq!(m.plan.caches.to_vec(), want, "{variant}: cache plan");
    assert_eq!(m.plan.add_bos.into_option(), Some(true));
}

fn parity(variant: &str) {
    let _g = mlx_lock();
    let exp = expected(variant);
    assert_eq!(exp["variant"].as_str(), Some(variant));
    assert_eq!(exp["prefill_step_size"].as_u64(), Some(16));
    let mut m = load(variant);
    assert_eq!(m.family.name, "gemma4", "{variant}: wrong family");
    check_plan(variant, &m, &exp);
    // No audio tensors survive the rewriter. Vision tensors are kept under
    // mlx-vlm's names; gemma4-hf-bf16 carries only a few of its tower's, so
    // it serves text with images off.
    assert!(m.weights.tensors.keys().all(|k| !k.contains("audio")), "{variant}: audio tensors kept");
    if m.weights.tensors.keys().any(|k| k.contains("vision")) {
        assert!(!m.disable_media_without_tower().is_empty(), "{variant}: a partial vision tower took images");
        assert!(m.plan.media.is_none());
    }

    let f32_model = exp["activation_dtype"].as_str() == Some("float32");
    let mut errs = check_prompts(variant, &mut m, &exp, f32_model);
    errs.extend(check_tokenizer(variant, &m, &exp));
    assert!(errs.is_empty(), "{variant}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

#[test]
fn gemma4_hf_bf16() {
    parity("gemma4-hf-bf16");
}
#[test]
fn gemma4_bf16() {
    parity("gemma4-bf16");
}
#[test]
fn gemma4_q4() {
    parity("gemma4-q4");
}
#[test]
fn gemma4_e2b_bf16() {
    parity("gemma4-e2b-bf16");
}
#[test]
fn gemma4_moe_hf_f32() {
    parity("gemma4-moe-hf-f32");
}
#[test]
fn gemma4_moe_q4() {
    parity("gemma4-moe-q4");
}

/// The MoE fixtures load through both namings: HF's fused
/// `experts.gate_up_proj` is split into mlx-lm's `switch_glu` gate and up.
#[test]
fn moe_weight_names() {
    let _g = mlx_lock();
    for variant in ["gemma4-moe-hf-f32", "gemma4-moe-q4"] {
        let m = load(variant);
        let names: Vec<&String> = m.weights.tensors.keys().collect();
        let gate = "language_model.model.layers.0.experts.switch_glu.gate_proj.weight";
        assert!(m.weights.tensors.contains_key(gate), "{variant}: no {gate}");
        assert!(names.iter().all(|k| !k.ends_with("gate_up_proj")), "{variant}: fused experts kept");
        let e = &m.weights.tensors[gate];
        assert_eq!((e.dim(0), e.dim(1)), (8, 32), "{variant}: gate_proj shape {:?}", e.shape());
    }
    // The router stays at 8 bits in the q4 checkpoint, as mlx-lm writes it.
    let m = load("gemma4-moe-q4");
    let spec = m.weights.quant.spec_for("language_model.model.layers.0.router.proj", &[8, 16], &[8, 1]).unwrap();
    assert_eq!((spec.bits, spec.group_size), (8, 64));
}

/// `--kv-bits 8` against mlx-lm's kv_bits loop (full-attention caches
/// quantized, sliding windows dense): 24 greedy tokens per prompt with
/// chunked prefill of 16, the tie rule as for the dense runs. E2B has no
/// reference (mlx-lm's KV-shared layers reject quantized K/V); there the
/// first-step logits of the 40-token prompt, whose second and third prefill
/// chunks attend over 8-bit K/V, must stay close to the dense reference and
/// greedy decoding must run.
#[test]
fn kv_bits_8() {
    let _g = mlx_lock();
    for variant in ["gemma4-bf16", "gemma4-q4", "gemma4-e2b-bf16", "gemma4-moe-hf-f32", "gemma4-moe-q4"] {
        let exp = expected(variant);
        assert_eq!(exp["kv_quant"]["kv_bits"][0].as_u64(), Some(8), "{variant}: kv_quant");
        let mut m = load_with(variant, kv8());
        let mut errs = Vec::new();
        let mut quantized_differs = exp["prompts"][0]["greedy_kv8"].is_null();
        for p in exp["prompts"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            let prompt = ids(&p["ids"]);
            let mut seq = m.sequence().unwrap();
            let params = GenParams { max_tokens: 24, prefill_step: 16, stop_ids: Vec::new(), ..Default::default() };
            let stats = generate(&mut m, &mut seq, &prompt, &params, |_| true)
                .unwrap_or_else(|e| panic!("{variant}/{name}: kv8 generate: {e:#}"));
            if p["greedy_kv8"].is_null() {
                assert!(p["greedy_kv8_error"].is_string(), "{variant}/{name}: no kv8 reference and no reason");
                assert_eq!(stats.tokens.len(), 24);
                continue;
            }
            let (want, margins) = (ids(&p["greedy_kv8"]), floats(&p["greedy_kv8_margins"]));
            quantized_differs |= want != ids(&p["greedy"]);
            let same = stats.tokens.iter().zip(&want).take_while(|(a, b)| a == b).count();
            eprintln!("{variant}/{name}: kv8 greedy identical for {same}/24 (first tie {:?})", first_tie(&margins));
            errs.extend(check_greedy(variant, &format!("{name}/kv8"), &stats.tokens, &want, &margins).err());
        }
        if variant == "gemma4-e2b-bf16" {
            let p = &exp["prompts"][2];
            let mut seq = m.sequence().unwrap();
            let prompt = ids(&p["ids"]);
            let logits = prefill(&mut m, &mut seq, &prompt, 16).unwrap();
            let ours: Vec<f32> = logits.astype(mlx::Dtype::F32).unwrap().to_vec().unwrap();
            let want = floats(&p["logits"]);
            let worst = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            eprintln!("{variant}/len40: kv8 vs dense logits max |diff| {worst}");
            assert!(worst < 0.5, "{variant}/len40: kv8 logits off the dense ones by {worst}");
            assert!(ours.iter().zip(&want).any(|(a, b)| a != b), "{variant}: kv8 run was not quantized");
        }
        // The reference itself must show quantization somewhere.
        assert!(quantized_differs, "{variant}: kv8 references all equal the dense ones");
        assert!(errs.is_empty(), "{variant}: {} kv8 mismatches:\n{}", errs.len(), errs.join("\n"));
    }
}

/// With `--kv-bits`, sliding-window layers keep dense rotating caches and
/// full-attention layers quantize (mlx-lm cannot quantize rotating caches).
#[test]
fn kv_bits_quantize_only_full_layers() {
    let _g = mlx_lock();
    let mut m = load_with("gemma4-bf16", kv8());
    let prompt = ids(&expected("gemma4-bf16")["prompts"][1]["ids"]);
    let mut seq = m.sequence().unwrap();
    prefill(&mut m, &mut seq, &prompt, 16).unwrap();
    for (i, kind) in m.plan.caches.iter().enumerate() {
        // A full cache turns into a packed one on its next use; until then
        // it carries the quantization that is due.
        let saved = seq.caches()[i].lock().save().unwrap().1;
        let kind_name = saved["kind"].as_str().unwrap();
        if matches!(kind, CacheKind::Full) {
            assert!(kind_name == "quantized" || !saved["quant"].is_null(), "layer {i} ({kind:?}): {saved}");
        } else {
            assert_eq!(kind_name, "rotating", "layer {i} ({kind:?}): {saved}");
            assert!(saved["quant"].is_null(), "layer {i}: sliding cache quantized: {saved}");
        }
    }
}

/// Raw and templated prompts both start with exactly one BOS.
#[test]
fn one_bos() {
    let _g = mlx_lock();
    for variant in ["gemma4-bf16", "gemma4-e2b-bf16"] {
        let m = load(variant);
        let tok = m.tokenizer().unwrap();
        let (bos_text, bos) = tok.bos_token().expect("gemma4 fixtures have a BOS");
        assert!(tok.add_bos(), "{variant}: add_bos");
        let one = |what: &str, ids: &[u32]| {
            assert_eq!(ids.first(), Some(&bos), "{variant}: {what}: {ids:?}");
            assert_ne!(ids.get(1), Some(&bos), "{variant}: {what}: two BOS: {ids:?}");
            assert_eq!(ids.iter().filter(|&&i| i == bos).count(), 1, "{variant}: {what}: {ids:?}");
        };
        one("raw", &tok.encode("The river ran past the old mill.", true).unwrap());
        one("raw starting with BOS text", &tok.encode(&format!("{bos_text}The river"), true).unwrap());
        let msgs = [Message::new("user", "What is the capital of France?")];
        let templ = chat_ids(tok, &msgs, &Default::default()).unwrap();
        one("templated", &templ);
        // The template itself writes `{{ bos_token }}`: the ids are those of
        // the rendered text without a second BOS.
        let exp = expected(variant);
        assert_eq!(templ, ids(&exp["tokenizer"]["chat"]["ids"]), "{variant}: chat ids");
    }
}

/// A scratch copy of `variant` whose tokenizer says nothing about BOS: no
/// `add_bos_token` in tokenizer_config.json, no BOS-inserting
/// post-processor in tokenizer.json (as transformers-5 conversions of
/// SentencePiece tokenizers often are).
fn silent_tokenizer_copy(variant: &str) -> common::Scratch {
    let s = common::fixture_copy(variant);
    let edit = |file: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let p = s.path().join(file);
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&p, v.to_string()).unwrap();
    };
    edit("tokenizer_config.json", &|v| {
        v.as_object_mut().unwrap().remove("add_bos_token");
    });
    edit("tokenizer.json", &|v| {
        let procs = v["post_processor"]["processors"].as_array_mut().unwrap();
        procs.retain(|p| p["type"] != "TemplateProcessing");
    });
    s
}

/// The host applies the model's BOS convention (`plan.add_bos`) when the
/// tokenizer is silent: raw prompts, templated prompts and prompts that
/// already start with BOS all get exactly one, through the library and
/// through `famlx generate`; a family without a convention adds none.
#[test]
fn bos_when_the_tokenizer_is_silent() {
    let _g = mlx_lock();
    let s = silent_tokenizer_copy("gemma4-bf16");
    let reg = registry();
    let m = LoadedModel::load(s.path(), &reg, None, CacheOptions::default()).unwrap();
    let tok = m.tokenizer().unwrap();
    assert!(!tok.add_bos_declared(), "the edited tokenizer still declares BOS");
    assert!(tok.add_bos(), "gemma4's plan.add_bos was not applied");
    let (bos_text, bos) = tok.bos_token().unwrap();
    let one = |what: &str, ids: &[u32]| {
        assert_eq!(ids.first(), Some(&bos), "{what}: {ids:?}");
        assert_eq!(ids.iter().filter(|&&i| i == bos).count(), 1, "{what}: {ids:?}");
    };
    let text = "The river ran past the old mill.";
    let raw = tok.encode(text, true).unwrap();
    one("raw", &raw);
    assert_eq!(&raw[1..], &tok.encode(text, false).unwrap()[..]);
    one("raw starting with BOS", &tok.encode(&format!("{bos_text}{text}"), true).unwrap());
    let templ = chat_ids(tok, &[Message::new("user", "What is the capital of France?")], &Default::default()).unwrap();
    one("templated", &templ);
    assert_eq!(templ, ids(&expected("gemma4-bf16")["tokenizer"]["chat"]["ids"]), "chat ids");

    // The CLI's raw and templated prompts.
    let dir = s.path().to_str().unwrap();
    let n = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", dir, "--max-tokens", "1", "--json"];
        args.extend_from_slice(extra);
        common::json_of(&common::run(&args))["prompt_tokens"].as_u64().unwrap() as usize
    };
    assert_eq!(n(&["--raw", "--prompt", text]), raw.len(), "famlx generate --raw");
    assert_eq!(n(&["--raw", "--prompt", &format!("{bos_text}{text}")]), raw.len(), "--raw with BOS text");
    assert_eq!(n(&["--prompt", "What is the capital of France?"]), templ.len(), "templated");

    // llama has no BOS convention of its own: a silent tokenizer adds none.
    let s = silent_tokenizer_copy("llama-bf16");
    let m = LoadedModel::load(s.path(), &reg, None, CacheOptions::default()).unwrap();
    assert_eq!(m.plan.add_bos.into_option(), None);
    let tok = m.tokenizer().unwrap();
    assert!(!tok.add_bos());
    assert_ne!(tok.encode(text, true).unwrap().first(), Some(&bos));
}

/// A tokenizer that declares `add_bos_token: false` wins over the family's
/// convention (the checkpoint's author decided).
#[test]
fn declared_no_bos_wins() {
    let _g = mlx_lock();
    let s = common::fixture_copy("gemma4-bf16");
    let p = s.path().join("tokenizer_config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["add_bos_token"] = serde_json::Value::Bool(false);
    std::fs::write(&p, v.to_string()).unwrap();
    let m = LoadedModel::load(s.path(), &registry(), None, CacheOptions::default()).unwrap();
    let tok = m.tokenizer().unwrap();
    assert!(tok.add_bos_declared() && !tok.add_bos());
}

/// Builds the assistant drafter in `dir` for target `m` the way the host's
/// `--draft-model` does (plan, rewrite, build_drafter with both pairs).
fn assistant_drafter(dir: &std::path::Path, m: &LoadedModel) -> (std::rc::Rc<HostWeights>, DrafterBox) {
    let ck = Checkpoint::open(dir).unwrap();
    let fam = &m.family.family;
    let plan = fam.plan(RStr::from(ck.config.to_string().as_str())).into_result().unwrap();
    assert_eq!(plan.model_type.as_str(), "gemma4_assistant");
    assert!(plan.caches.is_empty(), "an assistant owns no caches");
    let w = std::rc::Rc::new(HostWeights::rewritten(&m.family, &plan, &ck.tensors, &ck.on_disk, &ck.quant).unwrap());
    let d = fam
        .build_drafter(
            plugin_api::DraftRole::Checkpoint,
            &plan,
            WeightStore_TO::from_ptr(&*w, TD_Opaque),
            &m.plan,
            WeightStore_TO::from_ptr(&*m.weights, TD_Opaque),
        )
        .into_result()
        .unwrap_or_else(|e| panic!("{}: build_drafter: {e}", dir.display()))
        .into_option()
        .expect("gemma4 builds a drafter from a gemma4_assistant checkpoint");
    (w, d)
}

/// Draft steps against mlx-vlm's Gemma4AssistantDraftModel: the target
/// (famlx) prefills the prompt in one forward; the drafter's first step
/// reads the target's hidden states of every prompt position (using the
/// last) and the target's greedy token, the second chains the first's
/// hidden state and the reference's drafted token. Logits and chained hidden
/// states within the bf16 tolerance of tests/it/common/parity.rs. The 6-token
/// prompt fits the sliding window; past it (40 tokens) the drafter's query
/// must not see the oldest cached sliding position, as in mlx-vlm's mask.
#[test]
fn assistant_draft_steps_match_mlx_vlm() {
    let _g = mlx_lock();
    for variant in ["gemma4-assistant-bf16", "gemma4-assistant-ordered-bf16"] {
        let exp = expected(variant);
        let mut m = load(exp["target"].as_str().unwrap());
        let (_w, mut d) = assistant_drafter(&fixture(variant), &m);
        assert!(d.cache_kinds().is_empty());
        let mut errs = Vec::new();
        for p in exp["prompts"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            let prompt = ids(&p["ids"]);
            let mut seq = m.sequence().unwrap();
            let x = Array::from_slice(&prompt.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[1, prompt.len() as i32])
                .unwrap();
            let (logits, hidden) = m.forward_io(&mut seq, &x, TokenSource::Prompt, LogitsWanted::Last, true).unwrap();
            let tok = logits.unwrap().argmax(-1, false).unwrap().item_i64().unwrap() as i32;
            let steps = p["steps"].as_array().unwrap();
            assert_eq!(tok as u64, steps[0]["token"].as_u64().unwrap(), "{variant}/{name}: target token");
            let mut boxes: RVec<CacheBox> = seq.caches().iter().map(|c| c.boxed()).collect();
            let offset_before = seq.cache_offset();
            let mut next: Vec<i32> = prompt[1..].iter().map(|&t| t as i32).collect();
            next.push(tok);
            let mut h = hidden.unwrap();
            let mut toks = Array::from_slice(&next, &[1, next.len() as i32]).unwrap();
            for (i, s) in steps.iter().enumerate() {
                let out = d
                    .step(h.clone().into(), toks.clone().into(), &mut boxes, &mut RVec::new())
                    .into_result()
                    .unwrap_or_else(|e| panic!("{variant}/{name}: step {i}: {e}"));
                let (lg, nh) = (out.logits.into_array(), out.hidden.into_array());
                assert_eq!(lg.shape(), &[1, 1, 512], "{variant}/{name}: step {i} logits");
                assert_eq!(nh.shape(), &[1, 1, 64], "{variant}/{name}: step {i} hidden");
                let f = |a: &Array| -> Vec<f32> {
                    a.astype(mlx::Dtype::F32).unwrap().reshape(&[-1]).unwrap().to_vec().unwrap()
                };
                let what = format!("{name}/step{i}");
                errs.extend(check_logits(variant, &what, false, &f(&lg), &floats(&s["logits"])).err());
                errs.extend(
                    check_logits(variant, &format!("{what}/hidden"), false, &f(&nh), &floats(&s["hidden"])).err(),
                );
                if let Some(n) = steps.get(i + 1) {
                    toks = Array::from_slice(&[n["token"].as_u64().unwrap() as i32], &[1, 1]).unwrap();
                }
                h = nh;
            }
            assert_eq!(seq.cache_offset(), offset_before, "{variant}: the drafter changed the target's caches");
        }
        assert!(errs.is_empty(), "{variant}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
    }
}

/// An assistant checkpoint is not a model to run: plan() accepts it (a plan
/// without caches), building it as a model says what to do instead.
#[test]
fn assistant_is_refused_as_a_model() {
    let _g = mlx_lock();
    let err = LoadedModel::load(&fixture("gemma4-assistant-bf16"), &registry(), None, CacheOptions::default())
        .err()
        .expect("an assistant is not a model");
    let msg = format!("{err:#}");
    assert!(msg.contains("gemma4_assistant is a draft model: pass it with --draft-model"), "{msg}");
}

/// Greedy output with the assistant drafter equals greedy output without
/// it, token for token, at several depths, with both prompts (inside and
/// past the sliding window); the drafter proposes tokens each round.
#[test]
fn assistant_greedy_unchanged() {
    let _g = mlx_lock();
    for (variant, target) in
        [("gemma4-assistant-bf16", "gemma4-bf16"), ("gemma4-assistant-ordered-bf16", "gemma4-e2b-bf16")]
    {
        let exp = expected(target);
        for p in exp["prompts"].as_array().unwrap().iter().skip(1) {
            let prompt = ids(&p["ids"]);
            let params = GenParams { max_tokens: 16, prefill_step: 16, stop_ids: Vec::new(), ..Default::default() };
            let mut plain = load(target);
            let mut seq = plain.sequence().unwrap();
            let want = generate(&mut plain, &mut seq, &prompt, &params, |_| true).unwrap().tokens;
            for depth in [1, 3] {
                let mut m = famlx::session::Session::new(load(target)).unwrap();
                m.drafter = Some(
                    Drafter::load(&fixture(variant), &registry(), None, &m.model)
                        .unwrap_or_else(|e| panic!("{variant}: {e:#}")),
                );
                m.spec = SpecParams { depth, min_confidence: 0.0 };
                let got = m.run(&prompt, &params, |_| true).unwrap_or_else(|e| panic!("{variant}: {e:#}"));
                assert_eq!(got.tokens, want, "{variant}/{}/depth {depth}", p["name"]);
                let st = got.draft.expect("draft stats");
                assert!(st.proposed > 0 && st.rounds > 0, "{variant}: {st:?}");
            }
        }
    }
}

/// A MoE config without its expert counts is refused, naming the fields.
#[test]
fn moe_config_without_experts_is_refused() {
    let _g = mlx_lock();
    let s = common::fixture_copy("gemma4-moe-q4");
    let cfg_path = s.path().join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["text_config"]["top_k_experts"] = serde_json::Value::Null;
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let reg = registry();
    let err = LoadedModel::load(s.path(), &reg, None, CacheOptions::default()).err().expect("must be refused");
    let msg = format!("{err:#}");
    assert!(msg.contains("top_k_experts") && msg.contains("config.json"), "{msg}");
}

/// gemma4-e2b-bf16's weights under `config` (media_tokens.json's: a
/// multimodal `gemma4` config whose image, video and audio token ids are
/// ordinary vocabulary entries), tensors renamed to Hugging Face's
/// multimodal naming (`model.X` → `model.language_model.X`).
fn e2b_with_media_ids(config: &serde_json::Value) -> common::Scratch {
    let src = fixture("gemma4-e2b-bf16");
    let s = common::Scratch::new("gemma4-media-ids");
    for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"] {
        std::fs::copy(src.join(f), s.path().join(f)).unwrap();
    }
    std::fs::write(s.path().join("config.json"), config.to_string()).unwrap();
    let (tensors, meta) = mlx::io::load_safetensors(&src.join("model.safetensors")).unwrap();
    let renamed: Vec<(String, &Array)> = tensors
        .iter()
        .map(|(k, v)| (format!("model.language_model.{}", k.strip_prefix("model.").unwrap()), v))
        .collect();
    let arrays: Vec<(&str, &Array)> = renamed.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    mlx::io::save_safetensors(&s.path().join("model.safetensors"), &arrays, &meta).unwrap();
    s
}

/// Media token ids as mlx-vlm 0.7.10 reads them in a text request
/// (media_tokens.json, fixtures/make_gemma4_media_tokens.py): a prompt token
/// with the image, video or audio token id gets the pad token's per-layer
/// input, a generated one its own. Teacher-forced logits after a prompt
/// holding all three (its last token the video id) and after each of
/// `[video, image, audio, text, video]` fed as generated tokens; then the
/// greedy run that generates them, through every decode loop: plain,
/// batched (the server's), and speculative with the E2B assistant drafter
/// (verification and rollback). Without a vision_config (a checkpoint that
/// takes no media) the prompt reads the ids the same way.
#[test]
fn media_token_ids_read_as_mlx_vlm_does() {
    let _g = mlx_lock();
    let case: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("gemma4-e2b-bf16").join("media_tokens.json")).unwrap())
            .unwrap();
    let dir = e2b_with_media_ids(&case["config"]);
    let load = || LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()).unwrap();
    let mut m = load();
    assert!(m.plan.config.as_str().contains("\"video_token_id\":494"), "the case's config is loaded");
    let step = case["prefill_step_size"].as_u64().unwrap() as usize;
    let f = |a: &Array| -> Vec<f32> { a.astype(mlx::Dtype::F32).unwrap().reshape(&[-1]).unwrap().to_vec().unwrap() };

    let forced = &case["forced"];
    let forced_logits = forced["logits"].as_array().unwrap();
    let toks = ids(&forced["tokens"]);
    assert_eq!(forced_logits.len(), toks.len() + 1);
    let mut errs = Vec::new();
    let prompt = ids(&forced["prompt"]);
    // Every prefill: one forward, and the server's into a sequence's own caches.
    let mut seq = m.sequence().unwrap();
    let l = prefill(&mut m, &mut seq, &prompt, prompt.len()).unwrap();
    errs.extend(check_logits("media ids", "prompt in one forward", false, &f(&l), &floats(&forced_logits[0])).err());
    let mut own = m.sequence().unwrap();
    let l = famlx::decode::prefill_into(&mut m, &mut own, &prompt, step, None).unwrap();
    errs.extend(check_logits("media ids", "prompt into caches", false, &f(&l), &floats(&forced_logits[0])).err());
    seq.reset().unwrap();
    let l = famlx::decode::prefill_last_alone(&mut m, &mut seq, &prompt, step).unwrap();
    errs.extend(check_logits("media ids", "prompt", false, &f(&l), &floats(&forced_logits[0])).err());
    for (i, &t) in toks.iter().enumerate() {
        let x = Array::from_slice(&[t as i32], &[1, 1]).unwrap();
        let l = m.forward(&mut seq, &x, TokenSource::Generated, LogitsWanted::Last).unwrap().unwrap();
        errs.extend(
            check_logits("media ids", &format!("after generated {t}"), false, &f(&l), &floats(&forced_logits[i + 1]))
                .err(),
        );
    }
    assert!(errs.is_empty(), "{} mismatches:\n{}", errs.len(), errs.join("\n"));

    let greedy = &case["greedy"];
    let (prompt, want, margins) = (ids(&greedy["prompt"]), ids(&greedy["tokens"]), floats(&greedy["margins"]));
    for kind in [174, 494, 230] {
        assert!(want.contains(&kind), "the greedy run generates media id {kind}");
    }
    let params = GenParams { max_tokens: want.len(), prefill_step: step, stop_ids: Vec::new(), ..Default::default() };
    seq.reset().unwrap();
    let plain = generate(&mut m, &mut seq, &prompt, &params, |_| true).unwrap().tokens;
    check_greedy("media ids", "plain", &plain, &want, &margins).unwrap();

    let mut own = m.sequence().unwrap();
    let l = famlx::decode::prefill_into(&mut m, &mut own, &prompt, step, None).unwrap();
    let mut batch = famlx::cache::BatchCaches::new();
    batch.set_rows(&[(0, own.caches())]).unwrap();
    let mut batched = vec![l.argmax(-1, false).unwrap().item_i64().unwrap() as u32];
    while batched.len() < want.len() {
        let t = Array::from_slice(&[*batched.last().unwrap() as i32], &[1]).unwrap();
        let l = famlx::decode::decode_step(&mut m, &batch, &t).unwrap();
        batched.push(l.argmax(-1, false).unwrap().item_i64().unwrap() as u32);
    }
    check_greedy("media ids", "batched", &batched, &want, &margins).unwrap();

    let mut s = famlx::session::Session::new(load()).unwrap();
    s.drafter = Some(Drafter::load(&fixture("gemma4-assistant-ordered-bf16"), &registry(), None, &s.model).unwrap());
    s.spec = SpecParams { depth: 3, min_confidence: 0.0 };
    let got = s.run(&prompt, &params, |_| true).unwrap();
    check_greedy("media ids", "speculative", &got.tokens, &want, &margins).unwrap();
    assert!(got.draft.expect("draft stats").proposed > 0);

    let mut config = case["config"].clone();
    config.as_object_mut().unwrap().remove("vision_config");
    let dir = e2b_with_media_ids(&config);
    let mut m = LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default()).unwrap();
    assert!(m.plan.media.is_none(), "no vision_config, no audio_config: no media");
    let mut seq = m.sequence().unwrap();
    let l = famlx::decode::prefill_last_alone(&mut m, &mut seq, &ids(&forced["prompt"]), step).unwrap();
    check_logits("media ids", "prompt without media", false, &f(&l), &floats(&forced_logits[0])).unwrap();
}
