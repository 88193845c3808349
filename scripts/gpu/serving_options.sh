#!/usr/bin/env bash
# One device call of the serving-options matrix (docs/serving_options.md). Run from the repository root on the GPU
# machine, carrying .gpu-site/LINE and the plugin wheel .gpu-site/sglang_gemma4_dflash-*.whl:
#   bash scripts/gpu/serving_options.sh 1        # 0.5.17: the base servers' options, fp8 KV (2 pairs), chunked prefill
#   bash scripts/gpu/serving_options.sh 2        # 0.5.17: no radix, page 16 / 64, small SWA ratio, EOS; the soak beside them
#   bash scripts/gpu/serving_options.sh soak     # 0.5.17: the soak alone on a quiet GPU, as long as one call allows
#   bash scripts/gpu/serving_options.sh soak-start    # 0.5.17: a 10-minute soak, detached (setsid): it outlives this
#                                                     # call and runs beside the next calls on the same warm machine
#   bash scripts/gpu/serving_options.sh soak-collect  # waits (at most 540 s) for that soak, copies its files to $OUT
#   bash scripts/gpu/serving_options.sh 0513     # 0.5.13 (carry .gpu-site/0.5.13): every option, no soak
#   OPTIONS=a,b bash scripts/gpu/serving_options.sh rerun  # 0.5.17: those options again: the plugin, stock and
#                                                          # the kernel off (PAIRS) side by side; two reruns at
#                                                          # once: TAG (file names) and PORT_BASE (20500) apart
# The script itself stops at 560 s (TIMEOUT_S; 575 for the soak call) (SIGTERM: it stops its servers and writes what it has).
# Writes $OUT/<card>_sglang<line>_serving_options_<call>.json, its .logs.tgz (every server's log) and the stdout.
set -uo pipefail
CALL=${1:?usage: serving_options.sh 1|2|soak|soak-start|soak-collect|rerun|0513}
TIMEOUT=${TIMEOUT_S:-560}  # a call that runs something after it: less
OUT=${OUT:?set OUT to the folder for the results}
BASE=default,long_prompts,radix_hits,long_gen,stops,logprobs,structured,sampling,queue_aborts
case $CALL in
  1) LINE=0.5.17; OPTS=$BASE,fp8_kv,fp8_kv_nokernel,chunked_prefill; EXTRA=(--group-size 4) ;;
  2) LINE=0.5.17; OPTS=no_radix,page16,page64,swa_small,eos; EXTRA=(--group-size 5 ${SOAK_BESIDE:+--soak $SOAK_BESIDE}) ;;
  soak) LINE=0.5.17; OPTS=none; EXTRA=(--soak 480 --deadline 560); TIMEOUT=575 ;;
  soak-start|soak-collect) LINE=0.5.17 ;;
  rerun) LINE=0.5.17; OPTS=${OPTIONS:?set OPTIONS}; EXTRA=(--pairs ${PAIRS:-text,text-stock,text-nokernel} --group-size ${GROUP:-6}
         --stagger ${STAGGER:-20} --port-base ${PORT_BASE:-20000}) ;;
  0513) LINE=0.5.13; OPTS=all; EXTRA=(--group-size 9 --stagger 15) ;;
  *) echo "unknown call $CALL (1, 2, soak, soak-start, soak-collect, rerun or 0513)" >&2; exit 2 ;;
esac
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
source scripts/gpu/setup_site.sh $LINE >/dev/null || exit 1
# the matrix's servers skip the plugin's flashinfer sampling build at start-up; the soak's server keeps it (serving_options.py)
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1 SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
NAME=$OUT/${CARD}_sglang${LINE//./}_serving_options_$CALL${TAG:+_$TAG}
SOAK_DIR=/tmp/gemma4-dflash-soak  # the detached soak's files, on the machine, until soak-collect copies them
SOAK_NAME=$SOAK_DIR/${CARD}_sglang${LINE//./}_serving_options_soak${SOAK_SECONDS:-600}
if [ "$CALL" = soak-start ]; then
  rm -rf $SOAK_DIR && mkdir -p $SOAK_DIR
  # SOAK_SECONDS (600) of traffic after the server's start and a 60 s warm-up of the same traffic; the other calls' servers share the GPU (--soak-shared)
  setsid nohup timeout 960 python3 scripts/gpu/serving_options.py --line $LINE --options none --soak ${SOAK_SECONDS:-600} \
    --deadline 900 --soak-shared --port-base 44000 --out $SOAK_NAME.json > $SOAK_NAME.stdout.txt 2>&1 < /dev/null &
  echo "soak started (pid $!): $SOAK_NAME.json"
  exit 0
fi
if [ "$CALL" = soak-collect ]; then
  for _ in $(seq 270); do pgrep -f "serving_options.py .*--soak-shared" >/dev/null || break; sleep 2; done
  pgrep -f "serving_options.py .*--soak-shared" >/dev/null && echo "soak still running: copying what it has"
  cp $SOAK_DIR/* $OUT/ 2>/dev/null || { echo "no soak files in $SOAK_DIR (machine restarted?)"; exit 1; }
  grep -E "ready in|did not start|soak:" $SOAK_DIR/*.stdout.txt | cut -c1-600
  exit 0
fi
timeout $TIMEOUT python3 scripts/gpu/serving_options.py --line $LINE --options $OPTS --stagger 20 --deadline ${DEADLINE:-500} "${EXTRA[@]}" \
  --out $NAME.json > $NAME.stdout.txt 2>&1
echo "exit $?"
grep -E "ready in|did not start|: (exact|refused-clearly|fails|not run)|soak:|verdicts:" $NAME.stdout.txt | cut -c1-400
