#!/usr/bin/env bash
# Build a CPU venv for one SGLang line from its pin file:  scripts/make_venv.sh 0.5.23 .venv-ci
# (requirements/sglang-<version>-cpu.txt, then SGLang itself without its CUDA-only dependencies, then the plugin and its test kit, both editable).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: scripts/make_venv.sh <sglang version> [venv dir]}
VENV=${2:-.venv-${VERSION//./}}
PINS=requirements/sglang-${VERSION}-cpu.txt
[ -f "$PINS" ] || { echo "no pin file $PINS (have: $(ls requirements))" >&2; exit 2; }
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r "$PINS"
"$VENV/bin/python" -m pip install --quiet --no-deps "sglang==${VERSION}"
"$VENV/bin/python" -m pip install --quiet --no-deps -e . -e testkit
echo "$VENV: sglang $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')"
