//! Speculative decoding, for every family with a drafter: a draft head
//! proposes up to `depth` tokens (one [`plugin_api::Drafter::step`] each),
//! one target forward verifies them all, and every cache is rolled back to
//! the accepted prefix.
//!
//! Greedy acceptance keeps a drafted token while it equals the target's
//! argmax, so the output is the target's greedy output token for token.
//! Sampled acceptance is rejection sampling (accept `d` with probability
//! `min(1, p(d)/q(d))`, else draw from `max(p - q, 0)`), which leaves the
//! target's sampling distribution unchanged.
//!
//! Rollback: KV caches are trimmed; caches that cannot rewind (a recurrent
//! state, a window that has slid) are restored from a snapshot taken before
//! the verify forward and the accepted tokens are fed again.

use crate::cache::{make_caches, CacheOptions, Checkpoint, SharedCache};
use crate::generate::{emit, ids_array, prefill_chunks, Finish, GenParams, GenStats};
use crate::model::{plan_and_rewrite, HostWeights, LoadedModel, Source};
use crate::plugins::Registry;
use crate::sample::{probs, sample};
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::RVec;
use anyhow::{anyhow, bail, Context, Result};
use mlx::{Array, Dtype};
use plugin_api::{ArrayHandle, CacheBox, DrafterBox, LogitsWanted, WeightStore_TO};
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

/// Speculative decoding settings.
#[derive(Debug, Clone)]
pub struct SpecParams {
    /// Tokens drafted per round (1..=8).
    pub depth: usize,
    /// Stop drafting a round early once the drafter's top probability falls
    /// below this (0: always draft `depth` tokens). Each check reads a value
    /// back from the device, so it costs a synchronisation per draft step.
    pub min_confidence: f32,
}

impl Default for SpecParams {
    fn default() -> Self {
        SpecParams { depth: 2, min_confidence: 0.0 }
    }
}

/// Longest draft a round may ask for.
pub const MAX_DEPTH: usize = 8;

impl SpecParams {
    /// Checks the settings, naming the flag at fault.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_DEPTH).contains(&self.depth) {
            bail!("--mtp-depth (--draft-depth) must be between 1 and {MAX_DEPTH}, got {}", self.depth);
        }
        if !(0.0..1.0).contains(&self.min_confidence) {
            bail!("--draft-min-confidence must be in [0, 1), got {}", self.min_confidence);
        }
        Ok(())
    }
}

/// A drafter as the host holds it: the plugin's object, its own caches, and
/// (for a separate draft checkpoint) the weights it was built from.
pub struct Drafter {
    /// The family that built it.
    pub family: String,
    /// Where it came from: "mtp" (the target's own head) or the draft checkpoint's path.
    pub source: String,
    drafter: DrafterBox,
    caches: Vec<SharedCache>,
    boxes: RVec<CacheBox>,
    /// Tokens the drafter's caches hold beyond the target's (the first
    /// token, for drafters that read it in `begin`).
    lead: i64,
    _weights: Option<Rc<HostWeights>>,
}

impl Drafter {
    fn new(family: &str, source: String, drafter: DrafterBox, weights: Option<Rc<HostWeights>>) -> Result<Self> {
        let mut d = Drafter {
            family: family.to_string(),
            source,
            drafter,
            caches: Vec::new(),
            boxes: RVec::new(),
            lead: 0,
            _weights: weights,
        };
        d.reset()?;
        Ok(d)
    }

    /// The target's own draft head (e.g. Qwen3.5's MTP layer), if its
    /// family builds one from the checkpoint.
    pub fn from_target(m: &LoadedModel) -> Result<Option<Drafter>> {
        let store = WeightStore_TO::from_ptr(&*m.weights, TD_Opaque);
        let store2 = WeightStore_TO::from_ptr(&*m.weights, TD_Opaque);
        let d = m
            .family
            .family
            .build_drafter(&m.plan, store, &m.plan, store2)
            .into_result()
            .map_err(|e| anyhow!("{}: {} plugin: building the drafter: {e}", m.source.location, m.family.name))?;
        d.into_option().map(|d| Drafter::new(&m.family.name, "mtp".into(), d, None)).transpose()
    }

