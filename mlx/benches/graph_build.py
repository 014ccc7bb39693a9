"""Binding overhead of MLX's Python API: build the lazy graph of one decode
step of a 16-layer Llama-3.2-1B-shaped transformer, never evaluating it.

Same op sequence as graph_build.rs; reports ns per issued op.

    /opt/ref/bin/python mlx/benches/graph_build.py
"""

import math
import statistics
import time

import mlx.core as mx

LAYERS = 16
HIDDEN = 2048
HEADS = 32
KV_HEADS = 8
HEAD_DIM = 64
INTER = 8192
VOCAB = 128256
CACHE = 256  # KV cache capacity
OFFSET = 100  # tokens already in the cache
EPS = 1e-5
DT = mx.bfloat16


def make_weights():
    # Lazily created zeros of the right shapes: never evaluated.
    z = lambda *s: mx.zeros(s, dtype=DT)  # noqa: E731
    layers = []
    for _ in range(LAYERS):
        layers.append(
            dict(
                ln1=z(HIDDEN),
                wq=z(HEADS * HEAD_DIM, HIDDEN),
                wk=z(KV_HEADS * HEAD_DIM, HIDDEN),
                wv=z(KV_HEADS * HEAD_DIM, HIDDEN),
                wo=z(HIDDEN, HEADS * HEAD_DIM),
                ln2=z(HIDDEN),
                wg=z(INTER, HIDDEN),
                wu=z(INTER, HIDDEN),
                wd=z(HIDDEN, INTER),
                kc=z(1, KV_HEADS, CACHE, HEAD_DIM),
                vc=z(1, KV_HEADS, CACHE, HEAD_DIM),
            )
        )
    return z(VOCAB, HIDDEN), z(HIDDEN), layers


def step(embed, norm, layers, tokens):
    """One decode step; returns (next token, number of MLX ops issued)."""
    n = 0
    scale = 1.0 / math.sqrt(HEAD_DIM)
    x = mx.take(embed, tokens, axis=0)  # [1, 1, H]
    n += 1
    for l in layers:
        h = mx.fast.rms_norm(x, l["ln1"], EPS)
        q = h @ l["wq"].T
        k = h @ l["wk"].T
        v = h @ l["wv"].T
        n += 7
        q = q.reshape(1, 1, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
        k = k.reshape(1, 1, KV_HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
        v = v.reshape(1, 1, KV_HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
        n += 6
        q = mx.fast.rope(q, HEAD_DIM, traditional=False, base=500000.0, scale=1.0, offset=OFFSET)
        k = mx.fast.rope(k, HEAD_DIM, traditional=False, base=500000.0, scale=1.0, offset=OFFSET)
        n += 2
        # New handles on the (unchanged) caches: __setitem__ rebinds the
        # handle it is called on, so the stored caches stay as they are and
        # the steps do not chain into one growing graph.
        kc = mx.array(l["kc"])
        vc = mx.array(l["vc"])
        kc[..., OFFSET : OFFSET + 1, :] = k
        vc[..., OFFSET : OFFSET + 1, :] = v
        keys = kc[..., : OFFSET + 1, :]
        values = vc[..., : OFFSET + 1, :]
        n += 4
        o = mx.fast.scaled_dot_product_attention(q, keys, values, scale=scale, mask=None)
        o = o.transpose(0, 2, 1, 3).reshape(1, 1, HEADS * HEAD_DIM)
        x = x + o @ l["wo"].T
        n += 6
        h = mx.fast.rms_norm(x, l["ln2"], EPS)
        g = h @ l["wg"].T
        u = h @ l["wu"].T
        a = g * mx.sigmoid(g) * u
        x = x + a @ l["wd"].T
        n += 11
    x = mx.fast.rms_norm(x, norm, EPS)
    logits = x @ embed.T
    tok = mx.argmax(logits[:, -1, :], axis=-1)
    n += 5
    return tok, n


def main():
    embed, norm, layers = make_weights()
    tokens = mx.array([[1]], dtype=mx.int32)
    for _ in range(5):
        tok, ops = step(embed, norm, layers, tokens)
        del tok
    times = []
    for _ in range(50):
        t0 = time.perf_counter_ns()
        tok, ops = step(embed, norm, layers, tokens)
        t1 = time.perf_counter_ns()
        del tok
        times.append(t1 - t0)
    med = statistics.median(times)
    best = min(times)
    print(f"python graph_build: {ops} ops per step, median {med / 1e3:.1f} us/step, "
          f"{med / ops:.0f} ns/op (best {best / ops:.0f} ns/op), mlx {mx.__version__}")


if __name__ == "__main__":
    main()
