"""Census of one mlx-lm decode step: the primitives MLX is asked to run for
one token (what `famlx bench --json` reports as `decode_graph`), from
mx.export_to_dot of generate_step's next-token array.

    python scripts/mlx_lm_census.py MODEL [-p 16]

Prints one JSON object: {"nodes": total, "views": nodes that launch no
kernel, "by_primitive": {name: n}}.
"""

import argparse
import collections
import json
import re
import tempfile
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model

# Nodes that only re-describe memory (no kernel on contiguous inputs); the
# same list as famlx's census (host/src/bench.rs, VIEW_PRIMITIVES).
VIEW_PRIMITIVES = {"Slice", "Reshape", "Split", "Squeeze", "ExpandDims", "Transpose", "Flatten", "Unflatten", "Broadcast"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=16, help="prompt tokens before the step")
    a = ap.parse_args()
    model, _ = load_model(Path(a.model))
    cache = make_prompt_cache(model)
    prompt = mx.arange(a.p)[None]
    logits = model(prompt, cache=cache)
    y = mx.argmax(logits[:, -1, :], axis=-1)
    mx.eval(y, [c.state for c in cache])
    # One step as generate_step builds it (greedy sampler on logprobs).
    logits = model(y[:, None], cache=cache)[:, -1, :]
    logprobs = logits - mx.logsumexp(logits, keepdims=True)
    nxt = mx.argmax(logprobs, axis=-1)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "g.dot"
        mx.export_to_dot(str(f), nxt, logprobs)
        labels = re.findall(r'label ="([^"]+)", shape=rectangle', f.read_text())
    c = collections.Counter(labels)
    views = sum(n for k, n in c.items() if k in VIEW_PRIMITIVES)
    print(json.dumps({"nodes": sum(c.values()), "views": views, "by_primitive": dict(c.most_common())}))


if __name__ == "__main__":
    main()
