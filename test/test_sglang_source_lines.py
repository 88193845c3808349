"""Every SGLang line from 0.5.11 to 0.5.23, checked from the source in its published wheel.

Each wheel is read, never installed (downloaded into ``.cache/sglang-wheels/`` with pip when missing, 7-39 MB).
From the source, with ``ast``: the features ``compat.probe()`` would find (``features_from_source``) and the plan
``hooks.plan`` makes from them, every target looked up with the arguments its hook binds; what SGLang does with
DFLASH and DP attention, the DFlash modules it adds, the torch it pins; what ``compat`` reaches for at run time;
the arguments of SGLang's extend kernel; any class that would inherit a hooked method but overrides it. All of it
is compared with the table in ``sglang_gemma4_dflash.lines`` (what ``doctor`` and README print), and each check is
shown to fail on a copy of 0.5.23's sources with a fault planted. 0.5.11, which the plugin does not support, is
checked to be refused by name.
"""

from __future__ import annotations

import ast
import functools
import inspect
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sglang_gemma4_dflash import compat, hooks, lines
from sglang_gemma4_dflash.compat import SGLangFeatures, TargetClass, WorkerClass
from sglang_gemma4_dflash.gemma4 import capture

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "sglang-wheels"
VERSIONS = [row.version for row in lines.LINES]
# Where SGLang's extend kernel lives (the function the block-attention dispatch stands in for): 0.5.14+, then before.
EXTEND_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",
    "sglang.srt.layers.attention.triton_ops.extend_attention",
)
# Where a line checks DFLASH's server arguments: 0.5.13+, then 0.5.12.
ARG_MODULES = ("sglang.srt.arg_groups.speculative_hook", "sglang.srt.server_args")


@functools.lru_cache(maxsize=None)
def wheel(version: str) -> Path:
    wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        cmd += ["--platform", "manylinux_2_34_x86_64", "--python-version", "311", "--implementation", "cp"]
        proc = subprocess.run(cmd + ["-d", str(CACHE), f"sglang=={version}"], capture_output=True, text=True)
        wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
        assert wheels, f"could not download the sglang {version} wheel into {CACHE}: {proc.stderr[-2000:]}"
    return wheels[0]


@functools.lru_cache(maxsize=None)
def wheel_sources(version: str) -> dict[str, str]:
    """``{module: source}`` of every Python module in SGLang ``version``'s wheel."""
    with zipfile.ZipFile(wheel(version)) as whl:
        return {
            name[: -len(".py")].replace("/", ".").removesuffix(".__init__"): whl.read(name).decode()
            for name in whl.namelist()
            if name.endswith(".py")
        }


def torch_pin(version: str) -> str:
    with zipfile.ZipFile(wheel(version)) as whl:
        metadata = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [ln for ln in whl.read(metadata).decode().splitlines() if ln.startswith("Requires-Dist: torch==")]
    return requires[0].split("==", 1)[1].split(";")[0].strip()


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


def _has_class(sources, path: str) -> bool:
    source = sources.get(compat.module_of(path))
    return source is not None and path.rpartition(".")[2] in _classes(source)


def _has_function(sources, path: str) -> bool:
    source = sources.get(compat.module_of(path))
    name = path.rpartition(".")[2]
    return source is not None and any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.parse(source).body)


def _strings(source: str | None) -> set[str]:
    """Every string constant of a source (implicit concatenations joined, as Python joins them)."""
    if source is None:
        return set()
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _segment(sources, path: str) -> str | None:
    source, node = _method(sources, path)
    return None if node is None else ast.get_source_segment(source, node)


