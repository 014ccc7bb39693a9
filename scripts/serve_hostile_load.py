#!/usr/bin/env python3
"""Hostile and normal clients against one `famlx serve`, mixed, for a bounded
time. Hostile clients: half a request line and silence, a body shorter than
its Content-Length, an endless chunked body, idle sockets, a huge declared
body, a schema with a 700-deep $ref chain, a Lark grammar with a 700-rule
chain, a tool call's arguments nested 10,000 deep, a prompt of many MiB,
many empty messages, many tiny images, an unsatisfiable grammar. Normal
clients send a greedy completion and check its text against the first
answer. Standard library only.

    python3 scripts/serve_hostile_load.py http://127.0.0.1:PORT --pid PID --seconds 20

Prints one JSON line: normal requests done and failed, their latency
(max, p50), hostile requests by answer, the server's peak RSS (VmHWM, from
/proc), and whether /health answered at the end.
"""

import argparse
import base64
import json
import socket
import struct
import threading
import time
import urllib.request
import zlib


def post(base, path, body, timeout=120):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:  # noqa: BLE001 - a failed connection is a result here
        return -1, str(e).encode()


def health(base):
    try:
        with urllib.request.urlopen(base + "/health", timeout=10) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001
        return False


def tiny_png():
    raw = b"\x00\xff\x00\x00"  # one row: filter byte, one red pixel
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def deep_ref_schema(n=700):
    d = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(n)}
    d[f"d{n}"] = {"type": "string"}
    return {"$defs": d, "$ref": "#/$defs/d0"}


def raw_socket(host, port, data, hold):
    """Sends `data` and waits up to `hold` seconds for the server: its
    status line's code, "closed" (closed without an answer), or "still open"."""
    try:
        s = socket.create_connection((host, port), timeout=5)
    except OSError as e:
        return f"connect failed: {type(e).__name__}"
    got = b""
    try:
        s.sendall(data)
        s.settimeout(hold)
        while True:
            c = s.recv(4096)
            if not c:
                break
            got += c
    except socket.timeout:
        return "still open"
    except OSError:
        pass
    finally:
        s.close()
    return got.split(b" ")[1].decode() if got.startswith(b"HTTP/") else "closed"


HOSTILE = [
    ("half request line", lambda b, h, p: raw_socket(h, p, b"POST /v1/completions HT", 3)),
    ("short body", lambda b, h, p: raw_socket(
        h, p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"pro", 3)),
    ("endless chunk", lambda b, h, p: raw_socket(
        h, p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab", 3)),
    ("idle socket", lambda b, h, p: raw_socket(h, p, b"", 3)),
    ("declared 1 TB body", lambda b, h, p: raw_socket(
        h, p, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n", 2)),
    ("700-deep $ref schema", lambda b, h, p: post(b, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": deep_ref_schema()}}})[0]),
    ("700-rule Lark chain", lambda b, h, p: post(b, "/v1/completions", {
        "prompt": "hi", "max_tokens": 2, "response_format": {"type": "grammar", "grammar": "start: r0\n" + "".join(
            f"r{i}: r{i + 1}\n" for i in range(700)) + "r700: \"a\"\n"}})[0]),
    ("20 MiB prompt", lambda b, h, p: post(b, "/v1/completions", {"prompt": "hello " * (20 << 17), "max_tokens": 2})[0]),
    ("300k empty messages", lambda b, h, p: post(b, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": ""}] * 300000, "max_tokens": 2})[0]),
    ("500 tiny images", lambda b, h, p: post(b, "/v1/chat/completions", {"max_tokens": 2, "messages": [{
        "role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(tiny_png()).decode()}}] * 500}]})[0]),
    ("unsatisfiable grammar", lambda b, h, p: post(b, "/v1/completions", {
        "prompt": "hi", "max_tokens": 2, "response_format": {"type": "grammar", "grammar": "start: A\nA: /a/ & /b/\n"}})[0]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--normal", type=int, default=2, help="normal clients")
    ap.add_argument("--hostile", type=int, default=4, help="hostile clients")
    a = ap.parse_args()
    host, port = a.base.split("//")[1].split(":")
    port = int(port)
    normal_body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    st, first = post(a.base, "/v1/completions", normal_body)
    if st != 200:
        raise SystemExit(f"the first normal request failed: {st} {first[:200]}")
    want = json.loads(first)["choices"][0]["text"]
    lock = threading.Lock()
    report = {"normal_done": 0, "normal_failed": [], "latencies": [], "hostile": {}}
    end = time.time() + a.seconds

    def normal():
        while time.time() < end:
            t0 = time.time()
            st, body = post(a.base, "/v1/completions", normal_body)
            dt = time.time() - t0
            with lock:
                report["latencies"].append(dt)
                if st == 200 and json.loads(body)["choices"][0]["text"] == want:
                    report["normal_done"] += 1
                else:
                    report["normal_failed"].append(f"{st}: {body[:200]!r}")

    def hostile(k):
        i = k
        while time.time() < end:
            name, f = HOSTILE[i % len(HOSTILE)]
            i += a.hostile
            r = f(a.base, host, port)
            with lock:
                report["hostile"].setdefault(name, {})
                report["hostile"][name][str(r)] = report["hostile"][name].get(str(r), 0) + 1

    threads = [threading.Thread(target=normal) for _ in range(a.normal)]
    threads += [threading.Thread(target=hostile, args=(k,)) for k in range(a.hostile)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(report.pop("latencies")) or [0.0]
    report["latency_max_s"] = round(lat[-1], 3)
    report["latency_p50_s"] = round(lat[len(lat) // 2], 3)
    report["health_at_end"] = health(a.base)
    if a.pid:
        try:
            for line in open(f"/proc/{a.pid}/status"):
                if line.startswith("VmHWM:"):
                    report["peak_rss_mb"] = int(line.split()[1]) // 1024
        except OSError:
            report["peak_rss_mb"] = None
    print(json.dumps(report))


if __name__ == "__main__":
    main()
