//! Chat templates and tokenization of real checkpoints' tokenizers, compared byte for byte
//! with transformers 4.57.1 (goldens recorded by tests/goldens/make_goldens.py).

mod common;

use common::{golden, ids, npm_tokenizer, render_case};
use famlx_text::{ChatTemplate, Tokenizer};

/// Renders every golden conversation, and checks that encoding the rendered prompt with
/// `add_bos = true` gives transformers' `apply_chat_template(tokenize=True)` ids.
fn check_templates(name: &str) -> Tokenizer {
    let g = golden(name);
    let tok = Tokenizer::from_dir(&npm_tokenizer(name)).unwrap();
    let tmpl = tok.compiled_chat_template().unwrap().expect("checkpoint has a chat template");
    let mut failures = Vec::new();
    for case in g["templates"].as_array().unwrap() {
        let cname = case["name"].as_str().unwrap();
        let got = render_case(&tmpl, case);
        if let Some(err) = case.get("error") {
            match got {
                Ok(s) => failures.push(format!("{cname}: expected error {err}, rendered {s:?}")),
                Err(e) if !e.to_string().contains(err.as_str().unwrap()) => {
                    failures.push(format!("{cname}: error {e} lacks {err}"))
                }
                Err(_) => {}
            }
            continue;
        }
        let want = case["expected"].as_str().unwrap();
        match got {
            Err(e) => failures.push(format!("{cname}: {e}")),
            Ok(s) if s != want => failures.push(format!("{cname}:\n--- got\n{s:?}\n--- want\n{want:?}")),
            Ok(s) => {
                let enc = tok.encode(&s, true).unwrap();
                if enc != ids(&case["ids"]) {
                    failures.push(format!("{cname}: encode(rendered, add_bos=true) = {enc:?}, want {:?}", case["ids"]));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{name}: {} template failures:\n{}", failures.len(), failures.join("\n"));
    tok
}

/// Encodes/decodes the golden strings. `add_bos = true` must match transformers'
/// `encode(text)` except that BOS is never doubled when the text already starts with it.
fn check_encode(name: &str, tok: &Tokenizer) {
    let g = golden(name);
    let bos = tok.bos_token().map(|(s, _)| s);
    for case in g["encode"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let plain = ids(&case["ids"]);
        assert_eq!(tok.encode(text, false).unwrap(), plain, "{name}: encode({text:?}, false)");
        let starts_with_bos = bos.as_deref().is_some_and(|b| text.starts_with(b));
        let want = if starts_with_bos { plain.clone() } else { ids(&case["ids_add_special"]) };
        assert_eq!(tok.encode(text, true).unwrap(), want, "{name}: encode({text:?}, true)");
        assert_eq!(tok.decode(&plain, false).unwrap(), case["decoded"].as_str().unwrap(), "{name}: decode {text:?}");
        assert_eq!(
            tok.decode(&plain, true).unwrap(),
            case["decoded_skip_special"].as_str().unwrap(),
            "{name}: decode skip_special {text:?}"
        );
    }
    assert_eq!(tok.vocab_size() as u64, g["vocab_size"].as_u64().unwrap(), "{name}: vocab size");
}

#[test]
fn qwen3_templates_and_ids_match_transformers() {
    let tok = check_templates("qwen3");
    check_encode("qwen3", &tok);
    assert!(!tok.add_bos());
    assert_eq!(tok.bos_token(), None);
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    let eot = tok.token_to_id("<|endoftext|>").unwrap();
    assert_eq!((im_end, eot), (151645, 151643));
    assert_eq!(tok.eos_ids()[0], im_end, "config eos first");
    assert!(tok.eos_ids().contains(&eot));
    assert_eq!(tok.encode("<|im_start|>", false).unwrap(), vec![151644]);
    assert!(tok.chat_template().unwrap().contains("enable_thinking"));
}

#[test]
fn llama3_1_templates_and_ids_match_transformers() {
    let tok = check_templates("llama3_1");
    check_encode("llama3_1", &tok);
    assert!(tok.add_bos(), "post-processor inserts BOS");
    assert_eq!(tok.bos_token(), Some(("<|begin_of_text|>".to_string(), 128000)));
    // <|eot_id|> (the config's) first, then <|end_of_text|>; this vocabulary has no <|eom_id|>.
    assert_eq!(tok.eos_ids(), vec![128009, 128001]);
    // The template emits BOS itself; encoding its output with add_bos must not double it.
    let tmpl = tok.compiled_chat_template().unwrap().unwrap();
    let text =
        tmpl.render(&[serde_json::json!({"role": "user", "content": "Hi"})], None, true, &Default::default()).unwrap();
    assert!(text.starts_with("<|begin_of_text|>"));
    let enc = tok.encode(&text, true).unwrap();
    assert_eq!(enc.iter().filter(|&&i| i == 128000).count(), 1, "{enc:?}");
    assert_eq!(enc[0], 128000);
}

#[test]
fn gemma3_templates_and_ids_match_transformers() {
    let tok = check_templates("gemma3");
    check_encode("gemma3", &tok);
    assert!(tok.add_bos());
    assert_eq!(tok.bos_token(), Some(("<bos>".to_string(), 2)));
    assert_eq!(tok.eos_ids()[0], 106, "<end_of_turn>");
    assert!(tok.eos_ids().contains(&1), "<eos>");
    assert_eq!(tok.encode("hello", true).unwrap()[0], 2);
    assert_eq!(tok.encode("<bos>hello", true).unwrap().iter().filter(|&&i| i == 2).count(), 1);
}

/// Engine features transformers relies on (tojson options, Python printing, whitespace
/// control, loop controls, namespace, methods, raise_exception), against transformers.
#[test]
fn custom_templates_match_transformers() {
    let g = golden("custom");
    let mut failures = Vec::new();
    for case in g["templates"].as_array().unwrap() {
        let cname = case["name"].as_str().unwrap();
        let t = ChatTemplate::new(
            case["template"].as_str().unwrap(),
            case["bos_token"].as_str(),
            case["eos_token"].as_str(),
        )
        .unwrap_or_else(|e| panic!("{cname}: {e}"));
        let got = render_case(&t, case);
        match (case.get("expected"), got) {
            (Some(want), Ok(s)) if s == want.as_str().unwrap() => {}
            (Some(want), got) => failures.push(format!("{cname}:\n--- got\n{got:?}\n--- want\n{want}")),
            (None, Err(e)) if e.to_string().contains(case["error"].as_str().unwrap()) => {
                assert!(!e.to_string().contains('\n'), "one-line error: {e}");
            }
            (None, got) => failures.push(format!("{cname}: want error {}, got {got:?}", case["error"])),
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// A template that would loop for hours (or recurse without end) fails
/// quickly with an error naming where it came from, instead of hanging.
#[test]
fn runaway_templates_stop() {
    let loops = "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}";
    let t = ChatTemplate::with_origin(loops, None, None, "chat_template.jinja").unwrap();
    let start = std::time::Instant::now();
    let e = t.render(&[], None, true, &Default::default()).unwrap_err().to_string();
    assert!(e.contains("chat_template.jinja") && e.contains("fuel"), "{e}");
    assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
    let rec = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let t = ChatTemplate::with_origin(rec, None, None, "chat_template.jinja").unwrap();
    let e = t.render(&[], None, true, &Default::default()).unwrap_err().to_string();
    assert!(e.contains("chat_template.jinja"), "{e}");
}
