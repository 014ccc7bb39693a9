//! Recurrent state (e.g. Qwen3.5's conv and delta-rule states): a fixed
//! number of arrays replaced wholesale each step.

use super::CacheImpl;
use mlx::{Array, Error, Result};

/// A recurrent-state cache.
#[derive(Clone)]
pub struct RecurrentCache {
    state: Vec<Option<Array>>,
    offset: i64,
}

impl RecurrentCache {
    /// A cache of `n` (initially absent) state arrays.
    pub fn new(n: usize) -> Self {
        RecurrentCache {
            state: vec![None; n],
            offset: 0,
        }
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
            return Err(Error(format!(
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
    fn trim(&mut self, _n: i64) -> i64 {
        // A recurrent state cannot be rewound; callers restore a snapshot instead.
        0
    }
    fn can_trim(&self, n: i64) -> bool {
        n == 0
    }
    fn snapshot(&self) -> Box<dyn CacheImpl> {
        Box::new(self.clone())
    }
}
