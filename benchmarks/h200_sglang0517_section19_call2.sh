# NOT RUN YET (written 2026-12-05 for the next session; H200, `needs_h200`): the 31B step at 32768 x 4, plain and
# DFLASH in one call (section 18 timed plain only: 25.85 ms; its 5 timed runs each prefilled 131k tokens again, 220 s).
# One repeat: about 135 s a server for the cell. Run as `timeout 580 bash ...`.
# Carry `.gpu-site/0.5.17` and `.gpu-site/sglang_gemma4_dflash-0.1.0-py3-none-any.whl`, not `.gpu-site` (it also holds 0.5.13's site: over 64 MiB).
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 560 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_sweep_k.json --modes plain,dflash \
    --prompt-lens 32768 --batches 4 --profile-batches "" --max-cell-tokens 140000 --steps 6 --repeats 1 \
    --context-length 33600 --server-args "--swa-full-tokens-ratio 0.1" > $OUT/call2.log 2>&1
tail -12 $OUT/call2.log | cut -c1-300
