# RAN 2026-12-05 with section 17's defaults (docs/gpu_runs.md section 18; one H200, 556 s of its 560 s limit): the plain
# server's three cells (32768 x 4, 8192 x 4, 8192 x 16: each timed run prefilled its prompts again, 220 s for 32768 x 4)
# took the time; the DFLASH server was ready when the limit ended the call. Section 19's scripts take these cells apart.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 540 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_h.json --modes plain,dflash \
    --prompt-lens 32768,8192 --batches 4,16 --profile-batches "" --max-cell-tokens 140000 \
    --steps 6 --context-length 33600 --server-args "--swa-full-tokens-ratio 0.1" > $OUT/call3.log 2>&1
tail -30 $OUT/call3.log | cut -c1-300
