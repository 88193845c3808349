"""Block attention at Gemma-4-31B shapes on one GPU: the plugin's kernel beside SGLang's extend kernel (what a
DFLASH verify runs without it) and SGLang's decode kernel (one query per request: what a plain decode step runs).

    source scripts/gpu/setup_site.sh 0.5.17
    python3 scripts/gpu/bench_block_attention.py --out $OUT/block_attention.json [--contexts 64,2048,8192,32768]
        [--batches 1,4,16] [--timed plugin,extend,decode] [--kernel OLD_block_kernel.py] [--sweep]
        [--kv-cache-dtype fp8_e4m3]

Layer kinds (the 31B target: 50 sliding layers, 32 x 256 query heads over 16 KV heads, window 1024, which SGLang
passes as 1023 with the last min(len, 1023) context tokens; 10 global layers, 32 x 512 over 4 KV heads; z-lab's 31B
draft: 64 x 128 over 8 KV heads, 4 sliding layers (window 2048) and 1 full layer, block 16 non-causal).
Per kind, context and batch: each kernel's median time per layer (CUDA-graph replays over enough copies of the
cache to overflow L2, as consecutive layers do), the per-step total (time x layer count), the bytes one read of the
KV cache takes against the measured copy bandwidth (the roofline), and each kernel's relative error against an
fp32 torch reference (at one context per kind). ``--sweep`` also times tuning variants of the plugin's kernel.
``--kernel`` times another copy of block_kernel.py as the plugin's (an earlier version: before and after on one card).
``--kv-cache-dtype fp8_e4m3`` / ``fp8_e5m2``: the cache in that fp8 type (as SGLang's flag of that name stores it,
scales 1), queries in bf16.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import multiprocessing
import os
import platform
import sys
import time

import torch
import triton
from sglang_gemma4_dflash.attention import block_kernel
from sglang_gemma4_dflash.attention import tuning as tilings
from sglang_gemma4_dflash_testkit.block_attention_ref import make_case, reference

BLOCK = 16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: only under TRITON_INTERPRET=1 (a smoke run)
L2_OVERFLOW_BYTES = 256 << 20
KV_CACHE_DTYPES = {"bf16": None, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
KV_DTYPE = None  # --kv-cache-dtype's torch type (None: the queries' bf16)

KINDS = {
    "target-sliding": dict(num_heads=32, num_kv_heads=16, head_dim=256, window=1023, causal=True, layers=50),
    "target-global": dict(num_heads=32, num_kv_heads=4, head_dim=512, window=-1, causal=True, layers=10),
    "draft-sliding": dict(num_heads=64, num_kv_heads=8, head_dim=128, window=2047, causal=False, layers=4),
    "draft-full": dict(num_heads=64, num_kv_heads=8, head_dim=128, window=-1, causal=False, layers=1),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def context_list(kind: dict, ctx: int) -> int:
    """The context tokens SGLang's triton backend hands the kernel: the window list for sliding layers."""
    return min(ctx, kind["window"]) if kind["window"] >= 0 else ctx


def build(kind: dict, ctx: int, batch: int, seed: int):
    n = context_list(kind, ctx)
    shape = {k: kind[k] for k in ("num_heads", "num_kv_heads", "head_dim", "window", "causal")}
    return make_case(
        [n] * batch, [BLOCK] * batch, dtype=torch.bfloat16, device=DEVICE, seed=seed, kv_dtype=KV_DTYPE, **shape
    )


def kv_bytes(case) -> int:
    n = case.kv_indices.numel() + case.k_ext.shape[0]
    return n * case.k_buffer.shape[1] * (case.k_buffer.shape[2] + case.v_buffer.shape[2]) * case.k_buffer.element_size()


def ours(case, tuning=None):
    args = case.kernel_args()

    def fn():
        block_kernel.block_attention(
            *args,
            max_block=BLOCK,
            causal=case.causal,
            sm_scale=case.sm_scale,
            window=case.window,
            k_scale=case.k_scale,
            v_scale=case.v_scale,
            tuning=tuning,
        )

    return fn, args[3]


