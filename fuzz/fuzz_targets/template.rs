//! A chat template and the messages it renders: the input is the template
//! source, then (after a NUL byte) the messages as JSON. Must render or
//! give an error, never crash or run without end.
#![no_main]

use famlx_text::ChatTemplate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |&b| b == 0);
    let Some(Ok(src)) = parts.next().map(std::str::from_utf8) else { return };
    let messages: Vec<serde_json::Value> = match parts.next().map(serde_json::from_slice::<serde_json::Value>) {
        Some(Ok(serde_json::Value::Array(m))) => m,
        _ => vec![
            serde_json::json!({"role": "system", "content": "Be brief."}),
            serde_json::json!({"role": "user", "content": "Hi!"}),
        ],
    };
    let Ok(t) = ChatTemplate::new(src, Some("<s>"), Some("</s>")) else { return };
    let mut extra = serde_json::Map::new();
    extra.insert("enable_thinking".into(), false.into());
    let _ = t.render(&messages, None, true, &extra);
});
