//! Streaming detokenization: text out as tokens come in, without broken characters.

use std::sync::Arc;

/// Turns generated ids into text one token at a time.
///
/// Each push decodes a short window of recent tokens and returns what the new token added.
/// The window starts at the last point where the text was complete, so decoders that look at
/// neighbours (SentencePiece's leading-space rule, byte-level pieces of one character spread
/// over several tokens) see the context they need. Text that ends in an incomplete UTF-8
/// sequence (U+FFFD at the end) is held back until the character completes or `finish`.
/// Concatenating every `push` and `finish` gives the whole-sequence decode.
pub struct StreamingDetokenizer {
    tok: Arc<tokenizers::Tokenizer>,
    skip_special: bool,
    ids: Vec<u32>,
    /// Start of the decode window (context already emitted).
    prefix: usize,
    /// End of the emitted part.
    read: usize,
}

impl std::fmt::Debug for StreamingDetokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingDetokenizer")
            .field("pending_ids", &&self.ids[self.prefix..])
            .field("skip_special", &self.skip_special)
            .finish()
    }
}

impl StreamingDetokenizer {
    pub(crate) fn new(tok: Arc<tokenizers::Tokenizer>, skip_special: bool) -> StreamingDetokenizer {
        StreamingDetokenizer { tok, skip_special, ids: Vec::new(), prefix: 0, read: 0 }
    }

    fn decode(&self, ids: &[u32]) -> String {
        // Decoding known ids does not fail in practice; unknown ids are skipped by tokenizers.
        crate::guard::guarded(|| self.tok.decode(ids, self.skip_special)).ok().and_then(Result::ok).unwrap_or_default()
    }

    /// The text `ids[prefix..]` adds after `ids[prefix..read]`, and whether it is complete.
    fn pending(&self) -> (String, bool) {
        let before = self.decode(&self.ids[self.prefix..self.read]);
        let now = self.decode(&self.ids[self.prefix..]);
        let complete = !now.ends_with('\u{FFFD}');
        if now.len() >= before.len() && now.is_char_boundary(before.len()) && now.starts_with(&before) {
            return (now[before.len()..].to_string(), complete);
        }
        // The window re-decoded differently (should not happen): emit past the common part.
        let common = before
            .char_indices()
            .zip(now.chars())
            .take_while(|((_, a), b)| a == b)
            .last()
            .map_or(0, |((i, a), _)| i + a.len_utf8());
        (now[common..].to_string(), complete)
    }

    /// Adds a token and returns the text it completed (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.ids.push(id);
        let (text, complete) = self.pending();
        if text.is_empty() || !complete {
            return String::new();
        }
        self.prefix = self.read;
        self.read = self.ids.len();
        // Forget ids before the window; they never matter again.
        if self.prefix > 0 {
            self.ids.drain(..self.prefix);
            self.read -= self.prefix;
            self.prefix = 0;
        }
        text
    }

    /// Returns whatever is still held back (an incomplete character comes out as U+FFFD) and
    /// resets the detokenizer for a new sequence.
    pub fn finish(&mut self) -> String {
        let (text, _) = self.pending();
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
        text
    }

    /// Forgets everything, e.g. before a new generation.
    pub fn reset(&mut self) {
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
    }
}
