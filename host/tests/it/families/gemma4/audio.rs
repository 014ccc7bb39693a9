//! gemma4 audio input against mlx-vlm 0.7.10 (fixtures/make_gemma4_audio_fixtures.py):
//! the audio tower's rows for three clips (16 kHz mono sine and chirp, a
//! 44.1 kHz stereo file resampled), the placeholder counts, the expanded
//! prompt ids, first-step logits and 24 greedy tokens for a text prompt, an
//! image prompt, audio prompts and one with both, on the Hugging Face
//! layout and mlx-vlm's f32 conversion.

use crate::common;

use common::parity::{check_greedy, floats};
use common::vision::{generate, max_abs_diff};
use common::{expected, fixture, ids, json_of, mlx_lock, registry, run, texts, Scratch};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use famlx::prompt::load_audio_clips;
use plugin_api::ProcessedMedia;
use std::path::PathBuf;

const VARIANTS: [&str; 2] = ["gemma4-audio-hf-f32", "gemma4-audio-f32"];
const CLIPS: [&str; 3] = ["sine440", "chirp", "stereo44k"];

fn load(variant: &str) -> LoadedModel {
    LoadedModel::load(&fixture(variant), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{variant}: load: {e:#}"))
}

fn clip(stem: &str) -> PathBuf {
    fixture("audio").join(format!("{stem}.wav"))
}

/// The largest |value| of `v`.
fn scale(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |a, x| a.max(x.abs()))
}

/// The placeholder count of each clip (44.1 kHz stereo included: mixed
/// down and resampled to 16 kHz first) is the reference processor's.
#[test]
fn clips_take_the_reference_token_counts() {
    let _g = mlx_lock();
    let m = load("gemma4-audio-f32");
    let exp = expected("gemma4-audio-f32");
    for stem in CLIPS {
        let c = load_audio_clips(&m, &[clip(stem)]).unwrap_or_else(|e| panic!("{stem}: {e:#}"));
        let want = &exp["audio"][format!("{stem}.wav")];
        assert_eq!(c[0].tokens() as u64, want["num_audio_tokens"].as_u64().unwrap(), "{stem}: audio tokens");
        let frames = c[0].processed.grid[0];
        assert_eq!(frames, want["input_features_shape"][0].as_i64().unwrap(), "{stem}: log-mel frames");
    }
    let a = famlx::audio::load_audio(&clip("stereo44k")).unwrap();
    assert_eq!((a.source_rate, a.channels), (44_100, 2));
    assert_eq!(a.samples.len() as u64, exp["audio"]["stereo44k.wav"]["num_samples_16k"].as_u64().unwrap());
}

/// The tower and projector on the reference's own log-mel features (1e-5
/// of the largest row value; they agree to the bit), and on famlx's for the
/// 16 kHz clips (the whole front end: 1e-5 too).
#[test]
fn tower_rows_match_mlx_vlm() {
    let _g = mlx_lock();
    for variant in VARIANTS {
        let mut m = load(variant);
        let (want, _) =
            mlx::io::load_safetensors(&fixture(variant).join("audio_features.safetensors")).expect("audio_features");
        let clips = load_audio_clips(&m, &CLIPS.map(clip)).unwrap();
        let ours = m.embed_audio(clips.iter().map(|c| c.processed.clone()).collect()).unwrap();
        for ((stem, c), rows) in CLIPS.iter().zip(&clips).zip(ours) {
            let w = want[&format!("{stem}.embed_audio")].to_vec::<f32>().unwrap();
            let s = scale(&w);
            // The reference's features through famlx's tower.
            let feats = &want[&format!("{stem}.input_features")];
            let t = feats.dim(0);
            let mask = want[&format!("{stem}.input_features_mask")].ne(&mlx::Array::i32(0)).unwrap();
            let theirs = ProcessedMedia {
                pixels: feats.reshape(&[1, t, 128]).unwrap().into(),
                grid: vec![t as i64].into(),
                tokens: c.processed.tokens,
                extra: vec![mask.reshape(&[1, t]).unwrap().into()].into(),
            };
            let r = m.embed_audio(vec![theirs]).unwrap().remove(0).to_vec::<f32>().unwrap();
            let d = max_abs_diff(&r, &w);
            println!("{variant} {stem}: reference features: max |diff| {d:.3e} of max |row| {s:.3}");
            assert!(d <= 1e-5 * s, "{variant} {stem}: rows differ from mlx-vlm's by {d} (max |row| {s})");
            if *stem == "stereo44k" {
                // Resampled by another filter than the reference's (see below).
                continue;
            }
            let d = max_abs_diff(&rows.to_vec::<f32>().unwrap(), &w);
            println!("{variant} {stem}: famlx features: max |diff| {d:.3e}");
            assert!(d <= 1e-5 * s, "{variant} {stem}: rows from famlx's features differ by {d} (max |row| {s})");
        }
    }
}

/// Every recorded prompt (text, image, audio, image + audio) on both
/// layouts: expanded ids, placeholder counts, first-step logits within
/// 1e-4, 24 greedy tokens. The 44.1 kHz prompt checks ids and counts only: famlx resamples
/// with rubato, the reference with scipy's polyphase filter, so the
/// samples (and the rows) differ beyond logit tolerances, though not the
/// placeholder count.
#[test]
fn prompts_match_mlx_vlm() {
    let tmp = Scratch::new("g4a");
    let mut failures = Vec::new();
    for variant in VARIANTS {
        let exp = expected(variant);
        for p in exp["prompts"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            let (got_ids, logits, j) = generate(&fixture(variant), p, &tmp.path().join("l.json"), &[]);
            assert_eq!(got_ids, ids(&p["ids"]), "{variant}/{name}: prompt ids");
            let sum = |k: &str| p[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum::<u64>();
            assert_eq!(j["audio_tokens"].as_u64(), Some(sum("num_audio_tokens")), "{variant}/{name}: audio_tokens");
            assert_eq!(j["image_tokens"].as_u64(), Some(sum("num_soft_tokens")), "{variant}/{name}: image_tokens");
            if sum("num_audio_tokens") > 0 {
                assert!(j["audio_s"].as_f64().unwrap() > 0.0, "{variant}/{name}: audio_s");
            }
            if name == "audio_44k" {
                continue;
            }
            let want = floats(&p["logits"]);
            let d = max_abs_diff(&logits, &want);
            println!("{variant}/{name}: first-step logits max |diff| {d:.3e}");
            if d > 1e-4 {
                failures.push(format!("{variant}/{name}: logits differ by {d}"));
            }
            let r = check_greedy(variant, name, &ids(&j["tokens"]), &ids(&p["greedy"]), &floats(&p["greedy_margins"]));
            if let Err(e) = r {
                failures.push(e);
            }
            if name == "audio" {
                // The same prompt as ids expanded beforehand (`--prompt-ids`,
                // which the helper passes when the text comes first).
                let mut q = p.clone();
                q["messages"][0]["content"].as_array_mut().unwrap().reverse();
                let (_, _, j2) = generate(&fixture(variant), &q, &tmp.path().join("l2.json"), &[]);
                assert_eq!(j2["tokens"], j["tokens"], "{variant}/{name}: --prompt-ids");
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// rubato's 44.1 → 16 kHz samples against the reference's (scipy's
/// polyphase filter): the same count, and close (the two filters differ
/// near the new Nyquist frequency).
#[test]
fn resampling_is_close_to_the_reference() {
    let _g = mlx_lock();
    let (want, _) = mlx::io::load_safetensors(&fixture("audio").join("resampled_16k.safetensors")).unwrap();
    let want = want["stereo44k.samples_16k"].to_vec::<f32>().unwrap();
    let got = famlx::audio::load_audio(&clip("stereo44k")).unwrap().samples;
    assert_eq!(got.len(), want.len());
    let err: f64 = got.iter().zip(&want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let sig: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    let snr = 10.0 * (sig / err).log10();
    println!("rubato vs the reference's resampler: SNR {snr:.1} dB");
    assert!(snr > 30.0, "SNR {snr:.1} dB");
}

/// Without its audio weights the checkpoint still serves text and images,
/// with one warning line; `--audio` then says the model takes no audio.
#[test]
fn missing_audio_weights_leave_text_and_images() {
    let tmp = Scratch::new("g4a-noaudio");
    let dir = tmp.path().join("model");
    common::copy_dir(&fixture("gemma4-audio-f32"), &dir);
    let st = dir.join("model.safetensors");
    {
        let _g = mlx_lock();
        let (w, meta) = mlx::io::load_safetensors(&st).unwrap();
        let kept: Vec<(&str, &mlx::Array)> = w
            .iter()
            .filter(|(k, _)| !k.starts_with("audio_tower.") && !k.starts_with("embed_audio."))
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        mlx::io::save_safetensors(&st, &kept, &meta).unwrap();
    }
    let _ = std::fs::remove_file(dir.join("model.safetensors.index.json"));
    let model = dir.display().to_string();
    let img = fixture("images").join("portrait.png").display().to_string();
    let out = run(&["generate", "--model", &model, "--image", &img, "--max-tokens", "3", "--json"]);
    let (_, err) = texts(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("audio input is off")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert_eq!(json_of(&out)["image_tokens"], 60);
    let wav = clip("sine440").display().to_string();
    let out = run(&["generate", "--model", &model, "--audio", &wav, "--max-tokens", "2"]);
    let (_, err) = texts(&out);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("famlx: error: --audio") && last.contains("takes no audio"), "{err}");
}

/// `/audio PATH` in the chat REPL attaches a clip to the next message (a
/// missing file is one error line, the REPL goes on); the answer is the
/// one `generate --audio` gives for the same turn.
#[test]
fn chat_attaches_audio() {
    let model = fixture("gemma4-audio-f32").display().to_string();
    let wav = clip("chirp").display().to_string();
    let o = common::chat(
        &["--model", &model, "--max-tokens", "4", "--temp", "0"],
        &[
            format!("/audio {}", fixture("audio").join("nowhere.wav").display()),
            format!("/audio {wav}"),
            "What do you hear?".into(),
            "/exit".into(),
        ],
    );
    let (out, err) = texts(&o);
    assert!(o.status.success() && !err.contains("panicked"), "chat failed:\n{out}\n{err}");
    assert!(err.contains("nowhere.wav") && err.contains("no such file"), "no error for the missing clip:\n{err}");
    assert!(out.contains("(audio ") && out.contains("attached to the next message: 75 tokens"), "{out}");
    let g =
        run(&["generate", "--model", &model, "--audio", &wav, "--prompt", "What do you hear?", "--max-tokens", "4"]);
    let (answer, gerr) = texts(&g);
    assert!(g.status.success() && !answer.trim().is_empty(), "{gerr}");
    assert!(out.contains(answer.trim()), "chat answered otherwise than generate ({answer:?}):\n{out}");
}
