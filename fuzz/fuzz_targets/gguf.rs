//! A GGUF file: parsed and checked, every readable tensor decoded, and its
//! tokenizer metadata turned into a tokenizer. Must never crash.
#![no_main]

use famlx_formats::gguf::Gguf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::from_vec(data.to_vec()) else { return };
    for t in &g.tensors {
        let _ = g.decode(t);
    }
    let _ = famlx_text::Tokenizer::from_gguf(&g.metadata);
});
