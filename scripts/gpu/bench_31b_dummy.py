"""Decode speed of a Gemma-4-31B-shaped target, plain and under DFLASH, with random (dummy) weights, on one GPU.

    source scripts/gpu/setup_site.sh 0.5.16   # or 0.5.13
    python3 scripts/gpu/bench_31b_dummy.py --out $OUT/bench_31b.json [--modes plain,dflash] [--batches 1,4,16]

No checkpoint is needed: the target's text stack is Gemma 4 31B's published architecture (60 layers, hidden 5376,
vocab 262144, 32 query heads; sliding layers 16 KV heads x 256, every 6th layer global with 4 KV heads x 512 and
K = V; window 1024; final logit softcap 30; tied 262144 x 5376 head) and the draft is z-lab's published 31B DFlash
draft shape (5 Qwen3-style layers, hidden 5376, 64 x 128 query heads, 8 KV heads, MLP 10752, block 16, taps on
target layers [1, 12, 23, 35, 46, 57]). Both load with `--load-format dummy` (random weights). The vision tower is
the tiny test one (decode never runs it) and the tokenizer/processor come from the tiny multimodal checkpoint
(requests send token ids).

Measured per batch size b (b requests in flight, greedy, ignore_eos, short prompts; after one warm-up, the fastest
of two runs each):
  per-sequence decode rate r = (N_long - N_short) / (T_long - T_short) tokens/s, from runs of N_short and N_long
  new tokens (differencing cancels prefill, scheduling and HTTP overhead);
  under DFLASH the random draft is almost never right, so the measured accept length a_meas (from /server_info,
  ~1) gives the time of one DFLASH step (draft + verify of the 16-token block):  t_step = a_meas / r_dflash.
Projection for a real draft with average accept length L (tokens committed per step, bonus token included):
  r_dflash(L) = L / t_step,   speedup(L) = r_dflash(L) / r_plain = L * r_plain^-1 / t_step.
It assumes a step costs the same whatever is accepted (true for DFLASH: the block size is fixed) and ignores the
extra KV-cache traffic of longer accepted runs. JSON goes to --out after every measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from sglang_gemma4_dflash.bench import report as report_
from sglang_gemma4_dflash_testkit import e2e
from sglang_gemma4_dflash_testkit.tiny import TINY, mm_config, write_tiny_checkpoints

ACCEPT_LENGTHS = (5.4, 6.46)
N_SHORT, N_LONG = 32, 160
PROMPT_LEN = 64

TEXT_31B = {
    "model_type": "gemma4_text",
    "vocab_size": 262144,
    "vocab_size_per_layer_input": 262144,
    "hidden_size": 5376,
    "intermediate_size": 21504,
    "num_hidden_layers": 60,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "num_global_key_value_heads": 4,
    "global_head_dim": 512,
    "attention_k_eq_v": True,
    "attention_bias": False,
    "hidden_activation": "gelu_pytorch_tanh",
    "layer_types": ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(60)],
    "sliding_window": 1024,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
    },
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "final_logit_softcapping": 30.0,
    "hidden_size_per_layer_input": 0,
    "num_kv_shared_layers": 0,
    "enable_moe_block": False,
    "use_double_wide_mlp": False,
    "tie_word_embeddings": True,
    "dtype": "bfloat16",
}

DRAFT_31B = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 5376,
    "intermediate_size": 10752,
    "num_hidden_layers": 5,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "attention_bias": False,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    "use_sliding_window": True,  # transformers' Qwen3Config drops sliding_window without it (SGLang 0.5.16 refuses)
    "sliding_window": 2048,
    "max_position_embeddings": 262144,
    "vocab_size": 262144,
    "tie_word_embeddings": True,
    "final_logit_softcapping": 30.0,
    "block_size": 16,
    "num_target_layers": 60,
    "dflash_config": {
        "block_size": 16,
        "mask_token_id": 4,
        "target_layer_ids": [1, 12, 23, 35, 46, 57],
        "num_target_layers": 60,
    },
    "dtype": "bfloat16",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_configs(root: str) -> dict:
    """target/ (config only: 31B text stack in the multimodal wrapper) and draft/ (config only)."""
    target, draft = os.path.join(root, "target-31b"), os.path.join(root, "draft-31b")
    os.makedirs(target, exist_ok=True)
    os.makedirs(draft, exist_ok=True)
    config = mm_config(TINY)  # token ids and the tiny vision tower; the text stack is replaced
    config["text_config"] = dict(TEXT_31B)
    config["tie_word_embeddings"] = True
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(draft, "config.json"), "w") as f:
        json.dump(DRAFT_31B, f, indent=1)
    return {"target": target, "draft": draft}


def server_args(tokenizer_dir: str, max_bs: int, piecewise: bool, context_length: int = 4096) -> list[str]:
    # SGLang's warm-up sends an image to a multimodal target; the wrapper's tiny vision tower is not built for
    # that (it crashed the first run) and decode never needs it: requests carry token ids.
    args = ["--load-format", "dummy", "--tokenizer-path", tokenizer_dir, "--context-length", str(context_length)]
    args += ["--skip-server-warmup"]
    return args + e2e.gpu_server_args(max_bs, mem_fraction=0.85, piecewise=piecewise)


def dflash_args(draft: str, backend: str) -> list[str]:
    return e2e.dflash_args(draft, 16, backend) + ["--speculative-draft-load-format", "dummy"]


def timed_batch(
    base_url: str, batch: int, new_tokens: int, prompt_len: int = PROMPT_LEN
) -> tuple[float, list[e2e.Generation]]:
    # the same prompts for every run at this batch size: after the warm-up all of them are in the prefix cache, so
    # short and long runs pay the same (tiny) prefill
    prompts = prompts_for(batch, prompt_len)
    start = time.perf_counter()
    outs = e2e.generate_many(base_url, prompts, new_tokens, concurrency=batch, timeout=600, ignore_eos=True)
    return time.perf_counter() - start, outs


def prompts_for(batch: int, prompt_len: int) -> list[list[int]]:
    """The same token-id prompts for every run at this shape, so all runs after the first hit the prefix cache."""
    return e2e.token_prompts(TINY.vocab_size, [prompt_len] * batch, seed=batch, low=TINY.num_special_tokens)


def measure(base_url: str, batches: list[int], repeats: int = 2, prompt_len: int = PROMPT_LEN) -> dict:
    """Per batch size: one warm-up, then the fastest of `repeats` runs at N_SHORT and at N_LONG new tokens."""
    rows = {}
    for b in batches:
        timed_batch(base_url, b, N_SHORT, prompt_len)  # warm-up: prefill, first use of this batch shape
        t_short = min(timed_batch(base_url, b, N_SHORT, prompt_len)[0] for _ in range(repeats))
        runs = [timed_batch(base_url, b, N_LONG, prompt_len) for _ in range(repeats)]
        t_long, outs = min(runs, key=lambda run: run[0])
        if t_long <= t_short:  # noise larger than the signal: report it rather than a meaningless rate
            rows[str(b)] = {
                "t_short_s": round(t_short, 4),
                "t_long_s": round(t_long, 4),
                "per_seq_tokens_per_s": None,
                "error": "long run not slower than short run",
            }
            log(f"  batch {b}: unusable timing (short {t_short:.3f}s, long {t_long:.3f}s)")
            continue
        rate = (N_LONG - N_SHORT) / (t_long - t_short)
        rows[str(b)] = {
            "t_short_s": round(t_short, 4),
            "t_long_s": round(t_long, 4),
            "per_seq_tokens_per_s": round(rate, 2),
            "total_tokens_per_s": round(rate * b, 2),
            "per_request_accept": [g.meta_info.get("spec_accept_length") for g in outs[:4]],
        }
        log(f"  batch {b}: {rate:.1f} tok/s per sequence, {rate * b:.1f} tok/s total")
    return rows


def stream_timeline(base_url: str, prompt: list[int], new_tokens: int, timeout: float = 1200.0) -> tuple[list, dict]:
    """One greedy request through the native `/generate` with `stream`: (arrival time, tokens generated so far) per
    chunk, from the chunk's `meta_info.completion_tokens`, and the last chunk's `meta_info`."""
    payload = {"input_ids": prompt, "sampling_params": {"temperature": 0.0, "ignore_eos": True,
               "max_new_tokens": new_tokens}, "stream": True}  # fmt: skip
    request = urllib.request.Request(
        f"{base_url}/generate", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    timeline, meta = [], {}
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for line in response:
            if line.startswith(b"data:") and line.strip() != b"data: [DONE]":
                meta = json.loads(line[5:])["meta_info"]
                timeline.append((time.perf_counter(), int(meta["completion_tokens"])))
    return timeline, meta


def window_rates(timelines: list[list[tuple]], skip: int = N_SHORT) -> tuple[list[float], float]:
    """Per request, tokens per second inside the window where every request is decoding: from the moment the last
    one has its first `skip` tokens to the moment the first one ends. Also the window's length (s)."""
    start = max(next(t for t, n in tl if n >= min(skip, tl[-1][1])) for tl in timelines)
    end = min(tl[-1][0] for tl in timelines)
    rates = []
    for tl in timelines:
        inside = [(t, n) for t, n in tl if start <= t <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return [], max(0.0, end - start)
        rates.append((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]))
    return rates, end - start


