# docs/gpu_runs.md section 17, call 3, on an H100; wheel: the kernel and split counts of python/ as committed (run as `timeout 540 bash ...; tar czf $OUT/call3.tgz -C /tmp r`): the sliding
# layers' split count at batch > 1 (programs_per_sm 1 / 2, max_splits 3 / 32: 2, 3 or 4 splits at batch 4), then the
# 31B step (dummy weights) plain and DFLASH with the new defaults, on the cells an 80 GB card holds.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 70 python3 scripts/gpu/bench_block_attention.py --sweep --sweep-around-default --contexts 64 --batches 1 \
  --timed plugin --kinds target-sliding --sweep-kinds target-sliding --sweep-points 64x4,2048x4,2048x16 \
  --sweep-programs-per-sm 1,2 --sweep-max-splits 3,32 --compile-workers 4 --sweep-budget-s 12 --out $R/sweep_f.json > $R/log_f.txt 2>&1
grep "best" $R/log_f.txt | cut -c1-300
timeout 400 python3 scripts/gpu/profile_31b_step.py --out $R/31b_step.json --modes plain,dflash --prompt-lens 64,2048 \
  --batches 1,4 --profile-batches "" --steps 6 --context-length 4096 --max-cell-tokens 8192 \
  --server-args "--mem-fraction-static 0.9 --swa-full-tokens-ratio 0.5" > $R/log_31b.txt 2>&1
tail -25 $R/log_31b.txt | cut -c1-300
