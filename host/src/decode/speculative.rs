//! Speculative decoding, for every family with a drafter: a draft head
//! proposes up to `depth` tokens (one [`plugin_api::abi::Drafter::step`] each),
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

use super::drafter::{Drafter, SpecParams};
use super::logits_processors::{mask_logits, LogitsParams};
use super::params::{emit, DecodeRelease, DraftStats, FinishReason, GenParams, GenStats};
use super::plain::prompt_rollback;
use super::prefill::{ids_array, prefill_chunks};
use crate::cache::Rollback;
use crate::grammar::GrammarConstraint;
use crate::model::{LoadedModel, Sequence};
use crate::sample::{probs, sample};
use anyhow::{anyhow, Result};
use mlx::{Array, Dtype};
use plugin_api::{LogitsWanted, TokenSource};
use std::time::Instant;

/// Rewinds `seq`'s caches so they hold `keep` of the `fed` tokens the
/// last forward appended: trims when every cache can, else goes back to
/// `cp` (taken before that forward) and feeds `tokens[..keep]` again.
fn rewind(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    cp: Option<&Rollback>,
    fed: usize,
    keep: usize,
    tokens: &Array,
) -> Result<()> {
    if keep == fed || seq.trim(fed - keep) {
        return Ok(());
    }
    let cp = cp.ok_or_else(|| anyhow!("internal: a cache cannot rewind and no checkpoint was taken"))?;
    seq.restore(cp)?;
    if keep > 0 {
        m.forward(&mut *seq, &tokens.slice_axis(1, 0, keep as i32)?, TokenSource::Generated, LogitsWanted::None)?;
        seq.eval_caches()?;
    }
    Ok(())
}

/// One drafter step on `seq` (its caches and its drafter caches).
fn draft_step(m: &LoadedModel, d: &mut Drafter, seq: &mut Sequence, h: &Array, t: &Array) -> Result<(Array, Array)> {
    let (target, own) = seq.draft_parts()?;
    d.step(m.plan.vocab_size, target, own, h, t)
}

