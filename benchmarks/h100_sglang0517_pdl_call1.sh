# docs/gpu_runs.md section 17, call 1, on an H100; wheel: main plus Tuning.pdl (off in the defaults), main's split count (run as `timeout 570 bash ...; tar czf $OUT/call1.tgz -C /tmp r`): sweeps of the
# block kernel around each point's default tiling (bench_block_attention.py --sweep-around-default):
#  A  global layers, batch 16: row tile 128 (8 warps; key tiles 16/32; 2-4 stages)
#  B  global layers, batch 4: the split count (max_splits 2/3/4/6; the default gives 3)
#  C  programmatic dependent launch (Tuning.pdl) off / on, every layer kind, short and long contexts
#  D  sliding layers, batch 1: stages, warps, row tile at 64 and 2048 tokens
#  E  global layers, batch 1: stages, warps, split size at 64 / 2048 / 8192 tokens
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
B="python3 scripts/gpu/bench_block_attention.py --sweep --sweep-around-default --contexts 64 --batches 1 --timed plugin"
timeout 110 $B --out $R/sweep_a.json --kinds target-global --sweep-kinds target-global \
  --sweep-points 32768x16,8192x16,2048x16 --sweep-m-tiles 128 --sweep-warps 8 --sweep-block-ns 16,32 --sweep-stages 2,3,4 \
  --sweep-budget-s 25 > $R/log_a.txt 2>&1
timeout 70 $B --out $R/sweep_b.json --kinds target-global --sweep-kinds target-global \
  --sweep-points 32768x4,8192x4,2048x4 --sweep-max-splits 2,3,4,6 --sweep-budget-s 15 > $R/log_b.txt 2>&1
timeout 130 $B --out $R/sweep_c.json --kinds target-global --sweep-kinds target-sliding,target-global,draft-full,draft-sliding \
  --sweep-points 64x1,64x16,2048x1,8192x4 --sweep-pdls 1 --compile-workers 0 --sweep-budget-s 12 > $R/log_c.txt 2>&1
timeout 90 $B --out $R/sweep_d.json --kinds target-sliding --sweep-kinds target-sliding \
  --sweep-points 64x1,2048x1 --sweep-stages 2,3,5 --sweep-warps 4,8 --sweep-m-tiles 16,32 --sweep-budget-s 20 > $R/log_d.txt 2>&1
timeout 100 $B --out $R/sweep_e.json --kinds target-global --sweep-kinds target-global \
  --sweep-points 64x1,2048x1,8192x1 --sweep-stages 2,3 --sweep-warps 4,8 --sweep-min-splits 256,512 --sweep-budget-s 20 > $R/log_e.txt 2>&1
for f in $R/log_*.txt; do echo "== $f"; grep -E "best|Error|error" $f | cut -c1-400; done
