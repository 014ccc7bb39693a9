#!/usr/bin/env python3
"""Turn the SmolLM2 GGUF famlx uses by default into an mlx-lm checkpoint folder.

MLX's GGUF reader (``mx.load``) unpacks Q4_0/Q4_1/Q8_0 tensors into affine
(weight, scales, biases) triples with groups of 32; this script keeps those
tensors bit for bit, renames them to Hugging Face names, undoes llama.cpp's
q/k row permutation (the same rules as plugins/llama/src/lib.rs), and writes
``model.safetensors`` + ``config.json`` (from the GGUF metadata, with a
``quantization`` entry: group 32 affine, the default width plus per-module
overrides where a tensor's width differs). If ``tokenizers`` is importable,
the GGUF's byte-level BPE vocabulary, merges and chat template are written as
``tokenizer.json`` / ``tokenizer_config.json`` so ``mlx_lm.load`` accepts the
folder. Nothing is downloaded.

    famlx generate -p hi                      # once: fetches the GGUF
    python scripts/smollm2_to_safetensors.py OUT_DIR [--gguf PATH]
"""

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_GGUF = (
    Path(os.environ.get("FAMLX_CACHE") or Path.home() / ".cache" / "famlx")
    / "models"
    / "smollm2-135m-instruct"
    / "SmolLM2-135M-Instruct.Q4_1.gguf"
)

GROUP = 32

BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    """GGUF tensor name -> Hugging Face name (None: drop it)."""
    base, suffix = name.rsplit(".", 1)
    top = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    if base in top:
        return f"{top[base]}.{suffix}"
    if base == "rope_freqs" or not base.startswith("blk."):
        return None
    n, part = base[len("blk."):].split(".", 1)
    if part not in BLOCK_NAMES:
        return None
    return f"model.layers.{n}.{BLOCK_NAMES[part]}.{suffix}"


def unpermute(t, heads):
    """llama.cpp groups each head's rows as [head_dim/2, 2]; HF as [2, head_dim/2]."""
    rows = t.shape[0]
    return t.reshape(heads, rows // heads // 2, 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)


def scalar(meta, key, default=None):
    v = meta.get(key, default)
    if v is None:
        raise SystemExit(f"GGUF metadata has no `{key}`")
    return v.item() if hasattr(v, "item") else v


def write_tokenizer(out, meta, bos, eos):
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        return False
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    types = meta["tokenizer.ggml.token_type"].tolist()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, unk_token=None))
    # SmolLM2's pre-tokenizer ("smollm"): single digits, then GPT-2 byte level.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i, ty in enumerate(types) if ty == 3])
    tok.save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[bos],
        "eos_token": tokens[eos],
        "model_max_length": 8192,
        "add_bos_token": bool(scalar(meta, "tokenizer.ggml.add_bos_token", False)),
    }
    if "tokenizer.chat_template" in meta:
        cfg["chat_template"] = meta["tokenizer.chat_template"]
    with open(out / "tokenizer_config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    return True


def main():
    import mlx.core as mx

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF, help=f"GGUF file (default: {DEFAULT_GGUF})")
    a = ap.parse_args()
    if not a.gguf.exists():
        raise SystemExit(f"{a.gguf} not found: run `famlx generate -p hi` once to fetch it, or pass --gguf")
    w, meta = mx.load(str(a.gguf), return_metadata=True)
    if scalar(meta, "general.architecture") != "llama":
        raise SystemExit("only llama-architecture GGUFs are handled")
    k = lambda s: f"llama.{s}"  # noqa: E731
    hidden = scalar(meta, k("embedding_length"))
    heads = scalar(meta, k("attention.head_count"))
    kv_heads = scalar(meta, k("attention.head_count_kv"), heads)
    vocab = meta.get(k("vocab_size"))
    vocab = vocab.item() if vocab is not None else len(meta["tokenizer.ggml.tokens"])
    bos = scalar(meta, "tokenizer.ggml.bos_token_id", 1)
    eos = scalar(meta, "tokenizer.ggml.eos_token_id", 2)

    out_w = {}
    for name, t in w.items():
        hf = hf_name(name)
        if hf is None:
            continue
        if ".self_attn.q_proj." in hf:
            t = unpermute(t, heads)
        elif ".self_attn.k_proj." in hf:
            t = unpermute(t, kv_heads)
        out_w[hf] = t
    tied = "lm_head.weight" not in out_w

    # Bits per quantized module, from the packed widths (MLX unpacks GGUF in groups of 32).
    bits = {}
    for hf, t in out_w.items():
        if hf.endswith(".scales"):
            prefix = hf[: -len(".scales")]
            bits[prefix] = 32 * out_w[prefix + ".weight"].shape[-1] // (t.shape[-1] * GROUP)
    default_bits = max(set(bits.values()), key=list(bits.values()).count)
    quant = {"group_size": GROUP, "bits": default_bits, "mode": "affine"}
    for prefix, b in sorted(bits.items()):
        if b != default_bits:
            quant[prefix] = {"group_size": GROUP, "bits": b, "mode": "affine"}

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": scalar(meta, k("block_count")),
        "intermediate_size": scalar(meta, k("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": scalar(meta, k("attention.key_length"), hidden // heads),
        "rms_norm_eps": float(scalar(meta, k("attention.layer_norm_rms_epsilon"))),
        "vocab_size": vocab,
        "rope_theta": float(scalar(meta, k("rope.freq_base"), 10000.0)),
        "max_position_embeddings": scalar(meta, k("context_length"), 2048),
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float16",
        "quantization": quant,
        "quantization_config": quant,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(a.out / "model.safetensors"), dict(sorted(out_w.items())), metadata={"format": "mlx"})
    with open(a.out / "config.json", "w") as f:
        json.dump(config, f, indent=4)
    wrote_tok = write_tokenizer(a.out, meta, bos, eos)
    print(
        f"{a.out}: {len(out_w)} tensors, default {default_bits}-bit, "
        f"{len(quant) - 3} override(s), tied={tied}, {'tokenizer.json' if wrote_tok else 'no tokenizer'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
