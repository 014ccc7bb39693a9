#!/usr/bin/env bash
# Copies the release binaries the GPU machine needs into gpu-bin/ (git-ignored;
# carried with the run): famlx, the family plugins, the MLX smoke example.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf gpu-bin && mkdir gpu-bin
cp target/release/famlx gpu-bin/
[ -x target/release/examples/gpu_smoke ] && cp target/release/examples/gpu_smoke gpu-bin/
cp target/release/libfamlx_plugin_*.so gpu-bin/
# The qwen3_5 scan-kernel check, when built (cargo build --release -p famlx-plugin-qwen3_5 --example gdn_kernel_check).
[ -x target/release/examples/gdn_kernel_check ] && cp target/release/examples/gdn_kernel_check gpu-bin/
strip gpu-bin/* 2>/dev/null || true
du -sh gpu-bin
