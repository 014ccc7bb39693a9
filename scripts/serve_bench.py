#!/usr/bin/env python3
"""famlx serve vs mlx_lm.server on the same weights, same request script.

For each model and each server, start the server, warm it up, then for each
concurrency C send C streaming /v1/completions requests at once, R rounds
(each client sends its next request when its last one ends). Reported per
(server, C): aggregate decode throughput (completion tokens of all requests
/ wall time of the phase), and p50 / p99 time to first token.

    python scripts/serve_bench.py --famlx target/release/famlx --model M1 [--model M2] \
        [--concurrency 1 8 32] [--prompt-words 200] [--max-tokens 128] [--rounds 2] [--json out.json]

Only the Python standard library is used (http.client), so it runs where
mlx-lm runs. Greedy decoding; prompts are random words (seeded), one per request.
"""

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time


def wait_up(port, proc, limit=600):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not come up")


def one(port, prompt, max_tokens):
    """One streaming request: (ttft seconds, completion tokens). A connection
    refused or reset before the answer starts is retried (mlx_lm.server's
    listen backlog drops some of 32 simultaneous connects); the time to first
    token counts from the first try."""
    t0 = time.perf_counter()
    for attempt in range(50):
        try:
            return one_try(port, prompt, max_tokens, t0)
        except (ConnectionResetError, ConnectionRefusedError, http.client.RemoteDisconnected):
            time.sleep(0.05 * (attempt + 1))
    raise RuntimeError("connection kept failing")


def one_try(port, prompt, max_tokens, t0):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]}")
    ttft, tokens, chunks = None, None, 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        d = json.loads(data)
        if d.get("usage"):
            tokens = d["usage"]["completion_tokens"]
        for ch in d.get("choices", []):
            if ch.get("text"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, tokens if tokens is not None else chunks


def phase(port, prompts, conc, rounds, max_tokens):
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        for r in range(rounds):
            p = prompts[(i * rounds + r) % len(prompts)]
            try:
                res = one(port, p, max_tokens)
                with lock:
                    results.append(res)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results)
    toks = sum(r[1] for r in results)
    q = lambda p: ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else float("nan")
    return {"concurrency": conc, "requests": len(results), "errors": len(errors), "first_error": errors[:1],
            "completion_tokens": toks, "wall_s": wall, "tok_s": toks / wall if wall > 0 else 0.0,
            "ttft_p50_s": statistics.median(ttfts) if ttfts else float("nan"), "ttft_p99_s": q(0.99)}


def start(kind, famlx, model, port, extra):
    if kind == "famlx":
        cmd = [famlx, "serve", "--model", model, "--port", str(port), "--max-tokens", "4096"] + extra
    else:
        cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", model, "--port", str(port)] + extra
    log = open(f"/tmp/serve_bench_{kind}_{port}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except Exception:  # noqa: BLE001
        os.killpg(proc.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--famlx", required=True)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--prompt-words", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", nargs="+", default=["famlx", "mlx_lm"])
    ap.add_argument("--famlx-args", default="", help="extra flags for famlx serve")
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = random.Random(0)
    # Words "tN": with the word-level tokenizer gpu_serve_bench.sh gives the
    # random checkpoints, one word is one token id, so a prompt is exactly
    # --prompt-words tokens for both servers.
    prompts = [" ".join(f"t{rng.randrange(1000, 30000)}" for _ in range(a.prompt_words)) for _ in range(256)]
    out = []
    port = 18700
    for model in a.model:
        for kind in a.servers:
            port += 1
            p = start(kind, a.famlx, model, port, a.famlx_args.split() if kind == "famlx" else [])
            try:
                wait_up(port, p)
                phase(port, prompts[:4], 4, 1, 16)  # warm-up: kernels compiled, batch shapes seen
                for conc in a.concurrency:
                    r = phase(port, prompts, conc, a.rounds, a.max_tokens)
                    r.update(server=kind, model=os.path.basename(model.rstrip("/")))
                    out.append(r)
                    print(f"{r['model']:<24} {kind:<7} c={conc:<3} {r['tok_s']:9.1f} tok/s  ttft p50 {r['ttft_p50_s']*1000:8.1f} ms"
                          f"  p99 {r['ttft_p99_s']*1000:8.1f} ms  ({r['requests']} req, {r['completion_tokens']} tok, {r['errors']} err)",
                          flush=True)
            finally:
                stop(p)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
