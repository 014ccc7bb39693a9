//! `famlx chat`: the REPL. A conversation whose caches stay warm across
//! turns (each turn prefills only what is new), slash commands, Ctrl-C that
//! stops whatever runs (a long prefill included) and quits on a second
//! press at the prompt (a burst of presses that stopped a reply is not one
//! at the prompt), input lines bounded in length, and hot reload of the
//! serving plugin with `--watch`.

use super::args::ChatArgs;
use super::setup::{load, params, template_kwargs};
use crate::decode::{GenParams, Interrupted};
use crate::plugins::search_dirs;
use crate::prompt::{chat_prompt, load_audio_clips, load_images, Message, PromptMedia};
use crate::reload::{reload_if_changed, PluginWatcher, Reload};
use crate::session::Session;
use anyhow::Result;
use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest line the REPL reads (1 MiB); a longer one is skipped with a
/// warning, and input that never ends a line (`/dev/zero`) is read and
/// dropped in pieces, never held whole.
pub const MAX_LINE: usize = 1 << 20;

/// Ctrl-C presses closer together than this are one burst: after a press
/// that stopped a reply, the rest of its burst does not count at the prompt.
const BURST_GAP: Duration = Duration::from_secs(1);

/// The REPL's commands, for `/help`.
const COMMANDS: &[(&str, &str)] = &[
    ("/help", "list these commands"),
    ("/reset", "forget the conversation (the system message stays)"),
    ("/history", "show the conversation so far"),
    ("/image PATH", "attach an image to the next message"),
    ("/audio PATH", "attach a WAV audio clip to the next message"),
    ("/exit, /quit", "leave (also Ctrl-D, or Ctrl-C twice at the prompt)"),
];

/// What the REPL reacts to.
enum Event {
    /// A line typed (without its newline).
    Line(String),
    /// A line that is not UTF-8.
    NotText,
    /// A line longer than [`MAX_LINE`] (the rest of it is skipped).
    TooLong,
    /// End of input (Ctrl-D).
    Eof,
    /// Ctrl-C, and when it was pressed.
    Interrupt(Instant),
}

