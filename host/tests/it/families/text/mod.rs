//! The text families added in tree for issue 36, each against mlx-lm's own
//! model class on its committed fixture (`fixtures/make_text_families.py`):
//! first-step logits and 24 greedy tokens for three prompts (see
//! `super::parity`). One file per family plugin.

/// Every fixture folder of these families (checked by
/// `families::parity::every_fixture_is_tested`).
pub const FIXTURES: &[&str] = &[
    // one line per fixture folder, grouped by plugin
];
