"""The plugin's greedy draft head at Gemma-4-31B shapes on one GPU: ours vs upstream's algorithm vs the roofline.

    python scripts/bench_draft_head.py --out benchmarks/draft_head/h200_torch_head.json   # GPU, < 2 minutes on an H200
    python scripts/bench_draft_head.py --cpu-smoke --out /tmp/head_smoke.json   # tiny shapes on CPU: checks only

For N draft tokens the head returns argmax over the vocabulary of hs @ W.T (ties: the lowest id). Shapes are
Gemma-4-31B's tied head: V=262144, H=5376, bf16 (2.82 GB), N = 15, 60, 240, 960 (batch 1 ... 64 at block 16).

- upstream: SGLang's fallback for a head without shard_indices: chunks of 256 tokens, ``argmax(hs @ W.T)``;
- ours, TP=1: ``head.greedy.greedy_token_ids`` (vocabulary blocks of at most 128 MiB of logits, merged in id order);
- one rank at TP=2 / TP=4: ``score_local`` on the layout of rank t-1 of the split replicated head (its 1/t of the
  vocabulary, views of the weight). Timed without the all-gather of the (value, id) pairs (one GPU);
- roofline: max(weight bytes / read bandwidth, 2*N*V*H / bf16 GEMM rate), both measured in the same run; a rank's
  share at TP=t has 1/t of the bytes and of the FLOPs.

Exactness: the oracle is a full-vocabulary ``argmax(hs @ W.T)`` (torch, bf16 logits). The TP=2/TP=4 ids are every
rank's candidates merged with ``pick_global``. Each mismatch is reported with the exact (fp64) logits of both ids, to
tell ties closer than one bf16 ulp from real errors. Row 0 of every batch is all-NaN (the id must equal torch.argmax
on the full logits, inside [0, V)); row 1 aims at two equal weight rows far apart (the lower id must win).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from functools import partial

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import sglang_gemma4_dflash  # noqa: E402
import torch  # noqa: E402
from sglang_gemma4_dflash.head.greedy import (  # noqa: E402
    DEFAULT_LOGITS_BUDGET_BYTES,
    greedy_token_ids,
    layout_for_head,
    pick_global,
    score_local,
    vocab_block_rows,
)

GPU_SHAPES = dict(vocab=262144, hidden=5376, tokens=(15, 60, 240, 960), budget=DEFAULT_LOGITS_BUDGET_BYTES)
CPU_SHAPES = dict(vocab=4099, hidden=64, tokens=(3, 15, 60), budget=64 << 10)  # several blocks per rank
UPSTREAM_CHUNK = 256
TP_SIZES = (2, 4)


def upstream_head(hs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """SGLang's fallback for a dense head without shard_indices: chunked full-vocabulary logits, then argmax."""
    return torch.cat(
        [torch.argmax(hs[s : s + UPSTREAM_CHUNK] @ weight.T, dim=-1) for s in range(0, len(hs), UPSTREAM_CHUNK)]
    )


def merged_split_ids(hs, weight, head, tp: int, budget: int) -> torch.Tensor:
    """Every rank's candidates of the split head at TP=tp, merged as the all-gathered head merges them."""
    shares = [score_local(hs, weight, layout_for_head(head, r, tp), budget_bytes=budget) for r in range(tp)]
    return pick_global(torch.stack([v for v, _ in shares]), torch.stack([i for _, i in shares]))


