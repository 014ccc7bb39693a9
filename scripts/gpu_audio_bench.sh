#!/usr/bin/env bash
# GPU session: audio-prompt TTFT and decode, famlx vs mlx-vlm 0.7.10, on a
# random-weight Gemma-4-E2B-shaped checkpoint with its audio tower and a
# 10-second clip (scripts/audio_bench.py). Staged as scripts/gpu_vision_bench.sh
# says; results: $OUT/audio_bench.{txt,json}.
set -uo pipefail
source .mlx-cuda/device-env.sh
# mlx-vlm from .whl (or already unpacked into /tmp/vlm, as a smaller carry can bring it).
[ -d /tmp/vlm/mlx_vlm ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vlm .whl/mlx_vlm-*.whl || exit 1
export PYTHONPATH=/tmp/vlm:$PYTHONPATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 scripts/audio_bench.py --famlx gpu-bin/famlx --work /tmp/ab --seconds ${SECONDS_CLIP:-10} \
  -p ${P:-64} -g ${G:-128} -n ${TRIALS:-3} --json "$OUT/audio_bench.json" 2>&1 | grep -v -i "warn" | tee "$OUT/audio_bench.txt"
