#!/usr/bin/env bash
# The main job on a fresh machine: a pinned CPU venv (SGLang 0.5.23) if there is none yet, then
# `python -m sglang_gemma4_dflash_testkit` on the tiny offline checkpoints. Arguments go to the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-main}
START=$(date +%s)
if [ -x "$VENV/bin/python" ]; then
    echo "main job: using the venv $VENV"
else
    echo "main job: building the venv $VENV first (SGLang 0.5.23 for CPU; about 3-4 minutes, once)"
    bash scripts/make_venv.sh 0.5.23 "$VENV"
fi
echo "main job: running python -m sglang_gemma4_dflash_testkit $*"
rc=0
"$VENV/bin/python" -m sglang_gemma4_dflash_testkit "$@" || rc=$?
echo "main job: exit code $rc after $(( $(date +%s) - START )) s"
exit "$rc"
