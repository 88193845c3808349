#!/bin/bash
# Build the shims into DIR (default /tmp/torch-shims) with the machine's g++; print the exports that use them.
#   eval "$(bash scripts/gpu/torch_shims/build.sh sgl_kernel)"  # torch 2.11 + sglang-kernel built for 2.14.1
#   eval "$(bash scripts/gpu/torch_shims/build.sh nccl)"        # torch 2.14.1 beside the machine's NCCL 2.28.9
# TORCH_LIB: the torch/lib the sgl_kernel shim links (default: the one `python3 -c 'import torch'` finds).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${DIR:-/tmp/torch-shims}
mkdir -p "$DIR"
for what in "$@"; do
  case $what in
    sgl_kernel)
      lib=${TORCH_LIB:-$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')}
      g++ -O2 -shared -fPIC -o "$DIR/torch211_sgl_kernel.so" "$HERE/torch211_sgl_kernel.cpp" \
        -L"$lib" -Wl,-rpath,"$lib" -lc10 -lc10_cuda -ltorch_cpu -Wl,--no-undefined -Wl,--allow-shlib-undefined >&2
      echo "export SGL_TORCH211_SHIM=$DIR/torch211_sgl_kernel.so PYTHONPATH=$HERE\${PYTHONPATH:+:\$PYTHONPATH}" ;;
    nccl)
      gcc -O2 -shared -fPIC -o "$DIR/nccl230_stubs.so" "$HERE/nccl230_stubs.c" >&2
      echo "export LD_PRELOAD=$DIR/nccl230_stubs.so\${LD_PRELOAD:+:\$LD_PRELOAD}" ;;
    *) echo "usage: build.sh sgl_kernel|nccl ..." >&2; exit 2 ;;
  esac
done
