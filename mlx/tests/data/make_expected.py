"""Records inputs and outputs of MLX's Python API for famlx-mlx's tests.

Run with the reference Python (mlx==0.32.4):

    /opt/ref/bin/python mlx/tests/data/make_expected.py

Writes, next to this script:
  expected.safetensors  inputs ("<case>.in.*") and outputs ("<case>.out*"),
                        with string metadata (read back by the io test)
  expected.json         scalar expectations and MLX's error messages
  small.gguf            a tiny GGUF file with tensors and metadata

The Rust tests (mlx/tests/*.rs) rebuild each case through famlx's bindings
and compare. Keep the data small (< 1 MB in all).
"""

import json
import math
import os

import mlx.core as mx

HERE = os.path.dirname(os.path.abspath(__file__))
T = {}  # name -> array
J = {}  # name -> json value


def put(name, a):
    assert name not in T, name
    T[name] = a


def rnd(shape, seed, dtype=mx.float32):
    return mx.random.normal(shape, key=mx.random.key(seed)).astype(dtype)


# ---------------------------------------------------------------- creation
put("create.arange", mx.arange(2.0, 11.0, 1.5, dtype=mx.float32))
put("create.linspace", mx.linspace(-1.0, 1.0, 7, dtype=mx.float32))
put("create.eye", mx.eye(3, 4, 1, dtype=mx.float32))
put("create.tri", mx.tri(3, 4, 0, dtype=mx.float32))
put("create.full", mx.full([2, 3], mx.array([1.0, 2.0, 3.0]), dtype=mx.float32))

# ---------------------------------------------------------------- shape and indexing
x = mx.arange(60, dtype=mx.float32).reshape(3, 4, 5)
put("idx.x", x)
put("idx.slice_strided", x[:, 1::2, ::3])  # start [0,1,0] stop [3,4,5] strides [1,2,3]
put("idx.slice_neg", x[::-1, :, 4:0:-2])  # negative strides
put("idx.slice_axis", x[:, :, 1:-1])
base = mx.zeros((4, 6), dtype=mx.float32)
upd = mx.arange(6, dtype=mx.float32).reshape(2, 3) + 1
put("idx.su_upd", upd)
b2 = mx.array(base)
b2[1:3, 0:6:2] = upd
put("idx.slice_update", b2)
start = mx.array([2], dtype=mx.int32)
put("idx.su_dyn", mx.slice_update(base, upd, start, [0]))  # rows 2..4, cols 0..3
put("idx.slice_dyn", mx.slice(x, mx.array([1, 2], dtype=mx.int32), [1, 2], [3, 2, 3]))
ti = mx.array([[0, 2], [1, 1]], dtype=mx.int32)
put("idx.take_idx", ti)
put("idx.take_ax1", mx.take(x, ti, axis=1))
put("idx.take_flat", mx.take(x, ti))
tal = mx.array([[[4], [0], [2], [1]]] * 3, dtype=mx.int32)  # [3,4,1]
put("idx.tal_idx", tal)
put("idx.take_along", mx.take_along_axis(x, tal, axis=2))
put("idx.put_along", mx.put_along_axis(x, tal, mx.array(-1.0), axis=2))
sa = mx.zeros((5,), dtype=mx.float32).at[mx.array([0, 2, 2])].add(mx.array([1.0, 2.0, 3.0]))
put("idx.scatter_add", sa)
s2 = mx.zeros((3, 4), dtype=mx.float32)
s2[mx.array([2, 0]), mx.array([1, 3])] = mx.array([5.0, 7.0])
put("idx.scatter_set2d", s2)
put("idx.where", mx.where(x > 30, x, -x))
put("idx.pad_const", mx.pad(x[0], [(1, 0), (0, 2)], constant_values=9.0))
put("idx.pad_edge", mx.pad(x[0], [(0, 1), (2, 1)], mode="edge"))
put("idx.concat", mx.concatenate([x[0], x[1, :2]], axis=0))
put("idx.stack", mx.stack([x[0], x[2]], axis=1))
sp = mx.split(x, [1, 3], axis=1)
for i, p in enumerate(sp):
    put(f"idx.split_at{i}", p)