    /// A separate draft checkpoint (`--draft-model DIR`) for target `m`.
    pub fn load(path: &Path, registry: &Registry, family: Option<&str>, m: &LoadedModel) -> Result<Drafter> {
        let (src, ck) = Source::open(path).with_context(|| format!("draft model {}", path.display()))?;
        let fam = registry.resolve(&ck.model_type, family).with_context(|| format!("{}", path.display()))?;
        let (plan, weights) = plan_and_rewrite(&fam, &src)?;
        // Embedding tables are often padded past the tokenizer (Qwen2.5
        // 0.5B vs 7B): sizes may differ when both tokenizers are the same.
        if plan.vocab_size != m.plan.vocab_size {
            let same = match (&ck.tokenizer, &m.tokenizer) {
                (Some(a), Some(b)) => {
                    let n = a.vocab_size();
                    n == b.vocab_size()
                        && n <= plan.vocab_size.min(m.plan.vocab_size) as usize
                        && (0..n as u32).all(|i| a.id_to_token(i) == b.id_to_token(i))
                }
                _ => false,
            };
            if !same {
                bail!(
                    "{}: the draft model's vocabulary ({} tokens) differs from the target's ({}) and their tokenizers are not the same",
                    path.display(),
                    plan.vocab_size,
                    m.plan.vocab_size
                );
            }
        }
        let store = WeightStore_TO::from_ptr(&*weights, TD_Opaque);
        let target = WeightStore_TO::from_ptr(&*m.weights, TD_Opaque);
        let d = fam
            .family
            .build_drafter(&plan, store, &m.plan, target)
            .into_result()
            .map_err(|e| anyhow!("{}: {} plugin: building the drafter: {e}", path.display(), fam.name))?;
        let Some(d) = d.into_option() else {
            bail!(
                "{}: the {} plugin builds no drafter from this checkpoint (model_type {:?})",
                path.display(),
                fam.name,
                ck.model_type
            );
        };
        Drafter::new(&fam.name, path.display().to_string(), d, Some(weights))
    }

    /// Tokens in the drafter's own caches.
    fn offset(&self) -> i64 {
        self.caches.first().map_or(0, |c| c.lock().offset())
    }

    /// Starts a conversation whose first token is `first`.
    fn begin(&mut self, first: u32) -> Result<()> {
        self.reset()?;
        let n = self
            .drafter
            .begin(first, &mut self.boxes)
            .into_result()
            .map_err(|e| anyhow!("{} drafter: {e}", self.family))?;
        self.lead = n as i64;
        self.eval_caches()
    }

    fn reset(&mut self) -> Result<()> {
        self.lead = 0;
        let kinds: Vec<_> = self.drafter.cache_kinds().into_iter().collect();
        self.caches = make_caches(&kinds, &CacheOptions::default())?;
        self.boxes = self.caches.iter().map(SharedCache::boxed).collect();
        Ok(())
    }

    /// Trims the drafter's caches to `offset` tokens; false when some cache
    /// could not rewind exactly (the caller starts them over).
    fn trim_to(&mut self, offset: i64) -> bool {
        let mut exact = true;
        for c in &self.caches {
            let mut c = c.lock();
            let n = c.offset() - offset;
            if n > 0 && c.trim(n) != n {
                exact = false;
            }
        }
        exact
    }

    fn eval_caches(&self) -> Result<()> {
        let arrays: Vec<Array> = self.caches.iter().flat_map(|c| c.lock().arrays()).collect();
        mlx::eval(&arrays.iter().collect::<Vec<_>>()).map_err(Into::into)
    }

