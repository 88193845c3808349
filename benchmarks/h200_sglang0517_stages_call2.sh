# call 2: the 31B step, plain and DFLASH in one call, with call 1's picked tilings
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
export SGLANG_GEMMA4_DFLASH_BLOCK_TUNING=$PWD/benchmarks/h200_sglang0517_block_tuning_picked.json
python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_g.json --modes plain,dflash \
    --prompt-lens 64,2048,8192 --batches 1,4,16 --max-cell-tokens 33000 --profile-batches "" --steps 6 --context-length 33600 > $OUT/call2.log 2>&1
tail -40 $OUT/call2.log | cut -c1-300
