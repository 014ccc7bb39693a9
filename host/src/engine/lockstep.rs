//! An engine split over ranks (`famlx launch -- serve`): rank 0 takes the
//! requests; every rank runs the same engine, turn by turn. At the start
//! of each turn rank 0 sends what only it knows to the others: the
//! requests that arrived (as they came to the front end, which makes them
//! again on each rank, with the seed rank 0 chose), which
//! rows end now (a client gone, a deadline passed) and whether the server
//! is closing. Everything else the engine decides alike on every rank.

use crate::decode::FinishReason;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

/// One request as rank 0 received it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Arrival {
    /// The request as the front end can make it again ([`super::Request::origin`]).
    pub origin: String,
    /// Its id.
    pub id: String,
    /// Its sampling seed.
    pub seed: u64,
}

/// What rank 0 tells the others at the start of a turn.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Turn {
    /// Requests that join this turn, in order.
    pub arrivals: Vec<Arrival>,
    /// Rows (by serial) that end at their next token, and why.
    pub halts: Vec<(u64, FinishReason)>,
    /// No more requests will come and no row is left: the engine stops.
    pub closed: bool,
}

/// Rank 0: sends `turn` to every rank.
pub fn lead(turn: &Turn) -> Result<()> {
    crate::distributed::broadcast_text(Some(&serde_json::to_string(turn)?))?;
    Ok(())
}

/// Another rank: the turn rank 0 sent.
pub fn follow() -> Result<Turn> {
    let text = crate::distributed::broadcast_text(None)?.ok_or_else(|| anyhow!("rank 0 sent no turn"))?;
    Ok(serde_json::from_str(&text)?)
}

/// A seed for a request that gave none (every rank must draw alike).
pub fn fresh_seed(serial: u64) -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    // splitmix64 of the time and the request's place.
    let mut z = t ^ serial.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
