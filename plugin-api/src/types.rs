//! Plain data crossing the boundary: plans, inputs, outputs, options.

use crate::ArrayHandle;
use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;

/// How a tensor is quantized.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct QuantSpec {
    /// Elements per scale.
    pub group_size: i32,
    /// Bits per element.
    pub bits: i32,
    /// "affine", "mxfp4", ...
    pub mode: RString,
}

impl From<&QuantSpec> for mlx::quant::QuantSpec {
    fn from(q: &QuantSpec) -> Self {
        mlx::quant::QuantSpec { group_size: q.group_size, bits: q.bits, mode: q.mode.to_string() }
    }
}

impl From<&mlx::quant::QuantSpec> for QuantSpec {
    fn from(q: &mlx::quant::QuantSpec) -> Self {
        QuantSpec { group_size: q.group_size, bits: q.bits, mode: q.mode.as_str().into() }
    }
}

/// The cache a layer slot needs.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub enum CacheKind {
    /// Keys and values of every position.
    Full,
    /// Keys and values of the last `window` positions.
    Sliding {
        /// window length in tokens
        window: u32,
    },
    /// A recurrent state of `arrays` arrays (e.g. conv state + SSM state).
    Recurrent {
        /// number of state arrays
        arrays: u32,
    },
}

/// How the converter treats a tensor.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub enum QuantClass {
    /// Never quantize (norms, biases, small or sensitive tensors).
    Skip,
    /// Quantize with the run's bits and group size.
    Body,
    /// Quantize with these settings whatever the run asks.
    Pinned(QuantSpec),
    /// Stored exactly as it comes: neither quantized nor cast to the run's
    /// dtype (e.g. a float32 state parameter such as qwen3_5's `A_log`).
    Keep,
}

/// What the host needs to know about a model to run it. Build one with
/// [`ModelPlan::text`] and the `with_*` methods.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct ModelPlan {
    /// Family name.
    pub family: RString,
    /// The checkpoint's `model_type`.
    pub model_type: RString,
    /// The family's parsed config as JSON; handed back to `build` and
    /// `rewrite` ([`ModelPlan::config_as`] reads it back typed).
    pub config: RString,
    /// One entry per cache slot the model's forward expects.
    pub caches: RVec<CacheKind>,
    /// End-of-sequence token ids from the config (the host adds the
    /// tokenizer's own).
    pub eos_ids: RVec<u32>,
    /// Output vocabulary size (the host refuses prompt ids past it).
    pub vocab_size: u32,
    /// Width of the hidden state (for drafters and embeddings input).
    pub hidden_size: u32,
    /// Longest context the model runs to (rope scaling included); the host
    /// refuses longer prompts unless a window is asked for. 0: unknown.
    pub max_position_embeddings: u32,
    /// Inputs the model accepts: "text", "image", "audio" (shown in the
    /// host's load log).
    pub modalities: RVec<RString>,
    /// The checkpoint's storage dtype ("bfloat16", ...), shown in the host's
    /// load log; the weights compute in the dtype they are stored in.
    pub dtype: RString,
    /// Whether the tokenizer should prepend BOS when its own files do not
    /// say (None: leave it to the tokenizer).
    pub add_bos: ROption<bool>,
    /// How prompts carry images and audio, for a model that takes them
    /// (`None`: text only). Set with [`ModelPlan::with_media`].
    pub media: ROption<crate::MediaSpec>,
    /// The feature widths of the keys and values the caches hold (each
    /// distinct head dimension once; empty: not said). The host checks
    /// `--kv-group-size` against them at load. Set with
    /// [`ModelPlan::with_head_dims`].
    pub kv_head_dims: RVec<u32>,
}

impl ModelPlan {
    /// The plan of a text model of family `family`: its `model_type`, the
    /// config to hand back to `build` (serialized), one cache slot per entry
    /// of `caches`, an output vocabulary of `vocab` and a width of `hidden`.
    /// No EOS ids, unknown context, storage dtype bfloat16 and no BOS rule
    /// until set with the `with_*` methods.
    pub fn text(
        family: &str,
        model_type: &str,
        config: &impl serde::Serialize,
        caches: Vec<CacheKind>,
        vocab: i32,
        hidden: i32,
    ) -> mlx::Result<ModelPlan> {
        let config = serde_json::to_string(config).map_err(|e| crate::config::config_error(format!("config: {e}")))?;
        Ok(ModelPlan {
            family: family.into(),
            model_type: model_type.into(),
            config: config.into(),
            caches: caches.into(),
            eos_ids: RVec::new(),
            vocab_size: vocab.max(0) as u32,
            hidden_size: hidden.max(0) as u32,
            max_position_embeddings: 0,
            modalities: vec![RString::from("text")].into(),
            dtype: "bfloat16".into(),
            add_bos: ROption::RNone,
            media: ROption::RNone,
            kv_head_dims: RVec::new(),
        })
    }