def measure_streamed(base_url: str, batches: list[int], prompt_len: int = PROMPT_LEN, new_tokens: int = 0) -> dict:
    """Per batch size: `b` requests in flight, each streamed; the decode rate inside the window where all of them
    decode (`window_rates`). One prefill per cell, where `measure` pays three (a long hybrid-SWA prompt is not reused
    from the prefix cache)."""
    rows = {}
    for b in batches:
        prompts = prompts_for(b, prompt_len)
        n = new_tokens or N_SHORT + N_LONG
        with ThreadPoolExecutor(max_workers=b) as pool:
            streams = list(pool.map(lambda p: stream_timeline(base_url, p, n), prompts))
        rates, window = window_rates([timeline for timeline, _ in streams])
        if not rates:
            rows[str(b)] = {"per_seq_tokens_per_s": None, "window_s": round(window, 4),
                            "error": "no window in which every request decoded"}  # fmt: skip
            continue
        rate = statistics.median(rates)
        rows[str(b)] = {
            "method": "streamed",
            "window_s": round(window, 4),
            "per_seq_tokens_per_s": round(rate, 2),
            "per_seq_tokens_per_s_spread": [round(min(rates), 2), round(max(rates), 2)],
            "total_tokens_per_s": round(rate * b, 2),
            "per_request_accept": [meta.get("spec_accept_length") for _, meta in streams[:4]],
        }
        log(f"  batch {b}: {rate:.1f} tok/s per sequence over {window:.2f} s (streamed)")
    return rows


