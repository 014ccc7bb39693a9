#!/usr/bin/env python3
"""Write random-weight checkpoints for benchmarks, with mlx-lm itself.

Each checkpoint is built by mlx-lm's own model class from a config of the
named shape, cast to bf16, optionally quantized with mlx-lm's
``quantize_model`` (affine, group 64, like ``mlx_lm.convert -q``) and saved
with ``save_model``/``save_config``, so the files on disk are laid out exactly
as mlx-lm writes them. Nothing is downloaded.

If the ``tokenizers`` package is importable, a tiny valid ``tokenizer.json``
is written too (byte-level BPE, one token per id, no merges), so
``mlx_lm.load`` and ``python -m mlx_lm benchmark`` accept the folder; without
it the folder holds no tokenizer and only loaders that skip the tokenizer
(``mlx_lm.utils.load_model``, famlx) can open it.

    python scripts/make_bench_models.py OUT                       # llama3.2-1b and qwen3-0.6b, bf16 q8 q4
    python scripts/make_bench_models.py OUT --shape tiny tiny-qwen3 --dtype bf16 q4
    python scripts/make_bench_models.py OUT --shape qwen3.5-0.8b qwen3.5-4b --dtype bf16 q4
    python scripts/make_bench_models.py OUT --shape gemma4-e2b gemma4-26b-a4b --dtype bf16 q4
    python scripts/make_bench_models.py OUT --shape gemma4-26b-a4b --layers 6   # 26B-A4B is ~52 GB in bf16

Folders are named OUT/<shape>-<dtype>, e.g. OUT/llama3.2-1b-q4.
"""

import argparse
import json
import sys
from pathlib import Path

SHAPES = {
    # Llama-3.2-1B (tied embeddings, llama3 rope scaling).
    "llama3.2-1b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "max_position_embeddings": 131072,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
    },
    # Qwen3-0.6B (tied embeddings, q/k norms).
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 40960,
        "max_window_layers": 28,
        "use_sliding_window": False,
        "sliding_window": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
    # Qwen3.5-0.8B as best known (no hub access here to check): 24 layers in
    # the 3 linear : 1 full pattern, gated delta net with 16 key / 16 value
    # heads of 128, gated full attention 8 heads / 2 KV heads of 256 with
    # rope over a quarter of each head, tied embeddings, vocab 248320.
    # Written in mlx-lm's flat text layout (model_type qwen3_5).
    "qwen3.5-0.8b": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "full_attention_interval": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 3584,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "vocab_size": 248320,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
        },
        "max_position_embeddings": 262144,
        "attention_bias": False,
        "hidden_act": "silu",
        "bos_token_id": 248044,
        "eos_token_id": 248046,
    },
    # Qwen3.5-4B as best known: 32 layers (3:1), delta net 16 key / 32 value
    # heads of 128, attention 16 heads / 4 KV heads of 256, tied embeddings;
    # the rest as the 0.8B (filled in below the table).
    "qwen3.5-4b": {
        "hidden_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 9216,
        "linear_num_value_heads": 32,
    },
    # A small llama for CPU runs (untied lm_head, plain rope).
    # Gemma-4-E2B as best known (mlx-lm's gemma4_text defaults are this
    # model): 35 layers, 4 sliding (window 512) : 1 full, 8 heads / 1 KV
    # head, head_dim 256 (global 512, proportional rope over a quarter),
    # per-layer input embeddings of 256, the last 20 layers KV-shared with a
    # double-wide MLP, soft-capping 30, tied embeddings, vocab 262144.
    # Written as mlx-lm's flat gemma4_text layout.
    "gemma4-e2b": {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "hidden_size": 1536,
        "num_hidden_layers": 35,
        "intermediate_size": 6144,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 512,
        "sliding_window_pattern": 5,
        "num_kv_shared_layers": 20,
        "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262144,
        "use_double_wide_mlp": True,
        "final_logit_softcapping": 30.0,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 131072,
        "bos_token_id": 2,
        "eos_token_id": [1, 106],
    },
    # Gemma-4-26B-A4B as best known: 30 layers, 5 sliding (window 1024) : 1
    # full, 16 heads / 8 KV heads of 256; full layers K=V with 2 KV heads of
    # 512; every layer a GeGLU MLP of 2112 beside 128 routed experts (top 8)
    # of 704; no per-layer inputs or KV sharing; tied embeddings, vocab 262144.
    "gemma4-26b-a4b": {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "hidden_size": 2816,
        "num_hidden_layers": 30,
        "intermediate_size": 2112,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_global_key_value_heads": 2,
        "attention_k_eq_v": True,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "num_kv_shared_layers": 0,
        "hidden_size_per_layer_input": 0,
        "use_double_wide_mlp": False,
        "enable_moe_block": True,
        "num_experts": 128,
        "top_k_experts": 8,
        "moe_intermediate_size": 704,
        "final_logit_softcapping": 30.0,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262144,
        "bos_token_id": 2,
        "eos_token_id": [1, 106],
    },
    "tiny": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "intermediate_size": 1408,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}