put("idx.broadcast", mx.broadcast_to(mx.array([[1.0], [2.0]]), (3, 2, 4)))
put("idx.repeat", mx.repeat(x[0, :2, :3], 2, axis=1))
put("idx.tile", mx.tile(x[0, :2, :3], [2, 1, 2]))
put("idx.transpose", mx.transpose(x, [2, 0, 1]))
put("idx.flip", x[:, ::-1, :])
put("idx.roll", mx.roll(x[0], 2, axis=1))

# ---------------------------------------------------------------- arithmetic and comparisons
a = rnd((3, 4), 1)
b = rnd((4,), 2)
pos = mx.abs(rnd((3, 4), 3)) + 0.1
put("ar.a", a)
put("ar.b", b)
put("ar.pos", pos)
for name, v in [
    ("add", a + b),
    ("sub", a - b),
    ("mul", a * b),
    ("div", a / b),
    ("maximum", mx.maximum(a, b)),
    ("minimum", mx.minimum(a, b)),
    ("power", mx.power(pos, b)),
    ("remainder", mx.remainder(a, mx.array(0.7))),
    ("floor_divide", mx.floor_divide(a, mx.array(0.7))),
    ("logaddexp", mx.logaddexp(a, b)),
    ("exp", mx.exp(a)),
    ("log", mx.log(pos)),
    ("sqrt", mx.sqrt(pos)),
    ("rsqrt", mx.rsqrt(pos)),
    ("tanh", mx.tanh(a)),
    ("sigmoid", mx.sigmoid(a)),
    ("erf", mx.erf(a)),
    ("sin", mx.sin(a)),
    ("abs", mx.abs(a)),
    ("neg", -a),
    ("square", mx.square(a)),
    ("floor", mx.floor(a * 3)),
    ("mul_s_bf16", (a.astype(mx.bfloat16) * 0.5 + 1.0).astype(mx.float32)),
    ("eq", mx.equal(mx.floor(a), mx.floor(b))),
    ("lt", a < b),
    ("ge", a >= b),
    ("ne", a != b),
    ("and", mx.logical_and(a > 0, b > 0)),
]:
    put(f"ar.{name}", v)
J["ar.mul_s_bf16_dtype"] = str((a.astype(mx.bfloat16) * 0.5).dtype)

# ---------------------------------------------------------------- reductions, scans, sort
r = rnd((3, 5, 4), 4)
put("red.x", r)
put("red.sum_1", mx.sum(r, axis=1))
put("red.sum_02_keep", mx.sum(r, axis=[0, 2], keepdims=True))
put("red.mean_all", mx.mean(r))
put("red.max_2", mx.max(r, axis=2))
put("red.min_0", mx.min(r, axis=0))
put("red.prod_2", mx.prod(r, axis=2))
put("red.argmax_1", mx.argmax(r, axis=1))
put("red.argmin_2_keep", mx.argmin(r, axis=2, keepdims=True))
put("red.logsumexp_2", mx.logsumexp(r, axis=2))
put("red.softmax_2", mx.softmax(r, axis=-1))
put("red.softmax_bf16_precise", mx.softmax(r.astype(mx.bfloat16), axis=-1, precise=True).astype(mx.float32))
put("red.var_1", mx.var(r, axis=1, ddof=1))
put("red.std_2", mx.std(r, axis=2))
put("red.cumsum_1", mx.cumsum(r, axis=1))
put("red.cumsum_1_rev_excl", mx.cumsum(r, axis=1, reverse=True, inclusive=False))
put("red.cumprod_2", mx.cumprod(r, axis=2))
put("red.cummax_1", mx.cummax(r, axis=1))
put("red.logcumsumexp_2", mx.logcumsumexp(r, axis=2))
put("red.sort_1", mx.sort(r, axis=1))
put("red.argsort_2", mx.argsort(r, axis=2))
put("red.topk3_sorted", mx.sort(mx.topk(r, 3, axis=1), axis=1))
put("red.all", mx.all(r > -3.0, axis=1))
put("red.any", mx.any(r > 1.5, axis=2))

