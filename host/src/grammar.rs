//! Structured output: JSON (any object, or a JSON schema), regular
//! expressions and Lark grammars compiled by llguidance into a matcher
//! that masks each decode step's tokens ([`GrammarConstraint`]).
//! llguidance sees our tokenizer through [`TokenizerEnv`], so no second
//! tokenizer library enters.

use anyhow::{anyhow, Result};
use famlx_text::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// What the output must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object.
    JsonObject,
    /// JSON matching this schema.
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression.
    Regex(String),
    /// Text of this Lark grammar (llguidance's dialect).
    Lark(String),
}

/// Our tokenizer as llguidance's tokenizer environment.
struct Env {
    trie: TokTrie,
    tok: Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tok.encode(&String::from_utf8_lossy(s), false).unwrap_or_default()
    }
}

/// Compiles grammars for one tokenizer (the token trie is built once).
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

impl Grammars {
    /// The compiler for `tok`'s vocabulary; `eos` ends a complete output.
    pub fn new(tok: &Tokenizer, eos: u32) -> Result<Grammars> {
        let json = tok.to_hf_json().map_err(|e| anyhow!("{e}"))?;
        // llguidance asserts on vocabularies it does not expect: an error here, not a crash.
        let words = std::panic::catch_unwind(|| llguidance::token_bytes_from_tokenizer_json(&json))
            .map_err(|_| anyhow!("structured output: the tokenizer's vocabulary has a form llguidance cannot read"))?
            .map_err(|e| anyhow!("structured output: {e}"))?;
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Env { trie, tok: tok.clone() });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| anyhow!("structured output: {e}"))?;
        factory.quiet();
        Ok(Grammars { factory: Arc::new(factory) })
    }

    /// A fresh matcher for `g`; a grammar that does not compile is an error
    /// naming what is wrong with it.
    pub fn matcher(&self, g: &Grammar) -> Result<GrammarConstraint> {
        let top = match g {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"}))),
            Grammar::JsonSchema(s) => TopLevelGrammar::from_json_schema(compact(s.clone())),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        };
        let parser = self.factory.create_parser(top).map_err(|e| anyhow!("{e}"))?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(anyhow!("{e}"));
        }
        Ok(GrammarConstraint { m })
    }
}

/// `schema` with JSON written without whitespace between tokens (as
/// OpenAI's structured output writes it), unless it says otherwise: free
/// whitespace lets a model pad forever.
pub fn compact(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| serde_json::json!({"whitespace_flexible": false}));
    }
    schema
}

/// One output's matcher.
pub struct GrammarConstraint {
    m: Matcher,
}

impl GrammarConstraint {
    /// The allowed next tokens, a bit set over token ids (32 per word).
    pub fn allowed(&mut self) -> Result<Vec<u32>> {
        let v = self.m.compute_mask_or_eos().map_err(|e| anyhow!("structured output: {e}"))?;
        Ok(v.as_slice().to_vec())
    }

    /// Advances past the token chosen.
    pub fn accept(&mut self, token: u32) -> Result<()> {
        self.m.consume_token(token).map_err(|e| anyhow!("structured output: {e}"))
    }

    /// Takes back the last `n` tokens accepted (drafts the model refused).
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        self.m.rollback(n).map_err(|e| anyhow!("structured output: {e}"))
    }

    /// True once the constrained text is complete and nothing may follow.
    pub fn is_done(&mut self) -> bool {
        self.m.is_stopped() || self.m.is_accepting().unwrap_or(false) && self.only_eos()
    }

    /// True when the next step may only end the output.
    fn only_eos(&mut self) -> bool {
        match self.m.compute_mask() {
            Ok(v) => {
                v.num_set() == 0
                    || (v.num_set() == 1 && self.m.tok_env().is_ok_and(|e| v.is_allowed(e.tok_trie().eos_token())))
            }
            Err(_) => true,
        }
    }
}
