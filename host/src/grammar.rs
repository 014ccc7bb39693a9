//! Structured output: JSON (any object, or a JSON schema), regular
//! expressions and Lark grammars compiled by llguidance into a matcher
//! that masks each decode step's tokens ([`GrammarConstraint`]).
//! llguidance sees our tokenizer through [`TokenizerEnv`], so no second
//! tokenizer library enters.

use anyhow::{anyhow, bail, Result};
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

    /// A fresh matcher for `g`; a grammar that does not compile, or is
    /// past the [`check_size`] bounds, is an error naming what is wrong.
    pub fn matcher(&self, g: &Grammar) -> Result<GrammarConstraint> {
        check_size(g)?;
        self.compile(g)
    }

    fn compile(&self, g: &Grammar) -> Result<GrammarConstraint> {
        let top = match g {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"}))),
            Grammar::JsonSchema(s) => TopLevelGrammar::from_json_schema(compact(s.clone())),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        };
        let parser = self.factory.create_parser(top).map_err(|e| anyhow!("{}", first_line(&e.to_string())))?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(anyhow!("{}", first_line(&e)));
        }
        Ok(GrammarConstraint { m })
    }
}

/// The first line of a compiler's report (llguidance follows it with its
/// internal state, which is no use to a client).
fn first_line(e: &str) -> &str {
    e.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("the grammar does not compile")
}

/// Largest grammar text taken: a Lark grammar or regex, or a schema's JSON.
pub const MAX_GRAMMAR_BYTES: usize = 256 << 10;

/// Deepest a JSON schema may go, counting each level of nesting and each
/// `$ref` followed (a chain of `$defs`, each referring to the next, is as
/// deep as it is long). The compiler recurses per level: this bound and
/// [`MAX_GRAMMAR_BYTES`] keep it within the stack of the threads that
/// compile (`serve::limits::WORK_STACK_BYTES`).
pub const MAX_SCHEMA_DEPTH: usize = 512;

/// Deepest nesting of brackets in a Lark grammar or regex.
pub const MAX_NESTING: usize = 256;

/// Most rules and terminals a Lark grammar may define: a chain of rules,
/// each naming the next, is compiled by recursion as deep as it is long
/// (measured: 3-5 KiB of stack a rule, 8-11 KiB a `$ref` of a schema).
pub const MAX_LARK_RULES: usize = 2000;

/// Refuses a grammar past the bounds above, in one line.
pub fn check_size(g: &Grammar) -> Result<()> {
    let (text, what) = match g {
        Grammar::JsonObject => return Ok(()),
        Grammar::JsonSchema(s) => {
            let depth = schema_depth(s);
            if depth > MAX_SCHEMA_DEPTH {
                bail!("the JSON schema is {depth} levels deep (nesting and $ref chains), over the {MAX_SCHEMA_DEPTH} taken");
            }
            let bytes = s.to_string().len();
            if bytes > MAX_GRAMMAR_BYTES {
                bail!("the JSON schema is {bytes} bytes, over the {} KiB taken", MAX_GRAMMAR_BYTES >> 10);
            }
            return Ok(());
        }
        Grammar::Regex(r) => (r, "regex"),
        Grammar::Lark(l) => (l, "grammar"),
    };
    if text.len() > MAX_GRAMMAR_BYTES {
        bail!("the {what} is {} bytes, over the {} KiB taken", text.len(), MAX_GRAMMAR_BYTES >> 10);
    }
    let nesting = bracket_depth(text);
    if nesting > MAX_NESTING {
        bail!("the {what} nests brackets {nesting} deep, over the {MAX_NESTING} taken");
    }
    if let Grammar::Lark(l) = g {
        let rules = l.lines().filter(|line| defines_rule(line)).count();
        if rules > MAX_LARK_RULES {
            bail!("the grammar defines {rules} rules and terminals, over the {MAX_LARK_RULES} taken");
        }
        // Schemas inside the grammar (`%json {...}`) are held to a schema's bounds.
        for (at, _) in l.match_indices("%json") {
            let rest = l[at + "%json".len()..].trim_start();
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
            if let Some(Ok(schema)) = values.next() {
                let depth = schema_depth(&schema);
                if depth > MAX_SCHEMA_DEPTH {
                    bail!("a %json schema in the grammar is {depth} levels deep (nesting and $ref chains), over the {MAX_SCHEMA_DEPTH} taken");
                }
            }
        }
    }
    Ok(())
}

