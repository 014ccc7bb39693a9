#!/usr/bin/env bash
# famlx vs mlx-lm split over 2 ranks of MLX's ring backend on the GPU machine
# (see ../shared/device/README.md), both ranks on its one GPU: what a split
# costs there, side by side in one run (tensor and pipeline; 1 rank as the
# baseline). With several GPUs, BACKEND=nccl puts each rank on its own.
#
# Here, first:   cargo build --release --workspace && scripts/stage_gpu_bin.sh
#                mkdir -p gpu-bin-xz && tar -C gpu-bin -cJf gpu-bin-xz/bin.tar.xz famlx libfamlx_plugin_llama.so libfamlx_plugin_qwen3_5.so
# The tree, .mlx-cuda and the tarball come to just over the 64 MiB a run may
# carry: move fixtures/gemma4-vision-hf-f32/processor_outputs.safetensors
# (5 MB, not needed there) out of the tree for the call, and back after.
# Then run this there with .mlx-cuda and gpu-bin-xz carried. Results go to $OUT.
set -uo pipefail
source scripts/gpu_env.sh
M=/tmp/dist-models
python3 scripts/make_bench_models.py "$M" --shape ${SHAPES:-llama3.2-1b qwen3.5-0.8b} --dtype ${DTYPE:-bf16} 2>&1 | tail -2
export FAMLX_PLUGIN_PATH=$PWD/gpu-bin
BACKEND=${BACKEND:-ring}
P=${P:-512}; G=${G:-128}
for m in "$M"/*; do
  echo "== $m"
  echo "-- famlx 1 rank"; gpu-bin/famlx bench --model "$m" -p $P -g $G -n 2 2>&1 | tail -1
  echo "-- mlx-lm 1 rank"; python3 -m mlx_lm benchmark --model "$m" -p $P -g $G -n 2 2>&1 | tail -1
  for mode in tensor pipeline; do
    echo "-- famlx 2 ranks $mode"
    timeout 200 gpu-bin/famlx launch -n 2 --backend $BACKEND -- bench --model "$m" -p $P -g $G -n 2 --parallel $mode 2>&1 | tail -1
    flag=""; [ $mode = pipeline ] && flag="--pipeline"
    echo "-- mlx-lm 2 ranks $mode"
    timeout 300 python3 -c "from mlx._distributed_utils.launch import main; main()" -n 2 --backend $BACKEND -- "$(command -v python3)" -m mlx_lm benchmark --model "$m" -p $P -g $G -n 2 $flag 2>&1 | grep -E 'Averages|Error' | tail -1
  done
done 2>&1 | tee "$OUT/dist_bench.txt"
