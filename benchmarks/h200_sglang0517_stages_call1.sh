# call 1: pipelining depth swept per layer kind, picks merged into one tuning file, target rows with the picks
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1
B="python3 scripts/gpu/bench_block_attention.py --contexts 2048 --batches 1 --kinds target-global --budget-s 1 --sweep --compile-workers 16 --sweep-budget-s 32 --sweep-min-splits 256"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/gpu.txt
$B --out $OUT/sweep_global_b1.json --pick-out /tmp/pick_g1.json --sweep-kinds target-global --sweep-points 2048x1,8192x1 \
  --sweep-m-tiles 32,64 --sweep-block-ns 32,64 --sweep-warps 8 --sweep-stages 3,5,7 --sweep-dv-parts 1,2 --sweep-d-chunks 0 --sweep-programs-per-sm 2 > /tmp/log_g1.txt 2>&1
$B --out $OUT/sweep_global_bn.json --pick-out /tmp/pick_g4.json --sweep-kinds target-global --sweep-points 8192x4,2048x16,8192x16 \
  --sweep-m-tiles 64 --sweep-block-ns 16,32 --sweep-warps 4,8 --sweep-stages 3,5,7 --sweep-dv-parts 1,2 --sweep-d-chunks 64 --sweep-programs-per-sm 1 > /tmp/log_g4.txt 2>&1
$B --out $OUT/sweep_sliding_b1.json --pick-out /tmp/pick_s1.json --sweep-kinds target-sliding --sweep-points 2048x1 \
  --sweep-m-tiles 16 --sweep-block-ns 32,64 --sweep-warps 4,8 --sweep-stages 3,5,7 --sweep-d-chunks 128 --sweep-programs-per-sm 1,2 > /tmp/log_s1.txt 2>&1
$B --out $OUT/sweep_sliding_bn.json --pick-out /tmp/pick_s4.json --sweep-kinds target-sliding --sweep-points 2048x4,2048x16 \
  --sweep-m-tiles 32 --sweep-block-ns 64 --sweep-warps 4,8 --sweep-stages 3,5,7 --sweep-d-chunks 0,128 --sweep-programs-per-sm 1 > /tmp/log_s4.txt 2>&1
python3 - /tmp/pick_g1.json /tmp/pick_s1.json /tmp/pick_g4.json /tmp/pick_s4.json <<'PY'
import json, os, sys
rows = []
for path in sys.argv[1:]:
    if not os.path.exists(path):
        print("no picks:", path); continue
    picked = json.load(open(path))
    for r in picked:
        if "_g1" in path or "_s1" in path:
            r["min_batch"], r["max_batch"] = 1, 1
        elif r["min_batch"] == 1:
            r["min_batch"] = 2
    rows += picked
json.dump(rows, open("/tmp/picked.json", "w"), indent=1)
json.dump(rows, open(os.environ["OUT"] + "/picked.json", "w"), indent=1)
print(json.dumps(rows))
PY
SGLANG_GEMMA4_DFLASH_BLOCK_TUNING=/tmp/picked.json python3 scripts/gpu/bench_block_attention.py --out $OUT/rows_picked.json \
  --kinds target-sliding,target-global --contexts 2048,8192,32768 --batches 1,4,16 --budget-s 75 > /tmp/log_rows.txt 2>&1
grep -h "pick:\|best\|budget\|Error" /tmp/log_*.txt | cut -c1-400
tail -3 /tmp/log_rows.txt
tar czf $OUT/logs1.tgz /tmp/log_*.txt /tmp/pick_*.json 2>/dev/null
