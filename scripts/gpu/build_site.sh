#!/bin/bash
# Build a slim, offline SGLang "site" for one SGLang line: one directory to put on PYTHONPATH on the GPU machine.
#
#   bash scripts/gpu/build_site.sh 0.5.16                        # for the GPU machine: Python 3.12, packed
#   PYVER=3.11 PACK=0 bash scripts/gpu/build_site.sh 0.5.16      # a local look-alike for import checks
#
# LINE (the first argument) picks packages-LINE.txt beside this script. Steps: download its wheels for $PYVER /
# manylinux x86_64 (no dependency resolution: the list is the resolution), unpack them into $WORK/site, strip what
# server start-up never loads, add libnuma.so.1, and with PACK=1 write $OUT/site.tar.xz.NN parts of at most 58 MiB
# plus SHA256SUMS (OUT defaults to .gpu-site/LINE). The plugin is not part of the site: add_plugin.sh builds its wheel.
set -euo pipefail

LINE=${1:?usage: build_site.sh LINE   (e.g. 0.5.13 or 0.5.16: packages-LINE.txt must exist)}
PYVER=${PYVER:-3.12}
WORK=${WORK:-/tmp/sglang-$LINE-site-py${PYVER/./}}
PACK=${PACK:-1}
OUT=${OUT:-$PWD/.gpu-site/$LINE}
XZ_LEVEL=${XZ_LEVEL:--9e}
PART_SIZE=58M
HERE=$(cd "$(dirname "$0")" && pwd)
LIST=$HERE/packages-$LINE.txt
[ -f "$LIST" ] || { echo "no package list $LIST for SGLang line $LINE" >&2; exit 2; }
WHEELS=$WORK/wheels
SITE=$WORK/site

