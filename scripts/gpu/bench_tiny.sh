#!/usr/bin/env bash
# `sglang-gemma4-dflash bench --launch` on the tiny Gemma 4 target and its DFlash draft, on one GPU, no network:
# the plain server, then the DFLASH server (one after the other), a JSONL of 48 short prompts written here, a
# concurrency sweep, greedy parity. Writes under $OUT:
#   bench_tiny_sglang-<version>.json   the bench result (numbers, server info, hardware, parity)
#   bench_tiny_sglang-<version>.png    speedup and accept length (when matplotlib imports; else replot here:
#                                      sglang-gemma4-dflash bench --replot X.json --plot X.png)
#   bench_tiny_logs/{baseline,dflash}.log   the two servers' logs
#   bench_tiny_stdout.txt              the command's table and parity line
# Run from the repository root, SGLang on the path:
#   source scripts/gpu/setup_site.sh && OUT=$OUT bash scripts/gpu/bench_tiny.sh
# The tiny pair drafts (docs/tiny_checkpoints.md): with the plugin's capture and head right the accept length is
# expected near the block size (8; CPU prediction 8.00) and parity 8/8; the speedup on a model this small says little
# about a real one (docs/bench.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the folder for the results}
TINY=${TINY:-/tmp/tiny-gemma4-dflash}
mkdir -p "$OUT"
# this tree's wheel package and test kit first (the site may hold an older copy of the plugin)
export PYTHONPATH="$PWD/python:$PWD/testkit${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

python3 - "$TINY" "$OUT/bench_tiny_prompts.jsonl" <<'PY'
import json, sys
from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints

write_tiny_checkpoints(sys.argv[1])
subjects = ["the cat", "a fox", "the model", "speculative decoding", "the mat", "hello world"]
with open(sys.argv[2], "w") as f:
    for i in range(48):
        prompt = f"Question {i}: what does {subjects[i % 6]} do after {i * 7 % 13} + {i % 5} steps?"
        f.write(json.dumps({"prompt": prompt}) + "\n")
PY

VERSION=$(python3 -c "import sglang; print(sglang.__version__)")
NAME="$OUT/bench_tiny_sglang-$VERSION"
PLOT=(--plot "$NAME.png")
python3 -c "import matplotlib" 2>/dev/null || { echo "no matplotlib: JSON only (replot it elsewhere)"; PLOT=(); }

set +e
python3 -m sglang_gemma4_dflash.cli bench \
  --launch "$TINY/target" --draft "$TINY/draft" \
  --dataset "$OUT/bench_tiny_prompts.jsonl" --num-prompts 16 --concurrency 1 4 8 --max-new-tokens 128 \
  --parity 8 --out "$NAME.json" "${PLOT[@]}" --log-dir "$OUT/bench_tiny_logs" --no-progress --ready-timeout 600 \
  --dflash-args "--speculative-num-draft-tokens 8 --speculative-draft-attention-backend triton" \
  -- --attention-backend triton --sampling-backend pytorch --dtype bfloat16 --mem-fraction-static 0.3 \
  --max-running-requests 8 --cuda-graph-max-bs 8 --disable-piecewise-cuda-graph \
  | tee "$OUT/bench_tiny_stdout.txt"
rc=${PIPESTATUS[0]}
set -e
echo "bench exit code $rc (0: done, 1: parity difference, 2: error)"
exit "$rc"
