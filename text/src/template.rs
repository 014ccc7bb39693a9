//! Chat templates rendered the way transformers' `apply_chat_template` renders them.
//!
//! transformers compiles templates in a sandboxed Jinja2 environment with `trim_blocks` and
//! `lstrip_blocks`, the loop-controls extension, and three extras: `raise_exception`,
//! `strftime_now` and a `tojson` filter that does not HTML-escape. Templates also call Python
//! string and dict methods (`.strip()`, `.startswith()`, `.items()`), and Jinja2 prints Python
//! values (`None`, `True`, `{'a': 1}`). We reproduce each of these on top of minijinja.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Environment, ErrorKind, State};

use crate::error::{Error, Result};

const TEMPLATE_NAME: &str = "chat_template";

/// Instructions one render may run: real templates need well under a
/// million, even for long conversations with tools.
pub const FUEL: u64 = 50_000_000;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    origin: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles a template. `bos_token` / `eos_token` become the template variables of the
    /// same names, as transformers passes the tokenizer's special tokens.
    pub fn new(source: &str, bos_token: Option<&str>, eos_token: Option<&str>) -> Result<ChatTemplate> {
        ChatTemplate::with_origin(source, bos_token, eos_token, "chat_template")
    }

    /// Like [`ChatTemplate::new`]; `origin` (a file or field name) starts every error message.
    pub fn with_origin(
        source: &str,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
        origin: &str,
    ) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        // Jinja2 as transformers configures it.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        // A template is code from the checkpoint: bound its work, so a loop
        // nest that would run for hours fails in about a second instead.
        env.set_fuel(Some(FUEL));
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson_filter);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| Error::new(format!("{origin}: chat template does not compile: {e}")))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.map(str::to_string),
            eos_token: eos_token.map(str::to_string),
            origin: origin.to_string(),
        })
    }

    /// Renders a conversation.
    ///
    /// `messages` are `{"role": .., "content": ..}` objects (plus whatever else the template
    /// reads, e.g. `tool_calls`, `reasoning_content`); `tools` are JSON schemas; `extra` holds
    /// template kwargs such as `enable_thinking` (they override `bos_token` / `eos_token`).
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let mut ctx = serde_json::Map::new();
        if let Some(b) = &self.bos_token {
            ctx.insert("bos_token".into(), b.clone().into());
        }
        if let Some(e) = &self.eos_token {
            ctx.insert("eos_token".into(), e.clone().into());
        }
        for (k, v) in extra {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), serde_json::Value::Array(messages.to_vec()));
        // transformers always passes `tools` and `documents`, as None when absent.
        ctx.insert("tools".into(), tools.map_or(serde_json::Value::Null, |t| serde_json::Value::Array(t.to_vec())));
        ctx.entry("documents").or_insert(serde_json::Value::Null);
        ctx.insert("add_generation_prompt".into(), add_generation_prompt.into());

        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(|e| Error::new(format!("{}: {e}", self.origin)))?;
        tmpl.render(Value::from_serialize(&ctx))
            .map_err(|e| Error::new(format!("{}: chat template render failed: {}", self.origin, describe(&e))))
    }
}

/// The error text, with the message of `raise_exception` kept verbatim.
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let _ = write!(s, ": {inner}");
        src = inner.source();
    }
    s
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
}

