//! `famlx serve` end to end: the official `openai` Python client and plain
//! HTTP against a real server process on 127.0.0.1.

use crate::common;

use crate::common::text as text_common;

use common::server::Server;
use common::{copy_dir, fixture, json_of, run, Scratch};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// `famlx generate`'s greedy text for a chat prompt.
fn generated(model: &Path, prompt: &str, n: usize) -> String {
    let m = model.to_str().unwrap();
    let j = json_of(&run(&["generate", "--model", m, "-p", prompt, "-m", &n.to_string(), "--json"]));
    j["text"].as_str().unwrap().to_string()
}

#[test]
fn openai_client_chat_completions_streams_errors() {
    let model = fixture("llama-bf16");
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m]);
    let prompt = "Tell me a story";
    let r = s.scenario("basics", json!({"model": m, "prompt": prompt, "n": 24, "long": 300}));
    let want = generated(&model, prompt, 24);
    assert_eq!(r["models"], json!([m]));
    assert_eq!(r["chat"]["content"], json!(want), "chat reply = famlx generate's greedy text");
    assert_eq!(r["chat"]["finish"], "length");
    assert_eq!(r["chat"]["usage"]["completion_tokens"], 24);
    assert_eq!(r["chat_stream"]["content"], json!(want), "the streamed deltas add up to the same text");
    assert_eq!(r["chat_stream"]["roles"], json!(["assistant"]));
    assert_eq!(r["chat_stream"]["usage"]["completion_tokens"], 24);
    assert_eq!(r["chat_stream"]["finish"], "length");
    // The second identical prompt reuses the cached prefix.
    assert!(r["chat_stream"]["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0);
    assert_eq!(r["completion"]["text"], r["completion_stream"]);
    assert!(!r["completion"]["text"].as_str().unwrap().is_empty());
    let stop = r["stopped"]["stop"].as_str().unwrap();
    let before = &want[..want.find(stop).unwrap()];
    assert_eq!(r["stopped"]["content"], json!(before), "the reply ends before the stop string");
    assert_eq!(r["stopped"]["finish"], "stop");
    let lps = r["logprobs"].as_array().unwrap();
    assert_eq!(lps.len(), 4);
    for t in lps {
        let top: Vec<f64> = t["top"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(top.len(), 3);
        assert!(top.windows(2).all(|w| w[0] >= w[1]), "top_logprobs most likely first: {top:?}");
        assert!((t["logprob"].as_f64().unwrap() - top[0]).abs() < 1e-4, "greedy picks the top token");
    }
    assert_eq!(r["seeded"][0], r["seeded"][1], "the same seed samples the same reply");
    let e = &r["errors"];
    for (k, status) in [
        ("temperature", 400),
        ("n", 400),
        ("model", 404),
        ("top_logprobs", 400),
        ("tool_choice", 400),
        ("too_long", 413),
    ] {
        assert_eq!(e[k]["status"], status, "{k}: {}", e[k]);
        assert!(e[k]["body"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{k}: {}", e[k]);
    }
    assert_eq!(e["model"]["body"]["param"], "model");
    assert!(s.log().contains("request done"), "one log line per request");
}

#[test]
fn concurrent_requests_give_each_its_alone_tokens() {
    let prompts: Vec<String> = (0..16).map(|i| format!("{} {}", "word ".repeat(i * 3 + 1), i)).collect();
    let n: Vec<usize> = (0..16).map(|i| 4 + (i * 7) % 13).collect();
    let cases: [(&str, &[&str]); 5] = [
        ("llama-tied-f32", &[]),
        ("qwen3_5_moe-f32", &[]),
        ("gemma4-vision-f32", &[]),
        ("llama-tied-f32", &["--kv-bits", "8", "--kv-group-size", "32"]),
        ("llama-tied-f32", &["--max-kv-size", "24"]),
    ];
    for (name, extra) in cases {
        let model = fixture(name);
        let m = model.to_str().unwrap();
        let mut args = vec!["--model", m];
        args.extend_from_slice(extra);
        let s = Server::start(&args);
        let r = s.scenario("together", json!({"model": m, "prompts": prompts, "n": n}));
        assert_eq!(r["together"], r["alone"], "{name} {extra:?}");
        assert!(r["alone"].as_array().unwrap().iter().all(|t| !t.as_str().unwrap().is_empty()));
        let metrics = s.get("/metrics").1;
        let most: usize =
            metrics.lines().find_map(|l| l.strip_prefix("famlx_batch_size_max ")).and_then(|v| v.parse().ok()).unwrap();
        assert!(most > 1, "{name} {extra:?}: the requests were never decoded together (most {most})");
    }
}

#[test]
fn a_server_split_over_ranks_answers_as_one_process() {
    // The same 16 concurrent greedy requests against one process and
    // against 2 ranks (tensor, then pipeline); a dense and a hybrid model.
    let prompts: Vec<String> = (0..16).map(|i| format!("{} {}", "word ".repeat(i * 3 + 1), i)).collect();
    let n: Vec<usize> = (0..16).map(|i| 4 + (i * 7) % 13).collect();
    for name in ["llama-deep-f32", "qwen3_5_moe-f32"] {
        let model = fixture(name);
        let m = model.to_str().unwrap();
        let alone = {
            let mut s = Server::start(&["--model", m]);
            let r = s.scenario("together", json!({"model": m, "prompts": prompts, "n": n}));
            s.stop(Duration::from_secs(30));
            r
        };
        for mode in ["tensor", "pipeline"] {
            let _one = common::distributed_lock();
            let mut s = Server::start_ranks(2, &["--model", m, "--parallel", mode]);
            let r = s.scenario("together", json!({"model": m, "prompts": prompts, "n": n}));
            assert_eq!(r["together"], alone["alone"], "{name} {mode}: concurrent requests");
            assert_eq!(r["alone"], alone["alone"], "{name} {mode}: one by one");
            let status = s.stop(Duration::from_secs(30));
            assert!(status.success(), "{name} {mode}: SIGTERM ends every rank cleanly: {status}\n{}", s.log());
        }
    }
}

/// The tool schema the tool-call tests use (bounded strings: a random model under the grammar ends).
fn weather_schema() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}
    }, "required": ["city", "unit", "days"], "additionalProperties": false})
}