def project(report: dict, batches: list[int]) -> dict:
    """Projected DFLASH speedup per batch size at ACCEPT_LENGTHS (formula in the module docstring)."""
    a_meas = report["dflash"]["server_info"]["avg_spec_accept_length"] or 1.0
    projection = {}
    for b in map(str, batches):
        r_plain = report["plain"]["rows"][b]["per_seq_tokens_per_s"]
        r_dflash = report["dflash"]["rows"][b]["per_seq_tokens_per_s"]
        if not r_plain or not r_dflash:
            projection[b] = {"error": "no usable rate for this batch size"}
            continue
        t_step = a_meas / r_dflash
        projection[b] = {
            "t_plain_token_ms": round(1000 / r_plain, 3),
            "t_dflash_step_ms": round(1000 * t_step, 3),
            "measured_accept_length": a_meas,
            **{f"speedup_at_{L}": round((L / t_step) / r_plain, 3) for L in ACCEPT_LENGTHS},
        }
    return projection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--modes", default="plain,dflash")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--draft-attention-backend", default="triton")
    parser.add_argument("--piecewise", action="store_true", help="leave piecewise CUDA graphs on (slower start)")
    parser.add_argument(
        "--combine",
        nargs=2,
        metavar=("PLAIN_JSON", "DFLASH_JSON"),
        help="no GPU work: merge the outputs of a --modes plain and a --modes dflash run, project",
    )
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "bench-31b-dummy"))
    args = parser.parse_args()
    e2e.stop_servers_on_sigterm()  # `timeout` must not leave a server holding the GPU
    batches = [int(b) for b in args.batches.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if args.combine:
        parts = [json.load(open(path)) for path in args.combine]
        report = {**parts[0], "plain": parts[0]["plain"], "dflash": parts[1]["dflash"], "combined_from": args.combine}
        report["projection"] = project(report, parts[0]["batches"])
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        log(f"projection: {json.dumps(report['projection'])}")
        return

    paths = write_configs(args.work_dir)
    tiny = {k: str(v) for k, v in write_tiny_checkpoints(os.path.join(args.work_dir, "tiny")).items()}
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "server_logs")
    os.makedirs(log_dir, exist_ok=True)
    report: dict = {
        "what": "Gemma-4-31B-shaped target + 31B DFlash draft shape, dummy weights",
        "batches": batches,
        "n_short": N_SHORT,
        "n_long": N_LONG,
        "prompt_len": PROMPT_LEN,
        "piecewise_cuda_graph": args.piecewise,
        "draft_attention_backend": args.draft_attention_backend,
        "target_text_config": TEXT_31B,
        "draft_config": DRAFT_31B,
        "formula": "t_step = a_meas / r_dflash; speedup(L) = (L / t_step) / r_plain",
    }
    report["versions"], report["hardware"] = report_.versions(), report_.hardware()

    def save() -> None:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)

    save()
    max_bs = max(batches)
    for mode in modes:
        extra = [] if mode == "plain" else dflash_args(paths["draft"], args.draft_attention_backend)
        log(f"{mode}: starting server")
        started = time.time()
        try:
            with e2e.Server(
                paths["target"],
                server_args(tiny["target_mm"], max_bs, args.piecewise) + extra,
                ready_timeout=480,
                log_path=os.path.join(log_dir, f"bench31b-{mode}.log"),
            ) as server:
                report[mode] = {"ready_s": round(time.time() - started, 1)}
                log(f"{mode}: ready in {report[mode]['ready_s']}s")
                report[mode]["rows"] = measure(server.base_url, batches)
                report[mode]["server_info"] = e2e.spec_summary(e2e.server_info(server.base_url)).as_dict()
        except (e2e.ServerError, e2e.HTTPRequestError) as exc:
            report[mode] = {"error": str(exc)[-6000:]}
            log(f"{mode}: FAILED {str(exc)[:300]}")
        save()

    if "rows" in report.get("plain", {}) and "rows" in report.get("dflash", {}):
        report["projection"] = project(report, batches)
        log(f"projection: {json.dumps(report['projection'])}")
    save()
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
