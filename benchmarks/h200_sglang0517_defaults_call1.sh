# call 1 (section 15): identity with the new defaults (section 14's picks), then global-layer tilings that hold the
# whole query tile (d_chunk 0) at batch > 1, and the split size, then the kernel rows with the new defaults
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/gpu.txt
timeout 250 python3 -m pytest -q test/test_block_kernel.py > $OUT/block_kernel_tests.log 2>&1 &
timeout 250 python3 scripts/gpu/run_tiny_accept.py --variants plain,correct --out $OUT/tiny_accept.json > /tmp/log_acc.txt 2>&1 &
timeout 250 python3 scripts/gpu/run_tiny_e2e.py --parallel --jobs text,mm --out $OUT/tiny_e2e.json > /tmp/log_e2e.txt 2>&1 &
wait
tail -2 $OUT/block_kernel_tests.log; tail -2 /tmp/log_acc.txt /tmp/log_e2e.txt | cut -c1-300
B="python3 scripts/gpu/bench_block_attention.py --contexts 2048 --batches 1 --kinds target-global --budget-s 1 --sweep --compile-workers 16 --sweep-kinds target-global"
timeout 120 $B --out $OUT/sweep_global_dc0.json --sweep-points 8192x4,2048x16,32768x4 --sweep-budget-s 30 \
  --sweep-m-tiles 64 --sweep-block-ns 16,32 --sweep-warps 4,8 --sweep-stages 3 --sweep-dv-parts 1,2 --sweep-d-chunks 0 --sweep-programs-per-sm 1,2 > /tmp/log_dc0.txt 2>&1
timeout 60 $B --out $OUT/sweep_global_split_b1.json --sweep-points 8192x1,32768x1 --sweep-budget-s 20 \
  --sweep-m-tiles 64 --sweep-block-ns 32 --sweep-warps 8 --sweep-stages 3 --sweep-dv-parts 1 --sweep-d-chunks 0 --sweep-programs-per-sm 2 --sweep-min-splits 256,512,1024 > /tmp/log_sb1.txt 2>&1
timeout 60 $B --out $OUT/sweep_global_split_bn.json --sweep-points 8192x4,32768x4 --sweep-budget-s 20 \
  --sweep-m-tiles 64 --sweep-block-ns 32 --sweep-warps 4 --sweep-stages 5 --sweep-dv-parts 2 --sweep-d-chunks 64 --sweep-programs-per-sm 1 --sweep-min-splits 256,512,1024 > /tmp/log_sbn.txt 2>&1
timeout 110 python3 scripts/gpu/bench_block_attention.py --out $OUT/rows_defaults.json \
  --kinds target-sliding,target-global --contexts 2048,8192,32768 --batches 1,4,16 --budget-s 80 > /tmp/log_rows.txt 2>&1
grep -h "pick:\|best\|budget\|Error" /tmp/log_dc0.txt /tmp/log_sb1.txt /tmp/log_sbn.txt | cut -c1-300
tail -2 /tmp/log_rows.txt
tar czf $OUT/logs1.tgz /tmp/log_*.txt 2>/dev/null
