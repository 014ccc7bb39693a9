#!/usr/bin/env bash
# One GPU-machine session (see ../shared/device/README.md): MLX CUDA smoke
# test, then famlx vs mlx-lm on random-weight Llama-3.2-1B- and
# Qwen3-0.6B-shaped checkpoints (bf16, q8, q4; prompt 512, 128 generated).
#
# Here, first:   WITH_PY_REF=1 ../shared/device/make-cuda-bundle.sh .mlx-cuda 0.32.4
#                scripts/stage_gpu_bin.sh        # release binaries -> gpu-bin/
# Then run this there with .mlx-cuda and gpu-bin carried. Results go to $OUT.
set -uo pipefail
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
echo "== smoke"
gpu-bin/gpu_smoke 2>&1 | tee "$OUT/smoke.txt"
echo "== models"
M=/tmp/bench-models
python3 scripts/make_bench_models.py "$M" --shape ${SHAPES:-llama3.2-1b qwen3-0.6b} --dtype ${DTYPES:-bf16 q8 q4} 2>&1 | tail -8
echo "== side by side"
models=()
for m in "$M"/*; do models+=(--model "$m"); done
python3 scripts/bench_side_by_side.py --famlx gpu-bin/famlx "${models[@]}" \
    -p 512 -g 128 -n ${TRIALS:-3} --rounds ${ROUNDS:-1} --json "$OUT/side_by_side.json" ${EXTRA:-} 2>&1 | tee "$OUT/side_by_side.txt"