def sglang_extend(case):
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    args = case.kernel_args()

    def fn():
        extend_attention_fwd(
            *args,
            None,
            case.causal,
            None,
            BLOCK,
            case.k_scale,
            case.v_scale,
            sm_scale=case.sm_scale,
            sliding_window_size=case.window,
        )

    return fn, args[3]


def sglang_decode(case, max_kv_splits: int = 8):
    """One query per request over the same context (plus the one new token), SGLang's static split count."""
    from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd

    batch = case.qo_indptr.numel() - 1
    first = case.qo_indptr[:-1].long()
    q = case.q[first].contiguous()
    lens = (case.kv_indptr[1:] - case.kv_indptr[:-1]).long() + 1
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = lens.cumsum(0)
    ctx = [case.kv_indices[case.kv_indptr[b] : case.kv_indptr[b + 1]] for b in range(batch)]
    indices = torch.cat([torch.cat([ctx[b], case.ext_slots[first[b] : first[b] + 1]]) for b in range(batch)])
    heads, dv = q.shape[1], case.v_buffer.shape[2]
    o = torch.empty(batch, heads, dv, dtype=q.dtype, device="cuda")
    logits = torch.empty(batch, heads, max_kv_splits, dv, dtype=torch.float32, device="cuda")
    lse = torch.empty(batch, heads, max_kv_splits, dtype=torch.float32, device="cuda")
    splits = torch.full((batch,), max_kv_splits, dtype=torch.int32, device="cuda")

    def fn():
        decode_attention_fwd(
            q,
            case.k_buffer,
            case.v_buffer,
            o,
            indptr,
            indices,
            logits,
            lse,
            splits,
            max_kv_splits,
            case.sm_scale,
            1.0,
            1.0,
        )

    return fn, o


_CASES: dict = {}


