# SUPERSEDED for 0.5.17 by benchmarks/sglang0517_section21_step.sh (section 20 changed the defaults); not run.
# NOT RUN YET (written 2026-12-05, fourth session, for the next one; any H100 or H200, plain and DFLASH in one call):
# where the 0.5.17 step's time goes at the cells whose verify attention misses 1.5x decode (64 x 1, 64 x 4;
# section 18) and at 2048 x 1, with profile_31b_step's analyser as of 503cac5 (a kernel launched early under PDL
# is charged only its time after the kernel before it) and, since the fifth session, `graph_gaps_ms`: the part of
# the host time that is gaps between kernels inside CUDA-graph replays (the launch latency the 64-token misses are
# put down to). Batch-1 traces kept under $OUT/traces for re-reading.
# Run as `timeout 580 bash benchmarks/h200_sglang0517_section20_profile.sh`; carry `.gpu-site/0.5.17` and the wheel.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 560 python3 scripts/gpu/profile_31b_step.py --out $OUT/sglang0517_31b_profile_section20.json \
    --modes plain,dflash --prompt-lens 64,2048 --batches 1,4 --max-cell-tokens 8192 --profile-batches 1,4 \
    --profile-prompt-lens 64,2048 --steps 6 --context-length 33600 --trace-dir $OUT/traces \
    > $OUT/profile_section20.log 2>&1
grep -E "t_step|wrote|Error" $OUT/profile_section20.log | cut -c1-400
