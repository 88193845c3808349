"""Where one DFLASH step's time goes, Gemma-4-31B shapes, dummy weights, one GPU.

    source scripts/gpu/setup_site.sh 0.5.17   # or 0.5.13, 0.5.16
    python3 scripts/gpu/profile_31b_step.py --out $OUT/step_31b.json [--modes plain,dflash,dflash-noplugin]
        [--prompt-lens 64,2048,8192] [--context-length N] [--batches 1,4,16] [--profile-batches 1,4,16]
        [--profile-prompt-lens 2048,8192] [--max-cell-tokens N]
        [--steps 8] [--trace-dir $OUT/traces] [--plain-reference EARLIER.json]

Modes: plain; dflash or plugin (with the plugin and its block attention kernel); stock (= dflash-noplugin); dflash-nokernel (the plugin with
SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION=0); dflash-noplugin (SGLANG_PLUGINS without it); dflash-eager-head (v2 with
SGLANG_DFLASH_EAGER_DRAFT_SAMPLER=1: the head runs outside the draft graph, through the plugin's head). Servers start
with SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0 (greedy only) and --context-length (default: the longest prompt plus
the tokens the measurement generates). Results and commands: benchmarks/step_31b/README.md.

Same target, draft and server flags as bench_31b_dummy.py (decode CUDA graphs on, piecewise off). One server per
mode; per prompt length P and batch size b, in that server (each row of the JSON's "rows" carries mode, prompt_len,
batch, t_step_ms and, for DFLASH, c):
  1. the step time without a profiler: bench_31b_dummy's differenced decode rate r (b requests in flight), so a plain
     step is 1/r and a DFLASH step a/r (a: the measured accept length, ~1 with a random draft);
  2. the breakdown: b requests decode PROFILE_TOKENS tokens each while SGLang's own profiler (`/start_profile`: CPU +
     GPU activities, Python stacks) records `--steps` scheduler steps; sglang_gemma4_dflash_testkit.trace reads it.

Each GPU kernel is charged to the Python frames that launched it (its CUDA runtime call, by correlation id, and the
python_function events around that call; a CUDA-graph replay charges all its kernels to the frames of the launch):
  target      under the target worker's `forward_batch_generation` (plain decode, or DFLASH's verify of the block)
  draft_kv    under `_append_target_hidden*` (target hidden states projected and written into the draft KV cache)
  draft_head  under `_greedy_sample_from_vocab_parallel_head` or the plugin's head, outside a draft graph
  draft       under the draft model runner (the head too where SGLang folds it into the draft CUDA graph)
  other       everything else inside the step (block set-up, embedding, accept, KV bookkeeping)
A kernel's time is the part of its duration no kernel that started earlier covers (the plugin's kernels launch
early and wait under programmatic dependent launch), so the parts add up to the GPU's busy time.
Attention kernels (SGLang's extend, decode and the plugin's block kernel, by name) are also summed per category:
`attention_ms.target` is the verify's attention in a DFLASH step and the decode attention in a plain one,
`attention_ms.draft` the draft's block attention.
`host` is the unprofiled step time minus the GPU busy time of a profiled step: time the GPU waits for the host
(Python, scheduling, syncs), and the gaps between kernels inside CUDA-graph replays. `graph_gaps` is that last part
alone: from a replay's first kernel start to its last kernel end, the time no kernel runs (the device's launch
latency between a graph's kernels). The profiler's own Python tracing slows the host, so profiled wall times are
not used.
Beside each DFLASH row: c = t_step / t_plain, the projected speedup L / c at L = 5.4 and 6.46, and the ideal step:
the measured plain step plus the draft's weights and the head read once at `--bandwidth-tbs` (a 16-token verify
reads the same weights as one decode step; `verify_compute_floor_ms` says where compute takes over at larger b).
`--analyse TRACE MODE` reads one saved trace without a GPU.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_31b_dummy as bench  # noqa: E402  (configs, server flags and the rate measurement)
from sglang_gemma4_dflash.bench import report as report_  # noqa: E402
from sglang_gemma4_dflash_testkit import e2e, trace  # noqa: E402  (trace: reading the trace, log and summary)
from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints  # noqa: E402

PROFILE_TOKENS = 320
MODE_ENV = {
    "plugin": {},  # the sweep's names: plugin = dflash, stock = dflash-noplugin
    "stock": {"SGLANG_PLUGINS": "some_other_name"},
    "dflash-nokernel": {"SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION": "0"},
    "dflash-noplugin": {"SGLANG_PLUGINS": "some_other_name"},
    "dflash-eager-head": {"SGLANG_DFLASH_EAGER_DRAFT_SAMPLER": "1"},  # v2: the head out of the draft graph
}
H200_BF16_TFLOPS = 989.0  # dense bf16 peak, for the verify's compute floor


def _target_params(cfg: dict) -> int:
    """Weights of the 31B text stack (tied head counted once), from TEXT_31B."""
    h, heads, inter = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    total = cfg["vocab_size"] * h
    for kind in cfg["layer_types"]:
        d, kv = (cfg["global_head_dim"], cfg["num_global_key_value_heads"]) if kind == "full_attention" else (
            cfg["head_dim"], cfg["num_key_value_heads"])  # fmt: skip
        kv_proj = 1 if (kind == "full_attention" and cfg["attention_k_eq_v"]) else 2
        total += 2 * h * heads * d + kv_proj * h * kv * d + 3 * h * inter
    return total


def _draft_params(cfg: dict, taps: int) -> int:
    h, q, kv, inter = (
        cfg["hidden_size"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["intermediate_size"],
    )
    d = cfg["head_dim"]
    return cfg["num_hidden_layers"] * (2 * h * q * d + 2 * h * kv * d + 3 * h * inter) + taps * h * h


TARGET_PARAMS = _target_params(bench.TEXT_31B)
HEAD_BYTES = 2 * bench.TEXT_31B["vocab_size"] * bench.TEXT_31B["hidden_size"]  # bf16, read once per draft step
DRAFT_BYTES = 2 * _draft_params(bench.DRAFT_31B, len(bench.DRAFT_31B["dflash_config"]["target_layer_ids"]))
MODEL_31B = trace.StepModel(
    TARGET_PARAMS, DRAFT_BYTES, HEAD_BYTES, bench.DRAFT_31B["block_size"], bench.ACCEPT_LENGTHS, H200_BF16_TFLOPS
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- on the GPU


def profile_tokens(t_step_ms: float | None, steps: int) -> int:
    """Enough new tokens to cover the 1 s wait, the profiler's start and `steps` steps (a slow step needs fewer)."""
    if not t_step_ms:
        return PROFILE_TOKENS
    return min(PROFILE_TOKENS, int(3000 / t_step_ms) + 3 * steps + 16)


