#!/usr/bin/env python3
"""famlx vs mlx-lm on the same checkpoints: prompt tok/s, generation tok/s,
peak memory and the ratio famlx / mlx-lm.

For each --model, runs ``famlx bench --json`` and mlx-lm's benchmark with the
same -p/-g/-n (each in its own process, one after the other, never at once),
and prints one table row per model. mlx-lm runs under the Python running this
script (use the environment whose mlx is the version famlx links; the versions
are printed and a mismatch is warned about).

mlx-lm side:
  * ``cli`` (default when the folder has a tokenizer): ``python -m mlx_lm
    benchmark``, unchanged, its "Trial" lines parsed.
  * ``steps`` (default when it has none, e.g. written by
    make_bench_models.py where ``tokenizers`` was missing): the same loop as
    mlx_lm.benchmark (seed 0, ``mx.random.randint`` prompt, warm-up, trials
    on fresh caches, stream_generate's timing) built on
    ``mlx_lm.utils.load_model`` and ``mlx_lm.generate.generate_step``, which
    need no tokenizer; it skips only the detokenizer.

Both tools draw the same prompt (mlx's global seed 0, then
``randint(0, vocab, (1, p))``). Definitions: prompt tok/s = p / time to the
first token, the same in both. Generation tok/s: famlx divides the g-1
tokens after the first by the time after the first; mlx-lm divides g by that
same time. The mlx-lm column is put on famlx's definition (× (g-1)/g) unless
--raw-mlx-tps. Peak memory: famlx resets the peak at the start of each run;
mlx-lm's is the process peak (it includes loading).

Here:   python scripts/bench_side_by_side.py --model /tmp/m/tiny-bf16 -p 128 -g 32 -n 3
GPU:    source .mlx-cuda/device-env.sh
        python3 scripts/bench_side_by_side.py --famlx ./target/release/famlx \\
            --model /tmp/m/llama3.2-1b-bf16 --model /tmp/m/llama3.2-1b-q4
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, timeout=None):
    log("$ " + " ".join(shlex.quote(str(c)) for c in cmd))
    t = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    log(f"  ({time.perf_counter() - t:.1f} s)")
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}:\n{p.stderr[-4000:]}\n{p.stdout[-2000:]}")
    return p.stdout


def run_famlx(a, model):
    cmd = [a.famlx, "bench", "--json", "--model", model, "-p", a.prompt_tokens, "-g", a.generation_tokens]
    cmd += ["-n", a.num_trials, "--prefill-step-size", a.prefill_step_size]
    for extra in a.famlx_arg:
        cmd += shlex.split(extra)
    out = run(cmd, a.timeout)
    line = [x for x in out.splitlines() if x.startswith("{")][-1]
    j = json.loads(line)
    trials = [
        {"prompt_tps": t["prompt_tps"], "generation_tps": t["generation_tps"], "peak_memory_gb": t["peak_memory_bytes"] / 1e9}
        for t in j["trials"]
    ]
    return {"tool": "famlx", "mode": "famlx bench", "mlx_version": j.get("mlx_version"), "backend": j.get("backend"), "trials": trials}


TRIAL_RE = re.compile(r"Trial \d+:\s+prompt_tps=([\d.]+), generation_tps=([\d.]+), peak_memory=([\d.]+)")


def run_mlx_cli(a, model):
    cmd = [sys.executable, "-m", "mlx_lm", "benchmark", "--model", model, "-p", a.prompt_tokens]
    cmd += ["-g", a.generation_tokens, "-n", a.num_trials, "--prefill-step-size", a.prefill_step_size]
    out = run(cmd, a.timeout)
    trials = [
        {"prompt_tps": float(m[1]), "generation_tps": float(m[2]), "peak_memory_gb": float(m[3])}
        for m in TRIAL_RE.finditer(out)
    ]
    if len(trials) != a.num_trials:
        raise RuntimeError(f"mlx_lm benchmark printed {len(trials)} trials, expected {a.num_trials}:\n{out}")
    return {"tool": "mlx-lm", "mode": "python -m mlx_lm benchmark", "trials": trials}


def run_mlx_steps(a, model):
    cmd = [sys.executable, __file__, "--mlx-steps-worker", "--model", model, "-p", a.prompt_tokens]
    cmd += ["-g", a.generation_tokens, "-n", a.num_trials, "--prefill-step-size", a.prefill_step_size]
    out = run(cmd, a.timeout)
    j = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    return {"tool": "mlx-lm", "mode": "mlx_lm load_model + generate_step", "trials": j["trials"]}


def mlx_steps_worker(a):
    """mlx_lm.benchmark's loop, without a tokenizer (prints one JSON line)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load_model

    mx.random.seed(0)
    model, config = load_model(Path(a.model[0]))
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    prompt = mx.random.randint(0, vocab, (1, a.prompt_tokens)).tolist()[0]
    p, g = a.prompt_tokens, a.generation_tokens

    def once():
        # Timed as stream_generate times it.
        tic = time.perf_counter()
        prompt_tps = 0.0
        for n, (_tok, _lp) in enumerate(
            generate_step(mx.array(prompt), model, max_tokens=g, prefill_step_size=a.prefill_step_size)
        ):
            if n == 0:
                prompt_tps = p / (time.perf_counter() - tic)
                tic = time.perf_counter()
            if n + 1 == g:
                break
        gen_tps = (n + 1) / (time.perf_counter() - tic)
        return {"prompt_tps": prompt_tps, "generation_tps": gen_tps, "peak_memory_gb": mx.get_peak_memory() / 1e9}

    once()
    trials = []
    for i in range(a.num_trials):
        t = once()
        log(f"Trial {i + 1}:  " + ", ".join(f"{k}={v:.3f}" for k, v in t.items()))
        trials.append(t)
    print(json.dumps({"trials": trials}))


