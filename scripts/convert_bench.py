#!/usr/bin/env python3
"""famlx convert vs mlx_lm.convert on the same checkpoint, in one run.

Makes (once) a random bf16 checkpoint of a real shape with
scripts/make_bench_models.py, then converts it to affine 4-bit with both
tools, alternating, ROUNDS times each; reports wall time and the peak
resident memory of each process (ru_maxrss from wait4), and checks the two
outputs hold the same tensors byte for byte.

    python scripts/convert_bench.py --famlx target/release/famlx --work /tmp/cb
    python scripts/convert_bench.py --shape qwen3-0.6b --rounds 3

Run it with the reference environment's Python (mlx-lm 0.32.2 on MLX 0.32.4).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(cmd):
    """Wall seconds and peak RSS (MB) of one command."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode()
    if status != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{err}")
    return wall, ru.ru_maxrss / 1024


def same_tensors(a, b):
    import mlx.core as mx

    def load(d):
        out = {}
        for f in sorted(Path(d).glob("*.safetensors")):
            out.update(mx.load(str(f)))
        return out

    ta, tb = load(a), load(b)
    if set(ta) != set(tb):
        return f"names differ: {sorted(set(ta) ^ set(tb))[:5]}"
    for k in ta:
        if ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape or not mx.array_equal(ta[k], tb[k]).item():
            return f"{k} differs"
    return "identical"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--famlx", default="target/release/famlx")
    ap.add_argument("--work", default="/tmp/famlx-convert-bench")
    ap.add_argument("--shape", default="llama3.2-1b")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    work = Path(a.work)
    src = work / f"{a.shape}-bf16"
    if not src.exists():
        subprocess.run(
            [sys.executable, str(HERE / "make_bench_models.py"), str(work), "--shape", a.shape, "--dtype", "bf16"],
            check=True,
        )
    size = sum(f.stat().st_size for f in src.glob("*.safetensors")) / 1e6
    outs = {"famlx": work / "out-famlx", "mlx_lm": work / "out-mlx-lm"}
    cmds = {
        "famlx": [a.famlx, "convert", "--hf-path", str(src), "--mlx-path", str(outs["famlx"]), "-q"],
        "mlx_lm": [sys.executable, "-m", "mlx_lm", "convert", "--hf-path", str(src), "--mlx-path", str(outs["mlx_lm"]), "-q"],
    }
    res = {k: [] for k in cmds}
    for _ in range(a.rounds):
        for k, c in cmds.items():
            shutil.rmtree(outs[k], ignore_errors=True)
            res[k].append(run(c))
    print(f"{a.shape} bf16 ({size:.0f} MB of weights) -> affine q4 g64, {a.rounds} rounds, median")
    print(f"{'tool':8} {'time s':>8} {'peak RSS MB':>12}")
    med = {}
    for k, v in res.items():
        med[k] = (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
        print(f"{k:8} {med[k][0]:8.2f} {med[k][1]:12.0f}")
    print(f"famlx/mlx_lm: time {med['famlx'][0] / med['mlx_lm'][0]:.2f}x, peak {med['famlx'][1] / med['mlx_lm'][1]:.2f}x")
    print("outputs:", same_tensors(outs["famlx"], outs["mlx_lm"]))


if __name__ == "__main__":
    main()