/// What a typed line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command<'a> {
    /// Nothing (blank line).
    Nothing,
    /// A message for the model.
    Say(&'a str),
    /// `/help`
    Help,
    /// `/reset`
    Reset,
    /// `/history`
    History,
    /// `/image PATH`
    Image(&'a str),
    /// `/audio PATH`
    Audio(&'a str),
    /// `/exit` or `/quit`
    Exit,
    /// An unknown `/command`.
    Unknown(&'a str),
}

fn parse(line: &str) -> Command<'_> {
    let t = line.trim();
    match t {
        "" => Command::Nothing,
        "/help" | "/?" => Command::Help,
        "/reset" | "/clear" => Command::Reset,
        "/history" => Command::History,
        "/exit" | "/quit" | "/bye" => Command::Exit,
        _ if t.starts_with("/image ") || t == "/image" => Command::Image(t["/image".len()..].trim()),
        _ if t.starts_with("/audio ") || t == "/audio" => Command::Audio(t["/audio".len()..].trim()),
        // `//text` sends `/text`.
        _ if t.starts_with("//") => Command::Say(&t[1..]),
        _ if t.starts_with('/') => Command::Unknown(t.split_whitespace().next().unwrap_or(t)),
        _ => Command::Say(t),
    }
}

/// Reads stdin on a thread, so a plugin reload (and Ctrl-C) is served while
/// the REPL waits for input. A line that is not UTF-8 or is too long is
/// reported, not fatal.
fn spawn_reader(tx: std::sync::mpsc::Sender<Event>) {
    std::thread::spawn(move || read_events(std::io::stdin().lock(), MAX_LINE, |ev| tx.send(ev).is_ok()));
}

/// The events of `input`, each given to `send` until it returns false or
/// input ends: lines of at most `max` bytes (without the newline), and
/// [`Event::TooLong`] as soon as a line passes `max`, whose rest is then
/// read and dropped.
fn read_events(mut input: impl BufRead, max: usize, mut send: impl FnMut(Event) -> bool) {
    let mut buf = Vec::new();
    let mut skipping = false;
    loop {
        let avail = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => &[][..],
        };
        if avail.is_empty() {
            // A last line without a newline still counts.
            if !buf.is_empty() && !send(line_event(std::mem::take(&mut buf))) {
                return;
            }
            send(Event::Eof);
            return;
        }
        let newline = avail.iter().position(|&b| b == b'\n');
        let piece = &avail[..newline.unwrap_or(avail.len())];
        if !skipping {
            if buf.len() + piece.len() > max {
                buf = Vec::new();
                skipping = true;
                if !send(Event::TooLong) {
                    return;
                }
            } else {
                buf.extend_from_slice(piece);
            }
        }
        let used = newline.map_or(avail.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            if !skipping && !send(line_event(std::mem::take(&mut buf))) {
                return;
            }
            skipping = false;
        }
    }
}

/// A read line (its newline gone) as an event: trailing `\r` dropped.
fn line_event(mut buf: Vec<u8>) -> Event {
    while buf.last() == Some(&b'\r') {
        buf.pop();
    }
    match String::from_utf8(buf) {
        Ok(s) => Event::Line(s),
        Err(_) => Event::NotText,
    }
}

/// The warning for a skipped line.
fn skipped(ev: &Event) -> Option<String> {
    match ev {
        Event::NotText => Some("famlx: warning: that line is not UTF-8 text; skipped".into()),
        Event::TooLong => Some(format!("famlx: warning: that line is longer than {} MiB; skipped", MAX_LINE >> 20)),
        _ => None,
    }
}

/// The next line for every rank of a distributed chat: read by rank 0
/// (lines that are not text are reported there and skipped), sent to all.
fn shared_event(rx: &std::sync::mpsc::Receiver<Event>, pending: &mut VecDeque<Event>) -> Result<Option<Event>> {
    let line = if crate::distributed::rank() == 0 {
        loop {
            match pending.pop_front().or_else(|| rx.recv().ok()) {
                Some(Event::Line(l)) => break Some(l),
                Some(ev @ (Event::NotText | Event::TooLong)) => eprintln!("{}", skipped(&ev).unwrap_or_default()),
                Some(Event::Interrupt(_)) => continue,
                Some(Event::Eof) | None => break None,
            }
        }
    } else {
        None
    };
    Ok(crate::distributed::broadcast_text(line.as_deref())?.map(Event::Line))
}

/// Runs `famlx chat`.
pub fn run(a: ChatArgs) -> Result<()> {
    if a.watch {
        crate::distributed::refuse("chat --watch")?;
    }
    let mut s = load(&a.model, &a.cache, Some(&a.spec), a.watch)?;
    let mut p = params(&a.sampling, &a.cache, &s.model)?;
    let watcher = if a.watch { Some(PluginWatcher::new(&search_dirs(&a.model.plugin_dirs))?) } else { None };
    let tty = std::io::stdout().is_terminal();
    let cancel = Arc::new(AtomicBool::new(false));
    p.cancel = Some(cancel.clone());
    let (tx, rx) = channel::<Event>();
    // As ranks, rank 0 reads the lines and every rank runs them; Ctrl-C
    // ends the run (a generation stopped on one rank alone would leave the
    // others waiting for it).
    let ranks = crate::distributed::parallel().is_some();
    if !ranks {
        // Ctrl-C stops what runs (generation checks `cancel`) and tells the
        // REPL, which quits on a second one at the prompt.
        let (c, tx) = (cancel.clone(), tx.clone());
        let _ = ctrlc::set_handler(move || {
            c.store(true, Ordering::SeqCst);
            let _ = tx.send(Event::Interrupt(Instant::now()));
        });
    }
    if crate::distributed::rank() == 0 {
        spawn_reader(tx);
    }
    let name = a.model.model.clone().unwrap_or_else(|| crate::default_model::NAME.to_string());
    eprintln!("famlx chat: {name} ({} family). /help for commands, Ctrl-D to quit.", s.model.family.name);

    let mut history: Vec<Message> = Vec::new();
    if let Some(s) = &a.system {
        history.push(Message::new("system", s));
    }
    let kwargs = template_kwargs(a.think);
    let mut pending: VecDeque<Event> = VecDeque::new();
    let mut armed = false;
    // Until when Ctrl-C presses still belong to a burst that stopped a reply.
    let mut burst_until: Option<Instant> = None;
    // Images and clips attached with /image and /audio, waiting for the next message.
    let mut attached: Vec<Rc<PromptMedia>> = Vec::new();
    loop {
        if tty {
            print!(">> ");
            let _ = std::io::stdout().flush();
        }
        let ev = if ranks {
            match shared_event(&rx, &mut pending)? {
                Some(ev) => ev,
                None => break,
            }
        } else {
            match pending.pop_front() {
                Some(ev) => ev,
                None => match next_event(&rx, &watcher, &mut s) {
                    Some(ev) => ev,
                    None => break,
                },
            }
        };
        let line = match ev {
            Event::Eof => break,
            Event::Interrupt(at) if burst_until.is_some_and(|t| at < t) => {
                burst_until = Some(at + BURST_GAP);
                continue;
            }
            Event::Interrupt(_) if armed => break,
            Event::Interrupt(_) => {
                armed = true;
                eprintln!("\n(Ctrl-C again or Ctrl-D to quit)");
                continue;
            }
            ev @ (Event::NotText | Event::TooLong) => {
                armed = false;
                eprintln!("{}", skipped(&ev).unwrap_or_default());
                continue;
            }
            Event::Line(l) => l,
        };
        armed = false;
        burst_until = None;
        let text = match parse(&line) {
            Command::Nothing => continue,
            Command::Exit => break,
            Command::Help => {
                for (c, what) in COMMANDS {
                    println!("  {c:<14} {what}");
                }
                println!("  {:<14} sends a line that starts with /", "//text");
                continue;
            }
            Command::Image("") => {
                eprintln!("usage: /image PATH");
                continue;
            }
            Command::Audio("") => {
                eprintln!("usage: /audio PATH");
                continue;
            }
            Command::Image(path) | Command::Audio(path) => {
                let audio = matches!(parse(&line), Command::Audio(_));
                let paths = [std::path::PathBuf::from(path)];
                let loaded = if audio { load_audio_clips(&s.model, &paths) } else { load_images(&s.model, &paths) };
                match loaded {
                    Ok(mut item) => {
                        let n = item[0].tokens();
                        attached.append(&mut item);
                        let what = if audio { "audio" } else { "image" };
                        println!("({what} {path} attached to the next message: {n} tokens)");
                    }
                    Err(e) => eprintln!("famlx: error: {e:#}"),
                }
                continue;
            }
            Command::History => {
                print_history(&history);
                continue;
            }
            Command::Reset => {
                attached.clear();
                history.retain(|m| m.role == "system");
                s.reset()?;
                println!("(history cleared)");
                continue;
            }
            Command::Unknown(c) => {
                eprintln!("unknown command {c}: /help lists the commands (start a line with // to send a /)");
                continue;
            }
            Command::Say(t) => t.to_string(),
        };
        history.push(Message::with_media("user", &text, std::mem::take(&mut attached)));
        cancel.store(false, Ordering::SeqCst);
        match answer(&mut s, &history, &kwargs, &p, tty) {
            Ok(reply) => history.push(Message::new("assistant", &reply)),
            Err(e) => {
                // The turn did not happen: the conversation stays as it was
                // (its images and clips wait for the next message).
                if let Some(m) = history.pop() {
                    attached = m.media;
                }
                if e.downcast_ref::<Interrupted>().is_some() {
                    eprintln!("(interrupted)");
                } else {
                    eprintln!("famlx: error: {e:#}");
                }
            }
        }
        // A Ctrl-C that stopped this turn is not one at the prompt, nor are
        // the presses of its burst that come later; lines typed meanwhile
        // are kept.
        while let Ok(ev) = rx.try_recv() {
            match ev {
                Event::Interrupt(at) => burst_until = Some(at + BURST_GAP),
                ev => pending.push_back(ev),
            }
        }
    }
    Ok(())
}

/// `/history`: each message of the conversation, one paragraph each.
fn print_history(history: &[Message]) {
    if history.is_empty() {
        println!("(no conversation yet)");
    }
    for m in history {
        let media = match m.media.len() {
            0 => String::new(),
            n => format!(" [{n} attachment{}]", if n == 1 { "" } else { "s" }),
        };
        println!("{}{media}: {}", m.role, m.content);
    }
}

/// Waits for the next event; with a watcher, serves plugin reloads while
/// waiting. `None` when input is gone.
fn next_event(rx: &Receiver<Event>, watcher: &Option<PluginWatcher>, s: &mut Session) -> Option<Event> {
    let Some(w) = watcher else { return rx.recv().ok() };
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(ev) => return Some(ev),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) => {}
        }
        match reload_if_changed(s, &w.changed(Duration::from_millis(0))) {
            Reload::Unrelated => {}
            Reload::Failed(msg) | Reload::Swapped(msg) => eprintln!("{msg}"),
        }
    }
}

