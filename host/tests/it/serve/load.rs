//! `famlx serve` under load (scripts/serve_load.py): 64 streaming clients
//! mixing whole greedy requests, stop strings, hang-ups and sampled
//! requests on a tiny fixture, for FAMLX_LOAD_SECONDS (30 by default; the
//! closing note's run used 300). Then a few clients against a server with
//! a drafter, so requests keep passing between speculating alone and
//! decoding in a batch, and reuse prefixes with and without drafter state.

use crate::common;

use common::fixture;
use common::server::Server;
use serde_json::Value;

/// Runs scripts/serve_load.py with `clients` for `secs` against `s` and
/// checks what every run must show: no lost, duplicated or wrong tokens,
/// only 200 answers, a batch of more than one, the prompt cache within
/// `bound`. Returns the script's report.
fn load(s: &Server, clients: u32, secs: u64, bound: usize) -> Value {
    let r = s.script_report("serve_load.py", &["--clients", &clients.to_string(), "--seconds", &secs.to_string()]);
    eprintln!("load test, {clients} clients: {r}");
    assert_eq!(r["mismatch_count"], 0, "lost, duplicated or wrong tokens: {}", r["mismatches"]);
    assert_eq!(r["bad_status"], serde_json::json!([]), "non-200 answers");
    assert!(r["batch_size_max"].as_f64().unwrap() > 1.0, "{r}");
    assert!(r["prompt_cache_max"].as_f64().unwrap() <= bound as f64, "{r}");
    r
}

#[test]
fn sixty_four_clients_no_lost_tokens_no_errors_flat_memory() {
    let secs: u64 = std::env::var("FAMLX_LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let model = fixture("llama-tied-f32");
    let bound: usize = 8 << 20;
    let s = Server::start(&["--model", model.to_str().unwrap(), "--prompt-cache-bytes", &bound.to_string()]);
    let r = load(&s, 64, secs, bound);
    for k in ["whole", "stopped", "hung_up", "sampled"] {
        assert!(r[k].as_u64().unwrap() > 0, "no {k} requests ran: {r}");
    }
    let (a, b) = (r["memory_first_half_max"].as_f64().unwrap(), r["memory_second_half_max"].as_f64().unwrap());
    assert!(b <= a * 1.25 + (4 << 20) as f64, "MLX memory grew from {a} to {b} bytes");
    assert!(s.log().contains("finish=\"cancelled\""), "hang-ups cancel their requests");
}

#[test]
fn a_drafter_under_load_loses_no_tokens() {
    let secs: u64 = std::env::var("FAMLX_LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30) / 2;
    let model = fixture("llama-tied-f32");
    let m = model.to_str().unwrap();
    let bound: usize = 8 << 20;
    let s = Server::start(&[
        "--model",
        m,
        "--draft-model",
        m,
        "--mtp-depth",
        "3",
        "--prompt-cache-bytes",
        &bound.to_string(),
    ]);
    load(&s, 4, secs.max(5), bound);
    assert!(s.metric("famlx_draft_accepted_tokens_total") > 0, "requests speculated");
    assert!(!s.log().contains("drafter state"), "no drafter state failed: {}", s.log());
}
