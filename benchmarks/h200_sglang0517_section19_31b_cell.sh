# `32768 4` RAN 2026-12-05 (fifth session, call 2) on an H200, 555 s: docs/gpu_runs.md section 20. `8192 16` RAN 2026-12-06
# on an H200, 231 s: section 21.
# (written 2026-12-05 for the next session; H200, `needs_h200`): the 31B step at one cell, plain and
# DFLASH in one call, one call per cell (each timed run prefills again: hybrid-SWA prefixes past the window are not
# reused, so one repeat). Run as `timeout 580 bash benchmarks/h200_sglang0517_section19_31b_cell.sh PROMPT BATCH`:
#   8192 16   section 18's DFLASH server ran 14 of the 16 at once: 0.5.17 delays DFLASH admissions until 3 slots are
#             free (`min_free_slots_delayer.py`) and 8192-token prompts arrive one per prefill;
#             `--min-free-slots-delay 1` (below, for both modes) turns the delay off
#   32768 4   section 18 timed plain only (25.85 ms; 5 runs of 45 s of prefill each)
# profile_31b_step.py drops a row whose requests did not all decode at once.
# Carry `.gpu-site/0.5.17` and `.gpu-site/sglang_gemma4_dflash-0.1.0-py3-none-any.whl`, not `.gpu-site` (it also holds 0.5.13's site: over 64 MiB).
P=$1 B=$2
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
timeout 560 python3 scripts/gpu/profile_31b_step.py --out $OUT/h200_sglang0517_31b_cell_${P}x${B}.json \
    --modes plain,dflash --prompt-lens $P --batches $B --profile-batches "" --max-cell-tokens 140000 --steps 6 \
    --repeats 1 --context-length 33600 --server-args "--swa-full-tokens-ratio 0.1 --min-free-slots-delay 1" \
    > $OUT/cell_${P}x${B}.log 2>&1
tail -12 $OUT/cell_${P}x${B}.log | cut -c1-300
