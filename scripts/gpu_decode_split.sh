#!/usr/bin/env bash
# GPU session: where decode time goes. For each model, famlx bench (its
# decode_build_s / decode_wait_s split: host building graphs vs host waiting
# on the device) and mlx-lm's benchmark, alternated for ROUNDS rounds so
# drift hits both; GPU clocks, power and throttle reasons sampled meanwhile.
# Also prints each tool's decode-step graph census. BINS lists famlx builds to compare (folders holding famlx + plugins).
# Here: scripts/stage_gpu_bin.sh; carry .mlx-cuda and gpu-bin.
set -uo pipefail
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}; M=/tmp/bm5; mkdir -p "$OUT" "$M"
for s in ${SPECS:-qwen3-0.6b:bf16 qwen3-0.6b:q8}; do
  python3 scripts/make_bench_models.py "$M" --shape "${s%%:*}" --dtype "${s#*:}" 2>&1 | grep -v INFO | tail -1
done
nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 & SMI=$!
show_split() { python3 -c "
import json,sys; j=json.load(open(sys.argv[1])); m=j['average']; g=$2-1
print('%-22s %-14s gen %7.1f tok/s  step %.3f ms = build %.3f (launch %.3f) + wait %.3f; %d nodes, %d of them views' % (sys.argv[2], sys.argv[3], m['generation_tps'],
 1e3/m['generation_tps'], 1e3*m['decode_build_s']/g, 1e3*m['decode_launch_s']/g, 1e3*m['decode_wait_s']/g, j['decode_graph']['nodes'], j['decode_graph']['views']))" "$1" "$3" "$4"; }
echo "== one decode step's graph (nodes by primitive)"
for s in ${SPECS:-qwen3-0.6b:bf16 qwen3-0.6b:q8}; do
  m="${s%%:*}-${s#*:}"
  gpu-bin/famlx bench --model "$M/$m" -p 16 -g 4 -n 1 --json 2>/dev/null | python3 -c "import json,sys; print('$m famlx ', json.dumps(json.load(sys.stdin)['decode_graph']))"
  python3 scripts/mlx_lm_census.py "$M/$m" | sed "s|^|$m mlx-lm |"
done
# GPU utilization (% of time a kernel ran) while "${@:2}" runs, printed
# to the terminal as "$1 ...": the mean over samples above zero (loading
# the model shows as zeros), so roughly the decode loop's.
exec 3>&1
with_util() {
  local label=$1; shift
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > "$OUT/u.txt" 2>/dev/null & local U=$!
  "$@"; local rc=$?
  kill $U; wait $U 2>/dev/null
  python3 -c "import sys; v=[float(l) for l in open(sys.argv[1]) if l.strip()]; v=[x for x in v if x>0]; print(sys.argv[2], 'gpu util %.0f%% over %d busy samples' % (sum(v)/max(len(v),1), len(v)))" "$OUT/u.txt" "$label" >&3
  return $rc
}
echo "== GPU utilization in a long decode (-p 16 -g 1024), first spec"
s=${SPECS%% *}; s=${s:-qwen3-0.6b:bf16}; m="${s%%:*}-${s#*:}"
for b in ${BINS:-gpu-bin}; do
  with_util "$m $b long" $b/famlx bench --model "$M/$m" -p 16 -g 1024 -n 1 >/dev/null 2>&1
done
with_util "$m mlx-lm long" python3 -m mlx_lm benchmark --model "$M/$m" -p 16 -g 1024 -n 1 >/dev/null 2>&1
for r in $(seq ${ROUNDS:-2}); do
  for s in ${SPECS:-qwen3-0.6b:bf16 qwen3-0.6b:q8}; do
    m="${s%%:*}-${s#*:}"
    for b in ${BINS:-gpu-bin}; do
      with_util "$m $b" $b/famlx bench --model "$M/$m" -p 512 -g 128 -n ${TRIALS:-3} --json > "$OUT/$m.$b.$r.json" 2>"$OUT/err.txt" \
        && show_split "$OUT/$m.$b.$r.json" 128 "$m" "$b" || { echo "$m $b failed"; tail -2 "$OUT/err.txt"; }
    done
    with_util "$m mlx-lm" python3 -m mlx_lm benchmark --model "$M/$m" -p 512 -g 128 -n ${TRIALS:-3} 2>&1 | grep -E "^Averages" | sed "s|^|$m mlx-lm |"
  done
done
kill $SMI
echo "== GPU while running (util %, sm MHz, mem MHz, W, C, throttle): distinct values"
tail -n +2 "$OUT/smi.csv" | cut -d, -f2- | sort | uniq -c | sort -rn | head -8
if [ -n "${KNOBS:-}" ]; then
  echo "== famlx under MLX CUDA knobs (first spec)"
  s=${SPECS%% *}; m="${s%%:*}-${s#*:}"
  for knob in $KNOBS; do
    env ${knob//,/ } gpu-bin/famlx bench --model "$M/$m" -p 512 -g 128 -n ${TRIALS:-3} --json > "$OUT/knob.json" 2>/dev/null \
      && show_split "$OUT/knob.json" 128 "$m" "$knob"
  done
fi
