//! A model's reply as the server splits it into content, reasoning and
//! tool calls, in every tool-call markup: the first byte picks the markup,
//! the rest is the reply, fed in pieces. A client can steer a reply (a
//! grammar plus tools), so parsing it must end in text or calls, never a
//! crash, a stack overflow or a hang.
#![no_main]

use famlx::serve::output::ReplyText;
use famlx::serve::tools::ToolFormat;
use libfuzzer_sys::fuzz_target;

const FORMATS: [ToolFormat; 4] = [ToolFormat::QwenJson, ToolFormat::QwenXml, ToolFormat::Gemma4, ToolFormat::LlamaJson];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let Ok(reply) = std::str::from_utf8(rest) else { return };
    let format = FORMATS[pick as usize % FORMATS.len()];
    let tools = vec![serde_json::json!({"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}}})];
    let _ = format.parse(reply, &tools);
    let mut r = ReplyText::new(vec!["STOP".into()], true, pick & 0x80 != 0, Some((format, tools)));
    // Pieces of varying size, cut on character boundaries.
    let mut at = 0;
    let mut size = 1 + (pick as usize & 7);
    while at < reply.len() {
        let mut end = (at + size).min(reply.len());
        while !reply.is_char_boundary(end) {
            end += 1;
        }
        let _ = r.push(&reply[at..end]);
        at = end;
        size = size % 11 + 1;
    }
    let _ = r.finish();
});
