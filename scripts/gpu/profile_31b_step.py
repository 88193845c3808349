"""Where one DFLASH step's time goes, Gemma-4-31B shapes, dummy weights, one GPU (NOT RUN on a GPU yet).

    source scripts/gpu/setup_site.sh 0.5.16   # or 0.5.13
    python3 scripts/gpu/profile_31b_step.py --out $OUT/step_31b.json [--modes plain,dflash,dflash-noplugin]
        [--batches 1,4,16] [--steps 12]

Same target, draft and server flags as bench_31b_dummy.py (decode CUDA graphs on, piecewise off). Per mode and
batch size b: b requests decode 600 tokens each (ignore_eos); once they run, SGLang's own profiler is started through
`/start_profile` (CPU + GPU activities, Python stacks) for `--steps` scheduler steps, and its trace is read here.

Each GPU kernel is charged to the Python frames that launched it (the CUDA runtime call with the kernel's correlation
id, then the python_function events around that call on its thread; a CUDA-graph replay charges all its kernels to
the frames of the graph launch):
  target     under the target worker's forward (plain decode, or DFLASH's verify of the block)
  draft_kv   under `_append_target_hidden*` (target hidden states written into the draft KV cache)
  draft_head under `_greedy_sample_from_vocab_parallel_head` or the plugin's draft sampler, outside a draft graph
  draft      under the draft model runner (with the head when SGLang folds the head into the draft CUDA graph)
  other      everything else inside the step (accept, KV bookkeeping, sampling)
A step is one `forward_batch_generation` of the worker; host = step wall time minus the GPU busy time in it.
Beside each mode: c = t_step / t_plain and the projected speedup L / c at L = 5.4 and 6.46, and the ideal step
(measured plain step + draft weights + head read once at --bandwidth-tbs: the verify of a 16-token block reads the
same weights as one decode step, so at small batch it should cost about a plain step).
Checked so far on CPU only: `--analyse TRACE plain` on a trace that SGLang 0.5.23's CPU server wrote through
/start_profile finds the worker steps (python_function events named
`sglang/srt/managers/tp_worker.py(622): forward_batch_generation`) and their wall time; charging kernels to step
parts needs a GPU trace.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from bisect import bisect_right
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_31b_dummy as bench  # noqa: E402  (configs and server flags shared with the throughput bench)
from sglang_gemma4_dflash_testkit import e2e  # noqa: E402
from sglang_gemma4_dflash_testkit.tiny import TINY, write_tiny_checkpoints  # noqa: E402

CATEGORIES = ("target", "draft_kv", "draft_head", "draft", "other")
DECODE_TOKENS = 600
HEAD_BYTES = 262144 * 5376 * 2  # the tied bf16 head, read once per step by the draft
# bf16 draft weights: 5 layers (q/o 5376 x 8192, k/v 5376 x 1024, MLP 3 x 5376 x 10752) + the fc over 6 taps
DRAFT_BYTES = 2 * (5 * (2 * 5376 * 8192 + 2 * 5376 * 1024 + 3 * 5376 * 10752) + 6 * 5376 * 5376)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def category(frames: list[str], dflash: bool) -> str:
    """The part of a step a kernel belongs to, from the names of the Python frames around its launch."""
    text = " | ".join(frames)
    if not dflash:
        return "target" if "forward_batch_generation" in text else "other"
    if "tp_worker.py" in text and "forward_batch_generation" in text.split("tp_worker.py", 1)[1]:
        return "target"
    if "_append_target_hidden" in text:
        return "draft_kv"
    if "_greedy_sample_from_vocab_parallel_head" in text or "draft_sampler" in text:
        return "draft_head"
    if "model_runner.py" in text or "cuda_graph_runner" in text:
        return "draft"
    return "other"


def analyse(trace_path: str, dflash: bool) -> dict:
    """Per-step milliseconds by category from one torch-profiler chrome trace of the scheduler (rank 0)."""
    opener = gzip.open if trace_path.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    runtime, kernels, frames_by_tid = {}, [], defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat == "kernel" or cat == "gpu_memcpy" or cat == "gpu_memset":
            kernels.append(e)
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                runtime[corr] = e
        elif cat == "python_function":
            frames_by_tid[e["tid"]].append(e)
    for frames in frames_by_tid.values():
        frames.sort(key=lambda e: e["ts"])

    def enclosing(tid, ts) -> list[str]:
        frames = frames_by_tid.get(tid, [])
        i = bisect_right([f["ts"] for f in frames], ts)  # candidates start before ts
        return [f["name"] for f in frames[:i] if f["ts"] + f.get("dur", 0) >= ts]

    steps = [
        f
        for frames in frames_by_tid.values()
        for f in frames
        if f["name"].endswith("forward_batch_generation")
        and ("dflash_worker" in f["name"] if dflash else "tp_worker" in f["name"])
    ]
    steps.sort(key=lambda e: e["ts"])
    if len(steps) < 3:
        return {"error": f"only {len(steps)} worker steps found in {os.path.basename(trace_path)}"}
    starts = [s["ts"] for s in steps]
    per_step = [defaultdict(float) for _ in steps]
    for k in kernels:
        launch = runtime.get((k.get("args") or {}).get("correlation"))
        if launch is None:
            continue
        i = bisect_right(starts, launch["ts"]) - 1
        if i < 0 or launch["ts"] > steps[i]["ts"] + steps[i]["dur"]:
            continue
        per_step[i][category(enclosing(launch["tid"], launch["ts"]), dflash)] += k["dur"] / 1000.0
    # wall time of a step: start to next start (the scheduler's own work in between counts as host time)
    rows = []
    for i in range(1, len(steps) - 1):  # the first and last step may be cut by the profiler window
        wall = (starts[i + 1] - starts[i]) / 1000.0
        gpu = sum(per_step[i].values())
        rows.append({**{c: per_step[i].get(c, 0.0) for c in CATEGORIES}, "gpu_busy": gpu, "wall": wall})
    median = {key: sorted(r[key] for r in rows)[len(rows) // 2] for key in rows[0]}
    median["host_and_gaps"] = median["wall"] - median["gpu_busy"]
    return {"steps_used": len(rows), "median_ms": {k: round(v, 3) for k, v in median.items()}}


def profile_once(base_url: str, batch: int, steps: int, out_dir: str, tag: str) -> str:
    """Run `batch` long requests; profile `steps` steps in the middle; return the trace path."""
    prompts = e2e.token_prompts(TINY.vocab_size, [64] * batch, seed=batch, low=TINY.num_special_tokens)
    e2e.generate_many(base_url, prompts, 32, concurrency=batch, timeout=600, ignore_eos=True)  # warm-up
    worker = threading.Thread(
        target=e2e.generate_many,
        args=(base_url, prompts, DECODE_TOKENS),
        kwargs={"concurrency": batch, "timeout": 900, "ignore_eos": True},
    )
    worker.start()
    time.sleep(3.0)  # past prefill
    trace_dir = os.path.join(out_dir, tag)
    os.makedirs(trace_dir, exist_ok=True)
    # /start_profile answers plain text ("Start profiling."), not JSON
    body = {"output_dir": trace_dir, "num_steps": steps, "activities": ["CPU", "GPU"], "with_stack": True}
    request = urllib.request.Request(
        base_url + "/start_profile",
        data=json.dumps({**body, "profile_id": tag}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        answer.read()
    worker.join()
    deadline = time.time() + 120
    while time.time() < deadline:
        found = sorted(glob.glob(os.path.join(trace_dir, "**", "*TP-0*.trace.json*"), recursive=True))
        if found:
            time.sleep(2.0)  # let the writer finish
            return found[-1]
        time.sleep(1.0)
    raise RuntimeError(f"no trace written under {trace_dir}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--modes", default="plain,dflash,dflash-noplugin")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--bandwidth-tbs", type=float, default=4.3, help="measured copy bandwidth, for the ideal")
    parser.add_argument("--analyse", nargs=2, metavar=("TRACE", "MODE"), help="no GPU work: analyse one trace")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "profile-31b-step"))
    args = parser.parse_args()
    if args.analyse:
        print(json.dumps(analyse(args.analyse[0], args.analyse[1] != "plain"), indent=1))
        return
    batches = [int(b) for b in args.batches.split(",")]
    paths = bench.write_configs(args.work_dir)
    tiny = {k: str(v) for k, v in write_tiny_checkpoints(os.path.join(args.work_dir, "tiny")).items()}
    out_dir = os.path.dirname(os.path.abspath(args.out))
    report: dict = {
        "what": "one DFLASH step, Gemma-4-31B shapes, dummy weights",
        "batches": batches,
        "steps_profiled": args.steps,
        "categories": CATEGORIES,
        "modes": {},
    }

    def save() -> None:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)

    for mode in [m for m in args.modes.split(",") if m]:
        dflash = mode != "plain"
        extra = bench.dflash_args(paths["draft"], "triton") if dflash else []
        env = {"SGLANG_PLUGINS": "some_other_name"} if mode == "dflash-noplugin" else None
        rows = {}
        try:
            with e2e.Server(
                paths["target"],
                bench.server_args(tiny["target_mm"], max(batches), False) + extra,
                env=env,
                ready_timeout=480,
                log_path=os.path.join(out_dir, f"profile-{mode}.log"),
            ) as server:
                for b in batches:
                    trace = profile_once(server.base_url, b, args.steps, args.work_dir, f"{mode}-b{b}")
                    rows[str(b)] = analyse(trace, dflash)
                    log(f"{mode} batch {b}: {json.dumps(rows[str(b)])[:300]}")
        except Exception as exc:  # recorded: a later mode may still run
            rows["error"] = str(exc)[-4000:]
        report["modes"][mode] = rows
        save()

    plain = report["modes"].get("plain", {})
    for mode, rows in report["modes"].items():
        for b, row in rows.items():
            base = (plain.get(b) or {}).get("median_ms", {}).get("wall")
            step = (row.get("median_ms") or {}).get("wall") if isinstance(row, dict) else None
            if mode == "plain" or not base or not step:
                continue
            c = step / base
            ideal = base + 1000 * (DRAFT_BYTES + HEAD_BYTES) / (args.bandwidth_tbs * 1e12)
            row["c"] = round(c, 3)
            row["ideal_step_ms"] = round(ideal, 3)
            row["ideal_c"] = round(ideal / base, 3)
            row.update({f"projected_speedup_at_{L}": round(L / c, 3) for L in (5.4, 6.46)})
    save()
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