/// Generates after `prompt` on `seq` with the drafter `d` (its caches the
/// sequence's [`Sequence::draft`]), calling `on_token` per id (false
/// stops). Leaves the caches as [`super::generate`] does: holding the
/// prompt and every generated token but the last.
pub fn generate_speculative(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    d: &mut Drafter,
    prompt: &[u32],
    p: &GenParams,
    sp: &SpecParams,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    sp.validate()?;
    mlx::memory::reset_peak();
    let t0 = Instant::now();
    // A new conversation starts the drafter over. Otherwise its caches must
    // not run ahead of the target's (a turn that rewound to a shorter common
    // prefix): trim them back, or start them over when they cannot rewind.
    // Caches another drafter made (one swapped in since) are not this one's.
    if !seq.draft.as_ref().is_some_and(|c| d.owns(c)) {
        seq.draft = Some(d.fresh_caches()?);
    }
    let target_at = seq.cache_offset();
    let own = seq.draft_parts()?.1;
    if target_at == 0 {
        d.begin(own, prompt.first().copied().ok_or_else(|| anyhow!("the prompt is empty: nothing to generate from"))?)?;
    } else if own.offset() > target_at + own.lead() && !own.trim_to(target_at + own.lead()) {
        *own = d.fresh_caches()?;
    }

    // Prefill as the plain loop does (so the first logits are identical),
    // feeding each chunk's hidden states to the drafter together with the
    // tokens that follow them, once those are known.
    let mut pending: Option<(Array, Vec<u32>)> = None;
    let mut logits = None;
    prefill_chunks(m, seq, prompt, p.prefill_step, true, p.cancel.as_deref(), |m, seq, chunk, hidden, last| {
        let hidden = hidden.ok_or_else(|| anyhow!("no hidden state"))?;
        if let Some((h, mut toks)) = pending.take() {
            toks.push(chunk[0]);
            draft_step(m, d, seq, &h, &ids_array(&toks)?)?;
            seq.draft_parts()?.1.eval_caches()?;
        }
        pending = Some((hidden, chunk[1..].to_vec()));
        logits = last;
        Ok(())
    })?;
    let logits = logits.ok_or_else(|| anyhow!("the model returned no logits"))?;
    let prompt_rollback = prompt_rollback(seq, p);
    let (mut hid, first_toks) = pending.take().ok_or_else(|| anyhow!("the prompt is empty"))?;
    let mut y = sample(&logits, &p.sampler)?.reshape(&[1, 1])?;
    let mut pend_tokens = concat_ids(&first_toks, &y)?;

    let mut tokens = Vec::new();
    let mut stats = DraftStats::default();
    let mut finish = FinishReason::Length;
    let mut t_first = None;
    // Entries of the last round kept in the caches past the
    // second-to-last emitted token, to give back at the end.
    let mut extra = 0usize;
    let mut last_round: Option<Round> = None;
    let mut release = DecodeRelease::default();
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
        let depth = sp.depth.min(remaining);
        let guide = RoundGuide::default();
        let r = round(m, seq, d, &mut hid, &mut pend_tokens, &y, depth, &p.sampler, sp.min_confidence, guide)?;
        stats.proposed += r.proposed;
        stats.accepted += r.accepted.len();
        stats.rounds += 1;
        y = Array::from_slice(&[r.bonus as i32], &[1, 1])?;
        let r = last_round.insert(r);
        for (j, &t) in r.accepted.iter().enumerate() {
            // The caches hold y, d1..da; the invariant wants them to end
            // just before this token.
            extra = r.accepted.len() - j;
            if let Some(f) = emit(&mut tokens, t, p, &mut on_token) {
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
        let r = last_round.as_ref().ok_or_else(|| anyhow!("internal: no verify round to rewind"))?;
        r.give_back(m, seq, extra)?;
    }
    let mut out = GenStats::timed(prompt.len(), tokens, finish, [t0, t_first.unwrap_or(t_end), t_end], Some(stats));
    out.prompt_rollback = prompt_rollback;
    Ok(out)
}

/// What one draft-and-verify round decided. The target's caches then hold
/// the round's first token and the accepted drafts; the bonus token is not
/// fed yet.
pub struct Round {
    /// The drafts the target agreed with, in order.
    pub accepted: Vec<u32>,
    /// The target's own token after them.
    pub bonus: u32,
    /// Drafts proposed.
    pub proposed: usize,
    /// The target's logits at each verified position `[k + 1, V]` (masked
    /// by the grammar, when there is one): row `j` is the distribution the
    /// `j`-th kept token was drawn from, for its logprobs.
    pub logits: Array,
    snap: Option<Rollback>,
    fed: Array,
}

impl Round {
    /// Gives back the last `extra` tokens the round left in `seq`'s caches
    /// (the reply ended before them).
    pub(crate) fn give_back(&self, m: &mut LoadedModel, seq: &mut Sequence, extra: usize) -> Result<()> {
        let kept = self.accepted.len() + 1;
        rewind(m, seq, self.snap.as_ref(), kept, kept - extra.min(kept), &self.fed)
    }
}

/// What shapes a request's logits in a round beyond its sampler.
#[derive(Default)]
pub struct RoundGuide<'a> {
    /// Its grammar, past `y` already.
    pub grammar: Option<&'a mut GrammarConstraint>,
    /// Its bias and penalties, with the tokens they look back over (through
    /// `y`).
    pub logits: Option<(&'a LogitsParams, &'a [u32])>,
}

