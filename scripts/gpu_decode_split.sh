#!/usr/bin/env bash
# GPU session: where decode time goes. For each model, famlx bench (its
# decode_build_s / decode_wait_s split: host building graphs vs host waiting
# on the device) and mlx-lm's benchmark, alternated for ROUNDS rounds so
# drift hits both; GPU clocks, power and throttle reasons sampled meanwhile.
# BINS lists famlx builds to compare (folders holding famlx + plugins).
# Here: scripts/stage_gpu_bin.sh; carry .mlx-cuda and gpu-bin.
set -uo pipefail
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}; M=/tmp/bm5; mkdir -p "$OUT" "$M"
for s in ${SPECS:-qwen3-0.6b:bf16 qwen3-0.6b:q8}; do
  python3 scripts/make_bench_models.py "$M" --shape "${s%%:*}" --dtype "${s#*:}" 2>&1 | grep -v INFO | tail -1
done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 & SMI=$!
show_split() { python3 -c "
import json,sys; j=json.load(open(sys.argv[1])); m=j['average']; g=$2-1
print('%-22s %-14s gen %7.1f tok/s  step %.3f ms = build %.3f + wait %.3f' % (sys.argv[2], sys.argv[3], m['generation_tps'],
 1e3/m['generation_tps'], 1e3*m['decode_build_s']/g, 1e3*m['decode_wait_s']/g))" "$1" "$3" "$4"; }
for r in $(seq ${ROUNDS:-2}); do
  for s in ${SPECS:-qwen3-0.6b:bf16 qwen3-0.6b:q8}; do
    m="${s%%:*}-${s#*:}"
    for b in ${BINS:-gpu-bin}; do
      $b/famlx bench --model "$M/$m" -p 512 -g 128 -n ${TRIALS:-3} --json > "$OUT/$m.$b.$r.json" 2>"$OUT/err.txt" \
        && show_split "$OUT/$m.$b.$r.json" 128 "$m" "$b" || { echo "$m $b failed"; tail -2 "$OUT/err.txt"; }
    done
    python3 -m mlx_lm benchmark --model "$M/$m" -p 512 -g 128 -n ${TRIALS:-3} 2>&1 | grep -E "^Averages" | sed "s|^|$m mlx-lm |"
  done
done
kill $SMI
echo "== GPU while running (sm MHz, mem MHz, W, C, throttle): distinct values"
tail -n +2 "$OUT/smi.csv" | cut -d, -f2- | sort | uniq -c | sort -rn | head -8
