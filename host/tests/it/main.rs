//! host's integration tests, one test binary grouped by concern (each test
//! binary links all of host; forty of them once filled CI's disk).
//!
//! Run one group or file with a filter on its module path, e.g.
//! `cargo test -p famlx --test it families::gemma4::` or
//! `cargo test -p famlx --test it serve::hostile`.
//!
//! The tests run on threads of one process, so none of them changes the
//! process's environment or working directory (a child's environment is set
//! on its `Command`), MLX work in this process holds [`common::mlx_lock`],
//! and what a process may do only once (fetching the default model) goes
//! through one shared helper in `common`.
//!
//! A plugin crate linked as a library brings its exported symbols (ABI
//! stamps, root module), the same names in every plugin, so this binary
//! links one, qwen3_5's, and reaches gemma4 and llama through their family
//! libraries (`famlx_gemma4`, `famlx_llama`).

mod common;

/// The shape of the code base (module circles, file lengths).
mod architecture;

/// This binary's own layout: every test file is one of its modules.
mod layout;

/// `famlx` run distributed: `famlx launch`, ranks, rings.
mod distributed;

/// Each family against its reference (mlx-lm, mlx-vlm), its weight-name
/// rules, and its media towers.
mod families {
    /// llama, qwen3 and phi3 (the llama family) parity with mlx-lm, the
    /// list of every fixture, and the tie rule of the parity checks.
    mod parity;

    mod llama {
        /// GGUF names and metadata.
        mod names;
    }

    mod qwen3 {
        /// The fused q/k norm path.
        mod qk_norm;
    }

    mod qwen3_5 {
        mod names;
        mod parity;
        mod vision;
    }

    mod gemma4 {
        /// Audio prompts against mlx-vlm.
        mod audio;
        /// The audio front end (log-mel features).
        mod log_mel;
        mod names;
        mod parity;
        mod vision;
    }

    mod gemma4_unified {
        mod parity;
    }

    /// The text families of issue 36 (qwen2, gemma3, olmo, ...) against mlx-lm.
    pub(crate) mod text;

    /// Real GGUF weights (SmolLM2 Q4_1, Gemma 3 270M Q4_K_M) against llama.cpp.
    mod llamacpp;
}

/// Loading a checkpoint: fusion and quantization through a family's rewrite.
mod model {
    mod fusion;
    /// GGUF K-quants held packed.
    mod gguf_kquant;
    mod split_quant;
}

/// The generation loop: batching, speculative decoding, prompt reuse,
/// logits processors.
mod decode {
    mod batch;
    mod logits_processing;
    mod prompt_reuse;
    mod speculative;
}

/// Cache kinds, their properties, and prompt caches on disk.
mod caches {
    mod kinds;
    mod prompt_file;
    mod props;
}

/// The `famlx` commands as a user runs them.
mod cli {
    mod bench;
    mod chat;
    mod convert;
    mod default_model;
    mod hub;
    mod hub_gguf;
    mod prompts;
}

/// `famlx serve` end to end.
mod serve {
    mod api;
    /// Every text family batched in `famlx serve`, each answer as `generate`'s.
    mod families;
    mod hostile;
    mod load;
    mod speculative;
}

/// Bad and hostile input: one clear line, never a crash.
mod robustness {
    mod audio_inputs;
    mod bad_input;
    mod hostile_files;
    mod input_files;
    mod vision_inputs;
}

/// Plugins: loading and refusals, hot reload, an out-of-tree plugin.
mod plugins {
    /// `famlx plugins --json` and the README's supported-models table.
    mod catalog;
    mod error_kinds;
    mod hot_reload;
    mod loading;
    mod out_of_tree;
}
