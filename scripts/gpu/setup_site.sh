# Source this on the GPU machine, from the folder that holds scripts/gpu/ and .gpu-site/:
#   source scripts/gpu/setup_site.sh 0.5.16
# Unpacks .gpu-site/LINE/site.tar.xz.* (checked against SHA256SUMS) into $SITE once, puts the plugin wheel from
# .gpu-site/ into it (scripts/gpu/add_plugin.sh install), and exports PYTHONPATH / LD_LIBRARY_PATH / PATH for that
# SGLang line. Needs only python3 (tarfile + lzma from the standard library) and sha256sum.
_line=${1:-}
if [ -z "$_line" ]; then echo "usage: source scripts/gpu/setup_site.sh LINE   (e.g. 0.5.16)" >&2; return 2; fi
SITE=${SITE:-/tmp/sglang-$_line-site}
PARTS=${PARTS:-$PWD/.gpu-site/$_line}
if [ ! -f "$SITE/.unpacked" ]; then
  (cd "$PARTS" && sha256sum --quiet -c SHA256SUMS) || { echo "site parts in $PARTS do not match SHA256SUMS" >&2; return 1; }
  python3 - "$PARTS" "$SITE" <<'PY' || return 1
import glob, io, lzma, os, sys, tarfile, time
parts_dir, site = sys.argv[1], sys.argv[2]
parts = sorted(glob.glob(os.path.join(parts_dir, "site.tar.xz.[0-9]*")))
start = time.time()
data = b"".join(open(p, "rb").read() for p in parts)
with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data))) as tar:
    tar.extractall(site)
open(os.path.join(site, ".unpacked"), "w").write("\n".join(map(os.path.basename, parts)) + "\n")
print(f"unpacked {len(parts)} part(s) into {site} in {time.time() - start:.0f}s")
PY
fi
WHEEL_DIR=${WHEEL_DIR:-$PWD/.gpu-site} bash "$(dirname "${BASH_SOURCE[0]}")/add_plugin.sh" install "$SITE" || return 1
# a wheel built before the last change to python/ would run old plugin code beside new scripts: refuse it
if [ -d "$PWD/python/sglang_gemma4_dflash" ]; then
  python3 - "$PWD/python/sglang_gemma4_dflash" "$SITE/sglang_gemma4_dflash" <<'PY' || return 1
import filecmp, pathlib, sys
src, site = map(pathlib.Path, sys.argv[1:])
stale = [str(f.relative_to(src)) for f in src.rglob("*.py") if not (site / f.relative_to(src)).is_file()
         or not filecmp.cmp(f, site / f.relative_to(src), shallow=False)]
if stale:
    sys.exit(f"the plugin wheel in .gpu-site is older than python/ ({', '.join(stale[:5])}): "
             "run `bash scripts/gpu/add_plugin.sh` here and carry the new wheel")
PY
fi
# the site's optional packages go on the path only where the machine lacks them
_extra=""
for _d in "$SITE"/_optional/*; do
  [ -d "$_d" ] || continue
  python3 -c "import $(basename "$_d")" 2>/dev/null || _extra="$_extra:$_d"
done
export PYTHONPATH="$SITE$_extra${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$SITE/_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$SITE/bin:$PATH"
export PYTHONUNBUFFERED=1
unset _d _extra _line
python3 -c "import sglang, transformers, sglang_gemma4_dflash as p; print('sglang', sglang.__version__, '| transformers', transformers.__version__, '| plugin', p.__version__)"