def cases(kind_name: str, ctx: int, batch: int) -> list:
    """Copies of one case, enough to overflow L2 when run one after another (as consecutive layers do)."""
    key = (kind_name, ctx, batch)
    if key not in _CASES:
        _CASES.clear()
        kind = KINDS[kind_name]
        first = build(kind, ctx, batch, seed=0)
        copies = max(1, min(16, -(-L2_OVERFLOW_BYTES // max(1, kv_bytes(first)))))
        _CASES[key] = [first] + [build(kind, ctx, batch, seed=s) for s in range(1, copies)]
    return _CASES[key]


def timed(make, kind_name: str, ctx: int, batch: int) -> float:
    """Median ms of one call (CUDA-graph replays over the copies)."""
    fns = [make(case)[0] for case in cases(kind_name, ctx, batch)]

    def run_all():
        for fn in fns:
            fn()

    if DEVICE != "cuda":  # the CPU smoke run: one pass, wall clock
        started = time.perf_counter()
        run_all()
        return (time.perf_counter() - started) * 1e3 / len(fns)
    return triton.testing.do_bench_cudagraph(run_all, rep=100, return_mode="median") / len(fns)


def copy_bandwidth() -> float:
    if DEVICE != "cuda":
        return float("nan")
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), rep=200, return_mode="median")
    return 2 * x.numel() / (ms * 1e-3)


def rel_error(make, case, ref: torch.Tensor) -> float:
    """One run of ``make(case)``: its output's relative error against the fp32 reference ``ref``."""
    fn, o = make(case)
    fn()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    assert not torch.isnan(o).any(), "an output element was left NaN"
    return ((o.float() - ref).norm() / ref.norm()).item()


def errors(kind: dict, ctx: int, batch: int) -> dict:
    case = build(kind, ctx, batch, seed=123)
    ref = reference(case)
    return {name: rel_error(make, case, ref) for name, make in (("plugin", ours), ("sglang_extend", sglang_extend))}


SWEEP_GRID = {  # option -> Tuning field; each option is a comma list
    "m_tiles": "m_tile",
    "block_ns": "block_n",
    "warps": "num_warps",
    "stages": "num_stages",
    "dv_parts": "dv_parts",
    "min_splits": "min_split",
    "programs_per_sm": "programs_per_sm",
    "d_chunks": "d_chunk",
    "max_splits": "max_splits",
    "pdls": "pdl",
    "block_splits": "block_split",
    "fp8_dot16s": "fp8_dot16",
}


def sweep_tunings(args, base=None, given=()) -> list:
    """Every combination of the --sweep-* lists; with ``base`` (a point's default tiling), of the lists ``given``
    on the command line only, the other fields kept from ``base``."""
    names = [n for n in SWEEP_GRID if base is None or n in given]
    values = [[int(x) for x in getattr(args, f"sweep_{name}").split(",")] for name in names]
    base = base or tilings.Tuning()
    return [
        dataclasses.replace(base, **{SWEEP_GRID[n]: v for n, v in zip(names, c)}) for c in itertools.product(*values)
    ]


def _compile_one(job: tuple) -> str | None:
    """In a worker process: run one variant once on the point's shapes, so Triton compiles it into its on-disk cache
    (the same specialisation, cache type included, the timing process will ask for)."""
    global KV_DTYPE
    name, ctx, batch, fields, KV_DTYPE = job
    try:
        fn, _ = ours(build(KINDS[name], ctx, batch, seed=0), tilings.Tuning(**fields))
        fn()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as e:  # recorded by the timing pass, which meets the same error
        return f"{type(e).__name__}: {str(e)[:120]}"


def precompile(name: str, ctx: int, batch: int, tunings: list, workers: int) -> float:
    """Compile every variant of one sweep point in `workers` processes at once; seconds taken."""
    started = time.time()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_compile_one, [(name, ctx, batch, vars(t), KV_DTYPE) for t in tunings], chunksize=1)
    return time.time() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="64,2048,8192,32768")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--timed", default="plugin,extend,decode", help="the kernels each row times")
    ap.add_argument("--kernel", help="time this copy of block_kernel.py as the plugin's kernel")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-kinds", default="target-sliding,target-global,draft-full")
    ap.add_argument("--sweep-points", default="8192x1,2048x16", help="context x batch pairs the sweep times")
    ap.add_argument("--sweep-m-tiles", default="16,32,64")
    ap.add_argument("--sweep-block-ns", default="32,64")
    ap.add_argument("--sweep-warps", default="4,8")
    ap.add_argument("--sweep-stages", default="2,3")
    ap.add_argument("--sweep-dv-parts", default="1", help="value-dim slices per row tile, e.g. 1,2,4")
    ap.add_argument("--sweep-min-splits", default="256")
    ap.add_argument("--sweep-programs-per-sm", default="2")
    ap.add_argument("--sweep-d-chunks", default="0", help="head-dim slices of the scores (0: whole), e.g. 0,64,128")
    ap.add_argument("--sweep-max-splits", default="32", help="the most context splits a launch takes")
    ap.add_argument("--sweep-pdls", default="0", help="programmatic dependent launch off / on: 0,1")
    ap.add_argument("--sweep-block-splits", default="0", help="the block in a split of its own off / on: 0,1")
    ap.add_argument("--sweep-fp8-dot16s", default="0", help="an fp8 cache's dots in fp8 / in q's 16-bit type: 0,1")
    ap.add_argument("--sweep-around-default", action="store_true", help="vary only the lists given, from each "
                    "point's default tiling")  # fmt: skip
    ap.add_argument("--pick-out", help="after the sweep, write the fastest variants here as a tuning file")
    ap.add_argument("--budget-s", type=float, default=300.0, help="no new row starts after this many seconds")
    ap.add_argument("--sweep-budget-s", type=float, default=150.0, help="the same for each sweep point")
    ap.add_argument(
        "--compile-workers", type=int, default=12, help="processes that compile a point's variants first (0: none)"
    )
    ap.add_argument("--kv-cache-dtype", choices=sorted(KV_CACHE_DTYPES), default="bf16", help="the cache's type")
    args = ap.parse_args()
    global KV_DTYPE
    KV_DTYPE = KV_CACHE_DTYPES[args.kv_cache_dtype]
    if args.kernel and args.sweep:
        ap.error("--kernel times rows only: the sweep's compile workers load the plugin's own kernel")
    if args.kernel:
        use_kernel_file(args.kernel)
    timed_kernels = set(args.timed.split(","))
    contexts = [int(x) for x in args.contexts.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    started = time.time()
    bandwidth = copy_bandwidth()
    result = {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "none (CPU smoke run, Triton's interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "copy_bandwidth_bytes_per_s": bandwidth,
        "block": BLOCK,
        "kv_cache_dtype": args.kv_cache_dtype,
        "kernel_file": args.kernel,
        "kinds": KINDS,
        "rows": [],
        "errors": [],
        "sweep": [],
    }
    try:
        import sglang

        result["sglang"] = sglang.__version__
    except ImportError:
        result["sglang"] = None

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    kinds = args.kinds.split(",")
    for ctx, name, batch in itertools.product(contexts, kinds, batches):  # the first contexts are measured first
        kind = KINDS[name]
        if time.time() - started > args.budget_s:
            log(f"budget of {args.budget_s:.0f}s spent: {name} ctx={ctx} batch={batch} not measured")
            continue
        if not any(e["kind"] == name for e in result["errors"]):
            err = errors(kind, 2048, 4)
            result["errors"].append({"kind": name, "context": 2048, "batch": 4, **err})
            log(f"{name}: relative error vs fp32 reference {err}")
        try:
            row = {"kind": name, "context": ctx, "batch": batch}
            row["bytes"] = kv_bytes(cases(name, ctx, batch)[0])
            row["roofline_ms"] = row["bytes"] / bandwidth * 1e3
            row["tuning"] = vars(tilings.default_tuning(kind["head_dim"], batch, kv_fp8=KV_DTYPE is not None))
            if "plugin" in timed_kernels:
                row["plugin_ms"] = timed(ours, name, ctx, batch)
            if "extend" in timed_kernels:
                row["sglang_extend_ms"] = timed(sglang_extend, name, ctx, batch)
            if "decode" in timed_kernels and name.startswith("target"):
                row["sglang_decode_ms"] = timed(sglang_decode, name, ctx, batch)
            for key in ("plugin_ms", "sglang_extend_ms", "sglang_decode_ms"):
                if key in row:
                    row[key.replace("_ms", "_step_ms")] = row[key] * kind["layers"]
            result["rows"].append(row)
            log(
                " ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if k != "tuning"
                )
            )
        except torch.OutOfMemoryError:
            log(f"{name} ctx={ctx} batch={batch}: out of memory, skipped")
            _CASES.clear()
            torch.cuda.empty_cache()
        save()
    if args.sweep:
        points = [tuple(int(x) for x in p.split("x")) for p in args.sweep_points.split(",")]
        given = [n for n in SWEEP_GRID if getattr(args, f"sweep_{n}") != ap.get_default(f"sweep_{n}")]
        for name, (ctx, batch) in itertools.product(args.sweep_kinds.split(","), points):
            default = tilings.default_tuning(KINDS[name]["head_dim"], batch, kv_fp8=KV_DTYPE is not None)
            tunings = sweep_tunings(args, default, given) if args.sweep_around_default else sweep_tunings(args)
            if args.compile_workers > 0:
                log(f"sweep {name} ctx={ctx} batch={batch}: {len(tunings)} variants compiled in "
                    f"{precompile(name, ctx, batch, tunings, args.compile_workers):.0f}s")  # fmt: skip
            check = build(KINDS[name], ctx, batch, seed=123)  # each variant's error at the point's shapes
            check_ref = reference(check)
            started = time.time()
            for tuning in [default] + [t for t in tunings if t != default]:
                if time.time() - started > args.sweep_budget_s:
                    log(f"sweep {name} ctx={ctx} batch={batch}: budget spent, {tuning} and later not timed")
                    break
                ms = err = None
                try:
                    ms = timed(lambda c, t=tuning: ours(c, t), name, ctx, batch)
                    err = rel_error(lambda c, t=tuning: ours(c, t), check, check_ref)
                except Exception as e:  # a variant that does not compile (shared memory) is recorded, not fatal
                    log(f"sweep {name} {tuning}: {type(e).__name__}: {str(e)[:120]}")
                row = {"kind": name, "context": ctx, "batch": batch, "ms": ms, "rel_err": err, **vars(tuning)}
                row["default"] = tuning == default
                result["sweep"].append(row)
            done = [
                r for r in result["sweep"] if (r["kind"], r["context"], r["batch"]) == (name, ctx, batch) and r["ms"]
            ]
            if done:
                log(f"sweep {name} ctx={ctx} batch={batch}: best {min(done, key=lambda r: r['ms'])}")
            save()
        if args.pick_out:
            result["picks"] = pick_tunings(result["sweep"])
            with open(args.pick_out, "w") as f:  # what the kernel reads: the rows without their figures
                json.dump([{k: v for k, v in r.items() if k not in PICK_FIGURES} for r in result["picks"]], f, indent=1)
            for row in result["picks"]:
                log(f"pick: {row}")
    save()