    /// One step: (logits `[1, V]`, hidden `[1, 1, H]`).
    fn step(&mut self, target: &mut LoadedModel, hidden: &Array, tokens: &Array) -> Result<(Array, Array)> {
        let out = self
            .drafter
            .step(hidden.clone().into(), tokens.clone().into(), target.cache_boxes_mut(), &mut self.boxes)
            .into_result()
            .map_err(|e| anyhow!("{} drafter: {e}", self.family))?;
        let logits = out.logits.into_array();
        let (v, want) = (logits.dim(-1), target.plan.vocab_size as i32);
        if logits.size() != v as usize {
            return Err(anyhow!(
                "{} drafter: step returned logits of shape {:?}, expected [1, 1, {want}]",
                self.family,
                logits.shape(),
            ));
        }
        let logits = logits.reshape(&[1, v])?;
        // A padded table on either side (checked at load): cut the draft's
        // extra rows, or give the target's extra ids no probability.
        let logits = match v.cmp(&want) {
            std::cmp::Ordering::Equal => logits,
            std::cmp::Ordering::Greater => logits.slice_axis(1, 0, want)?,
            std::cmp::Ordering::Less => {
                let pad = mlx::full(&[1, want - v], &Array::f32(f32::NEG_INFINITY), logits.dtype())?;
                mlx::concatenate(&[&logits, &pad], 1)?
            }
        };
        Ok((logits, ArrayHandle::into_array(out.hidden)))
    }
}

/// Acceptance counts of a speculative generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftStats {
    /// Tokens the drafter proposed.
    pub proposed: usize,
    /// Of those, tokens the target accepted.
    pub accepted: usize,
    /// Verify rounds.
    pub rounds: usize,
}

/// Rewinds the target's caches so they hold `keep` of the `fed` tokens
/// the last forward appended: trims when every cache can, else goes back to
/// `cp` (taken before that forward) and feeds `tokens[..keep]` again.
fn rewind(m: &mut LoadedModel, cp: Option<&Checkpoint>, fed: usize, keep: usize, tokens: &Array) -> Result<()> {
    if keep == fed || m.trim(fed - keep) {
        return Ok(());
    }
    let cp = cp.ok_or_else(|| anyhow!("internal: a cache cannot rewind and no checkpoint was taken"))?;
    cp.restore_into(&m.caches)?;
    if keep > 0 {
        m.forward(&tokens.slice_axis(1, 0, keep as i32)?, LogitsWanted::None)?;
        m.eval_caches()?;
    }
    Ok(())
}

