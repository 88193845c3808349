# call 2 (docs/gpu_runs.md section 16): the 31B step, plain and DFLASH with the plugin, one server each, with the
# block kernel of call 1 (block keys in the context loop, wave-aware split count); the kernel tests alongside the
# first server's start (the defaults picked after call 1).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r2; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 200 python3 -m pytest -q test/test_block_kernel.py > $R/block_kernel_tests.log 2>&1 &
timeout 545 python3 scripts/gpu/profile_31b_step.py --out $R/step_31b.json --modes plain,dflash \
    --prompt-lens 64,2048,8192 --batches 1,4,16 --profile-batches 1 --profile-prompt-lens 64 --max-cell-tokens 33000 \
    --steps 6 --context-length 10240 $STEP_ARGS > $R/call2.log 2>&1
wait
tail -2 $R/block_kernel_tests.log
grep "t_step\|FAILED\|ready in" $R/call2.log | cut -c1-300
# run as: timeout 575 bash benchmarks/sglang0517_wave_splits_call2.sh; tar czf $OUT/call2.tgz -C /tmp r2
