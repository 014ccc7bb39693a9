//! Tool calls: which markup the model writes them in (picked from its chat
//! template's markers, as mlx-lm picks its parser), parsing that markup
//! back into OpenAI `tool_calls`, and the grammar that makes a required
//! call well-formed.

use super::error::ApiError;
use serde_json::{json, Map, Value};

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// The model decides (the default with tools).
    Auto,
    /// No tools: they are not shown to the template.
    None,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Named(String),
}

impl ToolChoice {
    /// Checks `tool_choice` against `tools`.
    pub fn parse(v: Option<&Value>, tools: Option<&[Value]>) -> Result<ToolChoice, ApiError> {
        let names: Vec<&str> = tools.unwrap_or(&[]).iter().filter_map(tool_name).collect();
        if let Some(t) = tools {
            if let Some(i) = t.iter().position(|t| tool_name(t).is_none()) {
                return Err(ApiError::bad(
                    &format!("tools[{i}]"),
                    "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ));
            }
            for (i, t) in t.iter().enumerate() {
                check_tool(i, t)?;
            }
        }
        let choice = match v {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
            Some(Value::String(s)) if s == "none" => ToolChoice::None,
            Some(Value::String(s)) if s == "required" => ToolChoice::Required,
            Some(o) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(n) if names.contains(&n) => ToolChoice::Named(n.to_string()),
                Some(n) => return Err(ApiError::bad("tool_choice", format!("`tool_choice` names {n:?}, which is not in `tools`"))),
                None => return Err(ApiError::bad("tool_choice", "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")),
            },
        };
        if matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) && names.is_empty() {
            return Err(ApiError::bad("tool_choice", "a required `tool_choice` needs `tools`"));
        }
        Ok(choice)
    }
}

fn tool_name(t: &Value) -> Option<&str> {
    t.get("function")?.get("name")?.as_str()
}

/// Longest tool name taken (OpenAI's limit).
const MAX_TOOL_NAME: usize = 64;

/// A tool's name and parameter names as OpenAI allows them: names go into
/// the template and the call grammar, so anything else is refused here
/// rather than trusted there.
fn check_tool(i: usize, t: &Value) -> Result<(), ApiError> {
    let name = tool_name(t).unwrap_or("");
    let ok = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if name.is_empty() || name.len() > MAX_TOOL_NAME || !ok(name) {
        return Err(ApiError::bad(
            &format!("tools[{i}].function.name"),
            format!("a tool name must be 1 to {MAX_TOOL_NAME} of a-z, A-Z, 0-9, _, - and ., got {name:?}"),
        ));
    }
    if let Some(props) = t["function"].get("parameters").and_then(|p| p.get("properties")) {
        let Some(props) = props.as_object() else {
            return Err(ApiError::bad(
                &format!("tools[{i}].function.parameters.properties"),
                "`properties` must be an object",
            ));
        };
        if let Some(k) = props.keys().find(|k| k.is_empty() || k.chars().any(|c| c.is_control())) {
            return Err(ApiError::bad(
                &format!("tools[{i}].function.parameters.properties"),
                format!("parameter name {k:?} is empty or holds control characters"),
            ));
        }
    }
    Ok(())
}

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// The markup a model writes tool calls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// Qwen 3 / Hermes: `<tool_call>{"name": .., "arguments": {..}}</tool_call>`.
    QwenJson,
    /// Qwen 3.5 / Qwen3-Coder: `<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`.
    QwenXml,
    /// Gemma 4: `<|tool_call>call:NAME{k:<|"|>v<|"|>,n:1}<tool_call|>`.
    Gemma4,
    /// Llama 3.x: the whole reply is `{"name": .., "parameters": {..}}`.
    LlamaJson,
}

