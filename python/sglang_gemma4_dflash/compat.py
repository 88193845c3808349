"""The one adapter between this plugin and the SGLang line that is installed.

Everything that differs between SGLang lines is answered here, by probing the installed
package for what it has (modules, classes, methods, the source of two methods) rather than by a
version table:

- which DFlash worker classes the line ships: v1 ``speculative.dflash_worker.DFlashWorker``
  (0.5.12-0.5.13) and/or v2 ``speculative.dflash_worker_v2.DFlashWorkerV2`` (0.5.14+). Every class
  present is hooked: the line picks one at run time (``SpeculativeAlgorithm.create_worker``);
- which Gemma 4 target classes it registers, whether each already has ``set_dflash_layers_to_capture``
  from upstream, and whether its forward can capture hidden states at all (0.5.11 cannot);
- whether a hook target exists and takes the arguments the hook binds, and whether a hook is in place;
- whether the v2 worker folds the draft head into its CUDA graph (``_maybe_build_draft_sampler``), and
  whether the line has the DFlash2 draft's candidate step (``DFlash2DraftModel.compute_candidates``, 0.5.19+);
- SGLang's HookRegistry, the draft's HF config, the tensor-parallel group (and, under DP attention, the
  ranks that share one batch), the largest draft CUDA-graph batch and the eager-sampler switch.

Importing an SGLang module here never raises: a failure is recorded (``import_errors()``) and the
module counts as absent, so only the pieces that need it are left out. ``probe()`` imports every
module that holds a hook target (for ``doctor``); ``probe_loaded(modules)`` looks only at modules
SGLang has already imported (the plugin installs lazily, ``plugin.py``). Other modules never import
SGLang themselves.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

V1_WORKER = "sglang.srt.speculative.dflash_worker.DFlashWorker"
V2_WORKER = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2"
WORKERS = (("v2", V2_WORKER), ("v1", V1_WORKER))

# Gemma 4 classes that can be a DFLASH target (they carry the text stack and a tied head).
# Subclasses (e.g. gemma4_unified.Gemma4UnifiedForConditionalGeneration) inherit the method
# from these and are listed separately only for the report.
GEMMA4_TARGETS = (
    "sglang.srt.models.gemma4_causal.Gemma4ForCausalLM",
    "sglang.srt.models.gemma4_mm.Gemma4ForConditionalGeneration",
)
GEMMA4_SUBCLASS_TARGETS = ("sglang.srt.models.gemma4_unified.Gemma4UnifiedForConditionalGeneration",)
# The text stack both targets run; its forward collects the hidden states of ``layers_to_capture``.
GEMMA4_TEXT_MODEL = "sglang.srt.models.gemma4_causal.Gemma4TextModel"
# The first SGLang line whose Gemma 4 models can capture hidden states (0.5.11 cannot), as pyproject.toml says.
FIRST_SUPPORTED = "0.5.12"
TRITON_BACKEND = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend"
DFLASH_DRAFT = "sglang.srt.models.dflash.DFlashDraftModel"
# The DFlash2 draft (0.5.19+): its candidate step reads the target head's vocab metadata, which Gemma 4's tied
# head lacks; and that head's class.
DFLASH2_DRAFT = "sglang.srt.models.dflash.DFlash2DraftModel"
GEMMA4_EMBEDDING = "sglang.srt.models.gemma4_causal.Gemma4TextScaledWordEmbedding"
DFLASH_VERIFY_INPUT = "sglang.srt.speculative.dflash_info.DFlashVerifyInput"


def module_of(path: str) -> str:
    return path.rpartition(".")[0]


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


def installed_sglang_version() -> str:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return "not installed"


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_import_errors: dict[str, str] = {}


def import_module(module: str):
    """``module``, imported if needed; None when it is absent or importing it raised (then recorded)."""
    if sys.modules.get(module) is not None:
        return sys.modules[module]
    if module in _import_errors or not _module_exists(module):
        return None
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken SGLang module disables only the pieces that need it
        _import_errors[module] = f"{type(exc).__name__}: {exc}"
        return None


def import_errors() -> dict[str, str]:
    """``{module: error}`` of the SGLang modules whose import raised in this process."""
    return dict(_import_errors)


def resolve(path: str):
    """Import ``pkg.module.Attr`` and return the attribute (None if absent or the import failed)."""
    module = import_module(module_of(path))
    return None if module is None else getattr(module, path.rpartition(".")[2], None)


def loaded(path: str):
    """``pkg.module.Attr`` if its module is already imported, else None. Never imports."""
    module = sys.modules.get(module_of(path))
    return None if module is None else getattr(module, path.rpartition(".")[2], None)


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
    line = line or installed_sglang_version()
    fix = f"SGLang {line} cannot capture Gemma 4 hidden states for DFLASH; use SGLang >= {FIRST_SUPPORTED}"
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
    errors = tuple((m, e) for m, e in _import_errors.items() if m in modules)
    triton = module_of(TRITON_BACKEND) in modules and loaded(TRITON_BACKEND) is not None
    candidates = module_of(DFLASH2_DRAFT) in modules and hasattr(loaded(DFLASH2_DRAFT), "compute_candidates")
    return SGLangFeatures(
        installed_sglang_version(), workers, targets, subclasses, errors, complete, triton, candidates
    )


@functools.lru_cache(maxsize=1)
def probe() -> SGLangFeatures:
    """Import every hooked module (and the listed subclasses) and look at the installed SGLang once per process."""
    for module in hooked_modules() + tuple(module_of(p) for p in GEMMA4_SUBCLASS_TARGETS):
        import_module(module)
    return _features(hooked_modules(), complete=True)


def probe_loaded(modules: tuple[str, ...]) -> SGLangFeatures:
    """What the given modules offer, looking only at classes SGLang has imported (nothing is imported here)."""
    return _features(tuple(m for m in modules if sys.modules.get(m) is not None), complete=False)


def v2_line() -> bool:
    """Whether this SGLang ships the v2 DFlash worker (0.5.14+), where stock SGLang serves Gemma 4 DFLASH."""
    return _module_exists(module_of(V2_WORKER))


def target_problem(target: str, binds: tuple[str, ...], *, exists: bool = True) -> str | None:
    """Why a hook cannot go on ``target`` (``pkg.module.Class.method``) in this SGLang, or None.

    ``exists``: the method must be there (a hook wraps it) or must be absent (the plugin adds it).
    ``binds``: parameters of the method the hook passes or reads by name.
    """
    cls_path, _, name = target.rpartition(".")
    cls = resolve(cls_path)
    if cls is None:
        error = _import_errors.get(module_of(cls_path))
        if error:
            return f"importing {module_of(cls_path)} failed: {error}"
        return f"{cls_path} is not in SGLang {installed_sglang_version()}"
    method = getattr(cls, name, None)
    if not exists:
        ours = getattr(method, "__sglang_gemma4_dflash__", False)
        return None if method is None or ours else f"{target} already exists"
    if not callable(method):
        return f"{target} is not in SGLang {installed_sglang_version()}"
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return f"the signature of {target} cannot be read"
    for arg in binds:
        if arg not in params or params[arg].kind is inspect.Parameter.POSITIONAL_ONLY:
            return f"{target}{inspect.signature(method)} takes no argument {arg!r} by name"
    return None


def hook_in_place(target: str, impl) -> bool:
    """Whether ``impl`` is what ``target`` runs: the method itself (added), or a HookRegistry wrapper
    around it (SGLang's ``_wrap_fn`` keeps the hook in its closure and the original in ``__wrapped__``).
    Looks only at imported modules."""
    cls_path, _, name = target.rpartition(".")
    fn = getattr(loaded(cls_path), name, None)
    while fn is not None:
        if fn is impl or any(_cell_holds(cell, impl) for cell in getattr(fn, "__closure__", None) or ()):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _cell_holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


# --------------------------------------------------------------------------- SGLang's HookRegistry


def hook_registry():
    """SGLang's ``HookRegistry`` (``sglang.srt.plugins.hook_registry``)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    return HookRegistry


def current_hook_source():
    """The plugin source ``load_plugins()`` sets while it runs a plugin (None outside it)."""
    from sglang.srt.plugins import hook_registry as module

    var = getattr(module, "_current_plugin_source", None)
    return None if var is None else var.get()


def register_around(target: str, impl, source=None) -> None:
    """Register ``impl`` as an AROUND hook on ``target``; ``source`` names the plugin in SGLang's log."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, impl, HookType.AROUND, source=source)


def apply_hooks_now(targets, ours) -> None:
    """Apply the hooks registered on ``targets`` now: SGLang imported their module after ``load_plugins()``
    applied the hooks. A target another plugin also hooks is left to HookRegistry's own pass (the pass whose
    import brought the module in), so no hook is applied twice. ``ours``: this plugin's hook functions."""
    registry = hook_registry()
    apply_target = getattr(registry, "_apply_target", None)
    if apply_target is None:  # a HookRegistry without it: its public pass (which also retries failed targets)
        registry.apply_hooks()
        return
    for target in targets:
        hooks = registry._hooks.get(target, [])
        if target in registry._patched or any(hook not in ours for _, hook, *_ in hooks):
            continue
        try:
            apply_target(target, hooks)
            registry._patched.add(target)
        except Exception:  # logged as HookRegistry.apply_hooks logs it; the start-up check names it
            logging.getLogger(__name__).exception("Failed to apply hooks to %s", target)


