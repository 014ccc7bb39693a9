source .mlx-cuda/device-env.sh
M=/tmp/bm; OUT=${OUT:-/tmp/out}
gpu-bin/gpu_smoke > $OUT/smoke2.txt 2>&1; tail -3 $OUT/smoke2.txt
python3 scripts/make_bench_models.py $M --shape llama3.2-1b --dtype bf16 q4 2>&1 | tail -2
for v in 1 0; do
  echo "== FAMLX_STACK=$v"
  for m in llama3.2-1b-bf16 llama3.2-1b-q4; do
    FAMLX_STACK=$v gpu-bin/famlx bench --model $M/$m -p 512 -g 128 -n 3 2>/dev/null | grep -E "median" | sed "s/^/$m /"
  done
done
python3 scripts/bench_side_by_side.py --famlx gpu-bin/famlx --model $M/llama3.2-1b-bf16 --model $M/llama3.2-1b-q4 -p 512 -g 128 -n 3 --rounds 2 2>&1 | tail -5