def features_from_source(version: str) -> SGLangFeatures:
    """What ``compat.probe()`` would report for ``version``, read from its wheel."""
    sources = wheel_sources(version)
    workers = tuple(
        WorkerClass(kind, path, _method(sources, f"{path}._maybe_build_draft_sampler")[1] is not None)
        for kind, path in compat.WORKERS
        if _has_class(sources, path)
    )
    targets = tuple(
        TargetClass(
            path,
            _method(sources, f"{path}.set_dflash_layers_to_capture")[1] is not None,
            compat.capture_machinery_problem(
                path.rpartition(".")[2],
                _segment(sources, f"{path}.forward"),
                _segment(sources, f"{compat.GEMMA4_TEXT_MODEL}.forward"),
                line=version,
            ),
        )
        for path in compat.GEMMA4_TARGETS
        if _has_class(sources, path)
    )
    subclasses = tuple(p for p in compat.GEMMA4_SUBCLASS_TARGETS if _has_class(sources, p))
    return SGLangFeatures(
        version,
        workers,
        targets,
        subclasses,
        triton_backend=_has_class(sources, compat.TRITON_BACKEND),
        candidate_step=_method(sources, f"{compat.DFLASH2_DRAFT}.compute_candidates")[1] is not None,
    )


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


def dp_attention_from_source(version: str) -> str:
    """What the line does with DFLASH and DP attention (``lines.DP_*``), from its argument checks, its v2 worker
    and ``compat.batch_group``'s lookup."""
    sources = wheel_sources(version)
    said = set().union(*(_strings(sources.get(m)) for m in ARG_MODULES))
    if "DFLASH with dp attention requires --enable-dp-lm-head." in said:
        init_graphs = _segment(sources, f"{compat.V2_WORKER}.init_cuda_graphs")
        eager = "Disable DFLASH draft cuda graph because dp attention is enabled (draft runs eager)."
        assert eager in _strings(init_graphs), f"{version}: DP DFLASH on CUDA, but the draft graph is not kept off"
        assert _has_function(sources, "sglang.srt.layers.dp_attention.get_dp_tp_group"), version
        return lines.DP_CUDA
    if "Currently DFLASH speculative decoding does not support dp attention on non-NPU devices." in said:
        return lines.DP_NPU
    assert "Currently DFLASH speculative decoding does not support dp attention." in said, version
    return lines.DP_REFUSED


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


def test_the_table_covers_every_line_from_0_5_12_to_0_5_23_once():
    assert VERSIONS == ["0.5.12", "0.5.12.post1"] + [f"0.5.{n}" for n in range(13, 24)]
    assert lines.LINES[0].version == compat.FIRST_SUPPORTED


@pytest.mark.parametrize("version", VERSIONS)
def test_each_line_gets_what_the_table_says_and_every_hook_finds_its_target(version, monkeypatch):
    """The plan from the wheel's source is the table's row, change for change (the block-attention kernel on, its
    default); every target exists (or, for ADD, is absent) and takes the arguments its hook binds by name."""
    monkeypatch.delenv("SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION", raising=False)
    row = lines.line(version)
    features = features_from_source(version)
    assert [t.capture_problem for t in features.targets] == [None, None]
    changes, _ = hooks.plan(features)
    assert lines.installs_of(changes) == row.installs.changes
    assert {c.target: p for c in changes if (p := source_problem(version, c))} == {}
    assert features.worker == ("v1" if row.installs is lines.V1 else "v2")
    assert features.subclass_targets == (() if version.startswith("0.5.12") else compat.GEMMA4_SUBCLASS_TARGETS)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_lines_dp_attention_new_dflash_modules_and_torch_are_what_the_table_says(version):
    row = lines.line(version)
    sources = wheel_sources(version)
    assert dp_attention_from_source(version) == row.dp_attention
    new = tuple(m for m in (lines.DISAGGREGATION, lines.DFLASH_DP) if f"sglang.srt.{m}" in sources)
    assert new == row.new_paths
    assert torch_pin(version) == row.torch