/// One turn: renders the conversation, checks it fits, generates and
/// streams the reply. Returns the reply's text.
fn answer(
    s: &mut Session,
    history: &[Message],
    kwargs: &serde_json::Map<String, serde_json::Value>,
    p: &GenParams,
    tty: bool,
) -> Result<String> {
    let tok = s.model.tokenizer()?.clone();
    let prompt = chat_prompt(&tok, s.model.plan.media.as_ref().into_option(), history, kwargs)?;
    let ids = &prompt.ids;
    let mut p = p.clone();
    if let Some(room) = s.model.context_room(ids.len())? {
        p.max_tokens = p.max_tokens.min(room);
    }
    let mut detok = tok.detokenizer();
    let mut reply = String::new();
    let mut styler = ThinkStyler::new(tty);
    let stop_ids = p.stop_ids.clone();
    let (_, prefilled) = s.generate_prompt(&prompt, &p, |id| {
        if !stop_ids.contains(&id) {
            let piece = detok.push(id);
            reply.push_str(&piece);
            styler.print(&piece);
        }
        true
    })?;
    tracing::debug!("prefilled {prefilled} of {} prompt tokens", ids.len());
    let rest = detok.finish();
    reply.push_str(&rest);
    styler.print(&rest);
    styler.end();
    println!();
    Ok(reply)
}

