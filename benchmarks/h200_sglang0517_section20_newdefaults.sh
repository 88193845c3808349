# RAN 2026-12-05 (fifth session) on an H200, 481 s: docs/gpu_runs.md section 20, call 3. Its 31B part's limit ended it
# after the DFLASH rows at 64 tokens; call 4 ran the 2048-token DFLASH rows against its plain rows. Written as:
# Section 20, call 3 (H200): the short-context sweep's picks as a tuning file (benchmarks/h200_sglang0517_section20_tuning.json:
# global batch 1 min_split 32, one program per SM (16 splits), block_split; global batch 2-7 and sliding batch >= 2
# block_split), then: the kernel's reference tests with it, the kernel rows against decode, the 31B step at 64 x 1 / x 4,
# 2048 x 1 / x 4, plain and DFLASH. Run as `timeout 585 bash ...; tar czf $OUT/c3.tgz -C /tmp r3`.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1 SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0
export SGLANG_GEMMA4_DFLASH_BLOCK_TUNING=$PWD/benchmarks/h200_sglang0517_section20_tuning.json
R=/tmp/r3; mkdir -p $R
timeout 100 python3 -m pytest -q test/test_block_kernel.py -k "default_tunings or split_of_its_own" > $R/tests.log 2>&1; tail -1 $R/tests.log
timeout 130 python3 scripts/gpu/bench_block_attention.py --out $R/rows.json --contexts 64,2048,8192,32768 \
  --batches 1,4,16 --kinds target-global,target-sliding --timed plugin,decode --budget-s 110 > $R/rows.log 2>&1
grep -E "plugin_ms" $R/rows.log | cut -c1-200
timeout 330 python3 scripts/gpu/profile_31b_step.py --out $R/step.json --modes plain,dflash --prompt-lens 64,2048 \
  --batches 1,4 --profile-batches "" --steps 6 --context-length 33600 > $R/step.log 2>&1
grep -E "t_step|wrote|Error|tilings" $R/step.log | cut -c1-300; grep -h "tilings of" /tmp/profile-31b-step/*.log 2>/dev/null | head -2
