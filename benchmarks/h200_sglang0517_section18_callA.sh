# RAN 2026-12-05 (docs/gpu_runs.md section 18; one H200, 393 s): section 17's defaults on the card the issue's goals
# were measured on. Identity first (kernel tests with real PDL launches, the tiny text and multimodal pairs, the
# drafting pair past both windows), then the verify's attention per layer kind, SGLang's decode kernel and the kernel
# before section 17 on one card (`git show 4ad939c:python/sglang_gemma4_dflash/attention/block_kernel.py > .gpu-site/old_block_kernel.py`, `bash scripts/gpu/add_plugin.sh`).
# Run as `timeout 580 bash benchmarks/h200_sglang0517_section18_callA.sh; tar czf $OUT/callA.tgz -C /tmp r`.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 200 python3 -m pytest -q test/test_block_kernel.py > $R/block_kernel_tests.log 2>&1 &
timeout 330 python3 scripts/gpu/run_tiny_e2e.py --parallel --jobs text,mm --out $R/tiny_e2e.json > $R/log_e2e.txt 2>&1 &
timeout 330 python3 scripts/gpu/run_tiny_accept.py --variants plain,correct --out $R/tiny_accept.json > $R/log_acc.txt 2>&1 &
wait
tail -2 $R/block_kernel_tests.log; grep "\"vs\"\|follows_plant" $R/log_e2e.txt | cut -c1-330; tail -3 $R/log_acc.txt | cut -c1-300
B="python3 scripts/gpu/bench_block_attention.py"
timeout 130 $B --out $R/rows_new.json --kinds target-global,target-sliding,draft-sliding --contexts 64,2048,8192,32768 \
  --batches 1,4,16 --timed plugin,decode --budget-s 115 > $R/log_rows_new.txt 2>&1
timeout 60 $B --kernel .gpu-site/old_block_kernel.py --out $R/rows_old.json --kinds target-global,target-sliding \
  --contexts 64,2048,8192,32768 --batches 1,4,16 --timed plugin --budget-s 50 > $R/log_rows_old.txt 2>&1
for f in $R/log_rows_*.txt; do echo "== $f"; grep "kind=" $f | sed 's/bytes=[0-9]* //' | cut -c12-200; done
