#!/usr/bin/env python3
"""Tries broken and hostile inputs on a famlx binary, as a new user would,
and prints one Markdown table row per input: what was tried, what famlx did
(clear error / degraded with a warning / served) and its first stderr line.

    python3 scripts/hostile_inputs.py [--famlx target/debug/famlx]

Builds every input itself in a scratch folder from the repository's fixtures
and the default model (fetched once by famlx). A row marked CRASH (a signal,
a panic, a multi-line error or a hang) is a bug. Standard library only.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")


def run(famlx, args, stdin=None, timeout=120):
    try:
        p = subprocess.run(
            [famlx] + args,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "FAMLX_LOG": "warn"},
        )
    except subprocess.TimeoutExpired:
        return "CRASH (hang)", f"no answer within {timeout} s"
    err = [l for l in p.stderr.decode("utf-8", "replace").splitlines() if l.strip()]
    errors = [l for l in err if l.startswith("famlx: error:")]
    warns = [l for l in err if l.startswith("famlx: warning:")]
    if p.returncode < 0 or any("panicked" in l for l in err):
        return "CRASH", (err[-1] if err else f"signal {-p.returncode}")
    if p.returncode == 2 and err and err[0].startswith("error:"):
        # The argument parser's usage error (its first line says what is wrong).
        return "clear error", err[0]
    if p.returncode != 0:
        if len(errors) == 1 and len(err) == 1:
            return "clear error", errors[0]
        return "CRASH (unclear error)", " | ".join(err[:3])
    if errors:
        # The REPL reports a refused turn and goes on.
        return "clear error, REPL went on", errors[0]
    if warns:
        return "degraded with warning", warns[0]
    return "served", ""


class Case:
    def __init__(self, scratch, famlx):
        self.scratch = scratch
        self.famlx = famlx
        self.n = 0
        self.rows = []

    def copy(self, fixture):
        self.n += 1
        d = os.path.join(self.scratch, f"{self.n}-{fixture}")
        shutil.copytree(os.path.join(FIX, fixture), d)
        return d

    def file(self, name, data):
        self.n += 1
        p = os.path.join(self.scratch, f"{self.n}-{name}")
        with open(p, "wb") as f:
            f.write(data)
        return p

    def row(self, area, what, args, stdin=None, expect=None):
        result, line = run(self.famlx, args, stdin)
        if expect and result != expect:
            result = f"{result} (expected {expect})"
        line = line.replace(self.scratch + "/", "").replace("|", "\\|")
        if len(line) > 220:
            line = line[:217] + "..."
        self.rows.append((area, what, result, line))


def edit_json(path, f):
    with open(path) as fh:
        v = json.load(fh)
    f(v)
    with open(path, "w") as fh:
        json.dump(v, fh)


def text(c):
    return c.get("text_config", c)


def gen(model, *extra):
    return ["generate", "--model", model, "--prompt-ids", "1,2,3", "--max-tokens", "3", *extra]


def safetensors_header(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8 : 8 + n]), b[8 + n :]


def write_safetensors(path, header, data):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def default_gguf(famlx):
    subprocess.run([famlx, "generate", "--prompt-ids", "1", "--max-tokens", "1"], capture_output=True)
    cache = os.environ.get("FAMLX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "famlx"
    )
    return os.path.join(cache, "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def server_cases(c, famlx):
    """Hostile requests against a real `famlx serve` (the inputs of
    scripts/serve_hostile_load.py): each row is the answer, then whether
    /health and a normal request still answer right after it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import serve_hostile_load as h

    model = os.path.join(FIX, "llama-bf16")
    proc = subprocess.Popen(
        [famlx, "serve", "--model", model, "--port", "0", "--header-timeout", "2", "--body-timeout", "2",
         "--max-prompt-tokens", "4096"],
        stderr=subprocess.PIPE, env={**os.environ, "FAMLX_LOG": "warn"},
    )
    base = None
    for line in proc.stderr:
        line = line.decode("utf-8", "replace")
        if "on http://" in line:
            base = line.split("on ")[1].split()[0].removesuffix("/v1")
            break
    if base is None:
        c.rows.append(("server", "famlx serve starts", "CRASH", "it did not say where it listens"))
        return
    host, port = base.split("//")[1].split(":")
    normal = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    want = h.post(base, "/v1/completions", normal)[1]
    want = json.loads(want)["choices"][0]["text"] if want.startswith(b"{") else None
    expected = {"400", "408", "413", "503", "closed"}
    for name, f in h.HOSTILE + [
        ("tool name with a quote", lambda b, _h, _p: h.post(b, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
                "name": "f\" | /.*/ | \"", "parameters": {"type": "object"}}}], "tool_choice": "required"})[0]),
        ("text part that is a number", lambda b, _h, _p: h.post(b, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": [{"type": "text", "text": 7}]}]})[0]),
        ("temperature 1e-40 (greedy)", lambda b, _h, _p: json.loads(h.post(b, "/v1/completions", {
            **normal, "temperature": 1e-40})[1])["choices"][0]["text"] == want),
    ]:
        got = str(f(base, host, int(port)))
        alive = proc.poll() is None and h.health(base)
        after = h.post(base, "/v1/completions", normal) if alive else (None, b"")
        same = after[0] == 200 and json.loads(after[1])["choices"][0]["text"] == want
        if not alive:
            result = "CRASH (server gone)"
        elif not same:
            result = "CRASH (normal request wrong after it)"
        elif got in expected or got == "True" or (got == "200" and "Lark" in name):
            result = "served" if got in ("200", "True") else "clear error"
        else:
            result = f"unexpected answer {got}"
        c.rows.append(("server", name, result, f"answer: {got}; then /health and a normal request: ok"))
    proc.terminate()
    proc.wait(timeout=30)


def gemma4_media_token_cases(c, famlx):
    """A text request whose reply holds Gemma 4's image, video and audio
    token ids: gemma4-e2b-bf16's weights under the multimodal config of
    fixtures/gemma4-e2b-bf16/media_tokens.json (those ids are ordinary
    tokens there), greedy, plain and speculative. mlx-vlm reads a generated
    media id as text; the tokens must be its."""
    src = os.path.join(FIX, "gemma4-e2b-bf16")
    with open(os.path.join(src, "media_tokens.json")) as f:
        case = json.load(f)
    c.n += 1
    d = os.path.join(c.scratch, f"{c.n}-gemma4-e2b-media-ids")
    os.makedirs(d)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(os.path.join(src, name), d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(case["config"], f)
    header, data = safetensors_header(os.path.join(src, "model.safetensors"))
    header = {k if k == "__metadata__" else "model.language_model." + k.removeprefix("model."): v
              for k, v in header.items()}
    write_safetensors(os.path.join(d, "model.safetensors"), header, data)
    g = case["greedy"]
    want = g["tokens"]
    ids = ",".join(map(str, g["prompt"]))
    base = ["generate", "--model", d, "--prompt-ids", ids, "--max-tokens", str(len(want)), "--json"]
    draft = ["--draft-model", os.path.join(FIX, "gemma4-assistant-ordered-bf16")]
    for what, args in [("greedy", base), ("greedy, speculative (E2B assistant)", base + draft)]:
        p = subprocess.run([famlx] + args, capture_output=True, timeout=120, env={**os.environ, "FAMLX_LOG": "warn"})
        err = p.stderr.decode("utf-8", "replace").strip().splitlines()
        if p.returncode != 0:
            c.rows.append(("gemma4", f"reply with media token ids, {what}", "CRASH", err[-1] if err else ""))
            continue
        got = json.loads(p.stdout)["tokens"]
        result = "served" if got == want else "CRASH (wrong answer)"
        c.rows.append(("gemma4", f"reply with media token ids, {what}", result,
                       f"tokens {got[:8]}... (mlx-vlm: {want[:8]}...)"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--famlx", default=os.path.join(ROOT, "target", "debug", "famlx"))
    a = ap.parse_args()
    famlx = os.path.abspath(a.famlx)
    scratch = tempfile.mkdtemp(prefix="famlx-hostile-")
    c = Case(scratch, famlx)
    E, W, S = "clear error", "degraded with warning", "served"

    # --- Checkpoint folders
    d = c.copy("llama-tied-f32")
    os.remove(os.path.join(d, "config.json"))
    c.row("checkpoint", "config.json missing", gen(d), expect=E)
    d = c.copy("llama-tied-f32")
    open(os.path.join(d, "config.json"), "w").write("{ not json")
    c.row("checkpoint", "config.json not JSON", gen(d), expect=E)
    for what, fx, f in [
        ("no model_type", "llama-tied-f32", lambda v: v.pop("model_type")),
        ("unknown model_type", "llama-tied-f32", lambda v: v.update(model_type="nosuchfamily")),
        ("num_hidden_layers: -3", "llama-bf16", lambda v: v.update(num_hidden_layers=-3)),
        ("num_hidden_layers: 1e9", "llama-bf16", lambda v: v.update(num_hidden_layers=10**9)),
        ("num_attention_heads: 0", "llama-bf16", lambda v: v.update(num_attention_heads=0)),
        ("num_attention_heads: 3 (not dividing)", "llama-bf16", lambda v: v.update(num_attention_heads=3)),
        ("num_key_value_heads: 0", "llama-bf16", lambda v: v.update(num_key_value_heads=0)),
        ("hidden_size doubled", "llama-bf16", lambda v: v.update(hidden_size=128)),
        ("vocab_size doubled (q4)", "qwen3-q4", lambda v: v.update(vocab_size=1024)),
        ('hidden_act: "foo"', "llama-bf16", lambda v: v.update(hidden_act="foo")),
        ("rope_theta: 0", "llama-bf16", lambda v: v.update(rope_theta=0)),
        ("rms_norm_eps: -1", "llama-tied-f32", lambda v: v.update(rms_norm_eps=-1)),
        ("head_dim: \"x\" (wrong type)", "qwen3-bf16", lambda v: v.update(head_dim="x")),
        ("gemma4 without hidden_size", "gemma4-bf16", lambda v: text(v).pop("hidden_size")),
        ("gemma4 text_config layers 1e8", "gemma4-hf-bf16", lambda v: text(v).update(num_hidden_layers=10**8)),
        ("qwen3_5 text_config layers 1e8", "qwen3_5-hf-bf16", lambda v: text(v).update(num_hidden_layers=10**8)),
        ("tie_word_embeddings on an untied checkpoint", "llama-bf16", lambda v: v.update(tie_word_embeddings=True)),
    ]:
        d = c.copy(fx)
        edit_json(os.path.join(d, "config.json"), f)
        c.row("checkpoint", what, gen(d), expect=W if "untied" in what else E)

    d = c.copy("llama-hf-bf16")
    os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
    c.row("checkpoint", "shard listed in the index missing", gen(d), expect=E)
    d = c.copy("llama-hf-bf16")
    edit_json(os.path.join(d, "model.safetensors.index.json"), lambda v: v["weight_map"].update({"model.norm.weight": "../../../../etc/passwd"}))
    c.row("checkpoint", "weight_map entry ../../../../etc/passwd", gen(d), expect=E)
    d = c.copy("llama-hf-bf16")
    shutil.copy(os.path.join(d, "model-00001-of-00002.safetensors"), os.path.join(d, "model-00002-of-00002.safetensors"))
    c.row("checkpoint", "a tensor stored in two shards", gen(d), expect=E)

    st = lambda d: os.path.join(d, "model.safetensors")
    d = c.copy("llama-bf16")
    os.truncate(st(d), os.path.getsize(st(d)) // 2)
    c.row("safetensors", "truncated to half", gen(d), expect=E)
    d = c.copy("llama-bf16")
    os.truncate(st(d), 20)
    c.row("safetensors", "cut inside the header", gen(d), expect=E)
    d = c.copy("llama-bf16")
    with open(st(d), "r+b") as f:
        f.write(struct.pack("<Q", 1 << 40))
    c.row("safetensors", "header length 2^40", gen(d), expect=E)
    for what, f in [
        ("a dimension of 2^32+256", lambda h: h["model.norm.weight"].update(shape=[(1 << 32) + 256])),
        ("offsets that do not match the shape", lambda h: h["model.norm.weight"].update(data_offsets=[0, 2])),
        ("unknown dtype", lambda h: h["model.norm.weight"].update(dtype="F6_E2M3")),
    ]:
        d = c.copy("llama-bf16")
        h, data = safetensors_header(st(d))
        f(h)
        write_safetensors(st(d), h, data)
        c.row("safetensors", what, gen(d), expect=E)
    d = c.copy("llama-bf16")
    h, data = safetensors_header(st(d))
    w = h["model.layers.0.self_attn.q_proj.weight"]
    w["shape"] = w["shape"][::-1]
    write_safetensors(st(d), h, data)
    c.row("safetensors", "q_proj stored transposed", gen(d), expect=E)
    d = c.copy("llama-tied-f32")
    h, data = safetensors_header(st(d))
    h["model.norm.weight"]["dtype"] = "I32"
    write_safetensors(st(d), h, data)
    c.row("safetensors", "an int32 norm weight", gen(d), expect=E)
    d = c.copy("llama-tied-f32")
    h, data = safetensors_header(st(d))
    for n in ["model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"]:
        h.pop(n)
    write_safetensors(st(d), h, data)
    c.row("safetensors", "two tensors missing (both listed)", gen(d), expect=E)
    d = c.copy("llama-tied-f32")
    h, data = safetensors_header(st(d))
    h["model.layers.0.extra.weight"] = dict(h["model.norm.weight"])
    write_safetensors(st(d), h, data)
    c.row("safetensors", "an extra tensor nothing reads", gen(d), expect=W)
    c.row("safetensors", "the same with --strict", gen(d, "--strict"), expect=E)
    d = c.copy("qwen3_5-mtp-hf-bf16")
    h, data = safetensors_header(st(d))
    h.pop("mtp.layers.0.self_attn.q_proj.weight")
    write_safetensors(st(d), h, data)
    c.row("optional parts", "Qwen3.5 MTP head incomplete", gen(d), expect=W)
    c.row("optional parts", "the same with --mtp-depth 2", gen(d, "--mtp-depth", "2"), expect=E)

    # --- GGUF
    g = open(default_gguf(famlx), "rb").read()
    patch = lambda b, at, v: b[:at] + struct.pack("<Q", v) + b[at + 8 :]
    c.row("gguf", "64-byte header claiming 2^62 tensors", gen(c.file("t.gguf", patch(g[:64], 8, 1 << 62) + bytes(65536))), expect=E)
    c.row("gguf", "metadata count 2^62", gen(c.file("kv.gguf", patch(g, 16, 1 << 62))), expect=E)
    c.row("gguf", "first key length 2^60", gen(c.file("key.gguf", patch(g, 24, 1 << 60))), expect=E)
    name = b"token_embd.weight"
    at = g.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    c.row("gguf", "a tensor with 10^6 dimensions", gen(c.file("dims.gguf", g[:at] + struct.pack("<I", 10**6) + g[at + 4 :])), expect=E)
    c.row("gguf", "truncated to half", gen(c.file("half.gguf", g[: len(g) // 2])), expect=E)
    c.row("gguf", "empty file", gen(c.file("empty.gguf", b"")), expect=E)
    c.row("gguf", "bad magic (a zip file)", gen(c.file("zip.gguf", b"PK\x03\x04" + g[4:4096])), expect=E)
    key = b"llama.attention.head_count_kv"
    at = g.index(key) + len(key) + 4
    c.row("gguf", "head_count_kv 0", gen(c.file("kv0.gguf", g[:at] + struct.pack("<I", 0) + g[at + 4 :])), expect=E)
    ro = c.file("ro.gguf", g)
    os.chmod(ro, 0o444)
    immutable = subprocess.run(["chattr", "+i", ro], capture_output=True).returncode == 0
    c.row("gguf", "read-only file" + (" (immutable)" if immutable else " (chmod 444)"), gen(ro), expect=S)
    if immutable:
        subprocess.run(["chattr", "-i", ro], capture_output=True)

    # --- Tokenizers and templates
    d = c.copy("llama-tied-f32")
    open(os.path.join(d, "tokenizer.json"), "wb").write(b"\x00\x01 garbage {")
    c.row("tokenizer", "tokenizer.json garbage, --prompt", ["generate", "--model", d, "--prompt", "hi", "--max-tokens", "2"], expect=E)
    c.row("tokenizer", "the same, --prompt-ids (no tokenizer needed)", gen(d), expect=S)
    d = c.copy("qwen3-bf16")
    open(os.path.join(d, "tokenizer_config.json"), "w").write("[1, 2")
    c.row("tokenizer", "tokenizer_config.json not JSON", ["generate", "--model", d, "--prompt", "hi", "--max-tokens", "2"], expect=E)
    d = c.copy("qwen3-bf16")
    open(os.path.join(d, "chat_template.jinja"), "w").write("")
    c.row("template", "empty chat_template.jinja", ["generate", "--model", d, "--prompt", "hi", "--max-tokens", "2"], expect=W)
    for what, src in [
        ("a 1e5 x 1e5 loop nest", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
        ("unbounded recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
        ("a syntax error", "{% for m in messages %}{{ m.content }"),
        ("raise_exception", "{{ raise_exception('no system role here') }}"),
    ]:
        d = c.copy("qwen3-bf16")
        open(os.path.join(d, "chat_template.jinja"), "w").write(src)
        c.row("template", what, ["generate", "--model", d, "--prompt", "hi", "--max-tokens", "2"], expect=E)

    # --- Flags
    m = os.path.join(FIX, "llama-tied-f32")
    for what, extra in [
        ("--temperature nan", ["--temperature", "nan"]),
        ("--temperature -1", ["--temperature", "-1"]),
        ("--min-p 2", ["--min-p", "2"]),
        ("--top-k -1", ["--top-k", "-1"]),
        ("--top-p 2", ["--top-p", "2"]),
        ("--kv-bits 5", ["--kv-bits", "5"]),
        ("--mtp-depth 0", ["--mtp-depth", "0"]),
        ("--prefill-step-size 0", ["--prefill-step-size", "0"]),
        ("--memory-limit 8X", ["--memory-limit", "8X"]),
    ]:
        c.row("flags", what, gen(m, *extra), expect=E)
    c.row("flags", "--prompt-ids 1,x", ["generate", "--model", m, "--prompt-ids", "1,x"], expect=E)
    c.row("flags", "--prompt-ids 99999 (outside the vocabulary)", ["generate", "--model", m, "--prompt-ids", "99999"], expect=E)
    long = ",".join(["5"] * 300)
    lm = os.path.join(FIX, "llama-bf16")
    c.row("flags", "a 300-token prompt, context 256", ["generate", "--model", lm, "--prompt-ids", long, "--max-tokens", "2"], expect=E)
    c.row("flags", "the same with --max-kv-size 128", ["generate", "--model", lm, "--prompt-ids", long, "--max-tokens", "2", "--max-kv-size", "128"], expect=S)
    c.row("flags", "--model that does not exist", ["generate", "--model", os.path.join(scratch, "nope"), "--prompt", "hi"], expect=E)
    c.row("flags", "an unknown flag", ["generate", "--modle", m], expect=E)

    # --- Plugins
    pd = os.path.join(scratch, "plugins")
    os.makedirs(pd)
    open(os.path.join(pd, "libfamlx_plugin_junk.so"), "wb").write(b"not a library")
    c.row("plugins", "a garbage file named like a plugin", ["generate", "--plugin-dir", pd, *gen(m)[1:]], expect=W)
    open(os.path.join(pd, "libfamlx_plugin_empty.so"), "wb").write(b"")
    c.row("plugins", "an empty plugin file (next to the junk)", ["plugins", "--plugin-dir", pd], expect=S)

    # --- Chat REPL input
    q = os.path.join(FIX, "qwen3-bf16")
    c.row("repl", "/help, an unknown /command, then /exit", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"/help\n/frobnicate\n/exit\n", expect=S)
    c.row("repl", "a line of invalid UTF-8, then a question", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"\xff\xfe\xfd\nhello\n", expect=W)
    c.row("repl", "a 300 KB line (longer than the context), then hi", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"word " * 60000 + b"\nhi\n", expect="clear error, REPL went on")

    server_cases(c, famlx)
    gemma4_media_token_cases(c, famlx)

    print("| area | input | result | first stderr line |")
    print("|---|---|---|---|")
    for r in c.rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | `{r[3]}` |" if r[3] else f"| {r[0]} | {r[1]} | {r[2]} | |")
    crashes = [r for r in c.rows if r[2].startswith("CRASH") or "expected" in r[2]]
    print(f"\n{len(c.rows)} inputs; {len(crashes)} unexpected", file=sys.stderr)
    shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if crashes else 0)


if __name__ == "__main__":
    main()