@pytest.mark.parametrize("version", VERSIONS)
def test_what_compat_reaches_for_at_run_time_is_there(version):
    """The lookups behind ``compat``'s run-time helpers, and how the draft step calls the hooked head."""
    sources = wheel_sources(version)
    runtime = "sglang.srt.runtime_context"
    has = functools.partial(_has_function, sources)
    v1 = _has_class(sources, compat.V1_WORKER)
    worker = compat.V1_WORKER if v1 else compat.V2_WORKER
    problems = []
    if not has("sglang.srt.utils.hf_transformers.config.get_config"):
        problems.append("draft_hf_config: no get_config")
    if not (has(f"{runtime}.get_parallel") or has("sglang.srt.distributed.parallel_state.get_tp_group")):
        problems.append("tp_group: neither get_parallel nor get_tp_group")
    if not has(f"{runtime}.get_spec") and "speculative_num_draft_tokens" not in sources["sglang.srt.server_args"]:
        problems.append("num_draft_tokens: neither get_spec nor ServerArgs.speculative_num_draft_tokens")
    for path in (compat.DFLASH_DRAFT, compat.DFLASH_VERIFY_INPUT, "sglang.srt.plugins.hook_registry.HookRegistry"):
        if not _has_class(sources, path):
            problems.append(f"no class {path}")
    registry = sources["sglang.srt.plugins.hook_registry"]
    for name in ("_apply_target", "_hooks", "_patched", "_current_plugin_source"):
        if name not in registry:
            problems.append(f"HookRegistry has no {name}")
    # target_model_of: v1 keeps `target_worker`, v2 `_target_worker`
    init = _segment(sources, f"{worker}.__init__")
    if ("self.target_worker = target_worker" if v1 else "self._target_worker = target_worker") not in init:
        problems.append(f"{worker}.__init__ keeps the target worker elsewhere")
    # The head hook serves keyword calls only (others go to upstream unchanged): every call site passes keywords.
    tree = ast.parse(sources[compat.module_of(worker)])
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "_greedy_sample_from_vocab_parallel_head"
    ]
    keywords = [sorted(k.arg for k in c.keywords) for c in calls if not c.args]
    if not calls or len(keywords) != len(calls) or any(k != ["hidden_states", "lm_head"] for k in keywords):
        problems.append(f"the head is called as {[ast.unparse(c)[:80] for c in calls]}")
    builder = _segment(sources, f"{compat.V2_WORKER}._maybe_build_draft_sampler")
    if builder is not None:  # max_draft_graph_bs reads the batch sizes where the line's own builder does
        config = "get_exec().graph" if has(f"{runtime}.get_exec") else "self.server_args"
        if f"max({config}.cuda_graph_config.decode.bs)" not in builder:
            problems.append(f"the builder does not size its sampler from {config}.cuda_graph_config")
        if "SGLANG_DFLASH_EAGER_DRAFT_SAMPLER" in builder and "SGLANG_DFLASH_EAGER_DRAFT_SAMPLER" not in sources.get(
            "sglang.srt.environ", ""
        ):
            problems.append("the builder reads an eager-sampler switch that envs lacks")
    if v1:  # the acceptance histogram hook: the result's per-request counts, the request's own update
        forward = _segment(sources, f"{compat.V1_WORKER}.forward_batch_generation")
        req = _classes(sources["sglang.srt.managers.schedule_batch"])["Req"]
        if "num_correct_drafts_per_req_cpu=" not in forward or "update_spec_correct_drafts_histogram" not in req:
            problems.append("v1: no per-request accepted counts or no Req.update_spec_correct_drafts_histogram")
    assert problems == []


@pytest.mark.parametrize("version", VERSIONS)
def test_no_class_in_sglang_overrides_a_method_the_plugin_hooks(version, monkeypatch):
    """A subclass of a hooked class that defines the hooked method itself would run without the plugin's hook
    (HookRegistry patches the class the target names). Every class of the wheel that derives from a hooked class,
    directly or not, is looked at; none overrides a hooked (or added) method on any line."""
    monkeypatch.delenv("SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION", raising=False)
    changes, _ = hooks.plan(features_from_source(version))
    hooked: dict[str, set[str]] = {}
    for change in changes:
        cls, method = change.target.rsplit(".", 2)[-2:]
        hooked.setdefault(cls, set()).add(method)
    sources = wheel_sources(version)
    classes = []  # (module, class, base names, methods) of every class that may derive from a hooked one
    names, seen = set(hooked), set()
    while names - seen:  # classes deriving from any class found so far, until no new one turns up
        seen |= names
        classes = []
        for module, source in sources.items():
            if any(name in source for name in names):
                for node in ast.walk(ast.parse(source)):
                    if isinstance(node, ast.ClassDef):
                        base = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                        methods = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
                        classes.append((module, node.name, base, methods))
                        if base & names:
                            names.add(node.name)
    parents: dict[str, set[str]] = {}
    for _, cls, base, _ in classes:
        parents.setdefault(cls, set()).update(base)

    def roots(cls, path=()):
        """The hooked classes ``cls`` derives from (not itself)."""
        for base in parents.get(cls, ()):
            if base not in path:
                yield from ([base] if base in hooked else [])
                yield from roots(base, path + (cls,))

    derived = {cls for _, cls, _, _ in classes if any(roots(cls))}
    overrides = {
        f"{module}.{cls}.{method} (hooked on {root})"
        for module, cls, _, methods in classes
        for root in set(roots(cls))
        for method in methods & hooked[root]
    }
    assert overrides == set()
    if not version.startswith("0.5.12"):  # the subclasses that do exist are seen
        assert {"Gemma4AssistantForCausalLM", "Gemma4UnifiedForConditionalGeneration"} <= derived


