#!/usr/bin/env python3
"""famlx vs llama.cpp on the CPU, same GGUF file, side by side.

Alternates ``famlx bench --json`` and llama.cpp (node-llama-cpp 3.22.1's
prebuilt CPU build, through scripts/llamacpp_bench.mjs) for --rounds rounds,
one process at a time, and prints the medians and famlx / llama.cpp ratios
for prompt and decode tok/s, plus famlx's decode graph size; the weights'
memory (famlx's `model_memory_bytes`, node-llama-cpp's `model.size`) and
each process's peak resident memory.

node-llama-cpp is installed with npm into ~/.cache/famlx/llamacpp-bench on
first use. The GGUF defaults to the embedded default model (fetched by
famlx itself on first run).

    python3 scripts/cpu_vs_llamacpp.py                     # p128 g64, 3 rounds
    python3 scripts/cpu_vs_llamacpp.py -p 512 -g 128 --rounds 5
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
NODE_LLAMA_CPP = "node-llama-cpp@3.22.1"


def harness_dir():
    d = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "famlx" / "llamacpp-bench"
    if not (d / "node_modules" / "node-llama-cpp").exists():
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "package.json").exists():
            (d / "package.json").write_text('{"type": "module", "private": true}\n')
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", NODE_LLAMA_CPP], cwd=d, check=True)
    shutil.copy(REPO / "scripts" / "llamacpp_bench.mjs", d / "llamacpp_bench.mjs")
    return d


def default_gguf(famlx):
    # `famlx bench` fetches the default model; its path is in the cache.
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "famlx" / "models"
    found = sorted(cache.glob("smollm2-135m-instruct/*.gguf"))
    if not found:
        subprocess.run([famlx, "bench", "-p", "8", "-g", "2", "-n", "1"], check=True, capture_output=True)
        found = sorted(cache.glob("smollm2-135m-instruct/*.gguf"))
    if not found:
        sys.exit(f"no default GGUF under {cache}")
    return found[0]


def peak_rss_of(cmd, cwd=None):
    """Runs cmd, returns (stdout, peak resident bytes of that process)."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{cmd} failed ({p.returncode})")
    return out, ru.ru_maxrss * 1024


def run_famlx(famlx, gguf, p, g, default):
    cmd = [famlx, "bench", "-p", str(p), "-g", str(g), "-n", "1", "--json"]
    if not default:
        cmd += ["--model", str(gguf)]
    out, rss = peak_rss_of(cmd)
    j = json.loads(out)
    j["peak_rss_bytes"] = rss
    return j


def run_llamacpp(d, gguf, p, g, threads):
    cmd = ["node", "llamacpp_bench.mjs", str(gguf), str(p), str(g), "1", str(threads)]
    out, rss = peak_rss_of(cmd, cwd=d)
    j = json.loads(out.strip().splitlines()[-1])
    j["peak_rss_bytes"] = rss
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--famlx", default=str(REPO / "target" / "release" / "famlx"))
    ap.add_argument("--gguf", help="GGUF file (default: the embedded default model)")
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-g", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="llama.cpp threads (famlx uses them all)")
    a = ap.parse_args()
    gguf = pathlib.Path(a.gguf) if a.gguf else default_gguf(a.famlx)
    d = harness_dir()
    rows = {"famlx": [], "llama.cpp": []}
    mem = {"famlx": [], "llama.cpp": []}
    nodes = None
    for r in range(a.rounds):
        f = run_famlx(a.famlx, gguf, a.p, a.g, a.gguf is None)
        m = f["median"]
        rows["famlx"].append((m["prompt_tps"], m["generation_tps"]))
        mem["famlx"].append((f.get("model_memory_bytes", 0), f["peak_rss_bytes"]))
        nodes = (f.get("decode_graph") or {}).get("nodes")
        lc = run_llamacpp(d, gguf, a.p, a.g, a.threads)
        rows["llama.cpp"].append((lc["prompt_tps"], lc["generation_tps"]))
        mem["llama.cpp"].append((lc.get("model_bytes", 0), lc["peak_rss_bytes"]))
        print(f"round {r + 1}: famlx {rows['famlx'][-1][0]:.1f} / {rows['famlx'][-1][1]:.2f}, "
              f"llama.cpp {rows['llama.cpp'][-1][0]:.1f} / {rows['llama.cpp'][-1][1]:.2f} (prompt / decode tok/s)",
              file=sys.stderr)
    med = {k: (statistics.median(v[0] for v in rows[k]), statistics.median(v[1] for v in rows[k])) for k in rows}
    print(f"{gguf.name}, p{a.p} g{a.g}, median of {a.rounds} alternating rounds, {a.threads} llama.cpp threads")
    print(f"{'':12}{'prompt tok/s':>14}{'decode tok/s':>14}{'weights MB':>12}{'peak RSS MB':>13}")
    for k in ("famlx", "llama.cpp"):
        w = statistics.median(v[0] for v in mem[k]) / 1e6
        r = statistics.median(v[1] for v in mem[k]) / 1e6
        print(f"{k:12}{med[k][0]:14.1f}{med[k][1]:14.2f}{w:12.1f}{r:13.1f}")
    print(f"{'ratio':12}{med['famlx'][0] / med['llama.cpp'][0]:14.2f}{med['famlx'][1] / med['llama.cpp'][1]:14.2f}")
    if nodes is not None:
        print(f"famlx decode graph: {nodes} nodes")


if __name__ == "__main__":
    main()
