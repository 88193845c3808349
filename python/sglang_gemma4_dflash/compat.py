"""The one adapter between this plugin and the SGLang line that is installed.

Everything that differs between SGLang lines is answered here, by probing the installed
package for what it has (modules, classes, methods) rather than by a version table:

- which DFlash worker classes the line ships: v1 ``speculative.dflash_worker.DFlashWorker``
  (0.5.11-0.5.13) and/or v2 ``speculative.dflash_worker_v2.DFlashWorkerV2`` (0.5.14+). Every class
  present is hooked: the line picks one at run time (``SpeculativeAlgorithm.create_worker``);
- whether a hook target exists and takes the arguments the hook binds, and whether a hook is in place;
- which Gemma 4 target classes it registers, and whether each already has
  ``set_dflash_layers_to_capture`` from upstream;
- whether the v2 worker folds the draft head into its CUDA graph (``_maybe_build_draft_sampler``);
- how to reach the tensor-parallel group (and, under DP attention, the ranks that share one batch), the
  largest draft CUDA-graph batch and the eager-sampler switch.

Other modules ask ``probe()`` and never look at SGLang's layout themselves.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
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

TRITON_BACKEND = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend"
DFLASH_DRAFT = "sglang.srt.models.dflash.DFlashDraftModel"
DFLASH_VERIFY_INPUT = "sglang.srt.speculative.dflash_info.DFlashVerifyInput"


@dataclass(frozen=True)
class TargetClass:
    path: str  # dotted path of the class
    upstream_capture: bool  # the class (or a base) defines set_dflash_layers_to_capture upstream


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
    triton_backend: bool = False  # SGLang's triton attention backend (Gemma 4's, for target and draft)

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


def resolve(path: str):
    """Import ``pkg.module.Attr`` and return the attribute (None if the module or attribute is absent)."""
    module, _, attr = path.rpartition(".")
    if not _module_exists(module):
        return None
    return getattr(importlib.import_module(module), attr, None)


def _has_upstream_capture(cls) -> bool:
    # The method this plugin adds carries a marker; a HookRegistry wrapper around upstream's
    # method carries upstream's attributes (functools.wraps), so it still counts as upstream's.
    method = getattr(cls, "set_dflash_layers_to_capture", None)
    return method is not None and not getattr(method, "__sglang_gemma4_dflash__", False)


@functools.lru_cache(maxsize=1)
def probe() -> SGLangFeatures:
    """Look at the installed SGLang once per process."""
    workers = tuple(
        WorkerClass(kind, path, hasattr(cls, "_maybe_build_draft_sampler"))
        for kind, path in WORKERS
        if (cls := resolve(path)) is not None
    )

    targets = []
    for path in GEMMA4_TARGETS:
        cls = resolve(path)
        if cls is not None:
            targets.append(TargetClass(path=path, upstream_capture=_has_upstream_capture(cls)))
    subclasses = tuple(p for p in GEMMA4_SUBCLASS_TARGETS if resolve(p) is not None)

    return SGLangFeatures(
        version=installed_sglang_version(),
        workers=workers,
        targets=tuple(targets),
        subclass_targets=subclasses,
        triton_backend=resolve(TRITON_BACKEND) is not None,
    )


def target_problem(target: str, binds: tuple[str, ...], *, exists: bool = True) -> str | None:
    """Why a hook cannot go on ``target`` (``pkg.module.Class.method``) in this SGLang, or None.

    ``exists``: the method must be there (a hook wraps it) or must be absent (the plugin adds it).
    ``binds``: parameters of the method the hook passes or reads by name.
    """
    cls_path, _, name = target.rpartition(".")
    cls = resolve(cls_path)
    if cls is None:
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
    around it (SGLang's ``_wrap_fn`` keeps the hook in its closure and the original in ``__wrapped__``)."""
    cls_path, _, name = target.rpartition(".")
    fn = getattr(resolve(cls_path), name, None)
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


def tp_group():
    """SGLang's tensor-parallel GroupCoordinator: ``get_parallel().tp_group`` where the line has a
    runtime context (0.5.2x, where ``get_tp_group()`` is deprecated), else ``get_tp_group()``."""
    get_parallel = resolve("sglang.srt.runtime_context.get_parallel")
    if get_parallel is not None:
        return get_parallel().tp_group
    from sglang.srt.distributed import get_tp_group

    return get_tp_group()


def batch_group():
    """The TP ranks that run the same batch. Under DP attention (0.5.2x allows it with DFLASH and
    ``--enable-dp-lm-head``) each DP group runs its own rows, so a collective over the whole TP group
    would pair calls with different row counts; SGLang's ``get_dp_tp_group()`` names the attention-TP
    group there and the TP group otherwise. Lines without it refuse DFLASH with DP attention."""
    get_dp_tp_group = resolve("sglang.srt.layers.dp_attention.get_dp_tp_group")
    return get_dp_tp_group() if get_dp_tp_group is not None else tp_group()


@functools.lru_cache(maxsize=1)
def gemma4_target_classes() -> tuple[type, ...]:
    """The Gemma 4 target classes of the installed SGLang, resolved once (the draft step asks every step)."""
    return tuple(cls for cls in map(resolve, GEMMA4_TARGETS) if cls is not None)


def is_gemma4_target(model) -> bool:
    """True for an instance of any Gemma 4 target class of the installed SGLang."""
    return isinstance(model, gemma4_target_classes())


@functools.lru_cache(maxsize=None)
def _class(path: str):
    return resolve(path)


def runs_dflash(model_runner) -> bool:
    """Whether a model runner belongs to a DFLASH server (``spec_algorithm.is_dflash()``; target or draft)."""
    is_dflash = getattr(getattr(model_runner, "spec_algorithm", None), "is_dflash", None)
    return bool(is_dflash is not None and is_dflash())


def is_dflash_draft(model) -> bool:
    cls = _class(DFLASH_DRAFT)
    return cls is not None and isinstance(model, cls)


def is_dflash_verify_input(spec_info) -> bool:
    """A DFLASH verify's spec info (its verify mask, where a line builds one, is causal over the block)."""
    cls = _class(DFLASH_VERIFY_INPUT)
    return cls is not None and type(spec_info) is cls


def target_model_of(worker):
    """The target model a DFlash worker drafts for (v1 keeps `target_worker`, v2 `_target_worker`)."""
    target_worker = getattr(worker, "_target_worker", None) or getattr(worker, "target_worker")
    return target_worker.model_runner.model


def draft_model_runner_of(worker):
    return worker.draft_model_runner


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
