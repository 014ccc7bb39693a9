//! GGUF repos on the hub (`--model org/NAME-GGUF[:TAG]`, as llama.cpp's
//! `-hf org/repo:QUANT`): which of a repo's `.gguf` files make one model,
//! and which model a quantization tag picks. Pure string work on names the
//! listing (or a cached snapshot) gives; every name still goes through
//! `famlx_formats::hub` before it becomes a path.
//!
//! A model is one file, or the parts of a split one (llama.cpp's
//! `gguf-split` names them `NAME-00001-of-00003.gguf`, …; all are fetched,
//! the first is opened). Projector (`mmproj*`) and importance-matrix
//! (`*imatrix*`) files are never models.

use anyhow::{bail, Result};
use famlx_formats::gguf::{part_name, split_name};
use famlx_formats::hub as check;

/// The longest quantization tag accepted after `org/name:`.
const MAX_TAG: usize = 128;

/// One model of a GGUF repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// The file famlx opens: the model, or the first part of a split one
    /// (named even when the repo lacks it).
    pub first: String,
    /// Its files the repo holds, in name order (the parts in order).
    pub files: Vec<String>,
    /// How many parts its name says it has (1 unless split).
    pub parts: usize,
    /// The quantization its name carries (`Q4_K_M`, `F16`), upper-cased.
    pub tag: Option<String>,
}

impl Model {
    /// Whether every part is there.
    pub fn complete(&self) -> bool {
        (1..=self.parts).all(|i| {
            let name = if self.parts == 1 { Some(self.first.clone()) } else { part_name(&self.first, i) };
            name.is_some_and(|n| self.files.contains(&n))
        })
    }

    /// What a choice list shows for it: its tag, else its file name.
    fn label(&self) -> String {
        self.tag.clone().unwrap_or_else(|| self.first.clone())
    }
}

/// `org/name` or `org/name:TAG` as a hub reference: the repo id and the tag.
/// `Ok(None)` when `m` is not one (a local path); an error when the part
/// before the `:` is a repo id and the tag is not a tag.
pub fn hub_ref(m: &str) -> Result<Option<(&str, Option<&str>)>> {
    if check::repo_folder(m).is_ok() {
        return Ok(Some((m, None)));
    }
    let Some((repo, tag)) = m.rsplit_once(':') else { return Ok(None) };
    if check::repo_folder(repo).is_err() {
        return Ok(None);
    }
    let ok = !tag.is_empty()
        && tag.len() <= MAX_TAG
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        bail!(
            "--model {}: {} is not a quantization tag (letters, digits, '-', '_', '.'; e.g. {repo}:Q4_K_M)",
            check::shown(m),
            check::shown(tag)
        );
    }
    Ok(Some((repo, Some(tag))))
}

/// Whether `file` (a path in the repo) is a model GGUF: `.gguf`, and not a
/// projector or an importance matrix.
fn is_model_file(file: &str) -> bool {
    let lower = file.to_ascii_lowercase();
    let base = lower.rsplit('/').next().unwrap_or(&lower);
    lower.ends_with(".gguf") && !base.starts_with("mmproj") && !lower.contains("imatrix")
}

/// The models among `files` (a repo's listing or a snapshot's files), in
/// the order of their first file's name. A split model lacking parts is
/// still listed ([`Model::complete`] says so).
pub fn models<'a>(files: impl IntoIterator<Item = &'a str>) -> Vec<Model> {
    let mut out: Vec<Model> = Vec::new();
    let mut files: Vec<&str> = files.into_iter().filter(|f| is_model_file(f)).collect();
    files.sort_unstable();
    files.dedup();
    for f in files {
        let Some((prefix, _, of, ext)) = split_name(f) else {
            out.push(Model { first: f.to_string(), files: vec![f.to_string()], parts: 1, tag: tag_of(f) });
            continue;
        };
        let first = format!("{prefix}-00001-of-{of:05}{ext}");
        match out.iter_mut().find(|m| m.parts == of && m.first == first) {
            Some(m) => m.files.push(f.to_string()),
            None => out.push(Model { tag: tag_of(&first), first, files: vec![f.to_string()], parts: of }),
        }
    }
    out
}

