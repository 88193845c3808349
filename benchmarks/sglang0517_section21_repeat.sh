# RAN 2026-12-06 on an H200 (section 21, call 5), cut by its limit after the plain row: the fresh machine's plain
# server took 160 s to load, and the DFLASH server was still capturing its graphs at 300 s. Written to time the
# 64 x 1 cell again, the fastest of 6 timed runs instead of 2, to put a spread on it (1.144 in section 20, 1.155
# in call 1; the goal is 1.15). On a warm machine it needs about 200 s. Run as
# `timeout 320 bash benchmarks/sglang0517_section21_repeat.sh`; carry `.gpu-site/0.5.17` and the wheel.
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
echo card $CARD; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
timeout 300 python3 scripts/gpu/profile_31b_step.py --out $OUT/${CARD}_sglang0517_31b_sweep_k_repeat.json \
    --modes plain,dflash --prompt-lens 64 --batches 1 --profile-batches "" --repeats 6 --steps 6 \
    --context-length 33600 > $OUT/repeat.log 2>&1
grep -E "t_step|wrote|Error" $OUT/repeat.log | cut -c1-300
