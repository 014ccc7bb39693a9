//! Image input beyond parity: every bad input gets one clear line naming
//! the file or field (missing, not an image, truncated, too large, an image
//! for a text model, placeholder counts that disagree, a VLM checkpoint
//! without its vision weights), prompt reuse keyed by pixels, and the chat
//! REPL's `/image`.

use crate::common;

use common::{expect_error, fixture, mlx_lock, registry, run, texts, Scratch};
use famlx::cache::CacheOptions;
use famlx::decode::GenParams;
use famlx::model::LoadedModel;
use famlx::prompt::{chat_prompt, load_images, Message};
use famlx::session::Session;
use std::io::Write;
use std::path::Path;

const VLM: &str = "gemma4-vision-f32";

fn model_arg() -> String {
    fixture(VLM).display().to_string()
}

fn image(name: &str) -> String {
    fixture("images").join(name).display().to_string()
}

/// `famlx generate` on the VLM fixture with `extra`.
fn generate_args(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["generate", "--model", &model_arg(), "--max-tokens", "2", "--temp", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn expect(extra: &[&str], must: &[&str]) {
    let a = generate_args(extra);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    expect_error(&a, must);
}

/// A PNG whose header declares `w x h` pixels (with no pixel data).
fn png_header_only(path: &Path, w: u32, h: u32) {
    fn crc32(bytes: &[u8]) -> u32 {
        // The PNG chunk checksum (CRC-32, polynomial 0xEDB88320).
        let mut c = 0xffff_ffffu32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            }
        }
        !c
    }
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(b"\x89PNG\r\n\x1a\n").unwrap();
    f.write_all(&13u32.to_be_bytes()).unwrap();
    f.write_all(&ihdr).unwrap();
    f.write_all(&crc32(&ihdr).to_be_bytes()).unwrap();
    // A start of image data (an empty zlib stream), so decoders read the header.
    let mut idat = b"IDAT".to_vec();
    idat.extend_from_slice(&[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    f.write_all(&8u32.to_be_bytes()).unwrap();
    f.write_all(&idat).unwrap();
    f.write_all(&crc32(&idat).to_be_bytes()).unwrap();
    f.write_all(&0u32.to_be_bytes()).unwrap();
    f.write_all(b"IEND").unwrap();
    f.write_all(&crc32(b"IEND").to_be_bytes()).unwrap();
}

#[test]
fn bad_image_files_are_named() {
    let tmp = Scratch::new("badimg");
    let missing = tmp.path().join("nowhere.png").display().to_string();
    expect(&["--image", &missing, "--prompt", "hi"], &["image", "nowhere.png"]);

    let text = tmp.path().join("notes.png");
    std::fs::write(&text, "this is not a picture\n").unwrap();
    expect(&["--image", &text.display().to_string(), "--prompt", "hi"], &["notes.png", "not a PNG, JPEG, WebP or GIF"]);

    let bytes = std::fs::read(fixture("images").join("portrait.png")).unwrap();
    let cut = tmp.path().join("cut.png");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    expect(&["--image", &cut.display().to_string(), "--prompt", "hi"], &["cut.png", "cannot decode"]);

    let jbytes = std::fs::read(fixture("images").join("large.jpg")).unwrap();
    let cutj = tmp.path().join("cut.jpg");
    std::fs::write(&cutj, &jbytes[..jbytes.len() / 2]).unwrap();
    let o = {
        let a = generate_args(&["--image", &cutj.display().to_string(), "--prompt", "hi"]);
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // libjpeg decodes a cut JPEG with a warning (grey bottom) as Pillow does;
    // either way nothing may crash.
    let (_, err) = texts(&o);
    assert!(!err.contains("panicked"), "a truncated JPEG crashed famlx: {err}");

    let huge = tmp.path().join("huge.png");
    png_header_only(&huge, 100_000, 100_000);
    expect(&["--image", &huge.display().to_string(), "--prompt", "hi"], &["huge.png", "100000x100000"]);

    let empty = tmp.path().join("empty.png");
    png_header_only(&empty, 0, 7);
    expect(&["--image", &empty.display().to_string(), "--prompt", "hi"], &["empty.png"]);
}

#[test]
fn image_for_a_text_model_is_refused() {
    let m = fixture("llama-bf16").display().to_string();
    let img = image("tiny.png");
    expect_error(
        &["generate", "--model", &m, "--image", &img, "--prompt", "hi", "--max-tokens", "1"],
        &["--image", "takes no images"],
    );
}

#[test]
fn placeholder_counts_must_agree() {
    let exp = common::expected(VLM);
    let p = &exp["prompts"][1]; // one image, 60 placeholders
    let ids: Vec<u32> = common::ids(&p["ids"]);
    let list = |v: &[u32]| v.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let portrait = image("portrait.png");
    let tiny = image("tiny.png");
    // The right ids with another image (70 tokens, not 60).
    expect(
        &["--prompt-ids", &list(&ids), "--image", &tiny],
        &["image 1", "tiny.png", "60 placeholder tokens", "gives 70"],
    );
    // Placeholders and no image.
    expect(&["--prompt-ids", &list(&ids)], &["1 image placeholder run", "0 images"]);
    // Two images for one run.
    expect(
        &["--prompt-ids", &list(&ids), "--image", &portrait, "--image", &tiny],
        &["1 image placeholder run", "2 images"],
    );
    // Raw text with no image marker.
    expect(&["--raw", "--prompt", "no picture here", "--image", &portrait], &["places 0 images", "1 given"]);
}

#[test]
fn missing_vision_weights_serve_text_with_one_warning() {
    let tmp = Scratch::new("novision");
    let dir = tmp.path().join("m");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "processor_config.json"]
    {
        std::fs::copy(fixture(VLM).join(f), dir.join(f)).unwrap();
    }
    {
        let _g = mlx_lock();
        let (all, _) = mlx::io::load_safetensors(&fixture(VLM).join("model.safetensors")).unwrap();
        let kept: Vec<(&str, &mlx::Array)> = all
            .iter()
            .filter(|(k, _)| !k.starts_with("vision_tower") && !k.starts_with("embed_vision"))
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        mlx::io::save_safetensors(&dir.join("model.safetensors"), &kept, &[("format", "mlx")]).unwrap();
    }
    let m = dir.display().to_string();
    let o = run(&[
        "generate",
        "--model",
        &m,
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "3",
        "--temp",
        "0",
    ]);
    let (_, err) = texts(&o);
    assert!(o.status.success(), "text on a VLM without vision weights failed: {err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "expected one warning line, got:\n{err}");
    assert!(warnings[0].contains("vision"), "{}", warnings[0]);
    // With an image: the same warning, then the error.
    let o = run(&["generate", "--model", &m, "--image", &image("tiny.png"), "--prompt", "hi", "--max-tokens", "1"]);
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default();
    assert!(last.starts_with("famlx: error: --image") && last.contains("takes no images"), "{err}");
}

/// A second turn over the same image reuses the cached prefix (the image is
/// not embedded again) and generates what a fresh session generates; a
/// different image at the same place is prefilled again from the image on.
#[test]
fn prompt_reuse_keys_images_by_pixels() {
    let _g = mlx_lock();
    let load = || {
        let m = LoadedModel::load(&fixture(VLM), &registry(), None, CacheOptions::default()).unwrap();
        Session::new(m).unwrap()
    };
    let mut s = load();
    let tok = s.model.tokenizer().unwrap().clone();
    let media = s.model.plan.media.clone().into_option();
    let portrait = load_images(&s.model, &[fixture("images").join("portrait.png")]).unwrap();
    let tiny = load_images(&s.model, &[fixture("images").join("tiny.png")]).unwrap();
    let params = GenParams { max_tokens: 4, ..GenParams::default() };
    let kw = serde_json::Map::new();

    let turn1 = vec![Message::with_media("user", "Describe this picture.", portrait.clone())];
    let p1 = chat_prompt(&tok, media.as_ref(), &turn1, &kw).unwrap();
    let (st1, pre1) = s.generate_prompt(&p1, &params, |_| true).unwrap();
    assert_eq!(pre1, p1.ids.len());
    assert!(st1.vision_s > 0.0 && st1.image_tokens == 60);

    let reply = tok.decode(&st1.tokens, false).unwrap();
    let mut turn2 = turn1.clone();
    turn2.push(Message::new("assistant", &reply));
    turn2.push(Message::new("user", "And the colours?"));
    let p2 = chat_prompt(&tok, media.as_ref(), &turn2, &kw).unwrap();
    let (st2, pre2) = s.generate_prompt(&p2, &params, |_| true).unwrap();
    assert!(pre2 < p2.ids.len() - 60, "the image was prefilled again ({pre2} of {} tokens)", p2.ids.len());
    assert_eq!(st2.vision_s, 0.0, "the image was embedded again");
    let mut fresh = load();
    let (st2f, _) = fresh.generate_prompt(&p2, &params, |_| true).unwrap();
    assert_eq!(st2.tokens, st2f.tokens, "reuse changed the answer");

    // Same ids, another picture: prefill restarts at the image.
    let mut swapped = turn2.clone();
    swapped[0].media = tiny.clone();
    let p3 = chat_prompt(&tok, media.as_ref(), &swapped, &kw).unwrap();
    let start = p3.starts[0];
    let (_, pre3) = s.generate_prompt(&p3, &params, |_| true).unwrap();
    assert!(pre3 >= p3.ids.len() - start, "a different image at the same place was taken from the cache");
}

#[test]
fn chat_attaches_images() {
    let m = model_arg();
    let o = common::chat(
        &["--model", &m, "--max-tokens", "3", "--temp", "0"],
        &[
            format!("/image {}", image("nowhere.png")),
            format!("/image {}", image("portrait.png")),
            "Describe this picture.".into(),
            "/exit".into(),
        ],
    );
    let (out, err) = texts(&o);
    assert!(o.status.success(), "chat failed:\n{out}\n{err}");
    assert!(err.contains("nowhere.png"), "no error for the missing image:\n{err}");
    assert!(out.contains("attached to the next message: 60 tokens"), "image not attached:\n{out}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `--image-tokens` picks another budget: Gemma 4's trained ones only, a
/// pixel budget for Qwen3.5 (the processor's formulas at the new cap).
#[test]
fn image_token_budget_is_selectable() {
    let img = image("portrait.png");
    let tokens = |model: &str, n: &str| -> u64 {
        let m = fixture(model).display().to_string();
        let o = run(&[
            "generate",
            "--model",
            &m,
            "--image",
            &img,
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
            "--json",
            "--image-tokens",
            n,
        ]);
        common::json_of(&o)["image_tokens"].as_u64().unwrap()
    };
    // 672x432 pixels: 42x27 patches, 126 pooled tokens (mlx-vlm at max_soft_tokens 140).
    assert_eq!(tokens(VLM, "140"), 126);
    // 288x192 pixels: an 18x12 grid, 54 merged tokens within 64 x 32x32 pixels.
    assert_eq!(tokens("qwen3_5-vl-f32", "64"), 54);
    let a = generate_args(&["--image", &img, "--prompt", "hi", "--image-tokens", "100"]);
    expect_error(&a.iter().map(String::as_str).collect::<Vec<_>>(), &["--image-tokens 100", "70, 140, 280, 560, 1120"]);
    let llama = fixture("llama-bf16").display().to_string();
    expect_error(
        &["generate", "--model", &llama, "--image-tokens", "70", "--prompt", "hi"],
        &["--image-tokens", "takes no images"],
    );
}
