//! WAV files as an audio prompt gives them (a file's bytes, or a request's
//! data URL): famlx's audio reader walks the RIFF chunks, decodes the
//! samples, mixes them down and resamples them to 16 kHz. Must give a clip
//! of finite samples or a one-line error, never a crash; run with
//! `-rss_limit_mb=2048`, it also checks that no header (a sample rate, a
//! chunk size) makes the reader allocate more than the bytes given imply.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match famlx::audio::decode_audio(data, "fuzz.wav") {
        Ok(a) => {
            assert!(!a.samples.is_empty());
            assert!(a.samples.iter().all(|x| x.is_finite()), "non-finite samples from a clip that was accepted");
        }
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(!msg.contains('\n'), "a multi-line error: {msg}");
        }
    }
});