/// Generates after `prompt` with the drafter `d`, calling `on_token` per id
/// (false stops). Leaves the caches as [`crate::generate::generate`] does:
/// holding the prompt and every generated token but the last.
pub fn generate_speculative(
    m: &mut LoadedModel,
    d: &mut Drafter,
    prompt: &[u32],
    p: &GenParams,
    sp: &SpecParams,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    sp.validate()?;
    mlx::memory::reset_peak();
    let t0 = Instant::now();
    let greedy = p.sampler.temperature <= 0.0;
    // A new conversation starts the drafter over. Otherwise its caches must
    // not run ahead of the target's (a turn that rewound to a shorter common
    // prefix): trim them back, or start them over when they cannot rewind.
    let target_at = m.cache_offset();
    if target_at == 0 {
        d.begin(prompt.first().copied().ok_or_else(|| anyhow!("the prompt is empty: nothing to generate from"))?)?;
    } else if d.offset() > target_at + d.lead && !d.trim_to(target_at + d.lead) {
        d.reset()?;
    }

    // Prefill as the plain loop does (so the first logits are identical),
    // feeding each chunk's hidden states to the drafter together with the
    // tokens that follow them, once those are known.
    let mut pending: Option<(Array, Vec<u32>)> = None;
    let mut logits = None;
    prefill_chunks(m, prompt, p.prefill_step, true, p.cancel.as_deref(), |m, chunk, hidden, last| {
        let hidden = hidden.ok_or_else(|| anyhow!("no hidden state"))?;
        if let Some((h, mut toks)) = pending.take() {
            toks.push(chunk[0]);
            d.step(m, &h, &ids_array(&toks)?)?;
            d.eval_caches()?;
        }
        pending = Some((hidden, chunk[1..].to_vec()));
        logits = last;
        Ok(())
    })?;
    let logits = logits.ok_or_else(|| anyhow!("the model returned no logits"))?;
    crate::generate::checkpoint_prompt(m, p);
    let (mut hid, first_toks) = pending.take().ok_or_else(|| anyhow!("the prompt is empty"))?;
    let mut y = sample(&logits, &p.sampler)?.reshape(&[1, 1])?;
    let mut pend_tokens = concat_ids(&first_toks, &y)?;

    let mut tokens = Vec::new();
    let mut stats = DraftStats::default();
    let mut finish = Finish::Length;
    let mut t_first = None;
    // Entries of the last round kept in the caches past the
    // second-to-last emitted token, to give back at the end.
    let mut extra = 0usize;
    let mut last_round: Option<(Option<Checkpoint>, Array, usize)> = None;
    let mut release = crate::generate::DecodeRelease::default();
    'outer: loop {
        if tokens.len() >= p.max_tokens {
            break; // only when asked for no tokens at all
        }
        // Emit y (decided last round; not in the target's caches yet).
        let tok = y.item_i64()? as u32;
        release.tick(tokens.len());
        crate::memory::check()?;
        t_first.get_or_insert_with(Instant::now);
        extra = 0;
        if let Some(f) = emit(&mut tokens, tok, p, &mut on_token) {
            finish = f;
            break;
        }
        let remaining = p.max_tokens.saturating_sub(tokens.len());
        if remaining == 0 {
            break;
        }
        // Draft: the first step replays the positions accepted last round
        // with the target's hidden states; later steps chain the drafter's.
        let depth = sp.depth.min(remaining);
        let (mut lg, mut dh) = d.step(m, &hid, &pend_tokens)?;
        let own_keep = d.offset();
        let mut drafts: Vec<Array> = vec![y.clone()];
        let mut qs: Vec<Array> = Vec::new();
        for i in 0..depth {
            let t = sample(&lg, &p.sampler)?.reshape(&[1, 1])?;
            if !greedy {
                qs.push(probs(&lg, &p.sampler)?);
            }
            drafts.push(t.clone());
            if i + 1 == depth || !confident(&lg, &p.sampler, sp.min_confidence)? {
                break;
            }
            (lg, dh) = d.step(m, &dh, &t)?;
        }
        let k = drafts.len() - 1;
        // Verify [y, d1..dk] in one forward.
        let fed = mlx::concatenate(&drafts.iter().collect::<Vec<_>>(), 1)?;
        let snap = Checkpoint::take(&m.caches, k as i64 + 1, k as i64);
        let (vl, vh) = m.forward_io(&fed, LogitsWanted::All, true)?;
        let (vl, vh) = (vl.ok_or_else(|| anyhow!("no logits"))?, vh.ok_or_else(|| anyhow!("no hidden state"))?);
        let vl = vl.reshape(&[k as i32 + 1, -1])?;
        let draft_ids = fed.slice_axis(1, 1, k as i32 + 1)?.reshape(&[-1])?;
        let (accepted, bonus, dv) = if greedy {
            let tgt = vl.argmax(-1, false)?.astype(Dtype::I32)?;
            mlx::eval(&[&tgt, &draft_ids])?;
            let tv = tgt.to_vec::<i32>()?;
            let dv = draft_ids.to_vec::<i32>()?;
            let a = dv.iter().zip(&tv).take_while(|(d, t)| d == t).count();
            (a, tv[a], dv)
        } else {
            rejection(&vl, &qs, &draft_ids, &p.sampler)?
        };
        stats.proposed += k;
        stats.accepted += accepted;
        stats.rounds += 1;
        // Keep [y, d1..da]; the bonus token is next round's y.
        rewind(m, snap.as_ref(), k + 1, accepted + 1, &fed)?;
        if !d.trim_to(own_keep) {
            d.reset()?;
        }
        hid = vh.slice_axis(1, 0, accepted as i32 + 1)?;
        let next: Vec<u32> = dv[..accepted].iter().map(|&t| t as u32).chain([bonus as u32]).collect();
        pend_tokens = ids_array(&next)?;
        y = Array::from_slice(&[bonus], &[1, 1])?;
        last_round = Some((snap, fed, accepted + 1));
        for (j, &t) in dv[..accepted].iter().enumerate() {
            // The caches hold y, d1..da; the invariant wants them to end
            // just before this token.
            extra = accepted - j;
            if let Some(f) = emit(&mut tokens, t as u32, p, &mut on_token) {
                finish = f;
                break 'outer;
            }
            if tokens.len() >= p.max_tokens {
                break 'outer;
            }
        }
    }
    let t_end = Instant::now();
    if extra > 0 {
        let (snap, fed, kept) = last_round.as_ref().ok_or_else(|| anyhow!("internal: no verify round to rewind"))?;
        rewind(m, snap.as_ref(), *kept, kept - extra, fed)?;
    }
    Ok(GenStats::timed(prompt.len(), tokens, finish, [t0, t_first.unwrap_or(t_end), t_end], Some(stats)))
}

