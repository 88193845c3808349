# call 1 (docs/gpu_runs.md section 16): the block's keys in the context loop and the wave-aware split count.
# Identity (kernel tests, tiny text/mm DFLASH vs plain, the drafting pair), then the verify's attention per layer
# kind with this kernel and with the previous one (.gpu-site/old_block_kernel.py = main at 252faf9) on one card,
# SGLang's decode kernel beside them, then sweeps around the defaults (split size and count, programmatic
# dependent launch).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 220 python3 -m pytest -q test/test_block_kernel.py > $R/block_kernel_tests.log 2>&1 &
timeout 220 python3 scripts/gpu/run_tiny_accept.py --variants plain,correct --out $R/tiny_accept.json > $R/log_acc.txt 2>&1 &
timeout 220 python3 scripts/gpu/run_tiny_e2e.py --parallel --jobs text,mm --out $R/tiny_e2e.json > $R/log_e2e.txt 2>&1 &
wait
tail -2 $R/block_kernel_tests.log; tail -3 $R/log_acc.txt $R/log_e2e.txt | cut -c1-300
B="python3 scripts/gpu/bench_block_attention.py"
timeout 65 $B --out $R/rows_new_global.json --kinds target-global --contexts 64,2048,8192,32768 --batches 1,4,16 --timed plugin,decode --budget-s 65 > $R/log_rows_new_g.txt 2>&1
timeout 40 $B --out $R/rows_new_other.json --kinds target-sliding,draft-sliding,draft-full --contexts 64,2048 --batches 1,4,16 --timed plugin,decode --budget-s 30 > $R/log_rows_new_o.txt 2>&1
timeout 40 $B --kernel .gpu-site/old_block_kernel.py --out $R/rows_old_global.json --kinds target-global --contexts 64,2048,8192,32768 --batches 1,4,16 --timed plugin --budget-s 40 > $R/log_rows_old_g.txt 2>&1
timeout 30 $B --kernel .gpu-site/old_block_kernel.py --out $R/rows_old_other.json --kinds target-sliding,draft-sliding,draft-full --contexts 64,2048 --batches 1,4,16 --timed plugin --budget-s 20 > $R/log_rows_old_o.txt 2>&1
S="$B --contexts 64 --batches 1 --kinds draft-full --timed plugin --budget-s 1 --sweep --sweep-around-default --compile-workers 16 --sweep-budget-s 12"
timeout 50 $S --out $R/sweep_global_b1.json --sweep-kinds target-global --sweep-points 64x1,2048x1,8192x1,32768x1 --sweep-programs-per-sm 1,2 --sweep-min-splits 64,256,512 > $R/log_sw_g1.txt 2>&1
timeout 50 $S --out $R/sweep_pdl.json --sweep-kinds target-sliding,target-global,draft-sliding --sweep-points 64x1,2048x4 --sweep-pdls 0,1 --sweep-block-in-loops 0,1 > $R/log_sw_pdl.txt 2>&1
timeout 30 $S --out $R/sweep_pps_bn.json --sweep-kinds target-sliding,target-global --sweep-points 2048x4,32768x4 --sweep-programs-per-sm 1,2 > $R/log_sw_pps.txt 2>&1
timeout 45 $S --out $R/sweep_global_m128.json --sweep-kinds target-global --sweep-points 32768x16,8192x16,32768x4 --sweep-m-tiles 128 --sweep-block-ns 16,32 --sweep-warps 8 --sweep-stages 2,3 --sweep-budget-s 8 > $R/log_sw_m128.txt 2>&1
grep -h "best\|budget\|Error\|rror" $R/log_sw_*.txt | cut -c1-250
for f in $R/log_rows_*.txt; do echo "== $f"; grep "kind=" $f | sed 's/bytes=[0-9]* //' | cut -c12-200; done
# run as: timeout 575 bash benchmarks/sglang0517_wave_splits_call1.sh; tar czf $OUT/call1.tgz -C /tmp r