# --------------------------------------------------------------------------- run-time lookups


def draft_hf_config(server_args):
    """The draft model's HF config, read as SGLang reads it (``--speculative-draft-model-path``)."""
    from sglang.srt.utils.hf_transformers.config import get_config

    return get_config(
        server_args.speculative_draft_model_path,
        trust_remote_code=server_args.trust_remote_code,
        revision=getattr(server_args, "speculative_draft_model_revision", None),
    )


def num_draft_tokens(server_args) -> int | None:
    """``--speculative-num-draft-tokens`` as the worker reads it: the runtime context's spec config on 0.5.2x,
    the server args before."""
    get_spec = resolve("sglang.srt.runtime_context.get_spec")
    value = getattr(get_spec(), "speculative_num_draft_tokens", None) if get_spec is not None else None
    if value is None:
        value = getattr(server_args, "speculative_num_draft_tokens", None)
    return None if value is None else int(value)


def tp_group():
    """SGLang's tensor-parallel GroupCoordinator: ``get_parallel().tp_group`` where the line has a
    runtime context (0.5.2x, where ``get_tp_group()`` is deprecated), else ``get_tp_group()``."""
    get_parallel = resolve("sglang.srt.runtime_context.get_parallel")
    if get_parallel is not None:
        return get_parallel().tp_group
    from sglang.srt.distributed import get_tp_group

    return get_tp_group()


