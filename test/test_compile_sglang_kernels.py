"""scripts/compile_sglang_kernels.py: SGLang's triton kernels compiled for sm_90 without a GPU and without a launch,
and with --cuda-jit its CUDA JIT kernels built for sm_90a with nvcc. A kernel that cannot compile is a failed row
(exit 1), one that can is a row with its shared memory (triton) or its nvcc target (JIT); the real wrappers of the
installed SGLang go through it as the triton backend and the layers call them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_sglang_kernels.py"
# compiled as on the GPU: not interpreted, and without the CPU engine the suite's SGLang servers run on
ENV = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SGLANG_USE_CPU_ENGINE")}
# CUDA 13.0's nvcc (the GPU machine's), which .ci/run installs from PyPI with scripts/cuda_toolchain.sh
NVCC_HOME = os.environ.get("SGLANG_GEMMA4_DFLASH_TEST_CUDA_HOME", "/nonexistent")

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


def cuda_env(cuda_home):
    return ENV | {"CUDA_HOME": cuda_home, "PATH": f"{cuda_home}/bin:{ENV['PATH']}"}


def cuda_jit(tmp_path, only, cuda_home, *more):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cuda-jit", "--only", only, "--out", str(out), *more],
        env=cuda_env(cuda_home), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return proc, json.loads(out.read_text())


needs_nvcc = pytest.mark.skipif(
    not Path(NVCC_HOME, "bin", "nvcc").exists(), reason="no nvcc: export SGLANG_GEMMA4_DFLASH_TEST_CUDA_HOME"
)


@needs_nvcc
def test_a_cuda_jit_kernel_is_built_for_sm90a_through_its_wrapper_and_not_launched(tmp_path):
    # the K/V store of a Gemma-4-31B full-attention layer with an fp8 cache: 4 kv heads x 512 bytes a row
    proc, report = cuda_jit(tmp_path, "jit kv store 31b-global fp8", NVCC_HOME)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert report["nvcc"].startswith("Build cuda_13.0") and report["jit_modules"] == 1
    (row,) = report["rows"]
    assert row["kernel"] == "jit kvcache_2048_2048_128_true.store_cache" and row["compiled"] is True
    assert row["gencode"] == ["-gencode=arch=compute_90a,code=sm_90a"]


def test_a_cuda_jit_kernel_that_cannot_build_is_a_failed_row(tmp_path):
    proc, report = cuda_jit(tmp_path, "jit clamp position", str(tmp_path / "no-cuda"))
    assert proc.returncode == 1
    build = report["rows"][0]
    assert build["kernel"] == "jit clamp_position_int64_t" and build["compiled"] is False
    assert "Failed to build JIT module" in build["error"] and f"{tmp_path}/no-cuda/bin/nvcc" in build["error"]


@needs_nvcc
def test_a_kept_cuda_jit_build_is_the_one_sglang_loads_afterwards(tmp_path):
    # probe_line.sh builds the tiny pairs' JIT kernels into the servers' cache before they start: SGLang's own
    # builder, in a fresh process as a server calls it, must find that build (compiling is forbidden there)
    cache = tmp_path / "jit"
    proc, report = cuda_jit(tmp_path, "jit clamp position", NVCC_HOME, "--jit-cache", str(cache))
    assert proc.returncode == 0 and report["jit_modules"] == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    built = sorted(cache.rglob("*.so"))
    assert len(built) == 1
    server_side = (
        "import torch\n"
        "from sglang.kernels.jit.utils.arch import override_jit_cuda_arch\n"
        "from sglang.kernels.ops.attention.clamp_position import _jit_clamp_position_module\n"
        "with override_jit_cuda_arch(9, 0):\n"
        "    print(type(_jit_clamp_position_module(torch.int64)).__name__)\n"
    )
    env = cuda_env(NVCC_HOME) | {"SGLANG_JIT_CACHE_DIR": str(cache), "SGLANG_CRASH_ON_JIT_COMPILE": "1"}
    load = subprocess.run([sys.executable, "-c", server_side], env=env, capture_output=True, text=True, timeout=300)
    assert load.returncode == 0, load.stderr[-3000:]
    assert load.stdout.split()[-1] == "Module" and sorted(cache.rglob("*.so")) == built
