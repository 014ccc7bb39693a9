//! Everything about text for famlx: tokenizers, the BOS rule, chat templates and a streaming
//! detokenizer.
//!
//! This crate does not depend on MLX, so it builds and tests without it.
//!
//! * [`Tokenizer`] loads a Hugging Face checkpoint folder ([`Tokenizer::from_dir`]) or GGUF
//!   metadata ([`Tokenizer::from_gguf`]).
//! * [`ChatTemplate`] renders chat templates the way transformers' `apply_chat_template` does.
//! * [`StreamingDetokenizer`] turns generated ids into text one token at a time.
//!
//! BOS rule: [`Tokenizer::encode`] with `add_bos = true` prepends BOS only when the tokenizer
//! wants one and the text does not already start with the BOS token string, so encoding a
//! templated prompt that already carries BOS never doubles it.

mod detok;
mod error;
mod gguf;
mod guard;
mod special;
mod template;
mod tokenizer;

pub use detok::StreamingDetokenizer;
pub use error::{Error, Result};
pub use gguf::{read_gguf_metadata, MetaValue};
pub use template::ChatTemplate;
pub use tokenizer::Tokenizer;