def batch_group():
    """The TP ranks that run the same batch. Under DP attention (0.5.23 allows it with DFLASH and
    ``--enable-dp-lm-head``) each DP group runs its own rows, so a collective over the whole TP group
    would pair calls with different row counts; SGLang's ``get_dp_tp_group()`` names the attention-TP
    group there and the TP group otherwise. Lines without it (0.5.21 and older) refuse DFLASH with DP
    attention on CUDA."""
    get_dp_tp_group = resolve("sglang.srt.layers.dp_attention.get_dp_tp_group")
    return get_dp_tp_group() if get_dp_tp_group is not None else tp_group()


@functools.lru_cache(maxsize=1)
def gemma4_target_classes() -> tuple[type, ...]:
    """The Gemma 4 target classes of the installed SGLang, resolved once (the draft step asks every step)."""
    return tuple(cls for cls in map(resolve, GEMMA4_TARGETS) if cls is not None)


def is_gemma4_target(model) -> bool:
    """True for an instance of any Gemma 4 target class of the installed SGLang."""
    return isinstance(model, gemma4_target_classes())


def runs_dflash(model_runner) -> bool:
    """Whether a model runner belongs to a DFLASH server (``spec_algorithm.is_dflash()``; target or draft)."""
    is_dflash = getattr(getattr(model_runner, "spec_algorithm", None), "is_dflash", None)
    return bool(is_dflash is not None and is_dflash())


def is_dflash_draft(model) -> bool:
    cls = loaded(DFLASH_DRAFT)  # a DFlash draft model's module is imported
    return cls is not None and isinstance(model, cls)


def is_gemma4_tied_head(lm_head) -> bool:
    """Gemma 4's tied LM head (its ``embed_tokens``): a full-vocabulary embedding with no vocab metadata."""
    cls = loaded(GEMMA4_EMBEDDING)
    return cls is not None and isinstance(lm_head, cls)


def is_dflash_verify_input(spec_info) -> bool:
    """A DFLASH verify's spec info (its verify mask, where a line builds one, is causal over the block)."""
    cls = loaded(DFLASH_VERIFY_INPUT)
    return cls is not None and type(spec_info) is cls


def target_model_of(worker):
    """The target model a DFlash worker drafts for (v1 keeps `target_worker`, v2 `_target_worker`)."""
    target_worker = getattr(worker, "_target_worker", None) or getattr(worker, "target_worker")
    return target_worker.model_runner.model


def max_draft_graph_bs(worker) -> int:
    """The largest decode batch the v2 draft CUDA graphs are captured for: 0.5.2x publishes it in the
    runtime context, 0.5.14-0.5.16 keep it on the worker's server args."""
    get_exec = resolve("sglang.srt.runtime_context.get_exec")
    config = get_exec().graph.cuda_graph_config if get_exec is not None else worker.server_args.cuda_graph_config
    return max(int(bs) for bs in config.decode.bs)


def eager_draft_sampler_requested() -> bool:
    """SGLang's own switch (``SGLANG_DFLASH_EAGER_DRAFT_SAMPLER``) that keeps the v2 draft head out of the graph."""
    envs = resolve("sglang.srt.environ.envs")
    flag = getattr(envs, "SGLANG_DFLASH_EAGER_DRAFT_SAMPLER", None)
    if flag is not None:
        return bool(flag.get())
    return os.environ.get("SGLANG_DFLASH_EAGER_DRAFT_SAMPLER", "").strip().lower() in ("1", "true", "yes", "on")
