# RAN 2026-12-06 on an H200, 211 s: docs/gpu_runs.md section 21. Written as: 0.5.13 (v1 worker) with section 20's
# defaults, which had run only on 0.5.17: the 31B step at 2048 / 64 tokens x batch 1 / 4, plain and DFLASH
# (profile_31b_step.py saves after each row, so a cut run keeps what it measured). Runs on whichever card comes; the
# JSON is named for it. About 450 s (211 s on a warm machine). Run as `timeout 580 bash
# benchmarks/sglang0513_section21_step.sh`; carry `.gpu-site/0.5.13` and the wheel.
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
source scripts/gpu/setup_site.sh 0.5.13 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
echo card $CARD; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
timeout 560 python3 scripts/gpu/profile_31b_step.py --out $OUT/${CARD}_sglang0513_31b_sweep_n.json --modes plain,dflash \
    --prompt-lens 2048,64 --batches 1,4 --profile-batches "" --steps 6 --context-length 33600 > $OUT/sweep_n.log 2>&1
grep -E "t_step|wrote|Error" $OUT/sweep_n.log | cut -c1-300
