#!/usr/bin/env bash
# GPU session: image-prompt TTFT and decode, famlx vs mlx-vlm 0.7.10, on
# random-weight Gemma-4-E2B- and Qwen3.5-0.8B-shaped VLM checkpoints
# (scripts/vision_bench.py). Here first:
#   cargo build --release && bash scripts/stage_gpu_bin.sh
#   mkdir -p .whl && python3 -m pip download --no-deps -d .whl mlx-vlm==0.7.10
# then carry .mlx-cuda, gpu-bin and .whl. Results: $OUT/vision_bench.{txt,json}.
set -uo pipefail
source .mlx-cuda/device-env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vlm .whl/mlx_vlm-*.whl || exit 1
export PYTHONPATH=/tmp/vlm:$PYTHONPATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 scripts/vision_bench.py --famlx gpu-bin/famlx --work /tmp/vb --shape ${SHAPES:-gemma4-e2b qwen3.5-0.8b} \
  -p ${P:-64} -g ${G:-128} -n ${TRIALS:-3} --json "$OUT/vision_bench.json" 2>&1 | grep -v -i "warn" | tee "$OUT/vision_bench.txt"