fn check_tool_calls(r: &Value, what: &str) {
    let req = &r["required"];
    assert_eq!(req["finish"], "tool_calls", "{what}: {r}");
    let call = &req["calls"][0];
    assert_eq!(call["name"], "get_weather", "{what}: {r}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string() && args["days"].is_i64(), "{what}: {args}");
    assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()), "{what}: {args}");
    assert_eq!(r["stream"]["finish"], "tool_calls", "{what}: {r}");
    assert_eq!(r["stream"]["calls"][0]["name"], "get_weather", "{what}: {r}");
    let streamed: Value = serde_json::from_str(r["stream"]["calls"][0]["arguments"].as_str().unwrap()).unwrap();
    assert!(streamed.is_object());
    assert!(r["follow_up"].is_string(), "{what}: a conversation with the call and its result renders: {r}");
}

#[test]
fn tool_calls_with_the_qwen3_template() {
    // Qwen3's own chat template (from its published tokenizer config) on the qwen3 fixture.
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(text_common::npm_tokenizer("qwen3").join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    let dir = Scratch::new("serve-qwen3-tools");
    let model = dir.path().join("m");
    copy_dir(&fixture("qwen3-bf16"), &model);
    std::fs::write(model.join("chat_template.jinja"), cfg["chat_template"].as_str().unwrap()).unwrap();
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m]);
    let r = s.scenario("tools", json!({"model": m, "schema": weather_schema()}));
    check_tool_calls(&r, "qwen3");
}

#[test]
fn tool_calls_with_a_gemma4_template() {
    let dir = Scratch::new("serve-gemma4-tools");
    let model = dir.path().join("m");
    copy_dir(&fixture("gemma4-bf16"), &model);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gemma4_tools.jinja"),
        model.join("chat_template.jinja"),
    )
    .unwrap();
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m]);
    let r = s.scenario("tools", json!({"model": m, "schema": weather_schema()}));
    check_tool_calls(&r, "gemma4");
}

#[test]
fn json_schema_output_always_validates() {
    let model = fixture("qwen3-bf16");
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m]);
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "ok": {"type": "boolean"}
    }, "required": ["name", "age", "kind", "ok"], "additionalProperties": false});
    let r = s.scenario("schema", json!({"model": m, "schema": schema, "count": 50, "max_tokens": 300}));
    assert_eq!(r["count"], 50);
    assert_eq!(r["failures"], json!([]), "every sampled completion validates");
}