# ---------------------------------------------------------------- matmul, conv, fft
m1 = rnd((2, 3, 4), 5)
m2 = rnd((4, 5), 6)
m3 = rnd((2, 1, 3, 4), 7)
m4 = rnd((3, 4, 2), 8)
mc = rnd((3, 5), 9)
put("mm.a", m1)
put("mm.b", m2)
put("mm.c", m3)
put("mm.d", m4)
put("mm.bias", mc)
put("mm.ab", m1 @ m2)
put("mm.cd", m3 @ m4)
put("mm.addmm", mx.addmm(mc, m1[0], m2, alpha=0.5, beta=2.0))

cx1 = rnd((2, 10, 4), 10)
cw1 = rnd((6, 3, 2), 11)
put("conv.x1", cx1)
put("conv.w1", cw1)
put("conv.y1", mx.conv1d(cx1, cw1, stride=2, padding=1, dilation=1, groups=2))
cx2 = rnd((1, 7, 6, 4), 12)
cw2 = rnd((4, 3, 3, 2), 13)
put("conv.x2", cx2)
put("conv.w2", cw2)
put("conv.y2", mx.conv2d(cx2, cw2, stride=(1, 2), padding=(1, 0), dilation=(2, 1), groups=2))
cx3 = rnd((1, 4, 5, 4, 2), 14)
cw3 = rnd((3, 2, 3, 2, 2), 15)
put("conv.x3", cx3)
put("conv.w3", cw3)
put("conv.y3", mx.conv3d(cx3, cw3, stride=(1, 1, 2), padding=(1, 0, 1)))
ctw = rnd((3, 3, 4), 16)  # [O, K, C]
put("conv.wt1", ctw)
put("conv.yt1", mx.conv_transpose1d(cx1, ctw, stride=2, padding=1))

fx = rnd((2, 8), 17)
put("fft.x", fx)
rf = mx.fft.rfft(fx, axis=-1)
put("fft.rfft_re", mx.real(rf))
put("fft.rfft_im", mx.imag(rf))
rf6 = mx.fft.rfft(fx, n=6, axis=0 - 1)
put("fft.rfft6_re", mx.real(rf6))
put("fft.rfft6_im", mx.imag(rf6))
put("fft.irfft", mx.fft.irfft(rf, axis=-1))

# ---------------------------------------------------------------- random (seeded keys)
k = mx.random.key(42)
put("rand.key", k)
put("rand.split", mx.random.split(k, 3))
put("rand.uniform", mx.random.uniform(-2.0, 3.0, (3, 4), key=k))
put("rand.normal", mx.random.normal((3, 4), loc=1.0, scale=2.0, key=k))
put("rand.normal_bf16", mx.random.normal((8,), dtype=mx.bfloat16, key=k).astype(mx.float32))
logits = mx.log(mx.array([[0.1, 0.2, 0.7, 0.0 + 1e-9], [0.5, 0.25, 0.125, 0.125]]))
put("rand.logits", logits)
put("rand.categorical", mx.random.categorical(logits, axis=-1, key=k))
put("rand.categorical_n", mx.random.categorical(logits, axis=-1, num_samples=6, key=k))
put("rand.randint", mx.random.randint(-5, 17, (10,), key=k))
put("rand.bernoulli", mx.random.bernoulli(mx.array(0.3), (10,), key=k))
put("rand.gumbel", mx.random.gumbel((6,), key=k))
mx.random.seed(7)
put("rand.seed7_uniform", mx.random.uniform(shape=(4,)))

