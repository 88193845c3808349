"""scripts/compile_sglang_kernels.py: SGLang's triton kernels compiled for sm_90 without a GPU and without a launch.
A kernel that cannot compile is a failed row (exit 1), one that can is a row with its shared memory; the real
wrappers of the installed SGLang go through it as the triton backend calls them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_sglang_kernels.py"
ENV = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled as on the GPU, not interpreted

TOY = """
import sys
import torch
import triton
import triton.language as tl
sys.path.insert(0, {scripts!r})
import compile_sglang_kernels as csk


@triton.jit
def fill(X, N: tl.constexpr):
    tl.store(X + tl.arange(0, N), tl.full([N], 2.0, tl.float32))


@triton.jit
def broken(X, N: tl.constexpr):
    tl.store(X + tl.arange(0, N), tl.no_such_op(N))


x = torch.ones(16)
compiles = csk.Compiles()
with compiles.installed():
    compiles.scenario = "toy"
    fill[(1,)](x, N=16)
    broken[(1,)](x, N=16)
print("launched" if x.ne(1).any() else "not launched")
print(csk.json.dumps(compiles.rows))
"""


def test_a_kernel_that_cannot_compile_is_a_failed_row_and_nothing_is_launched(tmp_path):
    toy = tmp_path / "toy.py"
    toy.write_text(TOY.format(scripts=str(SCRIPT.parent)))
    proc = subprocess.run([sys.executable, str(toy)], env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launched, rows = proc.stdout.splitlines()[-2:]
    assert launched == "not launched"
    fill, broken = json.loads(rows)
    assert fill["kernel"].endswith(".fill") and fill["compiled"] is True and fill["num_warps"] == 4
    assert broken["kernel"].endswith(".broken") and broken["compiled"] is False and "no_such_op" in broken["error"]


def test_the_installed_sglang_verify_kernel_compiles_for_sm90(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "extend verify 31b-global fp8", "--out", str(out)],
        env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["target"] == "cuda sm_90" and report["failed"] == 0
    (row,) = report["rows"]
    assert row["scenario"] == "extend verify 31b-global fp8 cache" and row["compiled"] is True
    assert row["kernel"].endswith("extend_attention._fwd_kernel") and row["shared_bytes"] > 0


def test_a_kernel_module_or_wrapper_the_line_lacks_is_absent_not_failed():
    sys.path.insert(0, str(SCRIPT.parent))
    import compile_sglang_kernels as csk

    with pytest.raises(csk.Absent, match="no sglang.kernels.ops.attention.no_such_kernel"):
        csk.kernels("attention.no_such_kernel", "fwd")
    with pytest.raises(csk.Absent, match="extend_attention has no no_such_wrapper"):
        csk.kernels("attention.extend_attention", "extend_attention_fwd", "no_such_wrapper")
    (fwd,) = csk.kernels("attention.extend_attention", "extend_attention_fwd")
    assert fwd.__name__ == "extend_attention_fwd"
