"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from the
repository's fixtures, plus a tiny llama GGUF with a real-layout tokenizer.

    /opt/ref/bin/pip install gguf==0.19.0 numpy==2.4.6
    /opt/ref/bin/python fuzz/make_seeds.py

Deterministic; keep the seeds small (libFuzzer mutates whole inputs).
"""

import json
import os
import shutil
import struct

import make_wav_seeds
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "fixtures")
OUT = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(*p):
    with open(os.path.join(FIX, *p), "rb") as f:
        return f.read()


def fixtures():
    return sorted(d for d in os.listdir(FIX) if os.path.exists(os.path.join(FIX, d, "config.json")))


def tiny_llama_gguf(path):
    """A two-layer llama in GGUF: metadata as llama.cpp writes it, a gpt2
    (byte-level BPE) tokenizer with merges and control tokens, a chat
    template, and one tensor of each kind famlx decodes differently."""
    rng = np.random.default_rng(7)
    w = GGUFWriter(path, arch="llama")
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_block_count(2)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "Ġ", "ab", "Ġa", "1", "2", "12"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    w.add_token_merges(["a b", "Ġ a", "1 2"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    w.add_tensor("token_embd.weight", rng.standard_normal((len(tokens), 32)).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    blocks = rng.integers(0, 256, size=(32 * 32 // 32, 18), dtype=np.uint8)
    blocks[:, 0:2] = (rng.standard_normal(len(blocks)) * 0.05).astype(np.float16).view(np.uint8).reshape(-1, 2)
    w.add_tensor("blk.0.attn_q.weight", blocks.reshape(32, -1), raw_dtype=Q.Q4_0)
    k = rng.integers(0, 256, size=(1, 144), dtype=np.uint8)
    k[:, 0:4] = np.array([0.01, 0.002], dtype=np.float16).view(np.uint8)
    w.add_tensor("blk.0.ffn_down.weight", k, raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    # GGUF: the block-type fixture and a tiny llama with a tokenizer.
    put("gguf", "quants.gguf", read("gguf-quants", "quants.gguf"))
    tmp = os.path.join(HERE, "tiny-llama.gguf.tmp")
    tiny_llama_gguf(tmp)
    with open(tmp, "rb") as f:
        put("gguf", "tiny-llama.gguf", f.read())
    os.remove(tmp)
    seen_tok, seen_tpl = set(), set()
    for d in fixtures():
        # Configs, as the plan reads them.
        put("config_plan", f"{d}.json", read(d, "config.json"))
        # Safetensors: each shard's header (8-byte length and JSON), and the index.
        for f in sorted(os.listdir(os.path.join(FIX, d))):
            p = os.path.join(FIX, d, f)
            if f.endswith(".safetensors"):
                with open(p, "rb") as fh:
                    n = struct.unpack("<Q", fh.read(8))[0]
                    fh.seek(0)
                    put("safetensors", f"{d}-{f}.header", fh.read(8 + n))
            elif f == "model.safetensors.index.json":
                put("safetensors", f"{d}-index.json", read(d, f))
        # Tokenizer files (each distinct set once): tokenizer.json \0 tokenizer_config.json \0 template.
        if not os.path.exists(os.path.join(FIX, d, "tokenizer.json")):
            continue
        tok = read(d, "tokenizer.json")
        cfg = read(d, "tokenizer_config.json") if os.path.exists(os.path.join(FIX, d, "tokenizer_config.json")) else b"{}"
        tpl_path = os.path.join(FIX, d, "chat_template.jinja")
        tpl = read(d, "chat_template.jinja") if os.path.exists(tpl_path) else b""
        key = (tok, cfg, tpl)
        if key not in seen_tok:
            seen_tok.add(key)
            put("tokenizer", f"{d}", tok + b"\0" + cfg + b"\0" + tpl)
        if tpl and tpl not in seen_tpl:
            seen_tpl.add(tpl)
            msgs = json.dumps(
                [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is 2+2?"},
                    {"role": "assistant", "content": "4"},
                    {"role": "user", "content": "And 3+3?"},
                ]
            ).encode()
            put("template", f"{d}", tpl + b"\0" + msgs)
    # Templates with the features real ones use: loops, namespaces, macros,
    # tools as JSON, raise_exception, string methods.
    extra = [
        "{%- set ns = namespace(first=true) -%}{%- for m in messages -%}{%- if m.role == 'system' and not ns.first -%}"
        "{{ raise_exception('system message must come first') }}{%- endif -%}{%- set ns.first = false -%}"
        "<|{{ m.role }}|>{{ m.content | trim }}{%- endfor -%}{%- if add_generation_prompt %}<|assistant|>{% endif -%}",
        "{% macro render(m) %}{{ m['role'] | upper }}: {{ m['content'] }}{% endmacro %}"
        "{% for m in messages %}{{ render(m) }}\n{% endfor %}{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}",
        "{{ bos_token }}{% for m in messages %}{% if m.content.startswith('/') %}{{ m.content[1:] }}"
        "{% else %}{{ m.content.split(' ') | join('_') }}{% endif %}{% endfor %}{{ eos_token }}",
    ]
    for i, t in enumerate(extra):
        put("template", f"features-{i}", t.encode() + b"\0" + b'[{"role": "user", "content": "hi there"}]')
    make_wav_seeds.main()


if __name__ == "__main__":
    main()
