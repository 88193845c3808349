"""The kernel's tools: scripts/kernel_resources.py compiles the kernel for sm_90a as Triton's JIT specialises it on
the GPU (its KV loop pipelined). Timings themselves are the GPU's (docs/gpu_runs.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import kernel_resources  # noqa: E402


def compiled(*variants: str) -> list[dict]:
    """kernel_resources.py's rows for these variants, compiled for sm_90a in a process without the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kernel_resources.py"), "--variants", *variants],
        env=env, capture_output=True, text=True, timeout=600,
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
