//! Binding overhead: build the lazy graph of one decode step of a 16-layer,
//! Llama-3.2-1B-shaped transformer through famlx's bindings, never evaluating
//! it, and report ns per issued op. `graph_build.py` issues the same op
//! sequence through MLX's Python API.
//!
//! ```text
//! cargo bench -p famlx-mlx --bench graph_build
//! /opt/ref/bin/python mlx/benches/graph_build.py
//! ```

use mlx::fast::{self, Mask, RopeOffset};
use mlx::{Array, Dtype, Result};
use std::time::Instant;

const LAYERS: usize = 16;
const HIDDEN: i32 = 2048;
const HEADS: i32 = 32;
const KV_HEADS: i32 = 8;
const HEAD_DIM: i32 = 64;
const INTER: i32 = 8192;
const VOCAB: i32 = 128256;
/// KV cache capacity.
const CACHE: i32 = 256;
/// Tokens already in the cache.
const OFFSET: i32 = 100;
const EPS: f32 = 1e-5;

struct Layer {
    ln1: Array,
    wq: Array,
    wk: Array,
    wv: Array,
    wo: Array,
    ln2: Array,
    wg: Array,
    wu: Array,
    wd: Array,
    kc: Array,
    vc: Array,
}

struct Model {
    embed: Array,
    norm: Array,
    layers: Vec<Layer>,
}

/// Lazily created zeros of the right shapes: never evaluated.
fn z(shape: &[i32]) -> Array {
    mlx::zeros(shape, Dtype::BF16).unwrap()
}

fn make_model() -> Model {
    let layers = (0..LAYERS)
        .map(|_| Layer {
            ln1: z(&[HIDDEN]),
            wq: z(&[HEADS * HEAD_DIM, HIDDEN]),
            wk: z(&[KV_HEADS * HEAD_DIM, HIDDEN]),
            wv: z(&[KV_HEADS * HEAD_DIM, HIDDEN]),
            wo: z(&[HIDDEN, HEADS * HEAD_DIM]),
            ln2: z(&[HIDDEN]),
            wg: z(&[INTER, HIDDEN]),
            wu: z(&[INTER, HIDDEN]),
            wd: z(&[HIDDEN, INTER]),
            kc: z(&[1, KV_HEADS, CACHE, HEAD_DIM]),
            vc: z(&[1, KV_HEADS, CACHE, HEAD_DIM]),
        })
        .collect();
    Model { embed: z(&[VOCAB, HIDDEN]), norm: z(&[HIDDEN]), layers }
}

/// `x @ w.T`, as `nn.Linear` does: two ops.
fn linear(x: &Array, w: &Array) -> Result<Array> {
    x.matmul(&w.t()?)
}

/// One decode step; returns the next token and the number of MLX ops issued.
fn step(m: &Model, tokens: &Array) -> Result<(Array, usize)> {
    let mut n = 0;
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let mut x = m.embed.take(tokens, 0)?; // [1, 1, H]
    n += 1;
    for l in &m.layers {
        let h = fast::rms_norm(&x, Some(&l.ln1), EPS)?;
        let q = linear(&h, &l.wq)?;
        let k = linear(&h, &l.wk)?;
        let v = linear(&h, &l.wv)?;
        n += 7;
        let q = q.reshape(&[1, 1, HEADS, HEAD_DIM])?.transpose(&[0, 2, 1, 3])?;
        let k = k.reshape(&[1, 1, KV_HEADS, HEAD_DIM])?.transpose(&[0, 2, 1, 3])?;
        let v = v.reshape(&[1, 1, KV_HEADS, HEAD_DIM])?.transpose(&[0, 2, 1, 3])?;
        n += 6;
        let q = fast::rope(&q, HEAD_DIM, false, Some(500000.0), 1.0, RopeOffset::Int(OFFSET), None)?;
        let k = fast::rope(&k, HEAD_DIM, false, Some(500000.0), 1.0, RopeOffset::Int(OFFSET), None)?;
        n += 2;
        let (s, e) = ([0, 0, OFFSET, 0], [1, KV_HEADS, OFFSET + 1, HEAD_DIM]);
        // New handles on the caches, as the Python side does; the stored
        // caches stay unchanged so the steps do not chain into one graph.
        let (kc, vc) = (l.kc.clone(), l.vc.clone());
        let kc = kc.slice_update(&k, &s, &e, &[1; 4])?;
        let vc = vc.slice_update(&v, &s, &e, &[1; 4])?;
        let keys = kc.slice_axis(2, 0, OFFSET + 1)?;
        let values = vc.slice_axis(2, 0, OFFSET + 1)?;
        n += 4;
        let o = fast::scaled_dot_product_attention(&q, &keys, &values, scale, Mask::None, None)?;
        let o = o.transpose(&[0, 2, 1, 3])?.reshape(&[1, 1, HEADS * HEAD_DIM])?;
        x = x.add(&linear(&o, &l.wo)?)?;
        n += 6;
        let h = fast::rms_norm(&x, Some(&l.ln2), EPS)?;
        let g = linear(&h, &l.wg)?;
        let u = linear(&h, &l.wu)?;
        let a = g.mul(&g.sigmoid()?)?.mul(&u)?;
        x = x.add(&linear(&a, &l.wd)?)?;
        n += 11;
    }
    let x = fast::rms_norm(&x, Some(&m.norm), EPS)?;
    let logits = linear(&x, &m.embed)?;
    let last = logits.slice_axis(1, -1, i32::MAX)?;
    let tok = last.argmax(-1, false)?;
    n += 5;
    Ok((tok, n))
}

fn main() {
    let m = make_model();
    let tokens = Array::from_slice(&[1i32], &[1, 1]).unwrap();
    let mut ops = 0;
    for _ in 0..5 {
        let (tok, n) = step(&m, &tokens).unwrap();
        ops = n;
        drop(tok);
    }
    let mut times = Vec::new();
    for _ in 0..50 {
        let t0 = Instant::now();
        let (tok, n) = step(&m, &tokens).unwrap();
        let dt = t0.elapsed().as_nanos() as f64;
        drop(tok);
        ops = n;
        times.push(dt);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let med = times[times.len() / 2];
    let best = times[0];
    println!(
        "rust graph_build: {ops} ops per step, median {:.1} us/step, {:.0} ns/op (best {:.0} ns/op), mlx {}",
        med / 1e3,
        med / ops as f64,
        best / ops as f64,
        mlx::runtime_version()
    );

    // The binding's own share of an op: one shim round trip that makes and
    // frees a handle (what every op pays on top of MLX's C++ work).
    let x = &m.norm;
    let n = 200_000;
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(x.clone());
    }
    let per = t0.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "rust binding floor: {per:.0} ns per handle round trip (clone + drop through the shim), \
         about {:.1}% of the step",
        100.0 * per * ops as f64 / med
    );
}
