"""What host/tests/it/cli/convert.rs asks of the reference (mlx-lm 0.32.2 on MLX
0.32.4, fixtures/requirements.txt): compare two converted folders tensor for
tensor, and greedy tokens from a folder loaded with mlx_lm.load. It only calls
mlx-lm; no reference code is copied.

    python mlx_lm_check.py JOBS.json     # prints one JSON list of results

Jobs: {"compare": [A, B]} -> {"only_a", "only_b", "differ", "quant_a", "quant_b"};
      {"generate": DIR, "ids": [...], "n": N} -> {"tokens": [...]}.
"""

import glob
import json
import os
import sys

import mlx.core as mx


def tensors(d):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        out.update(mx.load(f))
    return out


def raw(x):
    if x.dtype in (mx.bfloat16, mx.float16):
        x = x.view(mx.uint16)
    import numpy as np

    return np.array(x).tobytes()


def compare(a, b):
    ta, tb = tensors(a), tensors(b)
    common = sorted(set(ta) & set(tb))
    differ = [
        k
        for k in common
        if ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape or raw(ta[k]) != raw(tb[k])
    ]
    qa = json.load(open(os.path.join(a, "config.json"))).get("quantization")
    qb = json.load(open(os.path.join(b, "config.json"))).get("quantization")
    return {
        "only_a": sorted(set(ta) - set(tb)),
        "only_b": sorted(set(tb) - set(ta)),
        "common": len(common),
        "differ": differ,
        "quant_a": qa,
        "quant_b": qb,
    }


def generate(d, ids, n):
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    model, _ = load(d)
    prompt = mx.array(ids, dtype=mx.uint32)
    out = []
    for tok, _ in generate_step(prompt, model, max_tokens=n, sampler=lambda x: mx.argmax(x, axis=-1)):
        out.append(int(tok))
    return {"tokens": out}


def main():
    jobs = json.load(open(sys.argv[1]))
    results = []
    for j in jobs:
        if "compare" in j:
            results.append(compare(*j["compare"]))
        else:
            results.append(generate(j["generate"], j["ids"], j["n"]))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
