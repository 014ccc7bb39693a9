//! A reply's text as it streams: stop strings matched across token
//! boundaries, reasoning (`<think>…</think>`, Gemma's thought channel) split
//! from the content, and tool-call markup turned into calls. Text that may
//! be the start of a marker is held back until the next piece decides.

use super::tools::{ToolCall, ToolFormat};
use serde_json::Value;

/// What one piece of text adds to each part of the reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    /// Answer text.
    pub content: String,
    /// Reasoning text.
    pub reasoning: String,
    /// Completed tool calls.
    pub tool_calls: Vec<ToolCall>,
}

impl Delta {
    /// True when it adds nothing.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }

    /// Appends `o`: text concatenated, calls in order.
    pub fn append(&mut self, o: Delta) {
        self.content += &o.content;
        self.reasoning += &o.reasoning;
        self.tool_calls.extend(o.tool_calls);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Reasoning,
    Call,
    /// A marker-less format (Llama's bare JSON): the rest is one call.
    CallToEnd,
}

/// Reasoning markers: (start, end).
pub const THINK: [(&str, &str); 2] = [("<think>", "</think>"), ("<|channel>", "<channel|>")];

/// The splitter of one reply.
#[derive(Debug)]
pub struct ReplyText {
    mode: Mode,
    pending: String,
    call: String,
    stops: Vec<String>,
    split: bool,
    tools: Option<(ToolFormat, Vec<Value>)>,
    started: bool,
    /// Set once a stop string was seen: the reply ends there.
    pub stopped: bool,
    /// Calls that did not parse, returned as text (for the log).
    pub bad_calls: Vec<String>,
}

impl ReplyText {
    /// A splitter. `split` turns on reasoning and tool-call splitting (chat
    /// replies); `in_reasoning` when the prompt opened a think block;
    /// `tools` when calls are to be parsed.
    pub fn new(stops: Vec<String>, split: bool, in_reasoning: bool, tools: Option<(ToolFormat, Vec<Value>)>) -> Self {
        ReplyText {
            mode: if split && in_reasoning { Mode::Reasoning } else { Mode::Content },
            pending: String::new(),
            call: String::new(),
            stops,
            split,
            tools,
            started: false,
            stopped: false,
            bad_calls: Vec::new(),
        }
    }

    /// The markers that matter in the current mode, each with the mode it leads to (None: stop).
    fn markers(&self) -> Vec<(String, Option<Mode>)> {
        let mut m: Vec<(String, Option<Mode>)> = Vec::new();
        if self.mode != Mode::Call && self.mode != Mode::CallToEnd {
            m.extend(self.stops.iter().map(|s| (s.clone(), None)));
        }
        if !self.split {
            return m;
        }
        let call = self.tools.as_ref().and_then(|(f, _)| f.markers());
        match self.mode {
            Mode::Content => {
                m.extend(THINK.iter().map(|(s, _)| (s.to_string(), Some(Mode::Reasoning))));
                if let Some((s, _)) = call {
                    m.push((s.to_string(), Some(Mode::Call)));
                }
            }
            Mode::Reasoning => m.extend(THINK.iter().map(|(_, e)| (e.to_string(), Some(Mode::Content)))),
            Mode::Call => {
                if let Some((_, e)) = call {
                    m.push((e.to_string(), Some(Mode::Content)));
                }
            }
            Mode::CallToEnd => {}
        }
        m
    }

    fn route(&mut self, text: &str, out: &mut Delta) {
        if text.is_empty() {
            return;
        }
        match self.mode {
            Mode::Content => {
                // Llama 3 writes a call as the whole reply: a reply opening with JSON is one.
                let bare = matches!(&self.tools, Some((ToolFormat::LlamaJson, _)));
                if bare && !self.started && out.content.is_empty() {
                    let t = text.trim_start();
                    if t.starts_with('{') || t.starts_with("<|python_tag|>") {
                        self.mode = Mode::CallToEnd;
                        self.call.push_str(text);
                        return;
                    }
                    if t.is_empty() {
                        out.content.push_str(text);
                        return;
                    }
                }
                self.started = true;
                out.content.push_str(text);
            }
            Mode::Reasoning => out.reasoning.push_str(text),
            Mode::Call | Mode::CallToEnd => self.call.push_str(text),
        }
    }

    /// A finished call's text → a call, or back to text when it does not parse.
    fn close_call(&mut self, out: &mut Delta, markers: Option<(&str, &str)>) {
        let body = std::mem::take(&mut self.call);
        let Some((format, tools)) = &self.tools else { return };
        match format.parse(&body, tools) {
            Ok(c) => out.tool_calls.push(c),
            Err(why) => {
                let (s, e) = markers.unwrap_or(("", ""));
                let text = format!("{s}{body}{e}");
                self.bad_calls.push(format!("{why}: {text:?}"));
                out.content.push_str(&text);
            }
        }
        self.started = true;
    }