/// Whether the drafter is confident enough to draft another token: the top
/// probability of the distribution it drafts from (the sampler's, or the
/// plain softmax when greedy).
fn confident(logits: &Array, sampler: &crate::sample::SamplerParams, min: f32) -> Result<bool> {
    if min <= 0.0 {
        return Ok(true);
    }
    let p = if sampler.temperature > 0.0 {
        probs(logits, sampler)?
    } else {
        logits.astype(Dtype::F32)?.softmax(&[-1], true)?
    };
    Ok(p.max_all()?.item_f32()? >= min)
}

/// `[1, n + 1]` ids: `ids` then the (device) token `y`.
fn concat_ids(ids: &[u32], y: &Array) -> Result<Array> {
    let y = y.reshape(&[1, 1])?.astype(Dtype::I32)?;
    if ids.is_empty() {
        return Ok(y);
    }
    mlx::concatenate(&[&ids_array(ids)?, &y], 1).map_err(Into::into)
}

/// Rejection sampling of the drafts against the target's rows of logits
/// (one more row than drafts); returns (accepted count, the token that
/// follows them, the drafts as ids).
fn rejection(
    target_logits: &Array,
    q_rows: &[Array],
    drafts: &Array,
    sp: &crate::sample::SamplerParams,
) -> Result<(usize, i32, Vec<i32>)> {
    let k = q_rows.len() as i32;
    let p_all = probs(target_logits, sp)?; // [k+1, V]
    let q = mlx::concatenate(&q_rows.iter().collect::<Vec<_>>(), 0)?; // [k, V]
    let p_k = p_all.slice_axis(0, 0, k)?;
    let idx = drafts.reshape(&[k, 1])?;
    let pd = p_k.take_along_axis(&idx, -1)?;
    let qd = q.take_along_axis(&idx, -1)?;
    let u = mlx::random::uniform(0.0, 1.0, &[k, 1], Dtype::F32, None)?;
    // Accept with probability min(1, p/q), i.e. when u·q < p.
    let accept = u.mul(&qd)?.lt(&pd)?.reshape(&[-1])?;
    let resid = p_k.sub(&q)?.maximum(&Array::f32(0.0))?;
    let resid_tok = mlx::random::categorical(&resid.log()?, -1, None)?;
    let last = p_all.slice_axis(0, k, k + 1)?;
    let bonus = mlx::random::categorical(&last.log()?, -1, None)?;
    let (resid_tok, bonus) = (resid_tok.astype(Dtype::I32)?, bonus.astype(Dtype::I32)?);
    mlx::eval(&[&accept, &resid_tok, &bonus, drafts])?;
    let acc = accept.to_vec::<bool>()?;
    let a = acc.iter().take_while(|&&x| x).count();
    let b = if a < k as usize { resid_tok.to_vec::<i32>()?[a] } else { bonus.to_vec::<i32>()?[0] };
    Ok((a, b, drafts.to_vec::<i32>()?))
}
