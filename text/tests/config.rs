//! Loading checkpoint folders: the BOS rule, EOS collection, template sources, and errors that
//! name the file at fault.

mod common;

use std::path::Path;

use common::temp_dir;
use famlx_text::{ChatTemplate, Tokenizer};

/// A tiny word-level tokenizer.json; `post` is the post_processor JSON.
fn tokenizer_json(post: &str) -> String {
    format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,
        "added_tokens":[
          {{"id":3,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}},
          {{"id":4,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}},
          {{"id":5,"content":"<|im_end|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}}],
        "normalizer":null,"pre_tokenizer":{{"type":"Whitespace"}},"post_processor":{post},
        "decoder":null,"model":{{"type":"WordLevel","vocab":{{"hello":0,"world":1,"<unk>":2,"<s>":3,"</s>":4,"<|im_end|>":5}},"unk_token":"<unk>"}}}}"#
    )
}

const BOS_POST: &str = r#"{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{"<s>":{"id":"<s>","ids":[3],"tokens":["<s>"]}}}"#;

fn folder(files: &[(&str, &str)]) -> std::path::PathBuf {
    let d = temp_dir("cfg");
    for (name, body) in files {
        std::fs::write(d.join(name), body).unwrap();
    }
    d
}

fn err(dir: &Path) -> String {
    let e = Tokenizer::from_dir(dir).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn bos_rule_from_config() {
    let tj = tokenizer_json("null");
    let d = folder(&[
        ("tokenizer.json", &tj),
        ("tokenizer_config.json", r#"{"bos_token":"<s>","eos_token":"</s>","add_bos_token":true}"#),
    ]);
    let tok = Tokenizer::from_dir(&d).unwrap();
    assert!(tok.add_bos());
    assert_eq!(tok.bos_token(), Some(("<s>".to_string(), 3)));
    assert_eq!(tok.encode("hello world", true).unwrap(), vec![3, 0, 1]);
    assert_eq!(tok.encode("hello world", false).unwrap(), vec![0, 1]);
    assert_eq!(tok.encode("<s> hello", true).unwrap(), vec![3, 0], "already starts with BOS");
    assert_eq!(tok.encode(" <s> hello", true).unwrap(), vec![3, 3, 0], "BOS string not at the start");
    assert_eq!(tok.eos_ids(), vec![4, 5], "config eos, then <|im_end|>");

    // add_bos_token false wins over everything.
    let d = folder(&[
        ("tokenizer.json", &tokenizer_json(BOS_POST)),
        ("tokenizer_config.json", r#"{"bos_token":"<s>","add_bos_token":false}"#),
    ]);
    let tok = Tokenizer::from_dir(&d).unwrap();
    assert!(!tok.add_bos());
    assert_eq!(tok.encode("hello", true).unwrap(), vec![0]);
}

#[test]
fn bos_from_post_processor_and_eos_from_generation_config() {
    let d = folder(&[
        ("tokenizer.json", &tokenizer_json(BOS_POST)),
        ("generation_config.json", r#"{"eos_token_id":[4,1]}"#),
        ("special_tokens_map.json", r#"{"eos_token":{"content":"<|im_end|>","special":true}}"#),
    ]);
    let tok = Tokenizer::from_dir(&d).unwrap();
    assert!(tok.add_bos(), "TemplateProcessing inserts <s>");
    assert_eq!(tok.bos_token(), Some(("<s>".to_string(), 3)));
    assert_eq!(tok.encode("hello", true).unwrap(), vec![3, 0]);
    assert_eq!(tok.eos_ids(), vec![5, 4, 1]);
    assert_eq!(tok.chat_template(), None);
}

#[test]
fn chat_template_sources() {
    let tj = tokenizer_json("null");
    // Named templates: "default" is the chat template.
    let d = folder(&[
        ("tokenizer.json", &tj),
        (
            "tokenizer_config.json",
            r#"{"bos_token":"<s>","chat_template":[{"name":"default","template":"{{ bos_token }}D"},{"name":"tool_use","template":"T"}]}"#,
        ),
    ]);
    let tok = Tokenizer::from_dir(&d).unwrap();
    assert_eq!(tok.chat_template(), Some("{{ bos_token }}D"));
    assert_eq!(tok.chat_template_named("tool_use"), Some("T"));
    let t = tok.compiled_chat_template().unwrap().unwrap();
    assert_eq!(t.render(&[], None, false, &Default::default()).unwrap(), "<s>D");
    // chat_template.jinja overrides tokenizer_config's template, as in transformers.
    std::fs::write(d.join("chat_template.jinja"), "J{{ messages[0].content }}\n").unwrap();
    let tok = Tokenizer::from_dir(&d).unwrap();
    assert_eq!(tok.chat_template(), Some("J{{ messages[0].content }}\n"));
    let t = tok.compiled_chat_template().unwrap().unwrap();
    let msg = [serde_json::json!({"role": "user", "content": "x"})];
    assert_eq!(t.render(&msg, None, false, &Default::default()).unwrap(), "Jx", "one trailing newline dropped");
}

#[test]
fn missing_tokenizer_json_names_the_file() {
    let d = folder(&[("tokenizer_config.json", "{}")]);
    let e = err(&d);
    assert!(e.contains("tokenizer.json") && e.contains("not found"), "{e}");
}

#[test]
fn garbage_tokenizer_json_names_the_file() {
    let d = folder(&[("tokenizer.json", "this is { not json")]);
    let e = err(&d);
    assert!(e.contains(&d.join("tokenizer.json").display().to_string()), "{e}");
    let d = folder(&[("tokenizer.json", r#"{"model": {"type": "Nonsense"}}"#)]);
    let e = err(&d);
    assert!(e.contains("tokenizer.json"), "{e}");
    let d = folder(&[("tokenizer.json", "\u{0}\u{1}\u{2}binary")]);
    assert!(err(&d).contains("tokenizer.json"));
}

#[test]
fn bad_config_files_name_the_file() {
    let tj = tokenizer_json("null");
    let d = folder(&[("tokenizer.json", &tj), ("tokenizer_config.json", r#"{"chat_template": "{% if %}oops"}"#)]);
    let e = err(&d);
    assert!(e.contains("tokenizer_config.json") && e.contains("chat template"), "{e}");

    let d = folder(&[("tokenizer.json", &tj), ("tokenizer_config.json", "{ nope")]);
    assert!(err(&d).contains("tokenizer_config.json"));

    let d =
        folder(&[("tokenizer.json", &tj), ("tokenizer_config.json", r#"{"bos_token":"<nope>","add_bos_token":true}"#)]);
    let e = err(&d);
    assert!(e.contains("tokenizer_config.json") && e.contains("<nope>"), "{e}");

    let d = folder(&[("tokenizer.json", &tj), ("chat_template.jinja", "{% for %}")]);
    assert!(err(&d).contains("chat_template.jinja"));

    let d = folder(&[("tokenizer.json", &tj), ("generation_config.json", r#"{"eos_token_id":"x"}"#)]);
    assert!(err(&d).contains("generation_config.json"));
}

#[test]
fn chat_template_errors() {
    let e = ChatTemplate::new("{% for m in messages %}{{ m.content }", None, None).unwrap_err();
    assert!(e.to_string().contains("chat_template"), "{e}");
    let t = ChatTemplate::new(
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{% endfor %}",
        None,
        None,
    )
    .unwrap();
    let msgs = [serde_json::json!({"role": "tool", "content": "x"})];
    let e = t.render(&msgs, None, true, &Default::default()).unwrap_err().to_string();
    assert!(e.contains("no tools here") && !e.contains('\n'), "{e}");
}
