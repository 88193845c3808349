#!/usr/bin/env bash
# The main job on a fresh machine: a pinned CPU venv (SGLang 0.5.23) if there is none yet, then
# `python -m sglang_gemma4_dflash_testkit` on the tiny offline checkpoints. Arguments go to the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-main}
[ -x "$VENV/bin/python" ] || bash scripts/make_venv.sh 0.5.23 "$VENV"
exec "$VENV/bin/python" -m sglang_gemma4_dflash_testkit "$@"
