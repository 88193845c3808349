"""Where one DFLASH (or plain) decode step's time goes, read from SGLang's own profiler trace and server log
(``scripts/gpu/profile_31b_step.py`` records them on a GPU; ``test/test_profile_analysis.py`` reads hand-built ones).

- ``analyse(trace, dflash)``: each GPU kernel of a torch-profiler chrome trace charged to the Python frames that
  launched it (its CUDA runtime call, by correlation id; a CUDA-graph replay charges all its kernels to the frames
  of the launch), per step and category (``CATEGORIES``), with the attention kernels and the gaps inside replays;
- ``check_concurrency(row, log)``: whether a measured cell's requests ever all decoded at once;
- ``summarise(report, bandwidth, model)``: c = t_step / t_plain, the ideal step and the projections per row.

The categories, the kernel time that counts, ``host`` and ``graph_gaps`` are defined in the script's docstring.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

CATEGORIES = ("target", "draft_kv", "draft_head", "draft", "other")
# Triton attention kernels: SGLang's extend (verify without the plugin's kernel) and decode, and the plugin's.
ATTENTION_KERNELS = (
    "_fwd_kernel",
    "_fwd_kernel_stage1",
    "_fwd_kernel_stage2",
    "_fwd_grouped_kernel_stage1",
    "_block_attn_fwd",
    "_block_attn_reduce",
)


@dataclass(frozen=True)
class StepModel:
    """What the ideal step, the verify's compute floor and the projections need of the model pair and the GPU."""

    target_params: int  # the target's weights (tied head counted once)
    draft_bytes: int  # the draft's weights, read once per draft step
    head_bytes: int  # the LM head, read once per draft step
    block_size: int  # tokens per verify and request
    accept_lengths: tuple[float, ...]  # the accept lengths a projection is made at
    peak_tflops: float  # the GPU's dense peak in the weights' dtype


# --------------------------------------------------------------------------- reading a trace


def _short(frame_name: str) -> str:
    """'sglang/srt/x/y.py(123): f' -> 'y.py:f'."""
    where, _, func = frame_name.partition(": ")
    return f"{os.path.basename(where.split('(')[0])}:{func}" if func else frame_name


def category(chain: list[str], dflash: bool) -> str:
    """The part of a step a kernel belongs to, from the Python frames between the step and its launch."""
    text = " | ".join(chain)
    if "tp_worker.py" in text and "forward_batch_generation" in text:
        return "target"
    if not dflash:  # the step is the target's forward; only sampling is not
        return "other" if "sampler.py" in text else "target"
    if "_append_target_hidden" in text:
        return "draft_kv"
    if "_greedy_sample_from_vocab_parallel_head" in text or "greedy_token_ids" in text:
        return "draft_head"
    if "model_runner.py" in text or "cuda_graph_runner" in text:
        return "draft"
    return "other"


def _is_step(name: str, dflash: bool) -> bool:
    return name.endswith(": forward_batch_generation") and ("dflash_worker" in name if dflash else "tp_worker" in name)


def exclusive_ms(kernels: list[dict]) -> list[tuple[dict, float]]:
    """Each kernel with its GPU time not already covered by a kernel that started earlier. With programmatic
    dependent launch a kernel starts, and waits, while the one before it runs: its duration counts that wait."""
    out, covered = [], float("-inf")
    for k in sorted(kernels, key=lambda e: e["ts"]):
        end = k["ts"] + k.get("dur", 0)
        out.append((k, max(0.0, end - max(k["ts"], covered)) / 1000.0))
        covered = max(covered, end)
    return out


def merged_intervals(kernels: list[dict]) -> list[tuple[float, float]]:
    """The union of the kernels' [start, end) intervals (us), as sorted disjoint intervals."""
    out: list[list[float]] = []
    for k in sorted(kernels, key=lambda e: e["ts"]):
        start, end = k["ts"], k["ts"] + k.get("dur", 0)
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def uncovered_ms(start: float, end: float, busy: list[tuple[float, float]]) -> float:
    """Milliseconds of [start, end) (us) in which no interval of ``busy`` (merged_intervals) runs."""
    covered = sum(max(0.0, min(end, b) - max(start, a)) for a, b in busy)
    return max(0.0, end - start - covered) / 1000.0


