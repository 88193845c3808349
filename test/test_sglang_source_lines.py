"""SGLang lines that no venv here runs, checked from the source in their published wheels.

For 0.5.11, 0.5.12, 0.5.12.post1, 0.5.14, 0.5.17 and 0.5.20 the wheel is read (never installed): the
features ``compat.probe()`` would find are built from the source with ``ast``, the same capture-machinery
check runs on the same method sources (``compat.capture_machinery_problem``), and every target of the
hook plan (``hooks.plan``) is looked up with the arguments its hook binds. Wheels are taken from
``.cache/sglang-wheels/`` and downloaded there with pip when missing (about 7.5 MB each).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sglang_gemma4_dflash import compat, hooks
from sglang_gemma4_dflash.compat import SGLangFeatures, TargetClass, WorkerClass
from sglang_gemma4_dflash.gemma4 import capture

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "sglang-wheels"
MODULES = {compat.module_of(p) for p in compat.GEMMA4_TARGETS + (compat.V1_WORKER, compat.V2_WORKER)}
MODULES.add(compat.module_of(compat.TRITON_BACKEND))
# Where SGLang's extend kernel lives (the function the block-attention dispatch stands in for): 0.5.14+, then before.
EXTEND_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",
    "sglang.srt.layers.attention.triton_ops.extend_attention",
)
MODULES.update(EXTEND_MODULES)


@functools.lru_cache(maxsize=None)
def wheel_sources(version: str) -> dict[str, str]:
    """``{module: source}`` of the hooked modules in SGLang ``version``'s wheel (absent modules left out)."""
    wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        cmd += ["--platform", "manylinux_2_34_x86_64", "--python-version", "311", "--implementation", "cp"]
        proc = subprocess.run(cmd + ["-d", str(CACHE), f"sglang=={version}"], capture_output=True, text=True)
        wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
        assert wheels, f"could not download the sglang {version} wheel into {CACHE}: {proc.stderr[-2000:]}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        return {
            module: wheel.read(member).decode()
            for module in MODULES
            if (member := module.replace(".", "/") + ".py") in names
        }


def _classes(source: str) -> dict[str, dict[str, ast.FunctionDef]]:
    tree = ast.parse(source)
    return {
        node.name: {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def _method(sources, path: str):
    """(source, FunctionDef) of ``pkg.module.Class.method``; (None, None) when the class or method is absent."""
    cls_path, _, name = path.rpartition(".")
    module, _, cls = cls_path.rpartition(".")
    source = sources.get(module)
    method = _classes(source).get(cls, {}).get(name) if source else None
    return (source, method) if method is not None else (None, None)


def features_from_source(version: str) -> SGLangFeatures:
    """What ``compat.probe()`` would report for ``version``, read from its wheel."""
    sources = wheel_sources(version)

    def has_class(path):
        source = sources.get(compat.module_of(path))
        return source is not None and path.rpartition(".")[2] in _classes(source)

    def segment(path):
        source, node = _method(sources, path)
        return None if node is None else ast.get_source_segment(source, node)

    workers = tuple(
        WorkerClass(kind, path, _method(sources, f"{path}._maybe_build_draft_sampler")[1] is not None)
        for kind, path in compat.WORKERS
        if has_class(path)
    )
    targets = tuple(
        TargetClass(
            path,
            _method(sources, f"{path}.set_dflash_layers_to_capture")[1] is not None,
            compat.capture_machinery_problem(
                path.rpartition(".")[2],
                segment(f"{path}.forward"),
                segment(f"{compat.GEMMA4_TEXT_MODEL}.forward"),
                line=version,
            ),
        )
        for path in compat.GEMMA4_TARGETS
        if has_class(path)
    )
    return SGLangFeatures(version, workers, targets, (), triton_backend=has_class(compat.TRITON_BACKEND))


def source_problem(version: str, change: hooks.Change) -> str | None:
    """``compat.target_problem`` on the wheel's source: the method is there (AROUND) or absent (ADD), and
    takes every bound argument by name."""
    _, method = _method(wheel_sources(version), change.target)
    if change.how == hooks.ADD:
        return None if method is None else f"{change.target} already exists"
    if method is None:
        return f"{change.target} is missing"
    names = {a.arg for a in method.args.args + method.args.kwonlyargs}
    missing = [arg for arg in change.binds if arg not in names]
    return f"{change.target} takes no {missing} by name" if missing else None


def test_sglang_0_5_11_cannot_capture_and_the_plan_refuses_its_dflash_start_by_name():
    features = features_from_source("0.5.11")
    assert [w.kind for w in features.workers] == ["v1"] and len(features.targets) == 2
    for target in features.targets:
        assert not target.upstream_capture
        assert target.capture_problem.startswith("Gemma4TextModel.forward never reads layers_to_capture")
        assert "SGLang 0.5.11 cannot capture Gemma 4 hidden states for DFLASH; use SGLang >= 0.5.12" in (
            target.capture_problem
        )
    changes, _ = hooks.plan(features)
    refusals = [c for c in changes if c.impl is capture.refuse_without_capture]
    assert len(refusals) == 2 and all(c.how == hooks.ADD and c.required for c in refusals)
    assert not [c for c in changes if c.impl is capture.set_dflash_layers_to_capture]


@pytest.mark.parametrize(
    "version, kind, graph_sampler, upstream_capture",
    [
        ("0.5.12", "v1", False, False),
        ("0.5.12.post1", "v1", False, False),
        ("0.5.14", "v2", False, True),
        ("0.5.17", "v2", True, True),
        ("0.5.20", "v2", True, True),
    ],
)
def test_lines_from_0_5_12_can_capture_and_every_planned_hook_finds_its_target(
    version, kind, graph_sampler, upstream_capture
):
    features = features_from_source(version)
    assert [(w.kind, w.graph_sampler) for w in features.workers] == [(kind, graph_sampler)]
    assert [(t.upstream_capture, t.capture_problem) for t in features.targets] == [(upstream_capture, None)] * 2
    changes, _ = hooks.plan(features)
    assert changes
    assert {c.target: p for c in changes if (p := source_problem(version, c))} == {}
    assert all(
        c.required == (kind == "v1") for c in changes if "DFlashWorker" in c.target and "histogram" not in c.piece
    )
    block = [c for c in changes if c.piece == hooks.BLOCK_ATTENTION]
    assert len(block) == 2 and not any(c.required for c in block)  # found and checked above; speed only


@pytest.mark.parametrize("version", ["0.5.12", "0.5.12.post1", "0.5.14", "0.5.17", "0.5.20"])
def test_the_block_attention_dispatch_knows_every_argument_of_sglang_extend_kernel(version):
    """The dispatch binds upstream's ``extend_attention_fwd`` arguments by name: on every line each one is one
    it reads or knows to be unused (an unknown one would send every call back to upstream's kernel)."""
    from sglang_gemma4_dflash.attention import backend_hooks

    sources = wheel_sources(version)
    module = next(m for m in EXTEND_MODULES if m in sources)
    function = next(
        node for node in ast.parse(sources[module]).body
        if isinstance(node, ast.FunctionDef) and node.name == "extend_attention_fwd"
    )  # fmt: skip
    names = {a.arg for a in function.args.args + function.args.kwonlyargs}
    assert names - backend_hooks.KNOWN == set()
    assert backend_hooks.READ | {"sinks"} <= names