    /// With these end-of-sequence ids.
    pub fn with_eos(mut self, ids: Vec<u32>) -> Self {
        self.eos_ids = ids.into();
        self
    }

    /// With a context of `tokens` (0: unknown).
    pub fn with_context(mut self, tokens: u32) -> Self {
        self.max_position_embeddings = tokens;
        self
    }

    /// With these head dimensions of the cached keys and values (see
    /// [`ModelPlan::kv_head_dims`]): a `--kv-group-size` that does not
    /// divide one is refused at load, naming the sizes that would.
    pub fn with_head_dims(mut self, dims: &[i32]) -> Self {
        let mut d: Vec<u32> = dims.iter().map(|&x| x.max(0) as u32).collect();
        d.sort_unstable();
        d.dedup();
        self.kv_head_dims = d.into();
        self
    }

    /// With this storage dtype name.
    pub fn with_dtype(mut self, dtype: &str) -> Self {
        self.dtype = dtype.into();
        self
    }

    /// Taking images and/or audio as `spec` says (adds "image" and
    /// "audio" to the modalities as it has them).
    pub fn with_media(mut self, spec: crate::MediaSpec) -> Self {
        for (kind, has) in [("image", spec.image.is_some()), ("audio", spec.audio.is_some())] {
            if has && !self.modalities.iter().any(|m| m == kind) {
                self.modalities.push(kind.into());
            }
        }
        self.media = ROption::RSome(spec);
        self
    }

    /// With a BOS rule for tokenizers that do not say.
    pub fn with_bos(mut self, add: bool) -> Self {
        self.add_bos = ROption::RSome(add);
        self
    }

    /// The family's config the plan carries, parsed as `T` (the family's
    /// typed config), an error naming the field at fault.
    pub fn config_as<T: serde::de::DeserializeOwned>(&self) -> mlx::Result<T> {
        let v: serde_json::Value = serde_json::from_str(self.config.as_str())
            .map_err(|e| crate::config::config_error(format!("plan config is not JSON: {e}")))?;
        crate::config::parse(&v)
    }
}

/// What a family says of one `model_type` it serves, for `famlx plugins`
/// and the README's table of supported models (both generated from it).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Default)]
pub struct ModelInfo {
    /// The `model_type` (config.json's; for a GGUF file, see `gguf`).
    pub model_type: RString,
    /// Checkpoints of it people run (hub repositories).
    pub examples: RVec<RString>,
    /// Routed experts.
    pub moe: bool,
    /// Sliding-window attention layers.
    pub sliding: bool,
    /// Takes images.
    pub images: bool,
    /// Takes audio.
    pub audio: bool,
    /// The GGUF `general.architecture` that reads as this model type, where
    /// the family reads GGUF files of it.
    pub gguf: ROption<RString>,
}

impl ModelInfo {
    /// A text model type with no examples or features yet.
    pub fn text(model_type: &str) -> ModelInfo {
        ModelInfo { model_type: model_type.into(), ..Default::default() }
    }

    /// With these example checkpoints.
    pub fn examples(self, repos: &[&str]) -> ModelInfo {
        ModelInfo { examples: repos.iter().map(|r| RString::from(*r)).collect(), ..self }
    }

    /// Routed experts.
    pub fn moe(self) -> ModelInfo {
        ModelInfo { moe: true, ..self }
    }

    /// Sliding-window layers.
    pub fn sliding(self) -> ModelInfo {
        ModelInfo { sliding: true, ..self }
    }

    /// Takes images.
    pub fn images(self) -> ModelInfo {
        ModelInfo { images: true, ..self }
    }

    /// Takes audio.
    pub fn audio(self) -> ModelInfo {
        ModelInfo { audio: true, ..self }
    }

    /// Read from GGUF files of architecture `arch`.
    pub fn gguf(self, arch: &str) -> ModelInfo {
        ModelInfo { gguf: ROption::RSome(arch.into()), ..self }
    }
}

/// Which drafter the host asks a family for (see
/// [`crate::abi::Family::build_drafter`]).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftRole {
    /// The target's own draft head (e.g. an MTP head in its checkpoint):
    /// both plan/weights pairs are the target's.
    OwnHead,
    /// A separate draft checkpoint (`--draft-model`): the first pair is the
    /// draft's, the second the target's (possibly of another family).
    Checkpoint,
}

/// Which logits a forward call must produce.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq)]
pub enum LogitsWanted {
    /// Every position (speculative verification).
    All,
    /// Only the last position (generation).
    Last,
    /// None (prefill chunks before the last).
    None,
}

