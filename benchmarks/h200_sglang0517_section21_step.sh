# NOT RUN YET (written 2026-12-05, fifth session, for the next one; an H200 for comparison with sections 18 and 20,
# about 500 s): the 31B step with section 20's defaults at every cell section 18's call B measured (64 / 2048 / 8192
# tokens x batch 1 / 4 / 16, plain and DFLASH in one call), and the 64 x 1 and 64 x 4 steps profiled with
# `graph_gaps_ms` (the gaps between kernels inside CUDA-graph replays: how much of the 64-token attention misses is
# launch latency); the batch-1 traces kept. Replaces section 20's profile call for 0.5.17. Run as
# `timeout 585 bash benchmarks/h200_sglang0517_section21_step.sh`; carry `.gpu-site/0.5.17` and the wheel.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 570 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_k.json --modes plain,dflash \
    --prompt-lens 64,2048,8192 --batches 1,4,16 --max-cell-tokens 33000 --profile-batches 1,4 \
    --profile-prompt-lens 64 --steps 6 --context-length 33600 --trace-dir $OUT/traces > $OUT/sweep_k.log 2>&1
grep -E "t_step|wrote|Error" $OUT/sweep_k.log | cut -c1-300
