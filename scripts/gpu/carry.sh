#!/bin/bash
# Carry wheels the GPU machine lacks (a newer torch, its NCCL, ...) over several device calls of <= 64 MiB each.
#
# here:   bash scripts/gpu/carry.sh pack NAME REQ_OR_WHEEL...   e.g. pack torch214 torch==2.14.1 torchvision==0.29.1
#           downloads each requirement (Python 3.12, manylinux x86_64, no deps) unless it is a .whl file, unzips the
#           wheels less the paths in DROP (space-separated, e.g. "torch/include torch/lib/libtorch_cuda_linalg.so"),
#           packs them as one tar.xz (XZ_LEVEL, default -6: a third less than the wheels' zip for torch's CPU library),
#           splits it into .carry/NAME/part.NNN of PART_SIZE (default 56M: a call also carries the working tree),
#           writes .carry/NAME/SHA256SUMS and prints one device call per part
# there:  bash scripts/gpu/carry.sh check NAME          which parts arrived whole and which are missing (rc 3 if any):
#                                                       a machine that went back midway says how far it got
#         bash scripts/gpu/carry.sh unpack NAME DIR >/tmp/carry.env && . /tmp/carry.env
#           with every part there: unpacks the tree into DIR, links DIR/nvidia/* to the image's nvidia/* libraries it
#           does not replace (torch finds them through its RPATH), prints `export PYTHONPATH=DIR:...`: DIR then comes
#           before the image's site-packages
# The parts stay on a warm machine between calls (ignored paths are kept); the machine goes back 30 s after a call.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CMD=${1:-}
NAME=${2:?usage: carry.sh pack|check|unpack NAME ...}
DIR=${CARRY_DIR:-$ROOT/.carry}/$NAME
PART_SIZE=${PART_SIZE:-56M}

check() {  # every part named in SHA256SUMS present and whole?
  [ -f "$DIR/SHA256SUMS" ] || { echo "no $DIR/SHA256SUMS: carry it with the first part" >&2; return 3; }
  local have=() missing=() sum name
  while read -r sum name; do
    if [ -f "$DIR/$name" ] && [ "$(sha256sum "$DIR/$name" | cut -d' ' -f1)" = "$sum" ]; then have+=("$name")
    else missing+=("$name"); fi
  done <"$DIR/SHA256SUMS"
  echo "carry $NAME: ${#have[@]} of $((${#have[@]} + ${#missing[@]})) parts whole: ${have[*]:-none}" >&2
  [ ${#missing[@]} = 0 ] || { echo "carry $NAME: missing or damaged: ${missing[*]}" >&2; return 3; }
}

case $CMD in
  pack)
    shift 2
    [ $# -gt 0 ] || { echo "usage: carry.sh pack NAME REQ_OR_WHEEL..." >&2; exit 2; }
    mkdir -p "$DIR/wheels"
    rm -f "$DIR"/part.* "$DIR/SHA256SUMS"
    for req in "$@"; do
      if [[ $req == *.whl ]]; then cp "$req" "$DIR/wheels/"; continue; fi
      pip download -q --only-binary=:all: --no-deps --implementation cp --python-version 3.12 -d "$DIR/wheels" \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_18_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$req" 2>&1 | grep -v "is ignored" || true
    done
    (cd "$DIR/wheels" && ls -l ./*.whl | awk '{printf "%8.1f MiB  %s\n", $5 / 1048576, $NF}' >&2)
    rm -rf "$DIR/tree" && mkdir "$DIR/tree"
    for whl in "$DIR"/wheels/*.whl; do python3 -m zipfile -e "$whl" "$DIR/tree"; done
    for drop in ${DROP:-}; do
      [ -e "$DIR/tree/$drop" ] || { echo "DROP: no $drop in the wheels" >&2; exit 2; }
      rm -rf "${DIR:?}/tree/$drop"; echo "dropped $drop" >&2
    done
    chmod -R u+rwX,go+rX "$DIR/tree"  # zipfile drops the modes: .so files need only read there, bin/ gets +x below
    find "$DIR/tree" -path '*/bin/*' -type f -exec chmod +x {} +
    tar -C "$DIR/tree" -cf - . | xz -T0 "${XZ_LEVEL:--6}" | split -b "$PART_SIZE" -d -a 3 - "$DIR/part."
    rm -rf "$DIR/tree"
    (cd "$DIR" && sha256sum part.* >SHA256SUMS)
    parts=("$DIR"/part.*)
    echo "carry $NAME: ${#parts[@]} parts of at most $PART_SIZE ($(du -cb "${parts[@]}" | tail -1 | cut -f1) bytes)" >&2
    echo "device calls, back to back (each within 30 s of the last one's end):"
    for p in "${parts[@]}"; do
      echo "  carry [\".carry/$NAME/SHA256SUMS\", \".carry/$NAME/$(basename "$p")\"]  command: bash scripts/gpu/carry.sh check $NAME"
    done
    echo "  then: bash scripts/gpu/carry.sh unpack $NAME /tmp/$NAME >/tmp/carry.env && . /tmp/carry.env && ..."
    ;;
  check) check ;;
  unpack)
    TARGET=${3:?usage: carry.sh unpack NAME DIR}
    if [ ! -f "$TARGET/.carried" ]; then
      check
      image_site=$(env -u PYTHONPATH python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
      mkdir -p "$TARGET"
      python3 - "$TARGET" "$image_site" "$DIR"/part.* >&2 <<'PY'
import glob, os, subprocess, sys, tarfile, time
target, image_site, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
start = time.time()
cat = subprocess.Popen(["cat", *parts], stdout=subprocess.PIPE)
with tarfile.open(fileobj=cat.stdout, mode="r|xz") as tar:
    tar.extractall(target, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
assert cat.wait() == 0, "cat of the parts failed"
print(f"unpacked the tree in {time.time() - start:.0f}s")
for sub in sorted(glob.glob(os.path.join(image_site, "nvidia", "*"))):  # libraries the carried wheels leave alone
    link = os.path.join(target, "nvidia", os.path.basename(sub))
    if not os.path.exists(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(sub, link)
        print("linked", link, "->", sub)
print(f"unpacked into {target} in {time.time() - start:.0f}s")
PY
      touch "$TARGET/.carried"
    fi
    echo "export PYTHONPATH=$TARGET\${PYTHONPATH:+:\$PYTHONPATH}"
    ;;
  *) echo "usage: carry.sh pack|check|unpack NAME ..." >&2; exit 2 ;;
esac