# ---------------------------------------------------------------- fast
nx = rnd((2, 3, 16), 20)
nw = rnd((16,), 21) + 1.0
nb = rnd((16,), 22)
put("fast.x", nx)
put("fast.w", nw)
put("fast.b", nb)
put("fast.rms", mx.fast.rms_norm(nx, nw, 1e-5))
put("fast.rms_noweight", mx.fast.rms_norm(nx, None, 1e-6))
put("fast.ln", mx.fast.layer_norm(nx, nw, nb, 1e-5))
put("fast.ln_noaffine", mx.fast.layer_norm(nx, None, None, 1e-5))

rx = rnd((2, 3, 5, 16), 23)  # B, H, T, D
put("rope.x", rx)
put("rope.int", mx.fast.rope(rx, 16, traditional=False, base=10000.0, scale=1.0, offset=3))
put("rope.trad_partial", mx.fast.rope(rx, 8, traditional=True, base=500.0, scale=0.5, offset=0))
roff = mx.array([0, 7], dtype=mx.int32)
put("rope.offsets", roff)
put("rope.arr", mx.fast.rope(rx, 16, traditional=False, base=10000.0, scale=1.0, offset=roff))
freqs = mx.array([1.0 / (10000.0 ** (i / 8.0)) * (0.25 if i >= 4 else 1.0) for i in range(8)])
put("rope.freqs", freqs)
put("rope.custom", mx.fast.rope(rx, 16, traditional=False, base=None, scale=1.0, offset=2, freqs=freqs))

q = rnd((1, 4, 3, 8), 30)
kk = rnd((1, 2, 6, 8), 31)
vv = rnd((1, 2, 6, 8), 32)
scale = 1.0 / math.sqrt(8)
bmask = mx.array([[True] * 6, [True, False, True, True, False, True], [False] * 3 + [True] * 3])
amask = rnd((3, 6), 33)
sinks = rnd((4,), 34)
for n, v in [("q", q), ("k", kk), ("v", vv), ("bmask", bmask), ("amask", amask), ("sinks", sinks)]:
    put(f"sdpa.{n}", v)
sd = mx.fast.scaled_dot_product_attention
put("sdpa.none", sd(q, kk, vv, scale=scale))
put("sdpa.causal", sd(q, kk, vv, scale=scale, mask="causal"))
put("sdpa.bool", sd(q, kk, vv, scale=scale, mask=bmask))
put("sdpa.add", sd(q, kk, vv, scale=scale, mask=amask))
put("sdpa.with_sinks", sd(q, kk, vv, scale=scale, mask="causal", sinks=sinks))

gq = rnd((1, 4, 2, 8), 40)
gk = rnd((1, 4, 2, 8), 41)
gk = gk / mx.linalg.norm(gk, axis=-1, keepdims=True)
gv = rnd((1, 4, 4, 8), 42)
gg = mx.exp(-mx.abs(rnd((1, 4, 4), 43)))
gb = mx.sigmoid(rnd((1, 4, 4), 44))
y0, s0 = mx.fast.gated_delta_update(gq, gk, gv, gg, gb)
y1, s1 = mx.fast.gated_delta_update(gq, gk, gv, gg, gb, s0)
for n, v in [("q", gq), ("k", gk), ("v", gv), ("g", gg), ("beta", gb), ("y0", y0), ("s0", s0), ("y1", y1), ("s1", s1)]:
    put(f"gdn.{n}", v)

