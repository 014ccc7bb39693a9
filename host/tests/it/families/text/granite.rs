//! The Granite plugin's families (granite, granitemoe) against mlx-lm, and
//! the configs each refuses.

use super::olmo::refused;
use crate::families::parity::parity_in;

#[test]
fn granite_f32() {
    parity_in("granite-f32", "granite");
}

/// An activation granite does not implement is refused naming it.
#[test]
fn granite_refuses_an_unknown_activation() {
    refused("granite-f32", |c| drop(c.insert("hidden_act".into(), "relu2".into())), &["hidden_act", "relu2"]);
}
