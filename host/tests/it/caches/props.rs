//! Property tests of the caches: random sequences of update, trim,
//! snapshot, restore and save/load on dense, quantized, rotating and
//! recurrent caches agree with a plain model of what each must hold.
//!
//! Every token's key row encodes its position (`pos + (d % 2)`; values
//! `-pos`), so what a cache returns can be read back as positions, through
//! quantization too.

use crate::common;

use famlx::cache::{self, CacheImpl, KvCache, QBits, QuantizedKvCache, RecurrentCache, RotatingKvCache};
use mlx::{Array, Dtype};
use proptest::prelude::*;
use std::collections::HashMap;

const D: i32 = 32;

#[derive(Debug, Clone)]
enum Op {
    /// Append this many tokens at once.
    Update(usize),
    /// Drop the last n tokens where the cache says it can.
    Trim(i64),
    /// Keep a copy.
    Snapshot,
    /// Go back to the last copy.
    Restore,
    /// Write the cache out and read it back.
    SaveLoad,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..=5).prop_map(Op::Update),
        2 => (0i64..=4).prop_map(Op::Trim),
        1 => Just(Op::Snapshot),
        1 => Just(Op::Restore),
        1 => Just(Op::SaveLoad),
    ]
}

/// Keys and values `[1, 1, n, D]` of positions `start..start + n`.
fn kv(start: i64, n: usize) -> (Array, Array) {
    let mut k = Vec::new();
    for p in start..start + n as i64 {
        k.extend((0..D).map(|d| p as f32 + (d % 2) as f32));
    }
    let v: Vec<f32> = k.iter().map(|x| -x).collect();
    let shape = [1, 1, n as i32, D];
    (Array::from_slice(&k, &shape).unwrap(), Array::from_slice(&v, &shape).unwrap())
}

/// The positions an array of rows written by [`kv`] holds, in order.
fn positions(k: &Array, sign: f32) -> Vec<i64> {
    let rows = k.astype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    rows.chunks(D as usize).map(|r| (sign * r[0]).round() as i64).collect()
}

/// What the cache must hold: positions (in the order a KV cache returns
/// them; rotating caches are compared as sets) and the token count.
#[derive(Debug, Clone, PartialEq)]
struct Model {
    held: Vec<i64>,
    offset: i64,
}

/// How the model's window behaves.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Dense,
    Quantized,
    Rotating { max: i64, keep: i64 },
    Recurrent,
}

fn make(kind: Kind) -> Box<dyn CacheImpl> {
    match kind {
        Kind::Dense => Box::new(KvCache::new()),
        Kind::Quantized => {
            let q = Some(QBits { bits: 8, group_size: 32 });
            Box::new(QuantizedKvCache::new(q, q))
        }
        Kind::Rotating { max, keep } => Box::new(RotatingKvCache::new(max as usize, keep as usize, None).unwrap()),
        Kind::Recurrent => Box::new(RecurrentCache::new(2)),
    }
}

impl Model {
    fn update(&mut self, kind: Kind, n: usize) {
        let new = self.offset..self.offset + n as i64;
        self.offset += n as i64;
        match kind {
            Kind::Rotating { max, keep } => {
                self.held.extend(new);
                if self.held.len() as i64 > max {
                    // The pinned prefix and the newest positions stay.
                    let tail = (max - keep) as usize;
                    let mut h: Vec<i64> = self.held[..keep as usize].to_vec();
                    h.extend_from_slice(&self.held[self.held.len() - tail..]);
                    self.held = h;
                }
            }
            Kind::Recurrent => self.held = vec![self.offset],
            _ => self.held.extend(new),
        }
    }

    /// Whether dropping the last `n` tokens is exact for this model.
    fn can_trim(&self, kind: Kind, n: i64) -> bool {
        match kind {
            Kind::Recurrent => n == 0,
            // Nothing has left the window.
            Kind::Rotating { .. } => n == 0 || (self.held.len() as i64 == self.offset && n <= self.offset),
            _ => n <= self.offset,
        }
    }
}