# ---------------------------------------------------------------- quantization
qw = rnd((32, 128), 50)
qx = rnd((2, 128), 51)
put("q.w", qw)
put("q.x", qx)
wq, sc, bi = mx.quantize(qw, 64, 4)
put("q.a4.wq", wq)
put("q.a4.scales", sc)
put("q.a4.biases", bi)
put("q.a4.deq", mx.dequantize(wq, sc, bi, 64, 4))
put("q.a4.qmm", mx.quantized_matmul(qx, wq, sc, bi, transpose=True, group_size=64, bits=4))
wq8, sc8, bi8 = mx.quantize(qw, 32, 8)
put("q.a8.wq", wq8)
put("q.a8.qmm", mx.quantized_matmul(qx, wq8, sc8, bi8, transpose=True, group_size=32, bits=8))
wqm, scm = mx.quantize(qw, 32, 4, mode="mxfp4")
put("q.mx.wq", wqm)
put("q.mx.scales", scm)
put("q.mx.deq", mx.dequantize(wqm, scm, None, 32, 4, mode="mxfp4"))
put("q.mx.qmm", mx.quantized_matmul(qx, wqm, scm, None, transpose=True, group_size=32, bits=4, mode="mxfp4"))
# experts: w [E=3, N=32, K=64]
ew = rnd((3, 32, 64), 52)
ex = rnd((4, 1, 64), 53)
eidx = mx.array([2, 0, 2, 1], dtype=mx.uint32)
put("q.ew", ew)
put("q.ex", ex)
put("q.eidx", eidx)
put("q.gather_mm", mx.gather_mm(ex, ew.swapaxes(-1, -2), None, eidx))
ewq, esc, ebi = mx.quantize(ew, 32, 4)
put("q.gather_qmm", mx.gather_qmm(ex, ewq, esc, ebi, None, eidx, transpose=True, group_size=32, bits=4))

# ---------------------------------------------------------------- errors (exact messages)
errors = {}


def err(name, f):
    try:
        mx.eval(f())
    except Exception as e:  # noqa: BLE001
        errors[name] = str(e)
        return
    raise AssertionError(f"{name} did not raise")


ones = mx.ones
err("add_broadcast", lambda: ones((3,)) + ones((2,)))
err("matmul_shapes", lambda: ones((2, 3)) @ ones((4, 5)))
err("reshape", lambda: ones((6,)).reshape(4))
err("concat", lambda: mx.concatenate([ones((2, 3)), ones((2, 4))], axis=0))
err("conv3d_groups", lambda: mx.conv3d(ones((1, 4, 4, 4, 4)), ones((4, 2, 2, 2, 2)), groups=2))
err("quantize_group", lambda: mx.quantize(ones((8, 100)), 64, 4))
err("take_along_ndim", lambda: mx.take_along_axis(ones((3, 4)), mx.array([0], dtype=mx.int32), axis=1))
err("split_uneven", lambda: mx.split(ones((5,)), 2))
err("sdpa_dims", lambda: mx.fast.scaled_dot_product_attention(ones((1, 3, 4, 8)), ones((1, 2, 4, 8)), ones((1, 2, 4, 8)), scale=1.0))
J["errors"] = errors

for key_, v in list(T.items()):
    mx.eval(v)
mx.save_safetensors(
    os.path.join(HERE, "expected.safetensors"),
    T,
    metadata={"generator": "make_expected.py", "mlx": mx.__version__},
)
with open(os.path.join(HERE, "expected.json"), "w") as f:
    json.dump(J, f, indent=1, sort_keys=True)

# ---------------------------------------------------------------- GGUF
mx.save_gguf(
    os.path.join(HERE, "small.gguf"),
    {
        "tok_embd.weight": mx.arange(12, dtype=mx.float32).reshape(3, 4),
        "blk.0.attn_norm.weight": mx.array([0.5, 1.5, -2.0, 4.0], dtype=mx.float16),
        "pos": mx.array([1, -2, 3], dtype=mx.int32),
    },
    {
        "general.architecture": "llama",
        "general.name": "famlx-test",
        "llama.block_count": mx.array(2, dtype=mx.uint32),
        "llama.rope.freq_base": mx.array(10000.0, dtype=mx.float32),
        "tokenizer.ggml.scores": mx.array([0.0, -1.0, -2.5], dtype=mx.float32),
        "tokenizer.ggml.tokens": ["<s>", "hello", "world"],
    },
)

total = sum(os.path.getsize(os.path.join(HERE, n)) for n in ["expected.safetensors", "expected.json", "small.gguf"])
print(f"{len(T)} arrays, {len(errors)} error messages, {total} bytes")
