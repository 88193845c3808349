#!/bin/bash
# The plugin travels beside the site as its own wheel, so changing the plugin never means rebuilding the site.
#
#   bash scripts/gpu/add_plugin.sh                 # here: build the wheel from the working tree into .gpu-site/
#   bash scripts/gpu/add_plugin.sh install SITE    # there: unzip .gpu-site/<wheel> into SITE, as pip install would,
#                                                  # so the package, its .dist-info and its entry point are on the path
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEEL_DIR=${WHEEL_DIR:-$ROOT/.gpu-site}

if [ "${1:-build}" = build ]; then
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  PY=${PY:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )}
  # build from a clean copy of the checkout's files: setuptools reuses an existing build/ folder, and a stale one
  # leaks modules that moved or were deleted into the wheel
  mkdir -p "$TMP/src"
  (cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$TMP/src" -xf -
  (cd "$TMP/src" && "$PY" -m pip wheel -q --no-deps -w "$TMP" .)
  WHEEL=$(ls "$TMP"/sglang_gemma4_dflash-*.whl)
  mkdir -p "$WHEEL_DIR"
  rm -f "$WHEEL_DIR"/sglang_gemma4_dflash-*.whl
  cp "$WHEEL" "$WHEEL_DIR/"
  ls -la "$WHEEL_DIR"/sglang_gemma4_dflash-*.whl
elif [ "$1" = install ]; then
  SITE=${2:?usage: add_plugin.sh install SITE_DIR}
  python3 - "$SITE" "$WHEEL_DIR" <<'PY'
import glob, os, shutil, sys, zipfile
site, out = sys.argv[1], sys.argv[2]
wheels = sorted(glob.glob(os.path.join(out, "sglang_gemma4_dflash-*.whl")))
if len(wheels) != 1:
    sys.exit(f"expected one plugin wheel in {out}, found {wheels}: run scripts/gpu/add_plugin.sh here first")
for old in glob.glob(os.path.join(site, "sglang_gemma4_dflash*")):  # a previous copy of the plugin
    shutil.rmtree(old) if os.path.isdir(old) else os.remove(old)
with zipfile.ZipFile(wheels[0]) as z:
    z.extractall(site)
print("plugin installed into", site, "from", os.path.basename(wheels[0]))
PY
else
  echo "usage: add_plugin.sh [build | install SITE_DIR]" >&2; exit 2
fi
