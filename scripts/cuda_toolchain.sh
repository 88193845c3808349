#!/usr/bin/env bash
# CUDA 13.0's nvcc, as on the GPU machine, into DIR from PyPI (requirements/nvcc-13.0.txt); prints the CUDA_HOME to use:
#   export CUDA_HOME=$(bash scripts/cuda_toolchain.sh .cuda-13.0)
#   python scripts/compile_sglang_kernels.py --cuda-jit --only jit
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: scripts/cuda_toolchain.sh DIR}
HOME_DIR=$(realpath -m "$DIR")/nvidia/cu13
if [ ! -x "$HOME_DIR/bin/nvcc" ]; then
    python3 -m pip install --quiet --no-deps --target "$DIR" -r requirements/nvcc-13.0.txt >&2
fi
mkdir -p "$HOME_DIR/lib64"  # the JIT links -L$CUDA_HOME/lib64 -lcudart; the wheel ships lib/libcudart.so.13
ln -sf ../lib/libcudart.so.13 "$HOME_DIR/lib64/libcudart.so"
"$HOME_DIR/bin/nvcc" --version | tail -1 >&2
echo "$HOME_DIR"
