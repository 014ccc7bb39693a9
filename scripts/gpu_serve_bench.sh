#!/usr/bin/env bash
# famlx serve vs mlx_lm.server on the GPU machine (see ../shared/device/README.md):
# random-weight Llama-3.2-1B- and Qwen3.5-0.8B-shaped bf16 checkpoints, the same
# request script against both (scripts/serve_bench.py), concurrency 1, 8, 32.
#
# Here, first:   WITH_PY_REF=1 ../shared/device/make-cuda-bundle.sh .mlx-cuda 0.32.4
#                cargo build --release --workspace && cargo build --release --workspace --examples && scripts/stage_gpu_bin.sh
#                (or, when the repo leaves too little room under the 64 MiB limit:
#                 mkdir gpu-bin-xz && tar -C gpu-bin -cJf gpu-bin-xz/bin.tar.xz famlx libfamlx_plugin_llama.so libfamlx_plugin_qwen3_5.so)
# Then run this there with .mlx-cuda and gpu-bin (or gpu-bin-xz) carried. Results go to $OUT.
set -uo pipefail
source scripts/gpu_env.sh
M=/tmp/serve-models
python3 scripts/make_bench_models.py "$M" --shape ${SHAPES:-llama3.2-1b qwen3.5-0.8b} --dtype bf16 2>&1 | tail -3
# A word-level tokenizer ("tN" is id N, split on spaces): both servers take
# text prompts, and a prompt of N words is N tokens.
for m in "$M"/*; do
python3 - "$m" <<'PY'
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
d = sys.argv[1]
n = json.load(open(f"{d}/config.json")).get("vocab_size") or json.load(open(f"{d}/config.json"))["text_config"]["vocab_size"]
t = Tokenizer(models.WordLevel({f"t{i}": i for i in range(n)}, unk_token="t0"))
t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
t.decoder = decoders.WordPiece(prefix="##")
t.save(f"{d}/tokenizer.json")
PY
done
mkdir -p "${HF_HUB_CACHE:-$HOME/.cache/huggingface/hub}"
models=()
for m in "$M"/*; do models+=(--model "$m"); done
export FAMLX_PLUGIN_PATH=$PWD/gpu-bin
python3 scripts/serve_bench.py --famlx gpu-bin/famlx "${models[@]}" --concurrency ${CONC:-1 8 32} \
    --prompt-words ${WORDS:-200} --max-tokens ${GEN:-128} --rounds ${ROUNDS:-2} --json "$OUT/serve_bench.json" ${EXTRA:-} 2>&1 \
    | tee "$OUT/serve_bench.txt"
cp /tmp/serve_bench_*.log "$OUT/" 2>/dev/null || true
