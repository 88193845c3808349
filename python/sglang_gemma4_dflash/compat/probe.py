"""What the installed SGLang line offers the plugin, found by looking rather than by a version table.

- which DFlash worker classes the line ships: v1 ``speculative.dflash_worker.DFlashWorker``
  (0.5.12-0.5.13) and/or v2 ``speculative.dflash_worker_v2.DFlashWorkerV2`` (0.5.14+). Every class
  present is hooked: the line picks one at run time (``SpeculativeAlgorithm.create_worker``);
- which Gemma 4 target classes it registers, whether each already has ``set_dflash_layers_to_capture``
  from upstream, and whether its forward can capture hidden states at all (0.5.11 cannot);
- whether the v2 worker folds the draft head into its CUDA graph (``_maybe_build_draft_sampler``), and
  whether the line has the DFlash2 draft's candidate step (``DFlash2DraftModel.compute_candidates``, 0.5.19+);
- whether a hook target exists and takes the arguments the hook binds (``target_problem``).

``features()`` imports every module that holds a hook target (for ``doctor``); ``loaded_features(modules)`` looks
only at modules SGLang has already imported (the plugin installs lazily, ``plugin.py``).
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from dataclasses import dataclass

from sglang_gemma4_dflash.compat import symbols
from sglang_gemma4_dflash.compat.symbols import (
    DFLASH2_DRAFT,
    GEMMA4_SUBCLASS_TARGETS,
    GEMMA4_TARGETS,
    GEMMA4_TEXT_MODEL,
    TRITON_BACKEND,
    WORKERS,
    loaded,
    module_of,
)


def hooked_modules() -> tuple[str, ...]:
    """The SGLang modules that hold hook targets: the Gemma 4 models, the DFlash workers, the triton backend,
    the DFlash draft models."""
    paths = GEMMA4_TARGETS + tuple(path for _, path in WORKERS) + (TRITON_BACKEND, DFLASH2_DRAFT)
    return tuple(dict.fromkeys(module_of(p) for p in paths))


@dataclass(frozen=True)
class TargetClass:
    path: str  # dotted path of the class
    upstream_capture: bool  # the class (or a base) defines set_dflash_layers_to_capture upstream
    capture_problem: str | None = None  # why this line's model cannot capture hidden states, or None


@dataclass(frozen=True)
class WorkerClass:
    kind: str  # "v1" or "v2"
    path: str  # dotted path of the class
    graph_sampler: bool  # builds a CUDA-graph draft sampler (``_maybe_build_draft_sampler``, v2)


@dataclass(frozen=True)
class SGLangFeatures:
    version: str
    workers: tuple[WorkerClass, ...]  # every DFlash worker class this SGLang ships (none: no DFlash)
    targets: tuple[TargetClass, ...]  # Gemma 4 target classes present in this SGLang
    subclass_targets: tuple[str, ...]  # present subclasses that inherit from a target
    import_errors: tuple[tuple[str, str], ...] = ()  # (module, error) of hooked modules that failed to import
    complete: bool = True  # every hooked module was looked at (False: only those SGLang had imported)
    triton_backend: bool = False  # SGLang's triton attention backend (Gemma 4's, for target and draft)
    candidate_step: bool = False  # DFlash2DraftModel.compute_candidates (0.5.19+)

    @property
    def worker(self) -> str | None:
        """``"v1"``, ``"v2"``, ``"v2+v1"`` or None: the DFlash worker kinds present."""
        return "+".join(w.kind for w in self.workers) or None


def _has_upstream_capture(cls) -> bool:
    # The methods this plugin adds carry a marker; a HookRegistry wrapper around upstream's
    # method carries upstream's attributes (functools.wraps), so it still counts as upstream's.
    method = getattr(cls, "set_dflash_layers_to_capture", None)
    return method is not None and not getattr(method, "__sglang_gemma4_dflash__", False)


def reads_name(function_source: str, name: str) -> bool:
    """Whether the Python source of a function reads ``name`` (as ``x.name`` or a bare ``name``)."""
    tree = ast.parse(textwrap.dedent(function_source))
    return any(
        (isinstance(node, ast.Attribute) and node.attr == name) or (isinstance(node, ast.Name) and node.id == name)
        for node in ast.walk(tree)
    )


def capture_machinery_problem(
    target: str, target_forward: str | None, text_forward: str | None, line: str | None = None
) -> str | None:
    """Why a Gemma 4 target cannot hand DFLASH the hidden states of chosen layers, from the source of its
    ``forward`` and of ``Gemma4TextModel.forward`` (None where the source cannot be read: not checked).
    SGLang 0.5.11 has neither piece; 0.5.12 has both. ``line``: the SGLang version named (default: installed)."""
    line = line or symbols.installed_sglang_version()
    fix = f"SGLang {line} cannot capture Gemma 4 hidden states for DFLASH; use SGLang >= {symbols.FIRST_SUPPORTED}"
    if text_forward is not None and not reads_name(text_forward, "layers_to_capture"):
        return f"Gemma4TextModel.forward never reads layers_to_capture: {fix}"
    if target_forward is not None and not reads_name(target_forward, "capture_aux_hidden_states"):
        return f"{target}.forward never reads capture_aux_hidden_states: {fix}"
    return None


def _source(function) -> str | None:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return None


def capture_problem(cls) -> str | None:
    """``capture_machinery_problem`` for a loaded Gemma 4 target class."""
    text_model = loaded(GEMMA4_TEXT_MODEL)
    return capture_machinery_problem(
        cls.__name__,
        _source(getattr(cls, "forward", None)),
        None if text_model is None else _source(getattr(text_model, "forward", None)),
    )


def _features(modules: tuple[str, ...], *, complete: bool) -> SGLangFeatures:
    """What the classes of ``modules`` (already imported) offer."""
    workers = tuple(
        WorkerClass(kind, path, hasattr(cls, "_maybe_build_draft_sampler"))
        for kind, path in WORKERS
        if module_of(path) in modules and (cls := loaded(path)) is not None
    )
    targets = tuple(
        TargetClass(path, _has_upstream_capture(cls), capture_problem(cls))
        for path in GEMMA4_TARGETS
        if module_of(path) in modules and (cls := loaded(path)) is not None
    )
    subclasses = tuple(p for p in GEMMA4_SUBCLASS_TARGETS if loaded(p) is not None)
    errors = tuple((m, e) for m, e in symbols.import_errors().items() if m in modules)
    triton = module_of(TRITON_BACKEND) in modules and loaded(TRITON_BACKEND) is not None
    candidates = module_of(DFLASH2_DRAFT) in modules and hasattr(loaded(DFLASH2_DRAFT), "compute_candidates")
    return SGLangFeatures(
        symbols.installed_sglang_version(), workers, targets, subclasses, errors, complete, triton, candidates
    )


@functools.lru_cache(maxsize=1)
def features() -> SGLangFeatures:
    """Import every hooked module (and the listed subclasses) and look at the installed SGLang once per process."""
    for module in hooked_modules() + tuple(module_of(p) for p in GEMMA4_SUBCLASS_TARGETS):
        symbols.import_module(module)
    return _features(hooked_modules(), complete=True)


def loaded_features(modules: tuple[str, ...]) -> SGLangFeatures:
    """What the given modules offer, looking only at classes SGLang has imported (nothing is imported here)."""
    return _features(tuple(m for m in modules if sys.modules.get(m) is not None), complete=False)


def v2_line() -> bool:
    """Whether this SGLang ships the v2 DFlash worker (0.5.14+), where stock SGLang serves Gemma 4 DFLASH."""
    return symbols.module_exists(module_of(symbols.V2_WORKER))


def target_problem(target: str, binds: tuple[str, ...], *, exists: bool = True) -> str | None:
    """Why a hook cannot go on ``target`` (``pkg.module.Class.method``) in this SGLang, or None.

    ``exists``: the method must be there (a hook wraps it) or must be absent (the plugin adds it).
    ``binds``: parameters of the method the hook passes or reads by name.
    """
    cls_path, _, name = target.rpartition(".")
    cls = symbols.resolve(cls_path)
    if cls is None:
        error = symbols.import_errors().get(module_of(cls_path))
        if error:
            return f"importing {module_of(cls_path)} failed: {error}"
        return f"{cls_path} is not in SGLang {symbols.installed_sglang_version()}"
    method = getattr(cls, name, None)
    if not exists:
        ours = getattr(method, "__sglang_gemma4_dflash__", False)
        return None if method is None or ours else f"{target} already exists"
    if not callable(method):
        return f"{target} is not in SGLang {symbols.installed_sglang_version()}"
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return f"the signature of {target} cannot be read"
    for arg in binds:
        if arg not in params or params[arg].kind is inspect.Parameter.POSITIONAL_ONLY:
            return f"{target}{inspect.signature(method)} takes no argument {arg!r} by name"
    return None
