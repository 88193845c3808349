"""The kernel's tools: scripts/kernel_resources.py compiles the kernel for sm_90a as Triton's JIT specialises it on
the GPU (its KV loop pipelined), and bench_block_attention.py's --pick-out turns sweep rows into a tuning file the
kernel reads. Timings themselves are the GPU's (benchmarks/block_attention/README.md)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from sglang_gemma4_dflash.attention import block_kernel
from sglang_gemma4_dflash.attention import tuning as tilings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
sys.path.insert(0, str(ROOT / "scripts"))
import bench_block_attention as bench  # noqa: E402
import kernel_resources  # noqa: E402


def compiled(*variants: str, dtype: str = "bf16") -> list[dict]:
    """kernel_resources.py's rows for these variants (none: the defaults), compiled for sm_90a in a process without
    the interpreter or a tuning file."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", tilings.TUNING_ENV)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kernel_resources.py"), "--dtype", dtype, "--variants", *variants],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_kernel_compiles_for_sm90_as_the_gpu_runs_it():
    """Compiled as the JIT specialises it (aligned pointers, strides of 16), the KV loop copies asynchronously and
    the global layers' row tile of 64 runs on wgmma; without that specialisation (before 2026-12-04) the loop was not
    pipelined at all (lookahead None). With Triton 3.6 and 3.8 the pipeliner lets the copies run one iteration
    ahead from 5 stages on, and none at 3 (the KV indices' load takes a stage of its own)."""
    rows = compiled("target-global:64,16,4,3,2,64", "target-global:64,16,4,5,2,64", "draft:64,32,4,3,1")
    three, five, draft = rows
    assert three["mma"] == "wgmma" and three["stack_bytes"] == 0
    assert three["lookahead"] == 0 and five["lookahead"] == 1 and draft["lookahead"] == 0
    assert three["blocks_per_sm"] == 2 and five["blocks_per_sm"] == 1 and five["shared_bytes"] > three["shared_bytes"]


def test_each_default_plans_its_splits_for_no_more_programs_than_an_sm_holds():
    """The static split count assumes ``programs_per_sm`` programs run on each SM at once; a tiling whose shared
    memory or registers fit fewer runs its splits in more waves than planned (the global layers at batch 1 did until
    benchmarks/block_attention/README.md: 2 planned, 1 fitting, 20% slower at 8192 tokens)."""
    rows = compiled()
    assert len(rows) == 8 and all(r["what"].startswith("default") for r in rows)
    for row in rows:
        assert 1 <= row["programs_per_sm"] <= row["blocks_per_sm"], row


FP8_STACK_BOUND = 32  # bytes of spill stack an fp8 default may take (the 16-bit global tiling at batch 1: ~12 KB)


def test_each_fp8_default_compiles_without_spills():
    """An fp8 cache's defaults (every layer kind and batch class), compiled for sm_90a (bf16 q, e4m3 cache): no
    spill stack above ``FP8_STACK_BOUND``, MMA instructions, a pipelined KV loop, and no more programs planned per
    SM than fit."""
    rows = compiled(dtype="fp8")
    assert len(rows) == 8 and all(r["what"].startswith("default") and r["dtype"] == "fp8" for r in rows)
    bad = [
        row
        for row in rows
        if row["stack_bytes"] > FP8_STACK_BOUND
        or row["mma"] == "none"
        or row["lookahead"] is None
        or not 1 <= row["programs_per_sm"] <= row["blocks_per_sm"]
    ]
    assert not bad, "; ".join(f"{r['kind']} {r['what']}: stack {r['stack_bytes']}, {r['mma']}, lookahead "
                              f"{r['lookahead']}, {r['blocks_per_sm']} blocks per SM" for r in bad)  # fmt: skip


def test_lookahead_reads_the_first_wait_of_the_kv_loop():
    loop = [
        "scf.for %i = %a to %b step %c iter_args(...) {",
        "  %w = ttg.async_wait %x, %y {num = 4 : i32}",
        "  %d = ttng.warp_group_dot %q, %k",
        "  %c1 = ttg.async_copy_global_to_local %p, %s",
        "  %g1 = ttg.async_commit_group tokens %c1",
        "  %c2 = ttg.async_copy_global_to_local %p2, %s2",
        "  %g2 = ttg.async_commit_group tokens %c2",
        "  scf.yield %d",
        "}",
        "%after = ttg.async_wait {num = 0 : i32}",
    ]
    assert kernel_resources.kv_loop_lookahead("\n".join(loop)) == 2
    unpipelined = [line for line in loop if "async" not in line]
    assert kernel_resources.kv_loop_lookahead("\n".join(unpipelined)) is None
    assert kernel_resources.blocks_per_sm(114816, 255, 4) == 2 and kernel_resources.blocks_per_sm(240000, 64, 4) == 0


def sweep_row(kind, ctx, batch, ms, err, default=False, **fields):
    return {"kind": kind, "context": ctx, "batch": batch, "ms": ms, "rel_err": err, **vars(tilings.Tuning(**fields)),
            "default": default}  # fmt: skip


