//! Calls into the `tokenizers` library under a panic guard: a malformed
//! tokenizer file can make it panic (a fuzzed tokenizer.json did, inside
//! its decoder deserialization), and a model file must give an error, not
//! end the process.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Set while a guarded call runs: its panic is turned into an error, so
    /// the panic hook stays quiet about it.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// Wraps the process's panic hook (once) so that panics inside [`guarded`]
/// calls are not printed; every other panic still is.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(Cell::get) {
                previous(info)
            }
        }));
    });
}

/// Runs `f`; a panic becomes `Err` with its message.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let was = GUARDED.with(|g| g.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    r.map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!("the tokenizers library failed: {}", msg.lines().next().unwrap_or(""))
    })
}