fn strftime_now(fmt: String) -> std::result::Result<String, minijinja::Error> {
    use chrono::format::{Item, StrftimeItems};
    // chrono panics while printing an invalid format; reject it up front instead.
    let items: Vec<Item<'_>> = StrftimeItems::new(&fmt).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {fmt:?}"),
        ));
    }
    Ok(chrono::Local::now().format_with_items(items.into_iter()).to_string())
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// i.e. Python's `json.dumps` with those arguments.
fn tojson_filter(value: Value, args: Rest<Value>, kwargs: Kwargs) -> std::result::Result<String, minijinja::Error> {
    let mut opts = JsonOpts::default();
    // Positional order follows transformers' signature.
    for (i, a) in args.iter().enumerate() {
        match i {
            0 => opts.ensure_ascii = a.is_true(),
            1 => opts.indent = indent_of(a)?,
            2 => opts.separators = separators_of(a)?,
            3 => opts.sort_keys = a.is_true(),
            _ => return Err(minijinja::Error::new(ErrorKind::TooManyArguments, "tojson takes at most 4 arguments")),
        }
    }
    if let Some(v) = kwargs.get::<Option<Value>>("ensure_ascii")? {
        opts.ensure_ascii = v.is_true();
    }
    if let Some(v) = kwargs.get::<Option<Value>>("indent")? {
        opts.indent = indent_of(&v)?;
    }
    if let Some(v) = kwargs.get::<Option<Value>>("separators")? {
        opts.separators = separators_of(&v)?;
    }
    if let Some(v) = kwargs.get::<Option<Value>>("sort_keys")? {
        opts.sort_keys = v.is_true();
    }
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match &opts.separators {
        Some((a, b)) => (a.clone(), b.clone()),
        // Python's defaults depend on whether an indent is set.
        None if opts.indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    let w = JsonWriter { opts: &opts, item_sep: &item_sep, key_sep: &key_sep };
    w.write(&mut out, &value, 0)?;
    Ok(out)
}

#[derive(Default)]
struct JsonOpts {
    ensure_ascii: bool,
    indent: Option<String>,
    separators: Option<(String, String)>,
    sort_keys: bool,
}

fn indent_of(v: &Value) -> std::result::Result<Option<String>, minijinja::Error> {
    match v.kind() {
        ValueKind::None | ValueKind::Undefined => Ok(None),
        ValueKind::String => Ok(Some(v.as_str().unwrap_or_default().to_string())),
        ValueKind::Number => {
            let n = v.as_i64().ok_or_else(|| bad_arg("tojson: indent must be an integer or a string"))?;
            Ok(Some(" ".repeat(n.max(0) as usize)))
        }
        _ => Err(bad_arg("tojson: indent must be an integer or a string")),
    }
}

fn separators_of(v: &Value) -> std::result::Result<Option<(String, String)>, minijinja::Error> {
    if v.is_none() || v.is_undefined() {
        return Ok(None);
    }
    let parts: Vec<Value> = v.try_iter()?.collect();
    match parts.as_slice() {
        [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
            Ok(Some((a.as_str().unwrap_or_default().into(), b.as_str().unwrap_or_default().into())))
        }
        _ => Err(bad_arg("tojson: separators must be a pair of strings")),
    }
}

fn bad_arg(msg: &str) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, msg.to_string())
}

struct JsonWriter<'a> {
    opts: &'a JsonOpts,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl JsonWriter<'_> {
    fn newline(&self, out: &mut String, level: usize) {
        if let Some(ind) = &self.opts.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    }

    fn write(&self, out: &mut String, v: &Value, level: usize) -> std::result::Result<(), minijinja::Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&json_number(v)),
            ValueKind::String => json_string(out, v.as_str().unwrap_or_default(), self.opts.ensure_ascii),
            ValueKind::Bytes => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: bytes are not JSON serializable",
                ))
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.opts.sort_keys {
                    keys.sort_by_key(map_key);
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, level + 1);
                    json_string(out, &map_key(k), self.opts.ensure_ascii);
                    out.push_str(self.key_sep);
                    self.write(out, &v.get_item(k)?, level + 1)?;
                }
                self.newline(out, level);
                out.push('}');
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, level + 1);
                    self.write(out, item, level + 1)?;
                }
                self.newline(out, level);
                out.push(']');
            }
            // Objects without a JSON shape: serialize their string form, as a last resort.
            _ => json_string(out, &v.to_string(), self.opts.ensure_ascii),
        }
        Ok(())
    }
}

/// Python's json turns non-string keys into strings (`True` -> "true", `None` -> "null").
fn map_key(k: &Value) -> String {
    match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => (if k.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::None | ValueKind::Undefined => "null".to_string(),
        ValueKind::Number => json_number(k),
        _ => k.to_string(),
    }
}

fn json_number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) if f.is_nan() => "NaN".to_string(),
        Ok(f) if f.is_infinite() => (if f > 0.0 { "Infinity" } else { "-Infinity" }).to_string(),
        Ok(f) => py_float(f),
        Err(_) => v.to_string(),
    }
}

