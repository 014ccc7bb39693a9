//! Continuous batching at the model level: sequences prefilled into their
//! own caches and decoded together, one forward per step, joining and
//! leaving at different steps, give each the greedy tokens it gives alone,
//! for every family and cache kind.

use crate::common;

use common::{fixture, mlx_lock, registry};
use famlx::cache::{BatchCaches, CacheOptions, SharedCache};
use famlx::decode::{decode_step, generate, prefill_into, GenParams};
use famlx::model::{LoadedModel, Sequence};

fn load(variant: &str, opts: CacheOptions) -> LoadedModel {
    LoadedModel::load(&fixture(variant), &registry(), None, opts).unwrap_or_else(|e| panic!("{variant}: load: {e:#}"))
}

/// Prompts of different lengths (ids spread over the vocabulary).
fn prompts(vocab: u32) -> Vec<Vec<u32>> {
    (0..6).map(|i| (0..(3 + 7 * i)).map(|j| (17 + 31 * j + 101 * i) as u32 % vocab).collect()).collect()
}

fn argmax_rows(l: &mlx::Array) -> Vec<u32> {
    l.argmax(-1, false)
        .unwrap()
        .astype(mlx::Dtype::I32)
        .unwrap()
        .to_vec::<i32>()
        .unwrap()
        .into_iter()
        .map(|t| t as u32)
        .collect()
}

fn batch_equals_alone(variant: &str, opts: CacheOptions) {
    let _g = mlx_lock();
    let mut m = load(variant, opts.clone());
    let ps = prompts(m.plan.vocab_size);
    let counts: Vec<usize> = (0..ps.len()).map(|i| 6 + (i * 5) % 9).collect();
    let alone: Vec<Vec<u32>> = ps
        .iter()
        .zip(&counts)
        .map(|(p, &n)| {
            let mut seq = m.sequence().unwrap();
            let gp = GenParams { max_tokens: n, prefill_step: 8, stop_ids: vec![], ..GenParams::default() };
            generate(&mut m, &mut seq, p, &gp, |_| true).unwrap().tokens
        })
        .collect();
    // Row i joins at step i (its prompt prefilled in chunks of 8 between steps) and leaves after counts[i] tokens.
    struct Row {
        seq: Sequence,
        out: Vec<u32>,
        id: usize,
    }
    let mut active: Vec<Row> = Vec::new();
    let mut batch = BatchCaches::new();
    let mut done: Vec<Option<Vec<u32>>> = vec![None; ps.len()];
    let mut next = 0;
    for _step in 0..200 {
        if next < ps.len() {
            let mut seq = m.sequence().unwrap();
            let l = prefill_into(&mut m, &mut seq, &ps[next], 8, None).unwrap();
            active.push(Row { seq, out: argmax_rows(&l), id: next });
            next += 1;
        }
        let tokens: Vec<u32> = active.iter().map(|r| *r.out.last().unwrap()).collect();
        if !tokens.is_empty() {
            let rows: Vec<(u64, &[SharedCache])> = active.iter().map(|r| (r.id as u64, r.seq.caches())).collect();
            batch.set_rows(&rows).unwrap();
            let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
            let ids = mlx::Array::from_slice(&ids, &[ids.len() as i32]).unwrap();
            let l = decode_step(&mut m, &batch, &ids).unwrap_or_else(|e| panic!("{variant}: {e:#}"));
            for (r, t) in active.iter_mut().zip(argmax_rows(&l)) {
                r.out.push(t);
            }
        }
        active.retain(|r| {
            if r.out.len() >= counts[r.id] {
                // Leaving writes the row back into its own caches.
                batch.release(r.id as u64).unwrap();
                assert_eq!(r.seq.caches()[0].lock().offset() as usize, ps[r.id].len() + r.out.len() - 1, "{variant}");
                done[r.id] = Some(r.out[..counts[r.id]].to_vec());
                false
            } else {
                true
            }
        });
        if next == ps.len() && active.is_empty() {
            break;
        }
    }
    let together: Vec<Vec<u32>> = done.into_iter().map(Option::unwrap).collect();
    assert_eq!(together, alone, "{variant} {opts:?}: batched greedy tokens differ from each sequence's own");
}

#[test]
fn llama_dense() {
    batch_equals_alone("llama-tied-f32", CacheOptions::default());
}

#[test]
fn llama_quantized_kv() {
    let o = CacheOptions { k_bits: Some(8), v_bits: Some(8), kv_group_size: 32, ..CacheOptions::default() };
    batch_equals_alone("llama-tied-f32", o);
}

#[test]
fn llama_rotating_window() {
    batch_equals_alone("llama-tied-f32", CacheOptions { max_kv_size: Some(20), ..CacheOptions::default() });
}

#[test]
fn qwen3_5_moe_recurrent() {
    batch_equals_alone("qwen3_5_moe-f32", CacheOptions::default());
}

#[test]
fn gemma4_sliding_and_shared_kv() {
    batch_equals_alone("gemma4-vision-f32", CacheOptions::default());
}

#[test]
fn gemma4_unified() {
    batch_equals_alone("gemma4_unified-f32", CacheOptions::default());
}
