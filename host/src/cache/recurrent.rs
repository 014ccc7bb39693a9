//! Recurrent state (e.g. Qwen3.5's conv and delta-rule states): a fixed
//! number of arrays replaced wholesale each step.

use super::layer::{field, tensor, CacheImpl, Pack, SavedCache};
use mlx::{Array, Error, Result};
use serde_json::{json, Value};
use std::collections::HashMap;

/// A recurrent-state cache.
#[derive(Clone)]
pub struct RecurrentCache {
    state: Vec<Option<Array>>,
    offset: i64,
}

impl RecurrentCache {
    /// A cache of `n` (initially absent) state arrays.
    pub fn new(n: usize) -> Self {
        RecurrentCache { state: vec![None; n], offset: 0 }
    }

    /// A cache holding `state` after `offset` tokens.
    pub fn from_state(state: Vec<Array>, offset: i64) -> Self {
        RecurrentCache { state: state.into_iter().map(Some).collect(), offset }
    }

    /// Rebuilds a cache [`CacheImpl::save`] wrote.
    pub fn load(meta: &Value, arrays: &HashMap<String, Array>) -> Result<Self> {
        let count: usize = field(meta, "count")?;
        let present: bool = field(meta, "present")?;
        let state = (0..count)
            .map(|i| present.then(|| tensor(arrays, &format!("state.{i}"))).transpose())
            .collect::<Result<_>>()?;
        Ok(RecurrentCache { state, offset: field(meta, "offset")? })
    }
}

impl CacheImpl for RecurrentCache {
    fn offset(&self) -> i64 {
        self.offset
    }
    fn update(&mut self, _k: Array, _v: Array) -> Result<(Array, Array)> {
        Err(Error::msg("a recurrent-state cache holds no keys/values"))
    }
    fn fetch(&self) -> Result<Option<(Array, Array)>> {
        Ok(None)
    }
    fn state(&self) -> Vec<Array> {
        // Absent entries are returned as empty so the plugin can tell "no state yet".
        if self.state.iter().any(Option::is_none) {
            return Vec::new();
        }
        self.state.iter().flatten().cloned().collect()
    }
    fn set_state(&mut self, s: Vec<Array>, tokens: i64) -> Result<()> {
        if s.len() != self.state.len() {
            return Err(Error::msg(format!(
                "recurrent cache expects {} state arrays, got {}",
                self.state.len(),
                s.len()
            )));
        }
        self.state = s.into_iter().map(Some).collect();
        self.offset += tokens;
        Ok(())
    }
    fn arrays(&self) -> Vec<Array> {
        self.state.iter().flatten().cloned().collect()
    }
    fn pack(&self) -> Option<Pack> {
        let s = self.state();
        (!s.is_empty()).then(|| Pack::State(s, self.offset))
    }
    fn trim(&mut self, _n: i64) -> i64 {
        // A recurrent state cannot be rewound; callers restore a snapshot instead.
        0
    }
    fn can_trim(&self, n: i64) -> bool {
        n == 0
    }
    fn can_trim_after(&self, _added: i64, n: i64) -> bool {
        n == 0
    }
    fn snapshot(&self) -> Box<dyn CacheImpl> {
        Box::new(self.clone())
    }
    fn save(&self) -> Result<SavedCache> {
        // The state is all or nothing (see `state`): absent entries save as "not yet".
        let present = self.state.iter().all(Option::is_some);
        let arrays = if present {
            self.state.iter().flatten().enumerate().map(|(i, a)| (format!("state.{i}"), a.clone())).collect()
        } else {
            Vec::new()
        };
        let meta = json!({
            "kind": "recurrent",
            "offset": self.offset,
            "count": self.state.len(),
            "present": present,
        });
        Ok((arrays, meta))
    }
}
