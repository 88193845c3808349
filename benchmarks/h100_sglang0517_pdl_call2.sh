# docs/gpu_runs.md section 17, call 2, on an H100; wheel: section 17's defaults with call 2's split rule (see there) (run as `timeout 570 bash ...; tar czf $OUT/call2.tgz -C /tmp r`): identity with
# the new defaults (pdl on, wave-filling split count, row tile 128 for the global layers at batch >= 8), then the
# verify's attention per layer kind with them, SGLang's decode kernel and the previous kernel (main before this
# change, .gpu-site/old_block_kernel.py) on the same card.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 200 python3 -m pytest -q test/test_block_kernel.py > $R/block_kernel_tests.log 2>&1 &
timeout 250 python3 scripts/gpu/run_tiny_e2e.py --parallel --jobs text,mm --out $R/tiny_e2e.json > $R/log_e2e.txt 2>&1 &
wait
tail -2 $R/block_kernel_tests.log; grep "\"vs\"\|follows_plant\|Error\|ready in" $R/log_e2e.txt | cut -c1-330
B="python3 scripts/gpu/bench_block_attention.py"
timeout 150 $B --out $R/rows_new.json --kinds target-global,target-sliding --contexts 64,2048,8192,32768 --batches 1,4,16 \
  --timed plugin,decode --budget-s 130 > $R/log_rows_new.txt 2>&1
timeout 70 $B --kernel .gpu-site/old_block_kernel.py --out $R/rows_old.json --kinds target-global,target-sliding \
  --contexts 64,2048,8192,32768 --batches 1,4,16 --timed plugin --budget-s 55 > $R/log_rows_old.txt 2>&1
for f in $R/log_rows_*.txt; do echo "== $f"; grep "kind=" $f | sed 's/bytes=[0-9]* //' | cut -c12-200; done