def use_kernel_file(path: str) -> None:
    """Make ``path`` (a copy of block_kernel.py) the kernel every row and sweep times."""
    global block_kernel
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from kernel_resources import load_kernel_module

    block_kernel = load_kernel_module(path)


PICK_FIGURES = ("swept_batch", "step_ms")
PICK_ERR_LIMIT = 4e-3  # bf16 against the fp32 reference: the defaults and SGLang's extend kernel measured 2.1-2.3e-3
PICK_ERR_CAP = {None: 1e-2, torch.float8_e4m3fn: 3e-2, torch.float8_e5m2: 5e-2}  # fp8: the weights' cast (2.4e-2)


def pick_tunings(sweep: list) -> list:
    """A tuning file (tuning.tuning_file_rows) from sweep rows: per head dim and swept batch, the variant
    timed at every point of that batch (all kinds of that head dim) with the least time per step (ms x layers),
    among those whose error is at most max(PICK_ERR_LIMIT, 1.25 x the default's at the point), never above the cache
    type's PICK_ERR_CAP. A batch's rows cover the batches nearer to it than to the next swept one (geometric
    midpoint)."""
    fields = [f.name for f in dataclasses.fields(tilings.Tuning)]
    default_err = {(r["kind"], r["context"], r["batch"]): r["rel_err"] for r in sweep if r.get("default")}
    by_group: dict = {}
    for r in sweep:
        if r["ms"] is None or r["rel_err"] is None:
            continue
        default = default_err.get((r["kind"], r["context"], r["batch"])) or 0.0
        limit = min(PICK_ERR_CAP[KV_DTYPE], max(PICK_ERR_LIMIT, 1.25 * default))
        group = by_group.setdefault((KINDS[r["kind"]]["head_dim"], r["batch"]), {"points": set(), "variants": {}})
        point = (r["kind"], r["context"])
        group["points"].add(point)
        if r["rel_err"] <= limit:
            variant = group["variants"].setdefault(tuple(r[f] for f in fields), {})
            variant[point] = r["ms"] * KINDS[r["kind"]]["layers"]
    picks = []
    for head_dim in sorted({hd for hd, _ in by_group}, reverse=True):
        batches = sorted(b for hd, b in by_group if hd == head_dim)
        starts = [1] + [math.ceil(math.sqrt(a * b)) for a, b in zip(batches, batches[1:])]
        for i, batch in enumerate(batches):
            group = by_group[(head_dim, batch)]
            complete = {v: sum(t.values()) for v, t in group["variants"].items() if set(t) == group["points"]}
            if not complete:
                continue
            best = min(complete, key=complete.get)
            row = {"head_dim": head_dim, "min_batch": starts[i]}
            if i + 1 < len(batches):
                row["max_batch"] = starts[i + 1] - 1
            picks.append({**row, **dict(zip(fields, best)), "swept_batch": batch, "step_ms": complete[best]})
    return picks


if __name__ == "__main__":
    main()
