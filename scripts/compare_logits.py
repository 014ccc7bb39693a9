#!/usr/bin/env python3
"""Compares famlx's logits with mlx-lm's on the same checkpoint and ids.

    famlx generate --model M --prompt "..." --max-tokens 1 --dump-logits ours.json
    python3 scripts/compare_logits.py M ours.json [--tol 0.05] [--family-module mlx_lm.models.llama]

Prints, per prompt position, the largest absolute difference of the logits
and whether the top token agrees; exits 1 when a top token differs (or a
difference exceeds --tol). Needs the reference versions in
fixtures/requirements.txt (mlx-lm 0.32.2 on MLX 0.32.4). For a family
mlx-lm knows under another model_type, `--model-type` loads it as that.
"""
import argparse
import json
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="checkpoint folder")
    ap.add_argument("dump", type=Path, help="file written by famlx generate --dump-logits")
    ap.add_argument("--tol", type=float, default=None, help="largest |difference| allowed (default: only argmax)")
    ap.add_argument("--model-type", help="load the checkpoint as this mlx-lm model_type")
    a = ap.parse_args()

    import mlx.core as mx
    from mlx_lm.utils import load_model

    ours = json.loads(a.dump.read_text())
    ids = ours["ids"]
    config = json.loads((a.model / "config.json").read_text())
    if a.model_type:
        config["model_type"] = a.model_type
    model, _ = load_model(a.model, model_config={"model_type": config["model_type"]} if a.model_type else {})
    ref = model(mx.array([ids]))[0].astype(mx.float32)
    got = mx.array(ours["logits"], dtype=mx.float32)
    if got.shape != ref.shape:
        sys.exit(f"shapes differ: famlx {got.shape}, mlx-lm {ref.shape}")
    diff = mx.abs(got - ref).max(axis=-1).tolist()
    agree = (mx.argmax(got, axis=-1) == mx.argmax(ref, axis=-1)).tolist()
    bad = 0
    for i, (d, ok) in enumerate(zip(diff, agree)):
        flag = "" if ok and (a.tol is None or d <= a.tol) else "  <-- differs"
        bad += bool(flag)
        print(f"position {i:4d} (id {ids[i]:6d}): max |diff| {d:.3g}, top token {'agrees' if ok else 'DIFFERS'}{flag}")
    print(f"{len(ids) - bad} of {len(ids)} positions agree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
