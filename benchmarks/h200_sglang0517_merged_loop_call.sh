# docs/gpu_runs.md section 16 (ran as `timeout 300 bash ...`; plugin wheel built from c2d3030):
# identity (the kernel tests, tiny text/mm DFLASH vs plain), then the verify's attention per layer kind with the
# merged-loop kernel and with the previous one (.gpu-site/old_block_kernel.py = main at 252faf9) on one card,
# SGLang's decode kernel beside them. The 300 s ended it after the global layers' rows (no mm servers, no
# sliding or draft rows).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 190 python3 -m pytest -q test/test_block_kernel.py > $R/block_kernel_tests.log 2>&1 &
timeout 190 python3 scripts/gpu/run_tiny_e2e.py --parallel --jobs text,mm --out $R/tiny_e2e.json > $R/log_e2e.txt 2>&1 &
wait
tail -2 $R/block_kernel_tests.log; tail -3 $R/log_e2e.txt | cut -c1-300
B="python3 scripts/gpu/bench_block_attention.py"
timeout 60 $B --out $R/rows_new_global.json --kinds target-global --contexts 64,8192,32768,2048 --batches 1,4,16 --timed plugin,decode --budget-s 50 > $R/log_rows_new_g.txt 2>&1
timeout 40 $B --kernel .gpu-site/old_block_kernel.py --out $R/rows_old_global.json --kinds target-global --contexts 64,8192,32768,2048 --batches 1,4,16 --timed plugin --budget-s 30 > $R/log_rows_old_g.txt 2>&1
timeout 35 $B --out $R/rows_new_other.json --kinds target-sliding,draft-sliding --contexts 64,2048 --batches 1,4,16 --timed plugin,decode --budget-s 25 > $R/log_rows_new_o.txt 2>&1
timeout 25 $B --kernel .gpu-site/old_block_kernel.py --out $R/rows_old_other.json --kinds target-sliding,draft-sliding --contexts 64,2048 --batches 1,4,16 --timed plugin --budget-s 15 > $R/log_rows_old_o.txt 2>&1
for f in $R/log_rows_*.txt; do echo "== $f"; grep "kind=" $f | sed 's/bytes=[0-9]* //' | cut -c12-200; done
# run as: timeout 370 bash benchmarks/sglang0517_wave_splits_call1b.sh; tar czf $OUT/call1.tgz -C /tmp r
