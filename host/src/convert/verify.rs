//! `famlx convert --verify`: the converted folder against its source on one
//! greedy continuation: the largest first-step logit difference and how
//! often the two agree on the next token over the following steps.

use crate::cache::CacheOptions;
use crate::decode::GenParams;
use crate::model::LoadedModel;
use crate::plugins::Registry;
use crate::session::Session;
use anyhow::{anyhow, Result};
use mlx::{Array, Dtype};
use plugin_api::{LogitsWanted, TokenSource};
use std::path::Path;

/// How a converted model compares with its source.
#[derive(Debug, Clone)]
pub struct Verification {
    /// Largest absolute difference of the first generated position's logits.
    pub first_logit_max_diff: f32,
    /// Positions where both pick the same next token, of `steps`.
    pub top1_agree: usize,
    /// Positions compared.
    pub steps: usize,
}

/// Generates `steps` greedy tokens with the source after a short prompt,
/// then runs both models over that sequence and compares their logits.
pub fn verify(reg: &Registry, src: &Path, out: &Path, family: Option<&str>, steps: usize) -> Result<Verification> {
    let load = |p: &Path| LoadedModel::load(p, reg, family, CacheOptions::default());
    let mut source = Session::new(load(src)?)?;
    let prompt = match &source.model.tokenizer {
        Some(t) => t.encode("The capital of France is", true).map_err(|e| anyhow!("{e}"))?,
        None => (1..9).collect(),
    };
    let p = GenParams { max_tokens: steps, ..GenParams::default() };
    let (stats, _) = source.generate(&prompt, &p, |_| true)?;
    let mut seq = prompt.clone();
    seq.extend(&stats.tokens);
    source.reset()?;
    let a = all_logits(&mut source.model, &seq)?;
    drop(source);
    let mut converted = load(out)?;
    let b = all_logits(&mut converted, &seq)?;
    let v = a.dim(-1) as usize;
    let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    let row = |x: &[f32], i: usize| x[i * v..(i + 1) * v].to_vec();
    let first = prompt.len() - 1;
    let (ra, rb) = (row(&a, first), row(&b, first));
    let first_logit_max_diff = ra.iter().zip(&rb).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    let argmax = |r: &[f32]| r.iter().enumerate().fold((0, f32::MIN), |m, (i, &x)| if x > m.1 { (i, x) } else { m }).0;
    let positions = first..seq.len() - 1;
    let steps = positions.len();
    let top1_agree = positions.filter(|&i| argmax(&row(&a, i)) == argmax(&row(&b, i))).count();
    Ok(Verification { first_logit_max_diff, top1_agree, steps })
}

/// Every position's logits (float32) of `ids` from empty caches.
fn all_logits(m: &mut LoadedModel, ids: &[u32]) -> Result<Array> {
    let t: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    let tokens = Array::from_slice(&t, &[1, t.len() as i32])?;
    let mut empty = m.sequence()?;
    let logits = m
        .forward(&mut empty, &tokens, TokenSource::Prompt, LogitsWanted::All)?
        .ok_or_else(|| anyhow!("the model returned no logits"))?;
    Ok(logits.astype(Dtype::F32)?)
}
