"""Run-time lookups while serving: the draft's HF config, the draft-token count, the tensor-parallel group and the
ranks that share one batch, the largest draft CUDA-graph batch, the eager-sampler switch, and class checks."""

from __future__ import annotations

import functools
import os

from sglang_gemma4_dflash.compat.symbols import (
    DFLASH_DRAFT,
    DFLASH_VERIFY_INPUT,
    GEMMA4_EMBEDDING,
    GEMMA4_TARGETS,
    loaded,
    resolve,
)


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