/// The quantization a file name carries: the last `-`, `.` or `/`
/// separated piece (or its tail after a `_`) that looks like one of
/// llama.cpp's types (`Q4_K_M`, `IQ4_XS`, `TQ1_0`, `Q8_0`, `F16`, `BF16`…).
pub fn tag_of(file: &str) -> Option<String> {
    let stem = match split_name(file) {
        Some((prefix, ..)) => prefix,
        None => file.strip_suffix(".gguf").or_else(|| file.strip_suffix(".GGUF")).unwrap_or(file),
    };
    for piece in stem.rsplit(['-', '.', '/']) {
        let up = piece.to_ascii_uppercase();
        let starts = std::iter::once(0).chain(up.match_indices('_').map(|(i, _)| i + 1));
        for s in starts {
            if is_quant(&up[s..]) {
                return Some(up[s..].to_string());
            }
        }
    }
    None
}

/// Whether `s` (upper case) names a GGUF quantization.
fn is_quant(s: &str) -> bool {
    if matches!(s, "F16" | "F32" | "BF16" | "FP16" | "FP32" | "MXFP4" | "MXFP4_MOE") {
        return true;
    }
    let rest = s.strip_prefix("IQ").or_else(|| s.strip_prefix("TQ")).or_else(|| s.strip_prefix('Q'));
    let Some(rest) = rest else { return false };
    let mut pieces = rest.split('_');
    let bits = pieces.next().unwrap_or("");
    let pieces: Vec<&str> = pieces.collect();
    !bits.is_empty()
        && bits.len() <= 2
        && bits.bytes().all(|b| b.is_ascii_digit())
        && !pieces.is_empty()
        && pieces.iter().all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Whether `tag` occurs in `file` as a whole tag (case-insensitive): after
/// the start, `-`, `_`, `.` or `/`, and before the end, `-`, `.` or `/`
/// (so `Q4_K` does not pick `Q4_K_M`).
fn names_tag(file: &str, tag: &str) -> bool {
    let (file, tag) = (file.to_ascii_lowercase(), tag.to_ascii_lowercase());
    file.match_indices(&tag).any(|(i, _)| {
        let before = file[..i].chars().next_back();
        let after = file[i + tag.len()..].chars().next();
        before.is_none_or(|c| matches!(c, '-' | '_' | '.' | '/')) && after.is_none_or(|c| matches!(c, '-' | '.' | '/'))
    })
}

/// The labels of `models`, sorted, for an error line.
fn labels(models: &[Model]) -> String {
    let mut l: Vec<String> = models.iter().map(Model::label).collect();
    l.sort();
    l.join(", ")
}

/// The model `tag` picks among `models` of `repo` (the only one when no tag
/// is given): one whose name carries the quantization `tag`, else one whose
/// name holds `tag` as a whole tag. Each way of not finding exactly one is
/// one line listing what there is.
pub fn choose<'a>(repo: &str, models: &'a [Model], tag: Option<&str>) -> Result<&'a Model> {
    let Some(tag) = tag else {
        match models {
            [] => bail!("{repo}: the repo has no config.json and no .gguf model (not a checkpoint famlx can load)"),
            [one] => return Ok(one),
            _ => {
                // The tag people mostly want, if the repo has it.
                let mut tags: Vec<&str> = models.iter().filter_map(|m| m.tag.as_deref()).collect();
                tags.sort();
                let example = tags.iter().find(|t| **t == "Q4_K_M").or(tags.first()).unwrap_or(&"Q4_K_M");
                bail!(
                    "{repo}: the repo holds {} GGUF models ({}): pick one with --model {repo}:{example}",
                    models.len(),
                    labels(models)
                )
            }
        }
    };
    if models.is_empty() {
        bail!("{repo}: :{tag} picks a GGUF file, and the repo has no .gguf model");
    }
    let by_tag: Vec<&Model> =
        models.iter().filter(|m| m.tag.as_deref().is_some_and(|t| t.eq_ignore_ascii_case(tag))).collect();
    let found: Vec<&Model> = if by_tag.is_empty() {
        models.iter().filter(|m| m.files.iter().any(|f| names_tag(f, tag))).collect()
    } else {
        by_tag
    };
    match found[..] {
        [one] => Ok(one),
        [] => bail!("{repo}: no GGUF model for :{tag}; the repo holds {}", labels(models)),
        _ => {
            let files: Vec<&str> = found.iter().map(|m| m.first.as_str()).collect();
            bail!("{repo}: :{tag} names several GGUF models ({}): give a longer tag or a file name", files.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_refs() {
        assert_eq!(hub_ref("o/n-GGUF").unwrap(), Some(("o/n-GGUF", None)));
        assert_eq!(hub_ref("o/n-GGUF:Q4_K_M").unwrap(), Some(("o/n-GGUF", Some("Q4_K_M"))));
        for local in ["model.gguf", "./a/b:c", "/x/y:Q4_0", "C:/m/x.gguf", "a/b/c:Q4_0"] {
            assert_eq!(hub_ref(local).unwrap(), None, "{local}");
        }
        for bad in ["o/n:", "o/n:a b", "o/n:../x", "o/n:a/b"] {
            let e = hub_ref(bad);
            assert!(e.is_err() || e.as_ref().unwrap().is_none(), "{bad}");
        }
        assert!(hub_ref("o/n:").is_err() && hub_ref("o/n:a b").is_err());
    }

    #[test]
    fn tags_of_names() {
        for (f, t) in [
            ("gemma-3-270m-it-Q4_K_M.gguf", Some("Q4_K_M")),
            ("model.q4_k_m.gguf", Some("Q4_K_M")),
            ("Q4_K_M/x-00001-of-00002.gguf", Some("Q4_K_M")),
            ("Qwen3-0.6B-Q8_0.gguf", Some("Q8_0")),
            ("Llama-3-8B-UD-IQ2_XXS.gguf", Some("IQ2_XXS")),
            ("model_q5_k_s.gguf", Some("Q5_K_S")),
            ("phi-4-F16.gguf", Some("F16")),
            ("m-BF16-00001-of-00003.gguf", Some("BF16")),
            ("Qwen3-4B.gguf", None),
            ("model.gguf", None),
        ] {
            assert_eq!(tag_of(f).as_deref(), t, "{f}");
        }
    }

    #[test]
    fn split_names() {
        assert_eq!(split_name("a/m-Q4_0-00002-of-00003.gguf"), Some(("a/m-Q4_0", 2, 3, ".gguf")));
        assert_eq!(part_name("m-00001-of-00003.gguf", 3).as_deref(), Some("m-00003-of-00003.gguf"));
        for no in
            ["m-00004-of-00003.gguf", "m-00000-of-00003.gguf", "m-0001-of-0003.gguf", "-00001-of-00002.gguf", "m.gguf"]
        {
            assert_eq!(split_name(no), None, "{no}");
        }
    }

    fn repo() -> Vec<Model> {
        models([
            "README.md",
            "m-Q4_K_M.gguf",
            "m-Q4_K_S.gguf",
            "m-Q8_0.gguf",
            "mmproj-m-F16.gguf",
            "m.imatrix.gguf",
            "F16/m-F16-00002-of-00002.gguf",
            "F16/m-F16-00001-of-00002.gguf",
        ])
    }

    #[test]
    fn choosing() {
        let ms = repo();
        assert_eq!(ms.len(), 4, "{ms:?}");
        let f16 = choose("o/n", &ms, Some("f16")).unwrap();
        assert_eq!(f16.files, ["F16/m-F16-00001-of-00002.gguf", "F16/m-F16-00002-of-00002.gguf"]);
        assert!(f16.complete());
        assert_eq!(choose("o/n", &ms, Some("q4_k_m")).unwrap().first, "m-Q4_K_M.gguf");
        let e = choose("o/n", &ms, None).unwrap_err().to_string();
        assert!(e.contains("F16, Q4_K_M, Q4_K_S, Q8_0") && e.contains("--model o/n:"), "{e}");
        let e = choose("o/n", &ms, Some("Q2_K")).unwrap_err().to_string();
        assert!(e.contains(":Q2_K") && e.contains("Q8_0"), "{e}");
        // A whole tag only: Q4_K is neither Q4_K_M nor Q4_K_S.
        assert!(choose("o/n", &ms, Some("Q4_K")).is_err());
        // A name the tag does not carry still picks by its pieces.
        let one = models(["model-small.gguf", "model-big.gguf"]);
        assert_eq!(choose("o/n", &one, Some("big")).unwrap().first, "model-big.gguf");
        assert!(choose("o/n", &one, Some("model")).unwrap_err().to_string().contains("several"));
        // A split model missing its second part is incomplete.
        let half = models(["m-00001-of-00002.gguf"]);
        assert!(!choose("o/n", &half, None).unwrap().complete());
        let no_first = models(["m-00002-of-00002.gguf"]);
        assert!(!no_first[0].complete());
    }
}
