//! Helpers of the image-input tests: running `famlx generate` on a recorded
//! prompt with its images, comparing float vectors.

use super::{fixture, ids, json_of, parity::floats, run};
use std::path::Path;

/// The largest absolute difference of two equally long vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// `famlx generate` on `dir` for a recorded prompt: the text through the
/// chat template with `--image` / `--audio` when the media come first
/// (images, then clips, as famlx places them), the recorded ids with
/// `--prompt-ids` otherwise. Returns the logits of the last position and the
/// `--json` output; `extra` flags are added.
pub fn generate(
    dir: &Path,
    p: &serde_json::Value,
    dump: &Path,
    extra: &[&str],
) -> (Vec<u32>, Vec<f32>, serde_json::Value) {
    let model = dir.display().to_string();
    let dump_s = dump.display().to_string();
    let mut args: Vec<String> =
        ["generate", "--model", &model, "--max-tokens", "24", "--temp", "0", "--json", "--dump-logits", &dump_s]
            .iter()
            .map(|s| s.to_string())
            .collect();
    for im in p["images"].as_array().unwrap() {
        args.push("--image".into());
        args.push(fixture("images").join(im.as_str().unwrap()).display().to_string());
    }
    let clips = p.get("audios").and_then(|a| a.as_array()).cloned().unwrap_or_default();
    for a in &clips {
        args.push("--audio".into());
        args.push(fixture("audio").join(a.as_str().unwrap()).display().to_string());
    }
    let content = p["messages"][0]["content"].as_array().unwrap();
    // famlx places images, then clips, then the text.
    let n_img = p["images"].as_array().unwrap().len();
    let media_first = content.iter().take(n_img).all(|c| c["type"] == "image")
        && content.iter().skip(n_img).take(clips.len()).all(|c| c["type"] == "audio");
    let images_first = media_first && content.iter().filter(|c| c["type"] != "text").count() == n_img + clips.len();
    let texts: Vec<&str> =
        content.iter().filter(|c| c["type"] == "text").map(|c| c["text"].as_str().unwrap()).collect();
    if images_first && texts.len() == 1 {
        args.push("--prompt".into());
        args.push(texts[0].into());
    } else {
        args.push("--prompt-ids".into());
        args.push(ids(&p["ids"]).iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let j = json_of(&run(&a));
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap();
    let rows = d["logits"].as_array().unwrap();
    (ids(&d["ids"]), floats(rows.last().unwrap()), j)
}