def analyse(trace_path: str, dflash: bool, top: int = 6) -> dict:
    """Per-step GPU milliseconds by category from one torch-profiler chrome trace of the scheduler (rank 0)."""
    opener = gzip.open if trace_path.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels, frames_by_tid, launches_by_tid = [], defaultdict(list), defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launches_by_tid[e["tid"]].append(e)
        elif cat == "python_function":
            frames_by_tid[e["tid"]].append(e)

    # One sweep per thread: frames nest, so a stack of open frames gives each launch its enclosing chain.
    chain_of = {}  # correlation id -> (step frame, frames below it, outermost first)
    graph_launches = {  # correlation ids of CUDA-graph replays
        e["args"]["correlation"]
        for launches in launches_by_tid.values()
        for e in launches
        if "GraphLaunch" in e["name"]
    }
    for tid, launch_list in launches_by_tid.items():
        frames = sorted(frames_by_tid.get(tid, []), key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack, i = [], 0
        for launch in sorted(launch_list, key=lambda e: e["ts"]):
            t = launch["ts"]
            while i < len(frames) and frames[i]["ts"] <= t:
                while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < frames[i]["ts"]:
                    stack.pop()
                stack.append(frames[i])
                i += 1
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < t:
                stack.pop()
            for depth, frame in enumerate(stack):
                if _is_step(frame["name"], dflash):
                    chain_of[launch["args"]["correlation"]] = (frame, [f["name"] for f in stack[depth + 1 :]])
                    break

    steps = sorted(
        (f for frames in frames_by_tid.values() for f in frames if _is_step(f["name"], dflash)), key=lambda e: e["ts"]
    )
    # the outermost step frames only (a hook wrapper may repeat the name)
    outer = []
    for s in steps:
        if not outer or s["ts"] >= outer[-1]["ts"] + outer[-1].get("dur", 0):
            outer.append(s)
    if len(outer) < 3:
        return {"error": f"only {len(outer)} worker steps found in {os.path.basename(trace_path)}"}
    starts = [s["ts"] for s in outer]
    per_step = [defaultdict(float) for _ in outer]
    attention = [defaultdict(float) for _ in outer]
    # Inside a replay, from its first kernel's start to its last kernel's end, the time no kernel runs: the gaps
    # between a graph's kernels on the device (launch latency), not the host's.
    replays: dict = defaultdict(list)
    for k in kernels:
        corr = (k.get("args") or {}).get("correlation")
        if corr in graph_launches and corr in chain_of:
            replays[corr].append(k)
    busy = merged_intervals(kernels)
    graph_gaps = [0.0 for _ in outer]
    for corr, ks in replays.items():
        n = bisect_right(starts, chain_of[corr][0]["ts"]) - 1
        if n >= 0:
            graph_gaps[n] += uncovered_ms(min(k["ts"] for k in ks), max(k["ts"] + k.get("dur", 0) for k in ks), busy)
    by_chain = defaultdict(float)
    by_kernel = defaultdict(lambda: [0.0, 0])
    used = range(1, len(outer) - 1)  # the first and last step may be cut by the profiler window
    for k, ms in exclusive_ms(kernels):
        found = chain_of.get((k.get("args") or {}).get("correlation"))
        if found is None:
            continue
        step, chain = found
        n = bisect_right(starts, step["ts"]) - 1  # the outer step that holds this launch's step frame
        if n < 0:
            continue
        cat = category(chain, dflash)
        per_step[n][cat] += ms
        if k["name"] in ATTENTION_KERNELS:
            attention[n][cat] += ms
        if n in used:
            by_chain[" > ".join(_short(c) for c in chain[:4]) or "(step itself)"] += ms
            entry = by_kernel[(cat, k["name"][:140])]
            entry[0] += ms
            entry[1] += 1
    rows = []
    for n in used:
        gpu = sum(per_step[n].values())
        wall = (outer[n + 1]["ts"] - outer[n]["ts"]) / 1000.0
        rows.append(
            {
                **{c: per_step[n].get(c, 0.0) for c in CATEGORIES},
                "gpu_busy": gpu,
                "graph_gaps": graph_gaps[n],
                "profiled_wall": wall,
            }
        )
    median = {key: sorted(r[key] for r in rows)[len(rows) // 2] for key in rows[0]}
    attention_median = {c: sorted(attention[n].get(c, 0.0) for n in used)[len(rows) // 2] for c in CATEGORIES}
    steps_used = len(rows)
    kernels_top = defaultdict(list)
    for (cat, name), (ms, count) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0]):
        if len(kernels_top[cat]) < top:
            kernels_top[cat].append(
                {"kernel": name, "ms_per_step": round(ms / steps_used, 3), "per_step": round(count / steps_used, 1)}
            )
    return {
        "steps_used": steps_used,
        "median_ms": {k: round(v, 3) for k, v in median.items()},
        "attention_ms": {k: round(v, 3) for k, v in attention_median.items() if v},
        "mean_ms_by_frames": {
            k: round(v / steps_used, 3) for k, v in sorted(by_chain.items(), key=lambda kv: -kv[1]) if v > 0.005
        },
        "top_kernels": dict(kernels_top),
    }


# --------------------------------------------------------------------------- reading the server log


DECODE_LINE = re.compile(r"Decode batch(?: \[\d+\])?, #running-req: (\d+),.*?#queue-req: (\d+)")


def check_concurrency(row: dict, log_text: str) -> None:
    """From the server log of a row's cell: the most requests decoding at once and the most waiting meanwhile. A row
    whose requests never all decoded at once is not a step at that batch: say so, drop its step time."""
    seen = [(int(m[1]), int(m[2])) for m in DECODE_LINE.finditer(log_text)]
    if not seen:
        return
    running, queued = max(r for r, _ in seen), max(q for _, q in seen)
    row["decode_running_max"], row["decode_queued_max"] = running, queued
    if running < row["batch"]:
        row["error"] = f"at most {running} of {row['batch']} requests decoded at once ({queued} waiting): no step time"
        row["t_step_ms"] = None


# --------------------------------------------------------------------------- the summary


def plain_steps(report: dict) -> dict:
    """(prompt_len, batch) -> t_step_ms of plain decoding: this run's plain rows, else the --plain-reference ones."""
    found = dict(report.get("plain_reference_ms") or {})
    for row in report["rows"]:
        if row["mode"] == "plain" and row.get("t_step_ms"):
            found[(row["prompt_len"], row["batch"])] = row["t_step_ms"]
    return found


def summarise(report: dict, bandwidth_tbs: float, model: StepModel) -> None:
    """Fill c, the ideal and the projections into every DFLASH row, and host time into every row."""
    plain = plain_steps(report)
    extra_ms = 1000 * (model.draft_bytes + model.head_bytes) / (bandwidth_tbs * 1e12)
    for row in report["rows"]:
        if not row.get("t_step_ms"):
            continue
        median = (row.get("breakdown") or {}).get("median_ms", {})
        if median.get("gpu_busy") is not None:
            row["host_ms"] = round(row["t_step_ms"] - median["gpu_busy"], 3)
        if median.get("graph_gaps") is not None:
            row["graph_gaps_ms"] = median["graph_gaps"]
        row["tokens_per_s_per_request"] = round(1000 / row["t_step_ms"], 1)  # one token a step (random draft)
        base = plain.get((row["prompt_len"], row["batch"]))
        if row["mode"] == "plain" or not base:
            continue
        c = row["t_step_ms"] / base
        tokens = row["batch"] * model.block_size
        row["c"] = round(c, 3)
        row["ideal_step_ms"] = round(base + extra_ms, 3)
        row["ideal_c"] = round((base + extra_ms) / base, 3)
        row["verify_compute_floor_ms"] = round(1000 * 2 * model.target_params * tokens / (model.peak_tflops * 1e12), 3)
        row.update({f"projected_speedup_at_{L}": round(L / c, 3) for L in model.accept_lengths})
        row.update(
            {f"projected_tokens_per_s_at_{L}": round(1000 * L / row["t_step_ms"], 1) for L in model.accept_lengths}
        )