def profile_once(
    base_url: str, batch: int, prompt_len: int, steps: int, trace_dir: str, tag: str, new_tokens: int = PROFILE_TOKENS
) -> str:
    """Run `batch` long requests (prompts already cached by the rate measurement); profile `steps` steps."""
    prompts = bench.prompts_for(batch, prompt_len)
    worker = threading.Thread(
        target=e2e.generate_many,
        args=(base_url, prompts, new_tokens),
        kwargs={"concurrency": batch, "timeout": 600, "ignore_eos": True},
    )
    worker.start()
    time.sleep(1.0)  # past the (cached) prefill
    out = os.path.join(trace_dir, tag)
    os.makedirs(out, exist_ok=True)
    body = {"output_dir": out, "num_steps": steps, "activities": ["CPU", "GPU"], "with_stack": True}
    body["record_shapes"] = False  # one directory per tag: no profile_id (0.5.13 has no such field)
    request = urllib.request.Request(
        base_url + "/start_profile", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as answer:  # plain text, not JSON
        answer.read()
    worker.join()
    deadline = time.time() + 180
    while time.time() < deadline:
        found = sorted(glob.glob(os.path.join(out, "**", "*TP-0*.trace.json*"), recursive=True))
        if found:
            time.sleep(2.0)  # let the writer finish
            return found[-1]
        time.sleep(1.0)
    raise RuntimeError(f"no trace written under {out}")


def step_time_ms(row: dict, dflash: bool) -> float | None:
    """Unprofiled time of one step from a bench_31b_dummy rate row."""
    rate = row.get("per_seq_tokens_per_s")
    if not rate:
        return None
    accepts = [a for a in row.get("per_request_accept") or [] if a]
    accept = sum(accepts) / len(accepts) if (dflash and accepts) else 1.0
    return 1000.0 * accept / rate


def reference_plain_steps(path: str) -> dict:
    """Plain step times of an earlier JSON: its rows, or (the first JSONs' format) modes.plain keyed by batch at 64."""
    with open(path) as f:
        ref = json.load(f)
    if "rows" in ref:
        return {(r["prompt_len"], r["batch"]): r["t_step_ms"] for r in ref["rows"] if r["mode"] == "plain"}
    plain = ref["modes"]["plain"]
    return {
        (bench.PROMPT_LEN, int(b)): r["t_step_ms"] for b, r in plain.items() if isinstance(r, dict) and "t_step_ms" in r
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="the JSON to write (required unless --analyse)")
    parser.add_argument("--modes", default="plain,dflash,dflash-noplugin")
    parser.add_argument("--prompt-lens", default=str(bench.PROMPT_LEN))
    parser.add_argument("--context-length", type=int, help="the servers' --context-length")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--profile-batches", help="the batch sizes that get a profiled breakdown (default: all)")
    parser.add_argument("--profile-prompt-lens", help="the prompt lengths that get a profiled breakdown (default: all)")
    parser.add_argument(
        "--max-cell-tokens",
        type=int,
        help="skip cells whose prompt_len x batch exceeds this (and the server's KV pool)",
    )
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="timed runs per length after the warm-up (1 saves time where every run prefills again: hybrid-SWA "
        "prompts past the window are not reused from the prefix cache)",
    )
    parser.add_argument(
        "--streamed",
        action="store_true",
        help="time each cell from one streamed run (bench_31b_dummy.measure_streamed: one prefill per cell) instead "
        "of differencing short and long runs (three prefills)",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help="more server flags, one string (e.g. '--swa-full-tokens-ratio 0.1': the sliding layers' pool is 0.8 of "
        "the full one by default, 52 of the 58 GB of KV at 31B shapes, so 8192 x 16 does not fit)",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="bf16",
        choices=("bf16", "fp8_e4m3", "fp8_e5m2"),
        help="the servers' KV cache (bf16: SGLang's default, the model dtype); every row carries it",
    )
    parser.add_argument("--bandwidth-tbs", type=float, default=4.3, help="measured copy bandwidth, for the ideal")
    parser.add_argument("--trace-dir", help="copy the batch-1 trace of each mode here (gzipped)")
    parser.add_argument(
        "--plain-reference", help="JSON of an earlier run whose plain rows give t_plain (when --modes has no plain)"
    )
    parser.add_argument("--analyse", nargs=2, metavar=("TRACE", "MODE"), help="no GPU work: analyse one trace")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "profile-31b-step"))
    args = parser.parse_args()
    e2e.stop_servers_on_sigterm()  # `timeout` must not leave a server holding the GPU
    if args.analyse:
        print(json.dumps(trace.analyse(args.analyse[0], args.analyse[1] != "plain"), indent=1))
        return
    if not args.out:
        parser.error("--out is required")
    batches = [int(b) for b in args.batches.split(",")]
    profiled = batches if args.profile_batches is None else [int(b) for b in args.profile_batches.split(",") if b]
    prompt_lens = [int(p) for p in args.prompt_lens.split(",")]
    profiled_lens = (
        prompt_lens if args.profile_prompt_lens is None else [int(p) for p in args.profile_prompt_lens.split(",") if p]
    )
    context = args.context_length or max(prompt_lens) + bench.N_LONG + PROFILE_TOKENS + 64
    kv_args = [] if args.kv_cache_dtype == "bf16" else ["--kv-cache-dtype", args.kv_cache_dtype]
    paths = bench.write_configs(args.work_dir)
    tiny = {k: str(v) for k, v in write_tiny_checkpoints(os.path.join(args.work_dir, "tiny")).items()}
    out_dir = os.path.dirname(os.path.abspath(args.out))
    report: dict = {
        "what": "one DFLASH step, Gemma-4-31B shapes, dummy weights: unprofiled step time + profiled GPU breakdown",
        "batches": batches,
        "prompt_lens": prompt_lens,
        "context_length": context,
        "steps_profiled": args.steps,
        "repeats": args.repeats,
        "timing": "streamed" if args.streamed else "differenced",
        "extra_server_args": args.server_args,
        "kv_cache_dtype": args.kv_cache_dtype,
        "categories": trace.CATEGORIES,
        "bandwidth_tbs": args.bandwidth_tbs,
        "draft_bytes": DRAFT_BYTES,
        "head_bytes": HEAD_BYTES,
        "target_params": TARGET_PARAMS,
        "versions": report_.versions(),
        "hardware": report_.hardware(),
        "servers": {},
        "rows": [],
    }
    if args.plain_reference:
        report["plain_reference_ms"] = reference_plain_steps(args.plain_reference)
        report["plain_reference_from"] = args.plain_reference

    def save() -> None:
        trace.summarise(report, args.bandwidth_tbs, MODEL_31B)
        out = dict(
            report, plain_reference_ms={f"{p}x{b}": ms for (p, b), ms in report.get("plain_reference_ms", {}).items()}
        )
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)

    for mode in [m for m in args.modes.split(",") if m]:
        dflash = mode != "plain"
        extra = bench.dflash_args(paths["draft"], "triton") if dflash else []
        env = {"SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING": "0", **MODE_ENV.get(mode, {})}  # greedy only
        server_report: dict = {"env": env}
        report["servers"][mode] = server_report
        started = time.time()
        server_log = os.path.join(out_dir, f"profile-{mode}.log")
        try:
            with e2e.Server(
                paths["target"],
                bench.server_args(tiny["target_mm"], max(batches), False, context)
                + extra
                + kv_args
                + args.server_args.split(),
                env=env,
                ready_timeout=480,
                log_path=server_log,
            ) as server:
                server_report["ready_s"] = round(time.time() - started, 1)
                info = e2e.server_info(server.base_url)
                pool = info.get("max_total_num_tokens")
                server_report["max_total_num_tokens"] = pool
                cell_facts = {
                    "kv_cache_dtype": args.kv_cache_dtype,
                    "gpu": (report["hardware"]["gpus"] or ["?"])[0].split(",")[0],
                    "sglang": info.get("version") or report["versions"].get("sglang"),
                }
                log(f"{mode}: ready in {server_report['ready_s']} s, KV pool {pool} tokens")
                for prompt_len in prompt_lens:
                    for b in batches:
                        row = {"mode": mode, "prompt_len": prompt_len, "batch": b} | cell_facts
                        cell = prompt_len * b
                        if (args.max_cell_tokens and cell > args.max_cell_tokens) or (pool and cell > pool):
                            server_report.setdefault("skipped", []).append(f"{prompt_len}x{b}")
                            continue
                        log_start = os.path.getsize(server_log)
                        if args.streamed:
                            row.update(bench.measure_streamed(server.base_url, [b], prompt_len=prompt_len)[str(b)])
                        else:
                            row.update(
                                bench.measure(server.base_url, [b], repeats=args.repeats, prompt_len=prompt_len)[str(b)]
                            )
                        row["t_step_ms"] = step_time_ms(row, dflash)
                        with open(server_log, "rb") as f:
                            f.seek(log_start)
                            trace.check_concurrency(row, f.read().decode(errors="replace"))
                        report["rows"].append(row)
                        if b in profiled and prompt_len in profiled_lens:
                            tag = f"{mode}-p{prompt_len}-b{b}"
                            tokens = profile_tokens(row["t_step_ms"], args.steps)
                            trace_path = profile_once(
                                server.base_url, b, prompt_len, args.steps, args.work_dir, tag, tokens
                            )
                            row["breakdown"] = trace.analyse(trace_path, dflash)
                            if args.trace_dir and b == 1:
                                os.makedirs(args.trace_dir, exist_ok=True)
                                shutil.copy(trace_path, os.path.join(args.trace_dir, f"{tag}.trace.json.gz"))
                        breakdown = row.get("breakdown") or {}
                        if row.get("error"):
                            log(f"{mode} P={prompt_len} b={b}: {row['error']}")
                        log(f"{mode} P={prompt_len} b={b}: t_step {row['t_step_ms']} ms; "
                            f"{json.dumps(breakdown.get('median_ms'))} attention {breakdown.get('attention_ms')}")  # fmt: skip
                        save()
                server_report["server_info"] = e2e.spec_summary(e2e.server_info(server.base_url)).as_dict()
        except Exception as exc:  # recorded: a later mode may still run
            server_report["error"] = f"{type(exc).__name__}: {str(exc)[-4000:]}"
            log(f"{mode}: FAILED {server_report['error'][:300]}")
        save()
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