target_args=(--only-binary=:all: --no-deps --implementation cp --python-version "$PYVER"
             --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
             --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

# "name==ver" or "optional name" lines -> two arrays
mapfile -t MAIN < <(sed -E 's/#.*//; s/[[:space:]]+$//' "$LIST" | grep -vE '^\s*$' | grep -v '^optional ')
mapfile -t OPTIONAL < <(sed -E 's/#.*//; s/[[:space:]]+$//' "$LIST" | grep '^optional ' | sed 's/^optional //')

norm() { echo "$1" | sed -E 's/[=<>!~].*//; s/[-_.]+/_/g' | tr 'A-Z' 'a-z'; }
wheel_of() {  # the newest downloaded wheel for requirement $1
  local want; want=$(norm "$1")
  for w in "$WHEELS"/*.whl; do
    if [ "$(norm "$(basename "$w" | cut -d- -f1)")" = "$want" ]; then echo "$w"; fi
  done | sort -V | tail -1
}

echo "== 1/5 download (${#MAIN[@]} packages + ${#OPTIONAL[@]} optional) for Python $PYVER"
mkdir -p "$WHEELS"
for req in "${MAIN[@]}" "${OPTIONAL[@]}"; do
  if [ -n "$(wheel_of "$req")" ] && [[ $req != *==* ]]; then continue; fi
  pip download -q "${target_args[@]}" -d "$WHEELS" "$req" || { echo "cannot download $req" >&2; exit 1; }
done

echo "== 2/5 unpack into $SITE"
rm -rf "$SITE"; mkdir -p "$SITE"
main_wheels=()
for req in "${MAIN[@]}"; do
  w=$(wheel_of "$req"); [ -n "$w" ] || { echo "no wheel found for $req" >&2; exit 1; }
  main_wheels+=("$w")
done
pip install -q --no-deps --no-compile --no-index --target "$SITE" "${target_args[@]}" "${main_wheels[@]}"
for req in "${OPTIONAL[@]}"; do
  name=$(norm "$req")
  pip install -q --no-deps --no-compile --no-index --target "$SITE/_optional/$name" "${target_args[@]}" "$(wheel_of "$req")"
done

echo "== 3/5 strip"
(
  cd "$SITE"
  # console scripts carry this machine's interpreter path; keep only the ninja binary (tvm_ffi runs it from PATH)
  find bin -type f ! -name ninja -delete
  # stray top-level files some wheels install
  rm -rf build_backend.py build_utils.py example.py licensing share tools
  # sglang-kernel: mscclpp libraries and headers (--enable-mscclpp only), the 1 GB FA3 library (imported lazily by
  # sgl_kernel/flash_attn.py), the MLA library (try-imported), the Blackwell build (an H200 loads sm90/)
  rm -rf lib lib64 include _mscclpp*.so sgl_kernel/flash_ops.abi3.so sgl_kernel/flashmla_ops.abi3.so sgl_kernel/sm100
  # sglang-kernel >= 0.4.5: the InfLLM-V2 attention library, loaded lazily by sgl_kernel/infllm_v2/_loader.py
  rm -f sgl_kernel/infllm_ops*.so
  # SGLang parts launch_server never imports: gRPC core, the diffusion runtime, kernel tests/benchmarks
  rm -rf sglang/srt/grpc/_core.*.so sglang/multimodal_gen sglang/jit_kernel/tests sglang/jit_kernel/benchmark
  # SGLang >= 0.5.2x: Rust extensions for the Rust server, gRPC, benchmarks and two other models' image processors
  rm -f sglang/srt/rust_extensions/_{bench,server,grpc,multimodal}.*.so; rm -rf sglang/kernels/jit/benchmark
  rm -f xgrammar/lib/libxgrammar.a     # static library for C++ users
  # flashinfer: keep the package and the headers JIT builds include; drop the bundled projects' tests/docs/examples
  if [ -d flashinfer/data ]; then
    (cd flashinfer/data/cutlass && rm -rf test examples docs media python tools/profiler tools/library .github)
    (cd flashinfer/data/cccl && rm -rf test examples docs benchmarks python ci .github c2h c cudax testing cmake \
        thrust/testing thrust/examples thrust/docs cub/test cub/benchmarks cub/examples cub/docs \
        libcudacxx/test libcudacxx/benchmarks libcudacxx/docs libcudacxx/examples)
    (cd flashinfer/data/spdlog && rm -rf tests example bench scripts)
    # flashinfer >= 0.7: JIT sources of MoE / DSV4 / KDA / GDN / FMHA / Blackwell kernels (the sampling, norm and
    # rope sources are single files at the top of csrc/ and stay) and the MoE backend's tuning artifacts
    (cd flashinfer/data/csrc && rm -rf cake_dsv4 cake_sampling kda fused_moe cake_fmha gdn experimental \
        blackwell_bf16_fp4 cake_bgmv_moe blackwell_msa nv_internal cake_vsa_sm90 cake_sage_block_sparse_attention \
        cake_batch_deepgemm_fp8 fmha_v2 cake_vsa cake_trtllm_mla_blackwell cake_grouped_fp8_gemm \
        cake_fused_qk_rope_append alphamoe_nvfp4_sm100.cu)
    rm -rf flashinfer/fused_moe/backends/cudnn_frost/artifacts
  fi
  find . -name __pycache__ -type d -prune -exec rm -rf {} +
  find ./IPython -type d \( -name tests -o -name test \) -prune -exec rm -rf {} + 2>/dev/null || true
  find . -maxdepth 2 -type d -name tests -path './pydantic*' -prune -exec rm -rf {} +
  find ./openai -name '*.pyi' -delete 2>/dev/null || true
  find . -path '*.dist-info/INSTALLER' -delete
  find . -path '*.dist-info/licenses' -type d -prune -exec rm -rf {} +
  # RECORD is read at run time (tvm_ffi locates its shared libraries through it): list only files still present
  python3 - <<'PY'
import glob, os
for record in glob.glob("*.dist-info/RECORD"):
    kept = []
    for line in open(record, encoding="utf-8"):
        path = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line.strip()
        if path and not path.endswith("RECORD") and os.path.exists(path):
            kept.append(path + ",,")
    kept.append(record + ",,")
    with open(record, "w", encoding="utf-8") as f:
        f.write("\n".join(kept) + "\n")
PY
)

echo "== 4/5 libnuma.so.1 (sgl_kernel/sm90/common_ops links it)"
mkdir -p "$SITE/_lib"
NUMA=$WORK/libnuma/usr/lib/x86_64-linux-gnu/libnuma.so.1
if [ ! -f "$NUMA" ]; then
  mkdir -p "$WORK/libnuma"
  (cd "$WORK/libnuma" && apt-get download -q libnuma1 >/dev/null && dpkg -x libnuma1_*.deb .)
fi
cp -L "$NUMA" "$SITE/_lib/"
du -sh "$SITE"

if [ "$PACK" = 1 ]; then
  echo "== 5/5 pack into $OUT (xz: the GPU machine unpacks it with Python's tarfile + lzma)"
  mkdir -p "$OUT"; rm -f "$OUT"/site.tar.xz* "$OUT"/SHA256SUMS
  tar -C "$SITE" --owner=0 --group=0 --sort=name -cf - . | xz "$XZ_LEVEL" -T2 | split -b "$PART_SIZE" -d -a 2 - "$OUT/site.tar.xz."
  (cd "$OUT" && sha256sum site.tar.xz.* > SHA256SUMS && ls -la site.tar.xz.*)
else
  echo "== 5/5 PACK=0: not packed; use PYTHONPATH=$SITE"
fi
