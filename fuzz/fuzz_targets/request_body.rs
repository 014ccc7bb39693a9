//! A request body as `famlx serve` checks it: both endpoints' parsing and
//! checks, then, for a checked request, the call grammar its tools make in
//! every markup and the bounds its grammar is held to. Must give a checked
//! request or a one-line error, never a crash, a stack overflow or a hang.
#![no_main]

use famlx::serve::api::{self, PromptSource};
use famlx::serve::tools::{call_grammar, ToolFormat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = api::requested_model(data);
    for check in [api::chat, api::completion] {
        let spec = match check(data) {
            Ok(s) => s,
            Err(e) => {
                assert!(!e.message.contains('\n'), "an error is one line: {:?}", e.message);
                continue;
            }
        };
        if let Some(g) = &spec.grammar {
            let _ = famlx::grammar::check_size(g);
        }
        if let PromptSource::Chat { tools: Some(tools), .. } = &spec.prompt {
            for f in [ToolFormat::QwenJson, ToolFormat::QwenXml, ToolFormat::Gemma4, ToolFormat::LlamaJson] {
                if let Ok(g) = call_grammar(f, tools, &spec.tool_choice, |_| None) {
                    let _ = famlx::grammar::check_size(&famlx::grammar::Grammar::Lark(g));
                }
            }
        }
    }
});
