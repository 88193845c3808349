# call 2 (section 15): the 31B step with the new defaults, profiled at 64 x 1 and 64 x 16; 32768 x 1 unprofiled
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 570 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_profile_h.json --modes plain,dflash \
    --prompt-lens 64,32768 --batches 1,16 --profile-prompt-lens 64 --profile-batches 1,16 --max-cell-tokens 33000 \
    --steps 6 --context-length 33600 > $OUT/call2.log 2>&1
tail -30 $OUT/call2.log | cut -c1-300