/// Where a forward call's tokens come from. mlx-vlm embeds a prompt
/// differently from the tokens it generates (gemma4 E2B/E4B: a prompt token
/// with a media token id reads the pad token's per-layer input, a generated
/// one its own), so the host says which.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// The prompt (template, user text, media placeholders), including a
    /// later turn's, prefilled after earlier turns.
    Prompt,
    /// Tokens the model produced: decode steps, speculative verification,
    /// and re-feeding accepted tokens after a rollback.
    Generated,
}

/// Input of one forward call.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct ForwardInput {
    /// Token ids `[B, L]` (int32).
    pub tokens: ArrayHandle,
    /// Input embeddings `[B, L, hidden]` replacing the token embeddings.
    pub embeddings: ROption<ArrayHandle>,
    /// Which logits to compute.
    pub logits: LogitsWanted,
    /// Also return the final hidden state (before the head).
    pub want_hidden: bool,
    /// The rows for this call's media placeholder tokens (image and audio
    /// alike), in the order of their positions (`[M, hidden]`, from
    /// `embed_images` / `embed_audio`), when it has any.
    pub media: ROption<ArrayHandle>,
    /// Rotary positions of this call's tokens (a slice of `positions`),
    /// when the family places images in 2-D.
    pub positions: ROption<ArrayHandle>,
    /// What positions without explicit ids add to the cache offset (the
    /// `delta` of the sequence's `positions`; 0 for plain text).
    pub position_delta: i64,
    /// Whether the tokens are the prompt's or generated.
    pub source: TokenSource,
}

/// Output of one forward call.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct ForwardOutput {
    /// Logits `[B, L or 1, vocab]` (float), absent for `LogitsWanted::None`.
    pub logits: ROption<ArrayHandle>,
    /// Final hidden state `[B, L, hidden]` when asked.
    pub hidden: ROption<ArrayHandle>,
}

/// The mask of an attention call.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone)]
pub enum AttnMask {
    /// Causal over the cache (windowed for rotating caches).
    Causal,
    /// No mask (bidirectional, e.g. over media tokens).
    None,
    /// An explicit mask broadcastable to `[B, H, L, S]` (bool or additive).
    Array(ArrayHandle),
}

/// Options of an attention call.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct AttnOptions {
    /// Score scale (usually 1/√head_dim).
    pub scale: f32,
    /// The mask.
    pub mask: AttnMask,
    /// Per-head attention sinks (logits of a virtual always-attended key).
    pub sinks: ROption<ArrayHandle>,
}

impl AttnOptions {
    /// Causal attention with the given scale.
    pub fn causal(scale: f32) -> Self {
        AttnOptions { scale, mask: AttnMask::Causal, sinks: ROption::RNone }
    }
}

/// Output of one drafter step.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct DraftOutput {
    /// Logits of the last position, `[B, 1, V]`.
    pub logits: ArrayHandle,
    /// Hidden state to feed the next step, `[B, 1, H]`.
    pub hidden: ArrayHandle,
}

/// Tensors the host concatenates into one when it loads a checkpoint, so a
/// family runs one matmul where the checkpoint has several (q/k/v, or
/// gate/up). For each of `weight`, `scales`, `biases` and `bias` the parts
/// have, `{part}.{suffix}` are concatenated along axis 0 into
/// `{into}.{suffix}` and the parts are dropped. The host skips the whole
/// fusion, leaving the parts as they are, when they are stored differently
/// (dtype, quantization, trailing dims, a tensor only some parts have): a
/// family must accept both forms.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct Fusion {
    /// Module path of the fused tensor (e.g. `model.layers.0.self_attn.qkv_proj`).
    pub into: RString,
    /// Module paths of the parts, in output order.
    pub parts: RVec<RString>,
}

/// How a model is split over a group of processes, as the host lends it to
/// a family's `build` ([`crate::abi::WeightStore::parallel`]).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelSpec {
    /// 0: tensor parallel (heads and MLP columns split), 1: pipeline
    /// parallel (layers split).
    pub mode: u8,
    /// This rank.
    pub rank: i32,
    /// Ranks in the group.
    pub size: i32,
}

impl From<ParallelSpec> for mlx::nn::Parallel {
    fn from(p: ParallelSpec) -> Self {
        let mode = if p.mode == 1 { mlx::nn::ParallelMode::Pipeline } else { mlx::nn::ParallelMode::Tensor };
        mlx::nn::Parallel { mode, rank: p.rank, size: p.size }
    }
}

impl From<mlx::nn::Parallel> for ParallelSpec {
    fn from(p: mlx::nn::Parallel) -> Self {
        let mode = match p.mode {
            mlx::nn::ParallelMode::Tensor => 0,
            mlx::nn::ParallelMode::Pipeline => 1,
        };
        ParallelSpec { mode, rank: p.rank, size: p.size }
    }
}