/// Python's `repr(float)`: shortest round-trip digits, scientific outside [1e-4, 1e16).
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return (if f > 0.0 { "inf" } else { "-inf" }).into();
    }
    if f == 0.0 {
        return (if f.is_sign_negative() { "-0.0" } else { "0.0" }).into();
    }
    let sci = format!("{f:e}"); // e.g. "1.5e-5", "1e20"
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

/// Python json string escaping (`ensure_ascii` picks `\uXXXX` for non-ASCII).
fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Prints values the way Jinja2 does, i.e. with Python's `str()`: `None`, `True`, `1.0`,
/// `['a', 1]`, `{'k': 'v'}`. Undefined prints as nothing (Jinja2's default `Undefined`).
fn python_formatter(
    out: &mut minijinja::Output,
    _state: &State,
    v: &Value,
) -> std::result::Result<(), minijinja::Error> {
    let s = match v.kind() {
        ValueKind::Undefined => return Ok(()),
        ValueKind::String => {
            out.write_str(v.as_str().unwrap_or_default())
                .map_err(|_| minijinja::Error::new(ErrorKind::WriteFailure, "write failed"))?;
            return Ok(());
        }
        _ => py_str(v),
    };
    out.write_str(&s).map_err(|_| minijinja::Error::new(ErrorKind::WriteFailure, "write failed"))
}

fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => py_repr(v),
    }
}

fn py_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => (if v.is_true() { "True" } else { "False" }).into(),
        ValueKind::Number if v.is_integer() => v.to_string(),
        ValueKind::Number => match f64::try_from(v.clone()) {
            Ok(f) => py_float(f),
            Err(_) => v.to_string(),
        },
        ValueKind::String => py_str_repr(v.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let items: Vec<String> = v.try_iter().map(|it| it.map(|x| py_repr(&x)).collect()).unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let parts: Vec<String> = v
                .try_iter()
                .map(|it| {
                    it.map(|k| {
                        let val = v.get_item(&k).unwrap_or(Value::UNDEFINED);
                        format!("{}: {}", py_repr(&k), py_repr(&val))
                    })
                    .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", parts.join(", "))
        }
        _ => v.to_string(),
    }
}

/// Python's `repr(str)`: single quotes unless the text has a single quote and no double quote.
fn py_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_float_matches_python_repr() {
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(1.5e20), "1.5e+20");
        assert_eq!(py_float(123456.0), "123456.0");
        assert_eq!(py_float(0.0001), "0.0001");
    }

    #[test]
    fn tojson_like_python() {
        let t = ChatTemplate::new(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ e | tojson }}|{{ 'é<\"\\n' | tojson }}",
            None,
            None,
        )
        .unwrap();
        let mut extra = serde_json::Map::new();
        extra.insert("x".into(), serde_json::json!({"b": [1, 2.5, true, null], "a": "x"}));
        extra.insert("e".into(), serde_json::json!({"l": [], "m": {}}));
        let out = t.render(&[], None, false, &extra).unwrap();
        assert_eq!(
            out,
            "{\"b\": [1, 2.5, true, null], \"a\": \"x\"}|{\n  \"b\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"a\": \"x\"\n}|{\"l\": [], \"m\": {}}|\"é<\\\"\\n\""
        );
    }

    #[test]
    fn python_printing_and_methods() {
        let t = ChatTemplate::new(
            "{{ none }} {{ true }} {{ [1, 'a'] }} {{ ' x '.strip() }} {{ 'ab'.startswith('a') }}\
             {% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
            None,
            None,
        )
        .unwrap();
        let out = t.render(&[], None, false, &serde_json::Map::new()).unwrap();
        assert_eq!(out, "None True [1, 'a'] x True02");
    }

    #[test]
    fn raise_exception_fails_render_with_message() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", None, None).unwrap();
        let e = t.render(&[], None, false, &serde_json::Map::new()).unwrap_err();
        assert!(e.to_string().contains("roles must alternate"), "{e}");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn strftime_now_formats_today() {
        let t = ChatTemplate::new("{{ strftime_now('%Y') }}", None, None).unwrap();
        let out = t.render(&[], None, false, &serde_json::Map::new()).unwrap();
        assert_eq!(out, chrono::Local::now().format("%Y").to_string());
    }
}
