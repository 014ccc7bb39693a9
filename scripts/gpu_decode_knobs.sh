#!/usr/bin/env bash
# GPU session: decode-step profile and MLX CUDA knob sweep (issue 4's speed
# pass). Kernels per decode step from MLX's CUDA-graph dumps, then famlx
# bench under MLX's command-buffer knobs, then mlx-lm side by side.
# Here: scripts/stage_gpu_bin.sh; carry .mlx-cuda and gpu-bin.
set -uo pipefail
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}; M=/tmp/bm; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 scripts/make_bench_models.py $M --shape ${SHAPES:-llama3.2-1b qwen3-0.6b} --dtype ${DTYPES:-bf16 q8 q4} 2>&1 | tail -3
m1=$M/llama3.2-1b-bf16
echo "== kernels per decode step (CUDA graph nodes; famlx, 2 vs 6 tokens)"
for n in 2 6; do
  rm -rf /tmp/g$n; mkdir -p /tmp/g$n
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/g$n/x gpu-bin/famlx generate --model $m1 --prompt-ids 1,2,3,4 -m $n --json >/dev/null 2>&1
  echo "famlx m=$n graphs=$(ls /tmp/g$n | wc -l) nodes=$(cat /tmp/g$n/* | grep -c 'label=')"
done
for n in 2 6; do
  rm -rf /tmp/p$n; mkdir -p /tmp/p$n
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/p$n/x python3 -c "
import mlx.core as mx
from mlx_lm.utils import load_model
from mlx_lm.generate import generate_step
from pathlib import Path
m,_=load_model(Path('$m1'))
for i,(t,_) in zip(range($n), generate_step(mx.array([1,2,3,4]), m)): pass
" >/dev/null 2>&1
  echo "mlx-lm m=$n graphs=$(ls /tmp/p$n | wc -l) nodes=$(cat /tmp/p$n/* | grep -c 'label=')"
done
cp /tmp/g6/x_$(ls /tmp/g6 | wc -l).dot "$OUT/famlx_last_graph.dot" 2>/dev/null
echo "== knob sweep (famlx bench -p 512 -g 128 -n 3, median gen tok/s)"
for knob in "X=1" "MLX_MAX_OPS_PER_BUFFER=300" "MLX_MAX_OPS_PER_BUFFER=1000" "MLX_MAX_OPS_PER_BUFFER=50" "MLX_USE_CUDA_GRAPHS=0"; do
  for m in llama3.2-1b-bf16 llama3.2-1b-q8; do
    r=$(env $knob gpu-bin/famlx bench --model $M/$m -p 512 -g 128 -n 3 --json 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print(j.get('median',j))" 2>&1 | tail -1)
    echo "$knob $m $r"
  done
done
echo "== mlx-lm under the same knobs (bf16)"
for knob in "X=1" "MLX_MAX_OPS_PER_BUFFER=1000" "MLX_USE_CUDA_GRAPHS=0"; do
  env $knob python3 scripts/bench_side_by_side.py --famlx gpu-bin/famlx --model $m1 -p 512 -g 128 -n 3 2>&1 | tail -2 | sed "s/^/$knob /"
done
