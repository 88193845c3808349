# RAN 2026-12-05 (docs/gpu_runs.md section 18; one H200, 410 s): the 31B step, plain and DFLASH in one call, with
# section 17's defaults at the issue's cells (8192 x 16 and 32768 x 4 / x 16: h200_sglang0517_defaults_call3.sh).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 570 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_i.json --modes plain,dflash \
    --prompt-lens 64,2048,8192 --batches 1,4,16 --max-cell-tokens 33000 --profile-batches "" --steps 6 \
    --context-length 33600 > $OUT/callB.log 2>&1
tail -40 $OUT/callB.log | cut -c1-300
