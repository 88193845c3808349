#!/bin/bash
# Carry wheels the GPU machine lacks (a newer torch, its NCCL, ...) over several device calls of <= 64 MiB each.
#
# here:   bash scripts/gpu/carry.sh pack NAME REQ_OR_WHEEL...   e.g. pack torch214 torch==2.14.1 torchvision==0.29.1
#           downloads each requirement (Python 3.12, manylinux x86_64, no deps) unless it is a .whl file, tars the
#           wheels, splits the tar into .carry/NAME/part.NNN of PART_SIZE (default 56M: a call also carries the
#           working tree), writes .carry/NAME/SHA256SUMS and prints one device call per part
# there:  bash scripts/gpu/carry.sh check NAME          which parts arrived whole and which are missing (rc 3 if any):
#                                                       a machine that went back midway says how far it got
#         bash scripts/gpu/carry.sh unpack NAME DIR >/tmp/carry.env && . /tmp/carry.env
#           with every part there: unzips the wheels into DIR, links DIR/nvidia/* to the image's nvidia/* libraries it
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
    tar -C "$DIR/wheels" -cf - . | split -b "$PART_SIZE" -d -a 3 - "$DIR/part."
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
      mkdir -p "$TARGET/.wheels"
      cat "$DIR"/part.* | tar -C "$TARGET/.wheels" -xf -
      python3 - "$TARGET" "$image_site" >&2 <<'PY'
import glob, os, sys, time, zipfile
target, image_site = sys.argv[1:]
start = time.time()
for wheel in sorted(glob.glob(os.path.join(target, ".wheels", "*.whl"))):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            path = z.extract(info, target)
            mode = info.external_attr >> 16
            if mode:
                os.chmod(path, mode & 0o777)
    print("unpacked", os.path.basename(wheel))
for sub in sorted(glob.glob(os.path.join(image_site, "nvidia", "*"))):  # libraries the carried wheels leave alone
    link = os.path.join(target, "nvidia", os.path.basename(sub))
    if not os.path.exists(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(sub, link)
        print("linked", link, "->", sub)
print(f"unpacked into {target} in {time.time() - start:.0f}s")
PY
      rm -rf "$TARGET/.wheels"
      touch "$TARGET/.carried"
    fi
    echo "export PYTHONPATH=$TARGET\${PYTHONPATH:+:\$PYTHONPATH}"
    ;;
  *) echo "usage: carry.sh pack|check|unpack NAME ..." >&2; exit 2 ;;
esac
