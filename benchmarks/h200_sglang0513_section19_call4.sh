# RAN 2026-12-05 (fourth session) on an H100, not an H200 (no H200 came): docs/gpu_runs.md section 19. Its 31B
# part was cut by its 250 s limit after the plain rows (servers took 108 s to load on the fresh machine); the
# 31B figures are from the follow-up commands in section 19. Written as:
# (written 2026-12-05 for the next session; H200): 0.5.13 (v1 worker) with section 17's defaults, which
# have run only on 0.5.17. Carry `.gpu-site/0.5.13` and the wheel, not `.gpu-site` (one line's site a call: 64 MiB).
# Identity (tiny text and multimodal pairs, the drafting pair past both windows), then the 31B step at 2048 x 1 / x 4.
# Run as `timeout 580 bash benchmarks/h200_sglang0513_section19_call4.sh; tar czf $OUT/call4.tgz -C /tmp r`.
source scripts/gpu/setup_site.sh 0.5.13 >/dev/null || exit 1
export PYTHONPATH=$PWD/testkit:$PYTHONPATH SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 HF_HUB_OFFLINE=1
R=/tmp/r; mkdir -p $R
timeout 300 python3 scripts/gpu/run_tiny_e2e.py --parallel --jobs text,mm --out $R/tiny_e2e.json > $R/log_e2e.txt 2>&1 &
timeout 300 python3 scripts/gpu/run_tiny_accept.py --variants plain,correct --out $R/tiny_accept.json > $R/log_acc.txt 2>&1 &
wait
grep "\"vs\"\|follows_plant" $R/log_e2e.txt | cut -c1-330; tail -3 $R/log_acc.txt | cut -c1-300
timeout 250 python3 scripts/gpu/profile_31b_step.py --out $R/h200_sglang0513_31b_sweep_l.json --modes plain,dflash \
    --prompt-lens 2048 --batches 1,4 --profile-batches "" --steps 6 --context-length 33600 > $R/log_31b.txt 2>&1
tail -8 $R/log_31b.txt | cut -c1-300
