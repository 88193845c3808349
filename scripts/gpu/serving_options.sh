#!/usr/bin/env bash
# One device call of the serving-options matrix (docs/serving_options.md). Run from the repository root on the GPU
# machine, carrying .gpu-site/LINE and the plugin wheel .gpu-site/sglang_gemma4_dflash-*.whl:
#   bash scripts/gpu/serving_options.sh 1        # 0.5.17: the base servers' options, fp8 KV (2 pairs), chunked prefill
#   bash scripts/gpu/serving_options.sh 2        # 0.5.17: no radix, page 16 / 64, small SWA ratio, EOS; the soak beside them
#   bash scripts/gpu/serving_options.sh soak     # 0.5.17: the soak alone on a quiet GPU, as long as one call allows
#   bash scripts/gpu/serving_options.sh 0513     # 0.5.13 (carry .gpu-site/0.5.13): every option, no soak
# The script itself stops at 560 s (575 for the soak call) (SIGTERM: it stops its servers and writes what it has).
# Writes $OUT/<card>_sglang<line>_serving_options_<call>.json, its .logs.tgz (every server's log) and the stdout.
set -uo pipefail
CALL=${1:?usage: serving_options.sh 1|2|soak|0513}
TIMEOUT=560
OUT=${OUT:?set OUT to the folder for the results}
BASE=default,radix_hits,long_gen,stops,logprobs,structured,sampling,queue_aborts
case $CALL in
  1) LINE=0.5.17; OPTS=$BASE,fp8_kv,fp8_kv_nokernel,chunked_prefill; EXTRA=(--group-size 4) ;;
  2) LINE=0.5.17; OPTS=no_radix,page16,page64,swa_small,eos; EXTRA=(--group-size 5 --soak 360) ;;
  soak) LINE=0.5.17; OPTS=none; EXTRA=(--soak 480 --deadline 560); TIMEOUT=575 ;;
  0513) LINE=0.5.13; OPTS=all; EXTRA=(--group-size 9 --stagger 15) ;;
  *) echo "unknown call $CALL (1, 2, soak or 0513)" >&2; exit 2 ;;
esac
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
source scripts/gpu/setup_site.sh $LINE >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1 SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
NAME=$OUT/${CARD}_sglang${LINE//./}_serving_options_$CALL
timeout $TIMEOUT python3 scripts/gpu/serving_options.py --line $LINE --options $OPTS --stagger 20 --deadline 500 "${EXTRA[@]}" \
  --out $NAME.json > $NAME.stdout.txt 2>&1
echo "exit $?"
grep -E "ready in|did not start|: (exact|refused-clearly|fails|not run)|soak:|verdicts:" $NAME.stdout.txt | cut -c1-400