impl ToolFormat {
    /// The format a chat template's markers say its model writes.
    pub fn detect(template: &str) -> Option<ToolFormat> {
        if template.contains("<|tool_call>") && template.contains("<tool_call|>") {
            Some(ToolFormat::Gemma4)
        } else if template.contains("<tool_call>\\n<function=") || template.contains("<tool_call>\n<function=") {
            Some(ToolFormat::QwenXml)
        } else if template.contains("<tool_call>") {
            Some(ToolFormat::QwenJson)
        } else if template.contains("<|python_tag|>") || template.contains("\"parameters\": dictionary") {
            Some(ToolFormat::LlamaJson)
        } else {
            None
        }
    }

    /// The start and end markers around one call (none for Llama's bare JSON).
    pub fn markers(self) -> Option<(&'static str, &'static str)> {
        match self {
            ToolFormat::QwenJson | ToolFormat::QwenXml => Some(("<tool_call>", "</tool_call>")),
            ToolFormat::Gemma4 => Some(("<|tool_call>", "<tool_call|>")),
            ToolFormat::LlamaJson => None,
        }
    }

    /// Parses the text of one call (between the markers).
    pub fn parse(self, body: &str, tools: &[Value]) -> Result<ToolCall, String> {
        match self {
            ToolFormat::QwenJson | ToolFormat::LlamaJson => {
                let body = body.trim().trim_start_matches("<|python_tag|>").trim();
                let v: Value = serde_json::from_str(body).map_err(|e| format!("tool call is not JSON: {e}"))?;
                let name = v.get("name").and_then(Value::as_str).ok_or("tool call has no \"name\"")?;
                let args = v.get("arguments").or_else(|| v.get("parameters")).cloned().unwrap_or(json!({}));
                let args = match args {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                Ok(ToolCall { name: name.to_string(), arguments: args })
            }
            ToolFormat::QwenXml => parse_xml(body, tools),
            ToolFormat::Gemma4 => parse_gemma4(body),
        }
    }
}

/// Qwen3-Coder's XML-style call; parameter values are typed by the tool's schema.
fn parse_xml(body: &str, tools: &[Value]) -> Result<ToolCall, String> {
    let rest = body.trim();
    let rest = rest.strip_prefix("<function=").ok_or("tool call does not start with <function=")?;
    let gt = rest.find('>').ok_or("unterminated <function=")?;
    let name = rest[..gt].trim().to_string();
    let mut rest = &rest[gt + 1..];
    let end = rest.rfind("</function>").ok_or("tool call has no </function>")?;
    rest = &rest[..end];
    let props = tools
        .iter()
        .find(|t| tool_name(t) == Some(&name))
        .and_then(|t| t["function"]["parameters"]["properties"].as_object().cloned())
        .unwrap_or_default();
    let mut args = Map::new();
    while let Some(start) = rest.find("<parameter=") {
        let r = &rest[start + "<parameter=".len()..];
        let gt = r.find('>').ok_or("unterminated <parameter=")?;
        let key = r[..gt].trim().to_string();
        let r = &r[gt + 1..];
        let close = r.find("</parameter>").ok_or("parameter has no </parameter>")?;
        let raw = r[..close].trim_matches('\n');
        let ty = props.get(&key).and_then(|p| p.get("type")).and_then(Value::as_str).unwrap_or("");
        let value = match ty {
            "string" | "" if ty == "string" => Value::String(raw.to_string()),
            _ => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string())),
        };
        args.insert(key, value);
        rest = &r[close + "</parameter>".len()..];
    }
    Ok(ToolCall { name, arguments: Value::Object(args).to_string() })
}

/// Gemma 4's string delimiter.
pub const GEMMA_QUOTE: &str = "<|\"|>";

