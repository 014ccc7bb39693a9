//! `famlx bench --json`: one object with every trial (exactly -g tokens
//! each), its figures and the decode-time split, and clear refusals of flags
//! it cannot honour.

use crate::common;

use common::{fixture, json_of, run, texts};

#[test]
fn bench_json_reports_trials_and_the_decode_split() {
    let m = fixture("llama-bf16").display().to_string();
    let v = json_of(&run(&["bench", "--model", &m, "-p", "24", "-g", "9", "-n", "2", "--json"]));
    assert_eq!(v["prompt_tokens"], 24);
    assert_eq!(v["generation_tokens"], 9);
    let trials = v["trials"].as_array().unwrap_or_else(|| panic!("no trials: {v}"));
    assert_eq!(trials.len(), 2, "{v}");
    // The decode step's census: the embedding gather, one argmax (greedy),
    // and a total that is the sum of its parts.
    let g = &v["decode_graph"];
    let by = g["by_primitive"].as_object().unwrap_or_else(|| panic!("no decode_graph census in {v}"));
    let count = |k: &str| by.get(k).and_then(|n| n.as_u64()).unwrap_or(0);
    assert_eq!(g["nodes"].as_u64(), Some(by.values().filter_map(|n| n.as_u64()).sum()), "{g}");
    assert!(g["views"].as_u64().is_some_and(|v| v > 0 && v < g["nodes"].as_u64().unwrap()), "{g}");
    assert!(count("Gather") + count("Take") >= 1 && count("ArgReduce") == 1, "{g}");
    for t in trials.iter().chain([&v["warmup"], &v["median"]]) {
        let f = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("no {k} in {t}"));
        assert!(f("prompt_tps") > 0.0 && f("generation_tps") > 0.0, "{t}");
        let (build, wait) = (f("decode_build_s"), f("decode_wait_s"));
        assert!(build > 0.0 && wait >= 0.0, "{t}");
        let launch = f("decode_launch_s");
        assert!(launch > 0.0 && launch <= build, "async_eval is part of the build time: {t}");
        // Both parts are taken after the first token, inside the run.
        if t != &v["median"] {
            assert!(build + wait < f("total_time_s"), "{t}");
        }
    }
}

#[test]
fn bench_refuses_what_it_cannot_do() {
    let m = fixture("llama-bf16").display().to_string();
    for (args, says) in [
        (vec!["-b", "2"], "--batch-size 2"),
        (vec!["-g", "0"], "must all be ≥ 1"),
        (vec!["--max-tokens", "3"], "--max-tokens does not apply"),
    ] {
        let mut a = vec!["bench", "--model", &m, "-p", "8", "-n", "1"];
        a.extend(args);
        let o = run(&a);
        let (_, err) = texts(&o);
        assert!(!o.status.success() && err.contains(says), "{a:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{a:?}: not one line: {err}");
    }
}

/// A bench whose prompt and generation do not fit the model's context (256
/// for this fixture) is refused naming the lengths; a sliding window allows it.
#[test]
fn bench_checks_the_context() {
    let m = fixture("llama-bf16").display().to_string();
    let o = run(&["bench", "--model", &m, "-p", "250", "-g", "10", "-n", "1"]);
    let (_, err) = texts(&o);
    assert!(!o.status.success() && err.contains("-p 250 + -g 10 = 260") && err.contains("256"), "{err}");
    let v =
        json_of(&run(&["bench", "--model", &m, "-p", "250", "-g", "10", "-n", "1", "--max-kv-size", "64", "--json"]));
    assert!(v.get("trials").is_some(), "{v}");
}

/// `--image`: the prompt is the image's placeholder block (as the model's
/// processor expands it) and then the random ids; every trial runs the
/// vision tower again, and its time is part of the time to first token.
/// The printed ids are a prompt `generate --prompt-ids` accepts for the
/// same image.
#[test]
fn bench_with_an_image_times_the_vision_tower_every_trial() {
    let m = fixture("gemma4-vision-f32").display().to_string();
    let exp = common::expected("gemma4-vision-f32");
    let image = fixture("images").join("portrait.png").display().to_string();
    let n = exp["images"]["portrait.png"]["num_soft_tokens"].as_u64().expect("num_soft_tokens") as usize;
    let (boi, eoi, tok) = (exp["boi_token_id"].as_u64(), exp["eoi_token_id"].as_u64(), exp["image_token_id"].as_u64());
    let v = json_of(&run(&["bench", "--model", &m, "--image", &image, "-p", "12", "-g", "4", "-n", "2", "--json"]));
    assert_eq!(v["image_tokens"].as_u64(), Some(n as u64), "{v}");
    let ids: Vec<u64> = v["prompt_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no prompt_ids: {v}"))
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), n + 2 + 12, "{ids:?}");
    assert_eq!((Some(ids[0]), Some(ids[n + 1])), (boi, eoi), "{ids:?}");
    assert!(ids[1..=n].iter().all(|&t| Some(t) == tok), "{ids:?}");
    for t in v["trials"].as_array().expect("trials").iter().chain([&v["warmup"]]) {
        let f = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("no {k} in {t}"));
        assert!(f("vision_s") > 0.0 && f("ttft_s") > f("vision_s"), "{t}");
        assert!(f("total_time_s") > f("ttft_s"), "{t}");
    }
    let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let g = json_of(&run(&["generate", "--model", &m, "--image", &image, "--prompt-ids", &list, "-m", "2", "--json"]));
    assert_eq!(g["image_tokens"].as_u64(), Some(n as u64), "{g}");
    assert_eq!(g["prompt_tokens"].as_u64(), Some(ids.len() as u64), "{g}");
}

/// `--image` on a text-only model is refused in one line.
#[test]
fn bench_refuses_an_image_for_a_text_model() {
    let m = fixture("llama-bf16").display().to_string();
    let image = fixture("images").join("portrait.png").display().to_string();
    let o = run(&["bench", "--model", &m, "--image", &image, "-p", "8", "-n", "1"]);
    let (_, err) = texts(&o);
    assert!(!o.status.success() && err.contains("takes no images"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
}