def versions():
    code = "import mlx.core as mx, mlx_lm; print(mx.__version__, mlx_lm.__version__)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{sys.executable} cannot import mlx and mlx_lm:\n{p.stderr[-2000:]}")
    return p.stdout.split()


def summary(trials, key, stat):
    vals = [t[key] for t in trials]
    return statistics.median(vals) if stat == "median" else statistics.fmean(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="checkpoint folder (repeatable)")
    ap.add_argument("-p", "--prompt-tokens", type=int, default=512)
    ap.add_argument("-g", "--generation-tokens", type=int, default=128)
    ap.add_argument("-n", "--num-trials", type=int, default=5)
    ap.add_argument("--prefill-step-size", type=int, default=2048)
    ap.add_argument("--famlx", default=os.environ.get("FAMLX_BIN", str(ROOT / "target" / "release" / "famlx")),
                    help="famlx binary (default: $FAMLX_BIN or target/release/famlx)")
    ap.add_argument("--famlx-arg", action="append", default=[], help="extra famlx bench arguments, e.g. '--kv-bits 8'")
    ap.add_argument("--mlx-mode", choices=["auto", "cli", "steps"], default="auto",
                    help="how to run mlx-lm (auto: cli when the folder has a tokenizer, else steps)")
    ap.add_argument("--rounds", type=int, default=1, help="alternate famlx and mlx-lm this many times; trials pooled")
    ap.add_argument("--stat", choices=["median", "mean"], default="median", help="how trials are summarised")
    ap.add_argument("--raw-mlx-tps", action="store_true", help="show mlx-lm's generation tok/s as it reports it")
    ap.add_argument("--json", type=Path, help="also write every trial and the table to this file")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per tool run")
    ap.add_argument("--mlx-steps-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mlx_steps_worker:
        return mlx_steps_worker(a)

    mlx_ver, mlx_lm_ver = versions()
    log(f"python {sys.executable}: mlx {mlx_ver}, mlx-lm {mlx_lm_ver}; famlx {a.famlx}")
    g = a.generation_tokens
    adj = 1.0 if a.raw_mlx_tps else (g - 1) / g
    rows, raw = [], []
    for model in a.model:
        has_tok = any((Path(model) / f).exists() for f in TOKENIZER_FILES)
        mode = a.mlx_mode if a.mlx_mode != "auto" else ("cli" if has_tok else "steps")
        fam, mlx = [], []
        famlx_info = {}
        for r in range(a.rounds):
            # Alternate which tool goes first, so drift on a shared machine hits both.
            order = ["famlx", "mlx"] if r % 2 == 0 else ["mlx", "famlx"]
            for tool in order:
                if tool == "famlx":
                    res = run_famlx(a, model)
                    famlx_info = res
                    fam += res["trials"]
                else:
                    res = run_mlx_cli(a, model) if mode == "cli" else run_mlx_steps(a, model)
                    mlx_mode_name = res["mode"]
                    mlx += res["trials"]
        if famlx_info.get("mlx_version") and famlx_info["mlx_version"] != mlx_ver:
            log(f"warning: famlx runs MLX {famlx_info['mlx_version']}, python has mlx {mlx_ver}")
        row = {
            "model": model,
            "mlx_lm_mode": mlx_mode_name,
            "backend": famlx_info.get("backend"),
            "famlx_prompt_tps": summary(fam, "prompt_tps", a.stat),
            "mlx_prompt_tps": summary(mlx, "prompt_tps", a.stat),
            "famlx_generation_tps": summary(fam, "generation_tps", a.stat),
            "mlx_generation_tps": summary(mlx, "generation_tps", a.stat) * adj,
            "famlx_peak_gb": summary(fam, "peak_memory_gb", a.stat),
            "mlx_peak_gb": summary(mlx, "peak_memory_gb", a.stat),
        }
        row["prompt_ratio"] = row["famlx_prompt_tps"] / row["mlx_prompt_tps"]
        row["generation_ratio"] = row["famlx_generation_tps"] / row["mlx_generation_tps"]
        row["peak_ratio"] = row["famlx_peak_gb"] / row["mlx_peak_gb"] if row["mlx_peak_gb"] else float("nan")
        rows.append(row)
        raw.append({"model": model, "famlx": fam, "mlx_lm": mlx})

    trials = a.num_trials * a.rounds
    print(
        f"famlx vs mlx-lm {mlx_lm_ver} (mlx {mlx_ver}, backend {rows[0]['backend']}): "
        f"prompt {a.prompt_tokens}, generate {g}, {a.stat} of {trials} trials per tool"
        + ("" if a.raw_mlx_tps else f"; mlx-lm gen tok/s × {g - 1}/{g} (tokens after the first)")
    )
    hdr = (
        f"{'model':<28} {'prompt tok/s':>12} {'mlx-lm':>9} {'ratio':>6} | "
        f"{'gen tok/s':>9} {'mlx-lm':>9} {'ratio':>6} | {'peak GB':>8} {'mlx-lm':>7} {'ratio':>6}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        name = Path(r["model"]).name or r["model"]
        print(
            f"{name:<28} {r['famlx_prompt_tps']:>12.1f} {r['mlx_prompt_tps']:>9.1f} {r['prompt_ratio']:>6.2f} | "
            f"{r['famlx_generation_tps']:>9.1f} {r['mlx_generation_tps']:>9.1f} {r['generation_ratio']:>6.2f} | "
            f"{r['famlx_peak_gb']:>8.3f} {r['mlx_peak_gb']:>7.3f} {r['peak_ratio']:>6.2f}"
        )
    modes = sorted({r["mlx_lm_mode"] for r in rows})
    print(f"(mlx-lm run as: {', '.join(modes)})")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows, "trials": raw}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
