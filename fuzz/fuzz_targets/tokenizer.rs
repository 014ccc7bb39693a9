//! A checkpoint's tokenizer files: the input is `tokenizer.json`, then
//! (after a NUL byte) `tokenizer_config.json`, then (after another)
//! `chat_template.jinja`, loaded as from a folder and used to encode and
//! decode a little text. Must give a tokenizer or an error, never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("famlx-fuzz-tokenizer-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fuzz_target!(|data: &[u8]| {
    thread_local!(static DIR: PathBuf = scratch());
    DIR.with(|d| {
        let mut parts = data.splitn(3, |&b| b == 0);
        let files = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"];
        for f in files {
            let _ = std::fs::remove_file(d.join(f));
        }
        for (f, bytes) in files.iter().zip(parts.by_ref()) {
            std::fs::write(d.join(f), bytes).unwrap();
        }
        if let Ok(t) = famlx_text::Tokenizer::from_dir(d) {
            if let Ok(ids) = t.encode("Hello, world! 12345 <|im_start|>", true) {
                let _ = t.decode(&ids, false);
                let mut detok = t.detokenizer();
                for id in ids {
                    let _ = detok.push(id);
                }
            }
        }
    });
});
