//! WAV files for audio prompts, written here with `hound` as real files:
//! each integer and float sample format decodes to the same signal, channels
//! mix down by the mean, other rates resample to 16 kHz with the length the
//! rate implies, and every bad file is one error line naming it.

mod common;

use common::{expect_error, fixture, Scratch};
use famlx::audio::{load_audio, SAMPLE_RATE};
use std::f32::consts::TAU;
use std::path::PathBuf;

fn sine(rate: u32, secs: f32, hz: f32) -> Vec<f32> {
    (0..(rate as f32 * secs) as usize).map(|i| 0.5 * (TAU * hz * i as f32 / rate as f32).sin()).collect()
}

fn write(dir: &Scratch, name: &str, rate: u32, channels: u16, bits: u16, float: bool, frames: &[Vec<f32>]) -> PathBuf {
    let path = dir.path().join(name);
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: if float { hound::SampleFormat::Float } else { hound::SampleFormat::Int },
    };
    let mut w = hound::WavWriter::create(&path, spec).unwrap();
    for i in 0..frames[0].len() {
        for ch in frames {
            if float {
                w.write_sample(ch[i]).unwrap();
            } else {
                let full = (1i64 << (bits - 1)) as f32;
                w.write_sample((ch[i] * full).round().clamp(-full, full - 1.0) as i32).unwrap();
            }
        }
    }
    w.finalize().unwrap();
    path
}

#[test]
fn every_sample_format_decodes_to_the_same_signal() {
    let dir = Scratch::new("audio-formats");
    let s = sine(SAMPLE_RATE, 0.25, 440.0);
    for (bits, float, tol) in
        [(8, false, 1.0 / 128.0), (16, false, 1e-4), (24, false, 1e-6), (32, false, 1e-6), (32, true, 0.0)]
    {
        let p = write(&dir, &format!("s{bits}{float}.wav"), SAMPLE_RATE, 1, bits, float, std::slice::from_ref(&s));
        let a = load_audio(&p).unwrap_or_else(|e| panic!("{bits} {float}: {e:#}"));
        assert_eq!((a.samples.len(), a.source_rate, a.channels), (s.len(), SAMPLE_RATE, 1));
        let err = a.samples.iter().zip(&s).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(err <= tol, "{bits}-bit float={float}: max error {err}");
    }
}

#[test]
fn channels_mix_down_by_the_mean() {
    let dir = Scratch::new("audio-stereo");
    let l = sine(SAMPLE_RATE, 0.1, 440.0);
    let r: Vec<f32> = l.iter().map(|x| 0.5 - x).collect();
    let p = write(&dir, "st.wav", SAMPLE_RATE, 2, 32, true, &[l, r]);
    let a = load_audio(&p).unwrap();
    assert_eq!(a.channels, 2);
    assert!(a.samples.iter().all(|&x| (x - 0.25).abs() < 1e-6), "{:?}", &a.samples[..4]);
}

