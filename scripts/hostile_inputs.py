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

def files_cases(c, famlx):
    """Issue 34, items 2, 7, 8 and the REPL's Ctrl-C: WAV headers and
    samples, special files as every kind of input, `convert` onto its own
    source, and chat stdin that never ends a line."""
    E, W, S = "clear error", "degraded with warning", "served"
    audio = os.path.join(FIX, "gemma4-audio-f32")

    def wav(rate, data, tag=1, bits=16, channels=1, extra=b""):
        align = channels * bits // 8
        fmt = struct.pack("<HHIIHH", tag, channels, rate, (rate * align) & 0xFFFFFFFF, align, bits)
        body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra
        body += b"data" + struct.pack("<I", len(data)) + data
        return b"RIFF" + struct.pack("<I", len(body)) + body

    def audio_row(what, data, expect):
        p = c.file("clip.wav", data)
        c.row("audio", what, ["generate", "--model", audio, "-p", "Hear.", "--audio", p, "--max-tokens", "2"], expect=expect)

    tone = b"".join(struct.pack("<h", int(8000 * ((i // 20) % 2 * 2 - 1))) for i in range(8000))
    for rate in [1_000_000_007, 2_147_483_647, 4_294_967_291, 1, 7]:
        audio_row(f"a WAV at {rate} Hz", wav(rate, tone[:200]), E)
    audio_row("a 64-sample clip (4 ms)", wav(16000, tone[:128]), E)
    audio_row("a 161-sample clip (the shortest the tower reads)", wav(16000, tone[:322]), S)
    nan = struct.pack("<f", float("nan")) + struct.pack("<f", 0.1) * 2000
    audio_row("float samples with a NaN", wav(16000, nan, tag=3, bits=32), E)
    audio_row("float samples with +inf", wav(16000, struct.pack("<f", float("inf")) * 2000, tag=3, bits=32), E)
    audio_row("float samples of 3e38 at 22.05 kHz (overflow the resampler)", wav(22050, struct.pack("<f", 3e38) * 2000, tag=3, bits=32), E)
    info = b"INFOISFT\x03\0\0\0ab\0"  # 15 bytes: odd, so a pad byte follows
    listc = b"LIST" + struct.pack("<I", len(info)) + info + b"\0"
    audio_row("an odd-sized LIST chunk with its pad byte", wav(44100, tone, extra=listc), S)

    # Special files as inputs: each refused at once, by name.
    fifo = os.path.join(c.scratch, "fifo")
    os.mkfifo(fifo)
    for name, target in [
        ("config.json", fifo),
        ("config.json", "/dev/zero"),
        ("tokenizer.json", "/dev/urandom"),
        ("chat_template.jinja", fifo),
        ("generation_config.json", "/dev/zero"),
        ("model.safetensors.index.json", fifo),
        ("model.safetensors", fifo),
    ]:
        d = c.copy("llama-bf16")
        os.remove(os.path.join(d, name))
        os.symlink(target, os.path.join(d, name))
        what = "a FIFO" if target == fifo else target
        c.row("special files", f"{name} -> {what}", ["generate", "--model", d, "-p", "hi", "--max-tokens", "1"], expect=E)
    d = c.copy("llama-bf16")
    with open(os.path.join(d, "config.json"), "r+b") as f:
        f.truncate(65 << 20)
    c.row("special files", "a 65 MiB config.json", ["generate", "--model", d, "-p", "hi", "--max-tokens", "1"], expect=E)
    vision = os.path.join(FIX, "gemma4-vision-f32")
    for flag, model, target in [("--image", vision, "/dev/zero"), ("--image", vision, fifo), ("--audio", audio, "/dev/urandom"), ("--audio", audio, fifo)]:
        what = "a FIFO" if target == fifo else target
        c.row("special files", f"{flag} {what}", ["generate", "--model", model, "-p", "hi", flag, target, "--max-tokens", "1"], expect=E)
    c.row("special files", "--prompt-cache-file a FIFO", ["generate", "--model", os.path.join(FIX, "llama-bf16"), "-p", "hi", "--prompt-cache-file", fifo], expect=E)
    c.row("special files", "launch --hostfile a FIFO", ["launch", "--hostfile", fifo, "--", "generate", "-p", "hi"], expect=E)
    g = os.path.join(c.scratch, "model.gguf")
    os.mkfifo(g)
    c.row("special files", "--model a FIFO named .gguf", ["generate", "--model", g, "-p", "hi"], expect=E)

    # convert --force onto, into or above its own source: refused, the source intact.
    src = c.copy("llama-hf-bf16")
    before = sorted(os.listdir(src))
    parent = os.path.dirname(src)
    base = os.path.basename(src)
    for what, out in [
        ("SRC", src),
        ("SRC/.", src + "/."),
        ("SRC/../src", f"{src}/../{base}"),
        ("SRC/sub", src + "/sub"),
        ("SRC/.. (holds the source)", src + "/.."),
    ]:
        c.row("convert", f"--mlx-path {what} --force", ["convert", "--hf-path", src, "--mlx-path", out, "--force"], expect=E)
    if sorted(os.listdir(src)) != before or any("famlx-partial" in n for n in os.listdir(parent)):
        c.rows.append(("convert", "the source after those", "CRASH (source changed or partial folder left)", ""))
    secret = c.file("secret.txt", b"private")
    src2 = c.copy("llama-hf-bf16")
    os.symlink(secret, os.path.join(src2, "README.md"))
    out = os.path.join(c.scratch, "converted")
    c.row("convert", "README.md a link to a private file", ["convert", "--hf-path", src2, "--mlx-path", out], expect=W)
    if os.path.exists(os.path.join(out, "README.md")):
        c.rows.append(("convert", "the link's target", "CRASH (the private file was copied)", ""))
    src3 = c.copy("llama-hf-bf16")
    open(os.path.join(src3, "added_tokens.json"), "w").write('{"<x>": 5')
    c.row("convert", "added_tokens.json not JSON", ["convert", "--hf-path", src3, "--mlx-path", out + "2"], expect=E)

    # Chat stdin: a 2 MiB line, then a question; /dev/zero (never a newline).
    q = os.path.join(FIX, "qwen3-bf16")
    c.row("repl", "a 2 MiB line, then hi", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"a" * (2 << 20) + b"\nhi\n", expect=W)
    import signal
    import time

    with open("/dev/zero", "rb") as zero:
        p = subprocess.Popen([famlx, "chat", "--model", q], stdin=zero, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def rss_kb():
            if p.poll() is not None:
                return -1
            return [int(l.split()[1]) for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS:")][0]

        time.sleep(4)
        rss = rss_kb()
        time.sleep(2)
        rss2 = rss_kb()
        for _ in range(2):
            p.send_signal(signal.SIGINT)
            time.sleep(0.3)
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "hang"
        err = [l for l in p.stderr.read().decode("utf-8", "replace").splitlines() if l.startswith("famlx:")]
        ok = rc == 0 and rss > 0 and rss2 > 0 and rss2 - rss < 65536
        result = "bounded; Ctrl-C twice quit" if ok else f"CRASH (exit {rc}, RSS {rss} -> {rss2} kB)"
        c.rows.append(("repl", f"stdin /dev/zero (RSS {rss // 1024} -> {rss2 // 1024} MB over 2 s)", result, err[-1] if err else ""))
    # A burst of Ctrl-C during a long prefill, then /history: the first turn is kept.
    p = subprocess.Popen(
        [famlx, "chat", "--model", q, "--max-tokens", "3", "--prefill-step-size", "16"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    p.stdin.write(b"hello there\n" + b"word " * 10000 + b"\n")
    p.stdin.flush()
    time.sleep(4)
    for _ in range(6):
        p.send_signal(signal.SIGINT)
        time.sleep(0.04)
    time.sleep(1.5)
    alive = p.poll() is None
    try:
        out, err = p.communicate(b"/history\n", timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    kept = b"user: hello there" in out
    result = "reply stopped; conversation kept" if alive and kept else f"CRASH (alive={alive}, history kept={kept})"
    c.rows.append(("repl", "6 Ctrl-C in 240 ms during a reply, then /history", result, ""))


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


def plugin_launch_cases(c, famlx):
    """Issue 34 items 9, 10 and 12 (parts): files named like plugins that
    the loader must not be handed, --plugin-dir that is not a folder,
    launch's bounds and temporary folders, integer flags past their range,
    `plugin new` names whose code could not compile."""
    E, W, S = "clear error", "degraded with warning", "served"
    m = os.path.join(FIX, "llama-tied-f32")
    here = os.path.dirname(famlx)
    real = next(
        (p for d in (here, os.path.join(here, "deps")) for p in [os.path.join(d, "libfamlx_plugin_llama.so")] if os.path.isfile(p)),
        None,
    )
    pd = os.path.join(c.scratch, "plugins-34")
    os.makedirs(pd)
    if real:
        data = open(real, "rb").read()
        shutil.copy(real, os.path.join(pd, "libfamlx_plugin_llama.so"))
        open(os.path.join(pd, "libfamlx_plugin_trunc.so"), "wb").write(data[:4096])
        foreign = bytearray(data)
        foreign[18:20] = struct.pack("<H", 62 if os.uname().machine == "aarch64" else 183)
        open(os.path.join(pd, "libfamlx_plugin_foreign.so"), "wb").write(foreign)
    os.mkfifo(os.path.join(pd, "libfamlx_plugin_fifo.so"))
    if shutil.which("cc"):
        src = os.path.join(pd, "stamp.c")
        open(src, "w").write("const unsigned int famlx_plugin_abi_version = 8;\n")
        subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(pd, "libfamlx_plugin_datastamp.so"), src])
        os.remove(src)
    c.row("plugins", "a truncated plugin (4 KB), a FIFO, an aarch64 ELF, a data ABI stamp: famlx plugins", ["plugins", "--plugin-dir", pd], expect=S)
    c.row("plugins", "the same folder, generate with a family that loaded", ["generate", "--plugin-dir", pd, *gen(m)[1:]], expect=W if real else E)
    f = c.file("not-a-folder", b"x")
    loop = os.path.join(c.scratch, "loop-34")
    os.symlink(loop, loop)
    for what, d in [("missing", os.path.join(c.scratch, "nope-34")), ("a file", f), ("a symlink loop", loop)]:
        c.row("plugins", f"--plugin-dir that is {what}", ["plugins", "--plugin-dir", d], expect=E)

    c.row("launch", "-n 70000", ["launch", "-n", "70000", "--", "plugins"], expect=E)
    c.row("launch", "--hosts a,b -n 600 (1200 ranks)", ["launch", "--hosts", "a,b", "-n", "600", "--", "plugins"], expect=E)
    c.row("launch", "-n 2 --starting-port 65535", ["launch", "-n", "2", "--starting-port", "65535", "--", "plugins"], expect=E)
    good = os.path.join(c.scratch, "plugins-34-good")
    os.makedirs(good)
    if real:
        shutil.copy(real, good)
    c.row("launch", "-n 1 (runs in process)", ["launch", "-n", "1", "--", "generate", "--plugin-dir", good, *gen(m)[1:]], expect=S)
    tmp = os.path.join(c.scratch, "tmp-34")
    os.makedirs(tmp)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = tmp
    try:
        c.row("launch", "-n 2 whose ranks fail", ["launch", "-n", "2", "--", "generate", "--model", os.path.join(c.scratch, "nope"), "--prompt", "x"], expect=E)
    finally:
        if old is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = old
    left = os.listdir(tmp)
    c.rows.append(("launch", "its temporary folder afterwards", "CRASH (left behind)" if left else "removed", " ".join(left)))

    for what, args in [
        ("bench -p 4294967297", ["bench", "--model", m, "-p", "4294967297"]),
        ("generate --max-kv-size 4294967297", [*gen(m), "--max-kv-size", "4294967297"]),
        ("serve --max-queue 4294967296", ["serve", "--model", m, "--max-queue", "4294967296"]),
        ("serve --request-timeout 18446744073709551615", ["serve", "--model", m, "--request-timeout", "18446744073709551615"]),
    ]:
        c.row("flags", what, args, expect=E)
    for name in ["self", "self_", "array", "model_plan"]:
        c.row("plugin new", f"plugin new {name}", ["plugin", "new", name, "--dir", os.path.join(c.scratch, "new-" + name)], expect=E)
    c.row("plugin new", "plugin new phi3", ["plugin", "new", "phi3", "--dir", os.path.join(c.scratch, "new-phi3")], expect=S)


def hub_cases(c, famlx):
    """`--model org/name` against a hostile hub: a stand-in server on
    127.0.0.1 that puts paths in ETags and commits, loops redirects, sends
    more than it announced, stalls or trickles. A row also fails if anything
    was written outside the cache (a `sentinel` folder beside it)."""
    import hashlib
    import http.server
    import threading
    import time

    repo, sha = "famlx-test/llama", "0123456789abcdef0123456789abcdef01234567"
    src = os.path.join(FIX, "llama-hf-bf16")
    files = {f: open(os.path.join(src, f), "rb").read() for f in os.listdir(src) if os.path.isfile(os.path.join(src, f))}
    fault = {}

    class Hub(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def send(self, code, headers, body=b""):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self):
            self.do_GET(head=True)

        def do_GET(self, head=False):
            path = self.path.split("?")[0]
            if path.startswith(f"/api/models/{repo}/revision/"):
                listed = list(files) + list(fault.get("extra", {}))
                body = json.dumps({"sha": fault.get("listing_sha", sha), "siblings": [{"rfilename": f} for f in listed]}).encode()
                if fault.get("slow_listing"):
                    self.send(200, [("Content-Length", str(len(body)))])
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.1)
                    return
                return self.send(200, [("Content-Length", str(len(body)))], body)
            prefix = f"/{repo}/resolve/"
            if not path.startswith(prefix):
                return self.send(404, [("Content-Length", "0")])
            if fault.get("loop"):
                return self.send(302, [("Location", path), ("Content-Length", "0")])
            name = path[len(prefix):].split("/", 1)[-1]
            data = files.get(name, fault.get("extra", {}).get(name))
            if data is None:
                return self.send(404, [("Content-Length", "0")])
            h = {"ETag": f'"{hashlib.sha1(data).hexdigest()}"', "X-Repo-Commit": sha}
            h.update(fault.get("headers", {}))
            h = list(h.items())
            if head:
                return self.send(200, h + [("Content-Length", str(len(data)))])
            body = fault.get("body") if name == "config.json" else None
            if body == "endless":
                self.send(200, h, data)
                try:
                    for _ in range(1 << 17):
                        self.wfile.write(bytes(1 << 16))
                except OSError:
                    pass
                return
            if body == "claims":
                return self.send(200, h + [("Content-Length", str(4 << 30))], data)
            if body == "stall":
                self.send(200, h + [("Content-Length", str(len(data)))])
                self.wfile.flush()
                time.sleep(20)
                return
            self.send(200, h + [("Content-Length", str(len(data)))], data)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # famlx hanging up on a hostile body is the point

    server = Server(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    saved = {k: os.environ.get(k) for k in ["HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN", "FAMLX_HUB_TIMEOUT_SECS"]}
    for k in saved:
        os.environ.pop(k, None)
    os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
    os.environ["FAMLX_HUB_TIMEOUT_SECS"] = "2"
    E, S = "clear error", "served"
    try:
        def case(what, set_fault, expect=E, revision=None, tag=None):
            fault.clear()
            fault.update(set_fault)
            c.n += 1
            base = os.path.join(c.scratch, f"{c.n}-hub")
            sentinel = os.path.join(base, "sentinel")
            os.makedirs(sentinel)
            os.environ["HF_HOME"] = os.path.join(base, "home")
            for k, v in list(fault.get("headers", {}).items()):
                fault["headers"][k] = v.replace("SENTINEL", sentinel)
            if "listing_sha" in fault:
                fault["listing_sha"] = fault["listing_sha"].replace("SENTINEL", sentinel)
            model = f"{repo}:{tag.replace('SENTINEL', sentinel)}" if tag else repo
            args = gen(model) + (["--revision", revision.replace("SENTINEL", sentinel)] if revision else [])
            c.row("hub", what, args, expect=expect)
            stray = os.listdir(sentinel) + [n for n in os.listdir(base) if n not in ("home", "sentinel")]
            if stray:
                a, w, r, l = c.rows[-1]
                c.rows[-1] = (a, w, f"CRASH (wrote outside the cache: {stray})", l)

        case("a normal download", {}, expect=S)
        case("ETag /abs/PWNED", {"headers": {"ETag": '"SENTINEL/PWNED"'}})
        case("ETag ../../../../sentinel/PWNED", {"headers": {"ETag": '"../../../../sentinel/PWNED"'}})
        case("X-Repo-Commit an absolute path", {"headers": {"X-Repo-Commit": "SENTINEL"}})
        case("X-Repo-Commit ../x", {"headers": {"X-Repo-Commit": "../x"}})
        case("listing sha an absolute path", {"listing_sha": "SENTINEL"})
        case("--revision ../../x", {}, revision="../../x")
        case("--revision an absolute path", {}, revision="SENTINEL/x")
        case("a relative redirect loop", {"loop": True})
        case("a body past the announced size, no Content-Length", {"body": "endless"})
        case("Content-Length 4 GiB for a file announced smaller", {"body": "claims"})
        case("a body that stalls (FAMLX_HUB_TIMEOUT_SECS=2)", {"body": "stall"})
        case("a listing that trickles (FAMLX_HUB_TIMEOUT_SECS=2)", {"slow_listing": True})
        # GGUF repos (`--model org/NAME:TAG`, as llama.cpp's -hf).
        gguf = open(os.path.join(FIX, "gguf-text", "qwen2-q8_0.gguf"), "rb").read()
        case("a GGUF picked by its tag", {"extra": {"m-Q8_0.gguf": gguf, "m-F32.gguf": gguf}}, expect=S, tag="Q8_0")
        case("two GGUFs, a tag neither has", {"extra": {"m-Q8_0.gguf": gguf, "m-F32.gguf": gguf}}, tag="Q4_K_M")
        case("a tag ../../x (an absolute path after)", {"extra": {"m-Q8_0.gguf": gguf}}, tag="../../SENTINEL")
        case("a listed GGUF named ../../PWNED-Q8_0.gguf", {"extra": {"../../PWNED-Q8_0.gguf": gguf}}, tag="Q8_0")
        case("a split GGUF with its second part missing", {"extra": {"m-Q8_0-00001-of-00002.gguf": gguf}}, tag="Q8_0")
    finally:
        server.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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

    plugin_launch_cases(c, famlx)

    # --- Chat REPL input
    q = os.path.join(FIX, "qwen3-bf16")
    c.row("repl", "/help, an unknown /command, then /exit", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"/help\n/frobnicate\n/exit\n", expect=S)
    c.row("repl", "a line of invalid UTF-8, then a question", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"\xff\xfe\xfd\nhello\n", expect=W)
    c.row("repl", "a 300 KB line (longer than the context), then hi", ["chat", "--model", q, "--max-tokens", "2"], stdin=b"word " * 60000 + b"\nhi\n", expect="clear error, REPL went on")

    server_cases(c, famlx)
    hub_cases(c, famlx)
    files_cases(c, famlx)
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
