# Sourced by the gpu_*.sh scripts that take their binaries as a tarball:
# unpacks gpu-bin-xz/bin.tar.xz into gpu-bin (when carried), loads the MLX
# CUDA bundle's environment, makes $OUT (default /tmp/out) and prints the GPU.
[ -f gpu-bin-xz/bin.tar.xz ] && mkdir -p gpu-bin && tar -C gpu-bin -xJf gpu-bin-xz/bin.tar.xz
source .mlx-cuda/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