/// Gemma 4's `call:NAME{...}`: bare keys, `<|"|>`-quoted strings.
fn parse_gemma4(body: &str) -> Result<ToolCall, String> {
    let b = body.trim();
    let b = b.strip_prefix("call:").ok_or("tool call does not start with call:")?;
    let brace = b.find('{').ok_or("tool call has no arguments {...}")?;
    let name = b[..brace].trim().to_string();
    let mut p = GemmaParser { s: &b[brace..], at: 0 };
    let args = p.value(0)?;
    if !args.is_object() {
        return Err("tool call arguments are not an object".into());
    }
    if !p.s[p.at..].trim().is_empty() {
        return Err(format!("unexpected text after the arguments: {:?}", &p.s[p.at..]));
    }
    Ok(ToolCall { name, arguments: args.to_string() })
}

/// Deepest nesting of objects and arrays a Gemma 4 call's arguments may
/// have: the parser recurses per level, and the reply is the model's (which
/// a client can steer), so depth is bounded rather than trusted.
const MAX_CALL_DEPTH: usize = 64;

struct GemmaParser<'a> {
    s: &'a str,
    at: usize,
}

impl GemmaParser<'_> {
    fn rest(&self) -> &str {
        &self.s[self.at..]
    }

    fn skip_ws(&mut self) {
        let r = self.rest();
        self.at += r.len() - r.trim_start().len();
    }

    fn eat(&mut self, t: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(t) {
            self.at += t.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        self.skip_ws();
        if depth > MAX_CALL_DEPTH && self.rest().starts_with(['{', '[']) {
            return Err(format!("tool call arguments nest deeper than {MAX_CALL_DEPTH} levels"));
        }
        if self.eat(GEMMA_QUOTE) {
            let end = self.rest().find(GEMMA_QUOTE).ok_or("unterminated <|\"|> string")?;
            let s = self.rest()[..end].to_string();
            self.at += end + GEMMA_QUOTE.len();
            return Ok(Value::String(s));
        }
        if self.eat("{") {
            let mut m = Map::new();
            if self.eat("}") {
                return Ok(Value::Object(m));
            }
            loop {
                self.skip_ws();
                let r = self.rest();
                let colon = r.find(':').ok_or("a key has no ':'")?;
                let key = r[..colon].trim().trim_matches('"').to_string();
                if key.is_empty() || key.contains([',', '{', '}']) {
                    return Err(format!("bad key {key:?}"));
                }
                self.at += colon + 1;
                let v = self.value(depth + 1)?;
                m.insert(key, v);
                if self.eat("}") {
                    return Ok(Value::Object(m));
                }
                if !self.eat(",") {
                    return Err("expected ',' or '}'".into());
                }
            }
        }
        if self.eat("[") {
            let mut a = Vec::new();
            if self.eat("]") {
                return Ok(Value::Array(a));
            }
            loop {
                a.push(self.value(depth + 1)?);
                if self.eat("]") {
                    return Ok(Value::Array(a));
                }
                if !self.eat(",") {
                    return Err("expected ',' or ']'".into());
                }
            }
        }
        let r = self.rest();
        let end = r.find([',', '}', ']']).unwrap_or(r.len());
        let word = r[..end].trim().to_string();
        self.at += end;
        let word = word.as_str();
        match serde_json::from_str::<Value>(word) {
            Ok(v) if !v.is_object() && !v.is_array() => Ok(v),
            _ if !word.is_empty() => Ok(Value::String(word.to_string())),
            _ => Err("empty value".into()),
        }
    }
}