@pytest.mark.parametrize("version", VERSIONS)
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


WORKER_V2 = compat.module_of(compat.V2_WORKER)
HEAD_DEF = "    def _greedy_sample_from_vocab_parallel_head(\n        self,\n        *,\n        hidden_states"
PLANTS = {  # name: (the check that must fail, module, text, its replacement in a copy of 0.5.23's sources)
    "a subclass overriding the head": (
        test_no_class_in_sglang_overrides_a_method_the_plugin_hooks,
        "sglang.srt.speculative.dp_worker",
        "",
        "class DPWorker(DFlashWorkerV2):\n    def _greedy_sample_from_vocab_parallel_head(self):\n        pass\n",
    ),
    "a grandchild overriding forward_extend": (
        test_no_class_in_sglang_overrides_a_method_the_plugin_hooks,
        "sglang.srt.layers.attention.leaf",
        "",
        "class Mid(TritonAttnBackend):\n    pass\n\n\nclass Leaf(Mid):\n    def forward_extend(self):\n        pass\n",
    ),
    "a positional head call": (
        test_what_compat_reaches_for_at_run_time_is_there,
        WORKER_V2,
        "_greedy_sample_from_vocab_parallel_head(\n                    hidden_states=",
        "_greedy_sample_from_vocab_parallel_head(\n                    ",
    ),
    "graph batch sizes from elsewhere": (
        test_what_compat_reaches_for_at_run_time_is_there,
        WORKER_V2,
        "max_bs=max(get_exec().graph.cuda_graph_config.decode.bs)",
        "max_bs=max(self.server_args.cuda_graph_config.decode.bs)",
    ),
    "the draft graph kept on under DP": (
        test_each_lines_dp_attention_new_dflash_modules_and_torch_are_what_the_table_says,
        WORKER_V2,
        "Disable DFLASH draft cuda graph because dp attention ",
        "Keep the DFLASH draft cuda graph although dp attention ",
    ),
    "a renamed builder": (
        test_each_line_gets_what_the_table_says_and_every_hook_finds_its_target,
        WORKER_V2,
        "def _maybe_build_draft_sampler(",
        "def _build_draft_sampler(",
    ),
    "a head argument renamed": (
        test_each_line_gets_what_the_table_says_and_every_hook_finds_its_target,
        WORKER_V2,
        HEAD_DEF,
        HEAD_DEF.replace("hidden_states", "hidden"),
    ),
}


@pytest.mark.parametrize("plant", PLANTS)
def test_the_source_checks_catch_a_planted_fault(plant, monkeypatch):
    """Each check above fails on a copy of 0.5.23's sources with one fault planted."""
    check, module, text, replacement = PLANTS[plant]
    sources = dict(wheel_sources("0.5.23"))
    if text:
        assert text in sources[module]
        sources[module] = sources[module].replace(text, replacement)
    else:
        sources[module] = replacement
    monkeypatch.setattr(sys.modules[__name__], "wheel_sources", lambda version: sources)
    with pytest.raises(AssertionError):
        check(
            "0.5.23", **({"monkeypatch": monkeypatch} if "monkeypatch" in inspect.signature(check).parameters else {})
        )