SHAPES["qwen3.5-4b"] = {**SHAPES["qwen3.5-0.8b"], **SHAPES["qwen3.5-4b"]}
# The tiny llama's sizes as a Qwen3 (q/k norms, tied head): CPU runs of the qwen3 path.
SHAPES["tiny-qwen3"] = {
    **SHAPES["tiny"],
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
}

QUANT = {"bf16": None, "q8": 8, "q4": 4}


def write_tokenizer(out: Path, vocab_size: int) -> bool:
    """A tiny valid byte-level BPE tokenizer with one token per model id.

    Every id decodes (mlx-lm's streaming detokenizer indexes a table by id),
    the decoder is ByteLevel so mlx-lm picks its BPE streaming detokenizer, as
    for the real Llama 3 and Qwen3 tokenizers. Returns False when the
    ``tokenizers`` package is not importable.
    """
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        return False
    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out / "tokenizer.json"))
    with open(out / "tokenizer_config.json", "w") as f:
        json.dump(
            {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20},
            f,
            indent=2,
        )
    return True


def make(shape: str, dtype: str, out_root: Path, seed: int, tokenizer: bool, layers=None) -> Path:
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

    config = dict(SHAPES[shape])
    config["torch_dtype"] = "bfloat16"
    if layers is not None:
        # Smoke runs: fewer layers (a multiple of the full-attention interval
        # keeps the hybrid pattern).
        orig = config["num_hidden_layers"]
        config["num_hidden_layers"] = layers
        if config.get("num_kv_shared_layers"):
            # Gemma 4: keep the shared fraction, but leave one full pattern
            # of layers that own K/V for the shared ones to read.
            pattern = config.get("sliding_window_pattern", 5)
            shared = config["num_kv_shared_layers"] * layers // orig
            config["num_kv_shared_layers"] = max(0, min(shared, layers - pattern))
    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    # mlx's default initialisers give random weights; store them as bf16.
    model.set_dtype(mx.bfloat16)
    # Qwen3.5 checkpoints keep the delta net's A_log in float32 (mlx-lm's
    # cast_predicate skips it when converting); do the same.
    for name, mod in model.named_modules():
        if "A_log" in mod and isinstance(mod["A_log"], mx.array):
            mod["A_log"] = mod["A_log"].astype(mx.float32)
    mx.eval(model.parameters())
    bits = QUANT[dtype]
    if bits is not None:
        model, config = quantize_model(model, config, group_size=64, bits=bits)
    out = out_root / f"{shape}-{dtype}"
    out.mkdir(parents=True, exist_ok=True)
    save_model(out, model)
    save_config(config, config_path=out / "config.json")
    wrote_tok = tokenizer and write_tokenizer(out, config["vocab_size"])
    n = sum(v.size for _, v in tree_flatten(model.parameters()))
    nbytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    print(
        f"{out}: {shape} {dtype}, {n / 1e6:.1f}M stored values, {nbytes / 2**20:.0f} MiB"
        f"{', tokenizer.json' if wrote_tok else ', no tokenizer'}",
        flush=True,
    )
    del model
    mx.clear_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--shape", nargs="+", default=["llama3.2-1b", "qwen3-0.6b"], choices=sorted(SHAPES))
    ap.add_argument("--dtype", nargs="+", default=["bf16", "q8", "q4"], choices=list(QUANT))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-tokenizer", action="store_true", help="do not write tokenizer.json")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (smoke runs)")
    a = ap.parse_args()
    for shape in a.shape:
        for dtype in a.dtype:
            # Reduced-layer smoke checkpoints go to their own subfolder.
            root = a.out if a.layers is None else a.out / f"smoke-L{a.layers}"
            make(shape, dtype, root, a.seed, not a.no_tokenizer, a.layers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