/// One round after the token `y` (drawn, not in the target's caches yet):
/// the drafter proposes up to `depth` tokens (its first step replays
/// `pend`, the positions accepted last round, with the target's hidden
/// states `hid`), one target forward verifies `[y, drafts]`, and both
/// models' caches are rolled back to the accepted prefix. `hid` and `pend`
/// are updated for the next round. With a grammar (`guide.grammar`), every
/// draft and every verified position is masked by the grammar's state after
/// the tokens before it; the grammar is left where it was. With penalties
/// (`guide.logits`), each draft and verified position is penalised for the
/// tokens before it, drafts included.
#[allow(clippy::too_many_arguments)]
pub(crate) fn round(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    d: &mut Drafter,
    hid: &mut Array,
    pend: &mut Array,
    y: &Array,
    depth: usize,
    sampler: &crate::sample::SamplerParams,
    min_confidence: f32,
    guide: RoundGuide<'_>,
) -> Result<Round> {
    let RoundGuide { grammar: mut guide, logits: penalties } = guide;
    let greedy = sampler.temperature <= 0.0;
    let (mut lg, mut dh) = draft_step(m, d, seq, hid, pend)?;
    let own_keep = seq.draft_parts()?.1.offset();
    // What the penalties look back over: the request's tokens, then the drafts.
    let mut hist: Vec<u32> = penalties.map_or_else(Vec::new, |(_, h)| h.to_vec());
    let mut drafts: Vec<Array> = vec![y.reshape(&[1, 1])?.astype(Dtype::I32)?];
    let mut qs: Vec<Array> = Vec::new();
    // Per verified position, the grammar's allowed tokens there.
    let mut masks: Vec<Vec<u32>> = Vec::new();
    for i in 0..depth {
        if let Some((p, _)) = penalties {
            lg = p.apply(&lg, &hist)?;
        }
        if let Some(g) = guide.as_deref_mut() {
            let allowed = g.allowed()?;
            lg = mask_logits(&lg, &allowed)?;
            masks.push(allowed);
        }
        let t = sample(&lg, sampler)?.reshape(&[1, 1])?.astype(Dtype::I32)?;
        if !greedy {
            qs.push(probs(&lg, sampler)?);
        }
        drafts.push(t.clone());
        let last = i + 1 == depth || !confident(&lg, sampler, min_confidence)?;
        let id = if guide.is_some() || penalties.is_some() { Some(t.item_i64()? as u32) } else { None };
        // (A draft the grammar refuses stays here past the last verified
        // row, which never reads it.)
        hist.extend(id);
        if let Some(g) = guide.as_deref_mut() {
            // Tentatively, to mask what follows; taken back after the verify.
            if g.accept(id.unwrap_or_default()).is_err() {
                // Not a token the grammar takes after all: not a draft.
                drafts.pop();
                break;
            }
            if g.is_done() {
                masks.push(g.allowed().unwrap_or_default());
                break;
            }
            if last {
                masks.push(g.allowed()?);
            }
        }
        if last {
            break;
        }
        (lg, dh) = draft_step(m, d, seq, &dh, &t)?;
    }
    let k = drafts.len() - 1;
    if let Some(g) = guide.as_deref_mut() {
        if masks.is_empty() {
            masks.push(g.allowed()?);
        }
    }
    // Verify [y, d1..dk] in one forward.
    let fed = mlx::concatenate(&drafts.iter().collect::<Vec<_>>(), 1)?;
    let snap = Rollback::take(seq.caches(), k as i64 + 1, k as i64);
    let (vl, vh) = m.forward_io(&mut *seq, &fed, TokenSource::Generated, LogitsWanted::All, true)?;
    let (vl, vh) = (vl.ok_or_else(|| anyhow!("no logits"))?, vh.ok_or_else(|| anyhow!("no hidden state"))?);
    let mut vl = vl.reshape(&[k as i32 + 1, -1])?;
    if penalties.is_some() || guide.is_some() {
        // Row j follows `y` and the first j drafts: penalised for them, then
        // masked by the grammar's state after them.
        let rows = (0..=k)
            .map(|j| {
                let mut row = vl.slice_axis(0, j as i32, j as i32 + 1)?;
                if let Some((p, h)) = penalties {
                    row = p.apply(&row, &hist[..h.len() + j])?;
                }
                match masks.get(j) {
                    Some(a) => mask_logits(&row, a),
                    None => Ok(row),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        vl = mlx::concatenate(&rows.iter().collect::<Vec<_>>(), 0)?;
    }
    if let Some(g) = guide {
        // The drafts consumed above: the row's emits advance the grammar
        // through the tokens kept.
        g.rollback(masks.len() - 1)?;
    }
    let draft_ids = fed.slice_axis(1, 1, k as i32 + 1)?.reshape(&[-1])?;
    let (accepted, bonus, dv) = if greedy {
        let tgt = vl.argmax(-1, false)?.astype(Dtype::I32)?;
        mlx::eval(&[&tgt, &draft_ids])?;
        let tv = tgt.to_vec::<i32>()?;
        let dv = draft_ids.to_vec::<i32>()?;
        let a = dv.iter().zip(&tv).take_while(|(d, t)| d == t).count();
        (a, tv[a], dv)
    } else {
        rejection(&vl, &qs, &draft_ids, sampler)?
    };
    // Keep [y, d1..da]; the bonus token is next round's y.
    rewind(m, seq, snap.as_ref(), k + 1, accepted + 1, &fed)?;
    let own = seq.draft_parts()?.1;
    if !own.trim_to(own_keep) {
        *own = d.fresh_caches()?;
    }
    *hid = vh.slice_axis(1, 0, accepted as i32 + 1)?;
    let next: Vec<u32> = dv[..accepted].iter().map(|&t| t as u32).chain([bonus as u32]).collect();
    *pend = ids_array(&next)?;
    Ok(Round { accepted: next[..accepted].to_vec(), bonus: bonus as u32, proposed: k, logits: vl, snap, fed })
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
