# RAN 2026-12-05 (fifth session, call 1) on an H200, 300 s: docs/gpu_runs.md section 20. Written, before the device
# came, as (any H100 or H200, about 480 s):
# the verify's attention at 64 tokens, batch 1 and 4, misses 1.5x decode (section 18, H200: 1.53x and 1.63x, 0.21
# and 0.35 ms a step). At 64 tokens every request's context takes one split (min_split 256), so each working program
# walks the whole chain alone (lengths, slots, the keys, the block's keys) while the other split programs exit (the
# global layers launch 32 splits at batch 1 and 2 at batch 4; the sliding layers 4 at both). Untried so far: smaller
# splits at 64 tokens (min_split 32-128: two or more programs share the 64 tokens, and the merge pass then works;
# the sliding layers' 64-token key tile keeps a 64-token context in one split whatever min_split says) and fewer
# static splits at batch 1 (max_splits 16: fewer programs launched, fewer splits at long contexts); and, new in
# this session (CPU only then), `block_split` 1: the block's 16 tokens in a split of their own where the context
# leaves one unused, so the last context split no longer also carries the block (compiled here for sm_90a with
# Triton 3.6: the same shared memory and registers at every default tiling but the sliding layers' batch-4 one, 230
# registers -> 255 and 24 bytes of spill; that tiling sits at an allocation edge: a rewrite of the same kernel with
# block_split off tips it the same way; with Triton 3.8 nothing changes). Its reference tests run first, compiled. Swept around each point's default,
# at 64 tokens and at the contexts a CUDA graph's one tiling must also serve (2048-32768), with the decode kernel's
# rows in the same call. Run as `timeout 540 bash benchmarks/h200_sglang0517_section20_short_context.sh;
# tar czf $OUT/short.tgz -C /tmp r`. Carry `.gpu-site/0.5.17` and the wheel, as for the other section-20 calls.
source scripts/gpu/setup_site.sh 0.5.17 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 100 python3 -m pytest -q test/test_block_kernel.py -k "split_of_its_own or default_tunings" > $R/tests.log 2>&1
tail -2 $R/tests.log
B="python3 scripts/gpu/bench_block_attention.py --sweep --sweep-around-default --contexts 64 --batches 1,4 \
  --timed plugin,decode --sweep-min-splits 32,64,128,256 --sweep-max-splits 16,32 --sweep-block-splits 0,1 --sweep-budget-s 30"
timeout 220 $B --out $R/sweep_short_global.json --kinds target-global --sweep-kinds target-global \
  --sweep-points 64x1,2048x1,8192x1,32768x1,64x4,2048x4,8192x4 > $R/log_short_global.txt 2>&1
timeout 150 $B --out $R/sweep_short_sliding.json --kinds target-sliding --sweep-kinds target-sliding \
  --sweep-points 64x1,2048x1,64x4,2048x4 > $R/log_short_sliding.txt 2>&1
for f in $R/log_*.txt; do echo "== $f"; grep -E "best|ctx=64|Error|error" $f | cut -c1-400; done