/// What `c` holds, as positions.
fn observe(kind: Kind, c: &dyn CacheImpl) -> Vec<i64> {
    if let Kind::Recurrent = kind {
        return c.state().first().map(|s| vec![s.item_i64().unwrap()]).unwrap_or_default();
    }
    match c.fetch().unwrap() {
        None => Vec::new(),
        Some((k, v)) => {
            let (pk, pv) = (positions(&k, 1.0), positions(&v, -1.0));
            assert_eq!(pk, pv, "keys and values disagree");
            pk
        }
    }
}

fn check(kind: Kind, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut c = make(kind);
    let mut m = Model { held: Vec::new(), offset: 0 };
    let mut snaps: Vec<(Box<dyn CacheImpl>, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Update(n) => {
                if let Kind::Recurrent = kind {
                    let s = Array::from_slice(&[m.offset + *n as i64], &[1]).unwrap();
                    c.set_state(vec![s.clone(), s], *n as i64).unwrap();
                } else {
                    let (k, v) = kv(m.offset, *n);
                    c.update(k, v).unwrap();
                }
                m.update(kind, *n);
            }
            Op::Trim(n) => {
                let want = m.can_trim(kind, *n);
                prop_assert_eq!(c.can_trim(*n), want, "can_trim({}) with {:?}", n, m);
                if want {
                    prop_assert_eq!(c.trim(*n), *n);
                    m.offset -= n;
                    let keep = m.held.len() - *n as usize;
                    m.held.truncate(keep);
                }
            }
            Op::Snapshot => snaps.push((c.snapshot(), m.clone())),
            Op::Restore => {
                if let Some((s, sm)) = snaps.last() {
                    c = s.snapshot();
                    m = sm.clone();
                }
            }
            Op::SaveLoad => {
                let (arrays, meta) = c.save().unwrap();
                let map: HashMap<String, Array> = arrays.into_iter().collect();
                c = cache::load(&meta, &map).unwrap();
            }
        }
        prop_assert_eq!(c.offset(), m.offset, "offset after {:?}", op);
        let mut got = observe(kind, c.as_ref());
        let mut want = m.held.clone();
        if let Kind::Rotating { .. } = kind {
            // A ring buffer: order is the ring's.
            got.sort_unstable();
            want.sort_unstable();
        }
        prop_assert_eq!(got, want, "held after {:?} ({:?})", op, ops);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn dense_cache_matches_its_model(ops in prop::collection::vec(op(), 1..14)) {
        let _g = common::mlx_lock();
        check(Kind::Dense, &ops)?;
    }

    #[test]
    fn quantized_cache_matches_its_model(ops in prop::collection::vec(op(), 1..14)) {
        let _g = common::mlx_lock();
        check(Kind::Quantized, &ops)?;
    }

    #[test]
    fn rotating_cache_matches_its_model(
        (max, keep) in (3i64..10).prop_flat_map(|m| (Just(m), 0i64..3.min(m - 1))),
        ops in prop::collection::vec(op(), 1..16),
    ) {
        let _g = common::mlx_lock();
        check(Kind::Rotating { max, keep }, &ops)?;
    }

    #[test]
    fn recurrent_cache_matches_its_model(ops in prop::collection::vec(op(), 1..14)) {
        let _g = common::mlx_lock();
        check(Kind::Recurrent, &ops)?;
    }
}

/// A cache quantized once due (`--quantized-kv-start`) is still exact to
/// trim back to where quantizing began, and no further.
#[test]
fn quantize_when_due_trims_back_to_the_start() {
    let _g = common::mlx_lock();
    let opts = cache::CacheOptions {
        k_bits: Some(8),
        v_bits: Some(8),
        kv_group_size: 32,
        quantized_kv_start: 4,
        ..Default::default()
    };
    let caches = cache::make_caches(&[plugin_api::CacheKind::Full], &opts).unwrap();
    let c = &caches[0];
    for start in [0, 3, 6] {
        let (k, v) = kv(start, 3);
        let mut b = c.boxed();
        let out = b.update_and_fetch(k.into(), v.into()).into_result().unwrap();
        assert_eq!(positions(&out.0.into_array(), 1.0), (0..start + 3).collect::<Vec<_>>());
    }
    let g = c.lock();
    assert!(g.can_trim(5), "back to 4, where quantizing began");
    assert!(!g.can_trim(6), "below the quantized start");
}
