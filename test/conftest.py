"""Test bootstrap: SGLang's CPU engine for this process, before any test module imports SGLang.

On a machine without CUDA every test process runs SGLang with ``SGLANG_USE_CPU_ENGINE=1`` and the
``sgl_kernel`` stand-ins (see ``sglang_gemma4_dflash_testkit.cpu_standins``). Tests that need a real SGLang
model take the ``sglang_tp1`` fixture. SGLang failing to import is an error here, never a skip.

Without CUDA, Triton kernels run under Triton's interpreter: ``TRITON_INTERPRET=1`` must be set before Triton is
first imported (``@triton.jit`` reads it, Triton's own library functions included), so it is set here, first.

``.ci/run`` runs the suite on two pytest-xdist workers (``-n 2``): each worker is a process of its own with this
file's session fixtures; ``pytest_xdist_make_scheduler`` decides which tests stay together on one worker.
"""

import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from sglang_gemma4_dflash_testkit import sglang_cpu as _sglang_cpu  # noqa: E402

_sglang_cpu.use_cpu_engine()


@pytest.fixture(scope="session")
def sglang_tp1():
    """SGLang's distributed + model-parallel state (world 1, gloo) and server args, once per session."""
    if _sglang_cpu.cuda_engine_active():
        pytest.skip("this process drives SGLang's CUDA engine; the CPU-engine model tests run on CPU machines")
    _sglang_cpu.init_tp1()
    return _sglang_cpu


@pytest.fixture(scope="module")
def tiny_targets(tmp_path_factory):
    """The tiny target in transformers, fp32 and bf16 (CPU): the GPU scripts' prompt screens."""
    import torch
    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints
    from transformers import AutoModelForCausalLM

    path = write_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))["target"]
    return {
        d: AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, d)).eval() for d in ("float32", "bfloat16")
    }


@pytest.fixture(scope="module", params=["Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"])
def pair(request, sglang_tp1):
    """(helpers, config, transformers model, SGLang model) for each Gemma 4 target class, same weights."""
    config = sglang_tp1.tiny_text_config() if request.param == "Gemma4ForCausalLM" else sglang_tp1.tiny_mm_config()
    hf_model, sgl_model = sglang_tp1.build_pair(config)
    assert type(sgl_model).__name__ == request.param
    return sglang_tp1, config, hf_model, sgl_model


# Under pytest-xdist (``.ci/run``: ``-n 2``), which tests may run on different workers. By default a file's tests
# stay on one worker, so its module-scoped fixtures (pairs of SGLang models, the ranks of multi-process runs, the
# wheels' parsed sources) are built once. These files share nothing between tests (each starts its own fresh
# interpreters or processes, or is cheap), so their tests spread one by one:
SPREAD_FILES = {
    "test_block_kernel.py",
    "test_candidate_topk.py",
    "test_dp_and_disaggregation.py",
    "test_draft_sampler_hook.py",
    "test_e2e_harness.py",
    "test_greedy_head.py",
    "test_install.py",
    "test_kernel_tools.py",
    "test_lines.py",
    "test_package_layout.py",
    "test_plugin.py",
    "test_profile_analysis.py",
}
# Files that start SGLang CPU servers run on one worker, one after another (memory, ports).
SERVER_FILES = {"test_bench.py", "test_sglang_cpu_forward.py"}


def _xdist_scope(nodeid: str) -> str:
    """The work unit of a test: the test itself (SPREAD_FILES), the CPU servers' unit, or its file."""
    path = nodeid.split("::", 1)[0]
    name = path.rsplit("/", 1)[-1]
    if name in SPREAD_FILES:
        return nodeid
    return "cpu servers" if name in SERVER_FILES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """For ``-n N`` (xdist's ``load``): units by ``_xdist_scope``, the largest first (xdist's loadscope scheduler;
    ``--dist loadgroup`` cannot do it here: with pytest 9 xdist 3.8 cannot rename a test's node id)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _xdist_scope(nodeid)

    return ByFile(config, log)


def pytest_sessionfinish(session):
    """On an xdist worker: hand this worker's measured differences to the controller, which prints them."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["sglang_measured"] = list(_sglang_cpu.MEASURED)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: the controller collects each worker's measurements
def pytest_testnodedown(node, error):
    _sglang_cpu.MEASURED.extend(tuple(m) for m in getattr(node, "workeroutput", {}).get("sglang_measured", []))


def pytest_terminal_summary(terminalreporter):
    """Print the largest measured SGLang-vs-transformers differences, so they land in the CI log."""
    if not _sglang_cpu.MEASURED:
        return
    worst: dict[str, tuple[float, float, int]] = {}
    for check, diff, tolerance in _sglang_cpu.MEASURED:
        old_diff, _, count = worst.get(check, (0.0, tolerance, 0))
        worst[check] = (max(old_diff, diff), tolerance, count + 1)
    terminalreporter.section("SGLang vs transformers on CPU (float32): largest max abs diff per check")
    for check, (diff, tolerance, count) in sorted(worst.items()):
        terminalreporter.write_line(f"{check}: {diff:.3g} over {count} measurements (atol {tolerance:g}, rtol 1e-4)")


@pytest.fixture(scope="session")
def sglang_0513():
    """(python, extra env) of an interpreter that imports SGLang 0.5.13 (the line without upstream Gemma 4
    DFlash support): $SGLANG_0513_PYTHON (set by .ci/run), else the repo's .venv-0513
    (scripts/make_venv.sh 0.5.13), else this interpreter with $SGLANG_0513_PYTHONPATH in front."""
    if os.environ.get("SGLANG_0513_PYTHON"):
        return os.environ["SGLANG_0513_PYTHON"], {}
    venv = Path(__file__).resolve().parents[1] / ".venv-0513" / "bin" / "python"
    if venv.exists():
        return str(venv), {}
    if os.environ.get("SGLANG_0513_PYTHONPATH"):
        return sys.executable, {"PYTHONPATH": os.environ["SGLANG_0513_PYTHONPATH"]}
    pytest.skip("no SGLang 0.5.13: build .venv-0513 (scripts/make_venv.sh 0.5.13) or set SGLANG_0513_PYTHON")
