#!/usr/bin/env bash
# Build a CPU venv for one SGLang line from its pin file:  scripts/make_venv.sh 0.5.23 .venv-ci
# (requirements/sglang-<version>-cpu.txt, then SGLang itself without its CUDA-only dependencies, then the plugin and
# its test kit, both editable). Prints each step, and a line every 20 s while a step runs (pip itself stays quiet).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: scripts/make_venv.sh <sglang version> [venv dir]}
VENV=${2:-.venv-${VERSION//./}}
PINS=requirements/sglang-${VERSION}-cpu.txt
[ -f "$PINS" ] || { echo "no pin file $PINS (have: $(ls requirements))" >&2; exit 2; }
START=$(date +%s)

say() { echo "[make_venv $VENV $(( $(date +%s) - START ))s] $*"; }

step() {  # step "what" command...: run the command, saying what it does and that it is still running
    local what=$1 beat rc=0
    shift
    say "$what"
    ( trap 'kill $nap 2>/dev/null; exit 0' TERM
      while :; do sleep 20 & nap=$!; wait $nap; say "  ... ${what%% *} still running"; done ) &
    beat=$!
    "$@" || rc=$?
    kill "$beat" 2>/dev/null || true
    wait "$beat" 2>/dev/null || true
    return "$rc"
}

PIP=("$VENV/bin/python" -m pip install --quiet --progress-bar off)
step "1/5 creating the venv" python3 -m venv "$VENV"
step "2/5 upgrading pip" "${PIP[@]}" --upgrade pip
step "3/5 installing $(grep -c '^[A-Za-z]' "$PINS") pinned packages from $PINS (torch is most of it)" \
    "${PIP[@]}" -r "$PINS"
step "4/5 installing sglang==$VERSION without its CUDA-only dependencies" "${PIP[@]}" --no-deps "sglang==${VERSION}"
step "5/5 installing the plugin and its test kit (editable)" "${PIP[@]}" --no-deps -e . -e testkit
say "done: sglang $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')"
