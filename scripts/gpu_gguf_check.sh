#!/usr/bin/env bash
# GGUF weights on the GPU (see ../shared/device/README.md): MLX CUDA's
# quantized matmul on the triples famlx makes of GGUF blocks (4, 5, 8 bits;
# float16 and float32 scales; float32 activations) against the CPU, and
# famlx on GGUF fixtures on the GPU against the same binary on the CPU.
#
# Here, first:   WITH_PY_REF=1 ../shared/device/make-cuda-bundle.sh .mlx-cuda 0.32.4
#                scripts/stage_gpu_bin.sh        # release binaries -> gpu-bin/
# Then run this there with .mlx-cuda and gpu-bin carried. Results go to $OUT.
set -uo pipefail
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== MLX CUDA quantized matmul, GGUF triples"
python3 - <<'PY' 2>&1 | tee "$OUT/qmm.txt"
import mlx.core as mx
mx.random.seed(0)
worst = 0.0
for bits in (4, 5, 8):
    for sdt in (mx.float16, mx.float32):
        for m in (1, 7, 64):
            w = mx.random.normal((256, 512))
            q, s, b = mx.quantize(w, group_size=32, bits=bits)
            s, b = s.astype(sdt), b.astype(sdt)
            x = mx.random.normal((m, 512))
            gpu = mx.quantized_matmul(x, q, s, b, group_size=32, bits=bits, stream=mx.gpu)
            cpu = mx.quantized_matmul(x, q, s, b, group_size=32, bits=bits, stream=mx.cpu)
            rel = (mx.abs(gpu - cpu).max() / mx.abs(cpu).max()).item()
            worst = max(worst, rel)
            print(f"bits {bits} scales {sdt} m {m}: out {gpu.dtype}, max |gpu - cpu| / max |cpu| = {rel:.2e}")
print("worst", worst)
assert worst < 1e-4, worst
PY
echo "== famlx on GGUF fixtures on the GPU against mlx-lm's greedy tokens (expected.json)"
export FAMLX_PLUGIN_PATH=$PWD/gpu-bin
for f in qwen2-q8_0 qwen3-f32; do
  exp=fixtures/gguf-text/$f.expected.json
  ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$exp'))['prompts'][1]['ids'])))")
  gpu-bin/famlx generate --model fixtures/gguf-text/$f.gguf --prompt-ids "$ids" --max-tokens 24 --temp 0 --json \
      > "$OUT/$f.json" 2> "$OUT/$f.err" || tail -3 "$OUT/$f.err"
  python3 -c "
import json
g=json.load(open('$OUT/$f.json'))['tokens']; e=json.load(open('$exp'))['prompts'][1]
same=sum(a==b for a,b in zip(g,e['greedy']))
print('$f: famlx on the GPU', g, 'mlx-lm', e['greedy'], f'{same}/{len(e[\"greedy\"])} equal')"
done