/// Prints streamed text, dimming `<think>…</think>` reasoning on a terminal.
struct ThinkStyler {
    tty: bool,
    in_think: bool,
}

impl ThinkStyler {
    fn new(tty: bool) -> Self {
        ThinkStyler { tty, in_think: false }
    }

    fn print(&mut self, s: &str) {
        let mut out = std::io::stdout();
        if !self.tty {
            let _ = write!(out, "{s}");
            let _ = out.flush();
            return;
        }
        let mut rest = s;
        while !rest.is_empty() {
            let tag = if self.in_think { "</think>" } else { "<think>" };
            match rest.find(tag) {
                Some(i) => {
                    let _ = write!(out, "{}", &rest[..i]);
                    self.in_think = !self.in_think;
                    let _ = write!(out, "{}{tag}", if self.in_think { "\x1b[2m" } else { "" });
                    if !self.in_think {
                        let _ = write!(out, "\x1b[0m\x1b[1m");
                    }
                    rest = &rest[i + tag.len()..];
                }
                None => {
                    let _ = write!(out, "{rest}");
                    rest = "";
                }
            }
        }
        let _ = out.flush();
    }

    fn end(&mut self) {
        if self.tty {
            print!("\x1b[0m");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_to_commands() {
        assert_eq!(parse("  "), Command::Nothing);
        assert_eq!(parse("/help"), Command::Help);
        assert_eq!(parse("/reset"), Command::Reset);
        assert_eq!(parse("/history"), Command::History);
        assert_eq!(parse(" /quit "), Command::Exit);
        assert_eq!(parse("/frobnicate now"), Command::Unknown("/frobnicate"));
        assert_eq!(parse("//usr/bin is a path"), Command::Say("/usr/bin is a path"));
        assert_eq!(parse("hello"), Command::Say("hello"));
    }

    fn events(input: &[u8], max: usize) -> Vec<String> {
        let mut out = Vec::new();
        read_events(input, max, |ev| {
            out.push(match ev {
                Event::Line(l) => l,
                Event::NotText => "<not text>".into(),
                Event::TooLong => "<too long>".into(),
                Event::Eof => "<eof>".into(),
                Event::Interrupt(_) => "<interrupt>".into(),
            });
            true
        });
        out
    }

    #[test]
    fn lines_past_the_bound_are_skipped_and_reading_goes_on() {
        assert_eq!(events(b"ab\r\n\xff\nlast", 8), ["ab", "<not text>", "last", "<eof>"]);
        // Exactly the bound fits; one more byte is too long, and the rest of
        // that line is dropped, not read as lines.
        assert_eq!(events(b"12345678\n123456789abc\nok\n", 8), ["12345678", "<too long>", "ok", "<eof>"]);
        // Through a reader that hands out a few bytes at a time.
        let slow = std::io::BufReader::with_capacity(3, &b"0123456789\nhi\n"[..]);
        let mut got = Vec::new();
        read_events(slow, 4, |ev| {
            got.push(matches!(ev, Event::TooLong));
            true
        });
        assert_eq!(got, [true, false, false]);
    }

    /// Input that never ends a line is read and dropped: a 64 MiB "line"
    /// never grows the buffer past the bound.
    #[test]
    fn endless_line_is_held_to_the_bound() {
        struct Zeros(usize);
        impl std::io::Read for Zeros {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                let n = b.len().min(self.0);
                b[..n].fill(0);
                self.0 -= n;
                Ok(n)
            }
        }
        let mut got = Vec::new();
        read_events(std::io::BufReader::new(Zeros(64 << 20)), MAX_LINE, |ev| {
            got.push(matches!(ev, Event::TooLong));
            true
        });
        assert_eq!(got, [true, false], "one warning, then the end of input");
    }
}
