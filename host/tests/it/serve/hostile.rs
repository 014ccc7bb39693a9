//! `famlx serve` against hostile clients (issue 34's server items): each bad
//! request gets a clear error in OpenAI's shape, and the server keeps
//! answering `/health` and a normal request correctly afterwards. Then
//! hostile and normal clients mixed for a bounded time
//! (scripts/serve_hostile_load.py).

use crate::common;

use crate::common::text as text_common;

use common::server::Server;
use common::{copy_dir, fixture, Scratch};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The normal request every test repeats after the bad ones.
fn normal(s: &Server) -> String {
    let r = s.completion(&json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}));
    r["choices"][0]["text"].as_str().unwrap().to_string()
}

/// Status, error param and message of a refused request.
fn refused(s: &Server, path: &str, body: &Value) -> (u16, String, String) {
    let (status, text) = s.post(path, &body.to_string(), None);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.contains('\n')), "one line: {text}");
    (status, e["param"].as_str().unwrap_or("").to_string(), e["message"].as_str().unwrap().to_string())
}

fn still_serving(s: &Server, want: &str) {
    assert_eq!(s.get("/health").0, 200, "{}", s.log());
    assert_eq!(normal(s), want, "a normal request after the bad ones");
}

fn ref_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"x": {"$ref": format!("#/$defs/d{}", i + 1)}}}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

fn lark_chain(n: usize) -> String {
    let chain: String = (0..n).map(|i| format!("r{i}: r{}\n", i + 1)).collect();
    format!("start: r0\n{chain}r{n}: \"ab\"\n")
}

fn chat(content: Value, extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": content}], "max_tokens": 4});
    b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    b
}

#[test]
fn deep_grammars_large_prompts_and_odd_fields_are_refused_and_the_server_goes_on() {
    let model = fixture("llama-bf16");
    let s = Server::start(&["--model", model.to_str().unwrap(), "--max-prompt-tokens", "2000"]);
    let want = normal(&s);
    let schema = |schema: Value| json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}});

    // Item 1: a 700-deep $ref chain, and 250 levels of properties through $defs.
    let (st, param, msg) =
        refused(&s, "/v1/chat/completions", &chat(json!("hi"), json!({"response_format": schema(ref_chain(700))})));
    assert_eq!((st, param.as_str()), (400, "response_format"), "{msg}");
    assert!(msg.contains("levels deep"), "{msg}");
    still_serving(&s, &want);
    // A 700-rule Lark chain is within the bounds and compiles (on the work
    // threads' stack); 3,000 rules are refused.
    let (st, text) = s.post(
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 4, "response_format": {"type": "grammar", "grammar": lark_chain(700)}})
            .to_string(),
        None,
    );
    assert_eq!(st, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["text"], "ab", "the grammar decides the reply");
    let body =
        json!({"prompt": "hi", "max_tokens": 4, "response_format": {"type": "grammar", "grammar": lark_chain(3000)}});
    let (st, param, msg) = refused(&s, "/v1/completions", &body);
    assert_eq!((st, param.as_str()), (400, "response_format"), "{msg}");
    still_serving(&s, &want);

    // Item 6: a 20 MiB prompt and 300,000 messages are refused before the
    // engine sees them (fast), while a normal request is answered.
    let t0 = Instant::now();
    let (st, _, msg) = refused(&s, "/v1/completions", &json!({"prompt": "hello ".repeat(20 << 17), "max_tokens": 2}));
    assert_eq!(st, 413, "{msg}");
    assert!(msg.contains("--max-prompt-tokens"), "{msg}");
    let many = vec![json!({"role": "user", "content": ""}); 300_000];
    let (st, _, msg) = refused(&s, "/v1/chat/completions", &json!({"messages": many, "max_tokens": 2}));
    assert_eq!(st, 413, "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(30), "refusing took {:?}", t0.elapsed());
    let (st, _, msg) = refused(&s, "/v1/completions", &json!({"prompt": "word ".repeat(3000), "max_tokens": 2}));
    assert_eq!(st, 413, "3,000 tokens over a 2,000 cap: {msg}");
    still_serving(&s, &want);

    // Item 12: a non-string text part, an unsatisfiable grammar, a tiny temperature.
    let (st, param, _) = refused(&s, "/v1/chat/completions", &chat(json!([{"type": "text", "text": 7}]), json!({})));
    assert_eq!((st, param.as_str()), (400, "messages[0].content[0].text"));
    // Compiles, but no text is both /a/ and /b/: found before generating, as the client's error.
    let never = json!({"type": "grammar", "grammar": "start: A\nA: /a/ & /b/\n"});
    let (st, param, msg) = refused(&s, "/v1/chat/completions", &chat(json!("hi"), json!({"response_format": never})));
    assert_eq!((st, param.as_str()), (400, "response_format"), "{msg}");
    assert!(msg.contains("no output satisfies"), "{msg}");
    let tiny = s.completion(&json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 1e-40}));
    assert_eq!(tiny["choices"][0]["text"], json!(want), "a temperature of 1e-40 is greedy");
    still_serving(&s, &want);
}

