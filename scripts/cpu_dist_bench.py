#!/usr/bin/env python3
"""famlx vs mlx-lm split over 1, 2 and 3 ranks of MLX's ring backend on
this machine, side by side in one run: `famlx launch -n N -- bench` against
`mlx.launch -n N -- python -m mlx_lm benchmark` (tensor parallel, and
pipeline with --pipeline), decode and prompt tokens per second of rank 0.

On one machine the ranks share its cores: the figures show what splitting
costs (collectives, one forward per rank), not a speed-up.

    python3 scripts/cpu_dist_bench.py --famlx target/release/famlx \\
        --python /opt/ref/bin/python MODEL... [-p 64] [-g 32]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path


def famlx_run(famlx, model, ranks, mode, p, g):
    cmd = [famlx]
    if ranks > 1:
        cmd += ["launch", "-n", str(ranks), "--"]
    cmd += ["bench", "--model", model, "-p", str(p), "-g", str(g), "-n", "1", "--json"]
    if ranks > 1:
        cmd += ["--parallel", mode]
    o = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in o.stdout.splitlines() if l.startswith("{")]
    if o.returncode != 0 or not lines:
        return None, (o.stderr.strip().splitlines() or ["failed"])[-1]
    a = json.loads(lines[-1])["average"]
    return (a["prompt_tps"], a["generation_tps"], a["peak_memory_bytes"] / 1e9), None


def mlx_lm_run(python, model, ranks, mode, p, g, limit):
    bench = [python, "-m", "mlx_lm", "benchmark", "--model", model, "-p", str(p), "-g", str(g), "-n", "1"]
    if ranks > 1 and mode == "pipeline":
        bench.append("--pipeline")
    if ranks > 1:
        launcher = str(Path(python).parent / "mlx.launch")
        cmd = [launcher, "-n", str(ranks), "--backend", "ring", "--"] + bench
    else:
        cmd = bench
    # Its own process group: on a timeout the ranks mlx.launch started are
    # killed with it (left running, they would slow every later row).
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None, f"no result within {limit} s"
    o = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    m = re.search(r"Averages: prompt_tps=([\d.]+), generation_tps=([\d.]+), peak_memory=([\d.]+)", o.stdout)
    if o.returncode != 0 or not m:
        err = [l for l in (o.stderr + o.stdout).splitlines() if "Error" in l or "error" in l]
        return None, (err or ["failed"])[-1][:120]
    return tuple(float(x) for x in m.groups()), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--famlx", default="target/release/famlx")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-g", type=int, default=32)
    # MLX's own CPU q4 path takes minutes on a 248K vocabulary.
    ap.add_argument("--mlx-lm-timeout", type=float, default=300, help="seconds per mlx-lm run")
    a = ap.parse_args()
    print("| model | ranks | split | famlx prompt tok/s | famlx decode tok/s | famlx peak GB (rank 0) | mlx-lm prompt tok/s | mlx-lm decode tok/s | mlx-lm peak GB | decode famlx/mlx-lm |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        for ranks, mode in [(1, "-"), (2, "tensor"), (2, "pipeline"), (3, "tensor"), (3, "pipeline")]:
            f, fe = famlx_run(a.famlx, model, ranks, mode, a.p, a.g)
            m, me = mlx_lm_run(a.python, model, ranks, mode, a.p, a.g, a.mlx_lm_timeout)
            fs = f"{f[0]:.1f} | {f[1]:.2f} | {f[2]:.3f}" if f else f"failed: {fe} | | "
            ms = f"{m[0]:.1f} | {m[1]:.2f} | {m[2]:.3f}" if m else f"failed: {me} | | "
            ratio = f"{f[1] / m[1]:.2f}x" if f and m else "-"
            print(f"| {Path(model).name} | {ranks} | {mode} | {fs} | {ms} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