/// A Lark grammar for one call to any tool `choice` allows, in `format`'s
/// markup, arguments per the tool's JSON schema (llguidance's `%json`); for
/// Gemma 4, whose arguments are not JSON, flat typed `key:value` pairs.
/// `token_id` gives the id of a marker that is a single token.
pub fn call_grammar(
    format: ToolFormat,
    tools: &[Value],
    choice: &ToolChoice,
    token_id: impl Fn(&str) -> Option<u32>,
) -> Result<String, ApiError> {
    let chosen: Vec<&Value> = tools
        .iter()
        .filter(|t| match choice {
            ToolChoice::Named(n) => tool_name(t) == Some(n),
            _ => true,
        })
        .collect();
    let lit = |s: &str| match token_id(s) {
        Some(id) => format!("<[{id}]>"),
        None => lark_str(s),
    };
    let params = |t: &Value| t["function"].get("parameters").cloned().unwrap_or(json!({"type": "object"}));
    match format {
        ToolFormat::QwenJson | ToolFormat::LlamaJson => {
            // Each tool's parameter schema sits in the root's `$defs`, its
            // own `$ref`s re-pointed there: a schema that works as a
            // `response_format` (with `$defs` and `$ref`) works as a tool's.
            let key = if format == ToolFormat::LlamaJson { "parameters" } else { "arguments" };
            let mut defs = Map::new();
            let mut one_of = Vec::new();
            for (i, t) in chosen.iter().enumerate() {
                let at = format!("tool{i}");
                defs.insert(at.clone(), repoint_refs(params(t), &format!("#/$defs/{at}")));
                one_of.push(json!({"type": "object", "properties": {"name": {"const": tool_name(t)},
                                   key: {"$ref": format!("#/$defs/{at}")}},
                                   "required": ["name", key], "additionalProperties": false}));
            }
            let schema = crate::grammar::compact(json!({"anyOf": one_of, "$defs": defs}));
            let body = format!("%json {schema}");
            Ok(match format.markers() {
                Some((s, e)) => format!("start: {} \"\\n\" call \"\\n\" {}\ncall: {body}\n", lit(s), lit(e)),
                None => format!("start: call\ncall: {body}\n"),
            })
        }
        ToolFormat::QwenXml => {
            let mut alts = Vec::new();
            for t in &chosen {
                let mut seq = lark_str(&format!("<function={}>\n", tool_name(t).unwrap_or("")));
                for (k, schema) in params(t)["properties"].as_object().cloned().unwrap_or_default() {
                    let open = lark_str(&format!("<parameter={k}>\n"));
                    seq += &format!(" {open} {} {}", typed_value(&schema, None), lark_str("\n</parameter>\n"));
                }
                seq += &format!(" {}", lark_str("</function>"));
                alts.push(seq);
            }
            Ok(format!(
                "start: {} \"\\n\" ({}) \"\\n\" {}\n{}",
                lit("<tool_call>"),
                alts.join(" | "),
                lit("</tool_call>"),
                VALUE_RULES
            ))
        }
        ToolFormat::Gemma4 => {
            let q = lit(GEMMA_QUOTE);
            let mut alts = Vec::new();
            for t in &chosen {
                let pairs: Vec<String> = params(t)["properties"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|(k, s)| format!("{} {}", lark_str(&format!("{k}:")), typed_value(s, Some(&q))))
                    .collect();
                let open = lark_str(&format!("call:{}{{", tool_name(t).unwrap_or("")));
                alts.push(format!("{open} {} \"}}\"", pairs.join(" \",\" ")));
            }
            Ok(format!(
                "start: {} ({}) {}\n{}",
                lit("<|tool_call>"),
                alts.join(" | "),
                lit("<tool_call|>"),
                VALUE_RULES
            ))
        }
    }
}

/// `s` as a Lark string literal (JSON's escapes): a name or key holding
/// quotes or backslashes stays inside its literal and cannot add rules.
fn lark_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// `schema` with every local `$ref` (`#...`) re-pointed under `base`, where
/// the schema now sits inside a larger document. Walked with a stack: the
/// depth is the client's.
fn repoint_refs(mut schema: Value, base: &str) -> Value {
    let mut todo = vec![&mut schema];
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(o) => {
                for (k, x) in o.iter_mut() {
                    match x {
                        Value::String(r) if k == "$ref" && r.starts_with('#') => *r = format!("{base}{}", &r[1..]),
                        _ => todo.push(x),
                    }
                }
            }
            Value::Array(a) => todo.extend(a.iter_mut()),
            _ => {}
        }
    }
    schema
}

