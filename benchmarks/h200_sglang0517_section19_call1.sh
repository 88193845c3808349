# NOT RUN YET (written 2026-12-05 for the next session; H200, `needs_h200`): the 31B step at 8192 x 16, plain and
# DFLASH in one call. Section 18's DFLASH server ran only 14 of the 16 requests at once: 0.5.17's scheduler delays
# admissions for DFLASH until 3 slots are free (`min_free_slots_delayer.py`, on for DFLASH when the flag is unset), and
# 8192-token prompts arrive one per prefill, so the last two waited. `--min-free-slots-delay 1` turns the delay off;
# profile_31b_step.py now drops any row whose requests did not all decode at once. Each timed run prefills again
# (hybrid-SWA prefixes past the window are not reused), so one repeat. Run as `timeout 580 bash ...`.
# Carry `.gpu-site/0.5.17` and `.gpu-site/sglang_gemma4_dflash-0.1.0-py3-none-any.whl`, not `.gpu-site` (it also holds 0.5.13's site: over 64 MiB).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 560 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_j.json --modes plain,dflash \
    --prompt-lens 8192 --batches 16 --profile-batches "" --max-cell-tokens 140000 --steps 6 --repeats 1 \
    --context-length 33600 --server-args "--swa-full-tokens-ratio 0.1 --min-free-slots-delay 1" > $OUT/call1.log 2>&1
tail -12 $OUT/call1.log | cut -c1-300