    /// Takes in the next piece of text.
    pub fn push(&mut self, piece: &str) -> Delta {
        let mut out = Delta::default();
        if self.stopped {
            return out;
        }
        self.pending.push_str(piece);
        loop {
            let markers = self.markers();
            let hit = markers
                .iter()
                .filter_map(|(m, to)| self.pending.find(m.as_str()).map(|at| (at, m.clone(), *to)))
                .min_by_key(|(at, m, _)| (*at, usize::MAX - m.len()));
            match hit {
                Some((at, marker, to)) => {
                    let before = self.pending[..at].to_string();
                    self.pending.drain(..at + marker.len());
                    self.route(&before, &mut out);
                    match to {
                        None => {
                            self.stopped = true;
                            self.pending.clear();
                            return out;
                        }
                        Some(Mode::Content) if self.mode == Mode::Call => {
                            let m = self.tools.as_ref().and_then(|(f, _)| f.markers());
                            self.mode = Mode::Content;
                            self.close_call(&mut out, m);
                        }
                        Some(Mode::Reasoning) if marker == "<|channel>" => {
                            self.mode = Mode::Reasoning;
                            // Gemma names the channel first.
                            if let Some(rest) = self.pending.strip_prefix("thought\n") {
                                self.pending = rest.to_string();
                            }
                        }
                        Some(m) => self.mode = m,
                    }
                }
                None => {
                    let hold = markers.iter().map(|(m, _)| partial_suffix(&self.pending, m)).max().unwrap_or(0);
                    let emit = self.pending[..self.pending.len() - hold].to_string();
                    self.pending.drain(..self.pending.len() - hold);
                    self.route(&emit, &mut out);
                    return out;
                }
            }
        }
    }

    /// The end of the reply: what was held back, and a call left open.
    pub fn finish(&mut self) -> Delta {
        let mut out = Delta::default();
        if !self.stopped {
            let rest = std::mem::take(&mut self.pending);
            self.route(&rest, &mut out);
        }
        if matches!(self.mode, Mode::Call | Mode::CallToEnd) {
            let m = if self.mode == Mode::Call { self.tools.as_ref().and_then(|(f, _)| f.markers()) } else { None };
            // An unclosed call still parses when the body is complete (the end marker may be a stop token).
            let open = m.map(|(s, _)| (s, ""));
            self.mode = Mode::Content;
            let mut d = Delta::default();
            self.close_call(&mut d, open);
            out.append(d);
        }
        out
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `marker`.
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.as_bytes().starts_with(&text.as_bytes()[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(r: &mut ReplyText, pieces: &[&str]) -> Delta {
        let mut d = Delta::default();
        for p in pieces {
            d.append(r.push(p));
        }
        d.append(r.finish());
        d
    }

    #[test]
    fn stop_string_across_pieces() {
        let mut r = ReplyText::new(vec!["END".into()], false, false, None);
        let d = run(&mut r, &["hello E", "N", "D and more"]);
        assert_eq!(d.content, "hello ");
        assert!(r.stopped);
    }

    #[test]
    fn held_prefix_that_is_not_a_stop_comes_out() {
        let mut r = ReplyText::new(vec!["END".into()], false, false, None);
        assert_eq!(r.push("ab E").content, "ab ");
        assert_eq!(r.push("x").content, "Ex");
        assert_eq!(r.finish().content, "");
    }

    #[test]
    fn reasoning_split_and_prompt_opened_think() {
        let mut r = ReplyText::new(vec![], true, false, None);
        let d = run(&mut r, &["<th", "ink>why</thi", "nk>answer"]);
        assert_eq!((d.reasoning.as_str(), d.content.as_str()), ("why", "answer"));
        let mut r = ReplyText::new(vec![], true, true, None);
        let d = run(&mut r, &["why", "</think>\n\nok"]);
        assert_eq!((d.reasoning.as_str(), d.content.as_str()), ("why", "\n\nok"));
    }

    #[test]
    fn qwen_call_parsed_and_bad_call_kept_as_text() {
        let tools = vec![json!({"type": "function", "function": {"name": "f"}})];
        let mut r = ReplyText::new(vec![], true, false, Some((ToolFormat::QwenJson, tools.clone())));
        let d = run(&mut r, &["Sure.<tool_", "call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"]);
        assert_eq!(d.content, "Sure.");
        assert_eq!(d.tool_calls, vec![ToolCall { name: "f".into(), arguments: "{\"x\":1}".into() }]);
        let mut r = ReplyText::new(vec![], true, false, Some((ToolFormat::QwenJson, tools)));
        let d = run(&mut r, &["<tool_call>not json</tool_call>"]);
        assert_eq!(d.content, "<tool_call>not json</tool_call>");
        assert!(d.tool_calls.is_empty() && r.bad_calls.len() == 1);
    }

    #[test]
    fn gemma_and_xml_and_llama_calls() {
        let tools = vec![
            json!({"type": "function", "function": {"name": "get", "parameters": {"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}}}),
        ];
        let mut r = ReplyText::new(vec![], true, false, Some((ToolFormat::Gemma4, tools.clone())));
        let d = run(&mut r, &["<|tool_call>call:get{n:3,s:<|\"|>a, b{}<|\"|>}<tool_call|>"]);
        let args: Value = serde_json::from_str(&d.tool_calls[0].arguments).unwrap();
        assert_eq!(args, json!({"n": 3, "s": "a, b{}"}));
        let mut r = ReplyText::new(vec![], true, false, Some((ToolFormat::QwenXml, tools.clone())));
        let d = run(&mut r, &["<tool_call>\n<function=get>\n<parameter=n>\n7\n</parameter>\n<parameter=s>\n7\n</parameter>\n</function>\n</tool_call>"]);
        let args: Value = serde_json::from_str(&d.tool_calls[0].arguments).unwrap();
        assert_eq!(args, json!({"n": 7, "s": "7"}));
        let mut r = ReplyText::new(vec![], true, false, Some((ToolFormat::LlamaJson, tools)));
        let d = run(&mut r, &[" {\"name\": \"get\", \"parameters\": {\"n\": 1}}"]);
        assert_eq!(d.tool_calls[0].name, "get");
        assert_eq!(d.content.trim(), "");
    }
}