def time_ms(fn, device: str, reps: int) -> float:
    """Median milliseconds of ``fn()`` (CUDA events on a GPU, wall clock on CPU), after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def ceilings(device: str, reps: int) -> dict:
    """Read bandwidth (a float32-accumulated sum over a bf16 buffer) and bf16 GEMM rate (square matmuls)."""
    n = (2 << 30) if device == "cuda" else (32 << 20)
    buf = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
    read_bps = buf.numel() * 2 / (time_ms(partial(buf.sum, dtype=torch.float32), device, reps) * 1e-3)
    del buf
    rates = {}
    for m in (8192, 16384) if device == "cuda" else (512,):
        a, b = (torch.randn(m, m, device=device, dtype=torch.bfloat16) for _ in range(2))
        rates[f"{m}^3"] = 2 * m**3 / (time_ms(partial(torch.matmul, a, b), device, reps) * 1e-3)
        del a, b
    return dict(
        read_TBps=read_bps / 1e12,
        read_method=f"sum of a {n * 2 / 1e9:.2f} GB bf16 buffer",
        bf16_TFLOPs=max(rates.values()) / 1e12,
        bf16_by_shape_TFLOPs={k: r / 1e12 for k, r in rates.items()},
        bf16_method="best of square bf16 matmuls (torch), random data",
    )


def mismatch_report(hs, weight, logits, got, want, limit=20) -> dict:
    """Rows where ``got`` differs from the oracle ``want``, each with fp64 logits and the bf16 ulp at that value."""
    bad = (got != want).nonzero().flatten().tolist()
    rows = []
    for t in bad[:limit]:
        i_o, i_u = int(want[t]), int(got[t])
        exact = (hs[t].double() @ weight[[i_o, i_u]].double().T).tolist() if 0 <= i_u < len(weight) else [None, None]
        value = float(logits[t, i_o])
        ulp = 2.0 ** (torch.tensor(abs(value) or 1e-30).log2().floor().item() - 7)
        near_tie = None not in exact and abs(exact[0] - exact[1]) < ulp
        rows.append(
            dict(
                row=t,
                oracle_id=i_o,
                our_id=i_u,
                exact_oracle=exact[0],
                exact_ours=exact[1],
                bf16_ulp=ulp,
                sub_ulp_near_tie=near_tie,
            )
        )
    return dict(count=len(bad), all_sub_ulp=all(r["sub_ulp_near_tie"] for r in rows), detail=rows)


def hardware(device: str) -> dict:
    info = dict(
        device=device,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        plugin=sglang_gemma4_dflash.__version__,
        commit=_command("git", "-C", REPO, "rev-parse", "HEAD"),
        cpu=platform.processor() or platform.machine(),
    )
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(
            gpu=p.name,
            sm_count=p.multi_processor_count,
            capability=f"{p.major}.{p.minor}",
            memory_GiB=round(p.total_memory / 2**30, 1),
        )
        query = "--query-gpu=driver_version,clocks.max.sm,power.limit"
        info["nvidia_smi"] = _command("nvidia-smi", query, "--format=csv,noheader")
    else:
        info["gpu"] = "none (CPU smoke run)"
    return info


def _command(*cmd) -> str | None:
    """The command's stdout, or None where it is missing or fails (a copy of the repo without .git, no nvidia-smi)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/draft_head/h200_torch_head.json")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU: exactness, NaN rows, the JSON")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per figure (default 30 on GPU, 3 on CPU)")
    args = ap.parse_args()
    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device: run on a GPU, or pass --cpu-smoke for the tiny CPU check")
    shapes = CPU_SHAPES if args.cpu_smoke else GPU_SHAPES
    reps = args.reps or (3 if args.cpu_smoke else 30)
    V, H, budget = shapes["vocab"], shapes["hidden"], shapes["budget"]
    t_start = time.time()
    torch.manual_seed(0)

    ceil = ceilings(device, reps)
    print(f"read {ceil['read_TBps']:.4g} TB/s, bf16 GEMM {ceil['bf16_TFLOPs']:.4g} TFLOP/s", flush=True)
    weight = torch.randn(V, H, device=device, dtype=torch.bfloat16).mul_(0.02)
    tie_a, tie_b = V // 3, V - 5  # far apart: other blocks, other TP shares
    weight[tie_b] = weight[tie_a]
    head = torch.nn.Embedding.from_pretrained(weight)
    wbytes = weight.numel() * weight.element_size()

    def roofline_ms(n: int, tp: int = 1) -> float:
        return max(wbytes / tp / (ceil["read_TBps"] * 1e12), 2 * n * V * H / tp / (ceil["bf16_TFLOPs"] * 1e12)) * 1e3

    rows = []
    for n in shapes["tokens"]:
        hs = torch.randn(n, H, device=device).to(torch.bfloat16)
        hs[0] = float("nan")
        hs[1] = weight[tie_a] * 40
        logits = hs @ weight.T
        oracle = torch.argmax(logits, dim=-1)
        ours = greedy_token_ids(hs, head, None, budget_bytes=budget)
        got = {"tp1": ours, **{f"tp{t}": merged_split_ids(hs, weight, head, t, budget) for t in TP_SIZES}}
        got["upstream"] = upstream_head(hs, weight)
        row = dict(
            tokens=n,
            block_rows=vocab_block_rows(n, weight.element_size(), budget),
            exact={k: mismatch_report(hs, weight, logits, ids, oracle) for k, ids in got.items()},
            nan_row=dict(oracle=int(oracle[0]), **{k: int(ids[0]) for k, ids in got.items()}),
            tie_row=dict(oracle=int(oracle[1]), **{k: int(ids[1]) for k, ids in got.items()}),
            ids_in_range={k: bool(((ids >= 0) & (ids < V)).all()) for k, ids in got.items()},
        )
        del logits
        layouts = {t: layout_for_head(head, t - 1, t) for t in TP_SIZES}
        row["upstream_ms"] = time_ms(partial(upstream_head, hs, weight), device, reps)
        row["ours_ms"] = time_ms(partial(greedy_token_ids, hs, head, None, budget_bytes=budget), device, reps)
        for t, layout in layouts.items():
            share = partial(score_local, hs, weight, layout, budget_bytes=budget)
            row[f"share_t{t}_ms"] = time_ms(share, device, reps)
        row["roofline_ms"] = roofline_ms(n)
        for t in TP_SIZES:
            row[f"roofline_t{t}_ms"] = roofline_ms(n, t)
            row[f"share_t{t}_vs_ours"] = row[f"share_t{t}_ms"] / row["ours_ms"]
        row["ours_vs_roofline"] = row["ours_ms"] / row["roofline_ms"]
        row["upstream_vs_roofline"] = row["upstream_ms"] / row["roofline_ms"]
        rows.append(row)
        mism = {k: r["count"] for k, r in row["exact"].items()}
        print(
            f"[{time.time() - t_start:.0f}s] N={n}: upstream {row['upstream_ms']:.3f} ms, ours {row['ours_ms']:.3f}, "
            f"t2 {row['share_t2_ms']:.3f}, t4 {row['share_t4_ms']:.3f}, roofline {row['roofline_ms']:.3f}; "
            f"mismatches {mism}",
            flush=True,
        )

    checks = dict(
        exact_or_sub_ulp=all(
            r["exact"][k]["count"] == 0 or r["exact"][k]["all_sub_ulp"] for r in rows for k in r["exact"]
        ),
        nan_row_as_torch_argmax=all(r["nan_row"][k] == r["nan_row"]["oracle"] for r in rows for k in r["nan_row"]),
        tie_to_lowest_id=all(r["tie_row"][k] == tie_a for r in rows for k in r["tie_row"]),
        ids_in_range=all(all(r["ids_in_range"].values()) for r in rows),
    )
    res = dict(
        ok=all(checks.values()),
        checks=checks,
        hardware=hardware(device),
        shapes=dict(
            vocab=V,
            hidden=H,
            dtype="bfloat16",
            weight_GB=wbytes / 1e9,
            logits_budget_bytes=budget,
            upstream_chunk=UPSTREAM_CHUNK,
        ),
        read_bw=dict(TBps=ceil["read_TBps"], method=ceil["read_method"]),
        peak_bf16=dict(
            TFLOPs=ceil["bf16_TFLOPs"], by_shape_TFLOPs=ceil["bf16_by_shape_TFLOPs"], method=ceil["bf16_method"]
        ),
        oracle="argmax over the full vocabulary of hs @ W.T (torch, bf16 logits)",
        roofline="max(weight bytes / read_bw, 2*N*V*H / peak_bf16); a rank at TP=t: bytes and FLOPs / t",
        timing=f"median of {reps} calls after a warm-up ({'CUDA events' if device == 'cuda' else 'wall clock'}); "
        "a TP share is one rank's local scoring, without the all-gather",
        rows=rows,
        wall_s=time.time() - t_start,
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(
        f"\n{'N':>5} {'upstream':>9} {'ours':>8} {'roof':>7} {'x roof':>7} {'t2':>7} {'t2/1':>6} {'t4':>7} {'t4/1':>6}"
    )
    for r in rows:
        print(
            f"{r['tokens']:>5} {r['upstream_ms']:>9.3f} {r['ours_ms']:>8.3f} {r['roofline_ms']:>7.3f} "
            f"{r['ours_vs_roofline']:>7.3f} {r['share_t2_ms']:>7.3f} {r['share_t2_vs_ours']:>6.3f} "
            f"{r['share_t4_ms']:>7.3f} {r['share_t4_vs_ours']:>6.3f}"
        )
    print(f"checks {checks}; {'ok' if res['ok'] else 'FAILED'}; wall {res['wall_s']:.0f}s; wrote {args.out}")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