#[test]
fn api_key_plain_http_errors_metrics() {
    let model = fixture("llama-bf16");
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m, "--api-key", "sesame"]);
    let r = s.scenario("auth", json!({"key": "sesame"}));
    assert_eq!(r["wrong"]["status"], 401);
    assert_eq!(r["right"], json!([m]));
    let body = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}"#;
    let (st, b) = s.post("/v1/chat/completions", body, None);
    assert_eq!(st, 401, "{b}");
    let err: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(err["error"]["type"], "authentication_error");
    let key = Some("sesame");
    let (st, b) = s.post("/v1/chat/completions", body, key);
    assert_eq!(st, 200, "{b}");
    for (bad, param) in [
        ("{not json", None),
        (r#"{"messages": "hi"}"#, None),
        (r#"{"messages": [{"role": "wizard", "content": "x"}]}"#, Some("messages[0].role")),
        (r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#, Some("max_tokens")),
        (r#"{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}}"#, Some("logit_bias")),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}"#,
            Some("response_format.type"),
        ),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "regex", "regex": "("}}"#,
            Some("response_format"),
        ),
        (r#"{"messages": [{"role": "user", "content": "x"}], "stop": [1]}"#, Some("stop")),
    ] {
        let (st, b) = s.post("/v1/chat/completions", bad, key);
        assert_eq!(st, 400, "{bad}: {b}");
        let e: Value = serde_json::from_str(&b).unwrap_or_else(|_| panic!("{bad}: not JSON: {b}"));
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty() && !m.contains('\n')), "{bad}: {b}");
        if let Some(p) = param {
            assert_eq!(e["error"]["param"], p, "{bad}: {b}");
        }
    }
    let (st, b) = s.post("/v1/completions", r#"{"prompt": [1, 2, 99999], "max_tokens": 2}"#, key);
    assert_eq!(st, 400, "{b}");
    assert!(b.contains("outside the vocabulary"), "{b}");
    let (st, b) = s.post("/v1/completions", r#"{"prompt": [1, 2, 3], "max_tokens": 2, "echo": true}"#, key);
    assert_eq!(st, 200, "{b}");
    let (st, _) = s.get("/nowhere");
    assert_eq!(st, 404);
    assert_eq!(s.get("/health"), (200, r#"{"status":"ok"}"#.to_string()));
    // /metrics sits behind the key like the API (it tells about traffic).
    assert_eq!(s.get("/metrics").0, 401);
    let metrics = ureq::get(&format!("{}/metrics", s.base))
        .set("Authorization", "Bearer sesame")
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    for name in [
        "famlx_requests_total",
        "famlx_generation_tokens_total",
        "famlx_queue_depth",
        "famlx_prefix_cache_hits_total",
        "famlx_memory_active_bytes",
    ] {
        assert!(metrics.contains(&format!("\n{name} ")), "{name} missing:\n{metrics}");
    }
    let rejected = metrics.lines().find(|l| l.starts_with("famlx_requests_rejected_total ")).unwrap();
    assert!(!rejected.ends_with(" 0"), "{rejected}");
}

/// Streams a long request, reads a little, hangs up: the engine stops it.
#[test]
fn disconnect_cancels_and_sigterm_finishes_in_flight() {
    use std::io::{BufRead, BufReader, Write};
    let model = fixture("qwen3-bf16");
    let m = model.to_str().unwrap();
    let mut s = Server::start(&["--model", m, "--max-queue", "2"]);
    let addr = s.base.trim_start_matches("http://").to_string();
    // The fixture's 512-token vocabulary holds two end tokens: biased
    // away, the reply cannot stop by itself before the hang-up lands.
    let body = json!({"messages": [{"role": "user", "content": "go"}], "max_tokens": 20000, "stream": true,
                      "logit_bias": {"509": -100, "511": -100}})
    .to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut seen = 0;
    let mut line = String::new();
    while seen < 3 {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.starts_with("data: ") {
            seen += 1;
        }
    }
    drop(reader);
    conn.shutdown(std::net::Shutdown::Both).unwrap();
    drop(conn);
    let t0 = Instant::now();
    while !s.log().contains("finish=\"cancelled\"") {
        assert!(t0.elapsed() < Duration::from_secs(30), "the hung-up request was not cancelled:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = s.log();
    let line = log.lines().find(|l| l.contains("finish=\"cancelled\"")).unwrap();
    let n: usize = line.split("completion_tokens=").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(n < 20000, "{line}");

    // A request in flight when SIGTERM comes still gets its whole answer.
    let base = s.base.clone();
    let t = std::thread::spawn(move || {
        let r = ureq::post(&format!("{base}/v1/completions"))
            .send_string(r#"{"prompt": "hello", "max_tokens": 300, "temperature": 0}"#)
            .unwrap();
        let v: Value = serde_json::from_str(&r.into_string().unwrap()).unwrap();
        v
    });
    let t0 = Instant::now();
    while s.get("/metrics").1.contains("\nfamlx_batch_size 0") {
        if t.is_finished() || t0.elapsed() > Duration::from_secs(20) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = s.stop(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    let v = t.join().unwrap();
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{v}");
    assert!(["length", "stop"].contains(&v["choices"][0]["finish_reason"].as_str().unwrap()), "{v}");
}

#[test]
fn a_full_queue_answers_503() {
    let model = fixture("qwen3-bf16");
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m, "--max-queue", "1", "--max-concurrency", "1"]);
    let base = s.base.clone();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || {
                let r = ureq::post(&format!("{base}/v1/completions"))
                    .send_string(r#"{"prompt": "hello", "max_tokens": 400, "temperature": 0}"#);
                match r {
                    Ok(r) => (r.status(), String::new()),
                    Err(ureq::Error::Status(st, r)) => (st, r.into_string().unwrap_or_default()),
                    Err(e) => panic!("{e}"),
                }
            })
        })
        .collect();
    let results: Vec<(u16, String)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results.iter().any(|r| r.0 == 200), "{results:?}");
    let busy: Vec<_> = results.iter().filter(|r| r.0 == 503).collect();
    assert!(!busy.is_empty(), "{results:?}");
    assert!(busy.iter().all(|r| r.1.contains("queue is full")), "{busy:?}");
    assert!(results.iter().all(|r| r.0 == 200 || r.0 == 503), "{results:?}");
}

fn usage_of(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["usage"].clone()
}

/// A follow-up turn reuses the cached conversation on a hybrid (recurrent +
/// attention) model, and the prompt cache stays inside its byte bound.
#[test]
fn prompt_cache_reuses_prefixes_within_its_bound() {
    let model = fixture("qwen3_5-bf16");
    let m = model.to_str().unwrap();
    let bound = 300_000;
    let s = Server::start(&["--model", m, "--prompt-cache-bytes", &bound.to_string()]);
    let first =
        json!({"messages": [{"role": "user", "content": "Tell me about the sea"}], "max_tokens": 6, "temperature": 0});
    let (st, b) = s.post("/v1/chat/completions", &first.to_string(), None);
    assert_eq!(st, 200, "{b}");
    let reply: Value = serde_json::from_str(&b).unwrap();
    let said = reply["choices"][0]["message"]["content"].as_str().unwrap();
    let follow = json!({"messages": [
        {"role": "user", "content": "Tell me about the sea"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "And the sky?"}
    ], "max_tokens": 6, "temperature": 0});
    let (st, b) = s.post("/v1/chat/completions", &follow.to_string(), None);
    assert_eq!(st, 200, "{b}");
    let u = usage_of(&b);
    let first_len = usage_of(&serde_json::to_string(&reply).unwrap())["prompt_tokens"].as_u64().unwrap();
    assert!(u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() >= first_len, "{u}");
    for i in 0..40 {
        let p = json!({"prompt": format!("{i} {}", "lorem ipsum ".repeat(i % 7 + 1)), "max_tokens": 4});
        let (st, b) = s.post("/v1/completions", &p.to_string(), None);
        assert_eq!(st, 200, "{b}");
    }
    let metrics = s.get("/metrics").1;
    let held: usize =
        metrics.lines().find_map(|l| l.strip_prefix("famlx_prompt_cache_bytes ")).and_then(|v| v.parse().ok()).unwrap();
    assert!(held > 0 && held <= bound, "prompt cache holds {held} bytes, bound {bound}");
}

/// The tokens `famlx generate` gives for `text` after the files `files`
/// (images and WAV clips), each as its own text, the stop token left out.
fn generated_tokens(model: &Path, files: &[String], text: &str, n: usize) -> Vec<String> {
    let m = model.to_str().unwrap();
    let n = n.to_string();
    let mut args = vec!["generate", "--model", m, "-p", text, "-m", &n, "--temp", "0", "--json"];
    for f in files {
        args.push(if f.ends_with(".wav") { "--audio" } else { "--image" });
        args.push(f);
    }
    let j = json_of(&run(&args));
    let mut ids: Vec<u32> = j["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    if j["finish_reason"] == "stop" {
        ids.pop();
    }
    let tok = famlx_text::Tokenizer::from_dir(model).unwrap();
    ids.iter().map(|&i| tok.decode(&[i], false).unwrap()).collect()
}

#[test]
fn images_and_audio_in_messages() {
    // Images and clips as data URLs give `famlx generate --image/--audio`'s
    // greedy tokens: alone, again from the prompt cache, and decoded in one
    // batch with each other and with text requests. gemma4 keeps an image's
    // placeholders in one forward; qwen3_5 places images in 2-D (M-RoPE),
    // so its rows decode from a shifted position.
    let n = 12;
    let img = |f: &str| fixture("images").join(f).display().to_string();
    let wav = |f: &str| fixture("audio").join(f).display().to_string();
    // The same picture mirrored: as many placeholders, other pixels. The
    // prompt cache must not take one for the other.
    let scratch = Scratch::new("serve-media");
    let mirrored = scratch.path().join("tiny-mirrored.png");
    image::open(img("tiny.png")).unwrap().fliph().save(&mirrored).unwrap();
    let mirrored = mirrored.display().to_string();
    let images = vec![
        (vec![img("portrait.png")], "Describe it."),
        (vec![img("tiny.png")], "Describe it."),
        (vec![mirrored], "Describe it."),
    ];
    let cases = [
        ("gemma4-vision-f32", images.clone(), Some("audio")),
        ("qwen3_5-vl-f32", images, Some("audio")),
        (
            "gemma4-audio-f32",
            vec![(vec![wav("sine440.wav")], "Hear."), (vec![img("tiny.png"), wav("chirp.wav")], "Both.")],
            None,
        ),
    ];
    for (name, items, not_taken) in cases {
        let model = fixture(name);
        let m = model.to_str().unwrap();
        let asked: Vec<Value> = items.iter().map(|(f, t)| json!({"files": f, "text": t})).collect();
        let args = json!({"model": m, "n": n, "items": asked, "image": img("tiny.png"), "clip": wav("sine440.wav"),
                          "not_taken": not_taken, "errors": true});
        let s = Server::start(&["--model", m]);
        let r = s.scenario("media", args.clone());
        // The same requests where nothing is reused.
        let uncached = Server::start(&["--model", m, "--prompt-cache-bytes", "0"]);
        let mut args0 = args.clone();
        args0["errors"] = json!(false);
        let r0 = uncached.scenario("media", args0);
        for (i, (files, text)) in items.iter().enumerate() {
            let want = generated_tokens(&model, files, text, n);
            assert!(!want.is_empty(), "{name} item {i}: generate gave no tokens");
            assert_eq!(r["alone"][i]["tokens"], json!(want), "{name} item {i}: served alone = famlx generate");
            assert_eq!(r["together"][i]["tokens"], json!(want), "{name} item {i}: in a batch = alone");
            let (first, cached) =
                (r["alone"][i]["prompt"].as_u64().unwrap(), r["followup"][i]["cached"].as_u64().unwrap());
            assert!(cached >= first && cached < r["followup"][i]["prompt"].as_u64().unwrap(),
                "{name} item {i}: the follow-up reuses the first turn, media and all ({cached} cached, first turn {first})");
            assert_eq!(r0["followup"][i]["cached"], 0, "{name} item {i}: nothing reused without a prompt cache");
            assert_eq!(
                r["followup"][i]["tokens"], r0["followup"][i]["tokens"],
                "{name} item {i}: reuse changes nothing"
            );
        }
        if items.len() == 3 {
            let reused = |i: usize| r["alone"][i]["cached"].as_u64().unwrap();
            assert!(reused(2) <= reused(1), "{name}: the mirrored image reuses no more than another image did");
        }
        assert_eq!(r["texts_together"], r["texts_alone"], "{name}: text rows beside media rows");
        let e = &r["errors"];
        let mut expect = vec!["remote", "not_base64", "not_an_image", "mp3", "not_wav"];
        if not_taken.is_some() {
            expect.push("not_taken");
        }
        for k in expect {
            assert_eq!(e[k]["status"], 400, "{name} {k}: {}", e[k]);
            assert!(
                e[k]["body"]["param"].as_str().is_some_and(|p| p.starts_with("messages[0].content[1]")),
                "{name} {k}: {}",
                e[k]
            );
        }
        assert!(e["not_an_image"]["body"]["message"].as_str().unwrap().contains("not a PNG"), "{}", e["not_an_image"]);
        if not_taken.is_some() {
            assert!(e["not_taken"]["body"]["message"].as_str().unwrap().contains("takes no"), "{}", e["not_taken"]);
        }
        let (status, body) = s.post_declared("/v1/chat/completions", 65 << 20);
        assert_eq!(status, 413, "a body over the limit: {body}");
        assert!(body.contains("MiB"), "{body}");
    }
}
