//! Decoding: what a generation is asked and reports ([`GenParams`],
//! [`GenStats`]), prefill, and the two loops beneath it: the plain pipelined
//! loop ([`generate`]) and speculative decoding with a [`Drafter`]
//! ([`generate_speculative`]). A [`crate::session::Session`] picks between
//! them and keeps a conversation's sequence across turns.

mod batch;
mod drafter;
mod logits_processors;
mod logprob;
mod params;
mod plain;
mod prefill;
mod row_draft;
mod speculative;

pub use batch::{decode_alone, decode_step, prefill_into, prefill_step};
pub use drafter::{DraftSource, Drafter, SpecParams, MAX_DEPTH};
pub use logits_processors::{mask_logits, LogitsParams};
pub use logprob::{logprob_of, TokenLogprob};
pub use params::{DecodeSplit, DraftStats, FinishReason, GenParams, GenStats, Interrupted, MediaTime, TOKEN_DTYPE};
pub use plain::generate;
pub use prefill::{prefill, prefill_last_alone};
pub use speculative::{generate_speculative, Round, RoundGuide};
