# RAN 2026-12-05 (fourth session) on an H100, not an H200 (no H200 came): docs/gpu_runs.md section 19. Written as:
# (written 2026-12-05 for the next session; H200): the global layers at batch 16, the one kernel cell
# over 1.5x decode from 2048 tokens on (section 18: 1.80x a layer, 1.58x a step at 32768 x 16). Around the default
# (row tile 128, 8 warps, key tile 32, 3 stages, value halves, 64-wide score slices): the whole query tile held
# (d_chunk 0), key tiles 16/32, 2/3/5 stages. Compiled here for sm_90a (scripts/kernel_resources.py): the default
# has no copy in flight ahead of the arithmetic (lookahead 0); key tile 16 with 5 stages is the first 128-row tiling
# with one (205 KB, no spill, with or without score slices; key tile 32 with 5 stages does not fit). Without value
# halves no 128-row tiling fits (262 KB). Then the sliding layers at batch 4 (1.58x decode at 64 tokens, 1.29x from
# 1024 on): warps, stages, key tiles; row tile 32 with key tile 32 and 5 stages is the one tiling here with a copy in
# flight that still fits 2 programs an SM (84.5 KB). Last, PDL off / on for the global layers at batch 1 (section 18: 3-9%
# slower than 4ad939c's kernel at 8192-32768 tokens, same tiling and split count). Run as `timeout 560 bash ...; tar czf $OUT/call3.tgz -C /tmp r`.
# Carry `.gpu-site/0.5.17` and `.gpu-site/sglang_gemma4_dflash-0.1.0-py3-none-any.whl`, not `.gpu-site` (it also holds 0.5.13's site: over 64 MiB).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
# a --sweep-* list equal to its default string (stages "2,3") is not varied
B="python3 scripts/gpu/bench_block_attention.py --sweep --sweep-around-default --contexts 64 --batches 1 --timed plugin"
timeout 220 $B --out $R/sweep_global_b16.json --kinds target-global --sweep-kinds target-global \
  --sweep-points 32768x16,8192x16 --sweep-d-chunks 0,64 --sweep-dv-parts 2 --sweep-block-ns 16,32 --sweep-stages 5,3,2 \
  --sweep-budget-s 80 > $R/log_global_b16.txt 2>&1
timeout 130 $B --out $R/sweep_sliding_b4.json --kinds target-sliding --sweep-kinds target-sliding \
  --sweep-points 64x4,2048x4 --sweep-warps 2,4,8 --sweep-stages 1,2,3,5 --sweep-block-ns 32,64 --sweep-budget-s 45 > $R/log_sliding_b4.txt 2>&1
timeout 60 $B --out $R/sweep_global_b1_pdl.json --kinds target-global --sweep-kinds target-global \
  --sweep-points 8192x1,32768x1 --sweep-pdls 0,1 --compile-workers 0 --sweep-budget-s 25 > $R/log_global_b1_pdl.txt 2>&1
for f in $R/log_*.txt; do echo "== $f"; grep -E "best|default|Error|error" $f | cut -c1-400; done