#[test]
fn metrics_need_the_api_key_when_one_is_set() {
    let model = fixture("llama-bf16");
    let s = Server::start(&["--model", model.to_str().unwrap(), "--api-key", "sesame"]);
    assert_eq!(s.get("/metrics").0, 401);
    let r = ureq::get(&format!("{}/metrics", s.base)).set("Authorization", "Bearer sesame").call().unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.into_string().unwrap().contains("famlx_"));
    assert_eq!(s.get("/health").0, 200, "health stays open");
}

/// Sends `bytes` on a fresh connection and reads until the server closes
/// it (at most `limit`): what came back, and how long it took.
fn raw(base: &str, bytes: &[u8], limit: Duration) -> (String, Duration) {
    let addr = base.trim_start_matches("http://");
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(limit)).unwrap();
    let t0 = Instant::now();
    c.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    (String::from_utf8_lossy(&got).into_owned(), t0.elapsed())
}

#[test]
fn slow_idle_and_too_many_connections_are_dropped() {
    let model = fixture("llama-bf16");
    let m = model.to_str().unwrap();
    let s = Server::start(&["--model", m, "--header-timeout", "1", "--body-timeout", "1", "--max-connections", "4"]);
    let want = normal(&s);
    let limit = Duration::from_secs(20);
    // Half a request line: closed after the header deadline.
    let (got, took) = raw(&s.base, b"POST /v1/completions HT", limit);
    assert!(took < Duration::from_secs(10), "closed after {took:?}: {got:?}");
    // A body shorter than its Content-Length: 408 after the body deadline.
    let head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"pr";
    let (got, took) = raw(&s.base, head, limit);
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A chunk size past any length: an error or a close, never a wait.
    let chunk = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab";
    let (got, took) = raw(&s.base, chunk, limit);
    assert!(took < Duration::from_secs(10), "{took:?}: {got:?}");
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 4"), "{got:?}");
    // Four idle connections fill the cap: the fifth is told so (503) at once.
    let idle: Vec<TcpStream> =
        (0..4).map(|_| TcpStream::connect(s.base.trim_start_matches("http://")).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (got, took) = raw(&s.base, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", limit);
    assert!(got.starts_with("HTTP/1.1 503") && got.contains("--max-connections"), "{got:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The idle ones pass their header deadline and close; the server serves again.
    std::thread::sleep(Duration::from_secs(3));
    drop(idle);
    still_serving(&s, &want);
}

#[test]
fn tools_with_odd_names_are_refused_and_defs_in_parameters_work() {
    // Qwen3's own chat template (from its published tokenizer config) on the qwen3 fixture.
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(text_common::npm_tokenizer("qwen3").join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    let dir = Scratch::new("serve-hostile-tools");
    let model = dir.path().join("m");
    copy_dir(&fixture("qwen3-bf16"), &model);
    std::fs::write(model.join("chat_template.jinja"), cfg["chat_template"].as_str().unwrap()).unwrap();
    let s = Server::start(&["--model", model.to_str().unwrap()]);
    let tool =
        |name: &str, params: Value| json!({"type": "function", "function": {"name": name, "parameters": params}});
    let ask = |tools: Value| {
        json!({"messages": [{"role": "user", "content": "weather?"}], "max_tokens": 64,
                                   "tools": tools, "tool_choice": "required"})
    };
    // Item 11: a name that would splice an alternative into the call grammar.
    let crafted = tool("f\" | /.*/ | \"", json!({"type": "object"}));
    let (st, param, msg) = refused(&s, "/v1/chat/completions", &ask(json!([crafted])));
    assert_eq!((st, param.as_str()), (400, "tools[0].function.name"), "{msg}");
    // Standard $defs/$ref parameters work as they do in a response_format.
    let params = json!({"type": "object", "$defs": {"city": {"type": "string", "maxLength": 8}},
                        "properties": {"city": {"$ref": "#/$defs/city"}}, "required": ["city"],
                        "additionalProperties": false});
    let (st, text) = s.post("/v1/chat/completions", &ask(json!([tool("get_weather", params)])).to_string(), None);
    assert_eq!(st, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{args}");
}

#[test]
fn hostile_and_normal_clients_mixed() {
    let secs: u64 = std::env::var("FAMLX_LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30) / 2;
    let model = fixture("llama-bf16");
    let m = model.to_str().unwrap();
    let s =
        Server::start(&["--model", m, "--header-timeout", "2", "--body-timeout", "2", "--max-prompt-tokens", "4096"]);
    let r = s.script_report(
        "serve_hostile_load.py",
        &["--pid", &s.pid().to_string(), "--seconds", &secs.max(5).to_string()],
    );
    eprintln!("hostile load: {r}");
    assert_eq!(r["health_at_end"], true, "{r}");
    assert_eq!(r["normal_failed"], json!([]), "{r}");
    assert!(r["normal_done"].as_u64().unwrap() >= 3, "{r}");
    // Bounds on this 2-core CPU with a tiny model: a normal request never
    // waits behind a hostile one for long, and memory stays small.
    assert!(r["latency_max_s"].as_f64().unwrap() < 10.0, "{r}");
    assert!(r["peak_rss_mb"].as_u64().unwrap() < 3000, "{r}");
    for (name, answers) in r["hostile"].as_object().unwrap() {
        assert!(!answers.as_object().unwrap().keys().any(|k| k == "500"), "{name}: {answers}");
    }
}