/// Terminals for typed parameter values: bounded, so a constrained call ends.
const VALUE_RULES: &str = "TEXT: /[A-Za-z0-9 _.,-]{1,24}/\nINT: /-?[0-9]{1,6}/\nNUM: /-?[0-9]{1,6}(\\.[0-9]{1,4})?/\nBOOL: \"true\" | \"false\"\n";

/// A parameter's value terminal; `quote` wraps strings (Gemma 4's `<|"|>`).
fn typed_value(schema: &Value, quote: Option<&str>) -> String {
    let string = |body: String| match quote {
        Some(q) => format!("{q} {body} {q}"),
        None => body,
    };
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        let alts: Vec<String> = e
            .iter()
            .map(|v| match v.as_str() {
                Some(s) => string(serde_json::to_string(s).unwrap_or_default()),
                None => serde_json::to_string(&v.to_string()).unwrap_or_default(),
            })
            .collect();
        return format!("({})", alts.join(" | "));
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") => "INT".into(),
        Some("number") => "NUM".into(),
        Some("boolean") => "BOOL".into(),
        _ => string("TEXT".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, params: Value) -> Value {
        json!({"type": "function", "function": {"name": name, "parameters": params}})
    }

    #[test]
    fn a_call_nested_past_the_bound_is_an_error_not_a_crash() {
        // 10,000 levels would overflow the stack of a parser that trusts depth.
        let deep = format!("call:f{{a:{}", "[".repeat(10_000));
        let e = ToolFormat::Gemma4.parse(&deep, &[]).unwrap_err();
        assert!(e.contains("deeper than"), "{e}");
        let ok = format!("call:f{{a:{}1{}}}", "[".repeat(MAX_CALL_DEPTH), "]".repeat(MAX_CALL_DEPTH));
        assert!(ToolFormat::Gemma4.parse(&ok, &[]).is_ok());
    }

    #[test]
    fn tool_names_outside_openai_s_alphabet_are_refused() {
        for bad in ["", "a\"b", "a b", "x\" | /.*/ \"", &"n".repeat(65)] {
            let tools = [tool(bad, json!({"type": "object"}))];
            let e = ToolChoice::parse(None, Some(&tools)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("tools[0].function.name"), "{bad:?}: {e:?}");
        }
        let tools = [tool("get_weather-2.v1", json!({"type": "object"}))];
        assert_eq!(ToolChoice::parse(None, Some(&tools)).unwrap(), ToolChoice::Auto);
    }

    #[test]
    fn names_and_keys_stay_inside_their_grammar_literals() {
        // A key with quotes and a Lark alternative in it: escaped, it is one literal.
        let key = "k\" | /[a-z]*/ | \"";
        let t = [tool("f", json!({"type": "object", "properties": {key: {"type": "string"}}}))];
        for format in [ToolFormat::QwenXml, ToolFormat::Gemma4] {
            let g = call_grammar(format, &t, &ToolChoice::Required, |_| None).unwrap();
            let open = if format == ToolFormat::Gemma4 { format!("{key}:") } else { format!("<parameter={key}>\n") };
            assert!(g.contains(&serde_json::to_string(&open).unwrap()), "{format:?}: {g}");
            assert!(!g.contains(&format!("\"{key}")), "{format:?}: the key is spliced raw: {g}");
        }
    }

    #[test]
    fn parameter_schemas_keep_their_defs() {
        let params = json!({"type": "object", "$defs": {"city": {"type": "string", "maxLength": 8}},
                            "properties": {"c": {"$ref": "#/$defs/city"}}, "required": ["c"]});
        let g = call_grammar(ToolFormat::QwenJson, &[tool("f", params)], &ToolChoice::Required, |_| None).unwrap();
        assert!(g.contains("\"$ref\":\"#/$defs/tool0/$defs/city\""), "{g}");
        assert!(g.contains("\"$ref\":\"#/$defs/tool0\""), "{g}");
    }
}