def test_pick_out_writes_a_tuning_file_the_kernel_reads(tmp_path, monkeypatch):
    """Per head dim and batch, the variant timed at every point with the least time per step wins, if its error is
    within the limit; batch ranges split at geometric midpoints (1 | 2-7 | 8+)."""
    rows = []
    for batch in (1, 4, 16):
        for ctx in (2048, 8192):
            rows += [
                sweep_row("draft-sliding", ctx, batch, 1.0, 2e-3, default=True),
                sweep_row("draft-full", ctx, batch, 1.0, 2e-3, default=True),
                sweep_row("draft-sliding", ctx, batch, 0.5, 2e-3, num_stages=5),  # 4 layers: the sum counts it
                sweep_row("draft-full", ctx, batch, 1.2, 2e-3, num_stages=5),  # 1 layer
                sweep_row("draft-sliding", ctx, batch, 0.1, 5e-2, num_stages=7),  # wrong: never picked
                sweep_row("draft-full", ctx, batch, 0.1, 5e-2, num_stages=7),
            ]
        rows.append(sweep_row("draft-full", 2048, batch, 0.01, 2e-3, block_n=16))  # one point only: not picked
    rows.append(sweep_row("target-global", 8192, 4, 0.3, 2e-3, default=True, m_tile=64))
    rows.append(sweep_row("target-global", 8192, 4, None, None, m_tile=128))  # failed to launch
    picks = bench.pick_tunings(rows)
    assert [(r["head_dim"], r["min_batch"], r.get("max_batch")) for r in picks] == [
        (512, 1, None), (128, 1, 1), (128, 2, 7), (128, 8, None),
    ]  # fmt: skip
    assert picks[0]["m_tile"] == 64 and all(r["num_stages"] == 5 for r in picks[1:])
    assert picks[1]["step_ms"] == pytest.approx(2 * (0.5 * 4 + 1.2))
    path = tmp_path / "picked.json"
    path.write_text(json.dumps([{k: v for k, v in r.items() if k not in bench.PICK_FIGURES} for r in picks]))
    monkeypatch.setenv(tilings.TUNING_ENV, str(path))
    assert tilings.default_tuning(128, 5) == tilings.Tuning(num_stages=5)
    assert tilings.default_tuning(512, 16) == tilings.Tuning(m_tile=64)


def test_pick_out_of_an_fp8_sweep(monkeypatch):
    """An fp8 cache's variants all sit near 2.4e-2 (the weights' cast): a pick exists, and a wrong one still loses."""
    rows = [
        sweep_row("target-global", 8192, 4, 0.5, 2.4e-2, default=True),
        sweep_row("target-global", 8192, 4, 0.2, 2.5e-2, fp8_dot16=1),
        sweep_row("target-global", 8192, 4, 0.1, 9e-2, num_stages=7),  # wrong: never picked
    ]
    monkeypatch.setattr(bench, "KV_DTYPE", torch.float8_e4m3fn)
    assert [(r["fp8_dot16"], r["num_stages"]) for r in bench.pick_tunings(rows)] == [(1, 2)]
    monkeypatch.setattr(bench, "KV_DTYPE", None)  # the 16-bit cap: none of these
    assert bench.pick_tunings(rows) == []


def test_sweep_around_a_default_varies_only_the_given_fields():
    """``--sweep-around-default``: each point's default tiling with only the listed fields changed; without it,
    every list's combination from the class defaults."""
    args = types.SimpleNamespace(**{f"sweep_{n}": "1" for n in bench.SWEEP_GRID})
    args.sweep_min_splits, args.sweep_programs_per_sm = "256,512", "1,2"
    base = tilings.default_tuning(512, 4)
    around = bench.sweep_tunings(args, base, ["min_splits"])
    assert around == [dataclasses.replace(base, min_split=256), dataclasses.replace(base, min_split=512)]
    whole = bench.sweep_tunings(args)
    assert len(whole) == 4 and all(t.m_tile == 1 and t.d_chunk == 1 for t in whole)


def test_bench_times_another_copy_of_the_kernel(tmp_path, monkeypatch):
    """``--kernel FILE`` swaps the module every row times; with ``--sweep`` it is refused (the compile workers would
    build the plugin's own kernel)."""
    copy = tmp_path / "earlier_block_kernel.py"
    copy.write_text(Path(block_kernel.__file__).read_text().replace("MAX_BLOCK = 32", "MAX_BLOCK = 31"))
    monkeypatch.setattr(bench, "block_kernel", bench.block_kernel)  # restored after the test
    bench.use_kernel_file(str(copy))
    assert bench.block_kernel.MAX_BLOCK == 31 and bench.block_kernel is not block_kernel
    monkeypatch.setattr(sys, "argv", ["bench", "--out", str(tmp_path / "x.json"), "--kernel", str(copy), "--sweep"])
    with pytest.raises(SystemExit):
        bench.main()
