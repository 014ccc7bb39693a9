#!/usr/bin/env bash
# GPU session: famlx vs mlx-lm side by side, one model at a time (a run cut
# short keeps the rows already done). SPECS is a list of
# "shape[:layers]" items; DTYPES the storage kinds. Rows are appended to
# $OUT/rows.txt, trials to $OUT/<model>.json. PIN (a taskset CPU list)
# pins both tools to the same cores.
# Here: scripts/stage_gpu_bin.sh; carry .mlx-cuda and gpu-bin.
set -uo pipefail
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}; M=/tmp/bm3; mkdir -p "$OUT" "$M"
for spec in ${SPECS:-llama3.2-1b qwen3-0.6b}; do
  shape=${spec%%:*}; layers=${spec#*:}; [ "$layers" = "$spec" ] && layers=""
  python3 scripts/make_bench_models.py "$M" --shape "$shape" --dtype ${DTYPES:-bf16 q8 q4} ${layers:+--layers $layers} 2>&1 | grep -v INFO | tail -3
  for d in ${DTYPES:-bf16 q8 q4}; do
    m=$(ls -d "$M"/"$shape"-"$d" "$M"/smoke-L*/"$shape"-"$d" 2>/dev/null | head -1)
    [ -d "$m" ] || { echo "no model for $shape $d"; continue; }
    ${PIN:+taskset -c $PIN} python3 scripts/bench_side_by_side.py --famlx gpu-bin/famlx --model "$m" -p 512 -g 128 -n ${TRIALS:-3} \
      --rounds ${ROUNDS:-1} --json "$OUT/$(basename $m).json" --timeout 200 2>&1 | grep -E "^$(basename $m) " | tee -a "$OUT/rows.txt"
    rm -rf "$m"
  done
done
echo "== rows"; cat "$OUT/rows.txt"
