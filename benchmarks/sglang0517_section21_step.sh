# RAN 2026-12-06 on an H200, 369 s: docs/gpu_runs.md section 21 (not run in the sixth session of 2026-12-05: no card came). Replaces the fifth session's
# h200_sglang0517_section21_step.sh: runs on whichever card comes and names the JSON for it (h200_ or
# h100_sglang0517_31b_sweep_k.json; section 19 fitted 64-8192 x 1 / 4 on an H100, batch 16 untried there). The
# 31B step with section 20's defaults at 64 / 8192 / 2048 tokens (2048 last: section 20 measured it at batch 1
# and 4) x batch 1 / 4 / 16 up to 33000 tokens a cell, plain and DFLASH, and the 64 x 1 and 64 x 4 steps profiled
# with `graph_gaps_ms`; the batch-1 traces kept. About 500 s. Run as
# `timeout 580 bash benchmarks/sglang0517_section21_step.sh`; carry `.gpu-site/0.5.17` and the wheel.
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
echo card $CARD; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
timeout 560 python3 scripts/gpu/profile_31b_step.py --out $OUT/${CARD}_sglang0517_31b_sweep_k.json --modes plain,dflash \
    --prompt-lens 64,8192,2048 --batches 1,4,16 --max-cell-tokens 33000 --profile-batches 1,4 \
    --profile-prompt-lens 64 --steps 6 --context-length 33600 --trace-dir $OUT/traces > $OUT/sweep_k.log 2>&1
grep -E "t_step|wrote|Error" $OUT/sweep_k.log | cut -c1-300
