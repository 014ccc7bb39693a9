//! Rules about special tokens that every tokenizer source shares (Hugging
//! Face folders and GGUF metadata).

/// Token names that end a turn or the text. Those present as special tokens count as EOS, so
/// generation stops on any of them even when the config names only one.
const END_TOKEN_NAMES: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<|end|>",
    "<eos>",
    "</s>",
    "<|return|>",
];

/// Whether `t` is the name of a token that ends a turn or the text.
pub(crate) fn is_end_token_name(t: &str) -> bool {
    END_TOKEN_NAMES.contains(&t)
}

/// Appends `id` unless it is already there (EOS lists keep their order).
pub(crate) fn push_unique(v: &mut Vec<u32>, id: u32) {
    if !v.contains(&id) {
        v.push(id);
    }
}
