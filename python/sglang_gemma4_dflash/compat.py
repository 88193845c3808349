"""The one adapter between this plugin and the SGLang line that is installed.

Everything that differs between SGLang lines is answered here, by probing the installed
package for what it has (modules, classes, methods) rather than by a version table:

- which DFlash worker the line runs: v1 ``speculative.dflash_worker.DFlashWorker``
  (0.5.11-0.5.13) or v2 ``speculative.dflash_worker_v2.DFlashWorkerV2`` (0.5.14+);
- which Gemma 4 target classes it registers, and whether each already has
  ``set_dflash_layers_to_capture`` from upstream;
- whether the v2 worker folds the draft head into its CUDA graph (``_maybe_build_draft_sampler``);
- how to reach the tensor-parallel group, the largest draft CUDA-graph batch and the eager-sampler switch.

Other modules ask ``probe()`` and never look at SGLang's layout themselves.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

V1_WORKER = "sglang.srt.speculative.dflash_worker.DFlashWorker"
V2_WORKER = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2"

# Gemma 4 classes that can be a DFLASH target (they carry the text stack and a tied head).
# Subclasses (e.g. gemma4_unified.Gemma4UnifiedForConditionalGeneration) inherit the method
# from these and are listed separately only for the report.
GEMMA4_TARGETS = (
    "sglang.srt.models.gemma4_causal.Gemma4ForCausalLM",
    "sglang.srt.models.gemma4_mm.Gemma4ForConditionalGeneration",
)
GEMMA4_SUBCLASS_TARGETS = (
    "sglang.srt.models.gemma4_unified.Gemma4UnifiedForConditionalGeneration",
)


@dataclass(frozen=True)
class TargetClass:
    path: str  # dotted path of the class
    upstream_capture: bool  # the class (or a base) defines set_dflash_layers_to_capture upstream


@dataclass(frozen=True)
class SGLangFeatures:
    version: str
    worker: str | None  # "v1", "v2" or None (no DFlash in this SGLang)
    worker_path: str | None
    targets: tuple[TargetClass, ...]  # Gemma 4 target classes present in this SGLang
    subclass_targets: tuple[str, ...]  # present subclasses that inherit from a target
    v2_graph_sampler: bool  # v2 worker builds a CUDA-graph draft sampler


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
    worker, worker_path = None, None
    for kind, path in (("v2", V2_WORKER), ("v1", V1_WORKER)):
        if resolve(path) is not None:
            worker, worker_path = kind, path
            break

    targets = []
    for path in GEMMA4_TARGETS:
        cls = resolve(path)
        if cls is not None:
            targets.append(TargetClass(path=path, upstream_capture=_has_upstream_capture(cls)))
    subclasses = tuple(p for p in GEMMA4_SUBCLASS_TARGETS if resolve(p) is not None)

    v2_graph_sampler = worker == "v2" and hasattr(resolve(V2_WORKER), "_maybe_build_draft_sampler")
    return SGLangFeatures(
        version=installed_sglang_version(),
        worker=worker,
        worker_path=worker_path,
        targets=tuple(targets),
        subclass_targets=subclasses,
        v2_graph_sampler=v2_graph_sampler,
    )


def tp_group():
    """SGLang's tensor-parallel GroupCoordinator: ``get_parallel().tp_group`` where the line has a
    runtime context (0.5.2x, where ``get_tp_group()`` is deprecated), else ``get_tp_group()``."""
    get_parallel = resolve("sglang.srt.runtime_context.get_parallel")
    if get_parallel is not None:
        return get_parallel().tp_group
    from sglang.srt.distributed import get_tp_group

    return get_tp_group()


@functools.lru_cache(maxsize=1)
def gemma4_target_classes() -> tuple[type, ...]:
    """The Gemma 4 target classes of the installed SGLang, resolved once (the draft step asks every step)."""
    return tuple(cls for cls in map(resolve, GEMMA4_TARGETS) if cls is not None)


def is_gemma4_target(model) -> bool:
    """True for an instance of any Gemma 4 target class of the installed SGLang."""
    return isinstance(model, gemma4_target_classes())


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
