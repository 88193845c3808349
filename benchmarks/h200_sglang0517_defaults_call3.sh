# call 3 (section 15; NOT RUN: no machine was lent): the 31B step with the new defaults where the KV pool needs the sliding layers' share cut
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 540 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_h.json --modes plain,dflash \
    --prompt-lens 32768,8192 --batches 4,16 --profile-batches "" --max-cell-tokens 140000 \
    --steps 6 --context-length 33600 --server-args "--swa-full-tokens-ratio 0.1" > $OUT/call3.log 2>&1
tail -30 $OUT/call3.log | cut -c1-300