/// 44.1 kHz stereo, 1.5 s: 24,000 samples at 16 kHz, and the 440 Hz tone
/// survives (away from the edges, within 1% of full scale).
#[test]
fn other_rates_resample_to_16_khz() {
    let dir = Scratch::new("audio-44k");
    let s = sine(44_100, 1.5, 440.0);
    let p = write(&dir, "cd.wav", 44_100, 2, 16, false, &[s.clone(), s]);
    let a = load_audio(&p).unwrap();
    assert_eq!((a.samples.len(), a.source_rate), (24_000, 44_100));
    let want = sine(SAMPLE_RATE, 1.5, 440.0);
    let err = a.samples[500..23_500].iter().zip(&want[500..23_500]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(err < 0.01, "max error {err}");
}

/// The bad files of [`bad_files_are_one_line_naming_the_file`], each with
/// what its error says.
fn bad_files(dir: &Scratch) -> Vec<(PathBuf, &'static str)> {
    let good = write(dir, "ok.wav", SAMPLE_RATE, 1, 16, false, &[sine(SAMPLE_RATE, 0.5, 440.0)]);
    let bytes = std::fs::read(&good).unwrap();
    let text = dir.path().join("notes.wav");
    std::fs::write(&text, "this is not audio").unwrap();
    let cut = dir.path().join("cut.wav");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let empty = write(dir, "empty.wav", SAMPLE_RATE, 1, 16, false, &[vec![]]);
    // A WAVE_FORMAT_IEEE_FLOAT header with 64-bit samples.
    let mut f64wav = bytes[..44].to_vec();
    f64wav[20..22].copy_from_slice(&3u16.to_le_bytes());
    f64wav[34..36].copy_from_slice(&64u16.to_le_bytes());
    f64wav[32..34].copy_from_slice(&8u16.to_le_bytes());
    f64wav[28..32].copy_from_slice(&(SAMPLE_RATE * 8).to_le_bytes());
    f64wav[40..44].copy_from_slice(&16u32.to_le_bytes());
    f64wav.extend_from_slice(&[0u8; 16]);
    let f64p = dir.path().join("f64.wav");
    std::fs::write(&f64p, &f64wav).unwrap();
    let missing = dir.path().join("missing.wav");
    vec![(text, "not a WAV"), (cut, "truncated"), (empty, "no samples"), (f64p, "64"), (missing, "no such file")]
}

#[test]
fn bad_files_are_one_line_naming_the_file() {
    let dir = Scratch::new("audio-bad");
    for (p, says) in bad_files(&dir) {
        let e = format!("{:#}", load_audio(&p).expect_err(&p.display().to_string()));
        assert!(e.contains(&p.display().to_string()) && e.contains(says), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// `famlx generate --audio` with each bad file, on a model without audio,
/// and with `--prompt-ids` that do not hold the clip's placeholders: one
/// error line each, no panic.
#[test]
fn bad_audio_input_is_one_error_line() {
    let dir = Scratch::new("audio-bad-cli");
    let model = fixture("gemma4-audio-f32").display().to_string();
    let run = |model: &str, audio: &std::path::Path, extra: &[&str], must: &[&str]| {
        let a = audio.display().to_string();
        let mut args = vec!["generate", "--model", model, "--audio", &a, "--max-tokens", "2"];
        args.extend_from_slice(extra);
        expect_error(&args, must);
    };
    for (p, says) in bad_files(&dir) {
        run(&model, &p, &[], &[&p.display().to_string(), says]);
    }
    let good = write(&dir, "ok.wav", SAMPLE_RATE, 1, 16, false, &[sine(SAMPLE_RATE, 1.0, 440.0)]);
    let text_only = fixture("llama-bf16").display().to_string();
    run(&text_only, &good, &[], &["--audio", "takes no audio"]);
    // The clip takes 25 placeholders; these ids hold 3.
    run(&model, &good, &["--prompt-ids", "508,519,518,518,518,520"], &["placeholder tokens", "25"]);
    run(&model, &good, &["--prompt-ids", "508,1,2"], &["audio placeholder run"]);
}

/// A clip over the 30 s the model takes is cut there, as the reference's
/// feature extractor cuts it: 750 placeholders, 2999 log-mel frames.
#[test]
fn clips_over_thirty_seconds_are_cut() {
    let _g = common::mlx_lock();
    let dir = Scratch::new("audio-long");
    let long = write(&dir, "long.wav", SAMPLE_RATE, 1, 16, false, &[sine(SAMPLE_RATE, 31.0, 440.0)]);
    let m = famlx::model::LoadedModel::load(
        &fixture("gemma4-audio-f32"),
        &common::registry(),
        None,
        famlx::cache::CacheOptions::default(),
    )
    .unwrap();
    let clip = famlx::prompt::load_audio_clips(&m, &[long]).unwrap();
    assert_eq!(clip[0].tokens(), 750);
    assert_eq!(clip[0].processed.grid[0], 2999);
}
