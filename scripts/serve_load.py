#!/usr/bin/env python3
"""Load test for `famlx serve`: many streaming clients for a bounded time,
mixing whole greedy requests, stop strings, hang-ups and sampled requests.

    python scripts/serve_load.py BASE_URL [--clients 64] [--seconds 300] [--json out.json]

Checks, reported in one JSON object (host/tests/it/serve/load.rs asserts on it):
- every whole greedy stream adds up to exactly the reply the same request
  gets alone (no lost or duplicated tokens), and its completion_tokens match;
- a stop-string request ends right before the first occurrence of the stop;
- no status other than 200 (no 5xx, no queue refusals);
- MLX memory and the prompt cache over time (from /metrics);
- time to first token, p50 and p99.
Only the Python standard library is used.
"""

import argparse
import http.client
import json
import random
import statistics
import threading
import time
from urllib.parse import urlparse


def connect(base):
    u = urlparse(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=300)


def whole(base, prompt, n):
    c = connect(base)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    d = json.loads(r.read())
    return d["choices"][0]["text"], d["usage"]["completion_tokens"]


def stream(base, body, hang_up_after=None):
    """(status, text, completion_tokens, ttft, finish)"""
    c = connect(base)
    t0 = time.perf_counter()
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return r.status, r.read().decode(errors="replace"), None, None, None
    text, tokens, ttft, finish, chunks = "", None, None, None, 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        if line[6:] == b"[DONE]":
            break
        d = json.loads(line[6:])
        if "error" in d:
            return 500, json.dumps(d), None, None, None
        if d.get("usage"):
            tokens = d["usage"]["completion_tokens"]
        for ch in d.get("choices", []):
            if ch.get("text"):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text += ch["text"]
                chunks += 1
            finish = ch.get("finish_reason") or finish
        if hang_up_after is not None and chunks >= hang_up_after:
            c.sock.close()
            return 200, text, None, ttft, "hung_up"
    c.close()
    return 200, text, tokens, ttft, finish


def metrics(base):
    c = connect(base)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.split()
            out[k] = float(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = random.Random(1)
    words = ["sun", "moon", "tree", "bird", "rain", "snow", "wind", "fire", "lake", "road", "hill", "star"]
    prompts = [" ".join(rng.choice(words) for _ in range(3 + 5 * i)) for i in range(24)]
    lengths = [8 + (i * 11) % 40 for i in range(24)]
    ref = [whole(a.base, p, n) for p, n in zip(prompts, lengths)]
    stats = {"requests": 0, "whole": 0, "stopped": 0, "hung_up": 0, "sampled": 0, "mismatches": [], "bad_status": [],
             "ttft": []}
    lock = threading.Lock()
    mem = []
    deadline = time.time() + a.seconds
    done = threading.Event()

    def watch():
        while not done.is_set():
            m = metrics(a.base)
            mem.append((time.time(), m.get("famlx_memory_active_bytes", 0), m.get("famlx_prompt_cache_bytes", 0)))
            done.wait(1.0)

    def client(seed):
        r = random.Random(seed)
        while time.time() < deadline:
            i = r.randrange(len(prompts))
            want, want_n = ref[i]
            kind = r.choices(["whole", "stopped", "hung_up", "sampled"], [5, 2, 2, 1])[0]
            body = {"prompt": prompts[i], "max_tokens": lengths[i], "temperature": 0}
            hang = None
            stop = None
            if kind == "stopped" and len(want) > 4:
                at = r.randrange(1, len(want) - 2)
                stop = want[at:at + 2]
                body["stop"] = [stop]
            elif kind == "hung_up":
                hang = r.randrange(1, 4)
            elif kind == "sampled":
                body.update(temperature=1.0, top_p=0.9, seed=r.randrange(1000))
            status, text, n, ttft, finish = stream(a.base, body, hang)
            with lock:
                stats["requests"] += 1
                stats[kind] += 1
                if ttft is not None and kind != "hung_up":
                    stats["ttft"].append(ttft)
                if status != 200:
                    stats["bad_status"].append((status, text[:200]))
                    continue
                if kind == "whole" and (text != want or n != want_n):
                    stats["mismatches"].append({"prompt": i, "want": want, "got": text, "n": n, "want_n": want_n})
                if kind == "stopped" and stop is not None and text != want[:want.find(stop)]:
                    stats["mismatches"].append({"prompt": i, "stop": stop, "want": want[:want.find(stop)], "got": text})

    w = threading.Thread(target=watch)
    w.start()
    ts = [threading.Thread(target=client, args=(s,)) for s in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    done.set()
    w.join()
    final = metrics(a.base)
    ttft = sorted(stats.pop("ttft"))
    half = len(mem) // 2
    out = dict(stats)
    out.update({
        "seconds": a.seconds,
        "clients": a.clients,
        "ttft_p50_s": statistics.median(ttft) if ttft else None,
        "ttft_p99_s": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))] if ttft else None,
        "memory_first_half_max": max((m[1] for m in mem[:half]), default=0),
        "memory_second_half_max": max((m[1] for m in mem[half:]), default=0),
        "prompt_cache_max": max((m[2] for m in mem), default=0),
        "generation_tokens_total": final.get("famlx_generation_tokens_total"),
        "batch_size_max": final.get("famlx_batch_size_max"),
        "mismatch_count": len(stats["mismatches"]),
        "mismatches": stats["mismatches"][:3],
    })
    s = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(s)
    print(s)


if __name__ == "__main__":
    main()