/// Whether a Lark line defines a rule or terminal (`name:`, `?name:`,
/// `!name:`, `NAME.2:`).
fn defines_rule(line: &str) -> bool {
    let l = line.trim_start().trim_start_matches(['?', '!']);
    let name = l.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').count();
    if name == 0 || l.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    let rest = l[name..].trim_start();
    let rest = match rest.strip_prefix('.') {
        Some(p) => p.trim_start_matches(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']).trim_start(),
        None => rest,
    };
    rest.starts_with(':')
}

/// Deepest nesting of `(`, `[` and `{` in `text` (quoted or not: an upper bound).
fn bracket_depth(text: &str) -> usize {
    let (mut depth, mut most) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                most = most.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

/// The longest path down `root`: through nested objects and arrays and
/// through each local `$ref` to what it points at, a cycle (a recursive
/// schema) counted once. Walked with an explicit stack and memoized, so
/// neither the walk's depth nor its time grows past the schema's size.
pub fn schema_depth(root: &serde_json::Value) -> usize {
    use serde_json::Value;
    use std::collections::{HashMap, HashSet};
    let id = |v: &Value| v as *const Value;
    let children = |v: &Value| -> Vec<*const Value> {
        let mut c: Vec<*const Value> = match v {
            Value::Object(o) => o.values().filter(|x| x.is_object() || x.is_array()).map(id).collect(),
            Value::Array(a) => a.iter().filter(|x| x.is_object() || x.is_array()).map(id).collect(),
            _ => Vec::new(),
        };
        if let Some(t) = v.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) {
            if let Some(target) = root.pointer(t) {
                c.push(id(target));
            }
        }
        c
    };
    // SAFETY of the pointers: they point into `root`, borrowed for the whole walk and never changed.
    let at = |p: *const Value| unsafe { &*p };
    let mut memo: HashMap<*const Value, usize> = HashMap::new();
    let mut on_path: HashSet<*const Value> = HashSet::from([id(root)]);
    let mut stack: Vec<(*const Value, Vec<*const Value>, usize)> = vec![(id(root), children(root), 0)];
    while let Some(top) = stack.last_mut() {
        if let Some(c) = top.1.pop() {
            if let Some(&d) = memo.get(&c) {
                top.2 = top.2.max(d);
            } else if on_path.insert(c) {
                let kids = children(at(c));
                stack.push((c, kids, 0));
            }
            continue;
        }
        let (v, _, best) = stack.pop().expect("the stack has a top");
        on_path.remove(&v);
        memo.insert(v, best + 1);
        if let Some(parent) = stack.last_mut() {
            parent.2 = parent.2.max(best + 1);
        }
    }
    memo.get(&id(root)).copied().unwrap_or(1)
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

    /// Checks that some output satisfies the grammar (its first step
    /// allows a token, or the empty output is complete): a grammar that
    /// allows nothing is the request's error, found before generation.
    pub fn check_start(&mut self) -> Result<()> {
        let v = self
            .m
            .compute_mask()
            .map_err(|e| anyhow!("no output satisfies this grammar ({})", first_line(&e.to_string())))?;
        if v.num_set() == 0 && !self.m.is_accepting().unwrap_or(false) {
            bail!("no output satisfies this grammar");
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ref_chain(n: usize) -> serde_json::Value {
        let mut defs = serde_json::Map::new();
        for i in 0..n {
            defs.insert(
                format!("d{i}"),
                json!({"type": "object", "properties": {"x": {"$ref": format!("#/$defs/d{}", i + 1)}}}),
            );
        }
        defs.insert(format!("d{n}"), json!({"type": "string"}));
        json!({"$defs": defs, "$ref": "#/$defs/d0"})
    }

    #[test]
    fn schema_depth_follows_refs_and_stops_at_cycles() {
        assert!(schema_depth(&ref_chain(10)) >= 30);
        assert!(schema_depth(&ref_chain(700)) > MAX_SCHEMA_DEPTH);
        let recursive = json!({"$defs": {"node": {"type": "object", "properties": {
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"});
        assert!(schema_depth(&recursive) < 20, "a recursive schema is counted once around its cycle");
        assert!(check_size(&Grammar::JsonSchema(recursive)).is_ok());
    }

    #[test]
    fn grammars_past_the_bounds_are_refused_in_one_line() {
        let too_deep = check_size(&Grammar::JsonSchema(ref_chain(700))).unwrap_err().to_string();
        assert!(too_deep.contains("levels deep") && !too_deep.contains('\n'), "{too_deep}");
        let chain: String = (0..3000).map(|i| format!("r{i}: r{}\n", i + 1)).collect();
        let lark = format!("start: r0\n{chain}r3000: \"a\"\n");
        assert!(check_size(&Grammar::Lark(lark)).unwrap_err().to_string().contains("rules"));
        let inner = format!("start: %json {}\n", ref_chain(700));
        assert!(check_size(&Grammar::Lark(inner)).unwrap_err().to_string().contains("%json"));
        let nested = format!("{}a{}", "(".repeat(300), ")".repeat(300));
        assert!(check_size(&Grammar::Regex(nested)).unwrap_err().to_string().contains("nests"));
        assert!(check_size(&Grammar::Regex("x".repeat(MAX_GRAMMAR_BYTES + 1))).is_err());
        // Ordinary grammars pass.
        assert!(check_size(&Grammar::Lark("start: \"a\" b\nb: /[0-9]+/\n?c.2: b\n".into())).is_ok());
        assert!(defines_rule("?c.2: b") && defines_rule("NUM: /[0-9]+/") && !defines_rule("  | b"));
    }
}
